//! The sentinel on the twins: each way a store forgets is found, and healed to the state a
//! pipeline that never forgot would hold.

use std::time::Duration;

use super::*;
use crate::clock::Clock;
use crate::config::Config;
use crate::domain::InboundRow;
use crate::fixtures::flop_stnd;
use crate::ports::{
    Claim, Claimant, FlightAudit, FlightsFence, Intake, LeaseStore, MailboxMarks, Restore, RulesJobState,
    SucceededRow,
};
use crate::stage::{Next, RoundReport};
use crate::store::memory::{MemFlights, MemPg};
use crate::testkit::Twins;

const KEEP: Duration = Duration::from_secs(3600);

struct World(Twins);

impl std::ops::Deref for World {
    type Target = Twins;
    fn deref(&self) -> &Twins {
        &self.0
    }
}

impl World {
    fn new(keep: Duration) -> World {
        let w = World(Twins::keeping(keep));
        // A fresh install: the start-up pass sets the journal's mark.
        let r = w.check();
        assert!(r.is_clean() && r.needs_pruned_mark, "{r:?}");
        w.heal(&r).unwrap();
        w
    }

    fn check(&self) -> Report {
        let this = crate::codec::Rulebook::this_release();
        self.under(&this, |st| check(st, Depth::Full { sample: 1.0 }, self.clock.now()).unwrap())
    }

    fn heal(&self, r: &Report) -> Result<Healed, HealError> {
        self.under(&crate::codec::Rulebook::this_release(), |st| heal(st, r, self.clock.now()))
    }

    /// As [`World::heal`], asking the AODB for what the mailbox no longer holds (#41).
    fn heal_asking(&self, r: &Report, on_empty: bool) -> Result<Healed, HealError> {
        let mut asking = Asking::of(&Config::defaults());
        asking.policy.on_empty = on_empty;
        self.heal_with(r, &asking)
    }

    fn heal_with(&self, r: &Report, asking: &Asking) -> Result<Healed, HealError> {
        let this = crate::codec::Rulebook::this_release();
        self.under(&this, |st| heal_asking(st, r, self.clock.now(), Some(asking)))
    }

    /// What the dispatcher does with the requests' outbox events: each lands in `COUTMSGS`
    /// (the request is SENT; only a sent request is answered, #55).
    fn send_requests(&self) {
        crate::testkit::deliver_requests(&self.pg, self.clock.now());
    }

    /// The requests to the AODB, oldest first.
    fn requests(&self) -> Vec<crate::requests::Request> {
        self.pg.inspect(|s| s.requests.values().cloned().collect())
    }

    /// Messages `ids` arrive, are processed to the end and marked, as the daemon's stages do.
    fn process(&self, ids: std::ops::RangeInclusive<i64>) {
        for id in ids.clone() {
            let flid = format!("F{}", id % 3);
            self.arrive(id, Some(&flop_stnd(id as u64, &flid, &format!("S{id}"))));
        }
        self.drain();
        let mut mb = self.mailbox.clone();
        mb.mark(&ids.collect::<Vec<_>>(), self.clock.now(), &|| Ok(())).unwrap();
    }

    /// A daily-plan snapshot (SCHD DNLD) arrives as message `id` and is processed and marked.
    fn snapshot(&self, id: i64) {
        let body = "<FLTR><FLID>A</FLID><FLNO>MUA</FLNO><SODT>05MAR260900</SODT><STND>2A</STND></FLTR>";
        let raw =
            crate::fixtures::other(id as u64, "SCHD", "DNLD", &format!("<SCHD><RECS>1</RECS>{body}</SCHD>"));
        self.arrive(id, Some(&raw));
        self.drain();
        let mut mb = self.mailbox.clone();
        mb.mark(&[id], self.clock.now(), &|| Ok(())).unwrap();
    }

    /// The pump runs until it has nothing to do.
    fn drain(&self) {
        let mut pump = self.pump(&Config::defaults().pipeline);
        for _ in 0..100 {
            let r = pump.round(self.clock.now()).unwrap();
            if r.next() != Next::Now && !r.progressed() {
                return;
            }
        }
        panic!("the pump did not drain");
    }

    /// The outbox as (message, payload) pairs, in EVENT_ID order.
    fn events(&self) -> Vec<(Option<i64>, String)> {
        self.pg
            .inspect(|s| s.events.values().map(|e| (e.event.msg_id, e.event.payload_json.clone())).collect())
    }
}

#[test]
fn a_pipeline_that_never_forgot_is_clean() {
    let w = World::new(KEEP);
    w.process(1..=9);
    let r = w.check();
    assert!(r.is_clean(), "{r:?}");
    assert_eq!((r.pg_known_max, r.journal_checked, r.sampled), (9, 9, 9));
}

#[test]
fn regression_postgres_rolled_back_is_found_and_healed_with_the_same_events() {
    let w = World::new(KEEP);
    w.process(1..=5);
    let backup = w.pg.state();
    w.process(6..=10);
    let before = w.events();
    w.pg.replace_state(backup);
    let r = w.check();
    let recorded = r.finding(FindingKind::JournalUnknown).expect("Redis recorded what postgres forgot");
    assert_eq!((recorded.count, recorded.ids.first()), (5, Some(&6)));
    assert!(r.suspicions.is_empty(), "the marks Redis recorded are proof, not suspicion: {r:?}");
    assert!(r.behind(Behind::Postgres) && !r.behind(Behind::Redis), "{r:?}");
    let healed = w.heal(&r).unwrap();
    assert_eq!((healed.enqueued, healed.marked, healed.range), (5, 5, Some((6, 10))));
    w.drain();
    assert_eq!(w.events(), before, "the same events, in the same order, for the same messages");
    assert!(w.check().is_clean(), "{:?}", w.check());
}

#[test]
fn regression_redis_restored_from_an_older_dump_is_found_and_rebuilt() {
    let w = World::new(KEEP);
    w.process(1..=5);
    let dump = w.flights.state();
    w.process(6..=10);
    let before = w.flights.all();
    w.flights.replace_state(dump);
    let r = w.check();
    let missing = r.finding(FindingKind::JournalMissing).expect("the journal went back too");
    assert_eq!((missing.count, missing.ids.first()), (5, Some(&6)));
    assert!(r.finding(FindingKind::VersionsBehind).is_some(), "the sample sees older versions: {r:?}");
    let healed = w.heal(&r).unwrap();
    assert_eq!(healed.from, Some(6));
    assert_eq!(w.flights.all(), before, "every flight as it was before the restore");
    assert!(w.check().is_clean(), "{:?}", w.check());
}

/// #65, the fleet's seed 14311: a message laid on by another release's heal as its events
/// announced it kept the versions of what no event said — a value it restated, the FFID its
/// record brought (an event carries the FFID beside its changes, and a record whose only news
/// is its FFID announces nothing) —; the version sample of the release that decided it then
/// called Redis behind and stopped the stages: a false alarm. A value Redis holds already, and
/// the FFID, prove nothing; a value it lost does.
#[test]
fn regression_a_restated_value_or_an_unannounced_ffid_is_no_finding() {
    let w = World::new(KEEP);
    w.process(1..=6);
    let edit = |w: &World, f: &dyn Fn(&mut crate::handlers::FlightState)| {
        let mut state = w.flights.state();
        f(state.flights.get_mut("F0").unwrap());
        w.flights.replace_state(state);
    };
    // Message 6 left F0 at STND S6: the same value at an older version, and no FFID at all.
    edit(&w, &|f| {
        f.versions.insert("STND".into(), 3);
        f.fields.remove("FFID");
        f.versions.remove("FFID");
    });
    let r = w.check();
    assert!(r.finding(FindingKind::VersionsBehind).is_none(), "nothing lost: {r:?}");
    assert!(r.sampled > 0, "the sample ran: {r:?}");
    // The value itself older: a real loss, found.
    edit(&w, &|f| {
        f.fields.insert("STND".into(), "S3".into());
    });
    let r = w.check();
    assert_eq!(r.finding(FindingKind::VersionsBehind).map(|f| f.ids.clone()), Some(vec![6]), "{r:?}");
}

/// #52: the version sample decided an earlier release's messages again under today's rules —
/// a mapping added since (`<XSTND>`, skipped as unknown before) made Redis look behind, a
/// false `versions-behind` and a heal. A message is re-decided only under the rules that
/// decided it; one decided under others is counted, never a finding. Here Redis went back to a
/// dump (a real loss): the messages of this release are found, those recorded under other
/// rules are counted and left alone.
#[test]
fn the_version_sample_redecides_only_under_the_rules_that_decided() {
    let w = World::new(KEEP);
    w.process(1..=5);
    let dump = w.flights.state();
    w.process(6..=10);
    w.flights.replace_state(dump.clone());
    let r = w.check();
    assert_eq!(r.other_rules, 0);
    assert!(r.finding(FindingKind::VersionsBehind).is_some(), "this release's messages are compared: {r:?}");
    // The same Redis, the messages recorded as decided by an earlier release.
    w.pg.tamper(|s| s.procs.values_mut().for_each(|p| p.rules_version = p.rules_version.map(|v| v - 1)));
    let r = w.check();
    assert!(
        r.finding(FindingKind::VersionsBehind).is_none(),
        "no message is decided again under other rules: {r:?}"
    );
    assert_eq!((r.sampled, r.other_rules), (0, 10));
}

/// Seed 4998: a schedule update (SCHD-ADFT) changes flights it does not read, and the heal laid
/// its change on a flight it had not read from Redis — then wrote that flight back whole, with
/// only the schedule's fields: what earlier messages set (an FFID, here) was gone.
#[test]
fn regression_seed_4998_a_heal_keeps_what_a_schedule_update_did_not_set() {
    let w = World::new(KEEP);
    w.process(1..=3);
    let dump = w.flights.state();
    w.arrive(4, Some(&crate::fixtures::schd(4, "ADFT", &[("F1", "05MAR260900")])));
    w.drain();
    let before = w.flights.all();
    assert_eq!(before["F1"].get("STND").map(String::as_str), Some("SF1"), "the schedule's: {before:?}");
    assert!(before["F1"].contains_key("FFID"), "the FLOP's kept: {before:?}");
    w.flights.replace_state(dump);
    let r = w.check();
    assert!(r.finding(FindingKind::JournalMissing).is_some(), "{r:?}");
    assert_eq!(w.heal(&r).unwrap().from, Some(4));
    assert_eq!(w.flights.all(), before, "F1 keeps its FFID");
}

/// Seed 2155: Redis lost a day's snapshot (its flights gone) but kept the next day's, which
/// had advanced the plan past it. The heal replayed the lost snapshot on Redis's generation,
/// took it for one not newer than the plan and changed nothing; the check after found the same
/// again, and every instance stopped with "not healed" — though own PostgreSQL had recorded
/// that the snapshot advanced the plan when it was taken.
#[test]
fn regression_seed_2155_a_snapshot_redis_lost_behind_a_later_one_is_healed() {
    let w = World::new(KEEP);
    w.arrive(1, Some(&crate::fixtures::schd(1, "DNLD", &[("D5", "05MAR260900")])));
    w.arrive(2, Some(&crate::fixtures::schd(2, "DNLD", &[("D6", "06MAR260900")])));
    w.drain();
    let before = w.flights.all();
    assert!(before.contains_key("D5") && before.contains_key("D6"), "{before:?}");
    // Redis forgets the first day's flight; its journal and the plan's generation stay.
    let mut lost = w.flights.state();
    lost.flights.remove("D5");
    lost.sodt.remove("D5");
    w.flights.replace_state(lost);
    let r = w.check();
    let behind = r.finding(FindingKind::VersionsBehind).expect("the sample sees the lost snapshot");
    assert_eq!(behind.ids, [1], "{r:?}");
    w.heal(&r).unwrap();
    assert_eq!(w.flights.all(), before, "the first day's flight is back");
    assert!(w.check().is_clean(), "{:?}", w.check());
}

/// Seeds 13255 and 14834 (#56): a day's snapshot committed late took MSG_ID 1 after the
/// snapshot of MSG_ID 2 had advanced the plan; the pump found it not newer and changed nothing.
/// Redis forgot; the heal, replaying in MSG_ID order, laid MSG_ID 1's flights on first — a
/// flight the plan never held, and a generation one ahead of what the pump made.
#[test]
fn regression_a_snapshot_the_pump_found_stale_is_not_laid_on_by_a_heal() {
    let w = World::new(KEEP);
    w.arrive(2, Some(&crate::fixtures::schd(2, "DNLD", &[("D5", "05MAR260900")])));
    w.drain();
    w.arrive(1, Some(&crate::fixtures::schd(1, "DNLD", &[("X5", "05MAR261000")])));
    w.drain();
    assert_eq!(w.pg.proc(1).unwrap().redis_record, Some(crate::domain::RedisRecord::Stale));
    let (before, generation) = (w.flights.all(), w.flights.generation());
    assert!(before.contains_key("D5") && !before.contains_key("X5"), "{before:?}");
    w.flights.replace_state(Default::default());
    let r = w.check();
    assert!(r.finding(FindingKind::FlightsEmpty).is_some(), "{r:?}");
    w.heal(&r).unwrap();
    assert_eq!(w.flights.all(), before, "the stale snapshot's flight is not laid on");
    assert_eq!(w.flights.generation(), generation, "advanced once, by MSG_ID 2");
    assert!(w.check().is_clean(), "{:?}", w.check());
}

#[test]
fn regression_redis_emptied_is_rebuilt_from_every_succeeded_message() {
    let w = World::new(KEEP);
    w.process(1..=7);
    let before = w.flights.all();
    w.flights.replace_state(Default::default());
    let r = w.check();
    assert!(r.finding(FindingKind::FlightsEmpty).is_some(), "{r:?}");
    w.heal(&r).unwrap();
    assert_eq!(w.flights.all(), before);
    assert!(w.check().is_clean(), "{:?}", w.check());
}

/// #53: the heal decoded a text again at the default shape limits, whatever the pump had
/// decoded it under: with `msgx.codec.max-unknown-names` raised, a message the pump took with
/// 70 unknown names was left out of the rebuild, its stand lost.
#[test]
fn regression_a_heal_decodes_under_the_limits_the_pump_decoded_under() {
    let w = World::new(KEEP);
    let mut raised = Config::defaults().pipeline;
    raised.max_unknown_names = 100;
    let extra: String = (0..70).map(|i| format!("<X{i:02}/>")).collect();
    let raw = crate::fixtures::flop_body("STND", "W1", &format!("<STND>77</STND>{extra}"));
    w.arrive(1, Some(&raw));
    let mut pump = w.pump(&raised);
    while pump.round(w.clock.now()).unwrap().progressed() {}
    assert_eq!(w.flights.flight("W1").unwrap()["STND"], "77");
    let before = w.flights.all();
    w.flights.replace_state(Default::default());
    let r = w.check();
    let (mut pg, mut mb, mut fl) = (w.pg.clone(), w.mailbox.clone(), w.flights.handle());
    let limits = crate::codec::Limits::of(&raised);
    let st = &mut Stores {
        pg: &mut pg,
        mailbox: &mut mb,
        flights: &mut fl,
        beat: Default::default(),
        limits,
        rules: crate::codec::Rulebook::this_release(),
    };
    heal(st, &r, w.clock.now()).unwrap();
    assert_eq!(w.flights.all(), before, "the message past the default limit is rebuilt too");
}

/// Found on the real services (tests/forgetful.rs, once Redis was told what msgx takes and
/// settles, #37): after a FLUSHALL the pump's next read wrote `journal:done` and
/// `applied:settled` before it found Redis had forgotten, and the check no longer saw an empty
/// store — the start-up pass then agreed on a Redis without a flight.
#[test]
fn regression_an_emptied_redis_is_found_after_the_pump_told_it_what_it_settled() {
    use crate::ports::{FlightStore, RoundNeed};
    let w = World::new(KEEP);
    w.process(1..=7);
    let before = w.flights.all();
    w.flights.replace_state(Default::default());
    let need = RoundNeed { taken: vec![8], ..Default::default() };
    w.flights.handle().keeping(KEEP).prepare(&need, &[6, 7], w.clock.now()).unwrap();
    let r = w.check();
    assert!(r.finding(FindingKind::FlightsEmpty).is_some(), "{r:?}");
    w.heal(&r).unwrap();
    assert_eq!(w.flights.all(), before);
}

/// Found by the simulator (seed 973 of 3000, after a clock jump past the archive delay): every
/// SUCCEEDED message archived, then Redis emptied — the check looked at `PROC_STATE` only,
/// found nothing Redis had acknowledged, and agreed on a Redis without a flight.
#[test]
fn regression_a_redis_emptied_after_every_message_was_archived_is_found() {
    let w = World::new(KEEP);
    w.process(1..=5);
    let before = w.flights.all();
    let mut archived = w.pg.state();
    for (id, p) in archived.procs.iter_mut() {
        archived.hst.insert(*id, p.clone());
        p.row.state = crate::domain::ProcStatus::Archived;
    }
    w.pg.replace_state(archived);
    w.flights.replace_state(Default::default());
    let r = w.check();
    assert_eq!(r.finding(FindingKind::FlightsEmpty).map(|f| f.ids.clone()), Some(vec![5]), "{r:?}");
    w.heal(&r).unwrap();
    assert_eq!(w.flights.all(), before, "rebuilt from the archive's messages");
}

#[test]
fn a_rollback_older_than_the_journal_keeps_is_left_to_a_person() {
    let w = World::new(Duration::ZERO);
    w.process(1..=5);
    let backup = w.pg.state();
    w.process(6..=10);
    w.drain(); // the journal entries of 6..=10 are dropped at once
    w.pg.replace_state(backup);
    let r = w.check();
    assert!(r.behind(Behind::Postgres), "{r:?}");
    match w.heal(&r) {
        Err(HealError::Person(why)) => assert!(why.contains("MSG_ID 6") && why.contains("journal"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.pg.proc(6), None, "nothing enqueued on a guess");
}

#[test]
fn a_text_gone_from_the_mailbox_stops_the_rebuild_with_what_to_decide() {
    let w = World::new(KEEP);
    w.process(1..=4);
    w.flights.replace_state(Default::default());
    w.mailbox.insert(2, None);
    match w.heal(&w.check()) {
        Err(HealError::Person(why)) => assert!(why.contains("SUCCEEDED message 2"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// #41: an emptied Redis, and the text of the day's plan gone from the mailbox. The heal
/// rebuilds what the other texts prove, asks the AODB for the plan's day — the day its outbox
/// events place its flights on — and lets the stages run; the answer, processed as any
/// message, brings the day back and closes the request.
#[test]
fn a_heal_asks_the_aodb_for_the_window_whose_text_is_gone_and_the_answer_heals_it() {
    let w = World::new(KEEP);
    let plan =
        |m: u64, styp: &str| crate::fixtures::schd(m, styp, &[("A1", "05MAR260900"), ("A2", "05MAR261000")]);
    w.arrive(1, Some(&plan(1, "DNLD")));
    w.arrive(2, Some(&flop_stnd(2, "A1", "B9")));
    w.arrive(3, Some(&crate::fixtures::schd(3, "DNLD", &[("C1", "06MAR260900")])));
    w.drain();
    w.flights.replace_state(Default::default());
    w.mailbox.insert(1, None);
    let r = w.check();
    assert!(r.finding(FindingKind::FlightsEmpty).is_some(), "{r:?}");
    let healed = w.heal_asking(&r, true).unwrap();
    let asked = w.requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(healed.asked, [asked[0].req_id]);
    assert_eq!(
        (asked[0].req_type.as_str(), asked[0].req_key.as_str()),
        ("RQFD", "2026-03-05T00:00/2026-03-05T23:59")
    );
    assert_eq!(asked[0].origin, "heal");
    assert!(healed.summary().contains("the AODB asked for 1 window(s)"), "{}", healed.summary());
    assert!(w.check().is_clean(), "the stages may run meanwhile: {:?}", w.check());
    let meanwhile = w.flights.all();
    assert!(meanwhile.contains_key("C1") && !meanwhile.contains_key("A2"), "{meanwhile:?}");

    // The request goes to COUTMSGS, and the AODB answers with the day's plan.
    w.send_requests();
    w.arrive(4, Some(&plan(4, "RESP")));
    w.drain();
    let after = w.flights.all();
    assert!(after.contains_key("A1") && after.contains_key("A2") && after.contains_key("C1"), "{after:?}");
    let done = &w.requests()[0];
    assert_eq!((done.state, done.answer_msg_id), (crate::requests::ReqState::Done, Some(4)));
    assert!(w.check().is_clean(), "{:?}", w.check());
}

/// Redis emptied, message 2's text gone and every event past retention: nothing places the
/// flights it changed on a day. The world, and what the check found.
fn a_gone_text_no_event_places() -> (World, Report) {
    let w = World::new(KEEP);
    w.process(1..=3);
    w.flights.replace_state(Default::default());
    w.mailbox.insert(2, None);
    let mut pg = w.pg.state();
    pg.events.clear();
    w.pg.replace_state(pg);
    let r = w.check();
    (w, r)
}

/// #41, #55: the text gone and its events past retention: nothing says which day to ask for, so
/// a person decides — with or without `msgx.requests.on-empty`, which only a first start reads
/// (before #55 an emptied Redis asked for today's window and ended degraded with its answer).
#[test]
fn regression_a_heal_that_cannot_place_the_lost_flights_stops_for_a_person_and_asks_for_no_day() {
    for on_empty in [true, false] {
        let (w, r) = a_gone_text_no_event_places();
        match w.heal_asking(&r, on_empty) {
            Err(HealError::Person(why)) => {
                assert!(why.contains("SUCCEEDED message(s) 2 that changed flights"), "{why}");
                assert!(w.requests().is_empty());
            }
            other => panic!("on-empty {on_empty}: {other:?}"),
        }
    }
}

/// #55: after that stop, a person names the window to ask (`msgx.requests.heal-window`): the heal
/// asks it instead of stopping, and msgx serves, degraded, until the answer comes.
#[test]
fn a_heal_that_cannot_place_the_lost_flights_asks_the_window_a_person_named() {
    let (w, r) = a_gone_text_no_event_places();
    let mut asking = Asking::of(&Config::defaults());
    asking.policy.heal_window = Some("2026-03-05T00:00/2026-03-06T23:59".into());
    w.heal_with(&r, &asking).expect("the heal asks the named window");
    let asked: Vec<(String, String)> =
        w.requests().iter().map(|r| (r.origin.clone(), r.req_key.clone())).collect();
    assert_eq!(asked, [("heal".to_string(), "2026-03-05T00:00/2026-03-06T23:59".to_string())]);
}

/// #68: `msgx.requests.heal-window` stayed in force after use, so a later heal silently asked a
/// stale window for messages it says nothing of. Once a heal's request for it was dismissed (or
/// answered), it is spent: a later heal stops for a person again, naming the key.
#[test]
fn regression_a_named_window_is_spent_once_its_request_is_answered_or_dismissed() {
    let (w, r) = a_gone_text_no_event_places();
    let mut asking = Asking::of(&Config::defaults());
    let key = "2026-03-05T00:00/2026-03-06T23:59";
    asking.policy.heal_window = Some(key.into());
    w.heal_with(&r, &asking).expect("the heal asks the named window");
    let asked = w.requests()[0].req_id;
    let mut pg = w.pg.clone();
    let (_, dismissed) = pg.dismiss_request(asked, "re-sent by phone", w.clock.now()).unwrap().unwrap();
    assert!(dismissed);
    match w.heal_with(&r, &asking) {
        Err(HealError::Person(why)) => {
            assert!(why.contains(&format!("msgx.requests.heal-window \"{key}\" was named for messages an earlier heal could not place, and its request req_id={asked} was dismissed by a person")), "{why}");
        }
        other => panic!("a spent window was asked again: {other:?}"),
    }
    assert_eq!(w.requests().len(), 1, "nothing asked again");
}

#[test]
fn regression_a_new_epoch_is_above_every_epoch_another_store_saw() {
    let mut pg = MemPg::new();
    let me = Claimant { id: "a:1:0".into(), host: "a".into(), pid: 1 };
    let Claim::Acquired { epoch, .. } = pg.claim_above(&me, Duration::from_secs(10), 41).unwrap() else {
        panic!("free")
    };
    assert_eq!(epoch, 42, "max(0 in postgres, 41 seen in Redis) + 1");
    let w = World::new(KEEP);
    w.flights.handle().claim(7).unwrap();
    let r = w.check();
    assert_eq!(r.finding(FindingKind::EpochAhead).map(|f| f.ids.clone()), Some(vec![7, 0]));
    let mut fl = w.flights.handle();
    assert_eq!(fl.audit().unwrap().epoch, 7);
}

/// Rows 1 to 6 processed and marked, row 4 committed late (PRE-2) and processed after 5 and 6;
/// then own PostgreSQL and Redis both back to the moment before row 4.
fn late_row_4_both_stores_forgot() -> World {
    let w = World::new(KEEP);
    w.process(1..=3);
    w.process(5..=6);
    let (pg, flights) = (w.pg.state(), w.flights.state());
    w.clock.advance(Duration::from_secs(1));
    w.process(4..=4); // committed late (PRE-2): processed after 5 and 6
    w.pg.replace_state(pg);
    w.flights.replace_state(flights);
    w
}

/// Found by the simulator (seed 637) as a forget; since #37 a mark is evidence only when
/// Redis recorded that msgx settled the row: with both stores back to the same moment, nothing
/// proves msgx marked row 4 rather than someone else — a suspicion, named, left alone.
#[test]
fn regression_a_late_row_both_stores_forgot_is_a_suspicion_named_and_left_alone() {
    let w = late_row_4_both_stores_forgot();
    let r = w.check();
    assert!(r.is_clean(), "no proof that a store forgot: {r:?}");
    let s = r.suspicion(SuspicionKind::MarkedUnrecorded).expect("the mark is named");
    assert_eq!(s.ids, [4]);
    assert!(s.line().contains("MSG_IDs 4") && s.line().contains("leaves them alone"), "{}", s.line());
    assert_eq!(w.heal(&r).unwrap(), Healed::default());
    assert_eq!(w.pg.proc(4), None, "never processed on a guess");
}

/// #65, the fleet's seed 10482: after both stores went back, an operator replayed an old DEAD
/// row before the stores were compared. The replay moved own PostgreSQL's newest `UPDATED_AT`,
/// the moment the check took it to stand at, ten minutes on: the mark of late row 4, made
/// before, fell out of the window and the row was never enqueued again. The moment is the
/// newest enqueue, which no operator's command moves.
#[test]
fn regression_an_operators_command_after_a_forget_does_not_hide_a_late_rows_mark() {
    let w = late_row_4_both_stores_forgot();
    w.clock.advance(Duration::from_secs(600));
    let now = w.clock.now();
    w.pg.tamper(|s| s.procs.get_mut(&2).unwrap().updated_at = now); // `msgx replay`, say
    let r = w.check();
    let s = r.suspicion(SuspicionKind::MarkedUnrecorded).expect("the late row's mark is still looked at");
    assert_eq!(s.ids, [4]);
}

#[test]
fn a_generation_advanced_by_an_older_snapshot_is_redis_behind() {
    let w = World::new(KEEP);
    w.process(1..=2);
    w.snapshot(3);
    assert!(w.check().is_clean(), "{:?}", w.check());
    let before = w.flights.all();
    let mut older = w.flights.state();
    older.generation = (0, 0); // a dump from before the snapshot, its journal kept
    w.flights.replace_state(older);
    let r = w.check();
    let f = r.finding(FindingKind::GenerationBehind).expect("the plan went back");
    assert_eq!(f.ids, [3, 0]);
    w.heal(&r).unwrap();
    assert_eq!(w.flights.generation().1, 3, "advanced again by the snapshot");
    assert_eq!(w.flights.all(), before);
    assert!(w.check().is_clean(), "{:?}", w.check());
}

/// Own PostgreSQL as a check that raced a running pipeline saw it: its highest MSG_ID read
/// before the newest rows were enqueued, processed and marked.
struct ReadEarly(MemPg, i64);

impl crate::ports::StateAudit for ReadEarly {
    fn known_max(&mut self) -> crate::ports::StoreResult<i64> {
        Ok(self.1)
    }
    fn unknown(&mut self, ids: &[i64]) -> crate::ports::StoreResult<Vec<i64>> {
        self.0.unknown(ids)
    }
    fn succeeded_above(&mut self, after: i64, limit: usize) -> crate::ports::StoreResult<Vec<SucceededRow>> {
        self.0.succeeded_above(after, limit)
    }
    fn succeeded_last(&mut self, limit: usize) -> crate::ports::StoreResult<Vec<SucceededRow>> {
        self.0.succeeded_last(limit)
    }
    fn newest_recorded(&mut self) -> crate::ports::StoreResult<Option<i64>> {
        self.0.newest_recorded()
    }
    fn generation_above(&mut self, after: i64) -> crate::ports::StoreResult<Option<i64>> {
        self.0.generation_above(after)
    }
    fn newest_enqueue(&mut self) -> crate::ports::StoreResult<Option<std::time::SystemTime>> {
        self.0.newest_enqueue()
    }
    fn events_of(&mut self, ids: &[i64]) -> crate::ports::StoreResult<Vec<(i64, crate::domain::NewEvent)>> {
        self.0.events_of(ids)
    }
    fn events_pruned(&mut self) -> crate::ports::StoreResult<i64> {
        self.0.events_pruned()
    }
}

impl crate::ports::RulesJobs for ReadEarly {
    fn ask_rules_apply(
        &mut self,
        since: i64,
        rules: u32,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<crate::ports::RulesJob> {
        self.0.ask_rules_apply(since, rules, now)
    }
    fn rules_jobs(&mut self, limit: usize) -> crate::ports::StoreResult<Vec<crate::ports::RulesJob>> {
        self.0.rules_jobs(limit)
    }
    fn open_rules_job(&mut self, rules: u32) -> crate::ports::StoreResult<Option<crate::ports::RulesJob>> {
        self.0.open_rules_job(rules)
    }
    fn stage_rules_apply(
        &mut self,
        job_id: i64,
        staged: &str,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<()> {
        self.0.stage_rules_apply(job_id, staged, now)
    }
    fn finish_rules_apply(
        &mut self,
        job: &crate::ports::RulesJob,
        done: &crate::ports::RulesDone<'_>,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<()> {
        self.0.finish_rules_apply(job, done, now)
    }
    fn fail_rules_apply(
        &mut self,
        job_id: i64,
        why: &str,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<()> {
        self.0.fail_rules_apply(job_id, why, now)
    }
}

impl crate::ports::Requests for ReadEarly {
    fn register(
        &mut self,
        new: &crate::requests::NewRequest,
        text: &dyn Fn(i64) -> crate::requests::Outgoing,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<Result<crate::requests::Request, crate::requests::Request>> {
        self.0.register(new, text, now)
    }
    fn requests(
        &mut self,
        open_only: bool,
        limit: usize,
    ) -> crate::ports::StoreResult<Vec<crate::requests::Request>> {
        self.0.requests(open_only, limit)
    }
    fn awaited(&mut self, limit: usize) -> crate::ports::StoreResult<Vec<crate::requests::Request>> {
        self.0.awaited(limit)
    }
    fn heal_requests(
        &mut self,
        key: &str,
        limit: usize,
    ) -> crate::ports::StoreResult<Vec<crate::requests::Request>> {
        self.0.heal_requests(key, limit)
    }
    fn dismiss_request(
        &mut self,
        req_id: i64,
        note: &str,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<Option<(crate::requests::Request, bool)>> {
        self.0.dismiss_request(req_id, note, now)
    }
    fn keep_requests(
        &mut self,
        timeout: Duration,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<crate::ports::Kept> {
        self.0.keep_requests(timeout, now)
    }
}

impl Intake for ReadEarly {
    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<Vec<i64>> {
        self.0.enqueue(rows, watermark, now)
    }
    fn held(&mut self, ids: &[i64]) -> crate::ports::StoreResult<Vec<crate::ports::Held>> {
        self.0.held(ids)
    }
    fn watermark(&mut self) -> crate::ports::StoreResult<i64> {
        self.0.watermark()
    }
}

impl LeaseStore for ReadEarly {
    fn claim_above(&mut self, me: &Claimant, d: Duration, floor: i64) -> crate::ports::StoreResult<Claim> {
        self.0.claim_above(me, d, floor)
    }
    fn renew(
        &mut self,
        me: &Claimant,
        epoch: i64,
        d: Duration,
        status: &str,
    ) -> crate::ports::StoreResult<bool> {
        self.0.renew(me, epoch, d, status)
    }
    fn release(&mut self, me: &Claimant, epoch: i64) -> crate::ports::StoreResult<()> {
        self.0.release(me, epoch)
    }
    fn holder(&mut self) -> crate::ports::StoreResult<crate::ports::LeaseHolder> {
        self.0.holder()
    }
}

impl crate::ports::HealLog for ReadEarly {
    fn heals_since(
        &mut self,
        since: std::time::SystemTime,
    ) -> crate::ports::StoreResult<Vec<crate::ports::HealRecord>> {
        self.0.heals_since(since)
    }
    fn record_heal(&mut self, heal: &crate::ports::HealRecord) -> crate::ports::StoreResult<()> {
        self.0.record_heal(heal)
    }
}

#[test]
fn regression_a_check_that_raced_a_running_pipeline_finds_nothing() {
    let w = World::new(KEEP);
    w.process(1..=10);
    let mut pg = ReadEarly(w.pg.clone(), 4); // read before 5..=10 were enqueued
    let (mut mb, mut fl) = (w.mailbox.clone(), w.flights.handle());
    for depth in [Depth::Full { sample: 1.0 }, Depth::Recent(500)] {
        let st = &mut Stores {
            pg: &mut pg,
            mailbox: &mut mb,
            flights: &mut fl,
            beat: Default::default(),
            limits: Default::default(),
            rules: crate::codec::Rulebook::this_release(),
        };
        let r = check(st, depth, w.clock.now()).unwrap();
        assert!(r.is_clean(), "found by the suite: the sentinel stopped a healthy instance: {r:?}");
    }
}

/// Redis as the heal reads it, counting the flights it reads (#38: a heal reads what the
/// evidence needs, not every flight ever held).
struct Counting(MemFlights, std::cell::Cell<usize>);

impl FlightAudit for Counting {
    fn audit(&mut self) -> crate::ports::StoreResult<crate::ports::FlightMarks> {
        self.0.audit()
    }
    fn journal_has(&mut self, ids: &[i64]) -> crate::ports::StoreResult<Vec<bool>> {
        self.0.journal_has(ids)
    }
    fn journal_ids(&mut self) -> crate::ports::StoreResult<Vec<i64>> {
        self.0.journal_ids()
    }
    fn settled_ids(&mut self) -> crate::ports::StoreResult<Vec<i64>> {
        self.0.settled_ids()
    }
    fn recorded(&mut self, ids: &[i64]) -> crate::ports::StoreResult<Vec<bool>> {
        self.0.recorded(ids)
    }
    fn set_pruned(&mut self, id: i64) -> crate::ports::StoreResult<()> {
        self.0.set_pruned(id)
    }
    fn restore(
        &mut self,
        r: &crate::ports::Restore,
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<()> {
        self.0.restore(r, now)
    }
    fn generation_of(&mut self) -> crate::ports::StoreResult<(i64, i64)> {
        self.0.generation_of()
    }
    fn all_flights(
        &mut self,
    ) -> crate::ports::StoreResult<Vec<(String, crate::handlers::FlightState, Option<i64>)>> {
        panic!("a heal reads the flights its messages name, not every flight held")
    }
    fn flights_of(
        &mut self,
        flids: &[String],
    ) -> crate::ports::StoreResult<Vec<(String, crate::handlers::FlightState, Option<i64>)>> {
        self.1.set(self.1.get() + flids.len());
        self.0.flights_of(flids)
    }
}

impl crate::ports::FlightStore for Counting {
    fn prepare(
        &mut self,
        need: &crate::ports::RoundNeed,
        forget: &[i64],
        now: std::time::SystemTime,
    ) -> crate::ports::StoreResult<crate::ports::Prepared> {
        self.0.prepare(need, forget, now)
    }
    fn apply(&mut self, d: &[crate::ports::Applying<'_>]) -> crate::ports::StoreResult<Vec<bool>> {
        self.0.apply(d)
    }
    fn forget(&mut self, ids: &[i64], now: std::time::SystemTime) -> crate::ports::StoreResult<()> {
        self.0.forget(ids, now)
    }
}

#[test]
fn a_redis_heal_reads_only_the_flights_of_the_messages_since_its_evidence() {
    let w = World::new(KEEP);
    // 300 messages over 100 flights (F0 … F99), then 5 more over 2 of them.
    for id in 1..=300 {
        let raw = flop_stnd(id as u64, &format!("F{}", id % 100), &format!("S{id}"));
        w.mailbox.insert(id, Some(&raw));
        let mut pg = w.pg.clone();
        pg.enqueue(&[InboundRow { id, received_at: None }], Some(id), w.clock.now()).unwrap();
    }
    w.drain();
    let dump = w.flights.state();
    for id in 301..=305 {
        let raw = flop_stnd(id as u64, &format!("F{}", id % 2), &format!("S{id}"));
        w.mailbox.insert(id, Some(&raw));
        let mut pg = w.pg.clone();
        pg.enqueue(&[InboundRow { id, received_at: None }], Some(id), w.clock.now()).unwrap();
    }
    w.drain();
    let before = w.flights.all();
    w.flights.replace_state(dump);
    let r = w.check();
    assert_eq!(r.finding(FindingKind::JournalMissing).map(|f| f.ids[0]), Some(301), "{r:?}");
    let mut counting = Counting(w.flights.handle(), Default::default());
    let (mut pg, mut mb) = (w.pg.clone(), w.mailbox.clone());
    let healed = heal(
        &mut Stores {
            pg: &mut pg,
            mailbox: &mut mb,
            flights: &mut counting,
            beat: Default::default(),
            limits: Default::default(),
            rules: crate::codec::Rulebook::this_release(),
        },
        &r,
        w.clock.now(),
    )
    .unwrap();
    assert_eq!((healed.flights, healed.messages), (2, 5));
    assert_eq!(counting.1.get(), 2, "the two flights messages 301 to 305 name, of the 100 held");
    assert_eq!(w.flights.all(), before);
}

/// #52: a heal re-interpreted history. Redis emptied after an upgrade was rebuilt by deciding
/// an earlier release's texts under today's rules: a vendor element the earlier release skipped
/// (`<XSTND>`) appeared in Redis, announced by no event, while every consumer held the flight
/// without it. A message decided under other rules is laid on as its events announced it —
/// here an earlier release that announced message 5 not at all and message 6 with another
/// value; only where the outbox may have lost its events (retention) is it decided again, and
/// counted.
#[test]
fn regression_a_heal_lays_on_what_other_rules_announced_never_what_today_reads_into_them() {
    let w = World::new(KEEP);
    w.process(1..=6);
    w.pg.tamper(|s| {
        s.procs.values_mut().for_each(|p| p.rules_version = p.rules_version.map(|_| 0));
        s.events.retain(|_, e| e.event.msg_id != Some(5));
        for e in s.events.values_mut().filter(|e| e.event.msg_id == Some(6)) {
            e.event.payload_json = e.event.payload_json.replace("\"S6\"", "\"X6\"");
        }
    });
    let announced = |w: &World| {
        w.flights.replace_state(Default::default());
        let r = w.check();
        assert!(r.finding(FindingKind::FlightsEmpty).is_some(), "{r:?}");
        let healed = w.heal(&r).unwrap();
        assert!(w.check().is_clean(), "{:?}", w.check());
        let stands: Vec<String> = ["F0", "F1", "F2"]
            .iter()
            .map(|f| w.flights.all()[*f].get("STND").cloned().unwrap_or_default())
            .collect();
        (healed, stands)
    };
    let (healed, stands) = announced(&w);
    assert_eq!(stands, ["X6", "S4", "S2"], "as announced: 5 said nothing, 6 said X6");
    assert_eq!((healed.other.announced, healed.other.redecided), (6, 0));
    assert!(
        healed.summary().contains("6 message(s) decided under other rules laid on as announced"),
        "{}",
        healed.summary()
    );
    // Retention may have taken message 5's events: it is decided again, and named.
    w.pg.tamper(|s| s.events_pruned = 5);
    let (healed, stands) = announced(&w);
    assert_eq!(stands, ["X6", "S4", "S5"]);
    assert_eq!((healed.other.announced, healed.other.redecided), (5, 1));
    assert_eq!(healed.other.first_redecided, [5]);
    // Under this release's rules every message is decided again.
    w.pg.tamper(|s| {
        s.procs
            .values_mut()
            .for_each(|p| p.rules_version = Some(crate::codec::Rulebook::this_release().version()))
    });
    let (healed, stands) = announced(&w);
    assert_eq!(stands, ["S6", "S4", "S5"]);
    assert_eq!((healed.other.announced, healed.other.redecided), (0, 0));
}

/// `msgx rules apply` (#65) on the twins: messages 1..=4 for one flight, decided under this
/// release; 2 and 4 carry the vendor element `<XSTND>` only the next release reads.
fn vendor_world() -> World {
    let w = World::new(KEEP);
    for id in 1..=4i64 {
        let stand = format!("S{id}");
        let vendor = format!("V{id}");
        let mut fields = vec![("STND", Some(stand.as_str()))];
        if id % 2 == 0 {
            fields.push(("XSTND", Some(vendor.as_str())));
        }
        w.arrive(id, Some(&crate::fixtures::flop(id as u64, "STND", "F1", &fields)));
    }
    w.drain();
    let mut mb = w.mailbox.clone();
    mb.mark(&[1, 2, 3, 4], w.clock.now(), &|| Ok(())).unwrap();
    assert!(!w.flights.all()["F1"].contains_key("XSTND"), "this release skips the vendor element");
    w
}

impl World {
    /// The stores as an instance of `rules` opens them for its pass, under the lease's epoch.
    fn under<R>(
        &self,
        rules: &std::sync::Arc<crate::codec::Rulebook>,
        f: impl FnOnce(&mut Stores<'_>) -> R,
    ) -> R {
        let (mut pg, mut mb, mut fl) = (self.pg.clone(), self.mailbox.clone(), self.flights.handle());
        let st = &mut Stores {
            pg: &mut pg,
            mailbox: &mut mb,
            flights: &mut fl,
            beat: Default::default(),
            limits: Default::default(),
            rules: rules.clone(),
        };
        f(st)
    }

    /// The consistency pass of an instance of `rules`.
    fn pass_under(&self, rules: &std::sync::Arc<crate::codec::Rulebook>) -> Pass {
        let policy = PassPolicy { epoch: 0, sample: 1.0, budget: HealBudget { per_hour: 10 }, asking: None };
        self.under(rules, |st| pass(st, policy, self.clock.now()))
    }

    /// What a consumer that applied every `KAFKA:msg` event in order holds.
    fn consumer_view(&self) -> std::collections::BTreeMap<String, crate::handlers::Flight> {
        let mut held: std::collections::BTreeMap<String, crate::handlers::Flight> = Default::default();
        let events: Vec<crate::domain::NewEvent> = self.pg.inspect(|s| {
            s.events
                .values()
                .filter(|e| e.event.target == crate::domain::Target::KafkaMsg)
                .map(|e| crate::domain::NewEvent {
                    target: e.event.target,
                    partition_key: e.event.partition_key.clone(),
                    event_type: String::new(),
                    state_version: e.event.state_version,
                    payload_json: e.event.payload_json.clone(),
                })
                .collect()
        });
        for c in handlers::announced(&events).unwrap() {
            let f = held.entry(c.flid.clone()).or_default();
            if c.delete {
                f.clear();
            }
            f.extend(c.set.iter().cloned());
            c.clear.iter().for_each(|k| drop(f.remove(k)));
        }
        held.retain(|_, f| !f.is_empty());
        held
    }

    fn rules_of(&self, ids: &[i64]) -> Vec<Option<u32>> {
        self.pg.inspect(|s| ids.iter().map(|m| s.procs[m].rules_version).collect())
    }
}

#[test]
fn a_rules_job_tells_each_difference_under_the_message_that_made_it_and_a_consumer_holds_what_redis_holds() {
    let w = vendor_world();
    let next = crate::fixtures::next_release();
    let told = w.events().len();
    let job = w.pg.clone().ask_rules_apply(2, next.version(), w.clock.now()).unwrap();
    // This release's pass leaves a job of other rules alone.
    assert!(matches!(w.pass_under(&crate::codec::Rulebook::this_release()), Pass::Agreed { .. }));
    assert_eq!(w.events().len(), told);
    let Pass::Agreed { token, .. } = w.pass_under(&next) else { panic!("the next release's pass agrees") };
    assert_eq!(token, w.flights.inspect(|s| s.token.clone()), "the pump starts from the job's write");
    let f1 = &w.flights.all()["F1"];
    assert_eq!((f1["STND"].as_str(), f1["XSTND"].as_str()), ("S4", "V4"));
    let events = w.events();
    assert_eq!(events.len(), told + 1, "one event for the one flight that differs: {events:?}");
    let (m, payload) = events.last().unwrap();
    assert_eq!(*m, Some(4), "told under the flight's last message");
    assert!(payload.contains(r#"{"field":"XSTND","new":"V4","old":null}"#), "{payload}");
    let ordinal = w.pg.inspect(|s| s.events.values().last().unwrap().event.ordinal);
    assert_eq!(ordinal, Some(rules::ordinal_base(next.version())));
    assert_eq!(w.rules_of(&[1, 2, 3, 4]), [Some(1), Some(2), Some(2), Some(2)]);
    assert_eq!(
        w.consumer_view(),
        w.flights.all(),
        "a consumer that applied every event holds what Redis holds"
    );
    let done = w.pg.clone().rules_jobs(1).unwrap().remove(0);
    assert_eq!((done.job_id, done.state), (job.job_id, RulesJobState::Done));
    assert!(done.note.as_deref().unwrap().contains("3 message(s) from the first decided again under rules 2 (3 of them decided under other rules before): 1 flight(s) differ, 1 event(s) told"), "{done:?}");
    // The next release's check finds nothing, and a heal of it decides them under its rules.
    let clean = w.under(&next, |st| check(st, Depth::Full { sample: 1.0 }, w.clock.now()).unwrap());
    assert!(clean.is_clean(), "{clean:?}");
    assert!(matches!(w.pass_under(&next), Pass::Agreed { .. }));
    assert_eq!(w.events().len(), told + 1, "a job runs once");
}

#[test]
fn a_rules_job_cut_short_after_its_redis_write_tells_it_once() {
    for written in [false, true] {
        let w = vendor_world();
        let next = crate::fixtures::next_release();
        let told = w.events().len();
        let job = w.pg.clone().ask_rules_apply(1, next.version(), w.clock.now()).unwrap();
        // The job's first step, then (`written`) its Redis write: the process ends there.
        let diff = w.under(&next, |st| rules::difference(st, 1).unwrap());
        assert_eq!(diff.flights.len(), 1, "{diff:?}");
        let text = serde_json::to_string(&diff).unwrap();
        w.pg.clone().stage_rules_apply(job.job_id, &text, w.clock.now()).unwrap();
        if written {
            let f = &diff.flights[0];
            let restore = Restore {
                flights: vec![(f.flid.clone(), f.after.clone(), f.sodt_after)],
                generation: None,
                journal: vec![],
            };
            w.flights.handle().restore(&restore, w.clock.now()).unwrap();
        }
        assert!(matches!(w.pass_under(&next), Pass::Agreed { .. }), "written={written}");
        assert_eq!(w.events().len(), told + 1, "told once, written={written}");
        assert_eq!(w.flights.all()["F1"]["XSTND"], "V4");
        assert_eq!(w.consumer_view(), w.flights.all(), "written={written}");
        assert_eq!(w.pg.clone().rules_jobs(1).unwrap()[0].state, RulesJobState::Done);
    }
}

#[test]
fn a_rules_job_whose_flights_moved_since_it_was_staged_fails_for_a_person() {
    let w = vendor_world();
    let next = crate::fixtures::next_release();
    let job = w.pg.clone().ask_rules_apply(1, next.version(), w.clock.now()).unwrap();
    let diff = w.under(&next, |st| rules::difference(st, 1).unwrap());
    w.pg.clone()
        .stage_rules_apply(job.job_id, &serde_json::to_string(&diff).unwrap(), w.clock.now())
        .unwrap();
    // An instance of this release serves meanwhile and changes the flight.
    w.arrive(5, Some(&crate::fixtures::flop_stnd(5, "F1", "S5")));
    w.drain();
    let told = w.events().len();
    assert!(matches!(w.pass_under(&next), Pass::Agreed { .. }), "the job fails, the instance serves");
    let failed = w.pg.clone().rules_jobs(1).unwrap().remove(0);
    assert_eq!(failed.state, RulesJobState::Failed);
    assert!(failed
        .note
        .unwrap()
        .contains("1 flight(s) changed since its difference was staged (first FLID F1)"));
    assert_eq!(w.events().len(), told, "nothing told");
    assert_eq!(w.flights.all()["F1"]["STND"], "S5", "nothing written over it");
}

#[test]
fn a_rules_job_keeps_and_names_a_field_todays_rules_no_longer_write() {
    // This release's rules decide the job's messages as the next release's did: the vendor
    // field the next release wrote is one today's decision does not write.
    let w = vendor_world();
    let next = crate::fixtures::next_release();
    w.pg.clone().ask_rules_apply(1, next.version(), w.clock.now()).unwrap();
    assert!(matches!(w.pass_under(&next), Pass::Agreed { .. }));
    let this = crate::codec::Rulebook::this_release();
    w.pg.clone().ask_rules_apply(3, this.version(), w.clock.now()).unwrap();
    let told = w.events().len();
    assert!(matches!(w.pass_under(&this), Pass::Agreed { .. }));
    let done = w.pg.clone().rules_jobs(1).unwrap().remove(0);
    assert_eq!(done.state, RulesJobState::Done);
    let note = done.note.unwrap();
    assert!(
        note.contains(
            "1 field(s) other rules wrote that rules 1 do not kept as they are (first: msg_id=4 F1.XSTND)"
        ),
        "{note}"
    );
    assert_eq!(w.events().len(), told, "nothing differs: nothing told");
    assert_eq!(w.flights.all()["F1"]["XSTND"], "V4", "kept");
    assert_eq!(w.rules_of(&[2, 3, 4]), [Some(2), Some(1), Some(1)]);
}

/// The sentinel notices a job of its rules (#65) and the runner stops the stages for it, the
/// lease kept; a job of other rules is no business of this instance's.
#[test]
fn the_sentinel_asks_for_a_job_of_its_rules_and_the_runner_stops_the_stages_for_it() {
    use crate::stage::runner::{Halt, Runner, Turn};
    use crate::stage::{StageId, StallBoard};
    let w = vendor_world();
    let this = crate::codec::Rulebook::this_release();
    let p = Config::defaults().pipeline;
    let stats = std::sync::Arc::new(crate::stats::Stats::default());
    let sentinel = |w: &World| {
        stage::Sentinel::new(
            w.pg.clone(),
            w.mailbox.clone(),
            w.flights.handle(),
            &p,
            this.clone(),
            stats.clone(),
        )
    };
    let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(w.clock.clone());
    let gate = crate::lease::LeaseGate::new(0, clock.clone(), clock.mono(), Duration::from_secs(60));
    let turn = |s: &mut stage::Sentinel<MemPg, crate::store::memory::MemMailbox, MemFlights>| {
        let mut runner = Runner::new(StageId::Sentinel, p.outage, Duration::from_secs(1));
        runner.turn(s, &gate, &StallBoard::default(), &stats, clock.as_ref())
    };
    w.pg.clone().ask_rules_apply(1, crate::fixtures::next_release().version(), w.clock.now()).unwrap();
    assert!(matches!(turn(&mut sentinel(&w)), Turn::Again { .. }), "another release's job");
    let rounds = || stats.consistency_checks.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(rounds(), 1, "a comparison that found nothing is counted (#66)");
    let job = w.pg.clone().ask_rules_apply(2, this.version(), w.clock.now()).unwrap();
    match turn(&mut sentinel(&w)) {
        Turn::Stop(Halt::Asked(why)) => {
            assert!(why.contains(&format!("rules apply job={}", job.job_id)), "{why}")
        }
        other => panic!("the stages stop for the job: {other:?}"),
    }
    assert!(!gate.is_stale(), "the lease is kept");
    assert_eq!(rounds(), 1, "a round that stops for a job compares nothing");
}
