//! Shared set-up of the integration tests: every test gets its own PostgreSQL database, its
//! own MariaDB database, its own Redis key prefix and its own Kafka topic, so tests run in
//! parallel without seeing each other. The services come from `tests/support/services.sh`.
#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use msgx::config::Config;
use msgx::store::flights::RedisFlights;
use msgx::store::mailbox::MysqlMailbox;
use msgx::store::pg::Pg;

pub mod captured;
pub mod tls;

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: integration tests need the local services. Run them with \
             `tests/run.sh`, or start them with `eval \"$(tests/support/services.sh start)\"`"
        )
    })
}

/// Replaces the database (path) of a URL.
fn with_db(url: &str, db: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("URL has a path");
    format!("{base}/{db}")
}

pub struct Services {
    pub name: String,
    pub cfg: Config,
    /// The configuration file text (the URLs come from the environment, see [`Instance`]).
    pub toml: String,
    pg_admin: String,
    mysql_admin: String,
    /// A TLS-only MariaDB's socket, the test's own way in (its users need a client certificate).
    pub mysql_socket: Option<std::path::PathBuf>,
}

/// Where a test's stores live: the shared services by default, or private instances.
#[derive(Default)]
pub struct Stores {
    pub pg: Option<String>,
    pub mysql: Option<String>,
    pub redis: Option<String>,
    pub kafka: Option<String>,
}

impl Services {
    /// Fresh, migrated stores for one test. `extra` is TOML added to the configuration.
    pub fn new(extra: &str) -> Services {
        Services::on(extra, Stores::default())
    }

    /// Fresh stores for one test on `stores` (admin URLs; the shared services where `None`).
    pub fn on(extra: &str, stores: Stores) -> Services {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // The pid alone repeats across runs, and the broker keeps its topics: the start time
        // makes the name this run's.
        let started = std::time::UNIX_EPOCH.elapsed().unwrap_or_default().as_millis() % 1_000_000_000;
        let name = format!("t{}_{}_{started}", std::process::id(), n);
        let pg_admin = stores.pg.clone().unwrap_or_else(|| env("MSGX_PG_URL"));
        let mysql_admin = stores.mysql.clone().unwrap_or_else(|| env("MSGX_MYSQL_URL"));
        let brokers = stores.kafka.clone().unwrap_or_else(|| env("MSGX_KAFKA_BROKERS"));
        let mut admin =
            postgres::Client::connect(&pg_admin, postgres::NoTls).expect("admin connection to PostgreSQL");
        admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create test database");
        let mut my = mysql::Conn::new(mysql::Opts::from_url(&mysql_admin).unwrap())
            .expect("admin connection to MariaDB");
        my.query_drop(format!("CREATE DATABASE {name} CHARACTER SET utf8mb4")).unwrap();
        my.query_drop(format!("USE {name}")).unwrap();
        mailbox_fixture(&mut my);
        let topic = format!("msgx.{name}");
        create_topic_on(&brokers, &topic);
        create_topic_on(&brokers, &format!("{topic}.schd"));
        let urls = [
            with_db(&pg_admin, &name),
            with_db(&mysql_admin, &name),
            stores.redis.clone().unwrap_or_else(|| env("MSGX_REDIS_URL")),
            brokers,
        ];
        let mut s = Services::assemble(&name, extra, tls::TlsToml::default(), urls);
        (s.pg_admin, s.mysql_admin) = (pg_admin, mysql_admin);
        s
    }

    /// A test's configuration on stores made already: the URLs (own PostgreSQL, the mailbox,
    /// Redis, the brokers), `extra` in `[msgx.pipeline]`, and the TLS keys where they belong.
    pub fn assemble(name: &str, extra: &str, tls: tls::TlsToml, urls: [String; 4]) -> Services {
        let topic = format!("msgx.{name}");
        register_schemas(&topic, &format!("{topic}.schd"));
        // Tests poll fast unless they say otherwise; `extra` lands in [msgx.pipeline]. 100 ms, not
        // 50 (#66): an idle instance at 50 ms keeps 12 % of a core busy (itself, PostgreSQL and
        // MariaDB), at 200 ms 6 %, and a run has several at a time on two cores.
        let poll = if extra.contains("poll-interval") { "" } else { "poll-interval = \"100ms\"\n" };
        // A first start asks the AODB for today's flights (`msgx.requests.on-empty`, #41): a
        // COUTMSGS event every test would count. Off unless a test says otherwise.
        let extra = match (extra.contains("on-empty"), extra.contains("[msgx.requests]")) {
            (true, _) => extra.to_string(),
            (false, true) => extra.replacen("[msgx.requests]\n", "[msgx.requests]\non-empty = false\n", 1),
            (false, false) => format!("{extra}\n[msgx.requests]\non-empty = false\n"),
        };
        let kafka = if tls.kafka.is_empty() { String::new() } else { format!("[kafka]\n{}", tls.kafka) };
        let text = format!(
            "{kafka}[kafka.topics]\nmsg = \"{topic}\"\nschd = \"{topic}.schd\"\n[redis]\nkey-prefix = \"{name}:\"\n{}\
             [metrics]\nlisten = \"127.0.0.1:0\"\n{}[msgx.pipeline]\n{poll}{extra}",
            tls.redis, tls.tables
        );
        let [pg_url, mysql_url, redis_url, brokers] = urls;
        let cfg = Config::from_toml_str(&text, |k| match k {
            "MSGX_PG_URL" => Some(pg_url.clone()),
            "MSGX_MYSQL_URL" => Some(mysql_url.clone()),
            "MSGX_REDIS_URL" => Some(redis_url.clone()),
            "MSGX_KAFKA_BROKERS" => Some(brokers.clone()),
            _ => std::env::var(k).ok(),
        })
        .expect("test configuration");
        Services {
            name: name.to_string(),
            cfg,
            toml: text,
            pg_admin: String::new(),
            mysql_admin: String::new(),
            mysql_socket: None,
        }
    }

    pub fn migrated(extra: &str) -> Services {
        Services::migrated_on(extra, Stores::default())
    }

    pub fn migrated_on(extra: &str, stores: Stores) -> Services {
        let s = Services::on(extra, stores);
        let mut pg = s.pg();
        msgx::store::pg::migrate::migrate(&mut pg).expect("migrate");
        s
    }

    pub fn pg(&self) -> postgres::Client {
        tls::pg_client(&self.cfg.pg_url)
    }

    pub fn mysql(&self) -> mysql::Conn {
        self.try_mysql().expect("test MariaDB")
    }

    /// The test's mailbox database; over TLS (the instance's CA, its password) when the URL asks.
    fn try_mysql(&self) -> Result<mysql::Conn, mysql::Error> {
        if let Some(socket) = &self.mysql_socket {
            return tls::mysql_socket(socket, Some(&self.name));
        }
        let (rest, params) = msgx::store::tls::split_params(&self.cfg.mysql_url, &["ssl-mode", "ssl-ca"]);
        let mut opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(&rest).unwrap());
        if let Some(ca) = params.get("ssl-ca") {
            let ca = std::path::PathBuf::from(ca);
            opts = opts.pass(Some(tls::SECRET)).ssl_opts(Some(
                mysql::SslOpts::default().with_root_cert_path(Some(std::borrow::Cow::Owned(ca))),
            ));
        }
        mysql::Conn::new(opts)
    }

    pub fn redis(&self) -> redis::Connection {
        self.try_redis().expect("test Redis")
    }

    /// The test's Redis, over TLS when it is a TLS-only one, or why not.
    pub fn try_redis(&self) -> redis::RedisResult<redis::Connection> {
        if self.cfg.redis_url.starts_with("rediss://") {
            let info = redis::IntoConnectionInfo::into_connection_info(self.cfg.redis_url.as_str())?;
            let info =
                info.clone().set_redis_settings(info.redis_settings().clone().set_password(tls::SECRET));
            let ca = self.cfg.redis.tls_ca.as_ref().map(|p| std::fs::read(p).unwrap());
            let client_tls = match (&self.cfg.redis.tls_cert, &self.cfg.redis.tls_key) {
                (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                    client_cert: std::fs::read(c).unwrap(),
                    client_key: std::fs::read(k).unwrap(),
                }),
                _ => None,
            };
            let certs = redis::TlsCertificates { client_tls, root_cert: ca };
            return redis::Client::build_with_tls(info, certs)?.get_connection();
        }
        redis::Client::open(self.cfg.redis_url.as_str())?.get_connection()
    }

    /// Deletes every key under the test's prefix (`SCAN`, `UNLINK`): how many there were.
    pub fn forget_redis_keys(&self) -> redis::RedisResult<usize> {
        let mut c = self.try_redis()?;
        let pattern = format!("{}*", self.cfg.redis_prefix);
        let keys: Vec<String> =
            redis::Commands::scan_match::<_, String>(&mut c, &pattern)?.collect::<Result<_, _>>()?;
        for chunk in keys.chunks(1000) {
            redis::cmd("UNLINK").arg(chunk).query::<()>(&mut c)?;
        }
        Ok(keys.len())
    }

    /// Inserts one message as the upstream does, or says why the mailbox did not take it.
    pub fn try_insert_inbound(&self, raw: &str) -> Result<i64, mysql::Error> {
        let mut my = self.try_mysql()?;
        my.exec_drop(
            "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
            (raw,),
        )?;
        Ok(my.last_insert_id() as i64)
    }

    /// Inserts messages into the inbound mailbox as the upstream does; returns their IDs.
    pub fn insert_inbound(&self, raws: &[String]) -> Vec<i64> {
        let mut my = self.mysql();
        let mut ids = Vec::new();
        for raw in raws {
            my.exec_drop(
                "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
                (raw,),
            )
            .unwrap();
            ids.push(my.last_insert_id() as i64);
        }
        ids
    }

    /// A poller on this test's stores, on the wall clock.
    pub fn poller(
        &self,
        stats: &std::sync::Arc<msgx::stats::Stats>,
    ) -> msgx::ingress::Poller<Pg, MysqlMailbox> {
        self.poller_at(stats, std::sync::Arc::new(msgx::clock::SystemClock))
    }

    /// A poller on this test's stores, reading `clock` (the one its rounds are given).
    pub fn poller_at(
        &self,
        stats: &std::sync::Arc<msgx::stats::Stats>,
        clock: std::sync::Arc<dyn msgx::clock::Clock>,
    ) -> msgx::ingress::Poller<Pg, MysqlMailbox> {
        msgx::ingress::Poller::new(
            Pg::connect(&self.cfg.pg_url).unwrap(),
            MysqlMailbox::connect(&self.cfg.mysql_url, &self.cfg.inbound).unwrap(),
            &self.cfg.pipeline,
            stats.clone(),
            clock,
        )
    }

    /// A pump on this test's stores, on the wall clock.
    pub fn pump(
        &self,
        stats: &std::sync::Arc<msgx::stats::Stats>,
    ) -> msgx::pump::Pump<Pg, MysqlMailbox, RedisFlights> {
        self.pump_at(stats, std::sync::Arc::new(msgx::clock::SystemClock))
    }

    /// A pump on this test's stores, reading `clock` (the one its rounds are given).
    pub fn pump_at(
        &self,
        stats: &std::sync::Arc<msgx::stats::Stats>,
        clock: std::sync::Arc<dyn msgx::clock::Clock>,
    ) -> msgx::pump::Pump<Pg, MysqlMailbox, RedisFlights> {
        msgx::pump::Pump::new(
            Pg::connect(&self.cfg.pg_url).unwrap(),
            MysqlMailbox::connect(&self.cfg.mysql_url, &self.cfg.inbound).unwrap(),
            RedisFlights::connect(&self.cfg.redis_url, &self.cfg.redis_prefix).unwrap(),
            &self.cfg.pipeline,
            msgx::codec::Rulebook::this_release(),
            stats.clone(),
            clock,
        )
    }

    pub fn topic(&self) -> &str {
        &self.cfg.topic_msg
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        // Best effort: a failed test keeps nothing worth the disk. Stores made for the test
        // alone (TLS-only instances) go with it.
        if self.pg_admin.is_empty() {
            return;
        }
        if let Ok(mut admin) = postgres::Client::connect(&self.pg_admin, postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
        if let Ok(mut my) = mysql::Conn::new(mysql::Opts::from_url(&self.mysql_admin).unwrap()) {
            let _ = my.query_drop(format!("DROP DATABASE IF EXISTS {}", self.name));
        }
        // The test's keys in the shared Redis: left behind, every later test's SCAN for its own
        // prefix walks them all (a run left ~150 000, and the heals of later runs slowed, #66).
        if !self.cfg.redis_url.starts_with("rediss://") {
            let _ = self.forget_redis_keys();
        }
    }
}

/// The mailbox tables (`sql/fixtures/mailbox.sql`) in the connection's database.
pub fn mailbox_fixture(my: &mut mysql::Conn) {
    for stmt in include_str!("../../sql/fixtures/mailbox.sql").split(';') {
        let body: String =
            stmt.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
        if !body.trim().is_empty() {
            my.query_drop(&body).expect("fixture DDL");
        }
    }
}

/// The published schemas for a test's two topics, where every broker the tests start reads its
/// registry (`MSGX_SCHEMA_REGISTRY`, tests/support/services.sh): a record msgx writes that does
/// not match its schema is refused at the broker, and the test sees it (#67).
pub fn register_schemas(msg: &str, schd: &str) {
    let dir = std::path::PathBuf::from(env("MSGX_SCHEMA_REGISTRY"));
    msgx::schema::write_registry(&dir, msg, schd).expect("write the broker's schema registry");
}

pub fn create_topic(topic: &str) {
    create_topic_on(&env("MSGX_KAFKA_BROKERS"), topic)
}

pub fn create_topic_on(brokers: &str, topic: &str) {
    let tansu = env("MSGX_TANSU");
    let broker = format!("tcp://{brokers}");
    let out = Command::new(&tansu)
        .args(["topic", "create", topic, "--partitions", "1", "--broker", &broker])
        .output()
        .expect("run tansu topic create");
    assert!(out.status.success(), "tansu topic create {topic}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A record as a consumer reads it.
#[derive(Debug, Clone)]
pub struct Consumed {
    /// Where the record lies: what a delivery receipt must name (#40).
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub payload: serde_json::Value,
    pub headers: Vec<(String, String)>,
}

impl Consumed {
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers.iter().find(|(h, _)| h == k).map(|(_, v)| v.as_str())
    }
}

/// Reads partition 0 of `topic` from the beginning until `want` records or `deadline`.
pub fn consume(topic: &str, want: usize, deadline: Duration) -> Vec<Consumed> {
    consume_from(&env("MSGX_KAFKA_BROKERS"), topic, want, deadline)
}

/// Reads partition 0 of `topic` from the beginning until `want` distinct `event_id`s (at least
/// once: duplicates are read too and returned) or `deadline`.
pub fn consume_distinct(brokers: &str, topic: &str, want: usize, deadline: Duration) -> Vec<Consumed> {
    consume_until(brokers, topic, deadline, |got| {
        got.iter().filter_map(|r| r.header("event_id")).collect::<std::collections::BTreeSet<_>>().len()
            >= want
    })
}

pub fn consume_from(brokers: &str, topic: &str, want: usize, deadline: Duration) -> Vec<Consumed> {
    consume_until(brokers, topic, deadline, |got| got.len() >= want)
}

fn consume_until(
    brokers: &str,
    topic: &str,
    deadline: Duration,
    done: impl Fn(&[Consumed]) -> bool,
) -> Vec<Consumed> {
    consume_over(brokers, &[], topic, deadline, done)
}

/// Reads partition 0 of `topic` from the beginning until `want` records or `deadline`, with
/// the consumer's `settings` (TLS, #64).
pub fn consume_with(
    brokers: &str,
    settings: &[(&'static str, String)],
    topic: &str,
    want: usize,
    deadline: Duration,
) -> Vec<Consumed> {
    consume_over(brokers, settings, topic, deadline, |got| got.len() >= want)
}

fn consume_over(
    brokers: &str,
    settings: &[(&'static str, String)],
    topic: &str,
    deadline: Duration,
    done: impl Fn(&[Consumed]) -> bool,
) -> Vec<Consumed> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", brokers)
        .set("group.id", format!("msgx-test-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (k, v) in settings {
        cc.set(*k, v);
    }
    let consumer: BaseConsumer = cc.create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&tpl).expect("assign");
    let start = Instant::now();
    let mut out = Vec::new();
    while !done(&out) && start.elapsed() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|x| {
                                (
                                    x.key.to_string(),
                                    String::from_utf8_lossy(x.value.unwrap_or_default()).into_owned(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Consumed {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                    payload: serde_json::from_slice(m.payload().unwrap_or_default()).expect("JSON payload"),
                    headers,
                });
            }
            Some(Err(e)) => eprintln!("consumer: {e}"),
            None => {}
        }
    }
    out
}

/// Waits (at most a minute) until every `(count query, value)` of `counts` holds on `s`'s own
/// PostgreSQL; fails with `a`'s log otherwise.
pub fn settled(s: &Services, a: &Instance, counts: &[(&str, i64)]) {
    let mut pg = s.pg();
    let done = eventually(Duration::from_secs(60), || counts.iter().all(|(q, n)| count(&mut pg, q) == *n));
    assert!(done, "{counts:?} did not come to hold:\n{}", a.log_text());
}

/// An operator command (`msgx ARGS`) on `s`'s configuration and stores, as an operator runs it.
pub fn operator_command(s: &Services, args: &[&str]) -> std::process::Output {
    let file = std::env::temp_dir().join(format!("msgx-operator-{}.toml", s.name));
    std::fs::write(&file, &s.toml).unwrap();
    Command::new(env!("CARGO_BIN_EXE_msgx"))
        .arg("--config")
        .arg(&file)
        .args(args)
        .env("MSGX_PG_URL", &s.cfg.pg_url)
        .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
        .env("MSGX_REDIS_URL", &s.cfg.redis_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run msgx")
}

/// Events SENT, as [`settled`] counts them.
pub const SENT: &str = "SELECT count(*) FROM msg_event WHERE state = 'SENT'";

/// Polls `check` every 50 ms until it returns true or `deadline` passes; true on success.
/// (Waiting for a condition, not asserting a duration: the deadline only bounds a failure.)
pub fn eventually(deadline: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if check() {
            return true;
        }
        if start.elapsed() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A daemon run on a thread of the test: dropping the sender stops it.
pub type Daemon =
    (crossbeam_channel::Sender<()>, std::thread::JoinHandle<Result<(), msgx::daemon::DaemonError>>);

/// Runs the daemon of this release on its own thread; dropping the returned sender stops it.
pub fn start_daemon(cfg: &Config) -> Daemon {
    start_daemon_with(cfg, msgx::codec::Rulebook::this_release())
}

/// Runs the daemon on its own thread deciding under `rules` (another release's rulebook, #65).
pub fn start_daemon_with(cfg: &Config, rules: std::sync::Arc<msgx::codec::Rulebook>) -> Daemon {
    // The daemon's log lines show with a failing test (nextest keeps them otherwise).
    let _ = env_logger::builder().is_test(true).filter_level(log::LevelFilter::Info).try_init();
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    let cfg = cfg.clone();
    let h = std::thread::spawn(move || {
        msgx::daemon::run(
            &cfg,
            rules,
            std::sync::Arc::new(msgx::clock::SystemClock),
            rx,
            std::sync::Arc::new(msgx::ops::notify::Notifier::off()),
        )
    });
    (tx, h)
}

/// Whether a test that cannot run here must fail instead of passing: under CI (`CI=true`) the
/// public samples are laid beside the repository, so their absence is a broken set-up, never
/// a reason to pass (#21 item 9).
pub fn must_run() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// A missing input: fails under CI, otherwise says why the test does nothing and lets it pass.
pub fn missing(what: &str) {
    assert!(!must_run(), "{what}: under CI this test must run, not pass without its input");
    println!("skipped: {what}");
}

/// The wall clock's now (integration tests run on real time).
pub fn now() -> std::time::SystemTime {
    use msgx::clock::Clock;
    msgx::clock::SystemClock.now()
}

/// Records outcomes as the pump's commit does.
pub fn record(pg: &mut Pg, settles: &[msgx::ports::Settle], at: std::time::SystemTime) {
    use msgx::ports::Fifo;
    pg.commit(&msgx::ports::RoundRecord::of(settles), at).expect("commit");
}

/// Enqueues mailbox ids as the poller does, moving the watermark to the highest.
pub fn enqueue(pg: &mut Pg, ids: &[i64], at: std::time::SystemTime) {
    use msgx::ports::Intake;
    let rows: Vec<msgx::domain::InboundRow> =
        ids.iter().map(|&id| msgx::domain::InboundRow { id, received_at: None }).collect();
    pg.enqueue(&rows, ids.iter().max().copied(), at).expect("enqueue");
}

pub fn count(pg: &mut postgres::Client, sql: &str) -> i64 {
    pg.query_one(sql, &[]).unwrap().get(0)
}

/// A private Tansu broker on its own port, for tests that stop and start a broker.
pub struct Broker {
    pub port: u16,
    child: Option<std::process::Child>,
}

impl Broker {
    pub fn start() -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut b = Broker { port, child: None };
        b.restart();
        b
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port, with empty in-memory storage.
    pub fn restart(&mut self) {
        self.stop();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let child = Command::new(env("MSGX_TANSU"))
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start tansu");
        self.child = Some(child);
        let up = eventually(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
        assert!(up, "private tansu did not listen on {}", self.port);
    }

    /// Freezes the broker (SIGSTOP): it accepts connections and answers nothing.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Thaws a frozen broker (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private PostgreSQL, MariaDB or Redis for a test that stops or restarts it, started by
/// `tests/support/services.sh instance` on its own port and directory; the shared services are
/// never touched. Dropped: stopped and removed.
pub struct Private {
    kind: &'static str,
    dir: std::path::PathBuf,
    pub port: u16,
}

impl Private {
    pub fn start(kind: &'static str) -> Private {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("msgx-private-{}-{n}-{kind}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut perms = std::fs::metadata(&dir).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&dir, perms).unwrap();
        let p = Private { kind, dir, port };
        p.restart();
        p
    }

    fn script(&self, args: &[&str]) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh");
        let out = Command::new(script).args(args).output().expect("run services.sh");
        assert!(
            out.status.success(),
            "services.sh {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts it (again), on the same port with the same data.
    pub fn restart(&self) {
        self.script(&["instance", self.kind, self.dir.to_str().unwrap(), &self.port.to_string()]);
    }

    /// Stops it; the data stays.
    pub fn stop(&self) {
        self.script(&["halt", self.kind, self.dir.to_str().unwrap()]);
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the server (PostgreSQL: the postmaster and every
    /// backend): it keeps its connections and accepts new ones, but answers nothing — a hang,
    /// not a refusal.
    pub fn signal(&self, sig: &str) {
        let pidfile = match self.kind {
            "mysql" => self.dir.join("mysql/mysqld.pid"),
            "redis" => self.dir.join("redis/redis.pid"),
            _ => self.dir.join("pg/data/postmaster.pid"),
        };
        let text = std::fs::read_to_string(&pidfile).expect("pid file");
        let pid = text.lines().next().unwrap_or("").trim().to_string();
        let mut pids = vec![pid.clone()];
        if self.kind == "pg" {
            let children = Command::new("pgrep").args(["-P", &pid]).output().expect("pgrep");
            pids.extend(String::from_utf8_lossy(&children.stdout).split_whitespace().map(str::to_string));
        }
        for (i, p) in pids.iter().enumerate() {
            let sent = Command::new("kill").args([sig, p]).status().unwrap().success();
            // A backend may end between `pgrep` and `kill` (its client went away while it was
            // frozen, and a thawed sibling let it go): only the server's own process must take it.
            let gone = i > 0 && !std::path::Path::new(&format!("/proc/{p}")).exists();
            assert!(sent || gone, "kill {sig} {p}");
        }
    }

    /// The admin URL of the instance.
    pub fn url(&self) -> String {
        match self.kind {
            "pg" => format!("postgres://msgx@127.0.0.1:{}/msgx", self.port),
            "mysql" => format!("mysql://msgx:msgx-secret@127.0.0.1:{}/mailbox", self.port),
            _ => format!("redis://127.0.0.1:{}/", self.port),
        }
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `msgx` process (the real binary) on a test's stores, its log in a file.
pub struct Instance {
    child: std::process::Child,
    pub log: std::path::PathBuf,
    pub name: String,
}

impl Instance {
    /// `msgx run` on `s`'s configuration plus `extra` TOML; `name` goes into its PostgreSQL
    /// application_name (so a test can tell its writes apart) and its log file.
    pub fn run(s: &Services, name: &str, extra: &str) -> Instance {
        Instance::run_with_env(s, name, extra, &[])
    }

    /// [`Instance::run`] with more environment variables (systemd's, for instance).
    pub fn run_with_env(s: &Services, name: &str, extra: &str, env: &[(&str, &str)]) -> Instance {
        Instance::run_release(s, std::path::Path::new(env!("CARGO_BIN_EXE_msgx")), name, extra, env)
    }

    /// [`Instance::run_with_env`] of another build of msgx: `bin` (a previous release, #52).
    pub fn run_release(
        s: &Services,
        bin: &std::path::Path,
        name: &str,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Instance {
        let dir = std::env::temp_dir().join(format!("msgx-instances-{}", s.name));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, format!("{extra}\n{}", s.toml)).unwrap();
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let join = if s.cfg.pg_url.contains('?') { '&' } else { '?' };
        let pg_url = format!("{}{join}application_name=msgx-{name}", s.cfg.pg_url);
        let child = Command::new(bin)
            .args(["--config", config.to_str().unwrap(), "run"])
            .env("MSGX_PG_URL", pg_url)
            .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
            .env("MSGX_REDIS_URL", &s.cfg.redis_url)
            .env("MSGX_KAFKA_BROKERS", &s.cfg.kafka_brokers)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start msgx");
        Instance { child, log, name: name.to_string() }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until a log line contains `pattern`.
    pub fn wait_for_log(&self, pattern: &str, deadline: Duration) -> bool {
        eventually(deadline, || self.log_text().contains(pattern))
    }

    pub fn signal(&self, sig: &str) {
        assert!(Command::new("kill").args([sig, &self.pid().to_string()]).status().unwrap().success());
    }

    /// Waits for the process to end; its exit code.
    pub fn wait(&mut self, deadline: Duration) -> Option<i32> {
        let start = Instant::now();
        while start.elapsed() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads partition 0 of `topic` until `want` distinct `event_key`s (duplicates read too).
pub fn consume_event_keys(brokers: &str, topic: &str, want: usize, deadline: Duration) -> Vec<Consumed> {
    consume_until(brokers, topic, deadline, |got| {
        got.iter().filter_map(|r| r.header("event_key")).collect::<std::collections::BTreeSet<_>>().len()
            >= want
    })
}

/// What a pipeline that never forgot would hold (#20): every mailbox message replayed in MSG_ID
/// order through the pure handlers on the in-memory twin — FLID → fields.
pub fn reference_flights(s: &Services) -> std::collections::BTreeMap<String, msgx::handlers::Flight> {
    use msgx::ports::{FlightStore, RoundNeed};
    let mut my = s.mysql();
    let rows: Vec<(i64, String)> =
        my.query("SELECT CMINMSGS_ID, CMINMSGS_CLOB_MSG FROM cminmsgs ORDER BY CMINMSGS_ID").unwrap();
    let mut twin = msgx::store::memory::MemFlights::new();
    for (id, raw) in rows {
        let Ok(msg) = msgx::codec::decode(&raw) else { continue };
        let need = msgx::handlers::need_of(&msg);
        let read =
            RoundNeed { msg_ids: vec![], flids: need.flids, window: need.window, ..Default::default() };
        let p = twin.prepare(&read, &[], std::time::UNIX_EPOCH).unwrap();
        let view = msgx::handlers::View { flights: p.flights, window: p.window };
        if let Ok(d) = msgx::handlers::decide(&view, &msg, id) {
            twin.apply(&msgx::ports::Applying::unnamed_all(&[(id, &d)])).unwrap();
        }
    }
    twin.all()
}

/// The flights Redis holds for `s` — FLID → fields.
pub fn redis_flights(s: &Services) -> std::collections::BTreeMap<String, msgx::handlers::Flight> {
    use msgx::ports::FlightAudit;
    let mut r = msgx::store::flights::RedisFlights::connect_to(&s.cfg.redis, &s.cfg.redis_prefix).unwrap();
    r.all_flights()
        .unwrap()
        .into_iter()
        .filter(|(_, f, _)| f.exists())
        .map(|(k, f, _)| (k, f.fields))
        .collect()
}

/// The topic as a consumer that drops duplicates by `event_key` sees it (docs/events.md): no
/// identity on two different records, and per flight the messages in MSG_ID order. Returns the
/// distinct records.
pub fn deduplicated(records: &[Consumed]) -> Vec<&Consumed> {
    let mut seen: std::collections::BTreeMap<String, &Consumed> = Default::default();
    let mut out = Vec::new();
    for r in records {
        let key = r.header("event_key").expect("every record carries event_key").to_string();
        match seen.get(&key) {
            Some(first) => assert_eq!(
                (first.payload.clone(), first.header("msg_id")),
                (r.payload.clone(), r.header("msg_id")),
                "event_key {key} carried by two different records"
            ),
            None => {
                seen.insert(key, r);
                out.push(r);
            }
        }
    }
    let mut per_flight: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
    for r in &out {
        per_flight.entry(r.key.as_str()).or_default().push(r.header("msg_id").unwrap().parse().unwrap());
    }
    for (flight, ids) in per_flight {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{flight} out of MSG_ID order: {ids:?}");
    }
    out
}

/// `msgx verify` (the real binary) on `s`'s stores: its exit code and output.
pub fn verify(s: &Services) -> (Option<i32>, String) {
    verify_on(s, &s.cfg.pg_url)
}

/// `msgx verify` with own PostgreSQL at `pg_url`.
pub fn verify_on(s: &Services, pg_url: &str) -> (Option<i32>, String) {
    msgx_cli(s, pg_url, &["verify"])
}

/// `msgx verify --sample 1`: every SUCCEEDED message sampled for versions too.
pub fn verify_all(s: &Services) -> (Option<i32>, String) {
    msgx_cli(s, &s.cfg.pg_url, &["verify", "--sample", "1"])
}

/// A `msgx` command (the real binary) on `s`'s stores, own PostgreSQL at `pg_url`: its exit
/// code and output.
pub fn msgx_cli(s: &Services, pg_url: &str, args: &[&str]) -> (Option<i32>, String) {
    msgx_cli_of(s, std::path::Path::new(env!("CARGO_BIN_EXE_msgx")), pg_url, args)
}

/// [`msgx_cli`] of another build of msgx: `bin` (a previous release, #52).
pub fn msgx_cli_of(
    s: &Services,
    bin: &std::path::Path,
    pg_url: &str,
    args: &[&str],
) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("msgx-instances-{}", s.name));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("cli.toml");
    std::fs::write(&config, &s.toml).unwrap();
    let out = Command::new(bin)
        .args(["--config", config.to_str().unwrap()])
        .args(args)
        .env("MSGX_PG_URL", pg_url)
        .env("MSGX_MYSQL_URL", &s.cfg.mysql_url)
        .env("MSGX_REDIS_URL", &s.cfg.redis_url)
        .env("MSGX_KAFKA_BROKERS", &s.cfg.kafka_brokers)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// Runs `tests/support/services.sh` with `args`; it must succeed.
pub fn script(args: &[&str]) {
    let s = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh");
    let out = Command::new(s).args(args).output().expect("services.sh");
    assert!(out.status.success(), "services.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A primary and its replica, each in its own directory.
pub struct Pair {
    dir: std::path::PathBuf,
    pub primary: u16,
    pub replica: u16,
}

impl Pair {
    pub fn start(name: &str, synchronous: bool) -> Pair {
        let dir = std::env::temp_dir().join(format!("msgx-pair-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = Pair { dir, primary: free_port(), replica: free_port() };
        script(&["pg-primary", p.at("p"), &p.primary.to_string()]);
        script(&["pg-replica", p.at("r"), &p.replica.to_string(), &p.primary.to_string(), "replica1"]);
        if synchronous {
            let mut c = p.admin(p.primary);
            c.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'replica1'").unwrap();
            c.batch_execute("SELECT pg_reload_conf()").unwrap();
            assert!(eventually(Duration::from_secs(20), || count(
                &mut c,
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
            ) == 1));
        }
        p
    }

    pub fn at(&self, which: &str) -> &str {
        let d = self.dir.join(which);
        std::fs::create_dir_all(&d).unwrap();
        Box::leak(d.to_string_lossy().into_owned().into_boxed_str())
    }

    pub fn admin(&self, port: u16) -> postgres::Client {
        postgres::Client::connect(
            &format!("host=127.0.0.1 port={port} user=msgx dbname=postgres"),
            postgres::NoTls,
        )
        .unwrap()
    }

    /// The admin URL, primary first (where the test's database is created).
    pub fn url(&self) -> String {
        format!("postgres://msgx@127.0.0.1:{},127.0.0.1:{}/msgx", self.primary, self.replica)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh"))
            .args(["halt", "pg", self.at("p")])
            .output();
        let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/services.sh"))
            .args(["halt", "pg", self.at("r")])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Deletes every key under the test's prefix: what a FLUSHALL does to msgx (the Redis is
/// shared by the tests). Returns how many keys went.
pub fn empty_redis(s: &Services) -> usize {
    s.forget_redis_keys().expect("the test's Redis keys deleted")
}

/// The log's ERROR lines of the consistency sentinel, and its heals.
pub fn alarms(log: &str) -> Vec<&str> {
    log.lines()
        // An outage's "could not be compared or healed" is neither a finding nor a heal.
        .filter(|l| (l.contains("ERROR") && l.contains("consistency:")) || l.contains("healed "))
        .filter(|l| !l.contains("could not be compared or healed"))
        .collect()
}

/// A message inserted in a transaction left open: its ID is allocated, the row invisible until
/// [`Open::commit`] (PRE-2: a late row).
pub struct Open(mysql::Conn, pub i64);

impl Open {
    pub fn insert(s: &Services, raw: &str) -> Open {
        let mut c = s.mysql();
        c.query_drop("START TRANSACTION").unwrap();
        c.exec_drop(
            "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
            (raw,),
        )
        .unwrap();
        let id = c.last_insert_id() as i64;
        Open(c, id)
    }

    pub fn commit(mut self) -> i64 {
        self.0.query_drop("COMMIT").unwrap();
        self.1
    }
}

/// Inserts a message another system already marked processed, with msgx's own status.
pub fn insert_marked_elsewhere(s: &Services, raw: &str) -> i64 {
    let mut c = s.mysql();
    c.exec_drop(
        "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_DATE_PROCESSED, CMINMSGS_STATUS)
         VALUES (?, UTC_TIMESTAMP(), UTC_TIMESTAMP(), 'PROCESSED')",
        (raw,),
    )
    .unwrap();
    c.last_insert_id() as i64
}

/// The address an instance's operations endpoint listens on (its log says).
pub fn endpoint(i: &Instance) -> String {
    assert!(i.wait_for_log(LISTENING, Duration::from_secs(30)), "{}", i.log_text());
    listening_on(&i.log_text()).unwrap()
}

/// The log line that names the operations endpoint's address.
pub const LISTENING: &str = "metrics listening on ";

/// The address of the operations endpoint a daemon's log names, once it does.
pub fn listening_on(log: &str) -> Option<String> {
    let at = log.find(LISTENING)? + LISTENING.len();
    log[at..].split_whitespace().next().map(str::to_string)
}

/// The value of one sample (`name{labels}`) of a `/metrics` body, if it is there.
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The rounds with no finding of the sentinel behind the operations endpoint `addr`
/// (`msgx_consistency_checks_total`, #66).
pub fn sentinel_rounds(addr: &str) -> u64 {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "/metrics of {addr}: {body}");
    sample(&body, "msgx_consistency_checks_total").expect("msgx_consistency_checks_total in /metrics") as u64
}

/// Waits until the sentinel behind `addr` has compared the stores `n` more times than when
/// called, each with no finding: what a test that proves "no alarm" waits on, not seconds (#66).
/// False at the deadline, as after a finding, which stops the rounds.
pub fn sentinel_compared(addr: &str, n: u64, deadline: Duration) -> bool {
    let from = sentinel_rounds(addr);
    eventually(deadline, || sentinel_rounds(addr) >= from + n)
}

/// The database's clock now: what the lease's times are written by.
pub fn db_now(pg: &mut postgres::Client) -> std::time::SystemTime {
    pg.query_one("SELECT now()", &[]).unwrap().get(0)
}

/// Whether the lease was renewed after `at` (the database's clock): what a test that needs a
/// renewal waits on, not seconds (#66).
pub fn lease_renewed_after(pg: &mut postgres::Client, at: std::time::SystemTime) -> bool {
    let renewed: Option<std::time::SystemTime> =
        pg.query_one("SELECT renewed_at FROM msgx_lease", &[]).unwrap().get(0);
    renewed.is_some_and(|r| r > at)
}

/// `GET path` on an operations endpoint: (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect to the operations endpoint");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    let status = out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, out.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default())
}
