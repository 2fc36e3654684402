//! The inter-broker client: how this node talks to another node (a broker or the active
//! controller) with Kafka's protocol. One [`NodeClient`] per destination node, shared by
//! whatever needs to reach that node: BrokerRegistration and BrokerHeartbeat to the
//! controller, forwarded admin requests, the openraft RPCs (raw mode, Osprey-private API
//! keys), follower Fetch, WriteTxnMarkers. Kafka's counterpart is `NetworkClient` as its
//! brokers use it (`NodeToControllerChannelManager`, `ReplicaFetcherThread`'s
//! `BrokerBlockingSender`, `TransactionMarkerChannelManager`).
//!
//! What it does:
//! - connects on first use, within `connect_timeout_ms`, and runs ApiVersions on every
//!   new connection; each request then goes at the highest version both sides support
//!   ([`NodeClient::send_with`] lets the caller build the body for that version), and one
//!   whose API the peer does not serve fails with [`ClientError::Unsupported`];
//! - pipelines up to `max_in_flight_requests` requests on the connection and matches the
//!   responses, which must come back in order (see `connection.rs`);
//! - fails a request after `request_timeout_ms`, and closes the connection then (as
//!   Kafka does), failing every other request in flight on it;
//! - closes the connection on a response frame over `max_response_bytes`, a negative
//!   size, an unexpected correlation id or a malformed header; a body that does not
//!   decode fails only its own request. Nothing the peer sends can panic it;
//! - after a failure, waits before connecting again: `reconnect_backoff_ms` doubled per
//!   consecutive failure up to `reconnect_backoff_max_ms`, jittered ±20% (Kafka's
//!   `reconnect.backoff.ms`, `reconnect.backoff.max.ms`);
//! - follows the node to a new address ([`NodeClient::set_address`], on a metadata
//!   update): the old connection closes and the next request connects to the new one.
//!
//! [`NodeClients`] keeps one client per node for one purpose (one client id).
//!
//! It does not retry requests: whether a failed request may be sent again is the
//! caller's to decide (a heartbeat may, a produce of the same batch must not blindly).
//!
//! Metrics (see `telemetry.rs`): `osprey_interbroker_requests_total{api,result}`,
//! `osprey_interbroker_request_duration_seconds{api}`,
//! `osprey_interbroker_connection_attempts_total`,
//! `osprey_interbroker_connection_failures_total`, `osprey_interbroker_connections`.

mod backoff;
mod connection;
mod versions;

pub use backoff::{reconnect_backoff, RECONNECT_BACKOFF_JITTER};
pub use versions::{PeerVersions, Unsupported};

use crate::telemetry::{self, LogLimiter};
use bytes::{BufMut, Bytes};
use connection::{Connection, Outgoing};
use osprey_protocol::{ApiKey, RequestBody, ResponseBody};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Kafka's `socket.connection.setup.timeout.ms` default: connecting and the ApiVersions
/// handshake must finish within it.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Kafka's broker `request.timeout.ms` default.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Kafka's client `max.in.flight.requests.per.connection` default. (Kafka's own
/// inter-broker clients use 1; the openraft RPCs gain from pipelining.)
pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 5;
/// `socket.request.max.bytes`' default: the largest frame a broker accepts is also the
/// largest this client reads.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 100 * 1024 * 1024;
/// Kafka's `reconnect.backoff.ms` default.
pub const DEFAULT_RECONNECT_BACKOFF_MS: u64 = 50;
/// Kafka's `reconnect.backoff.max.ms` default.
pub const DEFAULT_RECONNECT_BACKOFF_MAX_MS: u64 = 1000;

/// Client ids as Kafka's brokers name their inter-broker clients, so that a peer's
/// request logs read the same for an Osprey node as for a Kafka one.
pub mod client_id {
    /// A replica fetcher (`ReplicaFetcherManager`): `broker-<id>-fetcher-<n>`.
    pub fn replica_fetcher(node_id: i32, fetcher_id: i32) -> String {
        format!("broker-{node_id}-fetcher-{fetcher_id}")
    }

    /// The channel to the active controller (`NodeToControllerChannelManager`): Kafka
    /// passes the bare broker id.
    pub fn to_controller(node_id: i32) -> String {
        node_id.to_string()
    }

    /// The transaction marker sender (`TransactionMarkerChannelManager`):
    /// `broker-<id>-txn-marker-sender`.
    pub fn txn_marker_sender(node_id: i32) -> String {
        format!("broker-{node_id}-txn-marker-sender")
    }
}

/// How a [`NodeClient`] behaves; every bound is named with its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The request header's client id (see [`client_id`]).
    pub client_id: String,
    /// Connecting plus the ApiVersions handshake.
    pub connect_timeout_ms: u64,
    /// From a request's send to its response, waiting for a free in-flight slot included.
    pub request_timeout_ms: u64,
    /// Requests sent and not yet answered on one connection; more wait their turn.
    pub max_in_flight_requests: usize,
    /// A response frame declaring more than this closes the connection.
    pub max_response_bytes: usize,
    pub reconnect_backoff_ms: u64,
    pub reconnect_backoff_max_ms: u64,
    /// When set, ApiVersions (v5+) names this cluster and the destination node id, and a
    /// peer that is not that node of that cluster is refused ([`ConnectFailure::WrongPeer`]).
    pub cluster_id: Option<String>,
    /// TLS and SASL to the peer, as the inter-broker listener has them.
    pub security: Security,
}

/// How a broker's clients reach the other brokers: what the inter-broker listener asks of
/// a connection. Default: plain TCP, no login.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Security {
    /// TLS to the peer (the inter-broker listener is SSL or SASL_SSL).
    pub tls: Option<crate::tls::InterBrokerTls>,
    /// The login after the ApiVersions handshake (the listener is SASL_PLAINTEXT or
    /// SASL_SSL): `sasl.mechanism.inter.broker.protocol` with the JAAS config's user.
    pub sasl: Option<Arc<crate::config::SaslLogin>>,
}

impl ClientConfig {
    /// Kafka's defaults, with this client id.
    pub fn new(client_id: impl Into<String>) -> ClientConfig {
        ClientConfig {
            client_id: client_id.into(),
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            max_in_flight_requests: DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            reconnect_backoff_ms: DEFAULT_RECONNECT_BACKOFF_MS,
            reconnect_backoff_max_ms: DEFAULT_RECONNECT_BACKOFF_MAX_MS,
            cluster_id: None,
            security: Security::default(),
        }
    }
}

/// Where a node listens (a host name or an IP literal, resolved at each connect).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeAddress {
    pub host: String,
    pub port: u16,
}

impl NodeAddress {
    pub fn new(host: impl Into<String>, port: u16) -> NodeAddress {
        NodeAddress { host: host.into(), port }
    }
}

impl From<std::net::SocketAddr> for NodeAddress {
    fn from(addr: std::net::SocketAddr) -> NodeAddress {
        NodeAddress { host: addr.ip().to_string(), port: addr.port() }
    }
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("node {node}: cannot connect to {address}: {reason}")]
    Connect { node: i32, address: String, reason: ConnectFailure },
    #[error(
        "node {node} does not support api key {api_key} at any version this side can send \
         (ours {ours:?}, theirs {theirs:?})"
    )]
    Unsupported { node: i32, api_key: i16, ours: (i16, i16), theirs: Option<(i16, i16)> },
    #[error("node {node}: no response within request timeout of {timeout_ms} ms")]
    RequestTimedOut { node: i32, timeout_ms: u64 },
    #[error("node {node}: connection closed before the response arrived: {reason}")]
    Disconnected { node: i32, reason: DisconnectReason },
    #[error("node {node}: malformed response to api key {api_key} v{version}: {detail}")]
    MalformedResponse { node: i32, api_key: i16, version: i16, detail: String },
    #[error("cannot send request: {0}")]
    InvalidRequest(String),
}

impl ClientError {
    /// The `result` label of `osprey_interbroker_requests_total`.
    fn result_label(&self) -> &'static str {
        match self {
            ClientError::Connect { .. } => "connect_failed",
            ClientError::Unsupported { .. } => "unsupported",
            ClientError::RequestTimedOut { .. } => "timeout",
            ClientError::Disconnected { .. } => "disconnected",
            ClientError::MalformedResponse { .. } => "malformed",
            ClientError::InvalidRequest(_) => "invalid",
        }
    }
}

/// Why a connection could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectFailure {
    #[error("not connected and handshaken within {timeout_ms} ms")]
    TimedOut { timeout_ms: u64 },
    #[error("{0}")]
    Io(String),
    #[error("ApiVersions handshake: {0}")]
    Handshake(DisconnectReason),
    #[error("ApiVersions answered error code {0}")]
    ApiVersions(i16),
    #[error("malformed ApiVersions response: {0}")]
    MalformedApiVersions(String),
    #[error("the process at this address is not the node of the cluster meant (REBOOTSTRAP_REQUIRED)")]
    WrongPeer,
    #[error("SASL login failed with {0}: check sasl.mechanism.inter.broker.protocol and the username and password of the inter-broker listener's sasl.jaas.config")]
    Authentication(String),
}

/// Why a connection closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DisconnectReason {
    #[error("the peer closed the connection")]
    PeerClosed,
    #[error("I/O error: {0}")]
    Io(String),
    #[error("response frame declared a negative size {0}")]
    NegativeFrameSize(i32),
    #[error("response frame of {size} bytes is over the bound of {max} bytes")]
    ResponseTooLarge { size: usize, max: usize },
    #[error("response correlation id {got}, expected {expected:?} (responses must come in request order)")]
    UnexpectedCorrelationId { expected: Option<i32>, got: i32 },
    #[error("malformed response header: {0}")]
    MalformedHeader(String),
    #[error("request {correlation_id} got no response within {timeout_ms} ms")]
    RequestTimedOut { correlation_id: i32, timeout_ms: u64 },
    #[error("the node moved to another address")]
    AddressChanged,
    #[error("the client was dropped")]
    ClientDropped,
}

impl DisconnectReason {
    /// Whether the next connection attempt should wait out a back-off: not when this
    /// side chose to close for a reason that says nothing about the peer's health.
    fn backs_off(&self) -> bool {
        !matches!(self, DisconnectReason::AddressChanged | DisconnectReason::ClientDropped)
    }

    /// A peer that breaks the protocol is a bug worth a warning; the rest is weather.
    fn is_protocol_error(&self) -> bool {
        matches!(
            self,
            DisconnectReason::NegativeFrameSize(_)
                | DisconnectReason::ResponseTooLarge { .. }
                | DisconnectReason::UnexpectedCorrelationId { .. }
                | DisconnectReason::MalformedHeader(_)
        )
    }
}

/// A decoded response and the version it was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub version: i16,
    pub body: ResponseBody,
}

/// A client for one node. Cheap to clone; clones share the connection. Dropping the
/// last clone closes the connection and fails whatever is still in flight.
#[derive(Debug, Clone)]
pub struct NodeClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    node_id: i32,
    /// The address, and a generation that moves on each change.
    address: Mutex<(NodeAddress, u64)>,
    /// The current connection, open or closed; replaced only under `connecting`.
    live: Mutex<Option<Arc<Connection>>>,
    /// Held while connecting, so that concurrent senders share one attempt.
    connecting: tokio::sync::Mutex<Reconnect>,
    log: Arc<PeerLog>,
}

/// Back-off state between connection attempts.
#[derive(Debug)]
struct Reconnect {
    /// Consecutive failures (failed connects, or connections that closed on the peer).
    failures: u32,
    /// Not before this instant.
    retry_at: Option<tokio::time::Instant>,
    /// The address generation the failures were counted against: failures to reach an
    /// old address say nothing about the new one.
    generation: u64,
}

impl NodeClient {
    /// A client for node `node_id` at `address`. Connects on the first request.
    pub fn new(config: ClientConfig, node_id: i32, address: NodeAddress) -> NodeClient {
        NodeClient {
            inner: Arc::new(Inner {
                config,
                node_id,
                address: Mutex::new((address, 0)),
                live: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(Reconnect { failures: 0, retry_at: None, generation: 0 }),
                log: Arc::new(PeerLog::default()),
            }),
        }
    }

    pub fn node_id(&self) -> i32 {
        self.inner.node_id
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    pub fn address(&self) -> NodeAddress {
        self.inner.address().0
    }

    /// Whether a request now would wait for a reconnect back-off first (the last
    /// connection attempt failed and its retry is not due, or another request is waiting
    /// for it), as Kafka's `NetworkClient` tells a node that is not ready: a caller with
    /// other nodes to ask (the controllers) asks them instead.
    pub fn backing_off(&self) -> bool {
        if self.inner.live().is_some_and(|c| c.is_open()) {
            return false;
        }
        match self.inner.connecting.try_lock() {
            Ok(reconnect) => reconnect.retry_at.is_some_and(|at| at > tokio::time::Instant::now()),
            Err(_) => true,
        }
    }

    /// The node now listens at `address` (a metadata update). If it differs, the open
    /// connection closes (its requests fail with [`DisconnectReason::AddressChanged`])
    /// and the next request connects to the new address without back-off.
    pub fn set_address(&self, address: NodeAddress) {
        {
            let mut current = self.inner.address.lock().unwrap_or_else(PoisonError::into_inner);
            if current.0 == address {
                return;
            }
            *current = (address, current.1 + 1);
        }
        if let Some(connection) = self.inner.live() {
            connection.close(DisconnectReason::AddressChanged);
        }
    }

    /// Requests sent on the current connection and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.inner.live().map_or(0, |c| c.in_flight())
    }

    /// The peer's ApiVersions table, connecting first if needed.
    pub async fn peer_versions(&self) -> Result<Arc<PeerVersions>, ClientError> {
        Ok(self.inner.connection().await?.versions.clone())
    }

    /// Sends `body` at the highest version both sides support and decodes the response.
    /// Use [`NodeClient::send_with`] when the body's fields depend on the version.
    pub async fn send(&self, body: RequestBody) -> Result<Response, ClientError> {
        self.send_with(body.api_key(), move |_| body).await
    }

    /// Sends the request `build` makes for the version chosen on the current connection
    /// (as Kafka's `AbstractRequest.Builder.build(version)`): e.g. a Fetch names topics
    /// by id from v13 and by name before.
    pub async fn send_with(
        &self,
        api: ApiKey,
        build: impl FnOnce(i16) -> RequestBody,
    ) -> Result<Response, ClientError> {
        let started = Instant::now();
        let result = self.try_send_with(api, build).await;
        telemetry::interbroker_request(
            api.name(),
            result.as_ref().err().map_or("ok", ClientError::result_label),
            started,
        );
        result
    }

    /// Raw mode: sends `body` (already encoded) as `api_key` at `api_version`, and
    /// returns the response body bytes, header removed. For the Osprey-private API keys
    /// that the codec does not know (the openraft RPCs), whose headers are flexible (v2
    /// request, v1 response); keys the codec knows use Kafka's header rules. A key the
    /// peer advertises must be sent at a version it advertises; see
    /// [`PeerVersions::check_raw`] for keys it does not.
    pub async fn send_raw(&self, api_key: i16, api_version: i16, body: Bytes) -> Result<Bytes, ClientError> {
        let started = Instant::now();
        let result = self.try_send_raw(api_key, api_version, body).await;
        let api = ApiKey::from_i16(api_key).map_or("private", ApiKey::name);
        telemetry::interbroker_request(api, result.as_ref().err().map_or("ok", ClientError::result_label), started);
        result
    }

    async fn try_send_with(
        &self,
        api: ApiKey,
        build: impl FnOnce(i16) -> RequestBody,
    ) -> Result<Response, ClientError> {
        let node = self.inner.node_id;
        let connection = self.inner.connection().await?;
        let version = connection.versions.usable(api).map_err(|u| unsupported(node, u))?;
        let body = build(version);
        if body.api_key() != api {
            return Err(ClientError::InvalidRequest(format!(
                "built a {} request for {}",
                body.api_key().name(),
                api.name()
            )));
        }
        if let RequestBody::Produce(p) = &body {
            if p.acks == 0 {
                // Kafka sends no response to acks=0; a request waiting for one would only
                // time out and take the connection down with it.
                return Err(ClientError::InvalidRequest("a Produce with acks=0 gets no response".into()));
            }
        }
        let outgoing =
            Outgoing::new(&self.inner.config.client_id, api as i16, version, |buf| body.encode(buf, version))?;
        let mut bytes = self.inner.round_trip(&connection, outgoing).await?;
        let malformed = |detail: String| ClientError::MalformedResponse { node, api_key: api as i16, version, detail };
        let decoded = ResponseBody::decode(api, &mut bytes, version).map_err(|e| malformed(e.to_string()))?;
        if !bytes.is_empty() {
            return Err(malformed(format!("{} bytes after the response", bytes.len())));
        }
        Ok(Response { version, body: decoded })
    }

    async fn try_send_raw(&self, api_key: i16, api_version: i16, body: Bytes) -> Result<Bytes, ClientError> {
        let node = self.inner.node_id;
        let connection = self.inner.connection().await?;
        connection.versions.check_raw(api_key, api_version).map_err(|u| unsupported(node, u))?;
        let outgoing = Outgoing::new(&self.inner.config.client_id, api_key, api_version, |buf| {
            buf.put_slice(&body);
            Ok(())
        })?;
        self.inner.round_trip(&connection, outgoing).await
    }
}

/// The clients of one purpose (one client id and config), by node id: what Kafka keeps
/// as one `NetworkClient` with a connection per node. A metadata update calls
/// [`NodeClients::client`] with each node's current address, which moves an existing
/// client ([`NodeClient::set_address`]) rather than making a second one.
#[derive(Debug)]
pub struct NodeClients {
    config: ClientConfig,
    nodes: Mutex<std::collections::HashMap<i32, NodeClient>>,
}

impl NodeClients {
    pub fn new(config: ClientConfig) -> NodeClients {
        NodeClients { config, nodes: Mutex::default() }
    }

    /// The client for `node_id`, made on first use, and now pointed at `address`.
    pub fn client(&self, node_id: i32, address: NodeAddress) -> NodeClient {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        match nodes.get(&node_id) {
            Some(client) => {
                client.set_address(address);
                client.clone()
            }
            None => {
                let client = NodeClient::new(self.config.clone(), node_id, address);
                nodes.insert(node_id, client.clone());
                client
            }
        }
    }

    /// The client for a node already known.
    pub fn get(&self, node_id: i32) -> Option<NodeClient> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner).get(&node_id).cloned()
    }

    /// Forgets the nodes for which `keep` is false (gone from the cluster); each one's
    /// connection closes when the last clone of its client is dropped.
    pub fn retain(&self, mut keep: impl FnMut(i32) -> bool) {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner).retain(|&id, _| keep(id));
    }
}

fn unsupported(node: i32, u: Unsupported) -> ClientError {
    ClientError::Unsupported { node, api_key: u.api_key, ours: u.ours, theirs: u.theirs }
}

impl Inner {
    fn address(&self) -> (NodeAddress, u64) {
        self.address.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn live(&self) -> Option<Arc<Connection>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    async fn round_trip(&self, connection: &Connection, outgoing: Outgoing) -> Result<Bytes, ClientError> {
        let timeout_ms = self.config.request_timeout_ms;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        connection.round_trip(outgoing, deadline, timeout_ms).await
    }

    /// The open connection to the node's current address, connecting (after any
    /// back-off still due) if there is none.
    async fn connection(&self) -> Result<Arc<Connection>, ClientError> {
        if let Some(c) = self.live().filter(|c| c.takes_requests()) {
            return Ok(c);
        }
        let mut reconnect = self.connecting.lock().await;
        loop {
            // Another sender may have connected while this one waited for the lock.
            if let Some(c) = self.live().filter(|c| c.takes_requests()) {
                return Ok(c);
            }
            if let Some(closed) = self.live.lock().unwrap_or_else(PoisonError::into_inner).take() {
                if let Some((reason, at)) = closed.closed() {
                    if reason.backs_off() {
                        self.schedule_retry(&mut reconnect, at.into());
                    }
                }
            }
            if reconnect.generation != self.address().1 {
                *reconnect = Reconnect { failures: 0, retry_at: None, generation: self.address().1 };
            }
            if let Some(at) = reconnect.retry_at {
                tokio::time::sleep_until(at).await;
            }
            let (address, generation) = self.address();
            telemetry::interbroker_connection_attempt();
            match Connection::open(&self.config, self.node_id, &address, self.log.clone()).await {
                Ok(connection) => {
                    reconnect.failures = 0;
                    reconnect.retry_at = None;
                    self.log.connected(self.node_id, &address);
                    let connection = Arc::new(connection);
                    *self.live.lock().unwrap_or_else(PoisonError::into_inner) = Some(connection.clone());
                    if self.address().1 != generation {
                        // The node moved while this connected: connect again, to where it is.
                        connection.close(DisconnectReason::AddressChanged);
                        continue;
                    }
                    return Ok(connection);
                }
                Err(reason) => {
                    telemetry::interbroker_connection_failed();
                    let retry_in = self.schedule_retry(&mut reconnect, tokio::time::Instant::now());
                    self.log.connect_failed(self.node_id, &address, &reason, retry_in);
                    return Err(ClientError::Connect { node: self.node_id, address: address.to_string(), reason });
                }
            }
        }
    }

    /// Counts a failure at `at` and sets when the next attempt may start.
    fn schedule_retry(&self, reconnect: &mut Reconnect, at: tokio::time::Instant) -> Duration {
        let wait = reconnect_backoff(
            Duration::from_millis(self.config.reconnect_backoff_ms),
            Duration::from_millis(self.config.reconnect_backoff_max_ms),
            reconnect.failures,
            backoff::random_unit(),
        );
        reconnect.failures = reconnect.failures.saturating_add(1);
        reconnect.retry_at = Some(at + wait);
        wait
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(connection) = self.live.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            connection.close(DisconnectReason::ClientDropped);
        }
    }
}

/// One node's log lines, each kind at most once per [`PeerLog::INTERVAL`]: a peer that
/// is down is retried every second for as long as it is down, and must not flood the log.
#[derive(Debug, Default)]
struct PeerLog {
    connect_failures: LogLimiter,
    disconnects: LogLimiter,
}

impl PeerLog {
    const INTERVAL: Duration = Duration::from_secs(10);

    fn connected(&self, node: i32, address: &NodeAddress) {
        tracing::debug!(node, %address, "inter-broker connection established");
    }

    fn connect_failed(&self, node: i32, address: &NodeAddress, reason: &ConnectFailure, retry_in: Duration) {
        if let Some(unlogged) = self.connect_failures.admit(Self::INTERVAL) {
            tracing::warn!(
                node,
                %address,
                %reason,
                retry_in_ms = retry_in.as_millis() as u64,
                unlogged,
                "connection to node {node} ({address}) could not be established; node may not be available"
            );
        }
    }

    fn disconnected(&self, node: i32, reason: &DisconnectReason, failed_requests: usize) {
        if !reason.backs_off() {
            tracing::debug!(node, %reason, failed_requests, "inter-broker connection closed");
            return;
        }
        if let Some(unlogged) = self.disconnects.admit(Self::INTERVAL) {
            if reason.is_protocol_error() {
                tracing::warn!(node, %reason, failed_requests, unlogged, "closing connection to node {node}: {reason}");
            } else {
                tracing::info!(node, %reason, failed_requests, unlogged, "connection to node {node} closed: {reason}");
            }
        }
    }
}
