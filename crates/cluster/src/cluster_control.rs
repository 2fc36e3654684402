//! The active controller's decisions about brokers and partition leadership, sans-I/O
//! (Kafka's `ClusterControlManager`, `BrokerHeartbeatManager` use, the broker parts of
//! `ReplicationControlManager`, and `ProducerIdControlManager`).
//!
//! Every decision reads the image and returns the records to commit with the answer
//! for the broker ([`ControllerResult`]); nothing is written here. The caller commits
//! the records (the single node's log, or the quorum) and applies them to the image
//! before the next decision, as Kafka's controller runs one event at a time against
//! its in-memory state. Time is an input (`now_ms`); the only state of its own is the
//! heartbeat sessions, which are not in the log.
//!
//! AlterPartition is in `alter_partition.rs`; elections in `partition_change.rs`.

use crate::controller::ControllerError;
use crate::heartbeat::BrokerHeartbeatManager;
use crate::image::{
    BrokerListener, BrokerRegistration, MetadataImage, MetadataRecord, PartitionImage, TopicImage, NO_LEADER,
};
use crate::partition_change::PartitionChangeBuilder;
use osprey_protocol::{ErrorCode, Uuid};
use std::ops::Range;

/// The records a decision wants committed, and what to answer once they are.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerResult<T> {
    pub records: Vec<MetadataRecord>,
    pub response: T,
}

/// Producer ids are handed out in blocks of this many (Kafka's
/// `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// The most listeners one broker may register: each is kept in the image and sent to
/// every client in Metadata.
pub const MAX_BROKER_LISTENERS: usize = 64;

/// The topic config that allows electing a replica outside the ISR.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";

/// The topic config below which replicas leaving the ISR join the ELR (KIP-966).
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";

#[derive(Debug, Clone)]
pub struct ClusterControlConfig {
    /// The cluster id brokers must register with when the image has none: a controller
    /// of the quorum leaves it `None` and takes the id the bootstrap committed
    /// (`MetadataImage::cluster_id`), which wins whenever the image has one.
    pub cluster_id: Option<String>,
    /// `broker.session.timeout.ms` (Kafka's default 9000).
    pub broker_session_timeout_ms: i64,
    /// The cluster default of `unclean.leader.election.enable` (Kafka's default false).
    pub unclean_leader_election_enable: bool,
    /// The static default of `min.insync.replicas` (Kafka's default 1); a topic's
    /// override, then the dynamic cluster default, win over it.
    pub min_insync_replicas: i32,
    /// Eligible leader replicas (KIP-966), Kafka's `eligible.leader.replicas.version=1`,
    /// on by default since Kafka 4.1 for a new cluster.
    pub eligible_leader_replicas_enabled: bool,
}

/// A BrokerRegistration request (API 62), as the controller needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistrationInput {
    pub broker_id: i32,
    pub cluster_id: String,
    pub incarnation_id: Uuid,
    pub listeners: Vec<BrokerListener>,
    pub rack: Option<String>,
    /// The epoch the broker had when it last shut down cleanly (version 3+, KIP-966),
    /// -1 when it cannot tell: a new incarnation that does not name the epoch the
    /// controller has for it shut down uncleanly.
    pub previous_broker_epoch: i64,
}

/// A BrokerHeartbeat request (API 63).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerHeartbeatInput {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub current_metadata_offset: i64,
    pub want_fence: bool,
    pub want_shut_down: bool,
}

/// The BrokerHeartbeat response fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerHeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub in_controlled_shutdown: bool,
    pub should_shut_down: bool,
}

/// A broker's state as the heartbeat decision sees it (Kafka's `BrokerControlState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BrokerControlState {
    Fenced,
    Unfenced,
    ControlledShutdown,
    ShutdownNow,
}

#[derive(Debug, Clone)]
pub struct ClusterControl {
    config: ClusterControlConfig,
    heartbeats: BrokerHeartbeatManager,
}

impl ClusterControl {
    pub fn new(config: ClusterControlConfig) -> ClusterControl {
        let heartbeats = BrokerHeartbeatManager::new(config.broker_session_timeout_ms);
        ClusterControl { config, heartbeats }
    }

    pub fn config(&self) -> &ClusterControlConfig {
        &self.config
    }

    pub fn heartbeats(&self) -> &BrokerHeartbeatManager {
        &self.heartbeats
    }

    /// This node became the active controller: every registered broker gets a fresh
    /// session, so none is fenced for heartbeats the previous controller received.
    pub fn activate(&mut self, image: &MetadataImage, now_ms: i64) {
        self.heartbeats.reset_sessions(image.brokers().map(|b| (b.id, b.epoch)), now_ms);
    }

    /// BrokerRegistration (Kafka's `ClusterControlManager.registerBroker`). The answer
    /// is the broker epoch.
    pub fn register_broker(
        &mut self,
        image: &MetadataImage,
        request: &BrokerRegistrationInput,
        now_ms: i64,
    ) -> Result<ControllerResult<i64>, ControllerError> {
        let id = request.broker_id;
        if id < 0 {
            return Err(ControllerError::new(ErrorCode::INVALID_REQUEST, format!("Invalid broker id {id}.")));
        }
        let Some(expected) = image.cluster_id.as_deref().or(self.config.cluster_id.as_deref()) else {
            // A quorum that has not committed its cluster id yet has not formed: the broker
            // retries, as it does against a controller that is not active.
            return Err(ControllerError::new(ErrorCode::NOT_CONTROLLER, "The cluster id is not known yet."));
        };
        if request.cluster_id != expected {
            return Err(ControllerError::new(
                ErrorCode::INCONSISTENT_CLUSTER_ID,
                format!("Expected cluster ID {expected}, but got cluster ID {}", request.cluster_id),
            ));
        }
        if request.listeners.len() > MAX_BROKER_LISTENERS {
            return Err(ControllerError::new(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "{} listeners is more than a broker may register ({MAX_BROKER_LISTENERS}).",
                    request.listeners.len()
                ),
            ));
        }
        let existing = image.broker(id);
        let mut records = Vec::new();
        if let Some(old) = existing {
            if old.incarnation == request.incarnation_id {
                // The same process registering again (its answer was lost): the epoch
                // and the fencing state stay, only the listeners and rack may change.
                records.push(register_record(request, old.epoch, old.fenced, old.in_controlled_shutdown));
                self.heartbeats.register(id, old.epoch, now_ms);
                return Ok(ControllerResult { records, response: old.epoch });
            }
            if self.heartbeats.has_valid_session(id, old.epoch, old.fenced, now_ms) {
                return Err(ControllerError::new(
                    ErrorCode::DUPLICATE_BROKER_REGISTRATION,
                    "Another broker is registered with that broker id. If the broker was recently restarted this should self-resolve once the heartbeat manager expires the broker's session.",
                ));
            }
        }
        // Kafka's `registerBroker` and `handleBrokerShutdown`: a new incarnation that did
        // not shut down cleanly may have lost records it acknowledged, so it leaves every
        // ISR and ELR; else, if the previous incarnation is gone without being fenced
        // yet, its leaderships move away before the new one starts, fenced.
        let clean = existing.is_some_and(|old| old.epoch == request.previous_broker_epoch);
        if self.config.eligible_leader_replicas_enabled && !clean {
            self.unclean_shutdown_records(image, id, &mut records);
        } else if let Some(old) = existing.filter(|old| !old.fenced) {
            self.fence_records(image, old, &mut records);
        }
        let epoch = offset_after(image, &records) as i64;
        records.push(register_record(request, epoch, true, false));
        self.heartbeats.register(id, epoch, now_ms);
        Ok(ControllerResult { records, response: epoch })
    }

    /// BrokerHeartbeat (Kafka's `ReplicationControlManager.processBrokerHeartbeat`):
    /// unfences a broker that caught up with its registration, fences one that asks,
    /// and walks a controlled shutdown through moving leadership away.
    pub fn broker_heartbeat(
        &mut self,
        image: &MetadataImage,
        request: &BrokerHeartbeatInput,
        now_ms: i64,
    ) -> Result<ControllerResult<BrokerHeartbeatReply>, ControllerError> {
        let broker = check_broker_epoch(image, request.broker_id, request.broker_epoch)?;
        let current = if broker.fenced {
            BrokerControlState::Fenced
        } else if broker.in_controlled_shutdown {
            BrokerControlState::ControlledShutdown
        } else {
            BrokerControlState::Unfenced
        };
        // Caught up with its registration, as Kafka asks, and, stricter than Kafka, with
        // the record that last fenced it: a broker fenced while cut off learns that its
        // leaderships moved before it is unfenced (and holds a lease again).
        let caught_up = request.current_metadata_offset >= broker.register_offset.max(broker.fenced_offset) as i64;
        let next = self.next_state(image, broker, current, request, caught_up);
        let mut records = Vec::new();
        if next != current {
            match next {
                BrokerControlState::Fenced | BrokerControlState::ShutdownNow => {
                    if !broker.fenced {
                        self.fence_records(image, broker, &mut records)
                    }
                }
                BrokerControlState::Unfenced => self.unfence_records(image, broker, &mut records),
                BrokerControlState::ControlledShutdown => self.controlled_shutdown_records(image, broker, &mut records),
            }
        }
        self.heartbeats.touch(broker.id, broker.epoch, now_ms, request.current_metadata_offset);
        if next == BrokerControlState::ControlledShutdown {
            // Leaderships are gone once every active broker applied the last record
            // written for this shutdown (or, with nothing written, what exists now).
            let last = offset_after(image, &records) as i64 - 1;
            self.heartbeats.set_controlled_shutdown_offset(broker.id, broker.epoch, last);
        }
        let fenced = matches!(next, BrokerControlState::Fenced | BrokerControlState::ShutdownNow);
        let reply = BrokerHeartbeatReply {
            is_caught_up: caught_up,
            is_fenced: fenced,
            in_controlled_shutdown: next == BrokerControlState::ControlledShutdown,
            should_shut_down: next == BrokerControlState::ShutdownNow,
        };
        Ok(ControllerResult { records, response: reply })
    }

    /// Fences one broker whose session timed out (Kafka's `maybeFenceOneStaleBroker`).
    /// Commit and apply the records, then call again until it returns none: each
    /// fencing elects on the image the previous ones produced.
    pub fn tick(&mut self, image: &MetadataImage, now_ms: i64) -> ControllerResult<Option<i32>> {
        let stale = image.brokers().find(|b| !b.fenced && self.heartbeats.session_expired(b.id, b.epoch, now_ms));
        let mut records = Vec::new();
        let Some(broker) = stale else {
            return ControllerResult { records, response: None };
        };
        tracing::info!(broker = broker.id, epoch = broker.epoch, "Fencing broker because its session has timed out.");
        self.fence_records(image, broker, &mut records);
        ControllerResult { records, response: Some(broker.id) }
    }

    /// When `tick` next has something to do: the earliest session deadline of an
    /// unfenced broker.
    pub fn next_deadline(&self, image: &MetadataImage) -> Option<i64> {
        image.brokers().filter(|b| !b.fenced).filter_map(|b| self.heartbeats.session_deadline(b.id, b.epoch)).min()
    }

    /// Kafka's periodic `maybeElectUncleanLeaders` (every
    /// `unclean.leader.election.interval.ms`): every offline partition of a topic that
    /// allows unclean election gets a leader: an active ISR or ELR member if there is
    /// one (a clean election), else the last known leader or the first live replica,
    /// alone in the ISR and recovering. Fence and unfence events already elect this way; this catches
    /// a topic whose config was switched on while its partitions were offline. The
    /// answer is how many partitions got a leader.
    pub fn elect_unclean_leaders(&self, image: &MetadataImage) -> ControllerResult<usize> {
        let acceptable = |r: i32| image.broker(r).is_some_and(|b| b.is_active());
        let mut records = Vec::new();
        for topic in image.topics().filter(|t| self.unclean_election_enabled(t)) {
            for p in topic.partitions.iter().filter(|p| p.leader == NO_LEADER) {
                let change = self.partition_change(image, topic, p, &acceptable).unclean_election(true).build();
                records.extend(change);
            }
        }
        let elected = records.len();
        ControllerResult { records, response: elected }
    }

    /// UnregisterBroker (API 64, Kafka's `ReplicationControlManager.unregisterBroker`):
    /// the broker leaves every ISR and leadership (partitions where it is in the ELR are
    /// looked at too, as Kafka's `handleBrokerUnregistered` does; it stays in the ELR),
    /// then its registration is removed.
    pub fn unregister_broker(
        &mut self,
        image: &MetadataImage,
        broker_id: i32,
    ) -> Result<ControllerResult<()>, ControllerError> {
        let broker = image.broker(broker_id).ok_or_else(|| {
            ControllerError::new(
                ErrorCode::BROKER_ID_NOT_REGISTERED,
                format!("Broker ID {broker_id} is not currently registered"),
            )
        })?;
        let mut records = Vec::new();
        self.leader_and_isr_updates(image, BrokerChange::Unregistered(broker_id), &mut records);
        records.push(MetadataRecord::UnregisterBroker { id: broker_id, epoch: broker.epoch });
        self.heartbeats.remove(broker_id);
        Ok(ControllerResult { records, response: () })
    }

    /// AllocateProducerIds (Kafka's `ProducerIdControlManager.generateNextProducerId`):
    /// the next block of `PRODUCER_ID_BLOCK_SIZE` ids, for a broker at its current epoch.
    pub fn allocate_producer_ids(
        &self,
        image: &MetadataImage,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<ControllerResult<Range<i64>>, ControllerError> {
        check_broker_epoch(image, broker_id, broker_epoch)?;
        let start = image.next_producer_id;
        if start > i64::MAX - PRODUCER_ID_BLOCK_SIZE {
            return Err(ControllerError::new(
                ErrorCode::UNKNOWN_SERVER_ERROR,
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit",
            ));
        }
        let next = start + PRODUCER_ID_BLOCK_SIZE;
        Ok(ControllerResult { records: vec![MetadataRecord::ProducerIdsAllocated { next }], response: start..next })
    }

    /// Kafka's `BrokerHeartbeatManager.calculateNextBrokerState`.
    fn next_state(
        &self,
        image: &MetadataImage,
        broker: &BrokerRegistration,
        current: BrokerControlState,
        request: &BrokerHeartbeatInput,
        caught_up: bool,
    ) -> BrokerControlState {
        use BrokerControlState::*;
        match current {
            Fenced if request.want_shut_down => ShutdownNow,
            Fenced if !request.want_fence && caught_up => Unfenced,
            Fenced => Fenced,
            Unfenced if request.want_fence && request.want_shut_down => ShutdownNow,
            Unfenced if request.want_fence => Fenced,
            Unfenced if request.want_shut_down && leads_any(image, broker.id) => ControlledShutdown,
            Unfenced if request.want_shut_down => ShutdownNow,
            Unfenced => Unfenced,
            ControlledShutdown if leads_any(image, broker.id) => ControlledShutdown,
            ControlledShutdown => {
                let lowest = self.lowest_active_offset(image);
                match self.heartbeats.controlled_shutdown_offset(broker.id, broker.epoch) {
                    Some(offset) if offset <= lowest => ShutdownNow,
                    _ => ControlledShutdown,
                }
            }
            ShutdownNow => ShutdownNow,
        }
    }

    /// The lowest metadata offset any unfenced broker reported (-1 if one has not yet).
    fn lowest_active_offset(&self, image: &MetadataImage) -> i64 {
        image
            .brokers()
            .filter(|b| !b.fenced)
            .map(|b| self.heartbeats.metadata_offset(b.id, b.epoch).unwrap_or(-1))
            .min()
            .unwrap_or(i64::MAX)
    }

    /// Kafka's `handleBrokerFenced`: the broker leaves every ISR (into the ELR when the
    /// ISR falls below `min.insync.replicas`; without ELR the last member stays) and
    /// every leadership, then is marked fenced.
    fn fence_records(&self, image: &MetadataImage, broker: &BrokerRegistration, records: &mut Vec<MetadataRecord>) {
        self.leader_and_isr_updates(image, BrokerChange::Removed(broker.id), records);
        records.push(MetadataRecord::BrokerRegistrationChange {
            id: broker.id,
            epoch: broker.epoch,
            fenced: Some(true),
            in_controlled_shutdown: None,
        });
    }

    /// Kafka's `handleBrokerUnfenced`: marked unfenced, then it may lead partitions that
    /// have no leader. A broker fenced at the end of a controlled shutdown that goes on
    /// heartbeating without asking to shut down is an ordinary broker again: its
    /// shutdown flag is cleared with the fence, or it would lead while "shutting down".
    fn unfence_records(&self, image: &MetadataImage, broker: &BrokerRegistration, records: &mut Vec<MetadataRecord>) {
        records.push(MetadataRecord::BrokerRegistrationChange {
            id: broker.id,
            epoch: broker.epoch,
            fenced: Some(false),
            in_controlled_shutdown: broker.in_controlled_shutdown.then_some(false),
        });
        self.leader_and_isr_updates(image, BrokerChange::Added(broker.id), records);
    }

    /// Kafka's `handleBrokerShutdown` for an unclean shutdown (KIP-966): the broker
    /// leaves every ISR and every ELR, and leads nothing.
    fn unclean_shutdown_records(&self, image: &MetadataImage, broker_id: i32, records: &mut Vec<MetadataRecord>) {
        self.leader_and_isr_updates(image, BrokerChange::UncleanShutdown(broker_id), records);
    }

    /// Kafka's `handleBrokerInControlledShutdown`: marked shutting down (so it joins no
    /// ISR and leads nothing), then leaves ISRs and leaderships as when fenced.
    fn controlled_shutdown_records(
        &self,
        image: &MetadataImage,
        broker: &BrokerRegistration,
        records: &mut Vec<MetadataRecord>,
    ) {
        records.push(MetadataRecord::BrokerRegistrationChange {
            id: broker.id,
            epoch: broker.epoch,
            fenced: None,
            in_controlled_shutdown: Some(true),
        });
        self.leader_and_isr_updates(image, BrokerChange::Removed(broker.id), records);
    }

    /// Kafka's `generateLeaderAndIsrUpdates`: for every partition the change concerns,
    /// the ISR without a removed broker and a new leader if the current one is not
    /// acceptable. An added broker is acceptable although the image does not say it is
    /// unfenced yet (its unfence record is in the same batch).
    fn leader_and_isr_updates(&self, image: &MetadataImage, change: BrokerChange, records: &mut Vec<MetadataRecord>) {
        let (removed, added) = match change {
            BrokerChange::Removed(r) | BrokerChange::Unregistered(r) | BrokerChange::UncleanShutdown(r) => {
                (Some(r), None)
            }
            BrokerChange::Added(r) => (None, Some(r)),
        };
        let acceptable =
            |r: i32| Some(r) != removed && (Some(r) == added || image.broker(r).is_some_and(|b| b.is_active()));
        for topic in image.topics() {
            let unclean = self.unclean_election_enabled(topic);
            for p in topic.partitions.iter().filter(|p| change.concerns(p)) {
                let target_isr: Vec<i32> = p.isr.iter().copied().filter(|&i| Some(i) != removed).collect();
                let mut builder = self
                    .partition_change(image, topic, p, &acceptable)
                    .target_isr(target_isr)
                    .unclean_election(unclean);
                if let BrokerChange::UncleanShutdown(r) = change {
                    builder = builder.unclean_shutdown_replica(r);
                }
                records.extend(builder.build());
            }
        }
    }

    /// A partition change with this topic's eligible leader replicas settings (every
    /// decision about a partition starts here, as every one of Kafka's sets
    /// `setEligibleLeaderReplicasEnabled` and the topic's effective min ISR).
    pub(crate) fn partition_change<'a>(
        &self,
        image: &MetadataImage,
        topic: &TopicImage,
        p: &'a PartitionImage,
        acceptable: &'a dyn Fn(i32) -> bool,
    ) -> PartitionChangeBuilder<'a> {
        let min_isr = self.config.eligible_leader_replicas_enabled.then(|| self.effective_min_isr(image, topic));
        PartitionChangeBuilder::new(topic.id, p, acceptable).eligible_leader_replicas(min_isr)
    }

    /// Kafka's `getTopicEffectiveMinIsr`: the topic's `min.insync.replicas` (its
    /// override, else the dynamic cluster default, else the static one), at most the
    /// replication factor (of partition 0, as Kafka) and at least 1.
    pub(crate) fn effective_min_isr(&self, image: &MetadataImage, topic: &TopicImage) -> usize {
        let configured = topic
            .configs
            .get(MIN_INSYNC_REPLICAS)
            .or_else(|| image.broker_configs("").and_then(|c| c.get(MIN_INSYNC_REPLICAS)))
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(self.config.min_insync_replicas);
        let replication_factor = topic.partitions.first().map_or(0, |p| p.replicas.len());
        usize::try_from(configured).unwrap_or(1).min(replication_factor).max(1)
    }

    pub(crate) fn unclean_election_enabled(&self, topic: &TopicImage) -> bool {
        match topic.configs.get(UNCLEAN_LEADER_ELECTION_ENABLE) {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => self.config.unclean_leader_election_enable,
        }
    }
}

/// What happened to a broker, for [`ClusterControl::leader_and_isr_updates`]: which
/// partitions it concerns (Kafka's `brokersToIsrs` and `brokersToElrs` iterators) and
/// how the broker stands in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BrokerChange {
    /// Fenced or in controlled shutdown: it leaves the ISRs it is in and leads nothing.
    Removed(i32),
    /// Unregistered: as `Removed`, looking at the partitions it is in the ELR of too.
    Unregistered(i32),
    /// Unfenced: it may lead partitions that have no leader.
    Added(i32),
    /// Registered again after an unclean shutdown: it leaves every ISR and ELR.
    UncleanShutdown(i32),
}

impl BrokerChange {
    fn concerns(self, p: &PartitionImage) -> bool {
        match self {
            BrokerChange::Removed(r) => p.isr.contains(&r) || p.leader == r,
            BrokerChange::Unregistered(r) | BrokerChange::UncleanShutdown(r) => {
                p.isr.contains(&r) || p.elr.contains(&r) || p.leader == r
            }
            BrokerChange::Added(_) => p.leader == NO_LEADER,
        }
    }
}

/// Kafka's `ClusterControlManager.checkBrokerEpoch`: STALE_BROKER_EPOCH unless the
/// broker is registered at exactly this epoch.
pub(crate) fn check_broker_epoch(
    image: &MetadataImage,
    id: i32,
    epoch: i64,
) -> Result<&BrokerRegistration, ControllerError> {
    let broker = image.broker(id).ok_or_else(|| {
        ControllerError::new(ErrorCode::STALE_BROKER_EPOCH, format!("No broker registration found for broker id {id}"))
    })?;
    if broker.epoch != epoch {
        return Err(ControllerError::new(
            ErrorCode::STALE_BROKER_EPOCH,
            format!("Expected broker epoch {}, but got broker epoch {epoch}", broker.epoch),
        ));
    }
    Ok(broker)
}

/// Does the broker lead any partition?
fn leads_any(image: &MetadataImage, id: i32) -> bool {
    image.topics().any(|t| t.partitions.iter().any(|p| p.leader == id))
}

/// The offset the record after `records` will have once they are appended.
fn offset_after(image: &MetadataImage, records: &[MetadataRecord]) -> u64 {
    image.next_offset() + records.len() as u64
}

fn register_record(
    request: &BrokerRegistrationInput,
    epoch: i64,
    fenced: bool,
    in_controlled_shutdown: bool,
) -> MetadataRecord {
    MetadataRecord::RegisterBroker {
        id: request.broker_id,
        epoch,
        incarnation: request.incarnation_id.0,
        listeners: request.listeners.clone(),
        rack: request.rack.clone(),
        fenced,
        in_controlled_shutdown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::LEADER_RECOVERED;
    use crate::test_support::{TestCluster, CLUSTER_ID, SESSION_MS};
    use std::collections::BTreeMap;

    #[test]
    fn registration_starts_fenced_with_the_record_offset_as_epoch() {
        let mut c = TestCluster::new();
        c.image.apply(&MetadataRecord::ProducerIdsAllocated { next: 0 });
        let result = c.control.register_broker(&c.image, &TestCluster::registration(1, 1), 0).unwrap();
        assert_eq!(result.response, 1, "the record lands at offset 1");
        let epoch = c.commit(result);
        let b = c.image.broker(1).unwrap();
        assert!(b.fenced && !b.in_controlled_shutdown);
        assert_eq!((b.epoch, b.register_offset), (epoch, 1));
    }

    #[test]
    fn same_incarnation_registering_again_keeps_epoch_and_state() {
        let mut c = TestCluster::new();
        let epoch = c.add_broker(1, 0);
        let again = c.control.register_broker(&c.image, &TestCluster::registration(1, 1), 10).unwrap();
        assert_eq!(again.response, epoch);
        c.commit(again);
        assert!(!c.image.broker(1).unwrap().fenced, "still unfenced");
        assert_eq!(c.image.broker(1).unwrap().epoch, epoch);
    }

    #[test]
    fn another_incarnation_is_refused_while_the_session_lives() {
        let mut c = TestCluster::new();
        let old = c.add_broker(1, 0);
        c.add_broker(2, 0);
        c.add_topic(vec![vec![1, 2]], BTreeMap::new());
        let err = c.control.register_broker(&c.image, &TestCluster::registration(1, 9), SESSION_MS).unwrap_err();
        assert_eq!(err.code, ErrorCode::DUPLICATE_BROKER_REGISTRATION);
        assert!(err.message.starts_with("Another broker is registered with that broker id."), "{}", err.message);
        // Broker 2 keeps heartbeating; broker 1's session has expired: the new
        // incarnation replaces it, and its leadership moves first.
        c.heartbeat(2, c.image.broker(2).unwrap().epoch, SESSION_MS, false);
        let result = c.control.register_broker(&c.image, &TestCluster::registration(1, 9), SESSION_MS + 1).unwrap();
        let epoch = c.commit(result);
        assert!(epoch > old);
        let b = c.image.broker(1).unwrap();
        assert!(b.fenced);
        assert_eq!(b.incarnation, Uuid([9; 16]));
        assert_eq!(c.partition(0).leader, 2);
        assert_eq!(c.partition(0).isr, vec![2]);
    }

    #[test]
    fn wrong_cluster_id_is_inconsistent_cluster_id() {
        let mut c = TestCluster::new();
        let mut request = TestCluster::registration(1, 1);
        request.cluster_id = "other".into();
        let err = c.control.register_broker(&c.image, &request, 0).unwrap_err();
        assert_eq!(err.code, ErrorCode::INCONSISTENT_CLUSTER_ID);
        assert_eq!(err.message, format!("Expected cluster ID {CLUSTER_ID}, but got cluster ID other"));
    }

    #[test]
    fn heartbeat_unfences_only_once_caught_up_with_the_registration() {
        let mut c = TestCluster::new();
        let result = c.control.register_broker(&c.image, &TestCluster::registration(1, 1), 0).unwrap();
        let epoch = c.commit(result);
        let behind = BrokerHeartbeatInput {
            broker_id: 1,
            broker_epoch: epoch,
            current_metadata_offset: epoch - 1,
            want_fence: false,
            want_shut_down: false,
        };
        let reply = {
            let r = c.control.broker_heartbeat(&c.image, &behind, 100).unwrap();
            c.commit(r)
        };
        assert!(reply.is_fenced && !reply.is_caught_up);
        assert!(c.image.broker(1).unwrap().fenced);
        let caught_up = BrokerHeartbeatInput { current_metadata_offset: epoch, ..behind };
        let reply = {
            let r = c.control.broker_heartbeat(&c.image, &caught_up, 200).unwrap();
            c.commit(r)
        };
        assert!(!reply.is_fenced && reply.is_caught_up);
        assert!(!c.image.broker(1).unwrap().fenced);
    }

    #[test]
    fn stale_or_unknown_broker_epoch_is_stale_broker_epoch() {
        let mut c = TestCluster::new();
        let epoch = c.add_broker(1, 0);
        let request = BrokerHeartbeatInput {
            broker_id: 1,
            broker_epoch: epoch + 1,
            current_metadata_offset: 0,
            want_fence: false,
            want_shut_down: false,
        };
        let err = c.control.broker_heartbeat(&c.image, &request, 0).unwrap_err();
        assert_eq!(err.code, ErrorCode::STALE_BROKER_EPOCH);
        assert_eq!(err.message, format!("Expected broker epoch {epoch}, but got broker epoch {}", epoch + 1));
        let err = c.control.allocate_producer_ids(&c.image, 5, 0).unwrap_err();
        assert_eq!(err.message, "No broker registration found for broker id 5");
    }

    #[test]
    fn a_broker_fenced_while_cut_off_is_unfenced_only_once_it_applied_its_fencing() {
        let mut c = TestCluster::new();
        let e1 = c.add_broker(1, 0);
        let e2 = c.add_broker(2, 0);
        c.add_topic(vec![vec![1, 2]], BTreeMap::new());
        c.heartbeat(2, e2, 5_000, false);
        let before_fencing = c.image.next_offset() as i64;
        let fenced = c.control.tick(&c.image, SESSION_MS + 1);
        c.commit(fenced);
        assert_eq!(c.partition(0).leader, 2);
        let fence_record = c.image.broker(1).unwrap().fenced_offset as i64;
        assert!(fence_record >= before_fencing && fence_record < c.image.next_offset() as i64);
        // Back, but it has not applied the batch that moved its leadership yet: it is
        // caught up with its registration, which is all Kafka asks.
        let behind = BrokerHeartbeatInput {
            broker_id: 1,
            broker_epoch: e1,
            current_metadata_offset: fence_record - 1,
            want_fence: false,
            want_shut_down: false,
        };
        assert!(behind.current_metadata_offset >= c.image.broker(1).unwrap().register_offset as i64);
        let reply = {
            let r = c.control.broker_heartbeat(&c.image, &behind, SESSION_MS + 10).unwrap();
            c.commit(r)
        };
        assert!(reply.is_fenced && c.image.broker(1).unwrap().fenced);
        let applied = BrokerHeartbeatInput { current_metadata_offset: fence_record, ..behind };
        let reply = {
            let r = c.control.broker_heartbeat(&c.image, &applied, SESSION_MS + 20).unwrap();
            c.commit(r)
        };
        assert!(!reply.is_fenced && !c.image.broker(1).unwrap().fenced);
    }

    #[test]
    fn session_timeout_fences_and_moves_leadership_bumping_epochs() {
        let mut c = TestCluster::new();
        let e1 = c.add_broker(1, 0);
        let e2 = c.add_broker(2, 0);
        c.add_topic(vec![vec![1, 2], vec![2, 1]], BTreeMap::new());
        assert_eq!(c.control.next_deadline(&c.image), Some(SESSION_MS));
        assert_eq!(c.control.tick(&c.image, SESSION_MS).response, None, "not before the timeout");
        c.heartbeat(2, e2, 5_000, false);
        let fenced = c.control.tick(&c.image, SESSION_MS + 1);
        assert_eq!(fenced.response, Some(1));
        c.commit(fenced);
        assert!(c.image.broker(1).unwrap().fenced);
        let p0 = c.partition(0);
        assert_eq!((p0.leader, p0.isr.clone(), p0.leader_epoch, p0.partition_epoch), (2, vec![2], 1, 1));
        let p1 = c.partition(1);
        assert_eq!((p1.leader, p1.isr.clone(), p1.leader_epoch, p1.partition_epoch), (2, vec![2], 0, 1));
        assert_eq!(c.control.tick(&c.image, SESSION_MS + 1).response, None, "fenced once");
        // Broker 2 goes too: the ISR empties into the ELR, the partitions go offline.
        let fenced = c.control.tick(&c.image, 5_000 + SESSION_MS + 1);
        assert_eq!(fenced.response, Some(2));
        c.commit(fenced);
        let p0 = c.partition(0);
        assert_eq!((p0.leader, p0.isr.clone(), p0.elr.clone(), p0.leader_epoch), (NO_LEADER, vec![], vec![2], 2));
        assert_eq!(p0.last_known_elr, vec![2], "the last leader");
        // Broker 2 comes back: unfenced, it leads again what it was in the ELR of.
        c.heartbeat(2, e2, 20_000, false);
        let p0 = c.partition(0);
        assert_eq!((p0.leader, p0.isr.clone(), p0.elr.clone(), p0.leader_epoch), (2, vec![2], vec![], 3));
        assert!(p0.last_known_elr.is_empty());
        assert_eq!(p0.leader_recovery_state, LEADER_RECOVERED, "a clean election");
        let _ = e1;
    }

    #[test]
    fn without_eligible_leader_replicas_the_last_isr_member_stays_when_fenced() {
        let mut c = TestCluster::without_elr();
        c.add_broker(1, 0);
        let e2 = c.add_broker(2, 0);
        c.add_topic(vec![vec![1, 2]], BTreeMap::new());
        c.heartbeat(2, e2, 5_000, false);
        for now_ms in [SESSION_MS + 1, 5_000 + SESSION_MS + 1] {
            let fenced = c.control.tick(&c.image, now_ms);
            c.commit(fenced);
        }
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.elr.clone()), (NO_LEADER, vec![2], vec![]));
        assert!(p.last_known_elr.is_empty());
        c.heartbeat(2, e2, 20_000, false);
        assert_eq!((c.partition(0).leader, c.partition(0).leader_epoch), (2, 3));
    }

    /// Brokers 1-3, partition [1, 2, 3] with `min.insync.replicas=2`; brokers 3 then 2
    /// time out: broker 1 is the ISR, broker 2 in the ELR. Broker 2's old epoch.
    fn isr_1_elr_2() -> (TestCluster, i64) {
        let mut c = TestCluster::new();
        let e1 = c.add_broker(1, 0);
        let e2 = c.add_broker(2, 0);
        c.add_broker(3, 0);
        let configs = BTreeMap::from([(MIN_INSYNC_REPLICAS.to_string(), "2".to_string())]);
        c.add_topic(vec![vec![1, 2, 3]], configs);
        c.heartbeat(1, e1, 5_000, false);
        c.heartbeat(2, e2, 5_000, false);
        let fenced = c.control.tick(&c.image, SESSION_MS + 1);
        assert_eq!(fenced.response, Some(3));
        c.commit(fenced);
        assert_eq!((c.partition(0).isr.clone(), c.partition(0).elr.clone()), (vec![1, 2], vec![]), "at min ISR");
        c.heartbeat(1, e1, 10_000, false);
        let fenced = c.control.tick(&c.image, 5_000 + SESSION_MS + 1);
        assert_eq!(fenced.response, Some(2));
        c.commit(fenced);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.elr.clone()), (1, vec![1], vec![2]));
        (c, e2)
    }

    #[test]
    fn a_broker_back_from_an_unclean_shutdown_leaves_every_elr() {
        let (mut c, _) = isr_1_elr_2();
        let unclean = TestCluster::registration(2, 20);
        let result = c.control.register_broker(&c.image, &unclean, 20_000).unwrap();
        c.commit(result);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.elr.clone()), (1, vec![1], vec![]));
    }

    #[test]
    fn a_broker_back_from_a_clean_shutdown_stays_in_the_elr_and_may_lead_from_it() {
        let (mut c, e2) = isr_1_elr_2();
        let clean = BrokerRegistrationInput { previous_broker_epoch: e2, ..TestCluster::registration(2, 20) };
        let result = c.control.register_broker(&c.image, &clean, 20_000).unwrap();
        let new_e2 = c.commit(result);
        assert_eq!(c.partition(0).elr, vec![2]);
        // Broker 1 goes: the ISR empties; broker 2, unfenced, leads from the ELR.
        let fenced = c.control.tick(&c.image, 10_000 + SESSION_MS + 1);
        assert_eq!(fenced.response, Some(1));
        c.commit(fenced);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.elr.clone()), (NO_LEADER, vec![], vec![1, 2]));
        c.heartbeat(2, new_e2, 21_000, false);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.elr.clone()), (2, vec![2], vec![1]));
        assert_eq!(p.leader_recovery_state, LEADER_RECOVERED);
    }

    #[test]
    fn effective_min_isr_is_the_topics_then_the_clusters_at_most_the_replication_factor() {
        let mut c = TestCluster::new();
        c.add_topic(vec![vec![1, 2, 3]], BTreeMap::new());
        let topic = |c: &TestCluster| c.image.topic("t").unwrap().clone();
        assert_eq!(c.control.effective_min_isr(&c.image, &topic(&c)), 1, "the static default");
        c.image.apply(&MetadataRecord::SetBrokerConfig {
            resource: String::new(),
            key: MIN_INSYNC_REPLICAS.into(),
            value: Some("2".into()),
        });
        assert_eq!(c.control.effective_min_isr(&c.image, &topic(&c)), 2, "the dynamic cluster default");
        c.image.apply(&MetadataRecord::SetTopicConfig {
            id: crate::test_support::TOPIC,
            key: MIN_INSYNC_REPLICAS.into(),
            value: Some("5".into()),
        });
        assert_eq!(c.control.effective_min_isr(&c.image, &topic(&c)), 3, "capped at the replication factor");
    }

    #[test]
    fn unclean_election_takes_a_live_replica_outside_the_isr_when_enabled() {
        let mut c = TestCluster::new();
        c.add_broker(1, 0);
        let e2 = c.add_broker(2, 0);
        let configs = BTreeMap::from([(UNCLEAN_LEADER_ELECTION_ENABLE.to_string(), "true".to_string())]);
        c.add_topic(vec![vec![1, 2]], configs);
        c.image.apply(&MetadataRecord::PartitionChange {
            topic_id: crate::test_support::TOPIC,
            partition: 0,
            leader: 1,
            isr: vec![1],
            elr: vec![],
            last_known_elr: Vec::new(),
            leader_epoch: 0,
            partition_epoch: 1,
            replicas: vec![1, 2],
            leader_recovery_state: 0,
            adding_replicas: vec![],
            removing_replicas: vec![],
        });
        c.heartbeat(2, e2, 5_000, false);
        let fenced = c.control.tick(&c.image, SESSION_MS + 1);
        c.commit(fenced);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.leader_recovery_state), (2, vec![2], crate::image::LEADER_RECOVERING));
    }

    #[test]
    fn switching_unclean_election_on_elects_offline_partitions_on_the_next_pass() {
        let mut c = TestCluster::new();
        let e1 = c.add_broker(1, 0);
        c.add_broker(2, 0);
        c.add_topic(vec![vec![2, 1]], BTreeMap::new());
        c.image.apply(&MetadataRecord::PartitionChange {
            topic_id: crate::test_support::TOPIC,
            partition: 0,
            leader: 2,
            isr: vec![2],
            elr: vec![],
            last_known_elr: Vec::new(),
            leader_epoch: 0,
            partition_epoch: 1,
            replicas: vec![2, 1],
            leader_recovery_state: 0,
            adding_replicas: vec![],
            removing_replicas: vec![],
        });
        c.heartbeat(1, e1, 5_000, false);
        let fenced = c.control.tick(&c.image, SESSION_MS + 1);
        c.commit(fenced);
        assert_eq!(c.partition(0).leader, NO_LEADER, "clean election only: offline");
        assert_eq!(c.control.elect_unclean_leaders(&c.image).response, 0, "not allowed yet");
        c.image.apply(&MetadataRecord::SetTopicConfig {
            id: crate::test_support::TOPIC,
            key: UNCLEAN_LEADER_ELECTION_ENABLE.into(),
            value: Some("true".into()),
        });
        let elected = c.control.elect_unclean_leaders(&c.image);
        assert_eq!(elected.response, 1);
        c.commit(elected);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.leader_recovery_state), (1, vec![1], crate::image::LEADER_RECOVERING));
    }

    #[test]
    fn a_new_active_controller_gives_every_broker_a_fresh_session() {
        let mut c = TestCluster::new();
        c.add_broker(1, 0);
        c.control.activate(&c.image, 60_000);
        assert_eq!(c.control.tick(&c.image, 60_000 + SESSION_MS).response, None);
        assert_eq!(c.control.tick(&c.image, 60_001 + SESSION_MS).response, Some(1));
    }

    #[test]
    fn controlled_shutdown_moves_leadership_then_lets_the_broker_go() {
        let mut c = TestCluster::new();
        let e1 = c.add_broker(1, 0);
        let e2 = c.add_broker(2, 0);
        c.add_topic(vec![vec![1, 2], vec![2, 1]], BTreeMap::new());
        let reply = c.heartbeat(1, e1, 100, true);
        assert!(reply.in_controlled_shutdown && !reply.should_shut_down && !reply.is_fenced);
        let b = c.image.broker(1).unwrap();
        assert!(b.in_controlled_shutdown && !b.fenced);
        assert_eq!(c.partition(0).leader, 2);
        assert_eq!(c.partition(0).isr, vec![2]);
        assert_eq!(c.partition(1).isr, vec![2]);
        // Not before broker 2 has applied the records that moved the leadership.
        let lagging = BrokerHeartbeatInput {
            broker_id: 2,
            broker_epoch: e2,
            current_metadata_offset: 0,
            want_fence: false,
            want_shut_down: false,
        };
        {
            let r = c.control.broker_heartbeat(&c.image, &lagging, 150).unwrap();
            c.commit(r)
        };
        let reply = c.heartbeat(1, e1, 200, true);
        assert!(!reply.should_shut_down, "broker 2 has not applied the shutdown's records");
        c.heartbeat(2, e2, 250, false);
        let reply = c.heartbeat(1, e1, 300, true);
        assert!(reply.should_shut_down && reply.is_fenced);
        assert!(c.image.broker(1).unwrap().fenced);
    }

    #[test]
    fn a_broker_that_leads_nothing_shuts_down_at_once() {
        let mut c = TestCluster::new();
        let e1 = c.add_broker(1, 0);
        let reply = c.heartbeat(1, e1, 100, true);
        assert!(reply.should_shut_down && reply.is_fenced);
    }

    #[test]
    fn unregistering_moves_leadership_and_removes_the_broker() {
        let mut c = TestCluster::new();
        c.add_broker(1, 0);
        c.add_broker(2, 0);
        c.add_topic(vec![vec![1, 2]], BTreeMap::new());
        let result = c.control.unregister_broker(&c.image, 1).unwrap();
        c.commit(result);
        assert!(c.image.broker(1).is_none());
        assert_eq!((c.partition(0).leader, c.partition(0).isr.clone()), (2, vec![2]));
        let err = c.control.unregister_broker(&c.image, 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::BROKER_ID_NOT_REGISTERED);
        assert_eq!(err.message, "Broker ID 1 is not currently registered");
    }

    #[test]
    fn producer_ids_come_in_blocks_of_a_thousand() {
        let mut c = TestCluster::new();
        let e1 = c.add_broker(1, 0);
        let first = {
            let r = c.control.allocate_producer_ids(&c.image, 1, e1).unwrap();
            c.commit(r)
        };
        let second = {
            let r = c.control.allocate_producer_ids(&c.image, 1, e1).unwrap();
            c.commit(r)
        };
        assert_eq!((first, second), (0..1000, 1000..2000));
        let err = c.control.allocate_producer_ids(&c.image, 1, e1 + 1).unwrap_err();
        assert_eq!(err.code, ErrorCode::STALE_BROKER_EPOCH);
    }
}
