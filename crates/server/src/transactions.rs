//! The bridge between the transaction coordinator state machine (`osprey_coordinator::txn`)
//! and the broker: it holds the replies the coordinator answers later, appends its
//! records to `__transaction_state`, writes transaction markers to the partitions of a
//! transaction, runs its timers, and loads the topic at startup.
//!
//! The coordinator decides under its lock; the appends it asks for (records to
//! `__transaction_state`, markers to the partitions of a transaction) are queued under
//! that lock in output order and run after it is released, on the blocking pool
//! (`coordinator_appends`).
//!
//! One lock, the marker lock, orders transactional appends against markers: a
//! partition's first transactional append of a transaction is checked with the
//! coordinator (KIP-890 part 1) and appended under the marker lock, which marker appends
//! take too, so a marker can never land between the check and the append and leave a
//! transaction hanging on the partition. The coordinator's own lock is taken inside the
//! marker lock, never the other way round.

use crate::broker::{internal_replication, now_ms, Broker};
use crate::coordinator_appends::AppendQueues;
use crate::coordinator_leadership::{Led, LoadMode};
use crate::groups::{read_all, OFFSETS_TOPIC};
use crate::partition::{append_coordinator_records, Partition};
use crate::replies::Replies;
use crate::telemetry;
use osprey_cluster::NewTopic;
use osprey_coordinator::group::Record;
use osprey_coordinator::txn::{
    Output, PersistId, ReplyId, Response, TopicPartition, TransactionCoordinator, TxnConfig, TxnMarker, TxnStats,
    TRANSACTION_STATE_TOPIC_NAME,
};
use osprey_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use osprey_protocol::{ErrorCode, Uuid};
use osprey_storage::StorageError;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a marker whose write failed waits before it is sent again.
const MARKER_RETRY_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct Transactions {
    inner: Mutex<Inner>,
    /// Held across a transactional append's check and append, and across marker appends.
    markers: Mutex<()>,
    /// Records for each `__transaction_state` partition, in output order.
    state_appends: Arc<AppendQueues<i32, StateAppend>>,
    /// Markers, in output order (one queue: a transaction's markers go to many partitions).
    marker_writes: Arc<AppendQueues<(), MarkerWrite>>,
}

/// A `Persist` output: one record for a `__transaction_state` partition.
#[derive(Debug)]
struct StateAppend {
    id: PersistId,
    partition: i32,
    record: Record,
    /// The coordinator epoch the partition was loaded at: the append is made only while
    /// the partition is still led here at that epoch.
    epoch: Option<i32>,
}

/// A `WriteMarkers` output: one transaction's marker for each of its partitions.
#[derive(Debug)]
struct MarkerWrite {
    transactional_id: String,
    marker: TxnMarker,
}

#[derive(Debug)]
pub struct Inner {
    coordinator: TransactionCoordinator,
    replies: Replies<Response>,
    /// Markers whose last write failed: the next attempt backs off first.
    failed_markers: HashSet<(String, TopicPartition)>,
    /// The coordinator's counters as last published to the metrics.
    published: TxnStats,
}

impl Transactions {
    pub fn new(config: TxnConfig) -> Transactions {
        Transactions {
            inner: Mutex::new(Inner {
                coordinator: TransactionCoordinator::new(config),
                replies: Replies::default(),
                failed_markers: HashSet::new(),
                published: TxnStats::default(),
            }),
            markers: Mutex::new(()),
            state_appends: Arc::default(),
            marker_writes: Arc::default(),
        }
    }

    /// The coordinator, exclusively. A poisoned lock means a panic (a broken invariant)
    /// left the coordinator half-updated: that is fatal, never served from (README,
    /// "Failure stance").
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("transaction coordinator lock poisoned by an earlier panic")
    }

    /// The marker lock (module comment); poisoned, it is fatal as the coordinator's is.
    fn lock_markers(&self) -> MutexGuard<'_, ()> {
        self.markers.lock().expect("transaction marker lock poisoned by an earlier panic")
    }

    /// Runs `op` on the coordinator with a fresh reply id whose answer arrives on the
    /// returned receiver, then carries out the coordinator's outputs.
    pub fn call_later(
        &self,
        broker: &Arc<Broker>,
        op: impl FnOnce(&mut TransactionCoordinator, ReplyId, i64),
    ) -> oneshot::Receiver<Response> {
        let mut inner = self.lock();
        let (id, rx) = inner.replies.hold();
        op(&mut inner.coordinator, ReplyId(id), now_ms());
        drain(broker, &mut inner);
        rx
    }

    /// Runs `op`, then carries out the outputs it queued.
    pub fn call<T>(&self, broker: &Arc<Broker>, op: impl FnOnce(&mut TransactionCoordinator, i64) -> T) -> T {
        let mut inner = self.lock();
        let result = op(&mut inner.coordinator, now_ms());
        drain(broker, &mut inner);
        result
    }

    /// Runs the coordinator's timers (transaction timeouts, id expiry, retries).
    pub fn tick(&self, broker: &Arc<Broker>) {
        self.call(broker, |c, now| c.tick(now));
    }

    /// Appends a transactional batch of `producer` to `partition` through `append`, after
    /// checking with the coordinator that the partition is in the producer's transaction
    /// when this is the transaction's first batch there (KIP-890 part 1), both under the
    /// marker lock. The error is the coordinator's (NONE never).
    pub fn append_transactional<T>(
        &self,
        partition: &Partition,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        append: impl FnOnce() -> T,
    ) -> Result<T, ErrorCode> {
        let _markers = self.lock_markers();
        let open_here = partition
            .log
            .producer_state(producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some() && e.epoch == producer_epoch);
        if !open_here {
            let transaction = AddPartitionsToTxnTransaction {
                transactional_id: transactional_id.to_string(),
                producer_id,
                producer_epoch,
                verify_only: true,
                topics: vec![AddPartitionsToTxnTopic {
                    name: partition.topic.clone(),
                    partitions: vec![partition.index],
                    ..Default::default()
                }],
                ..Default::default()
            };
            let verified = self.lock().coordinator.verify(&transaction);
            if let Some(&(_, error)) = verified.iter().find(|(_, e)| *e != ErrorCode::NONE) {
                return Err(error);
            }
        }
        Ok(append())
    }

    /// Writes one marker (WriteTxnMarkers from an admin client) under the marker lock.
    pub fn append_marker_locked(
        &self,
        partition: &Partition,
        marker: (i64, i16, i32, bool),
    ) -> Result<osprey_storage::AppendInfo, StorageError> {
        let _markers = self.lock_markers();
        let (producer_id, producer_epoch, coordinator_epoch, committed) = marker;
        partition.log.append_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            committed,
            partition.leader_epoch(),
            now_ms(),
        )
    }

    /// Makes the coordinator serve `__transaction_state` partition `index` as `led` says
    /// (`coordinator_leadership`): begins loading it when it is newly led here (or at a
    /// new epoch, the coordinator epoch), unloads it when it is not led here any more.
    pub fn follow_partition(&self, broker: &Arc<Broker>, index: i32, led: Led, mode: LoadMode) {
        let mut inner = self.lock();
        let c = &inner.coordinator;
        let (loading, loaded) = (c.loading_epoch(index), c.loaded_epoch(index));
        let Some((partition, epoch)) = led else {
            if loading.is_some() || loaded.is_some() {
                inner.coordinator.unload_partition(index);
                drain(broker, &mut inner);
                tracing::debug!(partition = index, "transactions unloaded: no longer the leader");
            }
            return;
        };
        if loading == Some(epoch) || loaded == Some(epoch) {
            return;
        }
        inner.coordinator.begin_load(index, epoch);
        drain(broker, &mut inner);
        drop(inner);
        let broker = broker.clone();
        mode.run(move || load_partition(&broker, index, epoch, &partition));
    }
}

/// Reads `__transaction_state` partition `index` to its log end and loads it into the
/// coordinator at coordinator epoch `epoch`, unless another leadership change overtook
/// the load. The coordinator appends to a partition only once loaded, so nothing is
/// appended while it is read.
fn load_partition(broker: &Arc<Broker>, index: i32, epoch: i32, partition: &Partition) {
    let started = std::time::Instant::now();
    let mut records: Vec<Record> = Vec::new();
    let read = read_all(partition, &mut records);
    let mut inner = broker.transactions.lock();
    if inner.coordinator.loading_epoch(index) != Some(epoch) {
        return;
    }
    let count = records.len();
    let loaded = match read {
        Ok(_) => inner.coordinator.load(index, epoch, records, now_ms()).map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    if loaded.is_err() {
        inner.coordinator.unload_partition(index);
    }
    drain(broker, &mut inner);
    drop(inner);
    match loaded {
        Ok(_) if count == 0 => tracing::debug!(partition = index, epoch, "transactions loaded: none"),
        Ok(summary) => tracing::info!(
            partition = index,
            epoch,
            records = count,
            transactional_ids = summary.transactional_ids,
            completing = summary.completing,
            ms = started.elapsed().as_millis() as u64,
            "transactions loaded: this broker is the coordinator of __transaction_state-{index}"
        ),
        Err(e) => tracing::error!(
            partition = index,
            epoch,
            error = %e,
            "transactions of __transaction_state-{index} not loaded; their requests get NOT_COORDINATOR, and the load is tried again"
        ),
    }
}

/// Kafka's `add.partitions.to.txn.retry.backoff.ms` and `.max.ms`: how a partition
/// leader retries an implicit add that found the transaction busy (the previous one still
/// completing, or another add of it in flight) before answering the client.
const ADD_RETRY_BACKOFF: Duration = Duration::from_millis(20);
const ADD_RETRY_MAX: Duration = Duration::from_millis(100);

/// Adds partitions to a transaction on a transaction version 2 client's behalf (Produce
/// v12+, TxnOffsetCommit v5): `first` is the answer to the add already issued (issued when
/// the request arrived, so adds go out in request order). CONCURRENT_TRANSACTIONS is
/// retried for up to 100 ms, as Kafka's partition leaders do; the final error is returned.
pub async fn add_implicitly(
    broker: Arc<Broker>,
    transaction: AddPartitionsToTxnTransaction,
    first: oneshot::Receiver<Response>,
) -> ErrorCode {
    let deadline = tokio::time::Instant::now() + ADD_RETRY_MAX;
    let mut answer = first;
    loop {
        let error = match answer.await {
            Ok(Response::AddPartitionsToTxn { error }) => error,
            _ => ErrorCode::UNKNOWN_SERVER_ERROR,
        };
        if error != ErrorCode::CONCURRENT_TRANSACTIONS || tokio::time::Instant::now() + ADD_RETRY_BACKOFF > deadline {
            return error;
        }
        tokio::time::sleep(ADD_RETRY_BACKOFF).await;
        answer = broker.transactions.call_later(&broker, |c, reply, now| c.add_partitions(&transaction, 5, reply, now));
    }
}

/// Answers held replies and queues the requested appends and markers, in the order
/// they come out; they run after the lock is released (`coordinator_appends`).
fn drain(broker: &Arc<Broker>, inner: &mut Inner) {
    let transactions = &broker.transactions;
    while let Some(output) = inner.coordinator.poll_output() {
        match output {
            Output::Respond { reply, response } => inner.replies.answer(reply.0, response),
            Output::Persist { id, partition, record } => {
                let b = broker.clone();
                let epoch = inner.coordinator.loaded_epoch(partition);
                let append = StateAppend { id, partition, record, epoch };
                transactions.state_appends.push(partition, append, move |append| run_state_append(&b, append));
            }
            Output::WriteMarkers { transactional_id, marker } => {
                // Every partition's failure is forgotten here (not only the first's).
                let retry = marker
                    .partitions
                    .iter()
                    .filter(|tp| inner.failed_markers.remove(&(transactional_id.clone(), (*tp).clone())))
                    .count()
                    > 0;
                let write = MarkerWrite { transactional_id, marker };
                if retry {
                    // A retry: back off first, then queue it.
                    let broker = broker.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
                        queue_marker_write(&broker, write);
                    });
                } else {
                    queue_marker_write(broker, write);
                }
            }
        }
    }
    publish_stats(inner);
}

fn queue_marker_write(broker: &Arc<Broker>, write: MarkerWrite) {
    let b = broker.clone();
    broker.transactions.marker_writes.push((), write, move |write| write_markers(&b, write));
}

/// Moves the metrics by what the coordinator counted since the last call.
fn publish_stats(inner: &mut Inner) {
    let now = inner.coordinator.stats();
    let before = inner.published;
    let delta = TxnStats {
        commits: now.commits - before.commits,
        aborts: now.aborts - before.aborts,
        fenced_producers: now.fenced_producers - before.fenced_producers,
    };
    inner.published = now;
    let c = &inner.coordinator;
    telemetry::txn_stats(delta, c.open_transactions(), c.transactional_id_count());
}

/// Appends one persist of the coordinator (on its queue's runner, the lock released); a
/// failure to append is reported to the coordinator at once.
fn run_state_append(broker: &Arc<Broker>, append: StateAppend) {
    let StateAppend { id, partition, record, epoch } = append;
    if let Err(code) = persist(broker, id, (partition, epoch), &record) {
        broker.transactions.call(broker, |c, now| c.persisted(id, Err(code), now));
    }
}

/// Appends `record` to its `__transaction_state` partition; once durable, tells the
/// coordinator (from a task, so no thread waits on the fsync).
fn persist(
    broker: &Arc<Broker>,
    id: PersistId,
    (index, epoch): (i32, Option<i32>),
    record: &Record,
) -> Result<(), ErrorCode> {
    let partition = state_partition(broker, index)?;
    let epoch = epoch.ok_or(ErrorCode::NOT_COORDINATOR)?;
    let what = "writing to __transaction_state";
    let records = std::slice::from_ref(record);
    let durable = append_coordinator_records(&partition, epoch, &broker.flusher, records, None, what)?;
    let broker = broker.clone();
    tokio::spawn(async move {
        let result = match durable.await {
            Ok(Ok(())) => Ok(()),
            _ => Err(ErrorCode::KAFKA_STORAGE_ERROR),
        };
        broker.transactions.call(&broker, |c, now| c.persisted(id, result, now));
    });
    Ok(())
}

/// Appends the marker to each of its partitions (under the marker lock, so no
/// transactional append races it), then reports the failures to the coordinator and each
/// success once durable.
fn write_markers(broker: &Arc<Broker>, write: MarkerWrite) {
    let MarkerWrite { transactional_id, marker } = write;
    let image = broker.image();
    // (partition, error, whether to retry it with a backoff)
    let mut failed: Vec<(TopicPartition, ErrorCode, bool)> = Vec::new();
    let markers = broker.transactions.lock_markers();
    for tp in &marker.partitions {
        let (topic, index) = tp;
        let Some(topic_image) = image.topic(topic) else {
            // Deleted since it joined the transaction: nothing to mark.
            failed.push((tp.clone(), ErrorCode::NONE, false));
            continue;
        };
        let Some(partition) = broker.replica_manager.partition(topic_image.id, *index) else {
            failed.push((tp.clone(), ErrorCode::NOT_LEADER_OR_FOLLOWER, true));
            continue;
        };
        let appended = partition.log.append_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.coordinator_epoch,
            marker.committed,
            partition.leader_epoch(),
            now_ms(),
        );
        let info = match appended {
            Ok(info) => info,
            Err(e) => {
                let code = crate::handlers::produce::storage_error_code(&e);
                tracing::warn!(transactional_id, topic = %topic, partition = index, error = %e, "transaction marker not written");
                failed.push((tp.clone(), code, code != ErrorCode::INVALID_PRODUCER_EPOCH));
                continue;
            }
        };
        let durable = partition.acknowledged(info.last_offset, &broker.flusher);
        let broker = broker.clone();
        let transactional_id = transactional_id.clone();
        let (marker, tp, topic_id) = (marker.clone(), tp.clone(), topic_image.id);
        tokio::spawn(async move {
            let error = match durable.await {
                Ok(Ok(())) => ErrorCode::NONE,
                _ => ErrorCode::KAFKA_STORAGE_ERROR,
            };
            if error == ErrorCode::NONE {
                marker_durable(&broker, topic_id, &tp, marker.producer_id, marker.committed);
            }
            let transactions = &broker.transactions;
            let mut inner = transactions.lock();
            if error != ErrorCode::NONE {
                inner.failed_markers.insert((transactional_id.clone(), tp.clone()));
            }
            inner.coordinator.marker_written(&transactional_id, marker.coordinator_epoch, &tp, error, now_ms());
            drain(&broker, &mut inner);
        });
    }
    drop(markers);
    if failed.is_empty() {
        return;
    }
    let mut inner = broker.transactions.lock();
    for (tp, error, retry) in failed {
        if retry {
            inner.failed_markers.insert((transactional_id.clone(), tp.clone()));
        }
        inner.coordinator.marker_written(&transactional_id, marker.coordinator_epoch, &tp, error, now_ms());
    }
    drain(broker, &mut inner);
}

/// A marker is durable on `tp`: counts it, and hands offsets committed in the
/// transaction to the group coordinator when `tp` is an offsets partition.
pub fn marker_durable(broker: &Arc<Broker>, _topic_id: Uuid, tp: &TopicPartition, producer_id: i64, committed: bool) {
    telemetry::txn_marker(committed);
    if tp.0 == OFFSETS_TOPIC {
        let n = broker.settings.offsets_topic_num_partitions;
        broker.groups.call(broker, |c, now| c.complete_txn(producer_id, committed, tp.1, n, now));
    }
}

/// The leader of a `__transaction_state` partition. It never creates the topic: creating
/// it loads the coordinator, which takes the coordinator lock. The client's next
/// FindCoordinator or transaction request creates it (`handlers::handle`).
/// A missing topic (deleted by an admin) is COORDINATOR_NOT_AVAILABLE; the client looks
/// the coordinator up again, and FindCoordinator creates the topic outside the lock.
fn state_partition(broker: &Arc<Broker>, index: i32) -> Result<Arc<Partition>, ErrorCode> {
    let topic = broker.image().topic(TRANSACTION_STATE_TOPIC_NAME).map(|t| t.id);
    topic.and_then(|id| broker.replica_manager.partition(id, index)).ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE)
}

/// Creates `__transaction_state` (compacted, `transaction.state.log.num.partitions`) if
/// missing, or opens its logs that could not be opened before, and loads the partitions
/// it opened into the coordinator. Takes the coordinator lock:
/// never call it with that lock held.
pub fn ensure_state_topic(broker: &Arc<Broker>) -> Result<Uuid, ErrorCode> {
    let state_topic = || {
        let c = broker.config();
        let rf = ("transaction.state.log.replication.factor", c.transaction_state_log_replication_factor);
        let min_isr = ("transaction.state.log.min.isr", c.transaction_state_log_min_isr);
        let registered = broker.image().brokers().count();
        let (replication_factor, min_isr) = internal_replication(&c, rf, Some(min_isr), registered);
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), c.transaction_state_log_segment_bytes.to_string());
        if let Some(min_isr) = min_isr {
            configs.insert("min.insync.replicas".to_string(), min_isr.to_string());
        }
        configs.insert("unclean.leader.election.enable".to_string(), "false".to_string());
        NewTopic {
            name: TRANSACTION_STATE_TOPIC_NAME.into(),
            num_partitions: c.transaction_state_log_num_partitions,
            replication_factor,
            configs,
            ..Default::default()
        }
    };
    let waiting = "transactional producers cannot start or end transactions";
    let sized_by = "transaction.state.log.num.partitions";
    let ready = broker.ensure_internal_topic(TRANSACTION_STATE_TOPIC_NAME, sized_by, waiting, state_topic)?;
    if !ready.opened_now {
        return Ok(ready.id);
    }
    crate::coordinator_leadership::follow(broker, LoadMode::Now);
    Ok(ready.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "transaction coordinator lock poisoned")]
    fn a_coordinator_poisoned_by_a_panic_is_never_used_again() {
        let transactions = Transactions::new(TxnConfig::default());
        std::thread::scope(|s| {
            let broke = s.spawn(|| {
                let _held = transactions.lock();
                panic!("a broken invariant while the coordinator is locked");
            });
            assert!(broke.join().is_err());
        });
        drop(transactions.lock());
    }
}
