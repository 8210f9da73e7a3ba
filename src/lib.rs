//! msgx: upstream message-processing middleware for airport operations.
//!
//! Upstream systems write AODB "SIS" XML messages into a shared MySQL mailbox (`CMINMSGS`).
//! msgx polls them ([`ingress`]), keeps per-message state in its own PostgreSQL with strict
//! FIFO ([`pump`]), decodes them ([`codec`]), decides what they mean per flight
//! ([`handlers`], pure), keeps live flight state in Redis, writes an outbox, delivers it to
//! Kafka ([`dispatch`]) and marks each mailbox row processed ([`backfill`]).
//! See docs/architecture.md for the map.

/// The options the binary gives its allocator, jemalloc (`malloc_conf`, src/main.rs): one
/// arena (#23, docs/performance.md). Here, not in the binary, so that the e2e bench's floor,
/// which runs in the bench's own process, takes the same ones. The library itself chooses no
/// allocator.
pub const ALLOCATOR_OPTIONS: &[u8; 10] = b"narenas:1\0";

pub mod backfill;
pub mod clock;
pub mod codec;
pub mod config;
pub mod consistency;
pub mod daemon;
pub mod dispatch;
pub mod domain;
pub mod error;
pub mod exit;
#[doc(hidden)]
pub mod fixtures;
pub mod handlers;
pub mod health;
pub mod http;
pub mod ingress;
pub mod instance;
pub mod jobs;
pub mod lease;
pub mod lineage;
pub mod listener;
pub mod logline;
pub mod logpipe;
pub mod ops;
mod planted;
pub mod policy;
pub mod ports;
pub mod pump;
pub mod requests;
pub mod schema;
pub mod secret;
#[cfg(test)]
mod sim;
pub mod stage;
pub mod stats;
pub mod store;
#[cfg(test)]
mod testkit;
