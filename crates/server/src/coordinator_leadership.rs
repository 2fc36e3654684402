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
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::{Duration, Instant};

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
    let partitions = broker.share_states.num_partitions();
    for (index, led) in led_partitions(broker, crate::share_states::SHARE_STATE_TOPIC, partitions) {
        broker.share_states.follow_partition(broker, index, led, mode);
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

/// The first retry of a failed load waits this long; each further failure doubles it.
const LOAD_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries of a load that keeps failing (a damaged log): its
/// error is logged at most this often.
pub(crate) const LOAD_RETRY_MAX: Duration = Duration::from_secs(30);

/// The partitions of one coordinator whose load failed (a read error of its log, records
/// it cannot replay), each retried after a back-off that doubles up to
/// [`LOAD_RETRY_MAX`], rather than on every timer tick. Bounded by the coordinator's
/// partition count.
#[derive(Debug, Default)]
pub(crate) struct LoadRetries {
    failed: Mutex<HashMap<i32, FailedLoad>>,
}

#[derive(Debug, Clone, Copy)]
struct FailedLoad {
    epoch: i32,
    failures: u32,
    retry_at: Instant,
}

impl LoadRetries {
    /// Whether a load of partition `index` at `epoch` may begin now: no load of it failed
    /// at that epoch, or the back-off has run out. A new epoch starts afresh.
    pub(crate) fn may_begin(&self, index: i32, epoch: i32, now: Instant) -> bool {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed.get(&index).is_none_or(|f| f.epoch != epoch || now >= f.retry_at)
    }

    /// The load of partition `index` at `epoch` failed: returns how many times in a row,
    /// and how long until the next try.
    fn failed(&self, index: i32, epoch: i32, now: Instant) -> (u32, Duration) {
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        let failures = failed.get(&index).filter(|f| f.epoch == epoch).map_or(1, |f| f.failures.saturating_add(1));
        let wait = LOAD_RETRY_FIRST.saturating_mul(1 << (failures - 1).min(16)).min(LOAD_RETRY_MAX);
        failed.insert(index, FailedLoad { epoch, failures, retry_at: now + wait });
        (failures, wait)
    }

    /// The load of `topic` partition `index` at `epoch` failed with `error`: counted
    /// under `coordinator` (`group`, `transaction`), and logged with the wait before the
    /// next try.
    pub(crate) fn report_failure(
        &self,
        coordinator: &'static str,
        topic: &str,
        index: i32,
        epoch: i32,
        error: &dyn std::fmt::Display,
    ) {
        let (failures, retry_in) = self.failed(index, epoch, Instant::now());
        crate::telemetry::coordinator_load_failed(coordinator);
        tracing::error!(
            coordinator,
            partition = index,
            epoch,
            error = %error,
            failures,
            retry_in_ms = retry_in.as_millis() as u64,
            "{topic}-{index} not loaded; the {coordinator} coordinator answers NOT_COORDINATOR for it until a load \
             succeeds (check this log's directory and the broker's disk)"
        );
    }

    /// Partition `index` loaded, or is not led here any more: nothing to retry.
    pub(crate) fn forget(&self, index: i32) {
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).remove(&index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_load_is_retried_after_a_doubling_back_off_and_a_new_epoch_at_once() {
        let retries = LoadRetries::default();
        let t0 = Instant::now();
        assert!(retries.may_begin(3, 1, t0));
        assert_eq!(retries.failed(3, 1, t0), (1, Duration::from_millis(100)));
        assert!(!retries.may_begin(3, 1, t0 + Duration::from_millis(99)));
        assert!(retries.may_begin(3, 1, t0 + Duration::from_millis(100)));
        assert!(retries.may_begin(3, 2, t0), "another epoch is another load");
        assert!(retries.may_begin(4, 1, t0), "another partition");
        assert_eq!(retries.failed(3, 1, t0), (2, Duration::from_millis(200)));
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            last = retries.failed(3, 1, t0).1;
        }
        assert_eq!(last, LOAD_RETRY_MAX);
        assert_eq!(retries.failed(3, 2, t0), (1, Duration::from_millis(100)), "a new epoch counts afresh");
        retries.forget(3);
        assert!(retries.may_begin(3, 2, t0));
    }
}
