//! The metadata state machine: records in, an image of the cluster out.

use osprey_protocol::Uuid;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One change to the cluster metadata. Records are the unit of durability and (later)
/// of replication: the image is exactly the fold of its records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// Producer ids below `next` are handed out (in blocks, so a restart never reuses one).
    ProducerIdsAllocated {
        next: i64,
    },
    /// A new topic with its partitions' replica lists (first replica is the preferred leader).
    CreateTopic {
        name: String,
        id: [u8; 16],
        replicas: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
    },
    /// Partitions appended to an existing topic.
    CreatePartitions {
        id: [u8; 16],
        replicas: Vec<Vec<i32>>,
    },
    DeleteTopic {
        id: [u8; 16],
    },
    /// A topic config set (`Some`) or reset to the broker default (`None`).
    SetTopicConfig {
        id: [u8; 16],
        key: String,
        value: Option<String>,
    },
    /// A group config (ConfigResource type GROUP) set (`Some`) or reset to the broker
    /// default (`None`); the group need not exist, as in Kafka.
    SetGroupConfig {
        group: String,
        key: String,
        value: Option<String>,
    },
    /// A dynamic broker config (Kafka's ConfigRecord with resource type BROKER) set
    /// (`Some`) or reset to the static value (`None`). `resource` is Kafka's resource
    /// name: empty for the cluster-wide default, else the broker's id.
    SetBrokerConfig {
        resource: String,
        key: String,
        value: Option<String>,
    },
}

/// The current metadata: what every handler reads.
///
/// Serialized (the quorum's snapshots) through `ImageOnDisk`, which lists topics once
/// instead of the two indexes kept here.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "ImageOnDisk", into = "ImageOnDisk")]
pub struct MetadataImage {
    topics_by_name: BTreeMap<String, Uuid>,
    topics: HashMap<Uuid, TopicImage>,
    /// How many records have been applied (an offset into the metadata log).
    pub applied: u64,
    /// The first producer id not yet handed out.
    pub next_producer_id: i64,
    /// Group configs (overrides only) by group id.
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Dynamic broker configs by resource name ("" is the cluster-wide default).
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicImage {
    pub name: String,
    #[serde(with = "uuid_bytes")]
    pub id: Uuid,
    pub partitions: Vec<PartitionImage>,
    /// Topic-level overrides only; defaults come from the broker config.
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionImage {
    pub index: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub leader: i32,
    /// The leader epoch the controller set: 0 at creation, bumped at every leader change
    /// (a single node never changes leader, so its partitions stay at 0). Brokers take it
    /// from here into their replica state machines.
    pub leader_epoch: i32,
    /// The partition epoch the controller set: 0 at creation, bumped at every change of
    /// the ISR or replicas (AlterPartition fences on it).
    pub partition_epoch: i32,
}

impl PartitionImage {
    fn new(index: i32, replicas: Vec<i32>) -> PartitionImage {
        let leader = replicas.first().copied().unwrap_or(-1);
        PartitionImage { index, isr: replicas.clone(), replicas, leader, leader_epoch: 0, partition_epoch: 0 }
    }
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics_by_name.get(name).and_then(|id| self.topics.get(id))
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.topics.get(&id)
    }

    /// A group's config overrides (empty when it has none).
    pub fn group_configs(&self, group_id: &str) -> Option<&BTreeMap<String, String>> {
        self.group_configs.get(group_id)
    }

    /// The dynamic broker configs of one resource: `""` for the cluster-wide default,
    /// else a broker id (`None` when it has none).
    pub fn broker_configs(&self, resource: &str) -> Option<&BTreeMap<String, String>> {
        self.broker_configs.get(resource)
    }

    /// Topics in name order.
    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics_by_name.values().filter_map(|id| self.topics.get(id))
    }

    /// Applies one record. Records are validated by the controller before they are
    /// written, so a record that does not fit (a replay of a damaged log) is skipped with
    /// a warning rather than corrupting the image.
    pub fn apply(&mut self, record: &MetadataRecord) {
        self.applied += 1;
        match record {
            MetadataRecord::CreateTopic { name, id, replicas, configs } => {
                let id = Uuid(*id);
                if self.topics_by_name.contains_key(name) || self.topics.contains_key(&id) {
                    tracing::warn!(topic = %name, "metadata record creates a topic that exists; skipped");
                    return;
                }
                let partitions =
                    replicas.iter().enumerate().map(|(i, r)| PartitionImage::new(i as i32, r.clone())).collect();
                self.topics_by_name.insert(name.clone(), id);
                self.topics.insert(id, TopicImage { name: name.clone(), id, partitions, configs: configs.clone() });
            }
            MetadataRecord::CreatePartitions { id, replicas } => match self.topics.get_mut(&Uuid(*id)) {
                Some(topic) => {
                    for r in replicas {
                        let index = topic.partitions.len() as i32;
                        topic.partitions.push(PartitionImage::new(index, r.clone()));
                    }
                }
                None => tracing::warn!(topic_id = %Uuid(*id), "metadata record adds partitions to a missing topic"),
            },
            MetadataRecord::DeleteTopic { id } => {
                if let Some(topic) = self.topics.remove(&Uuid(*id)) {
                    self.topics_by_name.remove(&topic.name);
                }
            }
            MetadataRecord::ProducerIdsAllocated { next } => {
                self.next_producer_id = self.next_producer_id.max(*next);
            }
            MetadataRecord::SetTopicConfig { id, key, value } => match self.topics.get_mut(&Uuid(*id)) {
                Some(topic) => match value {
                    Some(v) => {
                        topic.configs.insert(key.clone(), v.clone());
                    }
                    None => {
                        topic.configs.remove(key);
                    }
                },
                None => tracing::warn!(topic_id = %Uuid(*id), "metadata record configures a missing topic"),
            },
            MetadataRecord::SetGroupConfig { group, key, value } => {
                set_or_reset(&mut self.group_configs, group, key, value.as_deref())
            }
            MetadataRecord::SetBrokerConfig { resource, key, value } => {
                set_or_reset(&mut self.broker_configs, resource, key, value.as_deref())
            }
        }
    }
}

/// The image as a snapshot stores it. Both conversions name every field, so a field
/// added to [`MetadataImage`] does not compile until it is also snapshotted.
#[derive(Serialize, Deserialize)]
struct ImageOnDisk {
    topics: Vec<TopicImage>,
    applied: u64,
    next_producer_id: i64,
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
}

impl From<MetadataImage> for ImageOnDisk {
    fn from(image: MetadataImage) -> ImageOnDisk {
        let MetadataImage { topics_by_name, mut topics, applied, next_producer_id, group_configs, broker_configs } =
            image;
        let topics = topics_by_name.values().filter_map(|id| topics.remove(id)).collect();
        ImageOnDisk { topics, applied, next_producer_id, group_configs, broker_configs }
    }
}

impl From<ImageOnDisk> for MetadataImage {
    fn from(disk: ImageOnDisk) -> MetadataImage {
        let ImageOnDisk { topics: list, applied, next_producer_id, group_configs, broker_configs } = disk;
        let topics_by_name = list.iter().map(|t| (t.name.clone(), t.id)).collect();
        let topics = list.into_iter().map(|t| (t.id, t)).collect();
        MetadataImage { topics_by_name, topics, applied, next_producer_id, group_configs, broker_configs }
    }
}

/// A topic id in a snapshot: its 16 bytes.
mod uuid_bytes {
    use osprey_protocol::Uuid;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(id: &Uuid, s: S) -> Result<S::Ok, S::Error> {
        id.0.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Uuid, D::Error> {
        <[u8; 16]>::deserialize(d).map(Uuid)
    }
}

/// Sets or removes `key` in the configs of `resource`, dropping a resource left empty.
fn set_or_reset(all: &mut BTreeMap<String, BTreeMap<String, String>>, resource: &str, key: &str, value: Option<&str>) {
    let configs = all.entry(resource.to_string()).or_default();
    match value {
        Some(v) => {
            configs.insert(key.to_string(), v.to_string());
        }
        None => {
            configs.remove(key);
        }
    }
    if configs.is_empty() {
        all.remove(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, id: u8, partitions: usize) -> MetadataRecord {
        MetadataRecord::CreateTopic {
            name: name.into(),
            id: [id; 16],
            replicas: vec![vec![1]; partitions],
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn created_topic_has_partitions_led_by_first_replica() {
        let mut image = MetadataImage::default();
        image.apply(&create("a", 1, 3));
        let t = image.topic("a").unwrap();
        assert_eq!(t.partitions.len(), 3);
        assert_eq!(t.partitions[2].index, 2);
        assert_eq!(t.partitions[0].leader, 1);
        assert_eq!(image.topic_by_id(Uuid([1; 16])).unwrap().name, "a");
    }

    #[test]
    fn partitions_configs_and_deletion_apply_in_order() {
        let mut image = MetadataImage::default();
        image.apply(&create("a", 1, 1));
        image.apply(&MetadataRecord::CreatePartitions { id: [1; 16], replicas: vec![vec![1], vec![1]] });
        image.apply(&MetadataRecord::SetTopicConfig {
            id: [1; 16],
            key: "retention.ms".into(),
            value: Some("5".into()),
        });
        assert_eq!(image.topic("a").unwrap().partitions.len(), 3);
        assert_eq!(image.topic("a").unwrap().configs["retention.ms"], "5");
        image.apply(&MetadataRecord::SetTopicConfig { id: [1; 16], key: "retention.ms".into(), value: None });
        assert!(image.topic("a").unwrap().configs.is_empty());
        image.apply(&MetadataRecord::DeleteTopic { id: [1; 16] });
        assert!(image.topic("a").is_none());
        assert_eq!(image.applied, 5);
    }

    #[test]
    fn group_configs_are_set_and_reset_for_any_group_id() {
        let mut image = MetadataImage::default();
        let set = |value: Option<&str>| MetadataRecord::SetGroupConfig {
            group: "g".into(),
            key: "consumer.session.timeout.ms".into(),
            value: value.map(str::to_string),
        };
        image.apply(&set(Some("50000")));
        assert_eq!(image.group_configs("g").unwrap()["consumer.session.timeout.ms"], "50000");
        image.apply(&set(None));
        assert!(image.group_configs("g").is_none());
    }

    #[test]
    fn broker_configs_are_kept_per_resource_and_reset_to_nothing() {
        let mut image = MetadataImage::default();
        let set = |resource: &str, value: Option<&str>| MetadataRecord::SetBrokerConfig {
            resource: resource.into(),
            key: "log.retention.ms".into(),
            value: value.map(str::to_string),
        };
        image.apply(&set("", Some("60000")));
        image.apply(&set("1", Some("30000")));
        assert_eq!(image.broker_configs("").unwrap()["log.retention.ms"], "60000");
        assert_eq!(image.broker_configs("1").unwrap()["log.retention.ms"], "30000");
        image.apply(&set("1", None));
        assert!(image.broker_configs("1").is_none(), "a resource with no configs left is gone");
        assert_eq!(image.broker_configs("").unwrap()["log.retention.ms"], "60000", "the default is untouched");
    }

    #[test]
    fn image_survives_a_json_round_trip() {
        let mut image = MetadataImage::default();
        image.apply(&create("b", 2, 2));
        image.apply(&create("a", 1, 1));
        image.apply(&MetadataRecord::ProducerIdsAllocated { next: 7000 });
        image.apply(&MetadataRecord::SetBrokerConfig { resource: "".into(), key: "k".into(), value: Some("v".into()) });
        let json = serde_json::to_vec(&image).unwrap();
        let back: MetadataImage = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.topics().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(back.topic_by_id(Uuid([2; 16])), image.topic_by_id(Uuid([2; 16])));
        assert_eq!((back.applied, back.next_producer_id), (4, 7000));
        assert_eq!(back.broker_configs("").unwrap()["k"], "v");
    }

    #[test]
    fn duplicate_create_is_skipped_not_applied() {
        let mut image = MetadataImage::default();
        image.apply(&create("a", 1, 1));
        image.apply(&create("a", 2, 5));
        assert_eq!(image.topic("a").unwrap().partitions.len(), 1);
        assert!(image.topic_by_id(Uuid([2; 16])).is_none());
    }
}
