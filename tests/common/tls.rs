//! Stores that refuse plaintext (#64), made for one test: a CA and certificates the test makes
//! (a good server certificate for 127.0.0.1 and localhost, one for another host name, an expired
//! one, one from another CA, a client certificate), and TLS-only private instances of
//! PostgreSQL, MariaDB, Redis and the broker (Tansu behind stunnel4), started by
//! `tests/support/services.sh instance-tls`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use mysql::prelude::Queryable;
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName};
use openssl::x509::{X509Name, X509};

use super::{free_port, script, Services, COUNTER};

/// The password of user `msgx` on every TLS-only instance (services.sh's `TLS_SECRET`).
pub const SECRET: &str = "msgx-tls-secret";

/// A certificate and its key, as files.
#[derive(Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What the test's CA signed, and a CA nobody trusts.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub server: Pair,
    /// Signed by the CA for `other.example` only: the wrong host.
    pub wrong_host: Pair,
    /// Signed by the CA, valid for 127.0.0.1, expired yesterday.
    pub expired: Pair,
    /// A server certificate from another CA.
    pub foreign: Pair,
    pub client: Pair,
}

fn key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

fn name(cn: &str) -> X509Name {
    let mut n = X509Name::builder().unwrap();
    n.append_entry_by_text("CN", cn).unwrap();
    n.build()
}

fn serial() -> BigNum {
    BigNum::from_u32(COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1000).unwrap()
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn ca(cn: &str) -> (X509, PKey<Private>) {
    let k = key();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_serial_number(&serial().to_asn1_integer().unwrap()).unwrap();
    b.set_subject_name(&name(cn)).unwrap();
    b.set_issuer_name(&name(cn)).unwrap();
    b.set_pubkey(&k).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap()).unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap()).unwrap();
    b.append_extension(BasicConstraints::new().critical().ca().build().unwrap()).unwrap();
    b.append_extension(KeyUsage::new().critical().key_cert_sign().crl_sign().build().unwrap()).unwrap();
    b.sign(&k, MessageDigest::sha256()).unwrap();
    (b.build(), k)
}

/// A leaf signed by `issuer` for `sans` (DNS names and IP addresses), valid between the two
/// times (seconds from now).
fn leaf(
    issuer: &(X509, PKey<Private>),
    cn: &str,
    sans: &[&str],
    from: i64,
    to: i64,
) -> (X509, PKey<Private>) {
    let k = key();
    let now = unix(SystemTime::now());
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_serial_number(&serial().to_asn1_integer().unwrap()).unwrap();
    b.set_subject_name(&name(cn)).unwrap();
    b.set_issuer_name(issuer.0.subject_name()).unwrap();
    b.set_pubkey(&k).unwrap();
    b.set_not_before(&Asn1Time::from_unix(now + from).unwrap()).unwrap();
    b.set_not_after(&Asn1Time::from_unix(now + to).unwrap()).unwrap();
    b.append_extension(BasicConstraints::new().build().unwrap()).unwrap();
    b.append_extension(ExtendedKeyUsage::new().server_auth().client_auth().build().unwrap()).unwrap();
    if !sans.is_empty() {
        let mut san = SubjectAlternativeName::new();
        for s in sans {
            if s.parse::<std::net::IpAddr>().is_ok() {
                san.ip(s);
            } else {
                san.dns(s);
            }
        }
        let ext = san.build(&b.x509v3_context(Some(&issuer.0), None)).unwrap();
        b.append_extension(ext).unwrap();
    }
    b.sign(&issuer.1, MessageDigest::sha256()).unwrap();
    (b.build(), k)
}

fn write(dir: &Path, stem: &str, (cert, key): &(X509, PKey<Private>)) -> Pair {
    let pair = Pair { cert: dir.join(format!("{stem}.pem")), key: dir.join(format!("{stem}.key")) };
    std::fs::write(&pair.cert, cert.to_pem().unwrap()).unwrap();
    std::fs::write(&pair.key, key.private_key_to_pem_pkcs8().unwrap()).unwrap();
    set_mode(&pair.key, 0o600);
    pair
}

pub fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl Pki {
    pub fn new() -> Pki {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("msgx-pki-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        set_mode(&dir, 0o755);
        let root = ca("msgx test CA");
        let ca_path = dir.join("ca.pem");
        std::fs::write(&ca_path, root.0.to_pem().unwrap()).unwrap();
        let here = ["127.0.0.1", "localhost"];
        let day = 86_400;
        let server = write(&dir, "server", &leaf(&root, "server", &here, -60, 7 * day));
        let wrong_host =
            write(&dir, "wrong-host", &leaf(&root, "other.example", &["other.example"], -60, 7 * day));
        let expired = write(&dir, "expired", &leaf(&root, "expired", &here, -2 * day, -day));
        let foreign = write(&dir, "foreign", &leaf(&ca("another CA"), "server", &here, -60, 7 * day));
        let client = write(&dir, "client", &leaf(&root, "msgx", &[], -60, 7 * day));
        Pki { dir, ca: ca_path, server, wrong_host, expired, foreign, client }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TLS-only private instance of one store.
pub struct TlsStore {
    pub kind: &'static str,
    pub dir: PathBuf,
    pub port: u16,
}

impl TlsStore {
    /// Starts it with `server`'s certificate, trusting `ca` for client certificates.
    pub fn start(kind: &'static str, server: &Pair, ca: &Path) -> TlsStore {
        // Kafka takes two ports: the TLS one and, next to it, Tansu's own.
        let port = loop {
            let p = free_port();
            if kind != "kafka" || std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
                break p;
            }
        };
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("msgx-tls-{}-{n}-{kind}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        set_mode(&dir, 0o755);
        let s = TlsStore { kind, dir, port };
        s.serve(server, ca);
        s
    }

    /// Serves `server`'s certificate from now on (restarted, or reloaded: PostgreSQL).
    pub fn serve(&self, server: &Pair, ca: &Path) {
        let (d, p) = (self.dir.to_str().unwrap(), self.port.to_string());
        let (c, k, a) = (server.cert.to_str().unwrap(), server.key.to_str().unwrap(), ca.to_str().unwrap());
        script(&["instance-tls", self.kind, d, &p, c, k, a]);
    }

    /// Stopped and started again with the good certificate, its data kept.
    pub fn restart(&self, pki: &Pki) {
        self.stop();
        self.serve(&pki.server, &pki.ca);
    }

    /// Stops it (the broker: stunnel only, Tansu keeps its records); the data stays.
    pub fn stop(&self) {
        let kind = if self.kind == "kafka" { "stunnel" } else { self.kind };
        script(&["halt", kind, self.dir.to_str().unwrap()]);
    }
}

impl Drop for TlsStore {
    fn drop(&mut self) {
        script(&["halt", self.kind, self.dir.to_str().unwrap()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every store TLS-only, for one test.
pub struct TlsWorld {
    pub pki: Pki,
    pub pg: TlsStore,
    pub mysql: TlsStore,
    pub redis: TlsStore,
    pub kafka: TlsStore,
    /// The password files (mode 0600).
    pub secrets: PathBuf,
}

impl TlsWorld {
    pub fn start() -> TlsWorld {
        let pki = Pki::new();
        let start = |kind| TlsStore::start(kind, &pki.server, &pki.ca);
        let (pg, mysql, redis, kafka) = (start("pg"), start("mysql"), start("redis"), start("kafka"));
        let secrets = pki.dir.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        for name in ["pg", "mysql", "redis"] {
            let p = secrets.join(name);
            std::fs::write(&p, format!("{SECRET}\n")).unwrap();
            set_mode(&p, 0o600);
        }
        TlsWorld { pki, pg, mysql, redis, kafka, secrets }
    }

    /// Own PostgreSQL's URL (no password: the file holds it), verified in full, with the
    /// client certificate the server asks for.
    pub fn pg_url(&self, db: &str) -> String {
        let (ca, c) = (self.pki.ca.display(), &self.pki.client);
        format!(
            "postgres://msgx@127.0.0.1:{}/{db}?sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
            self.pg.port,
            c.cert.display(),
            c.key.display()
        )
    }

    pub fn mysql_url(&self, db: &str) -> String {
        let (ca, c) = (self.pki.ca.display(), &self.pki.client);
        format!(
            "mysql://msgx@127.0.0.1:{}/{db}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}&ssl-cert={}&ssl-key={}",
            self.mysql.port,
            c.cert.display(),
            c.key.display()
        )
    }

    /// MariaDB's socket: the test's own door (root, no TLS needed on it).
    pub fn mysql_socket(&self) -> PathBuf {
        self.mysql.dir.join("mysql/mysqld.sock")
    }

    pub fn redis_url(&self) -> String {
        format!("rediss://msgx@127.0.0.1:{}/", self.redis.port)
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.kafka.port)
    }

    /// Tansu's own (plaintext) listener, behind stunnel: only the test's topic tool uses it.
    pub fn inner_brokers(&self) -> String {
        format!("127.0.0.1:{}", self.kafka.port + 1)
    }

    /// The configuration's TLS keys for these stores, table by table.
    pub fn toml(&self) -> TlsToml {
        let (ca, s) = (self.pki.ca.display(), self.secrets.display());
        let client = &self.pki.client;
        TlsToml {
            tables: format!(
                "[datasources.default]\npassword-file = \"{s}/pg\"\n[mailbox.shared-mysql]\npassword-file = \"{s}/mysql\"\n"
            ),
            redis: format!(
                "password-file = \"{s}/redis\"\ntls-ca-file = \"{ca}\"\ntls-cert-file = \"{}\"\ntls-key-file = \"{}\"\n",
                client.cert.display(),
                client.key.display()
            ),
            kafka: format!(
                "security-protocol = \"ssl\"\nssl-ca-location = \"{ca}\"\nssl-certificate-location = \"{}\"\nssl-key-location = \"{}\"\n",
                client.cert.display(),
                client.key.display()
            ),
        }
    }

    /// Fresh, migrated stores for one test on these instances.
    pub fn services(&self, extra: &str) -> Services {
        self.services_with(extra, "")
    }

    /// As [`TlsWorld::services`], with more lines for `[redis]` (the sentinels).
    pub fn services_with(&self, extra: &str, redis: &str) -> Services {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("tls{}_{n}", std::process::id());
        let mut admin = pg_client(&self.pg_url("msgx"));
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let mut my = self.mysql_admin();
        my.query_drop(format!("CREATE DATABASE {name} CHARACTER SET utf8mb4")).unwrap();
        my.query_drop(format!("USE {name}")).unwrap();
        super::mailbox_fixture(&mut my);
        let topic = format!("msgx.{name}");
        super::create_topic_on(&self.inner_brokers(), &topic);
        super::create_topic_on(&self.inner_brokers(), &format!("{topic}.schd"));
        let mut toml = self.toml();
        toml.redis.push_str(redis);
        let mut s = Services::assemble(
            &name,
            extra,
            toml,
            [self.pg_url(&name), self.mysql_url(&name), self.redis_url(), self.brokers()],
        );
        s.mysql_socket = Some(self.mysql_socket());
        msgx::store::pg::migrate::migrate(&mut pg_client(&s.cfg.pg_url)).expect("migrate");
        s
    }

    pub fn mysql_admin(&self) -> mysql::Conn {
        mysql_socket(&self.mysql_socket(), None).expect("admin connection to MariaDB on its socket")
    }

    /// A Redis connection as a person with the CA would open one.
    pub fn redis(&self) -> redis::Connection {
        let info = redis::IntoConnectionInfo::into_connection_info(self.redis_url().as_str()).unwrap();
        let info = info.clone().set_redis_settings(info.redis_settings().clone().set_password(SECRET));
        let client_tls = Some(redis::ClientTlsConfig {
            client_cert: std::fs::read(&self.pki.client.cert).unwrap(),
            client_key: std::fs::read(&self.pki.client.key).unwrap(),
        });
        let certs =
            redis::TlsCertificates { client_tls, root_cert: Some(std::fs::read(&self.pki.ca).unwrap()) };
        redis::Client::build_with_tls(info, certs).unwrap().get_connection().expect("Redis over TLS")
    }

    /// A consumer's settings for the TLS listener, with the client certificate.
    pub fn consumer_tls(&self) -> Vec<(&'static str, String)> {
        vec![
            ("security.protocol", "ssl".into()),
            ("ssl.ca.location", self.pki.ca.display().to_string()),
            ("ssl.certificate.location", self.pki.client.cert.display().to_string()),
            ("ssl.key.location", self.pki.client.key.display().to_string()),
        ]
    }
}

/// Where the configuration's TLS keys go: whole tables, and lines of `[redis]` and `[kafka]`.
#[derive(Default, Clone)]
pub struct TlsToml {
    pub tables: String,
    pub redis: String,
    pub kafka: String,
}

/// A PostgreSQL client for a URL with libpq's TLS parameters (the password from the TLS-only
/// instances' secret).
pub fn pg_client(url: &str) -> postgres::Client {
    let (rest, params) =
        msgx::store::tls::split_params(url, &["sslmode", "sslrootcert", "sslcert", "sslkey"]);
    let mut config: postgres::Config = rest.parse().unwrap();
    if !params.is_empty() {
        config.password(SECRET);
        config.ssl_mode(postgres::config::SslMode::Require);
    }
    let mut b = openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls_client()).unwrap();
    if let Some(ca) = params.get("sslrootcert") {
        b.set_ca_file(ca).unwrap();
    }
    if let (Some(c), Some(k)) = (params.get("sslcert"), params.get("sslkey")) {
        b.set_certificate_chain_file(c).unwrap();
        b.set_private_key_file(k, openssl::ssl::SslFiletype::PEM).unwrap();
    }
    config.connect(postgres_openssl::MakeTlsConnector::new(b.build())).expect("PostgreSQL over TLS")
}

/// A MariaDB connection on its Unix socket as root (socket authentication), in `db` if given.
pub fn mysql_socket(socket: &Path, db: Option<&str>) -> Result<mysql::Conn, mysql::Error> {
    let opts = mysql::OptsBuilder::new()
        .socket(Some(socket.to_str().unwrap()))
        .user(Some("root"))
        .db_name(db)
        .prefer_socket(true);
    mysql::Conn::new(opts)
}
