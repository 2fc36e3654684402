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
use std::collections::VecDeque;

/// The most recently applied records a node keeps for fetching brokers (about the
/// records of a few thousand topic creations): a broker further behind gets the image.
pub const RECORD_TAIL_CAPACITY: usize = 10_000;
/// The most records one fetch answer carries, whatever the request asks.
pub const MAX_FETCH_RECORDS: u32 = 5_000;
/// The longest a fetch waits for new records, whatever the request asks: the broker
/// asks again, and a connection is not held by one request for long.
pub const MAX_FETCH_WAIT_MS: u64 = 5_000;

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
    Image { image: Box<MetadataImage> },
    /// The node cannot serve metadata (it has not joined a formed quorum yet, or is
    /// stopping): ask another.
    NotReady { why: String },
}

/// The most recently applied records with their offsets: what a node serves fetching
/// brokers from. Fed in log order as batches are applied (openraft's own entries carry
/// no records and add nothing); reset when a snapshot replaces the image, since the
/// records before it are no longer known here.
#[derive(Debug, Clone)]
pub struct RecordTail {
    /// The offset of `records[0]` (the next record's offset when empty).
    first_offset: u64,
    records: VecDeque<MetadataRecord>,
    capacity: usize,
}

/// What the tail holds for a fetch from some offset.
#[derive(Debug, Clone, PartialEq)]
pub enum TailRead {
    /// Records from the requested offset (at least one).
    Records(Vec<MetadataRecord>),
    /// The offset is below the tail: only the whole image can bring the broker up.
    BelowTail,
    /// Nothing at or past the offset has been applied yet.
    NothingNew,
}

impl RecordTail {
    /// An empty tail whose next record will be at `next_offset`, keeping at most
    /// `capacity` records (at least one).
    pub fn new(next_offset: u64, capacity: usize) -> RecordTail {
        RecordTail { first_offset: next_offset, records: VecDeque::new(), capacity: capacity.max(1) }
    }

    /// The offset the next record applied gets.
    pub fn next_offset(&self) -> u64 {
        self.first_offset + self.records.len() as u64
    }

    /// The offset of the oldest record kept.
    pub fn first_offset(&self) -> u64 {
        self.first_offset
    }

    /// Appends the records of one applied batch, dropping the oldest beyond capacity.
    pub fn push(&mut self, records: &[MetadataRecord]) {
        for r in records {
            if self.records.len() == self.capacity {
                self.records.pop_front();
                self.first_offset += 1;
            }
            self.records.push_back(r.clone());
        }
    }

    /// Forgets every record: the image was replaced by one at `next_offset`.
    pub fn reset(&mut self, next_offset: u64) {
        self.records.clear();
        self.first_offset = next_offset;
    }

    /// At most `max_records` (bounded by [`MAX_FETCH_RECORDS`], at least one) records
    /// from `offset` on.
    pub fn read(&self, offset: u64, max_records: u32) -> TailRead {
        if offset < self.first_offset {
            return TailRead::BelowTail;
        }
        if offset >= self.next_offset() {
            return TailRead::NothingNew;
        }
        let skip = (offset - self.first_offset) as usize;
        let take = max_records.clamp(1, MAX_FETCH_RECORDS) as usize;
        TailRead::Records(self.records.iter().skip(skip).take(take).cloned().collect())
    }
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
            // A controller sends the image only to a broker behind it; an older image than
            // the broker's own would take back records it applied, and is refused.
            MetadataFetchContent::Image { image: whole } if whole.applied < image.applied => {
                Err(OffsetGap { first_offset: whole.applied, applied: image.applied })
            }
            MetadataFetchContent::Image { image: whole } => {
                *image = *whole;
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
    fn the_tail_reads_from_any_offset_it_holds_and_sends_older_ones_to_the_image() {
        let mut tail = RecordTail::new(0, 4);
        assert_eq!(tail.read(0, 10), TailRead::NothingNew);
        tail.push(&[producer_ids(1), producer_ids(2)]);
        tail.push(&[]);
        tail.push(&[producer_ids(3)]);
        assert_eq!(tail.next_offset(), 3, "offsets run across batches; an empty batch adds none");
        assert_eq!(tail.read(1, 10), TailRead::Records(vec![producer_ids(2), producer_ids(3)]));
        assert_eq!(tail.read(0, 1), TailRead::Records(vec![producer_ids(1)]));
        assert_eq!(tail.read(3, 10), TailRead::NothingNew);
        assert_eq!(tail.read(9, 10), TailRead::NothingNew, "ahead of this node: nothing to give");
        tail.push(&[producer_ids(4), producer_ids(5)]);
        assert_eq!((tail.first_offset(), tail.next_offset()), (1, 5), "capacity 4: the oldest is dropped");
        assert_eq!(tail.read(0, 10), TailRead::BelowTail);
        assert_eq!(tail.read(4, 10), TailRead::Records(vec![producer_ids(5)]));
        tail.reset(40);
        assert_eq!((tail.read(5, 10), tail.read(40, 10)), (TailRead::BelowTail, TailRead::NothingNew));
    }

    #[test]
    fn a_read_is_bounded_whatever_it_asks() {
        let mut tail = RecordTail::new(0, RECORD_TAIL_CAPACITY);
        let many: Vec<MetadataRecord> = (0..RECORD_TAIL_CAPACITY as i64).map(producer_ids).collect();
        tail.push(&many);
        match tail.read(0, u32::MAX) {
            TailRead::Records(r) => assert_eq!(r.len(), MAX_FETCH_RECORDS as usize),
            other => panic!("{other:?}"),
        }
        match tail.read(0, 0) {
            TailRead::Records(r) => assert_eq!(r.len(), 1, "asking for none still makes progress"),
            other => panic!("{other:?}"),
        }
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
    fn an_image_older_than_the_brokers_is_refused() {
        let mut older = MetadataImage::default();
        older.apply(&producer_ids(10));
        let mut image = MetadataImage::default();
        image.apply(&producer_ids(20));
        image.apply(&producer_ids(30));
        let content = MetadataFetchContent::Image { image: Box::new(older) };
        assert_eq!(content.apply_to(&mut image), Err(OffsetGap { first_offset: 1, applied: 2 }));
        assert_eq!((image.applied, image.next_producer_id), (2, 30), "a refused image changes nothing");
    }

    #[test]
    fn an_image_replaces_what_the_broker_had_and_messages_round_trip() {
        let mut whole = MetadataImage::default();
        whole.apply(&producer_ids(3000));
        whole.apply(&producer_ids(4000));
        let response = MetadataFetchResponse {
            leader: Some(LeaderHint { node_id: 2, endpoint: ControllerEndpoint::new("127.0.0.1", 9093) }),
            applied: 2,
            content: MetadataFetchContent::Image { image: Box::new(whole) },
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
