//! ShareFetch (v1-2) and ShareAcknowledge (v1-2), KIP-932: share consumers fetch records
//! from the share partitions this broker leads and acknowledge them, within a share
//! session (`crate::share_sessions`); the share partitions are `crate::share_partitions`.
//! As Kafka's `KafkaApis.handleShareFetchRequest` / `handleShareAcknowledgeRequest`:
//!
//! - READ on the group (else GROUP_AUTHORIZATION_FAILED for the whole request) and on
//!   each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
//! - A ShareFetch's acknowledgements are applied first, each partition's outcome in its
//!   `AcknowledgeErrorCode`, answered once durable. Then the session's partitions are
//!   fetched: records acquired for the member, the batches holding them in `Records`, the
//!   ranges in `AcquiredRecords`. With nothing to acquire the fetch waits up to
//!   `MaxWaitMs` for appends or records made available again; it answers as soon as
//!   anything is acquired (`MinBytes` is not waited for: acquired records are locked, and
//!   holding them while waiting for more only delays them).
//! - A new session's answer lists every partition; a later one only those with records,
//!   an error or an acknowledgement outcome.
//! - Epoch -1 ends the session after its acknowledgements, releasing what the member
//!   still holds.

use crate::access::{kind, op, Access};
use crate::broker::Broker;
use crate::dispatch::{Client, Reply};
use crate::metadata_cache::MetadataCache;
use crate::partition::Partition;
use crate::share_partitions::{share_settings, FetchLimits, ShareError, Slot};
use crate::share_sessions::{ConnectionKey, FetchContext, TopicIdPartition};
use osprey_coordinator::share::{AcknowledgementBatch, ShareAcquireMode};
use osprey_coordinator::share_state::ShareKey;
use osprey_protocol::messages::share_acknowledge_response as ack_resp;
use osprey_protocol::messages::share_fetch_response as fetch_resp;
use osprey_protocol::messages::{
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use osprey_protocol::{ErrorCode, ResponseBody, Uuid};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

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
    let limits = FetchLimits {
        max_bytes: req.max_bytes.clamp(0, broker.config().fetch_max_bytes.max(0)) as usize,
        max_records: if version >= 1 && req.max_records > 0 { req.max_records } else { 500 },
        batch_size: if version >= 1 { req.batch_size } else { 0 },
        mode: ShareAcquireMode::from_id(req.share_acquire_mode).unwrap_or_default(),
        min_one_batch: true,
    };
    let broker = broker.clone();
    let listener = client.listener.clone();
    let max_wait = Duration::from_millis(req.max_wait_ms.max(0) as u64);
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
        fetch(&broker, access.as_ref(), &group_id, &member_id, &partitions, limits, max_wait, &mut outcomes).await;
        let lock_ms = share_settings(&broker, &group_id).0.record_lock_duration_ms;
        let mut resp = ShareFetchResponse {
            acquisition_lock_timeout_ms: i32::try_from(lock_ms).unwrap_or(i32::MAX),
            ..Default::default()
        };
        let cache = MetadataCache::for_listener(&broker, &listener);
        let mut endpoints = BTreeMap::new();
        for (tp, outcome) in outcomes {
            let has_records = outcome.records.as_ref().is_some_and(|r| !r.is_empty());
            let included = full && partitions.contains(&tp)
                || has_records
                || outcome.error.is_some()
                || outcome.acknowledge_error.is_some()
                || acknowledged(&tp, &req);
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

/// Whether the request acknowledged anything on `tp` (its outcome is answered even when
/// it succeeded).
fn acknowledged(tp: &TopicIdPartition, req: &ShareFetchRequest) -> bool {
    req.topics
        .iter()
        .filter(|t| t.topic_id == tp.0)
        .flat_map(|t| t.partitions.iter())
        .any(|p| p.partition_index == tp.1 && !p.acknowledgement_batches.is_empty())
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

/// Acquires for the member on `partitions`, waiting up to `max_wait` while nothing can be
/// acquired.
#[allow(clippy::too_many_arguments)]
async fn fetch(
    broker: &Arc<Broker>,
    access: Option<&Access>,
    group_id: &str,
    member_id: &str,
    partitions: &[TopicIdPartition],
    limits: FetchLimits,
    max_wait: Duration,
    outcomes: &mut BTreeMap<TopicIdPartition, Outcome>,
) {
    if partitions.is_empty() {
        return;
    }
    let deadline = tokio::time::Instant::now() + max_wait;
    loop {
        // Watch first, then look: what changes after the look wakes the wait.
        let mut watchers = JoinSet::new();
        let mut available = broker.share_partitions.watch_available();
        available.borrow_and_update();
        watchers.spawn(async move { available.changed().await.is_ok() });
        let mut acquired = 0i64;
        let mut bytes = 0usize;
        let mut errors = false;
        for &tp in partitions {
            let key = ShareKey { group_id: group_id.to_string(), topic_id: tp.0, partition: tp.1 };
            let outcome = outcomes.entry(tp).or_default();
            let slot = match slot(broker, access, &key).await {
                Ok(slot) => slot,
                Err(e) => {
                    errors = true;
                    outcome.error = Some(e);
                    continue;
                }
            };
            let mut hw = slot.partition().watch_high_watermark();
            watchers.spawn(async move { hw.changed().await.is_ok() });
            let left = FetchLimits {
                max_bytes: limits.max_bytes.saturating_sub(bytes),
                max_records: limits.max_records.saturating_sub(i32::try_from(acquired).unwrap_or(i32::MAX)),
                min_one_batch: bytes == 0,
                ..limits
            };
            if left.max_records <= 0 {
                continue;
            }
            match slot.acquire(broker, member_id, left).await {
                Ok(fetched) => {
                    acquired += fetched.count;
                    bytes += fetched.records.len();
                    if fetched.count > 0 {
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
                }
                Err(e) => {
                    errors = true;
                    outcome.error = Some(e);
                }
            }
        }
        if acquired > 0 || errors || tokio::time::Instant::now() >= deadline {
            return;
        }
        let stopping = broker.stopping();
        let timed_out = crate::telemetry::stages::remote_wait(async {
            tokio::select! {
                Some(_) = watchers.join_next() => false,
                _ = tokio::time::sleep_until(deadline) => true,
                _ = stopping => true,
            }
        })
        .await;
        if timed_out {
            return;
        }
    }
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
        let (broker, dir) = crate::test_support::broker_in(name);
        let topic = NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, ..Default::default() };
        let topic = broker.create_topic(&topic, false).unwrap();
        let partition = broker.replica_manager.partition(topic.id, 0).unwrap();
        for i in 0..n {
            let record = Record { key: format!("k{i}").into_bytes().into(), value: Some(b"v".to_vec().into()) };
            let (_, durable) =
                append_coordinator_records(&partition, -1, &broker.flusher, &[record], None, "test").unwrap();
            durable.blocking_recv().unwrap().unwrap();
        }
        (broker, dir, topic.id)
    }

    fn earliest(broker: &Arc<Broker>, group: &str) {
        let record = osprey_cluster::MetadataRecord::SetGroupConfig {
            group: group.into(),
            key: "share.auto.offset.reset".into(),
            value: Some("earliest".into()),
        };
        broker.apply_records_for_test(&[record]);
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
        let got = share_fetch(&broker, wait, 2).await;
        assert_eq!(got.responses[0].partitions[0].error_code, 0, "{got:?}");
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
}
