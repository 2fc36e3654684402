//! FindCoordinator: the coordinator of a group (transactional id) is the leader of its
//! `__consumer_offsets` (`__transaction_state`) partition, as Kafka's; the topic is
//! created on first use, as Kafka does. A single node creates it before answering, from
//! the blocking pool (`creates_topic`): its controller is in-process. A broker of a
//! cluster starts the creation in the background and answers COORDINATOR_NOT_AVAILABLE
//! at once, as Kafka's brokers do: the creation is a request to the controller quorum,
//! which waits `request.timeout.ms` when no controller answers (no majority), and a
//! connection's answers go out in order, so a consumer's fetches on the same connection
//! would wait behind it; so does one whose partition led here has no open log yet. A
//! partition without a live leader answers COORDINATOR_NOT_AVAILABLE, and so does a broker
//! that would name itself without holding its lease with the controller
//! (`Broker::holds_lease`): cut off, it cannot know that its leadership moved, and
//! clients would keep coming back to it (Kafka's broker names itself from its metadata).

use crate::broker::{Broker, InternalTopicEnsure};
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

/// Whether answering `req` waits for `__consumer_offsets` or `__transaction_state` to be
/// created (a controller write, run on the blocking pool): on a single node only.
pub fn creates_topic(broker: &Broker, req: &FindCoordinatorRequest, version: i16) -> bool {
    let Some((topic, _)) = internal_topic(key_type_of(req, version)) else { return false };
    broker.cluster_link().is_none() && broker.image().topic(topic).is_none()
}

fn key_type_of(req: &FindCoordinatorRequest, version: i16) -> i8 {
    if version >= 1 {
        req.key_type
    } else {
        KEY_TYPE_GROUP
    }
}

/// The internal topic whose partition leaders coordinate `key_type`, and what makes it ready.
fn internal_topic(key_type: i8) -> Option<(&'static str, InternalTopicEnsure)> {
    match key_type {
        KEY_TYPE_GROUP => Some((OFFSETS_TOPIC, ensure_offsets_topic)),
        KEY_TYPE_TRANSACTION => Some((TRANSACTION_STATE_TOPIC_NAME, ensure_state_topic)),
        _ => None,
    }
}

/// The internal topic made ready, or started in the background in a cluster (module doc).
fn ensure(broker: &Arc<Broker>, key_type: i8) -> Result<(), ErrorCode> {
    match internal_topic(key_type) {
        // Also while a partition led here is not open yet (its log failed to open, as on a
        // full disk): opening it is disk I/O under the internal topics' lock, which a
        // creation's controller round trip may hold, never for an async worker.
        Some((name, ensure)) if broker.cluster_link().is_some() && !broker.internal_topic_ready(name) => {
            broker.create_internal_topic_in_background(name, ensure);
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        }
        Some((_, ensure)) => ensure(broker).map(drop),
        None => Ok(()),
    }
}

/// The coordinators at their endpoints on `listener`, the client's.
pub fn handle(broker: &Arc<Broker>, req: FindCoordinatorRequest, version: i16, listener: &str) -> ResponseBody {
    let key_type = key_type_of(&req, version);
    let ensured = ensure(broker, key_type);
    let find = |key: &str| -> Result<Endpoint, (ErrorCode, String)> {
        let topic = match key_type {
            KEY_TYPE_GROUP => OFFSETS_TOPIC,
            KEY_TYPE_TRANSACTION => TRANSACTION_STATE_TOPIC_NAME,
            other => return Err((ErrorCode::INVALID_REQUEST, format!("unknown coordinator key type {other}"))),
        };
        ensured.map_err(|code| (code, format!("the {topic} topic is not available")))?;
        let node = coordinator(broker, listener, key_type, key).ok_or_else(|| {
            (ErrorCode::COORDINATOR_NOT_AVAILABLE, format!("the {topic} partition of {key} has no live leader"))
        })?;
        if node.node_id == broker.settings.node_id && !broker.holds_lease() {
            // Cut off from the controller, this broker cannot know that its leadership
            // moved: naming itself would send the client back to a coordinator that may
            // have been replaced. The client asks again, perhaps another broker.
            metrics::counter!("osprey_coordinator_lookups_refused_total").increment(1);
            return Err((
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                "this broker holds no lease with the controller (cut off from it, or shutting down); ask another broker"
                    .to_string(),
            ));
        }
        Ok(node)
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
fn coordinator(broker: &Broker, listener: &str, key_type: i8, key: &str) -> Option<Endpoint> {
    let (topic, partitions) = match key_type {
        KEY_TYPE_GROUP => (OFFSETS_TOPIC, broker.settings.offsets_topic_num_partitions),
        _ => (TRANSACTION_STATE_TOPIC_NAME, broker.settings.config.transaction_state_log_num_partitions),
    };
    let cache = MetadataCache::for_listener(broker, listener);
    let topic = cache.image().topic(topic)?;
    let partition = topic.partitions.get(usize::try_from(partition_for(key, partitions.max(1))).ok()?)?;
    cache.alive_broker(cache.leader(partition).ok()?.node_id)
}
