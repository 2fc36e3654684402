//! The broker side of a cluster (issue 14, "Brokers"): how a broker of a multi-node
//! cluster reaches the controller quorum, as Kafka's `BrokerLifecycleManager`,
//! `NodeToControllerChannelManager` and metadata loader do.
//!
//! - `follower.rs`: the broker follows the committed metadata log by fetching it from a
//!   controller (`METADATA_FETCH`, crates/cluster/src/quorum/fetch.rs), the active one
//!   when known, and hands every new image to the broker, which opens and closes
//!   partition logs from it ([`crate::broker::Broker::publish`]);
//! - `lifecycle.rs`: registration (BrokerRegistration), heartbeats (BrokerHeartbeat)
//!   with the offset of the last record applied, fencing and controlled shutdown;
//! - `admin.rs`: what a single node's controller did in-process (create, delete and
//!   alter topics, configs, producer id blocks) becomes a Kafka request to the active
//!   controller, answered once this broker's own image shows the change.
//!
//! Every request to the controller goes to the active controller when the metadata
//! fetches named one, else to each voter in turn: a voter that is not active answers
//! NOT_CONTROLLER and the next is tried, until the request's deadline.

mod admin;
mod follower;
mod lifecycle;

pub use admin::{BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE};
pub use follower::Publisher;
pub use lifecycle::Registration;

use crate::interbroker::{client_id, ClientConfig, ClientError, NodeAddress, NodeClients, Response};
use osprey_cluster::{BrokerListener, MetadataImage};
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How a broker takes part in a cluster, from its configuration (Kafka's names).
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// `node.id`.
    pub node_id: i32,
    /// `controller.quorum.voters`: each controller's node id and CONTROLLER endpoint.
    pub controllers: Vec<(i32, NodeAddress)>,
    /// The listeners registered for clients and other brokers (`advertised.listeners`
    /// without the controller's).
    pub listeners: Vec<BrokerListener>,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// The directory ids of `log.dirs`, registered as Kafka's `LogDirs`.
    pub log_dir_ids: Vec<osprey_protocol::Uuid>,
    /// `broker.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `broker.session.timeout.ms`, as the controller applies it: the length of the
    /// broker's lease (`lifecycle`). A controller configured with a shorter session than
    /// its brokers would break the lease: the deploy configs set neither.
    pub session_timeout: Duration,
    /// `request.timeout.ms`: the longest a request to the controller is retried.
    pub request_timeout: Duration,
    /// How long a metadata fetch may wait at the controller for a new record.
    pub fetch_max_wait: Duration,
    /// `socket.request.max.bytes`: the largest answer read from a controller.
    pub max_response_bytes: usize,
    /// TLS to the controllers, when the controller listener is an SSL one.
    pub controller_tls: Option<crate::tls::InterBrokerTls>,
}

/// A broker's link to the controller quorum. Cheap to share (`Arc`).
pub struct ClusterLink {
    config: LinkConfig,
    /// Requests to the active controller (client id: the bare node id, as Kafka's).
    to_controller: NodeClients,
    /// Metadata fetches: a connection of their own, since a long poll held on the
    /// controller's connection would hold up the heartbeat answers behind it.
    fetcher: NodeClients,
    /// Index into `controllers` of the active controller as last heard, and of the next
    /// controller to try when none is known.
    leader: Mutex<Option<usize>>,
    next: AtomicUsize,
    /// The image the broker has published (its logs opened for it).
    published: watch::Sender<Arc<MetadataImage>>,
    /// Registration and heartbeat state.
    registration: watch::Sender<Registration>,
    /// Set when the broker asks for a controlled shutdown.
    shutting_down: watch::Sender<bool>,
    /// The runtime the link's requests run on (see `admin.rs`).
    runtime: tokio::runtime::Handle,
    /// The broker epoch this node had when it last stopped cleanly (from the data
    /// directory's clean-shutdown marker), -1 after an unclean stop: registration's
    /// `previous_broker_epoch` (KIP-966).
    previous_broker_epoch: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for ClusterLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterLink").field("node_id", &self.config.node_id).finish_non_exhaustive()
    }
}

/// Why a request to the controller failed for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerUnreachable {
    #[error("no active controller answered within {0:?}: {1}")]
    TimedOut(Duration, String),
}

impl ClusterLink {
    /// A link for this broker. Call inside the Tokio runtime its requests will run on.
    pub fn new(config: LinkConfig) -> Arc<ClusterLink> {
        let mut to_controller = ClientConfig::new(client_id::to_controller(config.node_id));
        to_controller.request_timeout_ms = config.request_timeout.as_millis() as u64;
        to_controller.max_response_bytes = config.max_response_bytes;
        to_controller.security.tls = config.controller_tls.clone();
        let mut fetcher = ClientConfig::new(format!("broker-{}-metadata-fetcher", config.node_id));
        fetcher.request_timeout_ms = (config.fetch_max_wait + config.request_timeout).as_millis() as u64;
        fetcher.max_response_bytes = config.max_response_bytes;
        fetcher.security.tls = config.controller_tls.clone();
        Arc::new(ClusterLink {
            to_controller: NodeClients::new(to_controller),
            fetcher: NodeClients::new(fetcher),
            leader: Mutex::new(None),
            next: AtomicUsize::new(0),
            published: watch::channel(Arc::new(MetadataImage::default())).0,
            registration: watch::channel(Registration::default()).0,
            shutting_down: watch::channel(false).0,
            runtime: tokio::runtime::Handle::current(),
            previous_broker_epoch: std::sync::atomic::AtomicI64::new(-1),
            config,
        })
    }

    /// The broker epoch of this node's last clean stop (`None`: it did not stop cleanly),
    /// sent with the registration.
    pub fn set_previous_broker_epoch(&self, epoch: Option<i64>) {
        self.previous_broker_epoch.store(epoch.unwrap_or(-1), Ordering::Relaxed);
    }

    fn previous_broker_epoch(&self) -> i64 {
        self.previous_broker_epoch.load(Ordering::Relaxed)
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// The image the broker last published.
    pub fn published(&self) -> Arc<MetadataImage> {
        self.published.borrow().clone()
    }

    /// Changes of [`ClusterLink::published`].
    pub fn watch_published(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.published.subscribe()
    }

    /// Registration and heartbeat state.
    pub fn registration(&self) -> Registration {
        self.registration.borrow().clone()
    }

    pub fn watch_registration(&self) -> watch::Receiver<Registration> {
        self.registration.subscribe()
    }

    /// Whether the controller still counts this broker as alive for certain at `now` (the
    /// lease of `lifecycle`), and it has not asked to shut down: a controlled shutdown
    /// moves its leaderships away and out of their ISRs before this broker has applied
    /// the change, so it stops answering as a leader from memory when it asks.
    pub fn holds_lease(&self, now: Instant) -> bool {
        let registration = self.registration.borrow();
        registration.epoch.is_some()
            && !registration.fenced
            && registration.lease_until.is_some_and(|until| now < until)
            && !*self.shutting_down.borrow()
    }

    /// The controller to ask next: the active one if known, else the next in turn.
    fn target(&self) -> usize {
        let known = *self.leader.lock().unwrap_or_else(PoisonError::into_inner);
        known.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed) % self.config.controllers.len().max(1))
    }

    /// `node_id` is the active controller (from a metadata fetch), or none is known.
    fn set_leader(&self, node_id: Option<i32>) {
        let index = node_id.and_then(|id| self.config.controllers.iter().position(|(c, _)| *c == id));
        *self.leader.lock().unwrap_or_else(PoisonError::into_inner) = index;
    }

    /// The controller at `index` did not answer as the active one: ask the next.
    fn forget_leader(&self, index: usize) {
        let mut leader = self.leader.lock().unwrap_or_else(PoisonError::into_inner);
        if *leader == Some(index) {
            *leader = None;
        }
        self.next.store(index + 1, Ordering::Relaxed);
    }

    /// Sends a request to the active controller, built for the version agreed on the
    /// connection, trying each controller in turn (with a short back-off once every one
    /// was tried) until one answers as the active controller or `deadline` passes.
    pub async fn send_to_controller(
        &self,
        api: ApiKey,
        build: impl Fn(i16) -> RequestBody,
        deadline: Instant,
    ) -> Result<Response, ControllerUnreachable> {
        let mut last = String::from("no controller tried");
        let mut tried = 0usize;
        loop {
            let index = self.target();
            let (node_id, address) = self.config.controllers[index % self.config.controllers.len()].clone();
            let client = self.to_controller.client(node_id, address);
            let remaining = deadline.saturating_duration_since(Instant::now());
            // A controller that cannot be reached now (a killed one, in reconnect
            // back-off) is skipped while another may answer: waiting out its back-off
            // held a failover's requests up to a second per attempt.
            let sent = if client.backing_off() {
                last = format!("controller {node_id} is unreachable (reconnect back-off)");
                Err(())
            } else {
                tokio::time::timeout(remaining, client.send_with(api, &build)).await.map_err(|_| ())
            };
            match sent {
                Ok(Ok(response)) if !not_controller(&response.body) => {
                    self.set_leader(Some(node_id));
                    return Ok(response);
                }
                Ok(Ok(_)) => last = format!("controller {node_id} is not the active controller"),
                Ok(Err(e)) => last = format!("controller {node_id}: {}", describe(&e)),
                Err(()) => {}
            }
            self.forget_leader(index);
            tried += 1;
            if Instant::now() >= deadline {
                return Err(ControllerUnreachable::TimedOut(self.config.request_timeout, last));
            }
            if tried.is_multiple_of(self.config.controllers.len().max(1)) {
                let pause = RETRY_BACKOFF.min(deadline.saturating_duration_since(Instant::now()));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// The pause after every controller was tried once (Kafka's `retry.backoff.ms`).
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

fn describe(e: &ClientError) -> String {
    e.to_string()
}

/// Whether a controller's answer says it is not the active controller: NOT_CONTROLLER
/// in its error field, or in every per-item error field of a batched answer.
pub(crate) fn not_controller(body: &ResponseBody) -> bool {
    let code = ErrorCode::NOT_CONTROLLER.code();
    let all = |codes: &mut dyn Iterator<Item = i16>| {
        let mut any = false;
        for c in codes {
            if c != code {
                return false;
            }
            any = true;
        }
        any
    };
    match body {
        ResponseBody::BrokerRegistration(r) => r.error_code == code,
        ResponseBody::BrokerHeartbeat(r) => r.error_code == code,
        ResponseBody::AllocateProducerIds(r) => r.error_code == code,
        ResponseBody::CreateTopics(r) => all(&mut r.topics.iter().map(|t| t.error_code)),
        ResponseBody::DeleteTopics(r) => all(&mut r.responses.iter().map(|t| t.error_code)),
        ResponseBody::CreatePartitions(r) => all(&mut r.results.iter().map(|t| t.error_code)),
        ResponseBody::IncrementalAlterConfigs(r) => all(&mut r.responses.iter().map(|t| t.error_code)),
        ResponseBody::AlterConfigs(r) => all(&mut r.responses.iter().map(|t| t.error_code)),
        ResponseBody::ElectLeaders(r) => r.error_code == code,
        // The controller sets the envelope's error when its content's is NOT_CONTROLLER.
        ResponseBody::Envelope(r) => r.error_code == code,
        ResponseBody::AlterPartitionReassignments(r) => r.error_code == code,
        ResponseBody::ListPartitionReassignments(r) => r.error_code == code,
        // A controller that is not the leader answers NOT_LEADER_OR_FOLLOWER for the
        // metadata partition.
        ResponseBody::DescribeQuorum(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| p.error_code == ErrorCode::NOT_LEADER_OR_FOLLOWER.code() || p.error_code == code),
        _ => false,
    }
}
