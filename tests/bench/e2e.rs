//! End to end, msgx against a raw-I/O floor, in the same run (issue #13).
//!
//! Throughput: N realistic FLOP messages over 500 flights are loaded into the mailbox, then
//! drained by msgx (the real binary, every stage) and by the floor: a program doing the same
//! reads and writes per message — mailbox read, PENDING insert, Redis write, events +
//! SUCCEEDED, Kafka produce with the D3 settings, SENT, mailbox mark — batched and pipelined
//! across threads, with no logic. The two alternate `--runs` times on fresh stores; printed:
//! msg/s of each, the ratio (min/median/max), msgx's peak RSS, and msgx's requests per message
//! and store (TCP data segments it sent, read with `ss`).
//!
//! Latency: a steady arrival rate (`--rate`, default 500 msg/s, for `--secs`, 30) from mailbox
//! insert to SENT, p50/p95/p99/max, msgx and the floor at the same poll interval; and the same
//! through the compat path `POST /cminmsgs/send`.
//!
//!     eval "$(tests/support/services.sh start)"
//!     cargo bench --bench e2e                          # throughput at the defaults, 20 000
//!     cargo bench --bench e2e -- --n 100000            # the 100 K backlog
//!     cargo bench --bench e2e -- --set process-batch=1000 --set dispatch-batch=5000
//!     cargo bench --bench e2e -- --mode latency --rate 500 --secs 30
//!     cargo bench --bench e2e -- --mode tls            # every store on TLS beside plaintext (#64)

#[path = "../common/mod.rs"]
mod common;
#[path = "traffic.rs"]
mod traffic;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{bounded, Receiver, Sender};
use mysql::prelude::Queryable;

use common::*;
use msgx::fixtures;
use msgx::ports::{Producer, Record};
use msgx::store::kafka::KafkaProducer;
use traffic::{message, status_kib, Cpu};

/// The floor runs in this process, under the allocator the msgx binary has (src/main.rs): the
/// floor is to be at least as fast as msgx could be, so it gets whatever msgx gets.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// And with the binary's options.
#[export_name = "malloc_conf"]
static MALLOC_CONF: &[u8; 10] = msgx::ALLOCATOR_OPTIONS;

struct Args {
    n: u64,
    runs: usize,
    mode: String,
    rate: u64,
    secs: u64,
    set: Vec<String>,
}

fn args() -> Args {
    let mut a = Args { n: 20_000, runs: 3, mode: "throughput".into(), rate: 500, secs: 30, set: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().expect("a value");
        match x.as_str() {
            "--n" => a.n = val().parse().unwrap(),
            "--runs" => a.runs = val().parse().unwrap(),
            "--mode" => a.mode = val(),
            "--rate" => a.rate = val().parse().unwrap(),
            "--secs" => a.secs = val().parse().unwrap(),
            "--set" => a.set.push(val()),
            _ => {} // cargo bench passes --bench
        }
    }
    a
}

/// Loads messages 1..=n into the mailbox in multi-row inserts.
fn load(s: &Services, n: u64) {
    let mut my = s.mysql();
    let mut i = 1;
    while i <= n {
        let chunk: Vec<String> = (i..=(i + 499).min(n)).map(message).collect();
        let values = vec!["(?, UTC_TIMESTAMP(), 'VALID')"; chunk.len()].join(",");
        my.exec_drop(
            format!("INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES {values}"),
            chunk,
        )
        .unwrap();
        i += 500;
    }
}

fn pipeline_toml(set: &[String]) -> String {
    let mut t = String::from("poll-interval = \"1s\"\n");
    for kv in set {
        let (k, v) = kv.split_once('=').expect("--set key=value");
        t.push_str(&format!("{k} = {v}\n"));
    }
    t
}

/// Requests msgx (pid) sent per store so far: TCP data segments, by the store's port.
fn segments(pid: u32, ports: &BTreeMap<u16, &'static str>) -> BTreeMap<&'static str, u64> {
    let out = std::process::Command::new("ss").args(["-tinpH", "state", "established"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut per: BTreeMap<&'static str, u64> = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [head, info] = pair else { continue };
        if !head.contains(&format!("pid={pid},")) {
            continue;
        }
        let peer_port: u16 = head
            .split_whitespace()
            .nth(3)
            .and_then(|p| p.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let Some(store) = ports.get(&peer_port) else { continue };
        let segs: u64 = info
            .split_whitespace()
            .find_map(|f| f.strip_prefix("data_segs_out:"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *per.entry(store).or_default() += segs;
    }
    per
}

fn port(url: &str) -> u16 {
    let after = url.rsplit('@').next().unwrap().trim_start_matches("redis://");
    after.split(['/', '?']).next().unwrap().rsplit(':').next().unwrap().parse().unwrap()
}

/// Whether everything is done, with index-only questions so that watching msgx does not slow
/// it down: all `n` enqueued, nothing unfinished, no mark owed, no event pending.
fn drained(pg: &mut postgres::Client, n: i64) -> bool {
    pg.query_one(
        "SELECT (SELECT last_id FROM ingress_watermark) >= $1
            AND NOT EXISTS (SELECT 1 FROM proc_state WHERE state IN ('PENDING', 'FAILED'))
            AND NOT EXISTS (SELECT 1 FROM proc_state WHERE backfill_at IS NULL AND backfill_abandoned_at IS NULL AND backfill_next_at IS NOT NULL)
            AND NOT EXISTS (SELECT 1 FROM msg_event WHERE state = 'PENDING')",
        &[&n],
    )
    .unwrap()
    .get(0)
}

struct MsgxRun {
    rate: f64,
    rss_mib: f64,
    per_message: BTreeMap<&'static str, f64>,
    cpu: Cpu,
}

fn run_msgx(n: u64, set: &[String]) -> MsgxRun {
    run_msgx_on(&Services::migrated(&pipeline_toml(set)), n)
}

/// msgx draining `n` messages loaded into `s`'s fresh stores.
fn run_msgx_on(s: &Services, n: u64) -> MsgxRun {
    load(s, n);
    let ports: BTreeMap<u16, &'static str> = [
        (port(&s.cfg.pg_url), "postgres"),
        (port(&s.cfg.mysql_url), "mailbox"),
        (port(&s.cfg.redis_url), "redis"),
        (s.cfg.kafka_brokers.rsplit(':').next().unwrap().parse().unwrap(), "kafka"),
    ]
    .into();
    let mut pg = s.pg();
    let mut msgx = Instance::run(s, "bench", "");
    // From the moment the stages run: process start-up and the lease are not the drain.
    assert!(msgx.wait_for_log("started epoch", Duration::from_secs(30)), "{}", msgx.log_text());
    let start = Instant::now();
    let cpu0 = Cpu::now(msgx.pid());
    while !drained(&mut pg, n as i64) {
        std::thread::sleep(Duration::from_millis(50));
        assert!(start.elapsed() < Duration::from_secs(1800), "not drained: {}", msgx.log_text());
    }
    let took = start.elapsed();
    let cpu = Cpu::now(msgx.pid()).since(&cpu0);
    let segs = segments(msgx.pid(), &ports);
    let rss = status_kib(msgx.pid(), "VmHWM") as f64 / 1024.0;
    msgx.signal("-TERM");
    msgx.wait(Duration::from_secs(60));
    let per_message = segs.into_iter().map(|(k, v)| (k, v as f64 / n as f64)).collect();
    MsgxRun { rate: n as f64 / took.as_secs_f64(), rss_mib: rss, per_message, cpu }
}

// ---------------------------------------------------------------- the floor

/// Batch sizes of the floor (the best found for msgx, so the floor is not handicapped).
const FLOOR_READ: usize = 10_000;
const FLOOR_PROCESS: usize = 1000;
const FLOOR_DISPATCH: usize = 5000;

fn mysql_conn(s: &Services) -> mysql::Conn {
    s.mysql()
}

/// The floor's reader: new mailbox rows → PENDING rows; forwards the ids.
fn floor_reader(s: &Services, n: usize, poll: Duration, out: Sender<Vec<i64>>) {
    let (mut my, mut pg) = (mysql_conn(s), s.pg());
    // Prepared once, as msgx's connections keep theirs.
    let insert = pg
        .prepare(
            "INSERT INTO proc_state (msg_id, state, attempts, updated_at, enqueued_at)
             SELECT id, 'PENDING', 0, now(), now() FROM UNNEST($1::bigint[]) AS t(id) ON CONFLICT DO NOTHING",
        )
        .unwrap();
    let watermark = pg.prepare("UPDATE ingress_watermark SET last_id = $1, updated_at = now()").unwrap();
    let (mut last, mut read) = (0i64, 0usize);
    while read < n {
        let ids: Vec<i64> = my
            .exec(
                "SELECT CMINMSGS_ID FROM cminmsgs WHERE CMINMSGS_ID > ? AND CMINMSGS_DATE_PROCESSED IS NULL ORDER BY CMINMSGS_ID LIMIT ?",
                (last, FLOOR_READ as u64),
            )
            .unwrap();
        if ids.is_empty() {
            std::thread::sleep(poll);
            continue;
        }
        let mut tx = pg.transaction().unwrap();
        tx.execute(&insert, &[&ids]).unwrap();
        tx.execute(&watermark, &[ids.last().unwrap()]).unwrap();
        tx.commit().unwrap();
        last = *ids.last().unwrap();
        read += ids.len();
        out.send(ids).unwrap();
    }
}

/// The floor's processor: texts, one Redis write per message (pipelined), events + SUCCEEDED.
fn floor_processor(
    s: &Services,
    input: Receiver<Vec<i64>>,
    events: Sender<Vec<i64>>,
    marks: Sender<Vec<i64>>,
) {
    let (mut my, mut pg) = (mysql_conn(s), s.pg());
    let mut redis = s.redis();
    let prefix = format!("{}floor:flight:", s.cfg.redis_prefix);
    let insert = pg
        .prepare(
            "INSERT INTO msg_event (target, partition_key, event_type, state_version, payload_json, state, attempts, created_at, msg_id)
             SELECT 'KAFKA:msg', k, 'UPSERT', m, p, 'PENDING', 0, now(), m FROM UNNEST($1::varchar[], $2::text[], $3::bigint[]) AS x(k, p, m)
             RETURNING event_id",
        )
        .unwrap();
    let succeed = pg
        .prepare(
            "UPDATE proc_state SET state = 'SUCCEEDED', updated_at = now(), backfill_next_at = now() WHERE msg_id = ANY($1)",
        )
        .unwrap();
    for batch in input.iter() {
        for ids in batch.chunks(FLOOR_PROCESS) {
            let placeholders = vec!["?"; ids.len()].join(",");
            let texts: Vec<(i64, Vec<u8>)> = my
                .exec(format!("SELECT CMINMSGS_ID, CMINMSGS_CLOB_MSG FROM cminmsgs WHERE CMINMSGS_ID IN ({placeholders})"), ids.to_vec())
                .unwrap();
            let mut pipe = redis::pipe();
            for (id, text) in &texts {
                pipe.hset(format!("{prefix}{}", id % 500), "F", text.len()).ignore();
            }
            pipe.query::<()>(&mut redis).unwrap();
            let keys: Vec<String> = texts.iter().map(|(id, _)| format!("{}", id % 500)).collect();
            // A record the broker's registry takes, as msgx's are (#67): both sides pay its check.
            let payloads: Vec<String> = texts
                .iter()
                .map(|(id, t)| {
                    format!(
                        "{{\"changes\":[{{\"field\":\"F\",\"new\":\"{}\",\"old\":null}}],\"ffid\":null,\"flid\":\"{}\",\"msg_id\":{id},\"type\":\"FLOP-STND\"}}",
                        t.len(),
                        id % 500
                    )
                })
                .collect();
            let msg_ids: Vec<i64> = texts.iter().map(|(id, _)| *id).collect();
            let mut tx = pg.transaction().unwrap();
            let event_ids: Vec<i64> =
                tx.query(&insert, &[&keys, &payloads, &msg_ids]).unwrap().iter().map(|r| r.get(0)).collect();
            tx.execute(&succeed, &[&msg_ids]).unwrap();
            tx.commit().unwrap();
            events.send(event_ids).unwrap();
            marks.send(msg_ids).unwrap();
        }
    }
}

/// The floor's dispatcher: produce with the D3 settings (msgx's driver wrapper), then SENT.
fn floor_dispatcher(s: &Services, mut producer: KafkaProducer, input: Receiver<Vec<i64>>) {
    let mut pg = s.pg();
    let read = pg
        .prepare("SELECT event_id, partition_key, payload_json FROM msg_event WHERE event_id = ANY($1) ORDER BY event_id")
        .unwrap();
    // SENT with where each record landed, as msgx writes it (#40).
    let sent = pg
        .prepare(
            "UPDATE msg_event e SET state = 'SENT', sent_at = now(), sent_topic = $2, sent_partition = s.part,
                 sent_offset = s.off
             FROM UNNEST($1::bigint[], $3::int[], $4::bigint[]) AS s(id, part, off) WHERE e.event_id = s.id",
        )
        .unwrap();
    let mut pending: Vec<i64> = Vec::new();
    let mut open = true;
    while open || !pending.is_empty() {
        match input.recv_timeout(Duration::from_millis(1)) {
            Ok(ids) => pending.extend(ids),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => open = false,
            Err(_) => {}
        }
        while let Ok(ids) = input.try_recv() {
            pending.extend(ids);
        }
        if pending.is_empty() {
            continue;
        }
        let batch: Vec<i64> = pending.drain(..pending.len().min(FLOOR_DISPATCH)).collect();
        let rows = pg.query(&read, &[&batch]).unwrap();
        // Borrowed from the rows, as msgx's records are (#23).
        let records: Vec<Record> = rows
            .iter()
            .map(|r| Record {
                topic: s.cfg.topic_msg.as_str().into(),
                key: r.get::<_, &str>(1).into(),
                payload: r.get::<_, &str>(2).into(),
                headers: vec![("event_id".into(), r.get::<_, i64>(0).to_string())],
            })
            .collect();
        let at: Vec<msgx::ports::Position> =
            producer.send(&records).into_iter().map(|r| r.expect("the floor's produce failed")).collect();
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let parts: Vec<i32> = at.iter().map(|p| p.partition).collect();
        let offsets: Vec<i64> = at.iter().map(|p| p.offset).collect();
        pg.execute(&sent, &[&ids, &s.cfg.topic_msg, &parts, &offsets]).unwrap();
    }
}

/// The floor's marker: the processed mark, then the settled backfill.
fn floor_marker(s: &Services, input: Receiver<Vec<i64>>) {
    let (mut my, mut pg) = (mysql_conn(s), s.pg());
    let settled = pg
        .prepare("UPDATE proc_state SET backfill_at = now(), backfill_next_at = NULL WHERE msg_id = ANY($1)")
        .unwrap();
    for ids in input.iter() {
        let placeholders = vec!["?"; ids.len()].join(",");
        my.exec_drop(
            format!(
                "UPDATE cminmsgs SET CMINMSGS_DATE_PROCESSED = UTC_TIMESTAMP(), CMINMSGS_STATUS = 'PROCESSED' WHERE CMINMSGS_ID IN ({placeholders}) AND CMINMSGS_DATE_PROCESSED IS NULL"
            ),
            ids.clone(),
        )
        .unwrap();
        pg.execute(&settled, &[&ids]).unwrap();
    }
}

/// The floor's producer, made as msgx's daemon makes its own before its stages run: greeted,
/// so that neither side's drain waits for librdkafka's producer-id timer (a first round
/// waited 0.9 s for it in four starts of six: the floor's "2.4× faster" runs were the others, #23).
fn floor_producer(s: &Services) -> KafkaProducer {
    KafkaProducer::new(&s.cfg).unwrap().greet(Duration::from_secs(1))
}

/// The floor over `n` messages already in (or arriving into) the mailbox.
fn floor(s: &Services, producer: KafkaProducer, n: u64, poll: Duration) {
    let (to_proc, proc_in) = bounded(64);
    let (to_disp, disp_in) = bounded(64);
    let (to_mark, mark_in) = bounded(64);
    std::thread::scope(|sc| {
        sc.spawn(|| floor_reader(s, n as usize, poll, to_proc));
        sc.spawn(|| floor_processor(s, proc_in, to_disp, to_mark));
        sc.spawn(|| floor_dispatcher(s, producer, disp_in));
        sc.spawn(|| floor_marker(s, mark_in));
    });
}

fn run_floor(n: u64) -> (f64, Cpu) {
    let s = Services::migrated("");
    load(&s, n);
    let producer = floor_producer(&s);
    let start = Instant::now();
    let cpu0 = Cpu::now(std::process::id());
    floor(&s, producer, n, Duration::from_millis(1));
    let cpu = Cpu::now(std::process::id()).since(&cpu0);
    assert!(drained(&mut s.pg(), n as i64));
    (n as f64 / start.elapsed().as_secs_f64(), cpu)
}

fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

fn throughput(a: &Args) {
    println!(
        "e2e throughput: {} FLOP messages over 500 flights, {} alternating runs, settings {:?}",
        a.n, a.runs, a.set
    );
    let (mut ours, mut floors, mut ratios, mut rss) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut per_message = BTreeMap::new();
    let mut cpus = (Cpu::default(), Cpu::default());
    // msgx ÷ floor of the CPU per message, per run: in total and per process group.
    let mut cpu_ratios: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for i in 0..a.runs {
        let (m, (f, floor_cpu)) = if i % 2 == 0 {
            let m = run_msgx(a.n, &a.set);
            (m, run_floor(a.n))
        } else {
            let f = run_floor(a.n);
            (run_msgx(a.n, &a.set), f)
        };
        println!(
            "  run {}: msgx {:7.0} msg/s   floor {:7.0} msg/s   ratio {:.2}   msgx peak RSS {:5.1} MiB",
            i + 1,
            m.rate,
            f,
            m.rate / f,
            m.rss_mib
        );
        ours.push(m.rate);
        floors.push(f);
        ratios.push(m.rate / f);
        rss.push(m.rss_mib);
        per_message = m.per_message;
        cpu_ratios.entry("total").or_default().push(m.cpu.total() / floor_cpu.total().max(1e-9));
        for (g, v) in &m.cpu.0 {
            if let Some(f) = floor_cpu.0.get(g).filter(|f| **f > 0.0) {
                cpu_ratios.entry(g).or_default().push(v / f);
            }
        }
        cpus = (m.cpu, floor_cpu);
    }
    let (a1, b1, c1) = stats(&mut ours);
    let (a2, b2, c2) = stats(&mut floors);
    let (a3, b3, c3) = stats(&mut ratios);
    println!("  msgx  msg/s min/median/max {a1:.0} / {b1:.0} / {c1:.0}");
    println!("  floor msg/s min/median/max {a2:.0} / {b2:.0} / {c2:.0}");
    println!("  ratio       min/median/max {a3:.2} / {b3:.2} / {c3:.2}");
    println!("  msgx peak RSS max {:.1} MiB", rss.iter().cloned().fold(0.0, f64::max));
    let per: Vec<String> = per_message.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
    println!("  msgx requests per message (TCP data segments sent, last run): {}", per.join(", "));
    println!("  CPU per 1000 messages, last run: msgx  {}", cpus.0.per_thousand(a.n));
    println!("                                   floor {}", cpus.1.per_thousand(a.n));
    for (g, v) in cpu_ratios.iter_mut() {
        let (lo, mid, hi) = stats(v);
        println!("  CPU per message, msgx / floor, {g:<8} min/median/max {lo:.2} / {mid:.2} / {hi:.2}");
    }
}

// ---------------------------------------------------------------- latency

/// Inserts `rate` messages a second for `secs` seconds, each recorded with its insert time.
/// Inserts `rate` messages a second for `secs` seconds; each with its insert (or POST) start
/// time, and how long the insert (or the POST's response) took.
fn steady(
    s: &Services,
    rate: u64,
    secs: u64,
    via: Option<std::net::SocketAddr>,
) -> Vec<(i64, SystemTime, f64)> {
    // A second at a tenth of the rate first, unmeasured: connections, the producer's
    // idempotence handshake and caches are warm when the measured arrivals start.
    let warm = (rate / 10).max(1);
    let _ = arrivals(s, warm, 1, via, 1_000_000);
    let mut pg = s.pg();
    assert!(
        eventually(Duration::from_secs(60), || drained(&mut pg, warm as i64)),
        "the warm-up did not drain"
    );
    arrivals(s, rate, secs, via, 0)
}

/// `rate` messages a second for `secs` seconds, SEQN from `seqn_base + 1` (unique identities).
fn arrivals(
    s: &Services,
    rate: u64,
    secs: u64,
    via: Option<std::net::SocketAddr>,
    seqn_base: u64,
) -> Vec<(i64, SystemTime, f64)> {
    let mut my = s.mysql();
    let total = rate * secs;
    let start = Instant::now();
    let mut out = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let raw =
            fixtures::flop_stnd(seqn_base + i + 1, &format!("L{}", i % 500), &format!("S{}", seqn_base + i));
        let at = SystemTime::now();
        let took = Instant::now();
        let id = match via {
            None => {
                my.exec_drop(
                    "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
                    (raw,),
                )
                .unwrap();
                my.last_insert_id() as i64
            }
            Some(addr) => post(addr, &raw),
        };
        out.push((id, at, took.elapsed().as_secs_f64() * 1000.0));
    }
    out
}

fn post(addr: std::net::SocketAddr, body: &str) -> i64 {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    // One write, as an HTTP client does (several small writes would measure Nagle's delay).
    let request = format!("POST /cminmsgs/send HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    c.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let json = out.split("\r\n\r\n").nth(1).unwrap();
    serde_json::from_str::<serde_json::Value>(json).unwrap()["msg_id"].as_i64().expect("accepted")
}

fn last(sent: &[(i64, SystemTime, f64)]) -> i64 {
    sent.iter().map(|x| x.0).max().unwrap_or(0)
}

fn latencies(s: &Services, sent: &[(i64, SystemTime, f64)]) -> Vec<f64> {
    let mut pg = s.pg();
    let at: BTreeMap<i64, SystemTime> = pg
        .query("SELECT msg_id, sent_at FROM msg_event WHERE sent_at IS NOT NULL", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut ms: Vec<f64> = sent
        .iter()
        .filter_map(|(id, t, _)| {
            at.get(id).map(|s| s.duration_since(*t).unwrap_or_default().as_secs_f64() * 1000.0)
        })
        .collect();
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    ms
}

fn show(what: &str, ms: &[f64]) {
    let p = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
    println!(
        "  {what:<28} n={:6}  p50 {:6.1} ms  p95 {:6.1} ms  p99 {:6.1} ms  max {:7.1} ms",
        ms.len(),
        p(0.5),
        p(0.95),
        p(0.99),
        ms[ms.len() - 1]
    );
}

fn latency(a: &Args) {
    let n = (a.rate * a.secs) as i64;
    println!(
        "e2e latency: {} msg/s for {} s, mailbox insert (or POST) -> SENT, poll-interval 50 ms",
        a.rate, a.secs
    );
    // msgx through the mailbox.
    let s = Services::migrated(&format!(
        "poll-interval = \"50ms\"\n{}",
        a.set.iter().map(|kv| kv.replacen('=', " = ", 1) + "\n").collect::<String>()
    ));
    let msgx = Instance::run(&s, "latency", "");
    assert!(msgx.wait_for_log("started epoch", Duration::from_secs(20)));
    let sent = steady(&s, a.rate, a.secs, None);
    let mut pg = s.pg();
    assert!(eventually(Duration::from_secs(120), || drained(&mut pg, last(&sent))));
    show("msgx, mailbox", &latencies(&s, &sent));
    drop(msgx);
    // The floor at the same poll interval.
    let f = Services::migrated("");
    let sent = std::thread::scope(|sc| {
        sc.spawn(|| {
            floor(&f, floor_producer(&f), n as u64 + (a.rate / 10).max(1), Duration::from_millis(50))
        });
        steady(&f, a.rate, a.secs, None)
    });
    show("floor, mailbox", &latencies(&f, &sent));
    // msgx through the compat path.
    let c = Services::migrated("poll-interval = \"50ms\"\n");
    let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let msgx =
        Instance::run(&c, "compat", &format!("[msgx.compat-http]\nenabled = true\nlisten = \"{listen}\"\n"));
    assert!(msgx.wait_for_log("compat-http listening", Duration::from_secs(20)));
    let sent = steady(&c, a.rate, a.secs, Some(listen));
    let mut pg = c.pg();
    assert!(eventually(Duration::from_secs(120), || drained(&mut pg, last(&sent))));
    show("msgx, POST /cminmsgs/send", &latencies(&c, &sent));
    let mut writes: Vec<f64> = sent.iter().map(|(_, _, ms)| *ms).collect();
    writes.sort_by(|a, b| a.partial_cmp(b).unwrap());
    show("  of which the POST itself", &writes);
}

/// #64: msgx with every store TLS-only (verified, passwords from files, the broker behind
/// stunnel with a client certificate) beside msgx on the plaintext services, alternating, in one
/// run: drain rate and CPU per message of each, and the ratios.
fn tls(a: &Args) {
    println!("e2e TLS: {} FLOP messages, {} alternating runs, plaintext vs every store on TLS", a.n, a.runs);
    let world = common::tls::TlsWorld::start();
    let (mut plain, mut tls, mut rate, mut cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..a.runs {
        let on_tls = || run_msgx_on(&world.services(&pipeline_toml(&a.set)), a.n);
        let on_plain = || run_msgx(a.n, &a.set);
        let (p, t) = if i % 2 == 0 {
            (on_plain(), on_tls())
        } else {
            let t = on_tls();
            (on_plain(), t)
        };
        let program = |c: &Cpu| c.0.get("program").copied().unwrap_or(0.0);
        println!(
            "  run {}: plaintext {:7.0} msg/s   TLS {:7.0} msg/s   rate TLS/plain {:.2}   CPU TLS/plain total {:.2}, msgx {:.2}",
            i + 1,
            p.rate,
            t.rate,
            t.rate / p.rate,
            t.cpu.total() / p.cpu.total().max(1e-9),
            program(&t.cpu) / program(&p.cpu).max(1e-9)
        );
        println!("    CPU per 1000 messages: plaintext {}", p.cpu.per_thousand(a.n));
        println!("                           TLS       {}", t.cpu.per_thousand(a.n));
        rate.push(t.rate / p.rate);
        cpu.push(t.cpu.total() / p.cpu.total().max(1e-9));
        plain.push(p.rate);
        tls.push(t.rate);
    }
    let (a1, b1, c1) = stats(&mut plain);
    let (a2, b2, c2) = stats(&mut tls);
    let (a3, b3, c3) = stats(&mut rate);
    let (a4, b4, c4) = stats(&mut cpu);
    println!("  plaintext msg/s min/median/max {a1:.0} / {b1:.0} / {c1:.0}");
    println!("  TLS       msg/s min/median/max {a2:.0} / {b2:.0} / {c2:.0}");
    println!("  drain rate TLS / plaintext     {a3:.2} / {b3:.2} / {c3:.2}");
    println!("  CPU per message TLS / plain    {a4:.2} / {b4:.2} / {c4:.2}");
}

fn main() {
    let _ = env_logger::Builder::new().filter_level(log::LevelFilter::Warn).try_init();
    let a = args();
    match a.mode.as_str() {
        "latency" => latency(&a),
        "tls" => tls(&a),
        "all" => {
            throughput(&a);
            latency(&a);
        }
        _ => throughput(&a),
    }
}
