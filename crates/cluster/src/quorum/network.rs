//! openraft's RPCs over a transport the server provides.
//!
//! [`Transport`] sends one [`RaftRpc`] to a member and returns its [`RaftRpcReply`]; the
//! server carries them in Kafka framing under Osprey-private API keys (DESIGN.md, "The
//! controller quorum"), encoded with [`encode_rpc`] / [`decode_rpc`] (JSON: openraft's
//! messages are serde types, and Kafka's own Raft messages encode another protocol).
//! On the receiving side, `Quorum::handle_rpc` answers a decoded RPC.

use super::types::{ControllerEndpoint, QuorumTypes, ReplicaKey};
use openraft::error::{Infallible, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// One of openraft's RPCs, from a leader or candidate to another member.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RaftRpc {
    Vote(VoteRequest<ReplicaKey>),
    AppendEntries(AppendEntriesRequest<QuorumTypes>),
    InstallSnapshot(InstallSnapshotRequest<QuorumTypes>),
}

/// The answer to a [`RaftRpc`], of the same kind. `Err` is the receiving node's openraft
/// refusing it (it is shutting down, or a snapshot chunk came out of order).
#[derive(Debug, Serialize, Deserialize)]
pub enum RaftRpcReply {
    Vote(Result<VoteResponse<ReplicaKey>, RaftError<ReplicaKey>>),
    AppendEntries(Result<AppendEntriesResponse<ReplicaKey>, RaftError<ReplicaKey>>),
    InstallSnapshot(Result<InstallSnapshotResponse<ReplicaKey>, RaftError<ReplicaKey, InstallSnapshotError>>),
}

/// Why an RPC got no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The member cannot be reached (connection refused, no route): openraft backs off
    /// before trying it again.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The RPC or its reply was lost or timed out: openraft retries at once.
    #[error("network error: {0}")]
    Network(String),
}

/// Carries openraft's RPCs to other members. The server implements it over the
/// CONTROLLER listener; the simulation over an in-process network with faults.
pub trait Transport: Send + Sync + 'static {
    /// Sends `rpc` to `target` at `endpoint` and waits for its reply, at most `timeout`.
    fn send(
        &self,
        target: ReplicaKey,
        endpoint: &ControllerEndpoint,
        rpc: RaftRpc,
        timeout: Duration,
    ) -> impl Future<Output = Result<RaftRpcReply, TransportError>> + Send;
}

/// The largest snapshot a member accepts: an InstallSnapshot chunk ending beyond it is
/// refused when decoded, since the receiver buffers the snapshot in memory (the image of
/// 50,000 partitions is a few MiB of JSON).
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

/// Why bytes did not decode into an RPC or a reply.
#[derive(Debug, thiserror::Error)]
pub enum DecodeRpcError {
    #[error("quorum RPC of {len} bytes exceeds the {max}-byte bound")]
    TooLarge { len: usize, max: usize },
    #[error("malformed quorum RPC: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("snapshot chunk ends at byte {end}, beyond the {max}-byte bound")]
    SnapshotTooLarge { end: u64, max: u64 },
}

/// An RPC as bytes (JSON).
pub fn encode_rpc(rpc: &RaftRpc) -> Vec<u8> {
    // openraft's messages and ours have string keys and no non-finite floats: this
    // cannot fail.
    serde_json::to_vec(rpc).unwrap_or_default()
}

/// An RPC from bytes, refusing more than `max_bytes` (`socket.request.max.bytes`) before
/// parsing.
pub fn decode_rpc(bytes: &[u8], max_bytes: usize) -> Result<RaftRpc, DecodeRpcError> {
    check_len(bytes, max_bytes)?;
    let rpc = serde_json::from_slice(bytes)?;
    if let RaftRpc::InstallSnapshot(r) = &rpc {
        // The receiver writes the chunk at `offset` into a buffer: bound where it ends.
        let end = r.offset.saturating_add(r.data.len() as u64);
        if end > MAX_SNAPSHOT_BYTES {
            return Err(DecodeRpcError::SnapshotTooLarge { end, max: MAX_SNAPSHOT_BYTES });
        }
    }
    Ok(rpc)
}

/// A reply as bytes (JSON).
pub fn encode_reply(reply: &RaftRpcReply) -> Vec<u8> {
    serde_json::to_vec(reply).unwrap_or_default()
}

/// A reply from bytes, refusing more than `max_bytes` before parsing.
pub fn decode_reply(bytes: &[u8], max_bytes: usize) -> Result<RaftRpcReply, DecodeRpcError> {
    check_len(bytes, max_bytes)?;
    Ok(serde_json::from_slice(bytes)?)
}

fn check_len(bytes: &[u8], max: usize) -> Result<(), DecodeRpcError> {
    if bytes.len() > max {
        return Err(DecodeRpcError::TooLarge { len: bytes.len(), max });
    }
    Ok(())
}

/// openraft's network factory over a [`Transport`].
#[derive(Debug)]
pub struct QuorumNetworkFactory<T> {
    transport: Arc<T>,
}

impl<T> QuorumNetworkFactory<T> {
    pub fn new(transport: Arc<T>) -> QuorumNetworkFactory<T> {
        QuorumNetworkFactory { transport }
    }
}

/// openraft's connection to one member over a [`Transport`].
#[derive(Debug)]
pub struct QuorumNetwork<T> {
    target: ReplicaKey,
    endpoint: ControllerEndpoint,
    transport: Arc<T>,
}

impl<T: Transport> RaftNetworkFactory<QuorumTypes> for QuorumNetworkFactory<T> {
    type Network = QuorumNetwork<T>;

    async fn new_client(&mut self, target: ReplicaKey, node: &ControllerEndpoint) -> QuorumNetwork<T> {
        QuorumNetwork { target, endpoint: node.clone(), transport: self.transport.clone() }
    }
}

type RpcResult<R, E> = Result<R, RPCError<ReplicaKey, ControllerEndpoint, RaftError<ReplicaKey, E>>>;

impl<T: Transport> QuorumNetwork<T> {
    async fn call(
        &self,
        rpc: RaftRpc,
        option: &RPCOption,
    ) -> Result<RaftRpcReply, RPCError<ReplicaKey, ControllerEndpoint, RaftError<ReplicaKey, Infallible>>> {
        self.transport.send(self.target, &self.endpoint, rpc, option.hard_ttl()).await.map_err(|e| match e {
            TransportError::Unreachable(_) => RPCError::Unreachable(Unreachable::new(&e)),
            TransportError::Network(_) => RPCError::Network(NetworkError::new(&e)),
        })
    }

    fn remote<E: std::error::Error>(
        &self,
        e: RaftError<ReplicaKey, E>,
    ) -> RPCError<ReplicaKey, ControllerEndpoint, RaftError<ReplicaKey, E>> {
        RPCError::RemoteError(RemoteError::new_with_node(self.target, self.endpoint.clone(), e))
    }
}

/// A reply of another kind than the RPC: the peer is broken, treat it as a lost reply.
fn mismatched<E: std::error::Error>() -> RPCError<ReplicaKey, ControllerEndpoint, RaftError<ReplicaKey, E>> {
    RPCError::Network(NetworkError::new(&TransportError::Network("reply of another kind than the RPC".into())))
}

/// Re-types a transport error (which never carries a remote error) for another RPC.
fn retype<E: std::error::Error>(
    e: RPCError<ReplicaKey, ControllerEndpoint, RaftError<ReplicaKey, Infallible>>,
) -> RPCError<ReplicaKey, ControllerEndpoint, RaftError<ReplicaKey, E>> {
    match e {
        RPCError::Unreachable(u) => RPCError::Unreachable(u),
        RPCError::Network(n) => RPCError::Network(n),
        RPCError::Timeout(t) => RPCError::Timeout(t),
        RPCError::PayloadTooLarge(p) => RPCError::PayloadTooLarge(p),
        RPCError::RemoteError(r) => RPCError::Network(NetworkError::new(&r)),
    }
}

impl<T: Transport> RaftNetwork<QuorumTypes> for QuorumNetwork<T> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<QuorumTypes>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<ReplicaKey>, Infallible> {
        match self.call(RaftRpc::AppendEntries(rpc), &option).await? {
            RaftRpcReply::AppendEntries(Ok(r)) => Ok(r),
            RaftRpcReply::AppendEntries(Err(e)) => Err(self.remote(e)),
            _ => Err(mismatched()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<QuorumTypes>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<ReplicaKey>, InstallSnapshotError> {
        match self.call(RaftRpc::InstallSnapshot(rpc), &option).await.map_err(retype)? {
            RaftRpcReply::InstallSnapshot(Ok(r)) => Ok(r),
            RaftRpcReply::InstallSnapshot(Err(e)) => Err(self.remote(e)),
            _ => Err(mismatched()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<ReplicaKey>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<ReplicaKey>, Infallible> {
        match self.call(RaftRpc::Vote(rpc), &option).await? {
            RaftRpcReply::Vote(Ok(r)) => Ok(r),
            RaftRpcReply::Vote(Err(e)) => Err(self.remote(e)),
            _ => Err(mismatched()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId, Vote};

    #[test]
    fn rpcs_round_trip_as_json_and_oversized_ones_are_refused_before_parsing() {
        let key = ReplicaKey::new(2, [7; 16]);
        let rpc =
            RaftRpc::Vote(VoteRequest::new(Vote::new(3, key), Some(LogId::new(CommittedLeaderId::new(2, key), 9))));
        let bytes = encode_rpc(&rpc);
        match decode_rpc(&bytes, bytes.len()).unwrap() {
            RaftRpc::Vote(v) => assert_eq!((v.vote, v.last_log_id.map(|l| l.index)), (Vote::new(3, key), Some(9))),
            other => panic!("decoded as {other:?}"),
        }
        assert!(matches!(decode_rpc(&bytes, bytes.len() - 1), Err(DecodeRpcError::TooLarge { .. })));
        assert!(matches!(decode_rpc(b"{\"Vote\":", 100), Err(DecodeRpcError::Malformed(_))));
        let chunk = format!(
            r#"{{"InstallSnapshot":{{"vote":{v},"meta":{{"last_log_id":null,"last_membership":{{"log_id":null,"membership":{{"configs":[],"nodes":{{}}}}}},"snapshot_id":"s"}},"offset":{off},"data":[1,2],"done":false}}}}"#,
            v = serde_json::to_string(&Vote::new(3, key)).unwrap(),
            off = MAX_SNAPSHOT_BYTES - 1,
        );
        assert!(matches!(
            decode_rpc(chunk.as_bytes(), 1 << 20),
            Err(DecodeRpcError::SnapshotTooLarge { end, .. }) if end == MAX_SNAPSHOT_BYTES + 1
        ));
        let reply = RaftRpcReply::Vote(Ok(VoteResponse::new(Vote::new(3, key), None, true)));
        let bytes = encode_reply(&reply);
        assert!(matches!(decode_reply(&bytes, 1 << 20).unwrap(), RaftRpcReply::Vote(Ok(r)) if r.vote_granted));
    }
}
