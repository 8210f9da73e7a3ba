//! The upstream writer: mailbox rows as AODB writes them — mostly flight updates (the same
//! value again among them), and deletes, records of vendor elements only, duplicates, ignored
//! kinds, malformed and unsupported ones, commits that arrive late (superseded by the time they
//! are read, or for a flight deleted since) and transactions that roll back (PRE-2), daily
//! plans (a stale one among them when it commits late); and rows another system marks
//! processed before msgx sees them (#37).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::rng::Rng;
use crate::fixtures;
use crate::store::memory::MemMailbox;

/// What a mailbox row is, as the writer knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// One field of one flight set (or cleared); SEQN unique.
    Update { flid: String, field: String, value: Option<String>, seqn: u64 },
    /// The same text as an earlier update (a resend): the same identity.
    Resend { seqn: u64 },
    /// A kind the default ignore rules skip.
    Ignored,
    /// Not XML.
    Malformed,
    /// A TYPE no handler knows: FAILED until its attempts are used up.
    Unsupported,
    /// The flight deleted (FLOP-FDEL); SEQN unique.
    Delete { flid: String, seqn: u64 },
    /// A FLOP-STND whose only child is an element the tolerant reader skips: SUCCEEDED,
    /// nothing changed (#37).
    Vendor { flid: String, seqn: u64 },
    /// An update another system marked processed before msgx saw it: never msgx's (#37).
    MarkedElsewhere,
    /// The daily plan (SCHD-DNLD) of the planned flights, every one of them with a gate: the
    /// same window each time, so a stale one (committed late, after a newer one) changes
    /// nothing a newer one would not have overwritten.
    Snapshot { seqn: u64 },
}

#[derive(Debug, Clone)]
pub struct Row {
    pub kind: Kind,
    pub raw: String,
    /// Committed after a higher ID was visible (or rolled back).
    pub late: bool,
    pub rolled_back: bool,
}

const FLIGHTS: [&str; 5] = ["F0", "F1", "F2", "F3", "F4"];
/// The flights of the daily plan: only snapshots write them.
const PLANNED: [&str; 3] = ["P0", "P1", "P2"];
const FIELDS: [(&str, &str); 2] = [("STND", "STND"), ("ACFT", "ACFT")];
const VALUES: [&str; 4] = ["A1", "A2", "B7", "C3"];

#[derive(Debug, Default)]
pub struct Upstream {
    pub rows: BTreeMap<i64, Row>,
    next_seqn: u64,
    /// Uncommitted rows: when their transaction ends, and whether it commits.
    open: BTreeMap<i64, (SystemTime, bool)>,
    /// Updates by SEQN (for resends).
    updates: Vec<i64>,
}

impl Upstream {
    /// Writes one row; returns the step log line. `foreign`: another system marks rows too.
    pub fn write(&mut self, rng: &mut Rng, mailbox: &MemMailbox, now: SystemTime, foreign: bool) -> String {
        let kind = match rng.below(100) {
            0..=63 => self.update(rng),
            64..=66 => Kind::Delete { flid: rng.pick(&FLIGHTS).to_string(), seqn: self.seqn() },
            67..=69 => Kind::Vendor { flid: rng.pick(&FLIGHTS).to_string(), seqn: self.seqn() },
            98..=99 => Kind::Snapshot { seqn: self.seqn() },
            70..=71 if foreign => Kind::MarkedElsewhere,
            72..=79 if !self.updates.is_empty() => {
                let of = *rng.pick(&self.updates);
                match &self.rows[&of].kind {
                    Kind::Update { seqn, .. } => Kind::Resend { seqn: *seqn },
                    _ => unreachable!("updates lists updates"),
                }
            }
            80..=87 => Kind::Ignored,
            88..=93 => Kind::Malformed,
            94..=96 => Kind::Unsupported,
            _ => self.update(rng),
        };
        let raw = match &kind {
            Kind::Update { flid, field, value, seqn } => {
                let styp = FIELDS.iter().find(|(_, f)| f == field).map(|(s, _)| *s).unwrap_or("STND");
                fixtures::flop(*seqn, styp, flid, &[(field.as_str(), value.as_deref())])
            }
            Kind::Resend { seqn } => {
                let id = self
                    .updates
                    .iter()
                    .find(|id| matches!(&self.rows[id].kind, Kind::Update { seqn: s, .. } if s == seqn));
                self.rows[id.expect("resent update exists")].raw.clone()
            }
            Kind::Delete { flid, seqn } => fixtures::flop(*seqn, "FDEL", flid, &[]),
            Kind::Vendor { flid, seqn } => fixtures::flop(*seqn, "STND", flid, &[("XSTND", Some("9"))]),
            Kind::MarkedElsewhere => fixtures::flop_stnd(self.seqn(), FLIGHTS[0], "ELSEWHERE"),
            Kind::Snapshot { seqn } => {
                let body: String = PLANNED
                    .iter()
                    .enumerate()
                    .map(|(k, f)| {
                        let gate = rng.pick(&VALUES);
                        format!("<FLTR><FLID>{f}</FLID><FLNO>MU{f}</FLNO><SODT>05MAR26{:02}00</SODT><GATE>{gate}</GATE></FLTR>", 8 + k)
                    })
                    .collect();
                let recs = PLANNED.len();
                fixtures::other(*seqn, "SCHD", "DNLD", &format!("<SCHD><RECS>{recs}</RECS>{body}</SCHD>"))
            }
            Kind::Ignored => fixtures::other(self.seqn(), "LDM", "X", "<LDM><A/></LDM>"),
            Kind::Malformed => "<MSG><META><SNDR>AODB".to_string(),
            Kind::Unsupported => fixtures::other(self.seqn(), "ZZZZ", "Q", ""),
        };
        let id = mailbox.tamper(|s| s.allocate());
        let late = rng.chance(80) && kind != Kind::MarkedElsewhere;
        if kind == Kind::MarkedElsewhere {
            mailbox.insert(id, Some(&raw));
            mailbox.mark_as_processed(id, now);
        } else if late {
            mailbox.insert_uncommitted(id, &raw);
            let ends = now + Duration::from_millis(rng.range(1, 6000));
            let commits = !rng.chance(150);
            self.open.insert(id, (ends, commits));
        } else {
            mailbox.insert(id, Some(&raw));
        }
        if matches!(kind, Kind::Update { .. }) {
            self.updates.push(id);
        }
        let line = format!("upstream id={id} {kind:?}{}", if late { " (uncommitted)" } else { "" });
        self.rows.insert(id, Row { kind, raw, late, rolled_back: false });
        line
    }

    fn seqn(&mut self) -> u64 {
        self.next_seqn += 1;
        self.next_seqn
    }

    fn update(&mut self, rng: &mut Rng) -> Kind {
        let (_, field) = *rng.pick(&FIELDS);
        let value = if rng.chance(150) { None } else { Some(rng.pick(&VALUES).to_string()) };
        Kind::Update {
            flid: rng.pick(&FLIGHTS).to_string(),
            field: field.to_string(),
            value,
            seqn: self.seqn(),
        }
    }

    /// Ends the transactions whose time has come (all of them with `all`).
    pub fn end_transactions(&mut self, mailbox: &MemMailbox, now: SystemTime, all: bool) -> Vec<String> {
        let due: Vec<i64> =
            self.open.iter().filter(|(_, (t, _))| all || *t <= now).map(|(id, _)| *id).collect();
        let mut lines = Vec::new();
        for id in due {
            let (_, commits) = self.open.remove(&id).expect("listed above");
            if commits {
                mailbox.commit_row(id);
                lines.push(format!("upstream id={id} committed late"));
            } else {
                mailbox.remove(id);
                self.rows.get_mut(&id).expect("written").rolled_back = true;
                self.updates.retain(|u| *u != id);
                lines.push(format!("upstream id={id} rolled back"));
            }
        }
        lines
    }

    /// The earliest end of an open transaction.
    pub fn next_end(&self) -> Option<SystemTime> {
        self.open.values().map(|(t, _)| *t).min()
    }

    /// Flights a late or rolled-back row wrote: their event sequence may differ from MSG_ID
    /// order legitimately (PRE-2), so the event comparison leaves them out.
    pub fn late_flights(&self) -> BTreeSet<String> {
        let seqn_flight: BTreeMap<u64, &str> = self
            .rows
            .values()
            .filter_map(|r| match &r.kind {
                Kind::Update { flid, seqn, .. } => Some((*seqn, flid.as_str())),
                _ => None,
            })
            .collect();
        self.rows
            .values()
            .filter(|r| r.late)
            .filter_map(|r| match &r.kind {
                Kind::Update { flid, .. } | Kind::Delete { flid, .. } | Kind::Vendor { flid, .. } => {
                    Some(flid.clone())
                }
                Kind::Resend { seqn } => seqn_flight.get(seqn).map(|f| f.to_string()),
                _ => None,
            })
            .collect()
    }
}
