//! The controller side of a node (`process.roles` containing `controller`): the openraft
//! quorum of crates/cluster, its network over the CONTROLLER listener, and the active
//! controller serving Kafka's controller APIs (crates/cluster/DESIGN.md).
//!
//! [`ControllerNode::start`] runs all of it on a thread of its own with a current-thread
//! Tokio runtime: the quorum's log and snapshot I/O runs on the task that drives it
//! (DESIGN.md), and must not stall the broker's request workers.
//!
//! - `listener.rs`: the CONTROLLER listener (framing, bounds, order of answers);
//! - `requests.rs`: what each request gets (private keys, ApiVersions, DescribeQuorum,
//!   DescribeCluster, the rest to [`ControllerApis`]);
//! - `rpc.rs`: the Osprey-private API keys; `transport.rs`: the quorum's transport;
//! - `bootstrap.rs`: the Hello exchange, the cluster id and `meta.properties`;
//! - `membership.rs`: what the leader does for the configured voters (adding late ones,
//!   replacing one that came back with a new directory id);
//! - `describe.rs`, `progress.rs`: DescribeQuorum and DescribeCluster.

pub mod active;
pub mod apis;
mod decisions;

pub use active::{ActiveController, ActiveControllerConfig};
pub use decisions::failed as failed_response;
mod bootstrap;
pub mod describe;
pub mod listener;
mod membership;
mod progress;
mod requests;
pub mod rpc;
pub mod transport;

use crate::config::BrokerConfig;
use crate::interbroker::ClientConfig;
use apis::{ControllerApis, ControllerReply};
use listener::ListenerLimits;
use osprey_cluster::quorum::{ControllerEndpoint, Hello, Quorum, QuorumConfig, ReplicaKey};
use osprey_protocol::{RequestBody, RequestHeader};
use progress::FollowerProgress;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use transport::ListenerTransport;

/// How a controller node runs, from the broker configuration.
#[derive(Debug, Clone)]
pub struct ControllerNodeConfig {
    /// `node.id`.
    pub node_id: i32,
    /// `controller.quorum.voters`: each voter's node id and controller endpoint.
    pub voters: Vec<(i32, ControllerEndpoint)>,
    /// The first of `controller.listener.names` (DescribeQuorum's listener name).
    pub listener_name: String,
    /// `metadata.log.dir`.
    pub metadata_log_dir: PathBuf,
    /// `controller.quorum.election.timeout.ms`.
    pub election_timeout_ms: u64,
    /// `controller.quorum.fetch.timeout.ms`.
    pub fetch_timeout_ms: u64,
    /// `controller.quorum.request.timeout.ms`: one RPC, and a proposal's commit.
    pub request_timeout_ms: u64,
    /// `metadata.log.max.record.bytes.between.snapshots`.
    pub max_record_bytes_between_snapshots: u64,
    pub limits: ListenerLimits,
    /// The controller listener's TLS when it is an SSL one: served on it, and used to
    /// reach the other voters. `None`: PLAINTEXT.
    pub tls: Option<Arc<crate::tls::ListenerTls>>,
    /// The node's configuration when it has an authorizer (`authorizer.class.name`):
    /// requests on the controller listener are authorized as Kafka's controller
    /// authorizes them (`requests.rs`). `None`: every request is allowed.
    pub authorization: Option<Arc<BrokerConfig>>,
}

impl ControllerNodeConfig {
    /// The controller settings of `config`. This node must be one of the voters: its
    /// entry there is the endpoint the others reach it at.
    pub fn from_broker_config(config: &BrokerConfig) -> Result<ControllerNodeConfig, String> {
        let cluster = &config.cluster;
        let voters: Vec<(i32, ControllerEndpoint)> =
            cluster.voters.iter().map(|v| (v.id, ControllerEndpoint::new(v.host.clone(), v.port))).collect();
        if !voters.iter().any(|(id, _)| *id == config.node_id) {
            return Err(format!(
                "controller.quorum.voters must list this controller (node.id={}); a quorum from \
                 controller.quorum.bootstrap.servers alone (KIP-853's dynamic quorum) is not built yet",
                config.node_id
            ));
        }
        let listener_name = config.controller_listener_names.first().cloned().unwrap_or_else(|| "CONTROLLER".into());
        let positive = |v: i64| v.max(1) as u64;
        Ok(ControllerNodeConfig {
            node_id: config.node_id,
            voters,
            listener_name,
            metadata_log_dir: cluster.metadata_log_dir.clone(),
            election_timeout_ms: positive(cluster.quorum_election_timeout_ms.into()),
            fetch_timeout_ms: positive(cluster.quorum_fetch_timeout_ms.into()),
            request_timeout_ms: positive(cluster.quorum_request_timeout_ms.into()),
            max_record_bytes_between_snapshots: positive(cluster.metadata_snapshot_max_new_record_bytes),
            limits: ListenerLimits {
                socket_request_max_bytes: config.socket_request_max_bytes.max(0) as usize,
                max_connections: config.max_connections.max(1) as usize,
                max_in_flight_per_connection: config.max_inflight_requests_per_connection.max(1) as usize,
                connections_max_idle_ms: positive(config.connections_max_idle_ms),
            },
            tls: None,
            authorization: config.authorizer.is_some().then(|| Arc::new(config.clone())),
        })
    }

    /// This node's endpoint in the quorum: its entry in `controller.quorum.voters`.
    fn endpoint(&self) -> ControllerEndpoint {
        let own = self.voters.iter().find(|(id, _)| *id == self.node_id);
        own.map(|(_, e)| e.clone()).unwrap_or_default()
    }
}

/// Builds the active controller's APIs over the started quorum.
pub type ApisFactory = Box<dyn FnOnce(Arc<Quorum>) -> Arc<dyn ControllerApis> + Send>;

/// The active controller over the started quorum, configured from `config`: what a
/// controller node serves (controller-only and combined nodes alike). The cluster id
/// brokers must register with is the one the quorum committed.
pub fn active_apis(config: &BrokerConfig) -> ApisFactory {
    let active = ActiveControllerConfig::from_config(config);
    Box::new(move |quorum| Arc::new(ActiveController::new(quorum, active)))
}

/// A controller that serves no Kafka API beyond what the listener answers itself (tests
/// of the quorum alone).
#[derive(Debug, Default)]
pub struct NoControllerApis;

impl ControllerApis for NoControllerApis {
    fn supported(&self) -> Vec<(i16, i16, i16)> {
        Vec::new()
    }

    fn handle_from(&self, _header: RequestHeader, _body: RequestBody, _forwarded_for: Option<&str>) -> ControllerReply {
        // The listener routes only supported keys here, and none are.
        unreachable!("NoControllerApis supports no API")
    }
}

/// What the listener and the background tasks share.
pub struct NodeState {
    replica: ReplicaKey,
    endpoint: ControllerEndpoint,
    listener_name: String,
    max_rpc_bytes: usize,
    quorum: Arc<Quorum>,
    apis: Arc<dyn ControllerApis>,
    progress: Arc<FollowerProgress>,
    /// The cluster id as learned from the quorum (or from `meta.properties` when the
    /// node already belongs to it); reported in Hello.
    cluster_id: Mutex<Option<String>>,
    /// The latest Hello from each configured voter, and when it came.
    hellos: Mutex<BTreeMap<i32, (Hello, Instant)>>,
    /// The node ids of `controller.quorum.voters`.
    voter_ids: BTreeSet<i32>,
    /// `ControllerNodeConfig::authorization`.
    authorization: Option<Arc<BrokerConfig>>,
}

impl std::fmt::Debug for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeState").field("replica", &self.replica).field("endpoint", &self.endpoint).finish()
    }
}

impl NodeState {
    fn cluster_id(&self) -> Option<String> {
        self.cluster_id.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_cluster_id(&self, id: String) {
        *self.cluster_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
    }

    /// This node's Hello as of now.
    fn my_hello(&self) -> Hello {
        let metrics = self.quorum.metrics();
        let m = metrics.borrow();
        Hello {
            replica: self.replica,
            endpoint: self.endpoint.clone(),
            cluster_id: self.cluster_id(),
            has_quorum_state: self.quorum.had_quorum_state() || m.current_term > 0 || m.last_log_index.is_some(),
        }
    }

    /// Keeps the Hello of a configured voter; others are dropped, so the map holds at
    /// most one entry per configured voter whatever peers send.
    fn saw_hello(&self, hello: Hello) {
        if !self.voter_ids.contains(&hello.replica.node_id) {
            return;
        }
        let mut hellos = self.hellos.lock().unwrap_or_else(|e| e.into_inner());
        hellos.insert(hello.replica.node_id, (hello, Instant::now()));
    }

    /// The Hellos received within `fresh`, by node id.
    fn recent_hellos(&self, fresh: Duration) -> BTreeMap<i32, Hello> {
        let hellos = self.hellos.lock().unwrap_or_else(|e| e.into_inner());
        hellos.iter().filter(|(_, (_, at))| at.elapsed() <= fresh).map(|(id, (h, _))| (*id, h.clone())).collect()
    }
}

/// A running controller node.
#[derive(Debug)]
pub struct ControllerNode {
    node: Arc<NodeState>,
    stop: watch::Sender<bool>,
    failed: watch::Receiver<Option<String>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControllerNode {
    /// Starts the quorum member, the CONTROLLER listener on `listeners` (bound already)
    /// and the bootstrap, on a thread of their own. Returns once the member runs and the
    /// listener accepts; the cluster forms in the background.
    pub fn start(
        config: ControllerNodeConfig,
        listeners: Vec<std::net::TcpListener>,
        apis: ApisFactory,
    ) -> Result<ControllerNode, String> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = watch::channel(false);
        let (failed_tx, failed) = watch::channel(None);
        let thread = std::thread::Builder::new()
            .name(format!("osprey-controller-{}", config.node_id))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("cannot start the controller's runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(run(config, listeners, apis, ready_tx, stopped, failed_tx));
            })
            .map_err(|e| format!("cannot start the controller thread: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(node)) => Ok(ControllerNode { node, stop, failed, thread: Some(thread) }),
            Ok(Err(why)) => {
                let _ = thread.join();
                Err(why)
            }
            Err(_) => {
                let _ = thread.join();
                Err("the controller thread stopped while starting".into())
            }
        }
    }

    /// This node's quorum member.
    pub fn quorum(&self) -> Arc<Quorum> {
        self.node.quorum.clone()
    }

    /// The cluster id, once learned from the quorum.
    pub fn cluster_id(&self) -> Option<String> {
        self.node.cluster_id()
    }

    /// Resolves when the node fails (e.g. the quorum's cluster is not the one
    /// `meta.properties` names), with why.
    pub async fn failed(&self) -> String {
        let mut failed = self.failed.clone();
        loop {
            if let Some(why) = failed.borrow_and_update().clone() {
                return why;
            }
            if failed.changed().await.is_err() {
                return "the controller stopped".into();
            }
        }
    }

    /// Stops the node: the listener closes and the quorum member shuts down. Blocks
    /// until the controller thread ends; call it off any async runtime, or through
    /// `spawn_blocking`.
    pub fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ControllerNode {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The controller thread's body.
async fn run(
    config: ControllerNodeConfig,
    listeners: Vec<std::net::TcpListener>,
    apis: ApisFactory,
    ready: std::sync::mpsc::Sender<Result<Arc<NodeState>, String>>,
    mut stopped: watch::Receiver<bool>,
    failed: watch::Sender<Option<String>>,
) {
    let started = match start(&config, listeners, apis, stopped.clone(), failed).await {
        Ok(s) => s,
        Err(why) => {
            let _ = ready.send(Err(why));
            return;
        }
    };
    let _ = ready.send(Ok(started.clone()));
    while !*stopped.borrow_and_update() {
        if stopped.changed().await.is_err() {
            break;
        }
    }
    tracing::info!(node_id = config.node_id, "controller stopping");
    started.quorum.shutdown().await;
}

async fn start(
    config: &ControllerNodeConfig,
    listeners: Vec<std::net::TcpListener>,
    apis: ApisFactory,
    stopped: watch::Receiver<bool>,
    failed: watch::Sender<Option<String>>,
) -> Result<Arc<NodeState>, String> {
    let identity = bootstrap::Identity::load(&config.metadata_log_dir, config.node_id)?;
    let replica = ReplicaKey::new(config.node_id, identity.directory_id.0);
    let endpoint = config.endpoint();
    let max_rpc_bytes = config.limits.socket_request_max_bytes;
    let progress = Arc::new(FollowerProgress::default());
    let mut client = ClientConfig::new(format!("raft-client-{}", config.node_id));
    client.request_timeout_ms = config.request_timeout_ms;
    client.max_response_bytes = max_rpc_bytes;
    client.security.tls = config.tls.clone().map(crate::tls::InterBrokerTls::new);
    let transport = ListenerTransport::new(client, max_rpc_bytes, progress.clone());
    let mut quorum_config = QuorumConfig::new(replica, endpoint.clone());
    quorum_config.election_timeout_ms = config.election_timeout_ms;
    quorum_config.fetch_timeout_ms = config.fetch_timeout_ms;
    quorum_config.heartbeat_interval_ms = (config.election_timeout_ms / 4).max(10);
    quorum_config.request_timeout_ms = config.request_timeout_ms;
    quorum_config.max_record_bytes_between_snapshots = config.max_record_bytes_between_snapshots;
    quorum_config.max_rpc_bytes = max_rpc_bytes;
    let quorum =
        Quorum::start(quorum_config, osprey_storage::fs::StdStorage, &config.metadata_log_dir, transport.clone())
            .await
            .map_err(|e| format!("cannot start the controller quorum in {}: {e}", config.metadata_log_dir.display()))?;
    let quorum = Arc::new(quorum);
    progress.watch(quorum.metrics());
    // A cluster id in meta.properties counts as known only once the node holds quorum
    // state: a directory pre-formatted with `osprey format` still bootstraps.
    let known_cluster_id = if quorum.had_quorum_state() { identity.cluster_id.clone() } else { None };
    let node = Arc::new(NodeState {
        replica,
        endpoint,
        listener_name: config.listener_name.clone(),
        max_rpc_bytes,
        apis: apis(quorum.clone()),
        quorum,
        progress,
        cluster_id: Mutex::new(known_cluster_id),
        hellos: Mutex::new(BTreeMap::new()),
        voter_ids: config.voters.iter().map(|(id, _)| *id).collect(),
        authorization: config.authorization.clone(),
    });
    let mut tokio_listeners = Vec::new();
    for l in listeners {
        l.set_nonblocking(true).map_err(|e| format!("controller listener: {e}"))?;
        tokio_listeners.push(tokio::net::TcpListener::from_std(l).map_err(|e| format!("controller listener: {e}"))?);
    }
    if let Some(tls) = &config.tls {
        tokio::spawn(tls.clone().watch(stopped.clone()));
    }
    tokio::spawn(listener::serve(tokio_listeners, node.clone(), config.limits, config.tls.clone(), stopped.clone()));
    tokio::spawn(bootstrap::hello_until_voter(node.clone(), transport, config.voters.clone(), stopped.clone()));
    tokio::spawn(bootstrap::learn_cluster_id(node.clone(), identity.clone(), config.clone(), failed, stopped.clone()));
    let proposed = identity.cluster_id.clone();
    tokio::spawn(membership::lead(node.clone(), config.voters.clone(), proposed, stopped));
    tracing::info!(
        replica = %replica,
        voters = ?config.voters.iter().map(|(id, e)| format!("{id}@{e}")).collect::<Vec<_>>(),
        "controller quorum member started"
    );
    Ok(node)
}
