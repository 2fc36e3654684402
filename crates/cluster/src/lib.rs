//! Cluster metadata for Osprey: which topics exist, their ids, partitions, replicas,
//! leaders, epochs and configs.
//!
//! The metadata is a state machine ([`MetadataImage`]) driven by records
//! ([`MetadataRecord`]); the [`Controller`] validates admin requests and turns them into
//! records; a [`MetadataLog`] makes records durable before they are applied. A single
//! node writes its own log today; [`quorum`] replicates the same records in batches with
//! openraft (a library, not yet wired to the server's sockets).
//!
//! Each partition's replication state on a broker (leader epoch, ISR, followers'
//! positions, high watermark, last stable offset) is a sans-I/O state machine,
//! [`replica::ReplicaState`], driven by the server.

pub mod acl;
pub mod alter_partition;
pub mod client_quotas;
pub mod cluster_control;
pub mod controller;
pub mod elect_leaders;
pub mod heartbeat;
pub mod image;
pub mod log;
pub mod meta_properties;
pub mod mutation_quota;
mod partition_change;
pub mod placement;
pub mod quorum;
pub mod reassignment;
pub mod replica;
#[cfg(test)]
mod test_support;
pub mod topic_control;

pub use alter_partition::{
    AlterPartitionInput, AlterPartitionItem, AlterPartitionResult, AlterPartitionTopic, AlterPartitionTopicResult,
};
pub use cluster_control::{
    BrokerHeartbeatInput, BrokerHeartbeatReply, BrokerRegistrationInput, ClusterControl, ClusterControlConfig,
    ControllerResult,
};
pub use controller::{Controller, ControllerError, NewTopic};
pub use image::{
    BrokerListener, BrokerRegistration, MetadataImage, MetadataRecord, PartitionImage, ScramCredentialImage, TopicImage,
};
pub use log::MetadataLog;
pub use meta_properties::MetaProperties;
