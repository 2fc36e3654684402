//! The configuration of a controller node of a 3-voter test quorum on loopback, shared by
//! the test binaries that start real `ControllerNode`s.
#![allow(dead_code)]

use osprey_cluster::quorum::ControllerEndpoint;
use osprey_server::controller_node::listener::ListenerLimits;
use osprey_server::controller_node::ControllerNodeConfig;
use std::path::PathBuf;

/// Node `node_id` of voters 1-3 listening on `ports[0..3]`, its metadata in `dir`, with
/// short election and request timeouts so tests move fast.
pub fn node_config(node_id: i32, ports: &[u16], dir: PathBuf) -> ControllerNodeConfig {
    ControllerNodeConfig {
        node_id,
        voters: (1..=3).map(|n| (n, ControllerEndpoint::new("127.0.0.1", ports[n as usize - 1]))).collect(),
        listener_name: "CONTROLLER".into(),
        metadata_log_dir: dir,
        election_timeout_ms: 500,
        fetch_timeout_ms: 1_000,
        request_timeout_ms: 5_000,
        max_record_bytes_between_snapshots: 20 * 1024 * 1024,
        limits: ListenerLimits {
            socket_request_max_bytes: 100 * 1024 * 1024,
            max_connections: 64,
            max_in_flight_per_connection: 16,
            connections_max_idle_ms: 600_000,
        },
        tls: None,
        authorization: None,
    }
}
