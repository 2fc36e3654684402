//! DescribeCluster on a client listener: every live broker with its rack (the fenced ones
//! too when v2 asks, KIP-1073), and a live broker as the "controller", as Kafka in KRaft
//! mode: this one (`MetadataCache::controller_id_for_clients`; brokers forward what
//! clients send it). Controllers answer DescribeCluster themselves (`controller_node`).

use crate::authorized_operations::{self, if_requested};
use crate::broker::Broker;
use crate::metadata_cache::MetadataCache;
use osprey_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use osprey_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::sync::Arc;

/// Kafka's endpoint types: 1 = brokers, 2 = controllers.
const ENDPOINT_BROKERS: i8 = 1;

pub fn handle(broker: &Arc<Broker>, req: DescribeClusterRequest, version: i16, listener: &str) -> ResponseBody {
    let cache = MetadataCache::for_listener(broker, listener);
    let mut resp = DescribeClusterResponse {
        endpoint_type: if version >= 1 { req.endpoint_type } else { ENDPOINT_BROKERS },
        cluster_id: broker.cluster_id.clone(),
        controller_id: cache.controller_id_for_clients(),
        cluster_authorized_operations: if_requested(
            req.include_cluster_authorized_operations,
            authorized_operations::CLUSTER,
        ),
        brokers: cache
            .registered_brokers()
            .into_iter()
            // v2 (KIP-1073): fenced brokers too when asked, marked as such.
            .filter(|(_, fenced)| !fenced || (version >= 2 && req.include_fenced_brokers))
            .map(|(e, is_fenced)| DescribeClusterBroker {
                broker_id: e.node_id,
                host: e.host,
                port: e.port,
                rack: e.rack,
                is_fenced,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    if version >= 1 && req.endpoint_type != ENDPOINT_BROKERS && req.endpoint_type != 2 {
        resp.error_code = ErrorCode::UNSUPPORTED_ENDPOINT_TYPE.code();
        resp.error_message = Some(format!("Unknown endpoint type {}", req.endpoint_type));
        resp.brokers.clear();
    }
    ResponseBody::DescribeCluster(resp)
}
