//! The replica manager (Kafka's `ReplicaManager`): the partitions this broker holds, by
//! topic id and index. Requests find their partition here; each partition's replication
//! state is its own replica state machine ([`Partition`]). The broker opens the logs
//! (it is also the log manager) and hands the partitions over.
//!
//! Client appends (Produce, and the transactional ones the coordinator lets in) run on
//! the blocking pool, never on an async worker: a segment roll creates files, the first
//! batch of a leader epoch fsyncs its checkpoint, and any write may wait for the page
//! cache. Each partition has one queue ([`ReplicaManager::append_later`]), filled in
//! the order the requests were dispatched and run in that order, so a partition's
//! batches land (and are acknowledged) in the order they came, a connection's pipelined
//! produce requests included, and a partition whose disk stalls holds up only itself.

use crate::coordinator_appends::AppendQueues;
use crate::partition::Partition;
use dashmap::DashMap;
use osprey_cluster::replica::ReplicaConfig;
use osprey_cluster::{MetadataImage, TopicImage};
use osprey_protocol::{ErrorCode, Uuid};
use osprey_storage::LogConfig;
use std::sync::Arc;
use tokio::sync::oneshot;

#[derive(Debug, Default)]
pub struct ReplicaManager {
    partitions: DashMap<(Uuid, i32), Arc<Partition>>,
    /// The client appends of each partition, in the order queued.
    appends: Arc<AppendQueues<(Uuid, i32), AppendJob>>,
}

/// One queued append.
struct AppendJob(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for AppendJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppendJob")
    }
}

impl ReplicaManager {
    pub fn new() -> ReplicaManager {
        ReplicaManager::default()
    }

    /// Runs `append` (an append to `partition` and what decides it) after every append
    /// queued for the partition before it, on the blocking pool; resolves to its result.
    /// Bounded by the requests in flight, as the coordinators' queues
    /// (`coordinator_appends`).
    pub fn append_later<T: Send + 'static>(
        &self,
        partition: &Partition,
        append: impl FnOnce() -> T + Send + 'static,
    ) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        let job = AppendJob(Box::new(move || {
            // Nobody may wait any more (acks=0, a closed connection): the append stands.
            let _ = tx.send(append());
        }));
        self.appends.push((partition.topic_id, partition.index), job, |job: AppendJob| (job.0)());
        rx
    }

    /// The partition if this broker leads it now: what client requests, the coordinators
    /// and the admin paths act on. A follower's replica is not served to them (Kafka
    /// answers NOT_LEADER_OR_FOLLOWER).
    pub fn partition(&self, topic_id: Uuid, index: i32) -> Option<Arc<Partition>> {
        self.replica(topic_id, index).filter(|p| p.is_leader())
    }

    /// The partition for a client read or write, if this broker leads it; otherwise the
    /// error Kafka's `ReplicaManager.getPartitionOrError` gives: NOT_LEADER_OR_FOLLOWER
    /// when `image` has the partition (led elsewhere, or by none: the client refreshes
    /// its metadata and goes to the leader), else `unknown` (UNKNOWN_TOPIC_OR_PARTITION,
    /// or UNKNOWN_TOPIC_ID for a request by topic id) for a topic `image` lacks, and
    /// UNKNOWN_TOPIC_OR_PARTITION for a partition it lacks.
    pub fn partition_or_error(
        &self,
        image: &MetadataImage,
        topic: Option<&TopicImage>,
        index: i32,
        unknown: ErrorCode,
    ) -> Result<Arc<Partition>, ErrorCode> {
        let Some(topic) = topic else { return Err(unknown) };
        match self.partition(topic.id, index) {
            Some(partition) => Ok(partition),
            None if image.partition(topic.id, index).is_some() => Err(ErrorCode::NOT_LEADER_OR_FOLLOWER),
            None => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
        }
    }

    /// The partition if this broker holds a replica of it, as leader or follower.
    pub fn replica(&self, topic_id: Uuid, index: i32) -> Option<Arc<Partition>> {
        self.partitions.get(&(topic_id, index)).map(|p| p.clone())
    }

    /// Every partition held here, leader or follower, in no particular order.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions.iter().map(|p| p.clone()).collect()
    }

    pub fn contains(&self, topic_id: Uuid, index: i32) -> bool {
        self.partitions.contains_key(&(topic_id, index))
    }

    /// Starts serving a partition whose log was just opened.
    pub fn add(&self, partition: Partition) {
        self.partitions.insert((partition.topic_id, partition.index), Arc::new(partition));
    }

    /// Stops serving a partition (its topic was deleted); the caller removes its files.
    pub fn remove(&self, topic_id: Uuid, index: i32) -> Option<Arc<Partition>> {
        self.partitions.remove(&(topic_id, index)).map(|(_, partition)| partition)
    }

    /// Stops serving every partition (shutdown) and returns them, to be closed.
    pub fn remove_all(&self) -> Vec<Arc<Partition>> {
        let all = self.partitions();
        self.partitions.clear();
        all
    }

    /// Applies a topic's changed configs to its partitions held here.
    pub fn reconfigure(
        &self,
        topic_id: Uuid,
        indexes: impl Iterator<Item = i32>,
        config: &LogConfig,
        replica_config: ReplicaConfig,
    ) {
        for index in indexes {
            if let Some(partition) = self.replica(topic_id, index) {
                partition.reconfigure(config.clone(), replica_config);
            }
        }
    }
}
