//! What messages mean, on the real stores: the daily-plan snapshot through the Redis script,
//! its generation compare-and-set, FDEL, and reference data into REF_MASTER.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::Commands;

use common::*;
use msgx::codec;
use msgx::fixtures;
use msgx::handlers::{self, View};
use msgx::ingress::{self, Poller};
use msgx::ports::{Applying, FlightStore};
use msgx::pump::{Pump, Round};
use msgx::stats::Stats;
use msgx::store::flights::RedisFlights;
use msgx::store::mailbox::MysqlMailbox;
use msgx::store::pg::Pg;

struct Stack {
    s: Services,
    poller: Poller<Pg, MysqlMailbox>,
    pump: Pump<Pg, MysqlMailbox, RedisFlights>,
}

fn stack() -> Stack {
    let s = Services::migrated("");
    let stats = Arc::new(Stats::default());
    let (poller, pump) = (s.poller(&stats), s.pump(&stats));
    Stack { s, poller, pump }
}

impl Stack {
    fn run(&mut self, raws: &[String]) {
        self.s.insert_inbound(raws);
        while self.poller.round(now()).unwrap() != ingress::Round::Idle {}
        while let Round::Worked(_) = self.pump.round(now()).unwrap() {}
    }

    fn flight(&self, flid: &str) -> BTreeMap<String, String> {
        self.s.redis().hgetall(format!("{}flight:{flid}", self.s.cfg.redis_prefix)).unwrap()
    }

    fn flights(&self) -> RedisFlights {
        RedisFlights::connect(&self.s.cfg.redis_url, &self.s.cfg.redis_prefix).unwrap()
    }
}

fn dnld(seqn: u64, flights: &[(&str, &str)]) -> String {
    let body: String = flights
        .iter()
        .map(|(f, s)| format!("<FLTR><FLID>{f}</FLID><FLNO>MU{f}</FLNO><SODT>{s}</SODT><STND>2{f}</STND><PSDT PSNO=\"1\"><PSST>2{f}</PSST></PSDT></FLTR>"))
        .collect();
    fixtures::other(seqn, "SCHD", "DNLD", &format!("<SCHD><RECS>{}</RECS>{body}</SCHD>", flights.len()))
}

#[test]
fn the_daily_plan_snapshot_replaces_its_window_on_redis() {
    let mut st = stack();
    st.run(&[dnld(1, &[("A", "05MAR260900"), ("B", "05MAR261000"), ("C", "06MAR260900")])]);
    assert_eq!(st.flight("B")["STND"], "2B");
    assert_eq!(st.flight("A")["PSDT"], r#"[{"PSNO":"1","PSST":"2A"}]"#);
    assert_eq!(st.flights().generation().unwrap().0, 1);
    st.run(&[dnld(2, &[("A", "05MAR260900"), ("D", "05MAR261030")])]);
    assert!(st.flight("B").is_empty(), "absent from the window: deleted");
    assert_eq!(st.flight("C")["STND"], "2C", "outside the window: kept");
    assert_eq!(st.flight("D")["STND"], "2D");
    let (gen, by) = st.flights().generation().unwrap();
    assert_eq!(gen, 2);
    let mut pg = st.s.pg();
    assert_eq!(count(&mut pg, "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'"), 2);
    assert_eq!(by, pg.query_one("SELECT max(msg_id) FROM proc_state", &[]).unwrap().get::<_, i64>(0));
    // KAFKA:schd: one row per flight, B's row now its DELETE at the newer generation.
    let rows: Vec<(String, String)> = pg
        .query("SELECT partition_key, event_type FROM msg_event WHERE target = 'KAFKA:schd' ORDER BY partition_key", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let want: Vec<(String, String)> = [("A", "UPSERT"), ("B", "DELETE"), ("C", "UPSERT"), ("D", "UPSERT")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(rows, want);
    // No applied record left behind once PostgreSQL holds the outcome.
    let left: Vec<String> = st.s.redis().hkeys(format!("{}journal", st.s.cfg.redis_prefix)).unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_same_snapshot_applied_twice_changes_nothing_the_second_time_on_redis() {
    let st = stack();
    let raw = dnld(1, &[("A", "05MAR260900")]);
    let d = handlers::decide(&View::default(), &codec::decode(&raw).unwrap(), 10).unwrap();
    let mut f = st.flights();
    f.apply(&Applying::unnamed_all(&[(10, &d)])).unwrap();
    f.forget(&[10], std::time::SystemTime::UNIX_EPOCH).unwrap();
    let mut tampered = d.clone();
    tampered.flights[0].set.push(("STND".into(), "999".into()));
    f.apply(&Applying::unnamed_all(&[(10, &tampered)])).unwrap();
    assert_eq!(f.generation().unwrap(), (1, 10));
    assert_eq!(st.flight("A")["STND"], "2A");
    // An older snapshot never rolls the plan back either.
    f.apply(&Applying::unnamed_all(&[(9, &tampered)])).unwrap();
    assert_eq!(st.flight("A")["STND"], "2A");
}

#[test]
fn fdel_and_flop_on_redis() {
    let mut st = stack();
    st.run(&[
        fixtures::flop_stnd(1, "F1", "A1"),
        fixtures::flop(2, "CNCL", "F1", &[("CNCL", Some("05MAR260812"))]),
    ]);
    assert_eq!(st.flight("F1")["CNCL"], "2026-03-05T08:12");
    st.run(&[fixtures::flop(3, "CNCL", "F1", &[("CNCL", None)])]);
    assert!(!st.flight("F1").contains_key("CNCL"), "an empty CNCL undoes the cancellation");
    st.run(&[fixtures::flop(4, "FDEL", "F1", &[("FDEL", None)])]);
    assert!(st.flight("F1").is_empty());
    let idx: Vec<String> = st.s.redis().zrange(format!("{}sodt", st.s.cfg.redis_prefix), 0, -1).unwrap();
    assert!(!idx.contains(&"F1".to_string()), "gone from the plan's index too");
}

#[test]
fn reference_data_lands_in_ref_master() {
    let mut st = stack();
    let rec = |k: &str, n: &str| {
        format!("<AIRL><ITOP>{k}</ITOP><ONAM>{n}</ONAM><SUBC><SCOD>{k}1</SCOD></SUBC></AIRL>")
    };
    st.run(&[
        fixtures::other(
            1,
            "AIRL",
            "DNLD",
            &format!("<RECS>2</RECS>{}{}", rec("MU", "China Eastern"), rec("CA", "Air China")),
        ),
        fixtures::other(2, "AIRL", "UPD", &format!("<RECS>1</RECS>{}", rec("MU", "东方航空"))),
        fixtures::other(3, "AIRL", "DEL", "<RECS>1</RECS><AIRL><ITOP>CA</ITOP></AIRL>"),
    ]);
    let mut pg = st.s.pg();
    let rows: Vec<(String, String, String, String)> = pg
        .query("SELECT rtype, rkey, payload_json, source FROM ref_master ORDER BY rkey", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_str(), rows[0].3.as_str()), ("AIRL", "MU", "AODB"));
    let payload: serde_json::Value = serde_json::from_str(&rows[0].2).unwrap();
    assert_eq!(payload["ONAM"], "东方航空");
    assert_eq!(payload["SUBC"]["SCOD"], "MU1");
}
