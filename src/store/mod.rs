//! Store adapters, one room each: own PostgreSQL, the shared MySQL mailbox, Redis flights,
//! the Kafka producer, and the in-memory twins of all of them.

#[doc(hidden)]
pub mod conformance;
pub mod flights;
pub mod kafka;
pub mod mailbox;
pub mod memory;
pub mod pg;
