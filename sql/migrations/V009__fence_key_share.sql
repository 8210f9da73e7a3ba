-- The fence takes the lease row FOR KEY SHARE instead of FOR SHARE (issue #13). FOR SHARE
-- conflicts with the holder's own renewal (an UPDATE of the row): each renewal waited for every
-- write transaction in flight and every new write queued behind it — a stall of all stages
-- once per renew-interval. FOR KEY SHARE does not conflict with that UPDATE, and still
-- conflicts with the FOR UPDATE a takeover takes first, so a takeover still waits for the old
-- holder's transactions in flight and none of them commits after it (PRE-5).
CREATE OR REPLACE FUNCTION msgx_fence(mine BIGINT) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE current BIGINT;
BEGIN
    SELECT epoch INTO current FROM msgx_lease WHERE id = 1 FOR KEY SHARE;
    IF current IS DISTINCT FROM mine THEN
        RAISE EXCEPTION 'fenced: the lease epoch is %, this instance holds %; a newer instance is active', current, mine
            USING ERRCODE = 'MX001';
    END IF;
    RETURN current;
END $$;
