//! `mailbox.time-zone`: the zone the shared mailbox's DATETIME columns are written in. Its
//! owner's writers use local time (`sysdate()`); a DATETIME carries no zone, so msgx writes
//! its marks and outbound rows, and reads `DATE_RECEIVED`, in the zone configured here:
//! `UTC` (the default, as before), a fixed offset (`+08:00`), or an IANA name
//! (`Asia/Shanghai`, from the system's tz database — DST gaps and folds resolved as
//! `compatible`: a time in a gap moves forward, a repeated hour takes its first instance).

use std::time::SystemTime;

use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};
use jiff::Timestamp;

#[derive(Debug, Clone)]
pub struct MailboxZone {
    /// As configured, for messages and equality.
    pub name: String,
    tz: TimeZone,
}

impl PartialEq for MailboxZone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Default for MailboxZone {
    fn default() -> Self {
        MailboxZone { name: "UTC".into(), tz: TimeZone::UTC }
    }
}

/// `+08:00`, `-0530`, `+08` → seconds east of UTC.
fn fixed(s: &str) -> Option<i32> {
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &s[1..];
    let (h, m) = match rest.len() {
        2 => (rest, "00"),
        4 => (&rest[..2], &rest[2..]),
        5 if rest.as_bytes()[2] == b':' => (&rest[..2], &rest[3..]),
        _ => return None,
    };
    if !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    (h <= 14 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

impl MailboxZone {
    pub fn parse(s: &str) -> Result<MailboxZone, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("UTC") || s == "Z" {
            return Ok(MailboxZone::default());
        }
        let tz = if s.starts_with(['+', '-']) {
            let secs = fixed(s).ok_or_else(|| format!("{s:?} is not an offset such as +08:00 or -05:30"))?;
            TimeZone::fixed(Offset::from_seconds(secs).map_err(|e| format!("{s:?}: {e}"))?)
        } else {
            TimeZone::get(s).map_err(|_| {
                format!("{s:?} is neither UTC, an offset such as +08:00, nor a time zone this system knows (IANA name, e.g. Asia/Shanghai)")
            })?
        };
        Ok(MailboxZone { name: s.to_string(), tz })
    }

    /// The wall-clock time of `t` in this zone.
    pub fn civil(&self, t: SystemTime) -> DateTime {
        let ts = Timestamp::try_from(t).unwrap_or(Timestamp::UNIX_EPOCH);
        self.tz.to_datetime(ts)
    }

    /// The instant a wall-clock time of this zone names (`None` when out of range).
    pub fn instant(&self, dt: DateTime) -> Option<SystemTime> {
        let ts = self.tz.to_ambiguous_timestamp(dt).compatible().ok()?;
        // Mailbox times before 1970 do not occur: they clamp to the epoch, as CivilTime does.
        let d = std::time::Duration::new(ts.as_second().max(0) as u64, ts.subsec_nanosecond().max(0) as u32);
        SystemTime::UNIX_EPOCH.checked_add(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn utc_is_the_default_and_round_trips() {
        let z = MailboxZone::default();
        let t = at(1_780_000_000) + Duration::from_micros(123_456);
        assert_eq!(z.instant(z.civil(t)), Some(t));
        assert_eq!(MailboxZone::parse("utc").unwrap(), z);
    }

    #[test]
    fn a_fixed_offset_writes_local_wall_clock_time() {
        let z = MailboxZone::parse("+08:00").unwrap();
        // 2026-06-01T00:00:00Z is 08:00 in Beijing.
        let t = at(1_780_272_000);
        let dt = z.civil(t);
        assert_eq!((dt.hour(), dt.day()), (8, 1));
        assert_eq!(z.instant(dt), Some(t));
        assert_eq!(MailboxZone::parse("-0530").unwrap().civil(t).hour(), 18);
        assert_eq!(MailboxZone::parse("+05").unwrap().civil(t).hour(), 5);
    }

    #[test]
    fn an_iana_name_follows_daylight_saving() {
        let z = MailboxZone::parse("Europe/Berlin").unwrap();
        assert_eq!(z.civil(at(1_780_272_000)).hour(), 2, "CEST in June");
        assert_eq!(z.civil(at(1_767_225_600)).hour(), 1, "CET on 2026-01-01");
        // 02:30 on 2026-03-29 does not exist in Berlin: compatible moves it forward an hour.
        let gap = DateTime::new(2026, 3, 29, 2, 30, 0, 0).unwrap();
        assert_eq!(z.civil(z.instant(gap).unwrap()).hour(), 3);
    }

    #[test]
    fn a_bad_zone_is_named() {
        let e = MailboxZone::parse("Asia/Shangai").unwrap_err();
        assert!(e.contains("\"Asia/Shangai\" is neither UTC"), "{e}");
        assert!(MailboxZone::parse("+25:00").is_err());
        assert!(MailboxZone::parse("+8").is_err());
    }
}
