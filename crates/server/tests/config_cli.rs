//! `osprey [server.properties] [--override key=value]... [--help]`.

use osprey_server::config::keys::{BROKER_KEYS, TOPIC_KEYS};
use osprey_server::config::{help_text, parse_cli, ConfigError, Origin};
use std::path::PathBuf;

fn temp_properties(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("osprey-config-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn no_arguments_gives_the_defaults() {
    let (config, unknown) = parse_cli(["osprey"]).unwrap();
    assert_eq!(config.listeners[0].bind_address(), "127.0.0.1:9092");
    assert!(unknown.is_empty());
}

#[test]
fn file_then_overrides() {
    let path = temp_properties("precedence.properties", "num.partitions=3\nlog.retention.hours=1\nfoo.bar=1\n");
    let path_arg = path.to_str().unwrap();
    let args = ["osprey", path_arg, "--override", "num.partitions=8", "--override=log.retention.minutes=5"];
    let (config, unknown) = parse_cli(args).unwrap();
    assert_eq!(config.num_partitions, 8);
    assert_eq!(config.retention_ms, 300_000);
    assert_eq!(unknown, ["foo.bar"]);
    assert_eq!(config.origin("log.retention.hours"), Some(&Origin::File { path: path.clone(), line: 2 }));
}

#[test]
fn a_bad_value_in_the_file_names_the_file_and_line() {
    let path = temp_properties("bad.properties", "\n\nmessage.max.bytes=big\n");
    let err = parse_cli(["osprey", path.to_str().unwrap()]).unwrap_err();
    let message = err.to_string();
    assert!(message.contains(&format!("{}:3", path.display())), "{message}");
    assert!(message.contains("message.max.bytes") && message.contains("`big`"), "{message}");
}

#[test]
fn overrides_work_without_a_file() {
    let (config, _) = parse_cli(["osprey", "--override", "node.id=3"]).unwrap();
    assert_eq!(config.node_id, 3);
}

#[test]
fn a_missing_file_is_an_error() {
    let err = parse_cli(["osprey", "/nonexistent/server.properties"]).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }), "{err:?}");
}

#[test]
fn unknown_flags_are_usage_errors() {
    let err = parse_cli(["osprey", "--frobnicate"]).unwrap_err();
    assert!(matches!(err, ConfigError::Usage(_)), "{err:?}");
    assert_eq!(err.exit_code(), 2);
    let err = parse_cli(["osprey", "a.properties", "b.properties"]).unwrap_err();
    assert!(matches!(err, ConfigError::Usage(_)), "{err:?}");
}

#[test]
fn help_flag_returns_the_help_text() {
    match parse_cli(["osprey", "--help"]) {
        Err(ConfigError::Help(text)) => {
            assert!(text.contains("--override"));
            assert!(text.contains("log.retention.ms"));
        }
        other => panic!("expected help, got {other:?}"),
    }
    match parse_cli(["osprey", "-h"]) {
        Err(e @ ConfigError::Help(_)) => {
            assert_eq!(e.exit_code(), 0);
            assert!(e.to_string().contains("--help"));
        }
        other => panic!("expected help, got {other:?}"),
    }
}

#[test]
fn help_lists_every_key_with_its_default_and_doc() {
    let help = help_text();
    assert!(help.contains("Usage: osprey"), "{help}");
    for key in BROKER_KEYS {
        let line = match key.default {
            Some("") => format!("  {} = \"\"", key.name),
            Some(default) => format!("  {} = {}", key.name, default),
            None => format!("  {} = (unset)", key.name),
        };
        assert!(help.contains(&line), "help lacks `{line}`");
        assert!(help.contains(key.doc), "help lacks the doc of {}", key.name);
    }
}

#[test]
fn help_marks_osprey_defaults_and_topic_names() {
    let help = help_text();
    assert!(help.contains("Kafka: PLAINTEXT://:9092"));
    assert!(help.contains("Kafka: /tmp/kafka-logs"));
    for topic in TOPIC_KEYS {
        assert!(help.contains(&format!("per topic: {}", topic.name)), "help lacks topic key {}", topic.name);
    }
    let titles = ["Server:", "Listeners:", "Log storage:", "Retention and compaction:", "Group coordinator:"];
    let positions: Vec<usize> = titles.iter().map(|t| help.find(t).unwrap_or_else(|| panic!("no {t}"))).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "groups out of order");
}

#[test]
fn format_takes_kafka_storage_options_and_the_brokers_config() {
    use osprey_server::config::{parse_command, Command};
    let path = temp_properties("format.properties", "log.dirs=/x/a,/x/b\nnode.id=3\n");
    let args = [
        "osprey",
        "format",
        "-t",
        "MkU3OEVBNTcwNTJENDM2Qg",
        "-c",
        path.to_str().unwrap(),
        "--override",
        "node.id=5",
        "-g",
    ];
    match parse_command(args).unwrap() {
        Command::Format { config, cluster_id, ignore_formatted, unknown } => {
            assert_eq!(cluster_id, "MkU3OEVBNTcwNTJENDM2Qg");
            assert!(ignore_formatted && unknown.is_empty());
            assert_eq!((config.node_id, config.data_dirs.len()), (5, 2));
        }
        other => panic!("{other:?}"),
    }
    let long = ["osprey", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg", "--config", path.to_str().unwrap()];
    assert!(matches!(parse_command(long).unwrap(), Command::Format { ignore_formatted: false, .. }));
    // The cluster id is required, as kafka-storage.sh requires it.
    assert!(matches!(parse_command(["osprey", "format"]), Err(ConfigError::Usage(_))));
    // A bad key is reported as for the broker.
    let bad = ["osprey", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "--override", "node.id=x"];
    assert!(matches!(parse_command(bad), Err(ConfigError::InvalidValue { .. })));
}

#[test]
fn random_uuid_and_the_broker_command_line_still_parse() {
    use osprey_server::config::{parse_command, Command};
    assert!(matches!(parse_command(["osprey", "random-uuid"]).unwrap(), Command::RandomUuid));
    assert!(matches!(parse_command(["osprey", "random-uuid", "extra"]), Err(ConfigError::Usage(_))));
    let path = temp_properties("serve.properties", "num.partitions=4\n");
    match parse_command(["osprey", path.to_str().unwrap()]).unwrap() {
        Command::Serve { config, .. } => assert_eq!(config.num_partitions, 4),
        other => panic!("{other:?}"),
    }
    assert!(help_text().contains("osprey format --cluster-id"));
}
