//! Redis errors → [`StoreErrorKind`] (SPEC §4.9), one table.
//!
//! Unavailable: no answer (I/O errors, refused, reset or dropped connections, timeouts), and
//! the answers of a server that cannot serve right now — `LOADING` (reading its dump after a
//! restart), `BUSY` (a script running), `TRYAGAIN`, `MASTERDOWN`, `CLUSTERDOWN`, `READONLY` (a
//! replica during failover), `OOM` (maxmemory reached), `MISCONF` (cannot persist),
//! `NOREPLICAS`, a failed authentication (the server refuses every command), and the apply
//! script's `MSGX_MOVED` (written since the round read its flights: nothing was written). Fenced: the
//! apply script's `MSGX_FENCED` (a newer lease holder wrote here). Forgot: its `MSGX_FORGOT`
//! (Redis holds fewer applies than this process made: restored, emptied, failed over). Rejected: everything else —
//! a script error on this round's data, `WRONGTYPE`, `NOPERM` — and what the table does not
//! know.

use crate::error::Store;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::{StoreError, StoreErrorKind};

/// Server error codes that mean "the server cannot serve right now".
const UNAVAILABLE_CODES: &[&str] =
    &["LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "OOM", "MISCONF", "NOREPLICAS"];

/// A refusal of msgx's own scripts: nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `MSGX_FENCED`: a newer lease holder wrote here.
    Fenced,
    /// `MSGX_FORGOT`: Redis holds another history than this handle wrote.
    Forgot,
    /// `MSGX_MOVED`: written since the round read its flights; read and try again.
    Moved,
}

impl Refusal {
    const ALL: [(Refusal, &'static str); 3] =
        [(Refusal::Fenced, "MSGX_FENCED"), (Refusal::Forgot, "MSGX_FORGOT"), (Refusal::Moved, "MSGX_MOVED")];

    /// The refusal an error's text carries, whatever code a server version puts before it.
    pub fn of(text: &str) -> Option<Refusal> {
        Refusal::ALL.iter().find(|(_, word)| text.contains(word)).map(|(r, _)| *r)
    }

    /// What it means for the stage (SPEC §4.9–4.10).
    pub fn kind(self) -> StoreErrorKind {
        match self {
            Refusal::Fenced => StoreErrorKind::Fenced,
            Refusal::Forgot => StoreErrorKind::Forgot,
            Refusal::Moved => StoreErrorKind::Unavailable,
        }
    }
}

/// The kind of an error by what is known of it: its kind, the server's code and its text.
pub fn kind_of(kind: ErrorKind, code: Option<&str>, text: &str) -> StoreErrorKind {
    if let Some(refusal) = Refusal::of(text) {
        return refusal.kind();
    }
    if let Some(code) = code {
        if UNAVAILABLE_CODES.contains(&code) {
            return StoreErrorKind::Unavailable;
        }
    }
    match kind {
        ErrorKind::Io | ErrorKind::AuthenticationFailed | ErrorKind::ClusterConnectionNotFound => {
            StoreErrorKind::Unavailable
        }
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::ReadOnly,
        ) => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Rejected,
    }
}

pub fn classify(e: &RedisError) -> StoreError {
    let text = e.to_string();
    let mut kind = kind_of(e.kind(), e.code(), &text);
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        kind = StoreErrorKind::Unavailable;
    }
    StoreError::new(Store::Redis, kind, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use StoreErrorKind::{Fenced, Rejected, Unavailable};

    #[test]
    fn error_kinds_and_codes_case_by_case() {
        let cases: &[(ErrorKind, Option<&str>, &str, StoreErrorKind)] = &[
            (ErrorKind::Io, None, "connection refused", Unavailable),
            (ErrorKind::Io, None, "broken pipe", Unavailable),
            (ErrorKind::AuthenticationFailed, None, "WRONGPASS", Unavailable),
            (
                ErrorKind::Server(ServerErrorKind::BusyLoading),
                Some("LOADING"),
                "LOADING Redis is loading",
                Unavailable,
            ),
            (ErrorKind::Server(ServerErrorKind::TryAgain), Some("TRYAGAIN"), "TRYAGAIN", Unavailable),
            (ErrorKind::Server(ServerErrorKind::MasterDown), Some("MASTERDOWN"), "MASTERDOWN", Unavailable),
            (ErrorKind::Server(ServerErrorKind::ReadOnly), Some("READONLY"), "READONLY replica", Unavailable),
            (ErrorKind::Extension, Some("OOM"), "OOM command not allowed", Unavailable),
            (ErrorKind::Extension, Some("MISCONF"), "MISCONF cannot persist", Unavailable),
            (ErrorKind::Extension, Some("BUSY"), "BUSY Redis is busy running a script", Unavailable),
            (
                ErrorKind::Server(ServerErrorKind::ResponseError),
                Some("ERR"),
                "ERR MSGX_FENCED epoch 4 holds",
                Fenced,
            ),
            (
                ErrorKind::Server(ServerErrorKind::ResponseError),
                Some("ERR"),
                "ERR Error running script: bad value",
                Rejected,
            ),
            (ErrorKind::Extension, Some("MSGX_MOVED"), "MSGX_MOVED redis was written since", Unavailable),
            (ErrorKind::Extension, Some("WRONGTYPE"), "WRONGTYPE Operation against a key", Rejected),
            (
                ErrorKind::Server(ServerErrorKind::NoPerm),
                Some("NOPERM"),
                "NOPERM this user has no permissions",
                Rejected,
            ),
            (ErrorKind::Parse, None, "unexpected reply", Rejected),
            (ErrorKind::Extension, Some("SOMETHINGNEW"), "an unknown code counts as rejected", Rejected),
        ];
        for (kind, code, text, want) in cases {
            assert_eq!(kind_of(*kind, *code, text), *want, "{kind:?} {code:?} {text}");
        }
    }

    #[test]
    fn a_real_connection_refusal_is_unavailable() {
        let Err(e) = redis::Client::open("redis://127.0.0.1:1/")
            .unwrap()
            .get_connection_with_timeout(std::time::Duration::from_millis(200))
        else {
            panic!("nothing listens on port 1")
        };
        assert_eq!(classify(&e).kind, Unavailable, "{e}");
    }
}
