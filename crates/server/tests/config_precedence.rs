//! File, then `--override`, then Kafka's precedence between related keys.

use osprey_server::config::{BrokerConfig, ConfigSource, Origin, RawConfig};
use std::path::{Path, PathBuf};

fn resolve(file: &str, overrides: &[&str]) -> (BrokerConfig, Vec<String>) {
    let mut settings = RawConfig::new();
    settings.load_properties(file, Path::new("server.properties")).unwrap();
    for o in overrides {
        settings.add_override(o).unwrap();
    }
    settings.resolve().unwrap()
}

#[test]
fn overrides_win_over_the_file_and_the_file_over_defaults() {
    let (c, _) = resolve("num.partitions=3\nnum.io.threads=4\n", &["num.partitions=6"]);
    assert_eq!(c.num_partitions, 6);
    assert_eq!(c.num_io_threads, 4);
    assert_eq!(c.num_network_threads, 3);
    assert_eq!(c.origin("num.partitions"), Some(&Origin::Override));
    assert_eq!(c.origin("num.io.threads"), Some(&Origin::File { path: PathBuf::from("server.properties"), line: 2 }));
    assert_eq!(c.origin("num.network.threads"), Some(&Origin::Default));
}

#[test]
fn a_later_duplicate_in_the_file_wins() {
    let (c, _) = resolve("num.partitions=3\nnum.partitions=5\n", &[]);
    assert_eq!(c.num_partitions, 5);
}

#[test]
fn the_last_override_of_a_key_wins_and_values_may_contain_equals() {
    let (c, _) = resolve("", &["num.partitions=2", "num.partitions=9", "log.dir=/tmp/a=b"]);
    assert_eq!(c.num_partitions, 9);
    assert_eq!(c.data_dirs, [PathBuf::from("/tmp/a=b")]);
}

#[test]
fn retention_ms_beats_minutes_beats_hours() {
    assert_eq!(resolve("log.retention.hours=1\n", &[]).0.retention_ms, 3_600_000);
    assert_eq!(resolve("log.retention.hours=1\nlog.retention.minutes=2\n", &[]).0.retention_ms, 120_000);
    let all = "log.retention.hours=1\nlog.retention.minutes=2\nlog.retention.ms=5000\n";
    assert_eq!(resolve(all, &[]).0.retention_ms, 5000);
    // The winner decides, even when it is the one saying "forever".
    assert_eq!(resolve("log.retention.hours=1\nlog.retention.minutes=-1\n", &[]).0.retention_ms, -1);
    assert_eq!(resolve("log.retention.ms=-1\nlog.retention.hours=1\n", &[]).0.retention_ms, -1);
}

#[test]
fn roll_ms_beats_roll_hours() {
    assert_eq!(resolve("log.roll.hours=2\n", &[]).0.segment_ms, 7_200_000);
    assert_eq!(resolve("log.roll.hours=2\nlog.roll.ms=1000\n", &[]).0.segment_ms, 1000);
    assert_eq!(resolve("log.roll.jitter.hours=1\n", &[]).0.segment_jitter_ms, 3_600_000);
}

#[test]
fn log_dirs_beats_log_dir() {
    assert_eq!(resolve("log.dir=/one\n", &[]).0.data_dirs, [PathBuf::from("/one")]);
    let (c, _) = resolve("log.dir=/one\nlog.dirs=/a, /b\n", &[]);
    assert_eq!(c.data_dirs, [PathBuf::from("/a"), PathBuf::from("/b")]);
}

#[test]
fn broker_id_supplies_node_id_when_node_id_is_unset() {
    assert_eq!(resolve("broker.id=7\n", &[]).0.node_id, 7);
    assert_eq!(resolve("broker.id=7\nnode.id=7\n", &[]).0.node_id, 7);
    assert_eq!(resolve("node.id=4\n", &[]).0.node_id, 4);
}

#[test]
fn unknown_keys_are_returned_sorted_not_rejected() {
    let file = "zookeeper.connect=localhost:2181\nnum.partitions=2\nssl.keystore.location=/x\nssl.provider=SunJSSE\n";
    let (c, unknown) = resolve(file, &["no.such.key=1"]);
    assert_eq!(c.num_partitions, 2);
    // ssl.keystore.location is known since TLS listeners exist; JSSE's ssl.provider is not.
    assert_eq!(unknown, ["no.such.key", "ssl.provider", "zookeeper.connect"]);
}

#[test]
fn advertised_listeners_default_to_the_non_controller_listeners() {
    let file = "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n\
                controller.listener.names=CONTROLLER\n\
                listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n";
    let (c, _) = resolve(file, &[]);
    assert_eq!(c.listeners.len(), 2);
    assert_eq!(c.controller_listener_names, ["CONTROLLER"]);
    assert_eq!(c.advertised_listeners.len(), 1);
    assert_eq!(c.advertised_listeners[0].to_string(), "PLAINTEXT://127.0.0.1:9092");
    assert_eq!(c.inter_broker_listener_name, "PLAINTEXT");
}

#[test]
fn explicit_advertised_listeners_and_custom_listener_names() {
    let file = "listeners=CLIENT://:9092\n\
                listener.security.protocol.map=CLIENT:PLAINTEXT\n\
                advertised.listeners=CLIENT://broker1.example.com:19092\n";
    let (c, _) = resolve(file, &[]);
    assert_eq!(c.listeners[0].host, "");
    assert_eq!(c.listeners[0].bind_address(), "0.0.0.0:9092");
    assert_eq!(c.advertised_listeners[0].host, "broker1.example.com");
    assert_eq!(c.advertised_listeners[0].port, 19092);
    assert_eq!(c.inter_broker_listener_name, "CLIENT");
}

#[test]
fn metrics_listener_moves_or_turns_off_the_metrics_endpoint() {
    assert_eq!(resolve("", &["metrics.listener=0.0.0.0:9100"]).0.metrics_listener.as_deref(), Some("0.0.0.0:9100"));
    assert_eq!(resolve("", &["metrics.listener=[::1]:9100"]).0.metrics_listener.as_deref(), Some("[::1]:9100"));
    assert_eq!(resolve("", &["metrics.listener="]).0.metrics_listener, None);
}

#[test]
fn flush_settings_are_passed_through_when_set() {
    let (c, _) = resolve("log.flush.interval.messages=1000\nlog.flush.interval.ms=50\n", &[]);
    assert_eq!(c.flush_interval_messages, Some(1000));
    assert_eq!(c.flush_interval_ms, Some(50));
    let topic = c.topic_defaults();
    assert_eq!(topic.value("flush.messages"), Some("1000"));
    assert_eq!(topic.get("flush.ms").unwrap().source, ConfigSource::StaticBrokerConfig);
}

#[test]
fn set_broker_keys_become_static_topic_defaults_with_synonyms() {
    let (c, _) = resolve("log.retention.minutes=30\nlog.retention.hours=2\nmessage.max.bytes=2000000\n", &[]);
    let topic = c.topic_defaults();
    let retention = topic.get("retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("1800000"));
    assert_eq!(retention.source, ConfigSource::StaticBrokerConfig);
    let synonyms: Vec<_> = retention.synonyms.iter().map(|s| (s.name, s.value.as_deref(), s.source)).collect();
    assert_eq!(
        synonyms,
        [
            ("log.retention.minutes", Some("30"), ConfigSource::StaticBrokerConfig),
            ("log.retention.hours", Some("2"), ConfigSource::StaticBrokerConfig),
            ("log.retention.hours", Some("168"), ConfigSource::DefaultConfig),
        ]
    );
    assert_eq!(topic.value("max.message.bytes"), Some("2000000"));
    let described = c.describe();
    let max = described.iter().find(|e| e.name == "message.max.bytes").unwrap();
    assert_eq!(max.source, ConfigSource::StaticBrokerConfig);
    assert_eq!(max.value.as_deref(), Some("2000000"));
}

#[test]
fn values_are_trimmed_and_normalised() {
    let (c, _) = resolve("auto.create.topics.enable = FALSE  \nlog.cleanup.policy=compact , delete\n", &[]);
    assert!(!c.auto_create_topics_enable);
    assert_eq!(c.cleanup_policy, ["compact", "delete"]);
    assert_eq!(c.value("log.cleanup.policy").as_deref(), Some("compact,delete"));
}

#[test]
fn kafka_4_sample_server_properties_starts_with_warnings_only() {
    // Modelled on the config/server.properties Kafka 4.0 ships (comments trimmed).
    let file = "process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
";
    let (c, unknown) = resolve(file, &[]);
    assert!(unknown.is_empty(), "{unknown:?}");
    assert_eq!((c.share_coordinator_state_topic_replication_factor, c.share_coordinator_state_topic_min_isr), (1, 1));
    assert_eq!(c.cluster.bootstrap_servers, [("localhost".to_string(), 9093)]);
    assert_eq!(c.cluster.beyond_this_node(1), None, "the bootstrap server is this node's own controller listener");
    assert_eq!(c.listeners.len(), 2);
    assert_eq!(c.advertised_listeners.len(), 1, "clients are not sent the controller listener");
    assert_eq!(c.advertised_listeners[0].to_string(), "PLAINTEXT://localhost:9092");
    assert_eq!(c.data_dirs, [PathBuf::from("/tmp/kraft-combined-logs")]);
}
