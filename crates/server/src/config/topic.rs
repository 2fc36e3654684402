//! Per-topic configs: their defaults from the broker config, and checking values a
//! client sends in CreateTopics or AlterConfigs (Kafka answers a bad one with
//! INVALID_CONFIG, see [`ConfigError::error_code`]).

use super::broker::BrokerConfig;
use super::keys::{topic_key, ConfigSource, TopicKey, TOPIC_KEYS};
use super::value::{check, Value};
use super::{ConfigEntry, ConfigError, ConfigSynonym, Origin};

/// Checks one topic config from a request: the name must be a topic config Osprey knows
/// and the value must fit its type and Kafka's range.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), ConfigError> {
    checked(name, value).map(drop)
}

fn checked(name: &str, value: &str) -> Result<(&'static TopicKey, Value), ConfigError> {
    let key = topic_key(name).ok_or_else(|| ConfigError::UnknownTopicConfig { name: name.to_string() })?;
    let checked = check(key.config_type, key.validator, value).map_err(|expected| ConfigError::InvalidValue {
        key: name.to_string(),
        value: value.to_string(),
        expected,
        origin: Origin::Request,
    })?;
    Ok((key, checked))
}

/// Every topic config with its value and where that came from: the broker's defaults
/// (from [`BrokerConfig::topic_defaults`]) with the topic's own settings on top.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    entries: Vec<ConfigEntry>,
}

impl TopicConfig {
    pub(crate) fn from_broker(broker: &BrokerConfig) -> TopicConfig {
        let entries = TOPIC_KEYS.iter().map(|key| default_entry(key, broker)).collect();
        TopicConfig { entries }
    }

    /// Sets a topic's own value (source DYNAMIC_TOPIC_CONFIG) after checking it.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let (key, checked) = checked(name, value)?;
        let entry = self.entries.iter_mut().find(|e| e.name == key.name).expect("one entry per topic key");
        let value = Some(checked.render());
        entry.synonyms.insert(
            0,
            ConfigSynonym { name: key.name, value: value.clone(), source: ConfigSource::DynamicTopicConfig },
        );
        entry.value = value;
        entry.source = ConfigSource::DynamicTopicConfig;
        Ok(())
    }

    /// One config by its topic-level name.
    pub fn get(&self, name: &str) -> Option<&ConfigEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The value of one config; `None` if unknown or unset (`flush.messages` and
    /// `flush.ms` are unset by default: Osprey fsyncs before acknowledging).
    pub fn value(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|e| e.value.as_deref())
    }

    /// Every config, in the key table's order, as DescribeConfigs on a topic reports them.
    pub fn entries(&self) -> &[ConfigEntry] {
        &self.entries
    }

    /// `(name, value)` of every config that has a value, e.g. for building the storage
    /// engine's log config.
    pub fn values(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.entries.iter().filter_map(|e| Some((e.name, e.value.as_deref()?)))
    }

    /// `(name, value)` of the topic's own settings, which are what to persist.
    pub fn overrides(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.entries
            .iter()
            .filter(|e| e.source == ConfigSource::DynamicTopicConfig)
            .filter_map(|e| Some((e.name, e.value.as_deref()?)))
    }
}

/// The default of a topic config that no broker setting supplies (Kafka's `LogConfig`
/// default).
fn topic_only_default(name: &str) -> Option<&'static str> {
    match name {
        "errors.deadletterqueue.group.enable" => Some("false"),
        _ => None,
    }
}

/// The default of one topic key: from the highest-precedence broker synonym that was set
/// (dynamically or statically), else from the built-in default; the synonyms list every
/// broker setting it was chosen from, then the default, as Kafka's DescribeConfigs does.
fn default_entry(key: &'static TopicKey, broker: &BrokerConfig) -> ConfigEntry {
    let synonyms = broker.synonyms(key.broker_synonyms);
    let source = synonyms.first().map_or(ConfigSource::DefaultConfig, |s| s.source);
    let value = match broker.combined_topic_default(key.name) {
        Some(ms) => Some(ms.to_string()),
        None => match key.broker_synonyms.first() {
            Some(name) => broker.entry(name).and_then(|e| e.rendered()),
            None => topic_only_default(key.name).map(str::to_string),
        },
    };
    ConfigEntry {
        name: key.name,
        value,
        source,
        is_sensitive: false,
        read_only: false,
        config_type: key.config_type,
        documentation: key.doc,
        synonyms,
    }
}
