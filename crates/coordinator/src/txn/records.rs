//! The `__transaction_state` records, in Kafka's exact formats, and replay on load.
//!
//! Key = int16 version + `TransactionLogKey` (version 0); value = int16 version +
//! `TransactionLogValue`; a `None` value is a tombstone (an expired transactional id).
//! Transaction-version-1 values are written at version 0, as Kafka does until
//! `transaction.version` 1 is finalized, so every Kafka version reads them. A transaction
//! of transaction version 2 exists only where `transaction.version` 2 is finalized, so its
//! values are version 1 with `client_transaction_version` (Kafka's
//! `TransactionVersion.transactionLogValueVersion`), and `next_producer_id` while a
//! completion is to rotate the producer id; both load back.
//! An `Empty` value has null `transaction_partitions`, as Kafka writes it.

use super::state::{TopicPartition, TxnMetadata, TxnState, TxnTransit, NO_PRODUCER_EPOCH};
use crate::group::Record;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use osprey_protocol::messages::transaction_log_value::PartitionsSchema;
use osprey_protocol::messages::{TransactionLogKey, TransactionLogValue};
use osprey_protocol::Message;
use std::collections::{BTreeMap, BTreeSet};

const KEY_VERSION: i16 = 0;

fn versioned<M: Message>(message: &M, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    // Built here from validated state; an encode failure is a bug.
    message.encode(&mut buf, version).expect("internal record encodes");
    buf.freeze()
}

pub(super) fn key(transactional_id: &str) -> Bytes {
    versioned(&TransactionLogKey { transactional_id: transactional_id.to_string() }, KEY_VERSION)
}

/// The record of a prepared transition (Kafka's `TransactionLog.valueToBytes`).
pub(super) fn transit_record(transactional_id: &str, transit: &TxnTransit) -> Record {
    if transit.state == TxnState::Dead {
        return Record { key: key(transactional_id), value: None };
    }
    assert!(
        transit.state != TxnState::Empty || transit.partitions.is_empty(),
        "{transactional_id}: an Empty transaction has no partitions"
    );
    let partitions = (transit.state != TxnState::Empty).then(|| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (topic, partition) in &transit.partitions {
            by_topic.entry(topic).or_default().push(*partition);
        }
        by_topic
            .into_iter()
            .map(|(topic, partition_ids)| PartitionsSchema {
                topic: topic.to_string(),
                partition_ids,
                ..Default::default()
            })
            .collect()
    });
    let value = TransactionLogValue {
        producer_id: transit.producer_id,
        producer_epoch: transit.producer_epoch,
        transaction_timeout_ms: transit.txn_timeout_ms,
        transaction_status: transit.state.id(),
        transaction_partitions: partitions,
        transaction_last_update_timestamp_ms: transit.txn_last_update_ms,
        transaction_start_timestamp_ms: transit.txn_start_ms,
        ..Default::default()
    };
    let (value, version) = if transit.client_transaction_version >= 1 {
        // Kafka writes `next_producer_id` nowhere; kept here so that a coordinator taking
        // over between a rotating PrepareCommit / PrepareAbort and its completion still
        // rotates (Kafka's loader reads the field).
        let value = TransactionLogValue {
            client_transaction_version: transit.client_transaction_version,
            next_producer_id: transit.next_producer_id,
            ..value
        };
        (value, 1)
    } else {
        (value, 0)
    };
    Record { key: key(transactional_id), value: Some(versioned(&value, version)) }
}

/// A record of `__transaction_state` this coordinator could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed __transaction_state record: {0}")]
pub struct LoadError(pub String);

/// What a load found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// Transactional ids restored.
    pub transactional_ids: usize,
    /// Prepared transactions whose markers are sent again.
    pub completing: usize,
    /// Records with a key version this coordinator does not know, left alone.
    pub skipped: usize,
}

/// Replays a partition's records, oldest first: the last value of each id wins, a
/// tombstone removes it (Kafka's `loadTransactionMetadata`).
pub(super) fn replay(
    records: impl IntoIterator<Item = Record>,
    skipped: &mut usize,
) -> Result<BTreeMap<String, TxnMetadata>, LoadError> {
    let mut loaded = BTreeMap::new();
    for record in records {
        let mut key_bytes = record.key;
        if key_bytes.len() < 2 {
            return Err(LoadError("key shorter than its version".into()));
        }
        let version = key_bytes.get_i16();
        if version != KEY_VERSION {
            *skipped += 1;
            continue;
        }
        let key = TransactionLogKey::decode_exact(key_bytes, version).map_err(|e| LoadError(e.to_string()))?;
        match record.value {
            None => {
                loaded.remove(&key.transactional_id);
            }
            Some(value) => {
                let metadata = decode_value(&key.transactional_id, value)?;
                loaded.insert(key.transactional_id, metadata);
            }
        }
    }
    Ok(loaded)
}

/// Kafka's `readTxnRecordValue`: the last producer epoch is not in the record (-1).
fn decode_value(transactional_id: &str, mut value: Bytes) -> Result<TxnMetadata, LoadError> {
    if value.len() < 2 {
        return Err(LoadError("TransactionLogValue shorter than its version".into()));
    }
    let version = value.get_i16();
    let (min, max) = TransactionLogValue::VERSIONS;
    if !(min..=max).contains(&version) {
        return Err(LoadError(format!("unknown TransactionLogValue version {version}")));
    }
    let v = TransactionLogValue::decode(&mut value, version).map_err(|e| LoadError(e.to_string()))?;
    let state = TxnState::from_id(v.transaction_status)
        .ok_or_else(|| LoadError(format!("unknown transaction status {}", v.transaction_status)))?;
    if v.producer_id < 0 {
        return Err(LoadError(format!("{transactional_id}: negative producer id {}", v.producer_id)));
    }
    let mut partitions: BTreeSet<TopicPartition> = BTreeSet::new();
    if state != TxnState::Empty {
        for topic in v.transaction_partitions.unwrap_or_default() {
            partitions.extend(topic.partition_ids.into_iter().map(|p| (topic.topic.clone(), p)));
        }
    }
    Ok(TxnMetadata {
        transactional_id: transactional_id.to_string(),
        producer_id: v.producer_id,
        previous_producer_id: v.previous_producer_id,
        next_producer_id: v.next_producer_id,
        producer_epoch: v.producer_epoch,
        last_producer_epoch: NO_PRODUCER_EPOCH,
        txn_timeout_ms: v.transaction_timeout_ms,
        state,
        partitions,
        txn_start_ms: v.transaction_start_timestamp_ms,
        txn_last_update_ms: v.transaction_last_update_timestamp_ms,
        client_transaction_version: v.client_transaction_version,
        pending_state: None,
        has_failed_epoch_fence: false,
    })
}
