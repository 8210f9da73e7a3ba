//! TLS to the stores (#64): one vocabulary for how a connection is secured — what the
//! configuration asks ([`Mode`]), what that proves, which files it reads ([`Files`]) and how msgx
//! says it ([`Tls::describe`]) — and one stack in the process, the system's OpenSSL: librdkafka
//! speaks TLS only through it, so PostgreSQL (postgres-openssl), MariaDB and Redis (native-tls,
//! OpenSSL on Linux) use it too.
//!
//! Nothing is downgraded: a mode that verifies never falls back to plaintext or to no
//! verification; a certificate from another CA, a name the certificate does not name, an
//! expired certificate or a file msgx cannot read is a refusal that names the store and the
//! reason ([`StoreErrorKind::Untrusted`]). The files are read again at each new connection, so a
//! renewed certificate is taken up at the next reconnect.

use std::collections::BTreeMap;
use std::path::PathBuf;

use openssl::ssl::{SslConnector, SslConnectorBuilder, SslFiletype, SslMethod, SslVerifyMode};

use crate::error::{Store, StoreError, StoreErrorKind};

/// What a connection that is not encrypted is called in every description of one (`msgx
/// check`, the start-up log), and what the plaintext warning looks for.
pub const PLAINTEXT: &str = "plaintext";

/// How a connection is secured, in libpq's words (MySQL's map onto them one to one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Plaintext only.
    #[default]
    Disable,
    /// TLS when the server offers it, plaintext otherwise; nothing verified (libpq's default).
    Prefer,
    /// TLS or nothing; the certificate is not verified (unless a CA file is given: then as
    /// `VerifyCa`, libpq's and MySQL's rule).
    Require,
    /// TLS, the server's certificate chain verified against the CA; its name not.
    VerifyCa,
    /// TLS, the chain verified and the host name msgx connected to named by the certificate.
    VerifyFull,
}

impl Mode {
    /// libpq's `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`).
    pub fn libpq(value: &str) -> Option<Mode> {
        Some(match value {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            _ => return None,
        })
    }

    /// The MySQL client's `ssl-mode` (`DISABLED`, `PREFERRED`, `REQUIRED`, `VERIFY_CA`,
    /// `VERIFY_IDENTITY`; any case).
    pub fn mysql(value: &str) -> Option<Mode> {
        Some(match value.to_ascii_uppercase().as_str() {
            "DISABLED" => Mode::Disable,
            "PREFERRED" => Mode::Prefer,
            "REQUIRED" => Mode::Require,
            "VERIFY_CA" => Mode::VerifyCa,
            "VERIFY_IDENTITY" => Mode::VerifyFull,
            _ => return None,
        })
    }

    /// The MySQL client's name of the mode.
    pub fn mysql_name(self) -> &'static str {
        match self {
            Mode::Disable => "DISABLED",
            Mode::Prefer => "PREFERRED",
            Mode::Require => "REQUIRED",
            Mode::VerifyCa => "VERIFY_CA",
            Mode::VerifyFull => "VERIFY_IDENTITY",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }
}

/// The files a TLS connection reads: the CA to verify the server against (else the system's
/// roots), and a client certificate with its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Files {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// A store's TLS settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub mode: Mode,
    pub files: Files,
}

impl Tls {
    /// What is verified: `require` with a CA file verifies the chain (libpq, MySQL).
    pub fn effective(&self) -> Mode {
        match self.mode {
            Mode::Require if self.files.ca.is_some() => Mode::VerifyCa,
            m => m,
        }
    }

    /// Whether the connection is encrypted whatever the server says.
    pub fn required(&self) -> bool {
        !matches!(self.mode, Mode::Disable | Mode::Prefer)
    }

    /// Checks the settings make sense: a client certificate comes with its key, a file named is
    /// a file. `what` names the keys in the message.
    pub fn check(&self, what: &str) -> Result<(), String> {
        if self.files.cert.is_some() != self.files.key.is_some() {
            return Err(format!("{what}: a client certificate needs its key and a key its certificate"));
        }
        if self.mode == Mode::Disable && self.files != Files::default() {
            return Err(format!("{what}: certificate files are named but TLS is disabled"));
        }
        Ok(())
    }

    /// One line for `msgx check` and the start-up log: how msgx connects (the server's side —
    /// the TLS version — is told by whoever asked the server).
    pub fn describe(&self) -> String {
        let verified = match self.effective() {
            Mode::Disable => return PLAINTEXT.into(),
            Mode::Prefer => "TLS if the server offers it, not verified",
            Mode::Require => "TLS, the server's certificate not verified",
            Mode::VerifyCa => "TLS, the chain verified (not the host name)",
            Mode::VerifyFull => "TLS, verified (chain and host name)",
        };
        let ca = match &self.files.ca {
            Some(p) => format!("CA {}", p.display()),
            None => "the system's CAs".into(),
        };
        let client = match &self.files.cert {
            Some(p) => format!("client certificate {}", p.display()),
            None => "no client certificate".into(),
        };
        format!("{verified}; {ca}; {client} (mode {})", self.mode.name())
    }

    /// An OpenSSL connector as the mode asks, its files read now. A file msgx cannot read is
    /// an untrusted store, named with the file.
    pub fn openssl(&self, store: Store) -> Result<SslConnectorBuilder, StoreError> {
        let untrusted = |what: &str, path: &PathBuf, e: openssl::error::ErrorStack| {
            StoreError::new(
                store,
                StoreErrorKind::Untrusted,
                format!("TLS: cannot use the {what} {}: {e}", path.display()),
            )
        };
        let mut b = SslConnector::builder(SslMethod::tls_client())
            .map_err(|e| StoreError::new(store, StoreErrorKind::Untrusted, format!("TLS: {e}")))?;
        b.set_min_proto_version(Some(openssl::ssl::SslVersion::TLS1_2))
            .map_err(|e| StoreError::new(store, StoreErrorKind::Untrusted, format!("TLS: {e}")))?;
        if let Some(ca) = &self.files.ca {
            b.set_ca_file(ca).map_err(|e| untrusted("CA file", ca, e))?;
        }
        if let (Some(cert), Some(key)) = (&self.files.cert, &self.files.key) {
            b.set_certificate_chain_file(cert).map_err(|e| untrusted("client certificate", cert, e))?;
            b.set_private_key_file(key, SslFiletype::PEM).map_err(|e| untrusted("client key", key, e))?;
            b.check_private_key().map_err(|e| untrusted("client key", key, e))?;
        }
        if matches!(self.effective(), Mode::Prefer | Mode::Require) {
            b.set_verify(SslVerifyMode::NONE);
        }
        Ok(b)
    }

    /// The CA file's bytes, for the drivers that take PEM (Redis).
    pub fn read(path: &PathBuf, what: &str, store: Store) -> Result<Vec<u8>, StoreError> {
        std::fs::read(path).map_err(|e| {
            StoreError::new(
                store,
                StoreErrorKind::Untrusted,
                format!("TLS: cannot read the {what} {}: {e}", path.display()),
            )
        })
    }
}

/// The kind of a failed connect whose error reads `detail`: untrusted when TLS refused the
/// server (an ERROR at once: it will not pass by itself), else unavailable.
pub fn connect_kind(detail: &str) -> StoreErrorKind {
    if refused(detail) {
        StoreErrorKind::Untrusted
    } else {
        StoreErrorKind::Unavailable
    }
}

/// Whether a driver's error text is a TLS refusal: the handshake failed or the certificate was
/// not trusted. Such a store is untrusted, not merely away: an ERROR at once.
pub fn refused(text: &str) -> bool {
    const SIGNS: [&str; 8] = [
        "certificate verify failed",
        "certificate has expired",
        "self-signed certificate",
        "self signed certificate",
        "unable to get local issuer certificate",
        "hostname mismatch",
        "ssl handshake",
        "tlsv1 alert",
    ];
    let lower = text.to_ascii_lowercase();
    SIGNS.iter().any(|s| lower.contains(s))
        || lower.contains("tls handshake")
        || lower.contains("ip address mismatch")
}

/// `detail` with the causes of `e` it does not say yet: a driver's "error performing TLS
/// handshake" hides why (OpenSSL's "certificate verify failed").
pub fn with_causes(detail: &str, e: &dyn std::error::Error) -> String {
    let mut out = detail.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// `connection` without the query parameters `names` (a URL's `?a=b&…`, or a key=value
/// string's `a=b`), and their values. The drivers refuse parameters they do not know; these
/// are msgx's to read.
pub fn split_params(connection: &str, names: &[&str]) -> (String, BTreeMap<String, String>) {
    let mut taken = BTreeMap::new();
    if connection.contains("://") {
        let Some((base, query)) = connection.split_once('?') else { return (connection.to_string(), taken) };
        let (query, fragment) = match query.split_once('#') {
            Some((q, f)) => (q, Some(f)),
            None => (query, None),
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if names.contains(&k) {
                taken.insert(k.to_string(), percent_decoded(v));
            } else {
                kept.push(pair);
            }
        }
        let mut out = base.to_string();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
        if let Some(f) = fragment {
            out.push('#');
            out.push_str(f);
        }
        return (out, taken);
    }
    let mut kept = Vec::new();
    for word in connection.split_whitespace() {
        match word.split_once('=') {
            Some((k, v)) if names.contains(&k) => {
                taken.insert(k.to_string(), v.trim_matches('\'').to_string());
            }
            _ => kept.push(word),
        }
    }
    (kept.join(" "), taken)
}

fn percent_decoded(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `host` is this machine (plaintext to it crosses no network).
pub fn loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.starts_with('/')
        || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_and_mysql_modes_name_the_same_five() {
        for (pq, my) in [
            ("disable", "DISABLED"),
            ("prefer", "PREFERRED"),
            ("require", "REQUIRED"),
            ("verify-ca", "VERIFY_CA"),
            ("verify-full", "VERIFY_IDENTITY"),
        ] {
            assert_eq!(Mode::libpq(pq), Mode::mysql(my));
            assert_eq!(Mode::libpq(pq).map(Mode::name), Some(pq));
        }
        assert_eq!(Mode::mysql("verify_identity"), Some(Mode::VerifyFull));
        assert_eq!(Mode::libpq("allow"), None, "libpq's allow tries plaintext first: not offered");
    }

    #[test]
    fn require_with_a_ca_verifies_the_chain() {
        let mut t = Tls { mode: Mode::Require, files: Files::default() };
        assert_eq!(t.effective(), Mode::Require);
        t.files.ca = Some("/ca.pem".into());
        assert_eq!(t.effective(), Mode::VerifyCa);
        assert!(t.describe().starts_with("TLS, the chain verified"), "{}", t.describe());
    }

    #[test]
    fn a_certificate_comes_with_its_key() {
        let t = Tls { mode: Mode::VerifyFull, files: Files { cert: Some("/c".into()), ..Files::default() } };
        assert!(t.check("x").unwrap_err().contains("needs its key"));
        let off = Tls { mode: Mode::Disable, files: Files { ca: Some("/ca".into()), ..Files::default() } };
        assert!(off.check("x").unwrap_err().contains("TLS is disabled"));
    }

    #[test]
    fn tls_parameters_are_taken_out_of_a_url_and_a_key_value_string() {
        let (url, p) = split_params(
            "postgres://u:p@h:5432/db?sslmode=verify-full&application_name=a&sslrootcert=%2Fetc%2Fca.pem",
            &["sslmode", "sslrootcert"],
        );
        assert_eq!(url, "postgres://u:p@h:5432/db?application_name=a");
        assert_eq!(p["sslmode"], "verify-full");
        assert_eq!(p["sslrootcert"], "/etc/ca.pem");
        let (url, p) = split_params("postgres://h/db?sslmode=require", &["sslmode"]);
        assert_eq!((url.as_str(), p["sslmode"].as_str()), ("postgres://h/db", "require"));
        let (kv, p) = split_params("host=h sslmode='verify-ca' user=u", &["sslmode"]);
        assert_eq!((kv.as_str(), p["sslmode"].as_str()), ("host=h user=u", "verify-ca"));
    }

    #[test]
    fn loopback_is_this_machine_only() {
        for h in ["127.0.0.1", "localhost", "[::1]", "::1", "/var/run/postgresql"] {
            assert!(loopback(h), "{h}");
        }
        for h in ["10.0.0.5", "db.airport.example", "192.168.1.1"] {
            assert!(!loopback(h), "{h}");
        }
    }
}
