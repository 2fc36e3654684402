//! How a broker follows the committed metadata log (issue 14, "Brokers"): it fetches the
//! records past the last one it applied from a controller, as Kafka's brokers fetch
//! `__cluster_metadata` from the quorum's leader.
//!
//! Any voter can answer: it serves only what it has applied, and it applies only what
//! the quorum committed. A broker too far behind (the records it wants are below what
//! the controller still keeps in memory) gets the whole image instead, and goes on from
//! the image's offset. Offsets are record offsets (`MetadataImage::applied`), the same
//! on every node.
//!
//! The messages travel as JSON under an Osprey-private API key on the CONTROLLER
//! listener (`crates/server/src/controller_node/rpc.rs`, `METADATA_FETCH`).

use super::types::ControllerEndpoint;
use crate::image::{MetadataImage, MetadataRecord};
use serde::{Deserialize, Serialize};

/// A broker's fetch: the records from `next_offset` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataFetchRequest {
    /// The fetching broker's `node.id` (for logs and metrics).
    pub broker_id: i32,
    /// The offset of the next record the broker wants: its image's `applied`.
    pub next_offset: u64,
    /// How long the controller may wait for a record at `next_offset` before answering
    /// with none (a long poll, as Kafka's `replica.fetch.wait.max.ms`).
    pub max_wait_ms: u64,
    /// The most records in one answer.
    pub max_records: u32,
}

/// A controller's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetadataFetchResponse {
    /// The active controller as the answering node knows it (`None` while there is
    /// none), so a broker finds where to register and heartbeat.
    pub leader: Option<LeaderHint>,
    /// The answering node's applied offset (its image's `applied`): a broker that just
    /// had a write answered by the active controller waits until its own image reaches
    /// the controller's, so its next answers show the write.
    #[serde(default)]
    pub applied: u64,
    pub content: MetadataFetchContent,
}

/// The node id and CONTROLLER endpoint of the active controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderHint {
    pub node_id: i32,
    pub endpoint: ControllerEndpoint,
}

/// What a fetch returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MetadataFetchContent {
    /// Records from `first_offset` (the request's `next_offset`) in log order; empty when
    /// none came within `max_wait_ms`, or when the answering node has applied less than
    /// the broker already has.
    Records { first_offset: u64, records: Vec<MetadataRecord> },
    /// The whole image as of its `applied` offset: the records the broker wants are no
    /// longer kept. The broker replaces its image and fetches from `image.applied`.
    Image { image: MetadataImage },
    /// The node cannot serve metadata (it has not joined a formed quorum yet, or is
    /// stopping): ask another.
    NotReady { why: String },
}

/// Why fetched content does not fit the image it is applied to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fetched records start at offset {first_offset}, the image is at {applied}")]
pub struct OffsetGap {
    pub first_offset: u64,
    pub applied: u64,
}

impl MetadataFetchContent {
    /// Applies the content to `image`: records in order, or the image replaced. Records
    /// that do not start at the image's offset are refused, so a broker never applies a
    /// record twice or skips one. Returns whether anything changed.
    pub fn apply_to(self, image: &mut MetadataImage) -> Result<bool, OffsetGap> {
        match self {
            MetadataFetchContent::Records { first_offset, records } => {
                if records.is_empty() {
                    return Ok(false);
                }
                if first_offset != image.applied {
                    return Err(OffsetGap { first_offset, applied: image.applied });
                }
                for r in &records {
                    image.apply(r);
                }
                Ok(true)
            }
            MetadataFetchContent::Image { image: whole } => {
                *image = whole;
                Ok(true)
            }
            MetadataFetchContent::NotReady { .. } => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producer_ids(next: i64) -> MetadataRecord {
        MetadataRecord::ProducerIdsAllocated { next }
    }

    #[test]
    fn records_apply_only_at_the_images_offset() {
        let mut image = MetadataImage::default();
        let first = MetadataFetchContent::Records { first_offset: 0, records: vec![producer_ids(1000)] };
        assert_eq!(first.apply_to(&mut image), Ok(true));
        assert_eq!((image.applied, image.next_producer_id), (1, 1000));
        let replayed = MetadataFetchContent::Records { first_offset: 0, records: vec![producer_ids(5)] };
        assert_eq!(replayed.apply_to(&mut image), Err(OffsetGap { first_offset: 0, applied: 1 }));
        let skipping = MetadataFetchContent::Records { first_offset: 2, records: vec![producer_ids(5)] };
        assert_eq!(skipping.apply_to(&mut image), Err(OffsetGap { first_offset: 2, applied: 1 }));
        assert_eq!((image.applied, image.next_producer_id), (1, 1000), "a refused fetch changes nothing");
        let none = MetadataFetchContent::Records { first_offset: 7, records: vec![] };
        assert_eq!(none.apply_to(&mut image), Ok(false));
    }

    #[test]
    fn an_image_replaces_what_the_broker_had_and_messages_round_trip() {
        let mut whole = MetadataImage::default();
        whole.apply(&producer_ids(3000));
        whole.apply(&producer_ids(4000));
        let response = MetadataFetchResponse {
            leader: Some(LeaderHint { node_id: 2, endpoint: ControllerEndpoint::new("127.0.0.1", 9093) }),
            applied: 2,
            content: MetadataFetchContent::Image { image: whole },
        };
        let json = serde_json::to_vec(&response).unwrap();
        let back: MetadataFetchResponse = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.leader, response.leader);
        let mut image = MetadataImage::default();
        image.apply(&producer_ids(1));
        assert_eq!(back.content.apply_to(&mut image), Ok(true));
        assert_eq!((image.applied, image.next_producer_id), (2, 4000));
    }
}
