//! Family B (the integration platform) on the real services (issue #15): the real airport's
//! full-table sync (read in place from ../shared/samples, never copied; skipped without it), a
//! smaller table deleting what it omits, an event after it, and master data replacing a list.

use crate::common;

use std::collections::BTreeSet;

use redis::Commands;

use common::*;
use msgx::codec::{self, Body};
use msgx::fixtures;
use msgx::ingress::{self, Poller};
use msgx::pump::{Pump, Round};
use msgx::store::flights::RedisFlights;
use msgx::store::mailbox::MysqlMailbox;
use msgx::store::pg::Pg;

const TABLE: &str = "liangzaisama_sms_a__DFOE_DFDL__full-table-sync_439-flights_KWE_20210413.xml";

struct Stack {
    s: Services,
    poller: Poller<Pg, MysqlMailbox>,
    pump: Pump<Pg, MysqlMailbox, RedisFlights>,
}

impl Stack {
    fn new() -> Stack {
        let s = Services::migrated("");
        let stats = std::sync::Arc::new(msgx::stats::Stats::default());
        let (poller, pump) = (s.poller(&stats), s.pump(&stats));
        Stack { s, poller, pump }
    }

    /// Puts `raw` in the mailbox and runs poll and pump until idle; its MSG_ID.
    fn process(&mut self, raw: &str) -> i64 {
        let id = self.s.insert_inbound(&[raw.to_string()])[0];
        while self.poller.round(now()).unwrap() != ingress::Round::Idle {}
        while let Round::Worked(_) = self.pump.round(now()).unwrap() {}
        id
    }

    fn state(&self, id: i64) -> (String, Option<String>) {
        let r = self
            .s
            .pg()
            .query_one("SELECT state, last_error FROM proc_state WHERE msg_id = $1", &[&id])
            .unwrap();
        (r.get(0), r.get(1))
    }

    fn flights(&self) -> BTreeSet<String> {
        let prefix = format!("{}flight:", self.s.cfg.redis_prefix);
        let keys: Vec<String> = self.s.redis().keys(format!("{prefix}*")).unwrap();
        keys.into_iter().map(|k| k[prefix.len()..].to_string()).collect()
    }

    fn flight(&self, flid: &str) -> std::collections::BTreeMap<String, String> {
        self.s.redis().hgetall(format!("{}flight:{flid}", self.s.cfg.redis_prefix)).unwrap()
    }

    /// (target, event type, key) of a message's events.
    fn events(&self, id: i64) -> Vec<(String, String, String)> {
        self.s
            .pg()
            .query(
                "SELECT target, event_type, partition_key FROM msg_event WHERE msg_id = $1 ORDER BY event_id",
                &[&id],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }
}

fn sample(name: &str) -> Option<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/samples").join(name);
    match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(e) => {
            common::missing(&format!("{} is not readable ({e})", path.display()));
            None
        }
    }
}

/// The `<DFLT>…</DFLT>` pieces of a table, in order.
fn records(table: &str) -> Vec<&str> {
    table
        .match_indices("<DFLT>")
        .map(|(i, _)| &table[i..i + table[i..].find("</DFLT>").unwrap() + 7])
        .collect()
}

#[test]
fn the_real_full_table_leaves_its_flights_a_smaller_one_deletes_the_missing_and_an_event_follows() {
    let Some(table) = sample(TABLE) else { return };
    let Body::Sync { records: decoded, .. } = codec::decode(&table).unwrap().body else {
        panic!("a full table")
    };
    let all: BTreeSet<String> = decoded.iter().map(|r| r.flid.clone()).collect();
    assert_eq!(all.len(), 439);
    let mut st = Stack::new();
    let first = st.process(&table);
    assert_eq!(st.state(first).0, "SUCCEEDED", "{:?}", st.state(first));
    assert_eq!(st.flights(), all, "exactly the flights the table carries");
    assert_eq!(st.events(first).len(), 439, "one KAFKA:schd upsert per flight");

    // The same table a minute later without ten flights from the middle of its window.
    let pieces = records(&table);
    let mut by_time: Vec<(String, usize)> = decoded
        .iter()
        .enumerate()
        .map(|(i, r)| (r.ffid.clone().unwrap_or_default().split('-').nth(2).unwrap_or("").to_string(), i))
        .collect();
    by_time.sort();
    let dropped: BTreeSet<usize> = by_time[200..210].iter().map(|(_, i)| *i).collect();
    let mut smaller =
        table.replace("<RECD>439</RECD>", "<RECD>429</RECD>").replace("<SEQN>390</SEQN>", "<SEQN>391</SEQN>");
    smaller = smaller.replacen("<MGID>", "<MGID>x", 1);
    for i in &dropped {
        smaller = smaller.replacen(pieces[*i], "", 1);
    }
    let gone: BTreeSet<String> = dropped.iter().map(|i| decoded[*i].flid.clone()).collect();
    let second = st.process(&smaller);
    assert_eq!(st.state(second).0, "SUCCEEDED", "{:?}", st.state(second));
    let left: BTreeSet<String> = all.difference(&gone).cloned().collect();
    assert_eq!(st.flights(), left, "the ten it omits are deleted, the rest kept");
    let deletes: BTreeSet<String> = st
        .events(second)
        .into_iter()
        .filter(|(t, ty, _)| t == "KAFKA:schd" && ty == "DELETE")
        .map(|(_, _, k)| k)
        .collect();
    assert_eq!(deletes, gone, "each deletion goes out on KAFKA:schd");

    // A landing for a flight the table holds: its state changes, one KAFKA:msg event.
    let flid = left.iter().next().unwrap().clone();
    let arre = fixtures::platform(
        7001,
        "DFME",
        "ARRE",
        &format!("<DFLT><FLID>{flid}</FLID><STAT>ARR</STAT><FRLT>20210413123400</FRLT></DFLT>"),
    );
    let third = st.process(&arre);
    assert_eq!(st.state(third).0, "SUCCEEDED");
    let f = st.flight(&flid);
    assert_eq!((f["STAT"].as_str(), f["FRLT"].as_str()), ("ARR", "2021-04-13T12:34:00"));
    assert_eq!(st.events(third), [("KAFKA:msg".to_string(), "UPSERT".to_string(), flid)]);
}

#[test]
fn a_table_whose_recd_is_not_its_count_changes_nothing() {
    let mut st = Stack::new();
    let table =
        format!("<RECD>3</RECD>{}{}", fixtures::dflt("9001", "0900", ""), fixtures::dflt("9002", "1000", ""));
    let id = st.process(&fixtures::platform(1, "DFOE", "DFDL", &table));
    let (state, err) = st.state(id);
    assert_ne!(state, "SUCCEEDED");
    assert!(err.unwrap_or_default().contains("RECD declares 3"), "PROTOCOL, naming the count");
    assert!(st.flights().is_empty(), "nothing applied");
}

#[test]
fn a_base_gtdl_replaces_the_gate_list_in_ref_master() {
    let mut st = Stack::new();
    let gate =
        |code: &str| format!("<GATE><ID>{code}0</ID><CODE>{code}</CODE><ENNM>Gate {code}</ENNM></GATE>");
    let add = st.process(&fixtures::platform(1, "BASE", "GTIE", &(gate("A1") + &gate("A2") + &gate("A3"))));
    let list = st.process(&fixtures::platform(2, "BASE", "GTDL", &(gate("A2") + &gate("A4"))));
    assert_eq!((st.state(add).0, st.state(list).0), ("SUCCEEDED".into(), "SUCCEEDED".into()));
    let keys: Vec<String> =
        st.s.pg()
            .query("SELECT rkey FROM ref_master WHERE rtype = 'GATE' ORDER BY rkey", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
    assert_eq!(keys, ["A2", "A4"], "the full list replaces the table's list");
}

#[test]
fn a_request_to_the_platform_is_skipped_with_its_reason() {
    let mut st = Stack::new();
    let id = st.process(&fixtures::platform(1, "REQE", "RQDF", "<RQDF><RQTP>FLID</RQTP></RQDF>"));
    let (state, reason) = st.state(id);
    assert_eq!(state, "SKIPPED");
    assert!(reason.unwrap_or_default().starts_with("not-for-msgx:"));
}

#[test]
fn a_seasonal_plan_is_kept_in_own_postgresql_and_replaced_whole() {
    let mut st = Stack::new();
    let rec = |flno: &str| {
        format!("<FLTR><FLNO>{flno}</FLNO><MVIN>D</MVIN><STDT>25OCT26</STDT><SCHT>0905</SCHT></FLTR>")
    };
    let season = |seqn: u64, recs: &[String]| {
        fixtures::other(
            seqn,
            "SCHS",
            "DNLD",
            &format!(
                "<SCHS><SNAM>W26</SNAM><APCD>XXX</APCD><RECS>{}</RECS>{}</SCHS>",
                recs.len(),
                recs.concat()
            ),
        )
    };
    let first = st.process(&season(1, &[rec("MU1"), rec("MU2")]));
    let second = st.process(&season(2, &[rec("MU3")]));
    assert_eq!((st.state(first).0, st.state(second).0), ("SUCCEEDED".into(), "SUCCEEDED".into()));
    let keys: Vec<String> =
        st.s.pg()
            .query("SELECT flight_key FROM season_plan WHERE season = 'W26'", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
    assert_eq!(keys, ["MU3/D/2026-10-25"]);
    assert!(st.flights().is_empty(), "nothing of a season goes to Redis");
    assert!(st.events(first).is_empty() && st.events(second).is_empty(), "no event");
}
