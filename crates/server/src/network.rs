//! Sockets: the accept loop and one task pair per connection.
//!
//! A connection's reader parses frames and runs each request's synchronous part in
//! arrival order (so two produce requests to one partition append in the order sent);
//! the writer sends responses strictly in request order, awaiting any that wait for
//! fsync or fetch data. Three bounds keep what clients send and leave unread in check,
//! and each pauses reading from the connection that reaches it (as Kafka mutes a
//! channel) rather than dropping anything:
//! - `osprey.max.inflight.requests.per.connection`: requests read and not yet answered;
//! - `queued.max.request.bytes`: request bytes read and not yet answered, broker-wide.
//!   A frame's bytes are reserved as they arrive, a read chunk at a time, so a client
//!   must really send what it holds; beyond its first 2 MiB a frame is read into a
//!   buffer of its declared size, never grown by doubling, so what large frames hold
//!   stays near the bound rather than at twice it. Frames of one chunk or less (ApiVersions, Metadata,
//!   heartbeats, commits) are not counted: clients stalled mid-way through large frames
//!   cannot lock everyone else out;
//! - `osprey.max.pending.response.bytes.per.connection`: response bytes built and not
//!   yet written to the socket, e.g. fetches pipelined by a client that does not read.
//!
//! On an SSL listener the connection first shakes hands (`crate::tls`, within its
//! deadline, holding the connection's `max.connections` slot), then the same request
//! loop runs over the TLS stream: the loop is generic over the stream's halves. On a
//! SASL listener (after TLS on SASL_SSL) the client authenticates first
//! ([`authenticate`], driving `crate::sasl`): one frame at a time, each at most
//! `sasl.server.max.receive.size`, and only then does the request loop start.

use crate::broker::Broker;
use crate::config::SaslSettings;
use crate::dispatch::{dispatch, Answer, Client, Reply};
use crate::quota;
use crate::sasl::{self, Authenticator, Session, SessionStep, Step};
use crate::send_file::{write_answer, ResponseSink, WriteError};
use crate::telemetry::{self, stages, stages::RequestTimes, InFlight};
use crate::tls::{ListenerTls, ANONYMOUS};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use osprey_protocol::frame::encode_response;
use osprey_protocol::ResponseBody;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// A frame larger than this is read at most this much at a time, each read's bytes
/// reserved against `queued.max.request.bytes` before it; smaller ones are not counted.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A frame is read into the connection's buffer until that holds this much; the rest of
/// a larger frame goes to a buffer of its own, of the frame's declared size. Below it,
/// frames stalled early hold memory shared with other connections' buffers, in
/// proportion to what they sent; a buffer of its own costs a whole 2 MiB transparent
/// huge page (the allocator's large blocks use them) as soon as it is touched.
const SHARED_BUFFER_BYTES: usize = 2 << 20;

/// A connection keeps at most this much write buffer between responses.
const RETAINED_WRITE_BUFFER_BYTES: usize = 1024 * 1024;

/// A bound client listener and its name as in `listeners` (`PLAINTEXT`, `INTERNAL`):
/// every request accepted on it is answered for that listener (the brokers' endpoints on
/// it, as Kafka's `RequestContext.listenerName`).
#[derive(Debug)]
pub struct ClientListener {
    pub name: Arc<str>,
    pub socket: TcpListener,
    /// An SSL or SASL_SSL listener's TLS; `None`: PLAINTEXT or SASL_PLAINTEXT.
    pub tls: Option<Arc<ListenerTls>>,
    /// A SASL_PLAINTEXT or SASL_SSL listener's mechanisms and users.
    pub sasl: Option<Arc<SaslSettings>>,
}

/// Accepts connections on every client listener until `shutdown` turns true, then waits
/// (up to `drain`) for open connections to finish their in-flight requests. One loop
/// serves all the listeners so that `max.connections` and `queued.max.request.bytes`
/// bound the broker as a whole, as in Kafka, not each listener.
///
/// At `max.connections` the loop stops accepting until a connection closes, as Kafka's
/// acceptor does (KIP-402): new connections wait in the listen backlog rather than being
/// closed, and are served as slots free up. The limit is the broker's
/// [`ConnectionSlots`](crate::connection_slots::ConnectionSlots), which a dynamic
/// `max.connections` resizes.
pub async fn serve(
    broker: Arc<Broker>,
    listeners: Vec<ClientListener>,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    let mut names = Vec::new();
    let mut sockets = Vec::new();
    let mut tls = Vec::new();
    let mut sasl = Vec::new();
    for l in listeners {
        if let Some(t) = &l.tls {
            tokio::spawn(t.clone().watch(shutdown.clone()));
        }
        names.push(l.name);
        sockets.push(l.socket);
        tls.push(l.tls);
        sasl.push(l.sasl);
    }
    let request_bytes =
        RequestBytes::new(broker.settings.queued_max_request_bytes, broker.settings.socket_request_max_bytes);
    let mut connections = JoinSet::new();
    let mut slot: Option<OwnedSemaphorePermit> = None;
    let mut next_listener = 0;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            permit = broker.connection_slots.acquire(), if slot.is_none() => {
                slot = Some(permit);
            }
            accepted = accept_any(&sockets, &mut next_listener), if slot.is_some() => {
                let (index, stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE/ENFILE: out of file descriptors; the connection waits
                        // in the backlog until one frees up.
                        telemetry::accept_failed(&e);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(permit) = slot.take() else { continue };
                let broker = broker.clone();
                let shutdown = shutdown.clone();
                let request_bytes = request_bytes.clone();
                let listener = names[index].clone();
                let security = Security { tls: tls[index].clone(), sasl: sasl[index].clone() };
                connections.spawn(async move {
                    telemetry::connection_opened();
                    if let Err(e) = open(broker, stream, peer, listener, security, request_bytes, shutdown).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    telemetry::connection_closed();
                    drop(permit);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(sockets);
    tracing::info!(open = connections.len(), "stopped accepting; draining connections");
    let drained = tokio::time::timeout(drain, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(open = connections.len(), "connections still open after the drain timeout; closing them");
        connections.abort_all();
    }
}

/// The next connection waiting on any of `listeners`, with the index of the listener
/// that accepted it. The listener polled first rotates (`next`), so a flood on one
/// listener cannot starve the others.
pub(crate) async fn accept_any(
    listeners: &[TcpListener],
    next: &mut usize,
) -> io::Result<(usize, TcpStream, SocketAddr)> {
    std::future::poll_fn(|cx| {
        for i in 0..listeners.len() {
            let index = (*next + i) % listeners.len();
            if let std::task::Poll::Ready(accepted) = listeners[index].poll_accept(cx) {
                *next = index + 1;
                return std::task::Poll::Ready(accepted.map(|(stream, peer)| (index, stream, peer)));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The broker-wide bound on request bytes in flight (`queued.max.request.bytes`).
#[derive(Debug, Clone)]
pub struct RequestBytes {
    semaphore: Arc<Semaphore>,
}

impl RequestBytes {
    /// `max` bytes of requests in flight across connections; `None`: no bound. A frame
    /// of up to `max_frame` bytes must always fit, so the bound is at least that.
    pub fn new(max: Option<usize>, max_frame: usize) -> RequestBytes {
        let max = max.map_or(Semaphore::MAX_PERMITS, |m| m.max(max_frame).min(Semaphore::MAX_PERMITS));
        RequestBytes { semaphore: Arc::new(Semaphore::new(max)) }
    }

    /// Nothing reserved yet (a frame of at most one read chunk, or before its body).
    fn none(&self) -> OwnedSemaphorePermit {
        self.semaphore.clone().try_acquire_many_owned(0).expect("zero permits are always there")
    }

    /// Adds `bytes` to `held`, waiting (reading paused) while the broker is at its bound.
    async fn reserve(&self, held: &mut OwnedSemaphorePermit, bytes: usize, peer: SocketAddr) {
        let permits = u32::try_from(bytes).expect("at most one frame, whose size is an i32");
        let more = match self.semaphore.clone().try_acquire_many_owned(permits) {
            Ok(permit) => permit,
            Err(_) => {
                telemetry::reading_paused("queued.max.request.bytes");
                tracing::debug!(%peer, "queued.max.request.bytes reached; reading paused");
                self.semaphore.clone().acquire_many_owned(permits).await.expect("never closed")
            }
        };
        held.merge(more);
    }
}

/// A request on its way to the writer, with the bytes it holds reserved.
struct Queued {
    api_key: Option<osprey_protocol::ApiKey>,
    api_version: i16,
    correlation_id: i32,
    times: RequestTimes,
    reply: Outgoing,
    _in_flight: InFlight,
    /// Released once the response is written (or the request needs none).
    _request_bytes: OwnedSemaphorePermit,
    _response_bytes: OwnedSemaphorePermit,
}

enum Outgoing {
    /// A response already framed (size prefix included).
    Frame(Bytes),
    /// An answer still to come, with any record bytes it leaves in files.
    Later(crate::dispatch::PendingAnswer),
    Nothing,
    Close(String),
}

/// What a listener asks of its connections before requests: TLS, SASL, both or neither.
struct Security {
    tls: Option<Arc<ListenerTls>>,
    sasl: Option<Arc<SaslSettings>>,
}

/// Serves one accepted connection: in plain TCP, or after a TLS handshake on an SSL
/// listener (a failed one closes the connection, counted and logged by `tls`); on a SASL
/// listener, once the client has authenticated.
async fn open(
    broker: Arc<Broker>,
    mut stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<str>,
    security: Security,
    request_bytes: RequestBytes,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    match security.tls {
        None => {
            let sasl = security.sasl.clone();
            let before = Client { peer, listener: listener.clone(), principal: ANONYMOUS.into() };
            let principal = principal(&broker, &mut stream, &before, sasl, &request_bytes, &mut shutdown);
            let Some(principal) = principal.await? else { return Ok(()) };
            let session = sasl_session(&broker, security.sasl, &principal);
            let client = Client { peer, listener, principal: principal.into() };
            let (rd, wr) = stream.into_split();
            connection(broker, rd, wr, client, session, request_bytes, shutdown).await
        }
        Some(tls) => {
            let idle = Duration::from_millis(broker.settings.connections_max_idle_ms);
            let Ok((mut stream, certificate)) = tls.accept(stream, peer, idle).await else { return Ok(()) };
            // On SASL_SSL the SASL user is the principal, not the certificate's, as in Kafka.
            let sasl = security.sasl.clone();
            let before = Client { peer, listener: listener.clone(), principal: certificate.into() };
            let principal = principal(&broker, &mut stream, &before, sasl, &request_bytes, &mut shutdown);
            let Some(principal) = principal.await? else { return Ok(()) };
            let session = sasl_session(&broker, security.sasl, &principal);
            let client = Client { peer, listener, principal: principal.into() };
            let (rd, wr) = tokio::io::split(stream);
            connection(broker, rd, wr, client, session, request_bytes, shutdown).await
        }
    }
}

/// An authenticated SASL connection's session (re-authentication, expiry); `None`
/// elsewhere.
fn sasl_session(broker: &Arc<Broker>, sasl: Option<Arc<SaslSettings>>, principal: &str) -> Option<Session> {
    let lifetime_ms = broker.settings.connections_max_reauth_ms;
    let scram = sasl::scram_credentials(broker);
    sasl.map(|settings| Session::new(settings, scram, lifetime_ms, principal.to_string(), crate::broker::now_ms()))
}

/// The connection's principal: on a SASL listener (`sasl` set) the user it authenticated
/// as ([`authenticate`]), elsewhere the one it has `before` (the certificate's, or
/// ANONYMOUS). `None`: the connection is to close (failed authentication, or shutdown
/// meanwhile).
async fn principal<S>(
    broker: &Arc<Broker>,
    stream: &mut S,
    before: &Client,
    sasl: Option<Arc<SaslSettings>>,
    request_bytes: &RequestBytes,
    shutdown: &mut watch::Receiver<bool>,
) -> io::Result<Option<String>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some(settings) = sasl else { return Ok(Some(before.principal.to_string())) };
    tokio::select! {
        _ = shutdown.changed() => Ok(None),
        outcome = authenticate(broker, stream, before.peer, &before.listener, settings, request_bytes) => outcome,
    }
}

/// Runs SASL authentication on a new connection of a SASL listener: the principal
/// (`User:<name>`) once the client has authenticated, `None` when the connection is to
/// close (a failed authentication, answered after
/// `connection.failed.authentication.delay.ms`; a request other than ApiVersions,
/// SaslHandshake or SaslAuthenticate; a frame over `sasl.server.max.receive.size`;
/// the client gone or idle for `connections.max.idle.ms`). Frames are read exactly,
/// never past their end, so the request loop starts on a clean stream.
async fn authenticate<S>(
    broker: &Arc<Broker>,
    stream: &mut S,
    peer: SocketAddr,
    listener: &Arc<str>,
    settings: Arc<SaslSettings>,
    request_bytes: &RequestBytes,
) -> io::Result<Option<String>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let idle = Duration::from_millis(broker.settings.connections_max_idle_ms);
    // Never more than a request may be, so that one frame always fits the bound on
    // request bytes in flight (at least `socket.request.max.bytes`).
    let max_frame = broker.settings.sasl_server_max_receive_size.min(broker.settings.socket_request_max_bytes);
    let client = Client { peer, listener: listener.clone(), principal: ANONYMOUS.into() };
    let lifetime_ms = broker.settings.connections_max_reauth_ms;
    let mut authenticator = Authenticator::new(settings, sasl::scram_credentials(broker), lifetime_ms);
    loop {
        // The frame's bytes stay reserved against queued.max.request.bytes until it is
        // answered, as a request's are after authentication.
        let (frame, _reserved) = match tokio::time::timeout(
            idle,
            read_exact_frame(stream, max_frame, request_bytes, peer),
        )
        .await
        {
            Err(_) => {
                tracing::debug!(%peer, "closing connection idle during SASL authentication (connections.max.idle.ms)");
                return Ok(None);
            }
            Ok(Ok(Some(read))) => read,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
                telemetry::sasl_protocol_violation(peer, listener, &e.to_string());
                return Ok(None);
            }
            Ok(Err(e)) => return Err(e),
        };
        match authenticator.handle(frame.clone(), &mut crate::sasl::scram::fresh_nonce) {
            Step::ApiVersions => {
                let d = dispatch(broker, frame, &client);
                let Reply::Now(body) = d.reply else { return Ok(None) };
                let response = frame_response(d.correlation_id, d.api_version, &body)
                    .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
                stream.write_all(&response).await?;
                stream.flush().await?;
            }
            Step::Send(response) => {
                stream.write_all(&response).await?;
                stream.flush().await?;
            }
            Step::Authenticated { send, principal } => {
                stream.write_all(&send).await?;
                stream.flush().await?;
                tracing::debug!(%peer, %listener, %principal, "SASL authentication succeeded");
                return Ok(Some(principal));
            }
            Step::Failed { send, mechanism, detail } => {
                telemetry::sasl_authentication_failed(peer, listener, mechanism, &detail);
                // As Kafka: the answer waits, which slows down password guessing.
                let delay = broker.settings.connection_failed_authentication_delay_ms;
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if let Some(response) = send {
                    stream.write_all(&response).await?;
                }
                let _ = stream.shutdown().await;
                return Ok(None);
            }
            Step::Close(why) => {
                telemetry::sasl_protocol_violation(peer, listener, &why);
                return Ok(None);
            }
        }
    }
}

/// Reads one frame exactly (size prefix, then as many bytes as it declares, no more);
/// `None` at a clean end of stream. A declared size over `max_frame` is `InvalidData`.
/// The body grows as bytes arrive, a read chunk at a time, each reserved against
/// `queued.max.request.bytes` first (reading waits at the bound), so unauthenticated
/// clients together hold no more than authenticated ones may; the reservation comes
/// back with the frame.
async fn read_exact_frame(
    stream: &mut (impl AsyncRead + Unpin),
    max_frame: usize,
    request_bytes: &RequestBytes,
    peer: SocketAddr,
) -> io::Result<Option<(Bytes, OwnedSemaphorePermit)>> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > max_frame {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {size} bytes is outside 0..={max_frame} (sasl.server.max.receive.size)"),
        ));
    }
    let size = size as usize;
    let mut reserved = request_bytes.none();
    let mut frame = BytesMut::new();
    while frame.len() < size {
        let chunk = (size - frame.len()).min(READ_CHUNK_BYTES);
        reserve_through(request_bytes, &mut reserved, frame.len() + chunk, peer).await;
        frame.reserve(chunk);
        if stream.read_buf(&mut (&mut frame).limit(chunk)).await? == 0 {
            return Err(closed_mid_frame());
        }
    }
    Ok(Some((frame.freeze(), reserved)))
}

async fn connection<R, W>(
    broker: Arc<Broker>,
    mut rd: R,
    wr: W,
    client: Client,
    mut session: Option<Session>,
    request_bytes: RequestBytes,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: ResponseSink,
{
    let peer = client.peer;
    let (tx, rx) = mpsc::channel::<Queued>(broker.settings.max_inflight_per_connection.max(1));
    let writer = tokio::spawn(write_loop(wr, rx, peer));
    let idle = Duration::from_millis(broker.settings.connections_max_idle_ms);
    let max_frame = broker.settings.socket_request_max_bytes;
    let max_pending_response = broker.settings.max_pending_response_bytes_per_connection.max(1);
    let pending_response = Arc::new(Semaphore::new(max_pending_response));
    let mut buf = BytesMut::new();
    let mut barrier: Option<oneshot::Receiver<()>> = None;
    let mute = Arc::new(quota::Mute::default());
    let result = loop {
        let size = tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            read = tokio::time::timeout(idle, read_size(&mut rd, &mut buf, max_frame, peer)) => match read {
                Err(_) => {
                    tracing::debug!(%peer, "closing idle connection (connections.max.idle.ms)");
                    break Ok(());
                }
                Ok(Ok(Some(size))) => size,
                Ok(Ok(None)) => break Ok(()),
                Ok(Err(e)) => break Err(e),
            },
        };
        let mut reserved = request_bytes.none();
        let frame = tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            read = tokio::time::timeout(idle, read_body(&mut rd, &mut buf, size, &request_bytes, &mut reserved, peer)) => match read {
                Err(_) => {
                    tracing::debug!(%peer, "closing connection idle mid-frame (connections.max.idle.ms)");
                    break Ok(());
                }
                Ok(Ok(frame)) => frame,
                Ok(Err(e)) => break Err(e),
            },
        };
        let mut times = RequestTimes::frame_read();
        let mut in_flight = InFlight::read();
        // Responses built and not yet written hold the connection's budget: start no
        // new request while it is spent (the client is not reading its responses).
        let mut response_bytes = tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            permit = reserve_response_bytes(&pending_response, peer) => permit,
        };
        // A SASL connection's re-authentication frames, and its expiry (KIP-368).
        let step =
            session.as_mut().map(|s| s.handle(&frame, crate::broker::now_ms(), &mut crate::sasl::scram::fresh_nonce));
        let answer = match step {
            None | Some(SessionStep::Request) => None,
            Some(SessionStep::Send(answer)) => Some((answer, false)),
            Some(SessionStep::Reauthenticated(answer)) => {
                tracing::debug!(%peer, listener = %client.listener, principal = %client.principal, "SASL re-authentication succeeded");
                Some((answer, false))
            }
            Some(SessionStep::Failed { send, mechanism, detail }) => {
                telemetry::sasl_authentication_failed(peer, &client.listener, mechanism, &detail);
                let delay = broker.settings.connection_failed_authentication_delay_ms;
                tokio::time::sleep(Duration::from_millis(delay)).await;
                match send {
                    Some(answer) => Some((answer, true)),
                    None => break Ok(()),
                }
            }
            Some(SessionStep::Close(why)) => {
                telemetry::sasl_protocol_violation(peer, &client.listener, &why);
                break Ok(());
            }
        };
        if let Some((answer, closing)) = answer {
            let queued = Queued {
                api_key: None,
                api_version: 0,
                correlation_id: 0,
                times,
                reply: Outgoing::Frame(answer),
                _in_flight: in_flight,
                _request_bytes: reserved,
                _response_bytes: response_bytes,
            };
            if tx.send(queued).await.is_err() || closing {
                break Ok(());
            }
            continue;
        }
        // A client over its quota is muted (KIP-219): its next request waits out the
        // throttle time of the last response.
        tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            () = mute.wait() => {}
        }
        times.handler_started();
        in_flight.handler_started();
        let started = std::time::Instant::now();
        let mut d = dispatch(&broker, frame, &client);
        if let Some(metered) = d.metered.take() {
            let reply = std::mem::replace(&mut d.reply, Reply::Nothing);
            d.reply = quota::throttle(&broker, &client.principal, metered, started.elapsed(), reply, &mute);
        }
        times.handler_returned();
        let closing = matches!(d.reply, Reply::Close(_));
        let reply = match d.reply {
            Reply::Now(body) => match frame_response(d.correlation_id, d.api_version, &body) {
                Ok(frame) => {
                    // Hold what the response weighs, as far as the budget has it: one
                    // response larger than the whole budget still goes out, alone.
                    let wanted = frame.len().min(max_pending_response).saturating_sub(1);
                    let extra = wanted.min(pending_response.available_permits());
                    if let Ok(more) = pending_response.clone().try_acquire_many_owned(extra as u32) {
                        response_bytes.merge(more);
                    }
                    Outgoing::Frame(frame)
                }
                Err(why) => Outgoing::Close(why),
            },
            Reply::Later(pending) => Outgoing::Later(Box::pin(async move { Answer::from(pending.await) })),
            Reply::Records(pending) => Outgoing::Later(pending),
            Reply::Ordered(pending) => {
                let (done, effect) = oneshot::channel();
                barrier = Some(effect);
                Outgoing::Later(Box::pin(async move {
                    let body = pending.await;
                    let _ = done.send(());
                    Answer::from(body)
                }))
            }
            Reply::Nothing => Outgoing::Nothing,
            Reply::Close(why) => Outgoing::Close(why),
        };
        let queued = Queued {
            api_key: d.api_key,
            api_version: d.api_version,
            correlation_id: d.correlation_id,
            times,
            reply,
            _in_flight: in_flight,
            _request_bytes: reserved,
            _response_bytes: response_bytes,
        };
        if tx.send(queued).await.is_err() || closing {
            break Ok(());
        }
        // An ordered reply's effect comes before the next request is even read.
        if let Some(effect) = barrier.take() {
            tokio::select! {
                _ = shutdown.changed() => break Ok(()),
                // An error: the writer is gone with the connection, and so is the order.
                _ = effect => {}
            }
        }
    };
    drop(tx);
    let _ = writer.await;
    // A share session opened on this connection ends with it, releasing its records.
    let connection = crate::share_sessions::ConnectionKey { listener: client.listener.clone(), peer };
    broker.share_partitions.disconnected(&broker, &connection);
    result
}

/// Takes one byte of the connection's pending-response budget, waiting (reading
/// paused) while responses not yet written hold all of it.
async fn reserve_response_bytes(budget: &Arc<Semaphore>, peer: SocketAddr) -> OwnedSemaphorePermit {
    match budget.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => {
            telemetry::reading_paused("osprey.max.pending.response.bytes.per.connection");
            tracing::debug!(%peer, "responses not yet written fill the connection's budget; reading paused");
            budget.clone().acquire_owned().await.expect("never closed")
        }
    }
}

/// Frames a response answered at once: size prefix, header, body. (Answers with records,
/// a Fetch's, come later and are written by `send_file::write_answer`, which leaves large
/// records out of the buffer.)
fn frame_response(correlation_id: i32, api_version: i16, body: &ResponseBody) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    // A handler built a response its version cannot carry: a bug, not the client's.
    encode_response(correlation_id, api_version, body, &mut out)
        .map_err(|e| format!("response does not encode (a bug): {e}"))?;
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

/// Reads the next frame's size prefix; `None` at a clean end of stream.
async fn read_size(
    rd: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    max_frame: usize,
    peer: SocketAddr,
) -> io::Result<Option<usize>> {
    while buf.len() < 4 {
        buf.reserve(4096);
        if rd.read_buf(buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-frame"))
            };
        }
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 0 || size as usize > max_frame {
        telemetry::frame_rejected(peer, size, max_frame);
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {size} bytes is outside 0..={max_frame} (socket.request.max.bytes)"),
        ));
    }
    Ok(Some(size as usize))
}

/// Reads the body of a frame whose size prefix is at the front of `buf`, reserving the
/// bytes of a frame larger than one read chunk against `queued.max.request.bytes`, a
/// chunk at a time before reading it. A frame is read into `buf` until `buf` holds
/// [`SHARED_BUFFER_BYTES`]; the rest of a larger one goes to a buffer of its own,
/// allocated once at the declared size, so that it never grows by doubling (which left a
/// stale copy at each step). Its memory is used only as bytes land in it (pages are
/// touched as they are written), so a client that declares 100 MB and sends little
/// holds little. Either way the frame comes back as one `Bytes`, which the decoder
/// slices without copying.
async fn read_body(
    rd: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    size: usize,
    request_bytes: &RequestBytes,
    reserved: &mut OwnedSemaphorePermit,
    peer: SocketAddr,
) -> io::Result<Bytes> {
    let counted = size > READ_CHUNK_BYTES;
    let in_buf = (4 + size).min(SHARED_BUFFER_BYTES);
    if counted {
        // Bytes of this frame that came with an earlier read.
        reserve_through(request_bytes, reserved, (buf.len() - 4).min(size), peer).await;
    }
    while buf.len() < in_buf {
        let chunk = (in_buf - buf.len()).min(READ_CHUNK_BYTES);
        if counted {
            reserve_through(request_bytes, reserved, buf.len() - 4 + chunk, peer).await;
        }
        buf.reserve(chunk);
        // A counted frame is read no further than reserved (and never past its end).
        let limit = if counted { chunk } else { usize::MAX };
        if rd.read_buf(&mut (&mut *buf).limit(limit)).await? == 0 {
            return Err(closed_mid_frame());
        }
    }
    buf.advance(4);
    if buf.len() >= size {
        return Ok(buf.split_to(size).freeze());
    }
    let mut frame = BytesMut::with_capacity(size);
    frame.extend_from_slice(buf);
    // `buf` held only this frame and grew for it: let it go rather than keep it for the
    // connection's life.
    *buf = BytesMut::new();
    while frame.len() < size {
        let chunk = (size - frame.len()).min(READ_CHUNK_BYTES);
        reserve_through(request_bytes, reserved, frame.len() + chunk, peer).await;
        if rd.read_buf(&mut (&mut frame).limit(chunk)).await? == 0 {
            return Err(closed_mid_frame());
        }
    }
    Ok(frame.freeze())
}

/// Tops up what the frame has reserved to `bytes`.
async fn reserve_through(
    request_bytes: &RequestBytes,
    reserved: &mut OwnedSemaphorePermit,
    bytes: usize,
    peer: SocketAddr,
) {
    let wanted = bytes.saturating_sub(reserved.num_permits());
    if wanted > 0 {
        request_bytes.reserve(reserved, wanted, peer).await;
    }
}

fn closed_mid_frame() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-frame")
}

async fn write_loop(mut wr: impl ResponseSink, mut rx: mpsc::Receiver<Queued>, peer: SocketAddr) {
    let mut out = BytesMut::new();
    while let Some(mut q) = rx.recv().await {
        q.times.taken_up();
        let written = match q.reply {
            Outgoing::Frame(frame) => wr.write_all(&frame).await.map(|()| frame.len()),
            Outgoing::Later(pending) => {
                let (answer, remote) = stages::measured(pending).await;
                q.times.deferred_returned(remote);
                let written = write_answer(&mut wr, q.correlation_id, q.api_version, &answer, &mut out).await;
                if out.capacity() > RETAINED_WRITE_BUFFER_BYTES {
                    // One large fetch response must not pin its buffer for the connection's life.
                    out = BytesMut::new();
                }
                match written {
                    Ok(bytes) => Ok(bytes),
                    Err(WriteError::Io(e)) => Err(e),
                    Err(WriteError::Encode(why)) => {
                        tracing::error!(%peer, api = q.api_key.map(|k| k.name()), version = q.api_version, error = %why, "closing");
                        break;
                    }
                }
            }
            Outgoing::Nothing => {
                q.times.written();
                telemetry::request_done(q.api_key, q.api_version, &q.times, 0);
                continue;
            }
            Outgoing::Close(why) => {
                tracing::warn!(%peer, api = q.api_key.map(|k| k.name()), version = q.api_version, reason = %why, "closing connection");
                telemetry::request_failed(q.api_key, q.api_version);
                break;
            }
        };
        match written {
            Ok(bytes) => {
                q.times.written();
                telemetry::request_done(q.api_key, q.api_version, &q.times, bytes);
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "write failed");
                break;
            }
        }
    }
    let _ = wr.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::{read_exact_frame, RequestBytes};
    use std::net::SocketAddr;
    use tokio::io::AsyncWriteExt;

    /// An unauthenticated frame holds its bytes against `queued.max.request.bytes`
    /// until it is answered: a second connection's frame is not read meanwhile, and is
    /// once the first is let go.
    #[tokio::test(flavor = "current_thread")]
    async fn unauthenticated_frames_are_bounded_by_the_request_bytes_in_flight() {
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let frame = 300 * 1024;
        let bound = RequestBytes::new(Some(400 * 1024), 400 * 1024);
        let mut sent = Vec::new();
        sent.extend_from_slice(&(frame as i32).to_be_bytes());
        sent.resize(4 + frame, 7);
        let (mut first_client, mut first) = tokio::io::duplex(1 << 20);
        let (mut second_client, mut second) = tokio::io::duplex(1 << 20);
        first_client.write_all(&sent).await.unwrap();
        second_client.write_all(&sent).await.unwrap();

        let (bytes, held) = read_exact_frame(&mut first, frame, &bound, peer).await.unwrap().unwrap();
        assert_eq!(bytes.len(), frame);
        assert_eq!(held.num_permits(), frame);
        let mut reading = std::pin::pin!(read_exact_frame(&mut second, frame, &bound, peer));
        assert!(
            futures_poll_once(reading.as_mut()).await.is_none(),
            "the second frame waits while the first holds its bytes"
        );
        drop(held);
        let (bytes, _held) = reading.await.unwrap().unwrap();
        assert_eq!(bytes.len(), frame);
    }

    /// Polls a future once: its output if it is ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
