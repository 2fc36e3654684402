//! CreateTopics: validated by the controller (names, counts, replication factor,
//! configs), optionally validate-only; v5+ responses describe the created topic's configs.
//! Creating thousands of partition logs takes a while, so the work runs on a blocking
//! thread and the connection's other requests, and every other connection, go on.

use crate::broker::Broker;
use crate::dispatch::{Reply, Requester};
use crate::quota::mutations;
use osprey_cluster::NewTopic;
use osprey_protocol::messages::create_topics_request::CreatableTopic;
use osprey_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use osprey_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Kafka's DescribeConfigs/CreateTopics config source of a topic's own setting.
const SOURCE_DYNAMIC_TOPIC_CONFIG: i8 = 1;

pub fn handle(broker: &Arc<Broker>, req: CreateTopicsRequest, version: i16, requester: Requester) -> Reply {
    let broker = broker.clone();
    Reply::Ordered(Box::pin(async move {
        tokio::task::spawn_blocking(move || create(&broker, req, version, &requester)).await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "CreateTopics failed");
            ResponseBody::CreateTopics(CreateTopicsResponse::default())
        })
    }))
}

/// Creates the topics, one after the other, on the calling (blocking) thread, each
/// within the requester's controller mutation quota.
fn create(broker: &Arc<Broker>, req: CreateTopicsRequest, version: i16, requester: &Requester) -> ResponseBody {
    if let Some(refused) = refuse_oversized(broker, &req, version) {
        return refused;
    }
    if let Some(link) = broker.cluster_link() {
        // In a cluster the active controller decides and answers, as Kafka's brokers
        // forward CreateTopics; the answer goes back once this broker's image has the
        // topics, so the client's next Metadata here finds them.
        let wait = !req.validate_only;
        return link.forward_from(requester, osprey_protocol::RequestBody::CreateTopics(req), version, wait);
    }
    let mut quota = mutations::request(requester, ApiKey::CreateTopics, version);
    let mut resp = CreateTopicsResponse::default();
    let mut seen = HashSet::new();
    let duplicates: HashSet<String> =
        req.topics.iter().filter(|t| !seen.insert(t.name.clone())).map(|t| t.name.clone()).collect();
    for t in req.topics {
        let mut result = CreatableTopicResult { name: t.name.clone(), ..Default::default() };
        if duplicates.contains(&t.name) {
            result.error_code = ErrorCode::INVALID_REQUEST.code();
            result.error_message =
                Some(format!("Create topics request from client contains duplicate topic {}", t.name));
            resp.topics.push(result);
            continue;
        }
        let mut configs = BTreeMap::new();
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.clone(), v.clone());
                }
                None => {
                    result.error_code = ErrorCode::INVALID_CONFIG.code();
                    result.error_message = Some(format!("Null value not supported for topic configs: {}", c.name));
                }
            }
        }
        if result.error_code == 0 {
            let new = NewTopic {
                name: t.name.clone(),
                num_partitions: t.num_partitions,
                replication_factor: t.replication_factor,
                assignments: t.assignments.iter().map(|a| (a.partition_index, a.broker_ids.clone())).collect(),
                configs,
            };
            let admitted = if req.validate_only { Ok(()) } else { mutations::admit(broker, &mut quota) };
            match admitted.and_then(|()| broker.create_topic(&new, req.validate_only)) {
                Ok(created) => {
                    if !req.validate_only {
                        mutations::draw(broker, &mut quota, created.partitions.len());
                    }
                    result.topic_id = created.id;
                    result.num_partitions = created.partitions.len() as i32;
                    result.replication_factor = created.partitions.first().map_or(-1, |p| p.replicas.len() as i16);
                    if version >= 5 {
                        result.configs = Some(describe_configs(broker, &created.configs));
                    }
                }
                Err(e) => {
                    result.error_code = e.code.code();
                    result.error_message = Some(e.message);
                }
            }
        }
        if let Some(code) = ErrorCode::from_code(result.error_code) {
            crate::telemetry::error_code(ApiKey::CreateTopics, code);
        }
        if version < 1 {
            result.error_message = None;
        }
        resp.topics.push(result);
    }
    resp.throttle_time_ms = i32::try_from(quota.throttle_ms).unwrap_or(i32::MAX);
    ResponseBody::CreateTopics(resp)
}

/// Kafka's controller refuses a CreateTopics asking for more partitions than this in
/// all (`ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`), validate-only or not.
pub const MAX_PARTITIONS_PER_REQUEST: i64 = 10_000;

/// Refuses the whole request, as Kafka's controller does, when it asks for more than
/// [`MAX_PARTITIONS_PER_REQUEST`] partitions in all: every topic gets POLICY_VIOLATION.
fn refuse_oversized(broker: &Broker, req: &CreateTopicsRequest, version: i16) -> Option<ResponseBody> {
    let asked = requested_partitions(&req.topics, broker.settings.num_partitions);
    if asked <= MAX_PARTITIONS_PER_REQUEST {
        return None;
    }
    let mut resp = CreateTopicsResponse::default();
    for t in &req.topics {
        crate::telemetry::error_code(ApiKey::CreateTopics, ErrorCode::POLICY_VIOLATION);
        resp.topics.push(CreatableTopicResult {
            name: t.name.clone(),
            error_code: ErrorCode::POLICY_VIOLATION.code(),
            error_message: (version >= 1).then(|| "Excessively large number of partitions per request.".to_string()),
            ..Default::default()
        });
    }
    Some(ResponseBody::CreateTopics(resp))
}

/// Partitions a request asks for in all, counted as Kafka's controller counts them: the
/// assignments if given, else the count, -1 meaning `num.partitions`.
pub(crate) fn requested_partitions(topics: &[CreatableTopic], default_partitions: i32) -> i64 {
    topics
        .iter()
        .map(|t| match (t.assignments.len(), t.num_partitions) {
            (0, -1) => i64::from(default_partitions),
            (0, n) => i64::from(n.max(0)),
            (n, _) => n as i64,
        })
        .sum()
}

/// The topic's effective configs: its overrides, then the broker's topic defaults, each
/// default with the source of the broker setting it came from (dynamic, static, default).
fn describe_configs(broker: &Broker, overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    let mut all: BTreeMap<&str, (String, i8)> = BTreeMap::new();
    let defaults = broker.topic_defaults();
    let sources = broker.config().topic_defaults();
    for (k, v) in defaults.iter() {
        let source = sources.get(k).map_or(crate::config::ConfigSource::DefaultConfig, |e| e.source);
        all.insert(k, (v.clone(), source.id()));
    }
    for (k, v) in overrides {
        all.insert(k, (v.clone(), SOURCE_DYNAMIC_TOPIC_CONFIG));
    }
    all.into_iter()
        .map(|(name, (value, source))| CreatableTopicConfigs {
            name: name.to_string(),
            value: Some(value),
            read_only: false,
            config_source: source,
            is_sensitive: false,
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::messages::create_topics_request::CreatableReplicaAssignment;

    fn topic(num_partitions: i32, assignments: usize) -> CreatableTopic {
        CreatableTopic {
            num_partitions,
            assignments: (0..assignments as i32)
                .map(|i| CreatableReplicaAssignment { partition_index: i, ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn requested_partitions_count_as_kafka_does() {
        let topics = [topic(3, 0), topic(-1, 0), topic(-1, 2), topic(0, 0), topic(-5, 0)];
        assert_eq!(requested_partitions(&topics, 7), 3 + 7 + 2);
    }
}
