//! Group configs (Kafka's `GroupConfig`, KIP-848; ConfigResource type GROUP): per-group
//! overrides of the broker's consumer-group session timeout and heartbeat interval,
//! set with IncrementalAlterConfigs, kept in the metadata log, and read by the
//! coordinator on each ConsumerGroupHeartbeat of the group.
//!
//! Kafka 4.x also has `share.*` and `streams.*` group configs; Osprey has neither share
//! nor streams groups, so those names are unknown here.

use std::collections::BTreeMap;

/// `consumer.session.timeout.ms`: the group's `group.consumer.session.timeout.ms`.
pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
/// `consumer.heartbeat.interval.ms`: the group's `group.consumer.heartbeat.interval.ms`.
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
/// Every group config name Osprey knows, in the order DescribeConfigs lists them.
pub const GROUP_CONFIG_NAMES: [&str; 2] = [CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS];

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
        let int = |key: &str| configs.get(key).and_then(|v| v.trim().parse::<i32>().ok());
        ConsumerGroupOverrides {
            session_timeout_ms: int(CONSUMER_SESSION_TIMEOUT_MS),
            heartbeat_interval_ms: int(CONSUMER_HEARTBEAT_INTERVAL_MS),
        }
    }
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
}

/// Kafka's `GroupConfig.validate`: `configs` is the group's whole set after the change.
/// Every name must be a group config, every value an integer within the broker's
/// bounds, and the heartbeat interval below the session timeout. The error is Kafka's
/// message for INVALID_CONFIG.
pub fn validate(configs: &BTreeMap<String, String>, bounds: &GroupConfigBounds) -> Result<(), String> {
    for (name, value) in configs {
        let (min, max) = match name.as_str() {
            CONSUMER_SESSION_TIMEOUT_MS => (bounds.min_session_timeout_ms, bounds.max_session_timeout_ms),
            CONSUMER_HEARTBEAT_INTERVAL_MS => (bounds.min_heartbeat_interval_ms, bounds.max_heartbeat_interval_ms),
            _ => return Err(format!("Unknown group config name: {name}")),
        };
        let parsed: i32 = value
            .trim()
            .parse()
            .map_err(|_| format!("Invalid value {value} for configuration {name}: Not a number of type INT"))?;
        if parsed < min {
            return Err(format!("{name} must be greater than or equal to {min}"));
        }
        if parsed > max {
            return Err(format!("{name} must be less than or equal to {max}"));
        }
    }
    let overrides = ConsumerGroupOverrides::from_configs(configs);
    let session = overrides.session_timeout_ms.unwrap_or(bounds.session_timeout_ms);
    let heartbeat = overrides.heartbeat_interval_ms.unwrap_or(bounds.heartbeat_interval_ms);
    if heartbeat >= session {
        return Err(format!("{CONSUMER_HEARTBEAT_INTERVAL_MS} must be less than {CONSUMER_SESSION_TIMEOUT_MS}"));
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
            (CONSUMER_SESSION_TIMEOUT_MS, "44999", "greater than or equal to 45000"),
            (CONSUMER_SESSION_TIMEOUT_MS, "60001", "less than or equal to 60000"),
            (CONSUMER_HEARTBEAT_INTERVAL_MS, "4999", "greater than or equal to 5000"),
            (CONSUMER_HEARTBEAT_INTERVAL_MS, "soon", "Not a number"),
            ("share.session.timeout.ms", "45000", "Unknown group config name"),
        ];
        for (name, value, why) in refused {
            let error = validate(&configs(&[(name, value)]), &BOUNDS).unwrap_err();
            assert!(error.contains(why), "{name}={value}: {error}");
        }
    }

    #[test]
    fn the_heartbeat_interval_must_stay_below_the_session_timeout() {
        let bounds = GroupConfigBounds { max_heartbeat_interval_ms: 50_000, ..BOUNDS };
        let error = validate(&configs(&[(CONSUMER_HEARTBEAT_INTERVAL_MS, "45000")]), &bounds).unwrap_err();
        assert!(error.contains("must be less than"), "{error}");
    }
}
