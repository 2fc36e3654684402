//! The controller: validates admin operations against the current image, writes the
//! resulting records to the metadata log, then applies them.
//!
//! Today it runs inside the single broker process and its "quorum" is one fsynced file;
//! the openraft controller will keep this interface and replicate the records instead.

use crate::alter_partition::{AlterPartitionInput, AlterPartitionTopicResult};
use crate::cluster_control::{
    BrokerHeartbeatInput, BrokerHeartbeatReply, BrokerRegistrationInput, ClusterControl, ClusterControlConfig,
    ControllerResult,
};
use crate::image::{MetadataImage, MetadataRecord, TopicImage};
use crate::log::MetadataLog;
use crate::reassignment::{ReassignmentTarget, TopicReassignmentResult};
use crate::topic_control::TopicControl;
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// Why an admin operation was refused: the Kafka error code and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.name())]
pub struct ControllerError {
    pub code: ErrorCode,
    pub message: String,
}

impl ControllerError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ControllerError {
        ControllerError { code, message: message.into() }
    }
}

/// A topic to create, as CreateTopics describes it.
#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    /// -1: the broker's `num.partitions`.
    pub num_partitions: i32,
    /// -1: the broker's `default.replication.factor`.
    pub replication_factor: i16,
    /// Explicit replica lists per partition index; when given, the two counts above are -1.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: BTreeMap<String, String>,
}

/// `broker.session.timeout.ms` until `configure_cluster` sets it (Kafka's default).
pub const DEFAULT_BROKER_SESSION_TIMEOUT_MS: i64 = 9_000;

/// The most partitions one topic may have. Kafka sets no limit, but every partition is a
/// directory with open files: a request for millions must be refused, not attempted.
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 100_000;

/// Checks one topic-level config; returns the message for INVALID_CONFIG.
pub type ConfigValidator<'a> = &'a dyn Fn(&str, &str) -> Result<(), String>;
/// Checks a group's whole set of configs (Kafka's `GroupConfig.validate`).
pub type GroupConfigValidator<'a> = &'a dyn Fn(&BTreeMap<String, String>) -> Result<(), String>;
/// Checks a broker resource's whole set of dynamic configs; the error is the client's
/// (Kafka answers INVALID_REQUEST for a non-dynamic key or a bad value).
pub type BrokerConfigValidator<'a> = &'a dyn Fn(&BTreeMap<String, String>) -> Result<(), ControllerError>;

#[derive(Debug)]
pub struct Controller {
    /// Where records are made durable before they are applied; `None` for a controller
    /// whose records are committed elsewhere or nowhere (`in_memory`).
    log: Option<MetadataLog>,
    image: MetadataImage,
    /// Broker registrations, heartbeats, fencing and elections.
    cluster: ClusterControl,
    /// Topics, configs and producer ids.
    topics: TopicControl,
}

impl Controller {
    /// Opens the metadata log at `path` and replays it into the image.
    pub fn open(
        path: &Path,
        brokers: Vec<i32>,
        default_partitions: i32,
        default_replication_factor: i16,
    ) -> io::Result<Controller> {
        let (log, records) = MetadataLog::open(path)?;
        let mut image = MetadataImage::default();
        for r in &records {
            image.apply(r);
        }
        tracing::info!(records = records.len(), topics = image.topics().count(), "metadata loaded");
        let mut controller = Controller::in_memory(brokers, default_partitions, default_replication_factor);
        controller.log = Some(log);
        controller.image = image;
        Ok(controller)
    }

    /// A controller with an empty image and no log: records are applied as they are
    /// decided. For simulations, and for a caller that makes them durable itself.
    pub fn in_memory(brokers: Vec<i32>, default_partitions: i32, default_replication_factor: i16) -> Controller {
        Controller {
            log: None,
            image: MetadataImage::default(),
            cluster: ClusterControl::new(ClusterControlConfig {
                cluster_id: None,
                broker_session_timeout_ms: DEFAULT_BROKER_SESSION_TIMEOUT_MS,
                unclean_leader_election_enable: false,
                min_insync_replicas: 1,
                eligible_leader_replicas_enabled: true,
            }),
            topics: TopicControl::new(brokers, default_partitions, default_replication_factor),
        }
    }

    /// Sets the cluster id brokers must register with, `broker.session.timeout.ms` and
    /// the default of `unclean.leader.election.enable`. Heartbeat sessions start over.
    pub fn configure_cluster(&mut self, config: ClusterControlConfig) {
        self.cluster = ClusterControl::new(config);
    }

    /// Seeds the placer (tests and simulations replay a placement from its seed).
    pub fn set_placement_seed(&mut self, seed: u64) {
        self.topics.set_placement_seed(seed);
    }

    /// The broker and leadership decisions, for a caller that commits their records
    /// itself (the quorum) rather than through this controller's log.
    pub fn cluster_control(&mut self) -> &mut ClusterControl {
        &mut self.cluster
    }

    /// This node became the active controller (see `ClusterControl::activate`).
    pub fn activate(&mut self, now_ms: i64) {
        self.cluster.activate(&self.image, now_ms);
    }

    /// BrokerRegistration (API 62): commits the registration; returns the broker epoch.
    pub fn register_broker(&mut self, request: &BrokerRegistrationInput, now_ms: i64) -> Result<i64, ControllerError> {
        let result = self.cluster.register_broker(&self.image, request, now_ms)?;
        self.commit_result(result)
    }

    /// BrokerHeartbeat (API 63): commits any fencing, unfencing or shutdown change.
    pub fn broker_heartbeat(
        &mut self,
        request: &BrokerHeartbeatInput,
        now_ms: i64,
    ) -> Result<BrokerHeartbeatReply, ControllerError> {
        let result = self.cluster.broker_heartbeat(&self.image, request, now_ms)?;
        self.commit_result(result)
    }

    /// AlterPartition (API 56): commits the accepted ISR changes; the per-partition
    /// answers. Err only for a request-level error (STALE_BROKER_EPOCH).
    pub fn alter_partition(
        &mut self,
        request: &AlterPartitionInput,
    ) -> Result<Vec<AlterPartitionTopicResult>, ControllerError> {
        let result = self.cluster.alter_partition(&self.image, request)?;
        self.commit_result(result)
    }

    /// The periodic unclean election (`unclean.leader.election.interval.ms`); returns how
    /// many offline partitions got a leader.
    pub fn elect_unclean_leaders(&mut self) -> Result<usize, ControllerError> {
        let result = self.cluster.elect_unclean_leaders(&self.image);
        self.commit_result(result)
    }

    /// ElectLeaders (API 43) for `topics` (`None`: every partition); see
    /// [`crate::elect_leaders`].
    pub fn elect_leaders(
        &mut self,
        election: crate::elect_leaders::ElectionType,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<Vec<crate::elect_leaders::TopicElectionResult>, ControllerError> {
        let result = self.cluster.elect_leaders(&self.image, election, topics);
        self.commit_result(result)
    }

    /// UnregisterBroker (API 64): moves the broker's leaderships away and removes it.
    pub fn unregister_broker(&mut self, broker_id: i32) -> Result<(), ControllerError> {
        let result = self.cluster.unregister_broker(&self.image, broker_id)?;
        self.commit_result(result)
    }

    /// AllocateProducerIds (API 67): the next block of 1000 ids for a registered broker.
    pub fn allocate_producer_id_block(
        &mut self,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<std::ops::Range<i64>, ControllerError> {
        let result = self.cluster.allocate_producer_ids(&self.image, broker_id, broker_epoch)?;
        self.commit_result(result)
    }

    /// Fences every broker whose session timed out by `now_ms`, one at a time, each
    /// election seeing the previous one's result. Returns the fenced broker ids.
    pub fn tick(&mut self, now_ms: i64) -> Result<Vec<i32>, ControllerError> {
        let mut fenced = Vec::new();
        loop {
            let result = self.cluster.tick(&self.image, now_ms);
            match self.commit_result(result)? {
                Some(id) => fenced.push(id),
                None => return Ok(fenced),
            }
        }
    }

    /// When `tick` next has work: the earliest session deadline of an unfenced broker.
    pub fn next_deadline(&self) -> Option<i64> {
        self.cluster.next_deadline(&self.image)
    }

    fn commit_result<T>(&mut self, result: ControllerResult<T>) -> Result<T, ControllerError> {
        if !result.records.is_empty() {
            self.commit(result.records)?;
        }
        Ok(result.response)
    }

    /// Sets the cluster-wide partition limit (`osprey.max.partitions`).
    pub fn set_max_partitions(&mut self, max_partitions: i32) {
        self.topics.set_max_partitions(max_partitions);
    }

    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// Validates and (unless `validate_only`) creates a topic. Returns its image.
    pub fn create_topic(
        &mut self,
        topic: &NewTopic,
        validate_only: bool,
        validate_config: ConfigValidator<'_>,
    ) -> Result<TopicImage, ControllerError> {
        let result = self.topics.create_topic(&self.image, topic, validate_only, validate_config)?;
        let preview = self.commit_result(result)?;
        if validate_only {
            return Ok(preview);
        }
        self.image.topic(&topic.name).cloned().ok_or_else(|| internal("created topic is missing"))
    }

    /// Deletes a topic by name; returns its id.
    pub fn delete_topic(&mut self, name: &str) -> Result<Uuid, ControllerError> {
        let result = self.topics.delete_topic(&self.image, name)?;
        self.commit_result(result)
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(&mut self, name: &str, count: i32, validate_only: bool) -> Result<(), ControllerError> {
        let result = self.topics.create_partitions(&self.image, name, count, validate_only)?;
        self.commit_result(result)
    }

    /// Sets (`Some`) or resets (`None`) topic configs, all or nothing.
    pub fn set_topic_configs(
        &mut self,
        name: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate_config: ConfigValidator<'_>,
    ) -> Result<(), ControllerError> {
        let result = self.topics.set_topic_configs(&self.image, name, changes, validate_only, validate_config)?;
        self.commit_result(result)
    }

    /// Sets (`Some`) or resets (`None`) a group's configs, all or nothing (see
    /// `TopicControl::set_group_configs`).
    pub fn set_group_configs(
        &mut self,
        group: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate: GroupConfigValidator<'_>,
    ) -> Result<(), ControllerError> {
        let result = self.topics.set_group_configs(&self.image, group, changes, validate_only, validate)?;
        self.commit_result(result)
    }

    /// Sets (`Some`) or resets (`None`) dynamic broker configs of `resource` (empty: the
    /// cluster-wide default; else a broker id), all or nothing (see
    /// `TopicControl::set_broker_configs`).
    pub fn set_broker_configs(
        &mut self,
        resource: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate: BrokerConfigValidator<'_>,
    ) -> Result<(), ControllerError> {
        let result = self.topics.set_broker_configs(&self.image, resource, changes, validate_only, validate)?;
        self.commit_result(result)
    }

    /// Reserves `count` producer ids, durably: ids of a block are never handed out again,
    /// even if the broker crashes before using them.
    pub fn allocate_producer_ids(&mut self, count: i64) -> Result<std::ops::Range<i64>, ControllerError> {
        let result = self.topics.allocate_producer_ids(&self.image, count)?;
        self.commit_result(result)
    }

    /// Commits records decided elsewhere, as if this controller had decided them: for
    /// tests that need a particular image (other brokers registered, partitions led by
    /// them, no leader) without driving every decision that leads there.
    /// AlterPartitionReassignments on a single node, whose one broker (`node_id`) is not
    /// registered in its image: the decision sees it registered and active, so a target
    /// naming it is valid and any other broker is unknown, as in a one-broker cluster.
    pub fn alter_partition_reassignments(
        &mut self,
        node_id: i32,
        allow_replication_factor_change: bool,
        topics: &[(String, Vec<ReassignmentTarget>)],
    ) -> Result<Vec<TopicReassignmentResult>, ControllerError> {
        let mut image = self.image.clone();
        if image.broker(node_id).is_none() {
            image.apply(&MetadataRecord::RegisterBroker {
                id: node_id,
                epoch: 0,
                incarnation: [0; 16],
                listeners: Vec::new(),
                rack: None,
                fenced: false,
                in_controlled_shutdown: false,
            });
        }
        let result = self.cluster.alter_partition_reassignments(&image, allow_replication_factor_change, topics);
        self.commit(result.records)?;
        Ok(result.response)
    }

    pub fn commit_records(&mut self, records: Vec<MetadataRecord>) -> Result<(), ControllerError> {
        self.commit(records)
    }

    fn commit(&mut self, records: Vec<MetadataRecord>) -> Result<(), ControllerError> {
        if let Some(log) = &mut self.log {
            log.append(&records).map_err(|e| {
                tracing::error!(error = %e, file = %log.path().display(), "metadata log write failed");
                ControllerError::new(ErrorCode::KAFKA_STORAGE_ERROR, format!("metadata log write failed: {e}"))
            })?;
        }
        for r in &records {
            self.image.apply(r);
        }
        Ok(())
    }
}

/// Kafka's topic name rules: 1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ControllerError> {
    let bad = |why: String| Err(ControllerError::new(ErrorCode::INVALID_TOPIC_EXCEPTION, why));
    if name.is_empty() {
        return bad("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return bad("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > 249 {
        return bad(format!("Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-') {
        return bad(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

fn internal(what: &str) -> ControllerError {
    ControllerError::new(ErrorCode::UNKNOWN_SERVER_ERROR, what)
}

/// A random, non-zero UUID (topic ids, cluster ids).
pub fn random_uuid() -> io::Result<Uuid> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(|e| io::Error::other(e.to_string()))?;
    if id == [0; 16] {
        id[15] = 1;
    }
    Ok(Uuid(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller(name: &str, brokers: Vec<i32>) -> Controller {
        let dir = std::env::temp_dir().join(format!("osprey-controller-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Controller::open(&dir.join("metadata.log"), brokers, 1, 1).unwrap()
    }

    fn accept_all(_: &str, _: &str) -> Result<(), String> {
        Ok(())
    }

    fn topic(name: &str, partitions: i32, rf: i16) -> NewTopic {
        NewTopic { name: name.into(), num_partitions: partitions, replication_factor: rf, ..Default::default() }
    }

    #[test]
    fn a_single_node_is_the_only_broker_a_reassignment_may_name() {
        let mut c = controller("reassign", vec![1]);
        c.create_topic(&topic("t", 1, 1), false, &accept_all).unwrap();
        let applied = c.image().applied;
        let ask = |replicas: Option<Vec<i32>>| {
            vec![("t".to_string(), vec![ReassignmentTarget { partition_index: 0, replicas }])]
        };
        let answer = |results: Vec<TopicReassignmentResult>| results[0].partitions[0].clone();
        let same = answer(c.alter_partition_reassignments(1, true, &ask(Some(vec![1]))).unwrap());
        assert_eq!((same.error, same.message), (ErrorCode::NONE, None));
        let elsewhere = answer(c.alter_partition_reassignments(1, true, &ask(Some(vec![1, 2]))).unwrap());
        assert_eq!(
            (elsewhere.error, elsewhere.message.as_deref()),
            (
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                Some("The manual partition assignment includes broker 2, but no such broker is registered.")
            )
        );
        let cancel = answer(c.alter_partition_reassignments(1, true, &ask(None)).unwrap());
        assert_eq!(cancel.error, ErrorCode::NO_REASSIGNMENT_IN_PROGRESS);
        assert_eq!(c.image().applied, applied, "nothing written");
        assert!(c.image().broker(1).is_none(), "the node was registered only for the decision");
        assert!(crate::reassignment::list_partition_reassignments(c.image(), None).is_empty());
    }

    #[test]
    fn created_topics_survive_reopen() {
        let dir = std::env::temp_dir().join(format!("osprey-controller-reopen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metadata.log");
        let mut c = Controller::open(&path, vec![1], 1, 1).unwrap();
        let t = c.create_topic(&topic("orders", 3, 1), false, &accept_all).unwrap();
        c.create_partitions("orders", 5, false).unwrap();
        drop(c);
        let c = Controller::open(&path, vec![1], 1, 1).unwrap();
        let again = c.image().topic("orders").unwrap();
        assert_eq!(again.id, t.id);
        assert_eq!(again.partitions.len(), 5);
    }

    #[test]
    fn broker_configs_survive_reopen_and_a_refused_set_writes_nothing() {
        let dir = std::env::temp_dir().join(format!("osprey-controller-broker-configs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metadata.log");
        let only_retention =
            |configs: &BTreeMap<String, String>| match configs.keys().find(|k| *k != "log.retention.ms") {
                Some(k) => Err(ControllerError::new(ErrorCode::INVALID_REQUEST, format!("not dynamic: {k}"))),
                None => Ok(()),
            };
        let set = |k: &str, v: Option<&str>| vec![(k.to_string(), v.map(str::to_string))];
        let mut c = Controller::open(&path, vec![1], 1, 1).unwrap();
        c.set_broker_configs("", &set("log.retention.ms", Some("60000")), false, &only_retention).unwrap();
        c.set_broker_configs("1", &set("log.retention.ms", Some("30000")), false, &only_retention).unwrap();
        c.set_broker_configs("1", &set("log.retention.ms", Some("1")), true, &only_retention).unwrap();
        let refused = c.set_broker_configs("", &set("log.dirs", Some("/x")), false, &only_retention);
        assert_eq!(refused.unwrap_err().code, ErrorCode::INVALID_REQUEST);
        drop(c);
        let mut c = Controller::open(&path, vec![1], 1, 1).unwrap();
        assert_eq!(c.image().broker_configs("").unwrap().len(), 1, "nothing of the refused change");
        assert_eq!(c.image().broker_configs("").unwrap()["log.retention.ms"], "60000");
        assert_eq!(c.image().broker_configs("1").unwrap()["log.retention.ms"], "30000", "not the validate-only value");
        c.set_broker_configs("1", &set("log.retention.ms", None), false, &only_retention).unwrap();
        drop(c);
        let c = Controller::open(&path, vec![1], 1, 1).unwrap();
        assert!(c.image().broker_configs("1").is_none(), "the deletion is durable too");
    }

    #[test]
    fn kafka_errors_for_bad_topics() {
        let mut c = controller("errors", vec![1]);
        let code = |r: Result<TopicImage, ControllerError>| r.unwrap_err().code;
        assert_eq!(code(c.create_topic(&topic("a b", 1, 1), false, &accept_all)), ErrorCode::INVALID_TOPIC_EXCEPTION);
        assert_eq!(code(c.create_topic(&topic("a", 0, 1), false, &accept_all)), ErrorCode::INVALID_PARTITIONS);
        let huge = topic("a", MAX_PARTITIONS_PER_TOPIC + 1, 1);
        assert_eq!(code(c.create_topic(&huge, false, &accept_all)), ErrorCode::INVALID_PARTITIONS);
        assert_eq!(code(c.create_topic(&topic("a", 1, 3), false, &accept_all)), ErrorCode::INVALID_REPLICATION_FACTOR);
        let reject = |_: &str, _: &str| Err("nope".to_string());
        let mut with_config = topic("a", 1, 1);
        with_config.configs.insert("retention.ms".into(), "x".into());
        assert_eq!(code(c.create_topic(&with_config, false, &reject)), ErrorCode::INVALID_CONFIG);
        c.create_topic(&topic("a", 1, 1), false, &accept_all).unwrap();
        assert_eq!(code(c.create_topic(&topic("a", 1, 1), false, &accept_all)), ErrorCode::TOPIC_ALREADY_EXISTS);
        assert_eq!(c.create_partitions("a", 1, false).unwrap_err().code, ErrorCode::INVALID_PARTITIONS);
        assert_eq!(c.delete_topic("zzz").unwrap_err().code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    }

    #[test]
    fn cluster_partition_limit_counts_every_topic() {
        let mut c = controller("limit", vec![1]);
        c.set_max_partitions(10);
        c.create_topic(&topic("a", 6, 1), false, &accept_all).unwrap();
        let err = c.create_topic(&topic("b", 5, 1), true, &accept_all).unwrap_err();
        assert_eq!(err.code, ErrorCode::POLICY_VIOLATION);
        assert!(err.message.contains("osprey.max.partitions (10)"), "{}", err.message);
        assert_eq!(c.create_partitions("a", 11, false).unwrap_err().code, ErrorCode::POLICY_VIOLATION);
        c.create_topic(&topic("b", 4, 1), false, &accept_all).unwrap();
        assert_eq!(c.create_partitions("a", 7, false).unwrap_err().code, ErrorCode::POLICY_VIOLATION);
    }

    #[test]
    fn validate_only_changes_nothing() {
        let mut c = controller("validate", vec![1]);
        let t = c.create_topic(&topic("v", 4, -1), true, &accept_all).unwrap();
        assert_eq!(t.partitions.len(), 4);
        assert!(c.image().topic("v").is_none());
    }

    #[test]
    fn defaults_apply_when_counts_are_minus_one() {
        let mut c = controller("defaults", vec![1]);
        let t = c.create_topic(&topic("d", -1, -1), false, &accept_all).unwrap();
        assert_eq!(t.partitions.len(), 1);
        assert_eq!(t.partitions[0].replicas, vec![1]);
    }

    #[test]
    fn producer_id_blocks_never_repeat_across_reopen() {
        let dir = std::env::temp_dir().join(format!("osprey-controller-pids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metadata.log");
        let mut c = Controller::open(&path, vec![1], 1, 1).unwrap();
        assert_eq!(c.allocate_producer_ids(1000).unwrap(), 0..1000);
        assert_eq!(c.allocate_producer_ids(1000).unwrap(), 1000..2000);
        drop(c);
        let mut c = Controller::open(&path, vec![1], 1, 1).unwrap();
        assert_eq!(c.allocate_producer_ids(10).unwrap(), 2000..2010);
    }

    /// A controller for cluster id "c" with brokers 1..=n registered and unfenced at
    /// time 0, except `fenced`; racks r{id % 2}.
    fn cluster(name: &str, n: i32, fenced: &[i32]) -> Controller {
        let mut c = controller(name, vec![]);
        c.configure_cluster(ClusterControlConfig {
            cluster_id: Some("c".into()),
            broker_session_timeout_ms: 9_000,
            unclean_leader_election_enable: false,
            min_insync_replicas: 1,
            eligible_leader_replicas_enabled: true,
        });
        c.set_placement_seed(5);
        for id in 1..=n {
            let request = BrokerRegistrationInput {
                broker_id: id,
                cluster_id: "c".into(),
                incarnation_id: Uuid([id as u8; 16]),
                listeners: vec![],
                rack: Some(format!("r{}", id % 2)),
                previous_broker_epoch: -1,
            };
            let epoch = c.register_broker(&request, 0).unwrap();
            if !fenced.contains(&id) {
                let heartbeat = BrokerHeartbeatInput {
                    broker_id: id,
                    broker_epoch: epoch,
                    current_metadata_offset: epoch,
                    want_fence: false,
                    want_shut_down: false,
                };
                assert!(!c.broker_heartbeat(&heartbeat, 0).unwrap().is_fenced);
            }
        }
        c
    }

    #[test]
    fn create_topic_places_over_registered_brokers_with_fenced_ones_out_of_the_isr() {
        let mut c = cluster("placed", 4, &[4]);
        let t = c.create_topic(&topic("p", 8, 3), false, &accept_all).unwrap();
        for p in &t.partitions {
            assert_eq!(p.replicas.len(), 3);
            assert_ne!(p.leader, 4, "a fenced broker never leads");
            assert_eq!(p.leader, p.isr[0]);
            assert!(!p.isr.contains(&4), "a fenced broker is not in the ISR: {p:?}");
        }
        let err = c.create_topic(&topic("q", 1, 5), false, &accept_all).unwrap_err();
        assert_eq!(err.code, ErrorCode::INVALID_REPLICATION_FACTOR);
        assert_eq!(
            err.message,
            "Unable to replicate the partition 5 time(s): The target replication factor of 5 cannot be reached because only 4 broker(s) are registered."
        );
        c.create_partitions("p", 10, false).unwrap();
        assert!(c.image().topic("p").unwrap().partitions[9].replicas.len() == 3);
    }

    #[test]
    fn manual_assignments_are_checked_with_kafkas_messages() {
        let mut c = cluster("manual", 3, &[3]);
        let manual = |assignments: Vec<(i32, Vec<i32>)>| NewTopic {
            name: "m".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments,
            configs: BTreeMap::new(),
        };
        let message = |c: &mut Controller, a: Vec<(i32, Vec<i32>)>| {
            let err = c.create_topic(&manual(a), false, &accept_all).unwrap_err();
            assert_eq!(err.code, ErrorCode::INVALID_REPLICA_ASSIGNMENT);
            err.message
        };
        assert_eq!(
            message(&mut c, vec![(0, vec![1, 9])]),
            "The manual partition assignment includes broker 9, but no such broker is registered."
        );
        assert_eq!(
            message(&mut c, vec![(0, vec![1, 2, 1])]),
            "The manual partition assignment includes the broker 1 more than once."
        );
        assert_eq!(
            message(&mut c, vec![(0, vec![])]),
            "The manual partition assignment includes an empty replica list."
        );
        assert_eq!(
            message(&mut c, vec![(0, vec![1]), (0, vec![2])]),
            "Found multiple manual partition assignments for partition 0"
        );
        assert_eq!(
            message(&mut c, vec![(0, vec![1, 2]), (1, vec![2])]),
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s)."
        );
        assert_eq!(
            message(&mut c, vec![(0, vec![3])]),
            "All brokers specified in the manual partition assignment for partition 0 are fenced or in controlled shutdown."
        );
        assert_eq!(
            message(&mut c, vec![(0, vec![1]), (2, vec![2])]),
            "partitions should be a consecutive 0-based integer sequence"
        );
        let mut both = manual(vec![(0, vec![1])]);
        both.num_partitions = 1;
        assert_eq!(c.create_topic(&both, false, &accept_all).unwrap_err().code, ErrorCode::INVALID_REQUEST);
        let t = c.create_topic(&manual(vec![(1, vec![2, 3]), (0, vec![3, 1])]), false, &accept_all).unwrap();
        let p0 = &t.partitions[0];
        assert_eq!((p0.replicas.clone(), p0.isr.clone(), p0.leader), (vec![3, 1], vec![1], 1));
        assert_eq!(t.partitions[1].isr, vec![2]);
    }

    #[test]
    fn registrations_and_fencing_survive_reopen() {
        let dir = std::env::temp_dir().join(format!("osprey-controller-brokers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metadata.log");
        let mut c = Controller::open(&path, vec![], 1, 1).unwrap();
        c.configure_cluster(ClusterControlConfig {
            cluster_id: Some("c".into()),
            broker_session_timeout_ms: 100,
            unclean_leader_election_enable: false,
            min_insync_replicas: 1,
            eligible_leader_replicas_enabled: true,
        });
        for id in [1, 2] {
            let request = BrokerRegistrationInput {
                broker_id: id,
                cluster_id: "c".into(),
                incarnation_id: Uuid([id as u8; 16]),
                listeners: vec![],
                rack: None,
                previous_broker_epoch: -1,
            };
            let epoch = c.register_broker(&request, 0).unwrap();
            let heartbeat = BrokerHeartbeatInput {
                broker_id: id,
                broker_epoch: epoch,
                current_metadata_offset: epoch,
                want_fence: false,
                want_shut_down: false,
            };
            c.broker_heartbeat(&heartbeat, 0).unwrap();
        }
        c.create_topic(&topic("t", 2, 2), false, &accept_all).unwrap();
        let epoch2 = c.image().broker(2).unwrap().epoch;
        let heartbeat = BrokerHeartbeatInput {
            broker_id: 2,
            broker_epoch: epoch2,
            current_metadata_offset: 0,
            want_fence: false,
            want_shut_down: false,
        };
        c.broker_heartbeat(&heartbeat, 80).unwrap();
        assert_eq!(c.next_deadline(), Some(100));
        assert_eq!(c.tick(101).unwrap(), vec![1]);
        assert_eq!(c.allocate_producer_id_block(2, epoch2).unwrap(), 0..1000);
        drop(c);
        let c = Controller::open(&path, vec![], 1, 1).unwrap();
        assert!(c.image().broker(1).unwrap().fenced);
        assert!(!c.image().broker(2).unwrap().fenced);
        assert!(c.image().topic("t").unwrap().partitions.iter().all(|p| p.leader == 2 && p.isr == vec![2]));
        assert_eq!(c.image().next_producer_id, 1000);
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("a.b_c-D9").is_ok());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
        assert!(validate_topic_name("").is_err());
    }
}
