//! From raw `key=value` settings (file, then `--override`) to a checked [`BrokerConfig`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::keys::{broker_key, is_dynamic, ConfigKey, ConfigSource, BROKER_KEYS};
use super::listener::{
    host_port, parse_host_port, parse_listener_url, parse_protocol_map, parse_voter, Listener, QuorumVoter,
    SecurityProtocol,
};
use super::properties::parse_properties;
use super::sasl::{RawSetting, SaslLogin, SaslMechanism, SaslSettings};
use super::tls::{Setting, TlsSettings};
use super::topic::TopicConfig;
use super::value::{check, Value};
use super::{ConfigEntry, ConfigError, ConfigSynonym, Origin};
use osprey_coordinator::group::group_config::ShareGroupConfigBounds;

/// Raw settings in the order they were given; a later setting of a key replaces an
/// earlier one. Nothing is checked until [`RawConfig::resolve`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawConfig {
    entries: Vec<(String, String, Origin)>,
}

impl RawConfig {
    /// No settings: every key at its default.
    pub fn new() -> RawConfig {
        RawConfig::default()
    }

    /// Reads a properties file. Invalid UTF-8 is read as ISO-8859-1, which is what
    /// `Properties.load(InputStream)` (and so Kafka) assumes.
    pub fn load_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => e.into_bytes().iter().map(|&b| char::from(b)).collect(),
        };
        self.load_properties(&text, path)
    }

    /// Adds the entries of properties `text`, attributing them to `path`.
    pub fn load_properties(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let properties = parse_properties(text).map_err(|e| ConfigError::Syntax {
            origin: Origin::File { path: path.to_path_buf(), line: e.line },
            message: e.message,
        })?;
        for p in properties {
            self.set(p.key, p.value, Origin::File { path: path.to_path_buf(), line: p.line });
        }
        Ok(())
    }

    /// Adds one `--override key=value` (the value may contain `=`).
    pub fn add_override(&mut self, arg: &str) -> Result<(), ConfigError> {
        match arg.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                self.set(key.trim(), value, Origin::Override);
                Ok(())
            }
            _ => Err(ConfigError::BadOverride { arg: arg.to_string() }),
        }
    }

    /// Sets `key` to `value`, replacing any earlier setting.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>, origin: Origin) {
        self.entries.push((key.into(), value.into(), origin));
    }

    /// Checks every setting and resolves Kafka's precedence rules. Returns the config
    /// and the keys Osprey does not know (sorted; the caller logs them as Kafka logs
    /// unused configs).
    pub fn resolve(&self) -> Result<(BrokerConfig, Vec<String>), ConfigError> {
        let mut latest: BTreeMap<&str, (&str, &Origin)> = BTreeMap::new();
        for (key, value, origin) in &self.entries {
            latest.insert(key, (value, origin));
        }
        let unknown = latest
            .keys()
            .filter(|k| broker_key(k).is_none() && listener_ssl_key(k).is_none() && listener_sasl_key(k).is_none())
            .map(|k| k.to_string())
            .collect();
        let entries = BROKER_KEYS
            .iter()
            .map(|key| match latest.get(key.name) {
                Some((raw, origin)) => ResolvedEntry::new(key, Some(raw), (*origin).clone()),
                None => ResolvedEntry::new(key, key.default, Origin::Default),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut config = BrokerConfig::from_entries(entries.clone(), entries)?;
        config.listener_settings = latest
            .iter()
            .filter(|(k, _)| listener_ssl_key(k).is_some() || listener_sasl_key(k).is_some())
            .map(|(k, (v, origin))| (k.to_string(), (v.to_string(), (*origin).clone())))
            .collect();
        // A missing key store, an unknown cipher suite or SASL mechanism, or a PLAIN
        // listener without users stops the start here, naming the key.
        for listener in &config.listeners {
            if listener.security_protocol.uses_tls() {
                config.tls_settings(&listener.name)?;
            }
            if listener.security_protocol.uses_sasl() {
                config.sasl_settings(&listener.name)?;
            }
        }
        config.controller_tls_settings()?;
        // On a single node there is no other broker to log in to.
        if !config.cluster.voters.is_empty() || !config.cluster.bootstrap_servers.is_empty() {
            config.inter_broker_sasl()?;
        }
        Ok((config, unknown))
    }
}

/// `listener.name.<name>.<ssl key>`: the listener name (as written) and the `ssl.*` broker
/// key it overrides for that listener.
fn listener_ssl_key(key: &str) -> Option<(&str, &'static ConfigKey)> {
    let rest = key.strip_prefix("listener.name.")?;
    let at = rest.find(".ssl.")?;
    let config_key = broker_key(&rest[at + 1..]).filter(|k| k.name.starts_with("ssl."))?;
    Some((&rest[..at], config_key))
}

/// `listener.name.<name>.<rest>` where `<rest>` is a SASL key Kafka reads per listener:
/// `sasl.enabled.mechanisms`, `sasl.jaas.config` or `<mechanism>.sasl.jaas.config`.
/// Returns the listener name (as written) and `<rest>`.
fn listener_sasl_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("listener.name.")?;
    let (listener, rest) = rest.split_once('.')?;
    let known = rest == "sasl.enabled.mechanisms"
        || rest.strip_suffix("sasl.jaas.config").is_some_and(|m| m.is_empty() || m.ends_with('.'));
    known.then_some((listener, rest))
}

/// The broker's configuration with every value checked and Kafka's precedence applied.
/// Durations are in the unit their name ends with; integer widths are Kafka's types.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    /// `node.id` (or `broker.id` when only that is set).
    pub node_id: i32,
    /// `process.roles` as given (see `cluster.roles`).
    pub process_roles: Vec<String>,
    /// Roles, controller quorum and broker membership.
    pub cluster: ClusterConfig,
    /// `listeners`, with protocols from `listener.security.protocol.map`.
    pub listeners: Vec<Listener>,
    /// `advertised.listeners` without controller listeners (what Metadata returns);
    /// unset: the non-controller `listeners`. When derived, a
    /// port of 0 stands for the port the listener was bound to and an empty host for
    /// this machine's host name (Kafka advertises its canonical host name).
    pub advertised_listeners: Vec<Listener>,
    /// `controller.listener.names`; empty: the controller is in-process.
    pub controller_listener_names: Vec<String>,
    /// `inter.broker.listener.name`, resolved (see its doc).
    pub inter_broker_listener_name: String,
    /// `metrics.listener` as `host:port` to bind; `None` when set empty.
    pub metrics_listener: Option<String>,
    /// `socket.request.max.bytes`.
    pub socket_request_max_bytes: i32,
    /// `socket.send.buffer.bytes`; -1: OS default.
    pub socket_send_buffer_bytes: i32,
    /// `socket.receive.buffer.bytes`; -1: OS default.
    pub socket_receive_buffer_bytes: i32,
    /// `socket.listen.backlog.size`.
    pub socket_listen_backlog_size: i32,
    /// `max.connections`.
    pub max_connections: i32,
    /// `max.connections.per.ip`.
    pub max_connections_per_ip: i32,
    /// `connections.max.idle.ms`.
    pub connections_max_idle_ms: i64,
    /// `connection.failed.authentication.delay.ms`.
    pub connection_failed_authentication_delay_ms: i32,
    /// `connections.max.reauth.ms`; 0: SASL sessions do not expire.
    pub connections_max_reauth_ms: i64,
    /// `authorizer.class.name`, `super.users` and `allow.everyone.if.no.acl.found`;
    /// `None` without an authorizer.
    pub authorizer: Option<crate::authorizer::Authorizer>,
    /// `sasl.server.max.receive.size`.
    pub sasl_server_max_receive_size: i32,
    /// `queued.max.requests`.
    pub queued_max_requests: i32,
    /// `queued.max.request.bytes`; -1: no byte limit.
    pub queued_max_request_bytes: i64,
    /// `num.network.threads`.
    pub num_network_threads: i32,
    /// `num.io.threads`.
    pub num_io_threads: i32,
    /// `background.threads`.
    pub background_threads: i32,
    /// `osprey.max.inflight.requests.per.connection`.
    pub max_inflight_requests_per_connection: i32,
    /// `osprey.max.pending.response.bytes.per.connection`.
    pub max_pending_response_bytes_per_connection: i32,
    /// `fetch.max.bytes`.
    pub fetch_max_bytes: i32,
    /// `max.incremental.fetch.session.cache.slots`.
    pub max_incremental_fetch_session_cache_slots: i32,
    /// `num.partitions`.
    pub num_partitions: i32,
    /// `default.replication.factor` (Kafka's type is INT; CreateTopics carries an i16).
    pub default_replication_factor: i32,
    /// `min.insync.replicas`.
    pub min_insync_replicas: i32,
    /// `auto.create.topics.enable`.
    pub auto_create_topics_enable: bool,
    /// `delete.topic.enable`.
    pub delete_topic_enable: bool,
    /// `unclean.leader.election.enable`.
    pub unclean_leader_election_enable: bool,
    /// `compression.type`.
    pub compression_type: String,
    /// `message.max.bytes`.
    pub message_max_bytes: i32,
    /// `osprey.produce.decompressed.max.bytes`.
    pub produce_decompressed_max_bytes: i32,
    /// `log.message.timestamp.type`: `CreateTime` or `LogAppendTime`.
    pub message_timestamp_type: String,
    /// `log.dirs`, else `log.dir`.
    pub data_dirs: Vec<PathBuf>,
    /// `log.segment.bytes`.
    pub segment_bytes: i32,
    /// `log.roll.ms`, else `log.roll.hours` in ms.
    pub segment_ms: i64,
    /// `log.roll.jitter.ms`, else `log.roll.jitter.hours` in ms.
    pub segment_jitter_ms: i64,
    /// `log.index.size.max.bytes`.
    pub segment_index_bytes: i32,
    /// `log.index.interval.bytes`.
    pub index_interval_bytes: i32,
    /// `log.segment.delete.delay.ms`.
    pub segment_delete_delay_ms: i64,
    /// `log.flush.interval.messages`; `None` (default): fsync before acknowledging.
    pub flush_interval_messages: Option<i64>,
    /// `log.flush.interval.ms`; `None` (default): fsync before acknowledging.
    pub flush_interval_ms: Option<i64>,
    /// `log.flush.scheduler.interval.ms`.
    pub flush_scheduler_interval_ms: i64,
    /// `log.flush.offset.checkpoint.interval.ms`.
    pub flush_offset_checkpoint_interval_ms: i32,
    /// `log.retention.ms`, else `.minutes`, else `.hours`, in ms; -1: forever.
    pub retention_ms: i64,
    /// `log.retention.bytes`; -1: no limit.
    pub retention_bytes: i64,
    /// `log.retention.check.interval.ms`.
    pub retention_check_interval_ms: i64,
    /// `log.cleanup.policy`: `delete`, `compact` or both.
    pub cleanup_policy: Vec<String>,
    /// `log.cleaner.enable`.
    pub log_cleaner_enable: bool,
    /// `log.cleaner.dedupe.buffer.size`.
    pub log_cleaner_dedupe_buffer_size: i64,
    /// `log.cleaner.backoff.ms`.
    pub log_cleaner_backoff_ms: i64,
    /// `osprey.log.max.open.files`.
    pub log_max_open_files: i32,
    /// `osprey.log.scrub.bytes.per.second` (0: no scrubber).
    pub log_scrub_bytes_per_second: i64,
    /// `osprey.log.scrub.interval.ms`.
    pub log_scrub_interval_ms: i64,
    /// `osprey.log.flusher.threads`.
    pub log_flusher_threads: i32,
    /// `osprey.log.journal.topics`.
    pub log_journal_topics: Vec<String>,
    /// `osprey.log.journal.file.bytes`.
    pub log_journal_file_bytes: i64,
    /// `num.recovery.threads.per.data.dir`: opens and closes partition logs.
    pub num_recovery_threads_per_data_dir: i32,
    /// `osprey.max.partitions`: the most partitions the cluster may hold.
    pub max_partitions: i32,
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: i64,
    /// `unclean.leader.election.interval.ms`.
    pub unclean_leader_election_interval_ms: i64,
    /// `auto.leader.rebalance.enable`.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_seconds: i64,
    /// `num.replica.fetchers`.
    pub num_replica_fetchers: i32,
    /// `replica.fetch.max.bytes`.
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`.
    pub replica_fetch_response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms`.
    pub replica_fetch_wait_max_ms: i32,
    /// `replica.fetch.min.bytes`.
    pub replica_fetch_min_bytes: i32,
    /// `replica.fetch.backoff.ms`.
    pub replica_fetch_backoff_ms: i32,
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor`.
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes`.
    pub offsets_topic_segment_bytes: i32,
    /// `offsets.retention.minutes` in ms.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: i32,
    /// `group.initial.rebalance.delay.ms`.
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.min.session.timeout.ms`.
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub group_max_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`.
    pub group_consumer_heartbeat_interval_ms: i32,
    /// `group.consumer.session.timeout.ms`.
    pub group_consumer_session_timeout_ms: i32,
    /// `group.consumer.max.size`.
    pub group_consumer_max_size: i32,
    /// `group.consumer.min.session.timeout.ms`.
    pub group_consumer_min_session_timeout_ms: i32,
    /// `group.consumer.max.session.timeout.ms`.
    pub group_consumer_max_session_timeout_ms: i32,
    /// `group.consumer.min.heartbeat.interval.ms`.
    pub group_consumer_min_heartbeat_interval_ms: i32,
    /// `group.consumer.max.heartbeat.interval.ms`.
    pub group_consumer_max_heartbeat_interval_ms: i32,
    /// `osprey.group.consumer.regex.max.patterns`.
    pub group_consumer_regex_max_patterns: i32,
    /// `osprey.group.consumer.regex.max.compiled.bytes`.
    pub group_consumer_regex_max_compiled_bytes: i32,
    /// `group.max.size`.
    pub group_max_size: i32,
    /// `osprey.transaction.version`.
    pub transaction_version: i16,
    /// `group.share.record.lock.duration.ms`.
    pub group_share_record_lock_duration_ms: i32,
    /// `group.share.delivery.count.limit`.
    pub group_share_delivery_count_limit: i32,
    /// `group.share.partition.max.record.locks`.
    pub group_share_partition_max_record_locks: i32,
    /// `group.share.max.share.sessions`.
    pub group_share_max_share_sessions: i32,
    /// `group.share.max.size`.
    pub group_share_max_size: i32,
    /// The share group settings a group's own configs default to and are bounded by
    /// (`group.share.{session.timeout,heartbeat.interval}.ms` and the
    /// `group.share.{min,max}.*` keys), as the group coordinator checks them.
    pub group_share: ShareGroupConfigBounds,
    /// `osprey.share.version`.
    pub share_version: i16,
    /// `errors.deadletterqueue.auto.create.topics.enable` (KIP-1191).
    pub errors_dlq_auto_create_topics_enable: bool,
    /// `errors.deadletterqueue.topic.name.prefix` (KIP-1191).
    pub errors_dlq_topic_name_prefix: String,
    /// The streams group settings (`group.streams.*`, KIP-1071).
    pub group_streams: GroupStreamsConfig,
    /// `osprey.streams.version`.
    pub streams_version: i16,
    /// `share.coordinator.state.topic.num.partitions`.
    pub share_coordinator_state_topic_num_partitions: i32,
    /// `share.coordinator.state.topic.replication.factor`.
    pub share_coordinator_state_topic_replication_factor: i16,
    /// `share.coordinator.state.topic.min.isr`.
    pub share_coordinator_state_topic_min_isr: i16,
    /// `share.coordinator.state.topic.segment.bytes`.
    pub share_coordinator_state_topic_segment_bytes: i32,
    /// `share.coordinator.snapshot.update.records.per.snapshot`.
    pub share_coordinator_snapshot_update_records_per_snapshot: i32,
    /// `transaction.state.log.num.partitions`.
    pub transaction_state_log_num_partitions: i32,
    /// `transaction.state.log.replication.factor`.
    pub transaction_state_log_replication_factor: i16,
    /// `transaction.state.log.min.isr`.
    pub transaction_state_log_min_isr: i32,
    /// `transaction.state.log.segment.bytes`.
    pub transaction_state_log_segment_bytes: i32,
    /// `transactional.id.expiration.ms`.
    pub transactional_id_expiration_ms: i32,
    /// `transaction.max.timeout.ms`.
    pub transaction_max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub transaction_abort_timed_out_cleanup_interval_ms: i32,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub transaction_remove_expired_cleanup_interval_ms: i32,
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i32,
    /// `producer.id.expiration.check.interval.ms`.
    pub producer_id_expiration_check_interval_ms: i32,
    /// Every key as in effect (dynamic over static), for DescribeConfigs and topic
    /// defaults.
    entries: Vec<ResolvedEntry>,
    /// Every key as `server.properties` and `--override` gave it (or its default): what a
    /// deleted dynamic config falls back to.
    static_entries: Vec<ResolvedEntry>,
    /// Dynamic configs of the cluster-wide default resource (empty name).
    dynamic_default: BTreeMap<String, String>,
    /// Dynamic configs of this broker (its id as the resource name).
    dynamic_broker: BTreeMap<String, String>,
    /// `listener.name.<name>.ssl.*` settings as given, by full key: one listener's
    /// overrides of the `ssl.*` keys.
    listener_settings: BTreeMap<String, (String, Origin)>,
}

impl Default for BrokerConfig {
    /// The zero-config single node: 127.0.0.1:9092, data under `./data`.
    fn default() -> BrokerConfig {
        // Every default in the key table is checked by `keys::tests`, and resolving them
        // by `config_defaults.rs`; failing here would be a broken table.
        RawConfig::new().resolve().expect("Osprey's built-in defaults are valid").0
    }
}

impl BrokerConfig {
    /// Every broker key, in table order, as DescribeConfigs on this broker's resource (its
    /// id) reports it: the value in effect, its source (the first synonym's, as Kafka's
    /// `ConfigHelper`), and the synonyms it was chosen from. Only the dynamic keys
    /// ([`is_dynamic`](super::keys::is_dynamic)) are not read-only.
    pub fn describe(&self) -> Vec<ConfigEntry> {
        self.entries.iter().map(|e| self.describe_entry(e.key, e.rendered(), true)).collect()
    }

    /// DescribeConfigs on the cluster-wide default resource (empty name): only the keys
    /// set there, with their dynamic default values, as Kafka reports them (without this
    /// broker's own dynamic configs among the synonyms).
    pub fn describe_dynamic_default(&self) -> Vec<ConfigEntry> {
        self.entries
            .iter()
            .filter_map(|e| {
                let value = self.dynamic_default.get(e.key.name)?;
                let rendered = check(e.key.config_type, e.key.validator, value).ok().map(|v| v.render());
                Some(self.describe_entry(e.key, rendered, false))
            })
            .collect()
    }

    fn describe_entry(&self, key: &'static ConfigKey, value: Option<String>, per_broker: bool) -> ConfigEntry {
        let synonyms: Vec<ConfigSynonym> = self
            .synonyms(&[key.name])
            .into_iter()
            .filter(|s| per_broker || s.source != ConfigSource::DynamicBrokerConfig)
            .collect();
        ConfigEntry {
            name: key.name,
            value: if key.sensitive { None } else { value },
            source: synonyms.first().map_or(ConfigSource::DefaultConfig, |s| s.source),
            is_sensitive: key.sensitive,
            read_only: !is_dynamic(key.name),
            config_type: key.config_type,
            documentation: key.doc,
            synonyms,
        }
    }

    /// The settings of broker keys `names` (highest precedence first), in Kafka's synonym
    /// order: this broker's dynamic configs, then the cluster-wide dynamic default, then
    /// `server.properties`, then the built-in default (only the last of `names` that has
    /// one, since the others' defaults are unset: `log.retention.hours` for retention).
    pub(crate) fn synonyms(&self, names: &[&'static str]) -> Vec<ConfigSynonym> {
        let mut synonyms = Vec::new();
        let layers = [
            (&self.dynamic_broker, ConfigSource::DynamicBrokerConfig),
            (&self.dynamic_default, ConfigSource::DynamicDefaultBrokerConfig),
        ];
        for (layer, source) in layers {
            for name in names {
                if let Some(value) = layer.get(*name) {
                    synonyms.push(ConfigSynonym { name, value: Some(value.clone()), source });
                }
            }
        }
        let statics = names.iter().filter_map(|name| self.static_entries.iter().find(|e| e.key.name == *name));
        for e in statics.clone().filter(|e| e.is_set()) {
            synonyms.push(ConfigSynonym {
                name: e.key.name,
                value: e.rendered(),
                source: ConfigSource::StaticBrokerConfig,
            });
        }
        if let Some(e) = statics.clone().rfind(|e| e.key.default.is_some()) {
            let value = e.key.default.map(str::to_string);
            synonyms.push(ConfigSynonym { name: e.key.name, value, source: ConfigSource::DefaultConfig });
        }
        synonyms
    }

    /// This configuration with dynamic configs on top of the static ones (Kafka's
    /// precedence: this broker's dynamic config, then the cluster-wide dynamic default,
    /// then `server.properties`, then the default). Replaces any dynamic configs applied
    /// before, so a key deleted from both maps is back at its static value. Each value is
    /// checked with the key's own validator, and the result with the cross-key rules.
    pub fn with_dynamic(
        &self,
        cluster_default: &BTreeMap<String, String>,
        this_broker: &BTreeMap<String, String>,
    ) -> Result<BrokerConfig, ConfigError> {
        let entries = self
            .static_entries
            .iter()
            .map(|e| {
                let dynamic = this_broker
                    .get(e.key.name)
                    .map(|v| (v, Origin::DynamicBroker))
                    .or_else(|| cluster_default.get(e.key.name).map(|v| (v, Origin::DynamicDefault)));
                match dynamic {
                    Some((value, origin)) => ResolvedEntry::new(e.key, Some(value), origin),
                    None => Ok(e.clone()),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut config = BrokerConfig::from_entries(entries, self.static_entries.clone())?;
        config.dynamic_default = cluster_default.clone();
        config.dynamic_broker = this_broker.clone();
        config.listener_settings = self.listener_settings.clone();
        Ok(config)
    }

    /// Checks the whole set of dynamic configs one broker resource would hold after a
    /// change (`cluster_default`: the empty-name resource), as Kafka's
    /// `DynamicBrokerConfig.validate` does: every key must be dynamic, every value valid
    /// for its key, and the result must pass the cross-key rules. The message is Kafka's.
    pub fn validate_dynamic(&self, configs: &BTreeMap<String, String>, cluster_default: bool) -> Result<(), String> {
        let not_dynamic: Vec<&str> = configs.keys().map(String::as_str).filter(|k| !is_dynamic(k)).collect();
        if !not_dynamic.is_empty() {
            return Err(format!("Cannot update these configs dynamically: Set({})", not_dynamic.join(", ")));
        }
        for (k, v) in configs {
            let key = broker_key(k).expect("dynamic keys are broker keys");
            check(key.config_type, key.validator, v)
                .map_err(|expected| format!("Invalid value {v} for configuration {k}: expected {expected}"))?;
        }
        let (default, broker) = if cluster_default {
            (configs.clone(), self.dynamic_broker.clone())
        } else {
            (self.dynamic_default.clone(), configs.clone())
        };
        self.with_dynamic(&default, &broker).map(drop).map_err(|e| e.to_string())
    }

    /// Where one broker key's value came from (the built-in default for an unknown key).
    pub fn source_of(&self, key: &str) -> ConfigSource {
        self.entries.iter().find(|e| e.key.name == key).map_or(ConfigSource::DefaultConfig, |e| e.source())
    }

    /// The value of one broker key as DescribeConfigs shows it (`None`: unset).
    pub fn value(&self, key: &str) -> Option<String> {
        self.entries.iter().find(|e| e.key.name == key).and_then(ResolvedEntry::rendered)
    }

    /// Where a broker key's value came from (`None`: not a broker key).
    pub fn origin(&self, key: &str) -> Option<&Origin> {
        self.entries.iter().find(|e| e.key.name == key).map(|e| &e.origin)
    }

    /// Defaults for a new topic's configs, from the broker's `log.*` and related keys,
    /// each with its source (STATIC_BROKER_CONFIG when the broker key was set, else
    /// DEFAULT_CONFIG) and synonyms, ready for CreateTopics and DescribeConfigs.
    pub fn topic_defaults(&self) -> TopicConfig {
        TopicConfig::from_broker(self)
    }

    /// The bounds and defaults group configs are checked against
    /// (`group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms`).
    pub fn group_config_bounds(&self) -> osprey_coordinator::group::group_config::GroupConfigBounds {
        osprey_coordinator::group::group_config::GroupConfigBounds {
            session_timeout_ms: self.group_consumer_session_timeout_ms,
            min_session_timeout_ms: self.group_consumer_min_session_timeout_ms,
            max_session_timeout_ms: self.group_consumer_max_session_timeout_ms,
            heartbeat_interval_ms: self.group_consumer_heartbeat_interval_ms,
            min_heartbeat_interval_ms: self.group_consumer_min_heartbeat_interval_ms,
            max_heartbeat_interval_ms: self.group_consumer_max_heartbeat_interval_ms,
            share: self.group_share,
            streams: osprey_coordinator::group::group_config::StreamsGroupConfigBounds {
                session_timeout_ms: self.group_streams.session_timeout_ms,
                min_session_timeout_ms: self.group_streams.min_session_timeout_ms,
                max_session_timeout_ms: self.group_streams.max_session_timeout_ms,
                heartbeat_interval_ms: self.group_streams.heartbeat_interval_ms,
                min_heartbeat_interval_ms: self.group_streams.min_heartbeat_interval_ms,
                max_heartbeat_interval_ms: self.group_streams.max_heartbeat_interval_ms,
                num_standby_replicas: self.group_streams.num_standby_replicas,
                max_standby_replicas: self.group_streams.max_standby_replicas,
            },
        }
    }

    /// The resolved value for a topic key whose default combines several broker keys.
    pub(crate) fn combined_topic_default(&self, topic_key: &str) -> Option<i64> {
        match topic_key {
            "retention.ms" => Some(self.retention_ms),
            "segment.ms" => Some(self.segment_ms),
            "segment.jitter.ms" => Some(self.segment_jitter_ms),
            _ => None,
        }
    }

    /// The TLS settings of listener `listener` (an SSL one): each `ssl.*` key from
    /// `listener.name.<lower-case listener>.<key>` if set, else the broker key.
    pub fn tls_settings(&self, listener: &str) -> Result<TlsSettings, ConfigError> {
        let get = |key: &str| -> Setting {
            let prefixed = self.listener_settings.iter().find(|(k, _)| {
                listener_ssl_key(k).is_some_and(|(name, ck)| name.eq_ignore_ascii_case(listener) && ck.name == key)
            });
            match prefixed {
                Some((full, (raw, origin))) => {
                    let config_key = broker_key(key).expect("listener_ssl_key found it");
                    Setting {
                        key: full.clone(),
                        value: check(config_key.config_type, config_key.validator, raw).ok(),
                        raw: Some(raw.clone()),
                        origin: origin.clone(),
                    }
                }
                None => {
                    let entry = self.entry(key).unwrap_or_else(|| panic!("`{key}` is missing from the key table"));
                    Setting {
                        key: key.to_string(),
                        value: entry.value.clone(),
                        raw: entry.raw.clone(),
                        origin: entry.origin.clone(),
                    }
                }
            }
        };
        // A prefixed value that fails its key's own check is reported as such.
        for (full, (raw, origin)) in &self.listener_settings {
            if let Some((_, ck)) = listener_ssl_key(full).filter(|(n, _)| n.eq_ignore_ascii_case(listener)) {
                check(ck.config_type, ck.validator, raw).map_err(|expected| ConfigError::InvalidValue {
                    key: full.clone(),
                    value: raw.clone(),
                    expected,
                    origin: origin.clone(),
                })?;
            }
        }
        TlsSettings::resolve(listener, &get)
    }

    /// The SASL settings of listener `listener` (a SASL_PLAINTEXT or SASL_SSL one):
    /// `sasl.enabled.mechanisms` from `listener.name.<lower-case listener>.` if set there,
    /// and each mechanism's JAAS config from that prefix.
    pub fn sasl_settings(&self, listener: &str) -> Result<SaslSettings, ConfigError> {
        let get = |rest: &str| -> Option<RawSetting> {
            self.listener_settings
                .iter()
                .find(|(k, _)| {
                    listener_sasl_key(k).is_some_and(|(name, r)| name.eq_ignore_ascii_case(listener) && r == rest)
                })
                .map(|(key, (raw, origin))| RawSetting { key: key.clone(), raw: raw.clone(), origin: origin.clone() })
        };
        let mechanisms = get("sasl.enabled.mechanisms").unwrap_or_else(|| {
            let entry = self.entry("sasl.enabled.mechanisms").expect("in the key table");
            RawSetting {
                key: "sasl.enabled.mechanisms".into(),
                raw: entry.raw.clone().unwrap_or_default(),
                origin: entry.origin.clone(),
            }
        });
        SaslSettings::resolve(listener, &mechanisms, &get)
    }

    /// The TLS of the controller listener, when the first of `controller.listener.names`
    /// maps to SSL: the controllers serve it, and every node reaches the controllers with
    /// its trust store (and its key store as client certificate), as Kafka's nodes use
    /// that listener's `listener.name.<controller listener>.ssl.*` settings.
    pub fn controller_tls_settings(&self) -> Result<Option<TlsSettings>, ConfigError> {
        let Some(name) = self.controller_listener_names.first() else { return Ok(None) };
        let map = self.entry("listener.security.protocol.map").and_then(|e| e.raw.clone()).unwrap_or_default();
        let protocol = super::listener::parse_protocol_map(&map)
            .unwrap_or_default()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p);
        match protocol {
            Some(SecurityProtocol::Ssl) => self.tls_settings(name).map(Some),
            _ => Ok(None),
        }
    }

    /// What this broker logs in to the other brokers with, when the inter-broker listener
    /// is a SASL one: `sasl.mechanism.inter.broker.protocol`, which must be enabled on
    /// that listener, with the `username` and `password` options of that mechanism's
    /// JAAS config there (Kafka's rules).
    pub fn inter_broker_sasl(&self) -> Result<Option<SaslLogin>, ConfigError> {
        let listener = self.inter_broker_listener_name.as_str();
        if !self.listeners.iter().any(|l| l.name == listener && l.security_protocol.uses_sasl()) {
            return Ok(None);
        }
        let settings = self.sasl_settings(listener)?;
        let key = "sasl.mechanism.inter.broker.protocol";
        let entry = self.entry(key).expect("in the key table");
        let raw = entry.raw.clone().unwrap_or_default();
        let enabled: Vec<&str> = settings.mechanisms.iter().map(|m| m.name()).collect();
        let mechanism =
            SaslMechanism::from_name(&raw).filter(|m| settings.mechanisms.contains(m)).ok_or_else(|| {
                ConfigError::InvalidValue {
                    key: key.into(),
                    value: raw.clone(),
                    expected: format!(
                        "one of the mechanisms enabled on inter-broker listener {listener} ({}): brokers log in \
                         to each other with it (Kafka's default is GSSAPI, which Osprey does not implement)",
                        enabled.join(", ")
                    ),
                    origin: entry.origin.clone(),
                }
            })?;
        let login = settings.logins.get(&mechanism).cloned().ok_or_else(|| ConfigError::InvalidValue {
            key: format!(
                "listener.name.{}.{}.sasl.jaas.config",
                listener.to_ascii_lowercase(),
                mechanism.name().to_ascii_lowercase()
            ),
            value: "[hidden]".into(),
            expected: format!(
                "username=\"...\" password=\"...\" options: what this broker logs in to the other brokers with \
                 over inter-broker listener {listener}"
            ),
            origin: Origin::Default,
        })?;
        Ok(Some(login))
    }

    pub(crate) fn entry(&self, key: &str) -> Option<&ResolvedEntry> {
        self.entries.iter().find(|e| e.key.name == key)
    }

    fn from_entries(
        entries: Vec<ResolvedEntry>,
        static_entries: Vec<ResolvedEntry>,
    ) -> Result<BrokerConfig, ConfigError> {
        let r = Resolver { entries: entries.iter().map(|e| (e.key.name, e)).collect() };
        let node_id = resolve_node_id(&r)?;
        let roles = resolve_roles(&r);
        let voters = resolve_voters(&r)?;
        let bootstrap_servers = resolve_bootstrap_servers(&r)?;
        let quorum = !voters.is_empty() || !bootstrap_servers.is_empty();
        check_quorum_rules(&r, roles, node_id, &voters, &bootstrap_servers)?;
        let listeners = resolve_listeners(&r, roles, quorum)?;
        let data_dirs = resolve_data_dirs(&r)?;
        let cluster = ClusterConfig {
            roles,
            voters,
            bootstrap_servers,
            controller_listeners: listeners
                .bound
                .iter()
                .filter(|l| listeners.controller_names.contains(&l.name))
                .cloned()
                .collect(),
            advertised_controller_listeners: listeners.advertised_controller.clone(),
            broker_rack: r.opt_string("broker.rack").filter(|rack| !rack.is_empty()),
            broker_heartbeat_interval_ms: r.i32("broker.heartbeat.interval.ms"),
            broker_session_timeout_ms: r.i32("broker.session.timeout.ms"),
            quorum_election_timeout_ms: r.i32("controller.quorum.election.timeout.ms"),
            quorum_election_backoff_max_ms: r.i32("controller.quorum.election.backoff.max.ms"),
            quorum_fetch_timeout_ms: r.i32("controller.quorum.fetch.timeout.ms"),
            quorum_request_timeout_ms: r.i32("controller.quorum.request.timeout.ms"),
            quorum_retry_backoff_ms: r.i32("controller.quorum.retry.backoff.ms"),
            metadata_log_dir: r
                .opt_string("metadata.log.dir")
                .map(PathBuf::from)
                .unwrap_or_else(|| data_dirs.first().cloned().unwrap_or_default()),
            metadata_snapshot_max_new_record_bytes: r.i64("metadata.log.max.record.bytes.between.snapshots"),
            metadata_snapshot_max_interval_ms: r.i64("metadata.log.max.snapshot.interval.ms"),
        };
        let config = BrokerConfig {
            node_id,
            process_roles: r.list("process.roles"),
            cluster,
            advertised_listeners: listeners.advertised,
            controller_listener_names: listeners.controller_names,
            inter_broker_listener_name: listeners.inter_broker,
            listeners: listeners.bound,
            metrics_listener: resolve_metrics_listener(&r),
            socket_request_max_bytes: r.i32("socket.request.max.bytes"),
            socket_send_buffer_bytes: r.i32("socket.send.buffer.bytes"),
            socket_receive_buffer_bytes: r.i32("socket.receive.buffer.bytes"),
            socket_listen_backlog_size: r.i32("socket.listen.backlog.size"),
            max_connections: r.i32("max.connections"),
            max_connections_per_ip: r.i32("max.connections.per.ip"),
            connections_max_idle_ms: r.i64("connections.max.idle.ms"),
            connection_failed_authentication_delay_ms: r.i32("connection.failed.authentication.delay.ms"),
            connections_max_reauth_ms: r.i64("connections.max.reauth.ms"),
            authorizer: crate::authorizer::Authorizer::from_config(
                &r.string("authorizer.class.name"),
                &r.string("super.users"),
                r.bool("allow.everyone.if.no.acl.found"),
            ),
            sasl_server_max_receive_size: r.i32("sasl.server.max.receive.size"),
            queued_max_requests: r.i32("queued.max.requests"),
            queued_max_request_bytes: r.i64("queued.max.request.bytes"),
            num_network_threads: r.i32("num.network.threads"),
            num_io_threads: r.i32("num.io.threads"),
            background_threads: r.i32("background.threads"),
            max_inflight_requests_per_connection: r.i32("osprey.max.inflight.requests.per.connection"),
            max_pending_response_bytes_per_connection: r.i32("osprey.max.pending.response.bytes.per.connection"),
            fetch_max_bytes: r.i32("fetch.max.bytes"),
            max_incremental_fetch_session_cache_slots: r.i32("max.incremental.fetch.session.cache.slots"),
            num_partitions: r.i32("num.partitions"),
            default_replication_factor: r.i32("default.replication.factor"),
            min_insync_replicas: r.i32("min.insync.replicas"),
            auto_create_topics_enable: r.bool("auto.create.topics.enable"),
            delete_topic_enable: r.bool("delete.topic.enable"),
            unclean_leader_election_enable: r.bool("unclean.leader.election.enable"),
            compression_type: r.string("compression.type"),
            message_max_bytes: r.i32("message.max.bytes"),
            produce_decompressed_max_bytes: r.i32("osprey.produce.decompressed.max.bytes"),
            message_timestamp_type: r.string("log.message.timestamp.type"),
            data_dirs,
            segment_bytes: r.i32("log.segment.bytes"),
            segment_ms: r.ms_or_hours("log.roll.ms", "log.roll.hours"),
            segment_jitter_ms: r.ms_or_hours("log.roll.jitter.ms", "log.roll.jitter.hours"),
            segment_index_bytes: r.i32("log.index.size.max.bytes"),
            index_interval_bytes: r.i32("log.index.interval.bytes"),
            segment_delete_delay_ms: r.i64("log.segment.delete.delay.ms"),
            flush_interval_messages: r.opt_i64("log.flush.interval.messages"),
            flush_interval_ms: r.opt_i64("log.flush.interval.ms"),
            flush_scheduler_interval_ms: r.i64("log.flush.scheduler.interval.ms"),
            flush_offset_checkpoint_interval_ms: r.i32("log.flush.offset.checkpoint.interval.ms"),
            retention_ms: resolve_retention_ms(&r),
            retention_bytes: r.i64("log.retention.bytes"),
            retention_check_interval_ms: r.i64("log.retention.check.interval.ms"),
            cleanup_policy: r.list("log.cleanup.policy"),
            log_cleaner_enable: r.bool("log.cleaner.enable"),
            log_cleaner_dedupe_buffer_size: r.i64("log.cleaner.dedupe.buffer.size"),
            log_cleaner_backoff_ms: r.i64("log.cleaner.backoff.ms"),
            log_max_open_files: r.i32("osprey.log.max.open.files"),
            log_scrub_bytes_per_second: r.i64("osprey.log.scrub.bytes.per.second"),
            log_scrub_interval_ms: r.i64("osprey.log.scrub.interval.ms"),
            log_flusher_threads: r.i32("osprey.log.flusher.threads"),
            log_journal_topics: r.list("osprey.log.journal.topics"),
            log_journal_file_bytes: r.i64("osprey.log.journal.file.bytes"),
            num_recovery_threads_per_data_dir: r.i32("num.recovery.threads.per.data.dir"),
            max_partitions: r.i32("osprey.max.partitions"),
            replica_lag_time_max_ms: r.i64("replica.lag.time.max.ms"),
            unclean_leader_election_interval_ms: r.i64("unclean.leader.election.interval.ms"),
            auto_leader_rebalance_enable: r.bool("auto.leader.rebalance.enable"),
            leader_imbalance_check_interval_seconds: r.i64("leader.imbalance.check.interval.seconds"),
            num_replica_fetchers: r.i32("num.replica.fetchers"),
            replica_fetch_max_bytes: r.i32("replica.fetch.max.bytes"),
            replica_fetch_response_max_bytes: r.i32("replica.fetch.response.max.bytes"),
            replica_fetch_wait_max_ms: r.i32("replica.fetch.wait.max.ms"),
            replica_fetch_min_bytes: r.i32("replica.fetch.min.bytes"),
            replica_fetch_backoff_ms: r.i32("replica.fetch.backoff.ms"),
            offsets_topic_num_partitions: r.i32("offsets.topic.num.partitions"),
            offsets_topic_replication_factor: r.i16("offsets.topic.replication.factor"),
            offsets_topic_segment_bytes: r.i32("offsets.topic.segment.bytes"),
            offsets_retention_ms: r.i64("offsets.retention.minutes").saturating_mul(MS_PER_MINUTE),
            offsets_retention_check_interval_ms: r.i64("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes: r.i32("offset.metadata.max.bytes"),
            group_initial_rebalance_delay_ms: r.i32("group.initial.rebalance.delay.ms"),
            group_min_session_timeout_ms: r.i32("group.min.session.timeout.ms"),
            group_max_session_timeout_ms: r.i32("group.max.session.timeout.ms"),
            group_consumer_heartbeat_interval_ms: r.i32("group.consumer.heartbeat.interval.ms"),
            group_consumer_session_timeout_ms: r.i32("group.consumer.session.timeout.ms"),
            group_consumer_max_size: r.i32("group.consumer.max.size"),
            group_consumer_min_session_timeout_ms: r.i32("group.consumer.min.session.timeout.ms"),
            group_consumer_max_session_timeout_ms: r.i32("group.consumer.max.session.timeout.ms"),
            group_consumer_min_heartbeat_interval_ms: r.i32("group.consumer.min.heartbeat.interval.ms"),
            group_consumer_max_heartbeat_interval_ms: r.i32("group.consumer.max.heartbeat.interval.ms"),
            group_consumer_regex_max_patterns: r.i32("osprey.group.consumer.regex.max.patterns"),
            group_consumer_regex_max_compiled_bytes: r.i32("osprey.group.consumer.regex.max.compiled.bytes"),
            group_max_size: r.i32("group.max.size"),
            transaction_version: r.i16("osprey.transaction.version"),
            group_share_record_lock_duration_ms: r.i32("group.share.record.lock.duration.ms"),
            group_share_delivery_count_limit: r.i32("group.share.delivery.count.limit"),
            group_share_partition_max_record_locks: r.i32("group.share.partition.max.record.locks"),
            group_share_max_share_sessions: r.i32("group.share.max.share.sessions"),
            group_share_max_size: r.i32("group.share.max.size"),
            group_share: ShareGroupConfigBounds {
                session_timeout_ms: r.i32("group.share.session.timeout.ms"),
                min_session_timeout_ms: r.i32("group.share.min.session.timeout.ms"),
                max_session_timeout_ms: r.i32("group.share.max.session.timeout.ms"),
                heartbeat_interval_ms: r.i32("group.share.heartbeat.interval.ms"),
                min_heartbeat_interval_ms: r.i32("group.share.min.heartbeat.interval.ms"),
                max_heartbeat_interval_ms: r.i32("group.share.max.heartbeat.interval.ms"),
                min_record_lock_duration_ms: r.i32("group.share.min.record.lock.duration.ms"),
                max_record_lock_duration_ms: r.i32("group.share.max.record.lock.duration.ms"),
                min_delivery_count_limit: r.i32("group.share.min.delivery.count.limit"),
                max_delivery_count_limit: r.i32("group.share.max.delivery.count.limit"),
                min_partition_max_record_locks: r.i32("group.share.min.partition.max.record.locks"),
                max_partition_max_record_locks: r.i32("group.share.max.partition.max.record.locks"),
                // Kafka's group.share.{min,max}.assignment.interval.ms: not settings here
                // (share assignments are not spaced out).
                ..ShareGroupConfigBounds::KAFKA_DEFAULTS
            },
            share_version: r.i16("osprey.share.version"),
            errors_dlq_auto_create_topics_enable: r.bool("errors.deadletterqueue.auto.create.topics.enable"),
            errors_dlq_topic_name_prefix: r.string("errors.deadletterqueue.topic.name.prefix"),
            group_streams: GroupStreamsConfig {
                session_timeout_ms: r.i32("group.streams.session.timeout.ms"),
                min_session_timeout_ms: r.i32("group.streams.min.session.timeout.ms"),
                max_session_timeout_ms: r.i32("group.streams.max.session.timeout.ms"),
                heartbeat_interval_ms: r.i32("group.streams.heartbeat.interval.ms"),
                min_heartbeat_interval_ms: r.i32("group.streams.min.heartbeat.interval.ms"),
                max_heartbeat_interval_ms: r.i32("group.streams.max.heartbeat.interval.ms"),
                max_size: r.i32("group.streams.max.size"),
                num_standby_replicas: r.i32("group.streams.num.standby.replicas"),
                max_standby_replicas: r.i32("group.streams.max.standby.replicas"),
                initial_rebalance_delay_ms: r.i32("group.streams.initial.rebalance.delay.ms"),
                assignment_interval_ms: r.i32("group.streams.assignment.interval.ms"),
                task_offset_interval_ms: r.i32("group.streams.task.offset.interval.ms"),
                acceptable_recovery_lag: r.i64("group.streams.acceptable.recovery.lag"),
            },
            streams_version: r.i16("osprey.streams.version"),
            share_coordinator_state_topic_num_partitions: r.i32("share.coordinator.state.topic.num.partitions"),
            share_coordinator_state_topic_replication_factor: r.i16("share.coordinator.state.topic.replication.factor"),
            share_coordinator_state_topic_min_isr: r.i16("share.coordinator.state.topic.min.isr"),
            share_coordinator_state_topic_segment_bytes: r.i32("share.coordinator.state.topic.segment.bytes"),
            share_coordinator_snapshot_update_records_per_snapshot: r
                .i32("share.coordinator.snapshot.update.records.per.snapshot"),
            transaction_state_log_num_partitions: r.i32("transaction.state.log.num.partitions"),
            transaction_state_log_replication_factor: r.i16("transaction.state.log.replication.factor"),
            transaction_state_log_min_isr: r.i32("transaction.state.log.min.isr"),
            transaction_state_log_segment_bytes: r.i32("transaction.state.log.segment.bytes"),
            transactional_id_expiration_ms: r.i32("transactional.id.expiration.ms"),
            transaction_max_timeout_ms: r.i32("transaction.max.timeout.ms"),
            transaction_abort_timed_out_cleanup_interval_ms: r
                .i32("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            transaction_remove_expired_cleanup_interval_ms: r
                .i32("transaction.remove.expired.transaction.cleanup.interval.ms"),
            producer_id_expiration_ms: r.i32("producer.id.expiration.ms"),
            producer_id_expiration_check_interval_ms: r.i32("producer.id.expiration.check.interval.ms"),
            entries: Vec::new(),
            static_entries: Vec::new(),
            dynamic_default: BTreeMap::new(),
            dynamic_broker: BTreeMap::new(),
            listener_settings: BTreeMap::new(),
        };
        check_cross_key_rules(&r, &config)?;
        Ok(BrokerConfig { entries, static_entries, ..config })
    }
}

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;

/// One broker key after its type and range check.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResolvedEntry {
    pub key: &'static ConfigKey,
    /// `None`: unset and no default (Kafka's null).
    pub value: Option<Value>,
    /// The text as given (or the default), for error messages.
    pub raw: Option<String>,
    pub origin: Origin,
}

impl ResolvedEntry {
    fn new(key: &'static ConfigKey, raw: Option<&str>, origin: Origin) -> Result<ResolvedEntry, ConfigError> {
        let value = match raw {
            Some(raw) => Some(check(key.config_type, key.validator, raw).map_err(|expected| {
                ConfigError::InvalidValue { key: key.name.into(), value: raw.into(), expected, origin: origin.clone() }
            })?),
            None => None,
        };
        Ok(ResolvedEntry { key, value, raw: raw.map(str::to_string), origin })
    }

    /// Set by the operator, as opposed to left at its default.
    pub fn is_set(&self) -> bool {
        self.origin != Origin::Default
    }

    pub fn source(&self) -> ConfigSource {
        match self.origin {
            Origin::Default => ConfigSource::DefaultConfig,
            Origin::DynamicBroker => ConfigSource::DynamicBrokerConfig,
            Origin::DynamicDefault => ConfigSource::DynamicDefaultBrokerConfig,
            Origin::File { .. } | Origin::Override | Origin::Request => ConfigSource::StaticBrokerConfig,
        }
    }

    pub fn rendered(&self) -> Option<String> {
        self.value.as_ref().map(Value::render)
    }

    fn invalid(&self, expected: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            key: self.key.name.into(),
            value: self.raw.clone().unwrap_or_default(),
            expected: expected.into(),
            origin: self.origin.clone(),
        }
    }
}

/// Typed access to checked entries. Every key read here is in the table with the type
/// read (a mismatch is a bug caught by any test that resolves the defaults).
struct Resolver<'a> {
    entries: HashMap<&'static str, &'a ResolvedEntry>,
}

impl<'a> Resolver<'a> {
    fn entry(&self, key: &str) -> &'a ResolvedEntry {
        self.entries.get(key).unwrap_or_else(|| panic!("`{key}` is missing from the key table"))
    }

    fn opt_i64(&self, key: &str) -> Option<i64> {
        match &self.entry(key).value {
            Some(Value::Int(n)) => Some(*n),
            None => None,
            other => panic!("`{key}` is not an integer key: {other:?}"),
        }
    }

    fn i64(&self, key: &str) -> i64 {
        self.opt_i64(key).unwrap_or_else(|| panic!("`{key}` has no default"))
    }

    fn i32(&self, key: &str) -> i32 {
        // The type check already bounded INT keys to i32.
        i32::try_from(self.i64(key)).unwrap_or_else(|_| panic!("`{key}` is not an INT key"))
    }

    fn i16(&self, key: &str) -> i16 {
        i16::try_from(self.i64(key)).unwrap_or_else(|_| panic!("`{key}` is not a SHORT key"))
    }

    fn bool(&self, key: &str) -> bool {
        match &self.entry(key).value {
            Some(Value::Bool(b)) => *b,
            other => panic!("`{key}` is not a boolean key: {other:?}"),
        }
    }

    fn opt_string(&self, key: &str) -> Option<String> {
        match &self.entry(key).value {
            Some(Value::Str(s)) => Some(s.clone()),
            None => None,
            other => panic!("`{key}` is not a string key: {other:?}"),
        }
    }

    fn string(&self, key: &str) -> String {
        self.opt_string(key).unwrap_or_else(|| panic!("`{key}` has no default"))
    }

    fn opt_list(&self, key: &str) -> Option<Vec<String>> {
        match &self.entry(key).value {
            Some(Value::List(items)) => Some(items.clone()),
            None => None,
            other => panic!("`{key}` is not a list key: {other:?}"),
        }
    }

    fn list(&self, key: &str) -> Vec<String> {
        self.opt_list(key).unwrap_or_default()
    }

    /// Kafka's `log.roll.ms` over `log.roll.hours` rule.
    fn ms_or_hours(&self, ms_key: &str, hours_key: &str) -> i64 {
        self.opt_i64(ms_key).unwrap_or_else(|| self.i64(hours_key).saturating_mul(MS_PER_HOUR))
    }
}

/// `log.retention.ms` over `log.retention.minutes` over `log.retention.hours`; a
/// negative (validated: -1) value at the winning key means forever.
fn resolve_retention_ms(r: &Resolver<'_>) -> i64 {
    let (value, unit_ms) = match (r.opt_i64("log.retention.ms"), r.opt_i64("log.retention.minutes")) {
        (Some(ms), _) => (ms, 1),
        (None, Some(minutes)) => (minutes, MS_PER_MINUTE),
        (None, None) => (r.i64("log.retention.hours"), MS_PER_HOUR),
    };
    if value < 0 {
        -1
    } else {
        value.saturating_mul(unit_ms)
    }
}

/// `node.id`, or `broker.id` when only that is set; both set must agree (Kafka's rule).
fn resolve_node_id(r: &Resolver<'_>) -> Result<i32, ConfigError> {
    let node = r.entry("node.id");
    let broker = r.entry("broker.id");
    let broker_id = r.i32("broker.id");
    if !broker.is_set() || broker_id < 0 {
        return Ok(r.i32("node.id"));
    }
    if node.is_set() && r.i32("node.id") != broker_id {
        return Err(broker.invalid(format!("the same id as node.id ({})", r.i32("node.id"))));
    }
    Ok(broker_id)
}

/// `log.dirs` over `log.dir`; the same directory twice is an error, as in Kafka.
fn resolve_data_dirs(r: &Resolver<'_>) -> Result<Vec<PathBuf>, ConfigError> {
    let (key, dirs) = match r.opt_list("log.dirs") {
        Some(dirs) => ("log.dirs", dirs),
        None => ("log.dir", vec![r.string("log.dir")]),
    };
    let mut seen = Vec::new();
    for dir in &dirs {
        if seen.contains(dir) {
            return Err(r.entry(key).invalid(format!("distinct directories (`{dir}` is listed twice)")));
        }
        seen.push(dir.clone());
    }
    Ok(dirs.into_iter().map(PathBuf::from).collect())
}

fn resolve_metrics_listener(r: &Resolver<'_>) -> Option<String> {
    let text = r.string("metrics.listener");
    let address = text.strip_prefix("http://").unwrap_or(&text);
    // Validated as host:port or empty by the key's validator.
    parse_host_port(address).ok().map(|(host, port)| host_port(&host, port))
}

struct ResolvedListeners {
    bound: Vec<Listener>,
    advertised: Vec<Listener>,
    advertised_controller: Vec<Listener>,
    controller_names: Vec<String>,
    inter_broker: String,
}

/// `listeners`, `advertised.listeners`, `controller.listener.names` and
/// `inter.broker.listener.name`, checked against the roles as Kafka's
/// `KafkaConfig.validateValues` does (its messages are quoted where Osprey's would say
/// less).
fn resolve_listeners(r: &Resolver<'_>, roles: ProcessRoles, quorum: bool) -> Result<ResolvedListeners, ConfigError> {
    let map_entry = r.entry("listener.security.protocol.map");
    let protocol_map =
        parse_protocol_map(&r.string("listener.security.protocol.map")).map_err(|e| map_entry.invalid(e))?;
    let controller_names: Vec<String> = r
        .opt_string("controller.listener.names")
        .map(|s| s.split(',').map(|n| n.trim().to_ascii_uppercase()).collect())
        .unwrap_or_default();
    let protocol_of = |name: &str| {
        protocol_map.iter().find(|(n, _)| n == name).map(|(_, p)| *p).or_else(|| {
            // Kafka 3.x maps an unmapped controller listener to PLAINTEXT.
            controller_names.iter().any(|c| c == name).then_some(SecurityProtocol::Plaintext)
        })
    };

    let listeners_entry = r.entry("listeners");
    let bound = parse_listeners(listeners_entry, &r.list("listeners"), &protocol_of)?;
    for (i, l) in bound.iter().enumerate() {
        if bound[..i].iter().any(|o| o.name == l.name) {
            return Err(listeners_entry.invalid(format!("distinct listener names (`{}` appears twice)", l.name)));
        }
        if l.port != 0 && bound[..i].iter().any(|o| o.port == l.port && o.host == l.host) {
            return Err(listeners_entry.invalid(format!("distinct addresses (`{}` appears twice)", l.bind_address())));
        }
    }
    check_controller_listeners(r, roles, quorum, &bound, &controller_names)?;
    if let Some(l) = bound.iter().find(|l| controller_names.contains(&l.name) && l.security_protocol.uses_sasl()) {
        return Err(map_entry.invalid(format!(
            "PLAINTEXT or SSL for controller listeners: the controllers do not authenticate with SASL (`{}` is {})",
            l.name, l.security_protocol
        )));
    }
    let client_listeners: Vec<Listener> =
        bound.iter().filter(|l| !controller_names.contains(&l.name)).cloned().collect();
    if roles.broker && client_listeners.is_empty() {
        return Err(listeners_entry.invalid(
            "at least one listener that is not a controller listener (Kafka: There must be at least one broker \
             advertised listener. Perhaps all listeners appear in controller.listener.names?)",
        ));
    }

    let (advertised, advertised_controller) =
        resolve_advertised(r, &bound, &client_listeners, &controller_names, &protocol_of)?;
    let inter_broker = resolve_inter_broker(r, roles, &advertised)?;
    Ok(ResolvedListeners { bound, advertised, advertised_controller, controller_names, inter_broker })
}

/// Where the controller listeners must (and must not) be, by role. A combined node with no
/// quorum configured is the single node, whose controller runs in-process and needs none.
fn check_controller_listeners(
    r: &Resolver<'_>,
    roles: ProcessRoles,
    quorum: bool,
    bound: &[Listener],
    controller_names: &[String],
) -> Result<(), ConfigError> {
    let names_entry = r.entry("controller.listener.names");
    let listeners_entry = r.entry("listeners");
    if !roles.controller {
        if controller_names.is_empty() {
            return Err(names_entry.invalid(
                "the name of the controllers' listener, which brokers connect to, when process.roles=broker \
                 (Kafka: controller.listener.names must contain at least one value when running KRaft with just \
                 the broker role)",
            ));
        }
        if let Some(l) = bound.iter().find(|l| controller_names.contains(&l.name)) {
            return Err(listeners_entry.invalid(format!(
                "no controller listener when process.roles=broker (`{}` is in controller.listener.names): remove \
                 it from listeners, or add controller to process.roles",
                l.name
            )));
        }
        return Ok(());
    }
    if let Some(name) = controller_names.iter().find(|n| !bound.iter().any(|l| &l.name == *n)) {
        return Err(names_entry.invalid(format!(
            "names of entries in listeners (`{name}` is not one; Kafka: controller.listener.names must only contain \
             values appearing in the 'listeners' configuration when running the KRaft controller role)"
        )));
    }
    if (quorum || !roles.broker) && controller_names.is_empty() {
        return Err(names_entry.invalid(
            "the name of a listener in listeners that the controller serves, since process.roles contains \
             controller and a quorum is configured (Kafka: controller.listener.names must contain at least one \
             value appearing in the 'listeners' configuration when running the KRaft controller role)",
        ));
    }
    if !roles.broker {
        if let Some(l) = bound.iter().find(|l| !controller_names.contains(&l.name)) {
            return Err(listeners_entry.invalid(format!(
                "controller listeners only when process.roles=controller (`{}` is not in controller.listener.names; \
                 Kafka: The listeners config must only contain KRaft controller listeners from \
                 controller.listener.names when process.roles=controller)",
                l.name
            )));
        }
    }
    Ok(())
}

fn parse_listeners(
    entry: &ResolvedEntry,
    urls: &[String],
    protocol_of: &dyn Fn(&str) -> Option<SecurityProtocol>,
) -> Result<Vec<Listener>, ConfigError> {
    urls.iter()
        .map(|url| {
            // Syntax was checked by the key's validator; this cannot fail.
            let parsed = parse_listener_url(url).map_err(|e| entry.invalid(e))?;
            let security_protocol = protocol_of(&parsed.name).ok_or_else(|| {
                entry.invalid(format!(
                    "listener names mapped in listener.security.protocol.map (`{}` is not)",
                    parsed.name
                ))
            })?;
            Ok(Listener { name: parsed.name, security_protocol, host: parsed.host, port: parsed.port })
        })
        .collect()
}

/// Advertised listeners default to the client listeners. Kafka 4 also lists controller
/// listeners there (what a controller advertises to the quorum, KIP-853); they are kept
/// apart from the client ones, which are all Metadata ever returns. Unset, a controller
/// advertises its bound controller listeners (Kafka's
/// `effectiveAdvertisedControllerListeners`). No advertised address may be a wildcard,
/// which nobody can connect to.
fn resolve_advertised(
    r: &Resolver<'_>,
    bound: &[Listener],
    client_listeners: &[Listener],
    controller_names: &[String],
    protocol_of: &dyn Fn(&str) -> Option<SecurityProtocol>,
) -> Result<(Vec<Listener>, Vec<Listener>), ConfigError> {
    let entry = r.entry("advertised.listeners");
    let (entry, all) = match r.opt_list("advertised.listeners") {
        Some(urls) => {
            let advertised = parse_listeners(entry, &urls, protocol_of)?;
            if let Some(l) = advertised.iter().find(|l| !bound.iter().any(|b| b.name == l.name)) {
                return Err(entry.invalid(format!("names of entries in listeners (`{}` is not one)", l.name)));
            }
            (entry, advertised)
        }
        None => (r.entry("listeners"), client_listeners.to_vec()),
    };
    if let Some(l) = all.iter().find(|l| l.host == "0.0.0.0" || l.host == "::") {
        return Err(entry.invalid(format!(
            "a routable host to advertise, not the wildcard `{}` (set advertised.listeners)",
            l.host
        )));
    }
    let (controller, client): (Vec<Listener>, Vec<Listener>) =
        all.into_iter().partition(|l| controller_names.contains(&l.name));
    let controller = controller_names
        .iter()
        .filter_map(|name| {
            controller.iter().find(|l| &l.name == name).or_else(|| bound.iter().find(|l| &l.name == name)).cloned()
        })
        .collect();
    Ok((client, controller))
}

/// Kafka: "inter.broker.listener.name must be a listener name defined in
/// advertised.listeners" (never a controller listener, which is not one of those).
fn resolve_inter_broker(r: &Resolver<'_>, roles: ProcessRoles, advertised: &[Listener]) -> Result<String, ConfigError> {
    let entry = r.entry("inter.broker.listener.name");
    let set = r.opt_string("inter.broker.listener.name").map(|n| n.to_ascii_uppercase());
    if !roles.broker {
        // A controller-only node has no broker listener; Kafka does not check the key there.
        return Ok(set.unwrap_or_else(|| "PLAINTEXT".into()));
    }
    match set {
        Some(name) if advertised.iter().any(|l| l.name == name) => Ok(name),
        Some(_) => {
            let names: Vec<&str> = advertised.iter().map(|l| l.name.as_str()).collect();
            Err(entry.invalid(format!(
                "the name of a non-controller listener in advertised.listeners (the valid options based on the \
                 configured listeners are {})",
                names.join(",")
            )))
        }
        None => Ok(advertised
            .iter()
            .find(|l| l.name == "PLAINTEXT")
            .or(advertised.first())
            .map(|l| l.name.clone())
            .unwrap_or_else(|| "PLAINTEXT".into())),
    }
}

/// `process.roles`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRoles {
    /// Serves clients and holds partitions.
    pub broker: bool,
    /// A voter of the controller quorum.
    pub controller: bool,
}

impl ProcessRoles {
    /// `broker,controller`: Kafka's combined mode, and Osprey's single node.
    pub fn is_combined(self) -> bool {
        self.broker && self.controller
    }
}

/// The cluster part of the configuration: roles, the controller quorum and broker
/// membership (Kafka's `KRaftConfigs` and `QuorumConfig`), checked together with the
/// listeners.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// `process.roles`.
    pub roles: ProcessRoles,
    /// `controller.quorum.voters`, in the order given; ids are distinct.
    pub voters: Vec<QuorumVoter>,
    /// `controller.quorum.bootstrap.servers` as `(host, port)`.
    pub bootstrap_servers: Vec<(String, u16)>,
    /// The entries of `listeners` named in `controller.listener.names` (what the
    /// controller binds), in `listeners` order.
    pub controller_listeners: Vec<Listener>,
    /// What this controller advertises to the quorum: for each of
    /// `controller.listener.names` in order, its `advertised.listeners` entry, else its
    /// `listeners` entry (Kafka's `effectiveAdvertisedControllerListeners`).
    pub advertised_controller_listeners: Vec<Listener>,
    /// `broker.rack`.
    pub broker_rack: Option<String>,
    /// `broker.heartbeat.interval.ms`.
    pub broker_heartbeat_interval_ms: i32,
    /// `broker.session.timeout.ms`.
    pub broker_session_timeout_ms: i32,
    /// `controller.quorum.election.timeout.ms`.
    pub quorum_election_timeout_ms: i32,
    /// `controller.quorum.election.backoff.max.ms`.
    pub quorum_election_backoff_max_ms: i32,
    /// `controller.quorum.fetch.timeout.ms`.
    pub quorum_fetch_timeout_ms: i32,
    /// `controller.quorum.request.timeout.ms`.
    pub quorum_request_timeout_ms: i32,
    /// `controller.quorum.retry.backoff.ms`.
    pub quorum_retry_backoff_ms: i32,
    /// `metadata.log.dir`, else the first `log.dirs` entry.
    pub metadata_log_dir: PathBuf,
    /// `metadata.log.max.record.bytes.between.snapshots`.
    pub metadata_snapshot_max_new_record_bytes: i64,
    /// `metadata.log.max.snapshot.interval.ms`.
    pub metadata_snapshot_max_interval_ms: i64,
}

impl ClusterConfig {
    /// Whether the configuration asks for more than this one node: roles split, a voter
    /// other than `node_id`, or a bootstrap server that is not one of this node's own
    /// controller listeners. `None`: the single node Osprey runs today (combined roles,
    /// and at most itself as the voter). Otherwise why, for the start-up gate.
    pub fn beyond_this_node(&self, node_id: i32) -> Option<String> {
        if !self.roles.is_combined() {
            let role = if self.roles.broker { "broker" } else { "controller" };
            return Some(format!("process.roles={role} splits the roles over several processes"));
        }
        if let Some(v) = self.voters.iter().find(|v| v.id != node_id) {
            return Some(format!("controller.quorum.voters lists node {v}, another node than this one ({node_id})"));
        }
        let own = |host: &str, port: u16| {
            let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
            self.controller_listeners.iter().chain(&self.advertised_controller_listeners).any(|l| {
                l.port == port && (l.host == host || (loopback && ["", "0.0.0.0", "::"].contains(&l.host.as_str())))
            })
        };
        if let Some((host, port)) = self.bootstrap_servers.iter().find(|(h, p)| !own(h, *p)) {
            return Some(format!(
                "controller.quorum.bootstrap.servers lists {}, which is not this node's controller listener",
                host_port(host, *port)
            ));
        }
        None
    }
}

fn resolve_roles(r: &Resolver<'_>) -> ProcessRoles {
    // The key's validator allows only these two names, each once, at least one.
    let roles = r.list("process.roles");
    ProcessRoles { broker: roles.iter().any(|x| x == "broker"), controller: roles.iter().any(|x| x == "controller") }
}

fn resolve_voters(r: &Resolver<'_>) -> Result<Vec<QuorumVoter>, ConfigError> {
    let entry = r.entry("controller.quorum.voters");
    let mut voters: Vec<QuorumVoter> = Vec::new();
    for text in r.list("controller.quorum.voters") {
        let voter = parse_voter(&text).map_err(|e| entry.invalid(e))?;
        if voters.iter().any(|v| v.id == voter.id) {
            return Err(entry.invalid(format!("each voter id once (`{}` appears twice)", voter.id)));
        }
        voters.push(voter);
    }
    Ok(voters)
}

fn resolve_bootstrap_servers(r: &Resolver<'_>) -> Result<Vec<(String, u16)>, ConfigError> {
    let entry = r.entry("controller.quorum.bootstrap.servers");
    r.list("controller.quorum.bootstrap.servers")
        .iter()
        .map(|a| parse_host_port(a).map_err(|e| entry.invalid(e)))
        .collect()
}

/// Kafka's quorum rules for each role: a split role needs a quorum to find; a controller
/// is one of the voters, a broker-only node is not.
fn check_quorum_rules(
    r: &Resolver<'_>,
    roles: ProcessRoles,
    node_id: i32,
    voters: &[QuorumVoter],
    bootstrap_servers: &[(String, u16)],
) -> Result<(), ConfigError> {
    let roles_entry = r.entry("process.roles");
    let voters_entry = r.entry("controller.quorum.voters");
    if !roles.is_combined() && voters.is_empty() && bootstrap_servers.is_empty() {
        return Err(roles_entry.invalid(
            "broker,controller when controller.quorum.voters and controller.quorum.bootstrap.servers are both empty; \
             set one of them to find the quorum (Kafka: If using process.roles, either \
             controller.quorum.bootstrap.servers must contain the set of bootstrap controllers or \
             controller.quorum.voters must contain a parseable set of controllers)",
        ));
    }
    let ids = || voters.iter().map(|v| v.id.to_string()).collect::<Vec<_>>().join(",");
    let listed = voters.iter().any(|v| v.id == node_id);
    if roles.controller && !voters.is_empty() && !listed {
        return Err(voters_entry.invalid(format!(
            "a list including this node's id {node_id}, since process.roles contains controller (voters: {}); add \
             {node_id}@host:port of this node's controller listener, or fix node.id",
            ids()
        )));
    }
    if !roles.controller && listed {
        return Err(voters_entry.invalid(format!(
            "a list without this node's id {node_id}, since process.roles=broker makes it no voter (voters: {}); \
             give this broker another node.id, or add controller to process.roles",
            ids()
        )));
    }
    Ok(())
}

/// The `group.streams.*` keys (Kafka's `GroupCoordinatorConfig` for streams groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupStreamsConfig {
    pub session_timeout_ms: i32,
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub min_heartbeat_interval_ms: i32,
    pub max_heartbeat_interval_ms: i32,
    pub max_size: i32,
    pub num_standby_replicas: i32,
    pub max_standby_replicas: i32,
    pub initial_rebalance_delay_ms: i32,
    pub assignment_interval_ms: i32,
    pub task_offset_interval_ms: i32,
    pub acceptable_recovery_lag: i64,
}

/// `key`'s `value` within the values of `min_key` and `max_key`, as Kafka's `require`s
/// of a group default against its bounds.
fn check_within(
    r: &Resolver<'_>,
    key: &str,
    value: i32,
    (min_key, min): (&str, i32),
    (max_key, max): (&str, i32),
) -> Result<(), ConfigError> {
    if value < min {
        return Err(r.entry(key).invalid(format!("at least {min_key} ({min})")));
    }
    if value > max {
        return Err(r.entry(key).invalid(format!("at most {max_key} ({max})")));
    }
    Ok(())
}

/// `group.<group_type>.<name>` within `group.<group_type>.{min,max}.<name>`: each entry
/// is (name, value, min, max).
fn check_bounded_group_keys(
    r: &Resolver<'_>,
    group_type: &str,
    keys: &[(&str, i32, i32, i32)],
) -> Result<(), ConfigError> {
    for &(name, value, min, max) in keys {
        check_within(
            r,
            &format!("group.{group_type}.{name}"),
            value,
            (&format!("group.{group_type}.min.{name}"), min),
            (&format!("group.{group_type}.max.{name}"), max),
        )?;
    }
    Ok(())
}

/// A group type's session timeout and heartbeat interval within their bounds, and the
/// heartbeat below the session (Kafka's `require`s for consumer-protocol group types).
fn check_membership_keys(
    r: &Resolver<'_>,
    group_type: &str,
    (session, min_session, max_session): (i32, i32, i32),
    (heartbeat, min_heartbeat, max_heartbeat): (i32, i32, i32),
) -> Result<(), ConfigError> {
    check_bounded_group_keys(
        r,
        group_type,
        &[
            ("session.timeout.ms", session, min_session, max_session),
            ("heartbeat.interval.ms", heartbeat, min_heartbeat, max_heartbeat),
        ],
    )?;
    if heartbeat >= session {
        return Err(r
            .entry(&format!("group.{group_type}.heartbeat.interval.ms"))
            .invalid(format!("less than group.{group_type}.session.timeout.ms ({session})")));
    }
    Ok(())
}

/// Kafka's checks of the share group keys (`GroupCoordinatorConfig`, `ShareGroupConfig`):
/// each default within its bounds, the heartbeat below the session, room for a full
/// group's share sessions.
fn check_share_group_keys(r: &Resolver<'_>, c: &BrokerConfig) -> Result<(), ConfigError> {
    let s = &c.group_share;
    check_membership_keys(
        r,
        "share",
        (s.session_timeout_ms, s.min_session_timeout_ms, s.max_session_timeout_ms),
        (s.heartbeat_interval_ms, s.min_heartbeat_interval_ms, s.max_heartbeat_interval_ms),
    )?;
    check_bounded_group_keys(
        r,
        "share",
        &[
            (
                "record.lock.duration.ms",
                c.group_share_record_lock_duration_ms,
                s.min_record_lock_duration_ms,
                s.max_record_lock_duration_ms,
            ),
            (
                "delivery.count.limit",
                c.group_share_delivery_count_limit,
                s.min_delivery_count_limit,
                s.max_delivery_count_limit,
            ),
            (
                "partition.max.record.locks",
                c.group_share_partition_max_record_locks,
                s.min_partition_max_record_locks,
                s.max_partition_max_record_locks,
            ),
        ],
    )?;
    if c.group_share_max_share_sessions < c.group_share_max_size {
        return Err(r
            .entry("group.share.max.share.sessions")
            .invalid(format!("at least group.share.max.size ({})", c.group_share_max_size)));
    }
    Ok(())
}

/// Kafka's `verifyStreamsGroupConfigs`: each default within its bounds, the heartbeat
/// below the session.
fn check_streams_group_keys(r: &Resolver<'_>, s: &GroupStreamsConfig) -> Result<(), ConfigError> {
    check_membership_keys(
        r,
        "streams",
        (s.session_timeout_ms, s.min_session_timeout_ms, s.max_session_timeout_ms),
        (s.heartbeat_interval_ms, s.min_heartbeat_interval_ms, s.max_heartbeat_interval_ms),
    )?;
    check_within(
        r,
        "group.streams.num.standby.replicas",
        s.num_standby_replicas,
        ("0", 0),
        ("group.streams.max.standby.replicas", s.max_standby_replicas),
    )
}

fn check_cross_key_rules(r: &Resolver<'_>, c: &BrokerConfig) -> Result<(), ConfigError> {
    check_streams_group_keys(r, &c.group_streams)?;
    check_share_group_keys(r, c)?;
    if c.group_consumer_min_session_timeout_ms > c.group_consumer_max_session_timeout_ms {
        return Err(r.entry("group.consumer.min.session.timeout.ms").invalid(format!(
            "at most group.consumer.max.session.timeout.ms ({})",
            c.group_consumer_max_session_timeout_ms
        )));
    }
    if c.group_consumer_min_heartbeat_interval_ms > c.group_consumer_max_heartbeat_interval_ms {
        return Err(r.entry("group.consumer.min.heartbeat.interval.ms").invalid(format!(
            "at most group.consumer.max.heartbeat.interval.ms ({})",
            c.group_consumer_max_heartbeat_interval_ms
        )));
    }
    if c.group_min_session_timeout_ms > c.group_max_session_timeout_ms {
        return Err(r
            .entry("group.min.session.timeout.ms")
            .invalid(format!("at most group.max.session.timeout.ms ({})", c.group_max_session_timeout_ms)));
    }
    // Each retention key's validator allows only -1 or >= 1, so the winner cannot
    // resolve to zero ("delete everything at once").
    debug_assert!(c.retention_ms == -1 || c.retention_ms >= 1, "retention_ms {}", c.retention_ms);
    Ok(())
}
