use std::time::Duration;

use super::*;
use crate::clock::Clock;
use crate::config::Config;
use crate::domain::ProcStatus;
use crate::ports::StoreResult;
use crate::store::memory::{MemMailbox, MemPg};
use crate::testkit::{self, Twins};

struct World {
    twins: Twins,
    poller: Poller<MemPg, MemMailbox>,
}

impl std::ops::Deref for World {
    type Target = Twins;
    fn deref(&self) -> &Twins {
        &self.twins
    }
}

fn world(batch: usize) -> World {
    let twins = Twins::new();
    let mut cfg = Config::defaults().pipeline;
    cfg.poll_batch = batch;
    let poller = Poller::new(
        twins.pg.clone(),
        twins.mailbox.clone(),
        &cfg,
        testkit::stats(),
        Arc::new(twins.clock.clone()),
    );
    World { twins, poller }
}

impl World {
    fn round(&mut self) -> Result<Round, StoreError> {
        self.poller.round(self.clock.now())
    }

    fn enqueued(&self) -> Vec<i64> {
        self.pg.inspect(|s| s.procs.keys().copied().collect())
    }

    fn watermark(&self) -> i64 {
        self.pg.inspect(|s| s.watermark)
    }
}

#[test]
fn polls_in_batches_advances_the_watermark_and_enqueues_once() {
    let mut w = world(2);
    for id in [1, 2, 3] {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    assert_eq!(w.round().unwrap(), Round::Polled { seen: 2, new: 2, full: true, held_until: None });
    assert_eq!(w.watermark(), 2);
    assert_eq!(w.round().unwrap(), Round::Polled { seen: 1, new: 1, full: false, held_until: None });
    assert_eq!(w.round().unwrap(), Round::Idle);
    assert_eq!(w.enqueued(), vec![1, 2, 3]);
    assert!(w.pg.inspect(|s| s.procs.values().all(|p| p.row.state == ProcStatus::Pending)));
}

#[test]
fn marked_and_foreign_status_rows_are_seen_but_not_taken() {
    let mut w = world(10);
    w.mailbox.insert(1, Some("<MSG/>"));
    w.mailbox.mark_externally(1, w.clock.now());
    w.mailbox.insert(2, Some("<MSG/>"));
    assert_eq!(w.round().unwrap(), Round::Polled { seen: 2, new: 1, full: false, held_until: None });
    assert_eq!(w.enqueued(), vec![2]);
    assert_eq!(w.watermark(), 2, "a visible row that is not for msgx is no gap");
}

#[test]
fn a_lower_id_that_commits_after_a_higher_one_was_polled_is_not_lost() {
    let mut w = world(10);
    w.mailbox.insert_uncommitted(1, "<MSG>a</MSG>");
    w.mailbox.insert(2, Some("<MSG>b</MSG>"));
    w.round().unwrap();
    assert_eq!(w.enqueued(), Vec::<i64>::new(), "2 waits for the commit grace");
    assert_eq!(w.watermark(), 0, "held below the gap");
    assert_eq!(w.poller.gap_ids(), 1);
    w.clock.advance(Duration::from_secs(10));
    w.mailbox.commit_row(1);
    w.round().unwrap();
    assert_eq!(w.enqueued(), vec![1, 2]);
    assert_eq!(w.watermark(), 2);
    assert_eq!(w.poller.gap_ids(), 0);
}

#[test]
fn a_rolled_back_id_releases_the_watermark_after_max_commit_delay() {
    let mut w = world(10);
    w.mailbox.insert(2, Some("<MSG/>")); // ID 1 was allocated and rolled back
    w.round().unwrap();
    assert_eq!(w.watermark(), 0);
    w.clock.advance(Duration::from_secs(299));
    w.round().unwrap();
    assert_eq!(w.watermark(), 0);
    w.clock.advance(Duration::from_secs(1));
    w.round().unwrap();
    assert_eq!(w.watermark(), 2);
}

#[test]
fn rows_past_a_held_watermark_flow_once_the_commit_grace_is_over() {
    let mut w = world(2);
    w.mailbox.insert_uncommitted(1, "<MSG/>");
    for id in 2..=7 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    let grace_end = w.clock.now() + Duration::from_secs(2);
    assert_eq!(
        w.round().unwrap(),
        Round::Polled { seen: 2, new: 0, full: true, held_until: Some(grace_end) }
    );
    assert_eq!(
        w.round().unwrap(),
        Round::Polled { seen: 0, new: 0, full: false, held_until: Some(grace_end) },
        "a full batch held: nothing more is read"
    );
    assert_eq!(w.round().unwrap().next(), Next::At(grace_end));
    w.clock.set(grace_end);
    while w.round().unwrap() != Round::Idle {}
    assert_eq!(w.enqueued(), vec![2, 3, 4, 5, 6, 7], "the gap does not stall the reader beyond the grace");
    assert_eq!(w.watermark(), 0);
}

#[test]
fn a_gap_that_fills_within_the_grace_keeps_id_order() {
    let mut w = world(10);
    w.mailbox.insert_uncommitted(1, "<MSG>lower, slow commit</MSG>");
    w.mailbox.insert(2, Some("<MSG>higher</MSG>"));
    w.mailbox.insert(3, Some("<MSG>higher</MSG>"));
    w.round().unwrap();
    w.clock.advance(Duration::from_millis(1500));
    w.round().unwrap();
    assert!(w.enqueued().is_empty(), "held behind the fresh gap");
    w.mailbox.commit_row(1);
    w.clock.advance(Duration::from_millis(100));
    assert!(w.round().unwrap().progressed());
    assert_eq!(w.enqueued(), vec![1, 2, 3], "all three at once: the pump takes them in ID order");
    assert_eq!(w.watermark(), 3);
}

/// Own PostgreSQL's intake whose watermark read blocks for `stall` (a frozen server), while
/// the mailbox commits `during` — as the acceptance trial of #69 had it.
struct StalledWatermark {
    pg: MemPg,
    mailbox: MemMailbox,
    clock: crate::clock::FakeClock,
    stall: Duration,
    during: Vec<i64>,
}

impl Intake for StalledWatermark {
    fn enqueue(
        &mut self,
        rows: &[InboundRow],
        watermark: Option<i64>,
        now: SystemTime,
    ) -> StoreResult<Vec<i64>> {
        self.pg.enqueue(rows, watermark, now)
    }

    fn held(&mut self, ids: &[i64]) -> StoreResult<Vec<Held>> {
        self.pg.held(ids)
    }

    fn watermark(&mut self) -> StoreResult<i64> {
        self.clock.advance(std::mem::take(&mut self.stall));
        self.during.drain(..).for_each(|id| self.mailbox.commit_row(id));
        self.pg.watermark()
    }
}

#[test]
fn regression_a_round_that_waited_on_postgres_still_holds_a_fresh_gap_for_the_whole_grace() {
    // #69: the round began, its watermark read blocked 5 s, and meanwhile the mailbox
    // committed B (ids 3, 4) above A (ids 1, 2, still open). The gap is as old as the read that
    // showed it, not the round: B waits the whole grace (2 s), and A, committed 1.5 s later,
    // goes first. Before, the gap was dated at the round's start, looked 5 s old at the next
    // round, and B flowed at once.
    let twins = Twins::new();
    let cfg = Config::defaults().pipeline;
    assert_eq!(cfg.commit_grace, Duration::from_secs(2));
    for id in 1..=4 {
        twins.mailbox.insert_uncommitted(id, "<MSG/>");
    }
    let intake = StalledWatermark {
        pg: twins.pg.clone(),
        mailbox: twins.mailbox.clone(),
        clock: twins.clock.clone(),
        stall: Duration::from_secs(5),
        during: vec![3, 4],
    };
    let clock = Arc::new(twins.clock.clone());
    let mut poller = Poller::new(intake, twins.mailbox.clone(), &cfg, testkit::stats(), clock);
    let started = twins.clock.now();
    let read_at = started + Duration::from_secs(5);
    let r = poller.round(started).unwrap();
    assert_eq!(
        r,
        Round::Polled { seen: 2, new: 0, full: false, held_until: Some(read_at + cfg.commit_grace) }
    );
    let enqueued = || twins.pg.inspect(|s| s.procs.keys().copied().collect::<Vec<_>>());
    // The runner's next round comes at once (its wake was counted from before the stall).
    poller.round(twins.clock.now()).unwrap();
    assert!(enqueued().is_empty(), "B is held: the gap below it is 0 s old, not 5 s");
    twins.clock.advance(Duration::from_millis(1500));
    poller.round(twins.clock.now()).unwrap();
    assert!(enqueued().is_empty(), "still within the grace");
    twins.mailbox.commit_row(1);
    twins.mailbox.commit_row(2);
    twins.clock.advance(Duration::from_millis(100));
    poller.round(twins.clock.now()).unwrap();
    assert_eq!(enqueued(), vec![1, 2, 3, 4], "A and B together: the pump takes them in ID order");
}

#[test]
fn without_a_gap_nothing_is_held() {
    let mut w = world(10);
    for id in 1..=3 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    assert_eq!(w.round().unwrap(), Round::Polled { seen: 3, new: 3, full: false, held_until: None });
    assert_eq!(w.enqueued(), vec![1, 2, 3], "the grace costs nothing without gaps");
}

#[test]
fn a_restarted_poller_reads_again_from_the_watermark_and_finds_the_late_row() {
    let mut w = world(10);
    w.mailbox.insert_uncommitted(1, "<MSG/>");
    w.mailbox.insert(2, Some("<MSG/>"));
    w.round().unwrap();
    // Restart: a new poller with empty memory; the late row commits meanwhile.
    w.mailbox.commit_row(1);
    let cfg = Config::defaults().pipeline;
    let mut again = Poller::new(
        w.pg.clone(),
        w.mailbox.clone(),
        &cfg,
        Arc::new(Stats::default()),
        Arc::new(w.clock.clone()),
    );
    again.round(w.clock.now()).unwrap();
    assert_eq!(w.enqueued(), vec![1, 2]);
    assert_eq!(w.watermark(), 2);
}

#[test]
fn rescan_finds_a_row_that_committed_after_its_gap_was_released() {
    let mut w = world(2);
    w.mailbox.insert(1, Some("<MSG/>"));
    w.mailbox.insert(2, Some("<MSG/>"));
    w.mailbox.insert_uncommitted(3, "<MSG/>"); // a transaction slower than max-commit-delay
    w.mailbox.insert(4, Some("<MSG/>"));
    w.round().unwrap(); // 1, 2
    w.round().unwrap(); // 4 (held); 3 is a gap
    w.clock.advance(Duration::from_secs(2));
    w.round().unwrap(); // past the grace: 4 flows
    assert_eq!(w.watermark(), 2);
    w.clock.advance(Duration::from_secs(298));
    w.round().unwrap(); // the gap is released
    assert_eq!(w.watermark(), 4);
    w.mailbox.commit_row(3);
    // The reader is past 3 for good; only the rescan can find it. It pages through unmarked
    // rows at or below the watermark, one page per round, a pass per rescan-interval.
    let mut rounds = 0;
    while !w.enqueued().contains(&3) {
        w.clock.advance(Duration::from_secs(20));
        w.round().unwrap();
        rounds += 1;
        assert!(rounds <= 10, "the rescan never found row 3");
    }
    assert_eq!(w.enqueued(), vec![1, 2, 3, 4]);
    assert_eq!(w.poller.stats.rescued.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn rescan_leaves_marked_rows_alone() {
    let mut w = world(10);
    w.mailbox.insert(1, Some("<MSG/>"));
    w.round().unwrap();
    w.mailbox.insert(2, Some("<MSG/>"));
    w.mailbox.mark_externally(2, w.clock.now());
    w.round().unwrap();
    for _ in 0..5 {
        w.clock.advance(Duration::from_secs(60));
        w.round().unwrap();
    }
    assert_eq!(w.enqueued(), vec![1]);
}

#[test]
fn a_failed_enqueue_loses_nothing() {
    let mut w = world(10);
    w.mailbox.insert(1, Some("<MSG/>"));
    w.mailbox.insert(3, Some("<MSG/>"));
    w.pg.fail_next(2); // the watermark read of two rounds
    assert!(w.round().unwrap_err().is_unavailable());
    assert!(w.round().is_err());
    w.round().unwrap();
    w.clock.advance(Duration::from_secs(2)); // 3 waited for the commit grace
    w.round().unwrap();
    assert_eq!(w.enqueued(), vec![1, 3]);
    assert_eq!(w.watermark(), 1, "2 is still a gap");
}

fn chunked(chunk: usize) -> World {
    chunked_with(chunk, |_| ())
}

/// [`chunked`] under a configuration `tune` changes.
fn chunked_with(chunk: usize, tune: impl FnOnce(&mut crate::config::Pipeline)) -> World {
    let mut w = world(100);
    let mut cfg = Config::defaults().pipeline;
    tune(&mut cfg);
    cfg.poll_batch = 100;
    cfg.rescan_chunk = chunk;
    cfg.rescan_pause = Duration::from_secs(1);
    w.poller = Poller::new(
        w.pg.clone(),
        w.mailbox.clone(),
        &cfg,
        Arc::new(Stats::default()),
        Arc::new(w.clock.clone()),
    );
    w
}

#[test]
fn the_rescan_walks_the_primary_key_in_chunks_a_pause_apart() {
    let mut w = chunked(2);
    for id in 1..=10 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    w.round().unwrap(); // polls 1..=10 and rescans (0, 2]
    assert_eq!(w.watermark(), 10);
    // A row the compat enqueue lost: in the mailbox, no PROC_STATE.
    w.pg.tamper(|s| s.procs.remove(&9));
    w.round().unwrap();
    assert!(!w.enqueued().contains(&9), "no chunk is due before the pause");
    let mut chunks = 0;
    while !w.enqueued().contains(&9) {
        w.clock.advance(Duration::from_secs(1));
        w.round().unwrap();
        chunks += 1;
        assert!(chunks <= 10, "the rescan never reached row 9");
    }
    assert_eq!(chunks, 4, "(2,4] (4,6] (6,8] (8,10]: one chunk per pause");
}

#[test]
fn a_failing_rescan_never_fails_the_poll_round_and_backs_off_alone() {
    let mut w = chunked(2);
    w.mailbox.insert(1, Some("<MSG/>"));
    w.round().unwrap();
    w.clock.advance(Duration::from_secs(1));
    w.mailbox.insert(2, Some("<MSG/>"));
    // The PRE-3 check and the poll's read pass, the rescan's chunk read fails.
    w.mailbox.inject_later(2, crate::store::memory::Fault::Unavailable, 1);
    let round = w.round().expect("a rescan error is the rescan's, not the round's");
    assert!(matches!(round, Round::Polled { new: 1, .. }));
    assert_eq!(w.enqueued(), vec![1, 2]);
    w.mailbox.insert(3, Some("<MSG/>"));
    w.round().unwrap();
    assert_eq!(w.enqueued(), vec![1, 2, 3], "polling goes on while the rescan waits");
}

#[test]
fn pre3_a_truncated_mailbox_stops_the_poller_until_a_person_moves_the_watermark() {
    let mut w = world(100);
    for id in 1..=5 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    w.round().unwrap();
    assert_eq!(w.watermark(), 5);
    // TRUNCATE: the rows and the AUTO_INCREMENT are gone; new rows start again at 1.
    w.mailbox.tamper(|s| {
        s.rows.clear();
        s.next_id = 1;
    });
    w.mailbox.insert(1, Some("<NEW/>"));
    w.clock.advance(Duration::from_secs(61));
    assert_eq!(w.round().unwrap(), Round::Idle);
    let halt = w.poller.halted().expect("halted").clone();
    assert!(halt.why.contains("highest ID is 1") && halt.why.contains("read up to 5"), "{}", halt.why);
    w.clock.advance(Duration::from_secs(120));
    assert_eq!(w.round().unwrap(), Round::Idle, "still halted");
    // `msgx reset-watermark --to 0 --yes`
    w.pg.tamper(|s| {
        s.watermark = 0;
        s.procs.clear();
    });
    w.round().unwrap();
    assert!(w.poller.halted().is_none());
    assert_eq!(w.enqueued(), vec![1], "the new row 1 flows once the watermark moved");
}

#[test]
fn pre3_rows_purged_by_the_owner_are_not_a_reset() {
    let mut w = world(100);
    for id in 1..=5 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    w.round().unwrap();
    for id in 1..=5 {
        w.mailbox.remove(id); // the owner purges processed rows; AUTO_INCREMENT stays at 6
    }
    w.clock.advance(Duration::from_secs(61));
    w.round().unwrap();
    assert!(w.poller.halted().is_none());
    w.mailbox.insert(6, Some("<MSG/>"));
    w.round().unwrap();
    assert_eq!(w.enqueued(), vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn pre3_an_unmarked_row_msgx_already_marked_stops_the_poller() {
    let mut w = chunked(2);
    for id in 1..=3 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    w.round().unwrap();
    // msgx processed and marked 2; then the mailbox shows 2 unmarked again (an ID reused).
    w.pg.tamper(|s| {
        let p = s.procs.get_mut(&2).unwrap();
        p.row.state = ProcStatus::Succeeded;
        p.backfill_at = Some(w.clock.now());
    });
    w.mailbox.tamper(|s| s.rows.get_mut(&2).unwrap().status = "VALID".into());
    for _ in 0..4 {
        w.clock.advance(Duration::from_secs(61));
        w.round().unwrap();
    }
    let halt = w.poller.halted().expect("halted").clone();
    assert!(halt.why.contains("mailbox row 2 is unmarked"), "{}", halt.why);
    w.mailbox.insert(4, Some("<MSG/>"));
    w.round().unwrap();
    assert!(!w.enqueued().contains(&4), "nothing is enqueued while halted");
}

#[test]
fn pre3_the_halt_lifts_when_the_reused_row_is_marked_again() {
    let mut w = chunked(2);
    for id in 1..=3 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    w.round().unwrap();
    w.pg.tamper(|s| s.procs.get_mut(&2).unwrap().backfill_at = Some(w.clock.now()));
    for _ in 0..4 {
        w.clock.advance(Duration::from_secs(61));
        w.round().unwrap();
    }
    assert_eq!(w.poller.halted().and_then(|h| h.reused), Some(2));
    w.mailbox.mark_externally(2, w.clock.now()); // the owner puts the mark back
    w.clock.advance(Duration::from_secs(61));
    w.round().unwrap();
    assert!(w.poller.halted().is_none());
}

/// Rows 1..=3 polled; msgx processed row 2 (SUCCEEDED, its identity recorded, its mark still
/// owed); then the mailbox row 2 holds `now`.
fn processed_then(now: &str) -> World {
    processed_on(chunked(2), &crate::fixtures::flop_stnd(12, "B1", "A1"), now)
}

/// [`processed_then`] on `w`, msgx having processed `first` as row 2.
fn processed_on(mut w: World, first: &str, now: &str) -> World {
    for (id, raw) in [(1, "<MSG/>"), (2, first), (3, "<MSG/>")] {
        w.mailbox.insert(id, Some(raw));
    }
    w.round().unwrap();
    let meta = crate::codec::decode_head(first, &crate::codec::Limits::DEFAULT).unwrap();
    w.pg.tamper(|s| {
        let p = s.procs.get_mut(&2).unwrap();
        p.row.state = ProcStatus::Succeeded;
        p.row.identity_key = Some(crate::codec::identity(&meta, false));
    });
    w.mailbox.tamper(|s| s.rows.get_mut(&2).unwrap().raw = Some(now.as_bytes().to_vec()));
    for _ in 0..4 {
        w.clock.advance(Duration::from_secs(61));
        w.round().unwrap();
    }
    w
}

#[test]
fn pre3_a_row_that_now_holds_another_message_stops_the_poller() {
    let w = processed_then(&crate::fixtures::flop_stnd(99, "B7", "C3"));
    let halt = w.poller.halted().expect("halted");
    assert_eq!(halt.reused, Some(2));
    assert!(
        halt.why.contains("mailbox row 2 is unmarked and now holds identity AODB|FLOP|STND|99"),
        "{}",
        halt.why
    );
    assert!(halt.why.contains("as identity AODB|FLOP|STND|12"), "{}", halt.why);
}

#[test]
fn pre3_a_row_whose_mark_is_still_owed_is_no_suspect() {
    let w = processed_then(&crate::fixtures::flop_stnd(12, "B1", "A1"));
    assert!(w.poller.halted().is_none(), "{:?}", w.poller.halted());
}

/// #68: with `msgx.codec.max-attributes` raised, a row whose mark landed late was re-read by
/// the reuse check under the default limits, failed to decode and was called reused, halting
/// ingress. The check reads the header alone, under the configured limits; a header it cannot
/// read now is no verdict.
#[test]
fn regression_a_row_past_the_default_limits_is_not_called_reused() {
    let attrs: String = (0..100).map(|i| format!(" a{i}=\"{i}\"")).collect();
    let wide = crate::fixtures::other(
        12,
        "FLOP",
        "STND",
        &format!("<FLOP><FLID>B1</FLID><STND{attrs}>A1</STND></FLOP>"),
    );
    let raised = |c: &mut crate::config::Pipeline| c.max_attributes = 128;
    assert!(
        crate::codec::decode_with(
            &wide,
            &crate::codec::Limits::DEFAULT,
            &crate::codec::Rulebook::this_release()
        )
        .is_err(),
        "past the default"
    );
    let w = processed_on(chunked_with(2, raised), &wide, &wide);
    assert!(w.poller.halted().is_none(), "{:?}", w.poller.halted());
    // Nor does a body that cannot be read after its header, nor one whose header cannot be
    // read at all: only an identity read and found different proves a reuse.
    let head = wide.split("</META>").next().unwrap();
    let w =
        processed_on(chunked_with(2, raised), &wide, &format!("{head}</META><FLOP><STND a=\"1\" a=\"2\">"));
    assert!(w.poller.halted().is_none(), "{:?}", w.poller.halted());
    let w = processed_on(chunked_with(2, raised), &wide, &wide[..wide.len() / 8]);
    assert!(w.poller.halted().is_none(), "{:?}", w.poller.halted());
    // A header that is read and names another message still halts.
    let other = wide.replace("<SEQN>12</SEQN>", "<SEQN>13</SEQN>");
    let w = processed_on(chunked_with(2, raised), &wide, &other);
    assert_eq!(w.poller.halted().and_then(|h| h.reused), Some(2));
}

#[test]
fn pre3_a_replaced_row_keeps_the_poller_stopped_until_the_mailbox_is_put_right() {
    let mut w = processed_then(&crate::fixtures::flop_stnd(99, "B7", "C3"));
    assert!(w.poller.halted().is_some());
    for _ in 0..3 {
        w.clock.advance(Duration::from_secs(61));
        w.round().unwrap();
        assert!(w.poller.halted().is_some(), "the condition still holds");
    }
    // The owner moves the new message to a fresh ID and restores row 2.
    let first = crate::fixtures::flop_stnd(12, "B1", "A1");
    w.mailbox.tamper(|s| s.rows.get_mut(&2).unwrap().raw = Some(first.into_bytes()));
    w.clock.advance(Duration::from_secs(61));
    w.round().unwrap();
    assert!(w.poller.halted().is_none());
}

#[test]
fn regression_a_long_identity_recorded_clipped_is_still_the_same_message() {
    // IDENTITY_KEY is VARCHAR(200) and the PostgreSQL adapter clips to it: comparing the
    // whole identity with the clipped one would have stopped the poller for nothing.
    let meta = |sndr: &str, seqn: &str| {
        let text = crate::fixtures::flop_body("STND", "1", "<STND>1</STND>")
            .replace("<SEQN>1</SEQN>", &format!("<SEQN>{seqn}</SEQN>"))
            .replace("<SNDR>AODB</SNDR>", &format!("<SNDR>{sndr}</SNDR>"));
        crate::codec::decode_meta(&text).unwrap().meta
    };
    let long = "S".repeat(250);
    let m = meta(&long, "12");
    assert_eq!(m.sndr, long, "the fixture names its sender");
    let recorded: String = format!("{long}|FLOP|STND|12").chars().take(200).collect();
    assert!(crate::codec::same_identity(&m, &recorded));
    assert!(!crate::codec::same_identity(&meta("AODB", "13"), "AODB|FLOP|STND|12"));
    assert!(!crate::codec::same_identity(&meta("AODB", "12"), "AODB|FLOP|STND|12|x"), "a short key is whole");
}

#[test]
fn an_identity_a_release_before_the_escaping_recorded_is_still_the_same_message() {
    // A SEQN holding '|' was recorded unescaped before #53; the reuse check must not take
    // the row for a reused ID after the upgrade.
    let text = crate::fixtures::flop_body("STND", "1", "<STND>1</STND>")
        .replace("<SEQN>1</SEQN>", "<SEQN>7|X</SEQN>");
    let m = crate::codec::decode_meta(&text).unwrap().meta;
    let old = format!("{}|FLOP|STND|7|X", m.sndr);
    assert_ne!(crate::codec::identity(&m, false), old, "escaped now");
    assert!(crate::codec::same_identity(&m, &old));
}

#[test]
fn pre3_a_halted_poller_reports_itself_held_for_status_and_the_health_check() {
    let mut w = world(100);
    for id in 1..=5 {
        w.mailbox.insert(id, Some("<MSG/>"));
    }
    w.round().unwrap();
    assert_eq!(Stage::held(&w.poller), None);
    w.mailbox.tamper(|s| {
        s.rows.clear();
        s.next_id = 1;
    });
    w.clock.advance(Duration::from_secs(61));
    let halted_at = w.clock.now();
    w.round().unwrap();
    assert_eq!(Stage::held(&w.poller), Some(("mailbox:PRE-3", halted_at)));
}
