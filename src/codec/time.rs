//! SIS body times: `ddMMMyyHHmm` (e.g. `23JAN210535`) or `ddMMMyy` (`23JAN21`), English month
//! abbreviations, case-insensitive; and META's `DTTM` `yyyyMMddHHmmss`.

/// A calendar time as the feed writes it (local airport time; no zone is given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SisTime {
    pub year: u16,
    pub month: u8,
    pub day: u8,
    /// `None` for a date-only value (`ddMMMyy`).
    pub hm: Option<(u8, u8)>,
}

impl SisTime {
    /// `yyyy-MM-ddTHH:mm` or `yyyy-MM-dd`.
    pub fn iso(&self) -> String {
        self.iso_text().as_str().to_string()
    }

    /// [`SisTime::iso`] without an allocation, for a value that is only written out (a FLOP
    /// record's time goes straight into its JSON, #23).
    pub fn iso_text(&self) -> Iso {
        // Written digit by digit: `format!` was a seventh of a FLOP message's decoding (#23).
        let mut out = self.day_text();
        if let Some((h, m)) = self.hm {
            out.push(b'T');
            out.digits(h.into(), 2);
            out.push(b':');
            out.digits(m.into(), 2);
        }
        out
    }

    /// The operating day, `yyyy-MM-dd`.
    pub fn day(&self) -> String {
        self.day_text().as_str().to_string()
    }

    fn day_text(&self) -> Iso {
        let mut out = Iso { buf: [0; Iso::MAX], len: 0 };
        out.digits(self.year.into(), 4);
        out.push(b'-');
        out.digits(self.month.into(), 2);
        out.push(b'-');
        out.digits(self.day.into(), 2);
        out
    }
}

/// A time's ISO text on the stack: at most `yyyyy-MMM-dddTHHH:mmm` (each part as wide as its
/// type allows, which no parsed time is).
#[derive(Clone, Copy)]
pub struct Iso {
    buf: [u8; Iso::MAX],
    len: usize,
}

impl Iso {
    const MAX: usize = 21;

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).expect("digits and punctuation are ASCII")
    }

    fn push(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    /// `n` in `width` decimal digits, zero-padded, as `{n:0width$}` writes it for the values
    /// a [`SisTime`] holds (a year has four digits; a wider one keeps them all).
    fn digits(&mut self, n: u32, width: usize) {
        // Counted first, then written right to left in place: no scratch copied with a
        // `memcpy` call per part, which was a twentieth of a FLOP message's decoding (#23).
        let count = std::iter::successors(Some(n), |v| (*v >= 10).then_some(v / 10)).count().max(width);
        let mut v = n;
        for at in (self.len..self.len + count).rev() {
            self.buf[at] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        self.len += count;
    }
}

impl std::fmt::Debug for Iso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

const MONTHS: [&str; 12] =
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];

/// Decimal digits only (no sign, no space), at most nine of them; read byte by byte, as
/// `str::parse` would after the same check (#23: a time's four numbers were checked twice).
fn num(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 9 {
        return None;
    }
    s.bytes().try_fold(0u32, |n, b| b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0')))
}

fn days_in(year: u16, month: u8) -> u8 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Parses `ddMMMyyHHmm` or `ddMMMyy`. Two-digit years are 20yy (the feed starts in 2002).
pub fn parse(s: &str) -> Option<SisTime> {
    let s = super::xml::trim(s);
    if !s.is_ascii() || (s.len() != 7 && s.len() != 11) {
        return None;
    }
    let day = num(&s[0..2])? as u8;
    let mon = &s[2..5];
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(mon))? as u8 + 1;
    let year = 2000 + num(&s[5..7])? as u16;
    if day == 0 || day > days_in(year, month) {
        return None;
    }
    let hm = if s.len() == 11 {
        let (h, m) = (num(&s[7..9])? as u8, num(&s[9..11])? as u8);
        if h > 23 || m > 59 {
            return None;
        }
        Some((h, m))
    } else {
        None
    };
    Some(SisTime { year, month, day, hm })
}

/// Parses META's `yyyyMMddHHmmss` (17 digits with milliseconds are tolerated, family B).
pub fn parse_dttm(s: &str) -> Option<SisTime> {
    let s = super::xml::trim(s);
    if (s.len() != 14 && s.len() != 17) || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, month, day) = (num(&s[0..4])? as u16, num(&s[4..6])? as u8, num(&s[6..8])? as u8);
    let (h, m, sec) = (num(&s[8..10])? as u8, num(&s[10..12])? as u8, num(&s[12..14])?);
    if !(1..=12).contains(&month) || day == 0 || day > days_in(year, month) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some(SisTime { year, month, day, hm: Some((h, m)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_body_forms_case_insensitively() {
        assert_eq!(parse("23JAN210535").unwrap().iso(), "2021-01-23T05:35");
        assert_eq!(parse("23jan21").unwrap().iso(), "2021-01-23");
        assert_eq!(parse(" 29FEB240000 ").unwrap().iso(), "2024-02-29T00:00");
        assert_eq!(parse("15DEC031722").unwrap().day(), "2003-12-15");
    }

    #[test]
    fn refuses_what_is_not_a_time() {
        for bad in [
            "",
            "23JAN2105",
            "32JAN210535",
            "29FEB230000",
            "23JAX210535",
            "23JAN212460",
            "23JAN212400",
            "2021-01-23",
            "23JAN21053５",
            "aaJAN21",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn iso_is_what_format_writes() {
        for (year, month, day, hm) in [
            (2021, 1, 23, Some((5, 35))),
            (2003, 12, 9, None),
            (999, 10, 31, Some((23, 0))),
            (u16::MAX, 2, 1, Some((0, 59))),
            (u16::MAX, u8::MAX, u8::MAX, Some((u8::MAX, u8::MAX))),
        ] {
            let t = SisTime { year, month, day, hm };
            let date = format!("{year:04}-{month:02}-{day:02}");
            let want = hm.map_or(date.clone(), |(h, m)| format!("{date}T{h:02}:{m:02}"));
            assert_eq!((t.iso_text().as_str(), t.day()), (want.as_str(), date));
            assert_eq!(t.iso(), want);
        }
    }

    #[test]
    fn dttm() {
        assert_eq!(parse_dttm("20181105223126").unwrap().iso(), "2018-11-05T22:31");
        assert_eq!(parse_dttm("20210413160707123").unwrap().day(), "2021-04-13");
        assert_eq!(parse_dttm("2018-11-05 22:31:26"), None);
        assert_eq!(parse_dttm("20181305223126"), None);
    }
}
