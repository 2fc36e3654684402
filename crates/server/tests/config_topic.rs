//! Topic configs from CreateTopics / AlterConfigs: Kafka's names and ranges, INVALID_CONFIG
//! on failure.

use osprey_protocol::ErrorCode;
use osprey_server::config::{validate_topic_config, BrokerConfig, ConfigError, ConfigSource};

#[test]
fn valid_topic_configs_pass() {
    for (name, value) in [
        ("retention.ms", "-1"),
        ("retention.ms", "0"),
        ("retention.bytes", "1073741824"),
        ("segment.bytes", "1048576"),
        ("segment.ms", "60000"),
        ("cleanup.policy", "compact,delete"),
        ("cleanup.policy", "compact"),
        ("max.message.bytes", "5242880"),
        ("min.insync.replicas", "2"),
        ("message.timestamp.type", "LogAppendTime"),
        ("compression.type", "zstd"),
        ("min.cleanable.dirty.ratio", "0.1"),
        ("unclean.leader.election.enable", "true"),
        ("flush.messages", "1"),
        ("flush.ms", "0"),
        ("compression.gzip.level", "-1"),
        ("compression.zstd.level", "-5"),
    ] {
        assert!(validate_topic_config(name, value).is_ok(), "{name}={value}");
    }
}

#[test]
fn invalid_topic_configs_fail_with_invalid_config() {
    for (name, value) in [
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("segment.bytes", "1000"),
        ("segment.ms", "0"),
        ("cleanup.policy", "delete,archive"),
        ("min.insync.replicas", "0"),
        ("message.timestamp.type", "createtime"),
        ("compression.type", "brotli"),
        ("min.cleanable.dirty.ratio", "2"),
        ("unclean.leader.election.enable", "maybe"),
        ("flush.messages", "0"),
        ("compression.gzip.level", "0"),
        ("max.message.bytes", "-1"),
    ] {
        let err = validate_topic_config(name, value).unwrap_err();
        assert_eq!(err.error_code(), ErrorCode::INVALID_CONFIG, "{name}={value}");
        let message = err.to_string();
        assert!(message.contains(name) && message.contains(value) && message.contains("the request"), "{message}");
    }
}

#[test]
fn broker_key_names_are_not_topic_configs() {
    let err = validate_topic_config("log.retention.ms", "1000").unwrap_err();
    assert!(matches!(&err, ConfigError::UnknownTopicConfig { name } if name == "log.retention.ms"));
    assert_eq!(err.error_code(), ErrorCode::INVALID_CONFIG);
}

#[test]
fn setting_a_topic_config_overrides_the_broker_default() {
    let mut topic = BrokerConfig::default().topic_defaults();
    topic.set("retention.ms", " 3600000 ").unwrap();
    topic.set("cleanup.policy", "compact , delete").unwrap();
    assert!(topic.set("segment.bytes", "12").is_err());
    let retention = topic.get("retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("3600000"));
    assert_eq!(retention.source, ConfigSource::DynamicTopicConfig);
    assert_eq!(retention.synonyms[0].source, ConfigSource::DynamicTopicConfig);
    assert_eq!(retention.synonyms.last().unwrap().source, ConfigSource::DefaultConfig);
    let overrides: Vec<_> = topic.overrides().collect();
    assert_eq!(overrides, [("cleanup.policy", "compact,delete"), ("retention.ms", "3600000")]);
    assert_eq!(topic.value("segment.bytes"), Some("1073741824"));
}
