//! From a request frame to a reply: header parsing, version checks, the KIP-511
//! ApiVersions fallback, and routing to the handler of each API (one file each under
//! `handlers/`).

use crate::broker::Broker;
use crate::handlers;
use crate::supported;
use bytes::Bytes;
use osprey_protocol::frame::{split_request, FrameError};
use osprey_protocol::{ApiKey, RequestBody, RequestHeader, ResponseBody};
use osprey_storage::FileChunk;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

/// A response that is not ready yet (waiting for fsync or for data to fetch).
pub type Pending = Pin<Box<dyn Future<Output = ResponseBody> + Send>>;

/// A response whose record bytes may be left in segment files for the connection's
/// writer to send from there (a Fetch's): `chunks[n]`, when set, holds the bytes of the
/// body's n-th non-null records field (in encoding order), which is itself empty.
#[derive(Debug)]
pub struct Answer {
    pub body: ResponseBody,
    pub chunks: Vec<Option<FileChunk>>,
}

impl From<ResponseBody> for Answer {
    fn from(body: ResponseBody) -> Self {
        Answer { body, chunks: Vec::new() }
    }
}

impl Answer {
    /// The record bytes the answer carries, in its body and in its chunks.
    pub fn records_bytes(&self) -> usize {
        let ResponseBody::Fetch(r) = &self.body else { return 0 };
        let in_body: usize = r
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
            .sum();
        in_body + self.chunks.iter().flatten().map(|c| c.len() as usize).sum::<usize>()
    }

    /// The body with every chunk read into its records field (for tests and callers
    /// that need the bytes in memory; blocking reads).
    #[cfg(test)]
    pub fn into_body_read(self) -> ResponseBody {
        let Answer { mut body, chunks } = self;
        if let ResponseBody::Fetch(r) = &mut body {
            let fields =
                r.responses.iter_mut().flat_map(|t| t.partitions.iter_mut()).filter_map(|p| p.records.as_mut());
            for (records, chunk) in fields.zip(chunks) {
                if let Some(chunk) = chunk {
                    *records = chunk.read().expect("chunk read back");
                }
            }
        }
        body
    }
}

/// An [`Answer`] that is not ready yet.
pub type PendingAnswer = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// What the connection does with a request.
// One per request, moved straight into the connection's queue: boxing the response (as
// large as the largest message, StreamsGroupHeartbeat v1's) would add an allocation to
// every answer for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    /// Send this response.
    Now(ResponseBody),
    /// Send this response when it resolves; later requests may start meanwhile, and
    /// responses still go out in request order.
    Later(Pending),
    /// Send this response when it resolves, and read no later request of the connection
    /// until then: for work whose effect is not in place when the handler returns (a
    /// controller write run on the blocking pool), so that a connection's requests still
    /// take effect in the order sent, as Kafka processes them one after another.
    Ordered(Pending),
    /// Send this answer, with the record bytes it leaves in files, when it resolves (as
    /// `Later`).
    Records(PendingAnswer),
    /// Send nothing (acks=0 produce).
    Nothing,
    /// A protocol violation: close the connection (after earlier responses).
    Close(String),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Now(_) => f.write_str("Now"),
            Reply::Later(_) => f.write_str("Later"),
            Reply::Ordered(_) => f.write_str("Ordered"),
            Reply::Records(_) => f.write_str("Records"),
            Reply::Nothing => f.write_str("Nothing"),
            Reply::Close(why) => write!(f, "Close({why})"),
        }
    }
}

/// Who a request came from, for the whole connection (Kafka's `RequestContext`).
#[derive(Debug, Clone)]
pub struct Client {
    /// The client's address: its host is the group member's `client_host`.
    pub peer: SocketAddr,
    /// The name of the client listener it connected to (`PLAINTEXT`, `INTERNAL`): the
    /// listener whose endpoints answers give for brokers (Metadata, FindCoordinator,
    /// DescribeCluster, KIP-951 leader hints).
    pub listener: Arc<str>,
    /// Who the client is, for the authorizer and client quotas: `User:<name>` from its
    /// SASL login, or from the client certificate on an SSL listener
    /// (`ssl.principal.mapping.rules`), else `User:ANONYMOUS`, as Kafka's
    /// `DefaultKafkaPrincipalBuilder` names it.
    pub principal: Arc<str>,
}

/// Who a controller mutation comes from (CreateTopics, DeleteTopics, CreatePartitions):
/// what the controller mutation quota is measured by, and what a broker forwarding the
/// request puts in its EnvelopeRequest, as Kafka's brokers do (KIP-590).
#[derive(Debug, Clone)]
pub struct Requester {
    pub principal: Arc<str>,
    /// The request header's client id (empty when it sent none).
    pub client_id: String,
    pub host: std::net::IpAddr,
}

impl Client {
    /// The requester of a request with `client_id` on this connection.
    pub fn requester(&self, client_id: &str) -> Requester {
        Requester { principal: self.principal.clone(), client_id: client_id.to_string(), host: self.peer.ip() }
    }
}

/// A request as the handlers see it.
#[derive(Debug, Clone)]
pub struct Request {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: RequestBody,
}

impl Request {
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }
}

/// A request read off the wire, with what the writer needs to frame its response.
#[derive(Debug)]
pub struct Dispatched {
    pub api_key: Option<ApiKey>,
    pub api_version: i16,
    pub correlation_id: i32,
    pub reply: Reply,
    /// What the request counts against in client quotas (`crate::quota`), if anything.
    pub metered: Option<crate::quota::Metered>,
}

/// Parses and handles one request frame (without its size prefix).
pub fn dispatch(broker: &Arc<Broker>, frame: Bytes, client: &Client) -> Dispatched {
    let request_bytes = frame.len();
    let split = match split_request(frame) {
        Ok(s) => s,
        Err(FrameError::UnknownApiKey { api_key, correlation_id }) => {
            return close(None, 0, correlation_id, format!("unknown api key {api_key}"));
        }
        Err(FrameError::Header(e)) => return close(None, 0, 0, format!("malformed request header: {e}")),
    };
    let api_key = split.api_key;
    let version = split.header.request_api_version;
    let correlation_id = split.header.correlation_id;
    let done =
        |reply| Dispatched { api_key: Some(api_key), api_version: version, correlation_id, reply, metered: None };

    let Some((min, max)) = supported::advertised_at(api_key, broker.settings.transaction_version) else {
        return close(
            Some(api_key),
            version,
            correlation_id,
            format!("{} is not served by this broker", api_key.name()),
        );
    };
    if api_key == ApiKey::ApiVersions && !(min..=max).contains(&version) {
        // KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges; the client retries.
        return Dispatched {
            api_key: Some(api_key),
            api_version: 0,
            correlation_id,
            reply: Reply::Now(handlers::api_versions::unsupported_version(broker)),
            metered: None,
        };
    }
    if !(min..=max).contains(&version) {
        return close(
            Some(api_key),
            version,
            correlation_id,
            format!("{} v{version} is not supported", api_key.name()),
        );
    }
    let body = match RequestBody::decode(api_key, &mut split.body.clone(), version) {
        Ok(b) => b,
        Err(e) if api_key == ApiKey::ApiVersions => {
            return done(Reply::Now(handlers::api_versions::invalid_request(&e.to_string())));
        }
        Err(e) => {
            return close(
                Some(api_key),
                version,
                correlation_id,
                format!("malformed {} v{version}: {e}", api_key.name()),
            )
        }
    };
    let metered = crate::quota::metered(&body, version, split.header.client_id.as_deref(), request_bytes);
    let request = Request { api_key, header: split.header, body };
    Dispatched { metered, ..done(handlers::handle(broker, request, client)) }
}

fn close(api_key: Option<ApiKey>, api_version: i16, correlation_id: i32, why: String) -> Dispatched {
    Dispatched { api_key, api_version, correlation_id, reply: Reply::Close(why), metered: None }
}
