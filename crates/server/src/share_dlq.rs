//! Share groups' dead-letter queues (KIP-1191, `share.version` 2), Kafka's
//! `ShareGroupDLQStateManager`: the records a share partition moved to ARCHIVING
//! ([`DlqWrite`], rejected or out of deliveries) are written to the group's DLQ topic,
//! after which the share partition archives them, whether the write succeeded or gave up.
//!
//! - **The topic** is the group's `errors.deadletterqueue.topic.name`. It must not start
//!   with `__`, must start with the broker's `errors.deadletterqueue.topic.name.prefix`
//!   (`dlq.`; empty: any name), and an existing topic must have
//!   `errors.deadletterqueue.group.enable=true`. A missing one is created when
//!   `errors.deadletterqueue.auto.create.topics.enable` is on, with the broker's topic
//!   defaults, `errors.deadletterqueue.group.enable=true` and `message.timestamp.type=CreateTime`.
//!   Otherwise nothing is written and the records are archived all the same (logged and
//!   counted), as Kafka does.
//! - **The records**: one per offset, to partition `source partition % DLQ partitions`,
//!   timestamped now, with headers `__dlq.errors.topic`, `.partition`, `.offset`, `.group`,
//!   `.delivery.count` and `.message` (Kafka's cause). Key and value are the original
//!   record's when the group's `errors.deadletterqueue.copy.record.enable` is true (read
//!   from the log; an offset with no record, compacted or a control record, gets headers
//!   only), null otherwise.
//! - **The write** is a Produce with acks=all (30 s timeout) to the leader of the DLQ
//!   partition (on connections of the DLQ's own), this broker's own produce path when it
//!   leads it, in batches of at most the
//!   topic's `max.message.bytes`. It is retried after leadership errors and timeouts, 1 s
//!   doubling to 30 s, five attempts, as Kafka's.
//!
//! A share partition sends its DLQ writes one at a time, in the order its records reached
//! ARCHIVING. A new leader writes again what it finds ARCHIVING: each record reaches the
//! DLQ at least once.

use crate::broker::{now_ms, Broker};
use crate::partition::Partition;
use crate::txn_interbroker::{route_to, CoordinatorRoute};
use bytes::Bytes;
use osprey_cluster::NewTopic;
use osprey_coordinator::group::group_config::ShareGroupOverrides;
use osprey_coordinator::share::DlqWrite;
use osprey_protocol::messages::{produce_request, ProduceRequest};
use osprey_protocol::records::{BatchBuilder, Batches, Compression, Header};
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The topic config that lets share groups use a topic as their dead-letter queue.
pub const GROUP_ENABLE_CONFIG: &str = "errors.deadletterqueue.group.enable";
/// Attempts of one produce (or topic creation) before giving up, as Kafka's.
const MAX_ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The log read for original records, per round (Kafka's `DLQ_MAX_FETCH_BYTES`).
const READ_BYTES: usize = 1 << 20;
/// The Produce version used: topics by name.
const PRODUCE_VERSION: i16 = 12;
/// A record batch's header; a record's framing without key, value and headers, at most
/// (length, attributes, timestamp and offset deltas, key and value lengths, header count);
/// a header's framing, at most (its key and value lengths).
const BATCH_OVERHEAD: usize = 61;
const RECORD_OVERHEAD: usize = 36;
const HEADER_OVERHEAD: usize = 10;

/// Why nothing (or not everything) was written; the records are archived all the same.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DlqError(String);

/// Writes `w`'s records of `source` for `group_id` to the group's dead-letter queue topic:
/// the number of records written.
pub async fn write(
    broker: &Arc<Broker>,
    group_id: &str,
    source: &Arc<Partition>,
    w: &DlqWrite,
) -> Result<u64, DlqError> {
    let overrides = broker.image().group_configs(group_id).map(ShareGroupOverrides::from_configs).unwrap_or_default();
    let topic = destination(broker, group_id, overrides.dlq_topic_name.as_deref()).await?;
    let copy = overrides.dlq_copy_record_enabled.unwrap_or(false);
    let image = broker.image();
    let Some(image_topic) = image.topic(&topic).cloned() else {
        return Err(DlqError(format!("dead-letter queue topic {topic} disappeared")));
    };
    let max_message_bytes = broker
        .topic_config(&image_topic)
        .ok()
        .and_then(|c| c.value("max.message.bytes").and_then(|v| v.parse::<usize>().ok()))
        .unwrap_or(1 << 20);
    let partitions = i32::try_from(image_topic.partitions.len()).unwrap_or(i32::MAX).max(1);
    let index = source.index % partitions;
    let context = Context { group_id, source, delivery_count: w.delivery_count, message: w.cause.message() };
    let mut written = 0u64;
    let mut next = w.first_offset;
    while next <= w.last_offset {
        let (originals, chunk_last) = match copy {
            true => read_originals(source, next, w.last_offset, max_message_bytes).await,
            false => (BTreeMap::new(), w.last_offset),
        };
        for batch in batches(&context, next, chunk_last, &originals, max_message_bytes)? {
            produce(broker, &topic, index, batch.records).await?;
            written += batch.count;
        }
        next = chunk_last + 1;
    }
    Ok(written)
}

/// The group's DLQ topic, checked (and created when missing and allowed), as Kafka's
/// `validateDlqTopic`.
async fn destination(broker: &Arc<Broker>, group_id: &str, topic: Option<&str>) -> Result<String, DlqError> {
    let Some(topic) = topic else {
        return Err(DlqError(format!("share group {group_id} has no errors.deadletterqueue.topic.name")));
    };
    if topic.starts_with("__") {
        return Err(DlqError(format!("the dead-letter queue topic {topic} of share group {group_id} starts with __")));
    }
    let config = broker.config();
    let prefix = &config.errors_dlq_topic_name_prefix;
    if !prefix.is_empty() && !topic.starts_with(prefix.as_str()) {
        return Err(DlqError(format!(
            "the dead-letter queue topic {topic} of share group {group_id} does not start with errors.deadletterqueue.topic.name.prefix {prefix}"
        )));
    }
    if let Some(existing) = broker.image().topic(topic) {
        let enabled =
            broker.topic_config(existing).ok().and_then(|c| c.value(GROUP_ENABLE_CONFIG).map(|v| v == "true"));
        if enabled != Some(true) {
            return Err(DlqError(format!(
                "topic {topic}, the dead-letter queue of share group {group_id}, does not have {GROUP_ENABLE_CONFIG}=true"
            )));
        }
        return Ok(topic.to_string());
    }
    if !config.errors_dlq_auto_create_topics_enable {
        return Err(DlqError(format!(
            "the dead-letter queue topic {topic} of share group {group_id} does not exist and errors.deadletterqueue.auto.create.topics.enable is false"
        )));
    }
    let configs = [(GROUP_ENABLE_CONFIG, "true"), ("message.timestamp.type", "CreateTime")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let new =
        NewTopic { name: topic.to_string(), num_partitions: -1, replication_factor: -1, configs, ..Default::default() };
    let b = broker.clone();
    let created = tokio::task::spawn_blocking(move || b.create_topic(&new, false)).await;
    match created {
        Ok(Ok(_)) => {
            tracing::info!(topic, group = group_id, "dead-letter queue topic created");
            Ok(topic.to_string())
        }
        Ok(Err(e)) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => Ok(topic.to_string()),
        Ok(Err(e)) => Err(DlqError(format!("creating dead-letter queue topic {topic}: {e}"))),
        Err(_) => Err(DlqError("the topic creation was dropped (shutting down)".into())),
    }
}

/// What every DLQ record of one write says.
struct Context<'a> {
    group_id: &'a str,
    source: &'a Partition,
    delivery_count: i16,
    message: &'static str,
}

impl Context<'_> {
    /// Kafka's headers, in its order.
    fn headers(&self, offset: i64) -> Vec<Header> {
        [
            ("__dlq.errors.topic", self.source.topic.clone()),
            ("__dlq.errors.partition", self.source.index.to_string()),
            ("__dlq.errors.offset", offset.to_string()),
            ("__dlq.errors.group", self.group_id.to_string()),
            ("__dlq.errors.delivery.count", self.delivery_count.to_string()),
            ("__dlq.errors.message", self.message.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| Header::new(k, Some(v.as_bytes())))
        .collect()
    }
}

/// A record's key and value.
type Original = (Option<Bytes>, Option<Bytes>);

/// The records of `source` from `from` (at most [`READ_BYTES`] of the log, whole batches)
/// by offset, and the last offset the read covered (`last` when it read nothing: those
/// offsets get headers only). The keys and values kept add up to at most `budget` bytes
/// (the DLQ topic's `max.message.bytes`, as Kafka's `ShareGroupDLQRecordFetcher` bounds
/// them): the read stops short of the record that would pass it, and the next round goes
/// on from there. A record larger than `budget` alone, or in a batch that decompresses to
/// more, is not kept (headers only), as in Kafka.
async fn read_originals(
    source: &Arc<Partition>,
    from: i64,
    last: i64,
    budget: usize,
) -> (BTreeMap<i64, Original>, i64) {
    let partition = source.clone();
    let read = tokio::task::spawn_blocking(move || {
        let bound = partition.snapshot().high_watermark;
        let slice = partition.log.read_limited(from, READ_BYTES, bound, true).ok()?;
        let mut records = BTreeMap::new();
        let mut covered = from - 1;
        let mut kept = 0usize;
        for batch in Batches::new(slice.records) {
            let Ok(batch) = batch else { break };
            if batch.is_control() {
                covered = covered.max(batch.last_offset());
                continue;
            }
            let Ok(iter) = batch.records(budget) else {
                covered = covered.max(batch.last_offset());
                continue;
            };
            for record in iter.flatten() {
                if !(from..=last).contains(&record.offset) {
                    continue;
                }
                let size = record.key.as_ref().map_or(0, |k| k.len()) + record.value.as_ref().map_or(0, |v| v.len());
                if size <= budget {
                    if kept + size > budget {
                        return Some((records, record.offset - 1));
                    }
                    kept += size;
                    records.insert(record.offset, (record.key, record.value));
                }
                covered = covered.max(record.offset);
            }
            covered = covered.max(batch.last_offset());
        }
        Some((records, covered))
    })
    .await
    .ok()
    .flatten();
    match read {
        Some((records, covered)) if covered >= from => (records, covered.min(last)),
        Some((records, _)) => (records, last),
        None => (BTreeMap::new(), last),
    }
}

/// One record batch to produce, and the records it holds.
struct DlqBatch {
    records: Bytes,
    count: u64,
}

/// The DLQ records of `first..=last`, in batches of at most `max_bytes`. A record whose
/// original alone would not fit goes with headers only.
fn batches(
    context: &Context<'_>,
    first: i64,
    last: i64,
    originals: &BTreeMap<i64, Original>,
    max_bytes: usize,
) -> Result<Vec<DlqBatch>, DlqError> {
    let timestamp = now_ms();
    let mut out = Vec::new();
    let mut builder = BatchBuilder::new(Compression::None);
    let mut size = BATCH_OVERHEAD;
    let mut count = 0u64;
    let failed = |e| DlqError(format!("building the dead-letter queue records: {e}"));
    for offset in first..=last {
        let headers = context.headers(offset);
        let header_bytes: usize =
            headers.iter().map(|h| h.key.len() + h.value.as_ref().map_or(0, |v| v.len()) + HEADER_OVERHEAD).sum();
        let (mut key, mut value) = originals.get(&offset).cloned().unwrap_or_default();
        let body = |k: &Option<Bytes>, v: &Option<Bytes>| {
            RECORD_OVERHEAD + header_bytes + k.as_ref().map_or(0, |k| k.len()) + v.as_ref().map_or(0, |v| v.len())
        };
        if BATCH_OVERHEAD + body(&key, &value) > max_bytes {
            (key, value) = (None, None);
        }
        let record = body(&key, &value);
        if count > 0 && size + record > max_bytes {
            let full = std::mem::replace(&mut builder, BatchBuilder::new(Compression::None));
            out.push(DlqBatch { records: full.build().map_err(failed)?.into_bytes(), count });
            (size, count) = (BATCH_OVERHEAD, 0);
        }
        builder.append(timestamp, key.as_deref(), value.as_deref(), &headers).map_err(failed)?;
        size += record;
        count += 1;
    }
    if count > 0 {
        out.push(DlqBatch { records: builder.build().map_err(failed)?.into_bytes(), count });
    }
    Ok(out)
}

/// Produces `records` to `topic`-`index` with acks=all, retried as Kafka's DLQ manager
/// retries.
async fn produce(broker: &Arc<Broker>, topic: &str, index: i32, records: Bytes) -> Result<(), DlqError> {
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let outcome = produce_once(broker, topic, index, records.clone()).await;
        match outcome {
            Ok(()) => return Ok(()),
            Err((code, message)) if retriable(code) && attempts < MAX_ATTEMPTS => {
                tracing::debug!(
                    topic,
                    partition = index,
                    error = code.name(),
                    message,
                    attempts,
                    "dead-letter queue write: retrying"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err((code, message)) => {
                return Err(DlqError(format!("producing to {topic}-{index}: {}: {message}", code.name())));
            }
        }
    }
}

fn retriable(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::LEADER_NOT_AVAILABLE
            | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
            | ErrorCode::NOT_ENOUGH_REPLICAS
            | ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | ErrorCode::REQUEST_TIMED_OUT
            | ErrorCode::NETWORK_EXCEPTION
    )
}

async fn produce_once(
    broker: &Arc<Broker>,
    topic: &str,
    index: i32,
    records: Bytes,
) -> Result<(), (ErrorCode, String)> {
    let image = broker.image();
    let leader = image
        .topic(topic)
        .and_then(|t| t.partitions.get(usize::try_from(index).ok()?))
        .map(|p| p.leader)
        .ok_or((ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, format!("{topic}-{index} is not in the metadata yet")))?;
    let request = ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![produce_request::TopicProduceData {
            name: topic.to_string(),
            topic_id: image.topic(topic).map(|t| t.id).unwrap_or_default(),
            partition_data: vec![produce_request::PartitionProduceData {
                index,
                records: Some(records),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let response = match route_to(broker, &image, leader) {
        CoordinatorRoute::Local => {
            let listener: Arc<str> = broker.settings.config.inter_broker_listener_name.as_str().into();
            match crate::handlers::produce::handle(broker, request, PRODUCE_VERSION, &listener) {
                crate::dispatch::Reply::Now(body) => body,
                crate::dispatch::Reply::Later(pending) => pending.await,
                _ => return Err((ErrorCode::UNKNOWN_SERVER_ERROR, "unexpected produce reply".into())),
            }
        }
        CoordinatorRoute::Remote { node, address } => {
            let client = broker.share_partitions.dlq_clients().client(broker, node, address);
            match client.send(RequestBody::Produce(request)).await {
                Ok(response) => response.body,
                Err(e) => return Err((ErrorCode::NETWORK_EXCEPTION, format!("produce to node {node}: {e}"))),
            }
        }
        CoordinatorRoute::NotAvailable => {
            return Err((ErrorCode::LEADER_NOT_AVAILABLE, format!("{topic}-{index} has no reachable leader")))
        }
    };
    let ResponseBody::Produce(response) = response else {
        return Err((ErrorCode::UNKNOWN_SERVER_ERROR, "the leader answered another API".into()));
    };
    let answer = response.responses.iter().flat_map(|t| &t.partition_responses).find(|p| p.index == index);
    let Some(answer) = answer else {
        return Err((ErrorCode::UNKNOWN_SERVER_ERROR, "the produce answer left the partition out".into()));
    };
    match ErrorCode::from_code(answer.error_code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR) {
        ErrorCode::NONE => Ok(()),
        code => Err((code, answer.error_message.clone().unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    /// The two DLQ broker settings are dynamic, as Kafka's (`RECONFIGURABLE_CONFIGS`): a
    /// change applies to the next DLQ write, which reads them from the config in effect.
    #[test]
    fn the_dlq_broker_settings_change_at_runtime() {
        let (broker, dir) = crate::test_support::broker_in("share-dlq-dynamic");
        let c = broker.config();
        assert_eq!((c.errors_dlq_topic_name_prefix.as_str(), c.errors_dlq_auto_create_topics_enable), ("dlq.", false));
        let changes = [
            ("errors.deadletterqueue.topic.name.prefix".to_string(), Some(String::new())),
            ("errors.deadletterqueue.auto.create.topics.enable".to_string(), Some("true".to_string())),
        ];
        broker.set_broker_configs("", &changes, false).unwrap();
        let c = broker.config();
        assert_eq!((c.errors_dlq_topic_name_prefix.as_str(), c.errors_dlq_auto_create_topics_enable), ("", true));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
