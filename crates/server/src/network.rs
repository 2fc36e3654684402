//! Sockets: the accept loop and one task pair per connection.
//!
//! A connection's reader parses frames and runs each request's synchronous part in
//! arrival order (so two produce requests to one partition append in the order sent);
//! the writer sends responses strictly in request order, awaiting any that wait for
//! fsync or fetch data. The queue between them is bounded by
//! `osprey.max.inflight.requests.per.connection`: when full, the reader stops reading.

use crate::broker::Broker;
use crate::dispatch::{dispatch, Dispatched, Reply};
use crate::telemetry;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use osprey_protocol::frame::encode_response;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;

/// Read buffers grow by at most this much per read, so a frame's declared size is
/// never allocated before its bytes actually arrive.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A connection keeps at most this much write buffer between responses.
const RETAINED_WRITE_BUFFER_BYTES: usize = 1024 * 1024;

/// Accepts connections until `shutdown` turns true, then waits (up to `drain`) for open
/// connections to finish their in-flight requests.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, mut shutdown: watch::Receiver<bool>, drain: Duration) {
    let slots = Arc::new(Semaphore::new(broker.settings.max_connections));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, max = broker.settings.max_connections, "max.connections reached; closing new connection");
                    continue;
                };
                let broker = broker.clone();
                let shutdown = shutdown.clone();
                connections.spawn(async move {
                    telemetry::connection_opened();
                    if let Err(e) = connection(broker, stream, peer, shutdown).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    telemetry::connection_closed();
                    drop(permit);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    tracing::info!(open = connections.len(), "stopped accepting; draining connections");
    let drained = tokio::time::timeout(drain, async { while connections.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(open = connections.len(), "connections still open after the drain timeout; closing them");
        connections.abort_all();
    }
}

async fn connection(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel::<(Dispatched, Instant)>(broker.settings.max_inflight_per_connection.max(1));
    let writer = tokio::spawn(write_loop(wr, rx, peer));
    let idle = Duration::from_millis(broker.settings.connections_max_idle_ms);
    let max_frame = broker.settings.socket_request_max_bytes;
    let mut buf = BytesMut::new();
    let result = loop {
        let frame = tokio::select! {
            _ = shutdown.changed() => break Ok(()),
            read = tokio::time::timeout(idle, read_frame(&mut rd, &mut buf, max_frame)) => match read {
                Err(_) => {
                    tracing::debug!(%peer, "closing idle connection (connections.max.idle.ms)");
                    break Ok(());
                }
                Ok(Ok(Some(frame))) => frame,
                Ok(Ok(None)) => break Ok(()),
                Ok(Err(e)) => break Err(e),
            },
        };
        let started = Instant::now();
        let dispatched = dispatch(&broker, frame, peer);
        let closing = matches!(dispatched.reply, Reply::Close(_));
        if tx.send((dispatched, started)).await.is_err() || closing {
            break Ok(());
        }
    };
    drop(tx);
    let _ = writer.await;
    result
}

/// Reads one size-prefixed frame; `None` at a clean end of stream.
async fn read_frame(rd: &mut OwnedReadHalf, buf: &mut BytesMut, max_frame: usize) -> io::Result<Option<Bytes>> {
    loop {
        if buf.len() >= 4 {
            let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if size < 0 || size as usize > max_frame {
                telemetry::frame_rejected();
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("frame of {size} bytes is outside 0..={max_frame} (socket.request.max.bytes)"),
                ));
            }
            let total = 4 + size as usize;
            if buf.len() >= total {
                buf.advance(4);
                return Ok(Some(buf.split_to(size as usize).freeze()));
            }
            buf.reserve((total - buf.len()).min(READ_CHUNK_BYTES));
        } else {
            buf.reserve(4096);
        }
        if rd.read_buf(buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-frame"))
            };
        }
    }
}

async fn write_loop(mut wr: OwnedWriteHalf, mut rx: mpsc::Receiver<(Dispatched, Instant)>, peer: SocketAddr) {
    let mut out = BytesMut::new();
    while let Some((d, started)) = rx.recv().await {
        let body = match d.reply {
            Reply::Now(body) => body,
            Reply::Later(pending) => pending.await,
            Reply::Nothing => {
                telemetry::request_done(d.api_key, d.api_version, started, 0);
                continue;
            }
            Reply::Close(why) => {
                tracing::warn!(%peer, api = d.api_key.map(|k| k.name()), version = d.api_version, reason = %why, "closing connection");
                telemetry::request_failed(d.api_key, d.api_version);
                break;
            }
        };
        out.clear();
        out.put_i32(0);
        if let Err(e) = encode_response(d.correlation_id, d.api_version, &body, &mut out) {
            // A handler built a response its version cannot carry: a bug, not the client's.
            tracing::error!(%peer, api = d.api_key.map(|k| k.name()), version = d.api_version, error = %e, "response does not encode; closing");
            break;
        }
        let size = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&size.to_be_bytes());
        if let Err(e) = wr.write_all(&out).await {
            tracing::debug!(%peer, error = %e, "write failed");
            break;
        }
        telemetry::request_done(d.api_key, d.api_version, started, out.len());
        if out.capacity() > RETAINED_WRITE_BUFFER_BYTES {
            // One large fetch response must not pin its buffer for the connection's life.
            out = BytesMut::new();
        }
    }
    let _ = wr.shutdown().await;
}
