//! The controller side of a node (`process.roles` containing `controller`): the openraft
//! quorum of crates/cluster, its network over the CONTROLLER listener, and the active
//! controller serving Kafka's controller APIs (crates/cluster/DESIGN.md).

pub mod active;
pub mod apis;
mod decisions;

pub use active::{ActiveController, ActiveControllerConfig};
