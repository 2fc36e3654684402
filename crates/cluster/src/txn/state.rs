//! One transactional id's metadata and its state transitions, as Kafka's
//! `TransactionMetadata`: a transition is first *prepared* (the target state becomes the
//! pending state, which blocks any other transition), then *completed* once its record is
//! durable in `__transaction_state`, or abandoned if the append fails.

use std::collections::BTreeSet;

/// A partition by topic name and index.
pub type TopicPartition = (String, i32);

/// `RecordBatch.NO_PRODUCER_ID`
pub const NO_PRODUCER_ID: i64 = -1;
/// `RecordBatch.NO_PRODUCER_EPOCH`
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// The states of a transactional id, with Kafka's ids (the `transaction_status` byte of
/// `TransactionLogValue`) and names (DescribeTransactions / ListTransactions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// Expired; its tombstone is being written.
    Dead,
    /// InitProducerId or a timeout is fencing the producer of an ongoing transaction.
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Kafka's name, as DescribeTransactions and ListTransactions show it.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states this one may be entered from (Kafka's `validPreviousStates`).
    pub fn valid_previous_states(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether `transactional.id.expiration.ms` may remove an id in this state.
    pub fn is_expiration_allowed(self) -> bool {
        matches!(self, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
    }
}

/// Kafka refuses epochs from `Short.MaxValue - 1` up so that the coordinator can always
/// fence the current producer with one more bump.
pub fn is_epoch_exhausted(producer_epoch: i16) -> bool {
    producer_epoch >= i16::MAX - 1
}

/// The target of a prepared transition (Kafka's `TxnTransitMetadata`): what gets written
/// to `__transaction_state` and applied once durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TxnTransit {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub txn_start_ms: i64,
    pub txn_last_update_ms: i64,
}

#[derive(Debug, Clone)]
pub(super) struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last rotation (KIP-360), for retried InitProducerIds.
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, so a retried InitProducerId gets the same answer.
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TxnState,
    /// The partitions of the ongoing transaction; while markers are written, those still
    /// waiting for theirs.
    pub partitions: BTreeSet<TopicPartition>,
    pub txn_start_ms: i64,
    pub txn_last_update_ms: i64,
    /// The state a prepared transition goes to; blocks other transitions meanwhile.
    pub pending_state: Option<TxnState>,
    /// A previous epoch fence failed to persist: its bumped epoch was never returned to a
    /// client, so the next fence reuses it instead of bumping again.
    pub has_failed_epoch_fence: bool,
}

impl TxnMetadata {
    pub fn new(transactional_id: &str, producer_id: i64, txn_timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            txn_start_ms: -1,
            txn_last_update_ms: now_ms,
            pending_state: None,
            has_failed_epoch_fence: false,
        }
    }

    pub fn pending_transition_in_progress(&self) -> bool {
        self.pending_state.is_some()
    }

    pub fn is_producer_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    pub fn prepare_fence_producer_epoch(&mut self) -> TxnTransit {
        assert!(self.producer_epoch != i16::MAX, "fencing epoch i16::MAX would overflow");
        // A fence whose append failed was never returned to anyone: reuse its epoch.
        let bumped = if self.has_failed_epoch_fence { self.producer_epoch } else { self.producer_epoch + 1 };
        let (pid, timeout, partitions, start, update) = (
            self.producer_id,
            self.txn_timeout_ms,
            self.partitions.clone(),
            self.txn_start_ms,
            self.txn_last_update_ms,
        );
        self.prepare_transition(
            TxnState::PrepareEpochFence,
            pid,
            bumped,
            NO_PRODUCER_EPOCH,
            timeout,
            partitions,
            start,
            update,
        )
    }

    /// InitProducerId on an existing id whose epoch is not exhausted (Kafka's
    /// `prepareIncrementProducerEpoch`).
    pub fn prepare_increment_producer_epoch(
        &mut self,
        new_txn_timeout_ms: i32,
        expected_epoch: Option<i16>,
        now_ms: i64,
    ) -> Result<TxnTransit, osprey_protocol::ErrorCode> {
        // With the epoch exhausted the caller rotates the producer id instead, unless the
        // request names another epoch: then it is a retry or fenced, never a bump.
        let bump = || {
            assert!(!is_epoch_exhausted(self.producer_epoch), "no epochs left for producer id {}", self.producer_id);
            self.producer_epoch + 1
        };
        let (epoch, last_epoch) = match expected_epoch {
            None => (bump(), NO_PRODUCER_EPOCH),
            // The producer recovers from an error and nobody else initialized since.
            Some(expected) if self.producer_epoch == NO_PRODUCER_EPOCH || expected == self.producer_epoch => {
                (bump(), self.producer_epoch)
            }
            // A retry of a bump that succeeded: the same answer again.
            Some(expected) if expected == self.last_producer_epoch => (self.producer_epoch, self.last_producer_epoch),
            Some(_) => return Err(osprey_protocol::ErrorCode::PRODUCER_FENCED),
        };
        let (pid, start) = (self.producer_id, -1);
        Ok(self.prepare_transition(
            TxnState::Empty,
            pid,
            epoch,
            last_epoch,
            new_txn_timeout_ms,
            BTreeSet::new(),
            start,
            now_ms,
        ))
    }

    /// InitProducerId on an id whose epoch is exhausted: a new producer id, epoch 0.
    pub fn prepare_producer_id_rotation(
        &mut self,
        new_producer_id: i64,
        new_txn_timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> TxnTransit {
        assert!(
            !matches!(self.state, TxnState::Ongoing | TxnState::PrepareAbort | TxnState::PrepareCommit),
            "cannot rotate producer ids while a transaction is pending"
        );
        let last_epoch = if record_last_epoch { self.producer_epoch } else { NO_PRODUCER_EPOCH };
        self.prepare_transition(
            TxnState::Empty,
            new_producer_id,
            0,
            last_epoch,
            new_txn_timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
        )
    }

    pub fn prepare_add_partitions(&mut self, added: &BTreeSet<TopicPartition>, now_ms: i64) -> TxnTransit {
        let start = match self.state {
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => now_ms,
            _ => self.txn_start_ms,
        };
        let partitions = self.partitions.union(added).cloned().collect();
        let (pid, epoch, last, timeout) =
            (self.producer_id, self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms);
        self.prepare_transition(TxnState::Ongoing, pid, epoch, last, timeout, partitions, start, now_ms)
    }

    pub fn prepare_abort_or_commit(&mut self, state: TxnState, now_ms: i64) -> TxnTransit {
        let (pid, epoch, last, timeout, partitions, start) = (
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.partitions.clone(),
            self.txn_start_ms,
        );
        self.prepare_transition(state, pid, epoch, last, timeout, partitions, start, now_ms)
    }

    pub fn prepare_complete(&mut self, now_ms: i64) -> TxnTransit {
        let state =
            if self.state == TxnState::PrepareCommit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
        // The prepare record is durable, so the failed fence (if any) is behind us.
        self.has_failed_epoch_fence = false;
        let (pid, epoch, timeout, start) =
            (self.producer_id, self.producer_epoch, self.txn_timeout_ms, self.txn_start_ms);
        self.prepare_transition(state, pid, epoch, epoch, timeout, BTreeSet::new(), start, now_ms)
    }

    pub fn prepare_dead(&mut self) -> TxnTransit {
        let (pid, epoch, last, timeout, start, update) = (
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.txn_start_ms,
            self.txn_last_update_ms,
        );
        self.prepare_transition(TxnState::Dead, pid, epoch, last, timeout, BTreeSet::new(), start, update)
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare_transition(
        &mut self,
        state: TxnState,
        producer_id: i64,
        producer_epoch: i16,
        last_producer_epoch: i16,
        txn_timeout_ms: i32,
        partitions: BTreeSet<TopicPartition>,
        txn_start_ms: i64,
        now_ms: i64,
    ) -> TxnTransit {
        // Callers check for a pending transition first; a second one here is a bug.
        assert!(
            self.pending_state.is_none(),
            "{}: transition to {state:?} while {:?} is pending",
            self.transactional_id,
            self.pending_state
        );
        assert!(producer_id >= 0, "illegal producer id {producer_id}");
        assert!(state == TxnState::Dead || producer_epoch >= 0, "illegal producer epoch {producer_epoch}");
        assert!(
            state.valid_previous_states().contains(&self.state),
            "{}: {state:?} cannot follow {:?}",
            self.transactional_id,
            self.state
        );
        self.pending_state = Some(state);
        TxnTransit {
            producer_id,
            previous_producer_id: self.producer_id,
            producer_epoch,
            last_producer_epoch,
            txn_timeout_ms,
            state,
            partitions,
            txn_start_ms,
            txn_last_update_ms: now_ms,
        }
    }

    /// Applies a transition whose record is durable (Kafka's `completeTransitionTo`), after
    /// checking it is the one prepared and changes only what that transition may change.
    pub fn complete_transition(&mut self, transit: &TxnTransit) {
        let id = &self.transactional_id;
        assert_eq!(self.pending_state, Some(transit.state), "{id}: completing a transition that was not prepared");
        let same_producer = transit.producer_id == self.producer_id && transit.producer_epoch == self.producer_epoch;
        match transit.state {
            TxnState::Empty => {
                let bump = transit.producer_epoch == self.producer_epoch.wrapping_add(1)
                    || (transit.producer_epoch == 0 && transit.producer_id != self.producer_id);
                assert!(
                    (transit.producer_epoch == self.producer_epoch || bump)
                        && transit.partitions.is_empty()
                        && transit.txn_start_ms == -1,
                    "{id}: bad InitProducerId transition {transit:?}"
                );
                self.txn_timeout_ms = transit.txn_timeout_ms;
                self.producer_epoch = transit.producer_epoch;
                self.last_producer_epoch = transit.last_producer_epoch;
                self.producer_id = transit.producer_id;
                self.previous_producer_id = transit.previous_producer_id;
            }
            TxnState::Ongoing => {
                assert!(
                    same_producer
                        && self.partitions.is_subset(&transit.partitions)
                        && self.txn_timeout_ms == transit.txn_timeout_ms,
                    "{id}: bad AddPartitions transition {transit:?}"
                );
                self.txn_start_ms = transit.txn_start_ms;
                self.partitions.extend(transit.partitions.iter().cloned());
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                assert!(
                    same_producer
                        && self.partitions == transit.partitions
                        && self.txn_timeout_ms == transit.txn_timeout_ms
                        && self.txn_start_ms == transit.txn_start_ms,
                    "{id}: bad EndTxn transition {transit:?}"
                );
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                assert!(
                    same_producer && self.txn_timeout_ms == transit.txn_timeout_ms && transit.txn_start_ms != -1,
                    "{id}: bad completion {transit:?}"
                );
                self.txn_start_ms = transit.txn_start_ms;
                self.partitions.clear();
            }
            // PrepareEpochFence is never persisted (it turns into PrepareAbort) and Dead
            // ends in removal from the cache.
            TxnState::PrepareEpochFence | TxnState::Dead => {
                panic!("{id}: {:?} is never completed", transit.state)
            }
        }
        self.txn_last_update_ms = transit.txn_last_update_ms;
        self.pending_state = None;
        self.state = transit.state;
    }
}
