//! Group configs (Kafka's `GroupConfig`, KIP-848; ConfigResource type GROUP): per-group
//! overrides of the broker's consumer-group session timeout and heartbeat interval,
//! set with IncrementalAlterConfigs, kept in the metadata log, and read by the
//! coordinator on each ConsumerGroupHeartbeat of the group.
//!
//! Share groups (KIP-932) have their own: `share.session.timeout.ms` and
//! `share.heartbeat.interval.ms` override the broker's `group.share.*` settings in the
//! group coordinator; `share.record.lock.duration.ms`, `share.delivery.count.limit`,
//! `share.partition.max.record.locks`, `share.renew.acknowledge.enable`,
//! `share.auto.offset.reset` and `share.isolation.level` are read by the share partitions
//! ([`ShareGroupSettings`]), at each use as Kafka's. `share.assignment.interval.ms` is
//! validated and described but takes no effect: the share group coordinator here
//! assigns at the heartbeat that changed the group, with no interval. Their dead-letter
//! queue (KIP-1191): `errors.deadletterqueue.topic.name` (a name starting with `__` is
//! refused, as Kafka) and `errors.deadletterqueue.copy.record.enable`, read by the share
//! partitions at each archive.
//!
//! Streams groups (KIP-1071): `streams.session.timeout.ms`, `streams.heartbeat.interval.ms`
//! and `streams.num.standby.replicas` override `group.streams.*`. Kafka 4.4's other
//! `streams.*` group configs (initial rebalance delay, assignment interval, warm-up
//! replicas, rack-aware tags, assignor name...) are unknown here: the broker's settings
//! apply to every streams group.

use std::collections::BTreeMap;

/// `consumer.session.timeout.ms`: the group's `group.consumer.session.timeout.ms`.
pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
/// `consumer.heartbeat.interval.ms`: the group's `group.consumer.heartbeat.interval.ms`.
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
/// `share.session.timeout.ms`: the group's `group.share.session.timeout.ms`.
pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
/// `share.heartbeat.interval.ms`: the group's `group.share.heartbeat.interval.ms`.
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
/// `share.record.lock.duration.ms`: how long a share consumer holds an acquired record.
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
/// `share.delivery.count.limit`: deliveries of a record before it is archived.
pub const SHARE_DELIVERY_COUNT_LIMIT: &str = "share.delivery.count.limit";
/// `share.auto.offset.reset`: `latest` (default), `earliest` or `by_duration:<ISO-8601>`.
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
/// `share.isolation.level`: `read_uncommitted` (default) or `read_committed`.
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";
/// `share.partition.max.record.locks`: the group's `group.share.partition.max.record.locks`.
pub const SHARE_PARTITION_MAX_RECORD_LOCKS: &str = "share.partition.max.record.locks";
/// `share.renew.acknowledge.enable`: whether RENEW acknowledgements are taken (default true).
pub const SHARE_RENEW_ACKNOWLEDGE_ENABLE: &str = "share.renew.acknowledge.enable";
/// `share.assignment.interval.ms`: the group's `group.share.assignment.interval.ms`.
pub const SHARE_ASSIGNMENT_INTERVAL_MS: &str = "share.assignment.interval.ms";
/// `errors.deadletterqueue.topic.name` (KIP-1191): the share group's dead-letter queue
/// topic; empty (the default): none.
pub const ERRORS_DLQ_TOPIC_NAME: &str = "errors.deadletterqueue.topic.name";
/// `errors.deadletterqueue.copy.record.enable` (KIP-1191, default false): whether a
/// dead-letter queue record carries the original record's key and value.
pub const ERRORS_DLQ_COPY_RECORD_ENABLE: &str = "errors.deadletterqueue.copy.record.enable";
/// `streams.session.timeout.ms`: the group's `group.streams.session.timeout.ms`.
pub const STREAMS_SESSION_TIMEOUT_MS: &str = "streams.session.timeout.ms";
/// `streams.heartbeat.interval.ms`: the group's `group.streams.heartbeat.interval.ms`.
pub const STREAMS_HEARTBEAT_INTERVAL_MS: &str = "streams.heartbeat.interval.ms";
/// `streams.num.standby.replicas`: the group's `group.streams.num.standby.replicas`.
pub const STREAMS_NUM_STANDBY_REPLICAS: &str = "streams.num.standby.replicas";
/// The longest group config value taken, in bytes: a bound on what IncrementalAlterConfigs
/// stores in the metadata log for each group (Osprey's; Kafka bounds it only by the request
/// size). Far above any real value: a DLQ topic name (the only free-form one) can name a
/// topic only up to 249 characters.
pub const MAX_GROUP_CONFIG_VALUE_BYTES: usize = 4096;
/// Every group config name Osprey knows, in the order DescribeConfigs lists them.
pub const GROUP_CONFIG_NAMES: [&str; 16] = [
    CONSUMER_HEARTBEAT_INTERVAL_MS,
    CONSUMER_SESSION_TIMEOUT_MS,
    ERRORS_DLQ_COPY_RECORD_ENABLE,
    ERRORS_DLQ_TOPIC_NAME,
    SHARE_ASSIGNMENT_INTERVAL_MS,
    SHARE_AUTO_OFFSET_RESET,
    SHARE_DELIVERY_COUNT_LIMIT,
    SHARE_HEARTBEAT_INTERVAL_MS,
    SHARE_ISOLATION_LEVEL,
    SHARE_PARTITION_MAX_RECORD_LOCKS,
    SHARE_RECORD_LOCK_DURATION_MS,
    SHARE_RENEW_ACKNOWLEDGE_ENABLE,
    SHARE_SESSION_TIMEOUT_MS,
    STREAMS_HEARTBEAT_INTERVAL_MS,
    STREAMS_NUM_STANDBY_REPLICAS,
    STREAMS_SESSION_TIMEOUT_MS,
];

/// A consumer group's settings where its configs override the broker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerGroupOverrides {
    pub session_timeout_ms: Option<i32>,
    pub heartbeat_interval_ms: Option<i32>,
}

impl ConsumerGroupOverrides {
    /// From a group's stored configs (validated when they were set; a value that does
    /// not parse is ignored rather than trusted).
    pub fn from_configs(configs: &BTreeMap<String, String>) -> ConsumerGroupOverrides {
        let int = |key| int_config(configs, key);
        ConsumerGroupOverrides {
            session_timeout_ms: int(CONSUMER_SESSION_TIMEOUT_MS),
            heartbeat_interval_ms: int(CONSUMER_HEARTBEAT_INTERVAL_MS),
        }
    }
}

/// A share group's settings where its configs override the broker's: the first two are
/// the group coordinator's, the rest the share partitions'.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareGroupOverrides {
    pub session_timeout_ms: Option<i32>,
    pub heartbeat_interval_ms: Option<i32>,
    pub record_lock_duration_ms: Option<i32>,
    pub delivery_count_limit: Option<i32>,
    pub partition_max_record_locks: Option<i32>,
    pub renew_acknowledge_enabled: Option<bool>,
    pub assignment_interval_ms: Option<i32>,
    pub auto_offset_reset: Option<ShareAutoOffsetReset>,
    pub isolation_level: Option<ShareIsolationLevel>,
    /// The dead-letter queue topic; `None` when unset or empty.
    pub dlq_topic_name: Option<String>,
    pub dlq_copy_record_enabled: Option<bool>,
}

impl ShareGroupOverrides {
    /// From a group's stored configs (validated when set; a value that does not parse is
    /// ignored rather than trusted).
    pub fn from_configs(configs: &BTreeMap<String, String>) -> ShareGroupOverrides {
        let int = |key| int_config(configs, key);
        ShareGroupOverrides {
            session_timeout_ms: int(SHARE_SESSION_TIMEOUT_MS),
            heartbeat_interval_ms: int(SHARE_HEARTBEAT_INTERVAL_MS),
            record_lock_duration_ms: int(SHARE_RECORD_LOCK_DURATION_MS),
            delivery_count_limit: int(SHARE_DELIVERY_COUNT_LIMIT),
            partition_max_record_locks: int(SHARE_PARTITION_MAX_RECORD_LOCKS),
            renew_acknowledge_enabled: configs.get(SHARE_RENEW_ACKNOWLEDGE_ENABLE).and_then(|v| parse_bool(v)),
            assignment_interval_ms: int(SHARE_ASSIGNMENT_INTERVAL_MS),
            auto_offset_reset: configs.get(SHARE_AUTO_OFFSET_RESET).and_then(|v| ShareAutoOffsetReset::parse(v)),
            isolation_level: configs.get(SHARE_ISOLATION_LEVEL).and_then(|v| ShareIsolationLevel::parse(v).ok()),
            dlq_topic_name: configs
                .get(ERRORS_DLQ_TOPIC_NAME)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(str::to_string),
            dlq_copy_record_enabled: configs.get(ERRORS_DLQ_COPY_RECORD_ENABLE).and_then(|v| parse_bool(v)),
        }
    }
}

/// A streams group's settings where its configs override the broker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamsGroupOverrides {
    pub session_timeout_ms: Option<i32>,
    pub heartbeat_interval_ms: Option<i32>,
    pub num_standby_replicas: Option<i32>,
}

impl StreamsGroupOverrides {
    /// From a group's stored configs (validated when set; a value that does not parse is
    /// ignored rather than trusted).
    pub fn from_configs(configs: &BTreeMap<String, String>) -> StreamsGroupOverrides {
        let int = |key| int_config(configs, key);
        StreamsGroupOverrides {
            session_timeout_ms: int(STREAMS_SESSION_TIMEOUT_MS),
            heartbeat_interval_ms: int(STREAMS_HEARTBEAT_INTERVAL_MS),
            num_standby_replicas: int(STREAMS_NUM_STANDBY_REPLICAS),
        }
    }
}

/// Kafka's `ShareGroupAutoOffsetResetStrategy`: the share partition's own type, one
/// parser for both.
pub use crate::share::ShareAutoOffsetReset;

/// `share.auto.offset.reset` checked as a group config: Kafka's message when invalid.
fn validate_auto_offset_reset(value: &str) -> Result<ShareAutoOffsetReset, String> {
    ShareAutoOffsetReset::parse(value)
        .ok_or_else(|| format!("Invalid value {value} for configuration {SHARE_AUTO_OFFSET_RESET}"))
}

/// `share.isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareIsolationLevel {
    ReadUncommitted,
    ReadCommitted,
}

impl ShareIsolationLevel {
    pub fn parse(value: &str) -> Result<ShareIsolationLevel, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "read_uncommitted" => Ok(ShareIsolationLevel::ReadUncommitted),
            "read_committed" => Ok(ShareIsolationLevel::ReadCommitted),
            _ => Err(format!("Invalid value {value} for configuration {SHARE_ISOLATION_LEVEL}")),
        }
    }
}

/// What a share partition of a group runs with: the group's configs over the broker's
/// defaults (Kafka's `GroupConfigManager` / `ShareGroupConfigProvider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupSettings {
    pub record_lock_duration_ms: i32,
    pub delivery_count_limit: i32,
    pub auto_offset_reset: ShareAutoOffsetReset,
    pub isolation_level: ShareIsolationLevel,
}

impl Default for ShareGroupSettings {
    /// Kafka's broker defaults: `group.share.record.lock.duration.ms` 30000,
    /// `group.share.delivery.count.limit` 5, `latest`, `read_uncommitted`.
    fn default() -> Self {
        ShareGroupSettings {
            record_lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            auto_offset_reset: ShareAutoOffsetReset::Latest,
            isolation_level: ShareIsolationLevel::ReadUncommitted,
        }
    }
}

impl ShareGroupSettings {
    /// `broker` (the broker's settings) with the group's `overrides` applied.
    pub fn with_overrides(broker: ShareGroupSettings, overrides: &ShareGroupOverrides) -> ShareGroupSettings {
        ShareGroupSettings {
            record_lock_duration_ms: overrides.record_lock_duration_ms.unwrap_or(broker.record_lock_duration_ms),
            delivery_count_limit: overrides.delivery_count_limit.unwrap_or(broker.delivery_count_limit),
            auto_offset_reset: overrides.auto_offset_reset.unwrap_or(broker.auto_offset_reset),
            isolation_level: overrides.isolation_level.unwrap_or(broker.isolation_level),
        }
    }
}

/// The broker's bounds for share group configs (Kafka's `group.share.{min,max}.*`), with
/// Kafka's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupConfigBounds {
    pub session_timeout_ms: i32,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub min_heartbeat_interval_ms: i32,
    pub max_heartbeat_interval_ms: i32,
    pub min_record_lock_duration_ms: i32,
    pub max_record_lock_duration_ms: i32,
    pub min_delivery_count_limit: i32,
    pub max_delivery_count_limit: i32,
    pub min_partition_max_record_locks: i32,
    pub max_partition_max_record_locks: i32,
    pub min_assignment_interval_ms: i32,
    pub max_assignment_interval_ms: i32,
}

impl Default for ShareGroupConfigBounds {
    fn default() -> Self {
        ShareGroupConfigBounds::KAFKA_DEFAULTS
    }
}

impl ShareGroupConfigBounds {
    /// Kafka's defaults of `group.share.*` bounds.
    pub const KAFKA_DEFAULTS: ShareGroupConfigBounds = ShareGroupConfigBounds {
        session_timeout_ms: 45_000,
        min_session_timeout_ms: 45_000,
        max_session_timeout_ms: 60_000,
        heartbeat_interval_ms: 5_000,
        min_heartbeat_interval_ms: 5_000,
        max_heartbeat_interval_ms: 15_000,
        min_record_lock_duration_ms: 15_000,
        max_record_lock_duration_ms: 60_000,
        min_delivery_count_limit: 2,
        max_delivery_count_limit: 10,
        min_partition_max_record_locks: 100,
        max_partition_max_record_locks: 4000,
        min_assignment_interval_ms: 0,
        max_assignment_interval_ms: 15_000,
    };
}

/// The broker's bounds for streams group configs (Kafka's `group.streams.*`), with
/// Kafka's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamsGroupConfigBounds {
    pub session_timeout_ms: i32,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub min_heartbeat_interval_ms: i32,
    pub max_heartbeat_interval_ms: i32,
    pub num_standby_replicas: i32,
    pub max_standby_replicas: i32,
}

impl Default for StreamsGroupConfigBounds {
    fn default() -> Self {
        StreamsGroupConfigBounds::KAFKA_DEFAULTS
    }
}

impl StreamsGroupConfigBounds {
    /// Kafka's defaults of the `group.streams.*` bounds.
    pub const KAFKA_DEFAULTS: StreamsGroupConfigBounds = StreamsGroupConfigBounds {
        session_timeout_ms: 45_000,
        min_session_timeout_ms: 45_000,
        max_session_timeout_ms: 60_000,
        heartbeat_interval_ms: 5_000,
        min_heartbeat_interval_ms: 5_000,
        max_heartbeat_interval_ms: 15_000,
        num_standby_replicas: 0,
        max_standby_replicas: 2,
    };
}

/// The broker's bounds and defaults group configs are checked against (Kafka's
/// `group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfigBounds {
    pub session_timeout_ms: i32,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub min_heartbeat_interval_ms: i32,
    pub max_heartbeat_interval_ms: i32,
    /// The bounds of share group configs.
    pub share: ShareGroupConfigBounds,
    /// The bounds of streams group configs.
    pub streams: StreamsGroupConfigBounds,
}

/// Kafka's `GroupConfig.validate` (4.4): `configs` is the group's whole set after the
/// change. Every name must be a group config; every value must parse as its type and
/// meet its `ConfigDef` minimum (Kafka's `ConfigException` message), then lie within the
/// broker's bounds (`validateValues`); each session timeout must exceed its heartbeat
/// interval. The error is Kafka's message for INVALID_CONFIG.
pub fn validate(configs: &BTreeMap<String, String>, bounds: &GroupConfigBounds) -> Result<(), String> {
    let share = &bounds.share;
    let streams = &bounds.streams;
    for (name, value) in configs {
        if value.len() > MAX_GROUP_CONFIG_VALUE_BYTES {
            return Err(format!(
                "Invalid value for configuration {name}: longer than {MAX_GROUP_CONFIG_VALUE_BYTES} bytes"
            ));
        }
        // (the ConfigDef minimum, the broker's bounds: a range, or only a maximum).
        let (at_least, min, max) = match name.as_str() {
            CONSUMER_SESSION_TIMEOUT_MS => (1, Some(bounds.min_session_timeout_ms), bounds.max_session_timeout_ms),
            CONSUMER_HEARTBEAT_INTERVAL_MS => {
                (1, Some(bounds.min_heartbeat_interval_ms), bounds.max_heartbeat_interval_ms)
            }
            SHARE_SESSION_TIMEOUT_MS => (1, Some(share.min_session_timeout_ms), share.max_session_timeout_ms),
            SHARE_HEARTBEAT_INTERVAL_MS => (1, Some(share.min_heartbeat_interval_ms), share.max_heartbeat_interval_ms),
            SHARE_RECORD_LOCK_DURATION_MS => {
                (1000, Some(share.min_record_lock_duration_ms), share.max_record_lock_duration_ms)
            }
            SHARE_DELIVERY_COUNT_LIMIT => (2, Some(share.min_delivery_count_limit), share.max_delivery_count_limit),
            SHARE_PARTITION_MAX_RECORD_LOCKS => {
                (100, Some(share.min_partition_max_record_locks), share.max_partition_max_record_locks)
            }
            SHARE_ASSIGNMENT_INTERVAL_MS => {
                (0, Some(share.min_assignment_interval_ms), share.max_assignment_interval_ms)
            }
            STREAMS_SESSION_TIMEOUT_MS => (1, Some(streams.min_session_timeout_ms), streams.max_session_timeout_ms),
            STREAMS_HEARTBEAT_INTERVAL_MS => {
                (1, Some(streams.min_heartbeat_interval_ms), streams.max_heartbeat_interval_ms)
            }
            STREAMS_NUM_STANDBY_REPLICAS => (0, None, streams.max_standby_replicas),
            SHARE_AUTO_OFFSET_RESET => {
                validate_auto_offset_reset(value)?;
                continue;
            }
            SHARE_ISOLATION_LEVEL => {
                ShareIsolationLevel::parse(value)?;
                continue;
            }
            ERRORS_DLQ_TOPIC_NAME => {
                if value.trim().starts_with("__") {
                    return Err(format!("{name}: DLQ topic name must not start with '__'"));
                }
                continue;
            }
            SHARE_RENEW_ACKNOWLEDGE_ENABLE | ERRORS_DLQ_COPY_RECORD_ENABLE => {
                parse_bool(value).ok_or_else(|| {
                    format!("Invalid value {value} for configuration {name}: Expected value to be either true or false")
                })?;
                continue;
            }
            _ => return Err(format!("Unknown group config name: {name}")),
        };
        let parsed: i32 = value
            .trim()
            .parse()
            .map_err(|_| format!("Invalid value {value} for configuration {name}: Not a number of type INT"))?;
        if parsed < at_least {
            return Err(format!("Invalid value {value} for configuration {name}: Value must be at least {at_least}"));
        }
        match min {
            Some(min) if parsed < min || parsed > max => {
                return Err(format!("{name} must be in the range {min} to {max} inclusive."));
            }
            None if parsed > max => return Err(format!("{name} must be less than or equal to {max}")),
            _ => {}
        }
    }
    let overrides = ConsumerGroupOverrides::from_configs(configs);
    check_session_exceeds_heartbeat(
        (CONSUMER_SESSION_TIMEOUT_MS, overrides.session_timeout_ms.unwrap_or(bounds.session_timeout_ms)),
        (CONSUMER_HEARTBEAT_INTERVAL_MS, overrides.heartbeat_interval_ms.unwrap_or(bounds.heartbeat_interval_ms)),
    )?;
    let overrides = ShareGroupOverrides::from_configs(configs);
    check_session_exceeds_heartbeat(
        (SHARE_SESSION_TIMEOUT_MS, overrides.session_timeout_ms.unwrap_or(share.session_timeout_ms)),
        (SHARE_HEARTBEAT_INTERVAL_MS, overrides.heartbeat_interval_ms.unwrap_or(share.heartbeat_interval_ms)),
    )?;
    let overrides = StreamsGroupOverrides::from_configs(configs);
    check_session_exceeds_heartbeat(
        (STREAMS_SESSION_TIMEOUT_MS, overrides.session_timeout_ms.unwrap_or(streams.session_timeout_ms)),
        (STREAMS_HEARTBEAT_INTERVAL_MS, overrides.heartbeat_interval_ms.unwrap_or(streams.heartbeat_interval_ms)),
    )
}

/// A boolean config as Kafka's `ConfigDef` parses one: `true` or `false`, any case,
/// trimmed.
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The integer config `key` of a group's stored configs (validated when they were set; a
/// value that does not parse is ignored rather than trusted).
fn int_config(configs: &BTreeMap<String, String>, key: &str) -> Option<i32> {
    configs.get(key).and_then(|v| v.trim().parse::<i32>().ok())
}

/// A group's session timeout must exceed its heartbeat interval (the group's configs, or
/// the broker's where the group has none); each given with its config name (Kafka's
/// `validateSessionExceedsHeartbeat`).
fn check_session_exceeds_heartbeat(
    (session_name, session_ms): (&str, i32),
    (heartbeat_name, heartbeat_ms): (&str, i32),
) -> Result<(), String> {
    if session_ms <= heartbeat_ms {
        return Err(format!("{session_name} must be greater than {heartbeat_name}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: GroupConfigBounds = GroupConfigBounds {
        session_timeout_ms: 45_000,
        min_session_timeout_ms: 45_000,
        max_session_timeout_ms: 60_000,
        heartbeat_interval_ms: 5_000,
        min_heartbeat_interval_ms: 5_000,
        max_heartbeat_interval_ms: 15_000,
        share: ShareGroupConfigBounds::KAFKA_DEFAULTS,
        streams: StreamsGroupConfigBounds::KAFKA_DEFAULTS,
    };

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn values_within_the_broker_bounds_are_accepted_and_read_back() {
        let c = configs(&[(CONSUMER_SESSION_TIMEOUT_MS, "50000"), (CONSUMER_HEARTBEAT_INTERVAL_MS, "6000")]);
        assert_eq!(validate(&c, &BOUNDS), Ok(()));
        let overrides = ConsumerGroupOverrides::from_configs(&c);
        assert_eq!(
            overrides,
            ConsumerGroupOverrides { session_timeout_ms: Some(50_000), heartbeat_interval_ms: Some(6_000) }
        );
    }

    #[test]
    fn out_of_bounds_unknown_and_malformed_values_are_refused() {
        let refused = [
            (CONSUMER_SESSION_TIMEOUT_MS, "44999", "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
            (CONSUMER_SESSION_TIMEOUT_MS, "60001", "must be in the range 45000 to 60000 inclusive."),
            (CONSUMER_HEARTBEAT_INTERVAL_MS, "4999", "must be in the range 5000 to 15000 inclusive."),
            (CONSUMER_HEARTBEAT_INTERVAL_MS, "soon", "Not a number"),
            (SHARE_SESSION_TIMEOUT_MS, "44999", "must be in the range 45000 to 60000 inclusive."),
            (SHARE_RECORD_LOCK_DURATION_MS, "60001", "must be in the range 15000 to 60000 inclusive."),
            (SHARE_RECORD_LOCK_DURATION_MS, "999", "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
            (SHARE_DELIVERY_COUNT_LIMIT, "1", "Value must be at least 2"),
            (SHARE_DELIVERY_COUNT_LIMIT, "11", "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
            (SHARE_PARTITION_MAX_RECORD_LOCKS, "99", "Value must be at least 100"),
            (SHARE_PARTITION_MAX_RECORD_LOCKS, "4001", "share.partition.max.record.locks must be in the range 100 to 4000 inclusive."),
            (SHARE_ASSIGNMENT_INTERVAL_MS, "-1", "Value must be at least 0"),
            (SHARE_ASSIGNMENT_INTERVAL_MS, "15001", "share.assignment.interval.ms must be in the range 0 to 15000 inclusive."),
            (SHARE_RENEW_ACKNOWLEDGE_ENABLE, "yes", "Invalid value yes for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
            (SHARE_AUTO_OFFSET_RESET, "none", "Invalid value"),
            (SHARE_ISOLATION_LEVEL, "serializable", "Invalid value"),
            ("streams.initial.rebalance.delay.ms", "0", "Unknown group config name"),
            (STREAMS_SESSION_TIMEOUT_MS, "30000", "must be in the range 45000 to 60000 inclusive."),
            (STREAMS_NUM_STANDBY_REPLICAS, "3", "streams.num.standby.replicas must be less than or equal to 2"),
            (STREAMS_NUM_STANDBY_REPLICAS, "-1", "Value must be at least 0"),
        ];
        for (name, value, why) in refused {
            let error = validate(&configs(&[(name, value)]), &BOUNDS).unwrap_err();
            assert!(error.contains(why), "{name}={value}: {error}");
        }
        let longest = "d".repeat(MAX_GROUP_CONFIG_VALUE_BYTES);
        assert_eq!(validate(&configs(&[(ERRORS_DLQ_TOPIC_NAME, &longest)]), &BOUNDS), Ok(()));
        let error = validate(&configs(&[(ERRORS_DLQ_TOPIC_NAME, &format!("{longest}d"))]), &BOUNDS).unwrap_err();
        assert!(error.contains("longer than 4096 bytes"), "{error}");
    }

    #[test]
    fn share_configs_are_read_back_over_the_broker_defaults() {
        let c = configs(&[
            (SHARE_SESSION_TIMEOUT_MS, "50000"),
            (SHARE_RECORD_LOCK_DURATION_MS, "20000"),
            (SHARE_AUTO_OFFSET_RESET, "by_duration:PT1H30M"),
            (SHARE_ISOLATION_LEVEL, "read_committed"),
            (SHARE_PARTITION_MAX_RECORD_LOCKS, "150"),
            (SHARE_RENEW_ACKNOWLEDGE_ENABLE, " FALSE"),
            (SHARE_ASSIGNMENT_INTERVAL_MS, "0"),
        ]);
        assert_eq!(validate(&c, &BOUNDS), Ok(()));
        let overrides = ShareGroupOverrides::from_configs(&c);
        assert_eq!(overrides.session_timeout_ms, Some(50_000));
        assert_eq!(overrides.partition_max_record_locks, Some(150));
        assert_eq!(overrides.renew_acknowledge_enabled, Some(false));
        assert_eq!(overrides.assignment_interval_ms, Some(0));
        let settings = ShareGroupSettings::with_overrides(ShareGroupSettings::default(), &overrides);
        assert_eq!(settings.record_lock_duration_ms, 20_000);
        assert_eq!(settings.delivery_count_limit, 5);
        assert_eq!(settings.auto_offset_reset, ShareAutoOffsetReset::ByDuration { duration_ms: 5_400_000 });
        assert_eq!(settings.isolation_level, ShareIsolationLevel::ReadCommitted);
        assert_eq!(validate_auto_offset_reset("EARLIEST"), Ok(ShareAutoOffsetReset::Earliest));
        assert_eq!(
            validate_auto_offset_reset("by_duration:P1DT0.5S"),
            Ok(ShareAutoOffsetReset::ByDuration { duration_ms: 86_400_500 })
        );
        assert!(validate_auto_offset_reset("by_duration:-PT1S").is_err());
    }

    #[test]
    fn the_heartbeat_interval_must_stay_below_the_session_timeout() {
        let bounds = GroupConfigBounds { max_heartbeat_interval_ms: 50_000, ..BOUNDS };
        let error = validate(&configs(&[(CONSUMER_HEARTBEAT_INTERVAL_MS, "45000")]), &bounds).unwrap_err();
        assert_eq!(error, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms");
    }
}
