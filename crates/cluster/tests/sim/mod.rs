//! The harness the quorum simulations share (`quorum_simulation.rs`,
//! `cluster_simulation.rs`): the seeded generator, the simulated network between
//! controller quorum members (every Raft RPC through its codec, with delay, loss and the
//! receiver's incarnation checked both ways), and the members' configuration. The
//! partition-replication model (model logs, follower fetching) is in [`replication`],
//! shared with `partition_replication_simulation.rs`.
//!
//! Each simulation keeps its own world (which nodes are up, who is cut off from whom)
//! and tells the transport, through [`SimNetwork`], whether and how a message gets
//! across.

// Each test binary uses the part it needs.
#![allow(dead_code)]

pub mod replication;

use osprey_cluster::quorum::{
    decide_bootstrap, decode_reply, decode_rpc, encode_reply, encode_rpc, BootstrapDecision, ControllerEndpoint, Hello,
    Quorum, QuorumConfig, RaftRpc, RaftRpcReply, ReplicaKey, Transport, TransportError,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Where every member keeps its metadata log, on its own simulated disk.
pub const METADATA_DIR: &str = "/data/meta";

/// The simulations' runtime: one thread, Tokio's paused clock, and openraft's random
/// choices (`seed_thread_rng`) drawn from `seed`. Built with `--cfg tokio_unstable`
/// (`scripts/simulate.sh`), Tokio's own generator is seeded too: the one behind the
/// fairness of a `select!` without `biased`, which openraft's replication task uses
/// while it backs off from an unreachable member. Without it, two runs of a seed can
/// diverge when both branches are ready in the same poll.
pub fn seeded_runtime(seed: u64) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder.build().expect("a current-thread runtime");
    // The runtime runs on this thread, whose generator openraft draws from.
    osprey_cluster::quorum::seed_thread_rng(seed);
    runtime
}

/// Whether Tokio's generator is seeded too, so that every seed replays exactly.
pub const REPLAY_IS_EXACT: bool = cfg!(tokio_unstable);

/// xorshift64*, seeded: every choice a simulation makes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// What happens to one message: it cannot leave (the receiver is down or cut off), it
/// is lost after a delay, or it is delivered after a delay to this incarnation of the
/// receiver (`to`: what the receiver serves the message with).
pub enum Route<T> {
    Unreachable,
    Lost { delay: u64 },
    Deliver { to: T, delay: u64, incarnation: u64 },
}

/// A simulation's world as the quorum transport sees it.
pub trait SimNetwork: Clone + Send + Sync + 'static {
    /// Whether a message from node `from` reaches member `to` now, its delay and loss.
    fn route(&self, from: i32, to: ReplicaKey) -> Route<Arc<Quorum>>;
    /// Whether `from` and that incarnation of `to` can still talk (checked when a message
    /// arrives and again when its reply leaves).
    fn still_connected(&self, from: i32, to: i32, incarnation: u64) -> bool;
}

/// The quorum's transport in a simulation: member `from`'s RPCs over the world's network.
pub struct SimTransport<N> {
    pub from: i32,
    pub network: N,
}

impl<N: SimNetwork> Transport for SimTransport<N> {
    async fn send(
        &self,
        target: ReplicaKey,
        _endpoint: &ControllerEndpoint,
        rpc: RaftRpc,
        timeout: Duration,
    ) -> Result<RaftRpcReply, TransportError> {
        // Every RPC goes through the codec, as it will over the CONTROLLER listener.
        let rpc = decode_rpc(&encode_rpc(&rpc), usize::MAX).map_err(|e| TransportError::Network(e.to_string()))?;
        match self.network.route(self.from, target) {
            Route::Unreachable => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Err(TransportError::Unreachable(format!("{target} unreachable")))
            }
            Route::Lost { delay } => {
                tokio::time::sleep(Duration::from_millis(delay).min(timeout)).await;
                Err(TransportError::Network("lost".into()))
            }
            Route::Deliver { to: quorum, delay, incarnation } => {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if !self.network.still_connected(self.from, target.node_id, incarnation) {
                    return Err(TransportError::Network("lost".into()));
                }
                let reply = quorum.handle_rpc(rpc).await;
                let bytes = encode_reply(&reply);
                // The reply crosses back: the receiver may have crashed or been cut off.
                if !self.network.still_connected(self.from, target.node_id, incarnation) {
                    return Err(TransportError::Network("reply lost".into()));
                }
                decode_reply(&bytes, usize::MAX).map_err(|e| TransportError::Network(e.to_string()))
            }
        }
    }
}

/// A member's configuration in a simulation: small snapshots, segments and record tail,
/// so that snapshots, purges, segment rolls and snapshot installs happen.
pub fn config(replica: ReplicaKey, record_tail_capacity: usize) -> QuorumConfig {
    let mut config = QuorumConfig::new(replica, endpoint(replica.node_id));
    config.request_timeout_ms = 5_000;
    config.max_record_bytes_between_snapshots = 1_500;
    config.entries_kept_below_snapshot = 5;
    config.log_segment_bytes = 2_048;
    config.applied_events_capacity = 1 << 16;
    config.record_tail_capacity = record_tail_capacity;
    config
}

pub fn endpoint(node_id: i32) -> ControllerEndpoint {
    ControllerEndpoint::new("127.0.0.1", 9000 + node_id as u16)
}

/// The directory id of node `node_id`'s disk of this generation (a lost disk comes back
/// with the next).
pub fn directory_id(node_id: i32, generation: u8) -> [u8; 16] {
    let mut id = [generation; 16];
    id[0] = node_id as u8;
    id
}

/// Every member bootstraps as the server does: Hellos, then each one's decision (the
/// one that decides to initialize does).
pub async fn bootstrap(members: &[Arc<Quorum>]) {
    let hellos: Vec<Hello> = members
        .iter()
        .map(|q| Hello {
            replica: q.replica(),
            endpoint: endpoint(q.replica().node_id),
            cluster_id: None,
            has_quorum_state: q.had_quorum_state(),
        })
        .collect();
    let voters: BTreeSet<i32> = hellos.iter().map(|h| h.replica.node_id).collect();
    for (quorum, me) in members.iter().zip(&hellos) {
        let others: Vec<Hello> = hellos.iter().filter(|h| h.replica != me.replica).cloned().collect();
        if let BootstrapDecision::Initialize(voters) = decide_bootstrap(me, &voters, &others) {
            quorum.initialize(voters).await.expect("a new member initializes");
        }
    }
}

/// The bootstrap's first commit, as the server's active controller makes it
/// (controller_node/membership.rs): the leader among `members` if the cluster id is not
/// committed yet. Until it is, members answer brokers NotReady.
pub fn leader_without_cluster_id(members: impl IntoIterator<Item = Arc<Quorum>>) -> Option<Arc<Quorum>> {
    members.into_iter().find(|q| q.is_leader()).filter(|q| q.with_applied(|a| a.image.cluster_id.is_none()))
}

/// Proposes the cluster id on `leader` (see [`leader_without_cluster_id`]).
pub async fn commit_cluster_id(leader: Arc<Quorum>) {
    let _ = leader.propose(vec![osprey_cluster::image::MetadataRecord::ClusterId { id: "sim".into() }]).await;
}
