//! Which `__consumer_offsets` partitions this coordinator serves, as Kafka's coordinator
//! runtime tracks the state of each partition it was handed.
//!
//! A coordinator made with [`GroupCoordinator::new`] serves every partition (a single
//! broker that loads the whole topic at start). Once the server calls
//! [`GroupCoordinator::follow_leadership`], it serves only the partitions it was told it
//! leads: [`GroupCoordinator::begin_load`] when the broker becomes a partition's leader
//! (its groups answer COORDINATOR_LOAD_IN_PROGRESS), [`GroupCoordinator::finish_load`]
//! with the partition's records once read (then they are served), and
//! [`GroupCoordinator::unload_partition`] when it stops leading (NOT_COORDINATOR). The
//! coordinator epoch of a partition is its leader epoch: a load finished for an epoch
//! that is no longer the one being loaded is dropped, and the server appends a persist
//! only while the partition's leader epoch is still [`GroupCoordinator::loaded_epoch`].

use super::{GroupCoordinator, LoadError, LoadSummary, Replay};
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;

/// One partition's state in a coordinator that follows leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionLoad {
    /// Its records are being read; its groups answer COORDINATOR_LOAD_IN_PROGRESS.
    Loading { epoch: i32 },
    /// Served, as the coordinator of leader epoch `epoch`.
    Loaded { epoch: i32 },
}

#[derive(Debug, Clone, Default)]
pub(super) struct Ownership {
    num_partitions: i32,
    partitions: BTreeMap<i32, PartitionLoad>,
}

impl GroupCoordinator {
    /// From now on, serve only the partitions (of `num_partitions`) handed over with
    /// [`GroupCoordinator::begin_load`]. Groups already known are dropped.
    pub fn follow_leadership(&mut self, num_partitions: i32, now_ms: i64) {
        let num_partitions = num_partitions.max(1);
        for partition in 0..num_partitions {
            self.unload_partition(partition, num_partitions, now_ms);
        }
        self.ownership = Some(Ownership { num_partitions, partitions: BTreeMap::new() });
    }

    /// This broker became the leader of `partition` at leader epoch `epoch`: its groups
    /// answer COORDINATOR_LOAD_IN_PROGRESS until [`GroupCoordinator::finish_load`]. A
    /// partition still held at an older epoch is unloaded first.
    pub fn begin_load(&mut self, partition: i32, epoch: i32, now_ms: i64) {
        let Some(ownership) = &self.ownership else { return };
        let num_partitions = ownership.num_partitions;
        if self.partition_load(partition).is_some() {
            self.unload_partition(partition, num_partitions, now_ms);
        }
        if let Some(ownership) = &mut self.ownership {
            ownership.partitions.insert(partition, PartitionLoad::Loading { epoch });
        }
    }

    /// The records of `partition`, read for the load begun at `epoch`, oldest first.
    /// Returns `None` when that load is no longer wanted (the partition was unloaded or
    /// a newer epoch began loading since): the records are dropped.
    pub fn finish_load(
        &mut self,
        partition: i32,
        epoch: i32,
        items: impl IntoIterator<Item = Replay>,
        now_ms: i64,
    ) -> Option<Result<LoadSummary, LoadError>> {
        let num_partitions = self.ownership.as_ref()?.num_partitions;
        if self.partition_load(partition) != Some(PartitionLoad::Loading { epoch }) {
            return None;
        }
        let items = items.into_iter().filter(|item| match item {
            Replay::Record(_) | Replay::Transactional { .. } => true,
            Replay::Marker { partition: p, .. } => *p == partition,
        });
        let result = self.load_replay(items, num_partitions, now_ms);
        if let Some(ownership) = &mut self.ownership {
            match result {
                Ok(_) => ownership.partitions.insert(partition, PartitionLoad::Loaded { epoch }),
                Err(_) => ownership.partitions.remove(&partition),
            };
        }
        Some(result)
    }

    /// Where `partition` stands, if this coordinator follows leadership and holds it.
    pub fn partition_load(&self, partition: i32) -> Option<PartitionLoad> {
        self.ownership.as_ref()?.partitions.get(&partition).copied()
    }

    /// The leader epoch `partition` was loaded at; `None` when it is not served here. A
    /// coordinator that serves every partition has no epoch: `Some(-1)`.
    pub fn loaded_epoch(&self, partition: i32) -> Option<i32> {
        match &self.ownership {
            None => Some(-1),
            Some(o) => match o.partitions.get(&partition) {
                Some(PartitionLoad::Loaded { epoch }) => Some(*epoch),
                _ => None,
            },
        }
    }

    /// The partition of `group_id` and the leader epoch it was loaded at, when this
    /// coordinator follows leadership and has it loaded; `None` otherwise (a coordinator
    /// that serves every partition has no leader to check).
    pub fn loaded_partition_of(&self, group_id: &str) -> Option<(i32, i32)> {
        let ownership = self.ownership.as_ref()?;
        let partition = super::partition_for(group_id, ownership.num_partitions);
        match ownership.partitions.get(&partition) {
            Some(PartitionLoad::Loaded { epoch }) => Some((partition, *epoch)),
            _ => None,
        }
    }

    /// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when `group_id`'s partition is
    /// not served here (yet); `None` when it is.
    pub fn serving_error(&self, group_id: &str) -> Option<ErrorCode> {
        let ownership = self.ownership.as_ref()?;
        match ownership.partitions.get(&super::partition_for(group_id, ownership.num_partitions)) {
            Some(PartitionLoad::Loaded { .. }) => None,
            Some(PartitionLoad::Loading { .. }) => Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            None => Some(ErrorCode::NOT_COORDINATOR),
        }
    }

    /// Forgets `partition` in the ownership map (called by `unload_partition`).
    pub(super) fn disown(&mut self, partition: i32) {
        if let Some(ownership) = &mut self.ownership {
            ownership.partitions.remove(&partition);
        }
    }
}
