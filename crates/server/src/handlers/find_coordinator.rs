//! FindCoordinator: the coordinator of a group (transactional id) is the leader of its
//! `__consumer_offsets` (`__transaction_state`) partition, as Kafka's; the topic is
//! created on first use, as Kafka does, from the blocking pool (`creates_topic`). A
//! partition without a live leader answers COORDINATOR_NOT_AVAILABLE.

use crate::broker::Broker;
use crate::groups::{ensure_offsets_topic, OFFSETS_TOPIC};
use crate::metadata_cache::{Endpoint, MetadataCache};
use crate::transactions::ensure_state_topic;
use osprey_coordinator::group::partition_for;
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
    let key_type = if version >= 1 { req.key_type } else { KEY_TYPE_GROUP };
    let ensured = match key_type {
        KEY_TYPE_GROUP => ensure_offsets_topic(broker).map(drop),
        KEY_TYPE_TRANSACTION => ensure_state_topic(broker).map(drop),
        _ => Ok(()),
    };
    let find = |key: &str| -> Result<Endpoint, (ErrorCode, String)> {
        let topic = match key_type {
            KEY_TYPE_GROUP => OFFSETS_TOPIC,
            KEY_TYPE_TRANSACTION => TRANSACTION_STATE_TOPIC_NAME,
            other => return Err((ErrorCode::INVALID_REQUEST, format!("unknown coordinator key type {other}"))),
        };
        ensured.map_err(|code| (code, format!("the {topic} topic is not available")))?;
        coordinator(broker, key_type, key).ok_or_else(|| {
            (ErrorCode::COORDINATOR_NOT_AVAILABLE, format!("the {topic} partition of {key} has no live leader"))
        })
    };
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        for key in req.coordinator_keys {
            let mut c = Coordinator { node_id: -1, port: -1, ..Default::default() };
            match find(&key) {
                Ok(node) => {
                    c.node_id = node.node_id;
                    c.host = node.host;
                    c.port = node.port;
                }
                Err((code, message)) => {
                    crate::telemetry::error_code(ApiKey::FindCoordinator, code);
                    c.error_code = code.code();
                    c.error_message = Some(message);
                }
            }
            c.key = key;
            resp.coordinators.push(c);
        }
    } else {
        match find(&req.key) {
            Ok(node) => {
                resp.node_id = node.node_id;
                resp.host = node.host;
                resp.port = node.port;
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

/// The live leader of `key`'s partition of the internal topic, on the client's listener
/// (Kafka's `KafkaApis.getCoordinator`). The partition is the one the coordinators use
/// (`partition_for` over the configured partition count).
fn coordinator(broker: &Broker, key_type: i8, key: &str) -> Option<Endpoint> {
    let (topic, partitions) = match key_type {
        KEY_TYPE_GROUP => (OFFSETS_TOPIC, broker.settings.offsets_topic_num_partitions),
        _ => (TRANSACTION_STATE_TOPIC_NAME, broker.settings.config.transaction_state_log_num_partitions),
    };
    let cache = MetadataCache::for_client(broker);
    let topic = cache.image().topic(topic)?;
    let partition = topic.partitions.get(usize::try_from(partition_for(key, partitions.max(1))).ok()?)?;
    cache.alive_broker(cache.leader(partition).ok()?.node_id)
}
