//! CreatePartitions: grow a topic; the new partitions' logs open before the answer, on a
//! blocking thread, so that other requests go on meanwhile.

use crate::broker::Broker;
use crate::dispatch::Reply;
use osprey_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use osprey_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::collections::HashSet;
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: CreatePartitionsRequest) -> Reply {
    let broker = broker.clone();
    Reply::Ordered(Box::pin(async move {
        tokio::task::spawn_blocking(move || create(&broker, req)).await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "CreatePartitions failed");
            ResponseBody::CreatePartitions(CreatePartitionsResponse::default())
        })
    }))
}

fn create(broker: &Arc<Broker>, req: CreatePartitionsRequest) -> ResponseBody {
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
        } else {
            broker.create_partitions(&t.name, t.count, req.validate_only).map_err(|e| (e.code, e.message))
        };
        let mut result = CreatePartitionsTopicResult { name: t.name, ..Default::default() };
        if let Err((code, message)) = outcome {
            crate::telemetry::error_code(ApiKey::CreatePartitions, code);
            result.error_code = code.code();
            result.error_message = Some(message);
        }
        resp.results.push(result);
    }
    ResponseBody::CreatePartitions(resp)
}
