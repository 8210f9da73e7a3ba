//! Configuration: one TOML file whose keys are the spec's PARAM keys as tables, plus the
//! connection overrides `MSGX_PG_URL`, `MSGX_MYSQL_URL`, `MSGX_REDIS_URL`, `MSGX_KAFKA_BROKERS`.
//!
//! Every key is declared once in [`keys::KEYS`]. A file may leave any key out (its default
//! applies); an unknown key, a value of the wrong type or out of range, and any Kafka producer
//! setting other than D3's are refused with an error that names the key.

mod policies;
pub use policies::{LeasePolicy, OutagePolicy, RequestDialect, RequestPolicy, Thresholds};
pub mod keys;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::secret::SecretFile;

use keys::{Kind, KEYS};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("cannot read {path}: {detail}")]
    Read { path: String, detail: String },
    #[error("{path} is not valid TOML: {detail}")]
    Syntax { path: String, detail: String },
    /// The first unknown key, a near miss of it if there is one, and every other unknown key of
    /// the file (`also`), so that one `msgx check` names each (#68).
    #[error("unknown configuration key `{key}`{hint}{also}")]
    UnknownKey { key: String, hint: String, also: String },
    #[error("bad value for `{key}`: {detail}")]
    BadValue { key: String, detail: String },
    /// A secret file (`*-password-file`, `metrics.token-file`) that cannot be used (#64).
    #[error("{0}")]
    Secret(#[from] crate::secret::SecretError),
    #[error("`{key}` = {value} breaks D3 (acks=all, enable-idempotence=true, max-in-flight-requests-per-connection=1); msgx never connects otherwise (G-KAFKA-D3)")]
    D3 { key: String, value: String },
}

/// The environment overrides that carry a connection string (and so a password).
pub const CONNECTION_ENV: [&str; 3] = ["MSGX_PG_URL", "MSGX_MYSQL_URL", "MSGX_REDIS_URL"];

/// The pump, poller, dispatcher and backfill parameters (`msgx.pipeline.*` and friends).
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub poll_interval: Duration,
    pub poll_batch: usize,
    pub rescan_interval: Duration,
    pub rescan_chunk: usize,
    pub rescan_pause: Duration,
    pub max_attempts: u32,
    pub backoff: Vec<Duration>,
    pub backoff_cap: Duration,
    pub head_deadline: Duration,
    /// SPEC §3a: an unsupported kind walks the retry ladder (off: DEAD at its first attempt).
    pub retry_unsupported: bool,
    pub max_commit_delay: Duration,
    pub commit_grace: Duration,
    pub process_batch: usize,
    pub process_batch_bytes: u64,
    pub dispatch_batch: usize,
    pub backfill_batch: usize,
    pub backfill_backoff: Duration,
    pub backfill_backoff_cap: Duration,
    pub overdue_backfill: Duration,
    pub event_retention: Duration,
    pub stats_interval: Duration,
    pub jobs_interval: Duration,
    pub archive_after: Duration,
    pub dead_keep: Duration,
    /// `msgx.consistency-check.on-startup` (U25).
    pub check_on_startup: bool,
    /// `msgx.consistency-check.daily-sample-ratio` (U25).
    pub check_sample_ratio: f64,
    /// `msgx.consistency-check.interval`: how often the sentinel compares the newest messages.
    pub check_interval: Duration,
    /// `msgx.consistency-check.max-heals-per-hour` (#37).
    pub max_heals_per_hour: u32,
    /// `redis.journal-keep`.
    pub journal_keep: Duration,
    pub schd_flush_period: Duration,
    pub schd_flush_limit: usize,
    pub include_day_boundary: bool,
    pub ignore_rules: Vec<String>,
    /// How a stage waits for a store that is away, and when it alerts (SPEC §4.9).
    pub outage: OutagePolicy,
    pub strict_codec: bool,
    pub max_message_bytes: u64,
    /// `msgx.codec.max-elements`, `max-attributes`, `max-unknown-names` (#53).
    pub max_elements: u32,
    pub max_attributes: u32,
    pub max_unknown_names: u32,
    pub max_event_bytes: usize,
}

/// The compat write path (`msgx.compat-http.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompatHttp {
    pub enabled: bool,
    pub listen: std::net::SocketAddr,
    pub max_body_bytes: usize,
    pub read_timeout: Duration,
    pub workers: usize,
}

/// Names in the shared inbound mailbox (they belong to another team, so they are settings).
#[derive(Debug, Clone, PartialEq)]
pub struct InboundMailbox {
    pub table: String,
    pub id_column: String,
    pub body_column: String,
    pub received_column: String,
    pub processed_column: String,
    pub status_column: String,
    pub status_filter: Vec<String>,
    pub processed_status: String,
    /// `mailbox.inbound.exclusive-marks`: only msgx marks rows with `processed_status` (#37).
    pub exclusive_marks: bool,
    /// `mailbox.time-zone`: the zone of the DATETIMEs msgx writes and reads.
    pub zone: crate::clock::zone::MailboxZone,
}

/// Names in the shared outbound mailbox (`mailbox.outbound.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundMailbox {
    pub table: String,
    pub id_column: String,
    pub body_column: String,
    pub inserted_column: String,
    pub routing_column: String,
    pub zone: crate::clock::zone::MailboxZone,
}

/// The Kafka producer settings. Only D3's values get past [`Config::from_map`].
#[derive(Debug, Clone, PartialEq)]
pub struct Producer {
    pub acks: String,
    pub enable_idempotence: bool,
    pub max_in_flight: i64,
    pub message_timeout: Duration,
    pub linger_ms: i64,
    /// librdkafka debug contexts, empty for none.
    pub debug: String,
}

/// How msgx talks to the brokers (#64): librdkafka's `security.protocol` and what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSecurity {
    pub protocol: KafkaProtocol,
    pub sasl: Option<Sasl>,
    /// With TLS: the CA (else the system's roots), a client certificate and its key.
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl KafkaProtocol {
    /// librdkafka's name.
    pub fn name(self) -> &'static str {
        match self {
            KafkaProtocol::Plaintext => "plaintext",
            KafkaProtocol::Ssl => "ssl",
            KafkaProtocol::SaslPlaintext => "sasl_plaintext",
            KafkaProtocol::SaslSsl => "sasl_ssl",
        }
    }

    pub fn tls(self) -> bool {
        matches!(self, KafkaProtocol::Ssl | KafkaProtocol::SaslSsl)
    }

    pub fn sasl(self) -> bool {
        matches!(self, KafkaProtocol::SaslPlaintext | KafkaProtocol::SaslSsl)
    }
}

/// SASL's mechanism, user and the file of the user's password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: SecretFile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// librdkafka's name (`sasl.mechanisms`).
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub pipeline: Pipeline,
    pub lease: LeasePolicy,
    pub health: Thresholds,
    /// `msgx.log-format = "json"`.
    pub log_json: bool,
    /// `msgx.log-file`: the file msgx writes and reopens on SIGHUP; `None`: standard error.
    pub log_file: Option<std::path::PathBuf>,
    /// `metrics.listen`: the operations endpoint; `None`: off.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `metrics.token`: the bearer token the endpoint asks for (but on `/live`, `/ready`); a
    /// secret, never described.
    pub metrics_token: Option<String>,
    /// The console's own token (`metrics.console-token`): `/metrics`' does not open it.
    pub console_token: Option<String>,
    /// `metrics.host-names` (#54).
    pub metrics_host_names: Vec<String>,
    /// `msgx.watchdog.stuck-after`: a turn this long stops systemd's watchdog pings.
    pub watchdog_stuck_after: Duration,
    pub compat: CompatHttp,
    pub pg_url: String,
    /// `datasources.default.password-file` (#64): read at each new connection.
    pub pg_password: Option<SecretFile>,
    /// `datasources.default.require-sync-standby`.
    pub require_sync_standby: bool,
    pub mysql_url: String,
    /// `mailbox.shared-mysql.password-file` (#64).
    pub mysql_password: Option<SecretFile>,
    pub inbound: InboundMailbox,
    pub outbound: OutboundMailbox,
    pub redis_url: String,
    pub redis_prefix: String,
    /// Where Redis is: `redis.url`, or the master the sentinels name (`redis.sentinels`).
    pub redis: RedisTarget,
    pub kafka_brokers: String,
    /// `kafka.security-protocol` and what it needs (#64).
    pub kafka_security: KafkaSecurity,
    pub topic_msg: String,
    pub topic_schd: String,
    pub producer: Producer,
    /// `msgx.requests.*`.
    pub requests: RequestPolicy,
}

/// Raw key → value map after defaults, the file and the environment were layered.
type Values = BTreeMap<&'static str, toml::Value>;

impl Config {
    /// All defaults, no file, no environment.
    pub fn defaults() -> Config {
        Config::from_toml_str("", |_| None).expect("the built-in defaults are valid")
    }

    /// Reads `path`, then applies environment overrides from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), detail: e.to_string() })?;
        Config::from_toml_str(&text, |k| std::env::var(k).ok()).map_err(|e| match e {
            ConfigError::Syntax { detail, .. } => {
                ConfigError::Syntax { path: path.display().to_string(), detail }
            }
            other => other,
        })
    }

    /// Parses a configuration text; `env` answers environment look-ups (injected for tests).
    pub fn from_toml_str(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let credentials = env(crate::secret::file::CREDENTIALS_DIRECTORY);
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Syntax {
            path: "<config>".into(),
            detail: e.message().to_string(),
        })?;
        let mut values = defaults_map();
        let mut leaves = Vec::new();
        flatten("", &table, &mut leaves);
        let mut unknowns = Vec::new();
        for (key, value) in leaves {
            match keys::spec(&key) {
                Some(spec) => _ = values.insert(spec.key, value),
                None => unknowns.push(key),
            }
        }
        if let Some(first) = unknowns.first() {
            return Err(unknown(first, &unknowns[1..]));
        }
        for spec in KEYS {
            if let Some(var) = spec.env {
                if let Some(v) = env(var).filter(|v| !v.trim().is_empty()) {
                    values.insert(spec.key, toml::Value::String(v));
                }
            }
        }
        Config::from_map(&values, credentials.as_deref())
    }

    fn from_map(v: &Values, credentials: Option<&str>) -> Result<Config, ConfigError> {
        let secret = |key: &'static str| secret_file(v, key, credentials);
        let (inbound, outbound) = mailboxes(v)?;
        let (log_json, log_file, metrics_listen) = logging(v)?;
        let (pipeline, lease, health, compat, producer) =
            (pipeline(v)?, lease(v)?, health(v)?, compat(v)?, producer(v)?);
        Ok(Config {
            pipeline,
            lease,
            health,
            log_json,
            log_file,
            metrics_listen,
            metrics_token: token(v, credentials, "metrics.token", "metrics.token-file")?,
            console_token: token(v, credentials, "metrics.console-token", "metrics.console-token-file")?,
            metrics_host_names: strings(v, "metrics.host-names")?,
            watchdog_stuck_after: duration(v, "msgx.watchdog.stuck-after")?,
            compat,
            pg_url: string(v, "datasources.default.url")?,
            pg_password: secret("datasources.default.password-file")?,
            require_sync_standby: boolean(v, "datasources.default.require-sync-standby")?,
            mysql_url: string(v, "mailbox.shared-mysql.url")?,
            mysql_password: secret("mailbox.shared-mysql.password-file")?,
            inbound,
            outbound,
            redis_url: string(v, "redis.url")?,
            redis: redis_target(v, &secret)?,
            redis_prefix: string(v, "redis.key-prefix")?,
            kafka_brokers: string(v, "kafka.bootstrap-servers")?,
            kafka_security: kafka_security(v, secret("kafka.sasl-password-file")?)?,
            topic_msg: string(v, "kafka.topics.msg")?,
            topic_schd: string(v, "kafka.topics.schd")?,
            producer,
            requests: requests(v)?,
        })
    }

    /// Every connection string, whose passwords are secrets (#21 item 3).
    pub fn connection_strings(&self) -> [&str; 3] {
        [&self.pg_url, &self.mysql_url, &self.redis_url]
    }

    /// The effective settings as `key = value` lines, passwords redacted: for `msgx check`
    /// and the start-up log.
    pub fn describe(&self) -> Vec<String> {
        let p = &self.producer;
        vec![
            format!("datasources.default.url = {}", crate::secret::redact(&self.pg_url)),
            format!("mailbox.shared-mysql.url = {}", crate::secret::redact(&self.mysql_url)),
            format!("redis.url = {}", crate::secret::redact(&self.redis_url)),
            format!(
                "redis: sentinels={:?} sentinel-master={:?} wait-replicas={} wait-timeout={}",
                self.redis.sentinels,
                self.redis.master,
                self.redis.wait_replicas,
                format_duration(self.redis.wait_timeout)
            ),
            format!("kafka.bootstrap-servers = {}", self.kafka_brokers),
            format!(
                "kafka.producers.default: acks={} enable.idempotence={} \
                 max.in.flight.requests.per.connection={} message.timeout.ms={} linger.ms={}",
                p.acks,
                p.enable_idempotence,
                p.max_in_flight,
                p.message_timeout.as_millis(),
                p.linger_ms
            ),
        ]
    }
}

fn defaults_map() -> Values {
    KEYS.iter()
        .map(|s| {
            let t: toml::Table = format!("v = {}", s.default)
                .parse()
                .unwrap_or_else(|e| panic!("default of {} is not TOML: {e}", s.key));
            (s.key, t["v"].clone())
        })
        .collect()
}

fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => out.push((key, other.clone())),
        }
    }
}

/// The most other unknown keys one error names.
const UNKNOWN_NAMED: usize = 20;

fn unknown(key: &str, others: &[String]) -> ConfigError {
    // A near miss is usually a typo of a real key; name it.
    let best = KEYS
        .iter()
        .map(|s| (edit_distance(key, s.key), s.key))
        .min()
        .filter(|(d, _)| *d <= 3)
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    let named: Vec<String> = others.iter().take(UNKNOWN_NAMED).map(|k| format!("`{k}`")).collect();
    let more = others.len().saturating_sub(UNKNOWN_NAMED);
    let also = match (named.is_empty(), more) {
        (true, _) => String::new(),
        (false, 0) => format!("; also unknown: {}", named.join(", ")),
        (false, n) => format!("; also unknown: {} and {n} more", named.join(", ")),
    };
    ConfigError::UnknownKey { key: key.to_string(), hint: best, also }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn bad(key: &str, detail: impl Into<String>) -> ConfigError {
    ConfigError::BadValue { key: key.to_string(), detail: detail.into() }
}

fn d3(key: &str, value: &str) -> ConfigError {
    ConfigError::D3 { key: key.to_string(), value: value.to_string() }
}

fn get<'a>(v: &'a Values, key: &'static str) -> (&'a toml::Value, Kind) {
    let spec = keys::spec(key).unwrap_or_else(|| panic!("{key} is not registered"));
    (&v[key], spec.kind)
}

fn duration(v: &Values, key: &'static str) -> Result<Duration, ConfigError> {
    let (val, kind) = get(v, key);
    let Kind::Duration { min } = kind else { unreachable!("{key} is not a duration") };
    let s = val.as_str().ok_or_else(|| bad(key, "expected a duration string such as \"1s\""))?;
    let d = parse_duration(s).map_err(|e| bad(key, e))?;
    if d < min {
        return Err(bad(key, format!("{s} is below the lower bound {}", format_duration(min))));
    }
    Ok(d)
}

fn millis(v: &Values, key: &'static str) -> Result<Duration, ConfigError> {
    let (val, kind) = get(v, key);
    let Kind::Millis { min } = kind else { unreachable!("{key} is not millis") };
    let n = val.as_integer().ok_or_else(|| bad(key, "expected an integer number of milliseconds"))?;
    if n < min as i64 {
        return Err(bad(key, format!("{n} is below the lower bound {min}")));
    }
    Ok(Duration::from_millis(n as u64))
}

fn millis_list(v: &Values, key: &'static str) -> Result<Vec<Duration>, ConfigError> {
    let (val, kind) = get(v, key);
    let Kind::MillisList { min } = kind else { unreachable!("{key} is not a millis list") };
    let arr = val.as_array().ok_or_else(|| bad(key, "expected a list of milliseconds"))?;
    if arr.is_empty() {
        return Err(bad(key, "the list must not be empty"));
    }
    arr.iter()
        .map(|x| match x.as_integer() {
            Some(n) if n >= min as i64 => Ok(Duration::from_millis(n as u64)),
            _ => Err(bad(key, format!("{x} is not an integer of at least {min}"))),
        })
        .collect()
}

fn int(v: &Values, key: &'static str) -> Result<i64, ConfigError> {
    let (val, kind) = get(v, key);
    let Kind::Int { min, max } = kind else { unreachable!("{key} is not an integer") };
    let n = val.as_integer().ok_or_else(|| bad(key, "expected an integer"))?;
    if n < min || n > max {
        return Err(bad(key, format!("{n} is outside {min}..={max}")));
    }
    Ok(n)
}

fn ratio(v: &Values, key: &'static str) -> Result<f64, ConfigError> {
    let (val, _) = get(v, key);
    let x = val.as_float().or_else(|| val.as_integer().map(|n| n as f64));
    match x {
        Some(x) if (0.0..=1.0).contains(&x) => Ok(x),
        Some(x) => Err(bad(key, format!("{x} is outside 0..=1"))),
        None => Err(bad(key, "expected a number between 0 and 1")),
    }
}

fn boolean(v: &Values, key: &'static str) -> Result<bool, ConfigError> {
    let (val, _) = get(v, key);
    val.as_bool().ok_or_else(|| bad(key, "expected true or false"))
}

fn string(v: &Values, key: &'static str) -> Result<String, ConfigError> {
    let (val, kind) = get(v, key);
    let s = val.as_str().ok_or_else(|| bad(key, "expected a string"))?;
    if s.trim().is_empty() {
        return Err(bad(key, "must not be empty"));
    }
    if kind == Kind::Ident && !is_ident(s) {
        return Err(bad(key, format!("{s:?} is not a plain SQL name (letters, digits, _ and $)")));
    }
    Ok(s.to_string())
}

fn socket_addr(v: &Values, key: &'static str) -> Result<std::net::SocketAddr, ConfigError> {
    let s = string(v, key)?;
    s.parse().map_err(|_| bad(key, format!("{s:?} is not an ip:port address such as \"127.0.0.1:18080\"")))
}

fn text(v: &Values, key: &'static str) -> Result<String, ConfigError> {
    let (val, _) = get(v, key);
    val.as_str().map(str::to_string).ok_or_else(|| bad(key, "expected a string"))
}

fn strings(v: &Values, key: &'static str) -> Result<Vec<String>, ConfigError> {
    let (val, _) = get(v, key);
    let arr = val.as_array().ok_or_else(|| bad(key, "expected a list of strings"))?;
    arr.iter()
        .map(|x| match x.as_str() {
            Some(s) if !s.trim().is_empty() => Ok(s.to_string()),
            _ => Err(bad(key, format!("{x} is not a non-empty string"))),
        })
        .collect()
}

fn redis_target(
    v: &Values,
    secret: &dyn Fn(&'static str) -> Result<Option<SecretFile>, ConfigError>,
) -> Result<RedisTarget, ConfigError> {
    let sentinels = addrs(v, "redis.sentinels")?;
    let master = text(v, "redis.sentinel-master")?.trim().to_string();
    if sentinels.is_empty() != master.is_empty() {
        let key = if master.is_empty() { "redis.sentinel-master" } else { "redis.sentinels" };
        return Err(bad(key, "redis.sentinels and redis.sentinel-master go together: set both, or neither"));
    }
    let password = text(v, "redis.sentinel-password")?;
    let url = string(v, "redis.url")?;
    let tls =
        [path(v, "redis.tls-ca-file")?, path(v, "redis.tls-cert-file")?, path(v, "redis.tls-key-file")?];
    let verified = url.starts_with("rediss://");
    if url.contains("#insecure") {
        return Err(bad("redis.url", "#insecure turns the certificate's verification off: msgx verifies, always (redis.tls-ca-file names a private CA)"));
    }
    if !verified && tls.iter().any(Option::is_some) {
        return Err(bad("redis.tls-ca-file", "redis.tls-* are for a rediss:// URL; redis.url is plaintext"));
    }
    if tls[1].is_some() != tls[2].is_some() {
        return Err(bad(
            "redis.tls-cert-file",
            "a client certificate needs its key (redis.tls-key-file), and a key its certificate",
        ));
    }
    let [tls_ca, tls_cert, tls_key] = tls;
    let sentinel_password_file = secret("redis.sentinel-password-file")?;
    if sentinel_password_file.is_some() && !password.is_empty() {
        return Err(bad(
            "redis.sentinel-password-file",
            "set redis.sentinel-password or redis.sentinel-password-file, not both",
        ));
    }
    Ok(RedisTarget {
        url,
        sentinels,
        master,
        sentinel_password: Some(password).filter(|p| !p.is_empty()),
        wait_replicas: int(v, "redis.wait-replicas")? as u32,
        wait_timeout: duration(v, "redis.wait-timeout")?,
        password: secret("redis.password-file")?,
        tls_ca,
        tls_cert,
        tls_key,
        sentinel_password_file,
        sentinel_username: Some(text(v, "redis.sentinel-username")?.trim().to_string())
            .filter(|u| !u.is_empty()),
        sentinel_tls: boolean(v, "redis.sentinel-tls")?,
    })
}

/// A secret file key: resolved (`$CREDENTIALS_DIRECTORY` for a bare name) and read once now, so
/// that a file msgx could not use stops it at start and in `msgx check`, naming the key (#64).
fn secret_file(
    v: &Values,
    key: &'static str,
    credentials: Option<&str>,
) -> Result<Option<SecretFile>, ConfigError> {
    let value = text(v, key)?;
    let Some(file) = SecretFile::resolve(key, value.trim(), credentials)? else { return Ok(None) };
    file.read()?;
    Ok(Some(file))
}

/// A path key; `None` when empty.
fn path(v: &Values, key: &'static str) -> Result<Option<std::path::PathBuf>, ConfigError> {
    Ok(Some(text(v, key)?.trim().to_string()).filter(|p| !p.is_empty()).map(std::path::PathBuf::from))
}

/// A token (`metrics.token`, `metrics.console-token`), or what its `-file` key's file holds
/// (read once, here).
fn token(
    v: &Values,
    credentials: Option<&str>,
    key: &'static str,
    file_key: &'static str,
) -> Result<Option<String>, ConfigError> {
    let token = text(v, key)?.trim().to_string();
    match SecretFile::resolve(file_key, text(v, file_key)?.trim(), credentials)? {
        Some(_) if !token.is_empty() => Err(bad(file_key, format!("set {key} or {file_key}, not both"))),
        Some(f) => Ok(Some(f.read()?.trim().to_string())),
        None => Ok(Some(token).filter(|t| !t.is_empty())),
    }
}

/// `kafka.security-protocol` with what it needs: SASL's mechanism, user and password, TLS's
/// files. Nothing here can turn verification off (librdkafka's
/// `enable.ssl.certificate.verification` and host-name check stay on).
fn kafka_security(v: &Values, password: Option<SecretFile>) -> Result<KafkaSecurity, ConfigError> {
    let key = "kafka.security-protocol";
    let protocol = match string(v, key)?.to_ascii_lowercase().as_str() {
        "plaintext" => KafkaProtocol::Plaintext,
        "ssl" => KafkaProtocol::Ssl,
        "sasl_plaintext" => KafkaProtocol::SaslPlaintext,
        "sasl_ssl" => KafkaProtocol::SaslSsl,
        other => {
            return Err(bad(key, format!("{other:?} is not plaintext, ssl, sasl_plaintext or sasl_ssl")))
        }
    };
    let files = [
        path(v, "kafka.ssl-ca-location")?,
        path(v, "kafka.ssl-certificate-location")?,
        path(v, "kafka.ssl-key-location")?,
    ];
    if !protocol.tls() && files.iter().any(Option::is_some) {
        return Err(bad(
            "kafka.ssl-ca-location",
            format!("kafka.ssl-* are for ssl or sasl_ssl; kafka.security-protocol is {}", protocol.name()),
        ));
    }
    if files[1].is_some() != files[2].is_some() {
        return Err(bad(
            "kafka.ssl-certificate-location",
            "a client certificate needs its key (kafka.ssl-key-location), and a key its certificate",
        ));
    }
    let mechanism = text(v, "kafka.sasl-mechanism")?.trim().to_ascii_uppercase();
    let username = text(v, "kafka.sasl-username")?.trim().to_string();
    let sasl = match (protocol.sasl(), password) {
        (true, Some(password)) => {
            let mechanism = match mechanism.as_str() {
                "PLAIN" => SaslMechanism::Plain,
                "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
                "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
                other => {
                    return Err(bad(
                        "kafka.sasl-mechanism",
                        format!("{other:?} is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
                    ))
                }
            };
            if username.is_empty() {
                return Err(bad("kafka.sasl-username", "sasl_* needs a user"));
            }
            Some(Sasl { mechanism, username, password })
        }
        (true, None) => {
            return Err(bad(
                "kafka.sasl-password-file",
                format!("{} needs the user's password in a file", protocol.name()),
            ))
        }
        (false, p) if p.is_some() || !mechanism.is_empty() || !username.is_empty() => {
            return Err(bad(
                "kafka.sasl-mechanism",
                format!(
                    "kafka.sasl-* are for sasl_plaintext or sasl_ssl; kafka.security-protocol is {}",
                    protocol.name()
                ),
            ))
        }
        (false, _) => None,
    };
    let [ca, cert, key] = files;
    Ok(KafkaSecurity { protocol, sasl, ca, cert, key })
}

/// A list of `host:port` addresses, each with a port number.
fn addrs(v: &Values, key: &'static str) -> Result<Vec<String>, ConfigError> {
    let (val, _) = get(v, key);
    let arr = val.as_array().ok_or_else(|| bad(key, "expected a list of \"host:port\" strings"))?;
    arr.iter()
        .map(|x| match x.as_str().and_then(|s| s.rsplit_once(':').map(|(h, p)| (s, h, p))) {
            Some((s, h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => Ok(s.to_string()),
            _ => Err(bad(key, format!("{x} is not a host:port address such as \"10.0.0.5:26379\""))),
        })
        .collect()
}

fn ignore_rules(v: &Values, key: &'static str) -> Result<Vec<String>, ConfigError> {
    let rules = strings(v, key)?;
    for r in &rules {
        let ok = match r.split_once('-') {
            Some((t, s)) => !t.is_empty() && !s.is_empty() && !t.contains('*'),
            None => false,
        };
        if !ok {
            return Err(bad(key, format!("{r:?} is not of the form TYPE-STYP or TYPE-*")));
        }
    }
    Ok(rules)
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && s.len() <= 64
}

/// Parses `"50ms"`, `"1s"`, `"10m"`, `"2h"`, `"30d"` (a whole number and one unit).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a duration such as \"1s\""))?;
    let ms = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?} has no unit of ms, s, m, h or d")),
    };
    n.checked_mul(ms).map(Duration::from_millis).ok_or_else(|| format!("{s:?} is too large"))
}

/// The inverse of [`parse_duration`] for whole units.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms != 0 && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// The text of `etc/msgx.toml`: every key with its default and its one-line description.
pub fn render_default_file() -> String {
    let mut out = String::from(
        "# msgx configuration. Every key msgx knows is listed with its default; delete or\n\
         # comment out what you do not change. Unknown keys are refused at start-up.\n\
         # Durations are strings with one unit: \"50ms\", \"1s\", \"10m\", \"2h\", \"30d\".\n",
    );
    let mut section = "";
    for s in KEYS {
        let (table, leaf) = s.key.rsplit_once('.').expect("keys are dotted");
        if table != section {
            out.push_str(&format!("\n[{table}]\n"));
            section = table;
        }
        let env = s.env.map(|e| format!(" (environment: {e})")).unwrap_or_default();
        out.push_str(&format!("# {}{env}\n{leaf} = {}\n", s.doc, s.default));
    }
    out
}

/// `msgx.pipeline.*`, `msgx.proc-state.*`, `msgx.consistency-check.*`, `msgx.schd.*`, `msgx.codec.*`.
fn pipeline(v: &Values) -> Result<Pipeline, ConfigError> {
    let pipeline = Pipeline {
        poll_interval: duration(v, "msgx.pipeline.poll-interval")?,
        poll_batch: int(v, "msgx.pipeline.poll-batch")? as usize,
        rescan_interval: duration(v, "msgx.pipeline.rescan-interval")?,
        rescan_chunk: int(v, "msgx.pipeline.rescan-chunk")? as usize,
        rescan_pause: duration(v, "msgx.pipeline.rescan-pause")?,
        max_attempts: int(v, "msgx.pipeline.max-attempts")? as u32,
        backoff: millis_list(v, "msgx.pipeline.backoff-ms")?,
        backoff_cap: millis(v, "msgx.pipeline.backoff-cap-ms")?,
        head_deadline: duration(v, "msgx.pipeline.head-deadline")?,
        retry_unsupported: boolean(v, "msgx.pipeline.retry-unsupported")?,
        max_commit_delay: duration(v, "msgx.pipeline.max-commit-delay")?,
        commit_grace: duration(v, "msgx.pipeline.commit-grace")?,
        process_batch: int(v, "msgx.pipeline.process-batch")? as usize,
        process_batch_bytes: int(v, "msgx.pipeline.process-batch-bytes")? as u64,
        dispatch_batch: int(v, "msgx.pipeline.dispatch-batch")? as usize,
        backfill_batch: int(v, "msgx.pipeline.backfill-batch")? as usize,
        backfill_backoff: millis(v, "msgx.pipeline.backfill-backoff-ms")?,
        backfill_backoff_cap: millis(v, "msgx.pipeline.backfill-backoff-cap-ms")?,
        overdue_backfill: duration(v, "msgx.pipeline.overdue-backfill")?,
        event_retention: duration(v, "msgx.pipeline.event-retention")?,
        stats_interval: duration(v, "msgx.pipeline.stats-interval")?,
        jobs_interval: duration(v, "msgx.pipeline.jobs-interval")?,
        archive_after: duration(v, "msgx.proc-state.archive-after")?,
        dead_keep: duration(v, "msgx.proc-state.dead-keep")?,
        check_on_startup: boolean(v, "msgx.consistency-check.on-startup")?,
        check_sample_ratio: ratio(v, "msgx.consistency-check.daily-sample-ratio")?,
        check_interval: duration(v, "msgx.consistency-check.interval")?,
        max_heals_per_hour: int(v, "msgx.consistency-check.max-heals-per-hour")? as u32,
        journal_keep: duration(v, "redis.journal-keep")?,
        schd_flush_period: duration(v, "msgx.schd.flush-period")?,
        schd_flush_limit: int(v, "msgx.schd.flush-limit")? as usize,
        include_day_boundary: boolean(v, "msgx.identity.include-day-boundary")?,
        ignore_rules: ignore_rules(v, "msgx.codec.ignore-rules")?,
        outage: OutagePolicy {
            backoff: millis(v, "msgx.pipeline.reconnect-backoff-ms")?,
            cap: millis(v, "msgx.pipeline.reconnect-backoff-cap-ms")?,
            alert_after: duration(v, "msgx.pipeline.outage-alert-after")?,
            alert_every: duration(v, "msgx.pipeline.outage-alert-every")?,
        },
        strict_codec: boolean(v, "msgx.codec.strict")?,
        max_message_bytes: int(v, "msgx.codec.max-message-bytes")? as u64,
        max_elements: int(v, "msgx.codec.max-elements")? as u32,
        max_attributes: int(v, "msgx.codec.max-attributes")? as u32,
        max_unknown_names: int(v, "msgx.codec.max-unknown-names")? as u32,
        max_event_bytes: int(v, "msgx.codec.max-event-bytes")? as usize,
    };
    backoffs_below_their_caps(&pipeline)?;
    Ok(pipeline)
}

/// A first backoff above its cap would never be waited: refused, naming the key.
fn backoffs_below_their_caps(p: &Pipeline) -> Result<(), ConfigError> {
    if p.outage.backoff > p.outage.cap {
        return Err(bad(
            "msgx.pipeline.reconnect-backoff-ms",
            "must not exceed msgx.pipeline.reconnect-backoff-cap-ms",
        ));
    }
    if p.backfill_backoff > p.backfill_backoff_cap {
        return Err(bad(
            "msgx.pipeline.backfill-backoff-ms",
            "must not exceed msgx.pipeline.backfill-backoff-cap-ms",
        ));
    }
    Ok(())
}

/// `mailbox.*`: the inbound and the outbound table, in the mailbox's time zone.
fn mailboxes(v: &Values) -> Result<(InboundMailbox, OutboundMailbox), ConfigError> {
    let zone = crate::clock::zone::MailboxZone::parse(&string(v, "mailbox.time-zone")?)
        .map_err(|e| bad("mailbox.time-zone", e))?;
    let inbound = InboundMailbox {
        table: string(v, "mailbox.inbound.table")?,
        id_column: string(v, "mailbox.inbound.id-column")?,
        body_column: string(v, "mailbox.inbound.body-column")?,
        received_column: string(v, "mailbox.inbound.received-column")?,
        processed_column: string(v, "mailbox.inbound.processed-column")?,
        status_column: string(v, "mailbox.inbound.status-column")?,
        status_filter: strings(v, "mailbox.inbound.status-filter")?,
        processed_status: string(v, "mailbox.inbound.processed-status")?,
        exclusive_marks: boolean(v, "mailbox.inbound.exclusive-marks")?,
        zone: zone.clone(),
    };
    // `IN ()` takes no row and is not SQL every server accepts: a filter that cannot work is
    // refused here, naming the key, not met on every poll (#53).
    if inbound.status_filter.is_empty() {
        return Err(bad(
            "mailbox.inbound.status-filter",
            "is empty: it must name at least one status of the rows msgx takes (the default is [\"VALID\"])",
        ));
    }
    let outbound = OutboundMailbox {
        table: string(v, "mailbox.outbound.table")?,
        id_column: string(v, "mailbox.outbound.id-column")?,
        body_column: string(v, "mailbox.outbound.body-column")?,
        inserted_column: string(v, "mailbox.outbound.inserted-column")?,
        routing_column: string(v, "mailbox.outbound.routing-column")?,
        zone,
    };
    Ok((inbound, outbound))
}

/// `kafka.producers.default.*`, D3 enforced.
/// `msgx.requests.*`.
fn requests(v: &Values) -> Result<RequestPolicy, ConfigError> {
    let dialect = match string(v, "msgx.requests.dialect")?.as_str() {
        "sis" => RequestDialect::Sis,
        "platform" => RequestDialect::Platform,
        other => {
            return Err(bad(
                "msgx.requests.dialect",
                format!("{other:?} is neither \"sis\" nor \"platform\""),
            ))
        }
    };
    Ok(RequestPolicy {
        dialect,
        timeout: duration(v, "msgx.requests.timeout")?,
        sender: string(v, "msgx.requests.sender")?,
        receiver: text(v, "msgx.requests.receiver")?,
        airport: text(v, "msgx.requests.airport")?,
        window_format: window_format(v)?,
        on_empty: boolean(v, "msgx.requests.on-empty")?,
        heal_tries: int(v, "msgx.requests.heal-tries")? as u16,
        heal_backoff: duration(v, "msgx.requests.heal-backoff")?,
        heal_window: heal_window(v)?,
    })
}

/// `msgx.requests.heal-window`: empty, or a window `FROM/TO` of local times, FROM not after TO.
fn heal_window(v: &Values) -> Result<Option<String>, ConfigError> {
    const KEY: &str = "msgx.requests.heal-window";
    let text = text(v, KEY)?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    let time = |t: &str| jiff::civil::DateTime::strptime("%Y-%m-%dT%H:%M", t.trim()).ok();
    match text.split_once('/').map(|(a, b)| (time(a), time(b))) {
        Some((Some(from), Some(to))) if from <= to => {
            Ok(Some(format!("{}/{}", from.strftime("%Y-%m-%dT%H:%M"), to.strftime("%Y-%m-%dT%H:%M"))))
        }
        _ => Err(bad(
            KEY,
            format!("{text:?} is not a window FROM/TO of local times yyyy-MM-ddTHH:mm, FROM not after TO"),
        )),
    }
}

/// `msgx.requests.window-format`: a strftime pattern that formats a time (an unknown directive
/// or a pattern that writes nothing is refused here, never when a request is written).
fn window_format(v: &Values) -> Result<String, ConfigError> {
    const KEY: &str = "msgx.requests.window-format";
    let pattern = string(v, KEY)?;
    let at = |d, h| jiff::fmt::strtime::format(&pattern, jiff::civil::date(2026, 3, d).at(h, 30, 0, 0));
    match (at(5, 14), at(6, 15)) {
        (Ok(a), Ok(b)) if a != b => Ok(pattern),
        (Ok(_), Ok(_)) => {
            Err(bad(KEY, format!("{pattern:?} writes no time (two different times read the same)")))
        }
        (Err(e), _) | (_, Err(e)) => Err(bad(KEY, format!("{pattern:?} is not a strftime pattern: {e}"))),
    }
}

fn producer(v: &Values) -> Result<Producer, ConfigError> {
    let producer = Producer {
        acks: string(v, "kafka.producers.default.acks")?,
        enable_idempotence: boolean(v, "kafka.producers.default.enable-idempotence")?,
        max_in_flight: int(v, "kafka.producers.default.max-in-flight-requests-per-connection")?,
        message_timeout: millis(v, "kafka.producers.default.message-timeout-ms")?,
        linger_ms: int(v, "kafka.producers.default.linger-ms")?,
        debug: text(v, "kafka.producers.default.debug")?,
    };
    // D3 is a contract, not a tuning knob: anything else is refused, never "adjusted".
    if producer.acks != "all" {
        return Err(d3("kafka.producers.default.acks", &format!("{:?}", producer.acks)));
    }
    if !producer.enable_idempotence {
        return Err(d3("kafka.producers.default.enable-idempotence", "false"));
    }
    if producer.max_in_flight != 1 {
        return Err(d3(
            "kafka.producers.default.max-in-flight-requests-per-connection",
            &producer.max_in_flight.to_string(),
        ));
    }
    Ok(producer)
}

fn compat(v: &Values) -> Result<CompatHttp, ConfigError> {
    Ok(CompatHttp {
        enabled: boolean(v, "msgx.compat-http.enabled")?,
        listen: socket_addr(v, "msgx.compat-http.listen")?,
        max_body_bytes: int(v, "msgx.compat-http.max-body-bytes")? as usize,
        read_timeout: duration(v, "msgx.compat-http.read-timeout")?,
        workers: int(v, "msgx.compat-http.workers")? as usize,
    })
}

fn lease(v: &Values) -> Result<LeasePolicy, ConfigError> {
    let lease = LeasePolicy {
        duration: duration(v, "msgx.lease.duration")?,
        renew_every: duration(v, "msgx.lease.renew-interval")?,
        stuck_after: duration(v, "msgx.watchdog.stuck-after")?,
    };
    if lease.renew_every * 3 > lease.duration {
        return Err(bad("msgx.lease.renew-interval", "must be at most a third of msgx.lease.duration"));
    }
    Ok(lease)
}

fn health(v: &Values) -> Result<Thresholds, ConfigError> {
    let health = Thresholds {
        head_age_warning: duration(v, "msgx.health.head-age-warning")?,
        head_age_critical: duration(v, "msgx.health.head-age-critical")?,
        dead_warning: int(v, "msgx.health.dead-warning")? as u64,
        dead_critical: int(v, "msgx.health.dead-critical")? as u64,
        abandoned_warning: int(v, "msgx.health.abandoned-warning")? as u64,
        abandoned_critical: int(v, "msgx.health.abandoned-critical")? as u64,
        stalled_warning: duration(v, "msgx.health.stalled-warning")?,
        stalled_critical: duration(v, "msgx.health.stalled-critical")?,
    };
    Ok(health)
}

/// `msgx.log-format`, `msgx.log-file`, `metrics.listen`.
fn logging(
    v: &Values,
) -> Result<(bool, Option<std::path::PathBuf>, Option<std::net::SocketAddr>), ConfigError> {
    let log_json = match string(v, "msgx.log-format")?.as_str() {
        "text" => false,
        "json" => true,
        other => return Err(bad("msgx.log-format", format!("{other:?} is neither \"text\" nor \"json\""))),
    };
    let log_file =
        Some(text(v, "msgx.log-file")?).filter(|f| !f.trim().is_empty()).map(std::path::PathBuf::from);
    let metrics_listen = match text(v, "metrics.listen")?.trim() {
        "" => None,
        s => Some(s.parse().map_err(|_| {
            bad(
                "metrics.listen",
                format!("{s:?} is not an ip:port address such as \"127.0.0.1:9722\" (empty: off)"),
            )
        })?),
    };
    Ok((log_json, log_file, metrics_listen))
}

/// Where Redis is (`redis.*`): one server, or the master a set of sentinels names; and how
/// durable an apply must be before it counts (`wait-replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTarget {
    pub url: String,
    /// `host:port` of each sentinel; empty: `url` is the server.
    pub sentinels: Vec<String>,
    pub master: String,
    pub sentinel_password: Option<String>,
    pub wait_replicas: u32,
    pub wait_timeout: Duration,
    /// `redis.password-file` (#64): the user's password, read at each new connection.
    pub password: Option<SecretFile>,
    /// `redis.tls-*` with a `rediss://` URL: the CA (else the system's roots), a client
    /// certificate and its key.
    pub tls_ca: Option<std::path::PathBuf>,
    pub tls_cert: Option<std::path::PathBuf>,
    pub tls_key: Option<std::path::PathBuf>,
    pub sentinel_password_file: Option<SecretFile>,
    pub sentinel_username: Option<String>,
    /// `redis.sentinel-tls`: the sentinels speak TLS, verified as the server is.
    pub sentinel_tls: bool,
}

impl RedisTarget {
    /// One server at `url`, no replicas waited for.
    pub fn single(url: &str) -> RedisTarget {
        RedisTarget {
            url: url.to_string(),
            sentinels: Vec::new(),
            master: String::new(),
            sentinel_password: None,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            password: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            sentinel_password_file: None,
            sentinel_username: None,
            sentinel_tls: false,
        }
    }
}

#[cfg(test)]
mod tests;
