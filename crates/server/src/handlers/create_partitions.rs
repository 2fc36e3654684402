//! CreatePartitions: grow a topic; the new partitions' logs open before the answer, on a
//! blocking thread, so that other requests go on meanwhile.

use crate::broker::Broker;
use crate::dispatch::{Reply, Requester};
use crate::quota::mutations;
use osprey_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use osprey_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use osprey_protocol::RequestBody;
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::collections::HashSet;
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: CreatePartitionsRequest, version: i16, requester: Requester) -> Reply {
    let broker = broker.clone();
    Reply::Ordered(Box::pin(async move {
        tokio::task::spawn_blocking(move || create(&broker, req, version, &requester)).await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "CreatePartitions failed");
            ResponseBody::CreatePartitions(CreatePartitionsResponse::default())
        })
    }))
}

/// Grows each topic within the requester's controller mutation quota; a cluster's
/// brokers forward the request to the active controller, which decides it all.
fn create(broker: &Arc<Broker>, req: CreatePartitionsRequest, version: i16, requester: &Requester) -> ResponseBody {
    if let Some(link) = broker.cluster_link() {
        let wait = !req.validate_only;
        return link.forward_from(requester, RequestBody::CreatePartitions(req), version, wait);
    }
    let mut quota = mutations::request(requester, ApiKey::CreatePartitions, version);
    let mut resp = CreatePartitionsResponse::default();
    let mut seen = HashSet::new();
    for t in req.topics {
        let outcome = if !seen.insert(t.name.clone()) {
            Err((ErrorCode::INVALID_REQUEST, format!("Duplicate topic {} in the request", t.name)))
        } else if t
            .assignments
            .as_ref()
            .is_some_and(|a| a.iter().any(|r| r.broker_ids.iter().any(|b| *b != broker.settings.node_id)))
        {
            Err((
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "Replica assignments name a broker that is not registered".to_string(),
            ))
        } else if req.validate_only {
            broker.create_partitions(&t.name, t.count, true).map_err(|e| (e.code, e.message))
        } else {
            let before = broker.image().topic(&t.name).map_or(0, |topic| topic.partitions.len());
            mutations::admit(broker, &mut quota)
                .and_then(|()| broker.create_partitions(&t.name, t.count, false))
                .map(|()| {
                    mutations::draw(broker, &mut quota, usize::try_from(t.count).unwrap_or(0).saturating_sub(before))
                })
                .map_err(|e| (e.code, e.message))
        };
        let mut result = CreatePartitionsTopicResult { name: t.name, ..Default::default() };
        if let Err((code, message)) = outcome {
            crate::telemetry::error_code(ApiKey::CreatePartitions, code);
            result.error_code = code.code();
            result.error_message = Some(message);
        }
        resp.results.push(result);
    }
    resp.throttle_time_ms = i32::try_from(quota.throttle_ms).unwrap_or(i32::MAX);
    ResponseBody::CreatePartitions(resp)
}
