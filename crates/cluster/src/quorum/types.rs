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
///
/// In JSON it is the string `"<node.id>:<directory id in hex>"`: openraft keeps node ids as
/// map keys (the membership's nodes), and JSON map keys are strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
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

impl Serialize for ReplicaKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut text = format!("{}:", self.node_id);
        for b in self.directory_id {
            text.push_str(&format!("{b:02x}"));
        }
        s.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for ReplicaKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ReplicaKey, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        ReplicaKey::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("not a replica key: {text:?}")))
    }
}

impl ReplicaKey {
    /// Parses `"<node.id>:<32 hex digits>"`; `None` for anything else.
    fn parse(text: &str) -> Option<ReplicaKey> {
        let (node, hex) = text.split_once(':')?;
        let node_id = node.parse().ok()?;
        if hex.len() != 32 || !hex.is_ascii() {
            return None;
        }
        let mut directory_id = [0u8; 16];
        for (i, byte) in directory_id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ReplicaKey { node_id, directory_id })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_key_is_a_json_string_and_parses_back() {
        let key = ReplicaKey::new(-3, [0xab; 16]);
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, format!("\"-3:{}\"", "ab".repeat(16)));
        assert_eq!(serde_json::from_str::<ReplicaKey>(&json).unwrap(), key);
        for bad in [
            "\"1\"",
            "\"1:zz\"",
            "\"x:00000000000000000000000000000000\"",
            "\"1:é0000000000000000000000000000000\"",
            "7",
        ] {
            assert!(serde_json::from_str::<ReplicaKey>(bad).is_err(), "{bad}");
        }
    }
}
