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

/// Kafka's `group.share.assignment.interval.ms` default, what a share group's
/// `share.assignment.interval.ms` shows when not set (the broker has no such setting here:
/// share assignments are not spaced out, see `group_config`).
const SHARE_ASSIGNMENT_INTERVAL_MS_DEFAULT: i32 = 1000;

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
    let config = broker.config();
    // (name, the broker setting it defaults to when there is one, the default, its type).
    let entry = |name: &'static str,
                 broker_key: Option<&'static str>,
                 default: String,
                 config_type: ConfigType,
                 documentation: &'static str| {
        // As Kafka describes the parsed value: trimmed, a boolean in lower case.
        let set = overrides.and_then(|o| o.get(name)).map(|v| match config_type {
            ConfigType::Boolean => v.trim().to_ascii_lowercase(),
            _ => v.trim().to_string(),
        });
        let mut synonyms = Vec::new();
        if let Some(v) = &set {
            synonyms.push(ConfigSynonym { name, value: Some(v.clone()), source: ConfigSource::GroupConfig });
        }
        if let Some(broker_key) = broker_key {
            let source = config.source_of(broker_key);
            synonyms.push(ConfigSynonym { name: broker_key, value: Some(default.clone()), source });
        }
        ConfigEntry {
            name,
            value: Some(set.clone().unwrap_or(default)),
            source: if set.is_some() { ConfigSource::GroupConfig } else { ConfigSource::DefaultConfig },
            is_sensitive: false,
            read_only: false,
            config_type,
            documentation,
            synonyms,
        }
    };
    let share = osprey_coordinator::group::group_config::ShareGroupSettings::default();
    let coordinator = broker.settings.group_config();
    Ok(vec![
        entry(
            group_config::CONSUMER_HEARTBEAT_INTERVAL_MS,
            Some("group.consumer.heartbeat.interval.ms"),
            bounds.heartbeat_interval_ms.to_string(),
            ConfigType::Int,
            "The heartbeat interval given to this group's members.",
        ),
        entry(
            group_config::CONSUMER_SESSION_TIMEOUT_MS,
            Some("group.consumer.session.timeout.ms"),
            bounds.session_timeout_ms.to_string(),
            ConfigType::Int,
            "The timeout to detect client failures of this group's members.",
        ),
        entry(
            group_config::ERRORS_DLQ_COPY_RECORD_ENABLE,
            None,
            "false".into(),
            ConfigType::Boolean,
            "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ topic, or just write a record containing the context information headers.",
        ),
        entry(
            group_config::ERRORS_DLQ_TOPIC_NAME,
            None,
            String::new(),
            ConfigType::String,
            "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank (the default), the group does not have a DLQ topic.",
        ),
        entry(
            group_config::SHARE_ASSIGNMENT_INTERVAL_MS,
            None,
            SHARE_ASSIGNMENT_INTERVAL_MS_DEFAULT.to_string(),
            ConfigType::Int,
            "The interval between assignment updates for a share group.",
        ),
        entry(
            group_config::SHARE_AUTO_OFFSET_RESET,
            None,
            "latest".into(),
            ConfigType::String,
            "Where a share group with no state starts on a partition: earliest, latest or by_duration:<ISO-8601 duration>.",
        ),
        entry(
            group_config::SHARE_DELIVERY_COUNT_LIMIT,
            Some("group.share.delivery.count.limit"),
            config.group_share_delivery_count_limit.to_string(),
            ConfigType::Int,
            "Deliveries of a record after which it is archived instead of delivered again.",
        ),
        entry(
            group_config::SHARE_HEARTBEAT_INTERVAL_MS,
            Some("group.share.heartbeat.interval.ms"),
            coordinator.share_group_heartbeat_interval_ms.to_string(),
            ConfigType::Int,
            "The heartbeat interval given to this share group's members.",
        ),
        entry(
            group_config::SHARE_ISOLATION_LEVEL,
            None,
            if share.isolation_level == group_config::ShareIsolationLevel::ReadCommitted {
                "read_committed".into()
            } else {
                "read_uncommitted".into()
            },
            ConfigType::String,
            "Whether a share group reads records of transactions not yet committed: read_uncommitted or read_committed.",
        ),
        entry(
            group_config::SHARE_PARTITION_MAX_RECORD_LOCKS,
            Some("group.share.partition.max.record.locks"),
            config.group_share_partition_max_record_locks.to_string(),
            ConfigType::Int,
            "Share-group record lock limit per share-partition.",
        ),
        entry(
            group_config::SHARE_RECORD_LOCK_DURATION_MS,
            Some("group.share.record.lock.duration.ms"),
            config.group_share_record_lock_duration_ms.to_string(),
            ConfigType::Int,
            "How long a record acquired by a share consumer stays locked to it.",
        ),
        entry(
            group_config::SHARE_RENEW_ACKNOWLEDGE_ENABLE,
            None,
            "true".into(),
            ConfigType::Boolean,
            "Whether the renew acknowledge type is enabled for the share group.",
        ),
        entry(
            group_config::SHARE_SESSION_TIMEOUT_MS,
            Some("group.share.session.timeout.ms"),
            coordinator.share_group_session_timeout_ms.to_string(),
            ConfigType::Int,
            "The timeout to detect client failures of this share group's members.",
        ),
        entry(
            group_config::STREAMS_HEARTBEAT_INTERVAL_MS,
            Some("group.streams.heartbeat.interval.ms"),
            config.group_streams.heartbeat_interval_ms.to_string(),
            ConfigType::Int,
            "The heartbeat interval given to this streams group's members.",
        ),
        entry(
            group_config::STREAMS_NUM_STANDBY_REPLICAS,
            Some("group.streams.num.standby.replicas"),
            config.group_streams.num_standby_replicas.to_string(),
            ConfigType::Int,
            "The number of standby replicas for each task of this streams group.",
        ),
        entry(
            group_config::STREAMS_SESSION_TIMEOUT_MS,
            Some("group.streams.session.timeout.ms"),
            config.group_streams.session_timeout_ms.to_string(),
            ConfigType::Int,
            "The timeout to detect client failures of this streams group's members.",
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
