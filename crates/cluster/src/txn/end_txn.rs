//! EndTxn and the two-phase completion (Kafka's `endTransaction` and
//! `TransactionMarkerChannelManager`): PrepareCommit / PrepareAbort is persisted, the
//! client is answered, a marker goes to every partition of the transaction, and once all
//! are written CompleteCommit / CompleteAbort is persisted.

use super::state::{TopicPartition, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
use super::{
    fenced_for_version, init_producer_id, EndOrigin, Output, PendingComplete, PreparedEnd, ReplyId, Response, Then,
    TransactionCoordinator, TxnMarker,
};
use osprey_protocol::messages::{EndTxnRequest, EndTxnResponse};
use osprey_protocol::ErrorCode;

impl TransactionCoordinator {
    /// EndTxn `request` at `version`; the answer comes out as [`Response::EndTxn`] for
    /// `reply`, once PrepareCommit / PrepareAbort is durable. Every version is handled as
    /// transaction version 1: the epoch is not bumped per transaction (KIP-890 part 2),
    /// and the v5 response carries the current producer id and epoch.
    pub fn end_txn(&mut self, request: &EndTxnRequest, version: i16, reply: ReplyId, now_ms: i64) {
        self.end_transaction(
            &request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            EndOrigin::Client { reply, version },
            now_ms,
        );
    }

    /// Kafka's `endTransaction`, for a client's EndTxn and for the coordinator's own
    /// aborts (InitProducerId fencing an ongoing transaction, a timeout).
    pub(super) fn end_transaction(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        committed: bool,
        origin: EndOrigin,
        now_ms: i64,
    ) {
        if transactional_id.is_empty() {
            return self.answer_end(origin, ErrorCode::INVALID_REQUEST, None);
        }
        let coordinator_epoch = match self.coordinator_epoch(transactional_id) {
            Ok(epoch) => epoch,
            Err(e) => return self.answer_end(origin, e, None),
        };
        let from_client = matches!(origin, EndOrigin::Client { .. });
        let Some(metadata) = self.txns.get_mut(transactional_id) else {
            return self.answer_end(origin, ErrorCode::INVALID_PRODUCER_ID_MAPPING, None);
        };
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
        let transit = metadata.prepare_abort_or_commit(next_state, now_ms);
        let then = Then::EndTxnPrepared { origin, producer_id, producer_epoch, committed, is_epoch_fence };
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
        } = end;
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
            Some(m) if m.producer_epoch != producer_epoch => Err(ErrorCode::PRODUCER_FENCED),
            Some(m) if m.pending_transition_in_progress() => Err(ErrorCode::CONCURRENT_TRANSACTIONS),
            Some(m) if m.state != prepared => Err(ErrorCode::INVALID_TXN_STATE),
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
