//! The controller listeners (`controller.listener.names`) of a node with the broker role,
//! until such nodes run the controller quorum (issue 14; a controller-only node already
//! serves its CONTROLLER listener with `controller_node::listener`): bound, so their
//! ports are taken, checked and reported at start-up,
//! and every connection is accepted and closed at once. Nothing is advertised for them:
//! Metadata never lists a controller listener, and no Kafka API is served here yet, so a
//! client that connects learns at once that there is nothing to talk to rather than
//! waiting for a response that never comes.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::network::accept_any;

/// Accepts and closes connections on `listeners` until `shutdown` turns true.
pub async fn serve(listeners: Vec<TcpListener>, mut shutdown: watch::Receiver<bool>) {
    if listeners.is_empty() {
        return;
    }
    let mut next = 0;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = accept_any(&listeners, &mut next) => match accepted {
                Ok((_, stream, peer)) => {
                    tracing::debug!(%peer, "controller listener: no controller quorum yet (issue 14); closing");
                    drop(stream);
                }
                Err(e) => {
                    // EMFILE and the like: the connection waits in the backlog.
                    tracing::debug!(error = %e, "controller listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}
