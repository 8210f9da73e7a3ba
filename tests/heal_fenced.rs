//! #38: a heal that cannot overwrite the present. An active instance and a hot standby, 50 000
//! flights in Redis; Redis emptied while messages for those flights keep arriving; the heal
//! rebuilds every flight and runs past the lease's duration. The lease is renewed while it runs
//! (no takeover under it), every write of it is fenced, and at the end Redis equals a replay of
//! the mailbox in MSG_ID order, each flight's fields and versions.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use msgx::fixtures;
use msgx::handlers::FlightState;
use msgx::ports::{Applying, FlightAudit, FlightStore, RoundNeed};
use mysql::prelude::Queryable;

const FLIGHTS: u64 = 50_000;

/// A two-second lease, renewed every half second: a heal of 50 000 flights lasts longer.
const SHORT_LEASE: &str = "[msgx.lease]\nduration = \"2s\"\nrenew-interval = \"500ms\"\n\
                           [msgx.consistency-check]\ninterval = \"1s\"\n";

fn insert_many(s: &Services, raws: impl Iterator<Item = String>) {
    let mut my = s.mysql();
    my.exec_batch(
        "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')",
        raws.map(|r| (r,)),
    )
    .unwrap();
}

/// Every flight Redis holds, with its versions and tombstone.
fn held(s: &Services) -> BTreeMap<String, FlightState> {
    let mut r = msgx::store::flights::RedisFlights::connect_to(&s.cfg.redis, &s.cfg.redis_prefix).unwrap();
    r.all_flights().unwrap().into_iter().map(|(k, f, _)| (k, f)).collect()
}

/// The mailbox replayed in MSG_ID order through the handlers on the twin: what a pipeline that
/// never forgot holds, versions included.
fn replayed(s: &Services) -> BTreeMap<String, FlightState> {
    let mut my = s.mysql();
    let rows: Vec<(i64, String)> =
        my.query("SELECT CMINMSGS_ID, CMINMSGS_CLOB_MSG FROM cminmsgs ORDER BY CMINMSGS_ID").unwrap();
    let mut twin = msgx::store::memory::MemFlights::new();
    for (id, raw) in rows {
        let Ok(msg) = msgx::codec::decode(&raw) else { continue };
        let need = msgx::handlers::need_of(&msg);
        let read = RoundNeed { flids: need.flids, window: need.window, ..Default::default() };
        let p = twin.prepare(&read, &[], std::time::UNIX_EPOCH).unwrap();
        let view = msgx::handlers::View { flights: p.flights, window: p.window };
        if let Ok(d) = msgx::handlers::decide(&view, &msg, id) {
            twin.apply(&Applying::unnamed_all(&[(id, &d)])).unwrap();
        }
    }
    twin.inspect(|f| f.flights.clone().into_iter().collect())
}

/// The log line's time (`[2026-12-03T18:50:19.486Z …`), as seconds of the day.
fn at(line: &str) -> f64 {
    let t = &line[line.find('T').unwrap() + 1..];
    let (h, rest) = t.split_at(2);
    let (m, rest) = rest[1..].split_at(2);
    let secs: f64 = rest[1..].split(['Z', ' ']).next().unwrap().parse().unwrap();
    h.parse::<f64>().unwrap() * 3600.0 + m.parse::<f64>().unwrap() * 60.0 + secs
}

#[test]
fn a_heal_longer_than_the_lease_keeps_it_and_redis_ends_as_a_replay_of_the_mailbox() {
    let s = Services::migrated("");
    insert_many(&s, (1..=FLIGHTS).map(|i| fixtures::flop_stnd(i, &format!("H{i}"), "S0")));
    let a = Instance::run(&s, "a", SHORT_LEASE);
    let mut pg = s.pg();
    let succeeded =
        |pg: &mut postgres::Client| count(pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'");
    assert!(
        eventually(Duration::from_secs(600), || succeeded(&mut pg) == FLIGHTS as i64),
        "{}",
        a.log_text()
    );
    let b = Instance::run(&s, "b", SHORT_LEASE);
    assert!(b.wait_for_log("standby", Duration::from_secs(30)), "{}", b.log_text());
    let epoch_before = count(&mut pg, "SELECT epoch FROM msgx_lease");
    // What a FLUSHALL does to msgx, while updates for those flights keep arriving.
    let mut c = s.redis();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{}*", s.cfg.redis_prefix)).query(&mut c).unwrap();
    for chunk in keys.chunks(10_000) {
        redis::cmd("DEL").arg(chunk).query::<()>(&mut c).unwrap();
    }
    let emptied = Instant::now();
    let more = 300;
    for i in 0..more {
        s.insert_inbound(&[fixtures::flop_stnd(
            FLIGHTS + 1 + i,
            &format!("H{}", 1 + (i * 167) % FLIGHTS),
            &format!("L{i}"),
        )]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let logs = || format!("{}{}", a.log_text(), b.log_text());
    assert!(eventually(Duration::from_secs(600), || logs().contains("healed redis:")), "{}", logs());
    let healed = emptied.elapsed();
    assert!(
        eventually(Duration::from_secs(300), || succeeded(&mut pg) == (FLIGHTS + more) as i64),
        "every message SUCCEEDED"
    );
    let log = logs();
    let heals = count(&mut pg, "SELECT count(*) FROM consistency_heal");
    assert_eq!(heals, 1, "one heal");
    assert!(!log.contains("taken over while the stores were compared"), "no takeover under the heal");
    assert!(!log.contains("MSGX_FENCED"), "no write of a superseded epoch was even tried");
    assert_eq!(
        count(&mut pg, "SELECT epoch FROM msgx_lease"),
        epoch_before + 1,
        "one holder after the forget"
    );
    // How long the heal ran: from the stop on the forget to the heal's line, in the healer's log.
    let start = log.lines().find(|l| l.contains("a store forgot what it acknowledged")).map(at);
    let end = log.lines().find(|l| l.contains("healed redis:")).map(at);
    let took = end.zip(start).map(|(e, s)| e - s).unwrap_or_default();
    assert!(took > 2.0, "the heal ran past the lease's 2 s: {took:.1} s");
    let (reference, redis) = (replayed(&s), held(&s));
    let differ: Vec<&String> =
        reference.iter().filter(|(k, f)| redis.get(*k) != Some(*f)).map(|(k, _)| k).take(10).collect();
    assert_eq!(redis.len(), reference.len(), "every flight");
    assert!(differ.is_empty(), "flights whose fields or versions differ from the replay: {differ:?}");
    let line = log.lines().find(|l| l.contains("healed redis:")).unwrap_or_default();
    println!(
        "{FLIGHTS} flights, Redis emptied, {more} updates arriving: healed in {took:.1} s (lease 2 s, renewed; \
         {healed:?} from the emptying to the heal's line); 0 takeovers, 0 fenced writes; {} flights compared \
         with the replay, fields and versions: 0 differ\n{line}",
        reference.len()
    );
}
