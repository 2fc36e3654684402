//! DeleteTopics: by name (v1-5) or by name or id (v6), each topic within the
//! requester's controller mutation quota. A cluster's brokers forward the request to the
//! active controller, which decides it all.

use crate::broker::Broker;
use crate::dispatch::Requester;
use crate::quota::mutations;
use osprey_protocol::messages::delete_topics_response::DeletableTopicResult;
use osprey_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use osprey_protocol::RequestBody;
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody, Uuid};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: DeleteTopicsRequest, version: i16, requester: &Requester) -> ResponseBody {
    if let Some(link) = broker.cluster_link() {
        return link.forward_from(requester, RequestBody::DeleteTopics(req), version, true);
    }
    let mut quota = mutations::request(requester, ApiKey::DeleteTopics, version);
    let targets: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics.into_iter().map(|t| (t.name, t.topic_id)).collect()
    } else {
        req.topic_names.into_iter().map(|n| (Some(n), Uuid::ZERO)).collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for (name, id) in targets {
        let image = broker.image();
        let resolved = match (&name, id.is_zero()) {
            (_, false) => image.topic_by_id(id).map(|t| t.name.clone()).ok_or(ErrorCode::UNKNOWN_TOPIC_ID),
            (Some(n), true) => image.topic(n).map(|t| t.name.clone()).ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            (None, true) => Err(ErrorCode::INVALID_REQUEST),
        };
        let mut result = DeletableTopicResult { name: name.clone(), topic_id: id, ..Default::default() };
        let outcome = resolved.and_then(|n| {
            if !broker.settings.delete_topic_enable {
                return Err(ErrorCode::TOPIC_DELETION_DISABLED);
            }
            result.name = Some(n.clone());
            mutations::admit(broker, &mut quota).map_err(|e| e.code)?;
            let partitions = image.topic(&n).map_or(0, |t| t.partitions.len());
            let deleted = broker.delete_topic(&n).map_err(|e| e.code)?;
            mutations::draw(broker, &mut quota, partitions);
            Ok(deleted)
        });
        match outcome {
            Ok(deleted) => result.topic_id = deleted,
            Err(code) => {
                crate::telemetry::error_code(ApiKey::DeleteTopics, code);
                result.error_code = code.code();
            }
        }
        if version < 6 && result.name.is_none() {
            result.name = Some(String::new());
        }
        resp.responses.push(result);
    }
    resp.throttle_time_ms = i32::try_from(quota.throttle_ms).unwrap_or(i32::MAX);
    ResponseBody::DeleteTopics(resp)
}
