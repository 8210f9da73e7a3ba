//! The spec's error classes (SPEC §3) and the typed errors of the stores.
//!
//! Every failure that touches a message or an event ends up as one [`ErrorClass`]; the class
//! decides the outcome (DEAD at once, or FAILED with backoff) and whether `msgx replay` may
//! bring the row back.

use std::fmt;

/// Why a message or an event did not succeed. Stored in `ERROR_CLASS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Not XML, raw text missing, required payload missing: DEAD at once, never replayed.
    Malformed,
    /// Payload present but the package breaks the protocol: DEAD at once, never replayed.
    Protocol,
    /// The decoder cannot handle it (yet): FAILED with backoff, replayable.
    CodecError,
    /// No handler or capability for it yet: DEAD at its first attempt (SPEC §3a; FAILED with
    /// backoff where `msgx.pipeline.retry-unsupported` keeps the ladder), replayable.
    Unsupported,
    /// A store, broker or other execution failure: FAILED with backoff, replayable.
    Infra,
    /// Attempts used up or head deadline passed: DEAD, replayable after review.
    Exhausted,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 6] = [
        ErrorClass::Malformed,
        ErrorClass::Protocol,
        ErrorClass::CodecError,
        ErrorClass::Unsupported,
        ErrorClass::Infra,
        ErrorClass::Exhausted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Malformed => "MALFORMED",
            ErrorClass::Protocol => "PROTOCOL",
            ErrorClass::CodecError => "CODEC_ERROR",
            ErrorClass::Unsupported => "UNSUPPORTED",
            ErrorClass::Infra => "INFRA",
            ErrorClass::Exhausted => "EXHAUSTED",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorClass> {
        ErrorClass::ALL.into_iter().find(|c| c.as_str().eq_ignore_ascii_case(s))
    }

    /// MALFORMED and PROTOCOL are final: retrying cannot change the verdict.
    pub fn is_fatal(self) -> bool {
        matches!(self, ErrorClass::Malformed | ErrorClass::Protocol)
    }

    /// The replay whitelist (SPEC §4.7).
    pub fn is_replayable(self) -> bool {
        !self.is_fatal()
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a store failure means for the message or event at hand (SPEC §4.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreErrorKind {
    /// The store could not be reached or could not answer (connection refused, reset or
    /// closed, a timeout, the server shutting down or loading, a broker that answers with a
    /// retriable error). Not the message's fault: the stage stalls and retries, nothing is
    /// charged an attempt, nothing becomes DEAD because of it.
    Unavailable,
    /// The store answered and refused this write (a constraint or value error, a record too
    /// large, an invalid record, an authorization refusal). Charged to the message or event
    /// that caused it, with the usual attempts, backoff and poison escalation. Errors that no
    /// table knows count as rejected.
    Rejected,
    /// This instance is no longer the single writer: a newer lease holder exists (PRE-5). Every
    /// stage stops and the process exits 1; nothing more is written.
    Fenced,
    /// The store cannot be trusted (#64): its TLS certificate is from another CA, does not name
    /// the host, has expired, or a file msgx must present (a CA, a client certificate, a secret)
    /// cannot be read. Waited out as an outage — nothing is charged, the stage retries, a
    /// certificate renewed on the server heals it — but said as an ERROR at once: it will not
    /// pass by itself.
    Untrusted,
    /// The store came back having forgotten what it acknowledged (own PostgreSQL behind a WAL
    /// position msgx saw, SPEC §4.10): every stage stops and the process exits 6; nothing more
    /// is written until a person decides.
    Forgot,
}

impl StoreErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Rejected => "rejected",
            StoreErrorKind::Fenced => "fenced",
            StoreErrorKind::Forgot => "forgot",
            StoreErrorKind::Untrusted => "untrusted",
        }
    }
}

/// The stores msgx talks to, as errors, outages and the stall board name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Store {
    /// Own PostgreSQL.
    Postgres,
    /// The shared MySQL mailbox (`CMINMSGS`, `COUTMSGS`).
    Mailbox,
    Redis,
    Kafka,
    /// This instance's lease, as the gate sees it.
    Lease,
    /// The compat HTTP listener's socket.
    CompatHttp,
    /// The daemon itself (a second instance's start-up refusal).
    Daemon,
}

impl Store {
    /// The name in log lines (`store=redis`) and on the stall board.
    pub fn name(self) -> &'static str {
        match self {
            Store::Postgres => "postgres",
            Store::Mailbox => "mailbox",
            Store::Redis => "redis",
            Store::Kafka => "kafka",
            Store::Lease => "lease",
            Store::CompatHttp => "compat-http",
            Store::Daemon => "daemon",
        }
    }

    pub const ALL: [Store; 7] = [
        Store::Postgres,
        Store::Mailbox,
        Store::Redis,
        Store::Kafka,
        Store::Lease,
        Store::CompatHttp,
        Store::Daemon,
    ];

    /// The store a [`Store::name`] names.
    pub fn parse(name: &str) -> Option<Store> {
        Store::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failure of one of the stores (own PostgreSQL, the shared mailbox, Redis, Kafka, the
/// lease). `store` names which one; `kind` decides who pays for it (SPEC §4.9). Each adapter
/// classifies its driver's errors with one table (`classify` in its module).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{store} {}: {detail}", kind.as_str())]
pub struct StoreError {
    pub store: Store,
    pub kind: StoreErrorKind,
    pub detail: String,
}

impl StoreError {
    pub fn new(store: Store, kind: StoreErrorKind, detail: impl fmt::Display) -> Self {
        StoreError { store, kind, detail: detail.to_string() }
    }

    pub fn unavailable(store: Store, detail: impl fmt::Display) -> Self {
        StoreError::new(store, StoreErrorKind::Unavailable, detail)
    }

    pub fn rejected(store: Store, detail: impl fmt::Display) -> Self {
        StoreError::new(store, StoreErrorKind::Rejected, detail)
    }

    pub fn fenced(store: Store, detail: impl fmt::Display) -> Self {
        StoreError::new(store, StoreErrorKind::Fenced, detail)
    }

    /// Away or untrusted: either way the store cannot be used now, no message or event is at
    /// fault, and the stage waits for it (SPEC §4.9).
    pub fn is_unavailable(&self) -> bool {
        matches!(self.kind, StoreErrorKind::Unavailable | StoreErrorKind::Untrusted)
    }

    pub fn is_untrusted(&self) -> bool {
        self.kind == StoreErrorKind::Untrusted
    }

    pub fn is_rejected(&self) -> bool {
        self.kind == StoreErrorKind::Rejected
    }

    pub fn is_fenced(&self) -> bool {
        self.kind == StoreErrorKind::Fenced
    }

    pub fn forgot(store: Store, detail: impl fmt::Display) -> Self {
        StoreError::new(store, StoreErrorKind::Forgot, detail)
    }

    /// Fenced or forgot: the stage must stop, never stall or retry.
    pub fn stops(&self) -> bool {
        matches!(self.kind, StoreErrorKind::Fenced | StoreErrorKind::Forgot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_round_trip() {
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(c.as_str()), Some(c));
            assert_eq!(ErrorClass::parse(&c.as_str().to_lowercase()), Some(c));
        }
        assert_eq!(ErrorClass::parse("ERROR"), None);
    }

    #[test]
    fn only_malformed_and_protocol_are_fatal() {
        let fatal: Vec<_> = ErrorClass::ALL.into_iter().filter(|c| c.is_fatal()).collect();
        assert_eq!(fatal, vec![ErrorClass::Malformed, ErrorClass::Protocol]);
        assert!(ErrorClass::Exhausted.is_replayable());
    }
}
