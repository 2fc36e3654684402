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
            // Transaction version 2 aborts without a transaction too (the client may not
            // know whether one is open), from Empty, CompleteCommit and CompleteAbort.
            PrepareAbort => &[Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort],
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

/// `transaction.version` 0/1 as a client uses it (`TransactionVersion.TV_0`): what
/// AddPartitionsToTxn up to v4 and EndTxn up to v4 mean, and a new transactional id.
pub const TRANSACTION_VERSION_1: i16 = 0;
/// `TransactionVersion.TV_2` (KIP-890 part 2): AddPartitionsToTxn v5+ and EndTxn v5+; every
/// EndTxn bumps the producer epoch.
pub const TRANSACTION_VERSION_2: i16 = 2;

/// Kafka's `TransactionVersion.supportsEpochBump`.
pub(super) fn supports_epoch_bump(client_transaction_version: i16) -> bool {
    client_transaction_version >= TRANSACTION_VERSION_2
}

/// The target of a prepared transition (Kafka's `TxnTransitMetadata`): what gets written
/// to `__transaction_state` and applied once durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TxnTransit {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    /// The producer id a TV2 completion rotates to (epoch exhausted), or -1.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub txn_start_ms: i64,
    pub txn_last_update_ms: i64,
    pub client_transaction_version: i16,
}

#[derive(Debug, Clone)]
pub(super) struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last rotation (KIP-360), for retried InitProducerIds.
    pub previous_producer_id: i64,
    /// Set between a TV2 PrepareCommit / PrepareAbort at an exhausted epoch and its
    /// completion: the producer id the completion moves to, at epoch 0.
    pub next_producer_id: i64,
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
    /// The transaction version of the client's last transition ([`TRANSACTION_VERSION_1`]
    /// or [`TRANSACTION_VERSION_2`]).
    pub client_transaction_version: i16,
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
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            txn_start_ms: -1,
            txn_last_update_ms: now_ms,
            client_transaction_version: TRANSACTION_VERSION_1,
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

    /// The producer id and epoch the completion of the prepared transaction leaves: under
    /// TV2 the next producer id at epoch 0 when the epoch ran out, else the current ones.
    pub fn completed_producer(&self) -> (i64, i16) {
        if supports_epoch_bump(self.client_transaction_version) && self.next_producer_id != NO_PRODUCER_ID {
            (self.next_producer_id, 0)
        } else {
            (self.producer_id, self.producer_epoch)
        }
    }

    /// The current metadata as a transition to `state` (Kafka's `TransitionData`), for the
    /// `prepare_*` methods to change.
    fn transition_to(&self, state: TxnState) -> TxnTransit {
        TxnTransit {
            producer_id: self.producer_id,
            previous_producer_id: self.producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            txn_timeout_ms: self.txn_timeout_ms,
            state,
            partitions: self.partitions.clone(),
            txn_start_ms: self.txn_start_ms,
            txn_last_update_ms: self.txn_last_update_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }

    pub fn prepare_fence_producer_epoch(&mut self) -> TxnTransit {
        // A fence whose append failed was never returned to anyone: reuse its epoch. At
        // i16::MAX (only reachable through a bug or a foreign log) stay there rather than
        // overflow (KAFKA-20090).
        let bumped = if self.has_failed_epoch_fence || self.producer_epoch == i16::MAX {
            self.producer_epoch
        } else {
            self.producer_epoch + 1
        };
        let mut transit = self.transition_to(TxnState::PrepareEpochFence);
        transit.producer_epoch = bumped;
        transit.last_producer_epoch = NO_PRODUCER_EPOCH;
        self.prepare_transition(transit)
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
        let mut transit = self.transition_to(TxnState::Empty);
        transit.producer_epoch = epoch;
        transit.last_producer_epoch = last_epoch;
        transit.txn_timeout_ms = new_txn_timeout_ms;
        transit.partitions = BTreeSet::new();
        transit.txn_start_ms = -1;
        transit.txn_last_update_ms = now_ms;
        Ok(self.prepare_transition(transit))
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
        let mut transit = self.transition_to(TxnState::Empty);
        transit.producer_id = new_producer_id;
        transit.producer_epoch = 0;
        transit.last_producer_epoch = if record_last_epoch { self.producer_epoch } else { NO_PRODUCER_EPOCH };
        transit.txn_timeout_ms = new_txn_timeout_ms;
        transit.partitions = BTreeSet::new();
        transit.txn_start_ms = -1;
        transit.txn_last_update_ms = now_ms;
        self.prepare_transition(transit)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn; the request's transaction version becomes the
    /// transaction's.
    pub fn prepare_add_partitions(
        &mut self,
        added: &BTreeSet<TopicPartition>,
        client_transaction_version: i16,
        now_ms: i64,
    ) -> TxnTransit {
        let start = match self.state {
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => now_ms,
            _ => self.txn_start_ms,
        };
        let mut transit = self.transition_to(TxnState::Ongoing);
        transit.partitions = self.partitions.union(added).cloned().collect();
        transit.txn_start_ms = start;
        transit.txn_last_update_ms = now_ms;
        transit.client_transaction_version = client_transaction_version;
        self.prepare_transition(transit)
    }

    /// PrepareCommit / PrepareAbort (Kafka's `prepareAbortOrCommit`). Under TV2 the epoch
    /// is bumped (`next_producer_id` is set when that exhausts it), and an abort may come
    /// with no transaction open (`no_partition_added`): then it starts now.
    pub fn prepare_abort_or_commit(
        &mut self,
        state: TxnState,
        client_transaction_version: i16,
        next_producer_id: i64,
        no_partition_added: bool,
        now_ms: i64,
    ) -> TxnTransit {
        let mut transit = self.transition_to(state);
        if supports_epoch_bump(client_transaction_version) {
            // The caller rotates the producer id when the epoch is exhausted, so the bump
            // reaches i16::MAX at most; stay there rather than overflow.
            transit.producer_epoch = self.producer_epoch.saturating_add(1);
            transit.last_producer_epoch = self.producer_epoch;
        }
        if no_partition_added {
            transit.txn_start_ms = now_ms;
        }
        transit.next_producer_id = next_producer_id;
        transit.txn_last_update_ms = now_ms;
        transit.client_transaction_version = client_transaction_version;
        self.prepare_transition(transit)
    }

    pub fn prepare_complete(&mut self, now_ms: i64) -> TxnTransit {
        let state =
            if self.state == TxnState::PrepareCommit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
        // The prepare record is durable, so the failed fence (if any) is behind us.
        self.has_failed_epoch_fence = false;
        let (producer_id, producer_epoch) = self.completed_producer();
        let mut transit = self.transition_to(state);
        // The last epoch stays the one the client last saw (i16::MAX - 1 on a rotation).
        transit.producer_id = producer_id;
        transit.producer_epoch = producer_epoch;
        transit.next_producer_id = NO_PRODUCER_ID;
        transit.partitions = BTreeSet::new();
        transit.txn_last_update_ms = now_ms;
        self.prepare_transition(transit)
    }

    pub fn prepare_dead(&mut self) -> TxnTransit {
        let mut transit = self.transition_to(TxnState::Dead);
        transit.partitions = BTreeSet::new();
        self.prepare_transition(transit)
    }

    fn prepare_transition(&mut self, transit: TxnTransit) -> TxnTransit {
        let state = transit.state;
        // Callers check for a pending transition first; a second one here is a bug.
        assert!(
            self.pending_state.is_none(),
            "{}: transition to {state:?} while {:?} is pending",
            self.transactional_id,
            self.pending_state
        );
        assert!(transit.producer_id >= 0, "illegal producer id {}", transit.producer_id);
        assert!(
            state == TxnState::Dead || transit.producer_epoch >= 0,
            "illegal producer epoch {}",
            transit.producer_epoch
        );
        assert!(
            state.valid_previous_states().contains(&self.state),
            "{}: {state:?} cannot follow {:?}",
            self.transactional_id,
            self.state
        );
        self.pending_state = Some(state);
        transit
    }

    /// Whether a transition keeps the producer as Kafka's `validProducerEpoch` requires:
    /// under TV2 a prepare bumps the epoch by one and a completion may rotate the id.
    fn valid_producer_epoch(&self, transit: &TxnTransit) -> bool {
        let tv2 = supports_epoch_bump(transit.client_transaction_version);
        match transit.state {
            TxnState::CompleteCommit | TxnState::CompleteAbort if tv2 && transit.producer_epoch == 0 => {
                transit.last_producer_epoch == self.last_producer_epoch
                    && transit.previous_producer_id == self.producer_id
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort if tv2 => {
                transit.last_producer_epoch == self.producer_epoch && transit.producer_id == self.producer_id
            }
            _ => transit.producer_id == self.producer_id && transit.producer_epoch == self.producer_epoch,
        }
    }

    /// Applies a transition whose record is durable (Kafka's `completeTransitionTo`), after
    /// checking it is the one prepared and changes only what that transition may change.
    pub fn complete_transition(&mut self, transit: &TxnTransit) {
        let id = &self.transactional_id;
        assert_eq!(self.pending_state, Some(transit.state), "{id}: completing a transition that was not prepared");
        let valid_producer = self.valid_producer_epoch(transit);
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
            }
            TxnState::Ongoing => {
                assert!(
                    valid_producer
                        && self.partitions.is_subset(&transit.partitions)
                        && self.txn_timeout_ms == transit.txn_timeout_ms,
                    "{id}: bad AddPartitions transition {transit:?}"
                );
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                // A TV2 abort with no transaction open starts it now.
                let empty_abort = transit.state == TxnState::PrepareAbort
                    && supports_epoch_bump(transit.client_transaction_version)
                    && matches!(self.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort);
                assert!(
                    valid_producer
                        && self.partitions == transit.partitions
                        && self.txn_timeout_ms == transit.txn_timeout_ms
                        && (self.txn_start_ms == transit.txn_start_ms || empty_abort),
                    "{id}: bad EndTxn transition {transit:?}"
                );
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                assert!(
                    valid_producer && self.txn_timeout_ms == transit.txn_timeout_ms && transit.txn_start_ms != -1,
                    "{id}: bad completion {transit:?}"
                );
            }
            // PrepareEpochFence is never persisted (it turns into PrepareAbort) and Dead
            // ends in removal from the cache.
            TxnState::PrepareEpochFence | TxnState::Dead => {
                panic!("{id}: {:?} is never completed", transit.state)
            }
        }
        if supports_epoch_bump(transit.client_transaction_version) {
            self.apply_all(transit);
        } else {
            self.apply_transaction_version_1(transit);
        }
        self.txn_last_update_ms = transit.txn_last_update_ms;
        self.pending_state = None;
        self.state = transit.state;
    }

    /// A TV2 transition replaces the whole metadata, as Kafka's `completeTransitionTo`.
    fn apply_all(&mut self, transit: &TxnTransit) {
        self.producer_id = transit.producer_id;
        self.previous_producer_id = transit.previous_producer_id;
        self.next_producer_id = transit.next_producer_id;
        self.producer_epoch = transit.producer_epoch;
        self.last_producer_epoch = transit.last_producer_epoch;
        self.txn_timeout_ms = transit.txn_timeout_ms;
        self.partitions = transit.partitions.clone();
        self.txn_start_ms = transit.txn_start_ms;
        self.client_transaction_version = transit.client_transaction_version;
    }

    /// A transaction-version-1 transition changes what it always changed here.
    fn apply_transaction_version_1(&mut self, transit: &TxnTransit) {
        self.client_transaction_version = transit.client_transaction_version;
        self.next_producer_id = transit.next_producer_id;
        match transit.state {
            TxnState::Empty => {
                self.txn_timeout_ms = transit.txn_timeout_ms;
                self.producer_epoch = transit.producer_epoch;
                self.last_producer_epoch = transit.last_producer_epoch;
                self.producer_id = transit.producer_id;
                self.previous_producer_id = transit.previous_producer_id;
            }
            TxnState::Ongoing => {
                self.txn_start_ms = transit.txn_start_ms;
                self.partitions.extend(transit.partitions.iter().cloned());
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                self.txn_start_ms = transit.txn_start_ms;
                self.partitions.clear();
            }
            _ => {}
        }
    }
}
