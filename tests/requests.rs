//! #41: requests to the AODB (SPEC §4.11) on the real services — `msgx request` registers a
//! request, the running instance writes it to `COUTMSGS`, the answer that comes back through
//! `CMINMSGS` closes it (G-RESP-GUARD), an unanswered one expires, an answer nobody asked for is
//! processed and counted.

use crate::common;

use std::time::Duration;

use common::*;
use msgx::fixtures;

/// `msgx ARGS` on `s`'s stores: exit code and output.
fn msgx(s: &Services, args: &[&str]) -> (Option<i32>, String) {
    let o = operator_command(s, args);
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// One request as `msgx requests --json` lists it.
fn listed(s: &Services, req_id: i64) -> serde_json::Value {
    let all = listed_all(s);
    let found = all.iter().find(|r| r["req_id"] == req_id).cloned();
    found.unwrap_or_else(|| panic!("req_id {req_id} listed: {all:?}"))
}

/// Every request as `msgx requests --json` lists them, newest first (at most 50).
fn listed_all(s: &Services) -> Vec<serde_json::Value> {
    let (code, json) = msgx(s, &["requests", "--json"]);
    assert_eq!(code, Some(0), "{json}");
    serde_json::from_str(&json).unwrap()
}

/// Waits until request `req_id` is in `state`; fails with the daemon's log.
fn wait_state(s: &Services, a: &Instance, req_id: i64, state: &str) -> serde_json::Value {
    let mut pg = s.pg();
    let q = format!("SELECT count(*) FROM req_track WHERE req_id = {req_id} AND state = '{state}'");
    let ok = eventually(Duration::from_secs(60), || count(&mut pg, &q) == 1);
    assert!(ok, "request {req_id} never became {state}:\n{}", a.log_text());
    listed(s, req_id)
}

/// `msgx request ARGS --yes`: the id it registered.
fn ask(s: &Services, args: &[&str]) -> i64 {
    let (code, out) = msgx(s, &[&["request"], args, &["--yes"]].concat());
    println!("msgx request {}:\n{out}", args.join(" "));
    assert_eq!(code, Some(0), "{out}");
    let id = out.split("req_id=").nth(1).and_then(|r| r.split(' ').next()).expect("registered req_id=");
    id.parse().unwrap()
}

/// The outbound mailbox: (COUTMSGS_ID, ROUTINGID, text), in order.
fn coutmsgs(s: &Services) -> Vec<(i64, String, String)> {
    use mysql::prelude::Queryable;
    s.mysql()
        .query("SELECT COUTMSGS_ID, ROUTINGID, COUTMSGS_CLOB_MSG FROM coutmsgs ORDER BY COUTMSGS_ID")
        .unwrap()
}

fn wait_coutmsgs(s: &Services, a: &Instance, n: usize) -> Vec<(i64, String, String)> {
    let ok = eventually(Duration::from_secs(60), || coutmsgs(s).len() == n);
    assert!(ok, "{n} COUTMSGS rows never came:\n{}", a.log_text());
    coutmsgs(s)
}

const SUCCEEDED: &str = "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'";

#[test]
fn a_window_request_goes_to_coutmsgs_and_its_schd_resp_closes_it_and_replaces_the_window() {
    let s = Services::migrated("jobs-interval = \"1s\"\n");
    // The day as msgx holds it: three flights on 5 March.
    s.insert_inbound(&[fixtures::schd(
        1,
        "DNLD",
        &[("A1", "05MAR261200"), ("A2", "05MAR261300"), ("A3", "05MAR261400")],
    )]);
    let a = Instance::run(&s, "asker", "");
    settled(&s, &a, &[(SUCCEEDED, 1)]);

    // A dry run shows the text and writes nothing.
    let (code, out) =
        msgx(&s, &["request", "flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(
            "would ask the AODB: type=RQFD key=2026-03-05T00:00/2026-03-05T23:59 routing_id=VIEWRQFD"
        ),
        "{out}"
    );
    assert_eq!(count(&mut s.pg(), "SELECT count(*) FROM req_track"), 0, "a dry run registers nothing");

    let req = ask(&s, &["flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59"]);
    let rows = wait_coutmsgs(&s, &a, 1);
    println!("COUTMSGS row (sis): {rows:?}");
    let (row_id, routing, xml) = &rows[0];
    assert_eq!(routing, "VIEWRQFD");
    assert!(xml.contains("<TYPE>RQFD</TYPE><STYP>NONE</STYP>"), "{xml}");
    assert!(xml.contains("<RQFD><STDB>05MAR260000</STDB><STDE>05MAR262359</STDE></RQFD>"), "{xml}");
    let waiting = wait_state(&s, &a, req, "WAITING");
    let seqn = waiting["seqn"].as_i64().expect("its number on the wire");
    assert!(xml.contains(&format!("<SNDR>VIEW</SNDR><SEQN>{seqn}</SEQN>")), "{xml}");
    assert!(a.wait_for_log(&format!("request sent req_id={req} seqn={seqn}"), Duration::from_secs(10)));
    assert_eq!(waiting["coutmsgs_id"], *row_id, "{waiting}");
    assert!(waiting["expires_at"].is_string(), "{waiting}");

    // One open request per type and key.
    let (code, out) =
        msgx(&s, &["request", "flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59", "--yes"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("is open: req_id={req} state=WAITING")), "{out}");
    let (_, open) = msgx(&s, &["requests", "--open"]);
    println!("msgx requests --open:\n{open}");
    assert!(open.contains("WAITING"), "{open}");

    // The AODB answers with the window: A2 is gone from it, A4 is new.
    let answer = s.insert_inbound(&[fixtures::schd(
        2,
        "RESP",
        &[("A1", "05MAR261200"), ("A3", "05MAR261400"), ("A4", "05MAR261500")],
    )])[0];
    let done = wait_state(&s, &a, req, "DONE");
    assert_eq!(done["answer_msg_id"], answer, "{done}");
    assert!(
        a.wait_for_log(&format!("request answered req_id={req} type=RQFD"), Duration::from_secs(10)),
        "{}",
        a.log_text()
    );
    let flights = redis_flights(&s);
    assert_eq!(flights.keys().collect::<Vec<_>>(), ["A1", "A3", "A4"], "the answer replaced the window");
    let (_, all) = msgx(&s, &["requests"]);
    println!("msgx requests:\n{all}");
    assert!(all.contains(&format!("msg {answer}")), "{all}");
    assert!(!a.log_text().contains("unsolicited answer"), "{}", a.log_text());
}

#[test]
fn an_unanswered_request_expires_a_late_answer_is_noted_and_an_unsolicited_one_counted() {
    let s = Services::migrated("jobs-interval = \"1s\"\n[msgx.requests]\ntimeout = \"1s\"\n");
    let a = Instance::run(&s, "expiring", "");
    let req = ask(&s, &["reference", "slst"]);
    let rows = wait_coutmsgs(&s, &a, 1);
    println!("COUTMSGS row (sis, reference): {rows:?}");
    assert_eq!(rows[0].1, "VIEWRQRD");
    assert!(rows[0].2.contains("<TYPE>RQRD</TYPE><STYP>SLST</STYP>"), "{}", rows[0].2);
    assert!(rows[0].2.contains("<RQRD><RTYP>SLST</RTYP></RQRD>"), "{}", rows[0].2);
    let expired = wait_state(&s, &a, req, "EXPIRED");
    assert!(expired["answer_msg_id"].is_null(), "{expired}");
    assert!(
        a.wait_for_log(&format!("request expired req_id={req} type=RQRD key=SLST"), Duration::from_secs(10))
    );
    let (_, all) = msgx(&s, &["requests"]);
    println!("msgx requests (expired):\n{all}");
    assert!(all.contains("EXPIRED"), "{all}");

    // The key is free again once expired.
    let (code, out) = msgx(&s, &["request", "reference", "SLST"]);
    assert_eq!(code, Some(2), "a dry run: {out}");

    // The late answer is processed and noted on the request; an answer nobody asked for is
    // processed and counted.
    let body = |k: &str| format!("<RECS>1</RECS><SLST><SCOD>{k}</SCOD><NOTE>x</NOTE></SLST>");
    let late = s.insert_inbound(&[fixtures::other(1, "SLST", "RESP", &body("S1"))])[0];
    settled(&s, &a, &[(SUCCEEDED, 1)]);
    assert!(
        a.wait_for_log(&format!("request answered after it expired req_id={req}"), Duration::from_secs(10))
    );
    let noted = listed(&s, req);
    assert_eq!(
        (noted["state"].as_str(), noted["answer_msg_id"].as_i64()),
        (Some("EXPIRED"), Some(late)),
        "{noted}"
    );
    let glst = "<RECS>1</RECS><GLST><GCOD>G1</GCOD></GLST>";
    let stray = s.insert_inbound(&[fixtures::other(2, "GLST", "RESP", glst)])[0];
    settled(&s, &a, &[(SUCCEEDED, 2)]);
    assert!(
        a.wait_for_log(&format!("unsolicited answer msg_id={stray}"), Duration::from_secs(10)),
        "{}",
        a.log_text()
    );
    assert_eq!(count(&mut s.pg(), "SELECT count(*) FROM ref_master WHERE rtype = 'GLST'"), 1, "processed");
    let mut a = a;
    a.signal("-TERM");
    a.wait(Duration::from_secs(30));
    assert!(a.log_text().contains("unsolicited_answers=1"), "{}", a.log_text());
}

/// #55 item 1, on the real services: a window answer closes only the sent request whose window
/// holds its times. Before, a RESP for 7 March closed the open request for 5 March (the oldest
/// open), an empty RESP closed it too, and after a request expired every unrelated RESP was filed
/// as its late answer; now each of those is unsolicited, counted, and the request waits for its
/// own answer.
#[test]
fn regression_a_window_answer_closes_only_the_request_whose_window_holds_it() {
    let s = Services::migrated("jobs-interval = \"1s\"\n[msgx.requests]\ntimeout = \"8s\"\n");
    let mut a = Instance::run(&s, "exact", "");
    let day5 = ask(&s, &["flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59"]);
    wait_coutmsgs(&s, &a, 1);
    wait_state(&s, &a, day5, "WAITING");
    let resp = |m: u64, flights: &[(&str, &str)]| fixtures::schd(m, "RESP", flights);
    // Another day's answer, and one with no flights (no times): neither answers 5 March.
    let other_day = s.insert_inbound(&[resp(1, &[("B1", "07MAR260900")])])[0];
    let empty = s.insert_inbound(&[resp(2, &[])])[0];
    settled(&s, &a, &[(SUCCEEDED, 2)]);
    for m in [other_day, empty] {
        assert!(
            a.wait_for_log(&format!("unsolicited answer msg_id={m}"), Duration::from_secs(10)),
            "{}",
            a.log_text()
        );
    }
    let open = listed(&s, day5);
    assert!(open["answer_msg_id"].is_null() && open["state"] != "DONE", "{open}");
    // It expires unanswered; another day's answer is still not its late answer.
    wait_state(&s, &a, day5, "EXPIRED");
    let stray = s.insert_inbound(&[resp(3, &[("B2", "07MAR261000")])])[0];
    settled(&s, &a, &[(SUCCEEDED, 3)]);
    assert!(
        a.wait_for_log(&format!("unsolicited answer msg_id={stray}"), Duration::from_secs(10)),
        "{}",
        a.log_text()
    );
    assert!(listed(&s, day5)["answer_msg_id"].is_null());
    // Its own answer, late, is noted on it.
    let own = s.insert_inbound(&[resp(4, &[("A1", "05MAR260900"), ("A2", "05MAR261800")])])[0];
    settled(&s, &a, &[(SUCCEEDED, 4)]);
    assert!(
        a.wait_for_log(&format!("request answered after it expired req_id={day5}"), Duration::from_secs(10)),
        "{}",
        a.log_text()
    );
    assert_eq!(listed(&s, day5)["answer_msg_id"].as_i64(), Some(own));
    a.signal("-TERM");
    a.wait(Duration::from_secs(30));
    assert!(a.log_text().contains("unsolicited_answers=3"), "{}", a.log_text());
}

/// Loses the commit of the first round that closes a request: the trigger ends its own session
/// inside the round's transaction, after Redis applied the round (a crash, a failover, a network
/// cut at that moment). A sequence counts, as it is not rolled back with the transaction.
const LOSE_THE_FIRST_ANSWERING_COMMIT: &str = "
    CREATE SEQUENCE lose_once;
    CREATE FUNCTION lose_the_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.answer_msg_id IS NOT NULL AND nextval('lose_once') = 1 THEN
            PERFORM pg_terminate_backend(pg_backend_pid());
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER lose_the_commit BEFORE UPDATE ON req_track
        FOR EACH ROW EXECUTE FUNCTION lose_the_commit();";

fn redis_record(s: &Services, msg_id: i64) -> Option<String> {
    s.pg().query_one("SELECT redis_record FROM proc_state WHERE msg_id = $1", &[&msg_id]).unwrap().get(0)
}

/// #55 item 2, on the real stores: the PostgreSQL commit of the round that answers a request is
/// lost after Redis applied it; the retry reuses the decision Redis journalled. Before, the
/// journal held no answer, the retry closed nothing, the request stayed WAITING and then logged
/// `request expired` although it had been answered. Now the answer travels with the decision.
#[test]
fn regression_an_answer_whose_commit_was_lost_after_the_redis_apply_still_closes_its_request() {
    let s = Services::migrated("jobs-interval = \"1s\"\n[msgx.requests]\ntimeout = \"30s\"\n");
    s.pg().batch_execute(LOSE_THE_FIRST_ANSWERING_COMMIT).unwrap();
    let mut a = Instance::run(&s, "lost", "");
    let day5 = ask(&s, &["flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59"]);
    wait_coutmsgs(&s, &a, 1);
    wait_state(&s, &a, day5, "WAITING");
    let answer = s.insert_inbound(&[fixtures::schd(1, "RESP", &[("A1", "05MAR260900")])])[0];
    settled(&s, &a, &[(SUCCEEDED, 1)]);
    assert_eq!(
        count(&mut s.pg(), "SELECT count(*) FROM lose_once WHERE is_called"),
        1,
        "the commit was lost"
    );
    assert_eq!(redis_record(&s, answer).as_deref(), Some("journal"), "the retry reused the journal");
    let closed = wait_state(&s, &a, day5, "DONE");
    assert_eq!(closed["answer_msg_id"].as_i64(), Some(answer), "{closed}");
    assert!(redis_flights(&s).contains_key("A1"));
    a.signal("-TERM");
    a.wait(Duration::from_secs(30));
    let log = a.log_text();
    assert!(log.contains(&format!("request answered req_id={day5} type=RQFD")), "{log}");
    assert!(!log.contains("request expired") && !log.contains("unsolicited answer"), "{log}");
}

/// The stale snapshot (#55 item 2, #68): an answer committed to the mailbox late, after a newer
/// snapshot had moved the plan's generation, changes nothing — so it answers nothing: the request
/// waits on, and the newer answer that follows is applied and closes it. Before #68 the stale
/// answer closed it DONE, and a heal's window stopped being awaited with its flights still lost.
#[test]
fn regression_a_stale_answer_closes_no_request_and_a_newer_one_does() {
    let s = Services::migrated("jobs-interval = \"1s\"\n[msgx.requests]\ntimeout = \"60s\"\n");
    let mut a = Instance::run(&s, "stale", "");
    let day5 = ask(&s, &["flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59"]);
    wait_coutmsgs(&s, &a, 1);
    wait_state(&s, &a, day5, "WAITING");
    let late = Open::insert(&s, &fixtures::schd(1, "RESP", &[("A1", "05MAR260900")]));
    let newer = s.insert_inbound(&[fixtures::schd(2, "DNLD", &[("B1", "06MAR260900")])])[0];
    settled(&s, &a, &[(SUCCEEDED, 1)]);
    let late = late.commit();
    settled(&s, &a, &[(SUCCEEDED, 2)]);
    assert!(late < newer);
    assert_eq!(redis_record(&s, late).as_deref(), Some("journal"), "not newer: journalled, not applied");
    let flagged = "SELECT snapshot_stale FROM proc_state WHERE msg_id = $1";
    assert_eq!(s.pg().query_one(flagged, &[&late]).unwrap().get::<_, Option<bool>>(0), Some(true));
    assert!(a.wait_for_log(&format!("snapshot msg_id={late} is not newer"), Duration::from_secs(10)));
    let waiting = listed(&s, day5);
    assert_eq!(
        (waiting["state"].as_str(), &waiting["answer_msg_id"]),
        (Some("WAITING"), &serde_json::Value::Null)
    );
    let fresh = s.insert_inbound(&[fixtures::schd(3, "RESP", &[("A1", "05MAR260900")])])[0];
    let closed = wait_state(&s, &a, day5, "DONE");
    assert_eq!(closed["answer_msg_id"].as_i64(), Some(fresh), "{closed}");
    a.signal("-TERM");
    a.wait(Duration::from_secs(30));
    let log = a.log_text();
    assert!(log.contains(&format!("snapshot msg_id={late} is not newer than the daily plan's generation; nothing changed, nothing published; it answers no request")), "{log}");
    assert!(log.contains(&format!("request answered req_id={day5} type=RQFD")), "{log}");
}

#[test]
fn a_platform_request_carries_its_mgid_and_the_answer_with_that_rmid_closes_it() {
    let s = Services::migrated(
        "jobs-interval = \"1s\"\n[msgx.requests]\ndialect = \"platform\"\nreceiver = \"FIMS\"\nairport = \"ZXXX\"\n",
    );
    let a = Instance::run(&s, "platform", "");
    let (code, out) = msgx(&s, &["request", "reference", "SLST", "--yes"]);
    assert_eq!(code, Some(2), "the platform dialect asks no reference list: {out}");
    let window = ask(&s, &["flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59"]);
    let one = ask(&s, &["flight", "4711"]);
    let rows = wait_coutmsgs(&s, &a, 2);
    println!("COUTMSGS rows (platform): {rows:?}");
    for (_, routing, xml) in &rows {
        assert_eq!(routing, "VIEWRQDF");
        assert!(xml.contains("<TYPE>REQE</TYPE><STYP>RQDF</STYP>"), "{xml}");
        assert!(xml.contains("<RCVR>FIMS</RCVR>") && xml.contains("<APOT>ZXXX</APOT>"), "{xml}");
    }
    assert!(
        rows[0].2.contains("<RQTP>DFTM</RQTP><STTM>20260305000000</STTM><ENTM>20260305235900</ENTM>"),
        "{}",
        rows[0].2
    );
    assert!(rows[1].2.contains("<RQTP>FLID</RQTP><FLID>4711</FLID>"), "{}", rows[1].2);
    let waiting = wait_state(&s, &a, window, "WAITING");
    let mgid = waiting["mgid"].as_str().expect("a platform request has its MGID").to_string();
    assert!(rows[0].2.contains(&format!("<MGID>{mgid}</MGID>")), "{}", rows[0].2);

    // The platform's full table, carrying the window request's MGID as RMID.
    let table = fixtures::dfdl(7, "20260305", &[("4711", "0900"), ("4712", "1000")])
        .replace("<RMID/>", &format!("<RMID>{mgid}</RMID>"));
    let answer = s.insert_inbound(&[table])[0];
    let done = wait_state(&s, &a, window, "DONE");
    assert_eq!(done["answer_msg_id"], answer, "{done}");
    assert_eq!(listed(&s, one)["state"], "WAITING", "an answer closes the request it names, no other");
    assert!(redis_flights(&s).contains_key("4712"), "the answer was processed");
}

/// A heal by request (#41): 5 March's plan and a FLOP that puts H1 on it processed, and K1 on 6
/// March; then, while msgx is stopped, the plan's mailbox row purged and Redis emptied. The
/// instance started after it heals what the texts prove and asks the AODB for 5 March.
fn heal_by_request(s: &Services) -> Instance {
    use mysql::prelude::Queryable;
    let day = |m: u64, styp: &str| fixtures::schd(m, styp, &[("H1", "05MAR260900"), ("H2", "05MAR261000")]);
    let ids = s.insert_inbound(&[
        day(1, "DNLD"),
        // A FLOP whose FFID puts H1 on that day (05MAR26 14:30).
        fixtures::flop_body("STND", "H1", "<STND>B9</STND>"),
        fixtures::schd(3, "DNLD", &[("K1", "06MAR260900")]),
    ]);
    let mut a = Instance::run(s, "before", "");
    settled(s, &a, &[(SUCCEEDED, 3)]);
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(30)), Some(0), "{}", a.log_text());
    // While msgx is stopped: the mailbox owner purges the plan's row, and Redis is emptied.
    s.mysql().exec_drop("DELETE FROM cminmsgs WHERE CMINMSGS_ID = ?", (ids[0],)).unwrap();
    assert!(empty_redis(s) > 0, "msgx wrote Redis");
    println!("3 messages processed; msgx stopped; mailbox row {} purged, Redis emptied; msgx starts", ids[0]);
    let b = Instance::run(s, "after", "");
    assert!(b.wait_for_log("heal by request req_id=", Duration::from_secs(60)), "{}", b.log_text());
    assert!(
        b.wait_for_log("consistency: healed; the stores agree again", Duration::from_secs(30)),
        "{}",
        b.log_text()
    );
    b
}

/// A metric's value as `/metrics` serves it, once it equals `want`.
fn metric_becomes(i: &Instance, series: &str, want: &str) -> bool {
    let addr = endpoint(i);
    eventually(Duration::from_secs(30), || {
        http_get(&addr, "/metrics")
            .1
            .lines()
            .any(|l| l.strip_prefix(series).is_some_and(|v| v.trim() == want))
    })
}

/// #55 item 3, on the real services: the AODB never answers a heal's request. Before, the request
/// EXPIRED after `timeout` and msgx went silent: `/ready` ready, `status --check` OK, no counter,
/// and the window was never healed nor reported. Now it is asked again (`heal-tries`), stays
/// degraded, and after the last try `status --check` names the window until a person dismisses it.
#[test]
fn regression_a_heal_the_aodb_never_answers_is_asked_again_and_then_waits_for_a_person() {
    let s = Services::migrated(
        "jobs-interval = \"1s\"\n[msgx.requests]\ntimeout = \"2s\"\nheal-tries = 2\nheal-backoff = \"1s\"\n",
    );
    let b = heal_by_request(&s);
    let first: i64 = {
        let log = b.log_text();
        let asked = log.lines().find(|l| l.contains("heal by request")).unwrap().to_string();
        asked.split("req_id=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()
    };
    assert!(
        b.wait_for_log(&format!("request expired req_id={first}"), Duration::from_secs(60)),
        "{}",
        b.log_text()
    );
    assert!(
        b.wait_for_log(&format!("after req_id={first} type=RQFD"), Duration::from_secs(30)),
        "{}",
        b.log_text()
    );
    let rows = wait_coutmsgs(&s, &b, 2);
    assert_ne!(rows[0].2, rows[1].2, "the second try is a request of its own (its own SEQN)");
    assert!(rows[1].2.contains("<RQFD><STDB>05MAR260000</STDB><STDE>05MAR262359</STDE></RQFD>"), "{rows:?}");
    assert!(b.wait_for_log("heal request unanswered req_id=", Duration::from_secs(60)), "{}", b.log_text());
    let log = b.log_text();
    let gave_up = log.lines().find(|l| l.contains("heal request unanswered")).unwrap().to_string();
    println!("{}", log.lines().filter(|l| l.contains("request ")).collect::<Vec<_>>().join("\n"));
    assert!(gave_up.contains("ERROR") && gave_up.contains("none of 2 tries"), "{gave_up}");
    let last: i64 = gave_up.split("req_id=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert_ne!(last, first);
    assert_eq!(listed(&s, last)["tries"], 2);

    // Degraded, and said so everywhere, until a person decides.
    let (code, check) = msgx(&s, &["status", "--check"]);
    assert_eq!(code, Some(1), "WARNING: {check}");
    assert!(
        check.contains(&format!("the AODB answered none of 2 request(s) a heal made for the flights of 2026-03-05T00:00/2026-03-05T23:59 (req_id={last})")),
        "{check}"
    );
    let (_, status) = msgx(&s, &["status"]);
    assert!(
        status.contains(&format!(
            "req_id={last} RQFD 2026-03-05T00:00/2026-03-05T23:59 EXPIRED unanswered — degraded"
        )),
        "{status}"
    );
    let addr = endpoint(&b);
    assert!(http_get(&addr, "/ready").1.contains("degraded"), "{:?}", http_get(&addr, "/ready"));
    assert!(metric_becomes(&b, "msgx_requests_awaited", "1"));
    assert!(metric_becomes(&b, "msgx_requests_expired_total{origin=\"heal\"}", "2"));
    println!("msgx status --check: {}", check.trim());

    let (code, out) = msgx(&s, &["requests", "--dismiss", &last.to_string()]);
    assert_eq!(code, Some(2), "a note is required: {out}");
    // #68: the first try awaits nothing (the last took its place): not a person's to dismiss.
    let (code, out) = msgx(&s, &["requests", "--dismiss", &first.to_string(), "--note", "wrong one"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("is not a heal's window awaiting the AODB: nothing to dismiss"), "{out}");
    assert_eq!(listed(&s, first)["dismissed_note"], serde_json::Value::Null);
    let (code, out) =
        msgx(&s, &["requests", "--dismiss", &last.to_string(), "--note", "AODB down; day re-sent as DNLD"]);
    assert_eq!(code, Some(0), "{out}");
    println!("{}", out.trim());
    let (code, check) = msgx(&s, &["status", "--check"]);
    assert_eq!(code, Some(0), "{check}");
    assert!(metric_becomes(&b, "msgx_requests_awaited", "0"));
    assert!(eventually(Duration::from_secs(30), || http_get(&addr, "/ready").1 == "ready\n"));
    assert_eq!(listed(&s, last)["dismissed_note"], "AODB down; day re-sent as DNLD");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(coutmsgs(&s).len(), 2, "asked no more");
}

/// #41, healing by request: Redis emptied while msgx was stopped, and the mailbox no longer
/// holds the text of the day's plan. The heal rebuilds what the other texts prove, asks the
/// AODB for the plan's day instead of stopping (exit 6), and the stages run meanwhile —
/// degraded in `msgx status`, `status --check` and `/ready`. The answer heals the day.
#[test]
fn a_heal_that_cannot_rebuild_asks_the_aodb_and_the_answer_heals_the_window() {
    let t0 = std::time::Instant::now();
    let at = || format!("{:>5.1}s", t0.elapsed().as_secs_f64());
    let s = Services::migrated("jobs-interval = \"1s\"\n");
    let b = heal_by_request(&s);
    let day = |m: u64, styp: &str| fixtures::schd(m, styp, &[("H1", "05MAR260900"), ("H2", "05MAR261000")]);
    let log = b.log_text();
    let asked = log.lines().find(|l| l.contains("heal by request")).unwrap().to_string();
    println!("{} {asked}", at());
    assert!(asked.contains("key=2026-03-05T00:00/2026-03-05T23:59"), "{asked}");
    assert!(!log.contains("not healed"), "{log}");
    let rows = wait_coutmsgs(&s, &b, 1);
    assert!(rows[0].2.contains("<RQFD><STDB>05MAR260000</STDB><STDE>05MAR262359</STDE></RQFD>"), "{rows:?}");
    println!("{} COUTMSGS row {}: {} {}", at(), rows[0].0, rows[0].1, rows[0].2);

    // Degraded meanwhile, and serving: a new message is processed.
    let (_, status) = msgx(&s, &["status"]);
    assert!(status.contains("requests open: 1") && status.contains("degraded"), "{status}");
    let (code, check) = msgx(&s, &["status", "--check"]);
    assert_eq!(code, Some(1), "WARNING: {check}");
    assert!(check.contains("degraded: 1 window(s) of flights await the AODB's answer"), "{check}");
    let addr = endpoint(&b);
    let ready = eventually(Duration::from_secs(30), || http_get(&addr, "/ready").1.contains("degraded"));
    assert!(ready, "/ready: {:?}", http_get(&addr, "/ready"));
    println!("{} msgx status --check: {} /ready: {}", at(), check.trim(), http_get(&addr, "/ready").1.trim());
    s.insert_inbound(&[fixtures::flop_stnd(4, "K1", "C3")]);
    settled(&s, &b, &[(SUCCEEDED, 4)]);
    let meanwhile = redis_flights(&s);
    assert!(meanwhile.contains_key("K1") && !meanwhile.contains_key("H2"), "{meanwhile:?}");
    let (_, h1) = msgx(&s, &["flight", "H1"]);
    assert!(
        h1.contains("degraded: its day's flights await the AODB's answer after a heal (req_id=1"),
        "{h1}"
    );
    println!(
        "{} msgx flight H1: {}",
        at(),
        h1.lines().find(|l| l.starts_with("degraded")).unwrap_or_default()
    );
    let (_, k1) = msgx(&s, &["flight", "K1"]);
    assert!(!k1.contains("degraded"), "another day: {k1}");
    println!("{} msg 4 processed meanwhile; flights held: {:?}", at(), meanwhile.keys().collect::<Vec<_>>());

    // The AODB answers with the day.
    let answer = s.insert_inbound(&[day(5, "RESP")])[0];
    let req: i64 = asked.split("req_id=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let done = wait_state(&s, &b, req, "DONE");
    assert_eq!(done["answer_msg_id"], answer, "{done}");
    let healed = redis_flights(&s);
    assert!(["H1", "H2", "K1"].iter().all(|f| healed.contains_key(*f)), "{healed:?}");
    let (_, h1) = msgx(&s, &["flight", "H1", "--json"]);
    assert!(h1.contains("\"awaiting\": null"), "{h1}");
    println!(
        "{} answer msg {answer} processed: request {req} DONE; flights held: {:?}",
        at(),
        healed.keys().collect::<Vec<_>>()
    );
    let ok = eventually(Duration::from_secs(30), || http_get(&addr, "/ready").1 == "ready\n");
    assert!(ok, "/ready after the answer: {:?}", http_get(&addr, "/ready"));
    let (code, check) = msgx(&s, &["status", "--check"]);
    assert_eq!(code, Some(0), "{check}");
    println!("{} /ready: ready; msgx status --check: {}", at(), check.trim());
}

/// #41, `msgx.requests.on-empty`: a first start — Redis empty, nothing msgx holds to rebuild it
/// from — asks the AODB for today's flights; a second start while the request is open does not
/// ask again.
/// #55: the text of a message that changed flights gone, its events past retention, Redis
/// emptied: nothing tells which day its flights lie on. Before, the heal asked the AODB for
/// today's window and ended degraded with an answer for other flights; now it stops for a
/// person (exit 6), names the message, and asks the AODB nothing — with `on-empty` at its
/// default (true), which only a first start reads.
#[test]
fn regression_a_heal_that_cannot_tell_the_day_stops_for_a_person_and_asks_for_no_day() {
    use mysql::prelude::Queryable;
    let s = Services::migrated("jobs-interval = \"1s\"\n");
    let ids = s.insert_inbound(&[
        fixtures::schd(1, "DNLD", &[("H1", "05MAR260900"), ("H2", "05MAR261000")]),
        fixtures::flop_body("STND", "H1", "<STND>B9</STND>"),
    ]);
    let mut a = Instance::run(&s, "before", "");
    settled(&s, &a, &[(SUCCEEDED, 2)]);
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(30)), Some(0), "{}", a.log_text());
    // While msgx is stopped: the plan's row purged, its events gone as retention takes them,
    // Redis emptied.
    s.mysql().exec_drop("DELETE FROM cminmsgs WHERE CMINMSGS_ID = ?", (ids[0],)).unwrap();
    let gone = s.pg().execute("DELETE FROM msg_event WHERE msg_id = $1", &[&ids[0]]).unwrap();
    assert!(gone > 0, "message {} had events", ids[0]);
    assert!(empty_redis(&s) > 0, "msgx wrote Redis");
    let mut b = Instance::run(&s, "after", "");
    assert_eq!(b.wait(Duration::from_secs(60)), Some(6), "{}", b.log_text());
    let log = b.log_text();
    let why = log.lines().find(|l| l.contains("which day's flights they changed is not known"));
    let why = why.unwrap_or_else(|| panic!("no reason given:\n{log}"));
    assert!(why.contains(&format!("SUCCEEDED message(s) {} that changed flights", ids[0])), "{why}");
    println!("exit 6: {why}");
    assert!(!log.contains("heal by request"), "{log}");
    let (_, listed) = msgx(&s, &["requests", "--json"]);
    assert_eq!(listed.trim(), "[]", "asked the AODB nothing");
    assert!(coutmsgs(&s).is_empty());

    // A person names the window to ask (msgx.requests.heal-window) and starts msgx again: it
    // asks that window, serves degraded, and the answer heals it.
    let mut s = s;
    let window = "2026-03-05T00:00/2026-03-05T23:59";
    s.toml =
        s.toml.replacen("[msgx.requests]\n", &format!("[msgx.requests]\nheal-window = \"{window}\"\n"), 1);
    let c = Instance::run(&s, "named", "");
    assert!(c.wait_for_log("heal by request req_id=", Duration::from_secs(60)), "{}", c.log_text());
    let log = c.log_text();
    let named = log.lines().find(|l| l.contains("msgx.requests.heal-window names")).unwrap_or_default();
    assert!(named.contains(&ids[0].to_string()) && named.contains(window), "{log}");
    println!("{named}");
    let rows = wait_coutmsgs(&s, &c, 1);
    assert!(rows[0].2.contains("<RQFD><STDB>05MAR260000</STDB><STDE>05MAR262359</STDE></RQFD>"), "{rows:?}");
    let (code, check) = msgx(&s, &["status", "--check"]);
    assert_eq!(code, Some(1), "degraded: {check}");
    let req = listed_all(&s)[0]["req_id"].as_i64().unwrap();
    s.insert_inbound(&[fixtures::schd(5, "RESP", &[("H1", "05MAR260900"), ("H2", "05MAR261000")])]);
    wait_state(&s, &c, req, "DONE");
    assert!(["H1", "H2"].iter().all(|f| redis_flights(&s).contains_key(*f)));
    let (code, check) = msgx(&s, &["status", "--check"]);
    assert_eq!(code, Some(0), "{check}");
}

#[test]
fn a_first_start_with_an_empty_redis_asks_for_todays_flights_once() {
    let s = Services::migrated("jobs-interval = \"1s\"\n[msgx.requests]\non-empty = true\n");
    let mut a = Instance::run(&s, "first", "");
    assert!(a.wait_for_log("first start req_id=1", Duration::from_secs(60)), "{}", a.log_text());
    let rows = wait_coutmsgs(&s, &a, 1);
    let line = a.log_text().lines().find(|l| l.contains("first start req_id=")).unwrap().to_string();
    assert!(line.contains("nothing is degraded"), "{line}");
    println!("{line}\nCOUTMSGS row: {rows:?}");
    let today = line.split("key=").nth(1).unwrap().get(..10).unwrap().to_string();
    let stdb = jiff::civil::Date::strptime("%Y-%m-%d", &today).unwrap().strftime("%d%b%y0000").to_string();
    assert!(rows[0].2.contains(&format!("<STDB>{}</STDB>", stdb.to_ascii_uppercase())), "{rows:?}");
    a.signal("-TERM");
    a.wait(Duration::from_secs(30));
    let b = Instance::run(&s, "second", "");
    assert!(b.wait_for_log("first start req_id=1", Duration::from_secs(60)), "{}", b.log_text());
    assert!(b.log_text().contains("already asked the AODB for today's flights"), "{}", b.log_text());
    // Recorded and reported as what it is (#55; before: origin `heal`, and `msgx status`,
    // `/ready` and `status --check` said degraded after a plain first start).
    assert_eq!(listed(&s, 1)["origin"], "first-start");
    let (_, status) = msgx(&s, &["status"]);
    assert!(status.contains("requests open: 1") && status.contains("asked at the first start"), "{status}");
    assert!(!status.contains("degraded:"), "{status}");
    let (code, check) = msgx(&s, &["status", "--check"]);
    assert_eq!(code, Some(0), "{check}");
    assert!(check.starts_with("MSGX OK") && !check.contains("degraded"), "{check}");
    let addr = endpoint(&b);
    let scraped = eventually(Duration::from_secs(30), || {
        let (_, body) = http_get(&addr, "/metrics");
        body.contains("msgx_requests_open{origin=\"first-start\"} 1")
            && body.contains("msgx_requests_open{origin=\"heal\"} 0")
    });
    assert!(scraped, "{}", http_get(&addr, "/metrics").1);
    assert_eq!(http_get(&addr, "/ready"), (200, "ready\n".to_string()));
    assert_eq!(coutmsgs(&s).len(), 1, "asked once");
}

/// The number and MGID a COUTMSGS text carries.
fn wire(xml: &str) -> (String, String) {
    let between = |a: &str, b: &str| {
        xml.split(a).nth(1).and_then(|r| r.split(b).next()).unwrap_or_default().to_string()
    };
    (between("<SEQN>", "</SEQN>"), between("<MGID>", "</MGID>"))
}

/// #55 item 4, on a promoted lagging replica: own PostgreSQL goes back in time and hands out a
/// lost request's `req_id` again (more requests were registered than the 32 values a sequence
/// logs ahead). Before, the new request went out with the lost one's SEQN and MGID (both were the
/// `req_id`), and the late answer to the lost request (its RMID) closed the new one with another
/// flight's data. Now its number on the wire is another, and that late answer is unsolicited.
#[test]
fn regression_a_request_number_is_never_sent_twice_after_postgres_went_back() {
    let pair = Pair::start("requests", false);
    let platform = "jobs-interval = \"1s\"\n[msgx.requests]\ndialect = \"platform\"\nreceiver = \"FIMS\"\nairport = \"ZXXX\"\n";
    let s = Services::migrated_on(platform, Stores { pg: Some(pair.url()), ..Default::default() });
    let db = s.cfg.pg_url.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
    let mut a = Instance::run(&s, "before", "");
    let kept = ask(&s, &["flights", "--from", "2026-03-05T00:00", "--to", "2026-03-05T23:59"]);
    wait_state(&s, &a, kept, "WAITING");
    let at_replica = format!("host=127.0.0.1 port={} user=msgx dbname={db}", pair.replica);
    let mut replica = postgres::Client::connect(&at_replica, postgres::NoTls).unwrap();
    let caught_up = "SELECT count(*) FROM req_track WHERE state = 'WAITING'";
    assert!(eventually(Duration::from_secs(30), || count(&mut replica, caught_up) == 1));
    drop(replica);
    // The replica stops receiving; 40 requests are registered and sent on the primary.
    script(&["halt", "pg", pair.at("r")]);
    for i in 1..=40 {
        ask(&s, &["flight", &format!("L{i}")]);
    }
    wait_coutmsgs(&s, &a, 41);
    let before = listed_all(&s);
    a.signal("-TERM");
    assert_eq!(a.wait(Duration::from_secs(30)), Some(0), "{}", a.log_text());
    // The primary is lost; the lagging replica is promoted: it never heard of those 40.
    script(&["halt", "pg", pair.at("p")]);
    script(&["pg-replica", pair.at("r"), &pair.replica.to_string(), &pair.primary.to_string(), "replica1"]);
    script(&["pg-promote", pair.at("r")]);
    let again = ask(&s, &["flight", "4711"]);
    let lost = before.iter().find(|r| r["req_id"] == again);
    let lost = lost.unwrap_or_else(|| panic!("req_id {again} was not handed out before: {before:?}"));
    println!("PostgreSQL went back: req_id {again} handed out again (it was {})", lost["req_key"]);
    let lost_mgid = lost["mgid"].as_str().unwrap().to_string();
    let b = Instance::run(&s, "after", "");
    let fresh = wait_state(&s, &b, again, "WAITING");
    let rows = wait_coutmsgs(&s, &b, 42);
    let numbers: Vec<(String, String)> = rows.iter().map(|(_, _, xml)| wire(xml)).collect();
    let new = &numbers[41];
    println!(
        "the lost request's SEQN/MGID: {}/{lost_mgid}; the new one's: {}/{}",
        lost["seqn"], new.0, new.1
    );
    assert_eq!(fresh["mgid"].as_str(), Some(new.1.as_str()));
    assert!(numbers[..41].iter().all(|n| n.0 != new.0 && n.1 != new.1), "never sent before: {numbers:?}");
    assert_ne!(new.1, lost_mgid);
    // The AODB answers the lost request late: it closes nothing msgx asks now.
    let late = fixtures::dfdl(7, "20260306", &[("6101", "0900")])
        .replace("<RMID/>", &format!("<RMID>{lost_mgid}</RMID>"));
    let late = s.insert_inbound(&[late])[0];
    settled(&s, &b, &[(SUCCEEDED, 1)]);
    assert!(
        b.wait_for_log(&format!("unsolicited answer msg_id={late}"), Duration::from_secs(10)),
        "{}",
        b.log_text()
    );
    assert_eq!(listed(&s, again)["state"], "WAITING", "flight 4711 still waits for its own answer");
}
