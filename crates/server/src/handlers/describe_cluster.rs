//! DescribeCluster: this node is the whole cluster and its controller.

use crate::authorized_operations::{self, if_requested};
use crate::broker::Broker;
use osprey_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use osprey_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::sync::Arc;

/// Kafka's endpoint types: 1 = brokers, 2 = controllers.
const ENDPOINT_BROKERS: i8 = 1;

pub fn handle(broker: &Arc<Broker>, req: DescribeClusterRequest, version: i16) -> ResponseBody {
    let s = &broker.settings;
    let mut resp = DescribeClusterResponse {
        endpoint_type: if version >= 1 { req.endpoint_type } else { ENDPOINT_BROKERS },
        cluster_id: broker.cluster_id.clone(),
        controller_id: s.node_id,
        cluster_authorized_operations: if_requested(
            req.include_cluster_authorized_operations,
            authorized_operations::CLUSTER,
        ),
        brokers: vec![DescribeClusterBroker {
            broker_id: s.node_id,
            host: s.advertised_host.clone(),
            port: s.advertised_port,
            ..Default::default()
        }],
        ..Default::default()
    };
    if version >= 1 && req.endpoint_type != ENDPOINT_BROKERS && req.endpoint_type != 2 {
        resp.error_code = ErrorCode::UNSUPPORTED_ENDPOINT_TYPE.code();
        resp.error_message = Some(format!("Unknown endpoint type {}", req.endpoint_type));
        resp.brokers.clear();
    }
    ResponseBody::DescribeCluster(resp)
}
