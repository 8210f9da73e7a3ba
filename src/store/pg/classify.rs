//! PostgreSQL errors → [`StoreErrorKind`] (SPEC §4.9): one table, by SQLSTATE.
//!
//! Unavailable: the server cannot be used right now, whatever msgx sends — connection
//! exceptions (class 08), operator intervention (57P01 admin shutdown, 57P02 crash shutdown,
//! 57P03 cannot connect now), insufficient resources (class 53: disk full, out of memory, too
//! many connections), statement and lock timeouts (57014, 55P03), serialization failures and
//! deadlocks (40001, 40P01: retrying the same work succeeds), a read-only server during a
//! failover (25006), a session the server ended for idling inside a transaction (25P03: msgx
//! sets `idle_in_transaction_session_timeout` itself, so a frozen round ends this way), system and I/O errors (58000, 58030), and a database, schema, table or
//! column that is not there (3D000, 3F000, 42P01, 42703: the store is away or misconfigured,
//! no message is at fault). Rejected: everything else the server answers — data exceptions
//! (class 22: a value too long, an invalid byte sequence), integrity constraints (class 23),
//! privileges (42501) — and every code this table does not know.
//!
//! Errors without a server answer: a closed connection, an I/O error or a client timeout is
//! unavailable; a value the driver could not convert is rejected.

use crate::error::Store;
use crate::error::{StoreError, StoreErrorKind};

/// SQLSTATEs (or their two-character classes) that mean "the store is away".
const UNAVAILABLE_CLASSES: &[&str] = &["08", "53", "58"];
const UNAVAILABLE_CODES: &[&str] = &[
    "57P01", "57P02", "57P03", "57P04", "57P05", "57014", "55P03", "40001", "40P01", "25006", "25P03",
    "3D000", "3F000", "42P01", "42703",
];

/// Raised by `msgx_fence` (migration V007) when a newer lease holder exists.
pub const FENCED: &str = "MX001";

/// The kind of a server error by its SQLSTATE.
pub fn kind_of_sqlstate(code: &str) -> StoreErrorKind {
    if code == FENCED {
        return StoreErrorKind::Fenced;
    }
    let class = code.get(..2).unwrap_or(code);
    if UNAVAILABLE_CLASSES.contains(&class) || UNAVAILABLE_CODES.contains(&code) {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Rejected
    }
}

/// What the driver says of an error the server did not answer: its connection is closed, its
/// cause is an I/O error, or (the driver's kinds without a public predicate) its text is the
/// one the driver writes for a failed connect or a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoAnswer<'a> {
    pub closed: bool,
    pub io: bool,
    pub text: &'a str,
}

/// The texts `postgres` writes for its `Connect` and `Timeout` kinds, which it exposes no
/// predicate for: matched as prefixes, never guessed from words inside another message.
const TRANSPORT_KINDS: &[&str] = &["error connecting to server", "timeout waiting for server"];

/// The kind of an error the server did not answer: connection and I/O trouble is
/// unavailable, anything else (a conversion the driver refused, an unknown error) rejected.
pub fn kind_without_server(e: NoAnswer<'_>) -> StoreErrorKind {
    if e.closed || e.io || TRANSPORT_KINDS.iter().any(|k| e.text.starts_with(k)) {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Rejected
    }
}

/// Whether an I/O error is anywhere in the error's chain of causes.
fn caused_by_io(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = e.source();
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>().is_some() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Classifies a driver error; `detail` keeps the SQLSTATE and the server's detail.
pub fn classify(e: &postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let detail = match db.detail() {
            Some(d) => format!("{} ({code}): {d}", db.message()),
            None => format!("{} ({code})", db.message()),
        };
        return StoreError::new(Store::Postgres, kind_of_sqlstate(code), detail);
    }
    let text = e.to_string();
    let kind = kind_without_server(NoAnswer { closed: e.is_closed(), io: caused_by_io(e), text: &text });
    StoreError::new(Store::Postgres, kind, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use StoreErrorKind::{Rejected, Unavailable};

    #[test]
    fn sqlstates_case_by_case() {
        let cases = [
            ("08006", Unavailable, "connection failure"),
            ("08001", Unavailable, "cannot establish connection"),
            ("08P01", Unavailable, "protocol violation"),
            ("57P01", Unavailable, "admin shutdown (server stopping)"),
            ("57P02", Unavailable, "crash shutdown"),
            ("57P03", Unavailable, "cannot connect now (starting up)"),
            ("53300", Unavailable, "too many connections"),
            ("53100", Unavailable, "disk full"),
            ("53200", Unavailable, "out of memory"),
            ("57014", Unavailable, "statement timeout"),
            ("55P03", Unavailable, "lock timeout"),
            ("40001", Unavailable, "serialization failure"),
            ("40P01", Unavailable, "deadlock"),
            ("25006", Unavailable, "read-only transaction (failover)"),
            ("25P03", Unavailable, "idle-in-transaction session timeout (msgx's own setting)"),
            ("58030", Unavailable, "I/O error"),
            ("3D000", Unavailable, "database does not exist"),
            ("42P01", Unavailable, "table does not exist"),
            ("42703", Unavailable, "column does not exist"),
            ("22001", Rejected, "value too long"),
            ("22021", Rejected, "invalid byte sequence (NUL in text)"),
            ("22P02", Rejected, "invalid text representation"),
            ("23505", Rejected, "unique violation"),
            ("23502", Rejected, "not null violation"),
            ("23514", Rejected, "check violation"),
            ("42501", Rejected, "insufficient privilege"),
            ("42601", Rejected, "syntax error"),
            ("XX000", Rejected, "internal error: unknown counts as rejected"),
            ("ZZZZZ", Rejected, "a code nobody knows"),
            ("MX001", StoreErrorKind::Fenced, "msgx_fence: a newer lease holder exists"),
        ];
        for (code, kind, what) in cases {
            assert_eq!(kind_of_sqlstate(code), kind, "{code} {what}");
        }
    }

    #[test]
    fn errors_without_a_server_answer() {
        let k = |closed, io, text| kind_without_server(NoAnswer { closed, io, text });
        assert_eq!(k(true, false, "connection closed"), Unavailable);
        assert_eq!(k(false, true, "error communicating with the server"), Unavailable);
        assert_eq!(k(false, false, "error connecting to server: refused"), Unavailable);
        assert_eq!(k(false, false, "timeout waiting for server"), Unavailable);
        assert_eq!(k(false, false, "error serializing parameter 0"), Rejected);
        assert_eq!(k(false, false, "something else"), Rejected);
    }

    /// #21 item 5: the kind comes from what the driver says (closed, an I/O cause), not from
    /// a word that happens to be in a message.
    #[test]
    fn regression_a_conversion_error_mentioning_a_timeout_is_not_an_outage() {
        let k = |text| kind_without_server(NoAnswer { closed: false, io: false, text });
        assert_eq!(k("error deserializing column 2: invalid value \"timeout\""), Rejected);
        assert_eq!(k("error serializing parameter 1: closed range"), Rejected);
    }
}
