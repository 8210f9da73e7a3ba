//! `msgx status --check`: the health of a running msgx as a Nagios plugin states it — one
//! summary line with performance data, exit 0 OK / 1 WARNING / 2 CRITICAL / 3 UNKNOWN. Pure:
//! what was observed in own PostgreSQL goes in, the verdict comes out.

use std::time::Duration;

use crate::stage::human;

/// Thresholds (`msgx.health.*`): a value of the configuration.
pub use crate::config::Thresholds;

/// What `status` saw.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// Age of the oldest unfinished message (the FIFO head), if any.
    pub head_age: Option<Duration>,
    pub head_msg_id: Option<i64>,
    /// Unfinished messages (PENDING, PROCESSING, FAILED).
    pub backlog: u64,
    /// DEAD messages plus DEAD outbox events (the dead-letter queue).
    pub dead: u64,
    /// Abandoned mailbox marks not yet reconciled (C-16).
    pub abandoned: u64,
    /// The longest-stalled stage: (stage, store, stalled for).
    pub stalled: Option<(String, String, Duration)>,
    /// Whether an instance holds the lease (renewed, not expired), and who.
    pub holder: Option<String>,
    /// The consistency check's first finding (a store behind what it acknowledged, #20), or
    /// why the check could not run (a store unreachable: said, not alarmed on).
    pub forgotten: Option<String>,
    /// Windows a heal asked the AODB for whose flights await its answer (#41, #55).
    pub awaiting: Vec<Awaited>,
    /// Each Kafka target holding at an event the broker refuses, and that event (#67).
    pub refused: Vec<(String, i64)>,
}

/// A heal's window that awaits the AODB (`Requests::awaited`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Awaited {
    pub req_id: i64,
    pub req_key: String,
    pub tries: u16,
    /// Its last try expired unanswered: msgx asks no more, a person decides.
    pub given_up: bool,
}

impl Awaited {
    pub fn of(r: &crate::requests::Request, policy: &crate::config::RequestPolicy) -> Awaited {
        let given_up = r.state == crate::requests::ReqState::Expired
            && crate::requests::next_try_at(r, policy).is_none();
        Awaited { req_id: r.req_id, req_key: r.req_key.clone(), tries: r.tries, given_up }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok = 0,
    Warning = 1,
    Critical = 2,
    Unknown = 3,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warning => "WARNING",
            Level::Critical => "CRITICAL",
            Level::Unknown => "UNKNOWN",
        }
    }
}

/// The plugin's answer: its level and its one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub level: Level,
    pub line: String,
}

fn by_count(n: u64, warning: u64, critical: u64) -> Level {
    if critical > 0 && n >= critical {
        Level::Critical
    } else if warning > 0 && n >= warning {
        Level::Warning
    } else {
        Level::Ok
    }
}

fn by_age(d: Duration, warning: Duration, critical: Duration) -> Level {
    if d >= critical {
        Level::Critical
    } else if d >= warning {
        Level::Warning
    } else {
        Level::Ok
    }
}

fn limit(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        n.to_string()
    }
}

/// A heal's windows that await the AODB (#41, #55): a WARNING, naming the one a person must
/// decide about first.
fn awaiting(awaiting: &[Awaited]) -> Option<(Level, String)> {
    if let Some(a) = awaiting.iter().find(|a| a.given_up) {
        return Some((
            Level::Warning,
            format!(
                "degraded: the AODB answered none of {} request(s) a heal made for the flights of {} (req_id={}); a person decides, then: msgx requests --dismiss {} --note …",
                a.tries, a.req_key, a.req_id, a.req_id
            ),
        ));
    }
    let a = awaiting.first()?;
    Some((
        Level::Warning,
        format!(
            "degraded: {} window(s) of flights await the AODB's answer after a heal (req_id={} {})",
            awaiting.len(),
            a.req_id,
            a.req_key
        ),
    ))
}

pub fn assess(o: &Observed, t: &Thresholds) -> Verdict {
    let mut problems: Vec<(Level, String)> = Vec::new();
    if o.holder.is_none() {
        problems.push((Level::Critical, "no instance holds the lease (msgx is not running)".into()));
    }
    if let (Some(age), Some(id)) = (o.head_age, o.head_msg_id) {
        let l = by_age(age, t.head_age_warning, t.head_age_critical);
        problems.push((l, format!("head msg_id={id} unfinished for {}", human(age))));
    }
    let l = by_count(o.dead, t.dead_warning, t.dead_critical);
    problems.push((l, format!("{} dead (messages and events)", o.dead)));
    let l = by_count(o.abandoned, t.abandoned_warning, t.abandoned_critical);
    problems.push((l, format!("{} abandoned mark(s) to reconcile", o.abandoned)));
    if let Some((stage, store, d)) = &o.stalled {
        let l = by_age(*d, t.stalled_warning, t.stalled_critical);
        problems.push((l, format!("stage {stage} stalled on {store} for {}", human(*d))));
    }
    if let Some(f) = &o.forgotten {
        problems.push((Level::Critical, f.clone()));
    }
    problems.extend(awaiting(&o.awaiting));
    for (target, event_id) in &o.refused {
        // Nothing behind it reaches the consumers until a person acts, or the broker does.
        problems
            .push((Level::Critical, format!("{target} holds at event {event_id}: the broker refuses it")));
    }
    let level = problems.iter().map(|(l, _)| *l).max().unwrap_or(Level::Ok);
    let mut said: Vec<&str> =
        problems.iter().filter(|(l, _)| *l > Level::Ok).map(|(_, s)| s.as_str()).collect();
    let fine;
    if said.is_empty() {
        fine = format!(
            "backlog {}, head {}, {} dead, lease held by {}",
            o.backlog,
            o.head_age.map_or("none".to_string(), human),
            o.dead,
            o.holder.as_deref().unwrap_or("-")
        );
        said.push(&fine);
    }
    let secs = |d: Duration| d.as_secs();
    let perf = format!(
        "head_age={}s;{};{} backlog={} dead={};{};{} abandoned={};{};{} stalled={}s;{};{}",
        o.head_age.map_or(0, secs),
        secs(t.head_age_warning),
        secs(t.head_age_critical),
        o.backlog,
        o.dead,
        limit(t.dead_warning),
        limit(t.dead_critical),
        o.abandoned,
        limit(t.abandoned_warning),
        limit(t.abandoned_critical),
        o.stalled.as_ref().map_or(0, |s| secs(s.2)),
        secs(t.stalled_warning),
        secs(t.stalled_critical),
    );
    Verdict { level, line: format!("MSGX {} - {} | {perf}", level.as_str(), said.join("; ")) }
}

/// When the health cannot be known (own PostgreSQL away, schema wrong).
pub fn unknown(why: &str) -> Verdict {
    Verdict { level: Level::Unknown, line: format!("MSGX UNKNOWN - {why}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Thresholds {
        crate::config::Config::defaults().health
    }

    fn healthy() -> Observed {
        Observed { backlog: 3, holder: Some("host=a pid=1".into()), ..Observed::default() }
    }

    #[test]
    fn flights_awaiting_the_aodbs_answer_after_a_heal_are_a_warning() {
        let day = "2026-03-05T00:00/2026-03-05T23:59".to_string();
        let asked = Awaited { req_id: 7, req_key: day.clone(), tries: 1, given_up: false };
        let o = Observed { awaiting: vec![asked], ..healthy() };
        let v = assess(&o, &t());
        assert_eq!(v.level, Level::Warning);
        assert!(v.line.contains("degraded: 1 window(s) of flights await the AODB's answer after a heal (req_id=7 2026-03-05T00:00/2026-03-05T23:59)"), "{}", v.line);
        // After the last try the line names the window and what a person does.
        let o = Observed {
            awaiting: vec![Awaited { req_id: 9, req_key: day, tries: 3, given_up: true }],
            ..healthy()
        };
        let v = assess(&o, &t());
        assert_eq!(v.level, Level::Warning);
        assert!(v.line.contains("the AODB answered none of 3 request(s) a heal made for the flights of 2026-03-05T00:00/2026-03-05T23:59 (req_id=9); a person decides, then: msgx requests --dismiss 9 --note"), "{}", v.line);
    }

    #[test]
    fn a_running_idle_instance_is_ok_with_perfdata() {
        let v = assess(&healthy(), &t());
        assert_eq!(v.level, Level::Ok);
        assert!(
            v.line.starts_with("MSGX OK - backlog 3, head none, 0 dead, lease held by host=a pid=1 | "),
            "{}",
            v.line
        );
        assert!(v.line.contains("head_age=0s;300;1800") && v.line.contains("dead=0;1;"), "{}", v.line);
    }

    #[test]
    fn no_lease_holder_is_critical() {
        let v = assess(&Observed { holder: None, ..healthy() }, &t());
        assert_eq!(v.level, Level::Critical);
        assert!(v.line.contains("no instance holds the lease"), "{}", v.line);
    }

    #[test]
    fn a_store_that_forgot_is_critical_until_healed() {
        let line = "consistency: redis behind: 3 SUCCEEDED message(s) … (MSG_IDs 7, 8, 9)";
        let v = assess(&Observed { forgotten: Some(line.into()), ..healthy() }, &t());
        let held = assess(&Observed { refused: vec![("KAFKA:msg".into(), 42)], ..healthy() }, &t());
        assert_eq!(held.level, Level::Critical, "{}", held.line);
        assert!(held.line.contains("KAFKA:msg holds at event 42"), "{}", held.line);
        assert_eq!(v.level, Level::Critical);
        assert!(v.line.contains("redis behind"), "{}", v.line);
        assert_eq!(assess(&healthy(), &t()).level, Level::Ok, "healed: the finding is gone");
    }

    #[test]
    fn an_old_head_warns_then_is_critical() {
        let mut o = healthy();
        o.head_msg_id = Some(7);
        o.head_age = Some(Duration::from_secs(301));
        assert_eq!(assess(&o, &t()).level, Level::Warning);
        o.head_age = Some(Duration::from_secs(1800));
        let v = assess(&o, &t());
        assert_eq!(v.level, Level::Critical);
        assert!(v.line.contains("head msg_id=7 unfinished for 30m00s"), "{}", v.line);
    }

    #[test]
    fn the_worst_problem_sets_the_level_and_every_problem_is_named() {
        let mut o = healthy();
        o.dead = 2;
        o.stalled = Some(("process".into(), "redis".into(), Duration::from_secs(700)));
        let v = assess(&o, &t());
        assert_eq!(v.level, Level::Critical);
        assert!(
            v.line.contains("2 dead") && v.line.contains("stage process stalled on redis for 11m40s"),
            "{}",
            v.line
        );
    }

    #[test]
    fn a_count_threshold_of_zero_is_off() {
        let mut th = t();
        th.dead_warning = 0;
        th.dead_critical = 0;
        let o = Observed { dead: 1000, ..healthy() };
        assert_eq!(assess(&o, &th).level, Level::Ok);
    }

    #[test]
    fn unknown_is_exit_3() {
        let v = unknown("own PostgreSQL unreachable");
        assert_eq!((v.level as u8, v.line.as_str()), (3, "MSGX UNKNOWN - own PostgreSQL unreachable"));
    }
}
