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
//!
//! When the transactional id's coordinator is on another broker, the check is a network
//! round trip (`txn_interbroker`), which must not hold the marker lock (a std mutex) nor
//! block an append thread. The partition then records the check under the marker lock
//! before it is sent (a verification guard, as Kafka's); a marker for that producer
//! landing on the partition meanwhile voids it, and the append, back under the marker
//! lock, goes ahead only if its guard is still there. Markers for partitions led by
//! other brokers go to them as WriteTxnMarkers (`txn_interbroker::MarkerChannel`).

use crate::broker::{internal_replication, now_ms, Broker};
use crate::coordinator_appends::AppendQueues;
use crate::coordinator_leadership::{Led, LoadMode, LoadRetries};
use crate::groups::{read_all, OFFSETS_TOPIC};
use crate::partition::{append_coordinator_records, coordinator_append_result, Partition};
use crate::replies::Replies;
use crate::telemetry::{self, LogLimiter, REPEATED_FAILURE_LOG_INTERVAL};
use crate::txn_interbroker::{
    self, coordinator_route, CoordinatorRoute, MarkerChannel, MarkerResult, RemoteCheck, RemoteMarker,
    VerificationGuard, VerificationGuards,
};
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
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a marker whose write failed waits before it is sent again.
const MARKER_RETRY_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct Transactions {
    inner: Mutex<Inner>,
    /// Held across a transactional append's check and append, and across marker appends;
    /// it holds the verifications in flight with remote coordinators.
    markers: Mutex<VerificationGuards>,
    /// Markers to other brokers, and checks with remote coordinators (made on first use).
    channel: OnceLock<MarkerChannel>,
    /// Records for each `__transaction_state` partition, in output order.
    state_appends: Arc<AppendQueues<i32, StateAppend>>,
    /// Markers, in output order (one queue: a transaction's markers go to many partitions).
    marker_writes: Arc<AppendQueues<(), MarkerWrite>>,
    /// Partitions whose load failed, retried after a back-off.
    load_retries: LoadRetries,
    /// Loads begun while the partition's high watermark was below its log end, by
    /// partition index, with their epoch: [`Transactions::follow_partition`] runs each
    /// once every record it would read is committed (see [`load_partition`]).
    loads_waiting: Mutex<HashMap<i32, i32>>,
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
            markers: Mutex::new(VerificationGuards::default()),
            channel: OnceLock::new(),
            state_appends: Arc::default(),
            marker_writes: Arc::default(),
            load_retries: LoadRetries::default(),
            loads_waiting: Mutex::default(),
        }
    }

    /// The coordinator, exclusively. A poisoned lock means a panic (a broken invariant)
    /// left the coordinator half-updated: that is fatal, never served from (README,
    /// "Failure stance").
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("transaction coordinator lock poisoned by an earlier panic")
    }

    /// The loads waiting for their high watermark (a map no panic leaves half-updated).
    fn lock_loads_waiting(&self) -> MutexGuard<'_, HashMap<i32, i32>> {
        self.loads_waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The marker lock (module comment); poisoned, it is fatal as the coordinator's is.
    fn lock_markers(&self) -> MutexGuard<'_, VerificationGuards> {
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
    /// marker lock. A local coordinator's refusal is `NotYet::Refused` (NONE never); a
    /// remote coordinator must be asked first (`NotYet::Remote`, its guard recorded), and
    /// the append then goes through [`Transactions::append_verified`].
    pub fn append_transactional<T>(
        &self,
        broker: &Arc<Broker>,
        partition: &Partition,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        append: impl FnOnce() -> T,
    ) -> Result<T, NotYet> {
        let mut guards = self.lock_markers();
        if open_here(partition, producer_id, producer_epoch) {
            return Ok(append());
        }
        match coordinator_route(broker, transactional_id) {
            CoordinatorRoute::Local => {}
            CoordinatorRoute::NotAvailable => return Err(NotYet::Refused(ErrorCode::COORDINATOR_NOT_AVAILABLE)),
            CoordinatorRoute::Remote { node, address } => {
                let key = (partition.topic_id, partition.index, producer_id);
                let id = guards.start(key);
                let guard = VerificationGuard { broker: broker.clone(), key, id, finished: false };
                return Err(NotYet::Remote(RemoteCheck { guard, node, address }));
            }
        }
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
            return Err(NotYet::Refused(error));
        }
        Ok(append())
    }

    /// Appends a transactional batch that a remote coordinator verified (or added, for
    /// transaction version 2), under the marker lock: only if no marker for the producer
    /// landed on the partition since the check was recorded (its guard is still there),
    /// or the transaction is open here by now. Otherwise INVALID_TXN_STATE, as Kafka's
    /// log refuses a batch whose verification guard no longer matches.
    pub fn append_verified<T>(
        &self,
        partition: &Partition,
        (producer_id, producer_epoch): (i64, i16),
        mut guard: VerificationGuard,
        append: impl FnOnce() -> T,
    ) -> Result<T, ErrorCode> {
        let mut guards = self.lock_markers();
        let still_verified = guards.finish(&guard.key, guard.id);
        guard.finished = true;
        if !still_verified && !open_here(partition, producer_id, producer_epoch) {
            return Err(ErrorCode::INVALID_TXN_STATE);
        }
        Ok(append())
    }

    /// A verification guard dropped before its append (`VerificationGuard`'s drop).
    pub(crate) fn verification_abandoned(&self, key: &txn_interbroker::GuardKey, id: u64) {
        self.lock_markers().finish(key, id);
    }

    /// The channel to other brokers, made on first use.
    pub fn channel(&self, broker: &Broker) -> &MarkerChannel {
        self.channel.get_or_init(|| MarkerChannel::new(broker.settings.node_id, &broker.settings.interbroker))
    }

    /// Reports the results of markers sent to other brokers to the coordinator.
    pub fn markers_written(&self, broker: &Arc<Broker>, results: Vec<MarkerResult>) {
        if results.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for r in results {
            if r.retry {
                inner.failed_markers.insert((r.transactional_id.clone(), r.partition.clone()));
            }
            if r.error != ErrorCode::NONE {
                tracing::debug!(transactional_id = r.transactional_id, topic = %r.partition.0, partition = r.partition.1, error = r.error.name(), "transaction marker not written by the partition leader");
            }
            inner.coordinator.marker_written(&r.transactional_id, r.coordinator_epoch, &r.partition, r.error, now_ms());
        }
        drain(broker, &mut inner);
    }

    /// Writes one marker (WriteTxnMarkers from another broker's coordinator or an admin
    /// client) under the marker lock; once written, the producer's verifications in
    /// flight on the partition are void.
    pub fn append_marker_locked(
        &self,
        partition: &Partition,
        marker: (i64, i16, i32, bool),
    ) -> Result<osprey_storage::AppendInfo, ErrorCode> {
        let mut guards = self.lock_markers();
        let (producer_id, producer_epoch, coordinator_epoch, committed) = marker;
        let info = append_marker_as_leader(partition, producer_id, producer_epoch, coordinator_epoch, committed)?;
        guards.marker_written(&(partition.topic_id, partition.index, producer_id));
        Ok(info)
    }

    /// Makes the coordinator serve `__transaction_state` partition `index` as `led` says
    /// (`coordinator_leadership`): begins loading it when it is newly led here (or at a
    /// new epoch, the coordinator epoch), unloads it when it is not led here any more.
    pub fn follow_partition(&self, broker: &Arc<Broker>, index: i32, led: Led, mode: LoadMode) {
        let mut inner = self.lock();
        let c = &inner.coordinator;
        let (loading, loaded) = (c.loading_epoch(index), c.loaded_epoch(index));
        let Some((partition, epoch)) = led else {
            self.load_retries.forget(index);
            self.lock_loads_waiting().remove(&index);
            if loading.is_some() || loaded.is_some() {
                inner.coordinator.unload_partition(index);
                drain(broker, &mut inner);
                tracing::debug!(partition = index, "transactions unloaded: no longer the leader");
            }
            return;
        };
        if loaded == Some(epoch) {
            return;
        }
        if loading == Some(epoch) {
            // Begun; perhaps waiting for the high watermark, which the timer's calls see
            // move.
            let waiting = self.lock_loads_waiting().get(&index) == Some(&epoch);
            if waiting && load_is_committed(&partition) {
                self.lock_loads_waiting().remove(&index);
                drop(inner);
                let broker = broker.clone();
                mode.run(move || load_partition(&broker, index, epoch, &partition));
            }
            return;
        }
        if !self.load_retries.may_begin(index, epoch, Instant::now()) {
            return;
        }
        self.lock_loads_waiting().remove(&index);
        inner.coordinator.begin_load(index, epoch);
        drain(broker, &mut inner);
        drop(inner);
        let broker = broker.clone();
        mode.run(move || load_partition(&broker, index, epoch, &partition));
    }
}

/// Whether every record of `partition`'s log is committed: its high watermark reached
/// its log end.
fn load_is_committed(partition: &Partition) -> bool {
    *partition.watch_high_watermark().borrow() >= partition.log.log_end_offset()
}

/// Reads `__transaction_state` partition `index` to its log end and loads it into the
/// coordinator at coordinator epoch `epoch`, unless another leadership change overtook
/// the load. The coordinator appends to a partition only once loaded, so nothing is
/// appended while it is read.
///
/// Only once the high watermark reached the log end: a new leader's log holds every
/// acknowledged record, but perhaps also records above its high watermark that a later
/// leader lacks, and what the coordinator finds there acts beyond the partition. A
/// PrepareCommit found there is completed at once with COMMIT markers; were this broker
/// deposed before its followers fetched it, the next coordinator, without it, would time
/// the transaction out and abort it on the partitions not yet marked: committed on some,
/// aborted on others (`crates/coordinator/tests/cluster_txn_simulation.rs`,
/// `a_new_coordinator_completes_no_transaction_its_high_watermark_has_not_passed`).
/// Until then the partition's ids answer COORDINATOR_LOAD_IN_PROGRESS, which clients
/// retry; the followers' next fetches (or the ISR shrinking without them) move the high
/// watermark.
fn load_partition(broker: &Arc<Broker>, index: i32, epoch: i32, partition: &Partition) {
    if !load_is_committed(partition) {
        let inner = broker.transactions.lock();
        if inner.coordinator.loading_epoch(index) == Some(epoch) {
            broker.transactions.lock_loads_waiting().insert(index, epoch);
            tracing::debug!(partition = index, epoch, "transactions load waits for the high watermark");
        }
        return;
    }
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
    if loaded.is_ok() {
        broker.transactions.load_retries.forget(index);
    }
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
        Err(e) => broker.transactions.load_retries.report_failure(
            "transaction",
            TRANSACTION_STATE_TOPIC_NAME,
            index,
            epoch,
            &e,
        ),
    }
}

/// Why a transactional append did not happen at once.
#[derive(Debug)]
pub enum NotYet {
    /// The local coordinator's answer (never NONE).
    Refused(ErrorCode),
    /// The coordinator is on another broker: ask it, then append through
    /// [`Transactions::append_verified`].
    Remote(RemoteCheck),
}

/// Whether `producer` has a transaction open on `partition` at this epoch: its later
/// batches need no check.
fn open_here(partition: &Partition, producer_id: i64, producer_epoch: i16) -> bool {
    partition
        .log
        .producer_state(producer_id)
        .is_some_and(|e| e.current_txn_first_offset.is_some() && e.epoch == producer_epoch)
}

/// Kafka's `add.partitions.to.txn.retry.backoff.ms` and `.max.ms`: how a partition
/// leader retries an implicit add that found the transaction busy (the previous one still
/// completing; an add that meets another add in flight waits for it at the coordinator
/// instead, unless `MAX_WAITING_ADDS` already wait) before answering the client.
const ADD_RETRY_BACKOFF: Duration = Duration::from_millis(20);
const ADD_RETRY_MAX: Duration = Duration::from_millis(100);

/// Adds partitions to a transaction on a transaction version 2 client's behalf (Produce
/// v12+, TxnOffsetCommit v5), with its coordinator wherever it is. A local coordinator
/// gets the add now, so adds go out in request order; a remote one when the returned
/// future runs. The final error is the future's.
pub fn add_implicitly(
    broker: &Arc<Broker>,
    transaction: AddPartitionsToTxnTransaction,
) -> impl std::future::Future<Output = ErrorCode> + Send + 'static {
    let route = coordinator_route(broker, &transaction.transactional_id);
    let first = (route == CoordinatorRoute::Local)
        .then(|| broker.transactions.call_later(broker, |c, reply, now| c.add_partitions(&transaction, 5, reply, now)));
    add_with_retry(broker.clone(), route, transaction, first)
}

/// The add itself: CONCURRENT_TRANSACTIONS is retried for up to 100 ms, as Kafka's
/// partition leaders do; `first` is the local coordinator's answer to an add already
/// issued.
pub async fn add_with_retry(
    broker: Arc<Broker>,
    route: CoordinatorRoute,
    transaction: AddPartitionsToTxnTransaction,
    mut first: Option<oneshot::Receiver<Response>>,
) -> ErrorCode {
    let deadline = tokio::time::Instant::now() + ADD_RETRY_MAX;
    loop {
        let error = match &route {
            CoordinatorRoute::Local => {
                let answer = first.take().unwrap_or_else(|| {
                    broker
                        .transactions
                        .call_later(&broker, |c, reply, now| c.add_partitions(&transaction, 5, reply, now))
                });
                match answer.await {
                    Ok(Response::AddPartitionsToTxn { error }) => error,
                    _ => ErrorCode::UNKNOWN_SERVER_ERROR,
                }
            }
            CoordinatorRoute::Remote { node, address } => {
                txn_interbroker::send_add_partitions(&broker, *node, address.clone(), transaction.clone()).await
            }
            CoordinatorRoute::NotAvailable => ErrorCode::COORDINATOR_NOT_AVAILABLE,
        };
        if error != ErrorCode::CONCURRENT_TRANSACTIONS || tokio::time::Instant::now() + ADD_RETRY_BACKOFF > deadline {
            return error;
        }
        tokio::time::sleep(ADD_RETRY_BACKOFF).await;
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
    let (_, durable) = append_coordinator_records(&partition, epoch, &broker.flusher, records, None, what)?;
    let broker = broker.clone();
    tokio::spawn(async move {
        let result = coordinator_append_result(durable.await);
        broker.transactions.call(&broker, |c, now| c.persisted(id, result, now));
    });
    Ok(())
}

/// Sends the marker to each of its partitions' leaders: partitions led by other brokers
/// are queued for them (WriteTxnMarkers, `txn_interbroker::MarkerChannel`); those led
/// here are appended under the marker lock (so no transactional append races them).
/// Failures are reported to the coordinator at once, each local success once durable
/// (acks=all), each remote one when its leader answers.
fn write_markers(broker: &Arc<Broker>, write: MarkerWrite) {
    let MarkerWrite { transactional_id, marker } = write;
    let image = broker.image();
    let node_id = broker.settings.node_id;
    let routes =
        txn_interbroker::route_markers(&marker.partitions, node_id, &txn_interbroker::leader_in(&image, node_id));
    for (node, partitions) in routes.remote {
        let remote = RemoteMarker {
            transactional_id: transactional_id.clone(),
            marker: TxnMarker { partitions, ..marker.clone() },
        };
        broker.transactions.channel(broker).send(broker, node, remote);
    }
    // (partition, error, whether to retry it with a backoff)
    let mut failed: Vec<(TopicPartition, ErrorCode, bool)> = Vec::new();
    // Deleted since it joined the transaction: nothing to mark.
    failed.extend(routes.deleted.into_iter().map(|tp| (tp, ErrorCode::NONE, false)));
    // No leader now: sent again, to wherever the next leader is, after a back-off.
    failed.extend(routes.leaderless.into_iter().map(|tp| (tp, ErrorCode::NOT_LEADER_OR_FOLLOWER, true)));
    let mut guards = broker.transactions.lock_markers();
    for tp in &routes.local {
        let (topic, index) = tp;
        let Some(topic_image) = image.topic(topic) else {
            failed.push((tp.clone(), ErrorCode::NONE, false));
            continue;
        };
        let Some(partition) = broker.replica_manager.partition(topic_image.id, *index) else {
            failed.push((tp.clone(), ErrorCode::NOT_LEADER_OR_FOLLOWER, true));
            continue;
        };
        let m = &marker;
        let appended =
            append_marker_as_leader(&partition, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.committed);
        let info = match appended {
            Ok(info) => info,
            Err(code) => {
                failed.push((tp.clone(), code, txn_interbroker::marker_retriable(code)));
                continue;
            }
        };
        guards.marker_written(&(partition.topic_id, partition.index, marker.producer_id));
        let durable = partition.acknowledged(info.last_offset, &broker.flusher);
        let broker = broker.clone();
        let transactional_id = transactional_id.clone();
        let (marker, tp, topic_id) = (marker.clone(), tp.clone(), topic_image.id);
        tokio::spawn(async move {
            let error = match durable.await {
                Ok(Ok(())) => ErrorCode::NONE,
                Ok(Err(e)) => e.code(),
                Err(_) => ErrorCode::KAFKA_STORAGE_ERROR,
            };
            if error == ErrorCode::NONE {
                marker_durable(&broker, topic_id, &tp, marker.producer_id, marker.committed);
            }
            let result = MarkerResult {
                transactional_id,
                coordinator_epoch: marker.coordinator_epoch,
                partition: tp,
                error,
                retry: txn_interbroker::marker_retriable(error),
            };
            broker.transactions.markers_written(&broker, vec![result]);
        });
    }
    drop(guards);
    let results = failed
        .into_iter()
        .map(|(partition, error, retry)| MarkerResult {
            transactional_id: transactional_id.clone(),
            coordinator_epoch: marker.coordinator_epoch,
            partition,
            error,
            retry,
        })
        .collect();
    broker.transactions.markers_written(broker, results);
}

/// Appends a marker to `partition` as its leader (`Partition::append_as_leader`: not
/// across a change of leadership), with the error a WriteTxnMarkers answer carries.
static MARKER_FAILURES_LOGGED: LogLimiter = LogLimiter::new();

fn append_marker_as_leader(
    partition: &Partition,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    committed: bool,
) -> Result<osprey_storage::AppendInfo, ErrorCode> {
    let appended = partition.append_as_leader(None, |epoch| {
        partition.log.append_marker(producer_id, producer_epoch, coordinator_epoch, committed, epoch, now_ms())
    })?;
    appended.map_err(|e| {
        let code = crate::handlers::produce::storage_error_code(&e);
        let (topic, index) = (&partition.topic, partition.index);
        // Retried every marker back-off while the disk stays full: one line per interval.
        if let Some(unlogged) = MARKER_FAILURES_LOGGED.admit(REPEATED_FAILURE_LOG_INTERVAL) {
            tracing::warn!(topic = %topic, partition = index, producer_id, error = %e, unlogged, "transaction marker not written");
        }
        code
    })
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
