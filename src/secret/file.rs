//! Secrets read from files (#64): `datasources.default.password-file`,
//! `mailbox.shared-mysql.password-file`, `redis.password-file`, `redis.sentinel-password-file`,
//! `kafka.sasl-password-file`, `metrics.token-file`. A value with a `/` is a path; one without
//! is a credential's name in `$CREDENTIALS_DIRECTORY` (systemd's `LoadCredential=`). A file
//! that is missing, empty or readable by other users is refused, naming the key. The file is
//! read again at each new connection, so a rotated password is taken up at the next reconnect
//! without a restart; what it holds is remembered, so no output shows it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The environment variable systemd sets for a unit with `LoadCredential=`.
pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// The longest secret msgx reads: a password or a token, never a file of data.
const MAX_BYTES: u64 = 64 << 10;

/// A secret in a file, and the key that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFile {
    pub key: &'static str,
    pub path: PathBuf,
}

/// Why a secret file cannot be used; each names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("{key} = {name:?} names a credential, but ${CREDENTIALS_DIRECTORY} is not set (systemd sets it for a unit with LoadCredential=; else give a path)")]
    NoCredentials { key: &'static str, name: String },
    #[error("{key}: cannot read {path}: {detail}")]
    Unreadable { key: &'static str, path: String, detail: String },
    #[error("{key}: {path} is empty")]
    Empty { key: &'static str, path: String },
    #[error("{key}: {path} can be read by other users (mode {mode:04o}): chmod o-rwx it, or give it through systemd's LoadCredential=")]
    Exposed { key: &'static str, path: String, mode: u32 },
    #[error("{key}: {path} is larger than {MAX_BYTES} bytes: not a password")]
    TooLarge { key: &'static str, path: String },
}

impl SecretFile {
    /// `value` as configured for `key`: a path, or a credential's name (no `/`) under
    /// `credentials` (`$CREDENTIALS_DIRECTORY`). `None` for an empty value.
    pub fn resolve(
        key: &'static str,
        value: &str,
        credentials: Option<&str>,
    ) -> Result<Option<SecretFile>, SecretError> {
        if value.is_empty() {
            return Ok(None);
        }
        let path = if value.contains('/') {
            PathBuf::from(value)
        } else {
            let dir = credentials
                .filter(|d| !d.is_empty())
                .ok_or_else(|| SecretError::NoCredentials { key, name: value.to_string() })?;
            Path::new(dir).join(value)
        };
        Ok(Some(SecretFile { key, path }))
    }

    /// What the file holds, its trailing line end dropped; refused when missing, empty, too
    /// large or readable by other users. Remembered, so that no output shows it.
    pub fn read(&self) -> Result<String, SecretError> {
        let (key, path) = (self.key, self.path.display().to_string());
        let unreadable =
            |e: std::io::Error| SecretError::Unreadable { key, path: path.clone(), detail: e.to_string() };
        let meta = std::fs::metadata(&self.path).map_err(unreadable)?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o007 != 0 {
            return Err(SecretError::Exposed { key, path, mode });
        }
        if meta.len() > MAX_BYTES {
            return Err(SecretError::TooLarge { key, path });
        }
        let text = std::fs::read_to_string(&self.path).map_err(unreadable)?;
        let secret = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
        if secret.is_empty() {
            return Err(SecretError::Empty { key, path });
        }
        super::remember(secret);
        Ok(secret.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    fn dir() -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "msgx-secret-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_path_is_read_and_its_line_end_dropped() {
        let d = dir();
        let p = file(&d, "pg", "s3cret-pw\n", 0o640);
        let f = SecretFile::resolve("datasources.default.password-file", p.to_str().unwrap(), None)
            .unwrap()
            .unwrap();
        assert_eq!(f.read().unwrap(), "s3cret-pw");
        assert_eq!(crate::secret::scrub("password s3cret-pw"), "password ***", "remembered");
    }

    #[test]
    fn a_name_is_a_credential_of_systemd() {
        let d = dir();
        file(&d, "redis-password", "pw-from-systemd", 0o400);
        let f = SecretFile::resolve("redis.password-file", "redis-password", d.to_str()).unwrap().unwrap();
        assert_eq!(f.path, d.join("redis-password"));
        assert_eq!(f.read().unwrap(), "pw-from-systemd");
        let e = SecretFile::resolve("redis.password-file", "redis-password", None).unwrap_err();
        assert!(
            e.to_string().starts_with("redis.password-file = \"redis-password\" names a credential"),
            "{e}"
        );
        assert_eq!(SecretFile::resolve("redis.password-file", "", None), Ok(None));
    }

    #[test]
    fn a_file_others_can_read_a_missing_or_an_empty_one_is_refused_naming_the_key() {
        let d = dir();
        let open = file(&d, "open", "pw-world-readable", 0o644);
        let empty = file(&d, "empty", "\n", 0o600);
        let key = "kafka.sasl-password-file";
        let read = |p: &Path| SecretFile { key, path: p.to_path_buf() }.read().unwrap_err().to_string();
        let e = read(&open);
        assert!(e.starts_with(key) && e.contains("can be read by other users (mode 0644)"), "{e}");
        assert!(!e.contains("pw-world-readable"), "the secret is never said: {e}");
        let e = read(&empty);
        assert!(e.starts_with(key) && e.ends_with("is empty"), "{e}");
        let e = read(&d.join("missing"));
        assert!(e.starts_with(&format!("{key}: cannot read")), "{e}");
    }
}
