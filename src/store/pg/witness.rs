//! What this process has seen of own PostgreSQL, to notice a failover and a server that came
//! back having forgotten commits (#19, SPEC §4.10): the cluster's `system_identifier`, its
//! timeline and the highest WAL position seen. Every new session and every lease renewal shows
//! where the server is; the rules are plain functions of what was seen and what is seen now.

use std::sync::Mutex;

/// Where the server is, as one session saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting {
    /// `pg_control_system()`'s identifier, when the role may read it.
    pub system: Option<u64>,
    pub timeline: u32,
    /// `pg_current_wal_lsn()` as a number.
    pub lsn: u64,
}

/// What a sighting means against what was seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first sighting, or nothing new.
    Same,
    /// A new timeline (a standby was promoted) that has every commit seen before.
    Failover { from: u32, to: u32 },
    /// The server is behind what msgx saw it acknowledge: commits were lost (an asynchronous
    /// replica promoted with a lost tail, a restore from a backup), or it is another cluster.
    LostCommits { seen: u64, now: u64, other_cluster: bool },
}

/// The highest position seen, and on which timeline and cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub system: Option<u64>,
    pub timeline: u32,
    pub lsn: u64,
}

/// Where a sighting comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Read inside one of msgx's own write statements, before its commit: once that commit is
    /// acknowledged, every server that has it is at least there. Raises the position seen.
    OwnWrite,
    /// A new session's server, judged against what was seen; it raises nothing (other sessions'
    /// WAL, not yet acknowledged anywhere, may be beyond what a replica has).
    NewSession,
}

/// Judges `now` against `seen` and returns what to remember: the highest position ever seen is
/// never lowered (a server that lost commits stays behind it until a person decides), and only
/// a position read inside msgx's own write raises it.
pub fn judge(seen: Option<Seen>, now: Sighting, source: Source) -> (Verdict, Seen) {
    let raised = |s: Option<Seen>| match source {
        Source::OwnWrite => now.lsn.max(s.map_or(0, |s| s.lsn)),
        Source::NewSession => s.map_or(0, |s| s.lsn),
    };
    let Some(s) = seen else {
        return (Verdict::Same, Seen { system: now.system, timeline: now.timeline, lsn: raised(None) });
    };
    let other_cluster = matches!((s.system, now.system), (Some(a), Some(b)) if a != b);
    if other_cluster || now.lsn < s.lsn {
        return (Verdict::LostCommits { seen: s.lsn, now: now.lsn, other_cluster }, s);
    }
    let next = Seen { system: now.system.or(s.system), timeline: now.timeline, lsn: raised(Some(s)) };
    if now.timeline != s.timeline {
        (Verdict::Failover { from: s.timeline, to: now.timeline }, next)
    } else {
        (Verdict::Same, next)
    }
}

/// What was seen, per store (its connection string: every address of a multi-host URL is the
/// same store).
static SEEN: Mutex<Option<std::collections::HashMap<String, Seen>>> = Mutex::new(None);

/// What was seen of `store` so far. A new session takes this *before* it reads where the server
/// is, and is judged against it: a position another thread records meanwhile (a renewal just
/// after the session's reading) must not make the session look behind.
pub fn seen(store: &str) -> Option<Seen> {
    let all = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    all.as_ref().and_then(|m| m.get(store).copied())
}

/// Records a sighting of the store `store`, judged against `before` (what was seen when the
/// sighting was taken), and says what it means.
pub fn witness(store: &str, before: Option<Seen>, now: Sighting, source: Source) -> Verdict {
    let (verdict, judged) = judge(before, now, source);
    let mut all = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let map = all.get_or_insert_with(Default::default);
    // Merge with what other threads recorded since `before`: the highest position stays.
    let next = match map.get(store) {
        Some(cur) => Seen { lsn: cur.lsn.max(judged.lsn), ..judged },
        None => judged,
    };
    map.insert(store.to_string(), next);
    verdict
}

/// `16/B374D848` as a number.
/// Forgets every position seen: after a heal the server as it is now is the baseline (#20), else
/// every new session would be judged against the commits it lost, again and again.
pub fn rebase_all() {
    *SEEN.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

pub fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// The timeline of a WAL file name (`000000020000000000000003`: 2).
pub fn timeline_of(walfile: &str) -> Option<u32> {
    u32::from_str_radix(walfile.get(..8)?, 16).ok()
}

/// Reads where the server is: its WAL position and timeline, and its system identifier when
/// the role may read it (superuser or pg_monitor's grants).
pub fn sight(c: &mut postgres::Client) -> Result<Sighting, postgres::Error> {
    // The insert position: it only grows on one server (the write position can step back to a
    // page boundary between two sessions' readings).
    let r = c.query_one(
        "SELECT pg_current_wal_insert_lsn()::text, pg_walfile_name(pg_current_wal_insert_lsn())",
        &[],
    )?;
    let (lsn, file): (String, String) = (r.get(0), r.get(1));
    let system = c
        .query_one("SELECT system_identifier::text FROM pg_control_system()", &[])
        .ok()
        .and_then(|r| r.get::<_, String>(0).parse().ok());
    Ok(Sighting { system, timeline: timeline_of(&file).unwrap_or(0), lsn: parse_lsn(&lsn).unwrap_or(0) })
}

/// Formats a position as PostgreSQL writes it.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(timeline: u32, lsn: u64) -> Sighting {
        Sighting { system: Some(7), timeline, lsn }
    }

    #[test]
    fn positions_and_timelines_read_as_postgresql_writes_them() {
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("nonsense"), None);
        assert_eq!(timeline_of("000000020000000000000003"), Some(2));
        assert_eq!(lsn_text(0x16_B374_D848), "16/B374D848");
    }

    #[test]
    fn a_promoted_replica_with_every_commit_is_a_failover_one_behind_lost_commits() {
        use Source::{NewSession, OwnWrite};
        let (v, seen) = judge(None, at(1, 100), OwnWrite);
        assert_eq!(v, Verdict::Same);
        let (v, seen) = judge(Some(seen), at(1, 150), OwnWrite);
        assert_eq!((v, seen.lsn), (Verdict::Same, 150));
        let (v, seen) = judge(Some(seen), at(2, 160), NewSession);
        assert_eq!(v, Verdict::Failover { from: 1, to: 2 }, "a synchronous standby promoted");
        assert_eq!(seen.lsn, 150, "a new session's position raises nothing");
        let (v, kept) = judge(Some(seen), at(3, 120), NewSession);
        assert_eq!(v, Verdict::LostCommits { seen: 150, now: 120, other_cluster: false });
        assert_eq!(kept.lsn, 150, "the highest position seen is never lowered");
        let other = Sighting { system: Some(8), timeline: 1, lsn: 500 };
        assert!(matches!(
            judge(Some(kept), other, NewSession).0,
            Verdict::LostCommits { other_cluster: true, .. }
        ));
    }

    /// A new session may read a position beyond what any replica has (another session's WAL
    /// not yet acknowledged); recording it would make a clean synchronous failover "lost commits".
    #[test]
    fn regression_a_new_sessions_position_never_raises_what_was_seen() {
        let (_, seen) = judge(None, at(1, 100), Source::OwnWrite);
        let (_, seen) = judge(Some(seen), at(1, 0x2000), Source::NewSession);
        let (v, _) = judge(Some(seen), at(1, 0x1000), Source::NewSession);
        assert_eq!(v, Verdict::Same);
    }

    /// Seen in the daemon: a new session read the server at 0x68 before a renewal on another
    /// thread recorded 0xD0; judged against what was seen when it read, it is not behind.
    #[test]
    fn regression_a_renewal_recorded_while_a_session_reads_is_no_lost_commit() {
        let store = "test://race";
        let before = seen(store);
        let now = Sighting { system: None, timeline: 1, lsn: 0x68 };
        let _ = witness(store, None, Sighting { system: None, timeline: 1, lsn: 0xD0 }, Source::OwnWrite);
        assert_eq!(witness(store, before, now, Source::NewSession), Verdict::Same);
        assert_eq!(seen(store).map(|s| s.lsn), Some(0xD0), "the highest position stays");
        let later = Sighting { system: None, timeline: 1, lsn: 0x10 };
        assert!(matches!(
            witness(store, seen(store), later, Source::NewSession),
            Verdict::LostCommits { .. }
        ));
    }
}
