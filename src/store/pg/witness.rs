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

/// Judges `now` against `seen` and returns what to remember: the highest position ever seen is
/// never lowered (a server that lost commits stays behind it until a person decides).
pub fn judge(seen: Option<Seen>, now: Sighting) -> (Verdict, Seen) {
    let Some(s) = seen else {
        return (Verdict::Same, Seen { system: now.system, timeline: now.timeline, lsn: now.lsn });
    };
    let other_cluster = matches!((s.system, now.system), (Some(a), Some(b)) if a != b);
    if other_cluster || now.lsn < s.lsn {
        return (Verdict::LostCommits { seen: s.lsn, now: now.lsn, other_cluster }, s);
    }
    let next = Seen { system: now.system.or(s.system), timeline: now.timeline, lsn: now.lsn };
    if now.timeline != s.timeline {
        (Verdict::Failover { from: s.timeline, to: now.timeline }, next)
    } else {
        (Verdict::Same, next)
    }
}

/// What was seen, per store (its connection string: every address of a multi-host URL is the
/// same store).
static SEEN: Mutex<Option<std::collections::HashMap<String, Seen>>> = Mutex::new(None);

/// Records a sighting of the store `store` and says what it means.
pub fn witness(store: &str, now: Sighting) -> Verdict {
    let mut all = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let map = all.get_or_insert_with(Default::default);
    let (verdict, next) = judge(map.get(store).copied(), now);
    map.insert(store.to_string(), next);
    verdict
}

/// `16/B374D848` as a number.
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
    let r = c.query_one("SELECT pg_current_wal_lsn()::text, pg_walfile_name(pg_current_wal_lsn())", &[])?;
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
        let (v, seen) = judge(None, at(1, 100));
        assert_eq!(v, Verdict::Same);
        let (v, seen) = judge(Some(seen), at(1, 150));
        assert_eq!((v, seen.lsn), (Verdict::Same, 150));
        let (v, seen) = judge(Some(seen), at(2, 160));
        assert_eq!(v, Verdict::Failover { from: 1, to: 2 }, "a synchronous standby promoted");
        let (v, kept) = judge(Some(seen), at(3, 120));
        assert_eq!(v, Verdict::LostCommits { seen: 160, now: 120, other_cluster: false });
        assert_eq!(kept.lsn, 160, "the highest position seen is never lowered");
        let other = Sighting { system: Some(8), timeline: 1, lsn: 500 };
        assert!(matches!(judge(Some(kept), other).0, Verdict::LostCommits { other_cluster: true, .. }));
    }
}
