//! ShareFetch (v1-2) and ShareAcknowledge (v1-2), KIP-932: share consumers fetch records
//! from the share partitions this broker leads and acknowledge them, within a share
//! session (`crate::share_sessions`); the share partitions are `crate::share_partitions`.
//! As Kafka's `KafkaApis.handleShareFetchRequest` / `handleShareAcknowledgeRequest`:
//!
//! - READ on the group (else GROUP_AUTHORIZATION_FAILED for the whole request) and on
//!   each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
//! - A ShareFetch's acknowledgements are applied first, each partition's outcome in its
//!   `AcknowledgeErrorCode`, answered once durable. Then the session's partitions are
//!   fetched ([`fetch`], Kafka's `DelayedShareFetch`): records acquired for the member, the
//!   batches holding them in `Records`, the ranges in `AcquiredRecords`. The fetch waits
//!   until `MinBytes` can be read past the share partitions' next fetch offsets, or
//!   `MaxWaitMs`, holding no record meanwhile; then it acquires, up to `MaxRecords` in
//!   all, from the session's partitions in an order rotated by the session epoch.
//!   While it waits it holds no share partition's fetch lock, so other members' fetches
//!   and every acknowledgement go on; the same connection's later requests take effect
//!   after it, in order (the connection's writer runs their answers one after the other),
//!   as Kafka processes a connection's requests one at a time.
//! - A new session's answer lists every partition; a later one only those with records,
//!   an error or an acknowledgement outcome.
//! - Epoch -1 ends the session after its acknowledgements, releasing what the member
//!   still holds.

use crate::access::{kind, op, Access};
use crate::broker::Broker;
use crate::dispatch::{Client, Reply};
use crate::handlers::fetch::Wakeups;
use crate::metadata_cache::MetadataCache;
use crate::partition::Partition;
use crate::share_partitions::{share_settings, FetchRead, ShareError, Slot};
use crate::share_sessions::{ConnectionKey, FetchContext, TopicIdPartition};
use osprey_coordinator::share::{AcknowledgementBatch, ShareAcquireMode};
use osprey_coordinator::share_state::ShareKey;
use osprey_protocol::messages::share_acknowledge_response as ack_resp;
use osprey_protocol::messages::share_fetch_response as fetch_resp;
use osprey_protocol::messages::{
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use osprey_protocol::{ErrorCode, ResponseBody, Uuid};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// One partition's outcome, before the response is laid out.
#[derive(Debug, Default)]
struct Outcome {
    error: Option<ShareError>,
    acknowledge_error: Option<ShareError>,
    records: Option<bytes::Bytes>,
    acquired: Vec<fetch_resp::AcquiredRecords>,
}

pub fn handle_fetch(
    broker: &Arc<Broker>,
    req: ShareFetchRequest,
    version: i16,
    client: &Client,
    access: Option<Access>,
) -> Reply {
    let top_error = |code: ErrorCode, message: String| {
        Reply::Now(ResponseBody::ShareFetch(ShareFetchResponse {
            error_code: code.code(),
            error_message: Some(message),
            ..Default::default()
        }))
    };
    let group_id = req.group_id.clone().unwrap_or_default();
    let member_id = req.member_id.clone().unwrap_or_default();
    if !member_id_is_valid(&member_id) {
        return top_error(ErrorCode::INVALID_REQUEST, INVALID_MEMBER_ID.into());
    }
    // ShareFetch v2: a request that only renews locks fetches nothing, and says so.
    let renew_only = version >= 2 && req.is_renew_ack;
    if renew_only {
        let message: String = [
            (req.max_bytes, "maxBytes"),
            (req.min_bytes, "minBytes"),
            (req.max_records, "maxRecords"),
            (req.max_wait_ms, "maxWaitMs"),
        ]
        .iter()
        .filter(|(value, _)| *value != 0)
        .map(|(_, name)| format!("{name} must be set to 0,"))
        .collect();
        if !message.is_empty() {
            return top_error(ErrorCode::INVALID_REQUEST, format!("{message}if isRenewAck is true."));
        }
    }
    if let Some(access) = &access {
        if !access.allows(kind::GROUP, &group_id, op::READ) {
            return top_error(ErrorCode::GROUP_AUTHORIZATION_FAILED, "Group authorization failed.".into());
        }
    }
    let requested: Vec<TopicIdPartition> =
        req.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, p.partition_index))).collect();
    let forgotten: Vec<TopicIdPartition> =
        req.forgotten_topics_data.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p))).collect();
    let acknowledgements: Vec<(TopicIdPartition, Vec<AcknowledgementBatch>)> =
        req.topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().filter(|p| !p.acknowledgement_batches.is_empty()).map(move |p| {
                    ((t.topic_id, p.partition_index), p.acknowledgement_batches.iter().map(batch).collect())
                })
            })
            .collect();
    let connection = ConnectionKey { listener: client.listener.clone(), peer: client.peer };
    let max_sessions = usize::try_from(broker.config().group_share_max_share_sessions).unwrap_or(1).max(1);
    let context = broker.share_partitions.sessions().begin_fetch(
        &group_id,
        &member_id,
        req.share_session_epoch,
        &requested,
        &forgotten,
        !acknowledgements.is_empty(),
        connection,
        max_sessions,
    );
    let context = match context {
        Ok(context) => context,
        Err(code) => return top_error(code, format!("share session of member {member_id}: {}", code.name())),
    };
    // As Kafka's `handleFetchFromShareFetchRequest`: MaxBytes at most `fetch.max.bytes`,
    // MinBytes at most that.
    let max_bytes = req.max_bytes.clamp(0, broker.config().fetch_max_bytes.max(0));
    let limits = Limits {
        max_bytes: max_bytes as usize,
        min_bytes: req.min_bytes.clamp(0, max_bytes) as usize,
        max_wait: Duration::from_millis(req.max_wait_ms.max(0) as u64),
        max_records: req.max_records,
        batch_size: req.batch_size,
        mode: ShareAcquireMode::from_id(req.share_acquire_mode).unwrap_or_default(),
    };
    // The partitions answered whatever happens to them: looked up in sets, since the
    // request sets how many there are.
    let acknowledged: HashSet<TopicIdPartition> = acknowledgements.iter().map(|(tp, _)| *tp).collect();
    let broker = broker.clone();
    let listener = client.listener.clone();
    let session_epoch = req.share_session_epoch;
    Reply::Later(Box::pin(async move {
        let mut outcomes: BTreeMap<TopicIdPartition, Outcome> = BTreeMap::new();
        let key = |tp: TopicIdPartition| ShareKey { group_id: group_id.clone(), topic_id: tp.0, partition: tp.1 };
        for (tp, batches) in acknowledgements {
            let result = acknowledge(&broker, access.as_ref(), &key(tp), &member_id, &batches).await;
            outcomes.entry(tp).or_default().acknowledge_error = result.err();
        }
        let (full, partitions) = match context {
            FetchContext::Full { partitions } if !renew_only => (true, partitions),
            FetchContext::Incremental { partitions } if !renew_only => (false, partitions),
            FetchContext::Full { .. } | FetchContext::Incremental { .. } => (false, Vec::new()),
            FetchContext::Final => {
                broker.share_partitions.end_session(&broker, &group_id, &member_id);
                (false, Vec::new())
            }
        };
        let who = (group_id.as_str(), member_id.as_str());
        fetch(&broker, access.as_ref(), who, &partitions, session_epoch, limits, &mut outcomes).await;
        let lock_ms = share_settings(&broker, &group_id).0.record_lock_duration_ms;
        let mut resp = ShareFetchResponse {
            acquisition_lock_timeout_ms: i32::try_from(lock_ms).unwrap_or(i32::MAX),
            ..Default::default()
        };
        let cache = MetadataCache::for_listener(&broker, &listener);
        let mut endpoints = BTreeMap::new();
        let listed: HashSet<TopicIdPartition> =
            if full { partitions.iter().copied().collect() } else { HashSet::new() };
        for (tp, outcome) in outcomes {
            let has_records = outcome.records.as_ref().is_some_and(|r| !r.is_empty());
            let included = listed.contains(&tp)
                || has_records
                || outcome.error.is_some()
                || outcome.acknowledge_error.is_some()
                || acknowledged.contains(&tp);
            if !included {
                continue;
            }
            let mut data = fetch_resp::PartitionData {
                partition_index: tp.1,
                records: outcome.records.unwrap_or_default(),
                acquired_records: outcome.acquired,
                ..Default::default()
            };
            if let Some(e) = outcome.error {
                data.error_code = e.code.code();
                data.error_message = Some(e.message);
                if e.code == ErrorCode::NOT_LEADER_OR_FOLLOWER {
                    let topic = cache.image().topic_by_id(tp.0);
                    let (leader_id, leader_epoch, endpoint) = cache.current_leader(topic, tp.1);
                    data.current_leader =
                        fetch_resp::LeaderIdAndEpoch { leader_id, leader_epoch, ..Default::default() };
                    if let Some(e) = endpoint {
                        endpoints.insert(e.node_id, e);
                    }
                }
            }
            if let Some(e) = outcome.acknowledge_error {
                data.acknowledge_error_code = e.code.code();
                data.acknowledge_error_message = Some(e.message);
            }
            match resp.responses.last_mut() {
                Some(t) if t.topic_id == tp.0 => t.partitions.push(data),
                _ => resp.responses.push(fetch_resp::ShareFetchableTopicResponse {
                    topic_id: tp.0,
                    partitions: vec![data],
                    ..Default::default()
                }),
            }
        }
        resp.node_endpoints = endpoints
            .into_values()
            .map(|e| fetch_resp::NodeEndpoint {
                node_id: e.node_id,
                host: e.host,
                port: e.port,
                rack: e.rack,
                ..Default::default()
            })
            .collect();
        ResponseBody::ShareFetch(resp)
    }))
}

/// Kafka's answer to a member id that is empty or longer than a UUID's text.
const INVALID_MEMBER_ID: &str = "Invalid member id in the request.";

/// Kafka's `isMemberIdValid`: present, not empty, at most 36 characters.
fn member_id_is_valid(member_id: &str) -> bool {
    !member_id.is_empty() && member_id.chars().count() <= 36
}

fn batch(b: &osprey_protocol::messages::share_fetch_request::AcknowledgementBatch) -> AcknowledgementBatch {
    AcknowledgementBatch {
        first_offset: b.first_offset,
        last_offset: b.last_offset,
        acknowledge_types: b.acknowledge_types.clone(),
    }
}

/// The leader replica of a share partition's topic partition, checked for the client.
fn leader(
    broker: &Arc<Broker>,
    access: Option<&Access>,
    topic_id: Uuid,
    index: i32,
) -> Result<Arc<Partition>, ShareError> {
    let image = broker.image();
    let Some(topic) = image.topic_by_id(topic_id) else {
        return Err(ShareError {
            code: ErrorCode::UNKNOWN_TOPIC_ID,
            message: format!("topic id {topic_id} is not known"),
        });
    };
    if let Some(access) = access {
        if !access.allows(kind::TOPIC, &topic.name, op::READ) {
            return Err(ShareError {
                code: ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                message: "Topic authorization failed.".into(),
            });
        }
    }
    broker
        .replica_manager
        .partition_or_error(&image, Some(topic), index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        .map_err(|code| ShareError { code, message: format!("{}-{index}: {}", topic.name, code.name()) })
}

async fn slot(broker: &Arc<Broker>, access: Option<&Access>, key: &ShareKey) -> Result<Arc<Slot>, ShareError> {
    let partition = leader(broker, access, key.topic_id, key.partition)?;
    broker.share_partitions.slot(broker, key, &partition).await
}

async fn acknowledge(
    broker: &Arc<Broker>,
    access: Option<&Access>,
    key: &ShareKey,
    member_id: &str,
    batches: &[AcknowledgementBatch],
) -> Result<(), ShareError> {
    let slot = slot(broker, access, key).await?;
    slot.acknowledge(broker, member_id, batches).await
}

/// A ShareFetch's limits, as Kafka's `FetchParams` and `ShareFetch` carry them.
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_bytes: usize,
    min_bytes: usize,
    max_wait: Duration,
    /// What the whole request may acquire (Kafka's `maxFetchRecords`).
    max_records: i32,
    batch_size: i32,
    mode: ShareAcquireMode,
}

/// Fetches for the member on the session's `partitions`, as Kafka's `SharePartitionManager`
/// and `DelayedShareFetch` do:
///
/// - Partitions whose topic is unknown, not readable or without the partition are
///   answered with their error; the others are rotated by the session epoch
///   ([`rotate`]) and their share partitions loaded. When every one fails, the fetch is
///   answered at once.
/// - Then, each time it looks (at first, and whenever an append, a release or a lock
///   expiry wakes it): the share partitions whose fetch lock is free and that can acquire
///   anything are read from their next fetch offset, each at most MaxBytes over their
///   number. The fetch completes when what was read reaches MinBytes, when a read failed,
///   or at MaxWaitMs; it then acquires from what it read, in order, up to MaxRecords for
///   the whole request (BatchSize and the acquire mode shape the ranges). Otherwise it
///   lets go of the share partitions, acquiring nothing, and parks until woken
///   ([`Wakeups`], as Fetch parks).
async fn fetch(
    broker: &Arc<Broker>,
    access: Option<&Access>,
    (group_id, member_id): (&str, &str),
    partitions: &[TopicIdPartition],
    session_epoch: i32,
    limits: Limits,
    outcomes: &mut BTreeMap<TopicIdPartition, Outcome>,
) {
    let mut interested = Vec::new();
    for &tp in partitions {
        match leader(broker, access, tp.0, tp.1) {
            Err(e) if e.code != ErrorCode::NOT_LEADER_OR_FOLLOWER => outcomes.entry(tp).or_default().error = Some(e),
            _ => interested.push(tp),
        }
    }
    let mut slots = Vec::new();
    for tp in rotate(interested, session_epoch) {
        let key = ShareKey { group_id: group_id.to_string(), topic_id: tp.0, partition: tp.1 };
        match slot(broker, access, &key).await {
            Ok(slot) => slots.push((tp, slot)),
            Err(e) => outcomes.entry(tp).or_default().error = Some(e),
        }
    }
    if slots.is_empty() {
        return;
    }
    let deadline = tokio::time::Instant::now() + limits.max_wait;
    let mut timed_out = false;
    loop {
        let mut wakeups = Wakeups::default();
        wakeups.watch(broker.share_partitions.watch_available());
        for (_, slot) in &slots {
            wakeups.watch(slot.partition().watch_high_watermark());
        }
        let locked: Vec<_> =
            slots.iter().filter_map(|(tp, slot)| slot.try_lock_for_fetch(broker).map(|lock| (*tp, lock))).collect();
        if !locked.is_empty() {
            let partition_max_bytes = limits.max_bytes / locked.len();
            let mut reads: Vec<(TopicIdPartition, FetchRead)> = Vec::with_capacity(locked.len());
            let mut bytes_left = limits.max_bytes;
            for (tp, lock) in locked {
                // Kafka's `readFromLog`: the first partition with data returns a whole batch
                // even if larger, so that the consumer makes progress.
                let min_one_batch = reads.iter().all(|(_, r)| r.bytes() == 0);
                let read = lock.read(partition_max_bytes.min(bytes_left), min_one_batch).await;
                bytes_left = bytes_left.saturating_sub(read.bytes());
                reads.push((tp, read));
            }
            // Kafka's `isMinBytesSatisfied`: each partition counts at most its share of
            // MaxBytes.
            let bytes: usize = reads.iter().map(|(_, r)| r.bytes().min(partition_max_bytes)).sum();
            if timed_out || bytes >= limits.min_bytes || reads.iter().any(|(_, r)| r.completes_the_fetch()) {
                acquire(member_id, reads, limits, outcomes);
                return;
            }
        } else if timed_out {
            return;
        }
        timed_out = wakeups.park(broker, deadline).await;
    }
}

/// Acquires from what the fetch read, in order, the request's MaxRecords shared among
/// its partitions (Kafka's `ShareFetchUtils.processFetchResponse`).
fn acquire(
    member_id: &str,
    reads: Vec<(TopicIdPartition, FetchRead)>,
    limits: Limits,
    outcomes: &mut BTreeMap<TopicIdPartition, Outcome>,
) {
    let mut acquired = 0i64;
    for (tp, read) in reads {
        let max_records = i64::from(limits.max_records).saturating_sub(acquired);
        let max_records = i32::try_from(max_records).unwrap_or(0);
        let outcome = outcomes.entry(tp).or_default();
        match read.acquire(member_id, max_records, limits.batch_size, limits.mode) {
            Ok(fetched) if fetched.count > 0 => {
                acquired += fetched.count;
                outcome.records = Some(fetched.records);
                outcome.acquired = fetched
                    .acquired
                    .iter()
                    .map(|a| fetch_resp::AcquiredRecords {
                        first_offset: a.first_offset,
                        last_offset: a.last_offset,
                        delivery_count: a.delivery_count,
                        ..Default::default()
                    })
                    .collect();
            }
            Ok(_) => {}
            Err(e) => outcome.error = Some(e),
        }
    }
}

/// Kafka's `PartitionRotateStrategy` (round robin): the session's partitions moved left
/// by the request's session epoch, modulo their number, so that each partition in turn is
/// fetched first and none is starved of MaxRecords and MaxBytes. The initial and final
/// epochs (0, -1) do not rotate.
fn rotate(mut partitions: Vec<TopicIdPartition>, session_epoch: i32) -> Vec<TopicIdPartition> {
    if partitions.len() > 1 && session_epoch >= 1 {
        let by = session_epoch as usize % partitions.len();
        partitions.rotate_left(by);
    }
    partitions
}

pub fn handle_acknowledge(broker: &Arc<Broker>, req: ShareAcknowledgeRequest, access: Option<Access>) -> Reply {
    let top_error = |code: ErrorCode, message: String| {
        Reply::Now(ResponseBody::ShareAcknowledge(ShareAcknowledgeResponse {
            error_code: code.code(),
            error_message: Some(message),
            ..Default::default()
        }))
    };
    let group_id = req.group_id.clone().unwrap_or_default();
    let member_id = req.member_id.clone().unwrap_or_default();
    if !member_id_is_valid(&member_id) {
        return top_error(ErrorCode::INVALID_REQUEST, INVALID_MEMBER_ID.into());
    }
    if let Some(access) = &access {
        if !access.allows(kind::GROUP, &group_id, op::READ) {
            return top_error(ErrorCode::GROUP_AUTHORIZATION_FAILED, "Group authorization failed.".into());
        }
    }
    let closing =
        match broker.share_partitions.sessions().begin_acknowledge(&group_id, &member_id, req.share_session_epoch) {
            Ok(closing) => closing,
            Err(code) => return top_error(code, format!("share session of member {member_id}: {}", code.name())),
        };
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let mut resp = ShareAcknowledgeResponse::default();
        for t in &req.topics {
            let mut topic = ack_resp::ShareAcknowledgeTopicResponse { topic_id: t.topic_id, ..Default::default() };
            for p in &t.partitions {
                let key = ShareKey { group_id: group_id.clone(), topic_id: t.topic_id, partition: p.partition_index };
                let batches: Vec<AcknowledgementBatch> = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| AcknowledgementBatch {
                        first_offset: b.first_offset,
                        last_offset: b.last_offset,
                        acknowledge_types: b.acknowledge_types.clone(),
                    })
                    .collect();
                let mut data = ack_resp::PartitionData { partition_index: p.partition_index, ..Default::default() };
                if !batches.is_empty() {
                    if let Err(e) = acknowledge(&broker, access.as_ref(), &key, &member_id, &batches).await {
                        data.error_code = e.code.code();
                        data.error_message = Some(e.message);
                    }
                }
                topic.partitions.push(data);
            }
            resp.responses.push(topic);
        }
        if closing {
            broker.share_partitions.end_session(&broker, &group_id, &member_id);
        }
        let lock_ms = share_settings(&broker, &group_id).0.record_lock_duration_ms;
        resp.acquisition_lock_timeout_ms = i32::try_from(lock_ms).unwrap_or(i32::MAX);
        ResponseBody::ShareAcknowledge(resp)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::DEFAULT_LISTENER;
    use crate::partition::append_coordinator_records;
    use osprey_cluster::NewTopic;
    use osprey_coordinator::group::Record;
    use osprey_protocol::messages::share_acknowledge_request as ack_req;
    use osprey_protocol::messages::share_fetch_request as fetch_req;

    fn client(port: u16) -> Client {
        Client {
            peer: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            listener: DEFAULT_LISTENER.into(),
            principal: crate::tls::ANONYMOUS.into(),
        }
    }

    /// A broker with topic `t` (one partition) holding `n` records, one per batch.
    fn broker_with_records(name: &str, n: usize) -> (Arc<Broker>, std::path::PathBuf, Uuid) {
        broker_with_partitions(name, 1, n)
    }

    /// A broker with topic `t` of `partitions` partitions, each holding `n` records, one
    /// per batch.
    fn broker_with_partitions(name: &str, partitions: i32, n: usize) -> (Arc<Broker>, std::path::PathBuf, Uuid) {
        let (broker, dir) = crate::test_support::broker_in(name);
        let topic =
            NewTopic { name: "t".into(), num_partitions: partitions, replication_factor: 1, ..Default::default() };
        let topic = broker.create_topic(&topic, false).unwrap();
        for index in 0..partitions {
            append(&broker, topic.id, index, n);
        }
        (broker, dir, topic.id)
    }

    /// Appends `n` records, one per batch, to partition `index` of `topic`.
    fn append(broker: &Arc<Broker>, topic: Uuid, index: i32, n: usize) {
        let partition = broker.replica_manager.partition(topic, index).unwrap();
        for i in 0..n {
            let record = Record { key: format!("k{i}").into_bytes().into(), value: Some(b"v".to_vec().into()) };
            let (_, durable) =
                append_coordinator_records(&partition, -1, &broker.flusher, &[record], None, "test").unwrap();
            durable.blocking_recv().unwrap().unwrap();
        }
    }

    fn set_group_config(broker: &Arc<Broker>, group: &str, key: &str, value: &str) {
        let record = osprey_cluster::MetadataRecord::SetGroupConfig {
            group: group.into(),
            key: key.into(),
            value: Some(value.into()),
        };
        broker.apply_records_for_test(&[record]);
    }

    fn earliest(broker: &Arc<Broker>, group: &str) {
        set_group_config(broker, group, "share.auto.offset.reset", "earliest");
    }

    fn fetch_request(
        member: &str,
        epoch: i32,
        topic: Uuid,
        acks: Vec<fetch_req::AcknowledgementBatch>,
    ) -> ShareFetchRequest {
        ShareFetchRequest {
            group_id: Some("g".into()),
            member_id: Some(member.into()),
            share_session_epoch: epoch,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            max_records: 500,
            batch_size: 500,
            topics: vec![fetch_req::FetchTopic {
                topic_id: topic,
                partitions: vec![fetch_req::FetchPartition {
                    partition_index: 0,
                    acknowledgement_batches: acks,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn acknowledge_request(
        member: &str,
        epoch: i32,
        topic: Uuid,
        first: i64,
        last: i64,
        ack_type: i8,
    ) -> ShareAcknowledgeRequest {
        ShareAcknowledgeRequest {
            group_id: Some("g".into()),
            member_id: Some(member.into()),
            share_session_epoch: epoch,
            topics: vec![ack_req::AcknowledgeTopic {
                topic_id: topic,
                partitions: vec![ack_req::AcknowledgePartition {
                    partition_index: 0,
                    acknowledgement_batches: vec![ack_req::AcknowledgementBatch {
                        first_offset: first,
                        last_offset: last,
                        acknowledge_types: vec![ack_type],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    async fn answer(reply: Reply) -> ResponseBody {
        match reply {
            Reply::Now(body) => body,
            Reply::Later(pending) => pending.await,
            other => panic!("{other:?}"),
        }
    }

    async fn share_fetch(broker: &Arc<Broker>, req: ShareFetchRequest, port: u16) -> ShareFetchResponse {
        match answer(handle_fetch(broker, req, 2, &client(port), None)).await {
            ResponseBody::ShareFetch(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn acquired(r: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
        r.responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .flat_map(|p| p.acquired_records.iter())
            .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
            .collect()
    }

    /// A broker with `n` records in `t`, group `g` starting at the earliest, and member
    /// `a` holding records 0-1 (its session at epoch 1).
    async fn a_holds_the_first_two(name: &'static str, n: usize) -> (Arc<Broker>, std::path::PathBuf, Uuid) {
        let (broker, dir, topic) = tokio::task::spawn_blocking(move || broker_with_records(name, n)).await.unwrap();
        earliest(&broker, "g");
        let mut first = fetch_request("a", 0, topic, vec![]);
        first.max_records = 2;
        first.share_acquire_mode = 1; // record limit: exactly 2
        assert_eq!(acquired(&share_fetch(&broker, first, 1).await), vec![(0, 1, 1)]);
        (broker, dir, topic)
    }

    fn accept(first: i64, last: i64, ack_type: i8) -> fetch_req::AcknowledgementBatch {
        fetch_req::AcknowledgementBatch {
            first_offset: first,
            last_offset: last,
            acknowledge_types: vec![ack_type],
            ..Default::default()
        }
    }

    /// Two members share one partition: what one acquired the other does not get; a
    /// RELEASE makes records available again, with their delivery count; an ACCEPT is
    /// final; a closing session releases what its member still holds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_share_a_partition_and_acknowledge_what_they_acquired() {
        let (broker, dir, topic) =
            tokio::task::spawn_blocking(|| broker_with_records("share-fetch-members", 10)).await.unwrap();
        earliest(&broker, "g");
        let mut req = fetch_request("a", 0, topic, vec![]);
        req.max_records = 4;
        req.share_acquire_mode = 1; // record limit: exactly 4
        let a = share_fetch(&broker, req, 1).await;
        assert_eq!(a.error_code, 0, "{a:?}");
        assert_eq!(acquired(&a), vec![(0, 3, 1)]);
        assert!(!a.responses[0].partitions[0].records.is_empty(), "the batches holding them are sent");
        assert_eq!(a.acquisition_lock_timeout_ms, 30_000);

        let b = share_fetch(&broker, fetch_request("b", 0, topic, vec![]), 2).await;
        assert_eq!(acquired(&b), vec![(4, 9, 1)], "b gets what a did not acquire");

        // a accepts 0-1 and releases 2-3; b accepts everything it has.
        let a2 = share_fetch(&broker, fetch_request("a", 1, topic, vec![accept(0, 1, 1), accept(2, 3, 2)]), 1).await;
        assert_eq!(a2.responses[0].partitions[0].acknowledge_error_code, 0, "{a2:?}");
        // One range per log batch (each record is a batch of its own here), as Kafka reports them.
        assert_eq!(acquired(&a2), vec![(2, 2, 2), (3, 3, 2)], "released records come back, delivered a second time");
        let ack = acknowledge_request("b", 1, topic, 4, 9, 1);
        let ResponseBody::ShareAcknowledge(acked) = answer(handle_acknowledge(&broker, ack.clone(), None)).await else {
            panic!()
        };
        assert_eq!(acked.responses[0].partitions[0].error_code, 0, "{acked:?}");
        // Acknowledging again what is already accepted is refused.
        let mut again = ack;
        again.share_session_epoch = 2;
        let ResponseBody::ShareAcknowledge(refused) = answer(handle_acknowledge(&broker, again, None)).await else {
            panic!()
        };
        assert_eq!(refused.responses[0].partitions[0].error_code, ErrorCode::INVALID_RECORD_STATE.code());

        // a's session closes holding 2-3: they are released for b (delivery count back to 1).
        let close = fetch_request("a", -1, topic, vec![]);
        assert_eq!(share_fetch(&broker, close, 1).await.error_code, 0);
        // The release is written after the answer; b's fetch waits for it.
        let mut wait = fetch_request("b", 3, topic, vec![]);
        wait.max_wait_ms = 30_000;
        let b2 = share_fetch(&broker, wait, 2).await;
        assert_eq!(acquired(&b2), vec![(2, 2, 2), (3, 3, 2)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// DeleteRecords moved the log start past records in flight: the share partition moves
    /// on to the log start instead of failing every fetch with OFFSET_OUT_OF_RANGE.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_start_past_the_share_start_offset_moves_the_share_partition_on() {
        let (broker, dir, topic) = a_holds_the_first_two("share-fetch-log-start", 10).await;
        // Releasing 0-1 makes the next fetch read from offset 0 again, which is gone now.
        let ResponseBody::ShareAcknowledge(released) =
            answer(handle_acknowledge(&broker, acknowledge_request("a", 1, topic, 0, 1, 2), None)).await
        else {
            panic!()
        };
        assert_eq!(released.responses[0].partitions[0].error_code, 0);
        let partition = broker.replica_manager.partition(topic, 0).unwrap();
        partition.log.delete_records_before(5).unwrap();
        let mut wait = fetch_request("b", 0, topic, vec![]);
        wait.max_wait_ms = 30_000;
        // As Kafka: the read past the log start answers at once, empty and without an error,
        // and the client fetches again.
        let moved = share_fetch(&broker, wait.clone(), 2).await;
        assert_eq!(moved.responses[0].partitions[0].error_code, 0, "{moved:?}");
        assert!(acquired(&moved).is_empty(), "{moved:?}");
        wait.share_session_epoch = 1;
        let got = share_fetch(&broker, wait, 2).await;
        assert_eq!(acquired(&got), vec![(5, 9, 1)], "from the new log start");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn session_epochs_are_checked() {
        let (broker, dir, topic) =
            tokio::task::spawn_blocking(|| broker_with_records("share-fetch-epochs", 1)).await.unwrap();
        let r = share_fetch(&broker, fetch_request("a", 1, topic, vec![]), 1).await;
        assert_eq!(r.error_code, ErrorCode::SHARE_SESSION_NOT_FOUND.code());
        let r = share_fetch(&broker, fetch_request("a", 0, topic, vec![accept(0, 0, 1)]), 1).await;
        assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code(), "an opening fetch may not acknowledge");
        assert_eq!(share_fetch(&broker, fetch_request("a", 0, topic, vec![]), 1).await.error_code, 0);
        let r = share_fetch(&broker, fetch_request("a", 5, topic, vec![]), 1).await;
        assert_eq!(r.error_code, ErrorCode::INVALID_SHARE_SESSION_EPOCH.code());
        let r = share_fetch(&broker, fetch_request(&"m".repeat(37), 0, topic, vec![]), 1).await;
        assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code(), "a member id longer than a UUID's text");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// ShareFetch v2 with IsRenewAck: it renews and fetches nothing; its limits must be 0.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewing_fetch_fetches_nothing_and_must_ask_for_nothing() {
        let (broker, dir, topic) = a_holds_the_first_two("share-fetch-renew", 4).await;
        let mut renew = fetch_request("a", 1, topic, vec![accept(0, 1, 4)]);
        renew.is_renew_ack = true;
        let refused = share_fetch(&broker, renew.clone(), 1).await;
        assert_eq!(refused.error_code, ErrorCode::INVALID_REQUEST.code());
        assert_eq!(
            refused.error_message.as_deref(),
            Some("maxBytes must be set to 0,minBytes must be set to 0,maxRecords must be set to 0,if isRenewAck is true.")
        );
        (renew.max_bytes, renew.min_bytes, renew.max_records, renew.max_wait_ms) = (0, 0, 0, 0);
        let renewed = share_fetch(&broker, renew, 1).await;
        assert_eq!(renewed.error_code, 0, "{renewed:?}");
        assert_eq!(renewed.responses[0].partitions[0].acknowledge_error_code, 0);
        assert!(acquired(&renewed).is_empty(), "a renewing fetch acquires nothing");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Kafka's `DelayedShareFetch`: a fetch that can read fewer than MinBytes waits,
    /// acquiring nothing meanwhile, and completes once appends bring MinBytes, with every
    /// record there is then (not the first record alone, as it would at once).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fetch_waits_for_min_bytes_and_completes_on_new_data() {
        let (broker, dir, topic) =
            tokio::task::spawn_blocking(|| broker_with_records("share-fetch-min-bytes", 1)).await.unwrap();
        earliest(&broker, "g");
        let one_batch = broker.replica_manager.partition(topic, 0).unwrap().log.read(0, 1 << 20).unwrap().records;
        let mut req = fetch_request("a", 0, topic, vec![]);
        req.min_bytes = i32::try_from(one_batch.len() * 3).unwrap();
        req.max_wait_ms = 60_000;
        let waiting = {
            let broker = broker.clone();
            tokio::spawn(async move { share_fetch(&broker, req, 1).await })
        };
        // Whenever it looks, it finds one batch: less than MinBytes.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "answered before MinBytes or MaxWaitMs");
        let b = broker.clone();
        tokio::task::spawn_blocking(move || append(&b, topic, 0, 2)).await.unwrap();
        let got = waiting.await.unwrap();
        assert_eq!(got.error_code, 0, "{got:?}");
        assert_eq!(acquired(&got), vec![(0, 2, 1)], "all three, once MinBytes was there");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fetch that never reaches MinBytes answers at MaxWaitMs with what it can acquire
    /// then (Kafka's `onComplete` at expiry).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fetch_below_min_bytes_acquires_what_there_is_at_max_wait() {
        let (broker, dir, topic) =
            tokio::task::spawn_blocking(|| broker_with_records("share-fetch-max-wait", 2)).await.unwrap();
        earliest(&broker, "g");
        let mut req = fetch_request("a", 0, topic, vec![]);
        req.min_bytes = 1 << 20;
        req.max_wait_ms = 200;
        let got = share_fetch(&broker, req, 1).await;
        assert_eq!(got.error_code, 0, "{got:?}");
        assert_eq!(acquired(&got), vec![(0, 1, 1)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Kafka's `PartitionRotateStrategy`: the session's partitions are fetched in an order
    /// moved left by the session epoch, so with MaxRecords 1 each fetch takes its record
    /// from the next partition in turn.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_session_partitions_are_rotated_by_the_session_epoch() {
        let (broker, dir, topic) =
            tokio::task::spawn_blocking(|| broker_with_partitions("share-fetch-rotation", 3, 4)).await.unwrap();
        earliest(&broker, "g");
        let mut partitions_fetched_first = Vec::new();
        for epoch in 0..5 {
            let mut req = fetch_request("a", epoch, topic, vec![]);
            req.topics[0].partitions = (0..3)
                .map(|partition_index| fetch_req::FetchPartition { partition_index, ..Default::default() })
                .collect();
            (req.max_records, req.share_acquire_mode) = (1, 1);
            let got = share_fetch(&broker, req, 1).await;
            let with_records: Vec<i32> = got.responses[0]
                .partitions
                .iter()
                .filter(|p| !p.acquired_records.is_empty())
                .map(|p| p.partition_index)
                .collect();
            partitions_fetched_first.extend(with_records);
        }
        assert_eq!(partitions_fetched_first, vec![0, 1, 2, 0, 1]);
        assert_eq!(rotate(vec![(topic, 0), (topic, 1), (topic, 2)], 2), vec![(topic, 2), (topic, 0), (topic, 1)]);
        assert_eq!(rotate(vec![(topic, 0), (topic, 1)], -1), vec![(topic, 0), (topic, 1)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A change of the group's `share.delivery.count.limit` applies to the loaded share
    /// partition at its next release (not at its next load), and
    /// `share.renew.acknowledge.enable` false refuses RENEW, as in Kafka.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_group_config_change_applies_to_the_loaded_share_partition() {
        let (broker, dir, topic) = a_holds_the_first_two("share-fetch-config-change", 2).await;
        set_group_config(&broker, "g", "share.renew.acknowledge.enable", "false");
        let mut renew = fetch_request("a", 1, topic, vec![accept(0, 1, 4)]);
        (renew.max_bytes, renew.min_bytes, renew.max_records, renew.max_wait_ms, renew.is_renew_ack) =
            (0, 0, 0, 0, true);
        let refused = share_fetch(&broker, renew, 1).await;
        assert_eq!(refused.responses[0].partitions[0].acknowledge_error_code, ErrorCode::INVALID_RECORD_STATE.code());
        // Released at the first delivery: delivered again, with count 2.
        let again = share_fetch(&broker, fetch_request("a", 2, topic, vec![accept(0, 1, 2)]), 1).await;
        assert_eq!(acquired(&again), vec![(0, 1, 2)]);
        set_group_config(&broker, "g", "share.delivery.count.limit", "2");
        // Released at the new limit: archived, not delivered a third time.
        let done = share_fetch(&broker, fetch_request("a", 3, topic, vec![accept(0, 1, 2)]), 1).await;
        assert_eq!(done.responses[0].partitions[0].acknowledge_error_code, 0, "{done:?}");
        assert!(acquired(&done).is_empty(), "archived at the lowered limit: {done:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A new leader finds records persisted ARCHIVING (its predecessor died before their
    /// dead-letter queue write was done) and writes them to the group's DLQ topic, with
    /// Kafka's headers, then archives them: Kafka's `maybeResumeDlqArchiving`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_loaded_archiving_are_written_to_the_dead_letter_queue_and_archived() {
        use osprey_coordinator::share_state::{ShareKey, StateBatch, WriteState};
        use osprey_protocol::records::Batches;
        let (broker, dir, topic) =
            tokio::task::spawn_blocking(|| broker_with_records("share-fetch-dlq-resume", 3)).await.unwrap();
        let b = broker.clone();
        let dlq = tokio::task::spawn_blocking(move || {
            let configs = [("errors.deadletterqueue.group.enable".to_string(), "true".to_string())].into();
            let new = NewTopic {
                name: "dlq.t".into(),
                num_partitions: 1,
                replication_factor: 1,
                configs,
                ..Default::default()
            };
            b.create_topic(&new, false).unwrap()
        })
        .await
        .unwrap();
        earliest(&broker, "g");
        set_group_config(&broker, "g", "errors.deadletterqueue.topic.name", "dlq.t");
        let key = ShareKey { group_id: "g".into(), topic_id: topic, partition: 0 };
        crate::share_persister::initialize(&broker, &key, 0, 0).await.unwrap();
        let rejected = StateBatch { first_offset: 0, last_offset: 1, delivery_state: 3, delivery_count: 1 };
        let state = WriteState {
            state_epoch: -1,
            leader_epoch: -1,
            start_offset: 0,
            delivery_complete_count: 0,
            batches: vec![rejected],
        };
        crate::share_persister::write(&broker, &key, &state).await.unwrap();

        let a = share_fetch(&broker, fetch_request("a", 0, topic, vec![]), 1).await;
        assert_eq!(acquired(&a), vec![(2, 2, 1)], "ARCHIVING records are not delivered");

        let dlq_partition = broker.replica_manager.partition(dlq.id, 0).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while dlq_partition.snapshot().high_watermark < 2
            || crate::share_persister::read(&broker, &key, 0).await.unwrap().start_offset < 2
        {
            assert!(std::time::Instant::now() < deadline, "the DLQ records and the archive did not come");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let slice = dlq_partition.log.read_limited(0, 1 << 20, 2, true).unwrap();
        let mut written = Vec::new();
        for batch in Batches::new(slice.records) {
            for record in batch.unwrap().records(1 << 20).unwrap() {
                let record = record.unwrap();
                let headers: Vec<(String, String)> = record
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            String::from_utf8_lossy(&h.key).into(),
                            String::from_utf8_lossy(h.value.as_deref().unwrap()).into(),
                        )
                    })
                    .collect();
                written.push((record.key, record.value, headers));
            }
        }
        let expected = |offset: &str| {
            let pairs = [
                ("__dlq.errors.topic", "t"),
                ("__dlq.errors.partition", "0"),
                ("__dlq.errors.offset", offset),
                ("__dlq.errors.group", "g"),
                ("__dlq.errors.delivery.count", "1"),
                ("__dlq.errors.message", "Offset rejected by client."),
            ];
            (None, None, pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>())
        };
        assert_eq!(written, vec![expected("0"), expected("1")]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Dead-letter queues are on for a group from `share.version` 2 with a DLQ topic named,
    /// as Kafka's `isDLQEnabledForGroup`: at level 1, or with no topic, rejected records are
    /// archived at once.
    #[test]
    fn a_group_has_a_dead_letter_queue_from_share_version_2_with_a_topic_named() {
        for (level, topic, enabled) in [(2, Some("dlq.t"), true), (1, Some("dlq.t"), false), (2, None, false)] {
            let (broker, dir) =
                crate::test_support::broker_with_config(&format!("share-dlq-gate-{level}-{enabled}"), |c| {
                    c.share_version = level
                });
            if let Some(topic) = topic {
                set_group_config(&broker, "g", "errors.deadletterqueue.topic.name", topic);
            }
            let (config, _, _) = crate::share_partitions::share_settings(&broker, "g");
            assert_eq!(config.dlq_enabled, enabled, "share.version {level}, topic {topic:?}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
