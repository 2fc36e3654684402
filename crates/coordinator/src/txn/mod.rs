//! The transaction coordinator (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
//! EndTxn, DescribeTransactions, ListTransactions) as a deterministic state machine.
//!
//! It follows Kafka's `TransactionCoordinator` / `TransactionStateManager` /
//! `TransactionMetadata`: the same states and transitions (Empty, Ongoing, PrepareCommit,
//! PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence), the same error
//! codes in the same situations, the same timers (`transaction.abort.timed.out.transaction.cleanup.interval.ms`,
//! `transactional.id.expiration.ms`) and the same `__transaction_state` record formats,
//! so a log written by Kafka loads here and the other way round. Both transaction
//! versions are coordinated, per transaction, as Kafka 4.x does: version 1 (KIP-890 part
//! 1, partition verification) for AddPartitionsToTxn up to v4 and EndTxn up to v4, and
//! version 2 (KIP-890 part 2) for AddPartitionsToTxn v5+ (sent by the server for Produce
//! v12+ and TxnOffsetCommit v5+) and EndTxn v5+: every EndTxn bumps the producer epoch
//! (rotating the producer id when the epoch runs out) and answers with the new producer
//! id and epoch (see [`TransactionCoordinator::end_txn`]).
//!
//! No I/O, no clock: every input takes `now_ms`; replies, durable writes and markers come
//! out as [`Output`]s the server drains with [`TransactionCoordinator::poll_output`].
//!
//! # The protocol between the server and the coordinator
//!
//! - On becoming leader of `__transaction_state` partition `p` at leader epoch `e`, call
//!   [`load`]`(p, e, records, now)` with the partition's records, oldest first (answer
//!   COORDINATOR_LOAD_IN_PROGRESS for its ids meanwhile). Prepared transactions found
//!   there are completed (their markers come out again); ongoing ones are left to time
//!   out. On losing it, [`unload_partition`]`(p)`. Requests for ids of partitions not
//!   loaded are answered NOT_COORDINATOR.
//! - Every request takes a [`ReplyId`] chosen by the server and is answered exactly once
//!   by an [`Output::Respond`] with that id, at once for errors found up front, after a
//!   persist otherwise. The answer's error code is already mapped for the request's
//!   version (PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for old clients).
//! - [`Output::Persist`]: append `record` to `__transaction_state` partition `partition`
//!   with acks=-1, in output order, then call [`persisted`]`(id, result, now)` (the
//!   append's error code on failure). Nothing is acknowledged before it is durable.
//! - [`Output::WriteMarkers`]: write a `marker.committed` COMMIT/ABORT control batch with
//!   the marker's producer id, epoch and coordinator epoch to each of `marker.partitions`
//!   (WriteTxnMarkers to each leader, or a local append), then call
//!   [`marker_written`]`(transactional_id, coordinator_epoch, partition, error, now)` once
//!   per partition, with the partition's WriteTxnMarkers error. A partition whose topic no
//!   longer exists is reported `NONE` (nothing to mark). Retriable errors come back out as
//!   a new `WriteMarkers` for that partition: back off before sending it again. When
//!   every partition is marked, the completion is persisted.
//! - [`tick`]`(now)` aborts timed-out transactions, expires idle transactional ids and
//!   retries failed completion appends; call it on a period (e.g. 100 ms - 1 s).
//! - After every call, drain [`poll_output`] until `None`.
//! - Producer ids come from the server: [`init_producer_id`] and [`end_txn`] take a
//!   `&mut dyn FnMut() -> Result<i64, ErrorCode>` (the cluster's producer-id blocks),
//!   called only when a new id is needed; its error is returned to the client.
//! - AddPartitionsToTxn v4+ carries several transactions: the server calls
//!   [`add_partitions`] (or [`verify`] when `verify_only`) per transaction and merges.
//!   Authorization and unknown-topic checks (OPERATION_NOT_ATTEMPTED for the others) are
//!   the server's, before calling in.
//! - Transaction version 2 is what clients use once the `transaction.version` feature is
//!   finalized at 2 and EndTxn v5 / AddPartitionsToTxn v5 are advertised. Markers carry
//!   the transaction's version ([`TxnMarker::transaction_version`], WriteTxnMarkers v2).
//!
//! ```
//! use osprey_coordinator::txn::{Output, ReplyId, Response, TransactionCoordinator, TxnConfig};
//! use osprey_protocol::messages::InitProducerIdRequest;
//!
//! let mut coordinator = TransactionCoordinator::new(TxnConfig::default());
//! let partition = coordinator.partition_for("payments");
//! coordinator.load(partition, 0, Vec::new(), 0).unwrap();
//! let request = InitProducerIdRequest {
//!     transactional_id: Some("payments".into()),
//!     transaction_timeout_ms: 60_000,
//!     ..Default::default()
//! };
//! let mut next_producer_id = || Ok(4000);
//! coordinator.init_producer_id(&request, 4, ReplyId(1), &mut next_producer_id, 0);
//! // Nothing is answered before the new state is durable in __transaction_state.
//! let Some(Output::Persist { id, partition: p, .. }) = coordinator.poll_output() else { panic!() };
//! assert_eq!(p, partition);
//! assert!(coordinator.poll_output().is_none());
//! coordinator.persisted(id, Ok(()), 1);
//! let Some(Output::Respond { reply: ReplyId(1), response: Response::InitProducerId(r) }) = coordinator.poll_output()
//! else { panic!() };
//! assert_eq!((r.error_code, r.producer_id, r.producer_epoch), (0, 4000, 0));
//! ```
//!
//! [`load`]: TransactionCoordinator::load
//! [`unload_partition`]: TransactionCoordinator::unload_partition
//! [`persisted`]: TransactionCoordinator::persisted
//! [`marker_written`]: TransactionCoordinator::marker_written
//! [`tick`]: TransactionCoordinator::tick
//! [`poll_output`]: TransactionCoordinator::poll_output
//! [`init_producer_id`]: TransactionCoordinator::init_producer_id
//! [`end_txn`]: TransactionCoordinator::end_txn
//! [`add_partitions`]: TransactionCoordinator::add_partitions
//! [`verify`]: TransactionCoordinator::verify

mod add_partitions;
mod admin;
mod end_txn;
mod init_producer_id;
mod invariants;
pub mod records;
mod state;
mod timers;

pub use add_partitions::{transactions_of, MAX_WAITING_ADDS};
pub use records::{LoadError, LoadSummary};
pub use state::{
    is_epoch_exhausted, TopicPartition, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TRANSACTION_VERSION_1,
    TRANSACTION_VERSION_2,
};

use crate::group::{partition_for, Record};
use osprey_protocol::messages::{AddOffsetsToTxnResponse, EndTxnResponse, InitProducerIdResponse};
use osprey_protocol::ErrorCode;
use state::{TxnMetadata, TxnTransit};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// The group coordinator's topic, whose partitions AddOffsetsToTxn adds.
pub const GROUP_METADATA_TOPIC_NAME: &str = "__consumer_offsets";
/// This coordinator's topic.
pub const TRANSACTION_STATE_TOPIC_NAME: &str = "__transaction_state";

/// The coordinators share the server's handles for held requests and pending persists.
pub use crate::group::{PersistId, ReplyId};

/// What the coordinator asks of the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send `response` for the request `reply`.
    Respond { reply: ReplyId, response: Response },
    /// Append `record` to `__transaction_state` partition `partition` (acks=-1), then call
    /// [`TransactionCoordinator::persisted`] with `id`.
    Persist { id: PersistId, partition: i32, record: Record },
    /// Write the marker to each of its partitions, then report each partition with
    /// [`TransactionCoordinator::marker_written`].
    WriteMarkers { transactional_id: String, marker: TxnMarker },
}

/// A COMMIT or ABORT control batch to write to `partitions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The leader epoch of the transaction's `__transaction_state` partition, so a
    /// partition leader can refuse markers from a deposed coordinator.
    pub coordinator_epoch: i32,
    /// COMMIT when true, ABORT when false (WriteTxnMarkers `transaction_result`).
    pub committed: bool,
    pub partitions: Vec<TopicPartition>,
    /// The transaction's client transaction version, WriteTxnMarkers v2's
    /// `transaction_version`: 2 for transaction version 2, 0 for version 1 (Kafka's
    /// `TransactionVersion.featureLevel`).
    pub transaction_version: i8,
}

/// An answer to a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    InitProducerId(InitProducerIdResponse),
    /// AddPartitionsToTxn (client path): one error for every partition of the request, as
    /// Kafka answers it.
    AddPartitionsToTxn {
        error: ErrorCode,
    },
    AddOffsetsToTxn(AddOffsetsToTxnResponse),
    EndTxn(EndTxnResponse),
}

/// The coordinator's settings, with Kafka's names and defaults.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`
    pub transactional_id_expiration_ms: i64,
    /// `transaction.state.log.num.partitions`
    pub transaction_state_log_num_partitions: i32,
    /// `offsets.topic.num.partitions` (where AddOffsetsToTxn's group partition lives)
    pub offsets_topic_num_partitions: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub transaction_remove_expired_transaction_cleanup_interval_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            transaction_state_log_num_partitions: 50,
            offsets_topic_num_partitions: 50,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            transaction_remove_expired_transaction_cleanup_interval_ms: 3_600_000,
        }
    }
}

/// A read-only view of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnView {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: TxnState,
    pub pending_state: Option<TxnState>,
    pub partitions: Vec<TopicPartition>,
    pub txn_timeout_ms: i32,
    pub txn_start_ms: i64,
    /// [`TRANSACTION_VERSION_1`] or [`TRANSACTION_VERSION_2`], as the last transition set it.
    pub client_transaction_version: i16,
    /// The producer id a prepared TV2 transaction moves to on completion (its epoch ran
    /// out), or -1.
    pub next_producer_id: i64,
}

/// The transaction coordinator of one broker: every transactional id of the
/// `__transaction_state` partitions it leads.
#[derive(Debug)]
pub struct TransactionCoordinator {
    config: TxnConfig,
    /// Loaded partitions and their coordinator (leader) epochs.
    partitions: BTreeMap<i32, i32>,
    /// Partitions being read after `begin_load`, with the epoch they will be loaded at.
    loading: BTreeMap<i32, i32>,
    txns: BTreeMap<String, TxnMetadata>,
    outputs: VecDeque<Output>,
    pending_persists: HashMap<PersistId, PendingPersist>,
    next_persist_id: u64,
    /// Transactions whose markers are being written, with the completion to persist after.
    pending_markers: BTreeMap<String, PendingComplete>,
    /// Completion appends that failed with COORDINATOR_NOT_AVAILABLE, retried by `tick`.
    completion_retries: Vec<(String, PendingComplete)>,
    next_abort_check_ms: Option<i64>,
    next_expiration_check_ms: Option<i64>,
    stats: TxnStats,
    /// Ids whose producer was fenced and counted, until the next InitProducerId: the new
    /// instance's own bump is the same fence.
    fenced_counted: HashSet<String>,
    /// Partition leaders' adds waiting for an add of the same transaction in flight
    /// (at most [`add_partitions::MAX_WAITING_ADDS`] requests per id).
    waiting_adds: BTreeMap<String, Vec<add_partitions::WaitingAdd>>,
}

/// Counters since this coordinator started, for the broker's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxnStats {
    /// Transactions whose CompleteCommit became durable.
    pub commits: u64,
    /// Transactions whose CompleteAbort became durable (client aborts, timeouts, fences).
    pub aborts: u64,
    /// Epoch bumps that fence an older producer of a transactional id: InitProducerId from
    /// a new producer instance of an id already in use, and timed-out transactions.
    pub fenced_producers: u64,
}

/// A prepared transaction waiting for its markers (Kafka's `PendingCompleteTxn`).
#[derive(Debug, Clone)]
struct PendingComplete {
    coordinator_epoch: i32,
    marker: TxnMarker,
    transit: TxnTransit,
}

#[derive(Debug)]
struct PendingPersist {
    transactional_id: String,
    coordinator_epoch: i32,
    transit: TxnTransit,
    then: Then,
}

/// What happens once a persist is durable (or failed).
#[derive(Debug, Clone)]
enum Then {
    InitProducerId {
        reply: ReplyId,
        version: i16,
    },
    /// One request's add, or several that waited together ([`add_partitions::WaitingAdd`]).
    AddPartitions {
        replies: Vec<(ReplyId, i16)>,
    },
    AddOffsets {
        reply: ReplyId,
        version: i16,
    },
    /// PrepareCommit / PrepareAbort: reply, then write the markers.
    EndTxnPrepared {
        origin: EndOrigin,
        producer_id: i64,
        producer_epoch: i16,
        committed: bool,
        is_epoch_fence: bool,
        client_transaction_version: i16,
    },
    /// CompleteCommit / CompleteAbort after the markers.
    Completed {
        pending: PendingComplete,
    },
    /// An expired id's tombstone.
    Expired,
}

/// Who asked for a transaction to end.
#[derive(Debug, Clone, Copy)]
enum EndOrigin {
    Client {
        reply: ReplyId,
        version: i16,
    },
    /// InitProducerId fencing an ongoing transaction: answered CONCURRENT_TRANSACTIONS.
    InitProducerId {
        reply: ReplyId,
        version: i16,
    },
    /// The transaction timed out.
    Timeout,
}

impl TransactionCoordinator {
    pub fn new(config: TxnConfig) -> TransactionCoordinator {
        assert!(config.transaction_state_log_num_partitions > 0 && config.offsets_topic_num_partitions > 0);
        TransactionCoordinator {
            config,
            partitions: BTreeMap::new(),
            loading: BTreeMap::new(),
            txns: BTreeMap::new(),
            outputs: VecDeque::new(),
            pending_persists: HashMap::new(),
            next_persist_id: 0,
            pending_markers: BTreeMap::new(),
            completion_retries: Vec::new(),
            next_abort_check_ms: None,
            next_expiration_check_ms: None,
            stats: TxnStats::default(),
            fenced_counted: HashSet::new(),
            waiting_adds: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// The next output, oldest first.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The `__transaction_state` partition of `transactional_id`: Kafka's
    /// `Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions`.
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.config.transaction_state_log_num_partitions)
    }

    /// Whether `__transaction_state` partition `partition` is loaded.
    pub fn is_loaded(&self, partition: i32) -> bool {
        self.partitions.contains_key(&partition)
    }

    /// Whether this coordinator has loaded the partition of `transactional_id`.
    pub fn is_coordinator_for(&self, transactional_id: &str) -> bool {
        self.partitions.contains_key(&self.partition_for(transactional_id))
    }

    /// What the coordinator knows of `transactional_id`.
    pub fn transaction(&self, transactional_id: &str) -> Option<TxnView> {
        self.txns.get(transactional_id).map(|t| TxnView {
            producer_id: t.producer_id,
            producer_epoch: t.producer_epoch,
            state: t.state,
            pending_state: t.pending_state,
            partitions: t.partitions.iter().cloned().collect(),
            txn_timeout_ms: t.txn_timeout_ms,
            txn_start_ms: t.txn_start_ms,
            client_transaction_version: t.client_transaction_version,
            next_producer_id: t.next_producer_id,
        })
    }

    /// How many transactional ids the coordinator holds.
    pub fn transactional_id_count(&self) -> usize {
        self.txns.len()
    }

    /// The transactional ids the coordinator holds.
    pub fn transactional_ids(&self) -> Vec<String> {
        self.txns.keys().cloned().collect()
    }

    /// Counters since start.
    pub fn stats(&self) -> TxnStats {
        self.stats
    }

    /// Transactions open or completing (Ongoing, PrepareCommit, PrepareAbort,
    /// PrepareEpochFence): what the `ongoing transactions` gauge shows.
    pub fn open_transactions(&self) -> usize {
        self.txns
            .values()
            .filter(|m| {
                matches!(m.state, TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort)
                    || m.pending_state == Some(TxnState::PrepareEpochFence)
            })
            .count()
    }

    /// Persists the coordinator waits on (each holds at most one request), a bound the
    /// server can watch.
    pub fn persists_in_flight(&self) -> usize {
        self.pending_persists.len()
    }

    /// Loads `__transaction_state` partition `partition`, led at `coordinator_epoch`,
    /// from its records (oldest first), replacing whatever was held for it. Prepared
    /// transactions are completed: their markers come out again.
    pub fn load(
        &mut self,
        partition: i32,
        coordinator_epoch: i32,
        records: impl IntoIterator<Item = Record>,
        now_ms: i64,
    ) -> Result<LoadSummary, LoadError> {
        let mut summary = LoadSummary::default();
        let loaded = records::replay(records, &mut summary.skipped)?;
        if let Some(stray) = loaded.keys().find(|id| self.partition_for(id) != partition) {
            return Err(LoadError(format!("{stray} does not belong to partition {partition}")));
        }
        self.unload_partition(partition);
        self.partitions.insert(partition, coordinator_epoch);
        summary.transactional_ids = loaded.len();
        for (id, metadata) in loaded {
            let prepared = matches!(metadata.state, TxnState::PrepareCommit | TxnState::PrepareAbort);
            self.txns.insert(id.clone(), metadata);
            if prepared {
                summary.completing += 1;
                self.send_markers(&id, coordinator_epoch, now_ms);
            }
        }
        Ok(summary)
    }

    /// Stops coordinating `partition`: its ids are forgotten, their markers dropped.
    /// Persists still in flight for them answer NOT_COORDINATOR when reported.
    pub fn unload_partition(&mut self, partition: i32) {
        self.partitions.remove(&partition);
        self.loading.remove(&partition);
        let ours = |c: &Self, id: &str| c.partition_for(id) == partition;
        let ids: Vec<String> = self.txns.keys().filter(|id| ours(self, id)).cloned().collect();
        for id in ids {
            self.txns.remove(&id);
            self.pending_markers.remove(&id);
            self.fenced_counted.remove(&id);
        }
        let waiting: Vec<String> = self.waiting_adds.keys().filter(|id| ours(self, id)).cloned().collect();
        for id in waiting {
            for add in self.waiting_adds.remove(&id).into_iter().flatten() {
                self.answer_adds(add.replies, ErrorCode::NOT_COORDINATOR);
            }
        }
        let retries = std::mem::take(&mut self.completion_retries);
        self.completion_retries = retries.into_iter().filter(|(id, _)| !ours(self, id)).collect();
    }

    /// The coordinator epoch of `transactional_id`'s partition, or the error a request for
    /// it gets (Kafka's `getTransactionState`).
    fn coordinator_epoch(&self, transactional_id: &str) -> Result<i32, ErrorCode> {
        let partition = self.partition_for(transactional_id);
        match self.partitions.get(&partition) {
            Some(epoch) => Ok(*epoch),
            None if self.loading.contains_key(&partition) => Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            None => Err(ErrorCode::NOT_COORDINATOR),
        }
    }

    /// This broker became the leader of `partition` at `coordinator_epoch` and is reading
    /// its records: its ids answer COORDINATOR_LOAD_IN_PROGRESS until [`Self::load`] (at
    /// that epoch) or [`Self::unload_partition`]. What it coordinated before is dropped.
    pub fn begin_load(&mut self, partition: i32, coordinator_epoch: i32) {
        self.unload_partition(partition);
        self.loading.insert(partition, coordinator_epoch);
    }

    /// The epoch `partition` is being loaded at, between [`Self::begin_load`] and
    /// [`Self::load`].
    pub fn loading_epoch(&self, partition: i32) -> Option<i32> {
        self.loading.get(&partition).copied()
    }

    /// The coordinator epoch `partition` was loaded at, if it is coordinated here.
    pub fn loaded_epoch(&self, partition: i32) -> Option<i32> {
        self.partitions.get(&partition).copied()
    }

    fn respond(&mut self, reply: ReplyId, response: Response) {
        self.outputs.push_back(Output::Respond { reply, response });
    }

    /// Appends a prepared transition (Kafka's `appendTransactionToLog`).
    fn append(&mut self, transactional_id: &str, coordinator_epoch: i32, transit: TxnTransit, then: Then) {
        let id = PersistId(self.next_persist_id);
        self.next_persist_id += 1;
        let record = records::transit_record(transactional_id, &transit);
        let partition = self.partition_for(transactional_id);
        self.pending_persists.insert(
            id,
            PendingPersist { transactional_id: transactional_id.to_string(), coordinator_epoch, transit, then },
        );
        self.outputs.push_back(Output::Persist { id, partition, record });
    }

    /// The server reports that persist `id` is durable (`Ok`) or failed with the append's
    /// error. Unknown ids (from before an unload, or reported twice) are ignored.
    pub fn persisted(&mut self, id: PersistId, result: Result<(), ErrorCode>, now_ms: i64) {
        let Some(pending) = self.pending_persists.remove(&id) else { return };
        let error = self.apply_append_result(&pending, result);
        let transactional_id = pending.transactional_id.clone();
        self.continue_after_persist(pending, error, now_ms);
        self.run_waiting_adds(&transactional_id, now_ms);
    }

    /// Completes or abandons the prepared transition (Kafka's `updateCacheCallback`);
    /// returns the error its request gets.
    fn apply_append_result(&mut self, pending: &PendingPersist, result: Result<(), ErrorCode>) -> ErrorCode {
        let id = &pending.transactional_id;
        let same_coordinator = self.coordinator_epoch(id) == Ok(pending.coordinator_epoch);
        let transit = &pending.transit;
        match result {
            Ok(()) => match self.txns.get_mut(id) {
                // Still the transition prepared: a reload (even at the same epoch) drops it.
                Some(metadata) if same_coordinator && metadata.pending_state == Some(transit.state) => {
                    if transit.state == TxnState::Dead {
                        self.txns.remove(id);
                    } else {
                        metadata.complete_transition(transit);
                    }
                    ErrorCode::NONE
                }
                _ => ErrorCode::NOT_COORDINATOR,
            },
            Err(error) => {
                let error = append_error_to_response(error);
                // A completion that will be retried keeps its pending state, which blocks
                // new transitions until it is durable.
                let retried =
                    matches!(pending.then, Then::Completed { .. }) && error == ErrorCode::COORDINATOR_NOT_AVAILABLE;
                if let Some(metadata) = self.txns.get_mut(id).filter(|_| same_coordinator && !retried) {
                    metadata.pending_state = None;
                }
                error
            }
        }
    }

    /// Answers the request that waited on a persist, or carries on with the next step.
    fn continue_after_persist(&mut self, pending: PendingPersist, error: ErrorCode, now_ms: i64) {
        let PendingPersist { transactional_id, coordinator_epoch, transit, then } = pending;
        match then {
            Then::InitProducerId { reply, version } => {
                let response = if error == ErrorCode::NONE {
                    init_producer_id::ok(transit.producer_id, transit.producer_epoch)
                } else {
                    init_producer_id::error(error, version)
                };
                self.respond(reply, Response::InitProducerId(response));
            }
            Then::AddPartitions { replies } => self.answer_adds(replies, error),
            Then::AddOffsets { reply, version } => {
                let error_code = fenced_for_version(error, version, 2).code();
                let response = AddOffsetsToTxnResponse { error_code, ..Default::default() };
                self.respond(reply, Response::AddOffsetsToTxn(response));
            }
            Then::EndTxnPrepared {
                origin,
                producer_id,
                producer_epoch,
                committed,
                is_epoch_fence,
                client_transaction_version,
            } => {
                let producer = (producer_id, producer_epoch);
                let prepared = PreparedEnd {
                    coordinator_epoch,
                    origin,
                    producer,
                    committed,
                    is_epoch_fence,
                    client_transaction_version,
                };
                self.after_prepare_persisted(&transactional_id, prepared, error, now_ms);
            }
            Then::Completed { pending } => self.after_completion_persisted(&transactional_id, pending, error),
            Then::Expired => {}
        }
    }
}

/// An EndTxn whose PrepareCommit / PrepareAbort append has returned.
#[derive(Debug, Clone, Copy)]
struct PreparedEnd {
    coordinator_epoch: i32,
    origin: EndOrigin,
    producer: (i64, i16),
    committed: bool,
    is_epoch_fence: bool,
    client_transaction_version: i16,
}

/// Maps an append error to the error the client gets (Kafka's
/// `TransactionStateManager.appendTransactionToLog`).
fn append_error_to_response(error: ErrorCode) -> ErrorCode {
    use ErrorCode as E;
    match error {
        E::UNKNOWN_TOPIC_OR_PARTITION
        | E::NOT_ENOUGH_REPLICAS
        | E::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | E::REQUEST_TIMED_OUT => E::COORDINATOR_NOT_AVAILABLE,
        E::NOT_LEADER_OR_FOLLOWER | E::KAFKA_STORAGE_ERROR => E::NOT_COORDINATOR,
        E::MESSAGE_TOO_LARGE | E::RECORD_LIST_TOO_LARGE => E::UNKNOWN_SERVER_ERROR,
        other => other,
    }
}

/// Clients older than `first_version` do not know PRODUCER_FENCED (KIP-588) and get
/// INVALID_PRODUCER_EPOCH, as Kafka's `KafkaApis` answers them.
fn fenced_for_version(error: ErrorCode, version: i16, first_version: i16) -> ErrorCode {
    if error == ErrorCode::PRODUCER_FENCED && version < first_version {
        ErrorCode::INVALID_PRODUCER_EPOCH
    } else {
        error
    }
}
