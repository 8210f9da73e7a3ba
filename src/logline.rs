//! The log line's shape: `text` (env_logger's `[time LEVEL target] message`) or `json` (one
//! object a line, for log shippers: `ts`, `level`, `target`, `thread`, `event` — the words
//! before the first `key=value` — every `key=value` of the message as its own key, numbers as
//! numbers, and the whole `msg`). The lines carry the same stable keys either way, so a
//! monitor's pattern means the same in both (docs/monitoring.md).

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

static JSON: AtomicBool = AtomicBool::new(false);

/// From `msgx.log-format`, once the configuration is read (lines before it are text).
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// `verb words key=value key="quoted \" value" …` → (the verb, the fields in order). Text that
/// is neither (a free-form tail) stays only in `msg`.
pub fn fields(msg: &str) -> (String, Vec<(String, Value)>) {
    let mut verb = Vec::new();
    let mut out = Vec::new();
    let mut rest = msg.lines().next().unwrap_or("");
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let token_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let token = &rest[..token_end];
        match token.split_once('=') {
            Some((k, v)) if is_key(k) => {
                if v.starts_with('"') {
                    let start = k.len() + 2; // past `key="`
                    let (value, used) = unquote(&rest[start..]);
                    out.push((k.to_string(), Value::String(value)));
                    rest = &rest[start + used..];
                    continue;
                }
                let v = v.trim_end_matches([',', ';', ':']);
                out.push((k.to_string(), scalar(v)));
            }
            _ if out.is_empty() => verb.push(token.trim_end_matches(':')),
            _ => {}
        }
        rest = &rest[token_end..];
    }
    (verb.join(" "), out)
}

fn is_key(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn scalar(v: &str) -> Value {
    match v.parse::<i64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::String(v.to_string()),
    }
}

/// `abc \" def" tail` (after the opening quote) → (`abc " def`, bytes used incl. the quote).
fn unquote(s: &str) -> (String, usize) {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 'r')) => value.push('\r'),
                Some((_, 't')) => value.push('\t'),
                // `\u{2028}`, as [`Upstream`] writes a character it escapes.
                Some((at, 'u')) if s[at + 1..].starts_with('{') => {
                    let hex = &s[at + 2..];
                    let end = hex.find('}').unwrap_or(0);
                    match u32::from_str_radix(&hex[..end], 16).ok().and_then(char::from_u32) {
                        Some(c) => {
                            value.push(c);
                            chars.nth(end + 1);
                        }
                        None => value.push('u'),
                    }
                }
                Some((_, other)) => value.push(other),
                None => {}
            },
            '"' => return (value, i + 1),
            c => value.push(c),
        }
    }
    (value, s.len())
}

/// A value that came from upstream (a TYPE, an element name, an RMID, a decoder's error about
/// a value), as a log line shows it (#53): as it stands when it is a plain token — ASCII
/// letters, digits and `-_.:/@|#`, at most [`Upstream::TOKEN`] characters, so `type=FLOP-STND`
/// reads as it always has — otherwise in double quotes with `"`, `\` and every character that
/// is not printable ASCII escaped (`\n`, `\u{2028}`) and cut at [`Upstream::MAX`] characters.
/// No value can end a line, forge a `key=value` or make a line longer than its cut.
pub struct Upstream<'a>(pub &'a str);

impl Upstream<'_> {
    pub const TOKEN: usize = 64;
    pub const MAX: usize = 300;

    fn plain(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= Self::TOKEN
            && s.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'-' | b'_' | b'.' | b':' | b'/' | b'@' | b'|' | b'#')
            })
    }
}

impl std::fmt::Display for Upstream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if Self::plain(self.0) {
            return f.write_str(self.0);
        }
        Quoted(self.0).fmt(f)
    }
}

/// A text that may hold upstream values (an error about a value, a handler's warning), always
/// quoted as [`Upstream`] quotes what is not a plain token: `error="…"` reads as it always did.
pub struct Quoted<'a>(pub &'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        f.write_char('"')?;
        for (n, c) in self.0.chars().enumerate() {
            if n == Upstream::MAX {
                return write!(f, "…\" ({} characters)", self.0.chars().count());
            }
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                ' '..='~' => f.write_char(c)?,
                c if !c.is_control() && c.escape_debug().len() == 1 => f.write_char(c)?,
                c => write!(f, "\\u{{{:x}}}", c as u32)?,
            }
        }
        f.write_char('"')
    }
}

/// One JSON log line (without the newline).
pub fn render(ts: &str, level: &str, target: &str, thread: &str, msg: &str) -> String {
    let (event, kv) = fields(msg);
    let mut o = Map::new();
    o.insert("ts".into(), Value::from(ts));
    o.insert("level".into(), Value::from(level));
    o.insert("target".into(), Value::from(target));
    o.insert("thread".into(), Value::from(thread));
    o.insert("event".into(), Value::from(event));
    for (k, v) in kv {
        if !o.contains_key(&k) {
            o.insert(k, v);
        }
    }
    o.insert("msg".into(), Value::from(msg));
    Value::Object(o).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_value_cannot_forge_a_line_or_a_field() {
        let hostile = "X\nERROR msgx::pump] dead msg_id=1 class=MALFORMED\u{2028}y=\"z\\";
        let line = format!("succeeded msg_id=7 type={} events=1", Upstream(hostile));
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(!line.contains('\u{2028}'), "{line}");
        let (verb, f) = fields(&line);
        assert_eq!(verb, "succeeded");
        let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["msg_id", "type", "events"], "{line}");
        assert_eq!(f[1].1, Value::from(hostile), "the JSON format reads the value back whole");
        assert_eq!(
            format!("type={}", Upstream("FLOP-STND")),
            "type=FLOP-STND",
            "a plain token stands as it is"
        );
        assert_eq!(format!("{}", Upstream("")), "\"\"");
        assert_eq!(format!("{}", Upstream("a b")), "\"a b\"");
    }

    #[test]
    fn an_upstream_value_is_cut_so_no_line_grows_with_its_input() {
        let long = "x ".repeat(100_000);
        let shown = Upstream(&long).to_string();
        assert!(shown.chars().count() < Upstream::MAX + 40, "{}", shown.len());
        assert!(shown.ends_with("(200000 characters)"), "{shown}");
    }

    #[test]
    fn a_lifecycle_line_becomes_its_verb_and_typed_fields() {
        let (verb, f) =
            fields(r#"dead msg_id=17 type=FLOP-STND class=MALFORMED error="bad <MSG>: \"x\" at 3""#);
        assert_eq!(verb, "dead");
        assert_eq!(
            f,
            vec![
                ("msg_id".into(), Value::from(17)),
                ("type".into(), Value::from("FLOP-STND")),
                ("class".into(), Value::from("MALFORMED")),
                ("error".into(), Value::from(r#"bad <MSG>: "x" at 3"#)),
            ]
        );
    }

    #[test]
    fn words_before_the_first_field_are_the_event_and_a_free_tail_is_kept_in_msg() {
        let line = "store unavailable store=redis stage=process: connection refused; retrying";
        let v: Value = serde_json::from_str(&render("t", "WARN", "msgx::daemon", "process", line)).unwrap();
        assert_eq!(v["event"], "store unavailable");
        assert_eq!((v["store"].as_str(), v["stage"].as_str()), (Some("redis"), Some("process")));
        assert_eq!(v["msg"], line);
        assert_eq!((v["level"].as_str(), v["thread"].as_str()), (Some("WARN"), Some("process")));
    }

    #[test]
    fn a_field_never_overwrites_the_fixed_keys() {
        let v: Value =
            serde_json::from_str(&render("t", "INFO", "x", "y", "odd level=DEBUG msg=zz")).unwrap();
        assert_eq!((v["level"].as_str(), v["msg"].as_str()), (Some("INFO"), Some("odd level=DEBUG msg=zz")));
    }

    #[test]
    fn an_unterminated_quote_takes_the_rest() {
        let (_, f) = fields(r#"failed error="no end"#);
        assert_eq!(f, vec![("error".into(), Value::from("no end"))]);
    }
}
