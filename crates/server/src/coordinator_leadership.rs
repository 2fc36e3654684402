//! The group and transaction coordinators follow the leadership of their internal
//! partitions, as Kafka's do (`GroupCoordinator.onElection` / `onResignation`, and the
//! transaction coordinator's): a broker loads a `__consumer_offsets` or
//! `__transaction_state` partition's groups or transactions when it becomes that
//! partition's leader, and unloads them when it stops leading it. The coordinator epoch
//! is the partition's leader epoch.
//!
//! [`follow`] compares what the coordinators serve with the partitions led here now and
//! hands over the difference:
//! - a partition led here at an epoch not loaded yet begins loading (its groups or ids
//!   answer COORDINATOR_LOAD_IN_PROGRESS), its records are read up to the log end (a new
//!   leader's log holds every acknowledged record, some perhaps above its high watermark
//!   still) and replayed; a load overtaken by another leadership change is dropped;
//! - a partition no longer led here is unloaded at once: requests for it answer
//!   NOT_COORDINATOR, and whatever it had in flight is failed.
//!
//! It runs when the broker's metadata changes (`Broker::publish`), when a single node
//! creates an internal topic, at start, and on the coordinators' timer as a safety net.
//! Every coordinator append is made only while the partition is still led at the epoch
//! it was loaded at (`append_coordinator_records`), so a coordinator that lost
//! leadership never writes as if it still had it.

use crate::broker::Broker;
use crate::groups::OFFSETS_TOPIC;
use crate::partition::Partition;
use osprey_coordinator::txn::TRANSACTION_STATE_TOPIC_NAME;
use std::sync::{Arc, Mutex, PoisonError, TryLockError};

/// Where a partition's records are read and replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// On the calling thread, before returning (start-up, a single node creating the
    /// topic): the partition is served as soon as `follow` returns.
    Now,
    /// On the blocking pool: the caller (a metadata update, the timer) does not wait.
    InBackground,
}

impl LoadMode {
    pub(crate) fn run(self, job: impl FnOnce() + Send + 'static) {
        match self {
            LoadMode::Now => job(),
            LoadMode::InBackground => {
                tokio::task::spawn_blocking(job);
            }
        }
    }
}

/// A partition of an internal topic as led here: the replica and its leader epoch, or
/// `None` when this broker does not lead it.
pub(crate) type Led = Option<(Arc<Partition>, i32)>;

/// One hand-over at a time: each compares a snapshot of the partitions led here with
/// what the coordinators serve, and an older snapshot applied after a newer one would
/// unload what the newer one loaded.
static FOLLOWING: Mutex<()> = Mutex::new(());

/// Hands both coordinators the partitions led here now, and takes back the others.
pub fn follow(broker: &Arc<Broker>, mode: LoadMode) {
    let _one_at_a_time = FOLLOWING.lock().unwrap_or_else(PoisonError::into_inner);
    follow_locked(broker, mode);
}

/// [`follow`], unless another hand-over is running (the timer's: it never waits).
pub fn follow_if_idle(broker: &Arc<Broker>, mode: LoadMode) {
    let guard = match FOLLOWING.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    follow_locked(broker, mode);
    drop(guard);
}

fn follow_locked(broker: &Arc<Broker>, mode: LoadMode) {
    let groups = led_partitions(broker, OFFSETS_TOPIC, broker.settings.offsets_topic_num_partitions);
    for (index, led) in groups {
        broker.groups.follow_partition(broker, index, led, mode);
    }
    let partitions = broker.settings.config.transaction_state_log_num_partitions;
    for (index, led) in led_partitions(broker, TRANSACTION_STATE_TOPIC_NAME, partitions) {
        broker.transactions.follow_partition(broker, index, led, mode);
    }
}

/// For each partition index the coordinator uses (`0..num_partitions`), whether it is led
/// here, and at which epoch. A topic that does not exist leads nothing here.
fn led_partitions(broker: &Broker, topic: &str, num_partitions: i32) -> Vec<(i32, Led)> {
    let topic_id = broker.image().topic(topic).map(|t| t.id);
    (0..num_partitions.max(1))
        .map(|index| {
            let led = topic_id.and_then(|id| broker.replica_manager.partition(id, index)).map(|p| {
                let epoch = p.leader_epoch();
                (p, epoch)
            });
            (index, led)
        })
        .collect()
}
