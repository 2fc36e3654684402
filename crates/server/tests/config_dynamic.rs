//! Dynamic broker configs over the static ones: Kafka's precedence (this broker's dynamic
//! config, the cluster-wide dynamic default, `server.properties`, the default), the topic
//! defaults that follow, what DescribeConfigs reports, and which keys may change.

use osprey_server::config::keys::BROKER_KEYS;
use osprey_server::config::{BrokerConfig, ConfigSource, RawConfig};
use std::collections::BTreeMap;

fn static_config(overrides: &[&str]) -> BrokerConfig {
    let mut raw = RawConfig::new();
    for o in overrides {
        raw.add_override(o).unwrap();
    }
    raw.resolve().unwrap().0
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn synonyms(c: &BrokerConfig, key: &str) -> Vec<(String, Option<String>, ConfigSource)> {
    let described = c.describe();
    let entry = described.iter().find(|e| e.name == key).unwrap();
    entry.synonyms.iter().map(|s| (s.name.to_string(), s.value.clone(), s.source)).collect()
}

#[test]
fn per_broker_beats_cluster_default_beats_static_beats_default() {
    let c = static_config(&["log.retention.ms=1000"]);
    let default_only = c.with_dynamic(&map(&[("log.retention.ms", "2000")]), &BTreeMap::new()).unwrap();
    assert_eq!(default_only.retention_ms, 2000);
    assert_eq!(default_only.source_of("log.retention.ms"), ConfigSource::DynamicDefaultBrokerConfig);

    let both = c.with_dynamic(&map(&[("log.retention.ms", "2000")]), &map(&[("log.retention.ms", "3000")])).unwrap();
    assert_eq!(both.retention_ms, 3000);
    assert_eq!(both.source_of("log.retention.ms"), ConfigSource::DynamicBrokerConfig);
    assert_eq!(
        synonyms(&both, "log.retention.ms"),
        [
            ("log.retention.ms".into(), Some("3000".into()), ConfigSource::DynamicBrokerConfig),
            ("log.retention.ms".into(), Some("2000".into()), ConfigSource::DynamicDefaultBrokerConfig),
            ("log.retention.ms".into(), Some("1000".into()), ConfigSource::StaticBrokerConfig),
        ]
    );

    // Deleting the dynamic configs brings the static value back, from any earlier state.
    let deleted = both.with_dynamic(&BTreeMap::new(), &BTreeMap::new()).unwrap();
    assert_eq!(deleted.retention_ms, 1000);
    assert_eq!(deleted.source_of("log.retention.ms"), ConfigSource::StaticBrokerConfig);
    assert_eq!(deleted, c);
}

#[test]
fn a_dynamic_message_max_bytes_becomes_the_topic_default_with_its_source() {
    let c = static_config(&[]).with_dynamic(&map(&[("message.max.bytes", "2048")]), &BTreeMap::new()).unwrap();
    assert_eq!(c.message_max_bytes, 2048);
    let topic = c.topic_defaults();
    let max = topic.get("max.message.bytes").unwrap();
    assert_eq!(max.value.as_deref(), Some("2048"));
    assert_eq!(max.source, ConfigSource::DynamicDefaultBrokerConfig);
    let sources: Vec<_> = max.synonyms.iter().map(|s| (s.name, s.value.as_deref(), s.source)).collect();
    assert_eq!(
        sources,
        [
            ("message.max.bytes", Some("2048"), ConfigSource::DynamicDefaultBrokerConfig),
            ("message.max.bytes", Some("1048588"), ConfigSource::DefaultConfig),
        ]
    );
}

#[test]
fn a_dynamic_log_retention_ms_beats_static_hours() {
    let c = static_config(&["log.retention.hours=2"]);
    let dynamic = c.with_dynamic(&BTreeMap::new(), &map(&[("log.retention.ms", "5000")])).unwrap();
    assert_eq!(dynamic.retention_ms, 5000);
    let retention = dynamic.topic_defaults().get("retention.ms").unwrap().clone();
    assert_eq!(retention.value.as_deref(), Some("5000"));
    assert_eq!(retention.source, ConfigSource::DynamicBrokerConfig);
    let names: Vec<_> = retention.synonyms.iter().map(|s| (s.name, s.source)).collect();
    assert_eq!(
        names,
        [
            ("log.retention.ms", ConfigSource::DynamicBrokerConfig),
            ("log.retention.hours", ConfigSource::StaticBrokerConfig),
            ("log.retention.hours", ConfigSource::DefaultConfig),
        ]
    );
}

#[test]
fn only_dynamic_keys_with_valid_values_are_accepted_with_kafkas_messages() {
    let c = static_config(&[]);
    assert_eq!(c.validate_dynamic(&map(&[("log.retention.ms", "60000"), ("message.max.bytes", "2048")]), true), Ok(()));
    assert_eq!(
        c.validate_dynamic(&map(&[("log.dirs", "/tmp/x")]), true),
        Err("Cannot update these configs dynamically: Set(log.dirs)".into())
    );
    // Kafka's topic defaults are dynamic under their first broker synonym only.
    assert_eq!(
        c.validate_dynamic(&map(&[("log.retention.hours", "1"), ("num.io.threads", "4")]), false),
        Err("Cannot update these configs dynamically: Set(log.retention.hours, num.io.threads)".into())
    );
    let bad = c.validate_dynamic(&map(&[("log.retention.ms", "soon")]), false).unwrap_err();
    assert!(bad.starts_with("Invalid value soon for configuration log.retention.ms"), "{bad}");
    let below = c.validate_dynamic(&map(&[("log.segment.bytes", "10")]), true).unwrap_err();
    assert!(below.contains("log.segment.bytes"), "{below}");
}

#[test]
fn describe_marks_dynamic_keys_writable_and_the_default_resource_shows_only_its_own() {
    let c = static_config(&[])
        .with_dynamic(&map(&[("log.retention.ms", "2000")]), &map(&[("log.retention.ms", "3000")]))
        .unwrap();
    let described = c.describe();
    assert_eq!(described.len(), BROKER_KEYS.len());
    let by_name = |n: &str| described.iter().find(|e| e.name == n).unwrap();
    assert!(!by_name("log.retention.ms").read_only);
    assert!(!by_name("message.max.bytes").read_only);
    assert!(by_name("log.retention.hours").read_only, "not dynamic in Kafka");
    assert!(by_name("log.dirs").read_only);
    assert_eq!(by_name("log.retention.ms").value.as_deref(), Some("3000"));

    let default = c.describe_dynamic_default();
    assert_eq!(default.len(), 1);
    assert_eq!(default[0].name, "log.retention.ms");
    assert_eq!(default[0].value.as_deref(), Some("2000"));
    assert_eq!(default[0].source, ConfigSource::DynamicDefaultBrokerConfig);
    assert!(
        default[0].synonyms.iter().all(|s| s.source != ConfigSource::DynamicBrokerConfig),
        "the default resource does not show one broker's own value"
    );
}
