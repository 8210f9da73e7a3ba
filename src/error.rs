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
    /// No handler or capability for it yet: FAILED with backoff, replayable.
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

/// A failure of one of the stores (own PostgreSQL, the shared mailbox, Redis, Kafka).
/// Always class INFRA for the message or event at hand; the `store` names which one broke.
#[derive(Debug, thiserror::Error)]
#[error("{store}: {detail}")]
pub struct StoreError {
    pub store: &'static str,
    pub detail: String,
}

impl StoreError {
    pub fn new(store: &'static str, detail: impl fmt::Display) -> Self {
        StoreError { store, detail: detail.to_string() }
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        // `Display` of a db error is only its message; the code and detail help at 3 a.m.
        let detail = match e.as_db_error() {
            Some(db) => format!(
                "{} ({}){}",
                db.message(),
                db.code().code(),
                match db.detail() {
                    Some(d) => format!(": {d}"),
                    None => String::new(),
                }
            ),
            None => e.to_string(),
        };
        StoreError { store: "postgres", detail }
    }
}

impl From<mysql::Error> for StoreError {
    fn from(e: mysql::Error) -> Self {
        StoreError::new("mailbox", e)
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        StoreError::new("redis", e)
    }
}

impl From<rdkafka::error::KafkaError> for StoreError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        StoreError::new("kafka", e)
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
