//! The broker's shared state: settings, the controller and its published metadata image,
//! the partition logs it opens and closes, and the replica manager that serves them.

use crate::cluster_link::ClusterLink;
use crate::config::{BrokerConfig, ConfigError, ConfigSource, TopicConfig};
use crate::connection_slots::ConnectionSlots;
use crate::coordinator_leadership::{self, LoadMode};
use crate::fetch_session::FetchSessions;
use crate::groups::Groups;
use crate::log_deleter::LogDeleter;
use crate::partition::Partition;
use crate::replica_manager::ReplicaManager;
use crate::transactions::Transactions;
use osprey_cluster::controller::ConfigValidator;
use osprey_cluster::replica::ReplicaConfig;
use osprey_cluster::{
    meta_properties, BrokerListener, Controller, ControllerError, MetadataImage, NewTopic, PartitionImage, TopicImage,
};
use osprey_coordinator::group::group_config;
use osprey_protocol::{ErrorCode, Uuid};
use osprey_storage::{FdBudget, FdLimited, Flusher, Journal, LogConfig, PartitionLog, PriorShutdown, StdStorage};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// The name of the one client listener of [`Settings::single_node`], as Kafka's default
/// `listeners=PLAINTEXT://:9092`.
pub const DEFAULT_LISTENER: &str = "PLAINTEXT";

/// What the broker needs from its configuration, resolved and validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node_id: i32,
    pub listen: SocketAddr,
    /// Each client listener as clients are told to reach it (`advertised.listeners` by
    /// name, else as bound): what a broker of a cluster registers, and what a single node
    /// answers with on the listener a request came in on.
    pub advertised_listeners: Vec<BrokerListener>,
    pub data_dir: PathBuf,
    /// `metadata.log.dir`: where `__cluster_metadata-0` lives; `None`: `data_dir`.
    pub metadata_log_dir: Option<PathBuf>,
    /// `log.dirs` after the first: they get a `meta.properties` (so they are claimed by
    /// this node and cluster) but hold no partitions yet.
    pub other_log_dirs: Vec<PathBuf>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics: bool,
    pub delete_topic_enable: bool,
    /// `socket.request.max.bytes`: larger frames close the connection before being read.
    pub socket_request_max_bytes: usize,
    /// `max.connections`: further connections are closed on accept.
    pub max_connections: usize,
    /// `connections.max.idle.ms`.
    pub connections_max_idle_ms: u64,
    /// `connection.failed.authentication.delay.ms`: a failed SASL authentication is
    /// answered (and its connection closed) this much later.
    pub connection_failed_authentication_delay_ms: u64,
    /// `sasl.server.max.receive.size`: the largest frame read before authentication.
    pub sasl_server_max_receive_size: usize,
    /// `connections.max.reauth.ms`: SASL sessions expire this long after authentication
    /// (KIP-368); 0: never.
    pub connections_max_reauth_ms: i64,
    /// TLS and SASL to other brokers, as `inter.broker.listener.name` asks: the replica
    /// fetchers and the transaction marker sender connect with them.
    pub interbroker: crate::interbroker::Security,
    /// `osprey.max.inflight.requests.per.connection`: reading pauses beyond this many.
    pub max_inflight_per_connection: usize,
    /// `queued.max.request.bytes`: request bytes in flight across connections; `None`:
    /// no bound.
    pub queued_max_request_bytes: Option<usize>,
    /// `osprey.max.pending.response.bytes.per.connection`.
    pub max_pending_response_bytes_per_connection: usize,
    /// Topic-level config defaults from the static broker config, by topic config name;
    /// [`Broker::topic_defaults`] adds the dynamic broker configs on top.
    pub topic_defaults: BTreeMap<String, String>,
    /// `max.incremental.fetch.session.cache.slots`.
    pub fetch_session_slots: usize,
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.segment.bytes`.
    pub offsets_topic_segment_bytes: i32,
    /// The finalized `transaction.version` feature (`osprey.transaction.version`).
    pub transaction_version: i16,
    /// The whole resolved static configuration (`server.properties`, `--override`);
    /// [`Broker::config`] is the one in effect, with the dynamic broker configs on top.
    pub config: Arc<BrokerConfig>,
}

impl Settings {
    /// The group coordinator's settings, from the broker config (Kafka's keys).
    pub fn group_config(&self) -> osprey_coordinator::group::GroupConfig {
        let c = &self.config;
        let mut seed = [0u8; 8];
        // Member ids must not repeat across restarts; fall back to the clock if the OS
        // has no randomness to give.
        let seed = match getrandom::fill(&mut seed) {
            Ok(()) => u64::from_le_bytes(seed),
            Err(_) => now_ms() as u64,
        };
        osprey_coordinator::group::GroupConfig {
            group_min_session_timeout_ms: c.group_min_session_timeout_ms,
            group_max_session_timeout_ms: c.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms: c.group_initial_rebalance_delay_ms,
            group_max_size: c.group_max_size.max(1) as usize,
            offset_metadata_max_bytes: c.offset_metadata_max_bytes.max(0) as usize,
            offsets_retention_minutes: c.offsets_retention_ms / 60_000,
            offsets_retention_check_interval_ms: c.offsets_retention_check_interval_ms,
            member_id_seed: seed,
            consumer_group_heartbeat_interval_ms: c.group_consumer_heartbeat_interval_ms,
            consumer_group_session_timeout_ms: c.group_consumer_session_timeout_ms,
            consumer_group_max_size: c.group_consumer_max_size.max(1) as usize,
            consumer_group_regex_max_patterns: c.group_consumer_regex_max_patterns.max(1) as usize,
            consumer_group_regex_max_compiled_bytes: c.group_consumer_regex_max_compiled_bytes.max(1024) as usize,
            share_group_session_timeout_ms: c.group_share.session_timeout_ms,
            share_group_heartbeat_interval_ms: c.group_share.heartbeat_interval_ms,
            share_group_max_size: c.group_share_max_size.max(1) as usize,
            streams_group_session_timeout_ms: c.group_streams.session_timeout_ms,
            streams_group_heartbeat_interval_ms: c.group_streams.heartbeat_interval_ms,
            streams_group_max_size: c.group_streams.max_size.max(1) as usize,
            streams_group_num_standby_replicas: c.group_streams.num_standby_replicas,
            streams_group_initial_rebalance_delay_ms: c.group_streams.initial_rebalance_delay_ms,
            streams_group_assignment_interval_ms: c.group_streams.assignment_interval_ms,
            streams_group_task_offset_interval_ms: c.group_streams.task_offset_interval_ms,
            streams_group_acceptable_recovery_lag: c.group_streams.acceptable_recovery_lag,
            ..Default::default()
        }
    }

    /// The transaction coordinator's settings, from the broker config (Kafka's keys).
    /// The share coordinator's settings from the broker's.
    pub fn share_state_config(&self) -> osprey_coordinator::share_state::ShareStateConfig {
        let c = &self.config;
        osprey_coordinator::share_state::ShareStateConfig {
            state_topic_num_partitions: c.share_coordinator_state_topic_num_partitions.max(1),
            snapshot_update_records_per_snapshot: u32::try_from(
                c.share_coordinator_snapshot_update_records_per_snapshot,
            )
            .unwrap_or(0),
        }
    }

    pub fn txn_config(&self) -> osprey_coordinator::txn::TxnConfig {
        let c = &self.config;
        osprey_coordinator::txn::TxnConfig {
            transaction_max_timeout_ms: c.transaction_max_timeout_ms,
            transactional_id_expiration_ms: i64::from(c.transactional_id_expiration_ms),
            transaction_state_log_num_partitions: c.transaction_state_log_num_partitions.max(1),
            offsets_topic_num_partitions: self.offsets_topic_num_partitions.max(1),
            transaction_abort_timed_out_transaction_cleanup_interval_ms: i64::from(
                c.transaction_abort_timed_out_cleanup_interval_ms,
            ),
            transaction_remove_expired_transaction_cleanup_interval_ms: i64::from(
                c.transaction_remove_expired_cleanup_interval_ms,
            ),
        }
    }

    /// This node's advertised endpoint on the client listener named `name`.
    pub fn advertised_listener(&self, name: &str) -> Option<&BrokerListener> {
        self.advertised_listeners.iter().find(|l| l.name == name)
    }

    /// Every directory that carries a `meta.properties`: the data directory, the other
    /// `log.dirs` and `metadata.log.dir` (repeats are fine).
    pub fn meta_properties_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.data_dir.clone()];
        dirs.extend(self.other_log_dirs.iter().cloned());
        dirs.extend(self.metadata_log_dir.iter().cloned());
        dirs
    }

    /// Defaults for a single local node with data under `data_dir`, listening on `listen`
    /// as [`DEFAULT_LISTENER`] (tests and `osprey` with no arguments).
    pub fn single_node(listen: SocketAddr, data_dir: PathBuf) -> Settings {
        let listener = BrokerListener {
            name: DEFAULT_LISTENER.to_string(),
            host: listen.ip().to_string(),
            port: listen.port(),
            security_protocol: 0,
        };
        Settings {
            node_id: 1,
            listen,
            advertised_listeners: vec![listener],
            data_dir,
            metadata_log_dir: None,
            other_log_dirs: Vec::new(),
            num_partitions: 1,
            default_replication_factor: 1,
            auto_create_topics: true,
            delete_topic_enable: true,
            socket_request_max_bytes: 104_857_600,
            max_connections: 10_000,
            connections_max_idle_ms: 600_000,
            connection_failed_authentication_delay_ms: 100,
            sasl_server_max_receive_size: 524_288,
            connections_max_reauth_ms: 0,
            interbroker: Default::default(),
            max_inflight_per_connection: 100,
            queued_max_request_bytes: Some(104_857_600),
            max_pending_response_bytes_per_connection: 16 * 1024 * 1024,
            topic_defaults: BTreeMap::new(),
            fetch_session_slots: 1000,
            offsets_topic_num_partitions: 50,
            offsets_topic_segment_bytes: 104_857_600,
            transaction_version: crate::supported::MAX_TRANSACTION_VERSION,
            config: Arc::new(BrokerConfig::default()),
        }
    }
}

type Validator = Box<dyn Fn(&str, &str) -> Result<(), String> + Send + Sync>;

pub struct Broker {
    pub settings: Settings,
    pub cluster_id: String,
    /// Who decides metadata changes: this node's own controller, or the cluster's.
    backend: Backend,
    /// How the data directory was last shut down: partition logs opened later (in a
    /// cluster, as the metadata arrives) are opened with it.
    startup_prior: PriorShutdown,
    image: RwLock<Arc<MetadataImage>>,
    /// The partitions this node holds, each with its replica state machine.
    pub replica_manager: ReplicaManager,
    pub flusher: Flusher,
    /// The data directory's commit journal (`osprey.log.journal.topics`): the partitions
    /// of those topics count an append durable once one journal fsync, shared with every
    /// other such partition, covers it. `None` when the list is empty.
    pub journal: Option<Arc<Journal<StdStorage>>>,
    validate_topic_config: Validator,
    /// The block of producer ids this broker hands out next.
    producer_ids: Mutex<std::ops::Range<i64>>,
    /// Held across the controller round trip that reserves the next block of producer
    /// ids, on blocking threads only: `producer_ids` itself is held for a moment, never
    /// across that round trip, because async workers read it (`producer_ids_used_up`).
    /// A worker blocked on it would stop driving the runtime's I/O, which the round trip
    /// itself waits for: the broker froze until SIGTERM (chaos tool, seed 1).
    producer_id_reservation: Mutex<()>,
    /// Tests: the next reservation of producer ids stalls until released.
    #[cfg(test)]
    pub(crate) producer_id_stall: Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
    fetch_sessions: Mutex<FetchSessions>,
    /// Set once shutdown starts, so parked requests answer at once.
    stopping: tokio::sync::watch::Sender<bool>,
    /// The group coordinator and its `__consumer_offsets` plumbing.
    pub groups: Groups,
    /// The transaction coordinator and its `__transaction_state` plumbing.
    pub transactions: Transactions,
    /// The share coordinator and its `__share_group_state` plumbing.
    pub share_states: crate::share_states::ShareStates,
    /// The share partitions led here and the share sessions of the consumers fetching them.
    pub share_partitions: crate::share_partitions::SharePartitions,
    /// The streams groups' internal topics being created (KIP-1071).
    pub streams_topics: crate::handlers::streams_groups::StreamsTopicCreations,
    /// Open segment and index files, shared by every partition log.
    fd_budget: Arc<FdBudget>,
    /// Held while an internal topic is created or its logs opened, so that two requests
    /// never open the same partition log twice.
    internal_topics: Mutex<()>,
    /// The internal topics a thread of their own is creating ([`Broker::create_internal_topic_in_background`]):
    /// one attempt per topic at a time.
    internal_topics_in_background: Mutex<BTreeSet<&'static str>>,
    /// The configuration in effect: the static one with the dynamic broker configs of the
    /// metadata image on top, and the topic defaults that follow from it.
    effective: RwLock<Effective>,
    /// One slot per open client connection, `max.connections` of them.
    pub connection_slots: ConnectionSlots,
    /// The client quotas' rate sensors (`crate::quota`).
    pub client_quotas: crate::quota::ClientQuotaManager,
    /// A single node's controller mutation quota buckets (a cluster's active controller
    /// keeps its own): `crate::quota::mutations`.
    pub mutation_quotas: Mutex<osprey_cluster::mutation_quota::MutationQuotas>,
    /// Set when opening partition logs stopped early (shutdown began): logs not opened
    /// keep whatever state they had, so the data directory must not be marked clean.
    logs_left_unopened: std::sync::atomic::AtomicBool,
    /// Set once the coordinators may load the internal partitions led here: at start on
    /// a single node, once caught up with the metadata in a cluster
    /// (`coordinator_leadership`).
    coordinators_follow: std::sync::atomic::AtomicBool,
    /// Deletes the directories of deleted partitions, crash-safely.
    pub log_deleter: LogDeleter,
    /// In a cluster: where partitions queue their ISR changes, and the other end, taken
    /// once by the task that sends them to the controller (`replication::spawn`).
    isr_sink: Option<crate::partition::IsrSink>,
    isr_changes: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<crate::partition::IsrRequest>>>,
}

/// Where metadata changes are decided.
enum Backend {
    /// A single node: its own controller, committing to its own metadata log, in-process.
    Local(Box<Mutex<Controller>>),
    /// A broker of a cluster: the active controller decides; the image follows the
    /// quorum's committed log ([`Broker::publish`]).
    Cluster(Arc<ClusterLink>),
}

/// What the dynamic broker configs change, swapped whole when they change.
struct Effective {
    config: Arc<BrokerConfig>,
    topic_defaults: Arc<BTreeMap<String, String>>,
}

impl Effective {
    /// `settings`' configuration with the dynamic broker configs of `image` on top. A
    /// stored set that no longer fits the static configuration (a changed cross-key
    /// bound) is logged and left out, as Kafka skips an invalid dynamic config at start.
    fn new(settings: &Settings, image: &MetadataImage) -> Effective {
        let empty = BTreeMap::new();
        let cluster_default = image.broker_configs("").unwrap_or(&empty);
        let this_broker = image.broker_configs(&settings.node_id.to_string()).unwrap_or(&empty);
        let config = match settings.config.with_dynamic(cluster_default, this_broker) {
            Ok(config) => Arc::new(config),
            Err(e) => {
                tracing::error!(error = %e, "dynamic broker configs not applied: they do not fit the static configuration");
                settings.config.clone()
            }
        };
        let mut topic_defaults = settings.topic_defaults.clone();
        for entry in config.topic_defaults().entries() {
            let dynamic =
                matches!(entry.source, ConfigSource::DynamicBrokerConfig | ConfigSource::DynamicDefaultBrokerConfig);
            if let (true, Some(value)) = (dynamic, &entry.value) {
                topic_defaults.insert(entry.name.to_string(), value.clone());
            }
        }
        Effective { config, topic_defaults: Arc::new(topic_defaults) }
    }

    /// `max.connections`: the dynamic value when there is one, else the settings'.
    fn max_connections(&self, settings: &Settings) -> usize {
        match self.config.source_of("max.connections") {
            ConfigSource::DynamicBrokerConfig | ConfigSource::DynamicDefaultBrokerConfig => {
                self.config.max_connections.max(1) as usize
            }
            _ => settings.max_connections,
        }
    }
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("node_id", &self.settings.node_id).field("cluster_id", &self.cluster_id).finish()
    }
}

/// Makes an internal topic ready to serve (`groups::ensure_offsets_topic`,
/// `transactions::ensure_state_topic`).
pub type InternalTopicEnsure = fn(&Arc<Broker>) -> Result<Uuid, ErrorCode>;

/// The replication factor and min.insync.replicas an internal topic is created with, from
/// its keys (`offsets.topic.replication.factor`, `transaction.state.log.replication.factor`
/// and `.min.isr`) and the brokers registered in the cluster, as Osprey decides it: a key
/// set by the operator is taken as is, and the creation fails (COORDINATOR_NOT_AVAILABLE
/// to the client, retried) while fewer brokers are registered, as in Kafka; a key left at
/// Kafka's default (3, and 2 for the min ISR) is capped at the brokers registered then,
/// so that a single node or a two-node cluster works with no configuration, which Kafka
/// does not (its quickstart configuration sets them to 1).
pub fn internal_replication(
    config: &BrokerConfig,
    (rf_key, rf): (&str, i16),
    min_isr: Option<(&str, i32)>,
    registered_brokers: usize,
) -> (i16, Option<i32>) {
    let available = i16::try_from(registered_brokers.max(1)).unwrap_or(i16::MAX);
    let explicit = |key: &str| config.source_of(key) != ConfigSource::DefaultConfig;
    let replication_factor = if explicit(rf_key) { rf } else { rf.min(available) };
    let min_isr = min_isr.map(|(key, n)| if explicit(key) { n } else { n.min(i32::from(replication_factor)) });
    (replication_factor, min_isr)
}

/// An internal topic ready to serve.
#[derive(Debug, Clone, Copy)]
pub struct InternalTopic {
    pub id: Uuid,
    /// This call created the topic or opened some of its logs: a coordinator loads them.
    pub opened_now: bool,
}

/// A fetch session unused this long may give its slot to a new one (Kafka's
/// `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`).
const FETCH_SESSION_EVICTION_MS: i64 = 120_000;

/// A poisoned lock means a panic (a broken invariant) while the state behind it was being
/// changed: that is fatal, never served from (README, "Failure stance").
const POISONED: &str = "broker state lock poisoned by an earlier panic";

/// Producer ids reserved per metadata-log write.
const PRODUCER_ID_BLOCK: i64 = 1000;

/// Seeds fetch session ids, which should not repeat across restarts; the clock if the
/// OS has no randomness to give.
fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    match getrandom::fill(&mut seed) {
        Ok(()) => u64::from_le_bytes(seed),
        Err(_) => now_ms() as u64,
    }
}

/// Milliseconds since the epoch: the broker's clock for timestamps and retention.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl Broker {
    /// Opens the data directory: meta.properties, the metadata log, and every partition
    /// log (recovering any that were not shut down cleanly).
    pub fn open(settings: Settings, validate_topic_config: Validator) -> io::Result<Arc<Broker>> {
        let (meta, prior, _) = Self::take_data_dir(&settings, None)?;
        let metadata_dir =
            settings.metadata_log_dir.as_ref().unwrap_or(&settings.data_dir).join("__cluster_metadata-0");
        std::fs::create_dir_all(&metadata_dir).map_err(|e| context(e, "create", &metadata_dir))?;
        let mut controller = Controller::open(
            &metadata_dir.join("metadata.log"),
            vec![settings.node_id],
            settings.num_partitions,
            settings.default_replication_factor,
        )?;
        controller.set_max_partitions(settings.config.max_partitions);
        let image = Arc::new(controller.image().clone());
        let broker = Self::new(
            settings,
            validate_topic_config,
            meta,
            prior,
            Backend::Local(Box::new(Mutex::new(controller))),
            image.clone(),
        )?;
        broker.remove_stale_partition_dirs(&image)?;
        let started = std::time::Instant::now();
        broker.open_partitions(&image.topics().collect::<Vec<_>>(), prior)?;
        broker.journal_recovered();
        broker.follow_coordinator_leadership(LoadMode::Now);
        broker.report_opened(started);
        Ok(broker)
    }

    /// A broker of a cluster (`cluster_id`, learned from the quorum): nothing is opened
    /// yet. Partition logs open as the metadata arrives ([`Broker::publish`]); once this
    /// broker has caught up, [`Broker::caught_up`] removes stale directories and loads
    /// the coordinators.
    pub fn open_in_cluster(
        settings: Settings,
        validate_topic_config: Validator,
        link: Arc<ClusterLink>,
        cluster_id: &str,
    ) -> io::Result<Arc<Broker>> {
        let (meta, prior, previous_broker_epoch) = Self::take_data_dir(&settings, Some(cluster_id))?;
        link.set_previous_broker_epoch(previous_broker_epoch);
        Self::new(
            settings,
            validate_topic_config,
            meta,
            prior,
            Backend::Cluster(link),
            Arc::new(MetadataImage::default()),
        )
    }

    /// meta.properties (checked, or written), then the clean-shutdown marker taken: how
    /// the node last stopped, and its broker epoch then if it stopped cleanly.
    fn take_data_dir(
        settings: &Settings,
        cluster_id: Option<&str>,
    ) -> io::Result<(meta_properties::Ensured, PriorShutdown, Option<i64>)> {
        std::fs::create_dir_all(&settings.data_dir).map_err(|e| context(e, "create", &settings.data_dir))?;
        // Before the clean-shutdown marker is taken: a start refused for a directory of
        // another cluster or node leaves the directory as it was.
        let meta = meta_properties::ensure(&settings.meta_properties_dirs(), settings.node_id, cluster_id)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        for dir in meta.created.iter().chain(&meta.upgraded) {
            let how = if meta.created.contains(dir) { "written" } else { "upgraded to directory ids" };
            tracing::info!(dir = %dir.display(), cluster_id = %meta.cluster_id, "meta.properties {how}");
        }
        // Taken before anything in the data directory is written: a crash from here on
        // leaves no marker, and every log is recovered at the next start.
        let (prior, broker_epoch) = match osprey_storage::shutdown::take(&StdStorage, &settings.data_dir) {
            Ok(Some(clean)) => (PriorShutdown::Clean, clean.broker_epoch),
            Ok(None) => (PriorShutdown::SeeLogMarker, None),
            Err(e) => return Err(io::Error::other(e.to_string())),
        };
        Ok((meta, prior, broker_epoch))
    }

    fn new(
        settings: Settings,
        validate_topic_config: Validator,
        meta: meta_properties::Ensured,
        prior: PriorShutdown,
        backend: Backend,
        image: Arc<MetadataImage>,
    ) -> io::Result<Arc<Broker>> {
        let effective = Effective::new(&settings, &image);
        let connection_slots = ConnectionSlots::new(effective.max_connections(&settings));
        let effective = RwLock::new(effective);
        let (isr_sink, isr_changes) = match backend {
            Backend::Local(_) => (None, None),
            Backend::Cluster(_) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
        };
        Ok(Arc::new(Broker {
            isr_sink,
            isr_changes: Mutex::new(isr_changes),
            cluster_id: meta.cluster_id,
            backend,
            startup_prior: prior,
            image: RwLock::new(image),
            replica_manager: ReplicaManager::new(),
            flusher: Flusher::new(settings.config.log_flusher_threads.clamp(1, 64) as usize)?,
            journal: open_journal(&settings)?,
            validate_topic_config,
            producer_ids: Mutex::new(0..0),
            producer_id_reservation: Mutex::new(()),
            #[cfg(test)]
            producer_id_stall: Mutex::new(None),
            fetch_sessions: Mutex::new(FetchSessions::new(
                settings.fetch_session_slots,
                FETCH_SESSION_EVICTION_MS,
                random_seed(),
            )),
            stopping: tokio::sync::watch::channel(false).0,
            groups: Groups::new(settings.group_config(), settings.offsets_topic_num_partitions),
            transactions: Transactions::new(settings.txn_config()),
            share_states: crate::share_states::ShareStates::new(settings.share_state_config()),
            share_partitions: crate::share_partitions::SharePartitions::default(),
            streams_topics: Default::default(),
            fd_budget: FdBudget::new(open_file_budget(settings.config.log_max_open_files)),
            internal_topics: Mutex::new(()),
            internal_topics_in_background: Mutex::new(BTreeSet::new()),
            effective,
            connection_slots,
            client_quotas: crate::quota::ClientQuotaManager::default(),
            mutation_quotas: Mutex::new(Default::default()),
            logs_left_unopened: std::sync::atomic::AtomicBool::new(false),
            coordinators_follow: std::sync::atomic::AtomicBool::new(false),
            log_deleter: LogDeleter::start(&settings.data_dir)?,
            settings,
        }))
    }

    /// Logs how opening the partition logs went (recovery, damage).
    fn report_opened(&self, started: std::time::Instant) {
        let all = self.replica_manager.partitions();
        let recovered = all.iter().filter(|p| !p.log.opened_clean()).count();
        for p in all.iter().filter(|p| !p.log.recovery_report().damaged.is_empty()) {
            let damaged = &p.log.recovery_report().damaged;
            let ranges: Vec<String> =
                damaged.iter().map(|d| format!("{} [{}, {})", d.kind.name(), d.first_offset, d.end_offset)).collect();
            tracing::error!(
                topic = %p.topic,
                partition = p.index,
                lost = %ranges.join(", "),
                "partition log damaged: the lost offset ranges are skipped by fetches, every intact segment is served"
            );
        }
        tracing::info!(
            partitions = all.len(),
            recovered,
            took_ms = started.elapsed().as_millis() as u64,
            "partition logs opened ({})",
            if recovered == 0 { "clean shutdown, recovery skipped" } else { "unclean shutdown, recovery ran" }
        );
    }

    /// The current metadata (a cheap snapshot: clone the `Arc`).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().expect(POISONED).clone()
    }

    /// The broker configuration in effect: static, with the dynamic broker configs on top.
    pub fn config(&self) -> Arc<BrokerConfig> {
        self.effective.read().expect(POISONED).config.clone()
    }

    /// Topic config defaults in effect (static and dynamic broker configs), by topic
    /// config name: what a topic without its own override uses.
    pub fn topic_defaults(&self) -> Arc<BTreeMap<String, String>> {
        self.effective.read().expect(POISONED).topic_defaults.clone()
    }

    /// The log config of a topic: broker defaults overlaid with its own overrides.
    pub fn log_config(&self, topic: &TopicImage) -> Result<LogConfig, String> {
        let mut config = LogConfig::default();
        let defaults = self.topic_defaults();
        for (k, v) in defaults.iter().chain(topic.configs.iter()) {
            match config.set(k, v) {
                // Topic configs the log does not use (min.insync.replicas, compression.type, ...).
                Ok(()) | Err(osprey_storage::config::ConfigError::UnknownKey(_)) => {}
                Err(e) => return Err(format!("topic {}: {e}", topic.name)),
            }
        }
        Ok(config)
    }

    /// The settings a partition's replica state machine decides with: the flush policy
    /// of `log_config`, the topic's `min.insync.replicas` (else the broker default) and
    /// `replica.lag.time.max.ms`.
    pub fn replica_config(&self, topic: &TopicImage, log_config: &LogConfig) -> ReplicaConfig {
        let defaults = self.topic_defaults();
        let min_insync_replicas = topic
            .configs
            .get("min.insync.replicas")
            .or_else(|| defaults.get("min.insync.replicas"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        ReplicaConfig {
            local_id: self.settings.node_id,
            replica_lag_time_max_ms: self.config().replica_lag_time_max_ms,
            min_insync_replicas,
            fsync_before_ack: matches!(log_config.flush_policy(), osprey_storage::FlushPolicy::FsyncBeforeAck),
        }
    }

    /// A topic's configs as DescribeConfigs shows them: defaults, then its overrides.
    pub fn topic_config(&self, topic: &TopicImage) -> Result<TopicConfig, ConfigError> {
        let mut config = self.config().topic_defaults();
        for (k, v) in &topic.configs {
            config.set(k, v)?;
        }
        Ok(config)
    }

    pub fn validate_topic_config(&self, key: &str, value: &str) -> Result<(), String> {
        (self.validate_topic_config)(key, value)
    }

    pub fn create_topic(&self, topic: &NewTopic, validate_only: bool) -> Result<TopicImage, ControllerError> {
        if let Backend::Cluster(link) = &self.backend {
            let id = link.create_topic(topic, validate_only)?;
            return self.image().topic_by_id(id).cloned().ok_or_else(|| {
                ControllerError::new(
                    ErrorCode::REQUEST_TIMED_OUT,
                    format!("topic {} created, but this broker has not received it yet; retry", topic.name),
                )
            });
        }
        let validator: ConfigValidator<'_> = &|k, v| self.validate_topic_config(k, v);
        let created = self.with_controller(|c| c.create_topic(topic, validate_only, validator))?;
        if !validate_only {
            self.open_new_partitions(&created)?;
            tracing::info!(topic = %created.name, id = %created.id, partitions = created.partitions.len(), "topic created");
        }
        Ok(created)
    }

    /// An internal topic (`__consumer_offsets`, `__transaction_state`) ready to serve:
    /// created on first use, as Kafka does, with every partition log led here open. A log
    /// an earlier attempt could not open (a full disk) is opened again, so the coordinator
    /// comes back once the cause is fixed, without a restart. A failure is counted and
    /// logged (rate-limited) with what to do; the client gets COORDINATOR_NOT_AVAILABLE,
    /// as from Kafka while the topic is missing or its partition has no leader.
    /// `partitions_key` is the config that sizes the topic, `waiting` says what cannot
    /// work without it, and `new_topic` describes it for creation.
    pub fn ensure_internal_topic(
        &self,
        name: &str,
        partitions_key: &str,
        waiting: &str,
        new_topic: impl FnOnce() -> NewTopic,
    ) -> Result<InternalTopic, ErrorCode> {
        if let Some(t) = self.image().topic(name).filter(|t| self.opened_all(t)) {
            return Ok(InternalTopic { id: t.id, opened_now: false });
        }
        let _creating = self.internal_topics.lock().expect(POISONED);
        let image = self.image();
        let result = match image.topic(name) {
            Some(t) if self.opened_all(t) => return Ok(InternalTopic { id: t.id, opened_now: false }),
            Some(t) => self.open_new_partitions(t).map(|()| t.id),
            None => match self.create_topic(&new_topic(), false) {
                // An admin's CreateTopics won the race and is opening the logs: not a failure.
                Err(e) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => {
                    return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
                }
                created => created.map(|t| t.id),
            },
        };
        result.map(|id| InternalTopic { id, opened_now: true }).map_err(|e| {
            let fix = match e.code {
                ErrorCode::POLICY_VIOLATION => {
                    format!("raise osprey.max.partitions, lower {partitions_key}, or delete topics")
                }
                ErrorCode::KAFKA_STORAGE_ERROR => format!(
                    "free space in {} (or fix what the error names); the next request retries, no restart needed",
                    self.settings.data_dir.display()
                ),
                _ => format!("check {partitions_key} and the broker's topic defaults"),
            };
            crate::telemetry::internal_topic_unavailable(name, &e.to_string(), waiting, &fix);
            ErrorCode::COORDINATOR_NOT_AVAILABLE
        })
    }

    /// Runs `ensure`, which makes the internal topic `name` ready, on a thread of its own,
    /// unless an earlier run for `name` is still going: for a request answered without
    /// waiting for the controller quorum, as Kafka's brokers hand the creation to their
    /// `AutoTopicCreationManager`. `ensure` logs its own failure; the next request tries
    /// again. Not the blocking pool: a creation no controller answers waits
    /// `request.timeout.ms`, and the runtime's shutdown would wait for it.
    pub fn create_internal_topic_in_background(self: &Arc<Self>, name: &'static str, ensure: InternalTopicEnsure) {
        if !self.internal_topics_in_background.lock().expect(POISONED).insert(name) {
            return;
        }
        let broker = self.clone();
        let spawned = std::thread::Builder::new().name(format!("create {name}")).spawn(move || {
            let _ = ensure(&broker);
            broker.internal_topics_in_background.lock().expect(POISONED).remove(name);
        });
        if let Err(e) = spawned {
            tracing::warn!(topic = name, error = %e, "cannot start a thread to create an internal topic");
            self.internal_topics_in_background.lock().expect(POISONED).remove(name);
        }
    }

    /// True when every partition of `topic` led here has its log open.
    /// Whether the internal topic `name` exists and every partition led here is open: then
    /// `ensure_internal_topic` answers at once, without its lock or any I/O.
    pub fn internal_topic_ready(&self, name: &str) -> bool {
        self.image().topic(name).is_some_and(|t| self.opened_all(t))
    }

    fn opened_all(&self, topic: &TopicImage) -> bool {
        let node = self.settings.node_id;
        topic.partitions.iter().all(|p| p.leader != node || self.replica_manager.contains(topic.id, p.index))
    }

    pub fn delete_topic(self: &Arc<Self>, name: &str) -> Result<Uuid, ControllerError> {
        if let Backend::Cluster(link) = &self.backend {
            // The logs go when the deletion reaches this broker's image (`publish`).
            return link.delete_topic(name);
        }
        let topic = self.image().topic(name).cloned();
        let id = self.with_controller(|c| c.delete_topic(name))?;
        if let Some(topic) = topic {
            let dirs: Vec<PathBuf> = topic
                .partitions
                .iter()
                .filter_map(|p| self.replica_manager.remove(id, p.index))
                .map(|partition| partition.log.dir().to_path_buf())
                .collect();
            // The delete is durable in the metadata log already: a directory not renamed
            // now is one of no current topic at the next start, and removed then.
            if let Err(e) = self.log_deleter.delete(&dirs) {
                tracing::warn!(topic = name, error = %e, "deleted topic's directories not removed; the next start removes them");
            }
        }
        tracing::info!(topic = name, %id, "topic deleted");
        // An internal topic's coordinators resign its partitions, as Kafka's do.
        self.coordinators_follow(LoadMode::Now);
        Ok(id)
    }

    pub fn create_partitions(&self, name: &str, count: i32, validate_only: bool) -> Result<(), ControllerError> {
        if let Backend::Cluster(link) = &self.backend {
            return link.create_partitions(name, count, validate_only);
        }
        self.with_controller(|c| c.create_partitions(name, count, validate_only))?;
        if !validate_only {
            if let Some(topic) = self.image().topic(name) {
                self.open_new_partitions(topic)?;
            }
        }
        Ok(())
    }

    /// ElectLeaders on a single node, decided by its own controller (a cluster's brokers
    /// forward the request instead).
    pub fn elect_leaders(
        &self,
        election: osprey_cluster::elect_leaders::ElectionType,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<Vec<osprey_cluster::elect_leaders::TopicElectionResult>, ControllerError> {
        self.with_controller(|c| c.elect_leaders(election, topics))
    }

    pub fn set_topic_configs(
        &self,
        name: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        if let Backend::Cluster(link) = &self.backend {
            return link.alter_configs(crate::cluster_link::TOPIC_RESOURCE, name, changes, validate_only);
        }
        let validator: ConfigValidator<'_> = &|k, v| self.validate_topic_config(k, v);
        self.with_controller(|c| c.set_topic_configs(name, changes, validate_only, validator))?;
        if !validate_only {
            self.reconfigure(name);
        }
        Ok(())
    }

    /// Sets or resets a group's configs (ConfigResource GROUP), durably in the metadata
    /// log; the coordinator reads them from the image at the group's next heartbeat.
    pub fn set_group_configs(
        &self,
        group: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        if let Backend::Cluster(link) = &self.backend {
            return link.alter_configs(crate::cluster_link::GROUP_RESOURCE, group, changes, validate_only);
        }
        let bounds = self.group_config_bounds();
        let validate = |configs: &BTreeMap<String, String>| group_config::validate(configs, &bounds);
        self.with_controller(|c| c.set_group_configs(group, changes, validate_only, &validate))
    }

    /// Sets or resets dynamic broker configs of `resource` (empty: the cluster-wide
    /// default; else this broker's id), durably in the metadata log, then applies them:
    /// the configuration in effect is rebuilt and every topic's partition logs get their
    /// new defaults (a topic's own overrides still win).
    pub fn set_broker_configs(
        &self,
        resource: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        if let Backend::Cluster(link) = &self.backend {
            // Applied when the change reaches this broker's image (`publish`).
            return link.alter_configs(crate::cluster_link::BROKER_RESOURCE, resource, changes, validate_only);
        }
        let current = self.config();
        let validate = |configs: &BTreeMap<String, String>| {
            current
                .validate_dynamic(configs, resource.is_empty())
                .map_err(|message| ControllerError::new(ErrorCode::INVALID_REQUEST, message))
        };
        self.with_controller(|c| c.set_broker_configs(resource, changes, validate_only, &validate))?;
        if !validate_only && !changes.is_empty() {
            self.apply_dynamic_configs();
        }
        Ok(())
    }

    /// Rebuilds the configuration in effect from the image, resizes the connection slots
    /// and reconfigures every topic.
    /// The write lock is held while the image is read, so concurrent changes apply in the
    /// order the controller committed them.
    fn apply_dynamic_configs(&self) {
        {
            let mut effective = self.effective.write().expect(POISONED);
            *effective = Effective::new(&self.settings, &self.image());
            self.connection_slots.resize(effective.max_connections(&self.settings));
        }
        let names: Vec<String> = self.image().topics().map(|t| t.name.clone()).collect();
        for name in &names {
            self.reconfigure(name);
        }
        tracing::info!(topics = names.len(), "dynamic broker configuration applied");
    }

    /// The broker settings group configs are checked against and default to.
    pub fn group_config_bounds(&self) -> group_config::GroupConfigBounds {
        self.settings.config.group_config_bounds()
    }

    /// Applies a topic's current configs to its open partition logs.
    fn reconfigure(&self, name: &str) {
        let image = self.image();
        let Some(topic) = image.topic(name) else { return };
        match self.log_config(topic) {
            Ok(config) => {
                let replica_config = self.replica_config(topic, &config);
                let indexes = topic.partitions.iter().map(|p| p.index);
                self.replica_manager.reconfigure(topic.id, indexes, &config, replica_config);
                tracing::info!(topic = name, ?config, "topic configuration applied");
            }
            Err(e) => tracing::error!(topic = name, error = %e, "topic configuration not applied"),
        }
    }

    /// Tells parked requests (long-polling fetches) to answer now: shutdown has begun.
    pub fn begin_shutdown(&self) {
        self.stopping.send_replace(true);
    }

    /// Resolves once [`begin_shutdown`](Self::begin_shutdown) has been called.
    pub fn stopping(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.stopping.subscribe();
        async move {
            let _ = rx.wait_for(|stopping| *stopping).await;
        }
    }

    /// The incremental fetch sessions (KIP-227).
    pub fn fetch_sessions(&self) -> std::sync::MutexGuard<'_, FetchSessions> {
        self.fetch_sessions.lock().expect(POISONED)
    }

    /// A producer id never handed out before (InitProducerId without a transactional id).
    /// Blocks on a controller round trip when the block is used up: blocking threads only.
    pub fn next_producer_id(&self) -> Result<i64, ControllerError> {
        loop {
            if let Some(id) = self.take_producer_id() {
                return Ok(id);
            }
            // Other callers may use up the new block before this one takes from it.
            self.reserve_producer_ids()?;
        }
    }

    /// The next producer id of the current block, or None when it is used up; never
    /// waits. The transaction coordinator calls it under its lock, on async workers, and
    /// answers None with COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka's
    /// `RPCProducerIdManager` does while its next block is on the way; the handlers
    /// reserve the next block on the blocking pool first.
    pub fn take_producer_id(&self) -> Option<i64> {
        let mut ids = self.producer_ids.lock().expect(POISONED);
        if ids.is_empty() {
            return None;
        }
        let id = ids.start;
        ids.start += 1;
        crate::telemetry::producer_id_allocated();
        Some(id)
    }

    /// Reserves the next block of producer ids if the current one is used up (a metadata
    /// log write), so that `next_producer_id` called under a coordinator's lock right after
    /// writes nothing. Call it where blocking is allowed.
    pub fn reserve_producer_ids(&self) -> Result<(), ControllerError> {
        let _one_at_a_time = self.producer_id_reservation.lock().expect(POISONED);
        if !self.producer_ids_used_up() {
            return Ok(());
        }
        let block = self.allocate_producer_ids()?;
        if block.is_empty() {
            return Err(ControllerError::new(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "the controller gave an empty block of producer ids",
            ));
        }
        *self.producer_ids.lock().expect(POISONED) = block;
        Ok(())
    }

    /// Whether the current block of producer ids is used up.
    pub fn producer_ids_used_up(&self) -> bool {
        self.producer_ids.lock().expect(POISONED).is_empty()
    }

    /// The next block of producer ids: from this node's controller, or the cluster's.
    fn allocate_producer_ids(&self) -> Result<std::ops::Range<i64>, ControllerError> {
        #[cfg(test)]
        if let Some((entered, release)) = self.producer_id_stall.lock().expect(POISONED).take() {
            let _ = entered.send(());
            // Bounded, so that a test whose code under test wrongly waits here fails
            // instead of hanging.
            let _ = release.recv_timeout(std::time::Duration::from_secs(60));
        }
        match &self.backend {
            Backend::Cluster(link) => link.allocate_producer_ids(),
            Backend::Local(_) => self.with_controller(|c| c.allocate_producer_ids(PRODUCER_ID_BLOCK)),
        }
    }

    /// Whether what this broker leads is led nowhere else, as far as the metadata it
    /// applied says: always for a single node (its controller is itself), and in a
    /// cluster while it holds its lease with the controller (`ClusterLink::holds_lease`).
    pub fn holds_lease(&self) -> bool {
        match &self.backend {
            Backend::Cluster(link) => link.holds_lease(tokio::time::Instant::now()),
            Backend::Local(_) => true,
        }
    }

    /// The link to the controller quorum, when this broker is one of a cluster.
    pub fn cluster_link(&self) -> Option<&Arc<ClusterLink>> {
        match &self.backend {
            Backend::Cluster(link) => Some(link),
            Backend::Local(_) => None,
        }
    }

    /// Runs an operation of this node's own controller and publishes the image it
    /// produced. In a cluster there is none here: the caller checked the backend.
    pub(crate) fn with_controller<T>(
        &self,
        op: impl FnOnce(&mut Controller) -> Result<T, ControllerError>,
    ) -> Result<T, ControllerError> {
        let Backend::Local(controller) = &self.backend else {
            return Err(ControllerError::new(ErrorCode::NOT_CONTROLLER, "this broker has no controller of its own"));
        };
        let mut controller = controller.lock().expect(POISONED);
        let result = op(&mut controller);
        let image = Arc::new(controller.image().clone());
        *self.image.write().expect(POISONED) = image;
        result
    }

    /// Test-only: commits `records` through the controller and publishes the image they
    /// make, then opens the logs of the partitions now led here, as a metadata change
    /// from the quorum does.
    #[cfg(test)]
    pub(crate) fn apply_records_for_test(&self, records: &[osprey_cluster::MetadataRecord]) {
        self.with_controller(|c| c.commit_records(records.to_vec())).expect("records committed");
        let image = self.image();
        self.open_partitions(&image.topics().collect::<Vec<_>>(), PriorShutdown::SeeLogMarker).expect("logs opened");
    }

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        self.settings.data_dir.join(format!("{topic}-{index}"))
    }

    /// Opens the logs of partitions the controller just created. Shutdown may interrupt
    /// this: the metadata already holds them, as in Kafka once its controller committed
    /// the records, and the next start opens the rest, so the request still succeeded.
    fn open_new_partitions(&self, topic: &TopicImage) -> Result<(), ControllerError> {
        match self.open_partitions(&[topic], PriorShutdown::SeeLogMarker) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                tracing::info!(topic = %topic.name, "{e}");
                Ok(())
            }
            other => other.map_err(storage_error),
        }
    }

    /// The ISR changes partitions queue for the controller; taken once, by the task
    /// that sends them (None on a single node, or once taken).
    pub fn take_isr_changes(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<crate::partition::IsrRequest>> {
        self.isr_changes.lock().expect(POISONED).take()
    }

    /// In a cluster: makes `image` the broker's metadata. Logs of partitions newly
    /// assigned here (as leader or follower) open first, so no reader of the image finds
    /// one of them missing; every partition held here takes its new leadership, epochs
    /// and ISR; then the image is swapped in; then the logs of partitions no longer held
    /// here (topic deleted, replica moved away) are closed and their directories
    /// deleted, and changed configs are applied. Blocks (opening logs): call it from the
    /// blocking pool. Images come in log order from one follower, one at a time.
    pub fn publish(self: &Arc<Self>, image: Arc<MetadataImage>) {
        let node = self.settings.node_id;
        let old = self.image();
        let new_topics: Vec<&TopicImage> = image.topics().collect();
        // Opening may take a while after a restart; it stops early at shutdown, and
        // what is not open then opens at the next start.
        if let Err(e) = self.open_partitions_held_here(&new_topics) {
            tracing::error!(error = %e, "partition logs not opened; this broker does not serve them");
        }
        // Brokers that may join ISRs (registered, neither fenced nor shutting down): a
        // replica elsewhere is not waited for by the high watermark (Kafka's
        // `isReplicaIsrEligible`).
        let active = |image: &MetadataImage| -> BTreeSet<i32> {
            image.brokers().filter(|b| b.is_active()).map(|b| b.id).collect()
        };
        let active_now = active(&image);
        let eligibility_changed = active(&old) != active_now;
        for topic in &new_topics {
            for p in &topic.partitions {
                let unchanged = old.partition(topic.id, p.index).is_some_and(|before| before == p);
                if (!unchanged || eligibility_changed) && p.replicas.contains(&node) {
                    if let Some(partition) = self.replica_manager.replica(topic.id, p.index) {
                        if !unchanged {
                            partition.apply_assignment(p);
                        }
                        let ineligible = p.replicas.iter().copied().filter(|id| !active_now.contains(id));
                        partition.set_ineligible_replicas(ineligible.collect());
                    }
                }
            }
        }
        *self.image.write().expect(POISONED) = image.clone();
        // Coordinators of partitions led elsewhere now unload at once; newly led ones load
        // in the background.
        self.coordinators_follow(LoadMode::InBackground);
        let mut gone = Vec::new();
        for topic in old.topics() {
            let kept = image.topic_by_id(topic.id);
            for p in &topic.partitions {
                let still_here = kept
                    .and_then(|t| t.partitions.get(p.index as usize))
                    .is_some_and(|now| now.replicas.contains(&node));
                if p.replicas.contains(&node) && !still_here {
                    if let Some(partition) = self.replica_manager.remove(topic.id, p.index) {
                        gone.push(partition.log.dir().to_path_buf());
                    } else {
                        let dir = self.partition_dir(&topic.name, p.index);
                        if dir.exists() {
                            gone.push(dir);
                        }
                    }
                }
            }
            if kept.is_none() {
                tracing::info!(topic = %topic.name, id = %topic.id, "topic deleted");
            }
        }
        if !gone.is_empty() {
            if let Err(e) = self.log_deleter.delete(&gone) {
                tracing::warn!(error = %e, "deleted partitions' directories not removed; the next start removes them");
            }
        }
        let node_resource = node.to_string();
        if old.broker_configs("") != image.broker_configs("")
            || old.broker_configs(&node_resource) != image.broker_configs(&node_resource)
        {
            self.apply_dynamic_configs();
        }
        for topic in image.topics() {
            if old.topic_by_id(topic.id).is_some_and(|before| before.configs != topic.configs) {
                self.reconfigure(&topic.name);
            }
        }
    }

    /// Opens the logs of partitions of `topics` with a replica here that are not open yet.
    fn open_partitions_held_here(&self, topics: &[&TopicImage]) -> io::Result<()> {
        match self.open_partitions(topics, self.startup_prior) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                tracing::info!("{e}");
                Ok(())
            }
            other => other,
        }
    }

    /// In a cluster, once this broker has caught up with the metadata (the controller
    /// unfenced it): removes directories of partitions it no longer holds (deleted
    /// while it was down) and loads the group and transaction coordinators from the
    /// internal partitions led here, as a single node does at start.
    pub fn caught_up(self: &Arc<Self>) -> io::Result<()> {
        let image = self.image();
        self.remove_stale_partition_dirs(&image)?;
        self.journal_recovered();
        self.follow_coordinator_leadership(LoadMode::Now);
        Ok(())
    }

    /// From now on the coordinators follow the leadership of their internal partitions
    /// (`coordinator_leadership`); the partitions led here now are loaded in `mode`.
    pub fn follow_coordinator_leadership(self: &Arc<Self>, mode: LoadMode) {
        self.coordinators_follow.store(true, std::sync::atomic::Ordering::Release);
        coordinator_leadership::follow(self, mode);
    }

    /// Hands the coordinators what changed in the leadership of their partitions, once
    /// they follow it (not while a restarted broker replays old metadata).
    pub fn coordinators_follow(self: &Arc<Self>, mode: LoadMode) {
        if self.coordinators_follow.load(std::sync::atomic::Ordering::Acquire) {
            coordinator_leadership::follow(self, mode);
        }
    }

    /// [`Broker::coordinators_follow`] from the coordinators' timer: skipped while another
    /// hand-over runs, so an async worker never waits for one.
    pub fn coordinators_follow_if_idle(self: &Arc<Self>) {
        if self.coordinators_follow.load(std::sync::atomic::Ordering::Acquire) {
            coordinator_leadership::follow_if_idle(self, LoadMode::InBackground);
        }
    }

    /// Whether `topic`'s partitions are attached to the commit journal: it is listed, or
    /// the list holds `*` (every topic).
    fn journaled(&self, topic: &str) -> bool {
        self.settings.config.log_journal_topics.iter().any(|t| t == topic || t == "*")
    }

    /// Every partition log held here at start-up is open (and has replayed what the
    /// commit journal held for it): the journal's old files go.
    fn journal_recovered(&self) {
        if let Some(journal) = &self.journal {
            journal.recovered();
        }
    }

    /// Threads that open and close partition logs (`num.recovery.threads.per.data.dir`).
    fn log_threads(&self) -> usize {
        self.settings.config.num_recovery_threads_per_data_dir.clamp(1, 256) as usize
    }

    /// True once shutdown has begun: long work (opening thousands of logs) stops early.
    fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Opens the logs of these topics' partitions with a replica here (a single node's:
    /// all) that are not open yet, on
    /// `num.recovery.threads.per.data.dir` threads: opening is mostly fsyncs, and
    /// concurrent fsyncs share the file system's journal commits. Runs on the caller's
    /// (blocking) thread; stops early, with an error, once shutdown begins. Logs not opened
    /// then open at the next start, from the metadata that already lists them. `prior` is
    /// how the data directory was last shut down (clean: no log is recovered).
    fn open_partitions(&self, topics: &[&TopicImage], prior: PriorShutdown) -> io::Result<()> {
        let mut jobs = Vec::new();
        for topic in topics {
            let config = self.log_config(topic).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let replica_config = self.replica_config(topic, &config);
            let config = Arc::new(config);
            for p in &topic.partitions {
                let here = p.replicas.contains(&self.settings.node_id) || p.leader == self.settings.node_id;
                if here && !self.replica_manager.contains(topic.id, p.index) {
                    jobs.push((*topic, p, config.clone(), replica_config));
                }
            }
        }
        if jobs.is_empty() {
            return Ok(());
        }
        let total = jobs.len();
        let opened = std::sync::atomic::AtomicUsize::new(0);
        let done = run_parallel(&jobs, self.log_threads(), &|| self.is_stopping(), &|(
            topic,
            p,
            config,
            replica_config,
        )|
         -> io::Result<()> {
            self.open_partition(topic, p, config, *replica_config, prior)?;
            // Recovery after a crash can take a while on many logs: show that it moves.
            let n = opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if n.is_multiple_of(10_000) {
                tracing::info!(opened = n, total, "opening partition logs");
            }
            Ok(())
        })?;
        // The new partition directories' names in the data directory.
        sync_dir(&self.settings.data_dir)?;
        if done < total {
            self.logs_left_unopened.store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                format!("shutting down: {done} of {total} partition logs opened; the rest open at the next start"),
            ));
        }
        Ok(())
    }

    fn open_partition(
        &self,
        topic: &TopicImage,
        p: &PartitionImage,
        config: &LogConfig,
        replica_config: ReplicaConfig,
        prior: PriorShutdown,
    ) -> io::Result<()> {
        let dir = self.partition_dir(&topic.name, p.index);
        write_partition_metadata(&dir, topic.id)?;
        let storage = FdLimited::new(StdStorage, self.fd_budget.clone());
        let log = Arc::new(
            PartitionLog::open_after(storage, &dir, config.clone(), now_ms(), prior)
                .map_err(|e| io::Error::other(format!("{}: {e}", dir.display())))?,
        );
        if let Some(journal) = self.journal.as_ref().filter(|_| self.journaled(&topic.name)) {
            journal.attach(&log).map_err(|e| io::Error::other(format!("{}: {e}", dir.display())))?;
        }
        // A single node is its own ISR: the replica state machine takes everything recovery
        // kept (and open made durable) as committed, including acknowledged data written
        // after the last high-watermark checkpoint.
        let partition = Partition::new(topic.name.clone(), topic.id, p, log, replica_config, self.isr_sink.clone());
        self.replica_manager.add(partition);
        Ok(())
    }

    /// At start-up, before any log is opened: the directories an interrupted delete left
    /// (`-delete`) are removed, never loaded, and so are partition directories whose topic
    /// no longer exists (deleted, or deleted and re-created with a new id while the
    /// broker was down), the same crash-safe way as a delete.
    fn remove_stale_partition_dirs(&self, image: &MetadataImage) -> io::Result<()> {
        let data_dir = &self.settings.data_dir;
        let pending =
            osprey_storage::delete::pending(&StdStorage, data_dir).map_err(|e| io::Error::other(e.to_string()))?;
        if !pending.is_empty() {
            tracing::info!(directories = pending.len(), "removing the directories of an interrupted delete");
        }
        self.log_deleter.remove(pending);
        let mut stale = Vec::new();
        for entry in std::fs::read_dir(data_dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if osprey_storage::delete::is_delete_dir(name) {
                continue;
            }
            let Ok(id) = std::fs::read_to_string(path.join("partition.metadata")) else { continue };
            let current = image.topics().any(|t| {
                id.lines().any(|l| l.trim() == format!("topic_id: {}", t.id))
                    && t.partitions.iter().any(|p| {
                        p.replicas.contains(&self.settings.node_id) && path == self.partition_dir(&t.name, p.index)
                    })
            });
            if !current {
                tracing::warn!(dir = %path.display(), "removing the directory of a partition that no longer exists");
                stale.push(path);
            }
        }
        self.log_deleter.delete(&stale)
    }

    /// Flushes and closes every partition log, then, if every one closed, writes the data
    /// directory's clean-shutdown marker so the next start skips recovery (one marker and
    /// one fsync for all partitions, as Kafka's `.kafka_cleanshutdown`). Logs close in
    /// parallel (`num.recovery.threads.per.data.dir`), and none starts closing after
    /// `deadline`: then, as when a close failed, no marker is written and every log is
    /// recovered at the next start, which loses nothing acknowledged under
    /// fsync-before-ack. An error says why the directory was not marked clean; a shutdown
    /// that interrupted the opening of logs (a large CreateTopics) also leaves it unmarked,
    /// but is no error: it is what the operator asked for.
    pub fn shutdown(&self, deadline: std::time::Instant) -> Result<(), String> {
        let started = std::time::Instant::now();
        let partitions: Vec<Arc<Partition>> = self.replica_manager.remove_all();
        let failed = std::sync::atomic::AtomicUsize::new(0);
        let closed = run_parallel(
            &partitions,
            self.log_threads(),
            &|| std::time::Instant::now() >= deadline,
            &|partition| -> Result<(), std::convert::Infallible> {
                if let Err(e) = partition.log.close_unmarked() {
                    failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let dir = partition.log.dir().display();
                    tracing::error!(%dir, error = %e, "closing log failed; it will be recovered at the next start");
                }
                Ok(())
            },
        )
        .unwrap_or_else(|never| match never {});
        let closed = closed - failed.into_inner();
        let left = partitions.len() - closed;
        tracing::info!(closed, left, took_ms = started.elapsed().as_millis() as u64, "partition logs closed");
        if left > 0 {
            return Err(format!("{left} partition logs not closed; every log is recovered at the next start"));
        }
        if self.logs_left_unopened.load(std::sync::atomic::Ordering::Relaxed) {
            // Shutdown asked for it, so the process still stops cleanly (exit 0, as
            // before this marker): only the next start's recovery is longer.
            tracing::warn!(
                "shutdown interrupted the opening of partition logs; the data directory is not marked clean \
                 and every log is recovered at the next start"
            );
            return Ok(());
        }
        let broker_epoch = self.cluster_link().and_then(|l| l.registration().epoch);
        osprey_storage::shutdown::write(&StdStorage, &self.settings.data_dir, broker_epoch)
            .map_err(|e| format!("clean-shutdown marker not written ({e}); every log is recovered at the next start"))
    }
}

/// The data directory's commit journal, unless `osprey.log.journal.topics` is empty.
fn open_journal(settings: &Settings) -> io::Result<Option<Arc<Journal<StdStorage>>>> {
    if settings.config.log_journal_topics.is_empty() {
        return Ok(None);
    }
    // At least 4096: the key's validation says so (and `Journal::open` holds to it too).
    let bytes = settings.config.log_journal_file_bytes as u64;
    Journal::open(StdStorage, &settings.data_dir, bytes)
        .map(Some)
        .map_err(|e| io::Error::other(format!("opening the commit journal: {e}")))
}

/// The open-file budget: the configured one, but at most half the process's soft
/// `RLIMIT_NOFILE` (sockets need the rest), read from /proc where available.
fn open_file_budget(configured: i32) -> usize {
    let configured = configured.max(16) as usize;
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|limits| {
        limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<usize>().ok())
    });
    match soft {
        Some(soft) if soft / 2 < configured => {
            tracing::warn!(
                configured,
                soft_limit = soft,
                "osprey.log.max.open.files is above half the open-file limit; using {} (raise `ulimit -n` for more)",
                (soft / 2).max(16)
            );
            (soft / 2).max(16)
        }
        _ => configured,
    }
}

/// Runs `work` on each item, on up to `threads` threads, and returns how many items it
/// ran on: all of them, unless `stop` said to stop (checked before each item) or `work`
/// failed (the first error is returned, and no new items start).
fn run_parallel<T: Sync, E: Send>(
    items: &[T],
    threads: usize,
    stop: &(dyn Fn() -> bool + Sync),
    work: &(dyn Fn(&T) -> Result<(), E> + Sync),
) -> Result<usize, E> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error = Mutex::new(None);
    let worker = || loop {
        if failed.load(Ordering::Relaxed) || stop() {
            return;
        }
        let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) else { return };
        match work(item) {
            Ok(()) => {
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                failed.store(true, Ordering::Relaxed);
                first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
            }
        }
    };
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        worker();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(worker);
            }
        });
    }
    match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(done.into_inner()),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| context(e, "fsync", dir))
}

/// Kafka's `partition.metadata`: ties a partition directory to its topic id.
fn write_partition_metadata(dir: &Path, id: Uuid) -> io::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| context(e, "create", dir))?;
    let path = dir.join("partition.metadata");
    if path.exists() {
        return Ok(());
    }
    let tmp = dir.join("partition.metadata.tmp");
    std::fs::write(&tmp, format!("version: 0\ntopic_id: {id}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

fn context(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

fn storage_error(e: io::Error) -> ControllerError {
    ControllerError::new(ErrorCode::KAFKA_STORAGE_ERROR, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::{run_parallel, Broker, Settings};
    use osprey_cluster::NewTopic;
    use osprey_storage::log::CLEAN_SHUTDOWN_FILE;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn internal_topics_at_kafkas_defaults_are_capped_at_the_brokers_registered_and_set_ones_are_not() {
        use super::internal_replication;
        use crate::config::BrokerConfig;
        let defaults = BrokerConfig::default();
        let rf = ("transaction.state.log.replication.factor", 3);
        let min_isr = Some(("transaction.state.log.min.isr", 2));
        assert_eq!(internal_replication(&defaults, rf, min_isr, 1), (1, Some(1)), "a single node");
        assert_eq!(internal_replication(&defaults, rf, min_isr, 2), (2, Some(2)));
        assert_eq!(internal_replication(&defaults, rf, min_isr, 5), (3, Some(2)));
        assert_eq!(internal_replication(&defaults, rf, None, 0), (1, None), "no broker registered yet counts as one");
        let mut raw = crate::config::RawConfig::new();
        let text = "transaction.state.log.replication.factor=3\ntransaction.state.log.min.isr=2\n";
        raw.load_properties(text, Path::new("test.properties")).unwrap();
        let set = raw.resolve().unwrap().0;
        assert_eq!(internal_replication(&set, rf, min_isr, 1), (3, Some(2)), "as Kafka: wait for three brokers");
    }

    fn open_broker(dir: &Path) -> Arc<Broker> {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        Broker::open(Settings::single_node(addr, dir.to_path_buf()), Box::new(|_: &str, _: &str| Ok(()))).unwrap()
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("osprey-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Partition logs opened clean (no recovery scan) and in all.
    fn opened_clean(broker: &Broker) -> (usize, usize) {
        let all = broker.replica_manager.partitions();
        (all.iter().filter(|p| p.log.opened_clean()).count(), all.len())
    }

    fn broker_with_topic(dir: &Path) -> Arc<Broker> {
        let broker = open_broker(dir);
        let topic = NewTopic { name: "t".into(), num_partitions: 3, replication_factor: 1, ..Default::default() };
        broker.create_topic(&topic, false).unwrap();
        broker
    }

    fn shutdown(broker: &Broker) -> Result<(), String> {
        broker.shutdown(Instant::now() + Duration::from_secs(60))
    }

    #[test]
    fn a_clean_shutdown_marks_the_data_directory_once_and_the_next_start_recovers_nothing() {
        let dir = fresh_dir("dir-marker-clean");
        let broker = broker_with_topic(&dir);
        shutdown(&broker).unwrap();
        drop(broker);
        assert!(dir.join(CLEAN_SHUTDOWN_FILE).exists(), "the data directory is marked clean");
        for i in 0..3 {
            assert!(!dir.join(format!("t-{i}")).join(CLEAN_SHUTDOWN_FILE).exists(), "no marker per partition");
        }

        let broker = open_broker(&dir);
        assert_eq!(opened_clean(&broker), (3, 3));
        assert!(!dir.join(CLEAN_SHUTDOWN_FILE).exists(), "taken at start-up, before any write");
        // A crash now (no shutdown) must be seen as unclean at the next start.
        drop(broker);
        let broker = open_broker(&dir);
        assert_eq!(opened_clean(&broker), (0, 3));
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_close_leaves_the_data_directory_unmarked() {
        let dir = fresh_dir("dir-marker-failed-close");
        let broker = broker_with_topic(&dir);
        // A log that can no longer be closed (here: closed already, so offline).
        let first = broker.replica_manager.partitions()[0].clone();
        first.log.close_unmarked().unwrap();
        assert!(shutdown(&broker).is_err());
        drop((broker, first));
        assert!(!dir.join(CLEAN_SHUTDOWN_FILE).exists());
        let broker = open_broker(&dir);
        assert_eq!(opened_clean(&broker), (0, 3), "every log recovered");
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_partition_marker_from_an_older_version_still_counts_as_clean() {
        let dir = fresh_dir("dir-marker-upgrade");
        let broker = broker_with_topic(&dir);
        // Close as an older version did: one marker per partition, none for the directory.
        for p in broker.replica_manager.partitions() {
            p.log.close().unwrap();
        }
        drop(broker);
        let broker = open_broker(&dir);
        assert_eq!(opened_clean(&broker), (3, 3));
        for i in 0..3 {
            assert!(!dir.join(format!("t-{i}")).join(CLEAN_SHUTDOWN_FILE).exists(), "removed at open");
        }
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The names in the data directory, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_deleted_topic_is_renamed_for_deletion_then_removed() {
        let dir = fresh_dir("delete-topic");
        let broker = broker_with_topic(&dir);
        // Renamed before delete_topic returns: no directory under a partition's own name.
        broker.log_deleter.wait_idle();
        let id = broker.delete_topic("t").unwrap();
        let left: Vec<String> = names_in(&dir).into_iter().filter(|n| n.starts_with("t-")).collect();
        assert!(
            left.iter().all(|n| osprey_storage::delete::is_delete_dir(n) && n.len() == "t-0.".len() + 32 + 7),
            "{left:?}"
        );
        broker.log_deleter.wait_idle();
        assert!(!names_in(&dir).iter().any(|n| n.starts_with("t-")), "{:?}", names_in(&dir));
        // A topic re-created with the name starts empty, in new directories.
        let topic = NewTopic { name: "t".into(), num_partitions: 3, replication_factor: 1, ..Default::default() };
        assert_ne!(broker.create_topic(&topic, false).unwrap().id, id);
        assert!(broker.replica_manager.partitions().iter().all(|p| p.log.log_end_offset() == 0));
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn directories_an_interrupted_delete_left_are_removed_at_start_up_and_never_loaded() {
        let dir = fresh_dir("delete-left");
        let broker = broker_with_topic(&dir);
        for p in broker.replica_manager.partitions() {
            let batch = osprey_storage::batch::testing::build(Default::default());
            p.log.append(&batch, 0, 0).unwrap();
        }
        shutdown(&broker).unwrap();
        drop(broker);
        // A crash after a delete's rename (left: `-delete`, half removed) and one after the
        // delete's metadata record but before the rename (left: t-1 under its own name,
        // for a topic id that is gone).
        let half = dir.join("t-0.0123456789abcdef0123456789abcdef-delete");
        std::fs::rename(dir.join("t-0"), &half).unwrap();
        std::fs::remove_file(half.join("partition.metadata")).unwrap();
        let gone_id = "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n";
        std::fs::write(dir.join("t-1").join("partition.metadata"), gone_id).unwrap();
        let broker = open_broker(&dir);
        broker.log_deleter.wait_idle();
        let names: Vec<String> = names_in(&dir).into_iter().filter(|n| n.starts_with("t-")).collect();
        assert_eq!(names, ["t-0", "t-1", "t-2"], "nothing left of the deletes");
        // The current topic's t-0 and t-1 were not loaded from what the deletes left.
        let end =
            |i: i32| broker.replica_manager.partitions().iter().find(|p| p.index == i).unwrap().log.log_end_offset();
        assert_eq!((end(0), end(1), end(2)), (0, 0, 1));
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn run_parallel_runs_every_item_once() {
        let items: Vec<usize> = (0..1000).collect();
        let seen: Vec<AtomicUsize> = items.iter().map(|_| AtomicUsize::new(0)).collect();
        let done = run_parallel(&items, 8, &|| false, &|i| -> Result<(), ()> {
            seen[*i].fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        assert_eq!(done, Ok(1000));
        assert!(seen.iter().all(|n| n.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn run_parallel_starts_nothing_once_told_to_stop() {
        let items: Vec<usize> = (0..1000).collect();
        let started = AtomicUsize::new(0);
        let stop = || started.load(Ordering::Relaxed) >= 10;
        let done = run_parallel(&items, 4, &stop, &|_| -> Result<(), ()> {
            started.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        // Each thread may have passed the check just before the tenth item started.
        assert!((10..10 + 4).contains(&done), "{done}");
    }

    #[test]
    fn run_parallel_returns_the_first_error_and_stops() {
        let items: Vec<usize> = (0..1000).collect();
        let ran = AtomicUsize::new(0);
        // One thread, so that which items ran is certain.
        let result = run_parallel(&items, 1, &|| false, &|i| {
            ran.fetch_add(1, Ordering::Relaxed);
            if *i == 5 {
                Err(format!("item {i}"))
            } else {
                Ok(())
            }
        });
        assert_eq!(result, Err("item 5".to_string()));
        assert_eq!(ran.load(Ordering::Relaxed), 6);
    }
    #[test]
    fn async_workers_read_the_producer_id_block_while_a_reservation_waits_for_the_controller() {
        let (broker, dir) = crate::test_support::broker_in("ids-reservation");
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        *broker.producer_id_stall.lock().unwrap() = Some((entered_tx, release_rx));
        let b = broker.clone();
        let reserving = std::thread::spawn(move || b.reserve_producer_ids());
        entered_rx.recv().unwrap();
        // What InitProducerId asks on an async worker: answered while the round trip waits.
        let b = broker.clone();
        let (answered_tx, answered_rx) = mpsc::channel();
        std::thread::spawn(move || answered_tx.send(b.producer_ids_used_up()));
        let answer = answered_rx.recv_timeout(Duration::from_secs(60));
        release_tx.send(()).unwrap();
        assert_eq!(answer, Ok(true), "producer_ids_used_up waited for the reservation's controller round trip");
        reserving.join().unwrap().unwrap();
        assert!(!broker.producer_ids_used_up(), "the reserved block was not installed");
        let first = broker.next_producer_id().unwrap();
        assert_eq!(broker.next_producer_id().unwrap(), first + 1);
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
