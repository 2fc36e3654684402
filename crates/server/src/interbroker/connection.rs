//! One TCP connection to a peer (in TLS when the config has it): the ApiVersions handshake, then a writer task and a
//! reader task around an ordered queue of in-flight requests.
//!
//! Responses must come back in the order the requests were sent, and each must carry the
//! correlation id of the oldest request in flight: a Kafka broker answers one
//! connection's requests in order, and Kafka's `NetworkClient` treats any other id as a
//! protocol error (`CorrelationIdMismatchException`). So does this client: an unexpected
//! id closes the connection, since nothing after it on the stream can be trusted.
//!
//! Every way the connection ends (peer closed, I/O error, a bad frame, a request timeout,
//! an address change, the client dropped) goes through [`Shared::close`], which fails
//! every request still in flight with the same reason, exactly once.

use super::versions::PeerVersions;
use super::{ClientConfig, ClientError, ConnectFailure, DisconnectReason, NodeAddress, PeerLog};
use crate::telemetry;
use bytes::{BufMut, Bytes, BytesMut};
use osprey_protocol::frame::{request_header_version, response_header_version};
use osprey_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use osprey_protocol::wire::{EncodeError, Message};
use osprey_protocol::{ApiKey, ErrorCode, RequestHeader, ResponseHeader};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;

/// The read and write halves of a connection, plain TCP or TLS.
type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

/// A response frame is read into memory at most this much at a time, so a peer that
/// declares a large frame and sends little of it holds little of our memory.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Bytes of a request frame before the correlation id: size, api key, api version.
const CORRELATION_ID_OFFSET: usize = 4 + 2 + 2;

/// The versions of ApiVersions this client can send: the codec's.
fn api_versions_versions() -> (i16, i16) {
    ApiKey::ApiVersions.versions()
}

/// An open connection, handshake done.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) versions: Arc<PeerVersions>,
    shared: Arc<Shared>,
    writer: mpsc::UnboundedSender<Bytes>,
    /// One permit per request in flight: `max_in_flight_requests`. A permit lives in the
    /// request's queue entry, not in the caller's future, so a caller that gives up
    /// still counts until its request is answered or the connection closes: the
    /// request really is still on the wire. This also bounds the writer's queue.
    permits: Arc<Semaphore>,
    /// When the peer limits the SASL session's lifetime (KIP-368): the instant from
    /// which no new request is sent here, a new connection logging in afresh instead,
    /// while the requests already sent are answered.
    retire_at: Option<Instant>,
}

/// What the tasks and the senders share.
#[derive(Debug)]
struct Shared {
    node_id: i32,
    state: Mutex<State>,
    closed: watch::Sender<bool>,
    log: Arc<PeerLog>,
}

#[derive(Debug)]
struct State {
    next_correlation_id: i32,
    in_flight: VecDeque<InFlight>,
    /// Why and when the connection closed; `None` while open.
    closed: Option<(DisconnectReason, Instant)>,
}

#[derive(Debug)]
struct InFlight {
    correlation_id: i32,
    sent_at: tokio::time::Instant,
    response_header_version: i16,
    reply: oneshot::Sender<Result<Bytes, ClientError>>,
    _permit: OwnedSemaphorePermit,
}

/// A request ready to go: its frame (size prefix included, correlation id still 0) and
/// how to read its response header.
pub(super) struct Outgoing {
    frame: BytesMut,
    response_header_version: i16,
}

impl Outgoing {
    /// Frames a request: `int32 size | header | body`, where `write_body` appends the
    /// body. The correlation id is filled in when the request is queued.
    pub(super) fn new(
        client_id: &str,
        api_key: i16,
        api_version: i16,
        write_body: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
    ) -> Result<Outgoing, ClientError> {
        let (request_header, response_header) = header_versions(api_key, api_version);
        let header = RequestHeader {
            request_api_key: api_key,
            request_api_version: api_version,
            correlation_id: 0,
            client_id: Some(client_id.to_string()),
            ..Default::default()
        };
        let mut frame = BytesMut::with_capacity(256);
        frame.put_i32(0);
        header.encode(&mut frame, request_header).map_err(|e| ClientError::InvalidRequest(e.to_string()))?;
        write_body(&mut frame).map_err(|e| ClientError::InvalidRequest(e.to_string()))?;
        let size = i32::try_from(frame.len() - 4)
            .map_err(|_| ClientError::InvalidRequest(format!("request of {} bytes", frame.len())))?;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        Ok(Outgoing { frame, response_header_version: response_header })
    }
}

/// (request header version, response header version) for a request. Keys the codec
/// knows follow Kafka's rules; any other key is Osprey-private, and private APIs are
/// flexible from their first version, as every API Kafka has added since KIP-482.
fn header_versions(api_key: i16, api_version: i16) -> (i16, i16) {
    match ApiKey::from_i16(api_key) {
        Some(key) => (request_header_version(key, api_version), response_header_version(key, api_version)),
        None => (2, 1),
    }
}

impl Connection {
    /// Connects and runs the ApiVersions handshake, all within `connect_timeout_ms`.
    pub(super) async fn open(
        config: &ClientConfig,
        node_id: i32,
        address: &NodeAddress,
        log: Arc<PeerLog>,
    ) -> Result<Connection, ConnectFailure> {
        let timeout = std::time::Duration::from_millis(config.connect_timeout_ms);
        let connect = async {
            let mut stream = TcpStream::connect((address.host.as_str(), address.port))
                .await
                .map_err(|e| ConnectFailure::Io(e.to_string()))?;
            // Requests are written whole; Nagle would only delay them.
            let _ = stream.set_nodelay(true);
            let connected: (ReadHalf, WriteHalf, Handshaken) = match &config.security.tls {
                None => {
                    let handshaken = handshake(&mut stream, config, node_id).await?;
                    let (read, write) = stream.into_split();
                    (Box::new(read), Box::new(write), handshaken)
                }
                Some(tls) => {
                    let mut stream = tls
                        .connect(stream, &address.host)
                        .await
                        .map_err(|e| ConnectFailure::Io(format!("TLS handshake: {e}")))?;
                    let handshaken = handshake(&mut stream, config, node_id).await?;
                    let (read, write) = tokio::io::split(stream);
                    (Box::new(read), Box::new(write), handshaken)
                }
            };
            Ok::<_, ConnectFailure>(connected)
        };
        let (read, write, handshaken) = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| ConnectFailure::TimedOut { timeout_ms: config.connect_timeout_ms })??;
        let (closed, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            node_id,
            state: Mutex::new(State {
                next_correlation_id: handshaken.next_correlation_id,
                in_flight: VecDeque::new(),
                closed: None,
            }),
            closed,
            log,
        });
        let (writer, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(shared.clone(), write, queue));
        tokio::spawn(read_loop(shared.clone(), read, config.max_response_bytes));
        telemetry::interbroker_connection_opened();
        Ok(Connection {
            versions: Arc::new(handshaken.versions),
            shared,
            writer,
            permits: Arc::new(Semaphore::new(config.max_in_flight_requests.max(1))),
            retire_at: handshaken
                .session_lifetime
                .map(|lifetime| Instant::now() + lifetime.mul_f64(RETIRE_AT_LIFETIME)),
        })
    }

    pub(super) fn is_open(&self) -> bool {
        self.shared.lock().closed.is_none()
    }

    /// Open, and new requests may still be sent on it (its SASL session is not about to
    /// expire).
    pub(super) fn takes_requests(&self) -> bool {
        self.is_open() && self.retire_at.is_none_or(|at| Instant::now() < at)
    }

    /// When and why the connection closed, if it has.
    pub(super) fn closed(&self) -> Option<(DisconnectReason, Instant)> {
        self.shared.lock().closed.clone()
    }

    pub(super) fn in_flight(&self) -> usize {
        self.shared.lock().in_flight.len()
    }

    pub(super) fn close(&self, reason: DisconnectReason) {
        self.shared.close(reason);
    }

    /// Sends a request and waits for its response body (header removed), until
    /// `deadline`. A request that times out closes the connection, as Kafka's
    /// `NetworkClient` disconnects a node with a timed-out request: the response may
    /// still come, and everything queued behind it would wait for it.
    pub(super) async fn round_trip(
        &self,
        request: Outgoing,
        deadline: tokio::time::Instant,
        timeout_ms: u64,
    ) -> Result<Bytes, ClientError> {
        let node = self.shared.node_id;
        let timed_out = ClientError::RequestTimedOut { node, timeout_ms };
        let Ok(permit) = tokio::time::timeout_at(deadline, self.permits.clone().acquire_owned()).await else {
            self.close_if_overdue(timeout_ms);
            return Err(timed_out);
        };
        let permit = permit.map_err(|_| self.disconnected())?;
        let (reply, response) = oneshot::channel();
        let Outgoing { mut frame, response_header_version } = request;
        let correlation_id = {
            let mut state = self.shared.lock();
            if let Some((reason, _)) = &state.closed {
                return Err(ClientError::Disconnected { node, reason: reason.clone() });
            }
            let id = state.next_correlation_id;
            state.next_correlation_id = id.wrapping_add(1);
            frame[CORRELATION_ID_OFFSET..CORRELATION_ID_OFFSET + 4].copy_from_slice(&id.to_be_bytes());
            state.in_flight.push_back(InFlight {
                correlation_id: id,
                sent_at: tokio::time::Instant::now(),
                response_header_version,
                reply,
                _permit: permit,
            });
            // Queued under the lock, so the writer sends in the order of `in_flight`.
            // It fails only once the writer has stopped, which closes the connection
            // and so fails this entry too.
            let _ = self.writer.send(frame.freeze());
            id
        };
        match tokio::time::timeout_at(deadline, response).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.disconnected()),
            Err(_) => {
                self.shared.close(DisconnectReason::RequestTimedOut { correlation_id, timeout_ms });
                Err(timed_out)
            }
        }
    }

    /// A request timed out waiting for an in-flight slot. If the oldest request in
    /// flight has been waiting longer than the timeout, the connection closes, as that
    /// request's own timeout would have closed it: its caller may have given up before
    /// then, and nothing else would ever free its slot. A younger one is left alone.
    fn close_if_overdue(&self, timeout_ms: u64) {
        let overdue = {
            let state = self.shared.lock();
            let timeout = std::time::Duration::from_millis(timeout_ms);
            state.in_flight.front().filter(|r| r.sent_at.elapsed() >= timeout).map(|r| r.correlation_id)
        };
        if let Some(correlation_id) = overdue {
            self.shared.close(DisconnectReason::RequestTimedOut { correlation_id, timeout_ms });
        }
    }

    fn disconnected(&self) -> ClientError {
        let reason = self.closed().map_or(DisconnectReason::ClientDropped, |(reason, _)| reason);
        ClientError::Disconnected { node: self.shared.node_id, reason }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the connection once: fails every request in flight with `reason` and
    /// stops both tasks (dropping both halves of the socket closes it).
    fn close(&self, reason: DisconnectReason) {
        let drained = {
            let mut state = self.lock();
            if state.closed.is_some() {
                return;
            }
            state.closed = Some((reason.clone(), Instant::now()));
            std::mem::take(&mut state.in_flight)
        };
        self.closed.send_replace(true);
        telemetry::interbroker_connection_closed();
        self.log.disconnected(self.node_id, &reason, drained.len());
        for request in drained {
            let _ = request.reply.send(Err(ClientError::Disconnected { node: self.node_id, reason: reason.clone() }));
        }
    }

    /// Hands a response frame to the oldest request in flight, which must be the one it
    /// answers.
    fn complete(&self, mut frame: Bytes) -> Result<(), DisconnectReason> {
        let Some(got) = frame.get(..4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]])) else {
            return Err(DisconnectReason::MalformedHeader(format!("a response frame of {} bytes", frame.len())));
        };
        let request = {
            let mut state = self.lock();
            match state.in_flight.front() {
                Some(oldest) if oldest.correlation_id == got => state.in_flight.pop_front(),
                oldest => {
                    let expected = oldest.map(|r| r.correlation_id);
                    return Err(DisconnectReason::UnexpectedCorrelationId { expected, got });
                }
            }
        };
        let Some(request) = request else { return Ok(()) };
        ResponseHeader::decode(&mut frame, request.response_header_version)
            .map_err(|e| DisconnectReason::MalformedHeader(e.to_string()))?;
        // The caller may have given up (dropped its future); nothing to do then.
        let _ = request.reply.send(Ok(frame));
        Ok(())
    }
}

async fn write_loop(shared: Arc<Shared>, write: WriteHalf, mut queue: mpsc::UnboundedReceiver<Bytes>) {
    let mut closed = shared.closed.subscribe();
    let mut write = BufWriter::new(write);
    loop {
        let frame = tokio::select! {
            _ = closed.wait_for(|closed| *closed) => return,
            frame = queue.recv() => frame,
        };
        let Some(mut frame) = frame else { return };
        // Write what is queued together, then flush once.
        let written = async {
            loop {
                write.write_all(&frame).await?;
                match queue.try_recv() {
                    Ok(next) => frame = next,
                    Err(_) => break,
                }
            }
            write.flush().await
        };
        let result = tokio::select! {
            _ = closed.wait_for(|closed| *closed) => return,
            result = written => result,
        };
        if let Err(e) = result {
            shared.close(DisconnectReason::Io(e.to_string()));
            return;
        }
    }
}

async fn read_loop(shared: Arc<Shared>, read: ReadHalf, max_response_bytes: usize) {
    let mut closed = shared.closed.subscribe();
    let mut read = BufReader::with_capacity(READ_CHUNK_BYTES, read);
    loop {
        let frame = tokio::select! {
            _ = closed.wait_for(|closed| *closed) => return,
            frame = read_frame(&mut read, max_response_bytes) => frame,
        };
        if let Err(reason) = frame.and_then(|frame| shared.complete(frame)) {
            shared.close(reason);
            return;
        }
    }
}

/// Reads one size-prefixed frame, refusing a declared size that is negative or over
/// `max_bytes` before reading any of it, and growing the buffer only as bytes arrive.
async fn read_frame(read: &mut (impl AsyncRead + Unpin), max_bytes: usize) -> Result<Bytes, DisconnectReason> {
    let size = read.read_i32().await.map_err(io_reason)?;
    let size = usize::try_from(size).map_err(|_| DisconnectReason::NegativeFrameSize(size))?;
    if size > max_bytes {
        return Err(DisconnectReason::ResponseTooLarge { size, max: max_bytes });
    }
    let mut frame = BytesMut::with_capacity(size.min(READ_CHUNK_BYTES));
    while frame.len() < size {
        let want = (size - frame.len()).min(READ_CHUNK_BYTES);
        frame.reserve(want);
        let n = (&mut *read).take(want as u64).read_buf(&mut frame).await.map_err(io_reason)?;
        if n == 0 {
            return Err(DisconnectReason::PeerClosed);
        }
    }
    Ok(frame.freeze())
}

fn io_reason(e: std::io::Error) -> DisconnectReason {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => DisconnectReason::PeerClosed,
        _ => DisconnectReason::Io(e.to_string()),
    }
}

/// ApiVersions on the fresh connection, at the highest version the codec has. A peer
/// that does not know that version answers UNSUPPORTED_VERSION with its own range for
/// ApiVersions (KIP-511), and the request is sent again at the highest version both
/// know, as Kafka's `NetworkClient` does.
/// The share of a SASL session's lifetime after which a connection takes no new requests:
/// Kafka's clients re-authenticate between 85% and 95% of it; this one reconnects at 85%,
/// leaving the rest for the requests in flight.
const RETIRE_AT_LIFETIME: f64 = 0.85;

/// What the handshake leaves the connection with.
struct Handshaken {
    versions: PeerVersions,
    /// The handshake's requests took the ids below it.
    next_correlation_id: i32,
    /// How long the peer keeps the SASL session (KIP-368); `None`: no login, or no limit.
    session_lifetime: Option<std::time::Duration>,
}

/// ApiVersions, then, when the inter-broker listener is a SASL one, the login.
async fn handshake(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    config: &ClientConfig,
    node_id: i32,
) -> Result<Handshaken, ConnectFailure> {
    let versions = api_versions(stream, config, node_id).await?;
    let mut next_correlation_id = 1;
    let session_lifetime = match &config.security.sasl {
        None => None,
        Some(login) => log_in(stream, config, &versions, login, &mut next_correlation_id).await?,
    };
    Ok(Handshaken { versions, next_correlation_id, session_lifetime })
}

/// Logs in as Kafka's `SaslClientAuthenticator` does: SaslHandshake v1 naming the
/// mechanism, then the mechanism's tokens in SaslAuthenticate requests. Returns the
/// session's lifetime when the peer limits it.
async fn log_in(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    config: &ClientConfig,
    versions: &PeerVersions,
    login: &crate::config::SaslLogin,
    correlation_id: &mut i32,
) -> Result<Option<std::time::Duration>, ConnectFailure> {
    use crate::config::SaslMechanism;
    use crate::sasl::scram::{fresh_nonce, ScramClient, ScramMechanism};

    let refused = |detail: String| {
        ConnectFailure::Authentication(format!("{} as {}: {detail}", login.mechanism.name(), login.username))
    };
    let handshake_version = 1;
    if versions.range(ApiKey::SaslHandshake as i16).is_none_or(|(_, max)| max < handshake_version) {
        return Err(refused("the peer does not take SaslHandshake v1".into()));
    }
    let request = SaslHandshakeRequest { mechanism: login.mechanism.name().into() };
    let response =
        round_trip_before_open(stream, config, correlation_id, ApiKey::SaslHandshake, handshake_version, |buf| {
            request.encode(buf, handshake_version)
        })
        .await?;
    let response = SaslHandshakeResponse::decode_exact(response, handshake_version)
        .map_err(|e| ConnectFailure::Handshake(DisconnectReason::MalformedHeader(e.to_string())))?;
    if response.error_code != ErrorCode::NONE.code() {
        return Err(refused(format!(
            "the peer does not enable it (error code {}; it enables {})",
            response.error_code,
            response.mechanisms.join(", ")
        )));
    }
    let version = versions
        .usable(ApiKey::SaslAuthenticate)
        .map_err(|_| refused("the peer does not take SaslAuthenticate".into()))?;
    let mut authenticate = async |token: Vec<u8>| -> Result<SaslAuthenticateResponse, ConnectFailure> {
        let request = SaslAuthenticateRequest { auth_bytes: token.into(), ..Default::default() };
        let response =
            round_trip_before_open(stream, config, correlation_id, ApiKey::SaslAuthenticate, version, |buf| {
                request.encode(buf, version)
            })
            .await?;
        let response = SaslAuthenticateResponse::decode_exact(response, version)
            .map_err(|e| ConnectFailure::Handshake(DisconnectReason::MalformedHeader(e.to_string())))?;
        if response.error_code != ErrorCode::NONE.code() {
            let message = response.error_message.unwrap_or_default();
            return Err(refused(format!("error code {}: {message}", response.error_code)));
        }
        Ok(response)
    };
    let password = login.password.0.as_bytes();
    let last = match login.mechanism {
        SaslMechanism::Plain => {
            let mut token = vec![0];
            token.extend_from_slice(login.username.as_bytes());
            token.push(0);
            token.extend_from_slice(password);
            authenticate(token).await?
        }
        SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
            let mechanism = if login.mechanism == SaslMechanism::ScramSha256 {
                ScramMechanism::Sha256
            } else {
                ScramMechanism::Sha512
            };
            let mut client = ScramClient::new(mechanism, &login.username, password, fresh_nonce());
            let server_first = authenticate(client.client_first()).await?;
            let client_final = client.client_final(&server_first.auth_bytes).map_err(refused)?;
            let server_final = authenticate(client_final).await?;
            client.verify_server_final(&server_final.auth_bytes).map_err(refused)?;
            server_final
        }
    };
    Ok((last.session_lifetime_ms > 0).then(|| std::time::Duration::from_millis(last.session_lifetime_ms as u64)))
}

/// One request and its response on a connection that is still being set up: the body's
/// bytes, header read and checked.
async fn round_trip_before_open(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    config: &ClientConfig,
    correlation_id: &mut i32,
    api: ApiKey,
    version: i16,
    write_body: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
) -> Result<Bytes, ConnectFailure> {
    let id = *correlation_id;
    *correlation_id += 1;
    let mut outgoing = Outgoing::new(&config.client_id, api as i16, version, write_body)
        .map_err(|e| ConnectFailure::Io(e.to_string()))?;
    outgoing.frame[CORRELATION_ID_OFFSET..CORRELATION_ID_OFFSET + 4].copy_from_slice(&id.to_be_bytes());
    stream.write_all(&outgoing.frame).await.map_err(|e| ConnectFailure::Io(e.to_string()))?;
    let mut frame = read_frame(stream, config.max_response_bytes).await.map_err(ConnectFailure::Handshake)?;
    let header = ResponseHeader::decode(&mut frame, outgoing.response_header_version)
        .map_err(|e| ConnectFailure::Handshake(DisconnectReason::MalformedHeader(e.to_string())))?;
    if header.correlation_id != id {
        return Err(ConnectFailure::Handshake(DisconnectReason::UnexpectedCorrelationId {
            expected: Some(id),
            got: header.correlation_id,
        }));
    }
    Ok(frame)
}

/// The ApiVersions exchange, retried once at a lower version if the peer asks.
async fn api_versions(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    config: &ClientConfig,
    node_id: i32,
) -> Result<PeerVersions, ConnectFailure> {
    let (ours_min, ours_max) = api_versions_versions();
    let mut version = ours_max;
    // At most one retry: the second answer is final.
    for _ in 0..2 {
        let response = api_versions_round_trip(stream, config, node_id, version).await?;
        let code = ErrorCode::from_code(response.error_code);
        if code == Some(ErrorCode::UNSUPPORTED_VERSION) {
            let theirs = PeerVersions::from_response(&response).range(ApiKey::ApiVersions as i16);
            let retry = theirs.map_or(ours_min, |(_, max)| max.min(ours_max));
            if retry >= version || retry < ours_min {
                return Err(ConnectFailure::ApiVersions(response.error_code));
            }
            version = retry;
            continue;
        }
        return match code {
            Some(ErrorCode::NONE) => Ok(PeerVersions::from_response(&response)),
            Some(ErrorCode::REBOOTSTRAP_REQUIRED) => Err(ConnectFailure::WrongPeer),
            _ => Err(ConnectFailure::ApiVersions(response.error_code)),
        };
    }
    Err(ConnectFailure::ApiVersions(ErrorCode::UNSUPPORTED_VERSION.code()))
}

async fn api_versions_round_trip(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    config: &ClientConfig,
    node_id: i32,
    version: i16,
) -> Result<ApiVersionsResponse, ConnectFailure> {
    let request = ApiVersionsRequest {
        client_software_name: "osprey".into(),
        client_software_version: env!("CARGO_PKG_VERSION").into(),
        // v5: name the cluster and node this connection means to reach, so that a
        // process now at this address that is not that node says so.
        cluster_id: config.cluster_id.clone(),
        node_id: if config.cluster_id.is_some() { node_id } else { -1 },
        ..Default::default()
    };
    // Each attempt, the retry at a lower version too, goes out as correlation id 0.
    let mut correlation_id = 0;
    let frame = round_trip_before_open(stream, config, &mut correlation_id, ApiKey::ApiVersions, version, |buf| {
        request.encode(buf, version)
    })
    .await?;
    // An UNSUPPORTED_VERSION answer is written at v0 whatever version was asked (KIP-511).
    let mut peek = frame.clone();
    if let Ok(v0) = ApiVersionsResponse::decode(&mut peek, 0) {
        if v0.error_code == ErrorCode::UNSUPPORTED_VERSION.code() {
            return Ok(v0);
        }
    }
    ApiVersionsResponse::decode_exact(frame, version).map_err(|e| ConnectFailure::MalformedApiVersions(e.to_string()))
}
