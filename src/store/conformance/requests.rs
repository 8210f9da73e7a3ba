//! `REQ_TRACK`'s cases of the own-PostgreSQL suite (#41): a request and its outbox event in one
//! write, one open request per type and key, SENT with the COUTMSGS row, WAITING, EXPIRED, and
//! the answer guard in the round's commit.

use std::time::Duration;

use super::{at, commit, enqueue, OwnStore};
use crate::domain::Target;
use crate::error::ErrorClass;
use crate::ports::{Landed, Outcome, Sent, Settle};
use crate::requests::{mgid_of, Answer, NewRequest, Origin, Outgoing, ReqState, Request};

fn new(req_type: &'static str, key: &str) -> NewRequest {
    NewRequest::first(req_type, key.into(), Origin::Operator)
}

fn text(req_id: i64) -> Outgoing {
    Outgoing {
        routing_id: "VIEWRQFD".into(),
        xml: format!("<MSG><SEQN>{req_id}</SEQN></MSG>"),
        mgid: Some(mgid_of(req_id)),
    }
}

fn register<S: OwnStore>(s: &mut S, req_type: &'static str, key: &str, t: u64) -> Request {
    s.register(&new(req_type, key), &text, at(t)).unwrap().expect("no open request of this key")
}

fn answering(msg_id: i64, answer: Answer) -> Settle {
    let mut s = Settle::succeeded(msg_id, &format!("k{msg_id}"), Vec::new());
    if let Outcome::Succeeded { answer: a, .. } = &mut s.outcome {
        *a = Some(answer);
    }
    s
}

fn one<S: OwnStore>(s: &mut S, req_id: i64) -> Request {
    s.requests(false, 100).unwrap().into_iter().find(|r| r.req_id == req_id).expect("listed")
}

/// The COUTMSGS row `row` holds request `r`'s text.
fn deliver<S: OwnStore>(s: &mut S, r: &Request, row: i64, t: u64) {
    let e = s
        .pending(Target::Coutmsgs, 100)
        .unwrap()
        .into_iter()
        .find(|e| Some(e.event_id) == r.event_id)
        .unwrap();
    s.mark_sent(
        &[Sent {
            event_id: e.event_id,
            state_version: e.state_version,
            landed: Some(Landed::Outbound { row }),
        }],
        at(t),
    )
    .unwrap();
}

/// #68: the number on the wire has six digits, so a tenth of a second holds ten; a burst of
/// more takes the first free number of the next tenths, and no two requests share one.
pub fn a_burst_of_requests_in_a_tenth_of_a_second_borrows_the_next_numbers<S: OwnStore>(mut s: S) {
    let burst: Vec<Request> = (0..25).map(|i| register(&mut s, "RQRD", &format!("T{i}"), 1)).collect();
    let wire: std::collections::BTreeSet<i64> = burst.iter().map(Request::wire_seqn).collect();
    assert_eq!(wire.len(), 25, "{burst:?}");
    assert!(wire.iter().all(|n| *n < crate::requests::WIRE_SEQNS));
    let first = crate::requests::seqn_of(burst[0].req_id, at(1));
    assert!(burst.iter().all(|r| r.seqn >= first - 9 && r.seqn < first + 30), "{burst:?}");
}

pub fn a_request_is_registered_with_its_outbox_event_and_one_per_type_and_key<S: OwnStore>(mut s: S) {
    let r = register(&mut s, "RQFD", "2026-03-05T06:00/2026-03-05T23:59", 1);
    assert_eq!(
        (r.state, r.req_type.as_str(), r.mgid.clone()),
        (ReqState::Registered, "RQFD", Some(mgid_of(r.seqn)))
    );
    // Its number on the wire is drawn from the time it was registered (#55), and it is a first try.
    assert_eq!((r.seqn, r.tries, r.dismissed.clone()), (crate::requests::seqn_of(r.req_id, at(1)), 1, None));
    let events = s.pending(Target::Coutmsgs, 10).unwrap();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        (Some(e.event_id), e.msg_id, e.partition_key.clone()),
        (r.event_id, None, format!("req:{}", r.req_id))
    );
    let intent: crate::domain::OutboundIntent = serde_json::from_str(&e.payload_json).unwrap();
    assert_eq!(
        (intent.routing_id.as_str(), intent.xml),
        ("VIEWRQFD", format!("<MSG><SEQN>{}</SEQN></MSG>", r.seqn))
    );
    let again = s.register(&new("RQFD", "2026-03-05T06:00/2026-03-05T23:59"), &text, at(2)).unwrap();
    assert_eq!(again.map_err(|o| o.req_id), Err(r.req_id), "the open one is named, nothing written");
    assert_eq!(s.pending(Target::Coutmsgs, 10).unwrap().len(), 1);
    let other = register(&mut s, "RQRD", "SLST", 3);
    assert_ne!(other.req_id, r.req_id);
    let listed: Vec<i64> = s.requests(false, 10).unwrap().iter().map(|r| r.req_id).collect();
    assert_eq!(listed, [other.req_id, r.req_id], "newest first");
}

pub fn a_request_is_sent_then_waits_then_expires_and_frees_its_key<S: OwnStore>(mut s: S) {
    let r = register(&mut s, "RQRD", "SLST", 1);
    deliver(&mut s, &r, 77, 10);
    let sent = one(&mut s, r.req_id);
    assert_eq!((sent.state, sent.coutmsgs_id), (ReqState::Sent, Some(77)));
    let kept = s.keep_requests(Duration::from_secs(30), at(12)).unwrap();
    assert_eq!(
        kept.waiting.iter().map(|r| (r.req_id, r.expires_at)).collect::<Vec<_>>(),
        [(r.req_id, Some(at(40)))]
    );
    assert!(kept.expired.is_empty());
    assert!(s.keep_requests(Duration::from_secs(30), at(39)).unwrap() == Default::default(), "not yet");
    let kept = s.keep_requests(Duration::from_secs(30), at(40)).unwrap();
    assert_eq!(
        kept.expired.iter().map(|r| (r.req_id, r.state)).collect::<Vec<_>>(),
        [(r.req_id, ReqState::Expired)]
    );
    assert!(s.requests(true, 10).unwrap().is_empty());
    register(&mut s, "RQRD", "SLST", 41);
}

const DAY5: &str = "2026-03-05T00:00/2026-03-05T23:59";
const DAY6: &str = "2026-03-06T00:00/2026-03-06T23:59";

fn on(day: u32) -> Answer {
    Answer::Window(Some((format!("2026-03-0{day}T08:00"), format!("2026-03-0{day}T14:00"))))
}

pub fn an_answer_closes_the_oldest_open_request_once_and_notes_a_late_one<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3, 4, 5, 6]);
    let a = register(&mut s, "RQFD", DAY5, 1);
    let p = register(&mut s, "RQDF", "FLID:F1", 2);
    deliver(&mut s, &a, 3, 3);
    deliver(&mut s, &p, 4, 4);
    let b = register(&mut s, "RQFD", DAY6, 5);
    deliver(&mut s, &b, 5, 5);
    commit(&mut s, &[answering(1, on(5)), answering(2, on(5))], at(6)).unwrap();
    let got: Vec<_> =
        s.answered(&[1, 2]).unwrap().iter().map(|r| (r.req_id, r.state, r.answer_msg_id)).collect();
    assert_eq!(got, [(a.req_id, ReqState::Done, Some(1))], "closed once; the second is unsolicited");
    commit(&mut s, &[answering(3, Answer::Window(None))], at(7)).unwrap();
    assert!(s.answered(&[3]).unwrap().is_empty(), "no times: no request explains it");
    assert_eq!(one(&mut s, b.req_id).answer_msg_id, None);
    commit(&mut s, &[answering(4, Answer::Rmid(p.mgid.clone().unwrap()))], at(8)).unwrap();
    assert_eq!(one(&mut s, p.req_id).answer_msg_id, Some(4));
    s.keep_requests(Duration::from_secs(1), at(9)).unwrap();
    s.keep_requests(Duration::from_secs(1), at(20)).unwrap();
    assert_eq!(one(&mut s, b.req_id).state, ReqState::Expired);
    commit(&mut s, &[answering(5, on(7))], at(21)).unwrap();
    assert_eq!(one(&mut s, b.req_id).answer_msg_id, None, "another day's answer is not its late one");
    commit(&mut s, &[answering(6, on(6))], at(22)).unwrap();
    let noted = one(&mut s, b.req_id);
    assert_eq!((noted.state, noted.answer_msg_id), (ReqState::Expired, Some(6)), "processed and noted");
}

/// #55: only a sent request whose window holds the answer's times is closed by it.
pub fn a_window_answer_closes_the_request_whose_window_holds_it<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3]);
    let day5 = register(&mut s, "RQFD", DAY5, 1);
    let day6 = register(&mut s, "RQFD", DAY6, 2);
    commit(&mut s, &[answering(1, on(6))], at(3)).unwrap();
    assert_eq!(one(&mut s, day6.req_id).answer_msg_id, None, "REGISTERED: asked of nobody yet");
    deliver(&mut s, &day5, 4, 4);
    deliver(&mut s, &day6, 5, 5);
    commit(&mut s, &[answering(2, on(6))], at(6)).unwrap();
    assert_eq!(one(&mut s, day6.req_id).answer_msg_id, Some(2), "the day it answers, not the oldest");
    commit(&mut s, &[answering(3, on(7))], at(7)).unwrap();
    assert_eq!(one(&mut s, day5.req_id).answer_msg_id, None, "held by none: unsolicited");
}

pub fn a_request_whose_event_went_dead_expires_as_undeliverable<S: OwnStore>(mut s: S) {
    let r = register(&mut s, "RQRD", "GLST", 1);
    s.dead(&[r.event_id.unwrap()], ErrorClass::Exhausted, "mailbox refused").unwrap();
    let kept = s.keep_requests(Duration::from_secs(30), at(2)).unwrap();
    assert_eq!(kept.undeliverable.iter().map(|r| r.req_id).collect::<Vec<_>>(), [r.req_id]);
    assert_eq!(one(&mut s, r.req_id).state, ReqState::Expired);
}

fn heal(s: &mut impl OwnStore, key: &str, tries: u16, t: u64) -> Request {
    let new = NewRequest { tries, ..NewRequest::first("RQFD", key.into(), Origin::Heal) };
    s.register(&new, &text, at(t)).unwrap().expect("no open request of this key")
}

fn ids(rs: &[Request]) -> Vec<i64> {
    rs.iter().map(|r| r.req_id).collect()
}

/// #55 item 3: the windows a heal awaits — open, or expired unanswered with no later request of
/// the window and no person's dismissal — and a person's dismissal, recorded once.
pub fn a_heals_window_is_awaited_until_answered_asked_again_or_dismissed<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1]);
    let first = heal(&mut s, DAY5, 1, 1);
    let operator = register(&mut s, "RQFD", DAY6, 2);
    assert_eq!(ids(&s.awaited(10).unwrap()), [first.req_id], "a heal's open request; not an operator's");
    deliver(&mut s, &first, 7, 3);
    s.keep_requests(Duration::from_secs(5), at(4)).unwrap();
    let kept = s.keep_requests(Duration::from_secs(5), at(10)).unwrap();
    assert_eq!(ids(&kept.expired), [first.req_id]);
    assert_eq!(ids(&s.awaited(10).unwrap()), [first.req_id], "expired unanswered: still awaited");
    // Its next try takes its place.
    let second = heal(&mut s, DAY5, 2, 11);
    assert_eq!(second.tries, 2);
    assert_eq!(ids(&s.awaited(10).unwrap()), [second.req_id], "the later try takes its place");
    deliver(&mut s, &second, 8, 12);
    s.keep_requests(Duration::from_secs(5), at(13)).unwrap();
    s.keep_requests(Duration::from_secs(5), at(20)).unwrap();
    assert_eq!(ids(&s.awaited(10).unwrap()), [second.req_id], "the last try expired: awaited");
    // A heal's requests of one window, newest first (#68, V021's index).
    let listed: Vec<i64> = s.heal_requests(DAY5, 10).unwrap().iter().map(|r| r.req_id).collect();
    assert_eq!(listed, [second.req_id, first.req_id]);
    assert_eq!(s.heal_requests(DAY5, 1).unwrap().len(), 1, "bounded");
    assert!(s.heal_requests("2026-01-01T00:00/2026-01-01T23:59", 10).unwrap().is_empty());
    // #68: a request that awaits nothing (the try the second took the place of) is not a
    // person's to dismiss: nothing is recorded.
    let (r, now) = s.dismiss_request(first.req_id, "wrong one", at(21)).unwrap().unwrap();
    assert_eq!((now, r.dismissed), (false, None));
    // A person dismisses it, once; the note is kept.
    let (r, now) = s.dismiss_request(second.req_id, "asked the AODB by phone", at(21)).unwrap().unwrap();
    assert!(now);
    assert_eq!(r.dismissed, Some((at(21), "asked the AODB by phone".to_string())));
    let (again, now) = s.dismiss_request(second.req_id, "other", at(22)).unwrap().unwrap();
    assert!(!now);
    assert_eq!(again.dismissed, r.dismissed, "the first word stands");
    assert!(s.awaited(10).unwrap().is_empty(), "dismissed: awaited no more");
    assert_eq!(s.dismiss_request(999_999, "x", at(23)).unwrap(), None);
    // An answer (late, after expiry) ends the wait as well.
    let third = heal(&mut s, DAY6.replace("06", "07").as_str(), 1, 24);
    deliver(&mut s, &third, 9, 25);
    s.keep_requests(Duration::from_secs(5), at(26)).unwrap();
    s.keep_requests(Duration::from_secs(5), at(40)).unwrap();
    assert_eq!(ids(&s.awaited(10).unwrap()), [third.req_id]);
    commit(&mut s, &[answering(1, on(7))], at(41)).unwrap();
    assert_eq!(one(&mut s, third.req_id).answer_msg_id, Some(1), "its late answer");
    assert!(s.awaited(10).unwrap().is_empty(), "answered: awaited no more");
    assert_eq!(one(&mut s, operator.req_id).dismissed, None);
    // An operator's later request of the window does not take its place until it is answered.
    let day8 = "2026-03-08T00:00/2026-03-08T23:59";
    let fourth = heal(&mut s, day8, 1, 42);
    deliver(&mut s, &fourth, 10, 43);
    s.keep_requests(Duration::from_secs(5), at(44)).unwrap();
    s.keep_requests(Duration::from_secs(5), at(50)).unwrap();
    let asked = register(&mut s, "RQFD", day8, 51);
    assert_eq!(ids(&s.awaited(10).unwrap()), [fourth.req_id], "an operator's open request: still awaited");
    deliver(&mut s, &asked, 11, 52);
    enqueue(&mut s, &[2]);
    commit(&mut s, &[answering(2, on(8))], at(53)).unwrap();
    assert_eq!(one(&mut s, asked.req_id).answer_msg_id, Some(2));
    assert!(s.awaited(10).unwrap().is_empty(), "the operator's request was answered: the window is healed");
}
