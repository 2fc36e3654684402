//! The broker follows the committed metadata log: it fetches the records past the last
//! one it applied from a controller (the active one when known), applies them to its own
//! copy of the image in order, and publishes each new image to the broker, which opens
//! and closes partition logs for it before anything else reads it. The published image's
//! offset is what the heartbeats report (`lifecycle.rs`), so the controller unfences the
//! broker only once its logs are open for everything it has been told.

use super::ClusterLink;
use crate::controller_node::rpc;
use osprey_cluster::quorum::{MetadataFetchContent, MetadataFetchRequest, MetadataFetchResponse};
use osprey_cluster::MetadataImage;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Publishes an image to the broker (opening logs may block: it runs on the blocking
/// pool) and resolves once the broker serves from it.
pub type Publisher = Arc<dyn Fn(Arc<MetadataImage>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The most records asked for in one fetch.
const MAX_RECORDS_PER_FETCH: u32 = 10_000;

/// The pause after a failed fetch, before the next controller is asked.
const FETCH_BACKOFF: Duration = Duration::from_millis(200);

impl ClusterLink {
    /// Follows the metadata log until `stopped`, publishing every new image.
    pub async fn follow(self: Arc<Self>, publish: Publisher, mut stopped: watch::Receiver<bool>) {
        let mut image = MetadataImage::clone(&self.published());
        let mut failures = 0u32;
        loop {
            if *stopped.borrow() {
                return;
            }
            let fetched = tokio::select! {
                fetched = self.fetch_once(image.applied) => fetched,
                _ = stopped.changed() => return,
            };
            match fetched {
                Ok(response) => {
                    failures = 0;
                    self.set_leader(response.leader.as_ref().map(|l| l.node_id));
                    if let MetadataFetchContent::NotReady { why } = &response.content {
                        tracing::debug!(why, "controller cannot serve metadata yet");
                        self.forget_leader(self.target());
                        tokio::time::sleep(FETCH_BACKOFF).await;
                        continue;
                    }
                    match response.content.apply_to(&mut image) {
                        Ok(false) => {}
                        Ok(true) => {
                            publish(Arc::new(image.clone())).await;
                            self.published.send_replace(Arc::new(image.clone()));
                            metrics::gauge!("osprey_broker_metadata_offset").set(image.applied as f64 - 1.0);
                        }
                        Err(gap) => {
                            tracing::warn!(error = %gap, "metadata fetch out of order; fetching again");
                            tokio::time::sleep(FETCH_BACKOFF).await;
                        }
                    }
                }
                Err(why) => {
                    failures += 1;
                    metrics::counter!("osprey_broker_metadata_fetch_failures_total").increment(1);
                    // The first failures of a controller going away are expected; a long
                    // run of them is not.
                    if failures == 10 || failures.is_multiple_of(100) {
                        tracing::warn!(failures, error = %why, "cannot fetch the metadata log from any controller");
                    } else {
                        tracing::debug!(error = %why, "metadata fetch failed");
                    }
                    self.forget_leader(self.target());
                    tokio::time::sleep(FETCH_BACKOFF).await;
                }
            }
        }
    }

    /// The cluster id, from the first records of the metadata log (the quorum commits
    /// it first), fetched from the controllers until one serves it; `None` if `stopped`
    /// first. Says every few seconds that it is still waiting, and why.
    pub async fn learn_cluster_id(&self, mut stopped: watch::Receiver<bool>) -> Option<String> {
        let mut image = MetadataImage::default();
        let started = tokio::time::Instant::now();
        let mut reported = started;
        loop {
            let fetched = tokio::select! {
                fetched = self.fetch_once(image.applied) => fetched,
                _ = stopped.changed() => return None,
            };
            let why = match fetched {
                Ok(response) => {
                    self.set_leader(response.leader.as_ref().map(|l| l.node_id));
                    match response.content {
                        MetadataFetchContent::NotReady { why } => why,
                        content => match content.apply_to(&mut image) {
                            Ok(_) => match &image.cluster_id {
                                Some(id) => return Some(id.clone()),
                                None => "the metadata log has no cluster id yet".into(),
                            },
                            Err(gap) => gap.to_string(),
                        },
                    }
                }
                Err(why) => why,
            };
            self.forget_leader(self.target());
            if reported.elapsed() >= Duration::from_secs(5) {
                reported = tokio::time::Instant::now();
                tracing::info!(
                    waited_s = started.elapsed().as_secs(),
                    last = %why,
                    "waiting for the controller quorum (controller.quorum.voters) to form"
                );
            }
            tokio::select! {
                _ = tokio::time::sleep(FETCH_BACKOFF) => {}
                _ = stopped.changed() => return None,
            }
        }
    }

    /// One fetch of the records from `next_offset`, from the controller to ask next.
    async fn fetch_once(&self, next_offset: u64) -> Result<MetadataFetchResponse, String> {
        let index = self.target();
        let (node_id, address) = self.config.controllers[index % self.config.controllers.len()].clone();
        let client = self.fetcher.client(node_id, address);
        if client.backing_off() {
            // Unreachable now (a killed controller): the next one is asked after the
            // caller's pause rather than after this one's reconnect back-off.
            return Err(format!("controller {node_id} is unreachable (reconnect back-off)"));
        }
        let request = MetadataFetchRequest {
            broker_id: self.config.node_id,
            next_offset,
            max_wait_ms: self.config.fetch_max_wait.as_millis() as u64,
            max_records: MAX_RECORDS_PER_FETCH,
        };
        let body = rpc::encode_fetch(&request);
        let answer = client
            .send_raw(rpc::METADATA_FETCH, rpc::VERSION, body)
            .await
            .map_err(|e| format!("controller {node_id}: {e}"))?;
        if answer.is_empty() {
            return Err(format!("controller {node_id} does not serve metadata fetches"));
        }
        serde_json::from_slice(&answer)
            .map_err(|e| format!("controller {node_id}: malformed metadata fetch answer: {e}"))
    }

    /// Waits until this broker's published image has reached the active controller's
    /// applied offset as of now (or `deadline`): after a write the controller answered,
    /// this broker's next answers show it. Returns whether it got there.
    pub async fn catch_up_with_controller(&self, deadline: tokio::time::Instant) -> bool {
        let Some(target) = self.controller_applied(deadline).await else { return false };
        let mut published = self.watch_published();
        let reached = published.wait_for(|image| image.applied >= target);
        tokio::time::timeout_at(deadline, reached).await.is_ok_and(|r| r.is_ok())
    }

    /// The active controller's applied offset: a fetch that does not wait.
    async fn controller_applied(&self, deadline: tokio::time::Instant) -> Option<u64> {
        let leader = *self.leader.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let index = leader?;
        let (node_id, address) = self.config.controllers[index].clone();
        let client = self.to_controller.client(node_id, address);
        let request = MetadataFetchRequest {
            broker_id: self.config.node_id,
            next_offset: u64::MAX,
            max_wait_ms: 0,
            max_records: 0,
        };
        let body = rpc::encode_fetch(&request);
        let sent = client.send_raw(rpc::METADATA_FETCH, rpc::VERSION, body);
        let answer = tokio::time::timeout_at(deadline, sent).await.ok()?.ok()?;
        let response = rpc::decode_fetch_response(&answer, self.config.max_response_bytes).ok()?;
        Some(response.applied)
    }
}
