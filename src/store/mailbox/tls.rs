//! TLS to the mailbox (#64): the MySQL client's `ssl-mode`, `ssl-ca`, `ssl-cert` and `ssl-key`
//! in `mailbox.shared-mysql.url`, with the client's meaning, on the process's one TLS stack
//! (native-tls: OpenSSL). The driver takes a client certificate only as a PKCS#12 archive: the
//! PEM certificate and key are packed into one, with a random password, in a file only msgx
//! can read, for the length of the handshake.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use mysql::{ClientIdentity, DriverError, Opts, OptsBuilder, SslOpts};

use crate::error::{Store, StoreError, StoreErrorKind};
use crate::ports::StoreResult;
use crate::secret::SecretFile;
use crate::store::tls::{self, Files, Mode, Tls};

/// The URL's TLS parameters: msgx's to read (the driver refuses parameters it does not know).
pub const PARAMS: [&str; 4] = ["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"];

/// The URL's TLS parameters as msgx's settings (the MySQL client's default: PREFERRED).
pub fn settings(params: &BTreeMap<String, String>) -> Result<Tls, String> {
    let mode = match params.get("ssl-mode") {
        Some(m) => Mode::mysql(m).ok_or_else(|| {
            format!("ssl-mode={m} is not DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY")
        })?,
        None => Mode::Prefer,
    };
    let file = |k: &str| params.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let tls = Tls { mode, files: Files { ca: file("ssl-ca"), cert: file("ssl-cert"), key: file("ssl-key") } };
    tls.check("ssl-cert/ssl-key")?;
    Ok(tls)
}

/// A new connection as `tls` asks, the password read from `password` now. PREFERRED falls back
/// to plaintext only when the server offers no TLS at all; no mode that verifies falls back.
pub fn open(opts: &Opts, tls: &Tls, password: Option<&SecretFile>) -> StoreResult<mysql::Conn> {
    let mut b = OptsBuilder::from_opts(opts.clone());
    if let Some(f) = password {
        let pw = f.read().map_err(|e| StoreError::new(Store::Mailbox, StoreErrorKind::Untrusted, e))?;
        b = b.pass(Some(pw));
    }
    if tls.mode == Mode::Disable {
        return mysql::Conn::new(b).map_err(|e| failed(&e, tls));
    }
    let identity = match (&tls.files.cert, &tls.files.key) {
        (Some(cert), Some(key)) => Some(Pkcs12::write(cert, key)?),
        _ => None,
    };
    let effective = tls.effective();
    let ssl = SslOpts::default()
        .with_root_cert_path(tls.files.ca.clone().map(Cow::Owned))
        .with_danger_accept_invalid_certs(matches!(effective, Mode::Prefer | Mode::Require))
        .with_danger_skip_domain_validation(effective != Mode::VerifyFull)
        .with_client_identity(
            identity.as_ref().map(|p| ClientIdentity::new(p.path.clone()).with_password(p.password.clone())),
        );
    match mysql::Conn::new(b.clone().ssl_opts(Some(ssl))) {
        Err(mysql::Error::DriverError(DriverError::TlsNotSupported)) if tls.mode == Mode::Prefer => {
            mysql::Conn::new(b).map_err(|e| failed(&e, tls))
        }
        other => other.map_err(|e| failed(&e, tls)),
    }
}

/// A failed connect: untrusted when TLS refused the server (or the server refused plaintext),
/// else unavailable; the mode said.
fn failed(e: &mysql::Error, tls: &Tls) -> StoreError {
    let detail = super::classify::classify(e).detail;
    let refused = matches!(e, mysql::Error::TlsError(_))
        || tls::refused(&detail)
        || detail.contains("insecure transport");
    let kind = if refused { StoreErrorKind::Untrusted } else { StoreErrorKind::Unavailable };
    StoreError::new(Store::Mailbox, kind, format!("{detail} (ssl-mode={})", tls.mode.mysql_name()))
}

/// A client certificate and its key packed for the driver, removed when dropped.
struct Pkcs12 {
    path: PathBuf,
    password: String,
}

impl Pkcs12 {
    fn write(cert: &PathBuf, key: &PathBuf) -> StoreResult<Pkcs12> {
        let untrusted = |what: String| StoreError::new(Store::Mailbox, StoreErrorKind::Untrusted, what);
        let read = |p: &PathBuf, what: &str| {
            std::fs::read(p)
                .map_err(|e| untrusted(format!("TLS: cannot read the {what} {}: {e}", p.display())))
        };
        let (cert_pem, key_pem) = (read(cert, "client certificate")?, read(key, "client key")?);
        let x509 = openssl::x509::X509::from_pem(&cert_pem).map_err(|e| {
            untrusted(format!("TLS: the client certificate {} is not PEM: {e}", cert.display()))
        })?;
        let pkey = openssl::pkey::PKey::private_key_from_pem(&key_pem)
            .map_err(|e| untrusted(format!("TLS: the client key {} is not a PEM key: {e}", key.display())))?;
        let mut raw = [0u8; 24];
        openssl::rand::rand_bytes(&mut raw).map_err(|e| untrusted(format!("TLS: {e}")))?;
        let password: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let der = openssl::pkcs12::Pkcs12::builder()
            .name("msgx")
            .pkey(&pkey)
            .cert(&x509)
            .build2(&password)
            .and_then(|p| p.to_der())
            .map_err(|e| untrusted(format!("TLS: cannot pack the client certificate: {e}")))?;
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("msgx-mailbox-{}-{n}.p12", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| untrusted(format!("TLS: cannot write {}: {e}", path.display())))?;
        let packed = Pkcs12 { path, password };
        f.write_all(&der)
            .map_err(|e| untrusted(format!("TLS: cannot write {}: {e}", packed.path.display())))?;
        Ok(packed)
    }
}

impl Drop for Pkcs12 {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
