//! The records of `__share_group_state` in Kafka's exact formats: a key prefixed by its
//! record type (ShareSnapshot 0, ShareUpdate 1, Kafka's `CoordinatorRecordType`) and a
//! value prefixed by its version (0). A tombstone is a `ShareSnapshotKey` with no value.

use super::{ShareKey, ShareState, ShareUpdate, StateBatch, StateRecord};
use crate::group::records::versioned;
use crate::group::Record;
use bytes::{Buf, Bytes};
use osprey_protocol::messages::share_snapshot_value::StateBatch as SnapshotBatch;
use osprey_protocol::messages::share_update_value::StateBatch as UpdateBatch;
use osprey_protocol::messages::{ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue};
use osprey_protocol::Message;

/// The key prefix of a `ShareSnapshot` record.
const SNAPSHOT_RECORD_TYPE: i16 = 0;
/// The key prefix of a `ShareUpdate` record.
const UPDATE_RECORD_TYPE: i16 = 1;
const VALUE_VERSION: i16 = 0;

/// A record of `__share_group_state` this coordinator could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed __share_group_state record: {0}")]
pub struct StateLoadError(pub String);

impl StateRecord {
    /// The record's key and value as written to `__share_group_state`.
    pub fn to_record(&self) -> Record {
        match self {
            StateRecord::Snapshot(key, state) => Record {
                key: snapshot_key(key),
                value: Some(versioned(
                    &ShareSnapshotValue {
                        snapshot_epoch: state.snapshot_epoch,
                        state_epoch: state.state_epoch,
                        leader_epoch: state.leader_epoch,
                        start_offset: state.start_offset,
                        delivery_complete_count: state.delivery_complete_count,
                        create_timestamp: state.create_timestamp,
                        write_timestamp: state.write_timestamp,
                        state_batches: state.batches.iter().map(snapshot_batch).collect(),
                        ..Default::default()
                    },
                    VALUE_VERSION,
                )),
            },
            StateRecord::Update(key, update) => Record {
                key: versioned(
                    &ShareUpdateKey {
                        group_id: key.group_id.clone(),
                        topic_id: key.topic_id,
                        partition: key.partition,
                    },
                    UPDATE_RECORD_TYPE,
                ),
                value: Some(versioned(
                    &ShareUpdateValue {
                        snapshot_epoch: update.snapshot_epoch,
                        leader_epoch: update.leader_epoch,
                        start_offset: update.start_offset,
                        delivery_complete_count: update.delivery_complete_count,
                        state_batches: update.batches.iter().map(update_batch).collect(),
                        ..Default::default()
                    },
                    VALUE_VERSION,
                )),
            },
            StateRecord::Tombstone(key) => Record { key: snapshot_key(key), value: None },
        }
    }

    /// Reads a record of `__share_group_state`; `Ok(None)` for a record type this
    /// coordinator does not know (skipped, as Kafka's shard skips them).
    pub fn from_record(key: Bytes, value: Option<Bytes>) -> Result<Option<StateRecord>, StateLoadError> {
        let mut key = key;
        if key.len() < 2 {
            return Err(StateLoadError("key shorter than its record type".into()));
        }
        let record_type = key.get_i16();
        let bad = |e: osprey_protocol::DecodeError| StateLoadError(e.to_string());
        match record_type {
            SNAPSHOT_RECORD_TYPE => {
                let k = ShareSnapshotKey::decode_exact(key, record_type).map_err(bad)?;
                let key = ShareKey { group_id: k.group_id, topic_id: k.topic_id, partition: k.partition };
                let Some(value) = value else { return Ok(Some(StateRecord::Tombstone(key))) };
                let v: ShareSnapshotValue = decode_value(value)?;
                let state = ShareState {
                    snapshot_epoch: v.snapshot_epoch,
                    state_epoch: v.state_epoch,
                    leader_epoch: v.leader_epoch,
                    start_offset: v.start_offset,
                    delivery_complete_count: v.delivery_complete_count,
                    create_timestamp: v.create_timestamp,
                    write_timestamp: v.write_timestamp,
                    batches: v
                        .state_batches
                        .iter()
                        .map(|b| batch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count))
                        .collect(),
                };
                Ok(Some(StateRecord::Snapshot(key, state)))
            }
            UPDATE_RECORD_TYPE => {
                let k = ShareUpdateKey::decode_exact(key, record_type).map_err(bad)?;
                let key = ShareKey { group_id: k.group_id, topic_id: k.topic_id, partition: k.partition };
                // Kafka writes update tombstones never; one read here is skipped.
                let Some(value) = value else { return Ok(None) };
                let v: ShareUpdateValue = decode_value(value)?;
                let update = ShareUpdate {
                    snapshot_epoch: v.snapshot_epoch,
                    leader_epoch: v.leader_epoch,
                    start_offset: v.start_offset,
                    delivery_complete_count: v.delivery_complete_count,
                    batches: v
                        .state_batches
                        .iter()
                        .map(|b| batch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count))
                        .collect(),
                };
                Ok(Some(StateRecord::Update(key, update)))
            }
            _ => Ok(None),
        }
    }
}

fn snapshot_key(key: &ShareKey) -> Bytes {
    versioned(
        &ShareSnapshotKey { group_id: key.group_id.clone(), topic_id: key.topic_id, partition: key.partition },
        SNAPSHOT_RECORD_TYPE,
    )
}

fn snapshot_batch(b: &StateBatch) -> SnapshotBatch {
    SnapshotBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        delivery_state: b.delivery_state,
        delivery_count: b.delivery_count,
        ..Default::default()
    }
}

fn update_batch(b: &StateBatch) -> UpdateBatch {
    UpdateBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        delivery_state: b.delivery_state,
        delivery_count: b.delivery_count,
        ..Default::default()
    }
}

fn batch(first_offset: i64, last_offset: i64, delivery_state: i8, delivery_count: i16) -> StateBatch {
    StateBatch { first_offset, last_offset, delivery_state, delivery_count }
}

/// A versioned value, as the group coordinator's records are read (a newer version as our
/// newest, a negative one refused).
fn decode_value<M: Message>(value: Bytes) -> Result<M, StateLoadError> {
    crate::group::records::decode_value(value).map_err(|e| StateLoadError(e.0))
}
