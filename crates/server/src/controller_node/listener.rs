//! The CONTROLLER listener (`controller.listener.names`): Kafka framing with the client
//! listener's bounds. A frame's declared size is checked against
//! `socket.request.max.bytes` before anything is read for it, and its buffer grows with
//! the bytes that really arrive, not with the size declared; at `max.connections` open
//! connections the loop stops accepting until one closes (new ones wait in the backlog);
//! at most `max_in_flight` requests per connection are read and not yet answered, and
//! answers go out in request order. A connection's requests are handled one after
//! another, each once the one before it is answered: openraft's RPCs from one peer must
//! reach the quorum in the order sent, and Kafka's controller handles a connection's
//! requests in order. What is bounded differently from the client listener:
//! `queued.max.request.bytes` does not count these frames (a controller serves a few
//! peers and tools, not clients). On an SSL controller listener a connection first
//! shakes hands within the client listener's handshake deadline, its failures counted in
//! `osprey_tls_handshake_failures_total` as theirs are.

use super::requests::{self, Handled};
use super::NodeState;
use bytes::{Buf, BufMut, BytesMut};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};

/// What one read may add to a frame's buffer at most: a frame declared large holds only
/// what has arrived.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The listener's bounds, each named as the config key it comes from.
#[derive(Debug, Clone, Copy)]
pub struct ListenerLimits {
    /// `socket.request.max.bytes`: the largest frame read.
    pub socket_request_max_bytes: usize,
    /// `max.connections`: open connections on the controller listeners together.
    pub max_connections: usize,
    /// `osprey.max.inflight.requests.per.connection`: requests read and not yet answered.
    pub max_in_flight_per_connection: usize,
    /// `connections.max.idle.ms`: a connection silent this long is closed.
    pub connections_max_idle_ms: u64,
}

/// The read and write halves of a connection, plain TCP or TLS.
type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// Serves `listeners` until `shutdown` turns true; `tls`: the listener is an SSL one.
pub async fn serve(
    listeners: Vec<TcpListener>,
    node: Arc<NodeState>,
    limits: ListenerLimits,
    tls: Option<Arc<crate::tls::ListenerTls>>,
    mut shutdown: watch::Receiver<bool>,
) {
    if listeners.is_empty() {
        return;
    }
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut next = 0;
    loop {
        let slot = tokio::select! {
            _ = shutdown.changed() => return,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.changed() => return,
            accepted = crate::network::accept_any(&listeners, &mut next) => accepted,
        };
        match accepted {
            Ok((_, stream, peer)) => {
                let node = node.clone();
                let shutdown = shutdown.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let idle = Duration::from_millis(limits.connections_max_idle_ms.max(1));
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(%peer, error = %e, "controller connection closed");
                        return;
                    }
                    let (rd, wr, principal): (ReadHalf, WriteHalf, String) = match tls {
                        None => {
                            let (rd, wr) = stream.into_split();
                            (Box::new(rd), Box::new(wr), crate::tls::ANONYMOUS.to_string())
                        }
                        // A failed handshake is counted and logged by `accept`.
                        Some(tls) => match tls.accept(stream, peer, idle).await {
                            Ok((stream, principal)) => {
                                let (rd, wr) = tokio::io::split(stream);
                                (Box::new(rd), Box::new(wr), principal)
                            }
                            Err(_) => return,
                        },
                    };
                    let from = requests::Peer { principal: principal.into(), address: peer };
                    if let Err(e) = connection(rd, wr, from, node, limits, shutdown).await {
                        tracing::debug!(%peer, error = %e, "controller connection closed");
                    }
                    drop(slot);
                });
            }
            Err(e) => {
                // EMFILE and the like: the connection waits in the backlog.
                tracing::debug!(error = %e, "controller listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(
    mut rd: ReadHalf,
    mut wr: WriteHalf,
    from: requests::Peer,
    node: Arc<NodeState>,
    limits: ListenerLimits,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let peer = from.address;
    let (tx, mut rx) = mpsc::channel::<Handled>(limits.max_in_flight_per_connection.max(1));
    let writer = tokio::spawn(async move {
        let mut out = BytesMut::new();
        while let Some(handled) = rx.recv().await {
            let answer = match handled {
                Handled::Answer(answer) => answer.await,
                Handled::Close(why) => Err(why),
            };
            let body = match answer {
                Ok(body) => body,
                Err(why) => {
                    tracing::warn!(%peer, reason = %why, "controller listener: closing connection");
                    break;
                }
            };
            out.clear();
            out.put_i32(body.len() as i32);
            out.extend_from_slice(&body);
            if wr.write_all(&out).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let idle = Duration::from_millis(limits.connections_max_idle_ms.max(1));
    let mut buf = BytesMut::new();
    let result = loop {
        let frame = tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            read = tokio::time::timeout(idle, read_frame(&mut rd, &mut buf, limits.socket_request_max_bytes)) => match read {
                Err(_) => break Ok(()),
                Ok(Ok(Some(frame))) => frame,
                Ok(Ok(None)) => break Ok(()),
                Ok(Err(e)) => break Err(e),
            },
        };
        let handled = requests::handle(&node, frame.freeze(), &from);
        let closing = matches!(handled, Handled::Close(_));
        // Waits (reading paused) while `max_in_flight` answers are pending.
        if tx.send(handled).await.is_err() || closing {
            break Ok(());
        }
    };
    drop(tx);
    let _ = writer.await;
    result
}

/// Reads the next frame (without its size prefix); `None` at a clean end of stream.
async fn read_frame(rd: &mut ReadHalf, buf: &mut BytesMut, max_frame: usize) -> io::Result<Option<BytesMut>> {
    while buf.len() < 4 {
        buf.reserve(4096);
        if rd.read_buf(buf).await? == 0 {
            return if buf.is_empty() { Ok(None) } else { Err(closed_mid_frame()) };
        }
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    // Checked before reading or allocating anything for the frame.
    if size < 0 || size as usize > max_frame {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {size} bytes is outside 0..={max_frame} (socket.request.max.bytes)"),
        ));
    }
    let size = size as usize;
    while buf.len() < 4 + size {
        let chunk = (4 + size - buf.len()).min(READ_CHUNK_BYTES);
        buf.reserve(chunk);
        if rd.read_buf(&mut (&mut *buf).limit(chunk)).await? == 0 {
            return Err(closed_mid_frame());
        }
    }
    buf.advance(4);
    Ok(Some(buf.split_to(size)))
}

fn closed_mid_frame() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-frame")
}
