//! Every class of bad value stops startup with an error naming the key, the value, what
//! was expected and where the value came from.

use osprey_server::config::{ConfigError, Origin, RawConfig};
use std::path::{Path, PathBuf};

fn file_error(file: &str) -> ConfigError {
    let mut settings = RawConfig::new();
    settings.load_properties(file, Path::new("conf/server.properties")).unwrap();
    settings.resolve().unwrap_err()
}

fn override_error(arg: &str) -> ConfigError {
    let mut settings = RawConfig::new();
    settings.add_override(arg).unwrap();
    settings.resolve().unwrap_err()
}

/// Asserts the error is about `key` with `value`, from `origin`, and that its message
/// names all of them plus the `expected` fragment.
fn assert_invalid(err: &ConfigError, key: &str, value: &str, origin: &Origin, expected: &str) {
    let message = err.to_string();
    match err {
        ConfigError::InvalidValue { key: k, value: v, origin: o, expected: e } => {
            assert_eq!((k.as_str(), v.as_str(), o), (key, value, origin), "{message}");
            assert!(e.contains(expected), "expected `{expected}` in `{e}`");
        }
        other => panic!("not an InvalidValue: {other:?}"),
    }
    assert!(message.contains(key) && message.contains(value) && message.contains(&origin.to_string()), "{message}");
    assert_eq!(err.exit_code(), 1);
}

fn at_line(line: usize) -> Origin {
    Origin::File { path: PathBuf::from("conf/server.properties"), line }
}

#[test]
fn wrong_type_names_key_value_and_file_line() {
    let err = file_error("# header\nnum.partitions=three\n");
    assert_invalid(&err, "num.partitions", "three", &at_line(2), "32-bit integer");
    assert_eq!(
        err.to_string(),
        "invalid value `three` for `num.partitions` (from conf/server.properties:2): expected a 32-bit integer >= 1"
    );
}

#[test]
fn wrong_type_from_an_override_says_override() {
    let err = override_error("auto.create.topics.enable=yes");
    assert_invalid(&err, "auto.create.topics.enable", "yes", &Origin::Override, "true or false");
}

#[test]
fn out_of_range_says_the_range() {
    assert_invalid(&override_error("num.io.threads=0"), "num.io.threads", "0", &Origin::Override, ">= 1");
    assert_invalid(
        &override_error("log.cleaner.min.cleanable.ratio=1.5"),
        "log.cleaner.min.cleanable.ratio",
        "1.5",
        &Origin::Override,
        "from 0 to 1",
    );
    assert_invalid(
        &override_error("log.segment.bytes=1000"),
        "log.segment.bytes",
        "1000",
        &Origin::Override,
        "1048576",
    );
    assert_invalid(
        &override_error("offsets.topic.replication.factor=70000"),
        "offsets.topic.replication.factor",
        "70000",
        &Origin::Override,
        "16-bit",
    );
}

#[test]
fn retention_zero_or_below_minus_one_is_rejected() {
    let err = override_error("log.retention.hours=0");
    assert_invalid(&err, "log.retention.hours", "0", &Origin::Override, "-1 (unlimited)");
    assert_invalid(&override_error("log.retention.ms=-2"), "log.retention.ms", "-2", &Origin::Override, "-1");
}

#[test]
fn value_not_in_the_allowed_set_lists_the_set() {
    let err = file_error("log.message.timestamp.type=BrokerTime\n");
    assert_invalid(&err, "log.message.timestamp.type", "BrokerTime", &at_line(1), "CreateTime, LogAppendTime");
    let err = file_error("\nlog.cleanup.policy=delete,keep\n");
    assert_invalid(&err, "log.cleanup.policy", "delete,keep", &at_line(2), "compact, delete");
    let err = override_error("compression.type=brotli");
    assert_invalid(&err, "compression.type", "brotli", &Origin::Override, "zstd");
}

#[test]
fn bad_listener_url_says_why() {
    let err = file_error("listeners=127.0.0.1:9092\n");
    assert_invalid(&err, "listeners", "127.0.0.1:9092", &at_line(1), "no `://`");
    let err = override_error("listeners=PLAINTEXT://localhost:70000");
    assert_invalid(&err, "listeners", "PLAINTEXT://localhost:70000", &Origin::Override, "not a port");
}

#[test]
fn listener_name_missing_from_the_protocol_map() {
    let err = override_error("listeners=CLIENT://127.0.0.1:9092");
    assert_invalid(&err, "listeners", "CLIENT://127.0.0.1:9092", &Origin::Override, "`CLIENT` is not");
}

#[test]
fn sasl_listeners_need_a_mechanism_osprey_serves_and_an_ssl_listener_needs_a_key_store() {
    let err = override_error("listeners=SASL_PLAINTEXT://127.0.0.1:9093");
    assert_invalid(&err, "sasl.enabled.mechanisms", "GSSAPI", &Origin::Default, "does not implement GSSAPI");
    let err = override_error("listeners=SASL_SSL://127.0.0.1:9093");
    assert_invalid(&err, "ssl.keystore.location", "", &Origin::Default, "a PEM key store for SSL listener SASL_SSL");
    let err = override_error("listeners=SSL://127.0.0.1:9093");
    assert_invalid(&err, "ssl.keystore.location", "", &Origin::Default, "a PEM key store for SSL listener SSL");
}

#[test]
fn duplicate_listener_names_and_addresses() {
    let err = override_error("listeners=PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2");
    assert_invalid(&err, "listeners", "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", &Origin::Override, "twice");
    let mut s = RawConfig::new();
    s.add_override("listeners=PLAINTEXT://127.0.0.1:1,OTHER://127.0.0.1:1").unwrap();
    s.add_override("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT").unwrap();
    assert!(s.resolve().unwrap_err().to_string().contains("127.0.0.1:1` appears twice"));
}

#[test]
fn advertising_a_wildcard_address_is_an_error() {
    let err = override_error("listeners=PLAINTEXT://0.0.0.0:9092");
    assert_invalid(&err, "listeners", "PLAINTEXT://0.0.0.0:9092", &Origin::Override, "advertised.listeners");
    let mut s = RawConfig::new();
    s.add_override("advertised.listeners=PLAINTEXT://0.0.0.0:9092").unwrap();
    let err = s.resolve().unwrap_err();
    assert_invalid(&err, "advertised.listeners", "PLAINTEXT://0.0.0.0:9092", &Origin::Override, "routable");
}

#[test]
fn controller_listener_must_be_a_listener() {
    let err = override_error("controller.listener.names=CONTROLLER");
    assert_invalid(&err, "controller.listener.names", "CONTROLLER", &Origin::Override, "`CONTROLLER` is not one");
}

#[test]
fn inter_broker_listener_must_be_a_client_listener() {
    let err = override_error("inter.broker.listener.name=REPLICATION");
    assert_invalid(&err, "inter.broker.listener.name", "REPLICATION", &Origin::Override, "non-controller listener");
    let err = override_error("inter.broker.listener.name=A,B");
    assert_invalid(&err, "inter.broker.listener.name", "A,B", &Origin::Override, "one listener name");
}

#[test]
fn bad_security_protocol_map() {
    let err = override_error("listener.security.protocol.map=PLAINTEXT:TLS");
    assert_invalid(&err, "listener.security.protocol.map", "PLAINTEXT:TLS", &Origin::Override, "`TLS`");
}

#[test]
fn conflicting_node_and_broker_id() {
    let err = file_error("node.id=1\nbroker.id=2\n");
    assert_invalid(&err, "broker.id", "2", &at_line(2), "node.id (1)");
}

#[test]
fn split_process_roles_need_a_quorum_to_find() {
    let err = override_error("process.roles=broker");
    assert_invalid(&err, "process.roles", "broker", &Origin::Override, "controller.quorum.voters");
    let err = override_error("process.roles=broker,zookeeper");
    assert_invalid(&err, "process.roles", "broker,zookeeper", &Origin::Override, "`zookeeper` is not a role");
}

#[test]
fn duplicate_data_directories() {
    let err = override_error("log.dirs=/a,/b,/a");
    assert_invalid(&err, "log.dirs", "/a,/b,/a", &Origin::Override, "`/a` is listed twice");
}

#[test]
fn session_timeout_bounds_must_be_ordered() {
    let err = file_error("group.min.session.timeout.ms=60000\ngroup.max.session.timeout.ms=1000\n");
    assert_invalid(&err, "group.min.session.timeout.ms", "60000", &at_line(1), "group.max.session.timeout.ms");
}

#[test]
fn share_group_defaults_must_lie_within_their_bounds() {
    let err = file_error("group.share.session.timeout.ms=30000\n");
    assert_invalid(&err, "group.share.session.timeout.ms", "30000", &at_line(1), "group.share.min.session.timeout.ms");
    let err = file_error("group.share.min.session.timeout.ms=5000\ngroup.share.session.timeout.ms=5000\n");
    assert_invalid(
        &err,
        "group.share.heartbeat.interval.ms",
        "5000",
        &Origin::Default,
        "less than group.share.session.timeout.ms",
    );
    let err = file_error("group.share.max.delivery.count.limit=4\n");
    assert_invalid(
        &err,
        "group.share.delivery.count.limit",
        "5",
        &Origin::Default,
        "at most group.share.max.delivery.count.limit (4)",
    );
    let err = file_error("group.share.max.share.sessions=100\n");
    assert_invalid(&err, "group.share.max.share.sessions", "100", &at_line(1), "at least group.share.max.size (200)");
}

#[test]
fn bad_metrics_listener() {
    let err = override_error("metrics.listener=localhost");
    assert_invalid(&err, "metrics.listener", "localhost", &Origin::Override, "host:port");
}

#[test]
fn override_without_equals_is_a_usage_error() {
    let err = RawConfig::new().add_override("num.partitions").unwrap_err();
    assert!(matches!(&err, ConfigError::BadOverride { arg } if arg == "num.partitions"));
    assert!(err.to_string().contains("key=value"));
    assert_eq!(err.exit_code(), 2);
    assert!(RawConfig::new().add_override("=3").is_err());
}

#[test]
fn malformed_escape_names_file_and_line() {
    let mut settings = RawConfig::new();
    let err = settings.load_properties("a=1\nb=\\uZZZZ\n", Path::new("conf/server.properties")).unwrap_err();
    assert!(matches!(&err, ConfigError::Syntax { origin, .. } if *origin == at_line(2)));
    assert!(err.to_string().starts_with("conf/server.properties:2: "), "{err}");
}

#[test]
fn missing_file_names_the_path() {
    let err = RawConfig::new().load_file(Path::new("/nonexistent/osprey/server.properties")).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/osprey/server.properties"), "{err}");
}
