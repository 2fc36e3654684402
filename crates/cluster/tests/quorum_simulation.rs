//! Seeded simulation of the controller quorum: 3 and 5 members of openraft in one
//! process, over a simulated network (delay, loss, partitions, heal) and `SimStorage`
//! disks (crash and restart losing what was not fsynced), with a client proposing
//! batches. Invariants are checked after every step:
//!
//! - at most one leader per term;
//! - every member applies one common sequence: the entry each applies at an index is the
//!   one every other member applied there, and a member applies indexes in order
//!   without a gap (a snapshot install jumps it forward);
//! - no acknowledged proposal is lost (every member's disk keeps what it fsynced, so a
//!   majority always does): the acknowledged batch is the one applied at its index;
//! - liveness: once the faults heal, the quorum commits again and every member catches
//!   up.
//!
//! In `voters_that_lose_their_disks_*`, a fault also wipes a member's disk: it comes
//! back empty with a new directory id (a new replica key), bootstrap tells it to join,
//! not found, a cluster; the leader adds it as a learner and, once it has caught up,
//! replaces the old key by it (a joint membership change). Safety must hold throughout,
//! and at the end every member sees the current keys as the voters.
//!
//! `SIM_SEED=x` replays one seed; `SIM_SEEDS=n` runs n seeds (default 32 with 3
//! members, 16 with 5). A failure prints its seed.
//!
//! Replay: the network, the fault schedule and the client draw from the seed; time is
//! Tokio's paused clock on a current-thread runtime; openraft's election timeouts come
//! from `seed_thread_rng` (its `AsyncRuntime::thread_rng` hook). What is not seeded:
//! Tokio's own `select!` fairness RNG, which openraft's replication task uses while
//! backing off from an unreachable member (seeding it needs `--cfg tokio_unstable`'s
//! `Builder::rng_seed`). When two of those branches are ready in the same poll, two runs
//! of a seed may diverge; `a_seed_replays_identically` checks that the runs here agree.

use osprey_cluster::image::MetadataRecord;
use osprey_cluster::quorum::{
    decide_bootstrap, decode_reply, decode_rpc, encode_reply, encode_rpc, seed_thread_rng, AppliedEvent,
    BootstrapDecision, ControllerEndpoint, Hello, ProposeError, Quorum, QuorumConfig, RaftRpc, RaftRpcReply,
    ReplicaKey, Transport, TransportError,
};
use osprey_storage::fs::{CrashMode, SimStorage};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::broadcast::error::TryRecvError;

const METADATA_DIR: &str = "/data/meta";
/// Simulated time per step.
const STEP_MS: u64 = 50;
/// Steps with faults, then steps healed.
const FAULT_STEPS: usize = 600;
/// Simulated time the healed quorum gets to commit and converge.
const HEAL_MS: u64 = 60_000;
const MAX_CLIENT_IN_FLIGHT: usize = 4;

/// xorshift64*, seeded: every choice the simulation makes.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// One node slot: the member running there now (if up) and its disk.
struct Slot {
    node_id: i32,
    replica: ReplicaKey,
    disk: SimStorage,
    quorum: Option<Arc<Quorum>>,
    /// Bumped at every crash, so replies from a dead incarnation are dropped.
    incarnation: u64,
    /// Applied events and where this member is in the common sequence.
    events: Option<tokio::sync::broadcast::Receiver<AppliedEvent>>,
    last_applied: Option<u64>,
}

/// The simulated world: the network and the nodes.
struct World {
    rng: Rng,
    slots: Vec<Slot>,
    /// Partition group per node index; messages cross only within a group.
    groups: Vec<u8>,
    drop_per_mille: u64,
    max_delay_ms: u64,
    /// Invariant state.
    leaders_by_term: BTreeMap<u64, ReplicaKey>,
    /// The common sequence: what was applied at each index (the batch's first record as
    /// a fingerprint, or None for openraft's own entries), and its term.
    applied_at: CommonSequence,
    /// Acknowledged proposals: index → the record proposed.
    acked: BTreeMap<u64, MetadataRecord>,
    /// Snapshots installed on members that were behind.
    snapshot_installs: usize,
    /// With disk loss on: a voter replaced by its new replica key, not yet done.
    replacing: Option<(ReplicaKey, ReplicaKey)>,
    /// Voter replacements completed.
    replacements: usize,
    /// A membership task (add learner, replace voter) is running.
    reconciling: bool,
    trace: Vec<String>,
}

#[derive(Clone)]
struct Sim {
    world: Arc<Mutex<World>>,
    seed: u64,
    /// Whether faults include a voter losing its whole disk.
    disk_loss: bool,
}

struct SimTransport {
    from: i32,
    sim: Sim,
}

impl Sim {
    fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slot_index(&self, node_id: i32) -> usize {
        (node_id - 1) as usize
    }

    /// Whether `from` and `to` can talk now, and the delay and loss of one message.
    fn route(&self, from: i32, to: ReplicaKey) -> Route {
        let mut w = self.lock();
        let (a, b) = (self.slot_index(from), self.slot_index(to.node_id));
        if b >= w.slots.len() || w.slots[b].quorum.is_none() || w.slots[b].replica != to {
            return Route::Unreachable;
        }
        if w.groups[a] != w.groups[b] {
            return Route::Unreachable;
        }
        let (max_delay, drop_per_mille) = (w.max_delay_ms, w.drop_per_mille);
        let delay = w.rng.below(max_delay + 1);
        let drop = w.rng.chance(drop_per_mille);
        let incarnation = w.slots[b].incarnation;
        let quorum = w.slots[b].quorum.clone();
        match quorum {
            Some(q) if !drop => Route::Deliver { quorum: q, delay, incarnation },
            _ => Route::Lost { delay },
        }
    }

    fn still_connected(&self, from: i32, to: i32, incarnation: u64) -> bool {
        let w = self.lock();
        let (a, b) = (self.slot_index(from), self.slot_index(to));
        w.slots[b].incarnation == incarnation && w.slots[b].quorum.is_some() && w.groups[a] == w.groups[b]
    }
}

enum Route {
    Unreachable,
    Lost { delay: u64 },
    Deliver { quorum: Arc<Quorum>, delay: u64, incarnation: u64 },
}

impl Transport for SimTransport {
    async fn send(
        &self,
        target: ReplicaKey,
        _endpoint: &ControllerEndpoint,
        rpc: RaftRpc,
        timeout: Duration,
    ) -> Result<RaftRpcReply, TransportError> {
        // Every RPC goes through the codec, as it will over the CONTROLLER listener.
        let rpc = decode_rpc(&encode_rpc(&rpc), usize::MAX).map_err(|e| TransportError::Network(e.to_string()))?;
        match self.sim.route(self.from, target) {
            Route::Unreachable => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Err(TransportError::Unreachable(format!("{target} unreachable")))
            }
            Route::Lost { delay } => {
                tokio::time::sleep(Duration::from_millis(delay).min(timeout)).await;
                Err(TransportError::Network("lost".into()))
            }
            Route::Deliver { quorum, delay, incarnation } => {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if !self.sim.still_connected(self.from, target.node_id, incarnation) {
                    return Err(TransportError::Network("lost".into()));
                }
                let reply = quorum.handle_rpc(rpc).await;
                let bytes = encode_reply(&reply);
                // The reply crosses back: the receiver may have crashed or been cut off.
                if !self.sim.still_connected(self.from, target.node_id, incarnation) {
                    return Err(TransportError::Network("reply lost".into()));
                }
                decode_reply(&bytes, usize::MAX).map_err(|e| TransportError::Network(e.to_string()))
            }
        }
    }
}

fn config(replica: ReplicaKey) -> QuorumConfig {
    let mut config = QuorumConfig::new(replica, endpoint(replica.node_id));
    config.request_timeout_ms = 5_000;
    // Small, so that snapshots, purges, segment rolls and snapshot installs happen.
    config.max_record_bytes_between_snapshots = 1_500;
    config.entries_kept_below_snapshot = 5;
    config.log_segment_bytes = 2_048;
    config.applied_events_capacity = 1 << 16;
    config
}

fn endpoint(node_id: i32) -> ControllerEndpoint {
    ControllerEndpoint::new("127.0.0.1", 9000 + node_id as u16)
}

fn directory_id(node_id: i32, generation: u8) -> [u8; 16] {
    let mut id = [generation; 16];
    id[0] = node_id as u8;
    id
}

impl Sim {
    fn new(seed: u64, nodes: usize, disk_loss: bool) -> Sim {
        let slots = (1..=nodes as i32)
            .map(|n| Slot {
                node_id: n,
                replica: ReplicaKey::new(n, directory_id(n, 1)),
                disk: SimStorage::new(),
                quorum: None,
                incarnation: 0,
                events: None,
                last_applied: None,
            })
            .collect();
        let world = World {
            rng: Rng::new(seed),
            slots,
            groups: vec![0; nodes],
            drop_per_mille: 0,
            max_delay_ms: 10,
            leaders_by_term: BTreeMap::new(),
            applied_at: BTreeMap::new(),
            acked: BTreeMap::new(),
            snapshot_installs: 0,
            replacing: None,
            replacements: 0,
            reconciling: false,
            trace: Vec::new(),
        };
        Sim { world: Arc::new(Mutex::new(world)), seed, disk_loss }
    }

    fn note(&self, what: String) {
        self.lock().trace.push(what);
    }

    /// Starts the member of slot `i` on its disk.
    async fn start(&self, i: usize) {
        let (replica, disk, node_id) = {
            let w = self.lock();
            (w.slots[i].replica, w.slots[i].disk.clone(), w.slots[i].node_id)
        };
        let transport = SimTransport { from: node_id, sim: self.clone() };
        let quorum = Quorum::start(config(replica), disk, Path::new(METADATA_DIR), transport)
            .await
            .unwrap_or_else(|e| panic!("seed {}: node {node_id} does not start: {e}", self.seed));
        let (applied, events) = quorum.subscribe();
        let mut w = self.lock();
        let slot = &mut w.slots[i];
        slot.last_applied = applied.last_applied.map(|l| l.index);
        slot.events = Some(events);
        slot.quorum = Some(Arc::new(quorum));
        w.trace.push(format!("start {replica}"));
    }

    /// A power loss at node `i`: its disk as a crash leaves it, and it stops at once
    /// (nothing it does after this instant reaches anyone).
    async fn crash(&self, i: usize, mode: CrashMode) {
        let quorum = {
            let mut w = self.lock();
            let slot = &mut w.slots[i];
            let Some(quorum) = slot.quorum.take() else { return };
            slot.incarnation += 1;
            slot.disk = slot.disk.crash(mode);
            slot.events = None;
            let replica = slot.replica;
            w.trace.push(format!("crash {replica} {mode:?}"));
            quorum
        };
        quorum.shutdown().await;
    }

    /// Node `i` loses its whole disk: it comes back empty, with a new directory id and so
    /// a new replica key, and must not initialize a cluster of its own.
    async fn lose_disk(&self, i: usize) {
        self.crash(i, CrashMode::LoseUnsynced).await;
        let (old, new) = {
            let mut w = self.lock();
            let slot = &mut w.slots[i];
            let old = slot.replica;
            let generation = old.directory_id[1].wrapping_add(1);
            slot.replica = ReplicaKey::new(slot.node_id, directory_id(slot.node_id, generation));
            slot.disk = SimStorage::new();
            slot.last_applied = None;
            let new = slot.replica;
            w.replacing = Some((old, new));
            w.trace.push(format!("disk lost: {old} comes back as {new}"));
            (old, new)
        };
        self.start(i).await;
        // Bootstrap: the others hold quorum state, so the empty node joins, never founds.
        let hellos: Vec<Hello> = {
            let w = self.lock();
            w.slots
                .iter()
                .filter(|s| s.replica != new)
                .map(|s| Hello {
                    replica: s.replica,
                    endpoint: endpoint(s.node_id),
                    cluster_id: None,
                    has_quorum_state: s.quorum.is_some() || s.replica == old,
                })
                .collect()
        };
        let voters: BTreeSet<i32> = (1..=self.lock().slots.len() as i32).collect();
        let me = Hello { replica: new, endpoint: endpoint(new.node_id), cluster_id: None, has_quorum_state: false };
        let decision = decide_bootstrap(&me, &voters, &hellos);
        assert!(
            matches!(decision, BootstrapDecision::JoinExisting { .. } | BootstrapDecision::Wait { .. }),
            "seed {}: a node that lost its disk would {decision:?}",
            self.seed
        );
    }

    /// The active controller's part of a replacement: add the new key as a learner, then,
    /// once it has caught up, replace the old key by it. One step at a time, retried.
    fn reconcile(&self) {
        let (leader, old, new) = {
            let mut w = self.lock();
            let Some((old, new)) = w.replacing else { return };
            if w.reconciling {
                return;
            }
            let Some(leader) = w.slots.iter().filter_map(|s| s.quorum.clone()).find(|q| q.is_leader()) else { return };
            let voters = leader.voters();
            if voters.contains(&new) && !voters.contains(&old) {
                w.replacing = None;
                w.replacements += 1;
                w.trace.push(format!("replaced {old} by {new}"));
                return;
            }
            w.reconciling = true;
            (leader, old, new)
        };
        let sim = self.clone();
        tokio::spawn(async move {
            if !leader.members().contains_key(&new) {
                let _ = leader.add_learner(new, endpoint(new.node_id)).await;
            } else if leader.replication_lag(new).is_some_and(|lag| lag <= 2) {
                let _ = leader.replace_voter(old, new).await;
            }
            sim.lock().reconciling = false;
        });
    }

    /// Every member bootstraps as the server will: Hellos, then the decision.
    async fn bootstrap(&self) {
        let hellos: Vec<Hello> = {
            let w = self.lock();
            w.slots
                .iter()
                .map(|s| Hello {
                    replica: s.replica,
                    endpoint: endpoint(s.node_id),
                    cluster_id: None,
                    has_quorum_state: s.quorum.as_ref().is_some_and(|q| q.had_quorum_state()),
                })
                .collect()
        };
        let voters: BTreeSet<i32> = hellos.iter().map(|h| h.replica.node_id).collect();
        for (i, me) in hellos.iter().enumerate() {
            let others: Vec<Hello> = hellos.iter().filter(|h| h.replica != me.replica).cloned().collect();
            if let BootstrapDecision::Initialize(members) = decide_bootstrap(me, &voters, &others) {
                let quorum = self.lock().slots[i].quorum.clone().expect("started");
                quorum.initialize(members).await.expect("a new member initializes");
            }
        }
    }

    /// The end of the trace and every member's view, for a failure message.
    fn describe(&self) -> String {
        let w = self.lock();
        let mut out: Vec<String> = w.trace.iter().rev().take(25).rev().cloned().collect();
        for slot in &w.slots {
            let Some(q) = &slot.quorum else {
                out.push(format!("{}: down", slot.replica));
                continue;
            };
            let m = q.metrics().borrow().clone();
            out.push(format!(
                "{}: {:?} term {} leader {:?} last log {:?} applied {:?} membership {:?}",
                slot.replica,
                m.state,
                m.current_term,
                m.current_leader,
                m.last_log_index,
                m.last_applied.map(|l| l.index),
                m.membership_config.membership()
            ));
        }
        out.join("\n")
    }

    /// Checks every invariant; panics with the seed on a violation.
    fn check(&self) {
        let mut w = self.lock();
        let seed = self.seed;
        let World { slots, leaders_by_term, applied_at, acked, snapshot_installs, .. } = &mut *w;
        for slot in slots.iter_mut() {
            let Some(quorum) = &slot.quorum else { continue };
            let metrics = quorum.metrics().borrow().clone();
            if metrics.state == openraft::ServerState::Leader {
                let leader = *leaders_by_term.entry(metrics.current_term).or_insert(slot.replica);
                assert_eq!(
                    leader, slot.replica,
                    "seed {seed}: two leaders in term {}: {leader} and {}",
                    metrics.current_term, slot.replica
                );
            }
            let Some(events) = slot.events.as_mut() else { continue };
            loop {
                match events.try_recv() {
                    Ok(AppliedEvent::Entry { index, term, batch }) => {
                        let expected = slot.last_applied.map_or(0, |l| l + 1);
                        assert_eq!(
                            index, expected,
                            "seed {seed}: {} applied {index} after {:?}",
                            slot.replica, slot.last_applied
                        );
                        let fingerprint = batch.and_then(|b| b.records.first().cloned());
                        let seen = applied_at.entry(index).or_insert((term, fingerprint.clone()));
                        assert_eq!(
                            *seen,
                            (term, fingerprint),
                            "seed {seed}: {} applied a different entry at {index}",
                            slot.replica
                        );
                        slot.last_applied = Some(index);
                    }
                    Ok(AppliedEvent::Snapshot { index, .. }) => {
                        assert!(slot.last_applied.is_none_or(|l| index >= l), "seed {seed}: snapshot goes back");
                        *snapshot_installs += 1;
                        slot.last_applied = Some(index);
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(e) => panic!("seed {seed}: {} applied events: {e}", slot.replica),
                }
            }
        }
        for (index, record) in acked.iter() {
            if let Some((_, applied)) = applied_at.get(index) {
                assert_eq!(applied.as_ref(), Some(record), "seed {seed}: acknowledged proposal at {index} lost");
            }
        }
    }

    /// A proposal from the client to a random live member; its outcome recorded.
    fn propose(&self, n: u64, in_flight: &Arc<Mutex<usize>>) {
        let target = {
            let mut w = self.lock();
            let live: Vec<usize> = (0..w.slots.len()).filter(|i| w.slots[*i].quorum.is_some()).collect();
            if live.is_empty() {
                return;
            }
            let i = live[w.rng.below(live.len() as u64) as usize];
            // Prefer the leader the member knows, as a client following NOT_CONTROLLER.
            let q = w.slots[i].quorum.clone().expect("live");
            let leader = q.leader().and_then(|(k, _)| w.slots.get((k.node_id - 1) as usize).filter(|s| s.replica == k));
            match leader.and_then(|s| s.quorum.clone().map(|q| (q, s.incarnation, s.node_id))) {
                Some(t) => t,
                None => (q, w.slots[i].incarnation, w.slots[i].node_id),
            }
        };
        let (quorum, incarnation, node_id) = target;
        *in_flight.lock().unwrap() += 1;
        let sim = self.clone();
        let in_flight = in_flight.clone();
        tokio::spawn(async move {
            let record = MetadataRecord::ProducerIdsAllocated { next: n as i64 };
            let result = quorum.propose(vec![record.clone()]).await;
            *in_flight.lock().unwrap() -= 1;
            let mut w = sim.lock();
            // An answer from a member that crashed meanwhile never reached the client.
            if w.slots[(node_id - 1) as usize].incarnation != incarnation {
                return;
            }
            match result {
                Ok(applied) => {
                    w.trace.push(format!("ack {n} at {}", applied.index));
                    w.acked.insert(applied.index, record);
                }
                Err(ProposeError::NotLeader { .. } | ProposeError::TimedOut | ProposeError::Stopped(_)) => {}
                Err(e) => panic!("seed {}: proposal {n}: {e}", sim.seed),
            }
        });
    }

    /// One random fault or repair.
    async fn fault(&self) {
        let nodes = self.lock().slots.len();
        let minority = (nodes - 1) / 2;
        let choice = self.lock().rng.below(100);
        match choice {
            0..=4 => {
                let down = self.lock().slots.iter().filter(|s| s.quorum.is_none()).count();
                if down < minority {
                    let (i, mode) = {
                        let mut w = self.lock();
                        // Half the crashes hit the leader, so elections happen often.
                        let leader = w.slots.iter().position(|s| s.quorum.as_ref().is_some_and(|q| q.is_leader()));
                        let i = match leader {
                            Some(l) if w.rng.chance(500) => l,
                            _ => w.rng.below(nodes as u64) as usize,
                        };
                        let seed = w.rng.next();
                        let mode = match w.rng.below(3) {
                            0 => CrashMode::LoseUnsynced,
                            1 => CrashMode::TearUnsynced { seed },
                            _ => CrashMode::TearAndGarble { seed },
                        };
                        (i, mode)
                    };
                    self.crash(i, mode).await;
                }
            }
            5..=9 => {
                let down: Vec<usize> = {
                    let w = self.lock();
                    (0..nodes).filter(|i| w.slots[*i].quorum.is_none()).collect()
                };
                if let Some(&i) = down.first() {
                    self.start(i).await;
                }
            }
            10..=12 => {
                let mut w = self.lock();
                let mut groups: Vec<u8> = (0..nodes).map(|_| w.rng.below(2) as u8).collect();
                // Half the partitions cut the leader off from everyone.
                let leader = w.slots.iter().position(|s| s.quorum.as_ref().is_some_and(|q| q.is_leader()));
                if let Some(l) = leader.filter(|_| w.rng.chance(500)) {
                    groups = vec![0; nodes];
                    groups[l] = 1;
                }
                w.trace.push(format!("partition {groups:?}"));
                w.groups = groups;
            }
            13..=14 => {
                let mut w = self.lock();
                w.groups = vec![0; nodes];
                w.trace.push("heal".into());
            }
            20..=21 if self.disk_loss => {
                let (ready, i) = {
                    let mut w = self.lock();
                    let down = w.slots.iter().filter(|s| s.quorum.is_none()).count();
                    // Only once the cluster has committed something: a voter of a running
                    // cluster loses its disk. An initializer that loses its disk before its
                    // first entry reached anyone leaves voters with a vote and no log, and
                    // bootstrap waits for an operator (see quorum/bootstrap.rs).
                    let running = !w.acked.is_empty();
                    (running && w.replacing.is_none() && down < minority, w.rng.below(nodes as u64) as usize)
                };
                if ready {
                    self.lose_disk(i).await;
                }
            }
            17..=19 => {
                let mut w = self.lock();
                w.drop_per_mille = [0, 20, 100, 300][w.rng.below(4) as usize];
                w.max_delay_ms = [2, 10, 50, 200][w.rng.below(4) as usize];
                let (d, m) = (w.drop_per_mille, w.max_delay_ms);
                w.trace.push(format!("network drop {d}‰ delay ≤{m}ms"));
            }
            _ => {}
        }
    }

    /// Heals everything and starts every member that is down.
    async fn heal(&self) {
        let down: Vec<usize> = {
            let mut w = self.lock();
            let n = w.slots.len();
            w.groups = vec![0; n];
            w.drop_per_mille = 0;
            w.max_delay_ms = 10;
            (0..n).filter(|i| w.slots[*i].quorum.is_none()).collect()
        };
        for i in down {
            self.start(i).await;
        }
        self.note("heal all".into());
    }

    async fn stop_all(&self) {
        let quorums: Vec<Arc<Quorum>> = self.lock().slots.iter_mut().filter_map(|s| s.quorum.take()).collect();
        for q in quorums {
            q.shutdown().await;
        }
    }
}

/// Runs one seed; returns the trace and the common sequence, for the replay check.
/// What was applied at each index: the term, and the batch's first record (a proposal's
/// fingerprint) or `None` for openraft's own entries.
type CommonSequence = BTreeMap<u64, (u64, Option<MetadataRecord>)>;

fn run_seed(seed: u64, nodes: usize, disk_loss: bool) -> (Vec<String>, CommonSequence) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        seed_thread_rng(seed);
        let sim = Sim::new(seed, nodes, disk_loss);
        for i in 0..nodes {
            sim.start(i).await;
        }
        sim.bootstrap().await;
        let in_flight = Arc::new(Mutex::new(0usize));
        let mut proposals = 0u64;
        for _ in 0..FAULT_STEPS {
            sim.fault().await;
            if *in_flight.lock().unwrap() < MAX_CLIENT_IN_FLIGHT && sim.lock().rng.chance(400) {
                proposals += 1;
                sim.propose(proposals, &in_flight);
            }
            sim.reconcile();
            tokio::time::sleep(Duration::from_millis(STEP_MS)).await;
            sim.check();
        }
        // Liveness: healed, the quorum commits a new proposal and every member catches up.
        sim.heal().await;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(HEAL_MS);
        let committed = loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "seed {seed}: healed quorum commits nothing in {HEAL_MS} ms\n{}",
                sim.describe()
            );
            let leader = sim.lock().slots.iter().filter_map(|s| s.quorum.clone()).find(|q| q.is_leader());
            if let Some(leader) = leader {
                proposals += 1;
                let record = MetadataRecord::ProducerIdsAllocated { next: proposals as i64 };
                if let Ok(applied) = leader.propose(vec![record.clone()]).await {
                    sim.lock().acked.insert(applied.index, record);
                    break applied.index;
                }
            }
            sim.reconcile();
            tokio::time::sleep(Duration::from_millis(STEP_MS)).await;
            sim.check();
        };
        loop {
            sim.check();
            sim.reconcile();
            let pending = sim.lock().replacing;
            assert!(
                pending.is_none() || tokio::time::Instant::now() < deadline,
                "seed {seed}: replacement {pending:?} never completed"
            );
            let behind: Vec<ReplicaKey> = {
                let w = sim.lock();
                w.slots.iter().filter(|s| s.last_applied.is_none_or(|l| l < committed)).map(|s| s.replica).collect()
            };
            if behind.is_empty() && pending.is_none() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "seed {seed}: {behind:?} never caught up to {committed}");
            tokio::time::sleep(Duration::from_millis(STEP_MS)).await;
        }
        let result = final_check(&sim, seed, nodes);
        sim.stop_all().await;
        result
    })
}

/// After convergence: every acknowledged proposal is in the common sequence.
fn final_check(sim: &Sim, seed: u64, nodes: usize) -> (Vec<String>, CommonSequence) {
    {
        let w = sim.lock();
        for (index, record) in &w.acked {
            let applied = w.applied_at.get(index).and_then(|(_, r)| r.as_ref());
            assert_eq!(
                applied,
                Some(record),
                "seed {seed}: acknowledged proposal at {index} is not in the common sequence"
            );
        }
        assert!(w.acked.len() > 1, "seed {seed}: the workload acknowledged {} proposals", w.acked.len());
        // Every member agrees the voters are the nodes' current replica keys.
        let current: BTreeSet<ReplicaKey> = w.slots.iter().map(|s| s.replica).collect();
        for slot in &w.slots {
            let voters = slot.quorum.as_ref().map(|q| q.voters());
            assert_eq!(voters.as_ref(), Some(&current), "seed {seed}: {} sees other voters", slot.replica);
        }
        if std::env::var("SIM_VERBOSE").is_ok() {
            let count = |p: &str| w.trace.iter().filter(|t| t.starts_with(p)).count();
            eprintln!(
                "seed {seed}: {nodes} nodes, {} acked, {} indexes applied, {} terms with a leader, {} crashes, {} partitions, {} snapshot installs, {} voter replacements",
                w.acked.len(),
                w.applied_at.len(),
                w.leaders_by_term.len(),
                count("crash"),
                count("partition"),
                w.snapshot_installs,
                w.replacements
            );
        }
        (w.trace.clone(), w.applied_at.clone())
    }
}

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("SIM_SEED") {
        return vec![seed.parse().expect("SIM_SEED is a number")];
    }
    let n = std::env::var("SIM_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    (1..=n).collect()
}

fn run_seeds(nodes: usize, default: u64, disk_loss: bool) {
    for seed in seeds(default) {
        let outcome = std::panic::catch_unwind(|| run_seed(seed, nodes, disk_loss));
        if let Err(e) = outcome {
            eprintln!("quorum simulation failed: {nodes} nodes, disk loss {disk_loss}, replay with SIM_SEED={seed}");
            std::panic::resume_unwind(e);
        }
    }
}

#[test]
fn three_voters_stay_safe_and_live_under_faults() {
    run_seeds(3, 32, false);
}

#[test]
fn five_voters_stay_safe_and_live_under_faults() {
    run_seeds(5, 16, false);
}

#[test]
fn voters_that_lose_their_disks_are_replaced_by_their_new_replica_keys() {
    run_seeds(3, 16, true);
    run_seeds(5, 8, true);
}

#[test]
fn a_seed_replays_identically() {
    let seed = seeds(1)[0];
    let first = run_seed(seed, 3, true);
    let second = run_seed(seed, 3, true);
    assert_eq!(first.0, second.0, "seed {seed}: the fault and ack traces differ between two runs");
    assert_eq!(first.1, second.1, "seed {seed}: the committed sequences differ between two runs");
}
