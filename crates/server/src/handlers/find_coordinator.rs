//! FindCoordinator: this node coordinates every group and every transactional id
//! (creating `__consumer_offsets` or `__transaction_state` on first use, as Kafka does,
//! from the blocking pool: `creates_topic`).

use crate::broker::Broker;
use crate::groups::{ensure_offsets_topic, OFFSETS_TOPIC};
use crate::transactions::ensure_state_topic;
use osprey_coordinator::txn::TRANSACTION_STATE_TOPIC_NAME;
use osprey_protocol::messages::find_coordinator_response::Coordinator;
use osprey_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Whether answering `req` creates `__consumer_offsets` or `__transaction_state` (a
/// controller write, run on the blocking pool).
pub fn creates_topic(broker: &Broker, req: &FindCoordinatorRequest, version: i16) -> bool {
    let topic = match if version >= 1 { req.key_type } else { KEY_TYPE_GROUP } {
        KEY_TYPE_GROUP => OFFSETS_TOPIC,
        KEY_TYPE_TRANSACTION => TRANSACTION_STATE_TOPIC_NAME,
        _ => return false,
    };
    broker.image().topic(topic).is_none()
}

pub fn handle(broker: &Arc<Broker>, req: FindCoordinatorRequest, version: i16) -> ResponseBody {
    let s = &broker.settings;
    let find = |key_type: i8| -> Result<(), (ErrorCode, String)> {
        match key_type {
            KEY_TYPE_GROUP => ensure_offsets_topic(broker)
                .map(drop)
                .map_err(|code| (code, "the offsets topic is not available".into())),
            KEY_TYPE_TRANSACTION => ensure_state_topic(broker)
                .map(drop)
                .map_err(|code| (code, "the transaction state topic is not available".into())),
            other => Err((ErrorCode::INVALID_REQUEST, format!("unknown coordinator key type {other}"))),
        }
    };
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        for key in req.coordinator_keys {
            let mut c = Coordinator { key, node_id: -1, port: -1, ..Default::default() };
            match find(req.key_type) {
                Ok(()) => {
                    c.node_id = s.node_id;
                    c.host = s.advertised_host.clone();
                    c.port = s.advertised_port;
                }
                Err((code, message)) => {
                    crate::telemetry::error_code(ApiKey::FindCoordinator, code);
                    c.error_code = code.code();
                    c.error_message = Some(message);
                }
            }
            resp.coordinators.push(c);
        }
    } else {
        match find(if version >= 1 { req.key_type } else { KEY_TYPE_GROUP }) {
            Ok(()) => {
                resp.node_id = s.node_id;
                resp.host = s.advertised_host.clone();
                resp.port = s.advertised_port;
            }
            Err((code, message)) => {
                crate::telemetry::error_code(ApiKey::FindCoordinator, code);
                resp.error_code = code.code();
                resp.node_id = -1;
                resp.port = -1;
                if version >= 1 {
                    resp.error_message = Some(message);
                }
            }
        }
    }
    ResponseBody::FindCoordinator(resp)
}
