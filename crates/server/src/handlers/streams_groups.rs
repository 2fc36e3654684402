//! StreamsGroupHeartbeat v0-1 and StreamsGroupDescribe v0-1 (KIP-1071): streams groups'
//! membership, answered by the group coordinator (`osprey_coordinator::group::streams`),
//! and the creation of the internal topics their topologies need, as Kafka 4.4's
//! `KafkaApis.handleStreamsGroupHeartbeat` does through its auto topic creation manager.
//!
//! They need streams groups on (`streams.version` at 1, `osprey.streams.version`):
//! otherwise [`refused_while_disabled`] answers them UNSUPPORTED_VERSION before the
//! authorizer is asked, as Kafka's `isStreamsGroupProtocolEnabled`.
//!
//! A heartbeat whose topology names an internal Kafka topic, or a name no topic may have,
//! is answered STREAMS_INVALID_TOPOLOGY before the coordinator sees it (Kafka checks these
//! before its authorizer; `authorization.rs` checks READ on the group and DESCRIBE on the
//! topology's topics). When the coordinator reports internal topics missing, they are
//! created in the background with the partition counts and configs the topology gives
//! (CREATE on the cluster or on each topic, else the status says so); the member learns
//! at a later heartbeat, and a failed creation is reported in the status for twice the
//! heartbeat interval, as Kafka caches it.

use crate::access::{kind, op, Access};
use crate::authorized_operations;
use crate::broker::Broker;
use crate::dispatch::{Client, Reply};
use osprey_cluster::controller::validate_topic_name;
use osprey_cluster::NewTopic;
use osprey_coordinator::group::streams::topology::Status;
use osprey_coordinator::group::streams::InternalTopic;
use osprey_coordinator::group::{Response, StreamsHeartbeatAnswer};
use osprey_protocol::messages::streams_group_describe_response::DescribedGroup;
use osprey_protocol::messages::streams_group_heartbeat_response::Status as ResponseStatus;
use osprey_protocol::messages::{
    StreamsGroupDescribeRequest, StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
};
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Kafka's internal topics (`Topic.isInternal`), which no topology may use.
const INTERNAL_TOPICS: [&str; 3] = ["__consumer_offsets", "__transaction_state", "__share_group_state"];

/// The answer to a streams-group request while streams groups are off (`streams.version`
/// 0): UNSUPPORTED_VERSION, as Kafka's `getErrorResponse` builds it. `None` for any other
/// request, or when streams groups are on.
pub fn refused_while_disabled(broker: &Broker, body: &RequestBody) -> Option<ResponseBody> {
    if crate::supported::streams_groups_enabled(broker.settings.config.streams_version) {
        return None;
    }
    let code = ErrorCode::UNSUPPORTED_VERSION.code();
    match body {
        RequestBody::StreamsGroupHeartbeat(_) => {
            Some(ResponseBody::StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse {
                error_code: code,
                ..Default::default()
            }))
        }
        RequestBody::StreamsGroupDescribe(r) => {
            Some(ResponseBody::StreamsGroupDescribe(StreamsGroupDescribeResponse {
                groups: r
                    .group_ids
                    .iter()
                    .map(|id| DescribedGroup { group_id: id.clone(), error_code: code, ..Default::default() })
                    .collect(),
                ..Default::default()
            }))
        }
        _ => None,
    }
}

/// Every topic a heartbeat's topology names: source, repartition sink, repartition
/// source and changelog topics (what Kafka authorizes and checks), once each.
pub fn topology_topics(request: &StreamsGroupHeartbeatRequest) -> impl Iterator<Item = &str> {
    let mut seen = BTreeSet::new();
    request
        .topology
        .iter()
        .flat_map(|t| t.subtopologies.iter())
        .flat_map(|s| {
            let named = s.source_topics.iter().chain(&s.repartition_sink_topics).map(String::as_str);
            let internal = s.repartition_source_topics.iter().chain(&s.state_changelog_topics).map(|t| t.name.as_str());
            named.chain(internal)
        })
        .filter(move |t| seen.insert(*t))
}

/// Kafka's checks of a topology's topic names before the coordinator sees it.
fn invalid_topology(request: &StreamsGroupHeartbeatRequest) -> Option<StreamsGroupHeartbeatResponse> {
    let refuse = |message: String| StreamsGroupHeartbeatResponse {
        error_code: ErrorCode::STREAMS_INVALID_TOPOLOGY.code(),
        error_message: Some(message),
        ..Default::default()
    };
    let internal: Vec<&str> = topology_topics(request).filter(|t| INTERNAL_TOPICS.contains(t)).collect();
    if !internal.is_empty() {
        return Some(refuse(format!(
            "Use of Kafka internal topics {} in a Kafka Streams topology is prohibited.",
            internal.join(",")
        )));
    }
    let invalid: Vec<&str> = topology_topics(request).filter(|t| validate_topic_name(t).is_err()).collect();
    if !invalid.is_empty() {
        return Some(refuse(format!("Topic names {} are not valid topic names.", invalid.join(","))));
    }
    None
}

/// StreamsGroupHeartbeat: the member joins, heartbeats or leaves; the answer waits for
/// the group's records to be durable when it changed them; the internal topics the
/// coordinator reports missing are created.
pub fn heartbeat(
    broker: &Arc<Broker>,
    req: StreamsGroupHeartbeatRequest,
    client: &Client,
    client_id: &str,
    client_host: &str,
) -> Reply {
    if let Some(refused) = invalid_topology(&req) {
        return Reply::Now(ResponseBody::StreamsGroupHeartbeat(refused));
    }
    let image = broker.image();
    let rx = broker.groups.call_later(broker, |c, reply, now| {
        c.streams_group_heartbeat(&req, client_id, client_host, &*image, reply, now)
    });
    let broker = broker.clone();
    let access = Access::of(&broker, client);
    let group_id = req.group_id.clone();
    Reply::Later(Box::pin(async move {
        let answer = match crate::telemetry::stages::remote_wait(rx).await {
            Ok(Response::StreamsGroupHeartbeat(answer)) => *answer,
            _ => {
                let code = ErrorCode::COORDINATOR_NOT_AVAILABLE.code();
                return ResponseBody::StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse {
                    error_code: code,
                    ..Default::default()
                });
            }
        };
        ResponseBody::StreamsGroupHeartbeat(create_internal_topics(&broker, &access, &group_id, answer))
    }))
}

/// Kafka's handling of `StreamsGroupHeartbeatResult.creatableTopics`: without CREATE on
/// the cluster, the topics the client may not create are named in the
/// MISSING_INTERNAL_TOPICS status; otherwise they are created in the background, and
/// failures seen recently are added to that status.
fn create_internal_topics(
    broker: &Arc<Broker>,
    access: &Access,
    group_id: &str,
    answer: StreamsHeartbeatAnswer,
) -> StreamsGroupHeartbeatResponse {
    let StreamsHeartbeatAnswer { mut response, topics_to_create } = answer;
    if topics_to_create.is_empty() {
        return response;
    }
    let unauthorized: Vec<&str> = if access.allows_quietly(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CREATE)
    {
        Vec::new()
    } else {
        topics_to_create
            .iter()
            .map(|t| t.name.as_str())
            .filter(|t| !access.allows(kind::TOPIC, t, op::CREATE))
            .collect()
    };
    if !unauthorized.is_empty() {
        let detail = format!("Unauthorized to CREATE on topics {}.", unauthorized.join(", "));
        append_missing_topics_status(&mut response, &detail, true);
        return response;
    }
    let config = broker.config();
    let heartbeat_interval_ms = broker
        .image()
        .group_configs(group_id)
        .and_then(|c| c.get(osprey_coordinator::group::group_config::STREAMS_HEARTBEAT_INTERVAL_MS).cloned())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(i64::from(config.group_streams.heartbeat_interval_ms));
    let now = crate::broker::now_ms();
    let failed = broker.streams_topics.begin(&topics_to_create, now, 2 * heartbeat_interval_ms);
    if !failed.is_empty() {
        let errors: Vec<String> = failed.iter().map(|(topic, error)| format!("{topic} ({error})")).collect();
        append_missing_topics_status(&mut response, &format!("Creation failed: {}.", errors.join(", ")), false);
    }
    let to_create: Vec<InternalTopic> =
        topics_to_create.into_iter().filter(|t| broker.streams_topics.claim(&t.name)).collect();
    if !to_create.is_empty() {
        let broker = broker.clone();
        tokio::task::spawn_blocking(move || {
            for topic in to_create {
                let result = create_topic(&broker, &topic);
                broker.streams_topics.finish(&topic.name, result.err(), crate::broker::now_ms());
            }
        });
    }
    response
}

/// Adds `detail` to the MISSING_INTERNAL_TOPICS status (`"; "` after its detail), or, if
/// there is none and `add` is set, a status of its own.
fn append_missing_topics_status(response: &mut StreamsGroupHeartbeatResponse, detail: &str, add: bool) {
    let statuses = response.status.get_or_insert_with(Vec::new);
    let code = Status::MissingInternalTopics.code();
    match statuses.iter_mut().find(|s| s.status_code == code) {
        Some(status) => status.status_detail = format!("{}; {detail}", status.status_detail),
        None if add => {
            statuses.push(ResponseStatus { status_code: code, status_detail: detail.to_string(), ..Default::default() })
        }
        None => {}
    }
}

/// Creates one internal topic as Kafka's `createStreamsInternalTopics` asks the
/// controller: the decided partition count, the topology's replication factor (or the
/// broker's default) and configs. Already there counts as created.
fn create_topic(broker: &Arc<Broker>, topic: &InternalTopic) -> Result<(), String> {
    let new = NewTopic {
        name: topic.name.clone(),
        num_partitions: topic.num_partitions,
        replication_factor: topic.replication_factor.unwrap_or(-1),
        configs: topic.configs.clone(),
        ..Default::default()
    };
    match broker.create_topic(&new, false) {
        Ok(_) => Ok(()),
        Err(e) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => Ok(()),
        Err(e) => {
            tracing::info!(topic = %topic.name, error = %e, "a streams group's internal topic was not created");
            Err(e.code.name().to_string())
        }
    }
}

/// The most internal topic creations remembered (in flight, or failed recently).
const MAX_TRACKED_TOPICS: usize = 10_000;

/// The internal topics being created for streams groups, and the recent failures (Kafka's
/// `AutoTopicCreationManager` in-flight set and error cache), so that every member's
/// heartbeat does not ask the controller again while one creation runs.
#[derive(Debug, Default)]
pub struct StreamsTopicCreations {
    state: Mutex<Creations>,
}

#[derive(Debug, Default)]
struct Creations {
    in_flight: BTreeSet<String>,
    /// Topic → (error, when it was seen).
    failures: BTreeMap<String, (String, i64)>,
}

impl StreamsTopicCreations {
    /// The recent failures of `topics` (at `now_ms`, each reported `ttl_ms` after it was
    /// seen); expired ones are forgotten.
    fn begin(&self, topics: &[InternalTopic], now_ms: i64, ttl_ms: i64) -> Vec<(String, String)> {
        let Ok(mut state) = self.state.lock() else { return Vec::new() };
        state.failures.retain(|_, (_, at)| now_ms < at.saturating_add(ttl_ms));
        topics
            .iter()
            .filter_map(|t| state.failures.get(&t.name).map(|(error, _)| (t.name.clone(), error.clone())))
            .collect()
    }

    /// Whether this caller is to create `topic` (nobody is creating it now, and the
    /// tracker has room).
    fn claim(&self, topic: &str) -> bool {
        let Ok(mut state) = self.state.lock() else { return false };
        if state.in_flight.contains(topic) || state.in_flight.len() + state.failures.len() >= MAX_TRACKED_TOPICS {
            return false;
        }
        state.in_flight.insert(topic.to_string())
    }

    fn finish(&self, topic: &str, error: Option<String>, now_ms: i64) {
        let Ok(mut state) = self.state.lock() else { return };
        state.in_flight.remove(topic);
        match error {
            Some(error) => {
                state.failures.insert(topic.to_string(), (error, now_ms));
            }
            None => {
                state.failures.remove(topic);
            }
        }
    }
}

/// StreamsGroupDescribe, with the authorized operations of each group described without
/// error when asked (v1's `include_topology_description`: no description is stored, as a
/// Kafka broker without a description plugin answers).
pub fn describe(broker: &Arc<Broker>, req: StreamsGroupDescribeRequest) -> ResponseBody {
    let include_description = req.include_topology_description;
    let mut resp = broker.groups.call(broker, |c, _| c.streams_group_describe(&req.group_ids, include_description));
    authorized_operations::set_for_groups(&mut resp.groups, req.include_authorized_operations);
    ResponseBody::StreamsGroupDescribe(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{answer, broker_with_config};
    use osprey_protocol::messages::streams_group_heartbeat_request::{Subtopology, TopicInfo, Topology};
    use osprey_protocol::ApiKey;
    use std::path::PathBuf;

    const INPUT: &str = "words";
    const CHANGELOG: &str = "app-counts-changelog";

    /// A single node with streams groups on (`streams_version` 1) or off (0), every
    /// assignment at once (no initial delay, no assignment interval), and an input topic
    /// of three partitions.
    fn broker(name: &str, streams_version: i16) -> (Arc<Broker>, PathBuf) {
        let (broker, dir) = broker_with_config(name, |c| {
            c.streams_version = streams_version;
            c.group_streams.initial_rebalance_delay_ms = 0;
            c.group_streams.assignment_interval_ms = 0;
        });
        let topic = NewTopic { name: INPUT.into(), num_partitions: 3, replication_factor: 1, ..Default::default() };
        broker.create_topic(&topic, false).unwrap();
        (broker, dir)
    }

    fn topology(changelog: &str) -> Topology {
        let changelog = TopicInfo {
            name: changelog.into(),
            topic_configs: vec![osprey_protocol::messages::streams_group_heartbeat_request::KeyValue {
                key: "cleanup.policy".into(),
                value: "compact".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        Topology {
            subtopologies: vec![Subtopology {
                subtopology_id: "0".into(),
                source_topics: vec![INPUT.into()],
                state_changelog_topics: vec![changelog],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    async fn heartbeat(broker: &Arc<Broker>, epoch: i32, topology: Option<Topology>) -> StreamsGroupHeartbeatResponse {
        let req = StreamsGroupHeartbeatRequest {
            group_id: "app".into(),
            member_id: "member-a".into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
            process_id: (epoch == 0).then(|| "process-a".into()),
            topology,
            active_tasks: Some(vec![]),
            standby_tasks: Some(vec![]),
            warmup_tasks: Some(vec![]),
            ..Default::default()
        };
        match answer(broker, ApiKey::StreamsGroupHeartbeat, 1, RequestBody::StreamsGroupHeartbeat(req)).await {
            ResponseBody::StreamsGroupHeartbeat(r) => r,
            other => panic!("{other:?}"),
        }
    }

    async fn describe(broker: &Arc<Broker>, operations: bool) -> StreamsGroupDescribeResponse {
        let req = StreamsGroupDescribeRequest {
            group_ids: vec!["app".into(), "missing".into()],
            include_authorized_operations: operations,
            ..Default::default()
        };
        match answer(broker, ApiKey::StreamsGroupDescribe, 1, RequestBody::StreamsGroupDescribe(req)).await {
            ResponseBody::StreamsGroupDescribe(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// The first heartbeat reports the changelog missing and has it created, with the
    /// topology's config and the input's partition count; a later one finds it and gets
    /// every task; StreamsGroupDescribe then shows the group.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_joins_its_internal_topics_are_created_and_it_gets_every_task() {
        let (broker, dir) = broker("streams-groups-join", 1);
        let joined = heartbeat(&broker, 0, Some(topology(CHANGELOG))).await;
        // A new group is at epoch 1 (Kafka 4.4's initial epoch); the first member's join
        // bumps it.
        assert_eq!((joined.error_code, joined.member_epoch), (0, 2), "{:?}", joined.error_message);
        let statuses: Vec<i8> = joined.status.iter().flatten().map(|s| s.status_code).collect();
        assert_eq!(statuses, [Status::MissingInternalTopics.code()]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while broker.image().topic(CHANGELOG).is_none() {
            assert!(std::time::Instant::now() < deadline, "the changelog was not created");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let changelog = broker.image().topic(CHANGELOG).unwrap().clone();
        assert_eq!(changelog.partitions.len(), 3);
        assert_eq!(changelog.configs.get("cleanup.policy").map(String::as_str), Some("compact"));
        let beat = heartbeat(&broker, joined.member_epoch, None).await;
        assert_eq!(beat.error_code, 0);
        let active: Vec<(String, Vec<i32>)> =
            beat.active_tasks.unwrap().into_iter().map(|t| (t.subtopology_id, t.partitions)).collect();
        assert_eq!(active, [("0".to_string(), vec![0, 1, 2])]);

        let described = describe(&broker, true).await;
        assert_eq!((described.groups[0].error_code, described.groups[0].group_state.as_str()), (0, "Stable"));
        assert_eq!(described.groups[0].authorized_operations, authorized_operations::GROUP);
        assert_eq!(described.groups[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A topology using one of Kafka's internal topics is refused as Kafka refuses it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn internal_kafka_topics_are_no_streams_topics() {
        let (broker, dir) = broker("streams-groups-internal", 1);
        let refused = heartbeat(&broker, 0, Some(topology("__consumer_offsets"))).await;
        assert_eq!(refused.error_code, ErrorCode::STREAMS_INVALID_TOPOLOGY.code());
        assert_eq!(
            refused.error_message.as_deref(),
            Some("Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology is prohibited.")
        );
        let refused = heartbeat(&broker, 0, Some(topology("bad name"))).await;
        assert_eq!(refused.error_message.as_deref(), Some("Topic names bad name are not valid topic names."));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `streams.version` 0: Kafka's UNSUPPORTED_VERSION for the heartbeat and every group
    /// described, and no group is made.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streams_group_apis_are_unsupported_while_streams_version_is_0() {
        let (broker, dir) = broker("streams-groups-off", 0);
        let refused = heartbeat(&broker, 0, Some(topology(CHANGELOG))).await;
        assert_eq!((refused.error_code, refused.member_epoch), (35, 0));
        let described = describe(&broker, true).await;
        let codes: Vec<_> = described.groups.iter().map(|g| (g.group_id.as_str(), g.error_code)).collect();
        assert_eq!(codes, [("app", 35), ("missing", 35)]);
        assert!(broker.groups.call(&broker, |c, _| c.streams_group_state("app")).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_creation_is_reported_for_its_time_and_one_creation_runs_at_once() {
        let creations = StreamsTopicCreations::default();
        let topic = InternalTopic {
            name: "t".into(),
            num_partitions: 1,
            replication_factor: None,
            configs: Default::default(),
        };
        assert!(creations.claim("t"));
        assert!(!creations.claim("t"), "in flight");
        creations.finish("t", Some("POLICY_VIOLATION".into()), 1_000);
        assert_eq!(
            creations.begin(std::slice::from_ref(&topic), 1_500, 1_000),
            [("t".into(), "POLICY_VIOLATION".into())]
        );
        assert!(creations.begin(std::slice::from_ref(&topic), 2_000, 1_000).is_empty(), "expired");
        assert!(creations.claim("t"), "tried again");
    }
}
