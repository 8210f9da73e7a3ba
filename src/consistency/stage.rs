//! The sentinel stage: the consistency check on a schedule, on its own thread (U25, #20).
//!
//! Every `msgx.consistency-check.interval` it compares the newest messages (cheap: a few indexed
//! reads); once a day the whole evidence with `msgx.consistency-check.daily-sample-ratio` of the
//! messages sampled for versions. A finding — proof that a store forgot (#37) — stops the stage
//! as `forgot`: every stage stops, and the daemon checks again in full and heals before they
//! start again, never a pump writing on a store that forgot. A suspicion is a WARN (once per new
//! row named) and a counter: the stages go on.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{check, Depth, FlightsSide, MailboxSide, PgSide, Report, Stores};
use crate::error::StoreError;
use crate::stage::{Next, RoundReport, Stage};
use crate::stats::{self, Stats};

/// How many of the newest SUCCEEDED messages the cheap check compares with Redis's journal.
pub const RECENT: usize = 500;
const DAY: Duration = Duration::from_secs(86_400);

pub struct Sentinel<P, M, F> {
    pg: P,
    mailbox: M,
    flights: F,
    sample: f64,
    every: Duration,
    next: Option<SystemTime>,
    next_full: Option<SystemTime>,
    /// The highest MSG_ID a suspicion already named: a WARN says only what is new.
    suspected: i64,
    stats: Arc<Stats>,
    /// The stage's turn, beaten as the check reads page by page (#54).
    beat: crate::stage::Beat,
    /// The pump's shape limits, to decode a sampled text as it did (#53).
    limits: crate::codec::Limits,
    /// The instance's rules, to decide a sampled message only under the rules that decided it.
    rules: Arc<crate::codec::Rulebook>,
}

/// A round of the sentinel: when it runs again; what it asks of the instance (a `msgx rules
/// apply` job of its rules, #65).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round(pub SystemTime, pub Option<String>);

impl RoundReport for Round {
    fn next(&self) -> Next {
        Next::At(self.0)
    }

    fn progressed(&self) -> bool {
        false
    }

    fn asks(&self) -> Option<String> {
        self.1.clone()
    }
}

impl<P: PgSide, M: MailboxSide, F: FlightsSide> Sentinel<P, M, F> {
    /// The daily full check first runs a day after start-up (start-up ran one).
    pub fn new(
        pg: P,
        mailbox: M,
        flights: F,
        cfg: &crate::config::Pipeline,
        rules: Arc<crate::codec::Rulebook>,
        stats: Arc<Stats>,
    ) -> Self {
        Sentinel {
            pg,
            mailbox,
            flights,
            sample: cfg.check_sample_ratio,
            every: cfg.check_interval,
            next: None,
            next_full: None,
            suspected: 0,
            stats,
            beat: crate::stage::Beat::default(),
            limits: crate::codec::Limits::of(cfg),
            rules,
        }
    }

    /// Beats `beat` as the check moves, so a long daily check is not taken for stuck (#54).
    pub fn with_beat(mut self, beat: crate::stage::Beat) -> Self {
        self.beat = beat;
        self
    }

    pub fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        if let Some(t) = self.next.filter(|t| *t > now) {
            return Ok(Round(t, None));
        }
        if let Some(job) = self.pg.open_rules_job(self.rules.version())? {
            let why = format!(
                "rules apply job={} (the SUCCEEDED messages from MSG_ID {} decided again under rules {})",
                job.job_id, job.since, job.rules
            );
            return Ok(Round(now, Some(why)));
        }
        let full = *self.next_full.get_or_insert(now + DAY) <= now;
        let depth = if full { Depth::Full { sample: self.sample } } else { Depth::Recent(RECENT) };
        let mut st = Stores {
            pg: &mut self.pg,
            mailbox: &mut self.mailbox,
            flights: &mut self.flights,
            beat: self.beat.clone(),
            limits: self.limits,
            rules: self.rules.clone(),
        };
        let report = check(&mut st, depth, now)?;
        if full {
            self.next_full = Some(now + DAY);
            log::info!(
                "consistency: daily check: {} finding(s), {} suspicion(s), {} message(s) compared with the journal, {} sampled for versions",
                report.findings.len(),
                report.suspicions.len(),
                report.journal_checked,
                report.sampled
            );
        }
        self.suspect(&report);
        if let Some(first) = report.findings.first() {
            report.log();
            stats::add(&self.stats.consistency_findings, report.findings.len() as u64);
            return Err(StoreError::forgot(first.store.store(), first.line()));
        }
        stats::add(&self.stats.consistency_checks, 1);
        let next = now + self.every;
        self.next = Some(next);
        Ok(Round(next, None))
    }

    /// Reports the rows of each suspicion not reported before.
    fn suspect(&mut self, report: &Report) {
        let seen = self.suspected;
        for s in report.suspicions.iter().filter_map(|s| s.above(seen)) {
            log::warn!("{}", s.line());
            stats::add(&self.stats.consistency_suspicions, s.count as u64);
            self.suspected = self.suspected.max(s.ids.iter().copied().max().unwrap_or(0));
        }
    }
}

impl<P: PgSide, M: MailboxSide, F: FlightsSide> Stage for Sentinel<P, M, F> {
    type Round = Round;
    const ID: crate::stage::StageId = crate::stage::StageId::Sentinel;

    fn round(&mut self, now: SystemTime) -> Result<Round, StoreError> {
        Sentinel::round(self, now)
    }
}
