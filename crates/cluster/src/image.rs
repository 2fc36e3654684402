//! The metadata state machine: records in, an image of the cluster out.

use crate::acl::AclEntry;
use crate::client_quotas::{ClientQuotaEntity, ClientQuotasImage, QuotaValue};
use osprey_protocol::Uuid;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One change to the cluster metadata. Records are the unit of durability and (later)
/// of replication: the image is exactly the fold of its records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// The cluster's id, chosen by the first active controller of a quorum bootstrapped
    /// without a format step (DESIGN.md, "Bootstrap without a format step"). Kafka keeps
    /// it only in `meta.properties`; here the quorum carries it so that every member
    /// learns it from the log. The first one applied wins; later ones are ignored.
    ClusterId {
        id: String,
    },
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
        /// Each partition's ISR when it is not the whole replica list (a replica on a
        /// fenced broker is left out, as Kafka does); its first member leads.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        isrs: Option<Vec<Vec<i32>>>,
    },
    /// Partitions appended to an existing topic.
    CreatePartitions {
        id: [u8; 16],
        replicas: Vec<Vec<i32>>,
        /// As `CreateTopic::isrs`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        isrs: Option<Vec<Vec<i32>>>,
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
    /// Kafka's UserScramCredentialRecord: a user's SCRAM credential for one mechanism
    /// (Kafka's type id: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512), set or replaced. What a
    /// server needs to check a proof, never the password.
    SetScramCredential {
        user: String,
        mechanism: i8,
        salt: Vec<u8>,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
        iterations: i32,
    },
    /// Kafka's RemoveUserScramCredentialRecord.
    RemoveScramCredential {
        user: String,
        mechanism: i8,
    },
    /// Kafka's ClientQuotaRecord: one quota key of an entity set to `value`, or removed.
    ClientQuota {
        entity: ClientQuotaEntity,
        key: String,
        value: QuotaValue,
        remove: bool,
    },
    /// Kafka's AccessControlEntryRecord: an ACL, under an id of its own.
    AccessControlEntry {
        id: [u8; 16],
        acl: AclEntry,
    },
    /// Kafka's RemoveAccessControlEntryRecord.
    RemoveAccessControlEntry {
        id: [u8; 16],
    },
    /// A broker registered, as Kafka's RegisterBrokerRecord: a new incarnation gets a
    /// new epoch (the record's offset in the metadata log) and starts fenced; the same
    /// incarnation registering again keeps its epoch and state.
    RegisterBroker {
        id: i32,
        epoch: i64,
        incarnation: [u8; 16],
        listeners: Vec<BrokerListener>,
        #[serde(default)]
        rack: Option<String>,
        fenced: bool,
        #[serde(default)]
        in_controlled_shutdown: bool,
    },
    /// Kafka's FenceBrokerRecord: the broker at this epoch may lead and be in ISRs no more.
    FenceBroker {
        id: i32,
        epoch: i64,
    },
    /// Kafka's UnfenceBrokerRecord: the broker caught up with the metadata.
    UnfenceBroker {
        id: i32,
        epoch: i64,
    },
    /// Kafka's UnregisterBrokerRecord.
    UnregisterBroker {
        id: i32,
        epoch: i64,
    },
    /// Kafka's BrokerRegistrationChangeRecord: `None` leaves a flag as it is.
    BrokerRegistrationChange {
        id: i32,
        epoch: i64,
        #[serde(default)]
        fenced: Option<bool>,
        #[serde(default)]
        in_controlled_shutdown: Option<bool>,
    },
    /// Kafka's PartitionChangeRecord, with the partition's whole new state rather than
    /// Kafka's "no change" sentinels: the epochs are written, not derived at replay, so
    /// that a replay can check they only grow.
    PartitionChange {
        topic_id: [u8; 16],
        partition: i32,
        leader: i32,
        isr: Vec<i32>,
        #[serde(default)]
        elr: Vec<i32>,
        /// Kafka's `LastKnownElr` (absent in records written before Osprey kept it).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        last_known_elr: Vec<i32>,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<i32>,
        #[serde(default)]
        leader_recovery_state: i8,
        /// Kafka's AddingReplicas: the replicas a reassignment is adding (in `replicas`,
        /// not yet in the target's ISR). Absent in records written before reassignment
        /// existed, and whenever empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        adding_replicas: Vec<i32>,
        /// Kafka's RemovingReplicas: the replicas a reassignment removes once the target
        /// replicas are all in the ISR. As `adding_replicas`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removing_replicas: Vec<i32>,
    },
}

/// One listener of a registered broker (Kafka's BrokerEndpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerListener {
    pub name: String,
    pub host: String,
    pub port: u16,
    /// Kafka's SecurityProtocol id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL.
    pub security_protocol: i16,
}

/// A user's SCRAM credential for one mechanism, as the metadata keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialImage {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// A registered broker, as the metadata says (Kafka's BrokerRegistration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: i32,
    pub epoch: i64,
    #[serde(with = "uuid_bytes")]
    pub incarnation: Uuid,
    pub listeners: Vec<BrokerListener>,
    pub rack: Option<String>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    /// The offset of the RegisterBroker record: the broker is unfenced once the
    /// metadata offset it reports reaches it.
    pub register_offset: u64,
    /// The offset of the record that last fenced the broker (0: never, at this epoch).
    /// It ends the batch that moved the broker's leaderships and ISR places away, so a
    /// fenced broker is unfenced only once it applied that far: it knows by then that it
    /// leads none of them (its coordinators' reads rely on it, `ClusterLink::holds_lease`).
    #[serde(default)]
    pub fenced_offset: u64,
}

impl BrokerRegistration {
    /// May lead partitions and be added to ISRs (Kafka's `isActive`).
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

/// `PartitionImage::leader_recovery_state`: the leader has every committed record.
pub const LEADER_RECOVERED: i8 = 0;
/// `PartitionImage::leader_recovery_state`: the leader came from an unclean election and
/// has not yet told the controller it recovered (KIP-704).
pub const LEADER_RECOVERING: i8 = 1;
/// The leader of a partition that has none.
pub const NO_LEADER: i32 = -1;

/// The current metadata: what every handler reads.
///
/// Serialized (the quorum's snapshots) through `ImageOnDisk`, which lists topics once
/// instead of the two indexes kept here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Registered brokers by id.
    brokers: BTreeMap<i32, BrokerRegistration>,
    /// The cluster id from the first `ClusterId` record (`None` before it).
    pub cluster_id: Option<String>,
    /// SCRAM credentials by user, then by mechanism type id.
    scram_credentials: BTreeMap<String, BTreeMap<i8, ScramCredentialImage>>,
    /// Client quotas by entity.
    client_quotas: ClientQuotasImage,
    /// ACLs by id.
    acls: BTreeMap<[u8; 16], AclEntry>,
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
    /// Eligible leader replicas (KIP-966): replicas out of the ISR that still have every
    /// committed record, filled while the ISR is below the topic's `min.insync.replicas`
    /// (see `partition_change.rs`). Never overlaps the ISR.
    #[serde(default)]
    pub elr: Vec<i32>,
    /// Kafka's last known ELR, which its controller uses for the last leader alone: set
    /// when the partition loses its leader, cleared when it has one again. Absent in
    /// snapshots written before Osprey kept it.
    #[serde(default)]
    pub last_known_elr: Vec<i32>,
    /// `LEADER_RECOVERED` or `LEADER_RECOVERING` (after an unclean election).
    pub leader_recovery_state: i8,
    /// Replicas an ongoing reassignment adds (Kafka's `addingReplicas`): in `replicas`
    /// already, followers that may join the ISR. Absent in older snapshots: none.
    #[serde(default)]
    pub adding_replicas: Vec<i32>,
    /// Replicas an ongoing reassignment removes (Kafka's `removingReplicas`): still in
    /// `replicas` until every target replica is in the ISR. Absent in older snapshots.
    #[serde(default)]
    pub removing_replicas: Vec<i32>,
}

impl PartitionImage {
    /// A new partition; with no ISR given, every replica is in it.
    fn new(index: i32, replicas: Vec<i32>, isr: Option<&Vec<i32>>) -> PartitionImage {
        let isr = isr.cloned().unwrap_or_else(|| replicas.clone());
        let leader = isr.first().copied().unwrap_or(NO_LEADER);
        PartitionImage {
            index,
            isr,
            replicas,
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
            elr: Vec::new(),
            last_known_elr: Vec::new(),
            leader_recovery_state: LEADER_RECOVERED,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// A reassignment is adding or removing replicas (Kafka's
    /// `PartitionReassignmentReplicas.isReassignmentInProgress`).
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
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

    /// `user`'s SCRAM credential for `mechanism` (Kafka's type id).
    pub fn scram_credential(&self, user: &str, mechanism: i8) -> Option<&ScramCredentialImage> {
        self.scram_credentials.get(user)?.get(&mechanism)
    }

    /// Every user with a SCRAM credential, in name order, with their credentials by
    /// mechanism type id.
    pub fn scram_users(&self) -> impl Iterator<Item = (&String, &BTreeMap<i8, ScramCredentialImage>)> {
        self.scram_credentials.iter()
    }

    /// The client quotas of every entity.
    pub fn client_quotas(&self) -> &ClientQuotasImage {
        &self.client_quotas
    }

    /// Every ACL with its id, in id order.
    pub fn acls(&self) -> impl Iterator<Item = (&[u8; 16], &AclEntry)> + Clone {
        self.acls.iter()
    }

    /// Registered brokers in id order.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// The offset the next record will have in the metadata log.
    pub fn next_offset(&self) -> u64 {
        self.applied
    }

    pub fn partition(&self, topic_id: Uuid, index: i32) -> Option<&PartitionImage> {
        let topic = self.topics.get(&topic_id)?;
        usize::try_from(index).ok().and_then(|i| topic.partitions.get(i))
    }

    /// Topics in name order.
    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics_by_name.values().filter_map(|id| self.topics.get(id))
    }

    /// Applies one record. Records are validated by the controller before they are
    /// written, so a record that does not fit (a replay of a damaged log) is skipped with
    /// a warning rather than corrupting the image.
    pub fn apply(&mut self, record: &MetadataRecord) {
        let offset = self.applied;
        self.applied += 1;
        match record {
            MetadataRecord::ClusterId { id } => {
                if self.cluster_id.is_none() {
                    self.cluster_id = Some(id.clone());
                }
            }
            MetadataRecord::CreateTopic { name, id, replicas, configs, isrs } => {
                let id = Uuid(*id);
                if self.topics_by_name.contains_key(name) || self.topics.contains_key(&id) {
                    tracing::warn!(topic = %name, "metadata record creates a topic that exists; skipped");
                    return;
                }
                let partitions = replicas
                    .iter()
                    .enumerate()
                    .map(|(i, r)| PartitionImage::new(i as i32, r.clone(), isrs.as_ref().and_then(|s| s.get(i))))
                    .collect();
                self.topics_by_name.insert(name.clone(), id);
                self.topics.insert(id, TopicImage { name: name.clone(), id, partitions, configs: configs.clone() });
            }
            MetadataRecord::CreatePartitions { id, replicas, isrs } => match self.topics.get_mut(&Uuid(*id)) {
                Some(topic) => {
                    for (i, r) in replicas.iter().enumerate() {
                        let index = topic.partitions.len() as i32;
                        let isr = isrs.as_ref().and_then(|s| s.get(i));
                        topic.partitions.push(PartitionImage::new(index, r.clone(), isr));
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
            MetadataRecord::SetScramCredential { user, mechanism, salt, stored_key, server_key, iterations } => {
                let credential = ScramCredentialImage {
                    salt: salt.clone(),
                    stored_key: stored_key.clone(),
                    server_key: server_key.clone(),
                    iterations: *iterations,
                };
                self.scram_credentials.entry(user.clone()).or_default().insert(*mechanism, credential);
            }
            MetadataRecord::RemoveScramCredential { user, mechanism } => {
                if let Some(credentials) = self.scram_credentials.get_mut(user) {
                    credentials.remove(mechanism);
                    if credentials.is_empty() {
                        self.scram_credentials.remove(user);
                    }
                }
            }
            MetadataRecord::ClientQuota { entity, key, value, remove } => {
                self.client_quotas.apply(entity, key, *value, *remove)
            }
            MetadataRecord::AccessControlEntry { id, acl } => {
                self.acls.insert(*id, acl.clone());
            }
            MetadataRecord::RemoveAccessControlEntry { id } => {
                if self.acls.remove(id).is_none() {
                    tracing::warn!(acl_id = %Uuid(*id), "metadata record removes a missing ACL; skipped");
                }
            }
            MetadataRecord::RegisterBroker {
                id,
                epoch,
                incarnation,
                listeners,
                rack,
                fenced,
                in_controlled_shutdown,
            } => {
                let registration = BrokerRegistration {
                    id: *id,
                    epoch: *epoch,
                    incarnation: Uuid(*incarnation),
                    listeners: listeners.clone(),
                    rack: rack.clone(),
                    fenced: *fenced,
                    in_controlled_shutdown: *in_controlled_shutdown,
                    register_offset: offset,
                    fenced_offset: 0,
                };
                self.brokers.insert(*id, registration);
            }
            MetadataRecord::FenceBroker { id, epoch } => self.change_broker(*id, *epoch, Some(true), None, offset),
            MetadataRecord::UnfenceBroker { id, epoch } => self.change_broker(*id, *epoch, Some(false), None, offset),
            MetadataRecord::BrokerRegistrationChange { id, epoch, fenced, in_controlled_shutdown } => {
                self.change_broker(*id, *epoch, *fenced, *in_controlled_shutdown, offset)
            }
            MetadataRecord::UnregisterBroker { id, epoch } => match self.brokers.get(id) {
                Some(b) if b.epoch == *epoch => {
                    self.brokers.remove(id);
                }
                _ => {
                    tracing::warn!(broker = id, epoch, "metadata record unregisters a broker at another epoch; skipped")
                }
            },
            MetadataRecord::PartitionChange { topic_id, partition, .. } => {
                let Some(p) = self
                    .topics
                    .get_mut(&Uuid(*topic_id))
                    .and_then(|t| usize::try_from(*partition).ok().and_then(|i| t.partitions.get_mut(i)))
                else {
                    tracing::warn!(topic_id = %Uuid(*topic_id), partition, "metadata record changes a missing partition; skipped");
                    return;
                };
                apply_partition_change(p, record);
            }
        }
    }

    /// Applies a broker's fencing / controlled-shutdown change if the epoch is current.
    fn change_broker(
        &mut self,
        id: i32,
        epoch: i64,
        fenced: Option<bool>,
        in_controlled_shutdown: Option<bool>,
        offset: u64,
    ) {
        match self.brokers.get_mut(&id) {
            Some(b) if b.epoch == epoch => {
                if let Some(f) = fenced {
                    if f && !b.fenced {
                        b.fenced_offset = offset;
                    }
                    b.fenced = f;
                }
                if let Some(s) = in_controlled_shutdown {
                    b.in_controlled_shutdown = s;
                }
            }
            _ => tracing::warn!(broker = id, epoch, "metadata record changes a broker at another epoch; skipped"),
        }
    }
}

/// Replaces a partition's state with a PartitionChange's, if its epochs do not go back.
pub(crate) fn apply_partition_change(p: &mut PartitionImage, record: &MetadataRecord) {
    let MetadataRecord::PartitionChange {
        leader,
        isr,
        elr,
        last_known_elr,
        leader_epoch,
        partition_epoch,
        replicas,
        leader_recovery_state,
        adding_replicas,
        removing_replicas,
        ..
    } = record
    else {
        return;
    };
    if *partition_epoch <= p.partition_epoch || *leader_epoch < p.leader_epoch {
        tracing::warn!(
            partition = p.index,
            partition_epoch,
            current = p.partition_epoch,
            "metadata record would move a partition's epochs back; skipped"
        );
        return;
    }
    p.leader = *leader;
    p.isr = isr.clone();
    if elr.iter().any(|r| isr.contains(r)) {
        // A bug in the decision that wrote it; Kafka's controller logs the same and
        // applies the record anyway (`updatePartitionInfo`).
        tracing::error!(partition = p.index, ?isr, ?elr, "metadata record has overlapping ISR and ELR");
    }
    p.elr = elr.clone();
    p.last_known_elr = last_known_elr.clone();
    p.leader_epoch = *leader_epoch;
    p.partition_epoch = *partition_epoch;
    p.replicas = replicas.clone();
    p.leader_recovery_state = *leader_recovery_state;
    p.adding_replicas = adding_replicas.clone();
    p.removing_replicas = removing_replicas.clone();
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
    /// Absent in snapshots written before broker registrations existed.
    #[serde(default)]
    brokers: Vec<BrokerRegistration>,
    /// Absent in snapshots written before the quorum carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cluster_id: Option<String>,
    /// Absent in snapshots written before SCRAM credentials existed, and when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    scram_credentials: BTreeMap<String, BTreeMap<i8, ScramCredentialImage>>,
    /// Absent in snapshots written before client quotas existed, and when empty.
    #[serde(default, skip_serializing_if = "ClientQuotasImage::is_empty")]
    client_quotas: ClientQuotasImage,
    /// ACLs with their ids (a list: JSON keys are strings). Absent in snapshots written
    /// before ACLs existed, and when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    acls: Vec<([u8; 16], AclEntry)>,
}

impl From<MetadataImage> for ImageOnDisk {
    fn from(image: MetadataImage) -> ImageOnDisk {
        let MetadataImage {
            topics_by_name,
            mut topics,
            applied,
            next_producer_id,
            group_configs,
            broker_configs,
            brokers,
            cluster_id,
            scram_credentials,
            client_quotas,
            acls,
        } = image;
        let topics = topics_by_name.values().filter_map(|id| topics.remove(id)).collect();
        let brokers = brokers.into_values().collect();
        let acls = acls.into_iter().collect();
        ImageOnDisk {
            topics,
            applied,
            next_producer_id,
            group_configs,
            broker_configs,
            brokers,
            cluster_id,
            scram_credentials,
            client_quotas,
            acls,
        }
    }
}

impl From<ImageOnDisk> for MetadataImage {
    fn from(disk: ImageOnDisk) -> MetadataImage {
        let ImageOnDisk {
            topics: list,
            applied,
            next_producer_id,
            group_configs,
            broker_configs,
            brokers,
            cluster_id,
            scram_credentials,
            client_quotas,
            acls,
        } = disk;
        let topics_by_name = list.iter().map(|t| (t.name.clone(), t.id)).collect();
        let topics = list.into_iter().map(|t| (t.id, t)).collect();
        let brokers = brokers.into_iter().map(|b| (b.id, b)).collect();
        let acls = acls.into_iter().collect();
        MetadataImage {
            topics_by_name,
            topics,
            applied,
            next_producer_id,
            group_configs,
            broker_configs,
            brokers,
            cluster_id,
            scram_credentials,
            client_quotas,
            acls,
        }
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
            isrs: None,
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
        image.apply(&MetadataRecord::CreatePartitions { id: [1; 16], replicas: vec![vec![1], vec![1]], isrs: None });
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
    fn scram_credentials_are_set_replaced_removed_and_survive_a_snapshot() {
        let mut image = MetadataImage::default();
        let set = |mechanism: i8, iterations: i32| MetadataRecord::SetScramCredential {
            user: "alice".into(),
            mechanism,
            salt: vec![1, 2],
            stored_key: vec![3; 32],
            server_key: vec![4; 32],
            iterations,
        };
        image.apply(&set(2, 4096));
        image.apply(&set(2, 8192));
        image.apply(&set(1, 4096));
        assert_eq!(image.scram_credential("alice", 2).unwrap().iterations, 8192);
        let back: MetadataImage = serde_json::from_str(&serde_json::to_string(&image).unwrap()).unwrap();
        assert_eq!(back, image);
        image.apply(&MetadataRecord::RemoveScramCredential { user: "alice".into(), mechanism: 2 });
        assert!(image.scram_credential("alice", 2).is_none());
        assert_eq!(image.scram_users().count(), 1);
        image.apply(&MetadataRecord::RemoveScramCredential { user: "alice".into(), mechanism: 1 });
        assert_eq!(image.scram_users().count(), 0);
        // Removing what is not there changes nothing.
        image.apply(&MetadataRecord::RemoveScramCredential { user: "bob".into(), mechanism: 1 });
        assert_eq!(image.scram_users().count(), 0);
    }

    #[test]
    fn acls_are_added_and_removed_by_id_and_survive_a_snapshot() {
        use crate::acl::{operation, pattern_type, permission_type, resource_type};
        let acl = |name: &str| AclEntry {
            resource_type: resource_type::TOPIC,
            resource_name: name.into(),
            pattern_type: pattern_type::PREFIXED,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: operation::READ,
            permission_type: permission_type::ALLOW,
        };
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::AccessControlEntry { id: [1; 16], acl: acl("a") });
        image.apply(&MetadataRecord::AccessControlEntry { id: [2; 16], acl: acl("b") });
        let back: MetadataImage = serde_json::from_str(&serde_json::to_string(&image).unwrap()).unwrap();
        assert_eq!(back, image);
        image.apply(&MetadataRecord::RemoveAccessControlEntry { id: [1; 16] });
        let names: Vec<&str> = image.acls().map(|(_, a)| a.resource_name.as_str()).collect();
        assert_eq!(names, ["b"]);
        // Removing what is not there changes nothing.
        image.apply(&MetadataRecord::RemoveAccessControlEntry { id: [1; 16] });
        assert_eq!(image.acls().count(), 1);
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
    fn the_first_cluster_id_applied_wins_and_survives_a_snapshot() {
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::ClusterId { id: "first".into() });
        image.apply(&MetadataRecord::ClusterId { id: "second".into() });
        assert_eq!(image.cluster_id.as_deref(), Some("first"));
        let back: MetadataImage = serde_json::from_str(&serde_json::to_string(&image).unwrap()).unwrap();
        assert_eq!(back.cluster_id.as_deref(), Some("first"));
        let old: MetadataImage = serde_json::from_str(
            r#"{"topics":[],"applied":0,"next_producer_id":0,"group_configs":{},"broker_configs":{}}"#,
        )
        .unwrap();
        assert_eq!(old.cluster_id, None, "a snapshot from before the record has none");
    }

    #[test]
    fn image_survives_a_json_round_trip() {
        let mut image = MetadataImage::default();
        image.apply(&create("b", 2, 2));
        image.apply(&create("a", 1, 1));
        image.apply(&MetadataRecord::ProducerIdsAllocated { next: 7000 });
        image.apply(&MetadataRecord::SetBrokerConfig { resource: "".into(), key: "k".into(), value: Some("v".into()) });
        image.apply(&MetadataRecord::RegisterBroker {
            id: 3,
            epoch: 5,
            incarnation: [9; 16],
            listeners: vec![BrokerListener {
                name: "PLAINTEXT".into(),
                host: "h".into(),
                port: 9092,
                security_protocol: 0,
            }],
            rack: Some("r1".into()),
            fenced: true,
            in_controlled_shutdown: false,
        });
        let json = serde_json::to_vec(&image).unwrap();
        let back: MetadataImage = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.topics().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(back.topic_by_id(Uuid([2; 16])), image.topic_by_id(Uuid([2; 16])));
        assert_eq!((back.applied, back.next_producer_id), (5, 7000));
        assert_eq!(back.broker_configs("").unwrap()["k"], "v");
        assert_eq!(back.broker(3), image.broker(3));
        assert!(back.broker(3).is_some_and(|b| b.rack.as_deref() == Some("r1") && b.fenced));
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

#[cfg(test)]
mod record_format_tests {
    use super::*;

    #[test]
    fn records_written_before_broker_registrations_still_load() {
        let old =
            r#"{"type":"CreateTopic","name":"a","id":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"replicas":[[1]],"configs":{}}"#;
        let record: MetadataRecord = serde_json::from_str(old).unwrap();
        let mut image = MetadataImage::default();
        image.apply(&record);
        assert_eq!(image.topic("a").unwrap().partitions[0].isr, vec![1]);
        let old = r#"{"type":"CreatePartitions","id":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"replicas":[[1]]}"#;
        image.apply(&serde_json::from_str(old).unwrap());
        assert_eq!(image.topic("a").unwrap().partitions.len(), 2);
    }

    #[test]
    fn a_single_nodes_records_are_written_as_before() {
        let record = MetadataRecord::CreateTopic {
            name: "a".into(),
            id: [1; 16],
            replicas: vec![vec![1]],
            configs: BTreeMap::new(),
            isrs: None,
        };
        let json = serde_json::to_string(&record).unwrap();
        assert!(!json.contains("isrs"), "{json}");
    }

    #[test]
    fn broker_records_round_trip_and_apply_only_at_the_current_epoch() {
        let register = MetadataRecord::RegisterBroker {
            id: 1,
            epoch: 0,
            incarnation: [3; 16],
            listeners: vec![BrokerListener {
                name: "PLAINTEXT".into(),
                host: "h".into(),
                port: 9092,
                security_protocol: 0,
            }],
            rack: Some("r1".into()),
            fenced: true,
            in_controlled_shutdown: false,
        };
        let records = vec![
            register,
            MetadataRecord::UnfenceBroker { id: 1, epoch: 0 },
            MetadataRecord::FenceBroker { id: 1, epoch: 7 },
            MetadataRecord::BrokerRegistrationChange {
                id: 1,
                epoch: 0,
                fenced: None,
                in_controlled_shutdown: Some(true),
            },
        ];
        let mut image = MetadataImage::default();
        for r in &records {
            let json = serde_json::to_string(r).unwrap();
            let back: MetadataRecord = serde_json::from_str(&json).unwrap();
            assert_eq!(&back, r);
            image.apply(&back);
        }
        let b = image.broker(1).unwrap();
        assert!(!b.fenced, "the fence at another epoch is skipped");
        assert!(b.in_controlled_shutdown);
        assert_eq!(b.rack.as_deref(), Some("r1"));
        image.apply(&MetadataRecord::UnregisterBroker { id: 1, epoch: 0 });
        assert!(image.broker(1).is_none());
    }

    #[test]
    fn reassignment_fields_are_absent_when_empty_and_default_when_absent() {
        let old = r#"{"type":"PartitionChange","topic_id":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"partition":0,"leader":1,"isr":[1],"leader_epoch":1,"partition_epoch":1,"replicas":[1]}"#;
        let record: MetadataRecord = serde_json::from_str(old).unwrap();
        assert!(matches!(&record, MetadataRecord::PartitionChange { adding_replicas, removing_replicas, .. }
            if adding_replicas.is_empty() && removing_replicas.is_empty()));
        let json = serde_json::to_string(&record).unwrap();
        assert!(!json.contains("adding_replicas") && !json.contains("removing_replicas"), "{json}");
        let mut moving = record;
        if let MetadataRecord::PartitionChange { replicas, adding_replicas, removing_replicas, .. } = &mut moving {
            (*replicas, *adding_replicas, *removing_replicas) = (vec![2, 1], vec![2], vec![1]);
        }
        let back: MetadataRecord = serde_json::from_str(&serde_json::to_string(&moving).unwrap()).unwrap();
        assert_eq!(back, moving);
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::CreateTopic {
            name: "a".into(),
            id: [1; 16],
            replicas: vec![vec![1]],
            configs: BTreeMap::new(),
            isrs: None,
        });
        image.apply(&moving);
        let snapshot: MetadataImage = serde_json::from_str(&serde_json::to_string(&image).unwrap()).unwrap();
        let p = snapshot.partition(Uuid([1; 16]), 0).unwrap();
        assert_eq!((p.adding_replicas.clone(), p.removing_replicas.clone()), (vec![2], vec![1]));
        assert!(p.is_reassigning());
        let old_snapshot = r#"{"index":0,"replicas":[1],"isr":[1],"leader":1,"leader_epoch":0,"partition_epoch":0,"elr":[],"leader_recovery_state":0}"#;
        let p: PartitionImage = serde_json::from_str(old_snapshot).unwrap();
        assert!(!p.is_reassigning(), "a snapshot from before reassignment has none in progress");
    }

    #[test]
    fn partition_changes_and_snapshots_without_a_last_known_elr_still_load() {
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::CreateTopic {
            name: "a".into(),
            id: [1; 16],
            replicas: vec![vec![1, 2]],
            configs: BTreeMap::new(),
            isrs: None,
        });
        let old = r#"{"type":"PartitionChange","topic_id":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"partition":0,"leader":-1,"isr":[],"elr":[1],"leader_epoch":1,"partition_epoch":1,"replicas":[1,2]}"#;
        image.apply(&serde_json::from_str(old).unwrap());
        let p = image.partition(Uuid([1; 16]), 0).unwrap();
        assert_eq!((p.elr.clone(), p.last_known_elr.clone()), (vec![1], vec![]));
        let mut json: serde_json::Value = serde_json::to_value(&image).unwrap();
        let snapshot_partition = &mut json["topics"][0]["partitions"][0];
        snapshot_partition.as_object_mut().unwrap().remove("last_known_elr");
        let back: MetadataImage = serde_json::from_value(json).unwrap();
        assert_eq!(back.partition(Uuid([1; 16]), 0), Some(p), "a snapshot from before last_known_elr");
        let change = MetadataRecord::PartitionChange {
            topic_id: [1; 16],
            partition: 0,
            leader: -1,
            isr: vec![],
            elr: vec![],
            last_known_elr: vec![2],
            leader_epoch: 2,
            partition_epoch: 2,
            replicas: vec![1, 2],
            leader_recovery_state: LEADER_RECOVERED,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        };
        let round_trip: MetadataRecord = serde_json::from_str(&serde_json::to_string(&change).unwrap()).unwrap();
        assert_eq!(round_trip, change);
    }

    #[test]
    fn partition_change_never_moves_epochs_back() {
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::CreateTopic {
            name: "a".into(),
            id: [1; 16],
            replicas: vec![vec![1, 2]],
            configs: BTreeMap::new(),
            isrs: None,
        });
        let change = |leader: i32, leader_epoch: i32, partition_epoch: i32| MetadataRecord::PartitionChange {
            topic_id: [1; 16],
            partition: 0,
            leader,
            isr: vec![leader],
            elr: vec![],
            last_known_elr: vec![],
            leader_epoch,
            partition_epoch,
            replicas: vec![1, 2],
            leader_recovery_state: LEADER_RECOVERED,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        image.apply(&change(2, 1, 1));
        image.apply(&change(1, 0, 2));
        image.apply(&change(1, 2, 1));
        let p = image.partition(Uuid([1; 16]), 0).unwrap();
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch, p.isr.clone()), (2, 1, 1, vec![2]));
    }
}
