//! The Osprey-private API keys that carry the quorum's own messages over the CONTROLLER
//! listener, in Kafka framing (crates/cluster/DESIGN.md, "Network").
//!
//! One listener, one framing, one set of bounds: a controller reads openraft's RPCs with
//! the same frame reader, `socket.request.max.bytes` and connection limit as Kafka's
//! requests. The keys sit above Kafka's range (Kafka's keys are below 100), so no Kafka
//! client sends them and no Kafka broker mistakes them for its own: a Kafka node that
//! receives one closes the connection, as it does for any unknown key. They are never
//! advertised in ApiVersions.
//!
//! Each key has one version (0). A request is `int32 size | request header v2 | body`
//! and its response `int32 size | response header v1 | body` (the flexible headers, as
//! `interbroker::NodeClient::send_raw` sends and reads them); the body is JSON: openraft's
//! serde types for the RPCs (`osprey_cluster::quorum::encode_rpc`), the bootstrap
//! [`Hello`] for [`HELLO`] (request: the sender's; response: the receiver's).
//!
//! [`METADATA_FETCH`] is the exception to addressing: brokers are not quorum members and
//! any member serves what it has applied, so its body is the JSON
//! `MetadataFetchRequest` alone ([`encode_fetch`], [`decode_fetch`]), bounded by
//! `socket.request.max.bytes` before parsing like every other body.
//!
//! An RPC's body starts with the replica key it is meant for (`int32 node.id`, 16 bytes
//! of directory id), as KIP-853 puts the destination's replica key in Kafka's Raft
//! requests: a node that lost its disk and came back under a new directory id must not
//! answer (above all, vote) as the replica it was. It answers such an RPC with an empty
//! body, which the sender takes as "that replica is unreachable".

use bytes::{BufMut, Bytes, BytesMut};
use osprey_cluster::quorum::{
    Hello, MetadataFetchContent, MetadataFetchRequest, MetadataFetchResponse, RaftRpc, ReplicaKey,
};

/// The bootstrap exchange between configured voters (DESIGN.md, "Bootstrap without a
/// format step").
pub const HELLO: i16 = 10_000;
/// openraft's RequestVote.
pub const VOTE: i16 = 10_001;
/// openraft's AppendEntries (heartbeats included).
pub const APPEND_ENTRIES: i16 = 10_002;
/// openraft's InstallSnapshot (one chunk per request).
pub const INSTALL_SNAPSHOT: i16 = 10_003;
/// A broker's fetch of the committed metadata log (`osprey_cluster::quorum::fetch`):
/// JSON `MetadataFetchRequest` in, `MetadataFetchResponse` out; not addressed to a
/// replica key, since brokers are not quorum members.
pub const METADATA_FETCH: i16 = 10_004;
/// The one version of every private key.
pub const VERSION: i16 = 0;

/// Whether `api_key` is one of the private keys.
pub fn is_private(api_key: i16) -> bool {
    (HELLO..=METADATA_FETCH).contains(&api_key)
}

/// The key an RPC travels under.
pub fn api_key_of(rpc: &RaftRpc) -> i16 {
    match rpc {
        RaftRpc::Vote(_) => VOTE,
        RaftRpc::AppendEntries(_) => APPEND_ENTRIES,
        RaftRpc::InstallSnapshot(_) => INSTALL_SNAPSHOT,
    }
}

/// The length of the replica key in front of an RPC's body.
const ADDRESS_BYTES: usize = 20;

/// An RPC's body: the replica it is for, then the encoded RPC.
pub fn address(target: ReplicaKey, rpc: &[u8]) -> Bytes {
    let mut body = BytesMut::with_capacity(ADDRESS_BYTES + rpc.len());
    body.put_i32(target.node_id);
    body.put_slice(&target.directory_id);
    body.put_slice(rpc);
    body.freeze()
}

/// Splits an RPC's body into the replica it is for and the encoded RPC.
pub fn addressed(body: &[u8]) -> Option<(ReplicaKey, &[u8])> {
    if body.len() < ADDRESS_BYTES {
        return None;
    }
    let node_id = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    let mut directory_id = [0u8; 16];
    directory_id.copy_from_slice(&body[4..ADDRESS_BYTES]);
    Some((ReplicaKey::new(node_id, directory_id), &body[ADDRESS_BYTES..]))
}

/// A [`Hello`] as a request or response body.
pub fn encode_hello(hello: &Hello) -> Bytes {
    // A Hello holds strings, integers and a replica key (a string): this cannot fail.
    Bytes::from(serde_json::to_vec(hello).unwrap_or_default())
}

/// A [`Hello`] from a body of at most `max_bytes`, checked before parsing.
pub fn decode_hello(bytes: &[u8], max_bytes: usize) -> Result<Hello, String> {
    check_size(bytes, max_bytes, "Hello")?;
    serde_json::from_slice(bytes).map_err(|e| format!("malformed Hello: {e}"))
}

/// A broker's [`METADATA_FETCH`] request body.
pub fn encode_fetch(request: &MetadataFetchRequest) -> Bytes {
    // Integers only: this cannot fail.
    Bytes::from(serde_json::to_vec(request).unwrap_or_default())
}

/// A [`METADATA_FETCH`] request from a body of at most `max_bytes`, checked before
/// parsing.
pub fn decode_fetch(bytes: &[u8], max_bytes: usize) -> Result<MetadataFetchRequest, String> {
    check_size(bytes, max_bytes, "MetadataFetchRequest")?;
    serde_json::from_slice(bytes).map_err(|e| format!("malformed MetadataFetchRequest: {e}"))
}

/// A controller's [`METADATA_FETCH`] answer body.
pub fn encode_fetch_response(response: &MetadataFetchResponse) -> Bytes {
    match serde_json::to_vec(response) {
        Ok(body) => Bytes::from(body),
        Err(e) => {
            // The image and records are serialized into snapshots and the log the same
            // way, so this is a bug; the broker is told to ask again rather than hang.
            tracing::error!(error = %e, "metadata fetch answer does not encode");
            let not_ready = MetadataFetchResponse {
                leader: response.leader.clone(),
                applied: response.applied,
                content: MetadataFetchContent::NotReady { why: format!("answer does not encode: {e}") },
            };
            Bytes::from(serde_json::to_vec(&not_ready).unwrap_or_default())
        }
    }
}

/// A [`METADATA_FETCH`] answer from a body of at most `max_bytes` (the broker's bound on
/// a response), checked before parsing.
pub fn decode_fetch_response(bytes: &[u8], max_bytes: usize) -> Result<MetadataFetchResponse, String> {
    check_size(bytes, max_bytes, "MetadataFetchResponse")?;
    serde_json::from_slice(bytes).map_err(|e| format!("malformed MetadataFetchResponse: {e}"))
}

/// Refuses a body larger than `max_bytes`, before it is parsed.
fn check_size(bytes: &[u8], max_bytes: usize, what: &str) -> Result<(), String> {
    if bytes.len() > max_bytes {
        return Err(format!("{what} of {} bytes exceeds the {max_bytes}-byte bound", bytes.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_cluster::quorum::ControllerEndpoint;

    #[test]
    fn an_rpc_names_the_replica_it_is_for() {
        let key = ReplicaKey::new(-2, [7; 16]);
        let body = address(key, b"{}");
        assert_eq!(addressed(&body), Some((key, &b"{}"[..])));
        assert_eq!(addressed(&body[..19]), None, "a body shorter than the key is refused");
    }

    #[test]
    fn private_keys_are_above_kafkas_and_unknown_to_the_codec() {
        for key in HELLO..=METADATA_FETCH {
            assert!(is_private(key));
            assert!(osprey_protocol::ApiKey::from_i16(key).is_none(), "{key} is a Kafka key");
        }
        assert!(!is_private(55) && !is_private(METADATA_FETCH + 1));
    }

    #[test]
    fn hello_round_trips_and_oversized_or_malformed_ones_are_refused() {
        let hello = Hello {
            replica: ReplicaKey::new(3, [9; 16]),
            endpoint: ControllerEndpoint::new("127.0.0.1", 9093),
            cluster_id: Some("abc".into()),
            has_quorum_state: true,
        };
        let bytes = encode_hello(&hello);
        assert_eq!(decode_hello(&bytes, bytes.len()).unwrap(), hello);
        assert!(decode_hello(&bytes, bytes.len() - 1).is_err());
        assert!(decode_hello(b"{\"replica\":", 100).is_err());
    }

    #[test]
    fn fetch_messages_round_trip_and_oversized_or_malformed_ones_are_refused() {
        use osprey_cluster::quorum::LeaderHint;
        let request = MetadataFetchRequest { broker_id: 4, next_offset: 17, max_wait_ms: 500, max_records: 100 };
        let bytes = encode_fetch(&request);
        assert_eq!(decode_fetch(&bytes, bytes.len()).unwrap(), request);
        assert!(decode_fetch(&bytes, bytes.len() - 1).unwrap_err().contains("bound"));
        assert!(decode_fetch(b"{\"broker_id\":-1}", 100).unwrap_err().contains("malformed"));

        let record = osprey_cluster::MetadataRecord::ClusterId { id: "c".into() };
        let response = MetadataFetchResponse {
            leader: Some(LeaderHint { node_id: 2, endpoint: ControllerEndpoint::new("127.0.0.1", 9093) }),
            applied: 1,
            content: MetadataFetchContent::Records { first_offset: 0, records: vec![record.clone()] },
        };
        let bytes = encode_fetch_response(&response);
        let back = decode_fetch_response(&bytes, bytes.len()).unwrap();
        assert_eq!(back.leader, response.leader);
        assert!(
            matches!(back.content, MetadataFetchContent::Records { first_offset: 0, records } if records == vec![record])
        );
        assert!(decode_fetch_response(&bytes, 10).is_err());
    }
}
