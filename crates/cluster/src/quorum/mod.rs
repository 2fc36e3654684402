//! The controller quorum (issue 14; crates/cluster/DESIGN.md, "The controller quorum"):
//! openraft, with its log on Osprey's storage layer, the metadata image as its state
//! machine and its RPCs behind a transport the server provides.

mod files;
pub mod log_store;
pub mod runtime;
pub mod state_machine;
pub mod types;

pub use log_store::{LogStore, METADATA_LOG_DIR_NAME};
pub use types::{BatchApplied, ControllerEndpoint, MetadataBatch, QuorumTypes, ReplicaKey};

#[cfg(test)]
mod storage_tests;
