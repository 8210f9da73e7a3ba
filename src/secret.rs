//! Secrets never reach an output (SPEC §7): connection strings are redacted in every form the
//! drivers accept, and the passwords msgx was configured with are scrubbed from every log line
//! and every error a command prints — whatever a driver chose to echo.
//!
//! Forms redacted by [`redact`]: URL userinfo (`scheme://user:PASSWORD@host`), URL query
//! parameters (`?password=…`, `&sslpassword=…`, `pass`, `pwd`), and libpq key=value strings
//! (`host=h password=… user=u`, quoted values included).

use std::borrow::Cow;
use std::sync::RwLock;

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

/// The secrets a connection string holds, in any of the forms the drivers accept (a quoted
/// key=value secret both as written and unescaped).
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
    found
}

/// Where the secrets stand, in order, never overlapping, never empty.
fn spans(connection: &str) -> Vec<std::ops::Range<usize>> {
    let mut found = Vec::new();
    if let Some(scheme_end) = connection.find("://") {
        let base = scheme_end + 3;
        let rest = &connection[base..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                found.push(base + colon + 1..base + at);
            }
        }
        if let Some(q) = rest.find('?') {
            let mut pos = base + q + 1;
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
        }
    } else {
        found.extend(key_value_spans(connection));
    }
    found.retain(|r| !r.is_empty());
    found
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

    fn secret() -> impl Strategy<Value = String> {
        // Printable ASCII without the separators that end a value in each form.
        "[A-Za-z0-9!$%*+,;~._-]{4,24}"
    }

    proptest! {
        #[test]
        fn no_generated_connection_string_shows_its_password(
            user in "[a-z]{1,8}", pw in secret(), host in "[a-z]{1,10}", port in 1u16..65535,
            form in 0usize..5,
        ) {
            let s = match form {
                0 => format!("postgres://{user}:{pw}@{host}:{port}/db"),
                1 => format!("mysql://{user}:{pw}@{host}:{port}/mailbox?ssl-mode=disabled"),
                2 => format!("postgres://{user}@{host}:{port}/db?sslmode=disable&password={pw}"),
                3 => format!("host={host} port={port} user={user} password={pw} dbname=msgx"),
                _ => format!("host={host} password='{pw}' port={port}"),
            };
            let r = redact(&s);
            prop_assert!(!r.contains(&pw), "{} -> {}", s, r);
            if !host.contains(pw.as_str()) {
                prop_assert!(r.contains(&host), "{} -> {}", s, r);
            }
            remember_in(&s);
            let echoed = format!("driver said: could not connect with {s}");
            prop_assert!(!scrub(&echoed).contains(&pw));
        }
    }
}
