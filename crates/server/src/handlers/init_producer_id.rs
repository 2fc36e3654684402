//! InitProducerId without a transactional id: a fresh producer id, never handed out
//! before (ids are reserved in durable blocks), at epoch 0 — what Kafka does for an
//! idempotent producer, including one that bumps its epoch after an error (KIP-360).
//! With a transactional id it goes to the transaction coordinator
//! ([`super::transactions::init_producer_id`]).

use crate::broker::Broker;
use osprey_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
use osprey_protocol::{ApiKey, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, _req: InitProducerIdRequest) -> ResponseBody {
    let mut resp = InitProducerIdResponse { producer_id: -1, producer_epoch: -1, ..Default::default() };
    let outcome = broker.next_producer_id().map_err(|e| e.code);
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
