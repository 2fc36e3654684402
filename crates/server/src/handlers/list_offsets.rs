//! ListOffsets (v1+): earliest (-2), latest (-1), max timestamp (-3), earliest local
//! (-4), or the first offset whose timestamp is at least the one given.

use crate::broker::Broker;
use crate::dispatch::Reply;
use crate::partition::Partition;
use osprey_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use osprey_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use osprey_protocol::records::RecordBatch;
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

/// A batch decompressed to find a timestamp may not inflate beyond this.
const MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// Timestamp lookups read batches from disk, so the request is answered on a blocking
/// thread, not on an async worker.
pub fn handle(broker: &Arc<Broker>, req: ListOffsetsRequest, version: i16) -> Reply {
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let fallback = failed(&req);
        match tokio::task::spawn_blocking(move || answer(&broker, req, version)).await {
            Ok(resp) => resp,
            Err(e) => {
                tracing::error!(error = %e, "ListOffsets lookup failed");
                fallback
            }
        }
    }))
}

/// Every partition of `req` with UNKNOWN_SERVER_ERROR: the answer when a lookup panicked.
fn failed(req: &ListOffsetsRequest) -> ResponseBody {
    let topics = req
        .topics
        .iter()
        .map(|t| ListOffsetsTopicResponse {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    error_code: ErrorCode::UNKNOWN_SERVER_ERROR.code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    ResponseBody::ListOffsets(ListOffsetsResponse { topics, ..Default::default() })
}

fn answer(broker: &Arc<Broker>, req: ListOffsetsRequest, version: i16) -> ResponseBody {
    let image = broker.image();
    let mut resp = ListOffsetsResponse::default();
    for t in req.topics {
        let topic = image.topic(&t.name);
        let mut out = ListOffsetsTopicResponse { name: t.name.clone(), ..Default::default() };
        for p in t.partitions {
            let mut r = ListOffsetsPartitionResponse { partition_index: p.partition_index, ..Default::default() };
            let result = broker
                .replica_manager
                .partition_or_error(&image, topic, p.partition_index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
                .and_then(|partition| {
                    lookup(&partition, p.timestamp, p.current_leader_epoch, req.isolation_level == 1)
                });
            match result {
                Ok((offset, timestamp, epoch)) => {
                    r.offset = offset;
                    r.timestamp = timestamp;
                    // Leader epochs are in the response from v4 (KIP-320).
                    r.leader_epoch = if version >= 4 { epoch } else { -1 };
                }
                Err(code) => {
                    crate::telemetry::error_code(ApiKey::ListOffsets, code);
                    r.error_code = code.code();
                }
            }
            out.partitions.push(r);
        }
        resp.topics.push(out);
    }
    ResponseBody::ListOffsets(resp)
}

/// (offset, timestamp, leader epoch) for one partition; offset -1 when no record matches.
fn lookup(
    partition: &Partition,
    timestamp: i64,
    current_leader_epoch: i32,
    read_committed: bool,
) -> Result<(i64, i64, i32), ErrorCode> {
    // The epoch and the offsets from one snapshot of the replica state machine.
    let snapshot = partition.snapshot();
    let epoch = snapshot.leader_epoch;
    if current_leader_epoch >= 0 && current_leader_epoch != epoch {
        return Err(if current_leader_epoch < epoch {
            ErrorCode::FENCED_LEADER_EPOCH
        } else {
            ErrorCode::UNKNOWN_LEADER_EPOCH
        });
    }
    let log = &partition.log;
    // read_committed consumers see offsets only up to the last stable offset.
    let high_watermark = if read_committed { snapshot.last_stable_offset } else { snapshot.high_watermark };
    match timestamp {
        LATEST => Ok((high_watermark, -1, epoch)),
        EARLIEST | EARLIEST_LOCAL => Ok((log.log_start_offset(), -1, epoch)),
        // KIP-734: the first record carrying the log's largest timestamp. The segments know
        // only the batch that holds it, so that batch is searched, as Kafka's
        // `RecordBatch.offsetOfMaxTimestamp` does: the first batch whose largest timestamp
        // is the log's is also the first batch at or after it.
        MAX_TIMESTAMP => match log.max_timestamp_and_offset() {
            Some((max_timestamp, _)) => record_at_or_after(partition, max_timestamp, high_watermark, epoch),
            None => Ok((-1, -1, -1)),
        },
        ts if ts >= 0 => record_at_or_after(partition, ts, high_watermark, epoch),
        // Tiered-storage lookups (-5 and beyond) have nothing to find on a broker without it.
        _ => Ok((-1, -1, -1)),
    }
}

/// The first record with a timestamp at or after `ts` below `high_watermark`.
fn record_at_or_after(
    partition: &Partition,
    ts: i64,
    high_watermark: i64,
    epoch: i32,
) -> Result<(i64, i64, i32), ErrorCode> {
    let found = partition.log.offset_for_timestamp(ts).map_err(|e| {
        tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "timestamp lookup failed");
        ErrorCode::KAFKA_STORAGE_ERROR
    })?;
    match found.and_then(|f| first_record_at_or_after(f.batch, ts)) {
        Some((offset, record_ts)) if offset < high_watermark => Ok((offset, record_ts, epoch)),
        _ => Ok((-1, -1, -1)),
    }
}

/// The batch found by the time index holds a record at or after `ts`; find which.
fn first_record_at_or_after(batch: bytes::Bytes, ts: i64) -> Option<(i64, i64)> {
    let batch = RecordBatch::new(batch).ok()?;
    let records = batch.records(MAX_DECOMPRESSED_BYTES).ok()?;
    records.filter_map(Result::ok).find(|r| r.timestamp >= ts).map(|r| (r.offset, r.timestamp))
}
