//! The quorum's [`Transport`] over the inter-broker client: each RPC goes to the
//! member's CONTROLLER listener under its private API key (`rpc.rs`), on the one
//! connection the node keeps to that member.

use super::progress::FollowerProgress;
use super::rpc;
use crate::interbroker::{ClientConfig, ClientError, NodeAddress, NodeClient, NodeClients};
use openraft::raft::AppendEntriesResponse;
use osprey_cluster::quorum::{
    decode_reply, encode_rpc, ControllerEndpoint, Hello, RaftRpc, RaftRpcReply, ReplicaKey, Transport, TransportError,
};
use std::sync::Arc;
use std::time::Duration;

/// Sends openraft's RPCs (and the bootstrap Hello) to other controllers.
#[derive(Debug, Clone)]
pub struct ListenerTransport {
    clients: Arc<NodeClients>,
    /// `socket.request.max.bytes`: the largest reply decoded.
    max_rpc_bytes: usize,
    progress: Arc<FollowerProgress>,
}

impl ListenerTransport {
    /// A transport whose connections use `config` (client id, timeouts, bounds), and
    /// that records each follower's successful AppendEntries in `progress`.
    pub fn new(config: ClientConfig, max_rpc_bytes: usize, progress: Arc<FollowerProgress>) -> ListenerTransport {
        ListenerTransport { clients: Arc::new(NodeClients::new(config)), max_rpc_bytes, progress }
    }

    fn client(&self, node_id: i32, endpoint: &ControllerEndpoint) -> NodeClient {
        self.clients.client(node_id, NodeAddress::new(endpoint.host.clone(), endpoint.port))
    }

    /// Sends this node's `Hello` to the voter `node_id` at `endpoint` and returns its
    /// own, within `timeout`.
    pub async fn hello(
        &self,
        node_id: i32,
        endpoint: &ControllerEndpoint,
        me: &Hello,
        timeout: Duration,
    ) -> Result<Hello, String> {
        let client = self.client(node_id, endpoint);
        let sent = tokio::time::timeout(timeout, client.send_raw(rpc::HELLO, rpc::VERSION, rpc::encode_hello(me)));
        match sent.await {
            Err(_) => Err(format!("no answer within {timeout:?}")),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(bytes)) => rpc::decode_hello(&bytes, self.max_rpc_bytes),
        }
    }
}

impl Transport for ListenerTransport {
    async fn send(
        &self,
        target: ReplicaKey,
        endpoint: &ControllerEndpoint,
        rpc: RaftRpc,
        timeout: Duration,
    ) -> Result<RaftRpcReply, TransportError> {
        let api_key = rpc::api_key_of(&rpc);
        // Where the follower's log ends if it accepts: what it has then "fetched".
        let end_if_accepted = match &rpc {
            RaftRpc::AppendEntries(r) => {
                Some(r.entries.last().map(|e| e.log_id.index + 1).or(r.prev_log_id.map(|l| l.index + 1)).unwrap_or(0))
            }
            _ => None,
        };
        let client = self.client(target.node_id, endpoint);
        let body = rpc::address(target, &encode_rpc(&rpc));
        let bytes = match tokio::time::timeout(timeout, client.send_raw(api_key, rpc::VERSION, body)).await {
            Err(_) => return Err(TransportError::Network(format!("{target}: no reply within {timeout:?}"))),
            Ok(Err(e)) => return Err(transport_error(e)),
            Ok(Ok(bytes)) => bytes,
        };
        if bytes.is_empty() {
            // The process there is another replica of the node (it lost its disk): the
            // one meant is gone.
            return Err(TransportError::Unreachable(format!("{target} is no longer at {endpoint}")));
        }
        let reply = decode_reply(&bytes, self.max_rpc_bytes).map_err(|e| TransportError::Network(e.to_string()))?;
        if let (Some(end), RaftRpcReply::AppendEntries(Ok(AppendEntriesResponse::Success))) = (end_if_accepted, &reply)
        {
            self.progress.fetched(target, end);
        }
        Ok(reply)
    }
}

/// A connection that could not be made says the member is down (openraft backs off);
/// anything else is a lost RPC (openraft retries).
fn transport_error(e: ClientError) -> TransportError {
    match e {
        ClientError::Connect { .. } => TransportError::Unreachable(e.to_string()),
        other => TransportError::Network(other.to_string()),
    }
}
