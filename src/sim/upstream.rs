//! The upstream writer: mailbox rows as an airport's day writes them (#39) — the daily plan at
//! its start (one SCHD-DNLD per day), then mostly flight updates (the same value again among
//! them) of every FLOP subtype, deletes, the plan again (DNLD, RESP) for a day or part of it,
//! ADFT, the seasonal plan, reference data; family B's flights (DFIE, DFDE, DFME, the full
//! table DFDL) and master data (BASE); family C documents; records of vendor elements only,
//! duplicates, ignored kinds, malformed and unsupported ones, commits that arrive late
//! (superseded by the time they are read, or for a flight deleted since) and transactions that
//! roll back (PRE-2); and rows another system marks processed before msgx sees them (#37).
//! The flights overlap the snapshots' windows: an update, a delete, another family's table may
//! land in the window a snapshot of the same round would read.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::rng::Rng;
use crate::fixtures;
use crate::store::memory::MemMailbox;

/// What a mailbox row is, as the writer knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// One field of one flight set (or cleared); SEQN unique.
    Update { flid: String, field: String, value: Option<String>, seqn: u64 },
    /// The same text as an earlier row (a resend): the same identity, SEQN `seqn`.
    Resend { of: i64, seqn: u64 },
    /// Any other message msgx decides: its type tag (`FLOP-CHDT`, `SCHD-DNLD`, `DFOE-DFDL`,
    /// `GLST-ADD`…) and the flights it names; SEQN unique. SUCCEEDED.
    Decided { tag: &'static str, flids: Vec<String>, seqn: u64 },
    /// A FLOP-STND whose only child is an element the tolerant reader skips: SUCCEEDED,
    /// nothing changed (#37).
    Vendor { flid: String, seqn: u64 },
    /// A kind the default ignore rules skip.
    Ignored,
    /// A T-Systems IMF document (family C): recognised, not this feed, SKIPPED.
    FamilyC,
    /// Not XML.
    Malformed,
    /// A TYPE no handler knows: FAILED until its attempts are used up.
    Unsupported,
    /// An update another system marked processed before msgx saw it: never msgx's (#37).
    MarkedElsewhere,
}

impl Kind {
    /// What the row is, for the simulator's message mix.
    pub fn tag(&self) -> &'static str {
        match self {
            Kind::Update { field, .. } if field == "ACFT" => "FLOP-ACFT",
            Kind::Update { .. } => "FLOP-STND",
            Kind::Resend { .. } => "resend",
            Kind::Decided { tag, .. } => tag,
            Kind::Vendor { .. } => "FLOP-STND (vendor elements only)",
            Kind::Ignored => "ignored (LDM)",
            Kind::FamilyC => "family C (IMF)",
            Kind::Malformed => "malformed",
            Kind::Unsupported => "unsupported",
            Kind::MarkedElsewhere => "marked by another system",
        }
    }

    /// The SEQN of its identity, if it has one msgx holds (INV-9).
    pub fn seqn(&self) -> Option<u64> {
        match self {
            Kind::Update { seqn, .. }
            | Kind::Resend { seqn, .. }
            | Kind::Decided { seqn, .. }
            | Kind::Vendor { seqn, .. } => Some(*seqn),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    pub kind: Kind,
    pub raw: String,
    /// Committed after a higher ID was visible (or rolled back).
    pub late: bool,
    pub rolled_back: bool,
    /// When it became visible (committed); never for a row rolled back.
    pub visible_at: Option<SystemTime>,
}

/// Family A's flights: (FLID, day, departure hour). Two days, so that a day's snapshot leaves
/// the other day's flights alone and two snapshots of one round have different windows.
const FLIGHTS: [(&str, Day, u32); 6] =
    [("F0", D5, 8), ("F1", D6, 8), ("F2", D5, 10), ("F3", D6, 11), ("F4", D5, 13), ("F5", D6, 14)];
/// Family B's flights, on days of their own (a table replaces its day's flights of both
/// families alike: msgx keeps one plan).
const PLATFORM: [(&str, Day, u32); 4] = [("B0", D7, 7), ("B1", D7, 9), ("B2", D8, 7), ("B3", D8, 12)];
/// Flights only the vendor's records name, on a day no plan covers: only the message topic
/// tells of them, so a consumer's view of them is compared with Redis (#65).
const VENDOR_ONLY: [(&str, Day, u32); 2] = [("X0", D9, 9), ("X1", D9, 15)];
const FIELDS: [(&str, &str); 2] = [("STND", "STND"), ("ACFT", "ACFT")];
const VALUES: [&str; 4] = ["A1", "A2", "B7", "C3"];
const GATES: [&str; 4] = ["G1", "G2", "G3", "G4"];

/// A day of the plan: SIS's `ddMMMyy` and the platform's `yyyyMMdd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Day(&'static str, &'static str);
const D5: Day = Day("05MAR26", "20260305");
const D6: Day = Day("06MAR26", "20260306");
const D7: Day = Day("07MAR26", "20260307");
const D8: Day = Day("08MAR26", "20260308");
/// A day no plan covers: the vendor-only flights'.
const D9: Day = Day("09MAR26", "20260309");

/// An MGID msgx never issues (its numbers have 16 digits): the RMID of a stray platform answer.
const NEVER_ISSUED: &str = "MSGX9999999999999999999999999999";

/// The text of element `name` in a request msgx wrote.
fn element(request: &str, name: &str) -> Option<String> {
    let (_, rest) = request.split_once(&format!("<{name}>"))?;
    rest.split_once(&format!("</{name}>")).map(|(v, _)| v.to_string())
}

/// A family-A flight's SODT (`ddMMMyyHHmm`).
fn sodt(flid: &str) -> String {
    let (_, day, hour) =
        FLIGHTS.iter().chain(&VENDOR_ONLY).find(|(f, _, _)| *f == flid).expect("a family-A flight");
    format!("{}{hour:02}00", day.0)
}

#[derive(Debug, Default)]
pub struct Upstream {
    pub rows: BTreeMap<i64, Row>,
    next_seqn: u64,
    /// Uncommitted rows: when their transaction ends, and whether it commits.
    open: BTreeMap<i64, (SystemTime, bool)>,
    /// Rows an upstream may send again (for resends).
    resendable: Vec<i64>,
    /// The days whose daily plan has been sent: the day starts with them.
    planned: usize,
}

impl Upstream {
    /// Writes one row; returns the step log line. `foreign`: another system marks rows too.
    pub fn write(&mut self, rng: &mut Rng, mailbox: &MemMailbox, now: SystemTime, foreign: bool) -> String {
        let (kind, raw) = self.next_row(rng, foreign);
        self.put(rng, mailbox, now, kind, raw)
    }

    /// The AODB answers a request msgx wrote to COUTMSGS (#41), as any row it writes (it may
    /// commit late): an RQFD with the SCHD-RESP of its window's day, an RQRD of the gates with
    /// their list's RESP, a platform RQDF of a day with that day's table carrying the request's
    /// MGID as RMID. `None`: a request this AODB does not answer.
    pub fn answer(
        &mut self,
        rng: &mut Rng,
        mailbox: &MemMailbox,
        now: SystemTime,
        request: &str,
    ) -> Option<String> {
        let (kind, raw) = self.answer_to(rng, request)?;
        Some(self.put(rng, mailbox, now, kind, raw))
    }

    /// An answer nobody asked for, as an AODB writes one (#55): a day's plan as `SCHD-RESP`, or
    /// the platform's table of a day carrying an RMID msgx never issued. Processed as any
    /// message, it closes no request.
    pub fn stray(&mut self, rng: &mut Rng, mailbox: &MemMailbox, now: SystemTime, platform: bool) -> String {
        let (kind, raw) = if platform {
            let (kind, raw) = self.platform_table_of(*rng.pick(&[D7, D8]), rng);
            (kind, raw.replacen("<RMID/>", &format!("<RMID>{NEVER_ISSUED}</RMID>"), 1))
        } else {
            let day = *rng.pick(&[D5, D6]);
            self.plan("RESP", &some_of(day, 750, rng), rng)
        };
        self.put(rng, mailbox, now, kind, raw)
    }

    /// The AODB answers a window request with another day's plan (#55): it must close nothing
    /// the window does not hold. `None`: not a family-A window request.
    pub fn answer_another_day(
        &mut self,
        rng: &mut Rng,
        mailbox: &MemMailbox,
        now: SystemTime,
        request: &str,
    ) -> Option<String> {
        let from = element(request, "STDB")?;
        let day = [D5, D6].into_iter().find(|d| !from.starts_with(d.0))?;
        let (kind, raw) = self.plan("RESP", &some_of(day, 750, rng), rng);
        Some(self.put(rng, mailbox, now, kind, raw))
    }

    fn answer_to(&mut self, rng: &mut Rng, request: &str) -> Option<(Kind, String)> {
        let element = |name: &str| element(request, name);
        if let Some(from) = element("STDB") {
            let day = [D5, D6].into_iter().find(|d| from.starts_with(d.0))?;
            return Some(self.plan("RESP", &some_of(day, 750, rng), rng));
        }
        if let (Some(from), Some(mgid)) = (element("STTM"), element("MGID")) {
            let day = [D7, D8].into_iter().find(|d| from.starts_with(d.1))?;
            let (kind, raw) = self.platform_table_of(day, rng);
            return Some((kind, raw.replacen("<RMID/>", &format!("<RMID>{mgid}</RMID>"), 1)));
        }
        match element("RTYP").as_deref() {
            Some("GLST") => {
                let body = gate_list(rng);
                Some(self.decided(
                    "GLST-RESP",
                    &[],
                    fixtures::other(self.next_seqn + 1, "GLST", "RESP", &body),
                ))
            }
            _ => None,
        }
    }

    fn put(
        &mut self,
        rng: &mut Rng,
        mailbox: &MemMailbox,
        now: SystemTime,
        kind: Kind,
        raw: String,
    ) -> String {
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
        if kind.seqn().is_some() && !matches!(kind, Kind::Resend { .. }) {
            self.resendable.push(id);
        }
        let line = format!("upstream id={id} {kind:?}{}", if late { " (uncommitted)" } else { "" });
        let visible_at = (!late).then_some(now);
        self.rows.insert(id, Row { kind, raw, late, rolled_back: false, visible_at });
        line
    }

    /// The next row's kind and text: the day's plan first, then a day's mix.
    fn next_row(&mut self, rng: &mut Rng, foreign: bool) -> (Kind, String) {
        const PLAN_DAYS: [Day; 2] = [D5, D6];
        if let Some(day) = PLAN_DAYS.get(self.planned) {
            self.planned += 1;
            return self.plan("DNLD", &some_of(*day, 1000, rng), rng);
        }
        match rng.below(100) {
            0..=43 => self.update(rng),
            44..=51 => self.flop_subtype(rng),
            52..=54 => {
                let (flid, _, _) = *rng.pick(&FLIGHTS);
                self.decided("FLOP-FDEL", &[flid], flop(self.next_seqn + 1, "FDEL", flid, ""))
            }
            55..=56 => {
                let (flid, _, _) = match rng.chance(500) {
                    true => *rng.pick(&VENDOR_ONLY),
                    false => *rng.pick(&FLIGHTS),
                };
                let seqn = self.seqn();
                // A value of its own now and then: the next release's decisions then differ
                // from this one's in more than a first value (#65, `msgx rules apply`).
                let raw = flop(seqn, "STND", flid, &format!("<XSTND>{}</XSTND>", seqn % 3));
                (Kind::Vendor { flid: flid.to_string(), seqn }, raw)
            }
            57..=60 => {
                let day = *rng.pick(&PLAN_DAYS);
                let styp = *rng.pick(&["DNLD", "DNLD", "RESP"]);
                let flights = some_of(day, 750, rng);
                self.plan(styp, &flights, rng)
            }
            61 => {
                let flights = some_of(*rng.pick(&PLAN_DAYS), 300, rng);
                self.plan("ADFT", &flights, rng)
            }
            62 => self.season(rng),
            63..=64 => self.reference(rng),
            65..=67 => self.platform_event(rng),
            68..=69 => self.platform_flight(rng),
            70..=71 => self.platform_table(rng),
            72 => self.base(rng),
            73 => {
                let seqn = self.seqn();
                (Kind::FamilyC, imf(seqn))
            }
            74..=75 if foreign => {
                (Kind::MarkedElsewhere, fixtures::flop_stnd(self.seqn(), FLIGHTS[0].0, "ELSEWHERE"))
            }
            76..=82 if !self.resendable.is_empty() => {
                let of = *rng.pick(&self.resendable);
                let original = &self.rows[&of];
                let seqn = original.kind.seqn().expect("resendable rows have an identity");
                (Kind::Resend { of, seqn }, original.raw.clone())
            }
            83..=88 => (Kind::Ignored, fixtures::other(self.seqn(), "LDM", "X", "<LDM><A/></LDM>")),
            89..=93 => (Kind::Malformed, "<MSG><META><SNDR>AODB".to_string()),
            94..=96 => (Kind::Unsupported, fixtures::other(self.seqn(), "ZZZZ", "Q", "")),
            _ => self.update(rng),
        }
    }

    fn seqn(&mut self) -> u64 {
        self.next_seqn += 1;
        self.next_seqn
    }

    fn decided(&mut self, tag: &'static str, flids: &[&str], raw: String) -> (Kind, String) {
        let seqn = self.seqn();
        debug_assert!(raw.contains(&format!("<SEQN>{seqn}</SEQN>")), "{tag} written with SEQN {seqn}");
        (Kind::Decided { tag, flids: flids.iter().map(|f| f.to_string()).collect(), seqn }, raw)
    }

    fn update(&mut self, rng: &mut Rng) -> (Kind, String) {
        let (styp, field) = *rng.pick(&FIELDS);
        let value = if rng.chance(150) { None } else { Some(rng.pick(&VALUES).to_string()) };
        let (flid, _, _) = *rng.pick(&FLIGHTS);
        let seqn = self.seqn();
        let body = match &value {
            Some(v) => format!("<{field}>{v}</{field}>"),
            None => format!("<{field}/>"),
        };
        let raw = flop(seqn, styp, flid, &body);
        (Kind::Update { flid: flid.to_string(), field: field.to_string(), value, seqn }, raw)
    }

    /// Another FLOP subtype (times, lists, remarks…) for a flight of the plan.
    fn flop_subtype(&mut self, rng: &mut Rng) -> (Kind, String) {
        let (styp, body, _) = *rng.pick(fixtures::EVERY_SUBTYPE);
        let tag = crate::codec::Rulebook::this_release()
            .subtype(styp)
            .expect("EVERY_SUBTYPE lists known subtypes")
            .tag;
        let (flid, _, _) = *rng.pick(&FLIGHTS);
        self.decided(tag, &[flid], flop(self.next_seqn + 1, styp, flid, body))
    }

    /// A SCHD `styp` (`DNLD`/`RESP`: a snapshot of its window; `ADFT`: adds and updates) of
    /// `flights`, each with a stand and a gate.
    fn plan(&mut self, styp: &str, flights: &[&str], rng: &mut Rng) -> (Kind, String) {
        let tag = match styp {
            "DNLD" => "SCHD-DNLD",
            "RESP" => "SCHD-RESP",
            _ => "SCHD-ADFT",
        };
        let body: String = flights
            .iter()
            .map(|f| {
                let (stand, gate) = (rng.pick(&VALUES), rng.pick(&GATES));
                format!(
                    "<FLTR><FLID>{f}</FLID><FLNO>MU{f}</FLNO><SODT>{}</SODT><STND>{stand}</STND><GATE>{gate}</GATE></FLTR>",
                    sodt(f)
                )
            })
            .collect();
        let recs = if styp == "ADFT" { String::new() } else { format!("<RECS>{}</RECS>", flights.len()) };
        let raw = fixtures::other(self.next_seqn + 1, "SCHD", styp, &format!("<SCHD>{recs}{body}</SCHD>"));
        self.decided(tag, flights, raw)
    }
}

/// The gates' full list (GLST), each gate kept or not; never empty: a full list without
/// records is refused (it would delete them all).
fn gate_list(rng: &mut Rng) -> String {
    let rec = |g: &str| format!("<GLST><GCOD>{g}</GCOD><GTNM>Gate 1</GTNM><GTML>T2</GTML></GLST>");
    let gate = *rng.pick(&GATES);
    let mut kept: Vec<&str> = GATES.iter().copied().filter(|_| rng.chance(600)).collect();
    if kept.is_empty() {
        kept.push(gate);
    }
    let recs: String = kept.iter().map(|g| rec(g)).collect();
    format!("<RECS>{}</RECS>{recs}", kept.len())
}

/// Family A's flights of `day`, each kept `per_mille` times in a thousand; never none.
fn some_of(day: Day, per_mille: u64, rng: &mut Rng) -> Vec<&'static str> {
    let of_day: Vec<&'static str> =
        FLIGHTS.iter().filter(|(_, d, _)| *d == day).map(|(f, _, _)| *f).collect();
    let mut kept: Vec<&'static str> = of_day.iter().copied().filter(|_| rng.chance(per_mille)).collect();
    if kept.is_empty() {
        kept.push(*rng.pick(&of_day));
    }
    kept
}

/// A FLOP of `styp` for family A's flight `flid` (its FFID carries the flight's SODT) with
/// `body` under `<FLOP>`.
fn flop(seqn: u64, styp: &str, flid: &str, body: &str) -> String {
    let ffid = format!("MU-{flid}-D-{}-D", sodt(flid));
    fixtures::other(seqn, "FLOP", styp, &format!("<FLOP><FLID>{flid}</FLID><FFID>{ffid}</FFID>{body}</FLOP>"))
}

/// A family-C document (T-Systems IMF): recognised, not this feed.
fn imf(seqn: u64) -> String {
    format!(
        "<IMFRoot><SysInfo><MessageSequenceID>{seqn}</MessageSequenceID><MessageType>FlightData</MessageType>\
         <Sender>TSYS</Sender><SendDateTime>2026-03-05T08:00:00</SendDateTime></SysInfo><Data><Flight/></Data></IMFRoot>"
    )
}

/// The rest of a day: the seasonal plan, reference data, and family B.
impl Upstream {
    /// The seasonal plan (SCHS-DNLD): kept whole in own PostgreSQL, nothing for Redis.
    fn season(&mut self, rng: &mut Rng) -> (Kind, String) {
        let flno = rng.pick(&["MU5101", "MU5103", "MU5105"]);
        let rec = format!(
            "<FLTR><ALCD>MU</ALCD><FLNO>{flno}</FLNO><MVIN>D</MVIN><STDT>25OCT26</STDT><EDDT>27MAR27</EDDT>\
             <DYOP>1234567</DYOP><SCHT>0905</SCHT><ROUT RTNO=\"1\"><APCD>PEK</APCD><SCAT>1130</SCAT></ROUT></FLTR>"
        );
        let body = format!(
            "<SCHS><SNAM>W26</SNAM><APCD>XXX</APCD><SDAT>25OCT26</SDAT><EDAT>27MAR27</EDAT><RECS>1</RECS>{rec}</SCHS>"
        );
        self.decided("SCHS-DNLD", &[], fixtures::other(self.next_seqn + 1, "SCHS", "DNLD", &body))
    }

    /// Gates (GLST): the full list, or one added, updated or deleted.
    fn reference(&mut self, rng: &mut Rng) -> (Kind, String) {
        let rec =
            |g: &str, n: &str| format!("<GLST><GCOD>{g}</GCOD><GTNM>Gate {n}</GTNM><GTML>T2</GTML></GLST>");
        let (styp, tag) = *rng.pick(&[
            ("DNLD", "GLST-DNLD"),
            ("ADD", "GLST-ADD"),
            ("UPD", "GLST-UPD"),
            ("DEL", "GLST-DEL"),
        ]);
        let gate = *rng.pick(&GATES);
        let body = match styp {
            "DNLD" => gate_list(rng),
            "UPD" => rec(gate, if rng.chance(500) { "2" } else { "3" }),
            "DEL" => format!("<RECS>1</RECS><GLST><GCOD>{gate}</GCOD></GLST>"),
            _ => format!("<RECS>1</RECS>{}", rec(gate, "1")),
        };
        self.decided(tag, &[], fixtures::other(self.next_seqn + 1, "GLST", styp, &body))
    }

    /// A family-B flight event (DFME) on one of its flights.
    fn platform_event(&mut self, rng: &mut Rng) -> (Kind, String) {
        let (styp, tag, body) = *rng.pick(&[
            ("STLS", "DFME-STLS", "<STLS><STND><STNO>1</STNO><CODE>215</CODE></STND></STLS>"),
            ("ARRE", "DFME-ARRE", "<STAT>ARR</STAT><FRLT>20260307114500</FRLT>"),
            ("BORE", "DFME-BORE", "<STAT>BOR</STAT><BORT>20260307083000</BORT>"),
            ("GTLS", "DFME-GTLS", "<GTLS><GATE><GTNO>1</GTNO><CODE>104</CODE></GATE></GTLS>"),
        ]);
        let (flid, _, _) = *rng.pick(&PLATFORM);
        let raw = fixtures::platform(
            self.next_seqn + 1,
            "DFME",
            styp,
            &format!("<DFLT><FLID>{flid}</FLID>{body}</DFLT>"),
        );
        self.decided(tag, &[flid], raw)
    }

    /// A family-B flight added (DFIE) or deleted (DFDE).
    fn platform_flight(&mut self, rng: &mut Rng) -> (Kind, String) {
        let (flid, day, hour) = *rng.pick(&PLATFORM);
        let seqn = self.next_seqn + 1;
        if rng.chance(700) {
            let raw = fixtures::platform(
                seqn,
                "DFOE",
                "DFIE",
                &fixtures::dflt_on(flid, day.1, &format!("{hour:02}00"), ""),
            );
            self.decided("DFOE-DFIE", &[flid], raw)
        } else {
            let raw = fixtures::platform(seqn, "DFOE", "DFDE", &format!("<DFLT><FLID>{flid}</FLID></DFLT>"));
            self.decided("DFOE-DFDE", &[flid], raw)
        }
    }

    /// Family B's full table (DFOE-DFDL) of a day: a snapshot of its window.
    fn platform_table(&mut self, rng: &mut Rng) -> (Kind, String) {
        let day = rng.pick(&[D7, D8]).to_owned();
        self.platform_table_of(day, rng)
    }

    fn platform_table_of(&mut self, day: Day, rng: &mut Rng) -> (Kind, String) {
        let of_day: Vec<(&str, String)> = PLATFORM
            .iter()
            .filter(|(_, d, _)| *d == day)
            .filter(|_| rng.chance(750))
            .map(|(f, _, h)| (*f, format!("{h:02}00")))
            .collect();
        let of_day = if of_day.is_empty() {
            let (f, _, h) = PLATFORM.iter().find(|(_, d, _)| *d == day).expect("every day has flights");
            vec![(*f, format!("{h:02}00"))]
        } else {
            of_day
        };
        let flights: Vec<(&str, &str)> = of_day.iter().map(|(f, t)| (*f, t.as_str())).collect();
        let flids: Vec<&str> = flights.iter().map(|(f, _)| *f).collect();
        let raw = fixtures::dfdl(self.next_seqn + 1, day.1, &flights);
        self.decided("DFOE-DFDL", &flids, raw)
    }

    /// Family B's master data (BASE): gates inserted or deleted.
    fn base(&mut self, rng: &mut Rng) -> (Kind, String) {
        let code = rng.pick(&["A1", "A2", "A3"]);
        let gate = format!(
            "<GATE><ID>{code}0</ID><CODE>{code}</CODE><ENNM>Gate {code}</ENNM><TMLC>T2</TMLC></GATE>"
        );
        let (styp, tag) = *rng.pick(&[("GTIE", "BASE-GTIE"), ("GTUE", "BASE-GTUE"), ("GTDE", "BASE-GTDE")]);
        self.decided(tag, &[], fixtures::platform(self.next_seqn + 1, "BASE", styp, &gate))
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
                self.rows.get_mut(&id).expect("written").visible_at = Some(now);
                lines.push(format!("upstream id={id} committed late"));
            } else {
                mailbox.remove(id);
                self.rows.get_mut(&id).expect("written").rolled_back = true;
                self.resendable.retain(|u| *u != id);
                lines.push(format!("upstream id={id} rolled back"));
            }
        }
        lines
    }

    /// The earliest end of an open transaction.
    pub fn next_end(&self) -> Option<SystemTime> {
        self.open.values().map(|(t, _)| *t).min()
    }

    /// The original of a row: a resend's, or the row itself.
    pub fn original(&self, id: i64) -> Option<&Row> {
        match &self.rows.get(&id)?.kind {
            Kind::Resend { of, .. } => self.rows.get(of),
            _ => self.rows.get(&id),
        }
    }
}
