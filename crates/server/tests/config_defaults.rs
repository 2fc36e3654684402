//! `osprey` with no arguments: Kafka's defaults, except where Osprey deliberately
//! differs, and those differences are marked in the key table.

use osprey_server::config::keys::{broker_key, BROKER_KEYS, TOPIC_KEYS};
use osprey_server::config::{BrokerConfig, ConfigSource, ConfigType, RawConfig, SecurityProtocol};
use std::path::PathBuf;

fn defaults() -> BrokerConfig {
    let (config, unknown) = RawConfig::new().resolve().unwrap();
    assert!(unknown.is_empty());
    config
}

#[test]
fn no_arguments_is_a_single_node_on_loopback_with_data_under_dot_data() {
    let c = defaults();
    assert_eq!(c.node_id, 1);
    assert_eq!(c.process_roles, ["broker", "controller"]);
    assert_eq!(c.listeners.len(), 1);
    let l = &c.listeners[0];
    assert_eq!((l.name.as_str(), l.host.as_str(), l.port), ("PLAINTEXT", "127.0.0.1", 9092));
    assert_eq!(l.security_protocol, SecurityProtocol::Plaintext);
    assert_eq!(l.bind_address(), "127.0.0.1:9092");
    assert_eq!(c.advertised_listeners, c.listeners);
    assert_eq!(c.inter_broker_listener_name, "PLAINTEXT");
    assert!(c.controller_listener_names.is_empty());
    assert_eq!(c.data_dirs, [PathBuf::from("./data")]);
    assert!(c.auto_create_topics_enable);
    assert_eq!(c.metrics_listener.as_deref(), Some("127.0.0.1:9644"));
    assert_eq!(c, BrokerConfig::default());
}

#[test]
fn kafka_defaults_for_limits_and_topics() {
    let c = defaults();
    assert_eq!(c.num_partitions, 1);
    assert_eq!(c.default_replication_factor, 1);
    assert_eq!(c.min_insync_replicas, 1);
    assert!(c.delete_topic_enable);
    assert!(!c.unclean_leader_election_enable);
    assert_eq!(c.message_max_bytes, 1_048_588);
    assert_eq!(c.socket_request_max_bytes, 104_857_600);
    assert_eq!(c.socket_send_buffer_bytes, 102_400);
    assert_eq!(c.socket_receive_buffer_bytes, 102_400);
    assert_eq!(c.max_connections, i32::MAX);
    assert_eq!(c.connections_max_idle_ms, 600_000);
    assert_eq!(c.queued_max_requests, 500);
    assert_eq!(c.num_network_threads, 3);
    assert_eq!(c.num_io_threads, 8);
    assert_eq!(c.max_inflight_requests_per_connection, 100);
    assert_eq!(c.fetch_max_bytes, 57_671_680);
    assert_eq!(c.compression_type, "producer");
    assert_eq!(c.message_timestamp_type, "CreateTime");
}

#[test]
fn kafka_defaults_for_the_log() {
    let c = defaults();
    assert_eq!(c.retention_ms, 168 * 3_600_000);
    assert_eq!(c.retention_bytes, -1);
    assert_eq!(c.retention_check_interval_ms, 300_000);
    assert_eq!(c.segment_bytes, 1_073_741_824);
    assert_eq!(c.segment_ms, 168 * 3_600_000);
    assert_eq!(c.segment_jitter_ms, 0);
    assert_eq!(c.segment_index_bytes, 10_485_760);
    assert_eq!(c.index_interval_bytes, 4096);
    assert_eq!(c.cleanup_policy, ["delete"]);
    assert_eq!(c.flush_interval_messages, None, "Osprey fsyncs before ack by default");
    assert_eq!(c.flush_interval_ms, None, "Osprey fsyncs before ack by default");
}

#[test]
fn kafka_defaults_for_coordinators() {
    let c = defaults();
    assert_eq!(c.offsets_topic_num_partitions, 50);
    assert_eq!(c.offsets_retention_ms, 10_080 * 60_000);
    assert_eq!(c.group_initial_rebalance_delay_ms, 3000);
    assert_eq!(c.group_min_session_timeout_ms, 6000);
    assert_eq!(c.group_max_session_timeout_ms, 1_800_000);
    assert_eq!(c.transaction_state_log_num_partitions, 50);
    assert_eq!(c.transactional_id_expiration_ms, 604_800_000);
    assert_eq!(c.transaction_max_timeout_ms, 900_000);
    assert_eq!(c.producer_id_expiration_ms, 86_400_000);
    assert_eq!(c.replica_lag_time_max_ms, 30_000);
    // Kafka's; left at them, the internal topics are capped at the brokers registered
    // (`broker::internal_replication`).
    assert_eq!(c.offsets_topic_replication_factor, 3);
    assert_eq!(c.transaction_state_log_replication_factor, 3);
    assert_eq!(c.transaction_state_log_min_isr, 2);
}

#[test]
fn deviations_from_kafka_are_exactly_the_deliberate_ones_and_documented() {
    let deviating: Vec<&str> = BROKER_KEYS.iter().filter(|k| k.kafka_default.is_some()).map(|k| k.name).collect();
    assert_eq!(
        deviating,
        [
            "node.id",
            "process.roles",
            "listeners",
            "ssl.keystore.type",
            "ssl.truststore.type",
            "queued.max.request.bytes",
            "log.dir",
            "log.flush.interval.messages",
            "log.flush.interval.ms",
        ]
    );
    for name in deviating {
        assert!(broker_key(name).unwrap().doc.contains("Osprey"), "{name}'s doc should say Osprey differs");
    }
}

#[test]
fn topic_defaults_come_from_the_broker_keys_with_default_source() {
    let topic = defaults().topic_defaults();
    assert_eq!(topic.entries().len(), TOPIC_KEYS.len());
    assert_eq!(topic.value("retention.ms"), Some("604800000"));
    assert_eq!(topic.value("segment.ms"), Some("604800000"));
    assert_eq!(topic.value("segment.bytes"), Some("1073741824"));
    assert_eq!(topic.value("max.message.bytes"), Some("1048588"));
    assert_eq!(topic.value("cleanup.policy"), Some("delete"));
    assert_eq!(topic.value("min.cleanable.dirty.ratio"), Some("0.5"));
    assert_eq!(topic.value("message.timestamp.after.max.ms"), Some("3600000"));
    assert_eq!(topic.value("flush.messages"), None);
    assert_eq!(topic.value("flush.ms"), None);
    let retention = topic.get("retention.ms").unwrap();
    assert_eq!(retention.source, ConfigSource::DefaultConfig);
    assert!(retention.is_default() && !retention.read_only);
    assert_eq!(retention.config_type, ConfigType::Long);
    assert_eq!(retention.synonyms.len(), 1);
    assert_eq!(retention.synonyms[0].name, "log.retention.hours");
    assert_eq!(topic.overrides().count(), 0);
    assert!(topic.values().all(|(name, _)| name != "flush.ms"));
}

#[test]
fn describe_lists_every_broker_key_with_kafka_types_and_only_dynamic_ones_writable() {
    let entries = defaults().describe();
    assert_eq!(entries.len(), BROKER_KEYS.len());
    assert!(entries.iter().all(|e| e.source == ConfigSource::DefaultConfig));
    // Kafka's secrets: the passwords and inline private keys of the TLS keys, and nothing else.
    assert!(entries.iter().all(|e| e.is_sensitive == (e.config_type == ConfigType::Password)));
    assert!(entries.iter().filter(|e| e.is_sensitive).all(|e| e.value.is_none()));
    assert!(entries.iter().all(|e| e.read_only != osprey_server::config::is_dynamic(e.name)));
    let by_name = |n: &str| entries.iter().find(|e| e.name == n).unwrap();
    assert_eq!(by_name("num.partitions").value.as_deref(), Some("1"));
    assert_eq!(by_name("num.partitions").config_type, ConfigType::Int);
    assert_eq!(by_name("log.retention.ms").value, None, "unset, as Kafka shows it");
    assert_eq!(by_name("offsets.topic.replication.factor").config_type, ConfigType::Short);
    assert_eq!(by_name("listeners").config_type, ConfigType::List);
}

#[test]
fn wire_ids_match_kafkas_describe_configs_enums() {
    let sources = [
        (ConfigSource::Unknown, 0),
        (ConfigSource::DynamicTopicConfig, 1),
        (ConfigSource::DynamicBrokerConfig, 2),
        (ConfigSource::DynamicDefaultBrokerConfig, 3),
        (ConfigSource::StaticBrokerConfig, 4),
        (ConfigSource::DefaultConfig, 5),
        (ConfigSource::DynamicBrokerLoggerConfig, 6),
        (ConfigSource::ClientMetricsConfig, 7),
        (ConfigSource::GroupConfig, 8),
    ];
    for (source, id) in sources {
        assert_eq!(source.id(), id, "{source:?}");
    }
    let types = [
        (ConfigType::Unknown, 0),
        (ConfigType::Boolean, 1),
        (ConfigType::String, 2),
        (ConfigType::Int, 3),
        (ConfigType::Short, 4),
        (ConfigType::Long, 5),
        (ConfigType::Double, 6),
        (ConfigType::List, 7),
        (ConfigType::Class, 8),
        (ConfigType::Password, 9),
    ];
    for (config_type, id) in types {
        assert_eq!(config_type.id(), id, "{config_type:?}");
    }
}

#[test]
fn per_topic_broker_keys_name_their_topic_config() {
    let topic_of = |k: &str| broker_key(k).unwrap().topic_name();
    assert_eq!(topic_of("log.retention.ms"), Some("retention.ms"));
    assert_eq!(topic_of("log.retention.hours"), Some("retention.ms"));
    assert_eq!(topic_of("log.segment.bytes"), Some("segment.bytes"));
    assert_eq!(topic_of("message.max.bytes"), Some("max.message.bytes"));
    assert_eq!(topic_of("log.roll.hours"), Some("segment.ms"));
    assert_eq!(topic_of("log.segment.delete.delay.ms"), Some("file.delete.delay.ms"));
    assert_eq!(topic_of("log.cleaner.min.cleanable.ratio"), Some("min.cleanable.dirty.ratio"));
    assert_eq!(topic_of("log.flush.interval.ms"), Some("flush.ms"));
    assert_eq!(topic_of("min.insync.replicas"), Some("min.insync.replicas"));
    assert_eq!(topic_of("num.partitions"), None);
}
