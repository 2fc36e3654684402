//! The Osprey broker as a library, so its parts can be tested from `tests/`; the
//! `osprey` binary (`main.rs`) is a thin wrapper around it.

pub mod access;
pub mod authorization;
pub mod authorized_operations;
pub mod authorizer;
pub mod background;
pub mod broker;
pub mod cluster_link;
pub mod config;
pub mod config_changes;
pub mod connection_slots;
pub mod controller_listener;
pub mod controller_node;
pub mod coordinator_appends;
pub mod coordinator_leadership;
pub mod dispatch;
pub mod envelope;
pub mod fetch_session;
pub mod groups;
pub mod handlers;
pub mod interbroker;
pub mod log_deleter;
pub mod log_limit;
pub mod logging;
pub mod metadata_cache;
pub mod network;
pub mod partition;
pub mod quota;
pub mod refused_batches;
pub mod replica_manager;
pub mod replication;
pub mod replies;
pub mod sasl;
pub mod send_file;
pub mod share_dlq;
pub mod share_partitions;
pub mod share_persister;
pub mod share_sessions;
pub mod share_states;
pub mod supported;
pub mod telemetry;
#[cfg(test)]
mod test_support;
pub mod tls;
pub mod transactions;
pub mod txn_interbroker;
