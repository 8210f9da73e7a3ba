//! How msgx reaches Redis (#64): `redis.url`'s server or the master its sentinels name, with
//! the password read from `redis.password-file` at each new connection and, for a `rediss://`
//! URL, TLS verified against `redis.tls-ca-file` (else the system's roots) with the client
//! certificate, the files read at each new connection too. The sentinels are asked with their
//! own user, password and TLS (`redis.sentinel-*`). Nothing here can turn verification off.

use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

use super::classify;
use crate::config::RedisTarget;
use crate::error::{Store, StoreError, StoreErrorKind};
use crate::ports::StoreResult;
use crate::store::tls;

/// How long a sentinel may take to connect and answer.
const SENTINEL_TIMEOUT: Duration = Duration::from_secs(1);

fn untrusted(detail: impl std::fmt::Display) -> StoreError {
    StoreError::new(Store::Redis, StoreErrorKind::Untrusted, detail)
}

/// Whether `redis.url` asks for TLS.
pub fn tls_on(target: &RedisTarget) -> bool {
    target.url.starts_with("rediss://")
}

/// The certificates a TLS connection presents and verifies against, read now.
fn certificates(target: &RedisTarget) -> StoreResult<TlsCertificates> {
    let read = |p: &std::path::PathBuf, what: &str| tls::Tls::read(p, what, Store::Redis);
    let root_cert = target.tls_ca.as_ref().map(|p| read(p, "CA file (redis.tls-ca-file)")).transpose()?;
    let client_tls = match (&target.tls_cert, &target.tls_key) {
        (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
            client_cert: read(c, "client certificate (redis.tls-cert-file)")?,
            client_key: read(k, "client key (redis.tls-key-file)")?,
        }),
        _ => None,
    };
    Ok(TlsCertificates { client_tls, root_cert })
}

/// A client for `info` as `target` asks: TLS with its certificates, the password file's
/// password.
pub fn client(mut info: ConnectionInfo, target: &RedisTarget, tls_on: bool) -> StoreResult<Client> {
    if let Some(f) = &target.password {
        let pw = f.read().map_err(untrusted)?;
        info = info.clone().set_redis_settings(info.redis_settings().clone().set_password(pw));
    }
    let client =
        if tls_on { Client::build_with_tls(info, certificates(target)?) } else { Client::open(info) };
    client.map_err(|e| untrusted(format!("TLS: {}", classify::classify(&e).detail)))
}

/// `redis.url` parsed (its password kept to be replaced by the file's, when there is one).
pub fn base(target: &RedisTarget) -> StoreResult<ConnectionInfo> {
    target
        .url
        .as_str()
        .into_connection_info()
        .map_err(|e| StoreError::rejected(Store::Redis, format!("bad redis.url: {e}")))
}

/// The address of `host:port` as a connection to it should be made: TLS when `tls_on`.
pub fn addr(host: String, port: u16, tls_on: bool) -> ConnectionAddr {
    if tls_on {
        ConnectionAddr::TcpTls { host, port, insecure: false, tls_params: None }
    } else {
        ConnectionAddr::Tcp(host, port)
    }
}

/// A client for the sentinel at `s` (`host:port`): its own user and password, TLS as
/// `redis.sentinel-tls` says.
fn sentinel(s: &str, t: &RedisTarget) -> StoreResult<Client> {
    let (host, port) = s
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse().ok()?)))
        .ok_or_else(|| StoreError::rejected(Store::Redis, format!("bad sentinel address {s:?}")))?;
    let password = match (&t.sentinel_password_file, &t.sentinel_password) {
        (Some(f), _) => Some(f.read().map_err(untrusted)?),
        (None, p) => p.clone(),
    };
    let mut settings = redis::RedisConnectionInfo::default();
    if let Some(u) = &t.sentinel_username {
        settings = settings.set_username(u);
    }
    if let Some(p) = password {
        settings = settings.set_password(p);
    }
    let info = base(&RedisTarget::single("redis://127.0.0.1/"))?
        .set_addr(addr(host.to_string(), port, t.sentinel_tls))
        .set_redis_settings(settings);
    let client =
        if t.sentinel_tls { Client::build_with_tls(info, certificates(t)?) } else { Client::open(info) };
    client.map_err(|e| untrusted(format!("TLS: {}", classify::classify(&e).detail)))
}

/// A connection to Redis or a sentinel that failed: untrusted when TLS refused it (#64).
pub fn failed(e: redis::RedisError) -> StoreError {
    let detail = classify::classify(&e).detail;
    StoreError::new(Store::Redis, tls::connect_kind(&detail), detail)
}

/// Asks the sentinels, in order, where the master `name` is; the first that answers wins.
pub fn ask_sentinels(t: &RedisTarget) -> StoreResult<(String, u16)> {
    let mut why = Vec::new();
    let mut refused = false;
    for s in &t.sentinels {
        let answer = sentinel(s, t).and_then(|c| {
            let mut conn = c.get_connection_with_timeout(SENTINEL_TIMEOUT).map_err(failed)?;
            conn.set_read_timeout(Some(SENTINEL_TIMEOUT)).map_err(failed)?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&t.master)
                .query::<Option<(String, u16)>>(&mut conn)
                .map_err(failed)
        });
        match answer {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => why.push(format!("{s}: no master named {:?}", t.master)),
            Err(e) => {
                refused |= e.is_untrusted();
                why.push(format!("{s}: {}", e.detail));
            }
        }
    }
    let kind = if refused { StoreErrorKind::Untrusted } else { StoreErrorKind::Unavailable };
    Err(StoreError::new(
        Store::Redis,
        kind,
        format!("no sentinel named the master: {}", crate::secret::redact(&why.join("; "))),
    ))
}

/// How connections to `target` are secured, for `msgx check` and the start-up log (the
/// server's side of TLS is not told by Redis).
pub fn describe(target: &RedisTarget) -> String {
    if !tls_on(target) {
        return tls::PLAINTEXT.into();
    }
    let t = tls::Tls {
        mode: tls::Mode::VerifyFull,
        files: tls::Files {
            ca: target.tls_ca.clone(),
            cert: target.tls_cert.clone(),
            key: target.tls_key.clone(),
        },
    };
    t.describe()
}
