//! msgx where the network is not trusted (#64): every store TLS-only — PostgreSQL `hostssl` with
//! scram, MariaDB `require_secure_transport` with `REQUIRE SSL`, Redis `--port 0 --tls-port`
//! with an ACL user and the default user off, the broker behind stunnel4 with a client
//! certificate required — the passwords in files, everything verified against a CA the test
//! made. Messages go through and are read back over TLS; each store restarted, a takeover and a
//! heal cost nothing; a certificate from another CA, for another host, expired, and a password
//! file others can read are each refused, word for word.

use crate::common;

use std::time::Duration;

use common::tls::{set_mode, TlsWorld};
use common::*;
use msgx::fixtures;

const SETTLED: &str = "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED' AND backfill_at IS NOT NULL";
const SENT: &str = "SELECT count(*) FROM msg_event WHERE state = 'SENT'";

fn feed(s: &Services, from: u64, to: u64) -> Vec<i64> {
    let raws: Vec<String> =
        (from..to).map(|i| fixtures::flop_stnd(i, &format!("T{}", i % 5), &format!("S{i}"))).collect();
    s.insert_inbound(&raws)
}

fn drained(s: &Services, n: i64, a: &Instance) {
    let mut pg = s.pg();
    let done =
        eventually(Duration::from_secs(90), || count(&mut pg, SETTLED) == n && count(&mut pg, SENT) == n);
    assert!(
        done,
        "not drained over TLS: {} settled, {} sent\n{}",
        count(&mut pg, SETTLED),
        count(&mut pg, SENT),
        a.log_text()
    );
}

#[test]
fn messages_flow_over_tls_only_stores_and_are_read_back_over_tls() {
    let w = TlsWorld::start();
    let s = w.services("");
    let a = Instance::run(&s, "tls", "");
    feed(&s, 1, 21);
    drained(&s, 20, &a);
    let log = a.log_text();
    // How each store is reached, as the start-up log says it.
    for line in [
        "connection store=postgres TLSv1.3",
        "connection store=mailbox TLSv1.3",
        "connection store=redis TLS, verified (chain and host name)",
        "connection store=kafka TLS, verified (chain and host name)",
    ] {
        assert!(log.contains(line), "no `{line}` in the log:\n{log}");
    }
    assert!(!log.contains("plaintext connection"), "{log}");
    // Read back over TLS: the records with a client certificate, Redis with its ACL user.
    let got = consume_with(&w.brokers(), &w.consumer_tls(), s.topic(), 20, Duration::from_secs(30));
    assert_eq!(got.len(), 20, "every record read back through the TLS listener");
    let mut redis = s.redis();
    let stand: Option<String> = redis::cmd("HGET")
        .arg(format!("{}flight:T0", s.cfg.redis_prefix))
        .arg("STND")
        .query(&mut redis)
        .unwrap();
    assert_eq!(stand.as_deref(), Some("S20"));
    println!(
        "tls: 20 messages through, 20 records read back over TLS; {}",
        log.lines().filter(|l| l.contains("connection store=")).collect::<Vec<_>>().join(" | ")
    );
    // msgx check says the same, and nothing is plaintext.
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["check"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("postgres: reachable, TLSv1.3") && out.contains("verified (chain and host name)"),
        "{out}"
    );
    // Every store asked for a client certificate, and took msgx's.
    assert!(out.contains("client certificate accepted"), "PostgreSQL saw msgx's certificate: {out}");
    for store in ["mailbox: reachable", "redis: reachable", "kafka: reachable"] {
        let line = out.lines().find(|l| l.starts_with(store)).unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains(&format!("client certificate {}", w.pki.client.cert.display())), "{line}");
    }
    assert!(!out.contains(msgx::store::tls::PLAINTEXT), "{out}");
    // No secret in any output.
    assert!(!log.contains(common::tls::SECRET) && !out.contains(common::tls::SECRET), "a secret was printed");
}

/// The servers themselves refuse plaintext: without this the suite above would prove nothing.
#[test]
fn every_tls_only_store_refuses_plaintext() {
    let w = TlsWorld::start();
    let pg = postgres::Client::connect(
        &format!("postgres://msgx:{}@127.0.0.1:{}/msgx?sslmode=disable", common::tls::SECRET, w.pg.port),
        postgres::NoTls,
    );
    let Err(e) = pg else { panic!("PostgreSQL took a plaintext session") };
    let e = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| e.to_string());
    assert!(e.contains("no pg_hba.conf entry") && e.contains("no encryption"), "{e}");
    let my = mysql::Conn::new(
        mysql::OptsBuilder::new()
            .ip_or_hostname(Some("127.0.0.1"))
            .tcp_port(w.mysql.port)
            .user(Some("msgx"))
            .pass(Some(common::tls::SECRET)),
    );
    let e = my.expect_err("MariaDB took a plaintext session").to_string();
    assert!(e.contains("insecure transport") || e.contains("Access denied"), "{e}");
    let r = redis::Client::open(format!("redis://msgx:{}@127.0.0.1:{}/", common::tls::SECRET, w.redis.port))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2));
    assert!(r.is_err(), "Redis took a plaintext session");
    let got = consume_with(&w.brokers(), &[], "any", 1, Duration::from_secs(3));
    assert!(got.is_empty(), "the broker's TLS port answered in plaintext");
    // A client certificate is required by the broker's listener.
    let no_cert =
        vec![("security.protocol", "ssl".to_string()), ("ssl.ca.location", w.pki.ca.display().to_string())];
    assert!(consume_with(&w.brokers(), &no_cert, "any", 1, Duration::from_secs(3)).is_empty());
}

/// `msgx check` against a world with one store changed by `change`, undone by `undo`: its exit
/// code and what it printed.
fn checked(s: &Services, change: impl FnOnce(), undo: impl FnOnce()) -> (Option<i32>, String) {
    change();
    let got = msgx_cli(s, &s.cfg.pg_url, &["check"]);
    undo();
    got
}

#[test]
fn another_ca_another_host_an_expired_certificate_and_a_readable_secret_are_refused_by_name() {
    let w = TlsWorld::start();
    let s = w.services("");
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["check"]);
    assert_eq!(code, Some(0), "the world is sound before anything is changed: {out}");
    let last = |out: &str| out.lines().last().unwrap_or("").to_string();
    // Another CA: PostgreSQL presents a certificate the configured CA did not sign.
    let (code, out) =
        checked(&s, || w.pg.serve(&w.pki.foreign, &w.pki.ca), || w.pg.serve(&w.pki.server, &w.pki.ca));
    println!("another CA:    exit {code:?}: {}", last(&out));
    assert_eq!(code, Some(4), "{out}");
    assert!(last(&out).contains("postgres untrusted") && out.contains("certificate verify failed"), "{out}");
    // Another host: Redis's certificate names other.example, msgx connects to 127.0.0.1.
    let (code, out) = checked(
        &s,
        || w.redis.serve(&w.pki.wrong_host, &w.pki.ca),
        || w.redis.serve(&w.pki.server, &w.pki.ca),
    );
    println!("another host:  exit {code:?}: {}", last(&out));
    assert_eq!(code, Some(4), "{out}");
    assert!(last(&out).contains("redis untrusted") && out.contains("certificate verify failed"), "{out}");
    // Expired: the mailbox's certificate ran out yesterday.
    let (code, out) =
        checked(&s, || w.mysql.serve(&w.pki.expired, &w.pki.ca), || w.mysql.serve(&w.pki.server, &w.pki.ca));
    println!("expired:       exit {code:?}: {}", last(&out));
    assert_eq!(code, Some(4), "{out}");
    assert!(last(&out).contains("mailbox untrusted") && out.contains("certificate has expired"), "{out}");
    // A password file others can read is refused before any store is asked, naming the key.
    let pw = w.secrets.join("redis");
    let (code, out) = checked(&s, || set_mode(&pw, 0o644), || set_mode(&pw, 0o600));
    println!("readable file: exit {code:?}: {}", last(&out));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "redis.password-file: {} can be read by other users (mode 0644)",
            pw.display()
        )),
        "{out}"
    );
    // Nothing changed any more: sound again, and no secret was ever printed.
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["check"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains(common::tls::SECRET));
}

/// A store whose certificate is refused while msgx runs: ERROR at once naming the store and the
/// reason, waited out as an outage (nothing charged), `/ready` not ready; the certificate
/// renewed on the server heals it without a restart.
#[test]
fn an_expired_certificate_is_an_untrusted_store_until_it_is_renewed() {
    let w = TlsWorld::start();
    let s = w.services("reconnect-backoff-cap-ms = 500\n");
    let a = Instance::run(&s, "expired", "");
    feed(&s, 1, 6);
    drained(&s, 5, &a);
    let addr = endpoint(&a);
    w.redis.serve(&w.pki.expired, &w.pki.ca);
    feed(&s, 6, 11);
    assert!(
        a.wait_for_log("store not trusted store=redis", Duration::from_secs(30)),
        "no ERROR for the expired certificate:\n{}",
        a.log_text()
    );
    let log = a.log_text();
    let line = log.lines().find(|l| l.contains("store not trusted store=redis")).unwrap();
    println!("refused: {line}");
    assert!(line.contains("ERROR") && line.contains("certificate has expired"), "{line}");
    let (status, body) = http_get(&addr, "/ready");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("store-away"), "{body}");
    w.redis.serve(&w.pki.server, &w.pki.ca);
    drained(&s, 10, &a);
    let mut pg = s.pg();
    assert_eq!(
        count(&mut pg, "SELECT count(*) FROM proc_state WHERE attempts > 0 OR state = 'DEAD'"),
        0,
        "nothing charged"
    );
    assert!(a.wait_for_log("store available again store=redis", Duration::from_secs(10)), "{}", a.log_text());
    assert!(!a.log_text().contains("forgot"), "a renewed certificate is no forget:\n{}", a.log_text());
}

/// The end-to-end faults over TLS: each store restarted while messages arrive, a heal (Redis
/// 7.0 restarted with the default user off replays none of msgx's MULTI/EXEC writes from its
/// AOF — redis#14541 —: a store that forgets, found and healed), and a takeover by a standby
/// after SIGKILL. Every message SUCCEEDED once, Redis holds the flights the messages make.
#[test]
fn each_tls_store_restarted_a_heal_and_a_takeover_cost_no_message() {
    let w = TlsWorld::start();
    let s = w.services("reconnect-backoff-cap-ms = 500\n");
    let lease = "[msgx.lease]\nduration = \"3s\"\nrenew-interval = \"1s\"\n";
    let a = Instance::run(&s, "a", lease);
    assert!(a.wait_for_log("lease acquired epoch=1", Duration::from_secs(30)), "{}", a.log_text());
    let b = Instance::run(&s, "b", lease);
    assert!(b.wait_for_log("standby: lease held by", Duration::from_secs(30)), "{}", b.log_text());
    let n = std::cell::Cell::new(0u64);
    let more = |k: u64| {
        feed(&s, n.get() + 1, n.get() + 1 + k);
        n.set(n.get() + k);
        n.get() as i64
    };
    drained(&s, more(10), &a);
    for store in [&w.pg, &w.mysql, &w.kafka] {
        store.stop();
        let name = if store.kind == "mysql" {
            "mailbox"
        } else if store.kind == "pg" {
            "postgres"
        } else {
            store.kind
        };
        // The upstream writes to the mailbox: while that one is away, it writes after.
        let during = if store.kind == "mysql" { n.get() as i64 } else { more(5) };
        if store.kind == "kafka" {
            // The pump needs no broker: the messages are decided while their events wait.
            let mut pg = s.pg();
            let decided = "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'";
            assert!(
                eventually(Duration::from_secs(60), || count(&mut pg, decided) == during),
                "{}",
                a.log_text()
            );
        } else {
            let noticed = format!("store unavailable store={name}");
            assert!(a.wait_for_log(&noticed, Duration::from_secs(30)), "{}", a.log_text());
        }
        store.serve(&w.pki.server, &w.pki.ca);
        let during = if store.kind == "mysql" { more(5) } else { during };
        drained(&s, during, &a);
        println!("tls: {} restarted, {during} messages settled", store.kind);
    }
    w.redis.restart(&w.pki);
    drained(&s, more(5), &a);
    assert!(
        a.log_text().contains("consistency: redis behind") || a.log_text().contains("redis forgot"),
        "Redis came back without msgx's writes and nobody noticed:\n{}",
        a.log_text()
    );
    assert_eq!(redis_flights(&s), reference_flights(&s), "healed: the flights the messages make");
    println!("tls: redis restarted (forgot, healed), 30 messages settled");
    a.signal("-KILL");
    assert!(b.wait_for_log("lease acquired epoch=", Duration::from_secs(30)), "{}", b.log_text());
    drained(&s, more(5), &b);
    assert_eq!(redis_flights(&s), reference_flights(&s));
    let mut pg = s.pg();
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE attempts > 0 OR state = 'DEAD'"), 0);
    println!("tls: takeover after SIGKILL, 35 messages settled, every one once");
}

/// A password given as a systemd credential (`LoadCredential=`): a name without `/` is read from
/// `$CREDENTIALS_DIRECTORY`; without it the key is refused, named.
#[test]
fn a_password_from_systemd_credentials() {
    let w = TlsWorld::start();
    let s = w.services("");
    let dir = std::env::temp_dir().join(format!("msgx-instances-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("credentials.toml");
    let by_name = s.toml.replace(&format!("\"{}/pg\"", w.secrets.display()), "\"pg\"");
    assert_ne!(by_name, s.toml, "the PostgreSQL password is now named, not a path");
    std::fs::write(&config, by_name).unwrap();
    let check = |credentials: Option<&std::path::Path>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_msgx"));
        c.args(["--config", config.to_str().unwrap(), "check"])
            .env("MSGX_PG_URL", &s.cfg.pg_url)
            .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
            .env("MSGX_REDIS_URL", &s.cfg.redis_url)
            .env("MSGX_KAFKA_BROKERS", &s.cfg.kafka_brokers)
            .env_remove("CREDENTIALS_DIRECTORY");
        if let Some(d) = credentials {
            c.env("CREDENTIALS_DIRECTORY", d);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (code, out) = check(Some(&w.secrets));
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = check(None);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("datasources.default.password-file = \"pg\" names a credential, but $CREDENTIALS_DIRECTORY is not set"),
        "{out}"
    );
}

/// The sentinels too (#64): a TLS-only Sentinel that asks for a client certificate and its own
/// ACL user (the default user off) names the TLS-only master; msgx asks it over TLS, then reaches
/// the master it names over verified TLS, and messages flow.
#[test]
fn the_master_named_by_a_tls_only_sentinel_is_reached_over_tls() {
    let w = TlsWorld::start();
    let sentinel_dir = w.pki.dir.join("sentinel");
    let sentinel_port = free_port();
    let (p, c) = (&w.pki.server, &w.pki.ca);
    let args = [
        "sentinel-tls",
        sentinel_dir.to_str().unwrap(),
        &sentinel_port.to_string(),
        &w.redis.port.to_string(),
        "msgxtls",
        p.cert.to_str().unwrap(),
        p.key.to_str().unwrap(),
        c.to_str().unwrap(),
    ]
    .map(str::to_string);
    script(&args.iter().map(String::as_str).collect::<Vec<_>>());
    struct Halt(std::path::PathBuf);
    impl Drop for Halt {
        fn drop(&mut self) {
            let _ =
                std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh"))
                    .args(["halt", "sentinel", self.0.to_str().unwrap()])
                    .output();
        }
    }
    let _halt = Halt(sentinel_dir);
    let sentinels = format!(
        "sentinels = [\"127.0.0.1:{sentinel_port}\"]\nsentinel-master = \"msgxtls\"\nsentinel-tls = true\nsentinel-username = \"msgx\"\nsentinel-password-file = \"{}/redis\"\n",
        w.secrets.display()
    );
    let s = w.services_with("", &sentinels);
    let a = Instance::run(&s, "sentinel", "");
    feed(&s, 1, 11);
    drained(&s, 10, &a);
    let (code, out) = msgx_cli(&s, &s.cfg.pg_url, &["check"]);
    assert_eq!(code, Some(0), "{out}");
    let line = out.lines().find(|l| l.starts_with("redis replication")).unwrap_or_else(|| panic!("{out}"));
    println!("tls sentinel: {line}");
    assert!(line.contains("role=master") && line.contains("the master the sentinels name"), "{line}");
}
