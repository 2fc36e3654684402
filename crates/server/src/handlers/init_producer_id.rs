//! InitProducerId without a transactional id: a fresh producer id, never handed out
//! before (ids are reserved in durable blocks), at epoch 0 — what Kafka does for an
//! idempotent producer, including one that bumps its epoch after an error (KIP-360).
//! Transactional ids need the transaction coordinator, which is not built yet.

use crate::broker::Broker;
use osprey_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: InitProducerIdRequest) -> ResponseBody {
    let mut resp = InitProducerIdResponse { producer_id: -1, producer_epoch: -1, ..Default::default() };
    let outcome = if req.transactional_id.is_some() {
        Err(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else {
        broker.next_producer_id().map_err(|e| e.code)
    };
    match outcome {
        Ok(id) => {
            resp.producer_id = id;
            resp.producer_epoch = 0;
        }
        Err(code) => {
            crate::telemetry::error_code(ApiKey::InitProducerId, code);
            resp.error_code = code.code();
        }
    }
    ResponseBody::InitProducerId(resp)
}
