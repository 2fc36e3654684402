//! From a request frame read on the CONTROLLER listener to its answer: the private keys
//! go to the quorum (`rpc.rs`), ApiVersions, DescribeQuorum and DescribeCluster are
//! answered here from the quorum's state, and every other Kafka API the active
//! controller serves goes to [`ControllerApis`]; an EnvelopeRequest (a broker forwarding
//! a client's request, KIP-590) is opened and its content goes there as from the client
//! it names. Anything else closes the connection, as Kafka does with a request it does
//! not serve.
//!
//! With an authorizer (`authorizer.class.name`), requests are authorized as Kafka's
//! controller authorizes them: the quorum's own RPCs, the brokers' APIs
//! (BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds) and
//! envelopes need CLUSTER_ACTION on the cluster; the admin APIs need what they need on a
//! broker (`crate::authorization`), checked for the connection's principal (from its
//! client certificate on an SSL listener, else User:ANONYMOUS). A broker's principal is
//! therefore a super user or has those ACLs, as Kafka's operators set it up. An
//! envelope's content was authorized by the broker that forwarded it.

use super::apis::{ControllerApis, ControllerReply};
use super::describe;
use super::rpc;
use super::NodeState;
use crate::access::{kind, op, Access};
use crate::authorization::{self, Gate};
use crate::envelope;
use bytes::{Bytes, BytesMut};
use osprey_cluster::quorum::{decode_rpc, encode_reply};
use osprey_protocol::frame::{split_request, FrameError, RequestHeader, ResponseHeader};
use osprey_protocol::messages::api_versions_response::ApiVersion;
use osprey_protocol::messages::ApiVersionsResponse;
use osprey_protocol::messages::EnvelopeRequest;
use osprey_protocol::wire::Message;
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

/// A response's header and body, encoded once ready (without the size prefix).
pub type Answer = Pin<Box<dyn Future<Output = Result<BytesMut, String>> + Send>>;

/// What the connection does with one frame.
pub enum Handled {
    /// Send this answer, in request order.
    Answer(Answer),
    /// A request this listener does not serve, or malformed: close the connection
    /// (after the earlier answers).
    Close(String),
}

/// The Kafka APIs answered by the listener itself, with their versions.
const SERVED_HERE: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::Envelope, 0, 0),
    (ApiKey::DescribeCluster, 1, 2),
];

/// Who a connection is: its principal (`Type:name`) and address.
#[derive(Debug, Clone)]
pub struct Peer {
    pub principal: Arc<str>,
    pub address: SocketAddr,
}

/// Handles one frame (without its size prefix) from `from`.
pub fn handle(node: &Arc<NodeState>, frame: Bytes, from: &Peer) -> Handled {
    if frame.len() < 2 {
        return Handled::Close("frame too short for an api key".into());
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    if rpc::is_private(api_key) {
        if !cluster_action(node, from) {
            return Handled::Close(format!(
                "{} may not take part in the controller quorum: CLUSTER_ACTION on the cluster is denied",
                from.principal
            ));
        }
        return private(node, api_key, frame);
    }
    let split = match split_request(frame) {
        Ok(s) => s,
        Err(FrameError::UnknownApiKey { api_key, .. }) => return Handled::Close(format!("unknown api key {api_key}")),
        Err(FrameError::Header(e)) => return Handled::Close(format!("malformed request header: {e}")),
    };
    let (key, header) = (split.api_key, split.header);
    let version = header.request_api_version;
    let correlation_id = header.correlation_id;
    let Some((min, max)) = served(node.apis.as_ref(), key) else {
        return Handled::Close(format!("{} is not served by a controller", key.name()));
    };
    if !(min..=max).contains(&version) {
        if key == ApiKey::ApiVersions {
            // KIP-511: answer in v0 with UNSUPPORTED_VERSION and the table; the client retries.
            let body = api_versions(node.apis.as_ref(), ErrorCode::UNSUPPORTED_VERSION.code());
            return ready(correlation_id, 0, body);
        }
        return Handled::Close(format!("{} v{version} is not supported", key.name()));
    }
    let body = match RequestBody::decode(key, &mut split.body.clone(), version) {
        Ok(b) => b,
        Err(e) => return Handled::Close(format!("malformed {} v{version}: {e}", key.name())),
    };
    let (body, finish) = match authorize(node, from, body, version) {
        Gate::Handle(body, finish) => (body, finish),
        Gate::Refuse(refused) => return ready(correlation_id, version, refused),
    };
    let reply: ControllerReply = match body {
        RequestBody::ApiVersions(_) => return ready(correlation_id, version, api_versions(node.apis.as_ref(), 0)),
        RequestBody::DescribeQuorum(_) => Box::pin(std::future::ready(describe::quorum(node))),
        RequestBody::DescribeCluster(r) => Box::pin(std::future::ready(describe::cluster(node, &r))),
        RequestBody::Envelope(r) => return enveloped(node, correlation_id, version, &r),
        body => node.apis.handle(header, body),
    };
    Handled::Answer(Box::pin(async move {
        let answer = reply.await;
        let answer = match finish {
            Some(finish) => finish(answer),
            None => answer,
        };
        encode(correlation_id, version, &answer)
    }))
}

/// The request if `from` may send it, with what to apply to its answer; else the answer
/// refusing it. Everything is allowed without an authorizer, and ApiVersions always.
fn authorize(node: &NodeState, from: &Peer, body: RequestBody, version: i16) -> Gate {
    let Some(config) = &node.authorization else { return Gate::Handle(body, None) };
    let cluster_denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
    let from_a_node = matches!(
        body,
        RequestBody::Envelope(_)
            | RequestBody::BrokerRegistration(_)
            | RequestBody::BrokerHeartbeat(_)
            | RequestBody::AlterPartition(_)
            | RequestBody::AllocateProducerIds(_)
    );
    match &body {
        RequestBody::ApiVersions(_) => return Gate::Handle(body, None),
        _ if from_a_node && cluster_action(node, from) => return Gate::Handle(body, None),
        RequestBody::Envelope(_) => {
            return Gate::Refuse(ResponseBody::Envelope(envelope::refused(cluster_denied)));
        }
        _ if from_a_node => {
            return Gate::Refuse(super::failed_response(
                &body,
                version,
                cluster_denied,
                "Cluster authorization failed.",
            ));
        }
        _ => {}
    }
    let image = Arc::new(node.quorum.applied().image);
    let access = Access::on_controller(config.clone(), image, from.principal.clone(), from.address);
    authorization::gate(&access, body, version)
}

/// Whether `from` has CLUSTER_ACTION on the cluster (always, without an authorizer): a
/// broker or a controller. A refusal is counted.
fn cluster_action(node: &NodeState, from: &Peer) -> bool {
    let Some(config) = &node.authorization else { return true };
    let Some(authorizer) = &config.authorizer else { return true };
    let host = crate::access::host_address(from.address.ip());
    let who = crate::authorizer::Requester { principal: &from.principal, host: &host };
    let allowed = node.quorum.with_applied(|a| {
        let acls = a.image.acls().map(|(_, acl)| acl);
        authorizer.authorize(acls, who, kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CLUSTER_ACTION)
    });
    if !allowed {
        crate::telemetry::authorization_failed("CLUSTER", "CLUSTER_ACTION");
        tracing::warn!(principal = %from.principal, peer = %from.address,
            "controller listener: refused a quorum or broker request without CLUSTER_ACTION on the cluster; \
             make the brokers' and controllers' principal a super user (super.users) or grant it CLUSTER_ACTION");
    }
    allowed
}

/// An EnvelopeRequest: its content handled as from the client it names, and answered in
/// an EnvelopeResponse. The envelope's error is NOT_CONTROLLER when its content's is, so
/// the forwarding broker tries the next controller.
fn enveloped(node: &Arc<NodeState>, correlation_id: i32, version: i16, request: &EnvelopeRequest) -> Handled {
    let apis = node.apis.clone();
    let served = |key: ApiKey| {
        let key = key as i16;
        apis.supported().into_iter().find(|(k, _, _)| *k == key).map(|(_, min, max)| (min, max))
    };
    let opened = match envelope::open(request, served) {
        Ok(o) => o,
        Err((code, why)) => {
            tracing::warn!(error = code.name(), reason = %why, "controller listener: refused an envelope");
            return ready(correlation_id, version, ResponseBody::Envelope(envelope::refused(code)));
        }
    };
    let header = opened.header.clone();
    let reply = node.apis.handle_from(opened.header, opened.body, Some(&opened.principal));
    Handled::Answer(Box::pin(async move {
        let inner = reply.await;
        let mut answer = envelope::answer(&header, &inner);
        if crate::cluster_link::not_controller(&inner) {
            answer.error_code = ErrorCode::NOT_CONTROLLER.code();
        }
        encode(correlation_id, version, &ResponseBody::Envelope(answer))
    }))
}

/// The versions of `key` this listener serves: its own, else the active controller's.
fn served(apis: &dyn ControllerApis, key: ApiKey) -> Option<(i16, i16)> {
    let own = SERVED_HERE.iter().find(|(k, _, _)| *k == key).map(|&(_, min, max)| (min, max));
    own.or_else(|| apis.supported().into_iter().find(|(k, _, _)| *k == key as i16).map(|(_, min, max)| (min, max)))
}

/// ApiVersions: what this listener serves and what the active controller serves; never
/// the private keys.
fn api_versions(apis: &dyn ControllerApis, error_code: i16) -> ResponseBody {
    let mut keys: Vec<ApiVersion> = SERVED_HERE
        .iter()
        .map(|&(k, min, max)| ApiVersion {
            api_key: k as i16,
            min_version: min,
            max_version: max,
            ..Default::default()
        })
        .collect();
    for (api_key, min_version, max_version) in apis.supported() {
        if !rpc::is_private(api_key) && !keys.iter().any(|k| k.api_key == api_key) {
            keys.push(ApiVersion { api_key, min_version, max_version, ..Default::default() });
        }
    }
    keys.sort_by_key(|k| k.api_key);
    ResponseBody::ApiVersions(ApiVersionsResponse { error_code, api_keys: keys, ..Default::default() })
}

/// A private key: header v2, a JSON body, answered with header v1.
fn private(node: &Arc<NodeState>, api_key: i16, mut frame: Bytes) -> Handled {
    let header = match RequestHeader::decode(&mut frame, 2) {
        Ok(h) => h,
        Err(e) => return Handled::Close(format!("malformed request header: {e}")),
    };
    if header.request_api_version != rpc::VERSION {
        return Handled::Close(format!("api key {api_key} v{} is not supported", header.request_api_version));
    }
    let correlation_id = header.correlation_id;
    let max = node.max_rpc_bytes;
    if api_key == rpc::HELLO {
        let hello = match rpc::decode_hello(&frame, max) {
            Ok(h) => h,
            Err(why) => return Handled::Close(why),
        };
        node.saw_hello(hello);
        let body = rpc::encode_hello(&node.my_hello());
        return Handled::Answer(Box::pin(async move { Ok(private_frame(correlation_id, &body)) }));
    }
    if api_key == rpc::METADATA_FETCH {
        return metadata_fetch(node, correlation_id, &frame);
    }
    let Some((target, frame)) = rpc::addressed(&frame) else {
        return Handled::Close(format!("api key {api_key}: body too short for its replica key"));
    };
    if target != node.replica {
        // Meant for another replica of this node (before its disk was replaced).
        return Handled::Answer(Box::pin(async move { Ok(private_frame(correlation_id, &[])) }));
    }
    let rpc = match decode_rpc(frame, max) {
        Ok(r) => r,
        Err(e) => return Handled::Close(e.to_string()),
    };
    if rpc::api_key_of(&rpc) != api_key {
        return Handled::Close(format!("api key {api_key} carries another RPC"));
    }
    let quorum = node.quorum.clone();
    Handled::Answer(Box::pin(async move {
        let reply = quorum.handle_rpc(rpc).await;
        Ok(private_frame(correlation_id, &encode_reply(&reply)))
    }))
}

/// A broker's fetch of the committed metadata log: answered from what this member has
/// applied, after waiting (at most `MAX_FETCH_WAIT_MS`) when there is nothing new. The
/// connection's later requests wait behind it, so a broker fetches on a connection of
/// its own.
fn metadata_fetch(node: &Arc<NodeState>, correlation_id: i32, body: &[u8]) -> Handled {
    let request = match rpc::decode_fetch(body, node.max_rpc_bytes) {
        Ok(r) => r,
        Err(why) => return Handled::Close(why),
    };
    let quorum = node.quorum.clone();
    Handled::Answer(Box::pin(async move {
        let response = quorum.fetch_metadata(&request).await;
        Ok(private_frame(correlation_id, &rpc::encode_fetch_response(&response)))
    }))
}

fn private_frame(correlation_id: i32, body: &[u8]) -> BytesMut {
    let mut out = BytesMut::with_capacity(8 + body.len());
    // A header of an i32 and an empty tag section always encodes.
    let _ = ResponseHeader { correlation_id, ..Default::default() }.encode(&mut out, 1);
    out.extend_from_slice(body);
    out
}

fn ready(correlation_id: i32, version: i16, body: ResponseBody) -> Handled {
    let encoded = encode(correlation_id, version, &body);
    Handled::Answer(Box::pin(async move { encoded }))
}

fn encode(correlation_id: i32, version: i16, body: &ResponseBody) -> Result<BytesMut, String> {
    let mut out = BytesMut::new();
    osprey_protocol::frame::encode_response(correlation_id, version, body, &mut out)
        .map_err(|e| format!("response does not encode (a bug): {e}"))?;
    Ok(out)
}
