//! FindCoordinator: the coordinator of a group (transactional id, share partition) is the
//! leader of its `__consumer_offsets` (`__transaction_state`, `__share_group_state`)
//! partition, as Kafka's; the topic is created on first use, as Kafka does. A single node
//! creates it before answering, from the blocking pool (`creates_topic`): its controller
//! is in-process. A broker of a cluster starts the creation in the background and answers COORDINATOR_NOT_AVAILABLE
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
use crate::share_states::{ensure_share_state_topic, SHARE_STATE_TOPIC};
use crate::transactions::ensure_state_topic;
use osprey_coordinator::group::partition_for;
use osprey_coordinator::share_state::ShareKey;
use osprey_coordinator::txn::TRANSACTION_STATE_TOPIC_NAME;
use osprey_protocol::messages::find_coordinator_response::Coordinator;
use osprey_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
/// A share partition's share coordinator (KIP-932): the key is `group:topic_id:partition`.
pub const KEY_TYPE_SHARE: i8 = 2;

/// The first FindCoordinator version that may ask for a share coordinator; older ones
/// are answered INVALID_REQUEST, as Kafka does.
pub const FIRST_SHARE_VERSION: i16 = 6;

/// Whether answering `req` waits for its internal topic to be created (a controller
/// write, run on the blocking pool): on a single node only.
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
        KEY_TYPE_SHARE => Some((SHARE_STATE_TOPIC, ensure_share_state_topic)),
        _ => None,
    }
}

/// What makes `name` ready when it is the internal topic of a coordinator: a Metadata
/// request naming it creates it as the coordinator would, as Kafka's
/// `AutoTopicCreationManager` does.
pub fn ensure_of_internal_topic(name: &str) -> Option<InternalTopicEnsure> {
    [KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE]
        .into_iter()
        .filter_map(internal_topic)
        .find_map(|(topic, ensure)| (topic == name).then_some(ensure))
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
    // Made ready on the first key that needs it: a request of invalid keys creates nothing.
    let mut ensured = None;
    let mut find = |key: &str| -> Result<Endpoint, (ErrorCode, String)> {
        let (topic, partition) = locate(broker, key_type, key, version)?;
        let ensured = *ensured.get_or_insert_with(|| ensure(broker, key_type));
        ensured.map_err(|code| (code, format!("the {topic} topic is not available")))?;
        let node = coordinator(broker, listener, topic, partition).ok_or_else(|| {
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

/// The internal topic and partition whose leader coordinates `key` (Kafka's
/// `KafkaApis.getCoordinator`): the partition the coordinators use, `partition_for` over
/// the configured partition count. INVALID_REQUEST for an unknown key type, a share key
/// before v6 or one that is not `group:topic_id:partition`.
fn locate(broker: &Broker, key_type: i8, key: &str, version: i16) -> Result<(&'static str, i32), (ErrorCode, String)> {
    let invalid = |message: String| (ErrorCode::INVALID_REQUEST, message);
    match key_type {
        KEY_TYPE_GROUP => Ok((OFFSETS_TOPIC, partition_for(key, broker.settings.offsets_topic_num_partitions.max(1)))),
        KEY_TYPE_TRANSACTION => {
            let partitions = broker.settings.config.transaction_state_log_num_partitions.max(1);
            Ok((TRANSACTION_STATE_TOPIC_NAME, partition_for(key, partitions)))
        }
        KEY_TYPE_SHARE if version < FIRST_SHARE_VERSION => {
            Err(invalid(format!("FindCoordinator v{version} cannot look up share coordinators (v6+ can)")))
        }
        KEY_TYPE_SHARE => {
            let key = parse_share_key(key).map_err(invalid)?;
            let partitions = broker.share_states.num_partitions();
            Ok((SHARE_STATE_TOPIC, osprey_coordinator::share_state::partition_for(&key, partitions)))
        }
        other => Err(invalid(format!("unknown coordinator key type {other}"))),
    }
}

/// A share coordinator key, `group:topic_id:partition`, as Kafka's
/// `SharePartitionKey.getInstance` reads it: split at `:` as Java's `String.split` does
/// (trailing empty pieces dropped), the group id trimmed and not empty, the topic id in
/// Kafka's base64 form, the partition a 32-bit integer.
pub fn parse_share_key(key: &str) -> Result<ShareKey, String> {
    if key.is_empty() {
        return Err("Share partition key cannot be empty".into());
    }
    let mut tokens: Vec<&str> = key.split(':').collect();
    while tokens.len() > 1 && tokens.last() == Some(&"") {
        tokens.pop();
    }
    let [group_id, topic_id, partition] = tokens[..] else {
        return Err(format!("Invalid key format: expected - groupId:topicId:partition, found - {key}"));
    };
    // Java's `String.trim`: every character up to the space.
    let group_id = group_id.trim_matches(|c: char| c <= ' ');
    if group_id.is_empty() {
        return Err("GroupId must be alphanumeric string".into());
    }
    // Java's URL-safe decoder also takes the padded form.
    let unpadded = if topic_id.len() == 24 { topic_id.strip_suffix("==") } else { Some(topic_id) };
    let topic_id = unpadded
        .and_then(osprey_cluster::meta_properties::parse_uuid)
        .ok_or_else(|| format!("Invalid topic ID: {topic_id}"))?;
    let partition = partition.parse().map_err(|_| format!("Invalid partition: {partition}"))?;
    Ok(ShareKey { group_id: group_id.to_string(), topic_id, partition })
}

/// The live leader of partition `partition` of the internal topic `topic`, on the
/// client's listener.
fn coordinator(broker: &Broker, listener: &str, topic: &str, partition: i32) -> Option<Endpoint> {
    let cache = MetadataCache::for_listener(broker, listener);
    let topic = cache.image().topic(topic)?;
    let partition = topic.partitions.get(usize::try_from(partition).ok()?)?;
    cache.alive_broker(cache.leader(partition).ok()?.node_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{answer, broker_in};
    use osprey_protocol::{ApiKey, RequestBody, Uuid};

    const TOPIC_ID: &str = "AQIDBAUGBwgJCgsMDQ4PEA";

    fn topic_id() -> Uuid {
        Uuid([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16])
    }

    #[test]
    fn share_keys_are_read_as_kafkas_share_partition_key() {
        let key = |group: &str, partition| ShareKey { group_id: group.into(), topic_id: topic_id(), partition };
        assert_eq!(parse_share_key(&format!("queue:{TOPIC_ID}:3")), Ok(key("queue", 3)));
        // Java's split drops trailing empty pieces and trim the group id; the padded
        // base64 form and a signed partition parse too.
        assert_eq!(parse_share_key(&format!(" queue :{TOPIC_ID}:3::")), Ok(key("queue", 3)));
        assert_eq!(parse_share_key(&format!("queue:{TOPIC_ID}==:+3")), Ok(key("queue", 3)));
        assert_eq!(key("queue", 3).coordinator_key(), format!("queue:{TOPIC_ID}:3"), "the form Kafka hashes");
        for bad in [
            String::new(),
            "queue".into(),
            format!("queue:{TOPIC_ID}"),
            format!("a:b:{TOPIC_ID}:3"),
            format!("  :{TOPIC_ID}:3"),
            "queue:not-a-topic-id:3".into(),
            format!("queue:{TOPIC_ID}:x"),
            format!("queue:{TOPIC_ID}:2147483648"),
        ] {
            assert!(parse_share_key(&bad).is_err(), "{bad:?}");
        }
    }

    async fn find(broker: &Arc<Broker>, version: i16, keys: &[String]) -> FindCoordinatorResponse {
        let req = if version >= 4 {
            FindCoordinatorRequest { key_type: KEY_TYPE_SHARE, coordinator_keys: keys.to_vec(), ..Default::default() }
        } else {
            FindCoordinatorRequest { key_type: KEY_TYPE_SHARE, key: keys[0].clone(), ..Default::default() }
        };
        match answer(broker, ApiKey::FindCoordinator, version, RequestBody::FindCoordinator(req)).await {
            ResponseBody::FindCoordinator(resp) => resp,
            other => panic!("{other:?}"),
        }
    }

    /// A share partition's coordinator is the leader of its `__share_group_state`
    /// partition, created on the first valid lookup; keys that are not
    /// `group:topic_id:partition`, and versions before 6, are INVALID_REQUEST.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn share_coordinators_are_found_from_v6_and_invalid_keys_refused() {
        let (broker, dir) = broker_in("find-share-coordinator");
        let invalid = ErrorCode::INVALID_REQUEST.code();
        let bad = find(&broker, 6, &["no-colons".into(), format!(":{TOPIC_ID}:0")]).await;
        let codes: Vec<_> = bad.coordinators.iter().map(|c| (c.error_code, c.node_id, c.port)).collect();
        assert_eq!(codes, [(invalid, -1, -1), (invalid, -1, -1)]);
        assert!(broker.image().topic(SHARE_STATE_TOPIC).is_none(), "invalid keys create nothing");
        let v5 = find(&broker, 5, &[format!("queue:{TOPIC_ID}:0")]).await;
        assert_eq!(v5.coordinators[0].error_code, invalid);
        let v3 = find(&broker, 3, &[format!("queue:{TOPIC_ID}:0")]).await;
        assert_eq!((v3.error_code, v3.node_id), (invalid, -1));
        assert!(broker.image().topic(SHARE_STATE_TOPIC).is_none());

        let found = find(&broker, 6, &[format!("queue:{TOPIC_ID}:0"), "bad".into()]).await;
        let c = &found.coordinators[0];
        assert_eq!((c.error_code, c.node_id, c.key.as_str()), (0, 1, format!("queue:{TOPIC_ID}:0").as_str()));
        assert_eq!(found.coordinators[1].error_code, invalid);
        let topic = broker.image().topic(SHARE_STATE_TOPIC).map(|t| t.partitions.len());
        assert_eq!(topic, Some(usize::try_from(broker.share_states.num_partitions()).unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
