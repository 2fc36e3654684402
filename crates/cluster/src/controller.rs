//! The controller: validates admin operations against the current image, writes the
//! resulting records to the metadata log, then applies them.
//!
//! Today it runs inside the single broker process and its "quorum" is one fsynced file;
//! the openraft controller will keep this interface and replicate the records instead.

use crate::image::{MetadataImage, MetadataRecord, TopicImage};
use crate::log::MetadataLog;
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
    log: MetadataLog,
    image: MetadataImage,
    brokers: Vec<i32>,
    default_partitions: i32,
    default_replication_factor: i16,
    /// `osprey.max.partitions`: the most partitions the cluster may hold.
    max_partitions: i64,
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
        Ok(Controller {
            log,
            image,
            brokers,
            default_partitions,
            default_replication_factor,
            max_partitions: i64::from(MAX_PARTITIONS_PER_TOPIC),
        })
    }

    /// Sets the cluster-wide partition limit (`osprey.max.partitions`).
    pub fn set_max_partitions(&mut self, max_partitions: i32) {
        self.max_partitions = i64::from(max_partitions.max(1));
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
        validate_topic_name(&topic.name)?;
        if self.image.topic(&topic.name).is_some() {
            return Err(ControllerError::new(
                ErrorCode::TOPIC_ALREADY_EXISTS,
                format!("Topic '{}' already exists.", topic.name),
            ));
        }
        for (k, v) in &topic.configs {
            validate_config(k, v).map_err(|m| ControllerError::new(ErrorCode::INVALID_CONFIG, m))?;
        }
        let replicas = self.assign(topic)?;
        self.check_partition_limit(replicas.len())?;
        let id = random_uuid().map_err(|e| ControllerError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string()))?;
        let record = MetadataRecord::CreateTopic {
            name: topic.name.clone(),
            id: id.0,
            replicas: replicas.clone(),
            configs: topic.configs.clone(),
        };
        if validate_only {
            let mut preview = MetadataImage::default();
            preview.apply(&record);
            return preview.topic(&topic.name).cloned().ok_or_else(|| internal("preview lost the topic"));
        }
        self.commit(vec![record])?;
        self.image.topic(&topic.name).cloned().ok_or_else(|| internal("created topic is missing"))
    }

    /// Deletes a topic by name; returns its id.
    pub fn delete_topic(&mut self, name: &str) -> Result<Uuid, ControllerError> {
        let id = self.image.topic(name).map(|t| t.id).ok_or_else(|| unknown_topic(name))?;
        self.commit(vec![MetadataRecord::DeleteTopic { id: id.0 }])?;
        Ok(id)
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(&mut self, name: &str, count: i32, validate_only: bool) -> Result<(), ControllerError> {
        let topic = self.image.topic(name).ok_or_else(|| unknown_topic(name))?;
        let current = topic.partitions.len() as i32;
        if count < current {
            return Err(ControllerError::new(
                ErrorCode::INVALID_PARTITIONS,
                format!("Topic currently has {current} partitions, which is higher than the requested {count}."),
            ));
        }
        if count > MAX_PARTITIONS_PER_TOPIC {
            return Err(too_many_partitions(count));
        }
        if count == current {
            return Err(ControllerError::new(
                ErrorCode::INVALID_PARTITIONS,
                format!("Topic already has {current} partitions."),
            ));
        }
        self.check_partition_limit((count - current) as usize)?;
        let rf = topic.partitions.first().map_or(1, |p| p.replicas.len());
        let replicas = (current..count).map(|p| self.replicas_for(p, rf)).collect();
        if !validate_only {
            self.commit(vec![MetadataRecord::CreatePartitions { id: topic.id.0, replicas }])?;
        }
        Ok(())
    }

    /// Sets (`Some`) or resets (`None`) topic configs, all or nothing.
    pub fn set_topic_configs(
        &mut self,
        name: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate_config: ConfigValidator<'_>,
    ) -> Result<(), ControllerError> {
        let id = self.image.topic(name).map(|t| t.id).ok_or_else(|| unknown_topic(name))?;
        for (k, v) in changes {
            if let Some(v) = v {
                validate_config(k, v).map_err(|m| ControllerError::new(ErrorCode::INVALID_CONFIG, m))?;
            }
        }
        if validate_only || changes.is_empty() {
            return Ok(());
        }
        let records = changes
            .iter()
            .map(|(k, v)| MetadataRecord::SetTopicConfig { id: id.0, key: k.clone(), value: v.clone() })
            .collect();
        self.commit(records)
    }

    /// Sets (`Some`) or resets (`None`) a group's configs, all or nothing: the group's
    /// whole set after the change must pass `validate` (Kafka checks the heartbeat
    /// interval against the session timeout, so one key is not checked alone).
    pub fn set_group_configs(
        &mut self,
        group: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate: GroupConfigValidator<'_>,
    ) -> Result<(), ControllerError> {
        if group.is_empty() {
            return Err(ControllerError::new(ErrorCode::INVALID_REQUEST, "Group name must not be empty"));
        }
        let after = with_changes(self.image.group_configs(group), changes);
        validate(&after).map_err(|m| ControllerError::new(ErrorCode::INVALID_CONFIG, m))?;
        if validate_only || changes.is_empty() {
            return Ok(());
        }
        let records = changes
            .iter()
            .map(|(k, v)| MetadataRecord::SetGroupConfig { group: group.to_string(), key: k.clone(), value: v.clone() })
            .collect();
        self.commit(records)
    }

    /// Sets (`Some`) or resets (`None`) dynamic broker configs of `resource` (empty: the
    /// cluster-wide default; else a broker id), all or nothing: the resource's whole set
    /// after the change must pass `validate`, which the broker gives (it knows which keys
    /// are dynamic and how to check them).
    pub fn set_broker_configs(
        &mut self,
        resource: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate: BrokerConfigValidator<'_>,
    ) -> Result<(), ControllerError> {
        validate(&with_changes(self.image.broker_configs(resource), changes))?;
        if validate_only || changes.is_empty() {
            return Ok(());
        }
        let records = changes
            .iter()
            .map(|(k, v)| MetadataRecord::SetBrokerConfig {
                resource: resource.to_string(),
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        self.commit(records)
    }

    /// Reserves `count` producer ids, durably: ids of a block are never handed out again,
    /// even if the broker crashes before using them.
    pub fn allocate_producer_ids(&mut self, count: i64) -> Result<std::ops::Range<i64>, ControllerError> {
        let start = self.image.next_producer_id;
        let next = start.checked_add(count).ok_or_else(|| internal("producer ids exhausted"))?;
        self.commit(vec![MetadataRecord::ProducerIdsAllocated { next }])?;
        Ok(start..next)
    }

    fn assign(&self, topic: &NewTopic) -> Result<Vec<Vec<i32>>, ControllerError> {
        if !topic.assignments.is_empty() {
            if topic.num_partitions != -1 || topic.replication_factor != -1 {
                return Err(ControllerError::new(
                    ErrorCode::INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
                ));
            }
            let mut sorted = topic.assignments.clone();
            sorted.sort_by_key(|(p, _)| *p);
            for (i, (p, replicas)) in sorted.iter().enumerate() {
                if *p != i as i32 {
                    return Err(ControllerError::new(
                        ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                        "Partitions should be numbered consecutively from 0.",
                    ));
                }
                if replicas.is_empty() || replicas.iter().any(|r| !self.brokers.contains(r)) {
                    return Err(ControllerError::new(
                        ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                        format!(
                            "Partition {p} has an empty replica list or a replica that is not a registered broker."
                        ),
                    ));
                }
            }
            return Ok(sorted.into_iter().map(|(_, r)| r).collect());
        }
        let partitions = if topic.num_partitions == -1 { self.default_partitions } else { topic.num_partitions };
        if partitions <= 0 {
            return Err(ControllerError::new(
                ErrorCode::INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            ));
        }
        if partitions > MAX_PARTITIONS_PER_TOPIC {
            return Err(too_many_partitions(partitions));
        }
        let rf =
            if topic.replication_factor == -1 { self.default_replication_factor } else { topic.replication_factor };
        if rf <= 0 {
            return Err(ControllerError::new(
                ErrorCode::INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            ));
        }
        if rf as usize > self.brokers.len() {
            return Err(ControllerError::new(
                ErrorCode::INVALID_REPLICATION_FACTOR,
                format!(
                    "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered.",
                    self.brokers.len()
                ),
            ));
        }
        Ok((0..partitions).map(|p| self.replicas_for(p, rf as usize)).collect())
    }

    /// Round-robin replicas starting at a broker that moves with the partition index.
    fn replicas_for(&self, partition: i32, rf: usize) -> Vec<i32> {
        let n = self.brokers.len();
        (0..rf).map(|i| self.brokers[(partition as usize + i) % n]).collect()
    }

    /// Refuses to grow the cluster past `osprey.max.partitions`: every partition is a
    /// directory, files and memory on every replica, and start-up and shutdown take
    /// time in proportion to them.
    fn check_partition_limit(&self, adding: usize) -> Result<(), ControllerError> {
        let existing: usize = self.image.topics().map(|t| t.partitions.len()).sum();
        let total = (existing + adding) as i64;
        if total > self.max_partitions {
            return Err(ControllerError::new(
                ErrorCode::POLICY_VIOLATION,
                format!(
                    "Adding {adding} partitions would bring the cluster to {total}, more than osprey.max.partitions ({}); the cluster has {existing}.",
                    self.max_partitions
                ),
            ));
        }
        Ok(())
    }

    fn commit(&mut self, records: Vec<MetadataRecord>) -> Result<(), ControllerError> {
        self.log.append(&records).map_err(|e| {
            tracing::error!(error = %e, file = %self.log.path().display(), "metadata log write failed");
            ControllerError::new(ErrorCode::KAFKA_STORAGE_ERROR, format!("metadata log write failed: {e}"))
        })?;
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

fn too_many_partitions(n: i32) -> ControllerError {
    ControllerError::new(
        ErrorCode::INVALID_PARTITIONS,
        format!("{n} partitions is more than osprey allows in one topic ({MAX_PARTITIONS_PER_TOPIC})."),
    )
}

fn unknown_topic(name: &str) -> ControllerError {
    ControllerError::new(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic '{name}' does not exist."))
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

/// A resource's configs as they would be after `changes` (set `Some`, reset `None`).
fn with_changes(
    current: Option<&BTreeMap<String, String>>,
    changes: &[(String, Option<String>)],
) -> BTreeMap<String, String> {
    let mut after = current.cloned().unwrap_or_default();
    for (k, v) in changes {
        match v {
            Some(v) => after.insert(k.clone(), v.clone()),
            None => after.remove(k),
        };
    }
    after
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

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("a.b_c-D9").is_ok());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
        assert!(validate_topic_name("").is_err());
    }
}
