-- The seasonal plan (SCHS DNLD/RESP): kept in own PostgreSQL, one row per flight record of a
-- season, the season replaced whole by each DNLD/RESP that names it. Nothing of it goes to
-- Redis: the live daily plan comes from SCHD (issue #15).
CREATE TABLE season_plan (
    season       VARCHAR(64)    NOT NULL,   -- SNAM ('-' when the message names none)
    flight_key   VARCHAR(200)   NOT NULL,   -- FLID, or FLNO/MVIN/STDT for a seasonal record
    airport      VARCHAR(10),
    season_start VARCHAR(20),
    season_end   VARCHAR(20),
    record_json  TEXT           NOT NULL,
    msg_id       BIGINT         NOT NULL,   -- the message that delivered the season
    updated_at   TIMESTAMPTZ(6) NOT NULL,
    PRIMARY KEY (season, flight_key)
);
