//! DescribeConfigs: topic configs (defaults from the broker, the topic's overrides on
//! top, with sources and synonyms), the broker's own configuration (static and dynamic,
//! with Kafka's sources and synonyms) and the cluster-wide dynamic defaults, and group configs
//! (KIP-848's per-group session timeout and heartbeat interval over the broker's).

use crate::broker::Broker;
use crate::config::{ConfigEntry, ConfigSource, ConfigSynonym, ConfigType};
use osprey_coordinator::group::group_config;
use osprey_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use osprey_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

/// Kafka's ConfigResource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_GROUP: i8 = 32;

pub fn handle(broker: &Arc<Broker>, req: DescribeConfigsRequest, version: i16) -> ResponseBody {
    let mut resp = DescribeConfigsResponse::default();
    for r in req.resources {
        let mut result = DescribeConfigsResult {
            resource_type: r.resource_type,
            resource_name: r.resource_name.clone(),
            ..Default::default()
        };
        match entries(broker, r.resource_type, &r.resource_name) {
            Ok(entries) => {
                let wanted =
                    |name: &str| r.configuration_keys.as_ref().is_none_or(|keys| keys.iter().any(|k| k == name));
                result.configs = entries
                    .iter()
                    .filter(|e| wanted(e.name))
                    .map(|e| describe(e, version, req.include_synonyms, req.include_documentation))
                    .collect();
            }
            Err((code, message)) => {
                crate::telemetry::error_code(ApiKey::DescribeConfigs, code);
                result.error_code = code.code();
                result.error_message = Some(message);
            }
        }
        resp.results.push(result);
    }
    ResponseBody::DescribeConfigs(resp)
}

fn entries(broker: &Broker, resource_type: i8, name: &str) -> Result<Vec<ConfigEntry>, (ErrorCode, String)> {
    match resource_type {
        RESOURCE_TOPIC => {
            let image = broker.image();
            let topic = image
                .topic(name)
                .ok_or_else(|| (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic '{name}' does not exist.")))?;
            let config = broker.topic_config(topic).map_err(|e| (ErrorCode::INVALID_CONFIG, e.to_string()))?;
            Ok(config.entries().to_vec())
        }
        RESOURCE_BROKER => {
            // The empty name is the cluster-wide default resource: only its dynamic
            // configs, as Kafka's `ConfigHelper` reports them.
            if name.is_empty() {
                return Ok(broker.config().describe_dynamic_default());
            }
            // As Kafka's `ConfigHelper`: a broker describes itself only (the admin client
            // sends a broker resource to that broker).
            let node_id = broker.settings.node_id;
            let id: i32 = name.parse().map_err(|_| {
                (ErrorCode::INVALID_REQUEST, format!("Broker id must be an integer, but it is: {name}"))
            })?;
            if id != node_id {
                return Err((
                    ErrorCode::INVALID_REQUEST,
                    format!("Unexpected broker id, expected {node_id} or empty string, but received {name}"),
                ));
            }
            Ok(broker.config().describe())
        }
        RESOURCE_GROUP => group_entries(broker, name),
        other => Err((ErrorCode::INVALID_REQUEST, format!("Unsupported resource type {other}"))),
    }
}

/// A group's configs: its override where it has one (source GROUP_CONFIG), else the
/// broker's setting (Kafka's `ConfigHelper` for a GROUP resource). The group need not
/// exist, as in Kafka.
fn group_entries(broker: &Broker, group: &str) -> Result<Vec<ConfigEntry>, (ErrorCode, String)> {
    if group.is_empty() {
        return Err((ErrorCode::INVALID_REQUEST, "Group name must not be empty".into()));
    }
    let image = broker.image();
    let overrides = image.group_configs(group);
    let bounds = broker.group_config_bounds();
    let entry = |name: &'static str, broker_key: &'static str, broker_value: i32, documentation: &'static str| {
        let broker_synonym = ConfigSynonym {
            name: broker_key,
            value: Some(broker_value.to_string()),
            source: broker.config().source_of(broker_key),
        };
        let set = overrides.and_then(|o| o.get(name)).cloned();
        let mut synonyms = Vec::new();
        if let Some(v) = &set {
            synonyms.push(ConfigSynonym { name, value: Some(v.clone()), source: ConfigSource::GroupConfig });
        }
        synonyms.push(broker_synonym);
        ConfigEntry {
            name,
            value: Some(set.clone().unwrap_or_else(|| broker_value.to_string())),
            source: if set.is_some() { ConfigSource::GroupConfig } else { ConfigSource::DefaultConfig },
            is_sensitive: false,
            read_only: false,
            config_type: ConfigType::Int,
            documentation,
            synonyms,
        }
    };
    Ok(vec![
        entry(
            group_config::CONSUMER_HEARTBEAT_INTERVAL_MS,
            "group.consumer.heartbeat.interval.ms",
            bounds.heartbeat_interval_ms,
            "The heartbeat interval given to this group's members.",
        ),
        entry(
            group_config::CONSUMER_SESSION_TIMEOUT_MS,
            "group.consumer.session.timeout.ms",
            bounds.session_timeout_ms,
            "The timeout to detect client failures of this group's members.",
        ),
    ])
}

fn describe(e: &ConfigEntry, version: i16, synonyms: bool, documentation: bool) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult {
        name: e.name.to_string(),
        value: e.value.clone(),
        read_only: e.read_only,
        config_source: e.source.id(),
        is_sensitive: e.is_sensitive,
        synonyms: if synonyms && version >= 1 {
            e.synonyms
                .iter()
                .map(|s| DescribeConfigsSynonym {
                    name: s.name.to_string(),
                    value: s.value.clone(),
                    source: s.source.id(),
                    ..Default::default()
                })
                .collect()
        } else {
            Vec::new()
        },
        config_type: if version >= 3 { e.config_type.id() } else { 0 },
        documentation: (documentation && version >= 3).then(|| e.documentation.to_string()),
        ..Default::default()
    }
}
