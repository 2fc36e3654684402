//! [`Quorum`]: one member of the controller quorum, started over a storage directory and
//! a transport, and what the server asks of it: propose a batch and await its commit,
//! who leads, what is applied, membership changes, and answering peers' RPCs.

use super::election::{stand_when_leader_silent, ElectionTimer};
use super::fetch::{
    LeaderHint, MetadataFetchContent, MetadataFetchRequest, MetadataFetchResponse, MAX_FETCH_WAIT_MS,
    RECORD_TAIL_CAPACITY,
};
use super::log_store::{LogStore, METADATA_LOG_DIR_NAME};
use super::network::{QuorumNetworkFactory, RaftRpc, RaftRpcReply, Transport};
use super::state_machine::{AppliedEvent, AppliedImage, AppliedView, StateMachine};
use super::types::{BatchApplied, ControllerEndpoint, MetadataBatch, QuorumTypes, ReplicaKey};
use crate::image::MetadataRecord;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::raft::AppendEntriesResponse;
use openraft::{ChangeMembers, Config, Raft, RaftMetrics, ServerState, SnapshotPolicy};
use osprey_storage::fs::Storage;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// How a quorum member runs. Kafka's config names where Kafka has one.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This member's replica key (`node.id`, and the metadata directory's id).
    pub replica: ReplicaKey,
    /// Where this member receives RPCs.
    pub endpoint: ControllerEndpoint,
    /// `controller.quorum.fetch.timeout.ms` (Kafka's default 2000): a follower that hears
    /// nothing from the leader for a random time between 3/4 of this and all of it
    /// stands for election (`election.rs`).
    pub fetch_timeout_ms: u64,
    /// `controller.quorum.election.timeout.ms` (Kafka's default 1000): a candidate
    /// without a result stands again after a random time between half of this and all
    /// of it.
    pub election_timeout_ms: u64,
    /// How often the leader sends heartbeats; kept below half the smallest election
    /// timeout.
    pub heartbeat_interval_ms: u64,
    /// `request.timeout.ms` (30000): a proposal or membership change that has not
    /// committed by then fails (the quorum has no majority), as Kafka's controller
    /// answers REQUEST_TIMED_OUT. Its outcome is then unknown: it may still commit.
    pub request_timeout_ms: u64,
    /// `metadata.log.max.record.bytes.between.snapshots` (20 MiB): a snapshot is taken
    /// once this many bytes of records were applied since the last, and the log below it
    /// is purged.
    pub max_record_bytes_between_snapshots: u64,
    /// Entries kept below a snapshot, so that a follower a little behind catches up from
    /// the log instead of receiving the whole snapshot.
    pub entries_kept_below_snapshot: u64,
    /// `metadata.log.segment.bytes`, for the quorum's segments. 8 MiB rather than Kafka's
    /// 1 GiB: a segment is deleted only once wholly below a snapshot, and the metadata
    /// log is small.
    pub log_segment_bytes: u64,
    /// `socket.request.max.bytes` (100 MiB): the largest RPC decoded; a proposal whose
    /// batch is larger is refused, since it could never be replicated.
    pub max_rpc_bytes: usize,
    /// Entries a slow consumer of [`Quorum::subscribe`] may fall behind before it is
    /// told it lagged (and re-reads the image).
    pub applied_events_capacity: usize,
    /// The most recently applied records a member keeps in memory for fetching brokers
    /// ([`RECORD_TAIL_CAPACITY`]); a broker further behind is sent the whole image.
    /// Smaller in the simulation, so that the image path runs there.
    pub record_tail_capacity: usize,
}

impl QuorumConfig {
    /// Kafka's defaults for a member with this key and endpoint.
    pub fn new(replica: ReplicaKey, endpoint: ControllerEndpoint) -> QuorumConfig {
        QuorumConfig {
            replica,
            endpoint,
            fetch_timeout_ms: 2000,
            election_timeout_ms: 1000,
            heartbeat_interval_ms: 250,
            request_timeout_ms: 30_000,
            max_record_bytes_between_snapshots: 20 * 1024 * 1024,
            entries_kept_below_snapshot: 1000,
            log_segment_bytes: 8 * 1024 * 1024,
            max_rpc_bytes: 100 * 1024 * 1024,
            applied_events_capacity: 4096,
            record_tail_capacity: RECORD_TAIL_CAPACITY,
        }
    }

    fn openraft_config(&self) -> Result<Config, QuorumError> {
        // Members stand for election on `election.rs`'s timer. openraft's largest election
        // timeout is still its leader lease: a voter refuses votes for that long after a
        // leader's last message. Half the fetch timeout keeps it below the shortest wait
        // before a member stands (3/4 of the fetch timeout), so that member gets the votes.
        let election_timeout_max = (self.fetch_timeout_ms / 2).max(4);
        let election_timeout_min = (self.election_timeout_ms.min(election_timeout_max) / 2).max(2);
        let config = Config {
            cluster_name: "osprey".into(),
            election_timeout_min,
            election_timeout_max,
            heartbeat_interval: self.heartbeat_interval_ms.min(election_timeout_min / 2).max(1),
            // Members stand for election when `election.rs` says, not on openraft's timer.
            enable_elect: false,
            install_snapshot_timeout: self.request_timeout_ms,
            // Snapshots are taken by bytes (Kafka's policy), from the state machine.
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: self.entries_kept_below_snapshot,
            // A snapshot chunk and its JSON framing must fit in one RPC.
            snapshot_max_chunk_size: (self.max_rpc_bytes as u64 / 4).clamp(1024, 3 * 1024 * 1024),
            ..Default::default()
        };
        config.validate().map_err(|e| QuorumError::Config(e.to_string()))
    }
}

/// Why a member could not start.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("metadata log directory: {0}")]
    Io(#[from] io::Error),
    #[error("quorum configuration: {0}")]
    Config(String),
    #[error("quorum stopped: {0}")]
    Fatal(String),
}

/// Why a proposal or a membership change failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProposeError {
    /// This member is not the leader (Kafka's NOT_CONTROLLER); the leader, if known.
    #[error("not the active controller (leader: {leader:?})")]
    NotLeader { leader: Option<ReplicaKey>, endpoint: Option<ControllerEndpoint> },
    /// Not committed within `request.timeout.ms` (Kafka's REQUEST_TIMED_OUT); it may
    /// still commit later.
    #[error("not committed within the request timeout")]
    TimedOut,
    /// The batch is larger than one RPC may be.
    #[error("batch of {bytes} bytes exceeds the {max}-byte bound")]
    TooLarge { bytes: usize, max: usize },
    /// openraft refused a membership change (e.g. another one is in progress).
    #[error("membership change refused: {0}")]
    Refused(String),
    /// The member stopped (storage failure or shutdown).
    #[error("quorum stopped: {0}")]
    Stopped(String),
}

/// One member of the controller quorum.
pub struct Quorum {
    raft: Raft<QuorumTypes>,
    config: QuorumConfig,
    view: AppliedView,
    had_quorum_state: bool,
    snapshot_task: tokio::task::JoinHandle<()>,
    election: Arc<ElectionTimer>,
    election_task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum").field("replica", &self.config.replica).field("term", &self.term()).finish()
    }
}

impl Quorum {
    /// Starts a member over `metadata_log_dir/__cluster_metadata-0` on `storage`. A new
    /// member starts uninitialized: see [`Quorum::initialize`] and the bootstrap.
    pub async fn start<S: Storage + Clone, T: Transport>(
        config: QuorumConfig,
        storage: S,
        metadata_log_dir: &Path,
        transport: T,
    ) -> Result<Quorum, QuorumError> {
        let raft_config = Arc::new(config.openraft_config()?);
        let dir = metadata_log_dir.join(METADATA_LOG_DIR_NAME);
        let log = LogStore::open(storage.clone(), &dir, config.log_segment_bytes)?;
        let had_quorum_state = !log.is_empty();
        let state_machine = StateMachine::open(
            storage,
            &dir,
            config.max_record_bytes_between_snapshots,
            config.applied_events_capacity,
            config.record_tail_capacity,
        )?;
        let view = state_machine.view();
        let log = log.purge_behind(state_machine.durable_snapshot());
        let network = QuorumNetworkFactory::new(Arc::new(transport));
        let raft = Raft::new(config.replica, raft_config, network, log, state_machine)
            .await
            .map_err(|e| QuorumError::Fatal(e.to_string()))?;
        let snapshot_task = tokio::spawn(take_snapshots_when_due(raft.clone(), view.clone()));
        let election = ElectionTimer::new(config.fetch_timeout_ms, config.election_timeout_ms);
        let election_task = tokio::spawn(stand_when_leader_silent(raft.clone(), election.clone()));
        Ok(Quorum { raft, config, view, had_quorum_state, snapshot_task, election, election_task })
    }

    /// This member's replica key.
    pub fn replica(&self) -> ReplicaKey {
        self.config.replica
    }

    /// Whether the member found quorum state (a vote or entries) on disk at start: the
    /// `has_quorum_state` of its bootstrap `Hello`.
    pub fn had_quorum_state(&self) -> bool {
        self.had_quorum_state
    }

    /// Initializes a new quorum with these voters (the bootstrap's decision). Refused by
    /// openraft if this member already has a log or vote.
    pub async fn initialize(&self, voters: BTreeMap<ReplicaKey, ControllerEndpoint>) -> Result<(), ProposeError> {
        self.raft.initialize(voters).await.map_err(|e| ProposeError::Refused(e.to_string()))
    }

    /// Proposes `records` as one batch and waits until it is committed and applied here.
    pub async fn propose(&self, records: Vec<MetadataRecord>) -> Result<BatchApplied, ProposeError> {
        let batch = MetadataBatch::new(records);
        let bytes = serde_json::to_vec(&batch).map_or(usize::MAX, |v| v.len());
        // Half the bound: the entry travels inside an AppendEntries with its own framing.
        let max = self.config.max_rpc_bytes / 2;
        if bytes > max {
            return Err(ProposeError::TooLarge { bytes, max });
        }
        let written = tokio::time::timeout(self.request_timeout(), self.raft.client_write(batch)).await;
        match written {
            Err(_) => Err(ProposeError::TimedOut),
            Ok(Ok(response)) => Ok(response.data),
            Ok(Err(e)) => Err(write_error(e)),
        }
    }

    /// Confirms that this member still leads: a quorum of voters acknowledged its term
    /// after this call began (openraft's read index, Raft §8), so no other leader had
    /// been elected by then. What a controller answers from its image without writing
    /// (a broker heartbeat that changes nothing) is current only once this returns Ok.
    pub async fn confirm_leadership(&self, timeout: Duration) -> Result<(), ProposeError> {
        match tokio::time::timeout(timeout, self.raft.get_read_log_id()).await {
            Err(_) => Err(ProposeError::TimedOut),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                Err(ProposeError::NotLeader { leader: f.leader_id, endpoint: f.leader_node })
            }
            Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))) => {
                Err(ProposeError::NotLeader { leader: None, endpoint: None })
            }
            Ok(Err(RaftError::Fatal(f))) => Err(ProposeError::Stopped(f.to_string())),
        }
    }

    /// Adds a member that receives the log but does not vote (a broker, or a voter's
    /// replacement catching up). Returns once it is added (not caught up).
    pub async fn add_learner(&self, replica: ReplicaKey, endpoint: ControllerEndpoint) -> Result<(), ProposeError> {
        let added = tokio::time::timeout(self.request_timeout(), self.raft.add_learner(replica, endpoint, false)).await;
        match added {
            Err(_) => Err(ProposeError::TimedOut),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(write_error(e)),
        }
    }

    /// Removes a learner (a broker that left). A voter must first stop being one
    /// ([`Quorum::change_voters`]); openraft refuses to remove it here.
    pub async fn remove_learner(&self, replica: ReplicaKey) -> Result<(), ProposeError> {
        let removed = tokio::time::timeout(
            self.request_timeout(),
            self.raft.change_membership(ChangeMembers::RemoveNodes([replica].into_iter().collect()), false),
        )
        .await;
        match removed {
            Err(_) => Err(ProposeError::TimedOut),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(write_error(e)),
        }
    }

    /// Makes `voters` the voters (each must be a member already, e.g. a learner); members
    /// no longer voters are removed. openraft goes through a joint configuration.
    pub async fn change_voters(&self, voters: BTreeSet<ReplicaKey>) -> Result<(), ProposeError> {
        let changed = tokio::time::timeout(
            self.request_timeout(),
            self.raft.change_membership(ChangeMembers::ReplaceAllVoters(voters), false),
        )
        .await;
        match changed {
            Err(_) => Err(ProposeError::TimedOut),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(write_error(e)),
        }
    }

    /// Replaces voter `old` by `new` (a learner already): KIP-853's remove-voter and
    /// add-voter for a node whose disk was lost and that came back with a new directory
    /// id. Counted in `osprey_quorum_voter_replacements_total` by the caller.
    pub async fn replace_voter(&self, old: ReplicaKey, new: ReplicaKey) -> Result<(), ProposeError> {
        let mut voters = self.voters();
        if !voters.remove(&old) {
            return Err(ProposeError::Refused(format!("{old} is not a voter")));
        }
        voters.insert(new);
        tracing::info!(%old, %new, "replacing a quorum voter");
        self.change_voters(voters).await
    }

    /// On the leader: how many entries `replica` is behind this leader's log (`None` if
    /// this member is not the leader or has not heard from it). A replacement voter is
    /// promoted once it is close.
    pub fn replication_lag(&self, replica: ReplicaKey) -> Option<u64> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let matched = m.replication.as_ref()?.get(&replica)?.as_ref().map_or(0, |l| l.index + 1);
        Some(m.last_log_index.map_or(0, |l| l + 1).saturating_sub(matched))
    }

    /// Every member (voters and learners) with its endpoint, as this member knows them.
    pub fn members(&self) -> BTreeMap<ReplicaKey, ControllerEndpoint> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.membership_config.membership().nodes().map(|(k, e)| (*k, e.clone())).collect()
    }

    /// The current voters, as this member knows them.
    pub fn voters(&self) -> BTreeSet<ReplicaKey> {
        self.raft.metrics().borrow().membership_config.membership().voter_ids().collect()
    }

    /// The current leader and its endpoint, as this member knows them.
    pub fn leader(&self) -> Option<(ReplicaKey, Option<ControllerEndpoint>)> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let leader = m.current_leader?;
        Some((leader, m.membership_config.membership().get_node(&leader).cloned()))
    }

    /// Whether this member is the leader (the active controller) now.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// The current term (Kafka's leader epoch of the metadata log).
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// openraft's metrics, as a watch: leader, term, last log, applied, membership.
    pub fn metrics(&self) -> watch::Receiver<RaftMetrics<ReplicaKey, ControllerEndpoint>> {
        self.raft.metrics()
    }

    /// The applied image as of now (a copy).
    pub fn applied(&self) -> AppliedImage {
        self.view.applied()
    }

    /// Reads the applied image without copying it.
    pub fn with_applied<R>(&self, f: impl FnOnce(&AppliedImage) -> R) -> R {
        self.view.with_applied(f)
    }

    /// The applied image as of now and every entry applied after it, in order. On
    /// `RecvError::Lagged` the consumer re-subscribes.
    pub fn subscribe(&self) -> (AppliedImage, broadcast::Receiver<AppliedEvent>) {
        self.view.subscribe()
    }

    /// A broker's fetch of the committed metadata log: the records from
    /// `request.next_offset` that this member has applied, the whole image if they are no
    /// longer kept, or, once `max_wait_ms` (at most [`MAX_FETCH_WAIT_MS`]) passed with
    /// nothing new, no records. A member whose quorum has not committed a cluster id
    /// (not formed, or not caught up with its first entry) is not ready.
    pub async fn fetch_metadata(&self, request: &MetadataFetchRequest) -> MetadataFetchResponse {
        let content = self.fetch_content(request).await;
        let applied = self.view.with_applied(|a| a.image.applied);
        MetadataFetchResponse { leader: self.leader_hint(), applied, content }
    }

    async fn fetch_content(&self, request: &MetadataFetchRequest) -> MetadataFetchContent {
        let wait = Duration::from_millis(request.max_wait_ms.min(MAX_FETCH_WAIT_MS));
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.view.with_applied(|a| a.image.cluster_id.is_none()) {
                return MetadataFetchContent::NotReady { why: "the controller quorum has not formed yet".into() };
            }
            let (content, mut applied) = self.view.records_from(request.next_offset, request.max_records);
            if let Some(content) = content {
                return content;
            }
            match tokio::time::timeout_at(deadline, applied.recv()).await {
                // Applied (or lagged behind what was): read again.
                Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    return MetadataFetchContent::NotReady { why: "the controller is stopping".into() }
                }
                Err(_) => {
                    return MetadataFetchContent::Records { first_offset: request.next_offset, records: Vec::new() }
                }
            }
        }
    }

    /// The leader as a fetching broker needs it: node id and CONTROLLER endpoint.
    fn leader_hint(&self) -> Option<LeaderHint> {
        let (leader, endpoint) = self.leader()?;
        Some(LeaderHint { node_id: leader.node_id, endpoint: endpoint? })
    }

    /// Answers an RPC from another member.
    /// A leader's accepted message, or a vote granted, puts off this member's own
    /// campaign (see `election.rs`).
    pub async fn handle_rpc(&self, rpc: RaftRpc) -> RaftRpcReply {
        match rpc {
            RaftRpc::Vote(r) => {
                let reply = self.raft.vote(r).await;
                if reply.as_ref().is_ok_and(|v| v.vote_granted) {
                    self.election.heard_from_leader();
                }
                RaftRpcReply::Vote(reply)
            }
            RaftRpc::AppendEntries(r) => {
                let reply = self.raft.append_entries(r).await;
                if reply.as_ref().is_ok_and(|a| !matches!(a, AppendEntriesResponse::HigherVote(_))) {
                    self.election.heard_from_leader();
                }
                RaftRpcReply::AppendEntries(reply)
            }
            RaftRpc::InstallSnapshot(r) => {
                let leader_vote = r.vote;
                let reply = self.raft.install_snapshot(r).await;
                if reply.as_ref().is_ok_and(|s| s.vote <= leader_vote) {
                    self.election.heard_from_leader();
                }
                RaftRpcReply::InstallSnapshot(reply)
            }
        }
    }

    /// Stops the member. Everything it reported durable is on disk already.
    pub async fn shutdown(&self) {
        self.snapshot_task.abort();
        self.election_task.abort();
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "quorum member did not stop cleanly");
        }
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }
}

impl Drop for Quorum {
    fn drop(&mut self) {
        self.snapshot_task.abort();
        self.election_task.abort();
    }
}

/// Asks openraft for a snapshot whenever the state machine says one is due.
async fn take_snapshots_when_due(raft: Raft<QuorumTypes>, view: AppliedView) {
    let due = view.snapshot_due();
    loop {
        due.notified().await;
        if raft.trigger().snapshot().await.is_err() {
            return;
        }
    }
}

fn write_error(e: RaftError<ReplicaKey, ClientWriteError<ReplicaKey, ControllerEndpoint>>) -> ProposeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            ProposeError::NotLeader { leader: f.leader_id, endpoint: f.leader_node }
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => ProposeError::Refused(c.to_string()),
        RaftError::Fatal(f) => ProposeError::Stopped(f.to_string()),
    }
}
