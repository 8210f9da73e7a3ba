//! The integration tests: one crate, a module per file (#66). Each file was a crate of its own,
//! compiling `tests/common` and linking the library with librdkafka once per file; one crate
//! compiles and links them once. Each test still runs in a process of its own (nextest).

mod common;

mod cli;
mod console;
mod contract;
mod dispatch;
mod false_alarms;
mod flights_store;
mod forgetful;
mod handlers;
mod heal_fenced;
mod hostile;
mod ingress_backfill;
mod kafka_cluster;
mod layers;
mod lease;
mod lineage;
mod mailbox_store;
mod metrics;
mod migrations;
mod monitoring;
mod ops_listener;
mod outages;
mod pipeline;
mod platform;
mod proc_store;
mod producer_store;
mod reference;
mod replicas;
mod requests;
mod samples;
mod snapshots;
mod systemd;
mod tls;
mod upgrade;
