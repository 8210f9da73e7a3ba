//! The registry of every configuration key: name, default, kind, environment override and a
//! one-line description. `etc/msgx.toml` and the key table of `docs/reference.md` are checked
//! against this list by tests, so the three cannot drift apart.

use std::time::Duration;

/// What a key accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A duration string such as `"50ms"`, `"1s"`, `"10m"`, `"2h"`, `"30d"`, at least `min`.
    Duration {
        min: Duration,
    },
    /// An integer number of milliseconds, at least `min`.
    Millis {
        min: u64,
    },
    /// A non-empty list of integer milliseconds, each at least `min`.
    MillisList {
        min: u64,
    },
    /// An integer in `[min, max]`.
    Int {
        min: i64,
        max: i64,
    },
    Bool,
    /// A non-empty string.
    Str,
    /// A list of non-empty strings.
    StrList,
    /// A list of `host:port` addresses (possibly empty).
    AddrList,
    /// A string that may be empty.
    Text,
    /// A SQL identifier of someone else's schema: letters, digits, `_`, `$`.
    Ident,
    /// An `ip:port` socket address.
    SocketAddr,
    /// A number in `[0, 1]`.
    Ratio,
}

#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    pub key: &'static str,
    /// The default, written as a TOML value.
    pub default: &'static str,
    pub kind: Kind,
    /// The environment variable that overrides the file, if any.
    pub env: Option<&'static str>,
    pub doc: &'static str,
}

const fn k(key: &'static str, default: &'static str, kind: Kind, doc: &'static str) -> KeySpec {
    KeySpec { key, default, kind, env: None, doc }
}

const fn e(key: &'static str, default: &'static str, env: &'static str, doc: &'static str) -> KeySpec {
    KeySpec { key, default, kind: Kind::Str, env: Some(env), doc }
}

const MS: Duration = Duration::from_millis(1);
const NONE: Duration = Duration::ZERO;

/// Every key msgx knows, in the order `etc/msgx.toml` lists them.
pub const KEYS: &[KeySpec] = &[
    // --- msgx.pipeline: the pump, the poller, the dispatcher, backfill ---
    k(
        "msgx.log-format",
        "\"text\"",
        Kind::Str,
        "\"text\" (one line: time, level, target, message) or \"json\" (one object a line with the same keys, for log shippers; docs/monitoring.md)",
    ),
    KeySpec {
        key: "msgx.log-file",
        default: "\"\"",
        kind: Kind::Text,
        env: Some("MSGX_LOG_FILE"),
        doc: "the log file msgx writes itself and reopens on SIGHUP (log rotation); empty: standard error",
    },
    k(
        "msgx.pipeline.poll-interval",
        "\"1s\"",
        Kind::Duration { min: Duration::from_millis(50) },
        "idle interval between mailbox polls; a full batch polls again at once (lower bound 50ms)",
    ),
    k("msgx.pipeline.poll-batch", "10000", Kind::Int { min: 1, max: 50_000 }, "mailbox rows read per poll"),
    k(
        "msgx.pipeline.rescan-interval",
        "\"1m\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "pause between passes of the rescan for unmarked mailbox rows without PROC_STATE",
    ),
    k(
        "msgx.pipeline.rescan-chunk",
        "10000",
        Kind::Int { min: 100, max: 1_000_000 },
        "mailbox IDs the compensating rescan reads per step, by primary-key range",
    ),
    k(
        "msgx.pipeline.rescan-pause",
        "\"1s\"",
        Kind::Duration { min: NONE },
        "pause between two rescan steps (a failed step backs off from it, doubling up to rescan-interval)",
    ),
    k(
        "msgx.pipeline.max-attempts",
        "5",
        Kind::Int { min: 1, max: 1_000 },
        "attempts before a message or an event becomes DEAD(EXHAUSTED)",
    ),
    k(
        "msgx.pipeline.backoff-ms",
        "[1000, 2000, 4000, 8000, 16000]",
        Kind::MillisList { min: 1 },
        "processing and delivery backoff per attempt; the last entry repeats",
    ),
    k(
        "msgx.pipeline.backoff-cap-ms",
        "60000",
        Kind::Millis { min: 1 },
        "upper bound of any single processing or delivery backoff",
    ),
    k(
        "msgx.pipeline.head-deadline",
        "\"10m\"",
        Kind::Duration { min: MS },
        "a FAILED head stuck longer than this (since it first failed) becomes DEAD(EXHAUSTED)",
    ),
    k(
        "msgx.pipeline.retry-unsupported",
        "false",
        Kind::Bool,
        "SPEC §3a: a message of a kind no handler of this release knows walks the retry ladder (holding the FIFO head meanwhile) instead of going DEAD(UNSUPPORTED) at its first attempt",
    ),
    k(
        "msgx.pipeline.max-commit-delay",
        "\"5m\"",
        Kind::Duration { min: NONE },
        "PRE-2: how long a mailbox ID may stay invisible before its commit",
    ),
    k(
        "msgx.pipeline.commit-grace",
        "\"2s\"",
        Kind::Duration { min: NONE },
        "rows above a fresh gap wait this long for the lower ID to commit, so commit races keep ID order (SPEC 4.9)",
    ),
    k(
        "msgx.pipeline.process-batch",
        "1000",
        Kind::Int { min: 1, max: 5_000 },
        "ready messages the pump may take in one round, in MSG_ID order",
    ),
    k(
        "msgx.pipeline.process-batch-bytes",
        "16777216",
        Kind::Int { min: 65_536, max: 1_073_741_824 },
        "message text one pump round may hold, in bytes; the round ends before the message that would pass it (one message always fits)",
    ),
    k(
        "msgx.pipeline.dispatch-batch",
        "5000",
        Kind::Int { min: 1, max: 10_000 },
        "events produced per delivery round (still one request in flight)",
    ),
    k(
        "msgx.pipeline.backfill-batch",
        "2000",
        Kind::Int { min: 1, max: 10_000 },
        "mailbox rows marked per backfill statement",
    ),
    k(
        "msgx.pipeline.backfill-backoff-ms",
        "30000",
        Kind::Millis { min: 1 },
        "first retry delay of a failed mailbox mark (G-BACKFILL-BACKOFF)",
    ),
    k(
        "msgx.pipeline.backfill-backoff-cap-ms",
        "900000",
        Kind::Millis { min: 1 },
        "upper bound of the doubling mailbox-mark retry delay (G-BACKFILL-BACKOFF)",
    ),
    k(
        "msgx.pipeline.overdue-backfill",
        "\"30d\"",
        Kind::Duration { min: MS },
        "R: a terminal row still unmarked after this is abandoned (C-16)",
    ),
    k(
        "msgx.pipeline.event-retention",
        "\"7d\"",
        Kind::Duration { min: MS },
        "SENT events older than this are deleted (G-EVENT-RETENTION)",
    ),
    k(
        "msgx.pipeline.jobs-interval",
        "\"1m\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "pause between rounds of the jobs thread (event retention, archive, the requests' clock: a request starts waiting and expires at most this long after its time)",
    ),
    k(
        "msgx.pipeline.reconnect-backoff-ms",
        "200",
        Kind::Millis { min: 1 },
        "first pause of a stage whose store is unavailable before it tries again (SPEC 4.9); doubles",
    ),
    k(
        "msgx.pipeline.reconnect-backoff-cap-ms",
        "2000",
        Kind::Millis { min: 1 },
        "longest pause between a stalled stage's attempts to reach its store",
    ),
    k(
        "msgx.pipeline.outage-alert-after",
        "\"1m\"",
        Kind::Duration { min: NONE },
        "a stage stalled on an unavailable store logs an ERROR once the outage lasts this long",
    ),
    k(
        "msgx.pipeline.outage-alert-every",
        "\"10m\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "the ERROR of a lasting outage is repeated this often",
    ),
    k(
        "msgx.pipeline.stats-interval",
        "\"60s\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "period of the `stats` log line",
    ),
    // --- msgx.health: thresholds of `msgx status --check` (Nagios plugin) ---
    k(
        "msgx.health.head-age-warning",
        "\"5m\"",
        Kind::Duration { min: NONE },
        "status --check: WARNING when the oldest unfinished message is this old",
    ),
    k(
        "msgx.health.head-age-critical",
        "\"30m\"",
        Kind::Duration { min: NONE },
        "status --check: CRITICAL when the oldest unfinished message is this old",
    ),
    k(
        "msgx.health.dead-warning",
        "1",
        Kind::Int { min: 0, max: i64::MAX },
        "status --check: WARNING at this many DEAD messages plus DEAD events (0: off)",
    ),
    k(
        "msgx.health.dead-critical",
        "0",
        Kind::Int { min: 0, max: i64::MAX },
        "status --check: CRITICAL at this many DEAD messages plus DEAD events (0: off)",
    ),
    k(
        "msgx.health.abandoned-warning",
        "1",
        Kind::Int { min: 0, max: i64::MAX },
        "status --check: WARNING at this many abandoned mailbox marks not reconciled (0: off)",
    ),
    k(
        "msgx.health.abandoned-critical",
        "0",
        Kind::Int { min: 0, max: i64::MAX },
        "status --check: CRITICAL at this many abandoned mailbox marks not reconciled (0: off)",
    ),
    k(
        "msgx.health.stalled-warning",
        "\"1m\"",
        Kind::Duration { min: NONE },
        "status --check: WARNING when a stage has been stalled on a store this long",
    ),
    k(
        "msgx.health.stalled-critical",
        "\"10m\"",
        Kind::Duration { min: NONE },
        "status --check: CRITICAL when a stage has been stalled on a store this long",
    ),
    // --- msgx.lease: one writer, fenced (PRE-5) ---
    k(
        "msgx.lease.duration",
        "\"10s\"",
        Kind::Duration { min: Duration::from_secs(2) },
        "how long a renewal holds the single-instance lease; a standby takes over this long after the active instance stops renewing",
    ),
    k(
        "msgx.lease.renew-interval",
        "\"1s\"",
        Kind::Duration { min: Duration::from_millis(100) },
        "how often the active instance renews the lease and a standby looks at it; at most a third of the duration",
    ),
    // --- msgx.watchdog: systemd's watchdog (#42) ---
    k(
        "msgx.watchdog.stuck-after",
        "\"120s\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "a stage whose one turn lasts longer than this is stuck (in a driver, a lock): systemd's watchdog (WatchdogSec=) is no longer pinged and restarts msgx; keep it above every store's timeout (PostgreSQL's statement_timeout is 60 s)",
    ),
    // --- msgx.consistency-check (U25) ---
    k(
        "msgx.consistency-check.on-startup",
        "true",
        Kind::Bool,
        "U25: before the stages start, compare own PostgreSQL, the mailbox marks and Redis, and heal a store that forgot (#20)",
    ),
    k(
        "msgx.consistency-check.daily-sample-ratio",
        "0.01",
        Kind::Ratio,
        "U25: every 1/ratio-th of the SUCCEEDED messages whose fields Redis acknowledged (the newest 200 000 still in PROC_STATE, younger than a tombstone lives) is decided again and its flight versions compared with Redis, by the sentinel's daily check and msgx verify (0: off)",
    ),
    k(
        "msgx.consistency-check.interval",
        "\"15s\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "U25: how often the sentinel stage compares the newest messages across the stores; a store that forgot is found within this",
    ),
    k(
        "msgx.consistency-check.max-heals-per-hour",
        "3",
        Kind::Int { min: 1, max: 100 },
        "#37: at most this many heals that changed something in any hour, counted in own PostgreSQL for every instance; one more stops msgx (exit 6) for a person to decide",
    ),
    // --- msgx.proc-state, msgx.schd, msgx.identity, msgx.codec ---
    k(
        "msgx.proc-state.archive-after",
        "\"1d\"",
        Kind::Duration { min: MS },
        "settled terminal rows older than this move to PROC_STATE_HST (G-PROC-HST)",
    ),
    k(
        "msgx.proc-state.dead-keep",
        "\"30d\"",
        Kind::Duration { min: MS },
        "a DEAD message nobody replayed or dismissed stays in the dead-letter queue this long (R), then is archived with a WARN",
    ),
    k(
        "msgx.schd.flush-period",
        "\"3s\"",
        Kind::Duration { min: MS },
        "how often KAFKA:schd events are claimed and sent as one FLTR array",
    ),
    k(
        "msgx.schd.flush-limit",
        "500",
        Kind::Int { min: 1, max: 100_000 },
        "most KAFKA:schd events claimed per flush",
    ),
    k(
        "msgx.identity.include-day-boundary",
        "false",
        Kind::Bool,
        "add the DTTM date to the identity SNDR|TYPE|STYP|SEQN (Q11; keep off until confirmed)",
    ),
    k(
        "msgx.codec.ignore-rules",
        "[\"LDM-*\", \"REGN-*\", \"RSTA-*\", \"EROR-*\"]",
        Kind::StrList,
        "TYPE-STYP or TYPE-* patterns (case-insensitive) that end as SKIPPED (G-IGNORE, US-04)",
    ),
    k(
        "msgx.codec.strict",
        "false",
        Kind::Bool,
        "refuse (CODEC_ERROR) a known message kind carrying elements or attributes msgx does not know; \
         false: decode what is known and report the rest (the tolerant reader)",
    ),
    k(
        "msgx.codec.max-message-bytes",
        "1048576",
        Kind::Int { min: 1024, max: 16_777_215 },
        "a mailbox message larger than this is DEAD(PROTOCOL) before it is decoded",
    ),
    k(
        "msgx.codec.max-elements",
        "262144",
        Kind::Int { min: 64, max: 16_777_216 },
        "a message with more elements than this is DEAD(PROTOCOL), refused as soon as the parser meets one more \
         (one per four bytes of a message at the default max-message-bytes; raise both together)",
    ),
    k(
        "msgx.codec.max-attributes",
        "64",
        Kind::Int { min: 8, max: 65_536 },
        "an element with more attributes than this makes its message DEAD(PROTOCOL)",
    ),
    k(
        "msgx.codec.max-unknown-names",
        "64",
        Kind::Int { min: 1, max: 65_536 },
        "a message in which the tolerant reader meets more distinct unknown element or attribute names than this \
         is DEAD(PROTOCOL)",
    ),
    k(
        "msgx.codec.max-event-bytes",
        "900000",
        Kind::Int { min: 1024, max: 990_000 },
        "an event payload larger than this makes its message DEAD(PROTOCOL), nothing applied; \
         the producer refuses records over 1000000 bytes (librdkafka's message.max.bytes), key and headers included",
    ),
    // --- msgx.requests: asking the AODB for data (SPEC §4.11) ---
    k(
        "msgx.requests.dialect",
        "\"sis\"",
        Kind::Str,
        "which family's request msgx writes to COUTMSGS: \"sis\" (RQFD, RQRD) or \"platform\" (REQE-RQDF, answered with RMID)",
    ),
    k(
        "msgx.requests.timeout",
        "\"10m\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "a request in COUTMSGS that no answer closed within this long is EXPIRED (WARN); a late answer is still processed",
    ),
    k(
        "msgx.requests.heal-tries",
        "3",
        Kind::Int { min: 1, max: 20 },
        "how many times a heal asks the AODB for a window before it waits for a person: an expired heal request is asked again; after the last one expires msgx stays degraded, status --check WARNING, until an answer comes or msgx requests --dismiss ID --note …",
    ),
    k(
        "msgx.requests.heal-window",
        "\"\"",
        Kind::Text,
        "a window FROM/TO (local airport time, yyyy-MM-ddTHH:mm/yyyy-MM-ddTHH:mm) a heal asks the AODB for when nothing tells which day a lost message's flights lie on, instead of stopping for a person (exit 6): a person's decision, set after that stop, for the messages of that stop: once a heal's request for it was answered or dismissed, a later heal stops again rather than ask it; empty: stop",
    ),
    k(
        "msgx.requests.heal-backoff",
        "\"5m\"",
        Kind::Duration { min: Duration::from_secs(1) },
        "pause between a heal request's expiry and its next try, doubled after each try",
    ),
    k("msgx.requests.sender", "\"VIEW\"", Kind::Str, "SNDR of every request (and SORC in the platform dialect)"),
    k("msgx.requests.receiver", "\"\"", Kind::Text, "RCVR of a platform request (empty: written empty)"),
    k(
        "msgx.requests.on-empty",
        "true",
        Kind::Bool,
        "a first start (Redis never written, nothing msgx holds to fill it) asks the AODB for today's flights (origin first-start; false: the flights fill as messages come). A heal never guesses a day: lost flights no event places on one stop it for a person",
    ),
    k(
        "msgx.requests.window-format",
        "\"%d%b%y%H%M\"",
        Kind::Str,
        "how an RQFD request's STDB and STDE write a time: a strftime pattern, written in upper case (the default writes 05MAR261430, as SIS writes SODT)",
    ),
    k(
        "msgx.requests.airport",
        "\"\"",
        Kind::Text,
        "APOT and BAPT of a platform request, the airport's code (empty: written empty)",
    ),
    // --- the compat write path POST /cminmsgs/send ---
    k(
        "metrics.listen",
        "\"127.0.0.1:9722\"",
        Kind::Text,
        "address of the operations endpoint (GET /metrics in the Prometheus text format, /live, /ready, the read-only console); empty turns it off",
    ),
    KeySpec {
        key: "metrics.token",
        default: "\"\"",
        kind: Kind::Text,
        env: Some("MSGX_METRICS_TOKEN"),
        doc: "a bearer token every path of the operations endpoint but /live and /ready then asks for (Authorization: Bearer TOKEN); empty: none",
    },
    k(
        "metrics.token-file",
        "\"\"",
        Kind::Text,
        "metrics.token read from this file instead (a path, or a credential's name in $CREDENTIALS_DIRECTORY: systemd's LoadCredential=); refused when others can read it",
    ),
    KeySpec {
        key: "metrics.console-token",
        default: "\"\"",
        kind: Kind::Text,
        env: Some("MSGX_CONSOLE_TOKEN"),
        doc: "a bearer token the console's pages (message texts, flight data) then ask for instead of metrics.token, so that a scraper's token does not open them; empty: the console asks for metrics.token",
    },
    k(
        "metrics.console-token-file",
        "\"\"",
        Kind::Text,
        "metrics.console-token read from this file instead (a path, or a credential's name in $CREDENTIALS_DIRECTORY); refused when others can read it",
    ),
    k(
        "metrics.host-names",
        "[]",
        Kind::StrList,
        "names the operations endpoint answers to in a request's Host besides IP addresses and localhost (a DNS name a proxy or a person uses); any other name is refused (421), so a page elsewhere cannot reach the console by DNS rebinding",
    ),
    k(
        "msgx.compat-http.enabled",
        "false",
        Kind::Bool,
        "serve POST /cminmsgs/send (inserts into the mailbox and enqueues)",
    ),
    k(
        "msgx.compat-http.listen",
        "\"127.0.0.1:18080\"",
        Kind::SocketAddr,
        "address of the compat server; keep it on loopback unless a proxy guards it",
    ),
    k(
        "msgx.compat-http.max-body-bytes",
        "1048576",
        Kind::Int { min: 1, max: 16_777_215 },
        "largest accepted message (the mailbox column is a MEDIUMTEXT)",
    ),
    k(
        "msgx.compat-http.read-timeout",
        "\"10s\"",
        Kind::Duration { min: Duration::from_millis(100) },
        "a request not read whole within this is answered 408 (a slow client holds one worker, never the others)",
    ),
    k(
        "msgx.compat-http.workers",
        "4",
        Kind::Int { min: 1, max: 64 },
        "requests served at once, each with its own mailbox and PostgreSQL connection; more wait, then get 503",
    ),
    // --- own PostgreSQL ---
    e(
        "datasources.default.url",
        "\"postgres://msgx@127.0.0.1:5432/msgx\"",
        "MSGX_PG_URL",
        "own PostgreSQL (PROC_STATE, MSG_EVENT, …); a primary with replicas: every host in one URL (postgres://u@a:5432,b:5432/msgx), msgx opens read-write sessions only",
    ),
    k(
        "datasources.default.password-file",
        "\"\"",
        Kind::Text,
        "own PostgreSQL's password, read from this file at each new connection (a path, or a credential's name in $CREDENTIALS_DIRECTORY); refused when others can read it; TLS is the URL's: sslmode, sslrootcert, sslcert, sslkey as libpq reads them",
    ),
    k(
        "datasources.default.require-sync-standby",
        "false",
        Kind::Bool,
        "refuse to start unless own PostgreSQL has a synchronous standby attached (no commit lost on a failover)",
    ),
    // --- the shared MySQL mailbox (someone else's: DML only, C-14) ---
    e(
        "mailbox.shared-mysql.url",
        "\"mysql://msgx@127.0.0.1:3306/mailbox\"",
        "MSGX_MYSQL_URL",
        "the shared mailbox database",
    ),
    k(
        "mailbox.shared-mysql.password-file",
        "\"\"",
        Kind::Text,
        "the mailbox user's password, read from this file at each new connection (a path, or a credential's name in $CREDENTIALS_DIRECTORY); TLS is the URL's: ssl-mode, ssl-ca, ssl-cert, ssl-key as the MySQL client reads them",
    ),
    k(
        "mailbox.time-zone",
        "\"UTC\"",
        Kind::Str,
        "zone of the DATETIMEs msgx writes to and reads from the shared mailbox (marks, outbound rows, DATE_RECEIVED): UTC, an offset such as +08:00, or an IANA name such as Asia/Shanghai",
    ),
    k("mailbox.inbound.table", "\"cminmsgs\"", Kind::Ident, "inbound mailbox table"),
    k("mailbox.inbound.id-column", "\"CMINMSGS_ID\"", Kind::Ident, "increasing row id (PRE-2/3)"),
    k("mailbox.inbound.body-column", "\"CMINMSGS_CLOB_MSG\"", Kind::Ident, "raw XML text"),
    k(
        "mailbox.inbound.received-column",
        "\"CMINMSGS_DATE_RECEIVED\"",
        Kind::Ident,
        "when the row arrived (a DATETIME in mailbox.time-zone)",
    ),
    k(
        "mailbox.inbound.processed-column",
        "\"CMINMSGS_DATE_PROCESSED\"",
        Kind::Ident,
        "the processed mark msgx writes once (INV-7)",
    ),
    k(
        "mailbox.inbound.status-column",
        "\"CMINMSGS_STATUS\"",
        Kind::Ident,
        "row status, filtered on read and set with the mark",
    ),
    k("mailbox.inbound.status-filter", "[\"VALID\"]", Kind::StrList, "statuses of rows msgx takes"),
    k(
        "mailbox.inbound.processed-status",
        "\"PROCESSED\"",
        Kind::Str,
        "status written with the mark (C-5: a value of the mailbox owner's set)",
    ),
    k(
        "mailbox.inbound.exclusive-marks",
        "false",
        Kind::Bool,
        "#37: true when no one but msgx marks rows with processed-status: a mark own PostgreSQL has no row for is then proof that it forgot (healed even when Redis went back too); false: only a suspicion (WARN), as an operator, the legacy system or a shadow deployment may mark rows",
    ),
    k("mailbox.outbound.table", "\"coutmsgs\"", Kind::Ident, "outbound mailbox table (target COUTMSGS)"),
    k("mailbox.outbound.id-column", "\"COUTMSGS_ID\"", Kind::Ident, "outbound row id"),
    k("mailbox.outbound.body-column", "\"COUTMSGS_CLOB_MSG\"", Kind::Ident, "outbound XML text"),
    k(
        "mailbox.outbound.inserted-column",
        "\"COUTMSGS_DATE_INSERTED\"",
        Kind::Ident,
        "when msgx inserted the row (a DATETIME in mailbox.time-zone)",
    ),
    k("mailbox.outbound.routing-column", "\"ROUTINGID\"", Kind::Ident, "routing id of the outbound message"),
    // --- Redis ---
    e("redis.url", "\"redis://127.0.0.1:6379/\"", "MSGX_REDIS_URL", "Redis holding live flight state"),
    k(
        "redis.password-file",
        "\"\"",
        Kind::Text,
        "the Redis (ACL) user's password, read from this file at each new connection (a path, or a credential's name in $CREDENTIALS_DIRECTORY); the user is redis.url's (rediss://USER@host)",
    ),
    k(
        "redis.tls-ca-file",
        "\"\"",
        Kind::Text,
        "with a rediss:// URL: the CA the server's certificate must be signed by (PEM); empty: the system's roots. The host name is always verified",
    ),
    k("redis.tls-cert-file", "\"\"", Kind::Text, "with a rediss:// URL: a client certificate (PEM) msgx presents"),
    k("redis.tls-key-file", "\"\"", Kind::Text, "the client certificate's key (PEM, PKCS#8)"),
    k("redis.key-prefix", "\"msgx:\"", Kind::Str, "prefix of every Redis key msgx writes"),
    k(
        "redis.sentinels",
        "[]",
        Kind::AddrList,
        "Redis Sentinels as host:port; when set with redis.sentinel-master they name the master (redis.url's host is ignored, its user, password and db apply)",
    ),
    k("redis.sentinel-master", "\"\"", Kind::Text, "the master's name at the sentinels (sentinel monitor NAME …)"),
    KeySpec {
        key: "redis.sentinel-password",
        default: "\"\"",
        kind: Kind::Text,
        env: Some("MSGX_REDIS_SENTINEL_PASSWORD"),
        doc: "the sentinels' own password (requirepass of sentinel.conf), if any",
    },
    k(
        "redis.sentinel-password-file",
        "\"\"",
        Kind::Text,
        "the sentinels' password read from this file instead (a path, or a credential's name in $CREDENTIALS_DIRECTORY)",
    ),
    k("redis.sentinel-username", "\"\"", Kind::Text, "the sentinels' ACL user, if any"),
    k(
        "redis.sentinel-tls",
        "false",
        Kind::Bool,
        "speak TLS to the sentinels, verified as redis.url's server is (redis.tls-ca-file, the client certificate)",
    ),
    k(
        "redis.wait-replicas",
        "0",
        Kind::Int { min: 0, max: 16 },
        "after each apply and fence update, WAIT until this many replicas acknowledged it; fewer within wait-timeout is an outage (0: off)",
    ),
    k(
        "redis.journal-keep",
        "\"1h\"",
        Kind::Duration { min: Duration::ZERO },
        "an applied decision's journal entry stays this long after PostgreSQL holds its outcome: a PostgreSQL that lost commits within it is healed (#20)",
    ),
    k("redis.wait-timeout", "\"1s\"", Kind::Duration { min: MS }, "how long WAIT waits for redis.wait-replicas"),
    // --- Kafka ---
    e(
        "kafka.bootstrap-servers",
        "\"127.0.0.1:9092\"",
        "MSGX_KAFKA_BROKERS",
        "comma-separated host:port list",
    ),
    k(
        "kafka.security-protocol",
        "\"plaintext\"",
        Kind::Str,
        "plaintext, ssl, sasl_plaintext or sasl_ssl (librdkafka's security.protocol); with ssl the broker's certificate and host name are always verified",
    ),
    k(
        "kafka.sasl-mechanism",
        "\"\"",
        Kind::Text,
        "with sasl_*: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (librdkafka's sasl.mechanisms)",
    ),
    k("kafka.sasl-username", "\"\"", Kind::Text, "with sasl_*: the user"),
    k(
        "kafka.sasl-password-file",
        "\"\"",
        Kind::Text,
        "with sasl_*: the user's password, read from this file at each new producer (a path, or a credential's name in $CREDENTIALS_DIRECTORY)",
    ),
    k(
        "kafka.ssl-ca-location",
        "\"\"",
        Kind::Text,
        "with ssl: the CA the brokers' certificates must be signed by (PEM); empty: the system's roots",
    ),
    k("kafka.ssl-certificate-location", "\"\"", Kind::Text, "with ssl: a client certificate (PEM) msgx presents"),
    k("kafka.ssl-key-location", "\"\"", Kind::Text, "the client certificate's key (PEM)"),
    k("kafka.topics.msg", "\"msgx.msg\"", Kind::Str, "topic of target KAFKA:msg"),
    k("kafka.topics.schd", "\"msgx.schd\"", Kind::Str, "topic of target KAFKA:schd"),
    k(
        "kafka.producers.default.acks",
        "\"all\"",
        Kind::Str,
        "D3: must be \"all\"; msgx refuses to start otherwise",
    ),
    k(
        "kafka.producers.default.enable-idempotence",
        "true",
        Kind::Bool,
        "D3: must be true; msgx refuses to start otherwise",
    ),
    k(
        "kafka.producers.default.max-in-flight-requests-per-connection",
        "1",
        Kind::Int { min: 1, max: 5 },
        "D3 (G-KAFKA-D3): must be 1; msgx refuses to start otherwise",
    ),
    k(
        "kafka.producers.default.message-timeout-ms",
        "30000",
        Kind::Millis { min: 1000 },
        "how long the producer retries one delivery before it counts as failed",
    ),
    k(
        "kafka.producers.default.linger-ms",
        "5",
        Kind::Int { min: 0, max: 1000 },
        "how long the producer waits to fill a request: a round's records go as one request, so a broker that refuses one refuses the records behind it too (with 0 the first goes alone and those behind may land before a refused one, #67)",
    ),
    k(
        "kafka.producers.default.debug",
        "\"\"",
        Kind::Text,
        "librdkafka debug contexts (e.g. \"eos,broker,msg\"); empty: none",
    ),
];

pub fn spec(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|s| s.key == key)
}
