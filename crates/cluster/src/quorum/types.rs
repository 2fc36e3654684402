//! The types openraft is instantiated with: who a voter is (KIP-853's replica key), where
//! it listens, what one log entry carries and what its proposer gets back.

use crate::image::MetadataRecord;
use osprey_protocol::Uuid;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::Cursor;

openraft::declare_raft_types!(
    /// openraft's type configuration for the controller quorum.
    pub QuorumTypes:
        D = MetadataBatch,
        R = BatchApplied,
        NodeId = ReplicaKey,
        Node = ControllerEndpoint,
        Entry = openraft::Entry<QuorumTypes>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = super::runtime::QuorumRuntime,
);

/// A member of the quorum: Kafka's replica key of KIP-853, `(node.id, directory id)`.
///
/// The directory id is created with the metadata directory, so a node that lost its disk
/// comes back as a different replica key: it cannot vote again in a term it already voted
/// in as the old key, because to openraft it is somebody else.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct ReplicaKey {
    /// Kafka's `node.id`. First in the ordering, so keys sort by node id.
    pub node_id: i32,
    /// The metadata directory's id (`directory.id` in `meta.properties`).
    pub directory_id: [u8; 16],
}

impl ReplicaKey {
    pub fn new(node_id: i32, directory_id: [u8; 16]) -> ReplicaKey {
        ReplicaKey { node_id, directory_id }
    }
}

impl fmt::Display for ReplicaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node_id, Uuid(self.directory_id))
    }
}

impl fmt::Debug for ReplicaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// openraft's storage test suite names nodes by number; the directory id is left zero.
impl From<u64> for ReplicaKey {
    fn from(n: u64) -> ReplicaKey {
        ReplicaKey { node_id: n as i32, directory_id: [0; 16] }
    }
}

/// Where a member of the quorum receives openraft's RPCs: a controller's CONTROLLER
/// listener (voters) or a broker's (learners).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ControllerEndpoint {
    pub host: String,
    pub port: u16,
}

impl ControllerEndpoint {
    pub fn new(host: impl Into<String>, port: u16) -> ControllerEndpoint {
        ControllerEndpoint { host: host.into(), port }
    }
}

impl fmt::Display for ControllerEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The application data of one log entry: records applied atomically, as one of Kafka's
/// metadata record batches (a CreateTopics of several topics is one batch).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MetadataBatch {
    pub records: Vec<MetadataRecord>,
}

impl MetadataBatch {
    pub fn new(records: Vec<MetadataRecord>) -> MetadataBatch {
        MetadataBatch { records }
    }
}

impl fmt::Display for MetadataBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MetadataBatch({} records)", self.records.len())
    }
}

/// What the proposer of a batch gets once it is committed and applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchApplied {
    /// The batch's index in the metadata log (the metadata offset brokers report).
    pub index: u64,
    /// The term of the leader that wrote it.
    pub term: u64,
}

/// openraft's log entry for the quorum.
pub type QuorumEntry = openraft::Entry<QuorumTypes>;
/// A log position (term, leader, index).
pub type QuorumLogId = openraft::LogId<ReplicaKey>;
/// openraft's storage error for the quorum.
pub type QuorumStorageError = openraft::StorageError<ReplicaKey>;
/// The membership as stored with its log position.
pub type QuorumMembership = openraft::StoredMembership<ReplicaKey, ControllerEndpoint>;
