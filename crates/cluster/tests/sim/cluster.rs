//! Seeded simulation of the whole cluster: three controller voters (openraft with
//! Osprey's log store and state machine, as in `quorum_simulation.rs`) and their brokers,
//! which replicate the partitions the committed metadata assigns them, on one simulated
//! network and clock (Tokio's paused clock); the voters' disks are `SimStorage`, the
//! brokers' partition logs `sim::replication`'s model logs.
//!
//! The controller's real decisions go through the real quorum. The quorum leader runs
//! `ClusterControl` on its applied image as `crates/server/src/controller_node/active.rs`
//! does ([`Controller`]): it becomes active once it leads, has applied its log and knows
//! the cluster id, and then resets every broker's session; it decides each request on
//! the speculative image (applied plus proposed), proposes the records and answers once
//! they are committed; a decision that writes nothing is answered once the proposals
//! before it committed (failed if one of them failed), and a heartbeat only once a
//! quorum confirmed its leadership
//! (`Quorum::confirm_leadership`); its timer fences brokers whose session expired and
//! elects leaders for offline partitions (unclean election is on for even topics, so
//! that they get a leader back whatever happens; odd topics turn it off, and get one back
//! through the ELR or their last known leader, KIP-966). Its own proposals also create
//! the topics, once enough brokers are unfenced.
//!
//! Brokers follow the committed metadata log (`MetadataFetchRequest`s, as the quorum
//! simulation's brokers do), and register and heartbeat as
//! `crates/server/src/cluster_link/lifecycle.rs` does, to the controller they last saw
//! answer as active (else each in turn), keeping the lease: the send time of the last
//! heartbeat answered unfenced plus `broker.session.timeout.ms`.
//!
//! Each broker replicates as the server's `Partition`, fetcher and `send_isr_changes`
//! do: once an incarnation has caught up with its registration it opens a
//! [`ReplicaState`] per partition it is a replica of, from the log and its checkpointed
//! high watermark, and hands it every assignment its metadata brings (with the replicas
//! whose brokers are fenced as ineligible). Followers fetch from the leader their
//! metadata names, over the brokers' network (`sim::replication`: the log made durable
//! before each fetch, truncation where the leader says the logs diverge or to its high
//! watermark). Leaders send their ISR changes in one AlterPartition, with each member's
//! broker epoch from its fetches, to the active controller until answered; the controller
//! decides with `ClusterControl` and commits through the quorum like any other request.
//! A client next to the brokers (its requests cross no network) sends acks=all produces
//! to brokers that believe they lead; logs become durable a random part at a time, and
//! `fsync_before_ack` counts only durable data. Another simulation adds to the brokers
//! through an [`Extension`]: the group coordinators on a `__consumer_offsets` topic
//! (`crates/coordinator/tests/cluster_coordinators_simulation.rs`), the transaction
//! coordinators on `__transaction_state` (`cluster_txn_simulation.rs`). Not modelled:
//! reassignments, consumers, the partition log's real storage (`crates/storage` has its
//! own crash tests) and the client's network.
//!
//! Faults: voters crash (losing, tearing or garbling what was not fsynced) and restart;
//! a voter's disk starts failing its fsyncs, or fills up part way through a write, and
//! the voter halts when its metadata log fails, as the server does, and restarts on a
//! repaired disk with what was durable;
//! brokers crash and restart as new incarnations, their logs keeping only what was
//! durable; in the runs of [`run_seed_losing_disks`] (not with an extension, whose
//! checks assume no partition of its own loses acknowledged records) a broker also loses
//! its whole disk, restarting empty at once or later, and registers as an unclean
//! shutdown; the network partitions (half the time the quorum leader alone, with some
//! brokers; brokers from each other too), heals, delays and loses messages.
//!
//! Invariants, checked after every step:
//!
//! - (a) the log: at most one leader per term; every voter applies one common sequence
//!   of entries and records, and the same image at a record offset; a broker's image is
//!   the voters' image at its offset (so it applied a prefix of the sequence); no
//!   answered registration is lost (the record at its epoch is that registration);
//! - (b) the lease: if broker `b` holds a lease now and its image says `b` leads a
//!   partition, no image committed since (any voter applied) has that partition led by
//!   another or by none, nor has `b` fenced: what `groups.rs`'s `confirm_offsets_read`
//!   relies on;
//! - (c) at every batch boundary of the committed sequence, every partition leader is an
//!   active (registered, unfenced) broker in the partition's ISR;
//! - (d) liveness: once the faults heal, every broker is registered, unfenced and holds
//!   a lease, the topics exist, and every partition has a leader;
//! - (e) replication: an acknowledged acks=all write is never lost: some member of the
//!   committed ISR (or ELR) has it durably at the offset it was acknowledged at (unless
//!   ISR and ELR are both empty); leader epochs only grow, in the committed records and
//!   on every broker; a leader is in its ISR, its high watermark never goes back within
//!   its leadership, and every member of its ISR (and of the committed one, while it is
//!   the committed leader) has its records below it; an answered produce lies below its
//!   leader's high watermark and is answered once. A partition that went through an
//!   unclean election (of another replica than its last known leader, who keeps what it
//!   made durable here) leaves these data checks, as Kafka gives its writes up (counted
//!   in `Stats::unclean_elections`);
//! - (f) replication liveness: once healed, no ISR change is pending, every replica is
//!   back in the ISR, every leader's high watermark is its log end, every replica's log
//!   is the leader's, and holds every acknowledged write at its offset.
//!
//! Over the seeds, writes must have been acknowledged, ISRs shrunk and grown and leaders
//! changed, or the replication checks checked little.
//!
//! `a_broken_controller_that_grants_leases_unconfirmed_is_caught` runs a controller that
//! answers heartbeats without confirming its leadership (the defect active.rs fixed), and
//! asserts that the lease check catches it.
//!
//! `SIM_SEED=x` replays one seed, `SIM_SEEDS=n` / `SIM_FIRST_SEED=f` run a range,
//! `SIM_TRACE=1` prints each event. Replay is exact when built with `--cfg
//! tokio_unstable` (`scripts/simulate.sh`), which seeds Tokio's `select!` fairness
//! inside openraft (the glue's own selects are biased). Without it, two runs of a seed
//! diverged (an election a step later) in 3 of the 40 seeds from 1,000,000;
//! `seeds_replay_identically` checks eight seeds with it, one without.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use osprey_cluster::cluster_control::{
    BrokerHeartbeatInput, BrokerHeartbeatReply, BrokerRegistrationInput, ClusterControl, ClusterControlConfig,
    UNCLEAN_LEADER_ELECTION_ENABLE,
};
use osprey_cluster::image::{MetadataImage, MetadataRecord, NO_LEADER};
use osprey_cluster::quorum::{
    AppliedEvent, MetadataFetchContent, MetadataFetchRequest, MetadataFetchResponse, ProposeError, Quorum, ReplicaKey,
};
use osprey_cluster::replica::fetch::FollowerFetch;
use osprey_cluster::replica::{AckLevel, Assignment, IsrChange, Output, ReplicaConfig, ReplicaState};
use osprey_cluster::{
    AlterPartitionInput, AlterPartitionItem, AlterPartitionTopic, AlterPartitionTopicResult, PartitionImage,
};
use osprey_protocol::{ErrorCode, Uuid};
use osprey_storage::fs::{CrashMode, SimStorage};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::sim::replication::{self, Disk, FetchAnswer, FetchApplied};
use crate::sim::{directory_id, Rng, Route, SimNetwork, SimTransport, METADATA_DIR};

const VOTERS: usize = 3;
const STEP_MS: u64 = 50;
const FAULT_STEPS: usize = 600;
/// Simulated time the healed cluster gets to converge.
const HEAL_MS: u64 = 60_000;
/// `broker.heartbeat.interval.ms` and `broker.session.timeout.ms`, shorter than Kafka's
/// 2000 and 9000 (same proportion, about), so that sessions expire within a partition.
const HEARTBEAT_INTERVAL_MS: u64 = 500;
const SESSION_TIMEOUT_MS: u64 = 3_000;
/// The broker's `request.timeout.ms` for a registration.
const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// `unclean.leader.election.interval.ms`, short.
const UNCLEAN_ELECTION_INTERVAL_MS: u64 = 2_000;
/// The controller's timer wakes at least this often (topic creation).
const TIMER_MS: u64 = 250;
const RECORD_TAIL_CAPACITY: usize = 64;
const FETCH_MAX_WAIT_MS: u64 = 1_000;
const FETCH_BACKOFF_MS: u64 = 200;
/// The pause after every controller was tried once (cluster_link's `RETRY_BACKOFF`).
const RETRY_BACKOFF_MS: u64 = 100;
const BROKER_ID_BASE: i32 = 100;
/// Topics the controller creates, their partitions and replication factor.
const TOPICS: u8 = 2;
const PARTITIONS: usize = 3;
const REPLICATION_FACTOR: usize = 2;
/// `replica.lag.time.max.ms`, short as the session timeout is.
const REPLICA_LAG_MS: i64 = 2_000;
/// A follower's pause between two rounds of fetches (its partitions one after the
/// other), and a leader's between two AlterPartition requests.
const REPLICA_FETCH_PAUSE_MS: u64 = 50;
const ALTER_PARTITION_PAUSE_MS: u64 = 50;
/// Per step, the chance that a client sends an acks=all produce, and that a broker makes
/// part of a partition's log durable.
const PRODUCE_PER_MILLE: u64 = 600;
const FSYNC_PER_MILLE: u64 = 300;

// ---------------------------------------------------------------------------------------
// The active controller glue, as controller_node/active.rs.

// ---------------------------------------------------------------------------------------
// What another simulation adds to the brokers.

/// A topic the controller creates once enough brokers are unfenced.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    pub id: [u8; 16],
    pub partitions: usize,
    /// `unclean.leader.election.enable`: with it, a partition may lose acknowledged
    /// writes, and its data leaves the checks.
    pub unclean_election: bool,
}

/// What a simulation adds to the brokers (the coordinators of
/// `crates/coordinator/tests/cluster_coordinators_simulation.rs`): it lives in the
/// [`World`], is driven between the steps, appends through the partitions' leaders
/// ([`World::append_as_leader`]) and adds its invariants to the checks. Its appends are
/// checked as the client's writes are (answered once, below the high watermark, never
/// lost).
pub trait Extension: Send {
    /// Its topics, created after the data topics (a name starting with `__` keeps the
    /// data client away).
    fn topics(&self) -> Vec<TopicSpec>;
    /// Between two steps, after the brokers' own step; `faults`: before the heal.
    fn step(&mut self, w: &mut World, now_ms: i64, faults: bool);
    /// Broker `b` crashed: what it held in memory is gone.
    fn broker_crashed(&mut self, w: &mut World, b: usize);
    /// An append it made on broker `b` completed.
    fn append_completed(
        &mut self,
        w: &mut World,
        b: usize,
        key: PartitionKey,
        request_id: u64,
        result: Result<(), ErrorCode>,
        now_ms: i64,
    );
    /// Its invariants, after every step.
    fn check(&mut self, w: &mut World);
    /// Its liveness once the faults healed (and the cluster's converged).
    fn converged(&mut self, w: &mut World) -> Result<(), String>;
    /// What it did, by name: summed over the seeds, and compared by the replay check.
    fn counts(&self) -> Vec<(&'static str, usize)>;
}

/// A broker's request to a controller.
#[derive(Debug, Clone)]
enum Request {
    Register(BrokerRegistrationInput),
    Heartbeat(BrokerHeartbeatInput),
    AlterPartition(AlterPartitionInput),
}

/// A controller's answer.
#[derive(Debug, Clone)]
enum Answer {
    Registered(i64),
    Heartbeat(BrokerHeartbeatReply),
    AlterPartition(Vec<AlterPartitionTopicResult>),
    Failed(ErrorCode),
}

struct Queued {
    request: Request,
    reply: oneshot::Sender<Answer>,
}

/// One period of this node as the active controller.
struct Active {
    generation: u64,
    term: u64,
    /// The applied image plus every record proposed in this period and not yet applied.
    speculative: MetadataImage,
    /// The most recent proposal's outcome: `None` until it has one, then whether it
    /// committed. A decision that writes nothing is answered once it committed.
    last_proposal: Option<watch::Receiver<Option<bool>>>,
    next_unclean_election: Instant,
}

/// The controller task of one voter incarnation (active.rs's `Core`, without the APIs
/// brokers do not call here, gauges or leader rebalancing).
struct Controller {
    quorum: Arc<Quorum>,
    cluster: ClusterControl,
    active: Option<Active>,
    started: Instant,
    failures: (mpsc::UnboundedSender<u64>, mpsc::UnboundedReceiver<u64>),
    ended_generation: watch::Sender<u64>,
    next_generation: u64,
    /// false only in the broken variant: heartbeats that write nothing are answered from
    /// the image without confirming leadership.
    confirm_heartbeats: bool,
    sim: Sim,
    node_id: i32,
}

/// A pending answer: `ok` once the records commit.
struct Pending {
    ok: Answer,
    reply: oneshot::Sender<Answer>,
    heartbeat: bool,
}

impl Pending {
    fn fail(self, e: &ProposeError) {
        let code = match e {
            ProposeError::NotLeader { .. } | ProposeError::Stopped(_) => ErrorCode::NOT_CONTROLLER,
            ProposeError::TimedOut => ErrorCode::REQUEST_TIMED_OUT,
            _ => ErrorCode::UNKNOWN_SERVER_ERROR,
        };
        let _ = self.reply.send(Answer::Failed(code));
    }
}

impl Controller {
    fn new(quorum: Arc<Quorum>, sim: Sim, node_id: i32) -> Controller {
        let config = ClusterControlConfig {
            cluster_id: None,
            broker_session_timeout_ms: SESSION_TIMEOUT_MS as i64,
            unclean_leader_election_enable: true,
            min_insync_replicas: 1,
            eligible_leader_replicas_enabled: true,
        };
        let confirm_heartbeats = !sim.broken_glue;
        Controller {
            quorum,
            cluster: ClusterControl::new(config),
            active: None,
            started: Instant::now(),
            failures: mpsc::unbounded_channel(),
            ended_generation: watch::channel(0).0,
            next_generation: 1,
            confirm_heartbeats,
            sim,
            node_id,
        }
    }

    async fn run(mut self, mut requests: mpsc::Receiver<Queued>) {
        let mut metrics = self.quorum.metrics();
        loop {
            self.check_leadership();
            let wake = self.next_wake();
            tokio::select! {
                biased;
                changed = metrics.changed() => {
                    if changed.is_err() {
                        self.deactivate("the quorum stopped");
                        return;
                    }
                }
                Some(generation) = self.failures.1.recv() => {
                    if self.active.as_ref().is_some_and(|a| a.generation == generation) {
                        self.deactivate("a proposal failed");
                    }
                }
                queued = requests.recv() => match queued {
                    Some(q) => self.handle(q),
                    None => return,
                },
                _ = tokio::time::sleep_until(wake) => self.on_timer(),
            }
        }
    }

    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    fn check_leadership(&mut self) {
        let (leads, term, caught_up) = {
            let metrics = self.quorum.metrics();
            let m = metrics.borrow();
            let applied = m.last_applied.map(|l| l.index);
            (m.state.is_leader(), m.current_term, applied.is_some() && applied >= m.last_log_index)
        };
        let knows_cluster_id = self.quorum.with_applied(|a| a.image.cluster_id.is_some());
        match &self.active {
            Some(a) if !leads || a.term != term => self.deactivate("leadership moved"),
            None if leads && caught_up && knows_cluster_id => self.activate(term),
            _ => {}
        }
    }

    fn activate(&mut self, term: u64) {
        let image = self.quorum.with_applied(|a| a.image.clone());
        let now_ms = self.now_ms();
        self.cluster.activate(&image, now_ms);
        let generation = self.next_generation;
        self.next_generation += 1;
        self.sim.lock().stats.activations += 1;
        self.sim.note(format!("controller {} active in term {term} at offset {}", self.node_id, image.applied));
        self.active = Some(Active {
            generation,
            term,
            speculative: image,
            last_proposal: None,
            next_unclean_election: Instant::now() + Duration::from_millis(UNCLEAN_ELECTION_INTERVAL_MS),
        });
    }

    fn deactivate(&mut self, why: &str) {
        let Some(a) = self.active.take() else { return };
        self.ended_generation.send_replace(a.generation);
        self.sim.note(format!("controller {} inactive ({why})", self.node_id));
    }

    fn next_wake(&self) -> Instant {
        let timer = Instant::now() + Duration::from_millis(TIMER_MS);
        let Some(active) = &self.active else { return timer };
        let session = self
            .cluster
            .next_deadline(&active.speculative)
            .map(|ms| self.started + Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0) + 1));
        [session, Some(active.next_unclean_election)].into_iter().flatten().fold(timer, Instant::min)
    }

    /// active.rs's `handle`: decide on the speculative image, propose, answer once
    /// committed.
    fn handle(&mut self, q: Queued) {
        let now_ms = self.now_ms();
        let Some(active) = &mut self.active else {
            let _ = q.reply.send(Answer::Failed(ErrorCode::NOT_CONTROLLER));
            return;
        };
        let image = &active.speculative;
        let decided = match &q.request {
            Request::Register(input) => {
                self.cluster.register_broker(image, input, now_ms).map(|r| (r.records, Answer::Registered(r.response)))
            }
            Request::Heartbeat(input) => {
                self.cluster.broker_heartbeat(image, input, now_ms).map(|r| (r.records, Answer::Heartbeat(r.response)))
            }
            Request::AlterPartition(input) => {
                self.cluster.alter_partition(image, input).map(|r| (r.records, Answer::AlterPartition(r.response)))
            }
        };
        let (records, ok) = match decided {
            Ok(decided) => decided,
            Err(e) => {
                let _ = q.reply.send(Answer::Failed(e.code));
                return;
            }
        };
        for r in &records {
            active.speculative.apply(r);
        }
        let heartbeat = matches!(q.request, Request::Heartbeat(_));
        // A heartbeat's answer waits at most half an interval for its commit.
        let deadline_ms = if heartbeat { HEARTBEAT_INTERVAL_MS / 2 } else { REQUEST_TIMEOUT_MS };
        self.propose(records, Some(Pending { ok, reply: q.reply, heartbeat }), deadline_ms);
    }

    /// active.rs's `propose`.
    fn propose(&mut self, records: Vec<MetadataRecord>, answer: Option<Pending>, deadline_ms: u64) {
        let Some(active) = &mut self.active else {
            if let Some(answer) = answer {
                answer.fail(&ProposeError::NotLeader { leader: None, endpoint: None });
            }
            return;
        };
        if records.is_empty() {
            let Some(answer) = answer else { return };
            // Answered once the proposals before it committed: the decision was made on
            // the speculative image, which holds their records. If one of them failed,
            // those records may never commit, and the answer fails so that the broker asks
            // again (the failure also ends the period) (found by cluster_simulation:
            // an AlterPartition answered FENCED_LEADER_EPOCH from a fencing that never
            // committed left the leader's ISR change in flight for good, seed 1,000,058
            // with 4 brokers).
            let pending = active.last_proposal.clone().filter(|done| *done.borrow() != Some(true));
            // The lease: a heartbeat answered unfenced is granted only by a controller a
            // quorum confirmed after the heartbeat came in.
            let confirm = (answer.heartbeat && self.confirm_heartbeats).then(|| self.quorum.clone());
            if pending.is_none() && confirm.is_none() {
                let _ = answer.reply.send(answer.ok);
                return;
            }
            let generation = active.generation;
            let mut ended = self.ended_generation.subscribe();
            tokio::spawn(async move {
                if let Some(mut done) = pending {
                    let committed = done.wait_for(|d| d.is_some()).await.is_ok_and(|d| *d == Some(true));
                    if !committed {
                        answer.fail(&ProposeError::NotLeader { leader: None, endpoint: None });
                        return;
                    }
                }
                let confirmed = match confirm {
                    Some(quorum) => quorum.confirm_leadership(Duration::from_millis(deadline_ms)).await,
                    None => Ok(()),
                };
                match confirmed {
                    Err(e) => answer.fail(&e),
                    Ok(()) if *ended.borrow_and_update() >= generation => {
                        answer.fail(&ProposeError::NotLeader { leader: None, endpoint: None })
                    }
                    Ok(()) => {
                        let _ = answer.reply.send(answer.ok);
                    }
                }
            });
            return;
        }
        let quorum = self.quorum.clone();
        let mut proposal: Pin<Box<dyn Future<Output = _> + Send>> =
            Box::pin(async move { quorum.propose(records).await });
        // Polled once here, so batches decided one after the other enter the log in order.
        let first = poll_once(proposal.as_mut());
        if let Poll::Ready(Err(e)) = &first {
            if let Some(answer) = answer {
                answer.fail(e);
            }
            self.deactivate("a proposal was refused");
            return;
        }
        let (done_tx, done) = watch::channel(None);
        active.last_proposal = Some(done);
        let failures = self.failures.0.clone();
        let generation = active.generation;
        let mut ended = self.ended_generation.subscribe();
        tokio::spawn(async move {
            let outcome = match first {
                Poll::Ready(outcome) => outcome,
                // Biased, unlike active.rs: an unbiased select draws from Tokio's
                // unseeded RNG, and a seed must replay.
                Poll::Pending => tokio::select! {
                    biased;
                    committed = tokio::time::timeout(Duration::from_millis(deadline_ms), proposal) => {
                        committed.unwrap_or(Err(ProposeError::TimedOut))
                    }
                    _ = ended.wait_for(|ended| *ended >= generation) => {
                        Err(ProposeError::NotLeader { leader: None, endpoint: None })
                    }
                },
            };
            match (&outcome, answer) {
                (Ok(_), Some(answer)) => {
                    let _ = answer.reply.send(answer.ok);
                }
                (Err(e), Some(answer)) => answer.fail(e),
                _ => {}
            }
            let _ = done_tx.send(Some(outcome.is_ok()));
            // Any failure ends the period, a timeout included, as in active.rs (seed
            // 1,001,393: kept active after a timed-out proposal, the controller failed
            // every later heartbeat and renewed no lease after the heal).
            if outcome.is_err() {
                let _ = failures.send(generation);
            }
        });
    }

    /// active.rs's `on_timer`: fence brokers whose session expired (one proposal each),
    /// elect leaders for offline partitions when due; and create the topics.
    fn on_timer(&mut self) {
        let now_ms = self.now_ms();
        loop {
            let Some(active) = &mut self.active else { return };
            let result = self.cluster.tick(&active.speculative, now_ms);
            let Some(broker) = result.response else { break };
            for r in &result.records {
                active.speculative.apply(r);
            }
            self.sim.note(format!("controller {} fences broker {broker}: session expired", self.node_id));
            self.propose(result.records, None, REQUEST_TIMEOUT_MS);
        }
        let Some(active) = &mut self.active else { return };
        if Instant::now() >= active.next_unclean_election {
            active.next_unclean_election = Instant::now() + Duration::from_millis(UNCLEAN_ELECTION_INTERVAL_MS);
            let result = self.cluster.elect_unclean_leaders(&active.speculative);
            if result.response > 0 {
                for r in &result.records {
                    active.speculative.apply(r);
                }
                self.propose(result.records, None, REQUEST_TIMEOUT_MS);
            }
        }
        self.create_topics();
    }

    /// The topics an operator creates ([`Sim::topics`]): once enough brokers are
    /// unfenced, each topic's partitions placed over them in turn, led by the first (all
    /// in the ISR).
    fn create_topics(&mut self) {
        let Some(active) = &mut self.active else { return };
        let unfenced: Vec<i32> = active.speculative.brokers().filter(|b| b.is_active()).map(|b| b.id).collect();
        if unfenced.len() < REPLICATION_FACTOR {
            return;
        }
        let missing = self.sim.topics.iter().enumerate().find(|(_, t)| active.speculative.topic(&t.name).is_none());
        let Some((t, topic)) = missing else { return };
        let replicas = (0..topic.partitions)
            .map(|p| (0..REPLICATION_FACTOR).map(|r| unfenced[(p + r + t) % unfenced.len()]).collect())
            .collect();
        let configs =
            (!topic.unclean_election).then(|| (UNCLEAN_LEADER_ELECTION_ENABLE.to_string(), "false".to_string()));
        let record = MetadataRecord::CreateTopic {
            name: topic.name.clone(),
            id: topic.id,
            replicas,
            configs: configs.into_iter().collect(),
            isrs: None,
        };
        active.speculative.apply(&record);
        self.sim.note(format!("controller {} creates {}", self.node_id, topic.name));
        self.propose(vec![record], None, REQUEST_TIMEOUT_MS);
    }
}

/// Polls `future` once with a waker that does nothing (active.rs's `poll_once`).
fn poll_once<T>(future: Pin<&mut (dyn Future<Output = T> + Send)>) -> Poll<T> {
    let waker = std::task::Waker::noop();
    future.poll(&mut std::task::Context::from_waker(waker))
}

// ---------------------------------------------------------------------------------------
// The world.

struct Voter {
    node_id: i32,
    replica: ReplicaKey,
    disk: SimStorage,
    quorum: Option<Arc<Quorum>>,
    /// The controller task's request queue and the task.
    controller: Option<(mpsc::Sender<Queued>, tokio::task::JoinHandle<()>)>,
    incarnation: u64,
    events: Option<tokio::sync::broadcast::Receiver<AppliedEvent>>,
    last_applied: Option<u64>,
    record_offset: u64,
}

struct Broker {
    node_id: i32,
    /// The follower and lifecycle tasks of the incarnation running now.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    incarnation: u64,
    image: MetadataImage,
    /// The voter index of the controller last seen answering as active.
    controller: Option<usize>,
    /// The voter index that last answered a metadata fetch naming the active controller.
    next_controller: usize,
    epoch: Option<i64>,
    fenced: bool,
    lease_until: Option<Instant>,
    /// The partitions this broker hosts: their logs outlive the incarnation, their replica
    /// state machines do not.
    hosted: BTreeMap<PartitionKey, Hosted>,
    /// ISR changes not answered yet, newest per partition (the server's
    /// `send_isr_changes`).
    isr_changes: BTreeMap<PartitionKey, IsrChange>,
    /// Followers' broker epochs, from their fetches (AlterPartition v3, KIP-903).
    follower_epochs: BTreeMap<i32, i64>,
}

/// Whether brokers lose whole disks in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disks {
    Kept,
    Lost,
    /// The broken broker: lost, and a broker registers with the same incarnation id every
    /// time it starts (as one that took it from its configuration would), so that the
    /// controller takes a restart on an empty disk for the same process registering again:
    /// its epoch, fencing state and place in the ISRs stay.
    LostSameIncarnationId,
}

/// A replica whose broker lost its disk.
#[derive(Debug, Clone, Copy)]
struct DiskLoss {
    /// The broker incarnation that starts on the empty disk.
    incarnation: u64,
    /// That incarnation registered and the partition's committed ISR no longer names the
    /// broker: it rejoins only by catching up (and the loss is forgotten then).
    left_isr: bool,
}

/// A partition: its topic id and index.
pub type PartitionKey = (Uuid, i32);

/// One partition on one broker: the log, and the replica state machine once the
/// incarnation opened it.
#[derive(Default)]
struct Hosted {
    disk: Disk,
    replica: Option<ReplicaState>,
}

/// A client's acks=all produce, waiting for its answer.
struct Produce {
    partition: PartitionKey,
    first_offset: i64,
    write_ids: Vec<u64>,
    /// Made for the [`Extension`], which is told the outcome.
    by_extension: bool,
}

/// A write acknowledged to its client.
struct Acked {
    partition: PartitionKey,
    offset: i64,
    write_id: u64,
    /// No ISR member but the broker that lost its disk held it then, or every ISR and
    /// ELR member has lost its disk since: gone, as nothing promised otherwise.
    lost_with_disk: bool,
}

pub struct World {
    rng: Rng,
    voters: Vec<Voter>,
    groups: Vec<u8>,
    brokers: Vec<Broker>,
    broker_groups: Vec<u8>,
    drop_per_mille: u64,
    max_delay_ms: u64,
    leaders_by_term: BTreeMap<u64, ReplicaKey>,
    /// index → (term, first record of the batch).
    applied_at: BTreeMap<u64, (u64, Option<MetadataRecord>)>,
    records: BTreeMap<u64, MetadataRecord>,
    /// The committed image at each record offset a voter reached.
    images: BTreeMap<u64, MetadataImage>,
    committing_cluster_id: bool,
    /// Registrations answered to brokers: (broker id, epoch, incarnation id). The epoch is
    /// the offset of the registration record, which must be in the committed sequence.
    acked_registrations: Vec<(i32, i64, [u8; 16])>,
    /// Produces waiting for their answers, by (broker id, incarnation, request id).
    produces: BTreeMap<(i32, u64, u64), Produce>,
    next_request: u64,
    next_write_id: u64,
    acked: Vec<Acked>,
    /// Whether whole broker disks are lost in this run ([`run_seed_losing_disks`]).
    disks: Disks,
    /// The replicas whose broker lost its disk and has not caught up since, by (node id,
    /// partition).
    disks_lost: BTreeMap<(i32, PartitionKey), DiskLoss>,
    /// Partitions that went through an unclean election (a leader outside the ISR and
    /// ELR, other than the last known leader): the data checks leave them, as Kafka gives
    /// up acknowledged writes there.
    unclean: BTreeSet<PartitionKey>,
    /// The largest leader epoch each broker's replica state machine had, per partition.
    replica_epochs: BTreeMap<(i32, PartitionKey), i32>,
    /// Each leading replica state machine's high watermark, by (broker, incarnation,
    /// partition, leader epoch).
    leader_high_watermarks: BTreeMap<(i32, u64, PartitionKey, i32), i64>,
    /// What the brokers' tasks found wrong, for the next check to report.
    violations: Vec<String>,
    stats: Stats,
    trace: Vec<String>,
    trace_to_stderr: bool,
    pub seed: u64,
    /// Completions of the extension's appends, for it to take at its next call.
    extension_completions: Vec<(usize, PartitionKey, u64, Result<(), ErrorCode>)>,
    /// What a simulation adds to the brokers; taken out while it runs
    /// ([`World::with_extension`]).
    extension: Option<Box<dyn Extension>>,
}

/// What a seed did, to tell that the faults reached the paths the invariants are about.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Stats {
    /// Heartbeats answered unfenced (leases granted or extended).
    leases_granted: usize,
    /// Checks of (b) made while a broker held a lease and led a partition.
    lease_checks: usize,
    /// Brokers fenced by a committed record.
    fencings: usize,
    activations: usize,
    /// Voters halted because their metadata log failed (a failing fsync or a full disk).
    disk_halts: usize,
    /// Writes acknowledged to acks=all clients.
    acked_writes: usize,
    /// Committed partition changes that shrank or grew an ISR, or moved a leadership to
    /// another broker.
    isr_shrinks: usize,
    isr_expansions: usize,
    leader_changes: usize,
    /// Partitions that went through an unclean election (their data is not checked since).
    unclean_elections: usize,
    /// Elections of the last known leader, with neither ISR nor ELR left (still checked).
    last_known_leader_elections: usize,
    /// Followers that truncated where the leader said their logs diverge.
    diverging_truncations: usize,
    /// ISR changes the controller refused.
    refused_isr_changes: usize,
    /// Whole broker disks lost, and the acknowledged writes that went with them (held
    /// by no ISR member that kept its disk).
    disk_losses: usize,
    writes_lost_with_disks: usize,
    /// Partitions whose every ISR and ELR member lost its disk, or that elected a last
    /// known leader that had lost its disk (their data is not checked since).
    partitions_lost_with_disks: usize,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.leases_granted += other.leases_granted;
        self.lease_checks += other.lease_checks;
        self.fencings += other.fencings;
        self.activations += other.activations;
        self.disk_halts += other.disk_halts;
        self.acked_writes += other.acked_writes;
        self.isr_shrinks += other.isr_shrinks;
        self.isr_expansions += other.isr_expansions;
        self.leader_changes += other.leader_changes;
        self.unclean_elections += other.unclean_elections;
        self.last_known_leader_elections += other.last_known_leader_elections;
        self.diverging_truncations += other.diverging_truncations;
        self.refused_isr_changes += other.refused_isr_changes;
        self.disk_losses += other.disk_losses;
        self.writes_lost_with_disks += other.writes_lost_with_disks;
        self.partitions_lost_with_disks += other.partitions_lost_with_disks;
    }
}

#[derive(Clone)]
pub struct Sim {
    world: Arc<Mutex<World>>,
    seed: u64,
    broken_glue: bool,
    /// The data topics, then the extension's.
    topics: Arc<Vec<TopicSpec>>,
    /// When the seed started, on the simulated clock (for the trace).
    started: Instant,
}

impl SimNetwork for Sim {
    fn route(&self, from: i32, to: ReplicaKey) -> Route<Arc<Quorum>> {
        let mut w = self.lock();
        let (a, b) = (voter_index(from), voter_index(to.node_id));
        if b >= w.voters.len() || w.voters[b].replica != to {
            return Route::Unreachable;
        }
        let group = w.groups[a];
        w.route_to(group, b)
    }

    fn still_connected(&self, from: i32, to: i32, incarnation: u64) -> bool {
        let w = self.lock();
        let (a, b) = (voter_index(from), voter_index(to));
        w.voters[b].incarnation == incarnation && w.voters[b].quorum.is_some() && w.groups[a] == w.groups[b]
    }
}

fn voter_index(node_id: i32) -> usize {
    (node_id - 1) as usize
}

impl World {
    fn route_to(&mut self, from_group: u8, to: usize) -> Route<Arc<Quorum>> {
        if to >= self.voters.len() || self.voters[to].quorum.is_none() || self.groups[to] != from_group {
            return Route::Unreachable;
        }
        let delay = self.rng.below(self.max_delay_ms + 1);
        let drop = self.rng.chance(self.drop_per_mille);
        let incarnation = self.voters[to].incarnation;
        match self.voters[to].quorum.clone() {
            Some(quorum) if !drop => Route::Deliver { to: quorum, delay, incarnation },
            _ => Route::Lost { delay },
        }
    }

    fn broker_connected(&self, b: usize, voter: usize, incarnation: u64) -> bool {
        let v = &self.voters[voter];
        v.incarnation == incarnation && v.quorum.is_some() && self.groups[voter] == self.broker_groups[b]
    }
}

impl Sim {
    fn new(seed: u64, brokers: usize, broken_glue: bool, disks: Disks, extension: Option<Box<dyn Extension>>) -> Sim {
        // Even data topics keep unclean leader election on, so that they get a leader back
        // whatever happens; odd ones turn it off, and their data is checked throughout.
        let mut topics: Vec<TopicSpec> = (0..TOPICS)
            .map(|t| TopicSpec {
                name: format!("t{t}"),
                id: [t + 1; 16],
                partitions: PARTITIONS,
                unclean_election: t % 2 == 0,
            })
            .collect();
        topics.extend(extension.iter().flat_map(|e| e.topics()));
        let voters = (1..=VOTERS as i32)
            .map(|n| Voter {
                node_id: n,
                replica: ReplicaKey::new(n, directory_id(n, 1)),
                disk: SimStorage::new(),
                quorum: None,
                controller: None,
                incarnation: 0,
                events: None,
                last_applied: None,
                record_offset: 0,
            })
            .collect();
        let brokers: Vec<Broker> = (1..=brokers as i32)
            .map(|n| Broker {
                node_id: BROKER_ID_BASE + n,
                tasks: Vec::new(),
                incarnation: 0,
                image: MetadataImage::default(),
                controller: None,
                next_controller: 0,
                epoch: None,
                fenced: true,
                lease_until: None,
                hosted: BTreeMap::new(),
                isr_changes: BTreeMap::new(),
                follower_epochs: BTreeMap::new(),
            })
            .collect();
        let mut images = BTreeMap::new();
        images.insert(0, MetadataImage::default());
        let world = World {
            rng: Rng::new(seed),
            voters,
            groups: vec![0; VOTERS],
            broker_groups: vec![0; brokers.len()],
            brokers,
            drop_per_mille: 0,
            max_delay_ms: 10,
            leaders_by_term: BTreeMap::new(),
            applied_at: BTreeMap::new(),
            records: BTreeMap::new(),
            images,
            committing_cluster_id: false,
            acked_registrations: Vec::new(),
            produces: BTreeMap::new(),
            next_request: 0,
            next_write_id: 0,
            acked: Vec::new(),
            disks,
            disks_lost: BTreeMap::new(),
            unclean: BTreeSet::new(),
            replica_epochs: BTreeMap::new(),
            leader_high_watermarks: BTreeMap::new(),
            violations: Vec::new(),
            stats: Stats::default(),
            trace: Vec::new(),
            trace_to_stderr: std::env::var("SIM_TRACE").is_ok(),
            seed,
            extension_completions: Vec::new(),
            extension,
        };
        let topics = Arc::new(topics);
        Sim { world: Arc::new(Mutex::new(world)), seed, broken_glue, topics, started: Instant::now() }
    }

    /// Milliseconds since the seed started, on the simulated clock: the replica state
    /// machines' `now`.
    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, what: String) {
        let now_ms = self.now_ms();
        self.lock().note(now_ms, what);
    }

    async fn start_voter(&self, i: usize) {
        let (replica, disk, node_id) = {
            let w = self.lock();
            (w.voters[i].replica, w.voters[i].disk.clone(), w.voters[i].node_id)
        };
        let transport = SimTransport { from: node_id, network: self.clone() };
        let quorum =
            Quorum::start(crate::sim::config(replica, RECORD_TAIL_CAPACITY), disk, Path::new(METADATA_DIR), transport)
                .await
                .unwrap_or_else(|e| panic!("seed {}: node {node_id} does not start: {e}", self.seed));
        let quorum = Arc::new(quorum);
        let (applied, events) = quorum.subscribe();
        let (requests, receiver) = mpsc::channel(64);
        let task = tokio::spawn(Controller::new(quorum.clone(), self.clone(), node_id).run(receiver));
        {
            let mut w = self.lock();
            let seed = self.seed;
            image_reached(&mut w.images, &applied.image, seed, &replica.to_string());
            let v = &mut w.voters[i];
            v.last_applied = applied.last_applied.map(|l| l.index);
            v.record_offset = applied.image.applied;
            v.events = Some(events);
            v.quorum = Some(quorum);
            v.controller = Some((requests, task));
        }
        self.note(format!("start voter {node_id}"));
    }

    async fn crash_voter(&self, i: usize, mode: CrashMode) {
        let quorum = {
            let mut w = self.lock();
            w.take_applied(i, self.seed);
            let v = &mut w.voters[i];
            let Some(quorum) = v.quorum.take() else { return };
            if let Some((_, task)) = v.controller.take() {
                task.abort();
            }
            v.incarnation += 1;
            v.disk = v.disk.crash(mode);
            v.events = None;
            quorum
        };
        self.note(format!("crash voter {} {mode:?}", i + 1));
        quorum.shutdown().await;
    }

    async fn bootstrap(&self) {
        let quorums: Vec<Arc<Quorum>> = self.lock().voters.iter().filter_map(|v| v.quorum.clone()).collect();
        crate::sim::bootstrap(&quorums).await;
    }

    /// The bootstrap's first commit: the cluster id (controller_node/membership.rs).
    fn commit_cluster_id(&self) {
        let leader = {
            let mut w = self.lock();
            if w.committing_cluster_id {
                return;
            }
            let Some(leader) = crate::sim::leader_without_cluster_id(w.voters.iter().filter_map(|v| v.quorum.clone()))
            else {
                return;
            };
            w.committing_cluster_id = true;
            leader
        };
        let sim = self.clone();
        tokio::spawn(async move {
            crate::sim::commit_cluster_id(leader).await;
            sim.lock().committing_cluster_id = false;
        });
    }

    fn start_broker(&self, b: usize) {
        let node_id = {
            let mut w = self.lock();
            let broker = &mut w.brokers[b];
            if !broker.tasks.is_empty() {
                return;
            }
            broker.image = MetadataImage::default();
            broker.controller = None;
            broker.epoch = None;
            broker.fenced = true;
            broker.lease_until = None;
            let incarnation = broker.incarnation;
            broker.tasks = vec![
                tokio::spawn(self.clone().follow(b, incarnation)),
                tokio::spawn(self.clone().lifecycle(b, incarnation)),
                tokio::spawn(self.clone().replicate(b, incarnation)),
                tokio::spawn(self.clone().send_isr_changes(b, incarnation)),
            ];
            broker.node_id
        };
        self.note(format!("start broker {node_id}"));
    }

    /// Broker `b` stops at once: its image, registration, lease, replica state machines
    /// and unanswered produces are gone with it, and its logs keep what was durable.
    fn crash_broker(&self, b: usize) {
        let node_id = {
            let mut w = self.lock();
            let broker = &mut w.brokers[b];
            if broker.tasks.is_empty() {
                return;
            }
            for task in broker.tasks.drain(..) {
                task.abort();
            }
            let (node_id, incarnation) = (broker.node_id, broker.incarnation);
            broker.incarnation += 1;
            broker.lease_until = None;
            for hosted in broker.hosted.values_mut() {
                hosted.disk.crash();
                hosted.replica = None;
            }
            broker.isr_changes.clear();
            broker.follower_epochs.clear();
            w.produces.retain(|&(id, n, _), _| (id, n) != (node_id, incarnation));
            let now_ms = self.now_ms();
            w.with_extension(now_ms, |e, w| e.broker_crashed(w, b));
            node_id
        };
        self.note(format!("crash broker {node_id}"));
    }

    /// Broker `b` crashes (if up) and its disk is replaced by an empty one, as after a
    /// disk failure or a lost volume: its logs are gone, and it registers again as an
    /// unclean shutdown (it cannot name its previous broker epoch).
    /// Half the time it starts again at once (a replaced volume under a restarting pod),
    /// before its session expires: its registration is what takes it out of the ISRs.
    fn lose_broker_disk(&self, b: usize) {
        self.crash_broker(b);
        let (node_id, at_once) = {
            let mut w = self.lock();
            w.lose_disk(b);
            let at_once = w.rng.chance(500);
            (w.brokers[b].node_id, at_once)
        };
        self.note(format!("broker {node_id} loses its disk"));
        if at_once {
            self.start_broker(b);
        }
    }

    /// Broker `b`'s metadata follower (as quorum_simulation's and follower.rs).
    async fn follow(self, b: usize, incarnation: u64) {
        loop {
            let fetched = self.fetch_metadata(b).await;
            if !self.apply_fetched(b, incarnation, fetched) {
                tokio::time::sleep(Duration::from_millis(FETCH_BACKOFF_MS)).await;
            }
        }
    }

    async fn fetch_metadata(&self, b: usize) -> Option<MetadataFetchResponse> {
        let (request, target, route) = {
            let mut w = self.lock();
            let target = match w.brokers[b].controller {
                Some(i) => i,
                None => w.rng.below(VOTERS as u64) as usize,
            };
            let broker = &w.brokers[b];
            let request = MetadataFetchRequest {
                broker_id: broker.node_id,
                next_offset: broker.image.applied,
                max_wait_ms: FETCH_MAX_WAIT_MS,
                max_records: 10_000,
            };
            let group = w.broker_groups[b];
            (request, target, w.route_to(group, target))
        };
        let Route::Deliver { to: quorum, delay, incarnation } = route else {
            tokio::time::sleep(Duration::from_millis(1)).await;
            return None;
        };
        tokio::time::sleep(Duration::from_millis(delay)).await;
        if !self.lock().broker_connected(b, target, incarnation) {
            return None;
        }
        let response = quorum.fetch_metadata(&request).await;
        self.lock().broker_connected(b, target, incarnation).then_some(response)
    }

    fn apply_fetched(&self, b: usize, incarnation: u64, fetched: Option<MetadataFetchResponse>) -> bool {
        let now_ms = self.now_ms();
        let mut w = self.lock();
        let broker = &mut w.brokers[b];
        if broker.incarnation != incarnation {
            return false;
        }
        let Some(response) = fetched else {
            broker.controller = None;
            return false;
        };
        broker.controller = response.leader.as_ref().map(|l| voter_index(l.node_id)).filter(|i| *i < VOTERS);
        let applied = match &response.content {
            MetadataFetchContent::NotReady { .. } => return false,
            MetadataFetchContent::Records { records, .. } if records.is_empty() => return true,
            _ => response.content.apply_to(&mut broker.image).is_ok(),
        };
        w.apply_partition_metadata(b, now_ms);
        applied
    }

    /// Broker `b`'s registration and heartbeats (lifecycle.rs's `run_lifecycle`).
    async fn lifecycle(self, b: usize, incarnation: u64) {
        let (node_id, incarnation_id) = {
            let w = self.lock();
            let node_id = w.brokers[b].node_id;
            let mut id = [0u8; 16];
            id[..4].copy_from_slice(&node_id.to_be_bytes());
            if w.disks != Disks::LostSameIncarnationId {
                id[8..].copy_from_slice(&incarnation.to_be_bytes());
            }
            (node_id, Uuid(id))
        };
        loop {
            // Registration needs the cluster id, which comes with the metadata.
            let cluster_id = loop {
                if let Some(id) = self.lock().brokers[b].image.cluster_id.clone() {
                    break id;
                }
                tokio::time::sleep(Duration::from_millis(FETCH_BACKOFF_MS)).await;
            };
            let input = BrokerRegistrationInput {
                broker_id: node_id,
                cluster_id,
                incarnation_id,
                listeners: Vec::new(),
                rack: None,
                // A crashed broker cannot tell its previous epoch.
                previous_broker_epoch: -1,
            };
            let epoch = loop {
                let deadline = Instant::now() + Duration::from_millis(REQUEST_TIMEOUT_MS);
                if let Some(Answer::Registered(epoch)) =
                    self.send_to_controller(b, Request::Register(input.clone()), deadline).await
                {
                    break epoch;
                }
                tokio::time::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS.min(500))).await;
            };
            {
                let now_ms = self.now_ms();
                let mut w = self.lock();
                let broker = &mut w.brokers[b];
                broker.epoch = Some(epoch);
                broker.fenced = true;
                w.acked_registrations.push((node_id, epoch, incarnation_id.0));
                w.apply_partition_metadata(b, now_ms);
            }
            self.note(format!("broker {node_id} registered at epoch {epoch}"));
            self.heartbeat_until_stale(b, epoch).await;
            self.note(format!("broker {node_id}'s registration went stale"));
        }
    }

    async fn heartbeat_until_stale(&self, b: usize, epoch: i64) {
        loop {
            let (node_id, offset) = {
                let w = self.lock();
                (w.brokers[b].node_id, w.brokers[b].image.applied as i64 - 1)
            };
            let request = Request::Heartbeat(BrokerHeartbeatInput {
                broker_id: node_id,
                broker_epoch: epoch,
                current_metadata_offset: offset,
                want_fence: false,
                want_shut_down: false,
            });
            let sent_at = Instant::now();
            let deadline = sent_at + Duration::from_millis(HEARTBEAT_INTERVAL_MS.max(100));
            match self.send_to_controller(b, request, deadline).await {
                Some(Answer::Heartbeat(r)) => {
                    let mut w = self.lock();
                    let broker = &mut w.brokers[b];
                    broker.fenced = r.is_fenced;
                    broker.lease_until = (!r.is_fenced).then_some(sent_at + Duration::from_millis(SESSION_TIMEOUT_MS));
                    if !r.is_fenced {
                        w.stats.leases_granted += 1;
                    }
                }
                Some(Answer::Failed(ErrorCode::STALE_BROKER_EPOCH)) => {
                    let mut w = self.lock();
                    let broker = &mut w.brokers[b];
                    broker.epoch = None;
                    broker.fenced = true;
                    broker.lease_until = None;
                    return;
                }
                _ => {}
            }
            // While fenced, a heartbeat goes out as soon as more metadata is applied.
            let pause_until = Instant::now() + Duration::from_millis(HEARTBEAT_INTERVAL_MS);
            let applied = self.lock().brokers[b].image.applied;
            while Instant::now() < pause_until {
                tokio::time::sleep(Duration::from_millis(STEP_MS.min(HEARTBEAT_INTERVAL_MS))).await;
                let w = self.lock();
                if w.brokers[b].fenced && w.brokers[b].image.applied != applied {
                    break;
                }
            }
        }
    }

    /// cluster_link's `send_to_controller`: the controller last seen active, else each in
    /// turn, until one answers as the active controller or the deadline passes.
    async fn send_to_controller(&self, b: usize, request: Request, deadline: Instant) -> Option<Answer> {
        let mut tried = 0usize;
        loop {
            let target = {
                let mut w = self.lock();
                let broker = &mut w.brokers[b];
                broker.controller.unwrap_or(broker.next_controller % VOTERS)
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            let sent = tokio::time::timeout(remaining, self.send_once(b, target, request.clone())).await;
            match sent {
                Ok(Some(answer)) if !matches!(answer, Answer::Failed(ErrorCode::NOT_CONTROLLER)) => {
                    self.lock().brokers[b].controller = Some(target);
                    return Some(answer);
                }
                _ => {
                    let mut w = self.lock();
                    let broker = &mut w.brokers[b];
                    if broker.controller == Some(target) {
                        broker.controller = None;
                    }
                    broker.next_controller = target + 1;
                }
            }
            tried += 1;
            if Instant::now() >= deadline {
                return None;
            }
            if tried.is_multiple_of(VOTERS) {
                let pause =
                    Duration::from_millis(RETRY_BACKOFF_MS).min(deadline.saturating_duration_since(Instant::now()));
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// One request to controller `target` and its answer, over the network.
    async fn send_once(&self, b: usize, target: usize, request: Request) -> Option<Answer> {
        let route = {
            let mut w = self.lock();
            let group = w.broker_groups[b];
            w.route_to(group, target)
        };
        let (delay, incarnation) = match route {
            Route::Unreachable => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                return None;
            }
            Route::Lost { delay } => {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                return None;
            }
            Route::Deliver { delay, incarnation, .. } => (delay, incarnation),
        };
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let queue = {
            let w = self.lock();
            if !w.broker_connected(b, target, incarnation) {
                return None;
            }
            w.voters[target].controller.as_ref().map(|(queue, _)| queue.clone())?
        };
        let (reply, answer) = oneshot::channel();
        queue.try_send(Queued { request, reply }).ok()?;
        let answer = answer.await.ok()?;
        // The answer crosses back: the controller may have crashed or been cut off.
        self.lock().broker_connected(b, target, incarnation).then_some(answer)
    }

    // -----------------------------------------------------------------------------------
    // Faults.

    async fn fault(&self) {
        let brokers = self.lock().brokers.len();
        // One step in two changes nothing: the cluster gets calm spells, where leases are
        // granted, between the faults.
        let choice = self.lock().rng.below(200);
        match choice {
            0..=3 => {
                let down = self.lock().voters.iter().filter(|v| v.quorum.is_none()).count();
                if down == 0 {
                    let (i, mode) = {
                        let mut w = self.lock();
                        let leader = w.voters.iter().position(|v| v.quorum.as_ref().is_some_and(|q| q.is_leader()));
                        let i = match leader {
                            Some(l) if w.rng.chance(500) => l,
                            _ => w.rng.below(VOTERS as u64) as usize,
                        };
                        let seed = w.rng.next();
                        let mode = match w.rng.below(3) {
                            0 => CrashMode::LoseUnsynced,
                            1 => CrashMode::TearUnsynced { seed },
                            _ => CrashMode::TearAndGarble { seed },
                        };
                        (i, mode)
                    };
                    self.crash_voter(i, mode).await;
                }
            }
            4..=8 => {
                let down = self.lock().voters.iter().position(|v| v.quorum.is_none());
                if let Some(i) = down {
                    self.start_voter(i).await;
                }
            }
            9..=11 => {
                let what = {
                    let mut w = self.lock();
                    let mut groups: Vec<u8> = (0..VOTERS).map(|_| w.rng.below(2) as u8).collect();
                    // Half the partitions cut the quorum leader off from the other voters.
                    let leader = w.voters.iter().position(|v| v.quorum.as_ref().is_some_and(|q| q.is_leader()));
                    if let Some(l) = leader.filter(|_| w.rng.chance(500)) {
                        groups = vec![0; VOTERS];
                        groups[l] = 1;
                    }
                    let broker_groups: Vec<u8> = (0..brokers).map(|_| w.rng.below(2) as u8).collect();
                    let what = format!("partition {groups:?} brokers {broker_groups:?}");
                    w.groups = groups;
                    w.broker_groups = broker_groups;
                    what
                };
                self.note(what);
            }
            12 => {
                {
                    let mut w = self.lock();
                    w.groups = vec![0; VOTERS];
                    w.broker_groups = vec![0; brokers];
                }
                self.note("heal network".into());
            }
            13..=14 => {
                let b = self.lock().rng.below(brokers as u64) as usize;
                self.crash_broker(b);
            }
            15..=17 => {
                let down = self.lock().brokers.iter().position(|b| b.tasks.is_empty());
                if let Some(b) = down {
                    self.start_broker(b);
                }
            }
            20..=21 => {
                // A voter's disk starts failing: every fsync, or writes past a few KiB. Its
                // quorum member stops at the next write, and the node halts as the server
                // does (`halt_failed_voters`); it is repaired when the node restarts.
                let what = {
                    let mut w = self.lock();
                    let running: Vec<usize> = (0..VOTERS).filter(|&i| w.voters[i].quorum.is_some()).collect();
                    let Some(&i) = running.get(w.rng.below(running.len() as u64) as usize) else { return };
                    if w.rng.chance(500) {
                        w.voters[i].disk.set_fail_sync(true);
                        format!("voter {} disk: fsyncs fail", i + 1)
                    } else {
                        let left = w.rng.below(4096);
                        w.voters[i].disk.set_space_left(Some(left));
                        format!("voter {} disk: full after {left} bytes", i + 1)
                    }
                };
                self.note(what);
            }
            22 if self.lock().disks != Disks::Kept => {
                let b = self.lock().rng.below(brokers as u64) as usize;
                self.lose_broker_disk(b);
            }
            18..=19 => {
                let what = {
                    let mut w = self.lock();
                    w.drop_per_mille = [0, 20, 100, 300][w.rng.below(4) as usize];
                    w.max_delay_ms = [2, 10, 50, 200][w.rng.below(4) as usize];
                    format!("network drop {}‰ delay ≤{}ms", w.drop_per_mille, w.max_delay_ms)
                };
                self.note(what);
            }
            _ => {}
        }
    }

    /// A voter whose quorum member stopped on a fatal error (its metadata log could not be
    /// written) halts, as the server does (`main.rs`'s `quorum_member_failed`), losing
    /// what its disk had not made durable; the disk comes back repaired.
    async fn halt_failed_voters(&self) {
        for i in 0..VOTERS {
            let failed =
                self.lock().voters[i].quorum.as_ref().is_some_and(|q| q.metrics().borrow().running_state.is_err());
            if failed {
                let mode = {
                    let mut w = self.lock();
                    w.stats.disk_halts += 1;
                    let seed = w.rng.next();
                    [CrashMode::LoseUnsynced, CrashMode::TearUnsynced { seed }][w.rng.below(2) as usize]
                };
                self.note(format!("voter {} halts: its metadata log failed", i + 1));
                self.crash_voter(i, mode).await;
            }
        }
    }

    async fn start_down_voters(&self) {
        let down: Vec<usize> = (0..VOTERS).filter(|&i| self.lock().voters[i].quorum.is_none()).collect();
        for i in down {
            self.start_voter(i).await;
        }
    }

    async fn heal(&self) {
        self.halt_failed_voters().await;
        {
            let mut w = self.lock();
            for v in &w.voters {
                v.disk.set_fail_sync(false);
                v.disk.set_space_left(None);
            }
            w.groups = vec![0; VOTERS];
            w.broker_groups = vec![0; w.brokers.len()];
            w.drop_per_mille = 0;
            w.max_delay_ms = 10;
        }
        self.start_down_voters().await;
        let brokers = self.lock().brokers.len();
        for b in 0..brokers {
            self.start_broker(b);
        }
        self.note("heal all".into());
    }

    async fn stop_all(&self) {
        let brokers = self.lock().brokers.len();
        for b in 0..brokers {
            self.crash_broker(b);
        }
        let quorums: Vec<Arc<Quorum>> = {
            let mut w = self.lock();
            for v in &mut w.voters {
                if let Some((_, task)) = v.controller.take() {
                    task.abort();
                }
            }
            w.voters.iter_mut().filter_map(|v| v.quorum.take()).collect()
        };
        for q in quorums {
            q.shutdown().await;
        }
    }

    // -----------------------------------------------------------------------------------
    // Invariants.

    fn check(&self) {
        let mut w = self.lock();
        let seed = self.seed;
        for i in 0..VOTERS {
            w.check_leader(i, seed);
            w.take_applied(i, seed);
        }
        w.check_acked_registrations(false, seed);
        let now = Instant::now();
        for b in 0..w.brokers.len() {
            w.check_broker_prefix(b, seed);
            w.check_lease(b, now, seed);
        }
        w.check_replication(seed);
        let now_ms = self.now_ms();
        w.with_extension(now_ms, |e, w| e.check(w));
    }

    /// (d): every broker registered, unfenced and holding a lease, the topics created and
    /// every partition led, in the latest committed image and each broker's own.
    fn converged(&self) -> Result<(), String> {
        let w = self.lock();
        let (_, latest) = w.images.last_key_value().expect("the empty image");
        let now = Instant::now();
        for broker in &w.brokers {
            let id = broker.node_id;
            let registered = latest.broker(id).filter(|r| Some(r.epoch) == broker.epoch);
            if !registered.is_some_and(|r| r.is_active()) {
                return Err(format!("broker {id} is not registered unfenced at its epoch {:?}", broker.epoch));
            }
            if broker.lease_until.is_none_or(|l| l <= now) {
                return Err(format!("broker {id} holds no lease"));
            }
            if broker.image.applied < latest.applied {
                return Err(format!("broker {id} is at offset {} of {}", broker.image.applied, latest.applied));
            }
        }
        if latest.topics().count() < self.topics.len() {
            return Err("the topics are not all created".into());
        }
        for t in latest.topics() {
            if let Some(p) = t.partitions.iter().find(|p| p.leader == NO_LEADER) {
                return Err(format!("{}-{} has no leader", t.name, p.index));
            }
        }
        w.replication_converged()?;
        drop(w);
        let now_ms = self.now_ms();
        let mut w = self.lock();
        w.with_extension(now_ms, |e, w| e.converged(w)).unwrap_or(Ok(()))
    }

    fn describe(&self) -> String {
        let w = self.lock();
        let mut out: Vec<String> = w.trace.iter().rev().take(30).rev().cloned().collect();
        for v in &w.voters {
            let Some(q) = &v.quorum else {
                out.push(format!("voter {}: down", v.node_id));
                continue;
            };
            let m = q.metrics().borrow().clone();
            out.push(format!(
                "voter {}: {:?} term {} leader {:?} applied {:?}",
                v.node_id,
                m.state,
                m.current_term,
                m.current_leader,
                m.last_applied.map(|l| l.index)
            ));
        }
        for b in &w.brokers {
            out.push(format!(
                "broker {}: offset {} epoch {:?} fenced {} lease {:?}",
                b.node_id,
                b.image.applied,
                b.epoch,
                b.fenced,
                b.lease_until.map(|l| l.saturating_duration_since(Instant::now()))
            ));
            for (key, h) in &b.hosted {
                let state =
                    h.replica.as_ref().map(|r| (r.role(), r.leader_epoch(), r.isr().to_vec(), r.high_watermark()));
                out.push(format!(
                    "  {key:?}: end {} durable {} state {state:?} ISR change {:?}",
                    h.disk.end(),
                    h.disk.durable,
                    b.isr_changes.get(key)
                ));
            }
        }
        let (_, latest) = w.images.last_key_value().expect("the empty image");
        for t in latest.topics() {
            for p in &t.partitions {
                out.push(format!(
                    "{}-{}: leader {} epoch {} partition epoch {} ISR {:?} ELR {:?} replicas {:?}",
                    t.name, p.index, p.leader, p.leader_epoch, p.partition_epoch, p.isr, p.elr, p.replicas
                ));
            }
        }
        out.join("\n")
    }
}

impl World {
    /// No answered registration lost: the record at a registration's epoch is that
    /// registration (once, and at the end, a voter applied that offset).
    fn check_acked_registrations(&self, all_applied: bool, seed: u64) {
        for &(id, epoch, incarnation) in &self.acked_registrations {
            let record = self.records.get(&(epoch as u64));
            if record.is_none() && !all_applied {
                continue;
            }
            let registered = matches!(
                record,
                Some(MetadataRecord::RegisterBroker { id: i, epoch: e, incarnation: n, .. })
                    if *i == id && *e == epoch && *n == incarnation
            );
            assert!(
                registered,
                "seed {seed}: broker {id} was answered epoch {epoch}, but the record there is {record:?}"
            );
        }
    }

    /// At most one leader per term.
    fn check_leader(&mut self, i: usize, seed: u64) {
        let v = &self.voters[i];
        let Some(quorum) = &v.quorum else { return };
        let metrics = quorum.metrics().borrow().clone();
        if metrics.state == openraft::ServerState::Leader {
            let leader = *self.leaders_by_term.entry(metrics.current_term).or_insert(v.replica);
            assert_eq!(leader, v.replica, "seed {seed}: two leaders in term {}", metrics.current_term);
        }
    }

    /// (a) and (c): what voter `i` applied since the last call is the common sequence,
    /// and at the end of every batch its leaders are active brokers in their ISR.
    fn take_applied(&mut self, i: usize, seed: u64) {
        let World { voters, applied_at, records, images, stats, unclean, disks_lost, .. } = self;
        let v = &mut voters[i];
        let who = format!("voter {}", v.node_id);
        let Some(events) = v.events.as_mut() else { return };
        loop {
            match events.try_recv() {
                Ok(AppliedEvent::Entry { index, term, batch }) => {
                    let expected = v.last_applied.map_or(0, |l| l + 1);
                    assert_eq!(index, expected, "seed {seed}: {who} applied {index} after {:?}", v.last_applied);
                    let fingerprint = batch.as_ref().and_then(|b| b.records.first().cloned());
                    let seen = applied_at.entry(index).or_insert((term, fingerprint.clone()));
                    assert_eq!(*seen, (term, fingerprint), "seed {seed}: {who} applied a different entry at {index}");
                    for record in batch.iter().flat_map(|b| &b.records) {
                        let fresh = !records.contains_key(&v.record_offset);
                        let seen = records.entry(v.record_offset).or_insert_with(|| record.clone());
                        assert_eq!(seen, record, "seed {seed}: {who} applied another record at {}", v.record_offset);
                        let mut after = images
                            .get(&v.record_offset)
                            .unwrap_or_else(|| panic!("seed {seed}: {who} has no known image at {}", v.record_offset))
                            .clone();
                        let fenced_before: Vec<i32> = after.brokers().filter(|b| b.fenced).map(|b| b.id).collect();
                        after.apply(record);
                        if fresh {
                            stats.fencings +=
                                after.brokers().filter(|b| b.fenced && !fenced_before.contains(&b.id)).count();
                            let lost = &*disks_lost;
                            note_partition_change(
                                &images[&v.record_offset],
                                &after,
                                record,
                                stats,
                                unclean,
                                lost,
                                seed,
                            );
                        }
                        v.record_offset += 1;
                        image_reached(images, &after, seed, &who);
                    }
                    check_leaders_active(&images[&v.record_offset], seed);
                    v.last_applied = Some(index);
                }
                Ok(AppliedEvent::Snapshot { index, image }) => {
                    assert!(image.applied >= v.record_offset, "seed {seed}: {who}'s snapshot takes its image back");
                    image_reached(images, &image, seed, &who);
                    v.last_applied = Some(index);
                    v.record_offset = image.applied;
                }
                Err(TryRecvError::Empty) => break,
                Err(e) => panic!("seed {seed}: {who} applied events: {e}"),
            }
        }
    }

    /// (a) for brokers: a broker's image is the committed image at its offset.
    fn check_broker_prefix(&self, b: usize, seed: u64) {
        let broker = &self.brokers[b];
        assert!(
            self.images.get(&broker.image.applied) == Some(&broker.image),
            "seed {seed}: broker {}'s image at {} is not the voters'",
            broker.node_id,
            broker.image.applied
        );
    }

    /// (b) the lease: while broker `b` holds a lease, no record committed beyond its
    /// image took a partition it leads (in its image) away from it, or fenced it.
    fn check_lease(&mut self, b: usize, now: Instant, seed: u64) {
        let World { brokers, images, stats, .. } = self;
        let broker = &brokers[b];
        if broker.tasks.is_empty() || broker.lease_until.is_none_or(|l| l <= now) {
            return;
        }
        let id = broker.node_id;
        let mine = &broker.image;
        let led: Vec<(Uuid, i32, i32)> = mine
            .topics()
            .flat_map(|t| t.partitions.iter().filter(|p| p.leader == id).map(move |p| (t.id, p.index, p.leader_epoch)))
            .collect();
        let registered = mine.broker(id).filter(|r| !r.fenced).map(|r| r.epoch);
        if led.is_empty() && registered.is_none() {
            return;
        }
        stats.lease_checks += 1;
        let lease_left = broker.lease_until.map(|l| l.saturating_duration_since(now));
        for (offset, image) in images.range(mine.applied + 1..) {
            for &(topic, index, epoch) in &led {
                let Some(p) = image.partition(topic, index) else { continue };
                assert!(
                    p.leader == id,
                    "seed {seed}: LEASE VIOLATED: broker {id} holds a lease ({lease_left:?} left) and leads {topic}-{index} at epoch {epoch} in its image (offset {}), but the image committed at offset {offset} has it led by {} at epoch {}",
                    mine.applied,
                    p.leader,
                    p.leader_epoch
                );
            }
            if let Some(epoch) = registered {
                let fenced = image.broker(id).is_some_and(|r| r.epoch == epoch && r.fenced);
                assert!(
                    !fenced,
                    "seed {seed}: LEASE VIOLATED: broker {id} holds a lease ({lease_left:?} left) and is unfenced in its image (offset {}), but the image committed at offset {offset} has it fenced",
                    mine.applied
                );
            }
        }
    }
}

/// (c): every leader is an active broker in the partition's ISR.
fn check_leaders_active(image: &MetadataImage, seed: u64) {
    for t in image.topics() {
        for p in t.partitions.iter().filter(|p| p.leader != NO_LEADER) {
            let active = image.broker(p.leader).is_some_and(|b| b.is_active());
            assert!(
                active && p.isr.contains(&p.leader),
                "seed {seed}: at offset {}, {}-{} is led by {} (active {active}) with ISR {:?}",
                image.applied,
                t.name,
                p.index,
                p.leader,
                p.isr
            );
        }
    }
}

fn image_reached(images: &mut BTreeMap<u64, MetadataImage>, image: &MetadataImage, seed: u64, who: &str) {
    let seen = images.entry(image.applied).or_insert_with(|| image.clone());
    assert!(seen == image, "seed {seed}: {who}'s image at offset {} is not the one others had there", image.applied);
}

// ---------------------------------------------------------------------------------------
// Partition replication on the brokers (the server's `Partition`, fetcher and
// `send_isr_changes`, over `sim::replication`'s model logs).

impl Sim {
    /// Broker `b`'s fetcher: round after round, one fetch for each partition it follows,
    /// to the leader its metadata names, over the brokers' network.
    async fn replicate(self, b: usize, incarnation: u64) {
        loop {
            let followed: Vec<(PartitionKey, i32)> = {
                let w = self.lock();
                let broker = &w.brokers[b];
                let follows = |(key, hosted): (&PartitionKey, &Hosted)| {
                    hosted.replica.as_ref().filter(|r| !r.is_leader())?;
                    let p = broker.image.partition(key.0, key.1)?;
                    (p.leader != NO_LEADER && p.leader != broker.node_id).then_some((*key, p.leader))
                };
                broker.hosted.iter().filter_map(follows).collect()
            };
            for (key, leader) in followed {
                self.fetch_partition(b, incarnation, key, leader).await;
            }
            tokio::time::sleep(Duration::from_millis(REPLICA_FETCH_PAUSE_MS)).await;
        }
    }

    /// One follower fetch of partition `key` from broker `leader`, and its answer.
    async fn fetch_partition(&self, b: usize, incarnation: u64, key: PartitionKey, leader: i32) {
        let l = broker_index(leader);
        let (fetch, broker_epoch, route) = {
            let now_ms = self.now_ms();
            let mut w = self.lock();
            let broker = &mut w.brokers[b];
            let Some(leader_epoch) = broker.image.partition(key.0, key.1).map(|p| p.leader_epoch) else { return };
            let (id, broker_epoch) = (broker.node_id, broker.epoch.unwrap_or(-1));
            let Some(hosted) = broker.hosted.get_mut(&key) else { return };
            let Some(replica) = hosted.replica.as_mut().filter(|r| !r.is_leader()) else { return };
            let fetch = replication::follower_fetch(replica, &mut hosted.disk, id, leader_epoch, now_ms);
            w.carry_out(b, key);
            (fetch, broker_epoch, w.route_between_brokers(b, l))
        };
        let (delay, leader_incarnation) = match route {
            Route::Deliver { delay, incarnation, .. } => (delay, incarnation),
            Route::Lost { delay } => return tokio::time::sleep(Duration::from_millis(delay)).await,
            Route::Unreachable => return tokio::time::sleep(Duration::from_millis(1)).await,
        };
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let (answer, back) = {
            let now_ms = self.now_ms();
            let mut w = self.lock();
            if !w.brokers_connected(b, l, leader_incarnation) {
                return;
            }
            let answer = w.answer_fetch(l, key, &fetch, broker_epoch, now_ms);
            let max_delay_ms = w.max_delay_ms;
            let back = w.rng.below(max_delay_ms + 1);
            (answer, back)
        };
        // The answer crosses back: either broker may have crashed or been cut off.
        tokio::time::sleep(Duration::from_millis(back)).await;
        let now_ms = self.now_ms();
        let mut w = self.lock();
        if w.brokers[b].incarnation == incarnation && w.brokers_connected(b, l, leader_incarnation) {
            w.apply_fetch_answer(b, key, answer, now_ms);
        }
    }

    /// Broker `b`'s ISR changes, sent to the controller until answered (newest per
    /// partition, all in one AlterPartition).
    async fn send_isr_changes(self, b: usize, incarnation: u64) {
        loop {
            tokio::time::sleep(Duration::from_millis(ALTER_PARTITION_PAUSE_MS)).await;
            let Some((input, sent)) = self.lock().alter_partition_request(b) else { continue };
            let deadline = Instant::now() + Duration::from_millis(REQUEST_TIMEOUT_MS);
            let answer = self.send_to_controller(b, Request::AlterPartition(input), deadline).await;
            let now_ms = self.now_ms();
            let mut w = self.lock();
            if w.brokers[b].incarnation != incarnation {
                return;
            }
            w.alter_partition_answered(b, sent, answer, now_ms);
        }
    }

    /// What happens on the brokers between two steps besides fetching: clients produce
    /// (while `produce`), logs become durable, and the replica state machines' timers run
    /// (lagging followers leave the ISR).
    fn replication_step(&self, produce: bool) {
        let now_ms = self.now_ms();
        let mut w = self.lock();
        if produce && w.rng.chance(PRODUCE_PER_MILLE) {
            w.client_produce(now_ms);
        }
        for b in 0..w.brokers.len() {
            if w.brokers[b].tasks.is_empty() {
                continue;
            }
            let keys: Vec<PartitionKey> = w.brokers[b].hosted.keys().copied().collect();
            for key in keys {
                let sync = w.rng.chance(FSYNC_PER_MILLE);
                let World { brokers, rng, .. } = &mut *w;
                let hosted = brokers[b].hosted.get_mut(&key).expect("hosted");
                let unsynced = hosted.disk.end() - hosted.disk.durable;
                if sync && unsynced > 0 {
                    let to = hosted.disk.durable + 1 + rng.below(unsynced as u64) as i64;
                    hosted.disk.make_durable(to, hosted.replica.as_mut(), now_ms);
                }
                if let Some(replica) = hosted.replica.as_mut() {
                    replica.tick(now_ms);
                }
                w.carry_out(b, key);
            }
        }
        w.with_extension(now_ms, |e, w| e.step(w, now_ms, produce));
    }
}

pub fn broker_index(node_id: i32) -> usize {
    (node_id - BROKER_ID_BASE - 1) as usize
}

/// What the [`Extension`] sees of the world and does in it.
impl World {
    /// Runs `f` on the extension, if any, once it has taken the completions of its
    /// appends queued since its last call.
    fn with_extension<T>(&mut self, now_ms: i64, f: impl FnOnce(&mut dyn Extension, &mut World) -> T) -> Option<T> {
        let mut extension = self.extension.take()?;
        for (b, key, request_id, result) in std::mem::take(&mut self.extension_completions) {
            extension.append_completed(self, b, key, request_id, result, now_ms);
        }
        let out = f(extension.as_mut(), self);
        self.extension = Some(extension);
        Some(out)
    }

    pub fn brokers(&self) -> usize {
        self.brokers.len()
    }

    pub fn broker_id(&self, b: usize) -> i32 {
        self.brokers[b].node_id
    }

    /// Broker `b`'s incarnation: a crash ends it.
    pub fn incarnation(&self, b: usize) -> u64 {
        self.brokers[b].incarnation
    }

    pub fn is_up(&self, b: usize) -> bool {
        !self.brokers[b].tasks.is_empty()
    }

    /// The metadata broker `b` applied.
    pub fn image(&self, b: usize) -> &MetadataImage {
        &self.brokers[b].image
    }

    /// The latest committed metadata.
    pub fn latest_image(&self) -> &MetadataImage {
        self.images.last_key_value().expect("the empty image").1
    }

    /// Whether broker `b` holds its lease with the controller now (the server's
    /// `Broker::holds_lease`).
    pub fn holds_lease(&self, b: usize) -> bool {
        self.is_up(b) && self.brokers[b].lease_until.is_some_and(|l| l > Instant::now())
    }

    /// Broker `b`'s replica state machine of `key`, while this incarnation has it open.
    pub fn replica(&self, b: usize, key: PartitionKey) -> Option<&ReplicaState> {
        self.brokers[b].hosted.get(&key).and_then(|h| h.replica.as_ref()).filter(|_| self.is_up(b))
    }

    /// Broker `b`'s log of `key`.
    pub fn log(&self, b: usize, key: PartitionKey) -> Option<&Disk> {
        self.brokers[b].hosted.get(&key).map(|h| &h.disk)
    }

    /// Whether broker `b` leads `key` at `leader_epoch` (the server's
    /// `Partition::leads_at`).
    pub fn leads_at(&self, b: usize, key: PartitionKey, leader_epoch: i32) -> bool {
        self.replica(b, key).is_some_and(|r| r.is_leader() && r.leader_epoch() == leader_epoch)
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// A client's FindCoordinator for a key of `(topic, index)`: the partition's leader in
    /// the metadata of an up broker it asks (perhaps stale), if that leader is up.
    pub fn find_coordinator(&mut self, topic: Uuid, index: i32) -> Option<usize> {
        let up: Vec<usize> = (0..self.brokers()).filter(|&b| self.is_up(b)).collect();
        let asked = *up.get(self.rng.below(up.len() as u64) as usize)?;
        let leader = self.image(asked).partition(topic, index)?.leader;
        let b = (leader != NO_LEADER).then(|| broker_index(leader))?;
        (b < self.brokers() && self.is_up(b)).then_some(b)
    }

    /// `n` write ids no one else uses, for the entries of an append.
    pub fn new_write_ids(&mut self, n: u64) -> Vec<u64> {
        let ids = (self.next_write_id..self.next_write_id + n).collect();
        self.next_write_id += n;
        ids
    }

    /// The extension's acks=all append of `write_ids` on broker `b`, which must lead
    /// `key` at `leader_epoch` (a coordinator appends only at the epoch it loaded at, as
    /// the server's `append_coordinator_records`). Its completion comes to
    /// [`Extension::append_completed`] with the request id returned.
    pub fn append_as_leader(
        &mut self,
        b: usize,
        key: PartitionKey,
        leader_epoch: i32,
        write_ids: Vec<u64>,
        now_ms: i64,
    ) -> Result<u64, ErrorCode> {
        if !self.leads_at(b, key, leader_epoch) {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        self.append(b, key, write_ids, true, now_ms)
    }

    /// A finding of the extension, reported by the next check.
    pub fn violation(&mut self, what: String) {
        self.violations.push(what);
    }

    pub fn trace(&mut self, now_ms: i64, what: String) {
        self.note(now_ms, what);
    }
}

impl World {
    fn note(&mut self, now_ms: i64, what: String) {
        if self.trace_to_stderr {
            eprintln!("seed {} {now_ms:>7} ms: {what}", self.seed);
        }
        self.trace.push(what);
    }

    fn replica_mut(&mut self, b: usize, key: PartitionKey) -> Option<&mut ReplicaState> {
        self.brokers[b].hosted.get_mut(&key).and_then(|h| h.replica.as_mut())
    }

    fn route_between_brokers(&mut self, from: usize, to: usize) -> Route<()> {
        if to >= self.brokers.len() || !self.brokers_connected(from, to, self.brokers[to].incarnation) {
            return Route::Unreachable;
        }
        let delay = self.rng.below(self.max_delay_ms + 1);
        if self.rng.chance(self.drop_per_mille) {
            return Route::Lost { delay };
        }
        Route::Deliver { to: (), delay, incarnation: self.brokers[to].incarnation }
    }

    fn brokers_connected(&self, a: usize, b: usize, b_incarnation: u64) -> bool {
        let (x, y) = (&self.brokers[a], &self.brokers[b]);
        y.incarnation == b_incarnation
            && !x.tasks.is_empty()
            && !y.tasks.is_empty()
            && self.broker_groups[a] == self.broker_groups[b]
    }

    /// Broker `b` hands its metadata to its partitions (the server's
    /// `Partition::apply_assignment`), once this incarnation caught up with its own
    /// registration: only then does it open them, from each log and its checkpointed
    /// high watermark.
    fn apply_partition_metadata(&mut self, b: usize, now_ms: i64) {
        let broker = &self.brokers[b];
        let id = broker.node_id;
        let registration = broker.epoch.and_then(|e| broker.image.broker(id).filter(|r| r.epoch == e));
        if registration.is_none_or(|r| broker.image.applied <= r.register_offset) {
            return;
        }
        // Replicas whose brokers are fenced or gone may not join the ISR, and the high
        // watermark does not wait for them (Kafka's `isReplicaIsrEligible`).
        let image = &broker.image;
        let ineligible = |p: &PartitionImage| -> Vec<i32> {
            p.replicas.iter().copied().filter(|&r| !image.broker(r).is_some_and(|b| b.is_active())).collect()
        };
        let assignments: Vec<(PartitionKey, Assignment, Vec<i32>)> = image
            .topics()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.replicas.contains(&id))
                    .map(|p| ((t.id, p.index), p.into(), ineligible(p)))
            })
            .collect();
        let config = ReplicaConfig {
            local_id: id,
            replica_lag_time_max_ms: REPLICA_LAG_MS,
            min_insync_replicas: 1,
            fsync_before_ack: true,
        };
        for (key, assignment, ineligible) in assignments {
            let hosted = self.brokers[b].hosted.entry(key).or_default();
            let led = replication::apply_assignment(&mut hosted.replica, &mut hosted.disk, config, assignment, now_ms);
            hosted.replica.as_mut().expect("open").set_ineligible_replicas(ineligible, now_ms);
            if let Some(epoch) = led {
                let end = hosted.disk.end();
                self.note(now_ms, format!("broker {id} leads {key:?} in epoch {epoch} from offset {end}"));
            }
            self.carry_out(b, key);
        }
    }

    /// The replica state machine's outputs: ISR changes to send, answers to clients.
    fn carry_out(&mut self, b: usize, key: PartitionKey) {
        while let Some(output) = self.replica_mut(b, key).and_then(ReplicaState::poll_output) {
            match output {
                Output::HighWatermark(_) => {}
                Output::AlterPartition(change) => {
                    self.brokers[b].isr_changes.insert(key, change);
                }
                Output::Completed { request_id, result } => self.produce_completed(b, key, request_id, result),
            }
        }
    }

    /// A produce answered. Found wrong, it is a violation for `check` to report: this
    /// runs in the brokers' tasks, whose panics Tokio would keep to itself.
    fn produce_completed(&mut self, b: usize, key: PartitionKey, request_id: u64, result: Result<(), ErrorCode>) {
        let broker = &self.brokers[b];
        let Some(produce) = self.produces.remove(&(broker.node_id, broker.incarnation, request_id)) else {
            let violation = format!("broker {} answered request {request_id} twice", broker.node_id);
            self.violations.push(violation);
            return;
        };
        if produce.by_extension {
            self.extension_completions.push((b, key, request_id, result));
        }
        if result.is_err() {
            return;
        }
        let hw = broker.hosted[&key].replica.as_ref().map_or(-1, ReplicaState::high_watermark);
        let end = produce.first_offset + produce.write_ids.len() as i64;
        if produce.partition != key || end > hw {
            let violation =
                format!("request {request_id} acknowledged up to {end} of {key:?}, above the high watermark {hw}");
            self.violations.push(violation);
        }
        self.stats.acked_writes += produce.write_ids.len();
        for (offset, &write_id) in (produce.first_offset..).zip(&produce.write_ids) {
            self.acked.push(Acked { partition: key, offset, write_id, lost_with_disk: false });
        }
    }

    /// A client sends an acks=all produce of a few writes to a broker that believes it
    /// leads the partition (its metadata may be stale). Clients sit next to the brokers:
    /// their requests and answers cross no network.
    fn client_produce(&mut self, now_ms: i64) {
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        // The data topics only: the extension's are written by the extension.
        let partitions: Vec<PartitionKey> = latest
            .topics()
            .filter(|t| !t.name.starts_with("__"))
            .flat_map(|t| t.partitions.iter().map(|p| (t.id, p.index)))
            .collect();
        if partitions.is_empty() {
            return;
        }
        let key = partitions[self.rng.below(partitions.len() as u64) as usize];
        let leaders: Vec<usize> = (0..self.brokers.len())
            .filter(|&b| !self.brokers[b].tasks.is_empty())
            .filter(|&b| {
                self.brokers[b].hosted.get(&key).and_then(|h| h.replica.as_ref()).is_some_and(ReplicaState::is_leader)
            })
            .collect();
        if leaders.is_empty() {
            return;
        }
        let b = leaders[self.rng.below(leaders.len() as u64) as usize];
        let count = 1 + self.rng.below(3);
        let write_ids: Vec<u64> = (self.next_write_id..self.next_write_id + count).collect();
        if self.append(b, key, write_ids, false, now_ms).is_ok() {
            self.next_write_id += count;
        }
    }

    /// An acks=all append of `write_ids` on broker `b` as the leader of `key` (refused
    /// when it does not lead, or its ISR is too small); the answer is the request id its
    /// completion comes with.
    fn append(
        &mut self,
        b: usize,
        key: PartitionKey,
        write_ids: Vec<u64>,
        by_extension: bool,
        now_ms: i64,
    ) -> Result<u64, ErrorCode> {
        let request_id = self.next_request;
        let broker = &mut self.brokers[b];
        let (id, incarnation) = (broker.node_id, broker.incarnation);
        if broker.tasks.is_empty() {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        let hosted = broker.hosted.get_mut(&key).ok_or(ErrorCode::NOT_LEADER_OR_FOLLOWER)?;
        let replica = hosted.replica.as_mut().filter(|r| r.is_leader()).ok_or(ErrorCode::NOT_LEADER_OR_FOLLOWER)?;
        replica.check_append(AckLevel::All).map_err(|_| ErrorCode::NOT_ENOUGH_REPLICAS)?;
        self.next_request += 1;
        let first_offset = replication::append_writes(replica, &mut hosted.disk, &write_ids, request_id, now_ms);
        let produce = Produce { partition: key, first_offset, write_ids, by_extension };
        self.produces.insert((id, incarnation, request_id), produce);
        self.carry_out(b, key);
        Ok(request_id)
    }

    /// The leader's Fetch handler for a follower.
    fn answer_fetch(
        &mut self,
        l: usize,
        key: PartitionKey,
        fetch: &FollowerFetch,
        broker_epoch: i64,
        now_ms: i64,
    ) -> FetchAnswer {
        let World { brokers, rng, .. } = self;
        let leader = &mut brokers[l];
        let Some(hosted) = leader.hosted.get_mut(&key).filter(|h| h.replica.is_some()) else {
            return FetchAnswer::Failed { error: ErrorCode::NOT_LEADER_OR_FOLLOWER, high_watermark: -1 };
        };
        let replica = hosted.replica.as_mut().expect("open");
        let answer = replication::answer_fetch(replica, &hosted.disk, fetch, || 1 + rng.below(8) as usize, now_ms);
        if broker_epoch >= 0 {
            leader.follower_epochs.insert(fetch.replica_id, broker_epoch);
        }
        self.carry_out(l, key);
        answer
    }

    fn apply_fetch_answer(&mut self, b: usize, key: PartitionKey, answer: FetchAnswer, now_ms: i64) {
        let Some(hosted) = self.brokers[b].hosted.get_mut(&key) else { return };
        let Some(replica) = hosted.replica.as_mut().filter(|r| !r.is_leader()) else { return };
        if let FetchApplied::TruncatedDiverging(_) =
            replication::apply_fetch_answer(replica, &mut hosted.disk, answer, now_ms)
        {
            self.stats.diverging_truncations += 1;
        }
        self.carry_out(b, key);
    }

    /// Broker `b`'s pending ISR changes as one AlterPartition, each member with its broker
    /// epoch as its fetches named it (-1: not known here), and what was sent.
    fn alter_partition_request(&self, b: usize) -> Option<(AlterPartitionInput, Vec<(PartitionKey, IsrChange)>)> {
        let broker = &self.brokers[b];
        let epoch = broker.epoch.filter(|_| !broker.isr_changes.is_empty())?;
        let id = broker.node_id;
        let member_epoch = |m: i32| if m == id { epoch } else { broker.follower_epochs.get(&m).copied().unwrap_or(-1) };
        let mut topics: BTreeMap<Uuid, Vec<AlterPartitionItem>> = BTreeMap::new();
        for (key, change) in &broker.isr_changes {
            topics.entry(key.0).or_default().push(AlterPartitionItem {
                partition_index: key.1,
                leader_epoch: change.leader_epoch,
                new_isr: change.new_isr.iter().map(|&m| (m, member_epoch(m))).collect(),
                leader_recovery_state: 0,
                partition_epoch: change.partition_epoch,
            });
        }
        let topics = topics.into_iter().map(|(topic_id, partitions)| AlterPartitionTopic { topic_id, partitions });
        let input = AlterPartitionInput { broker_id: id, broker_epoch: epoch, topics: topics.collect() };
        Some((input, broker.isr_changes.iter().map(|(k, c)| (*k, c.clone())).collect()))
    }

    /// The controller's answer to the ISR changes sent (the server's `apply_answer`).
    /// Without an answer, or refused as a whole (STALE_BROKER_EPOCH, NOT_CONTROLLER),
    /// they are sent again.
    fn alter_partition_answered(
        &mut self,
        b: usize,
        sent: Vec<(PartitionKey, IsrChange)>,
        answer: Option<Answer>,
        now_ms: i64,
    ) {
        let Some(Answer::AlterPartition(topics)) = answer else { return };
        for (key, change) in sent {
            let topic = topics.iter().find(|t| t.topic_id == key.0);
            let Some(result) = topic.and_then(|t| t.partitions.iter().find(|p| p.partition_index == key.1)) else {
                continue;
            };
            // NOT_CONTROLLER for a partition: the controller's image is older than the
            // leader's (a quorum leader cut off from the others, still active). Nothing
            // was decided: the change stays pending and is sent again, as the server's
            // `replication/isr.rs` does. Handed to the replica state machine as a refusal,
            // it kept the proposal in flight for metadata that never came, and the ISR
            // stuck (found with the broken glue, seed 46).
            if result.error == ErrorCode::NOT_CONTROLLER {
                continue;
            }
            let broker = &mut self.brokers[b];
            if broker.isr_changes.get(&key) == Some(&change) {
                broker.isr_changes.remove(&key);
            }
            let replicas = broker.image.partition(key.0, key.1).map(|p| p.replicas.clone());
            let Some(replica) = broker.hosted.get_mut(&key).and_then(|h| h.replica.as_mut()) else { continue };
            if result.error == ErrorCode::NONE {
                let Some(replicas) = replicas else { continue };
                let assignment = Assignment {
                    leader: result.leader_id,
                    leader_epoch: result.leader_epoch,
                    partition_epoch: result.partition_epoch,
                    replicas,
                    isr: result.isr.clone(),
                };
                replica.isr_change_accepted(assignment, now_ms);
            } else {
                replica.isr_change_refused(&change, result.error, now_ms);
                self.stats.refused_isr_changes += 1;
                let id = broker.node_id;
                let refused = format!("controller refuses {change:?} of {key:?} from {id}: {}", result.error.name());
                self.note(now_ms, refused);
            }
            self.carry_out(b, key);
        }
    }

    // ----- the replication invariants --------------------------------------------------

    /// Leader epochs only grow on every broker; a leader is in its ISR, its high
    /// watermark never goes back within its leadership, and every ISR member's log
    /// agrees with its log below it; no acknowledged write is lost.
    fn check_replication(&mut self, seed: u64) {
        assert!(self.violations.is_empty(), "seed {seed}: {}", self.violations.join("; "));
        self.note_disk_losses();
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        let empty = Disk::default();
        for broker in self.brokers.iter().filter(|b| !b.tasks.is_empty()) {
            let id = broker.node_id;
            for (&key, hosted) in &broker.hosted {
                let Some(replica) = &hosted.replica else { continue };
                let epoch = replica.leader_epoch();
                let seen = self.replica_epochs.entry((id, key)).or_insert(epoch);
                assert!(
                    epoch >= *seen,
                    "seed {seed}: broker {id}'s leader epoch of {key:?} went from {seen} to {epoch}"
                );
                *seen = epoch;
                if !replica.is_leader() {
                    continue;
                }
                assert!(
                    replica.isr().contains(&id),
                    "seed {seed}: broker {id} leads {key:?} outside its ISR {:?}",
                    replica.isr()
                );
                let hw = replica.high_watermark();
                let last = self.leader_high_watermarks.entry((id, broker.incarnation, key, epoch)).or_insert(hw);
                assert!(
                    hw >= *last,
                    "seed {seed}: broker {id}'s high watermark of {key:?} went back from {last} to {hw}"
                );
                *last = hw;
                // After an unclean election, a leader that lost its leadership may name
                // members that have since followed the new leader's shorter log.
                let committed = latest.partition(key.0, key.1).filter(|c| c.leader_epoch == epoch);
                if committed.is_none() && self.unclean.contains(&key) {
                    continue;
                }
                let members: BTreeSet<i32> =
                    replica.isr().iter().chain(committed.iter().flat_map(|c| &c.isr)).copied().collect();
                // A member that lost its disk is skipped until it has left the ISR and
                // caught up.
                let lost: Vec<i32> = members.iter().copied().filter(|&m| !self.kept_disk(m, key)).collect();
                for m in members.into_iter().filter(|&m| m != id && !lost.contains(&m)) {
                    let disk = self.brokers[broker_index(m)].hosted.get(&key).map_or(&empty, |h| &h.disk);
                    if let Some(offset) = disk.first_difference(&hosted.disk, hw) {
                        panic!(
                            "seed {seed}: {key:?}: ISR member {m} and leader {id} (epoch {epoch}) disagree at offset {offset}, below the high watermark {hw}"
                        );
                    }
                }
            }
        }
        self.check_acked_writes_kept(seed);
    }

    /// Every acknowledged write is durable, at the offset it was acknowledged at, on some
    /// member of the committed ISR (or ELR, KIP-966) of its partition, unless the
    /// partition went through an unclean election, or the ISR and ELR are empty (its
    /// members came back from unclean shutdowns; the next election is unclean).
    fn check_acked_writes_kept(&mut self, seed: u64) {
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        let mut lost = Vec::new();
        for (k, a) in self.acked.iter().enumerate() {
            if self.unclean.contains(&a.partition) || a.lost_with_disk {
                continue;
            }
            let p = latest.partition(a.partition.0, a.partition.1).expect("an acknowledged write's partition exists");
            let eligible: Vec<i32> = p.isr.iter().chain(&p.elr).copied().collect();
            let kept = eligible.iter().any(|&m| self.holds(m, a));
            if !kept && !eligible.is_empty() && eligible.iter().all(|&m| !self.kept_disk(m, a.partition)) {
                // Every ISR and ELR member lost its disk (an ISR change in flight can
                // leave only such members): nothing promised the write survives.
                lost.push(k);
                continue;
            }
            assert!(
                eligible.is_empty() || kept,
                "seed {seed}: acknowledged write {} at offset {} of {:?} is on no ISR or ELR member's disk ({eligible:?})",
                a.write_id,
                a.offset,
                a.partition
            );
        }
        for k in lost {
            self.acked[k].lost_with_disk = true;
            self.stats.writes_lost_with_disks += 1;
        }
    }

    /// Whether broker `node`'s log of `key` holds the acknowledged write `a` durably, at
    /// its offset.
    fn holds(&self, node: i32, a: &Acked) -> bool {
        self.brokers[broker_index(node)]
            .hosted
            .get(&a.partition)
            .is_some_and(|h| a.offset < h.disk.durable && h.disk.at(a.offset).is_some_and(|e| e.write_id == a.write_id))
    }

    /// Whether broker `node` kept its disk for `key`: it never lost it, or it has left
    /// the ISR since and rejoined it by catching up.
    fn kept_disk(&self, node: i32, key: PartitionKey) -> bool {
        !self.disks_lost.contains_key(&(node, key))
    }

    /// Broker `b` lost its disk (it is down): its logs are empty. Acknowledged writes no
    /// other ISR member holds are gone with it.
    fn lose_disk(&mut self, b: usize) {
        self.stats.disk_losses += 1;
        let id = self.brokers[b].node_id;
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        let lost: Vec<usize> = (0..self.acked.len())
            .filter(|&k| {
                let a = &self.acked[k];
                let isr = latest.partition(a.partition.0, a.partition.1).map(|p| p.isr.clone()).unwrap_or_default();
                !a.lost_with_disk && !isr.iter().any(|&m| m != id && self.holds(m, a))
            })
            .collect();
        self.stats.writes_lost_with_disks += lost.len();
        for k in lost {
            self.acked[k].lost_with_disk = true;
        }
        // Its logs, and every partition it is a replica of (one it has not opened a log for
        // yet may still name it in its ISR, from the partition's creation).
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        let replica_of = latest
            .topics()
            .flat_map(|t| t.partitions.iter().filter(|p| p.replicas.contains(&id)).map(|p| (t.id, p.index)));
        let keys: BTreeSet<PartitionKey> = self.brokers[b].hosted.keys().copied().chain(replica_of).collect();
        let incarnation = self.brokers[b].incarnation;
        for key in keys {
            self.brokers[b].hosted.insert(key, Hosted::default());
            self.disks_lost.insert((id, key), DiskLoss { incarnation, left_isr: false });
        }
    }

    /// Notes when a broker that lost its disk has left a partition's ISR after it
    /// registered again: from then on it rejoins only by catching up (an ISR change
    /// naming its earlier incarnation's broker epoch is refused, KIP-903); before that, an
    /// expansion proposed before the loss may still add it. And leaves out of the data
    /// checks the partitions whose every ISR and ELR member lost its disk.
    fn note_disk_losses(&mut self) {
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        let mut gone = Vec::new();
        let brokers = &self.brokers;
        self.disks_lost.retain(|&(node, key), loss| {
            let broker = &brokers[broker_index(node)];
            let registered =
                !broker.tasks.is_empty() && broker.incarnation == loss.incarnation && broker.epoch.is_some();
            let in_isr = latest.partition(key.0, key.1).is_some_and(|p| p.isr.contains(&node));
            if !loss.left_isr && registered && !in_isr {
                loss.left_isr = true;
            }
            // Back in the ISR after leaving it: caught up.
            !(loss.left_isr && in_isr)
        });
        for t in latest.topics() {
            for p in &t.partitions {
                let key = (t.id, p.index);
                let eligible: Vec<i32> = p.isr.iter().chain(&p.elr).copied().collect();
                if !eligible.is_empty() && eligible.iter().all(|&m| !self.kept_disk(m, key)) {
                    gone.push(key);
                }
            }
        }
        for key in gone {
            if self.unclean.insert(key) {
                self.stats.partitions_lost_with_disks += 1;
            }
        }
    }

    /// After convergence: every acknowledged write is in every replica's log, at its
    /// offset (unclean partitions excepted).
    fn check_acked_writes_everywhere(&self, seed: u64) {
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        for a in self.acked.iter().filter(|a| !self.unclean.contains(&a.partition) && !a.lost_with_disk) {
            let p = latest.partition(a.partition.0, a.partition.1).expect("an acknowledged write's partition exists");
            for &r in &p.replicas {
                let entry = self.brokers[broker_index(r)].hosted.get(&a.partition).and_then(|h| h.disk.at(a.offset));
                assert_eq!(
                    entry.map(|e| e.write_id),
                    Some(a.write_id),
                    "seed {seed}: acknowledged write {} is not at offset {} of {:?} on broker {r}",
                    a.write_id,
                    a.offset,
                    a.partition
                );
            }
        }
    }

    /// Liveness of replication: no ISR change pending, every replica in the ISR, the
    /// leader leads in the committed epoch with its high watermark at its log end, and
    /// every replica's log is the leader's.
    fn replication_converged(&self) -> Result<(), String> {
        if let Some(b) = self.brokers.iter().find(|b| !b.isr_changes.is_empty()) {
            return Err(format!("broker {} has ISR changes pending", b.node_id));
        }
        let (_, latest) = self.images.last_key_value().expect("the empty image");
        for t in latest.topics() {
            for p in &t.partitions {
                let key = (t.id, p.index);
                let name = format!("{}-{}", t.name, p.index);
                let (mut isr, mut replicas) = (p.isr.clone(), p.replicas.clone());
                isr.sort_unstable();
                replicas.sort_unstable();
                if isr != replicas {
                    return Err(format!("{name}'s ISR {:?} lacks replicas of {:?}", p.isr, p.replicas));
                }
                let Some(leader) = self.brokers.get(broker_index(p.leader)).and_then(|b| b.hosted.get(&key)) else {
                    return Err(format!("{name}'s leader {} does not host it", p.leader));
                };
                let leading = leader.replica.as_ref().filter(|r| r.is_leader() && r.leader_epoch() == p.leader_epoch);
                if leading.is_none_or(|r| r.high_watermark() != leader.disk.end()) {
                    return Err(format!("{name}'s leader {} has not caught up", p.leader));
                }
                for &r in &p.replicas {
                    let log = self.brokers[broker_index(r)].hosted.get(&key).map(|h| &h.disk.entries);
                    if log != Some(&leader.disk.entries) {
                        return Err(format!("{name}'s log on {r} is not its leader's"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Counts what a committed partition change did, notes an unclean election, and checks
/// that leader epochs only grow in the committed sequence.
fn note_partition_change(
    before: &MetadataImage,
    after: &MetadataImage,
    record: &MetadataRecord,
    stats: &mut Stats,
    unclean: &mut BTreeSet<PartitionKey>,
    disks_lost: &BTreeMap<(i32, PartitionKey), DiskLoss>,
    seed: u64,
) {
    let MetadataRecord::PartitionChange { topic_id, partition, .. } = record else { return };
    let key = (Uuid(*topic_id), *partition);
    let (Some(b), Some(a)) = (before.partition(key.0, key.1), after.partition(key.0, key.1)) else { return };
    assert!(
        a.leader_epoch >= b.leader_epoch,
        "seed {seed}: the committed leader epoch of {key:?} went back from {} to {}",
        b.leader_epoch,
        a.leader_epoch
    );
    stats.isr_shrinks += usize::from(a.isr.len() < b.isr.len());
    stats.isr_expansions += usize::from(a.isr.len() > b.isr.len());
    stats.leader_changes += usize::from(a.leader != NO_LEADER && a.leader != b.leader);
    if a.leader == NO_LEADER || a.leader == b.leader || a.leader_recovery_state == 0 {
        return;
    }
    // The last known leader (KIP-966) was the last member of the ISR: its broker shut
    // down uncleanly, but here it keeps every record it made durable, and an
    // acknowledged write was durable on it, unless it lost its disk and has not caught
    // up since. Any other unclean leader may lack them.
    let lost_disk = disks_lost.contains_key(&(a.leader, key));
    if b.last_known_elr == [a.leader] && !lost_disk {
        stats.last_known_leader_elections += 1;
    } else if unclean.insert(key) {
        stats.unclean_elections += 1;
    }
}

/// What one seed did.
#[derive(Debug)]
pub struct SeedOutcome {
    pub trace: Vec<String>,
    /// The committed record sequence.
    pub records: Vec<MetadataRecord>,
    pub stats: Stats,
    /// The extension's [`Extension::counts`].
    pub extension: Vec<(&'static str, usize)>,
}

/// One seed of the simulation, with `extension` on the brokers (see [`Extension`]);
/// `broken_glue`: the controller grants leases without confirming its leadership.
pub fn run_seed(seed: u64, brokers: usize, broken_glue: bool, extension: Option<Box<dyn Extension>>) -> SeedOutcome {
    run_seed_with(seed, brokers, broken_glue, Disks::Kept, extension)
}

/// One seed of the simulation in which brokers also lose whole disks (a fault the
/// extensions' checks do not allow for: their partitions may lose acknowledged records
/// then).
pub fn run_seed_losing_disks(seed: u64, brokers: usize, disks: Disks) -> SeedOutcome {
    run_seed_with(seed, brokers, false, disks, None)
}

fn run_seed_with(
    seed: u64,
    brokers: usize,
    broken_glue: bool,
    disks: Disks,
    extension: Option<Box<dyn Extension>>,
) -> SeedOutcome {
    let runtime = crate::sim::seeded_runtime(seed);
    runtime.block_on(async {
        let sim = Sim::new(seed, brokers, broken_glue, disks, extension);
        for i in 0..VOTERS {
            sim.start_voter(i).await;
        }
        sim.bootstrap().await;
        for b in 0..brokers {
            sim.start_broker(b);
        }
        for _ in 0..FAULT_STEPS {
            sim.fault().await;
            sim.commit_cluster_id();
            sim.replication_step(true);
            tokio::time::sleep(Duration::from_millis(STEP_MS)).await;
            sim.halt_failed_voters().await;
            sim.check();
        }
        sim.heal().await;
        let deadline = Instant::now() + Duration::from_millis(HEAL_MS);
        loop {
            sim.commit_cluster_id();
            sim.replication_step(false);
            tokio::time::sleep(Duration::from_millis(STEP_MS)).await;
            // A write that failed before the heal repaired the disks halts its voter now;
            // it restarts at once, as an operator would once the disk is fixed.
            sim.halt_failed_voters().await;
            sim.start_down_voters().await;
            sim.check();
            match sim.converged() {
                Ok(()) => break,
                Err(why) if Instant::now() >= deadline => {
                    panic!("seed {seed}: not converged {HEAL_MS} ms after healing: {why}\n{}", sim.describe())
                }
                Err(_) => {}
            }
        }
        let outcome = {
            let w = sim.lock();
            w.check_acked_registrations(true, seed);
            w.check_acked_writes_everywhere(seed);
            if std::env::var("SIM_VERBOSE").is_ok() {
                eprintln!("seed {seed}: {} records, {:?}", w.records.len(), w.stats);
            }
            SeedOutcome {
                trace: w.trace.clone(),
                records: w.records.values().cloned().collect(),
                stats: w.stats.clone(),
                extension: w.extension.as_ref().map(|e| e.counts()).unwrap_or_default(),
            }
        };
        sim.stop_all().await;
        outcome
    })
}

/// Two runs of each seed (`exact` of them when replay is exact, else one: see
/// `cluster_simulation.rs`'s `seeds_replay_identically`) with `extension` agree, event for
/// event, record for record, and counts too when replay is exact.
pub fn assert_seeds_replay(exact: u64, brokers: usize, extension: impl Fn() -> Option<Box<dyn Extension>>) {
    let seeds = osprey_protocol::wire::simulation_seeds(if crate::sim::REPLAY_IS_EXACT { exact } else { 1 });
    for seed in seeds {
        let first = run_seed(seed, brokers, false, extension());
        let second = run_seed(seed, brokers, false, extension());
        let diverge = first.trace.iter().zip(&second.trace).position(|(a, b)| a != b);
        if let Some(i) = diverge {
            let from = i.saturating_sub(3);
            panic!(
                "seed {seed}: the traces differ from event {i}:\n{:#?}\n{:#?}",
                &first.trace[from..(i + 2).min(first.trace.len())],
                &second.trace[from..(i + 2).min(second.trace.len())]
            );
        }
        assert_eq!(first.trace, second.trace, "seed {seed}: the traces differ in length");
        assert_eq!(first.records, second.records, "seed {seed}: the committed records differ between two runs");
        if crate::sim::REPLAY_IS_EXACT {
            assert_eq!(first.stats, second.stats, "seed {seed}: the counts differ between two runs");
            assert_eq!(first.extension, second.extension, "seed {seed}: the extension's counts differ");
        }
    }
}

/// For the tests that show a check can fail: runs `seeds` seeds from `SIM_FIRST_SEED`
/// (else `first`) of a broken variant until one fails, which must fail with a message
/// containing one of `caught` (a check's finding, not some other breakage); panics if
/// none fails. `what` names the broken variant.
pub fn assert_caught(
    what: &str,
    first: u64,
    seeds: u64,
    caught: &[&str],
    run: impl Fn(u64) + std::panic::RefUnwindSafe,
) {
    let first = std::env::var("SIM_FIRST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(first);
    for seed in first..first + seeds {
        let Err(e) = std::panic::catch_unwind(|| run(seed)) else { continue };
        let message = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(caught.iter().any(|c| message.contains(c)), "seed {seed}: {what} failed otherwise: {message}");
        eprintln!("{what} was caught at seed {seed} (from {first}): {message}");
        return;
    }
    panic!("no seed of {first}..{} caught {what}", first + seeds);
}

/// Runs the seeds (`default` of them unless `SIM_SEEDS` says otherwise) with whole broker
/// disks lost as well ([`run_seed_losing_disks`]); over them, disks must have been lost
/// while writes were acknowledged, or the checks checked little.
pub fn run_seeds_losing_disks(brokers: usize, default: u64) {
    let mut total = Stats::default();
    for seed in osprey_protocol::wire::simulation_seeds(default) {
        match std::panic::catch_unwind(|| run_seed_losing_disks(seed, brokers, Disks::Lost)) {
            Ok(outcome) => total.add(&outcome.stats),
            Err(e) => {
                eprintln!("cluster simulation losing disks failed: {brokers} brokers, replay with SIM_SEED={seed}");
                std::panic::resume_unwind(e);
            }
        }
    }
    assert!(total.disk_losses > 0 && total.acked_writes > 0, "no disk lost while writes were acknowledged: {total:?}");
    if std::env::var("SIM_VERBOSE").is_ok() {
        eprintln!("{brokers} brokers losing disks, over the seeds: {total:?}");
    }
}

/// Runs the seeds (`default` of them unless `SIM_SEEDS` says otherwise), each with the
/// extension `extension` makes; over them, brokers must have been fenced and held leases
/// while leading, or the lease check checked nothing. Returns the extension's counts,
/// summed.
pub fn run_seeds(
    brokers: usize,
    default: u64,
    extension: impl Fn() -> Option<Box<dyn Extension>>,
) -> BTreeMap<&'static str, usize> {
    let mut total = Stats::default();
    let mut counts = BTreeMap::new();
    for seed in osprey_protocol::wire::simulation_seeds(default) {
        let extension = extension();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed(seed, brokers, false, extension))) {
            Ok(outcome) => {
                total.add(&outcome.stats);
                for (name, n) in outcome.extension {
                    *counts.entry(name).or_default() += n;
                }
            }
            Err(e) => {
                eprintln!("cluster simulation failed: {brokers} brokers, replay with SIM_SEED={seed}");
                std::panic::resume_unwind(e);
            }
        }
    }
    assert!(total.lease_checks > 0 && total.fencings > 0, "the lease was never exercised: {total:?}");
    assert!(total.disk_halts > 0, "no voter's metadata log ever failed: {total:?}");
    let replicated = [total.acked_writes, total.isr_shrinks, total.isr_expansions, total.leader_changes];
    assert!(replicated.iter().all(|&n| n > 0), "replication was not exercised: {total:?}");
    if std::env::var("SIM_VERBOSE").is_ok() {
        eprintln!("{brokers} brokers, over the seeds: {total:?} {counts:?}");
    }
    counts
}
