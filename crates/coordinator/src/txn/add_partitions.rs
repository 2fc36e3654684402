//! AddPartitionsToTxn and AddOffsetsToTxn (Kafka's `handleAddPartitionsToTransaction`),
//! and the verify-only form partition leaders use before a transaction's first append
//! (KIP-890 part 1, `handleVerifyPartitionsInTransaction`).

use super::state::{TopicPartition, TxnState, TRANSACTION_VERSION_1, TRANSACTION_VERSION_2};
use super::{ReplyId, Response, Then, TransactionCoordinator, GROUP_METADATA_TOPIC_NAME};
use crate::group::partition_for;
use osprey_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;
use osprey_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest};
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

/// The request kinds that add partitions, for the answer's shape.
#[derive(Clone, Copy)]
enum AddKind {
    Partitions,
    Offsets,
}

impl AddKind {
    /// Whether requests of this kind wait for an add in flight instead of being answered
    /// CONCURRENT_TRANSACTIONS: partition leaders' adds (v5+, see [`WaitingAdd`]), not
    /// clients' (v0-3), which Kafka's answer suits.
    fn waits(self, replies: &[(ReplyId, i16)]) -> bool {
        matches!(self, AddKind::Partitions) && replies.iter().all(|(_, version)| *version >= 5)
    }

    /// The transaction version a request of this kind at `version` implies (Kafka's
    /// `KafkaApis`): AddPartitionsToTxn v5+ comes from a broker acting for a TV2 client;
    /// AddOffsetsToTxn is never sent by TV2 clients.
    fn client_transaction_version(self, version: i16) -> i16 {
        match self {
            AddKind::Partitions if version > 4 => TRANSACTION_VERSION_2,
            AddKind::Partitions | AddKind::Offsets => TRANSACTION_VERSION_1,
        }
    }
}

/// The transactions of an AddPartitionsToTxn request: v0-3 carry one at top level
/// (never verify-only), v4+ a list. The server calls [`TransactionCoordinator::add_partitions`]
/// or [`TransactionCoordinator::verify`] for each.
pub fn transactions_of(request: &AddPartitionsToTxnRequest, version: i16) -> Vec<AddPartitionsToTxnTransaction> {
    if version >= 4 {
        return request.transactions.clone();
    }
    vec![AddPartitionsToTxnTransaction {
        transactional_id: request.v3_and_below_transactional_id.clone(),
        producer_id: request.v3_and_below_producer_id,
        producer_epoch: request.v3_and_below_producer_epoch,
        verify_only: false,
        topics: request.v3_and_below_topics.clone(),
        ..Default::default()
    }]
}

fn partitions_of(transaction: &AddPartitionsToTxnTransaction) -> Vec<TopicPartition> {
    transaction.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), *p))).collect()
}

impl TransactionCoordinator {
    /// AddPartitionsToTxn for one transaction of a request at `version` (see
    /// [`transactions_of`]): the answer comes out as [`Response::AddPartitionsToTxn`] for
    /// `reply`, one error for every partition. At v5+ the transaction becomes (or stays)
    /// transaction version 2 once the partitions are durable in it; the errors are the
    /// same as at v4 (Kafka's coordinator answers TRANSACTION_ABORTABLE only to `verify`).
    pub fn add_partitions(
        &mut self,
        transaction: &AddPartitionsToTxnTransaction,
        version: i16,
        reply: ReplyId,
        now_ms: i64,
    ) {
        let partitions: BTreeSet<TopicPartition> = partitions_of(transaction).into_iter().collect();
        let producer = (transaction.producer_id, transaction.producer_epoch);
        let replies = vec![(reply, version)];
        self.add(&transaction.transactional_id, producer, &partitions, AddKind::Partitions, replies, now_ms);
    }

    /// AddOffsetsToTxn at `version`: adds the `__consumer_offsets` partition of the
    /// request's group to the transaction; the answer comes out as
    /// [`Response::AddOffsetsToTxn`] for `reply`.
    pub fn add_offsets(&mut self, request: &AddOffsetsToTxnRequest, version: i16, reply: ReplyId, now_ms: i64) {
        let partition = partition_for(&request.group_id, self.config.offsets_topic_num_partitions);
        let partitions = BTreeSet::from([(GROUP_METADATA_TOPIC_NAME.to_string(), partition)]);
        let producer = (request.producer_id, request.producer_epoch);
        self.add(&request.transactional_id, producer, &partitions, AddKind::Offsets, vec![(reply, version)], now_ms);
    }

    /// AddPartitionsToTxn v4+ with `verify_only` (a partition leader before the first
    /// transactional append, KIP-890 part 1): for each partition, NONE if it is in the
    /// transaction, TRANSACTION_ABORTABLE if not; or one error for all. Answered at once;
    /// nothing changes.
    pub fn verify(&self, transaction: &AddPartitionsToTxnTransaction) -> Vec<(TopicPartition, ErrorCode)> {
        let partitions = partitions_of(transaction);
        let transactional_id = transaction.transactional_id.as_str();
        let all = |error: ErrorCode| partitions.iter().map(|p| (p.clone(), error)).collect();
        if transactional_id.is_empty() {
            return all(ErrorCode::INVALID_REQUEST);
        }
        if let Err(error) = self.coordinator_epoch(transactional_id) {
            return all(error);
        }
        let Some(metadata) = self.txns.get(transactional_id) else {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        // The pending state is not checked: the partition leader validates again when it
        // appends, and partitions join the set only once durable.
        if metadata.producer_id != transaction.producer_id {
            all(ErrorCode::INVALID_PRODUCER_ID_MAPPING)
        } else if metadata.producer_epoch != transaction.producer_epoch {
            all(ErrorCode::PRODUCER_FENCED)
        } else if matches!(metadata.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            all(ErrorCode::CONCURRENT_TRANSACTIONS)
        } else {
            partitions
                .iter()
                .map(|p| {
                    let error = if metadata.partitions.contains(p) {
                        ErrorCode::NONE
                    } else {
                        ErrorCode::TRANSACTION_ABORTABLE
                    };
                    (p.clone(), error)
                })
                .collect()
        }
    }

    /// Adds `partitions` for the requests `replies` (one, or several adds that waited
    /// together), answering each of them once.
    fn add(
        &mut self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        partitions: &BTreeSet<TopicPartition>,
        kind: AddKind,
        replies: Vec<(ReplyId, i16)>,
        now_ms: i64,
    ) {
        let answer = |c: &mut Self, replies: Vec<(ReplyId, i16)>, error: ErrorCode| match kind {
            AddKind::Partitions => c.answer_adds(replies, error),
            AddKind::Offsets => {
                for (reply, version) in replies {
                    let error_code = super::fenced_for_version(error, version, 2).code();
                    let response = AddOffsetsToTxnResponse { error_code, ..Default::default() };
                    c.respond(reply, Response::AddOffsetsToTxn(response));
                }
            }
        };
        if transactional_id.is_empty() {
            return answer(self, replies, ErrorCode::INVALID_REQUEST);
        }
        let coordinator_epoch = match self.coordinator_epoch(transactional_id) {
            Ok(epoch) => epoch,
            Err(e) => return answer(self, replies, e),
        };
        let Some(metadata) = self.txns.get_mut(transactional_id) else {
            return answer(self, replies, ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        // An id whose first InitProducerId never became durable has no epoch: its producer
        // id was never handed out (Kafka fails this internally; the mapping is what is wrong).
        let error = if metadata.producer_id != producer_id || metadata.producer_epoch < 0 {
            Some(ErrorCode::INVALID_PRODUCER_ID_MAPPING)
        } else if metadata.producer_epoch != producer_epoch {
            Some(ErrorCode::PRODUCER_FENCED)
        } else if metadata.pending_transition_in_progress()
            || matches!(metadata.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
        {
            Some(ErrorCode::CONCURRENT_TRANSACTIONS)
        } else if metadata.state == TxnState::Ongoing && partitions.is_subset(&metadata.partitions) {
            // Already in the transaction: nothing to persist.
            Some(ErrorCode::NONE)
        } else {
            None
        };
        let adding = metadata.pending_state == Some(TxnState::Ongoing);
        if error == Some(ErrorCode::CONCURRENT_TRANSACTIONS) && adding && kind.waits(&replies) {
            let held: usize =
                self.waiting_adds.get(transactional_id).map_or(0, |w| w.iter().map(|w| w.replies.len()).sum());
            if held + replies.len() <= MAX_WAITING_ADDS {
                let producer = (producer_id, producer_epoch);
                let add = WaitingAdd { producer, partitions: partitions.clone(), replies };
                self.waiting_adds.entry(transactional_id.to_string()).or_default().push(add);
                return;
            }
        }
        if let Some(error) = error {
            return answer(self, replies, error);
        }
        let version = replies.iter().map(|(_, version)| *version).max().unwrap_or(0);
        let transit = metadata.prepare_add_partitions(partitions, kind.client_transaction_version(version), now_ms);
        let then = match kind {
            AddKind::Partitions => Then::AddPartitions { replies },
            AddKind::Offsets => {
                let (reply, version) = replies[0];
                Then::AddOffsets { reply, version }
            }
        };
        self.append(transactional_id, coordinator_epoch, transit, then);
    }

    /// Answers AddPartitionsToTxn requests, each mapped for its version.
    pub(super) fn answer_adds(&mut self, replies: Vec<(ReplyId, i16)>, error: ErrorCode) {
        for (reply, version) in replies {
            let error = super::fenced_for_version(error, version, 2);
            self.respond(reply, Response::AddPartitionsToTxn { error });
        }
    }

    /// After a persist of `transactional_id` returned: the adds that waited for it go in
    /// as one add (one more persist for all of them, or an answer at once).
    pub(super) fn run_waiting_adds(&mut self, transactional_id: &str, now_ms: i64) {
        if self.txns.get(transactional_id).is_some_and(|m| m.pending_transition_in_progress()) {
            return;
        }
        let Some(waiting) = self.waiting_adds.remove(transactional_id) else { return };
        // They parked behind one producer, which no transition changed since; grouped by
        // producer all the same, so a waiter is never answered for another's producer.
        let mut by_producer: BTreeMap<(i64, i16), WaitingAdd> = BTreeMap::new();
        for add in waiting {
            let group = by_producer.entry(add.producer).or_insert_with(|| WaitingAdd {
                producer: add.producer,
                partitions: BTreeSet::new(),
                replies: Vec::new(),
            });
            group.partitions.extend(add.partitions);
            group.replies.extend(add.replies);
        }
        for WaitingAdd { producer, partitions, replies } in by_producer.into_values() {
            self.add(transactional_id, producer, &partitions, AddKind::Partitions, replies, now_ms);
        }
    }
}

/// How many AddPartitionsToTxn requests may wait, per transactional id, for an add of
/// the same transaction being persisted; beyond that they are answered
/// CONCURRENT_TRANSACTIONS, and their partition leaders retry.
pub const MAX_WAITING_ADDS: usize = 1024;

/// Adds sent by partition leaders (AddPartitionsToTxn v5, transaction version 2) that
/// arrived while another add of their transaction was being persisted. Kafka answers them
/// CONCURRENT_TRANSACTIONS, and its leaders avoid most of them by sending one add per
/// produce request for all its partitions (`AddPartitionsToTxnManager`); Osprey's leaders
/// add each partition from its own append queue, so the coordinator gathers them instead:
/// they go in together, in one persist, as soon as the one ahead of them is durable.
#[derive(Debug)]
pub(super) struct WaitingAdd {
    producer: (i64, i16),
    partitions: BTreeSet<TopicPartition>,
    pub(super) replies: Vec<(ReplyId, i16)>,
}
