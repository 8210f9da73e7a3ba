use std::time::{Duration, SystemTime};

use super::*;
use crate::clock::zone::MailboxZone;
use crate::config::{RequestDialect, RequestPolicy};
use crate::fixtures;

fn policy(dialect: RequestDialect) -> RequestPolicy {
    RequestPolicy {
        dialect,
        timeout: Duration::from_secs(600),
        sender: "VIEW".into(),
        receiver: "FIMS".into(),
        airport: "ZXXX".into(),
        window_format: "%d%b%y%H%M".into(),
        on_empty: true,
        heal_tries: 3,
        heal_backoff: Duration::from_secs(300),
        heal_window: None,
    }
}

/// 2026-03-05T08:30:00Z.
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_772_699_400)
}

fn window() -> Ask {
    Ask::flights("2026-03-05T06:00", "2026-03-05T23:59").unwrap()
}

#[test]
fn a_sis_window_request_is_rqfd_with_the_body_time_format_and_its_routing_id() {
    let out =
        text(&policy(RequestDialect::Sis), &MailboxZone::parse("+08:00").unwrap(), &window(), 42, now());
    assert_eq!(out.routing_id, "VIEWRQFD");
    assert_eq!(out.mgid, None);
    assert_eq!(
        out.xml,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><MSG><META><SNDR>VIEW</SNDR><SEQN>42</SEQN>\
         <DTTM>20260305163000</DTTM><TYPE>RQFD</TYPE><STYP>NONE</STYP></META>\
         <RQFD><STDB>05MAR260600</STDB><STDE>05MAR262359</STDE></RQFD></MSG>"
    );
    // msgx's own reader takes it as a family-A message of TYPE RQFD.
    let m = crate::codec::decode(&out.xml).expect("well-formed");
    assert_eq!((m.meta.dialect, m.meta.msg_type.as_str(), m.meta.seqn.as_str()), (Dialect::A, "RQFD", "42"));
}

#[test]
fn the_window_format_is_the_installations_choice() {
    let mut p = policy(RequestDialect::Sis);
    p.window_format = "%Y-%m-%d %H:%M".into();
    let out = text(&p, &MailboxZone::default(), &window(), 1, now());
    assert!(out.xml.contains("<STDB>2026-03-05 06:00</STDB><STDE>2026-03-05 23:59</STDE>"), "{}", out.xml);
}

#[test]
fn a_sis_reference_request_is_rqrd_with_its_type_as_styp() {
    let ask = Ask::reference("slst").unwrap();
    let out = text(&policy(RequestDialect::Sis), &MailboxZone::default(), &ask, 7, now());
    assert_eq!(out.routing_id, "VIEWRQRD");
    assert!(
        out.xml.contains("<TYPE>RQRD</TYPE><STYP>SLST</STYP></META><RQRD><RTYP>SLST</RTYP></RQRD>"),
        "{}",
        out.xml
    );
    assert_eq!((ask.req_type(RequestDialect::Sis), ask.req_key()), ("RQRD", "SLST".to_string()));
}

#[test]
fn a_platform_request_is_reqe_rqdf_with_an_mgid_its_answer_names() {
    let p = policy(RequestDialect::Platform);
    let out = text(&p, &MailboxZone::default(), &window(), 42, now());
    assert_eq!(out.routing_id, "VIEWRQDF");
    assert_eq!(out.mgid.as_deref(), Some("MSGX0000000000000000000000000042"));
    assert_eq!(out.mgid.as_ref().unwrap().len(), 32, "as long as the platform's own MGIDs");
    assert!(out.xml.contains("<TYPE>REQE</TYPE><STYP>RQDF</STYP>"), "{}", out.xml);
    assert!(out.xml.contains("<RQDF><BAPT>ZXXX</BAPT><RQTP>DFTM</RQTP><STTM>20260305060000</STTM><ENTM>20260305235900</ENTM></RQDF>"), "{}", out.xml);
    let m = crate::codec::decode(&out.xml).expect("well-formed");
    assert_eq!((m.meta.dialect, m.meta.mgid.as_deref()), (Dialect::B, out.mgid.as_deref()));
    let one = text(&p, &MailboxZone::default(), &Ask::flight("MU5101").unwrap(), 43, now());
    assert!(one.xml.contains("<RQTP>FLID</RQTP><FLID>MU5101</FLID>"), "{}", one.xml);
    assert_eq!(Ask::flight("MU5101").unwrap().req_key(), "FLID:MU5101");
}

#[test]
fn what_a_dialect_cannot_ask_is_refused_naming_the_key() {
    let e = Ask::reference("SLST").unwrap().check(RequestDialect::Platform).unwrap_err();
    assert!(e.to_string().contains("msgx.requests.dialect"), "{e}");
    assert!(Ask::flight("F1").unwrap().check(RequestDialect::Sis).is_err());
    assert!(window().check(RequestDialect::Sis).is_ok() && window().check(RequestDialect::Platform).is_ok());
}

#[test]
fn bad_asks_name_what_is_wrong() {
    assert!(matches!(Ask::flights("2026-03-05T10:00", "2026-03-05T09:00"), Err(AskError::Window { .. })));
    assert_eq!(Ask::flights("tomorrow", "2026-03-05T09:00"), Err(AskError::Time("tomorrow".into())));
    assert_eq!(Ask::reference("NOPE"), Err(AskError::ReferenceType("NOPE".into())));
    assert_eq!(Ask::flight("  "), Err(AskError::Flid));
}

#[test]
fn a_flid_no_flight_can_have_is_refused_naming_it() {
    // A control character made COUTMSGS hold XML that is not well-formed; 196 characters made
    // REQ_KEY overflow, reported as the store being unreachable (#53).
    let bell = Ask::flight("MU\u{7}51").unwrap_err().to_string();
    assert_eq!(bell, "FLID \"MU\\u{7}51\" holds the control character U+0007");
    let long = Ask::flight(&"7".repeat(196)).unwrap_err().to_string();
    assert!(long.contains("has 196 characters; a flight key has at most 32"), "{long}");
    assert!(Ask::flight(&"7".repeat(32)).is_ok());
}

#[test]
fn a_text_escapes_what_configuration_and_operators_put_in_it() {
    let mut p = policy(RequestDialect::Platform);
    p.sender = "A&B".into();
    let out = text(&p, &MailboxZone::default(), &Ask::flight("<x>").unwrap(), 1, now());
    assert!(
        out.xml.contains("<SNDR>A&amp;B</SNDR>") && out.xml.contains("<FLID>&lt;x&gt;</FLID>"),
        "{}",
        out.xml
    );
    crate::codec::decode(&out.xml).expect("still well-formed");
}

#[test]
fn answers_are_a_schd_resp_a_reference_resp_and_a_platform_rmid() {
    let decode = |raw: &str| crate::codec::decode(raw).expect("fixture decodes");
    assert_eq!(
        answer_of(&decode(&fixtures::schd(1, "RESP", &[("F1", "05MAR260900")]))),
        Some(Answer::Window(Some(("2026-03-05T09:00".into(), "2026-03-05T09:00".into()))))
    );
    assert_eq!(
        answer_of(&decode(&fixtures::schd(1, "DNLD", &[("F1", "05MAR260900")]))),
        None,
        "a pushed snapshot"
    );
    assert_eq!(answer_of(&decode(&fixtures::flop_stnd(1, "F1", "A1"))), None);
    let rmid = fixtures::dfdl(3, "20260305", &[("F1", "0900")])
        .replace("<RMID/>", "<RMID>MSGX0000000000000000000000000042</RMID>");
    assert_eq!(answer_of(&decode(&rmid)), Some(Answer::Rmid("MSGX0000000000000000000000000042".into())));
    assert_eq!(answer_of(&decode(&fixtures::dfdl(3, "20260305", &[("F1", "0900")]))), None, "no RMID");
}

fn req(req_id: i64, req_type: &str, key: &str, state: ReqState) -> Request {
    Request {
        req_id,
        req_type: req_type.into(),
        req_key: key.into(),
        state,
        origin: "operator".into(),
        event_id: Some(req_id),
        coutmsgs_id: None,
        mgid: Some(mgid_of(req_id)),
        answer_msg_id: None,
        created_at: now(),
        updated_at: now(),
        expires_at: None,
        seqn: req_id,
        tries: 1,
        dismissed: None,
    }
}

fn day(d: u32) -> String {
    format!("2026-03-{d:02}T00:00/2026-03-{d:02}T23:59")
}

fn span(a: &str, b: &str) -> Answer {
    Answer::Window(Some((a.into(), b.into())))
}

/// A request that went to `COUTMSGS` (row = its id).
fn sent(req_id: i64, req_type: &str, key: &str, state: ReqState) -> Request {
    Request { coutmsgs_id: Some(req_id), ..req(req_id, req_type, key, state) }
}

#[test]
fn an_answer_closes_the_oldest_sent_request_it_answers_else_notes_the_newest_expired_one() {
    let rs = [
        sent(1, "RQFD", &day(5), ReqState::Expired),
        sent(2, "RQFD", &day(5), ReqState::Expired),
        sent(3, "RQFD", &day(5), ReqState::Waiting),
        sent(4, "RQFD", &day(5), ReqState::Sent),
        sent(5, "RQRD", "SLST", ReqState::Waiting),
    ];
    let on5 = span("2026-03-05T09:00", "2026-03-05T10:00");
    assert_eq!(closes(&on5, &rs).map(|r| r.req_id), Some(3));
    assert_eq!(closes(&on5, &rs[..2]).map(|r| r.req_id), Some(2), "the newest expired: a late answer");
    assert_eq!(closes(&Answer::Reference("SLST".into()), &rs).map(|r| r.req_id), Some(5));
    assert_eq!(closes(&Answer::Reference("GLST".into()), &rs), None);
    assert_eq!(closes(&Answer::Rmid(mgid_of(4)), &rs).map(|r| r.req_id), Some(4));
    let mut answered = rs[2].clone();
    answered.answer_msg_id = Some(9);
    answered.state = ReqState::Done;
    assert_eq!(closes(&Answer::Rmid(mgid_of(3)), [&answered]), None, "answered once only");
}

/// #55 item 1: before, an answer closed the oldest open request when no window held it —
/// REGISTERED ones included — and was filed as the late answer of the newest expired one.
#[test]
fn regression_an_answer_closes_only_a_sent_request_whose_window_holds_it() {
    let rs = [sent(1, "RQFD", &day(5), ReqState::Waiting), sent(2, "RQFD", &day(6), ReqState::Waiting)];
    assert_eq!(closes(&span("2026-03-06T08:00", "2026-03-06T14:00"), &rs).map(|r| r.req_id), Some(2));
    assert_eq!(closes(&span("2026-03-05T08:00", "2026-03-05T14:00"), &rs).map(|r| r.req_id), Some(1));
    assert_eq!(closes(&span("2026-03-07T08:00", "2026-03-07T09:00"), &rs), None, "another day: unsolicited");
    assert_eq!(closes(&span("2026-03-05T08:00", "2026-03-06T14:00"), &rs), None, "held by neither");
    assert_eq!(closes(&Answer::Window(None), &rs), None, "no times: it tells nothing");
    let expired = [sent(3, "RQFD", &day(5), ReqState::Expired)];
    assert_eq!(closes(&span("2026-03-07T08:00", "2026-03-07T09:00"), &expired), None, "not a late answer");
    let registered = [req(4, "RQFD", &day(5), ReqState::Registered)];
    assert_eq!(
        closes(&span("2026-03-05T08:00", "2026-03-05T09:00"), &registered),
        None,
        "asked of nobody yet"
    );
    let undeliverable = [req(5, "RQFD", &day(5), ReqState::Expired)];
    assert_eq!(closes(&span("2026-03-05T08:00", "2026-03-05T09:00"), &undeliverable), None, "never sent");
}

#[test]
fn windows_are_compared_as_times() {
    let rs = [sent(1, "RQFD", "2026-03-05T06:00/2026-03-05T18:00", ReqState::Waiting)];
    assert_eq!(
        closes(&span("2026-03-05T06:00", "2026-03-05T18:00"), &rs).map(|r| r.req_id),
        Some(1),
        "bounds held"
    );
    assert_eq!(closes(&span("2026-03-05T05:59", "2026-03-05T12:00"), &rs), None);
    assert_eq!(closes(&span("2026-03-05T12:00", "2026-03-05T18:01"), &rs), None);
    // Text that is no time holds nothing (compared as text, "2026-03-05T1" sorts inside).
    assert_eq!(closes(&span("2026-03-05T1", "2026-03-05T12:00"), &rs), None);
    let bad = [sent(2, "RQFD", "today/tomorrow", ReqState::Waiting)];
    assert_eq!(closes(&span("2026-03-05T08:00", "2026-03-05T09:00"), &bad), None);
}

#[test]
fn verdicts_tell_closed_late_and_unsolicited_apart() {
    let mut done = req(1, "RQFD", "a", ReqState::Done);
    done.answer_msg_id = Some(10);
    let mut late = req(2, "RQFD", "b", ReqState::Expired);
    late.answer_msg_id = Some(11);
    let w = Answer::Window(None);
    let v = verdicts(&[(10, &w), (11, &w), (12, &w)], &[done.clone(), late.clone()]);
    assert_eq!(v, vec![(10, Verdict::Closed(done)), (11, Verdict::Late(late)), (12, Verdict::Unsolicited)]);
}

#[test]
fn request_states_read_back_and_an_unknown_one_is_none() {
    for s in ReqState::ALL {
        assert_eq!(ReqState::parse(s.as_str()), Some(s));
    }
    assert_eq!(ReqState::parse("LOST"), None);
    assert!(ReqState::Waiting.is_open() && !ReqState::Expired.is_open());
}

/// #55 item 4: a request's number comes from the time it was registered, so the `req_id` a
/// PostgreSQL that went back in time issues again is sent under another number.
#[test]
fn a_requests_number_is_drawn_from_its_time_so_an_id_issued_again_gets_another() {
    let t = now();
    assert_eq!(seqn_of(42, t), 177_269_940_002);
    let mgid = mgid_of(seqn_of(42, t));
    assert_eq!((mgid.as_str(), mgid.len()), ("MSGX0000000000000000177269940002", 32));
    assert_ne!(seqn_of(42, t + Duration::from_millis(100)), seqn_of(42, t), "the same id, later");
    assert_ne!(seqn_of(43, t), seqn_of(42, t), "two ids in one tenth of a second");
    // The bound the unique index guards: ids ten apart in the same tenth of a second.
    assert_eq!(seqn_of(52, t), seqn_of(42, t));
}

/// #68: the SEQN on the wire had sixteen digits, and an AODB that keeps a subsystem sequence
/// as `MEDIUMINT` refused every request. It has at most six, in both dialects, and is not sent
/// again within a cycle of 10 000 seconds, nor for an id issued again after a rollback.
#[test]
fn regression_a_requests_seqn_on_the_wire_has_at_most_six_digits() {
    let t = now();
    let seqns = |dialect| {
        let p = policy(dialect);
        let ask = match dialect {
            RequestDialect::Sis => Ask::Reference("GATE".into()),
            RequestDialect::Platform => Ask::Flight("F1".into()),
        };
        let xml = text(&p, &MailboxZone::default(), &ask, seqn_of(42, t), t).xml;
        let at = xml.find("<SEQN>").unwrap() + 6;
        xml[at..at + xml[at..].find('<').unwrap()].to_string()
    };
    for dialect in [RequestDialect::Sis, RequestDialect::Platform] {
        let s = seqns(dialect);
        assert!(s.len() <= 6 && s.parse::<u32>().is_ok(), "{dialect:?}: SEQN {s}");
        assert_eq!(s, "940002");
    }
    let wire = |id, at| wire_seqn(seqn_of(id, at));
    let cycle = Duration::from_millis((WIRE_SEQNS / 10 * 100) as u64);
    assert_eq!(cycle, Duration::from_secs(10_000));
    let mut seen = std::collections::BTreeSet::new();
    for tenth in (0..100_000).step_by(97) {
        for id in 0..10 {
            assert!(seen.insert(wire(id, t + Duration::from_millis(100 * tenth))), "unique within a cycle");
        }
    }
    // The same id later (a rollback issued it again): another number.
    assert_ne!(wire(42, t + Duration::from_millis(300)), wire(42, t));
    assert_eq!(wire(42, t + cycle), wire(42, t), "again after a whole cycle");
}

/// #55 item 3: a heal's expired request is asked again after the backoff, doubled per try, and
/// after the last try not at all (a person decides).
#[test]
fn a_heals_expired_request_is_asked_again_with_backoff_until_its_last_try() {
    let p = policy(RequestDialect::Sis);
    let mut r = req(1, "RQFD", &day(5), ReqState::Expired);
    r.origin = Origin::Heal.as_str().into();
    assert_eq!(next_try_at(&r, &p), Some(now() + Duration::from_secs(300)));
    r.tries = 2;
    assert_eq!(next_try_at(&r, &p), Some(now() + Duration::from_secs(600)));
    r.tries = 3;
    assert_eq!(next_try_at(&r, &p), None, "the last try: a person decides");
    r.tries = 1;
    r.state = ReqState::Waiting;
    assert_eq!(next_try_at(&r, &p), None, "still waiting for its answer");
    r.state = ReqState::Expired;
    r.origin = Origin::Operator.as_str().into();
    assert_eq!(next_try_at(&r, &p), None, "an operator's request is the operator's to ask again");
    assert_eq!(Ask::window(&day(5)), Some(Ask::flights("2026-03-05T00:00", "2026-03-05T23:59").unwrap()));
    assert_eq!(Ask::window("SLST"), None);
}
