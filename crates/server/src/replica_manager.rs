//! The replica manager (Kafka's `ReplicaManager`): the partitions this broker holds, by
//! topic id and index. Requests find their partition here; each partition's replication
//! state is its own replica state machine ([`Partition`]). The broker opens the logs
//! (it is also the log manager) and hands the partitions over.

use crate::partition::Partition;
use dashmap::DashMap;
use osprey_cluster::replica::ReplicaConfig;
use osprey_protocol::Uuid;
use osprey_storage::LogConfig;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct ReplicaManager {
    partitions: DashMap<(Uuid, i32), Arc<Partition>>,
}

impl ReplicaManager {
    pub fn new() -> ReplicaManager {
        ReplicaManager::default()
    }

    pub fn partition(&self, topic_id: Uuid, index: i32) -> Option<Arc<Partition>> {
        self.partitions.get(&(topic_id, index)).map(|p| p.clone())
    }

    /// Every partition held here, in no particular order.
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
            if let Some(partition) = self.partition(topic_id, index) {
                partition.reconfigure(config.clone(), replica_config);
            }
        }
    }
}
