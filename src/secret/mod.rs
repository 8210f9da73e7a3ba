//! Secrets never reach an output (SPEC §7): connection strings are redacted in every form the
//! drivers accept, and the passwords msgx was configured with are scrubbed from every log line
//! and every error a command prints — whatever a driver chose to echo.
//!
//! Forms redacted by [`redact`]: URL userinfo (`scheme://user:PASSWORD@host`), URL query
//! parameters (`?password=…`, `&sslpassword=…`, `pass`, `pwd`), and libpq key=value strings
//! (`host=h password=… user=u`, quoted values included). A URL's userinfo is read both as the
//! `postgres` driver reads it (up to the first `@` anywhere, so a password may hold `/`, `?` or
//! `#`) and as a URL parser reads it (the `mysql` and `redis` drivers: up to the last `@` of the
//! authority); whatever either calls a password is masked (#42).
//!
//! What [`remember_in`] learns to scrub: each secret as written, and as the driver that reads the
//! string decodes it (percent-decoding, quoting), asked of the driver's own parser.

use std::borrow::Cow;
use std::sync::RwLock;

pub mod file;
pub use file::{SecretError, SecretFile};

/// Parameter names whose value is a secret, matched without regard to case.
const SECRET_KEYS: &[&str] = &["password", "passwd", "pass", "pwd", "sslpassword", "sentinel_password"];

/// What a secret becomes.
pub const MASK: &str = "***";

/// Passwords shorter than this are not scrubbed by value (they would mask ordinary words); the
/// structural redaction still hides them wherever they stand in a connection string.
const MIN_SCRUBBED: usize = 4;

static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remembers a secret so that [`scrub`] hides it wherever it appears.
pub fn remember(secret: &str) {
    if secret.len() < MIN_SCRUBBED {
        return;
    }
    let mut known = KNOWN.write().unwrap_or_else(|e| e.into_inner());
    if !known.iter().any(|k| k == secret) {
        known.push(secret.to_string());
        // Longest first, so a secret that contains another is masked whole.
        known.sort_by_key(|k| std::cmp::Reverse(k.len()));
    }
}

/// Remembers every password found in a connection string.
pub fn remember_in(connection: &str) {
    for p in passwords(connection) {
        remember(&p);
    }
}

/// `text` with every remembered secret masked; borrowed when there was none.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let known = KNOWN.read().unwrap_or_else(|e| e.into_inner());
    if !known.iter().any(|k| text.contains(k.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for k in known.iter() {
        out = out.replace(k.as_str(), MASK);
    }
    Cow::Owned(out)
}

/// A connection string (URL or key=value) with its secrets masked where they stand.
pub fn redact(connection: &str) -> String {
    let mut out = String::with_capacity(connection.len());
    let mut at = 0;
    for span in spans(connection) {
        out.push_str(&connection[at..span.start]);
        out.push_str(MASK);
        at = span.end;
    }
    out.push_str(&connection[at..]);
    out
}

/// The secrets a connection string holds, in any of the forms the drivers accept: as written
/// (a quoted key=value secret also unescaped) and as the driver decodes it.
pub fn passwords(connection: &str) -> Vec<String> {
    let mut found = Vec::new();
    for span in spans(connection) {
        let raw = &connection[span];
        found.push(raw.to_string());
        let unescaped = raw.replace("\\'", "'").replace("\\\\", "\\");
        if unescaped != raw {
            found.push(unescaped);
        }
    }
    found.extend(decoded(connection).filter(|p| !p.is_empty() && !found.contains(p)));
    found
}

/// The password as the driver that reads `connection` decodes it, asked of its own parser.
fn decoded(connection: &str) -> Option<String> {
    let scheme = url_scheme(connection).map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        None | Some("postgres" | "postgresql") => {
            // Without libpq's TLS parameters (`sslmode=verify-full`, #64): they are msgx's, and
            // the driver refuses what it does not know.
            let config: postgres::Config = without_tls_params(connection).parse().ok()?;
            config.get_password().map(|p| String::from_utf8_lossy(p).into_owned())
        }
        Some("mysql") => mysql::Opts::from_url(connection).ok()?.get_pass().map(str::to_string),
        Some(_) => {
            let info = redis::IntoConnectionInfo::into_connection_info(connection).ok()?;
            info.redis_settings().password().map(str::to_string)
        }
    }
}

/// A URL without the query parameters libpq reads for TLS, which the driver does not know.
fn without_tls_params(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else { return url.to_string() };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| {
            !["sslmode", "sslrootcert", "sslcert", "sslkey"].contains(&p.split('=').next().unwrap_or(""))
        })
        .collect();
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// Where the secrets stand, in order, never overlapping, never empty.
fn spans(connection: &str) -> Vec<std::ops::Range<usize>> {
    let mut found = Vec::new();
    if let Some((_, base)) = url_scheme(connection) {
        let rest = &connection[base..];
        // As `postgres` reads it: the userinfo runs to the first `@`, wherever it stands.
        let first_at = rest.find('@');
        // As a URL parser reads it: the authority ends at `/`, `?` or `#`; its userinfo runs
        // to the last `@` in it.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let last_at = rest[..authority_end].rfind('@');
        for at in [first_at, last_at].into_iter().flatten() {
            if let Some(colon) = rest[..at].find(':') {
                found.push(base + colon + 1..base + at);
            }
            found.extend(query_spans(connection, base + at + 1));
        }
        found.extend(query_spans(connection, base));
    } else {
        found.extend(key_value_spans(connection));
    }
    found.retain(|r| !r.is_empty());
    merged(found)
}

/// The scheme of a URL and where what follows its `://` starts; `None` for any other string (a
/// key=value string whose value holds `://` is not a URL).
fn url_scheme(connection: &str) -> Option<(&str, usize)> {
    let (scheme, _) = connection.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some((scheme, scheme.len() + 3))
}

/// The secret query parameters of the query that starts after the first `?` from `from` on.
fn query_spans(connection: &str, from: usize) -> Vec<std::ops::Range<usize>> {
    let mut found = Vec::new();
    let Some(q) = connection[from..].find('?') else { return found };
    let mut pos = from + q + 1;
    let query_end = connection[pos..].find('#').map_or(connection.len(), |h| pos + h);
    for pair in connection[pos..query_end].split('&') {
        if let Some((k, v)) = pair.split_once('=') {
            if is_secret_key(k) {
                let start = pos + k.len() + 1;
                found.push(start..start + v.len());
            }
        }
        pos += pair.len() + 1;
    }
    found
}

/// `spans` sorted, the overlapping ones joined.
fn merged(mut spans: Vec<std::ops::Range<usize>>) -> Vec<std::ops::Range<usize>> {
    spans.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<std::ops::Range<usize>> = Vec::with_capacity(spans.len());
    for r in spans {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

fn is_secret_key(key: &str) -> bool {
    SECRET_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key.trim()))
}

/// libpq's `key=value` form: values separated by white space, optionally single-quoted with
/// `\'` and `\\` escapes; white space around `=` allowed. The spans of the secret values
/// (inside the quotes).
fn key_value_spans(s: &str) -> Vec<std::ops::Range<usize>> {
    let bytes = s.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        i = skip_ws(i);
        let Some(eq) = s[i..].find('=').map(|e| i + e) else { break };
        let key = s[i..eq].trim();
        let mut v = skip_ws(eq + 1);
        let span = if bytes.get(v) == Some(&b'\'') {
            v += 1;
            let start = v;
            while v < bytes.len() && bytes[v] != b'\'' {
                v += if bytes[v] == b'\\' { 2 } else { 1 };
            }
            let end = v.min(bytes.len());
            v = (end + 1).min(bytes.len());
            start..end
        } else {
            let start = v;
            while v < bytes.len() && !bytes[v].is_ascii_whitespace() {
                v += 1;
            }
            start..v
        };
        if is_secret_key(key) {
            found.push(span);
        }
        i = v;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_form_of_a_connection_string_is_redacted() {
        let cases = [
            ("mysql://u:p4ss@h:1/db", "mysql://u:***@h:1/db"),
            ("redis://:pw@h/", "redis://:***@h/"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://u@h/db?password=s3cret&sslmode=disable",
                "postgres://u@h/db?password=***&sslmode=disable",
            ),
            ("postgres://h/db?user=u&PASSWORD=s3cret", "postgres://h/db?user=u&PASSWORD=***"),
            ("host=h port=5432 password=s3cret user=u", "host=h port=5432 password=*** user=u"),
            ("host=h password = s3cret dbname=d", "host=h password = *** dbname=d"),
            ("host=h password='a b\\'c' user=u", "host=h password='***' user=u"),
            ("postgres://h/db?x=a@b", "postgres://h/db?x=a@b"),
            ("postgres://u:s@h/db", "postgres://u:***@h/db"),
            // #42: `postgres` reads the userinfo up to the first `@`, wherever it stands.
            ("postgres://u:p/a?s#s@h:5432/db", "postgres://u:***@h:5432/db"),
            // A URL parser reads it up to the last `@` of the authority.
            ("mysql://u:p@ss@h:3306/db", "mysql://u:***@h:3306/db"),
            ("host=h password=a://b@c user=u", "host=h password=*** user=u"),
            ("not a url", "not a url"),
        ];
        for (given, want) in cases {
            assert_eq!(redact(given), want, "{given}");
        }
    }

    /// #21 item 3: the passwords of the configuration are hidden in any line a driver writes.
    #[test]
    fn regression_a_remembered_password_is_scrubbed_from_any_text() {
        remember_in("host=h password=kv-only-secret user=u");
        let line = "error connecting: password authentication failed (host=h password=kv-only-secret)";
        assert!(!scrub(line).contains("kv-only-secret"), "{}", scrub(line));
        assert!(matches!(scrub("nothing secret here"), Cow::Borrowed(_)));
    }

    /// #42: a password with `/`, `?` and `#` in a `postgres` URL, as the driver accepts it, is
    /// masked where it stands, in `check` and the start-up line, and scrubbed from any text.
    #[test]
    fn regression_a_postgres_url_password_with_slash_question_mark_and_hash_is_masked() {
        let url = "postgres://msgx:p/a?s#s@127.0.0.1:5432/msgx";
        let config: postgres::Config = url.parse().expect("the driver accepts it");
        assert_eq!(config.get_password(), Some(&b"p/a?s#s"[..]), "what the driver reads");
        assert_eq!(redact(url), "postgres://msgx:***@127.0.0.1:5432/msgx");
        remember_in(url);
        assert_eq!(scrub("auth failed for p/a?s#s"), "auth failed for ***");
    }

    #[test]
    fn a_percent_encoded_password_is_scrubbed_as_written_and_as_decoded() {
        remember_in("mysql://u:d%40c%2Fo%3Fd@h:3306/db");
        assert_eq!(scrub("raw d%40c%2Fo%3Fd decoded d@c/o?d"), "raw *** decoded ***");
    }

    /// Every byte but ASCII letters and digits as `%XX`: a value any URL parser reads back whole.
    fn encoded(pw: &str) -> String {
        pw.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect()
    }

    fn secret() -> impl Strategy<Value = String> {
        // Every printable ASCII character (#42).
        "[ -~]{4,24}"
    }

    proptest! {
        #[test]
        fn no_generated_connection_string_shows_its_password(
            user in "[a-z]{1,8}", pw in secret(), host in "[a-z]{1,10}", port in 1u16..65535,
            form in 0usize..6,
        ) {
            // Each form as its driver accepts the password: raw where it may stand raw,
            // percent-encoded in URLs, quoted and escaped in key=value.
            let quoted = pw.replace('\\', "\\\\").replace('\'', "\\'");
            let (s, written) = match form {
                // `postgres` reads the userinfo to the first `@` and percent-decodes it: anything
                // else may stand raw.
                0 if !pw.contains(['@', '%']) => (format!("postgres://{user}:{pw}@{host}:{port}/db"), pw.clone()),
                0 | 1 => (format!("postgres://{user}:{}@{host}:{port}/db", encoded(&pw)), encoded(&pw)),
                2 => (format!("mysql://{user}:{}@{host}:{port}/mailbox", encoded(&pw)), encoded(&pw)),
                3 => (format!("postgres://{user}@{host}:{port}/db?sslmode=disable&password={}", encoded(&pw)), encoded(&pw)),
                4 => (format!("host={host} port={port} user={user} password='{quoted}' dbname=msgx"), quoted.clone()),
                _ => (format!("redis://:{}@{host}:{port}/", encoded(&pw)), encoded(&pw)),
            };
            // The form is one the driver reads as this password.
            prop_assert_eq!(decoded(&s), Some(pw.clone()), "{}", s);
            // Masked where it stands, and nothing else changed.
            let at = s.find(&written).expect("written in the string");
            let want = format!("{}{MASK}{}", &s[..at], &s[at + written.len()..]);
            prop_assert_eq!(redact(&s), want);
            remember_in(&s);
            let echoed = format!("driver said: could not connect with {s} (password {pw})");
            let scrubbed = scrub(&echoed);
            prop_assert!(!scrubbed.contains(&pw) && !scrubbed.contains(&written), "{}", scrubbed);
        }
    }
}
