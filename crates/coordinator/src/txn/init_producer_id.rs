//! InitProducerId (Kafka's `handleInitProducerId` / `prepareInitProducerIdTransit`): a new
//! transactional id gets a producer id at epoch 0; an existing one gets its epoch bumped,
//! which fences the previous producer; an ongoing transaction is aborted first (the
//! client is answered CONCURRENT_TRANSACTIONS and retries); an exhausted epoch rotates to
//! a new producer id (KIP-360).

use super::state::{
    is_epoch_exhausted, TxnMetadata, TxnState, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TRANSACTION_VERSION_1,
};
use super::{fenced_for_version, EndOrigin, ReplyId, Response, Then, TransactionCoordinator};
use osprey_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
use osprey_protocol::ErrorCode;

pub(super) fn ok(producer_id: i64, producer_epoch: i16) -> InitProducerIdResponse {
    InitProducerIdResponse { error_code: 0, producer_id, producer_epoch, ..Default::default() }
}

pub(super) fn error(error: ErrorCode, version: i16) -> InitProducerIdResponse {
    InitProducerIdResponse {
        error_code: fenced_for_version(error, version, 4).code(),
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        ..Default::default()
    }
}

impl TransactionCoordinator {
    /// InitProducerId `request` at `version`; the answer comes out as
    /// [`Response::InitProducerId`] for `reply`. `next_producer_id` hands out a new
    /// producer id (called only when one is needed).
    pub fn init_producer_id(
        &mut self,
        request: &InitProducerIdRequest,
        version: i16,
        reply: ReplyId,
        next_producer_id: &mut dyn FnMut() -> Result<i64, ErrorCode>,
        now_ms: i64,
    ) {
        let answer = |c: &mut Self, response| c.respond(reply, Response::InitProducerId(response));
        // v3+ (KIP-360): the producer's current id and epoch, both or neither.
        let expected = match (request.producer_id, request.producer_epoch) {
            (NO_PRODUCER_ID, NO_PRODUCER_EPOCH) => None,
            (NO_PRODUCER_ID, _) | (_, NO_PRODUCER_EPOCH) => {
                return answer(self, error(ErrorCode::INVALID_REQUEST, version))
            }
            (producer_id, epoch) => Some((producer_id, epoch)),
        };
        let Some(transactional_id) = request.transactional_id.as_deref() else {
            // An idempotent producer: a fresh producer id, nothing to remember.
            let response = match next_producer_id() {
                Ok(producer_id) => ok(producer_id, 0),
                Err(e) => error(e, version),
            };
            return answer(self, response);
        };
        if transactional_id.is_empty() {
            return answer(self, error(ErrorCode::INVALID_REQUEST, version));
        }
        let timeout_ms = request.transaction_timeout_ms;
        if timeout_ms <= 0 || timeout_ms > self.config.transaction_max_timeout_ms {
            return answer(self, error(ErrorCode::INVALID_TRANSACTION_TIMEOUT, version));
        }
        let coordinator_epoch = match self.coordinator_epoch(transactional_id) {
            Ok(epoch) => epoch,
            Err(e) => return answer(self, error(e, version)),
        };
        if !self.txns.contains_key(transactional_id) {
            match next_producer_id() {
                Ok(producer_id) => {
                    let metadata = TxnMetadata::new(transactional_id, producer_id, timeout_ms, now_ms);
                    self.txns.insert(transactional_id.to_string(), metadata);
                }
                Err(e) => return answer(self, error(e, version)),
            }
        }
        let metadata = self.txns.get_mut(transactional_id).expect("inserted above");
        // A new producer instance (no id and epoch of its own) of an id already handed out
        // fences the previous one: counted once, though it may take two bumps (abort the
        // open transaction, then the new epoch) and client retries in between.
        let new_instance = expected.is_none() && metadata.producer_epoch != NO_PRODUCER_EPOCH;
        let transit = prepare_transit(metadata, timeout_ms, expected, next_producer_id, now_ms);
        if let Ok(t) = &transit {
            let already_counted = self.fenced_counted.remove(transactional_id);
            if t.state == TxnState::PrepareEpochFence {
                self.fenced_counted.insert(transactional_id.to_string());
            }
            if new_instance && !already_counted {
                self.stats.fenced_producers += 1;
            }
        }
        match transit {
            Err(e) => answer(self, error(e, version)),
            Ok(transit) if transit.state == TxnState::PrepareEpochFence => {
                // Abort the ongoing transaction at the bumped epoch; this epoch is never
                // returned: the client retries and bumps again.
                let producer = (transit.producer_id, transit.producer_epoch);
                let client_transaction_version =
                    self.txns.get(transactional_id).map_or(TRANSACTION_VERSION_1, |m| m.client_transaction_version);
                self.end_transaction(
                    transactional_id,
                    producer,
                    false,
                    EndOrigin::InitProducerId { reply, version },
                    client_transaction_version,
                    Some(next_producer_id),
                    now_ms,
                );
            }
            Ok(transit) => {
                self.append(transactional_id, coordinator_epoch, transit, Then::InitProducerId { reply, version });
            }
        }
    }
}

fn prepare_transit(
    metadata: &mut TxnMetadata,
    timeout_ms: i32,
    expected: Option<(i64, i16)>,
    next_producer_id: &mut dyn FnMut() -> Result<i64, ErrorCode>,
    now_ms: i64,
) -> Result<super::state::TxnTransit, ErrorCode> {
    // Fence the caller unless: the id was just created (epoch -1: recovery from
    // UNKNOWN_PRODUCER_ID), it names the current producer id (the epoch is checked when
    // bumping), or it names the previous one with an exhausted epoch (a retry of a
    // rotation whose answer was lost).
    let is_valid = |(producer_id, epoch): (i64, i16)| {
        metadata.producer_epoch == NO_PRODUCER_EPOCH
            || producer_id == metadata.producer_id
            || (producer_id == metadata.previous_producer_id && is_epoch_exhausted(epoch))
    };
    if metadata.pending_transition_in_progress() {
        return Err(ErrorCode::CONCURRENT_TRANSACTIONS);
    }
    if !expected.is_none_or(is_valid) {
        return Err(ErrorCode::PRODUCER_FENCED);
    }
    match metadata.state {
        TxnState::PrepareAbort | TxnState::PrepareCommit => Err(ErrorCode::CONCURRENT_TRANSACTIONS),
        TxnState::CompleteAbort | TxnState::CompleteCommit | TxnState::Empty => {
            if metadata.is_producer_epoch_exhausted() && expected.is_none_or(|(_, e)| e == metadata.producer_epoch) {
                let producer_id = next_producer_id()?;
                Ok(metadata.prepare_producer_id_rotation(producer_id, timeout_ms, now_ms, expected.is_some()))
            } else {
                metadata.prepare_increment_producer_epoch(timeout_ms, expected.map(|(_, e)| e), now_ms)
            }
        }
        TxnState::Ongoing => Ok(metadata.prepare_fence_producer_epoch()),
        // Never entered while no transition is pending.
        TxnState::Dead | TxnState::PrepareEpochFence => {
            panic!("{}: found in state {:?}", metadata.transactional_id, metadata.state)
        }
    }
}
