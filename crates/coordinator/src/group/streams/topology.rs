//! A streams group's topology configured against the cluster's topics: Kafka 4.4's
//! `InternalTopicManager.configureTopics` with `RepartitionTopics`,
//! `CopartitionedTopicsEnforcer` and `ChangelogTopics`.
//!
//! Source topics must exist (MISSING_SOURCE_TOPICS). A repartition topic without a
//! partition count takes the largest count among the source topics of the subtopology
//! writing it, resolved through chains of repartition topics; topics the topology says
//! are copartitioned must have one count, which repartition topics adopt
//! (INCORRECTLY_PARTITIONED_TOPICS when fixed counts disagree); a changelog topic has as
//! many partitions as its subtopology has tasks. Internal topics that do not exist are
//! to be created (MISSING_INTERNAL_TOPICS); one that exists with another partition count
//! is INCORRECTLY_PARTITIONED_TOPICS. A topology whose counts cannot be resolved at all
//! is invalid (STREAMS_INVALID_TOPOLOGY, an error of the heartbeat itself).

use super::StreamsTopology;
use crate::group::consumer::TopicsView;
use osprey_protocol::messages::streams_group_topology_value::{Subtopology, TopicInfo};
use std::collections::{BTreeMap, BTreeSet};

/// The status codes of StreamsGroupHeartbeatResponse (Kafka's
/// `StreamsGroupHeartbeatResponse.Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    StaleTopology = 0,
    MissingSourceTopics = 1,
    IncorrectlyPartitionedTopics = 2,
    MissingInternalTopics = 3,
    ShutdownApplication = 4,
    AssignmentDelayed = 5,
}

impl Status {
    pub fn code(self) -> i8 {
        self as i8
    }
}

/// Why a topology is not ready: Kafka's `TopicConfigurationException`, reported in the
/// heartbeat's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfigurationError {
    pub status: Status,
    pub message: String,
}

/// A topology that cannot be configured at all: Kafka's
/// `StreamsInvalidTopologyException` (STREAMS_INVALID_TOPOLOGY), or an internal
/// inconsistency Kafka reports as an `IllegalStateException` (UNKNOWN_SERVER_ERROR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidTopology {
    Invalid(String),
    Inconsistent(String),
}

/// An internal topic (repartition or changelog) with its decided partition count:
/// Kafka's `ConfiguredInternalTopic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopic {
    pub name: String,
    pub num_partitions: i32,
    /// `None`: the broker's default replication factor.
    pub replication_factor: Option<i16>,
    pub configs: BTreeMap<String, String>,
}

/// Kafka's `ConfiguredSubtopology`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredSubtopology {
    pub num_tasks: i32,
    pub source_topics: BTreeSet<String>,
    pub repartition_source_topics: BTreeMap<String, InternalTopic>,
    pub repartition_sink_topics: BTreeSet<String>,
    pub state_changelog_topics: BTreeMap<String, InternalTopic>,
}

impl ConfiguredSubtopology {
    /// A subtopology with a changelog keeps state (its tasks get standbys).
    pub fn is_stateful(&self) -> bool {
        !self.state_changelog_topics.is_empty()
    }
}

/// Kafka's `ConfiguredTopology`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredTopology {
    pub topology_epoch: i32,
    pub metadata_hash: i64,
    /// By subtopology id; `None` when the topic configuration failed.
    pub subtopologies: Option<BTreeMap<String, ConfiguredSubtopology>>,
    /// Internal topics that must be created, by name.
    pub topics_to_create: BTreeMap<String, InternalTopic>,
    pub error: Option<TopicConfigurationError>,
}

impl ConfiguredTopology {
    /// Tasks can be assigned: every topic exists with the right partition count.
    pub fn is_ready(&self) -> bool {
        self.error.is_none()
    }
}

/// Kafka's `InternalTopicManager.configureTopics`.
pub fn configure(
    topology: &StreamsTopology,
    metadata_hash: i64,
    topics: &dyn TopicsView,
) -> Result<ConfiguredTopology, InvalidTopology> {
    let failed = |error: TopicConfigurationError| ConfiguredTopology {
        topology_epoch: topology.epoch,
        metadata_hash,
        subtopologies: None,
        topics_to_create: BTreeMap::new(),
        error: Some(error),
    };
    let copartition_groups = copartition_groups(topology)?;
    let missing: BTreeSet<&String> = topology
        .subtopologies
        .iter()
        .flat_map(|s| s.source_topics.iter())
        .filter(|t| existing_partitions(topics, t).is_none())
        .collect();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        return Ok(failed(TopicConfigurationError {
            status: Status::MissingSourceTopics,
            message: format!("Source topics {} are missing.", names.join(", ")),
        }));
    }
    let decided = match decide_partition_counts(topology, topics, &copartition_groups)? {
        Ok(decided) => decided,
        Err(error) => return Ok(failed(error)),
    };
    let mut subtopologies = BTreeMap::new();
    for subtopology in &topology.subtopologies {
        subtopologies
            .insert(subtopology.subtopology_id.clone(), configured_subtopology(subtopology, topics, &decided)?);
    }
    let topics_to_create = match missing_internal_topics(&subtopologies, topology, topics) {
        Ok(missing) => missing,
        Err(error) => return Ok(failed(error)),
    };
    let error = (!topics_to_create.is_empty()).then(|| TopicConfigurationError {
        status: Status::MissingInternalTopics,
        message: format!("Internal topics are missing: [{}]", join(topics_to_create.keys())),
    });
    Ok(ConfiguredTopology {
        topology_epoch: topology.epoch,
        metadata_hash,
        subtopologies: Some(subtopologies),
        topics_to_create,
        error,
    })
}

fn join<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names.map(String::as_str).collect::<Vec<_>>().join(", ")
}

/// The partition count of an existing topic.
fn existing_partitions(topics: &dyn TopicsView, name: &str) -> Option<i32> {
    topics.topic(name).map(|t| t.num_partitions)
}

/// Kafka's `getPartitionCount`: an existing topic's, else the one decided for an
/// internal topic.
fn partition_count(topics: &dyn TopicsView, decided: &BTreeMap<String, i32>, name: &str) -> Option<i32> {
    existing_partitions(topics, name).or_else(|| decided.get(name).copied())
}

/// Each subtopology's copartition groups as sets of topic names (the record names them
/// by index into the subtopology's source and repartition source topics).
fn copartition_groups(topology: &StreamsTopology) -> Result<Vec<BTreeSet<String>>, InvalidTopology> {
    let mut groups = Vec::new();
    for subtopology in topology.subtopologies.iter() {
        for group in &subtopology.copartition_groups {
            let mut names = BTreeSet::new();
            for index in &group.source_topics {
                names.insert(index_into(&subtopology.source_topics, *index, |t| t.clone())?);
            }
            for index in &group.repartition_source_topics {
                names.insert(index_into(&subtopology.repartition_source_topics, *index, |t| t.name.clone())?);
            }
            groups.push(names);
        }
    }
    Ok(groups)
}

fn index_into<T>(items: &[T], index: i16, name: impl Fn(&T) -> String) -> Result<String, InvalidTopology> {
    usize::try_from(index)
        .ok()
        .and_then(|i| items.get(i))
        .map(name)
        .ok_or_else(|| InvalidTopology::Inconsistent(format!("Copartition group index {index} out of range")))
}

type Decided = Result<BTreeMap<String, i32>, TopicConfigurationError>;

/// Kafka's `decidePartitionCounts`: repartition topics, then copartitioning, then
/// changelogs.
fn decide_partition_counts(
    topology: &StreamsTopology,
    topics: &dyn TopicsView,
    copartition_groups: &[BTreeSet<String>],
) -> Result<Decided, InvalidTopology> {
    let mut decided = repartition_partition_counts(topology, topics)?;
    let fixed: BTreeSet<&String> =
        repartition_sources(topology).filter(|t| t.partitions != 0).map(|t| &t.name).collect();
    let flexible: BTreeSet<&String> =
        repartition_sources(topology).filter(|t| t.partitions == 0).map(|t| &t.name).collect();
    for group in copartition_groups {
        match enforce_copartitioning(group, &fixed, &flexible, topics, &decided)? {
            Ok(counts) => decided.extend(counts),
            Err(error) => return Ok(Err(error)),
        }
    }
    for subtopology in topology.subtopologies.iter() {
        let mut max = None;
        for topic in subtopology_sources(subtopology) {
            let count = partition_count(topics, &decided, topic)
                .ok_or_else(|| InvalidTopology::Inconsistent(format!("No partition count for source topic {topic}")))?;
            max = max.max(Some(count));
        }
        let Some(max) = max else {
            return Err(InvalidTopology::Invalid(format!(
                "No source topics found for subtopology {}",
                subtopology.subtopology_id
            )));
        };
        for changelog in &subtopology.state_changelog_topics {
            decided.insert(changelog.name.clone(), max);
        }
    }
    Ok(Ok(decided))
}

fn repartition_sources(topology: &StreamsTopology) -> impl Iterator<Item = &TopicInfo> {
    topology.subtopologies.iter().flat_map(|s| s.repartition_source_topics.iter())
}

/// The topics a subtopology reads: its source topics and repartition source topics.
fn subtopology_sources(subtopology: &Subtopology) -> impl Iterator<Item = &String> {
    subtopology.source_topics.iter().chain(subtopology.repartition_source_topics.iter().map(|t| &t.name))
}

/// Kafka's `RepartitionTopics.setup`: fixed counts as given; the others from the
/// largest source of the subtopology writing them, iterated until no more resolve.
fn repartition_partition_counts(
    topology: &StreamsTopology,
    topics: &dyn TopicsView,
) -> Result<BTreeMap<String, i32>, InvalidTopology> {
    let mut counts: BTreeMap<String, i32> =
        repartition_sources(topology).filter(|t| t.partitions != 0).map(|t| (t.name.clone(), t.partitions)).collect();
    loop {
        let mut needed = false;
        let mut progress = false;
        for subtopology in topology.subtopologies.iter() {
            for sink in &subtopology.repartition_sink_topics {
                if counts.contains_key(sink) {
                    continue;
                }
                let candidate = subtopology
                    .repartition_source_topics
                    .iter()
                    .filter_map(|t| counts.get(&t.name).copied())
                    .chain(subtopology.source_topics.iter().filter_map(|t| existing_partitions(topics, t)))
                    .max();
                match candidate {
                    Some(count) => {
                        counts.insert(sink.clone(), count);
                        progress = true;
                    }
                    None => needed = true,
                }
            }
        }
        if !needed {
            break;
        }
        if !progress {
            return Err(InvalidTopology::Invalid(
                "Failed to compute number of partitions for all repartition topics. There may be loops in the \
                 topology that cannot be resolved."
                    .into(),
            ));
        }
    }
    if repartition_sources(topology).any(|t| !counts.contains_key(&t.name)) {
        return Err(InvalidTopology::Invalid(
            "Failed to compute number of partitions for all repartition topics, because a repartition source \
             topic is never used as a sink topic."
                .into(),
        ));
    }
    Ok(counts)
}

/// Kafka's `CopartitionedTopicsEnforcer.enforce`: the partition count every repartition
/// topic of the group takes.
fn enforce_copartitioning(
    group: &BTreeSet<String>,
    fixed: &BTreeSet<&String>,
    flexible: &BTreeSet<&String>,
    topics: &dyn TopicsView,
    decided: &BTreeMap<String, i32>,
) -> Result<Result<BTreeMap<String, i32>, TopicConfigurationError>, InvalidTopology> {
    if group.is_empty() {
        return Ok(Ok(BTreeMap::new()));
    }
    let count = |topic: &String| {
        partition_count(topics, decided, topic)
            .ok_or_else(|| InvalidTopology::Inconsistent(format!("Number of partitions is not set for topic: {topic}")))
    };
    let mut repartition = BTreeMap::new();
    let mut others = BTreeMap::new();
    for topic in group {
        let n = count(topic)?;
        if fixed.contains(topic) || flexible.contains(topic) {
            repartition.insert(topic.clone(), n);
        } else {
            others.insert(topic.clone(), n);
        }
    }
    let not_copartitioned = |counts: &BTreeMap<String, i32>| TopicConfigurationError {
        status: Status::IncorrectlyPartitionedTopics,
        message: format!("Following topics do not have the same number of partitions: [{}]", java_map(counts)),
    };
    let partitions = if others.is_empty() {
        if !fixed.is_empty() {
            // Kafka's `validateAndGetNumOfPartitions` checks every fixed repartition
            // topic of the topology, not only this group's.
            let mut fixed_counts = fixed.iter().map(|t| count(t));
            let first = fixed_counts.next().expect("not empty")?;
            for n in fixed_counts {
                if n? != first {
                    return Ok(Err(not_copartitioned(&repartition)));
                }
            }
            first
        } else {
            let max = repartition.values().copied().max().unwrap_or(0);
            if max == 0 {
                return Err(InvalidTopology::Invalid(format!(
                    "All topics in the copartition group had undefined partition number: [{}]",
                    join(repartition.keys())
                )));
            }
            max
        }
    } else {
        let first = *others.values().next().expect("not empty");
        if others.values().any(|n| *n != first) {
            return Ok(Err(not_copartitioned(&others)));
        }
        first
    };
    let mut result = BTreeMap::new();
    for (topic, n) in repartition {
        if fixed.contains(&topic) && n != partitions {
            return Ok(Err(TopicConfigurationError {
                status: Status::IncorrectlyPartitionedTopics,
                message: format!(
                    "Number of partitions [{n}] of repartition topic [{topic}] doesn't match number of partitions \
                     [{partitions}] of the source topic."
                ),
            }));
        }
        result.insert(topic, partitions);
    }
    Ok(Ok(result))
}

/// A sorted map as Java's `TreeMap.toString` writes it, without the braces: `a=1, b=2`.
fn java_map(counts: &BTreeMap<String, i32>) -> String {
    format!("{{{}}}", counts.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "))
}

/// Kafka's `fromPersistedSubtopology`.
fn configured_subtopology(
    subtopology: &Subtopology,
    topics: &dyn TopicsView,
    decided: &BTreeMap<String, i32>,
) -> Result<ConfiguredSubtopology, InvalidTopology> {
    let mut num_tasks = None;
    for topic in subtopology_sources(subtopology) {
        let count = partition_count(topics, decided, topic).ok_or_else(|| {
            InvalidTopology::Inconsistent(format!("Number of partitions must be set for topic {topic}"))
        })?;
        num_tasks = num_tasks.max(Some(count));
    }
    let num_tasks = num_tasks
        .filter(|n| *n > 0)
        .ok_or_else(|| InvalidTopology::Inconsistent("Subtopology does not contain any source topics".into()))?;
    let internal = |infos: &[TopicInfo]| -> Result<BTreeMap<String, InternalTopic>, InvalidTopology> {
        infos.iter().map(|t| internal_topic(t, decided).map(|topic| (topic.name.clone(), topic))).collect()
    };
    Ok(ConfiguredSubtopology {
        num_tasks,
        source_topics: subtopology.source_topics.iter().cloned().collect(),
        repartition_source_topics: internal(&subtopology.repartition_source_topics)?,
        repartition_sink_topics: subtopology.repartition_sink_topics.iter().cloned().collect(),
        state_changelog_topics: internal(&subtopology.state_changelog_topics)?,
    })
}

/// Kafka's `fromPersistedTopicInfo`.
fn internal_topic(info: &TopicInfo, decided: &BTreeMap<String, i32>) -> Result<InternalTopic, InvalidTopology> {
    let num_partitions = if info.partitions == 0 { decided.get(&info.name).copied() } else { Some(info.partitions) };
    let num_partitions = num_partitions.filter(|n| *n >= 1).ok_or_else(|| {
        InvalidTopology::Inconsistent(format!("Number of partitions must be set for topic {}", info.name))
    })?;
    Ok(InternalTopic {
        name: info.name.clone(),
        num_partitions,
        replication_factor: (info.replication_factor != 0).then_some(info.replication_factor),
        configs: info.topic_configs.iter().map(|c| (c.key.clone(), c.value.clone())).collect(),
    })
}

/// Kafka's `missingInternalTopics`: internal topics not in the cluster; one that exists
/// with another partition count fails the configuration.
fn missing_internal_topics(
    subtopologies: &BTreeMap<String, ConfiguredSubtopology>,
    topology: &StreamsTopology,
    topics: &dyn TopicsView,
) -> Result<BTreeMap<String, InternalTopic>, TopicConfigurationError> {
    let mut to_create: BTreeMap<String, InternalTopic> = BTreeMap::new();
    for subtopology in subtopologies.values() {
        for topic in subtopology.repartition_source_topics.values().chain(subtopology.state_changelog_topics.values()) {
            to_create.insert(topic.name.clone(), topic.clone());
        }
    }
    for topic in topology.required_topics() {
        let Some(found) = existing_partitions(topics, &topic) else { continue };
        if let Some(expected) = to_create.remove(&topic) {
            if found != expected.num_partitions {
                return Err(TopicConfigurationError {
                    status: Status::IncorrectlyPartitionedTopics,
                    message: format!(
                        "Existing topic {topic} has different number of partitions: expected {}, found {found}",
                        expected.num_partitions
                    ),
                });
            }
        }
    }
    Ok(to_create)
}
