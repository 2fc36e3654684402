//! EndTxn and the two-phase completion (Kafka's `endTransaction` and
//! `TransactionMarkerChannelManager`): PrepareCommit / PrepareAbort is persisted, the
//! client is answered, a marker goes to every partition of the transaction, and once all
//! are written CompleteCommit / CompleteAbort is persisted. Under transaction version 2
//! the prepare also bumps the producer epoch (a new producer id at epoch 0 on completion
//! when the epoch runs out), the markers carry the bumped epoch, and the client goes on
//! with what the completion leaves.

use super::state::{
    supports_epoch_bump, TopicPartition, TxnMetadata, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
    TRANSACTION_VERSION_1, TRANSACTION_VERSION_2,
};
use super::{
    fenced_for_version, init_producer_id, EndOrigin, Output, PendingComplete, PreparedEnd, ReplyId, Response, Then,
    TransactionCoordinator, TxnMarker,
};
use osprey_protocol::messages::{EndTxnRequest, EndTxnResponse};
use osprey_protocol::ErrorCode;

/// Where a new producer id comes from when a TV2 completion exhausts the epoch.
pub(super) type NextProducerId<'a> = &'a mut dyn FnMut() -> Result<i64, ErrorCode>;

/// What a transaction-version-2 EndTxn leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndDecision {
    /// Answer at once (NONE: a retry of an EndTxn that completed).
    Answer(ErrorCode),
    /// Persist PrepareCommit / PrepareAbort; `no_partition_added`: an abort with no
    /// transaction open.
    Prepare { state: TxnState, no_partition_added: bool },
}

impl TransactionCoordinator {
    /// EndTxn `request` at `version`; the answer comes out as [`Response::EndTxn`] for
    /// `reply`, once PrepareCommit / PrepareAbort is durable.
    ///
    /// Up to v4 this is transaction version 1: the producer epoch stays. From v5 it is
    /// transaction version 2 (KIP-890 part 2, Kafka's `endTransaction`): the epoch is
    /// bumped, and when that exhausts it `next_producer_id` is called for the producer id
    /// the completion moves to at epoch 0; the response carries the producer id and epoch
    /// the client goes on with. An EndTxn at the epoch before the bump is a retry.
    pub fn end_txn(
        &mut self,
        request: &EndTxnRequest,
        version: i16,
        reply: ReplyId,
        next_producer_id: &mut dyn FnMut() -> Result<i64, ErrorCode>,
        now_ms: i64,
    ) {
        // KafkaApis: a client sending EndTxn v5+ uses transaction version 2.
        let client_transaction_version = if version > 4 { TRANSACTION_VERSION_2 } else { TRANSACTION_VERSION_1 };
        self.end_transaction(
            &request.transactional_id,
            (request.producer_id, request.producer_epoch),
            request.committed,
            EndOrigin::Client { reply, version },
            client_transaction_version,
            Some(next_producer_id),
            now_ms,
        );
    }

    /// Kafka's `endTransaction`, for a client's EndTxn and for the coordinator's own
    /// aborts (InitProducerId fencing an ongoing transaction, a timeout), under the given
    /// transaction version. Kafka's own aborts use the broker's finalized
    /// `transaction.version`; here they use the transaction's, so that transaction-version-1
    /// transactions are fenced as they always were.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn end_transaction(
        &mut self,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        committed: bool,
        origin: EndOrigin,
        client_transaction_version: i16,
        next_producer_id: Option<NextProducerId<'_>>,
        now_ms: i64,
    ) {
        if transactional_id.is_empty() {
            return self.answer_end(origin, ErrorCode::INVALID_REQUEST, None);
        }
        let coordinator_epoch = match self.coordinator_epoch(transactional_id) {
            Ok(epoch) => epoch,
            Err(e) => return self.answer_end(origin, e, None),
        };
        if !self.txns.contains_key(transactional_id) {
            return self.answer_end(origin, ErrorCode::INVALID_PRODUCER_ID_MAPPING, None);
        }
        let end = EndRequest { producer_id, producer_epoch, committed, origin, coordinator_epoch };
        if supports_epoch_bump(client_transaction_version) {
            self.end_transaction_v2(transactional_id, end, next_producer_id, now_ms);
        } else {
            self.end_transaction_v1(transactional_id, end, now_ms);
        }
    }

    /// Kafka's `endTransactionWithTV1`: clients must name the current epoch.
    fn end_transaction_v1(&mut self, transactional_id: &str, end: EndRequest, now_ms: i64) {
        let EndRequest { producer_id, producer_epoch, committed, origin, coordinator_epoch } = end;
        let from_client = matches!(origin, EndOrigin::Client { .. });
        let metadata = self.txns.get_mut(transactional_id).expect("caller checked");
        let current = (metadata.producer_id, metadata.producer_epoch);
        let fencing = metadata.pending_state == Some(TxnState::PrepareEpochFence);
        // Clients must name the current epoch; the coordinator's own aborts come with the
        // bumped one.
        let error = if metadata.producer_id != producer_id {
            Some(ErrorCode::INVALID_PRODUCER_ID_MAPPING)
        } else if (from_client && producer_epoch != metadata.producer_epoch) || producer_epoch < metadata.producer_epoch
        {
            Some(ErrorCode::PRODUCER_FENCED)
        } else if metadata.pending_transition_in_progress() && !fencing {
            Some(ErrorCode::CONCURRENT_TRANSACTIONS)
        } else {
            match (metadata.state, committed) {
                (TxnState::Ongoing, _) => None,
                // A retry of an EndTxn that already completed.
                (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Some(ErrorCode::NONE),
                // A retry of one still completing.
                (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                    Some(ErrorCode::CONCURRENT_TRANSACTIONS)
                }
                (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, _)
                | (TxnState::PrepareCommit | TxnState::PrepareAbort, _) => Some(ErrorCode::INVALID_TXN_STATE),
                (TxnState::Dead | TxnState::PrepareEpochFence, _) => {
                    panic!("{transactional_id}: found in state {:?}", metadata.state)
                }
            }
        };
        if let Some(error) = error {
            let ids = (error == ErrorCode::NONE).then_some(current);
            return self.answer_end(origin, error, ids);
        }
        let next_state = if committed { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
        let is_epoch_fence = next_state == TxnState::PrepareAbort && fencing;
        if is_epoch_fence {
            // The fence becomes this abort: it carries the bumped epoch.
            metadata.pending_state = None;
            metadata.producer_epoch = producer_epoch;
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH;
        }
        let transit =
            metadata.prepare_abort_or_commit(next_state, TRANSACTION_VERSION_1, NO_PRODUCER_ID, false, now_ms);
        let then = Then::EndTxnPrepared {
            origin,
            producer_id,
            producer_epoch,
            committed,
            is_epoch_fence,
            client_transaction_version: TRANSACTION_VERSION_1,
        };
        self.append(transactional_id, coordinator_epoch, transit, then);
    }

    /// Kafka's `endTransaction` for transaction version 2: the epoch is bumped at
    /// PrepareCommit / PrepareAbort, retries come at the epoch before the bump, and an
    /// abort with no transaction open is allowed.
    fn end_transaction_v2(
        &mut self,
        transactional_id: &str,
        end: EndRequest,
        next_producer_id: Option<NextProducerId<'_>>,
        now_ms: i64,
    ) {
        let EndRequest { producer_id, producer_epoch, committed, origin, coordinator_epoch } = end;
        let from_client = matches!(origin, EndOrigin::Client { .. });
        let metadata = self.txns.get_mut(transactional_id).expect("caller checked");
        let current = (metadata.producer_id, metadata.producer_epoch);
        let fencing = metadata.pending_state == Some(TxnState::PrepareEpochFence);
        let (state, no_partition_added) =
            match decide_v2(metadata, (producer_id, producer_epoch), committed, from_client) {
                EndDecision::Answer(error) => {
                    if fencing {
                        // Not reached (a fence is of an Ongoing transaction at a higher
                        // epoch); never leave the fence pending.
                        metadata.pending_state = None;
                    }
                    let ids = (error == ErrorCode::NONE).then_some(current);
                    return self.answer_end(origin, error, ids);
                }
                EndDecision::Prepare { state, no_partition_added } => (state, no_partition_added),
            };
        // The bump exhausts the epoch: the completion moves to a new producer id (the
        // coordinator's own aborts too, KAFKA-20090, when a source is at hand).
        let next = match next_producer_id {
            Some(allocate) if metadata.is_producer_epoch_exhausted() => allocate(),
            _ => Ok(NO_PRODUCER_ID),
        };
        if fencing {
            // The fence becomes this abort. Its epoch is not applied: the abort bumps once
            // (KAFKA-19367), so nothing is left to reuse if its append fails.
            metadata.pending_state = None;
        }
        let next_producer_id = match next {
            Ok(id) => id,
            Err(error) => return self.answer_end(origin, error, None),
        };
        let transit = metadata.prepare_abort_or_commit(
            state,
            TRANSACTION_VERSION_2,
            next_producer_id,
            no_partition_added,
            now_ms,
        );
        let then = Then::EndTxnPrepared {
            origin,
            producer_id,
            producer_epoch,
            committed,
            is_epoch_fence: false,
            client_transaction_version: TRANSACTION_VERSION_2,
        };
        self.append(transactional_id, coordinator_epoch, transit, then);
    }

    /// PrepareCommit / PrepareAbort is durable (or failed): answer, and send the markers.
    pub(super) fn after_prepare_persisted(
        &mut self,
        transactional_id: &str,
        end: PreparedEnd,
        error: ErrorCode,
        now_ms: i64,
    ) {
        let PreparedEnd {
            coordinator_epoch,
            origin,
            producer: (producer_id, producer_epoch),
            committed,
            is_epoch_fence,
            client_transaction_version,
        } = end;
        let tv2 = supports_epoch_bump(client_transaction_version);
        if error != ErrorCode::NONE {
            if is_epoch_fence && self.coordinator_epoch(transactional_id) == Ok(coordinator_epoch) {
                if let Some(metadata) = self.txns.get_mut(transactional_id) {
                    // The bumped epoch was never returned: the next fence reuses it.
                    metadata.has_failed_epoch_fence = true;
                }
            }
            return self.answer_end(origin, error, None);
        }
        let prepared = if committed { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
        let pre_send = match self.txns.get(transactional_id) {
            None => Err(ErrorCode::NOT_COORDINATOR),
            Some(_) if self.coordinator_epoch(transactional_id) != Ok(coordinator_epoch) => {
                Err(ErrorCode::NOT_COORDINATOR)
            }
            Some(m) if m.producer_id != producer_id => Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING),
            // Under TV2 the prepare bumped the epoch the client named.
            Some(m)
                if m.producer_epoch != producer_epoch && !(tv2 && is_next_epoch(m.producer_epoch, producer_epoch)) =>
            {
                Err(ErrorCode::PRODUCER_FENCED)
            }
            Some(m) if m.pending_transition_in_progress() => Err(ErrorCode::CONCURRENT_TRANSACTIONS),
            Some(m) if m.state != prepared => Err(ErrorCode::INVALID_TXN_STATE),
            // TV2: what the completion leaves (Kafka answers with the prepared completion).
            Some(m) if tv2 => Ok(m.completed_producer()),
            Some(m) => Ok((m.producer_id, m.producer_epoch)),
        };
        match pre_send {
            Err(error) => self.answer_end(origin, error, None),
            Ok(ids) => {
                // Durable: the outcome is decided, so answer before the markers are out.
                self.answer_end(origin, ErrorCode::NONE, Some(ids));
                self.send_markers(transactional_id, coordinator_epoch, now_ms);
            }
        }
    }

    /// Prepares the completion of a prepared transaction and sends its markers (Kafka's
    /// `addTxnMarkersToSend`); with no partitions, completes at once.
    pub(super) fn send_markers(&mut self, transactional_id: &str, coordinator_epoch: i32, now_ms: i64) {
        let metadata = self.txns.get_mut(transactional_id).expect("caller checked");
        let committed = metadata.state == TxnState::PrepareCommit;
        let transit = metadata.prepare_complete(now_ms);
        let marker = TxnMarker {
            producer_id: metadata.producer_id,
            producer_epoch: metadata.producer_epoch,
            coordinator_epoch,
            committed,
            partitions: metadata.partitions.iter().cloned().collect(),
            // 0 or 2 by construction (the request versions' mapping, or a loaded record).
            transaction_version: i8::try_from(metadata.client_transaction_version).unwrap_or(i8::MAX),
        };
        let pending = PendingComplete { coordinator_epoch, marker: marker.clone(), transit };
        self.pending_markers.insert(transactional_id.to_string(), pending);
        if !marker.partitions.is_empty() {
            self.outputs.push_back(Output::WriteMarkers { transactional_id: transactional_id.to_string(), marker });
        }
        self.maybe_write_completion(transactional_id);
    }

    /// The server reports the marker of `transactional_id` on `partition`, sent at
    /// `coordinator_epoch`, with its WriteTxnMarkers error (Kafka's
    /// `TransactionMarkerRequestCompletionHandler`). Reports for markers the coordinator
    /// no longer waits for are ignored.
    pub fn marker_written(
        &mut self,
        transactional_id: &str,
        coordinator_epoch: i32,
        partition: &TopicPartition,
        error: ErrorCode,
        _now_ms: i64,
    ) {
        use ErrorCode as E;
        let Some(pending) = self.pending_markers.get(transactional_id) else { return };
        if pending.coordinator_epoch != coordinator_epoch
            || self.coordinator_epoch(transactional_id) != Ok(coordinator_epoch)
        {
            return;
        }
        match error {
            // UNSUPPORTED_*: the producer could not have written there either.
            E::NONE | E::UNSUPPORTED_FOR_MESSAGE_FORMAT | E::UNSUPPORTED_VERSION => {
                if let Some(metadata) = self.txns.get_mut(transactional_id) {
                    assert!(
                        matches!(metadata.state, TxnState::PrepareCommit | TxnState::PrepareAbort),
                        "{transactional_id}: marker written in state {:?}",
                        metadata.state
                    );
                    metadata.partitions.remove(partition);
                }
                self.maybe_write_completion(transactional_id);
            }
            // The producer or coordinator epoch moved on: a newer coordinator owns this
            // transaction now. Stop; the transaction stays prepared here.
            E::INVALID_PRODUCER_EPOCH | E::TRANSACTION_COORDINATOR_FENCED => {
                self.pending_markers.remove(transactional_id);
            }
            // Retriable (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
            // NOT_ENOUGH_REPLICAS*, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR); Kafka treats
            // anything else as fatal, here it is retried too rather than lost.
            _ => {
                let still_waiting = self.txns.get(transactional_id).is_some_and(|m| m.partitions.contains(partition));
                if still_waiting {
                    let marker = TxnMarker { partitions: vec![partition.clone()], ..pending.marker.clone() };
                    self.outputs
                        .push_back(Output::WriteMarkers { transactional_id: transactional_id.to_string(), marker });
                }
            }
        }
    }

    fn maybe_write_completion(&mut self, transactional_id: &str) {
        let done = self.txns.get(transactional_id).is_some_and(|m| m.partitions.is_empty());
        if !done {
            return;
        }
        if let Some(pending) = self.pending_markers.remove(transactional_id) {
            self.write_completion(transactional_id, pending);
        }
    }

    pub(super) fn write_completion(&mut self, transactional_id: &str, pending: PendingComplete) {
        let transit = pending.transit.clone();
        let coordinator_epoch = pending.coordinator_epoch;
        self.append(transactional_id, coordinator_epoch, transit, Then::Completed { pending });
    }

    /// CompleteCommit / CompleteAbort is durable, or failed: COORDINATOR_NOT_AVAILABLE is
    /// retried by `tick`; NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS leave it to the
    /// next coordinator's load (Kafka's `tryAppendToLog`).
    pub(super) fn after_completion_persisted(
        &mut self,
        transactional_id: &str,
        pending: PendingComplete,
        error: ErrorCode,
    ) {
        if error == ErrorCode::COORDINATOR_NOT_AVAILABLE
            && self.coordinator_epoch(transactional_id) == Ok(pending.coordinator_epoch)
        {
            self.completion_retries.push((transactional_id.to_string(), pending));
        } else if error != ErrorCode::NONE {
            tracing::info!(transactional_id, ?error, "completing transaction failed; left to the next load");
        } else if pending.marker.committed {
            self.stats.commits += 1;
        } else {
            self.stats.aborts += 1;
        }
    }

    fn answer_end(&mut self, origin: EndOrigin, error: ErrorCode, ids: Option<(i64, i16)>) {
        match origin {
            EndOrigin::Client { reply, version } => {
                let (producer_id, producer_epoch) = ids.unwrap_or((NO_PRODUCER_ID, NO_PRODUCER_EPOCH));
                let response = EndTxnResponse {
                    error_code: fenced_for_version(error, version, 2).code(),
                    producer_id,
                    producer_epoch,
                    ..Default::default()
                };
                self.respond(reply, Response::EndTxn(response));
            }
            EndOrigin::InitProducerId { reply, version } => {
                // Success means the abort is under way: the client retries.
                let error = if error == ErrorCode::NONE { ErrorCode::CONCURRENT_TRANSACTIONS } else { error };
                self.respond(reply, Response::InitProducerId(init_producer_id::error(error, version)));
            }
            EndOrigin::Timeout => {
                if error != ErrorCode::NONE {
                    tracing::debug!(?error, "abort of a timed-out transaction did not go ahead");
                }
            }
        }
    }
}

/// A request to end a transaction, checked against the metadata.
#[derive(Debug, Clone, Copy)]
struct EndRequest {
    producer_id: i64,
    producer_epoch: i16,
    committed: bool,
    origin: EndOrigin,
    coordinator_epoch: i32,
}

/// Whether `stored` is one more than `requested` (a TV2 EndTxn's bump), without overflow.
fn is_next_epoch(stored: i16, requested: i16) -> bool {
    i32::from(stored) == i32::from(requested) + 1
}

/// The checks of Kafka's transaction-version-2 `endTransaction`, in its order: the
/// producer id (a retry may name the id before a rotation), a pending transition, the
/// epoch, then the state. Kafka's table for Empty and the completed states (PF =
/// PRODUCER_FENCED, ITS = INVALID_TXN_STATE, NONE = success with the current producer,
/// EB = a new PrepareAbort with an epoch bump); Retry is the epoch before the last bump
/// (or `i16::MAX - 1` of the previous producer id after a rotation), Current the current
/// epoch:
///
/// ```text
///                  Abort            Commit
///                  Retry  Current   Retry  Current
/// Empty            PF     EB        PF     ITS
/// CompleteAbort    NONE   EB        PF*    ITS
/// CompleteCommit   ITS    EB        NONE   ITS
/// ```
///
/// *Kafka 4.x answers ITS there; trunk answers PRODUCER_FENCED (KAFKA-20785): only a
/// coordinator abort (a timeout) can meet a commit at the retry epoch, and the producer
/// recovers from PRODUCER_FENCED where INVALID_TXN_STATE is fatal to it.
fn decide_v2(
    m: &TxnMetadata,
    (producer_id, producer_epoch): (i64, i16),
    committed: bool,
    from_client: bool,
) -> EndDecision {
    use EndDecision::{Answer, Prepare};
    use TxnState::*;
    // A fence bumps differently (its abort bumps once more); it comes only from Ongoing.
    let fencing = m.pending_state == Some(PrepareEpochFence);
    let retry_on_overflow =
        !fencing && m.previous_producer_id == producer_id && producer_epoch == i16::MAX - 1 && m.producer_epoch == 0;
    let retry_on_epoch_bump = !fencing && is_next_epoch(m.producer_epoch, producer_epoch);
    let is_retry = retry_on_epoch_bump || retry_on_overflow;
    let valid_epoch = if fencing {
        (!from_client || producer_epoch == m.producer_epoch) && producer_epoch >= m.producer_epoch
    } else {
        // The same epoch in a completed state is the next EndTxn, not a retry.
        match m.state {
            Ongoing | Empty | Dead | PrepareEpochFence => producer_epoch == m.producer_epoch,
            PrepareCommit | PrepareAbort => retry_on_epoch_bump,
            CompleteCommit | CompleteAbort => is_retry || producer_epoch == m.producer_epoch,
        }
    };
    if m.producer_id != producer_id && !retry_on_overflow {
        return Answer(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    }
    // Before the epoch check (KAFKA-18464): an abort right after a commit waits for the
    // commit to complete instead of being fenced by its bump.
    if m.pending_transition_in_progress() && !fencing {
        return Answer(ErrorCode::CONCURRENT_TRANSACTIONS);
    }
    if !valid_epoch {
        return Answer(ErrorCode::PRODUCER_FENCED);
    }
    let abort_without_transaction = Prepare { state: PrepareAbort, no_partition_added: true };
    match (m.state, committed) {
        (Ongoing, true) => Prepare { state: PrepareCommit, no_partition_added: false },
        (Ongoing, false) => Prepare { state: PrepareAbort, no_partition_added: false },
        (CompleteCommit, true) | (CompleteAbort, false) if is_retry => Answer(ErrorCode::NONE),
        (CompleteCommit | CompleteAbort | Empty, false) if !is_retry => abort_without_transaction,
        (CompleteAbort, true) if is_retry => Answer(ErrorCode::PRODUCER_FENCED),
        (PrepareCommit, true) | (PrepareAbort, false) => Answer(ErrorCode::CONCURRENT_TRANSACTIONS),
        (Empty | CompleteCommit | CompleteAbort | PrepareCommit | PrepareAbort, _) => {
            Answer(ErrorCode::INVALID_TXN_STATE)
        }
        (Dead | PrepareEpochFence, _) => panic!("{}: found in state {:?}", m.transactional_id, m.state),
    }
}
