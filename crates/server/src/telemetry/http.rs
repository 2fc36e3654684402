//! The `/metrics` listener: the metrics crate's series as the Prometheus exporter renders
//! them, followed by the families rendered here ([`super::process`]). Any path answers
//! the scrape, as the exporter's own listener did.
//!
//! Bounded as every listener here: at most [`MAX_CONNECTIONS`] at once (more wait in the
//! backlog), one request per connection, and a client that does not send its request
//! headers within [`HEADER_READ_TIMEOUT`] is dropped.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Scrapes served at once; Prometheus sends one at a time per target.
const MAX_CONNECTIONS: usize = 16;

/// A connection that has not sent its request headers by then is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` now (so a port in use is a startup error) and serves scrapes on the
/// current tokio runtime, whose workers' metrics the scrape shows.
pub(super) fn serve(addr: SocketAddr, handle: PrometheusHandle) -> Result<(), String> {
    let bound = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(TcpListener::from_std)
        .map_err(|e| format!("metrics listener {addr}: {e}"))?;
    let runtime = tokio::runtime::Handle::current().metrics();
    tokio::spawn(accept_loop(bound, handle, runtime));
    Ok(())
}

async fn accept_loop(listener: TcpListener, handle: PrometheusHandle, runtime: tokio::runtime::RuntimeMetrics) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, most likely: the broker's own accept loop
                // logs that; try again shortly.
                tracing::debug!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (handle, runtime) = (handle.clone(), runtime.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| scrape(request, handle.clone(), runtime.clone()));
            let served = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "metrics listener: connection failed");
            }
            drop(slot);
        });
    }
}

/// One scrape, rendered on the blocking pool: rendering every series and reading /proc
/// must not hold up an async worker.
async fn scrape(
    _request: Request<Incoming>,
    handle: PrometheusHandle,
    runtime: tokio::runtime::RuntimeMetrics,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let rendered = tokio::task::spawn_blocking(move || {
        let mut text = handle.render();
        super::process::render(&mut text, &runtime);
        text
    })
    .await
    // Only at runtime shutdown (a panic aborts the process).
    .unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(rendered)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    Ok(response)
}
