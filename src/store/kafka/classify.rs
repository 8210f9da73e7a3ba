//! librdkafka errors → [`StoreErrorKind`] (SPEC §4.9), one table.
//!
//! Unavailable: the broker cannot be reached or answers that it cannot take records right now
//! — transport failures, every broker down, name resolution, local and request timeouts
//! (`MSG_TIMED_OUT` included: the producer's own timeout only bounds one round), no leader, not
//! enough replicas, a storage error, throttling, a full local queue, and the idempotent
//! producer's own troubles (fatal errors, unknown producer id, out-of-order sequence, fenced
//! epochs: the producer is recreated and the unacknowledged records go again, in order). An
//! unknown topic is unavailable too: it may be created, and nothing is lost while it is not.
//! Rejected: the broker refused this record — too large (`MSG_SIZE_TOO_LARGE`), invalid or
//! corrupt, an invalid timestamp, a topic name or an authorization it refuses — and every code
//! the table does not know.

use crate::error::Store;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};

use crate::error::{StoreError, StoreErrorKind};

const UNAVAILABLE: &[C] = &[
    C::BrokerTransportFailure,
    C::AllBrokersDown,
    C::Resolve,
    C::MessageTimedOut,
    C::OperationTimedOut,
    C::TimedOutQueue,
    C::RequestTimedOut,
    C::NetworkException,
    C::BrokerNotAvailable,
    C::LeaderNotAvailable,
    C::NotLeaderForPartition,
    C::ReplicaNotAvailable,
    C::NotEnoughReplicas,
    C::NotEnoughReplicasAfterAppend,
    C::ISRInsufficient,
    C::KafkaStorageError,
    C::NotController,
    C::CoordinatorNotAvailable,
    C::CoordinatorLoadInProgress,
    C::NotCoordinator,
    C::ThrottlingQuotaExceeded,
    C::QueueFull,
    C::PurgeQueue,
    C::PurgeInflight,
    C::BrokerDestroy,
    C::DestroyBroker,
    C::Fatal,
    C::UnknownProducerId,
    C::OutOfOrderSequenceNumber,
    C::InvalidProducerEpoch,
    C::ProducerFenced,
    C::InvalidProducerIdMapping,
    C::FencedLeaderEpoch,
    C::UnknownLeaderEpoch,
    C::PreferredLeaderNotAvailable,
    C::EligibleLeadersNotAvailable,
    C::UnknownTopicOrPartition,
    C::UnknownTopic,
    C::UnknownPartition,
    C::WaitCache,
    C::Retry,
    C::InProgress,
    C::PreviousInProgress,
    C::NodeUpdate,
    C::State,
];

/// The kind of a librdkafka error code.
pub fn kind_of_code(code: C) -> StoreErrorKind {
    if UNAVAILABLE.contains(&code) {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Rejected
    }
}

/// An error without a librdkafka code: creating or configuring the client failed (nothing a
/// record caused, named here), or something this table does not know (rejected, as everywhere).
pub fn kind_without_code(e: &KafkaError) -> StoreErrorKind {
    match e {
        KafkaError::ClientCreation(_) | KafkaError::ClientConfig(..) => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Rejected,
    }
}

pub fn classify(e: &KafkaError) -> StoreError {
    let kind = match e.rdkafka_error_code() {
        Some(code) => kind_of_code(code),
        None => kind_without_code(e),
    };
    StoreError::new(Store::Kafka, kind, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use StoreErrorKind::{Rejected, Unavailable};

    #[test]
    fn codes_case_by_case() {
        let cases = [
            (C::BrokerTransportFailure, Unavailable, "transport"),
            (C::AllBrokersDown, Unavailable, "all brokers down"),
            (C::MessageTimedOut, Unavailable, "message timed out (the producer's own timeout)"),
            (C::RequestTimedOut, Unavailable, "request timed out"),
            (C::BrokerNotAvailable, Unavailable, "broker not available"),
            (C::LeaderNotAvailable, Unavailable, "leader not available"),
            (C::NotLeaderForPartition, Unavailable, "not leader"),
            (C::NotEnoughReplicas, Unavailable, "not enough replicas"),
            (C::NotEnoughReplicasAfterAppend, Unavailable, "not enough replicas after append"),
            (C::NetworkException, Unavailable, "network exception"),
            (C::QueueFull, Unavailable, "local queue full"),
            (C::Fatal, Unavailable, "idempotence fatal error: the producer is recreated"),
            (C::UnknownProducerId, Unavailable, "the broker forgot the producer id"),
            (C::OutOfOrderSequenceNumber, Unavailable, "out of order sequence"),
            (C::UnknownTopicOrPartition, Unavailable, "topic not there yet"),
            (C::MessageSizeTooLarge, Rejected, "MSG_SIZE_TOO_LARGE"),
            (C::InvalidRecord, Rejected, "INVALID_RECORD"),
            (C::InvalidMessage, Rejected, "corrupt message"),
            (C::MessageBatchTooLarge, Rejected, "record list too large"),
            (C::InvalidTimestamp, Rejected, "invalid timestamp"),
            (C::TopicAuthorizationFailed, Rejected, "topic authorization"),
            (C::ClusterAuthorizationFailed, Rejected, "cluster authorization"),
            (C::InvalidTopic, Rejected, "invalid topic"),
            (C::PolicyViolation, Rejected, "policy violation"),
            (C::Unknown, Rejected, "unknown counts as rejected"),
        ];
        for (code, kind, what) in cases {
            assert_eq!(kind_of_code(code), kind, "{code:?} {what}");
        }
    }

    #[test]
    fn delivery_errors_are_classified_by_their_code() {
        let e = KafkaError::MessageProduction(C::MessageSizeTooLarge);
        assert_eq!(classify(&e).kind, Rejected);
        let e = KafkaError::MessageProduction(C::MessageTimedOut);
        assert_eq!(classify(&e).kind, Unavailable);
        let e = KafkaError::ClientCreation("bad".into());
        assert_eq!(classify(&e).kind, Unavailable);
    }

    /// #21 item 5: an error no table knows is rejected in every store's table (SPEC §4.9).
    #[test]
    fn regression_an_unknown_error_without_a_code_is_rejected_as_in_every_table() {
        assert_eq!(classify(&KafkaError::Canceled).kind, Rejected);
        assert_eq!(classify(&KafkaError::NoMessageReceived).kind, Rejected);
    }

    #[test]
    fn every_code_is_listed_once() {
        let mut seen = std::collections::HashSet::new();
        for c in UNAVAILABLE {
            assert!(seen.insert(format!("{c:?}")), "{c:?} is listed twice");
        }
    }
}
