//! The controller quorum (issue 14; crates/cluster/DESIGN.md, "The controller quorum"):
//! openraft, with its log on Osprey's storage layer, the metadata image as its state
//! machine and its RPCs behind a transport the server provides.

pub mod bootstrap;
mod election;
pub mod fetch;
mod files;
pub mod handle;
pub mod log_store;
pub mod network;
pub mod runtime;
pub mod state_machine;
pub mod types;

pub use bootstrap::{decide_bootstrap, BootstrapDecision, Hello};
pub use fetch::{LeaderHint, MetadataFetchContent, MetadataFetchRequest, MetadataFetchResponse};
pub use handle::{ProposeError, Quorum, QuorumConfig, QuorumError};
pub use log_store::{LogStore, METADATA_LOG_DIR_NAME};
pub use network::{decode_reply, decode_rpc, encode_reply, encode_rpc, DecodeRpcError, RaftRpc, RaftRpcReply};
pub use network::{Transport, TransportError};
pub use runtime::seed_thread_rng;
pub use state_machine::{AppliedEvent, AppliedImage, AppliedView};
pub use types::{BatchApplied, ControllerEndpoint, MetadataBatch, QuorumTypes, ReplicaKey};

#[cfg(test)]
mod storage_tests;
