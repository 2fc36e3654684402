//! Fetch (v4+): read whole batches up to the high watermark (read_uncommitted) or the
//! last stable offset (read_committed; equal to the high watermark until transactions
//! exist), honouring partition and response byte limits; when fewer than `min_bytes`
//! are available, wait up to `max_wait_ms` for appends without blocking anything else.

use crate::broker::Broker;
use crate::dispatch::Reply;
use crate::partition::Partition;
use crate::telemetry;
use osprey_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use osprey_protocol::messages::{FetchRequest, FetchResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody, Uuid};
use osprey_storage::StorageError;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// What to read, resolved from the request once.
struct Plan {
    version: i16,
    max_bytes: usize,
    min_bytes: usize,
    topics: Vec<TopicPlan>,
}

struct TopicPlan {
    name: String,
    topic_id: Uuid,
    partitions: Vec<PartitionPlan>,
}

struct PartitionPlan {
    index: i32,
    fetch_offset: i64,
    max_bytes: usize,
    current_leader_epoch: i32,
    partition: Result<Arc<Partition>, ErrorCode>,
}

pub fn handle(broker: &Arc<Broker>, req: FetchRequest, version: i16) -> Reply {
    let image = broker.image();
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let topic = if version >= 13 { image.topic_by_id(t.topic_id) } else { image.topic(&t.topic) };
        let unknown = if version >= 13 { ErrorCode::UNKNOWN_TOPIC_ID } else { ErrorCode::UNKNOWN_TOPIC_OR_PARTITION };
        let partitions = t
            .partitions
            .into_iter()
            .map(|p| PartitionPlan {
                index: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.max(0) as usize,
                current_leader_epoch: p.current_leader_epoch,
                partition: topic.and_then(|t| broker.partition(t.id, p.partition)).ok_or(unknown),
            })
            .collect();
        topics.push(TopicPlan { name: t.topic, topic_id: t.topic_id, partitions });
    }
    let plan =
        Plan { version, max_bytes: req.max_bytes.max(0) as usize, min_bytes: req.min_bytes.max(0) as usize, topics };
    let (resp, bytes, errors) = read(&plan);
    if req.max_wait_ms <= 0 || bytes >= plan.min_bytes.max(1) || errors {
        return Reply::Now(ResponseBody::Fetch(resp));
    }
    let wait = Duration::from_millis(req.max_wait_ms as u64);
    Reply::Later(Box::pin(long_poll(plan, wait)))
}

/// Waits until a fetched partition's high watermark moves (then re-reads) or the wait
/// runs out.
async fn long_poll(plan: Plan, wait: Duration) -> ResponseBody {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut watchers = JoinSet::new();
        for p in plan.topics.iter().flat_map(|t| &t.partitions) {
            if let Ok(partition) = &p.partition {
                let mut rx = partition.watch_high_watermark();
                watchers.spawn(async move { rx.changed().await.is_ok() });
            }
        }
        let timed_out = tokio::select! {
            _ = watchers.join_next() => false,
            _ = tokio::time::sleep_until(deadline) => true,
        };
        let (resp, bytes, errors) = read(&plan);
        if timed_out || bytes >= plan.min_bytes.max(1) || errors {
            return ResponseBody::Fetch(resp);
        }
    }
}

/// Reads every planned partition once: the response, its record bytes, and whether any
/// partition failed (errors are answered at once rather than waited on).
fn read(plan: &Plan) -> (FetchResponse, usize, bool) {
    let mut resp = FetchResponse::default();
    let mut total = 0usize;
    let mut errors = false;
    for t in &plan.topics {
        let mut out = FetchableTopicResponse { topic: t.name.clone(), topic_id: t.topic_id, ..Default::default() };
        for p in &t.partitions {
            // KIP-74: the first batch is returned even if it alone exceeds the limits, so a
            // consumer can always make progress.
            let budget =
                if total == 0 { p.max_bytes.max(1) } else { p.max_bytes.min(plan.max_bytes.saturating_sub(total)) };
            let data = read_partition(p, budget, plan.version);
            if data.error_code != 0 {
                errors = true;
            }
            let n = data.records.as_ref().map_or(0, |r| r.len());
            if let (Ok(partition), true) = (&p.partition, n > 0) {
                telemetry::bytes_out(&partition.topic, n as u64);
            }
            total += n;
            out.partitions.push(data);
        }
        resp.responses.push(out);
    }
    (resp, total, errors)
}

fn read_partition(p: &PartitionPlan, budget: usize, _version: i16) -> PartitionData {
    let mut data = PartitionData {
        partition_index: p.index,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        records: Some(Default::default()),
        ..Default::default()
    };
    let partition = match &p.partition {
        Ok(partition) => partition,
        Err(code) => return failed(data, *code),
    };
    if p.current_leader_epoch >= 0 && p.current_leader_epoch != partition.leader_epoch {
        let code = if p.current_leader_epoch < partition.leader_epoch {
            ErrorCode::FENCED_LEADER_EPOCH
        } else {
            ErrorCode::UNKNOWN_LEADER_EPOCH
        };
        return failed(data, code);
    }
    let log = &partition.log;
    let high_watermark = log.high_watermark();
    data.high_watermark = high_watermark;
    data.last_stable_offset = high_watermark;
    data.log_start_offset = log.log_start_offset();
    if p.fetch_offset >= high_watermark && p.fetch_offset <= log.log_end_offset() {
        // Caught up (or ahead of the high watermark but within the log): nothing yet.
        return data;
    }
    match log.read_bounded(p.fetch_offset, budget, high_watermark) {
        Ok(slice) => {
            data.log_start_offset = slice.log_start_offset;
            data.records = Some(slice.records);
            data
        }
        Err(StorageError::OffsetOutOfRange { .. }) => failed(data, ErrorCode::OFFSET_OUT_OF_RANGE),
        Err(e) => {
            tracing::error!(topic = %partition.topic, partition = p.index, error = %e, "fetch read failed");
            failed(
                data,
                if e.is_kafka_storage_error() {
                    ErrorCode::KAFKA_STORAGE_ERROR
                } else {
                    ErrorCode::UNKNOWN_SERVER_ERROR
                },
            )
        }
    }
}

fn failed(mut data: PartitionData, code: ErrorCode) -> PartitionData {
    telemetry::error_code(ApiKey::Fetch, code);
    data.error_code = code.code();
    data
}
