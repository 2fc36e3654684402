//! CreateTopics: validated by the controller (names, counts, replication factor,
//! configs), optionally validate-only; v5+ responses describe the created topic's configs.

use crate::broker::Broker;
use osprey_cluster::NewTopic;
use osprey_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use osprey_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// Kafka's DescribeConfigs/CreateTopics config sources.
const SOURCE_DYNAMIC_TOPIC_CONFIG: i8 = 1;
const SOURCE_DEFAULT_CONFIG: i8 = 5;

pub fn handle(broker: &Arc<Broker>, req: CreateTopicsRequest, version: i16) -> ResponseBody {
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
            match broker.create_topic(&new, req.validate_only) {
                Ok(created) => {
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
    ResponseBody::CreateTopics(resp)
}

/// The topic's effective configs: its overrides, then the broker's topic defaults.
fn describe_configs(broker: &Broker, overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    let mut all: BTreeMap<&str, (String, i8)> = BTreeMap::new();
    for (k, v) in &broker.settings.topic_defaults {
        all.insert(k, (v.clone(), SOURCE_DEFAULT_CONFIG));
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
