//! The operator's reads of the own-PostgreSQL suite (#40, #56): the dead-letter queue, a
//! message's row and outbox events (live or archived), a flight's messages.

use super::{archive, at, commit, enqueue, event, schd_event, t0, OwnStore};
use crate::error::ErrorClass;
use crate::ports::{DeadFilter, Failure, Landed, Position, Sent, Settle};

fn dead(class: ErrorClass, error: &str) -> Failure {
    Failure::Dead { class, error: error.into() }
}

fn listed<S: OwnStore>(s: &mut S, f: DeadFilter) -> Vec<i64> {
    s.dead_letters(&f).unwrap().iter().map(|d| d.msg_id).collect()
}

/// `msgx dead`: DEAD rows oldest MSG_ID first, by class and by last change, bounded; a
/// dismissed one stays listed with when and why.
pub fn dead_letters_are_listed_in_order_filtered_bounded_and_marked_when_dismissed<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3, 4]);
    let mut first = Settle::failed(1, dead(ErrorClass::Exhausted, "poison"));
    first.type_tag = Some("FLOP-STND".into());
    commit(
        &mut s,
        &[first, Settle::failed(2, dead(ErrorClass::Infra, "x")), Settle::succeeded(3, "k3", vec![])],
        at(1),
    )
    .unwrap();
    commit(&mut s, &[Settle::failed(4, dead(ErrorClass::Exhausted, "poison again"))], at(5)).unwrap();
    s.dismiss(&[2], "sent again by hand", at(10)).unwrap();
    let all = s.dead_letters(&DeadFilter { limit: 10, ..DeadFilter::default() }).unwrap();
    assert_eq!(all.iter().map(|d| d.msg_id).collect::<Vec<_>>(), [1, 2, 4], "SUCCEEDED is no dead letter");
    let d = &all[0];
    assert_eq!(
        (d.type_tag.as_deref(), d.class, d.error.as_deref()),
        (Some("FLOP-STND"), Some(ErrorClass::Exhausted), Some("poison"))
    );
    assert_eq!((d.attempts, d.since, d.dismissed.clone()), (1, at(1), None));
    assert_eq!(all[1].dismissed, Some((at(10), "sent again by hand".to_string())));
    let by_class = DeadFilter { class: Some(ErrorClass::Exhausted), limit: 10, since: None };
    assert_eq!(listed(&mut s, by_class), [1, 4]);
    assert_eq!(
        listed(&mut s, DeadFilter { since: Some(at(5)), limit: 10, class: None }),
        [2, 4],
        "a dismissal is a change"
    );
    assert_eq!(listed(&mut s, DeadFilter { limit: 1, ..DeadFilter::default() }), [1], "bounded");
}

/// `msgx trace`: the live row, or the archive's copy once archived; its events in EVENT_ID
/// order with the key a consumer deduplicates on and where each landed.
pub fn a_trace_shows_the_row_live_or_archived_and_its_events_in_order<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1]);
    let mut st = Settle::succeeded(1, "A|FLOP|STND|1", vec![event("F1", 1), event("F2", 1)]);
    st.type_tag = Some("FLOP-STND".into());
    commit(&mut s, &[st], at(1)).unwrap();
    let pending = s.pending(crate::domain::Target::KafkaMsg, 10).unwrap();
    let landed = Landed::Kafka { topic: "msgx.flights".into(), at: Position { partition: 0, offset: 7 } };
    s.mark_sent(
        &[Sent { event_id: pending[0].event_id, state_version: 1, landed: Some(landed.clone()) }],
        at(2),
    )
    .unwrap();
    s.backfill_settled(&[1], at(3)).unwrap();
    let (row, events) = s.trace(1).unwrap();
    let row = row.expect("a live row");
    assert_eq!((row.state.as_str(), row.archived_at, row.attempts), ("SUCCEEDED", None, 0));
    assert_eq!(
        (row.identity.as_deref(), row.type_tag.as_deref()),
        (Some("A|FLOP|STND|1"), Some("FLOP-STND"))
    );
    assert_eq!((row.enqueued_at, row.updated_at, row.marked_at), (t0(), at(3), Some(at(3))));
    assert_eq!(
        (row.class, row.error.clone(), row.dismissed_at, row.mark_abandoned.clone()),
        (None, None, None, None)
    );
    let keys: Vec<String> = pending.iter().map(|e| e.key()).collect();
    assert_eq!(
        events.iter().map(|e| e.event_key.clone()).collect::<Vec<_>>(),
        keys,
        "EVENT_ID order, same keys"
    );
    assert_eq!(
        (events[0].state.as_str(), events[0].sent_at, events[0].landed.clone()),
        ("SENT", Some(at(2)), Some(landed))
    );
    assert_eq!(
        (events[1].state.as_str(), events[1].sent_at, events[1].landed.clone()),
        ("PENDING", None, None)
    );
    assert!(events.iter().all(|e| e.msg_id == Some(1) && e.target == "KAFKA:msg" && e.created_at == at(1)));
    assert_eq!(archive(&mut s, at(100), 10, at(200)), (1, 0));
    let (row, after) = s.trace(1).unwrap();
    let row = row.expect("the archive's copy");
    assert_eq!(
        (row.state.as_str(), row.archived_at, row.identity.as_deref()),
        ("SUCCEEDED", Some(at(200)), Some("A|FLOP|STND|1"))
    );
    assert_eq!((row.enqueued_at, row.updated_at), (t0(), at(3)), "the row as it was");
    assert_eq!(after, events, "archiving leaves the events");
    assert_eq!(s.trace(9).unwrap(), (None, vec![]));
}

/// The flight document: a flight's `KAFKA:msg` events newest first and bounded, and when each
/// message got its outcome (archived ones too).
pub fn a_flights_messages_are_newest_first_bounded_and_decided<S: OwnStore>(mut s: S) {
    enqueue(&mut s, &[1, 2, 3]);
    commit(&mut s, &[Settle::succeeded(1, "k1", vec![event("F1", 1)])], at(1)).unwrap();
    commit(&mut s, &[Settle::succeeded(2, "k2", vec![event("F2", 1)])], at(2)).unwrap();
    commit(&mut s, &[Settle::succeeded(3, "k3", vec![event("F1", 2), schd_event("F1", 2)])], at(3)).unwrap();
    let msgs = |s: &mut S, limit| -> Vec<Option<i64>> {
        s.flight_events("F1", limit).unwrap().iter().map(|e| e.msg_id).collect()
    };
    assert_eq!(msgs(&mut s, 10), [Some(3), Some(1)], "KAFKA:msg only, newest first");
    assert_eq!(msgs(&mut s, 1), [Some(3)], "bounded");
    assert!(s.flight_events("F9", 10).unwrap().is_empty());
    s.backfill_settled(&[1], at(4)).unwrap();
    assert_eq!(archive(&mut s, at(5), 10, at(50)), (1, 0), "1 alone is settled");
    let decided = s.decided(&[1, 3, 9]).unwrap();
    let at_of: Vec<(i64, std::time::SystemTime)> = decided.iter().map(|(id, d)| (*id, d.at)).collect();
    assert_eq!(at_of, [(1, at(4)), (3, at(3))], "the archived one from its copy; none for an unknown ID");
}
