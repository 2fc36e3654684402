//! The controller's topic, config and producer-id decisions, sans-I/O (Kafka's
//! `ReplicationControlManager` topic parts, `ConfigurationControlManager` and
//! `ProducerIdControlManager`).
//!
//! Like [`ClusterControl`](crate::cluster_control::ClusterControl), every decision reads
//! an image and returns the records to commit with the answer ([`ControllerResult`]);
//! nothing is written here. The single node's [`Controller`](crate::Controller) commits
//! them to its log; the active controller decides on its speculative image (the applied
//! image plus the records proposed and not yet applied) and proposes them to the quorum.

use crate::cluster_control::ControllerResult;
use crate::controller::{
    random_uuid, validate_topic_name, BrokerConfigValidator, ConfigValidator, ControllerError, GroupConfigValidator,
    NewTopic, MAX_PARTITIONS_PER_TOPIC,
};
use crate::image::{MetadataImage, MetadataRecord, TopicImage};
use crate::placement::{self, SeededRandom, UsableBroker};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::BTreeMap;
use std::ops::Range;

/// The topic decisions' settings and the placer's random source.
#[derive(Debug)]
pub struct TopicControl {
    /// Replicas go to these ids before any broker registered (a single node).
    brokers: Vec<i32>,
    /// `num.partitions`.
    default_partitions: i32,
    /// `default.replication.factor`.
    default_replication_factor: i16,
    /// `osprey.max.partitions`: the most partitions the cluster may hold.
    max_partitions: i64,
    /// The striped placer's random source.
    placement_random: SeededRandom,
}

impl TopicControl {
    pub fn new(brokers: Vec<i32>, default_partitions: i32, default_replication_factor: i16) -> TopicControl {
        TopicControl {
            brokers,
            default_partitions,
            default_replication_factor,
            max_partitions: i64::from(MAX_PARTITIONS_PER_TOPIC),
            placement_random: SeededRandom::from_entropy(),
        }
    }

    /// Seeds the placer (tests and simulations replay a placement from its seed).
    pub fn set_placement_seed(&mut self, seed: u64) {
        self.placement_random = SeededRandom::new(seed);
    }

    /// Sets the cluster-wide partition limit (`osprey.max.partitions`).
    pub fn set_max_partitions(&mut self, max_partitions: i32) {
        self.max_partitions = i64::from(max_partitions.max(1));
    }

    /// CreateTopics for one topic: validates it and places its replicas; the answer is
    /// the topic as it will be once the record is applied. Validate-only writes nothing.
    pub fn create_topic(
        &mut self,
        image: &MetadataImage,
        topic: &NewTopic,
        validate_only: bool,
        validate_config: ConfigValidator<'_>,
    ) -> Result<ControllerResult<TopicImage>, ControllerError> {
        validate_topic_name(&topic.name)?;
        if image.topic(&topic.name).is_some() {
            return Err(ControllerError::new(
                ErrorCode::TOPIC_ALREADY_EXISTS,
                format!("Topic '{}' already exists.", topic.name),
            ));
        }
        for (k, v) in &topic.configs {
            validate_config(k, v).map_err(|m| ControllerError::new(ErrorCode::INVALID_CONFIG, m))?;
        }
        let replicas = self.assign(image, topic)?;
        self.check_partition_limit(image, replicas.len())?;
        let id = random_uuid().map_err(|e| ControllerError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string()))?;
        let record = MetadataRecord::CreateTopic {
            name: topic.name.clone(),
            id: id.0,
            isrs: self.initial_isrs(image, &replicas),
            replicas,
            configs: topic.configs.clone(),
        };
        let mut preview = MetadataImage::default();
        preview.apply(&record);
        let created = preview.topic(&topic.name).cloned().ok_or_else(|| internal("preview lost the topic"))?;
        let records = if validate_only { Vec::new() } else { vec![record] };
        Ok(ControllerResult { records, response: created })
    }

    /// DeleteTopics for one topic name; the answer is its id.
    pub fn delete_topic(&self, image: &MetadataImage, name: &str) -> Result<ControllerResult<Uuid>, ControllerError> {
        let id = image.topic(name).map(|t| t.id).ok_or_else(|| unknown_topic(name))?;
        Ok(ControllerResult { records: vec![MetadataRecord::DeleteTopic { id: id.0 }], response: id })
    }

    /// CreatePartitions: grows a topic to `count` partitions.
    pub fn create_partitions(
        &mut self,
        image: &MetadataImage,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<ControllerResult<()>, ControllerError> {
        let topic = image.topic(name).ok_or_else(|| unknown_topic(name))?;
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
        self.check_partition_limit(image, (count - current) as usize)?;
        let rf = topic.partitions.first().map_or(1, |p| p.replicas.len());
        let id = topic.id.0;
        let replicas = self.place(image, (count - current) as usize, rf.min(i16::MAX as usize) as i16)?;
        let mut records = Vec::new();
        if !validate_only {
            let isrs = self.initial_isrs(image, &replicas);
            records.push(MetadataRecord::CreatePartitions { id, replicas, isrs });
        }
        Ok(ControllerResult { records, response: () })
    }

    /// Sets (`Some`) or resets (`None`) topic configs, all or nothing.
    pub fn set_topic_configs(
        &self,
        image: &MetadataImage,
        name: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate_config: ConfigValidator<'_>,
    ) -> Result<ControllerResult<()>, ControllerError> {
        let id = image.topic(name).map(|t| t.id).ok_or_else(|| unknown_topic(name))?;
        for (k, v) in changes {
            if let Some(v) = v {
                validate_config(k, v).map_err(|m| ControllerError::new(ErrorCode::INVALID_CONFIG, m))?;
            }
        }
        let records = if validate_only {
            Vec::new()
        } else {
            changes
                .iter()
                .map(|(k, v)| MetadataRecord::SetTopicConfig { id: id.0, key: k.clone(), value: v.clone() })
                .collect()
        };
        Ok(ControllerResult { records, response: () })
    }

    /// Sets (`Some`) or resets (`None`) a group's configs, all or nothing: the group's
    /// whole set after the change must pass `validate` (Kafka checks the heartbeat
    /// interval against the session timeout, so one key is not checked alone).
    pub fn set_group_configs(
        &self,
        image: &MetadataImage,
        group: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate: GroupConfigValidator<'_>,
    ) -> Result<ControllerResult<()>, ControllerError> {
        if group.is_empty() {
            return Err(ControllerError::new(ErrorCode::INVALID_REQUEST, "Group name must not be empty"));
        }
        let after = with_changes(image.group_configs(group), changes);
        validate(&after).map_err(|m| ControllerError::new(ErrorCode::INVALID_CONFIG, m))?;
        let records = if validate_only {
            Vec::new()
        } else {
            changes
                .iter()
                .map(|(k, v)| MetadataRecord::SetGroupConfig {
                    group: group.to_string(),
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect()
        };
        Ok(ControllerResult { records, response: () })
    }

    /// Sets (`Some`) or resets (`None`) dynamic broker configs of `resource` (empty: the
    /// cluster-wide default; else a broker id), all or nothing: the resource's whole set
    /// after the change must pass `validate`, which the broker gives (it knows which keys
    /// are dynamic and how to check them).
    pub fn set_broker_configs(
        &self,
        image: &MetadataImage,
        resource: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
        validate: BrokerConfigValidator<'_>,
    ) -> Result<ControllerResult<()>, ControllerError> {
        validate(&with_changes(image.broker_configs(resource), changes))?;
        let records = if validate_only {
            Vec::new()
        } else {
            changes
                .iter()
                .map(|(k, v)| MetadataRecord::SetBrokerConfig {
                    resource: resource.to_string(),
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect()
        };
        Ok(ControllerResult { records, response: () })
    }

    /// Reserves the next `count` producer ids: once the record commits, they are never
    /// handed out again, even if the broker crashes before using them.
    pub fn allocate_producer_ids(
        &self,
        image: &MetadataImage,
        count: i64,
    ) -> Result<ControllerResult<Range<i64>>, ControllerError> {
        let start = image.next_producer_id;
        let next = start.checked_add(count).ok_or_else(|| internal("producer ids exhausted"))?;
        Ok(ControllerResult { records: vec![MetadataRecord::ProducerIdsAllocated { next }], response: start..next })
    }

    /// Replica lists for a new topic: the explicit assignments, validated as Kafka's
    /// `validateManualPartitionAssignment`, or the striped placer's over usable brokers.
    fn assign(&mut self, image: &MetadataImage, topic: &NewTopic) -> Result<Vec<Vec<i32>>, ControllerError> {
        if !topic.assignments.is_empty() {
            if topic.replication_factor != -1 {
                return Err(ControllerError::new(
                    ErrorCode::INVALID_REQUEST,
                    "A manual partition assignment was specified, but replication factor was not set to -1.",
                ));
            }
            if topic.num_partitions != -1 {
                return Err(ControllerError::new(
                    ErrorCode::INVALID_REQUEST,
                    "A manual partition assignment was specified, but numPartitions was not set to -1.",
                ));
            }
            return self.manual_assignment(image, &topic.assignments);
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
        self.place(image, partitions as usize, rf)
    }

    /// The striped placer over the usable brokers, its error prefixed as Kafka's
    /// `ReplicationControlManager` does.
    fn place(&mut self, image: &MetadataImage, partitions: usize, rf: i16) -> Result<Vec<Vec<i32>>, ControllerError> {
        let brokers = self.usable_brokers(image);
        placement::place(&mut self.placement_random, &brokers, partitions, rf).map_err(|e| {
            ControllerError::new(e.code, format!("Unable to replicate the partition {rf} time(s): {}", e.message))
        })
    }

    /// Kafka's checks of CreateTopics' explicit assignments, in Kafka's order and words.
    fn manual_assignment(
        &self,
        image: &MetadataImage,
        assignments: &[(i32, Vec<i32>)],
    ) -> Result<Vec<Vec<i32>>, ControllerError> {
        let invalid = |m: String| Err(ControllerError::new(ErrorCode::INVALID_REPLICA_ASSIGNMENT, m));
        let mut by_index: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        let mut replication_factor: Option<usize> = None;
        for (p, replicas) in assignments {
            if by_index.contains_key(p) {
                return invalid(format!("Found multiple manual partition assignments for partition {p}"));
            }
            if replicas.is_empty() {
                return invalid("The manual partition assignment includes an empty replica list.".into());
            }
            let mut sorted = replicas.clone();
            sorted.sort_unstable();
            for (i, b) in sorted.iter().enumerate() {
                if !self.is_registered(image, *b) {
                    return invalid(format!(
                        "The manual partition assignment includes broker {b}, but no such broker is registered."
                    ));
                }
                if i > 0 && sorted[i - 1] == *b {
                    return invalid(format!("The manual partition assignment includes the broker {b} more than once."));
                }
            }
            if let Some(rf) = replication_factor.filter(|rf| *rf != replicas.len()) {
                return invalid(format!(
                    "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                    replicas.len()
                ));
            }
            replication_factor = Some(replicas.len());
            if !replicas.iter().any(|b| self.is_active(image, *b)) {
                return invalid(format!(
                    "All brokers specified in the manual partition assignment for partition {p} are fenced or in controlled shutdown."
                ));
            }
            by_index.insert(*p, replicas.clone());
        }
        if by_index.keys().enumerate().any(|(i, p)| *p != i as i32) {
            return invalid("partitions should be a consecutive 0-based integer sequence".into());
        }
        Ok(by_index.into_values().collect())
    }

    /// Brokers replicas may go to: the registered ones not in controlled shutdown, or,
    /// before any broker registered (a single node), the configured broker ids.
    fn usable_brokers(&self, image: &MetadataImage) -> Vec<UsableBroker> {
        if image.brokers().next().is_none() {
            return self.brokers.iter().map(|&id| UsableBroker { id, rack: None, fenced: false }).collect();
        }
        image
            .brokers()
            .filter(|b| !b.in_controlled_shutdown)
            .map(|b| UsableBroker { id: b.id, rack: b.rack.clone(), fenced: b.fenced })
            .collect()
    }

    fn is_registered(&self, image: &MetadataImage, id: i32) -> bool {
        match image.brokers().next() {
            None => self.brokers.contains(&id),
            Some(_) => image.broker(id).is_some(),
        }
    }

    /// May lead and be in an ISR (Kafka's `isActive`).
    fn is_active(&self, image: &MetadataImage, id: i32) -> bool {
        match image.brokers().next() {
            None => self.brokers.contains(&id),
            Some(_) => image.broker(id).is_some_and(|b| b.is_active()),
        }
    }

    /// The ISR of each new partition: its active replicas (Kafka's
    /// `buildPartitionRegistration`). `None` when every ISR is the whole replica list,
    /// so the record reads as it always has.
    fn initial_isrs(&self, image: &MetadataImage, replicas: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let isrs: Vec<Vec<i32>> =
            replicas.iter().map(|r| r.iter().copied().filter(|&b| self.is_active(image, b)).collect()).collect();
        (isrs.as_slice() != replicas).then_some(isrs)
    }

    /// Refuses to grow the cluster past `osprey.max.partitions`: every partition is a
    /// directory, files and memory on every replica, and start-up and shutdown take
    /// time in proportion to them.
    fn check_partition_limit(&self, image: &MetadataImage, adding: usize) -> Result<(), ControllerError> {
        let existing: usize = image.topics().map(|t| t.partitions.len()).sum();
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

    fn accept_all(_: &str, _: &str) -> Result<(), String> {
        Ok(())
    }

    fn topic(name: &str, partitions: i32, rf: i16) -> NewTopic {
        NewTopic { name: name.into(), num_partitions: partitions, replication_factor: rf, ..Default::default() }
    }

    fn apply(image: &mut MetadataImage, records: &[MetadataRecord]) {
        for r in records {
            image.apply(r);
        }
    }

    #[test]
    fn decisions_write_nothing_and_their_records_give_the_answer() {
        let mut control = TopicControl::new(vec![1, 2], 1, 1);
        control.set_placement_seed(3);
        let mut image = MetadataImage::default();
        let created = control.create_topic(&image, &topic("t", 4, 2), false, &accept_all).unwrap();
        assert!(image.topic("t").is_none(), "deciding applies nothing");
        assert_eq!(created.records.len(), 1);
        apply(&mut image, &created.records);
        assert_eq!(image.topic("t").unwrap(), &created.response, "the answer is the topic the record creates");

        let grown = control.create_partitions(&image, "t", 6, false).unwrap();
        apply(&mut image, &grown.records);
        assert_eq!(image.topic("t").unwrap().partitions.len(), 6);

        let pids = control.allocate_producer_ids(&image, 1000).unwrap();
        assert_eq!(pids.response, 0..1000);
        apply(&mut image, &pids.records);
        assert_eq!(control.allocate_producer_ids(&image, 1000).unwrap().response, 1000..2000);
    }

    #[test]
    fn validate_only_decisions_have_no_records() {
        let mut control = TopicControl::new(vec![1], 1, 1);
        let image = MetadataImage::default();
        let created = control.create_topic(&image, &topic("v", 2, 1), true, &accept_all).unwrap();
        assert!(created.records.is_empty());
        assert_eq!(created.response.partitions.len(), 2);
        let config = control.set_broker_configs(&image, "", &[("k".into(), Some("v".into()))], true, &|_| Ok(()));
        assert!(config.unwrap().records.is_empty());
    }

    #[test]
    fn a_decision_on_a_speculative_image_sees_earlier_undecided_records() {
        // The active controller decides request after request before any commits: a
        // delete must see the create decided just before it.
        let mut control = TopicControl::new(vec![1], 1, 1);
        let mut speculative = MetadataImage::default();
        let created = control.create_topic(&speculative, &topic("x", 1, 1), false, &accept_all).unwrap();
        apply(&mut speculative, &created.records);
        let again = control.create_topic(&speculative, &topic("x", 1, 1), false, &accept_all);
        assert_eq!(again.unwrap_err().code, ErrorCode::TOPIC_ALREADY_EXISTS);
        let deleted = control.delete_topic(&speculative, "x").unwrap();
        assert_eq!(deleted.response, created.response.id);
        apply(&mut speculative, &deleted.records);
        assert_eq!(control.delete_topic(&speculative, "x").unwrap_err().code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    }

    fn registered(image: &mut MetadataImage, ids: &[i32]) {
        for &id in ids {
            image.apply(&MetadataRecord::RegisterBroker {
                id,
                epoch: i64::from(id),
                incarnation: [id as u8; 16],
                listeners: Vec::new(),
                rack: None,
                fenced: false,
                in_controlled_shutdown: false,
            });
        }
    }

    #[test]
    fn replicas_spread_over_the_brokers_and_beyond_them_keep_kafkas_message() {
        let mut control = TopicControl::new(vec![], 1, 3);
        let mut image = MetadataImage::default();
        registered(&mut image, &[1, 2, 3]);
        let created = control.create_topic(&image, &topic("rf3", 2, -1), false, &accept_all).unwrap();
        apply(&mut image, &created.records);
        for p in &image.topic("rf3").unwrap().partitions {
            let mut replicas = p.replicas.clone();
            replicas.sort_unstable();
            assert_eq!(replicas, vec![1, 2, 3], "default.replication.factor=3 puts a replica on each broker");
            assert_eq!(p.isr.len(), 3);
        }
        let too_many = control.create_topic(&image, &topic("rf4", 1, 4), false, &accept_all).unwrap_err();
        assert_eq!(too_many.code, ErrorCode::INVALID_REPLICATION_FACTOR);
        assert!(too_many.message.starts_with("Unable to replicate the partition 4 time(s)"), "{}", too_many.message);
    }
}
