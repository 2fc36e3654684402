//! Seeded simulation of partition replication across brokers (issue 15): each broker's
//! replica state machines ([`ReplicaState`]) and model logs, the controller's real
//! decisions ([`ClusterControl`] over a [`MetadataImage`]: registration, heartbeats and
//! session expiry, fencing, clean or unclean elections, AlterPartition with KIP-841 and
//! KIP-903 checks, and reassignments an operator starts or cancels now and then, moving a
//! partition to two or three brokers picked at random), over a simulated network that delays and drops messages and can cut
//! a broker off from the controller, the other brokers or both, and disks that lose
//! what was not made durable when their broker crashes (and, now and then, everything).
//!
//! Each broker keeps, per partition, a model log (offset, leader epoch, client write
//! id), its durable prefix, a leader-epoch cache (`osprey_storage`'s
//! `LeaderEpochCache`, Kafka's `endOffsetFor` rules) and a checkpointed high watermark.
//! Followers fetch as the broker's fetcher does (fetch offset = log end offset, made
//! durable first; last fetched epoch = the log's last epoch; truncate where the leader
//! says the logs diverge, [`fetch::truncation_offset`]; to the leader's high watermark
//! on OFFSET_OUT_OF_RANGE); leaders answer through [`ReplicaState::follower_fetch`]
//! (the epoch checks, then the follower's position). ISR changes are retried until
//! answered, newest per partition, as the server's `send_isr_changes`. Brokers learn the
//! controller's records in order, after a delay. A crashed broker restarts as a new
//! incarnation, registers again and, once it has caught up with its registration,
//! opens fresh replica state machines from the metadata and each log's checkpointed
//! high watermark. A broker that learns it is no replica of a partition any more drops
//! its replica state machine and deletes the log, as the server's `publish` does; a
//! leader whose view predates the removal may still count it in its ISR, and the ISR
//! agreement check skips it in such views.
//!
//! Invariants, checked after EVERY step:
//! 1. an acknowledged acks=all write is never lost while an ISR or ELR member keeps its
//!    disk: some member of the controller's ISR, or of its ELR (KIP-966, on in three
//!    runs of four, with the run's `min.insync.replicas`), has it durably, at the offset
//!    it was acknowledged at, unless every member that had it lost its disk (clean
//!    elections only: an unclean election, or electing the last known leader, gives
//!    this up, as in Kafka);
//! 2. the logs of ISR members agree up to the high watermark: every member of a leader's
//!    ISR (and of the controller's, for the current leader) holds the leader's records
//!    below its high watermark; a member that lost its disk is skipped until it has
//!    left the ISR and caught up (after an unclean election, only the current leader's
//!    ISR is checked);
//! 3. leader epochs only grow: in the controller's records, and on every broker;
//! 4. the high watermark never goes backwards on a leader (within its leadership);
//! 5. no request is answered twice, and an acknowledged one lies below its leader's high
//!    watermark when it is answered;
//! 6. the ISR contains the leader, in the controller's image and on every leader.
//!
//! Then everything heals (network, crashed brokers restart) and the simulation runs
//! until quiet, checking liveness: every broker is unfenced, every partition has a
//! leader, every replica is in the ISR, every log is the same, and (clean elections
//! only) every acknowledged write not lost with disks is in every log at the offset it
//! was acknowledged at. The seeds together must have gone through every fault and
//! path counted in [`Coverage`].
//!
//! A failure prints its seed: `SIM_SEED=n` replays one seed, `SIM_SEEDS=n` sets how
//! many run (seeds 0..n), `SIM_TRACE=1` prints every step.

use osprey_cluster::image::{BrokerListener, MetadataImage, MetadataRecord, NO_LEADER};
use osprey_cluster::reassignment::ReassignmentTarget;
use osprey_cluster::replica::fetch::FollowerFetch;
use osprey_cluster::replica::{AckLevel, Assignment, IsrChange, Output, ReplicaConfig, ReplicaState};
use osprey_cluster::{
    AlterPartitionInput, AlterPartitionItem, AlterPartitionResult, AlterPartitionTopic, BrokerHeartbeatInput,
    BrokerRegistrationInput, ClusterControl, ClusterControlConfig,
};
/// Seeded SplitMix64 shared with the codec tests: a run replays from its seed.
use osprey_protocol::wire::{simulation_seeds, TestRng as Rng};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet};

mod sim;
use sim::replication::{self, Disk, FetchAnswer, FetchApplied};

const CLUSTER_ID: &str = "sim-cluster";
const TOPIC_ID: [u8; 16] = [7; 16];
/// The controller's node id on the simulated network (brokers are 1..).
const CONTROLLER: i32 = 0;
/// `replica.lag.time.max.ms`.
const LAG_MS: i64 = 3_000;
/// `broker.session.timeout.ms` and `broker.heartbeat.interval.ms`.
const SESSION_MS: i64 = 4_000;
const HEARTBEAT_MS: i64 = 500;
/// A fetch or AlterPartition without an answer after this long is sent again.
const REQUEST_TIMEOUT_MS: i64 = 1_500;
const STEP_MAX_MS: u64 = 200;
const NETWORK_MAX_DELAY_MS: u64 = 150;
const STEPS: usize = 1_500;
const QUIET_STEPS_MAX: usize = 4_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DiskLoss {
    /// The partition epoch at which the controller's ISR first left the broker out
    /// after it registered again: a view from then on names it only once it caught up.
    removed_at_partition_epoch: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Up,
    Down { restart_at_ms: i64 },
}

/// A fetch sent and not answered, per partition.
#[derive(Debug, Clone, Copy)]
struct FetchInFlight {
    sent_ms: i64,
}

struct Broker {
    id: i32,
    life: Life,
    /// Bumped at every restart: messages to an earlier incarnation are dropped.
    incarnation: u8,
    /// The broker epoch the controller gave this incarnation, once registered.
    epoch: Option<i64>,
    /// The metadata this broker has applied, in order.
    image: MetadataImage,
    disks: Vec<Disk>,
    /// Per partition: this broker lost its disk. It stays in the ISR until it is fenced
    /// (for good if it is the last member), keeping no records: the ISR agreement check
    /// skips it in every leader's view older than its removal.
    disk_lost: Vec<Option<DiskLoss>>,
    /// Per partition: the partition epoch of the metadata that last removed this broker
    /// from the replicas (it deleted its log then). A leader whose view is older may
    /// still count it in its ISR: the ISR agreement check skips it in such views.
    deleted_at: Vec<Option<i32>>,
    /// Whether this incarnation has caught up with its own registration: only then
    /// does it open its partitions (Kafka's broker waits for the same catch-up).
    open: bool,
    /// The partitions this broker hosts, once open.
    replicas: Vec<Option<ReplicaState>>,
    fetches: Vec<Option<FetchInFlight>>,
    /// ISR changes not answered yet, newest per partition (the server's
    /// `send_isr_changes`), and when the one for a partition was last sent.
    isr_changes: BTreeMap<i32, (IsrChange, Option<i64>)>,
    /// Followers' broker epochs, from their fetches (AlterPartition v3, KIP-903).
    follower_epochs: BTreeMap<i32, i64>,
    last_heartbeat_ms: i64,
}

impl Broker {
    fn is_open(&self) -> bool {
        self.life == Life::Up && self.open
    }

    /// The partition's replica state machine, if this broker hosts it and is open.
    fn state(&self, p: i32) -> Option<&ReplicaState> {
        self.is_open().then(|| self.replicas[p as usize].as_ref()).flatten()
    }
}

#[derive(Debug, Clone)]
enum Message {
    Fetch { partition: i32, fetch: FollowerFetch, broker_epoch: i64 },
    FetchReply { partition: i32, answer: FetchAnswer },
    AlterPartition { partition: i32, broker_epoch: i64, change: IsrChange, member_epochs: Vec<i64> },
    AlterPartitionReply { partition: i32, change: IsrChange, answer: Result<AlterPartitionResult, ErrorCode> },
}

#[derive(Debug, Clone)]
struct InFlight {
    deliver_at_ms: i64,
    from: i32,
    to: i32,
    /// The recipient's incarnation when it was sent (the controller's is always 0).
    to_incarnation: u8,
    message: Message,
}

/// A client's acks=all produce, waiting for its answer.
#[derive(Debug, Clone)]
struct Produce {
    partition: i32,
    leader: i32,
    first_offset: i64,
    write_ids: Vec<u64>,
}

/// A write acknowledged to its client.
#[derive(Debug, Clone, Copy)]
struct Acked {
    partition: i32,
    offset: i64,
    write_id: u64,
    /// It was on no other ISR member's disk when a broker lost its disk: gone, as
    /// Kafka allows.
    lost_with_disk: bool,
}

struct Settings {
    brokers: i32,
    partitions: i32,
    min_insync_replicas: usize,
    unclean: bool,
    /// KIP-966 on in the controller.
    eligible_leader_replicas: bool,
}

struct Sim {
    seed: u64,
    rng: Rng,
    trace: bool,
    now: i64,
    settings: Settings,
    control: ClusterControl,
    /// The controller's image and every record it committed, in order.
    image: MetadataImage,
    records: Vec<MetadataRecord>,
    brokers: Vec<Broker>,
    /// Cut links, both ways, by node pair (smaller id first).
    cut: BTreeSet<(i32, i32)>,
    network: Vec<InFlight>,
    faults: bool,
    appends: bool,
    next_request: u64,
    next_write_id: u64,
    produces: BTreeMap<(i32, u8, u64), Produce>,
    answered: BTreeSet<(i32, u8, u64)>,
    acked: Vec<Acked>,
    /// Whether an unclean election happened: the no-loss checks are off from then on.
    unclean_elected: bool,
    /// Per partition: at some point every ISR member had lost its disk, so the partition
    /// may have lost committed records, as after an unclean election.
    isr_lost_disks: Vec<bool>,
    coverage: Coverage,
    /// The largest leader epoch seen per partition in the controller's records, and per
    /// broker and partition.
    controller_epochs: Vec<i32>,
    broker_epochs: BTreeMap<(i32, i32), i32>,
    /// The high watermark of each leading replica state machine, by (broker,
    /// incarnation, partition, leader epoch).
    leader_high_watermarks: BTreeMap<(i32, u8, i32, i32), i64>,
}

/// What the runs went through, summed over the seeds: a simulation that never crashes a
/// leader or truncates a log checks nothing worth having.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    acknowledged_writes: usize,
    /// Acknowledged writes gone because every ISR member holding them lost its disk.
    writes_lost_with_disks: usize,
    crashes: usize,
    disk_losses: usize,
    cut_offs: usize,
    leader_elections: usize,
    unclean_elections: usize,
    /// Leaders elected from the ELR, the ISR having emptied into it (KIP-966).
    elr_elections: usize,
    diverging_truncations: usize,
    refused_isr_changes: usize,
    /// AlterPartitionReassignments accepted, and reassignments that ended (completed
    /// once the target was in the ISR, or cancelled).
    reassignments: usize,
    reassignments_ended: usize,
}

impl Coverage {
    fn add(&mut self, other: Coverage) {
        self.acknowledged_writes += other.acknowledged_writes;
        self.writes_lost_with_disks += other.writes_lost_with_disks;
        self.crashes += other.crashes;
        self.disk_losses += other.disk_losses;
        self.cut_offs += other.cut_offs;
        self.leader_elections += other.leader_elections;
        self.unclean_elections += other.unclean_elections;
        self.elr_elections += other.elr_elections;
        self.diverging_truncations += other.diverging_truncations;
        self.refused_isr_changes += other.refused_isr_changes;
        self.reassignments += other.reassignments;
        self.reassignments_ended += other.reassignments_ended;
    }
}

#[test]
fn partition_replication_keeps_acknowledged_writes_through_crashes_and_partitions() {
    let seeds: Vec<u64> = simulation_seeds(32).collect();
    let mut total = Coverage::default();
    for &seed in &seeds {
        match std::panic::catch_unwind(|| Sim::new(seed).run()) {
            Ok(coverage) => total.add(coverage),
            Err(_) => panic!(
                "partition replication simulation failed at seed {seed}; replay with SIM_SEED={seed} SIM_TRACE=1"
            ),
        }
    }
    println!("{} seeds: {total:?}", seeds.len());
    if seeds.len() >= 16 {
        let c = total;
        let seen = [
            c.acknowledged_writes,
            c.crashes,
            c.disk_losses,
            c.cut_offs,
            c.leader_elections,
            c.unclean_elections,
            c.elr_elections,
            c.diverging_truncations,
            c.refused_isr_changes,
            c.reassignments,
            c.reassignments_ended,
        ];
        assert!(seen.iter().all(|&n| n > 0), "some fault or path never happened: {c:?}");
    }
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut rng = Rng::new(seed);
        let settings = Settings {
            brokers: if rng.chance(4) { 5 } else { 3 },
            partitions: 1 + rng.below(2) as i32,
            min_insync_replicas: 1 + rng.below(3) as usize,
            unclean: rng.chance(5),
            // From the seed, not the stream, so that the runs' faults stay the same.
            eligible_leader_replicas: seed % 4 != 3,
        };
        let control = ClusterControl::new(ClusterControlConfig {
            cluster_id: Some(CLUSTER_ID.into()),
            broker_session_timeout_ms: SESSION_MS,
            unclean_leader_election_enable: settings.unclean,
            min_insync_replicas: settings.min_insync_replicas as i32,
            eligible_leader_replicas_enabled: settings.eligible_leader_replicas,
        });
        let brokers = (1..=settings.brokers)
            .map(|id| Broker {
                id,
                life: Life::Up,
                incarnation: 0,
                epoch: None,
                image: MetadataImage::default(),
                disks: vec![Disk::default(); settings.partitions as usize],
                disk_lost: vec![None; settings.partitions as usize],
                deleted_at: vec![None; settings.partitions as usize],
                open: false,
                replicas: (0..settings.partitions).map(|_| None).collect(),
                fetches: vec![None; settings.partitions as usize],
                isr_changes: BTreeMap::new(),
                follower_epochs: BTreeMap::new(),
                last_heartbeat_ms: 0,
            })
            .collect();
        let mut sim = Sim {
            seed,
            rng,
            trace: std::env::var_os("SIM_TRACE").is_some(),
            now: 0,
            control,
            image: MetadataImage::default(),
            records: Vec::new(),
            brokers,
            cut: BTreeSet::new(),
            network: Vec::new(),
            faults: true,
            appends: true,
            next_request: 0,
            next_write_id: 0,
            produces: BTreeMap::new(),
            answered: BTreeSet::new(),
            acked: Vec::new(),
            unclean_elected: false,
            isr_lost_disks: vec![false; settings.partitions as usize],
            coverage: Coverage::default(),
            controller_epochs: vec![-1; settings.partitions as usize],
            broker_epochs: BTreeMap::new(),
            leader_high_watermarks: BTreeMap::new(),
            settings,
        };
        sim.bootstrap();
        sim
    }

    /// Every broker registers and is unfenced, then the topic is created with every
    /// replica in the ISR; leadership is spread by rotating the replica lists.
    fn bootstrap(&mut self) {
        for i in 0..self.brokers.len() {
            self.try_register(i);
        }
        for i in 0..self.brokers.len() {
            self.propagate_metadata(i, usize::MAX);
            self.heartbeat(i);
        }
        let n = self.settings.brokers;
        let replicas: Vec<Vec<i32>> = (0..self.settings.partitions)
            .map(|p| {
                let mut list: Vec<i32> = (1..=n).collect();
                list.rotate_left((p % n) as usize);
                // RF 3 even with five brokers.
                list.truncate(3);
                list
            })
            .collect();
        self.commit(vec![MetadataRecord::CreateTopic {
            name: "t".into(),
            id: TOPIC_ID,
            replicas,
            configs: BTreeMap::new(),
            isrs: None,
        }]);
        for i in 0..self.brokers.len() {
            self.propagate_metadata(i, usize::MAX);
        }
        self.trace(format!(
            "seed {}: {} brokers, {} partitions, min.insync.replicas={}, unclean={}",
            self.seed,
            self.settings.brokers,
            self.settings.partitions,
            self.settings.min_insync_replicas,
            self.settings.unclean
        ));
    }

    fn run(mut self) -> Coverage {
        for _ in 0..STEPS {
            self.step();
        }
        self.heal();
        let mut quiet = 0;
        while !self.converged() {
            quiet += 1;
            assert!(quiet < QUIET_STEPS_MAX, "seed {}: not converged after healing: {}", self.seed, self.describe());
            self.step();
        }
        self.check_converged();
        self.coverage.acknowledged_writes = self.acked.len();
        self.coverage.writes_lost_with_disks = self.acked.iter().filter(|a| a.lost_with_disk).count();
        self.coverage
    }

    // ----- one step ----------------------------------------------------------------

    fn step(&mut self) {
        self.now += self.rng.below(STEP_MAX_MS) as i64;
        let i = self.rng.below(self.brokers.len() as u64) as usize;
        let p = self.rng.below(self.settings.partitions as u64) as i32;
        match self.rng.below(10) {
            0..=3 if self.appends => self.client_append(p),
            4..=6 => self.fsync(i, p),
            7 => self.tick_replicas(),
            _ => {}
        }
        if self.faults {
            self.fault(i);
            if self.rng.chance(100) {
                self.reassign(p);
            }
        }
        self.deliver_due();
        self.background();
        self.check();
    }

    /// Now and then a broker crashes, or is cut off; cut-off brokers heal sooner.
    fn fault(&mut self, i: usize) {
        if self.rng.chance(300) {
            self.crash(i);
        } else if self.rng.chance(150) {
            self.cut_off(i);
        } else if self.rng.chance(20) {
            self.heal_one(i);
        }
    }

    /// What runs on its own timers: heartbeats, the controller's session expiry,
    /// restarts and registrations, fetches and ISR changes that got no answer.
    fn background(&mut self) {
        for i in 0..self.brokers.len() {
            match self.brokers[i].life {
                Life::Down { restart_at_ms } if restart_at_ms <= self.now => self.restart(i),
                Life::Down { .. } => {}
                Life::Up if self.brokers[i].epoch.is_none() => self.try_register(i),
                Life::Up => {
                    if self.now - self.brokers[i].last_heartbeat_ms >= HEARTBEAT_MS {
                        self.heartbeat(i);
                    }
                    // Metadata arrives in order, late, a few records at a time.
                    if self.rng.chance(3) {
                        let count = 1 + self.rng.below(3) as usize;
                        self.propagate_metadata(i, count);
                    }
                    // The fetcher sends again soon after each answer.
                    for p in 0..self.settings.partitions {
                        if self.rng.chance(2) {
                            self.send_fetch(i, p);
                        }
                    }
                    if self.rng.chance(4) {
                        self.send_isr_changes(i);
                    }
                }
            }
            for f in self.brokers[i].fetches.iter_mut() {
                if f.is_some_and(|f| self.now - f.sent_ms > REQUEST_TIMEOUT_MS) {
                    *f = None;
                }
            }
        }
        loop {
            let result = self.control.tick(&self.image, self.now);
            let Some(fenced) = result.response else { break };
            self.trace(format!("controller fences broker {fenced}"));
            self.commit(result.records);
        }
    }

    /// An operator moves a partition (AlterPartitionReassignments) to two or three
    /// brokers picked at random, or cancels the move in progress.
    fn reassign(&mut self, p: i32) {
        let in_progress = self.image.partition(Uuid(TOPIC_ID), p).expect("the topic exists").is_reassigning();
        let replicas = if in_progress && self.rng.chance(3) {
            None
        } else {
            let mut brokers: Vec<i32> = (1..=self.settings.brokers).collect();
            for k in (1..brokers.len()).rev() {
                brokers.swap(k, self.rng.below(k as u64 + 1) as usize);
            }
            brokers.truncate(2 + self.rng.below(2) as usize);
            Some(brokers)
        };
        let request =
            vec![("t".to_string(), vec![ReassignmentTarget { partition_index: p, replicas: replicas.clone() }])];
        let result = self.control.alter_partition_reassignments(&self.image, true, &request);
        let answer = &result.response[0].partitions[0];
        self.trace(format!("operator reassigns {p} to {replicas:?}: {}", answer.error.name()));
        if answer.error == ErrorCode::NONE {
            self.coverage.reassignments += 1;
        }
        self.commit(result.records);
    }

    // ----- clients -----------------------------------------------------------------

    /// A client sends an acks=all produce to a broker that believes it leads (its
    /// metadata may be stale).
    fn client_append(&mut self, p: i32) {
        let leaders: Vec<usize> = (0..self.brokers.len())
            .filter(|&i| self.brokers[i].state(p).is_some_and(ReplicaState::is_leader))
            .collect();
        if leaders.is_empty() {
            return;
        }
        let i = leaders[self.rng.below(leaders.len() as u64) as usize];
        if let Err(refused) = self.replica(i, p).check_append(AckLevel::All) {
            self.trace(format!("broker {} refuses an append to {p}: {refused}", self.brokers[i].id));
            return;
        }
        let epoch = self.replica(i, p).leader_epoch();
        let count = 1 + self.rng.below(3);
        let write_ids: Vec<u64> = (self.next_write_id..self.next_write_id + count).collect();
        self.next_write_id += count;
        let request_id = self.next_request;
        self.next_request += 1;
        let now = self.now;
        let b = &mut self.brokers[i];
        let replica = b.replicas[p as usize].as_mut().expect("an open partition");
        let first_offset = replication::append_writes(replica, &mut b.disks[p as usize], &write_ids, request_id, now);
        let broker = &self.brokers[i];
        let key = (broker.id, broker.incarnation, request_id);
        self.trace(format!(
            "broker {} appends writes {write_ids:?} to {p} at {first_offset} in epoch {epoch}: request {request_id}",
            broker.id
        ));
        self.produces.insert(key, Produce { partition: p, leader: broker.id, first_offset, write_ids });
        self.carry_out(i, p);
    }

    // ----- disks -------------------------------------------------------------------

    /// Part of a log becomes durable; the high watermark is checkpointed with it.
    fn fsync(&mut self, i: usize, p: i32) {
        if self.brokers[i].life != Life::Up {
            return;
        }
        let disk = &self.brokers[i].disks[p as usize];
        let mut to = disk.durable;
        if disk.durable < disk.end() {
            to += 1 + self.rng.below((disk.end() - disk.durable) as u64) as i64;
        }
        let now = self.now;
        let open = self.brokers[i].is_open();
        let b = &mut self.brokers[i];
        let replica = b.replicas[p as usize].as_mut().filter(|_| open);
        let opened = replica.is_some();
        b.disks[p as usize].make_durable(to, replica, now);
        if opened {
            self.carry_out(i, p);
        }
    }

    fn crash(&mut self, i: usize) {
        if self.brokers[i].life != Life::Up {
            return;
        }
        let restart_at_ms = self.now + 500 + self.rng.below(2 * SESSION_MS as u64) as i64;
        let lose_disk = self.rng.chance(5);
        self.trace(format!(
            "broker {} crashes{}; restarts at {restart_at_ms}",
            self.brokers[i].id,
            if lose_disk { " and loses its disk" } else { "" }
        ));
        self.coverage.crashes += 1;
        if lose_disk {
            self.lose_disk(i);
        }
        let b = &mut self.brokers[i];
        b.life = Life::Down { restart_at_ms };
        for disk in &mut b.disks {
            disk.crash();
        }
        b.open = false;
        b.replicas = b.replicas.iter().map(|_| None).collect();
        b.epoch = None;
        b.isr_changes.clear();
        b.follower_epochs.clear();
        for f in &mut b.fetches {
            *f = None;
        }
    }

    /// The broker's disk is replaced by an empty one. Acknowledged writes no other ISR
    /// member holds are gone with it.
    fn lose_disk(&mut self, i: usize) {
        self.coverage.disk_losses += 1;
        let id = self.brokers[i].id;
        for k in 0..self.acked.len() {
            let a = self.acked[k];
            let isr = &self.image.partition(Uuid(TOPIC_ID), a.partition).expect("the topic exists").isr;
            if !isr.iter().any(|&m| m != id && self.holds(m, &a)) {
                self.acked[k].lost_with_disk = true;
            }
        }
        let b = &mut self.brokers[i];
        b.disks = b.disks.iter().map(|_| Disk::default()).collect();
        b.disk_lost = b.disk_lost.iter().map(|_| Some(DiskLoss { removed_at_partition_epoch: None })).collect();
    }

    /// Whether broker `id` kept its disk for partition `p`: it never lost it, or it
    /// rejoined the ISR by catching up since.
    fn kept_disk(&self, id: i32, p: i32) -> bool {
        let image = self.image.partition(Uuid(TOPIC_ID), p).expect("the topic exists");
        match self.brokers[(id - 1) as usize].disk_lost[p as usize] {
            None => true,
            Some(loss) => loss.removed_at_partition_epoch.is_some() && image.isr.contains(&id),
        }
    }

    /// Whether broker `id` has the acknowledged write durably, where it was acknowledged.
    fn holds(&self, id: i32, a: &Acked) -> bool {
        let disk = &self.brokers[(id - 1) as usize].disks[a.partition as usize];
        a.offset < disk.durable && disk.at(a.offset).is_some_and(|e| e.write_id == a.write_id)
    }

    /// A new incarnation: it replays the metadata from the start and registers again.
    fn restart(&mut self, i: usize) {
        let b = &mut self.brokers[i];
        b.life = Life::Up;
        b.incarnation = b.incarnation.wrapping_add(1);
        b.image = MetadataImage::default();
        let line = format!("broker {} restarts as incarnation {}", b.id, b.incarnation);
        self.trace(line);
        self.try_register(i);
    }

    // ----- the controller ----------------------------------------------------------

    fn try_register(&mut self, i: usize) {
        let id = self.brokers[i].id;
        if !self.connected(id, CONTROLLER) {
            return;
        }
        let request = BrokerRegistrationInput {
            broker_id: id,
            cluster_id: CLUSTER_ID.into(),
            incarnation_id: Uuid([self.brokers[i].incarnation.wrapping_add(1); 16]),
            listeners: vec![BrokerListener {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9000 + id as u16,
                security_protocol: 0,
            }],
            rack: None,
            previous_broker_epoch: -1,
        };
        match self.control.register_broker(&self.image, &request, self.now) {
            Ok(result) => {
                self.trace(format!("broker {id} registers with epoch {}", result.response));
                self.brokers[i].epoch = Some(result.response);
                self.brokers[i].last_heartbeat_ms = self.now;
                self.commit(result.records);
            }
            Err(e) => self.trace(format!("broker {id} registration refused: {}", e.code.name())),
        }
    }

    fn heartbeat(&mut self, i: usize) {
        let b = &self.brokers[i];
        let Some(epoch) = b.epoch else { return };
        if !self.connected(b.id, CONTROLLER) {
            return;
        }
        let request = BrokerHeartbeatInput {
            broker_id: b.id,
            broker_epoch: epoch,
            current_metadata_offset: b.image.next_offset() as i64 - 1,
            want_fence: false,
            want_shut_down: false,
        };
        self.brokers[i].last_heartbeat_ms = self.now;
        match self.control.broker_heartbeat(&self.image, &request, self.now) {
            Ok(result) => self.commit(result.records),
            Err(e) => self.trace(format!("broker {} heartbeat refused: {}", request.broker_id, e.code.name())),
        }
    }

    /// Commits records: the controller's image, and the invariants on them.
    fn commit(&mut self, records: Vec<MetadataRecord>) {
        for record in records {
            if let MetadataRecord::PartitionChange {
                partition, leader, isr, leader_epoch, leader_recovery_state, ..
            } = &record
            {
                self.trace(format!(
                    "controller: partition {partition} leader {leader} epoch {leader_epoch} isr {isr:?} recovery {leader_recovery_state}"
                ));
                let seen = &mut self.controller_epochs[*partition as usize];
                assert!(*leader_epoch >= *seen, "the controller's leader epoch for {partition} went back");
                if *leader_epoch > *seen && *leader != NO_LEADER {
                    self.coverage.leader_elections += 1;
                    let before = self.image.partition(Uuid(TOPIC_ID), *partition).expect("the topic exists");
                    if before.isr.is_empty() && before.elr.contains(leader) {
                        self.coverage.elr_elections += 1;
                    }
                }
                *seen = *leader_epoch;
                if *leader_recovery_state != 0 && !self.unclean_elected {
                    self.unclean_elected = true;
                    self.coverage.unclean_elections += 1;
                }
            }
            let reassigning = |image: &MetadataImage| {
                (0..self.settings.partitions)
                    .filter(|&p| image.partition(Uuid(TOPIC_ID), p).is_some_and(|p| p.is_reassigning()))
                    .count()
            };
            let before = reassigning(&self.image);
            self.image.apply(&record);
            self.coverage.reassignments_ended += before.saturating_sub(reassigning(&self.image));
            self.records.push(record);
        }
    }

    /// The controller answers an AlterPartition (one partition per request here).
    fn handle_alter_partition(
        &mut self,
        from: i32,
        partition: i32,
        broker_epoch: i64,
        change: IsrChange,
        member_epochs: Vec<i64>,
    ) {
        let request = AlterPartitionInput {
            broker_id: from,
            broker_epoch,
            topics: vec![AlterPartitionTopic {
                topic_id: Uuid(TOPIC_ID),
                partitions: vec![AlterPartitionItem {
                    partition_index: partition,
                    leader_epoch: change.leader_epoch,
                    new_isr: change.new_isr.iter().copied().zip(member_epochs).collect(),
                    leader_recovery_state: 0,
                    partition_epoch: change.partition_epoch,
                }],
            }],
        };
        let answer = match self.control.alter_partition(&self.image, &request) {
            Ok(result) => {
                let answer = result.response[0].partitions[0].clone();
                self.trace(format!(
                    "controller answers AlterPartition {change:?} from {from}: {}",
                    answer.error.name()
                ));
                self.commit(result.records);
                if answer.error == ErrorCode::NONE {
                    Ok(answer)
                } else {
                    Err(answer.error)
                }
            }
            Err(e) => Err(e.code),
        };
        self.send(CONTROLLER, from, Message::AlterPartitionReply { partition, change, answer });
    }

    // ----- brokers: metadata -------------------------------------------------------

    /// The broker applies up to `count` of the controller's records it has not applied,
    /// in order, then hands each partition's state to its replica state machine.
    fn propagate_metadata(&mut self, i: usize, count: usize) {
        let b = &self.brokers[i];
        if b.life != Life::Up || !self.connected(b.id, CONTROLLER) {
            return;
        }
        let from = b.image.next_offset() as usize;
        let to = self.records.len().min(from.saturating_add(count));
        if from >= to && b.open {
            return;
        }
        for r in from..to {
            let record = self.records[r].clone();
            self.brokers[i].image.apply(&record);
        }
        for p in 0..self.settings.partitions {
            self.apply_partition_metadata(i, p);
        }
    }

    /// As the server's `Partition::apply_assignment`; a broker that has just caught up
    /// with its registration opens the partition from the log and its checkpointed
    /// high watermark.
    fn apply_partition_metadata(&mut self, i: usize, p: i32) {
        let b = &self.brokers[i];
        let caught_up = b
            .epoch
            .and_then(|epoch| b.image.broker(b.id).filter(|r| r.epoch == epoch))
            .is_some_and(|r| b.image.next_offset() > r.register_offset);
        if !caught_up {
            return;
        }
        self.brokers[i].open = true;
        let b = &self.brokers[i];
        let Some(image) = b.image.partition(Uuid(TOPIC_ID), p).cloned() else { return };
        if !image.replicas.contains(&b.id) {
            // Not a replica (any more): the broker stops serving and fetching it and
            // deletes its log, as the server's `publish` does.
            let b = &mut self.brokers[i];
            if b.replicas[p as usize].take().is_some() || b.disks[p as usize].end() > 0 {
                let line = format!("broker {} is no replica of {p}: its replica and log are deleted", b.id);
                b.disks[p as usize] = Disk::default();
                b.deleted_at[p as usize] = Some(image.partition_epoch);
                b.fetches[p as usize] = None;
                b.isr_changes.remove(&p);
                self.trace(line);
            }
            return;
        }
        let now = self.now;
        let b = &mut self.brokers[i];
        let config = ReplicaConfig {
            local_id: b.id,
            replica_lag_time_max_ms: LAG_MS,
            min_insync_replicas: self.settings.min_insync_replicas,
            fsync_before_ack: true,
        };
        let disk = &mut b.disks[p as usize];
        let slot = &mut b.replicas[p as usize];
        if let Some(epoch) = replication::apply_assignment(slot, disk, config, Assignment::from(&image), now) {
            let line = format!("broker {} leads {p} in epoch {epoch} from offset {}", b.id, disk.end());
            self.trace(line);
        }
        self.carry_out(i, p);
    }

    // ----- brokers: the replica state machine's outputs ----------------------------

    fn carry_out(&mut self, i: usize, p: i32) {
        while let Some(output) = self.replica_mut(i, p).poll_output() {
            match output {
                Output::HighWatermark(_) => {}
                Output::AlterPartition(change) => {
                    self.trace(format!("broker {} proposes {change:?} for {p}", self.brokers[i].id));
                    self.brokers[i].isr_changes.insert(p, (change, None));
                }
                Output::Completed { request_id, result } => self.completed(i, p, request_id, result),
            }
        }
    }

    fn completed(&mut self, i: usize, p: i32, request_id: u64, result: Result<(), ErrorCode>) {
        let b = &self.brokers[i];
        let key = (b.id, b.incarnation, request_id);
        assert!(self.answered.insert(key), "request {request_id} of broker {} answered twice", b.id);
        let produce = self.produces.remove(&key).expect("a request the simulation sent");
        self.trace(format!("broker {} answers request {request_id}: {result:?}", b.id));
        if result.is_err() {
            return;
        }
        let hw = self.replica(i, p).high_watermark();
        let end = produce.first_offset + produce.write_ids.len() as i64;
        assert!(end <= hw, "request {request_id} acknowledged at {end}, above the high watermark {hw}");
        assert_eq!((produce.partition, produce.leader), (p, b.id));
        for (k, &write_id) in produce.write_ids.iter().enumerate() {
            let offset = produce.first_offset + k as i64;
            self.acked.push(Acked { partition: p, offset, write_id, lost_with_disk: false });
        }
    }

    /// Sends each ISR change not yet sent, or sent and unanswered for too long.
    fn send_isr_changes(&mut self, i: usize) {
        let b = &self.brokers[i];
        let Some(broker_epoch) = b.epoch else { return };
        if b.life != Life::Up {
            return;
        }
        let now = self.now;
        let due: Vec<(i32, IsrChange)> = b
            .isr_changes
            .iter()
            .filter(|(_, (_, sent))| sent.is_none_or(|t| now - t > REQUEST_TIMEOUT_MS))
            .map(|(&p, (c, _))| (p, c.clone()))
            .collect();
        let from = b.id;
        for (p, change) in due {
            // Each member's broker epoch as its fetches named it (-1: not known here).
            let b = &self.brokers[i];
            let member_epochs = change
                .new_isr
                .iter()
                .map(|&m| if m == from { broker_epoch } else { b.follower_epochs.get(&m).copied().unwrap_or(-1) })
                .collect();
            self.brokers[i].isr_changes.insert(p, (change.clone(), Some(now)));
            self.send(from, CONTROLLER, Message::AlterPartition { partition: p, broker_epoch, change, member_epochs });
        }
    }

    /// The controller's answer to an ISR change (the server's `apply_answer`).
    fn alter_partition_answered(
        &mut self,
        i: usize,
        p: i32,
        change: IsrChange,
        answer: Result<AlterPartitionResult, ErrorCode>,
    ) {
        if self.brokers[i].isr_changes.get(&p).is_some_and(|(c, _)| *c == change) {
            self.brokers[i].isr_changes.remove(&p);
        }
        if self.brokers[i].state(p).is_none() {
            return;
        }
        let now = self.now;
        match answer {
            Ok(result) => {
                let Some(current) = self.brokers[i].image.partition(Uuid(TOPIC_ID), p).cloned() else { return };
                let assignment = Assignment {
                    leader: result.leader_id,
                    leader_epoch: result.leader_epoch,
                    partition_epoch: result.partition_epoch,
                    replicas: current.replicas,
                    isr: result.isr,
                };
                self.replica_mut(i, p).isr_change_accepted(assignment, now);
            }
            // STALE_BROKER_EPOCH is answered for the whole request: sent again later.
            Err(ErrorCode::STALE_BROKER_EPOCH) => {
                self.brokers[i].isr_changes.entry(p).or_insert((change, None));
                return;
            }
            Err(error) => {
                self.coverage.refused_isr_changes += 1;
                self.replica_mut(i, p).isr_change_refused(&change, error, now);
            }
        }
        self.carry_out(i, p);
    }

    fn tick_replicas(&mut self) {
        let now = self.now;
        for i in 0..self.brokers.len() {
            for p in 0..self.settings.partitions {
                if self.brokers[i].state(p).is_some() {
                    self.replica_mut(i, p).tick(now);
                    self.carry_out(i, p);
                }
            }
        }
    }

    // ----- brokers: fetching -------------------------------------------------------

    /// The follower's fetcher: its log is made durable first, so the fetch offset is
    /// also its durable end; the leader and epoch come from its metadata.
    fn send_fetch(&mut self, i: usize, p: i32) {
        let b = &self.brokers[i];
        let Some(state) = b.state(p) else { return };
        if b.fetches[p as usize].is_some() || state.is_leader() {
            return;
        }
        let Some(image) = b.image.partition(Uuid(TOPIC_ID), p) else { return };
        if image.leader == NO_LEADER || image.leader == b.id {
            return;
        }
        let (leader, current_leader_epoch) = (image.leader, image.leader_epoch);
        let broker_epoch = b.epoch.unwrap_or(-1);
        let now = self.now;
        let b = &mut self.brokers[i];
        let replica = b.replicas[p as usize].as_mut().expect("an open partition");
        let fetch = replication::follower_fetch(replica, &mut b.disks[p as usize], b.id, current_leader_epoch, now);
        self.carry_out(i, p);
        self.brokers[i].fetches[p as usize] = Some(FetchInFlight { sent_ms: now });
        let from = self.brokers[i].id;
        self.send(from, leader, Message::Fetch { partition: p, fetch, broker_epoch });
    }

    /// The leader's Fetch handler for a follower: the checks and the position through
    /// the replica state machine, then the records from the fetch offset.
    fn handle_fetch(&mut self, i: usize, p: i32, fetch: FollowerFetch, broker_epoch: i64) {
        if self.brokers[i].state(p).is_none() {
            let answer = FetchAnswer::Failed { error: ErrorCode::NOT_LEADER_OR_FOLLOWER, high_watermark: -1 };
            let from = self.brokers[i].id;
            self.send(from, fetch.replica_id, Message::FetchReply { partition: p, answer });
            return;
        }
        if broker_epoch >= 0 {
            self.brokers[i].follower_epochs.insert(fetch.replica_id, broker_epoch);
        }
        let now = self.now;
        let Sim { brokers, rng, .. } = self;
        let b = &mut brokers[i];
        let replica = b.replicas[p as usize].as_mut().expect("open");
        let max_entries = || 1 + rng.below(8) as usize;
        let answer = replication::answer_fetch(replica, &b.disks[p as usize], &fetch, max_entries, now);
        self.carry_out(i, p);
        let from = self.brokers[i].id;
        self.send(from, fetch.replica_id, Message::FetchReply { partition: p, answer });
    }

    /// The follower applies the leader's answer (the server's fetcher `apply`).
    fn fetch_answered(&mut self, i: usize, p: i32, answer: FetchAnswer) {
        self.brokers[i].fetches[p as usize] = None;
        if self.brokers[i].state(p).is_none_or(ReplicaState::is_leader) {
            return;
        }
        let id = self.brokers[i].id;
        let now = self.now;
        let b = &mut self.brokers[i];
        let replica = b.replicas[p as usize].as_mut().expect("an open partition");
        match replication::apply_fetch_answer(replica, &mut b.disks[p as usize], answer, now) {
            FetchApplied::Nothing => {}
            FetchApplied::TruncatedToHighWatermark(to) => {
                self.trace(format!("broker {id} truncates {p} to the leader's high watermark {to}"));
            }
            FetchApplied::TruncatedDiverging(to) => {
                self.trace(format!("broker {id} truncates {p} to {to}: the logs diverge"));
                self.coverage.diverging_truncations += 1;
            }
            FetchApplied::Appended => self.carry_out(i, p),
        }
    }

    // ----- the network -------------------------------------------------------------

    fn connected(&self, a: i32, b: i32) -> bool {
        !self.cut.contains(&(a.min(b), a.max(b)))
    }

    fn send(&mut self, from: i32, to: i32, message: Message) {
        if self.faults && self.rng.chance(25) {
            self.trace(format!("network drops {message:?} from {from} to {to}"));
            return;
        }
        let to_incarnation = self.brokers.iter().find(|b| b.id == to).map_or(0, |b| b.incarnation);
        let deliver_at_ms = self.now + self.rng.below(NETWORK_MAX_DELAY_MS) as i64;
        self.network.push(InFlight { deliver_at_ms, from, to, to_incarnation, message });
    }

    /// Delivers the messages due, oldest first; a cut link or a restarted recipient
    /// loses them.
    fn deliver_due(&mut self) {
        self.network.sort_by_key(|m| m.deliver_at_ms);
        let due = self.network.iter().take_while(|m| m.deliver_at_ms <= self.now).count();
        let messages: Vec<InFlight> = self.network.drain(..due).collect();
        for m in messages {
            if !self.connected(m.from, m.to) {
                continue;
            }
            if m.to == CONTROLLER {
                if let Message::AlterPartition { partition, broker_epoch, change, member_epochs } = m.message {
                    self.handle_alter_partition(m.from, partition, broker_epoch, change, member_epochs);
                }
                continue;
            }
            let i = (m.to - 1) as usize;
            if self.brokers[i].incarnation != m.to_incarnation || self.brokers[i].life != Life::Up {
                continue;
            }
            match m.message {
                Message::Fetch { partition, fetch, broker_epoch } => {
                    self.handle_fetch(i, partition, fetch, broker_epoch)
                }
                Message::FetchReply { partition, answer } => self.fetch_answered(i, partition, answer),
                Message::AlterPartitionReply { partition, change, answer } => {
                    self.alter_partition_answered(i, partition, change, answer)
                }
                Message::AlterPartition { .. } => unreachable!("only the controller takes AlterPartition"),
            }
        }
    }

    /// Cuts a broker off from the controller, from the other brokers, or from all.
    fn cut_off(&mut self, i: usize) {
        let id = self.brokers[i].id;
        let others: Vec<i32> = (1..=self.settings.brokers).filter(|&o| o != id).collect();
        let (controller, brokers) = match self.rng.below(3) {
            0 => (true, false),
            1 => (false, true),
            _ => (true, true),
        };
        self.trace(format!("network cuts broker {id} off: controller {controller}, brokers {brokers}"));
        self.coverage.cut_offs += 1;
        if controller {
            self.cut.insert((CONTROLLER, id));
        }
        if brokers {
            for o in others {
                self.cut.insert((id.min(o), id.max(o)));
            }
        }
    }

    fn heal_one(&mut self, i: usize) {
        let id = self.brokers[i].id;
        if self.cut.iter().any(|&(a, b)| a == id || b == id) {
            self.trace(format!("network heals broker {id}"));
            self.cut.retain(|&(a, b)| a != id && b != id);
        }
    }

    /// The end of the faults: every link heals, crashed brokers restart soon, clients
    /// stop writing, and the network stops dropping.
    fn heal(&mut self) {
        self.trace("heal everything".into());
        self.faults = false;
        self.appends = false;
        self.cut.clear();
        for b in &mut self.brokers {
            if let Life::Down { restart_at_ms } = &mut b.life {
                *restart_at_ms = (*restart_at_ms).min(self.now);
            }
        }
    }

    // ----- invariants --------------------------------------------------------------

    fn check(&mut self) {
        self.note_disk_losses();
        self.check_controller();
        for i in 0..self.brokers.len() {
            for p in 0..self.settings.partitions {
                self.check_replica(i, p);
            }
        }
        if !self.unclean_elected {
            self.check_no_acknowledged_write_lost();
        }
    }

    /// Notes when a broker that lost its disk has left a partition's ISR after it
    /// registered again: from then on it rejoins only by catching up, since an ISR
    /// change naming its earlier incarnation's broker epoch is refused (KIP-903). Before
    /// that, an expansion proposed before the loss may still add it. And notes the
    /// partitions whose every ISR member lost its disk.
    fn note_disk_losses(&mut self) {
        for p in 0..self.settings.partitions {
            let eligible = self.eligible(p);
            if eligible.iter().all(|&m| !self.kept_disk(m, p)) {
                self.isr_lost_disks[p as usize] = true;
            }
        }
        for b in self.brokers.iter_mut().filter(|b| b.epoch.is_some()) {
            for (p, loss) in b.disk_lost.iter_mut().enumerate() {
                let image = self.image.partition(Uuid(TOPIC_ID), p as i32).expect("the topic exists");
                if let Some(loss @ DiskLoss { removed_at_partition_epoch: None }) = loss {
                    if !image.isr.contains(&b.id) {
                        loss.removed_at_partition_epoch = Some(image.partition_epoch);
                    }
                }
            }
        }
    }

    /// The ISR contains the leader in the controller's image.
    fn check_controller(&self) {
        for p in 0..self.settings.partitions {
            let image = self.image.partition(Uuid(TOPIC_ID), p).expect("the topic exists");
            assert!(
                image.leader == NO_LEADER || image.isr.contains(&image.leader),
                "partition {p}: the controller's ISR {:?} lacks leader {}",
                image.isr,
                image.leader
            );
            // Whoever may lead is a replica: the leader, the ISR, the ELR and the last
            // known leader.
            let members = [image.leader].into_iter().filter(|&l| l != NO_LEADER);
            let members = members.chain(image.isr.iter().chain(&image.elr).chain(&image.last_known_elr).copied());
            for m in members {
                assert!(
                    image.replicas.contains(&m),
                    "partition {p}: {m} may lead but is no replica ({:?}, leader {}, ISR {:?}, ELR {:?}, last known {:?})",
                    image.replicas,
                    image.leader,
                    image.isr,
                    image.elr,
                    image.last_known_elr
                );
            }
        }
    }

    fn check_replica(&mut self, i: usize, p: i32) {
        let b = &self.brokers[i];
        let Some(replica) = b.state(p) else { return };
        let epoch = replica.leader_epoch();
        let seen = self.broker_epochs.entry((b.id, p)).or_insert(epoch);
        assert!(epoch >= *seen, "broker {} partition {p}: leader epoch {epoch} after {seen}", b.id);
        *seen = epoch;
        if !replica.is_leader() {
            return;
        }
        assert!(replica.isr().contains(&b.id), "broker {} leads {p} outside its ISR {:?}", b.id, replica.isr());
        let hw = replica.high_watermark();
        let last = self.leader_high_watermarks.entry((b.id, b.incarnation, p, epoch)).or_insert(hw);
        assert!(hw >= *last, "broker {} partition {p}: leader's high watermark went back from {last} to {hw}", b.id);
        *last = hw;
        // After an unclean election, or a clean one of a member that lost its disk, a
        // leader that lost its leadership (a zombie) may name members that have since
        // followed the new leader's shorter log.
        let current = self.image.partition(Uuid(TOPIC_ID), p).is_some_and(|c| c.leader_epoch == epoch);
        if (self.unclean_elected || self.isr_lost_disks[p as usize]) && !current {
            return;
        }
        let leader_disk = &b.disks[p as usize];
        // The leader's ISR, and the controller's while this broker is its leader (it may
        // have committed a change the leader has not heard of yet).
        let controller_isr = self.image.partition(Uuid(TOPIC_ID), p).filter(|_| current).map(|c| c.isr.clone());
        let members: BTreeSet<i32> =
            replica.isr().iter().copied().chain(controller_isr.into_iter().flatten()).collect();
        let view = replica.partition_epoch();
        let lost_disk = |m: i32| {
            self.brokers[(m - 1) as usize].disk_lost[p as usize]
                .is_some_and(|loss| loss.removed_at_partition_epoch.is_none_or(|removed| view < removed))
        };
        let deleted_since = |m: i32| self.brokers[(m - 1) as usize].deleted_at[p as usize].is_some_and(|at| view < at);
        for member in members.into_iter().filter(|&m| !lost_disk(m) && !deleted_since(m)) {
            let disk = &self.brokers[(member - 1) as usize].disks[p as usize];
            for offset in 0..hw {
                assert_eq!(
                    disk.at(offset),
                    leader_disk.at(offset),
                    "partition {p}: ISR member {member} and leader {} disagree at offset {offset}, below the high watermark {hw}",
                    b.id
                );
            }
        }
    }

    /// Some member of the controller's ISR, or with the ISR emptied into it of its ELR
    /// (KIP-966), has every acknowledged write, durably, at the offset it was
    /// acknowledged at.
    fn check_no_acknowledged_write_lost(&mut self) {
        for k in 0..self.acked.len() {
            let a = self.acked[k];
            if a.lost_with_disk {
                continue;
            }
            let eligible = self.eligible(a.partition);
            let kept = eligible.iter().any(|&m| self.holds(m, &a));
            if !kept && eligible.iter().all(|&m| !self.kept_disk(m, a.partition)) {
                // Every ISR (and ELR) member lost its disk (an ISR change in flight can
                // leave only such members): nothing promised it survives.
                self.acked[k].lost_with_disk = true;
                continue;
            }
            assert!(
                kept,
                "acknowledged write {} at offset {} of partition {} is on no ISR or ELR member's disk ({:?})",
                a.write_id, a.offset, a.partition, eligible
            );
        }
    }

    /// The controller's ISR and ELR of partition `p`: the replicas that may lead it in
    /// a clean election.
    fn eligible(&self, p: i32) -> Vec<i32> {
        let image = self.image.partition(Uuid(TOPIC_ID), p).expect("the topic exists");
        image.isr.iter().chain(&image.elr).copied().collect()
    }

    // ----- liveness ----------------------------------------------------------------

    fn converged(&self) -> bool {
        // Followers keep fetching: with several, one of their fetches or empty answers
        // may be in flight at every step. Those change nothing once the logs agree.
        let settled = |m: &InFlight| match &m.message {
            Message::Fetch { .. } => true,
            Message::FetchReply { answer: FetchAnswer::Records { entries, .. }, .. } => entries.is_empty(),
            _ => false,
        };
        if !self.network.iter().all(settled) || self.brokers.iter().any(|b| !b.is_open() || !b.isr_changes.is_empty()) {
            return false;
        }
        if self.image.brokers().any(|b| b.fenced) {
            return false;
        }
        (0..self.settings.partitions).all(|p| {
            let image = self.image.partition(Uuid(TOPIC_ID), p).expect("the topic exists");
            if image.leader == NO_LEADER || image.isr.len() != image.replicas.len() {
                return false;
            }
            let leader = &self.brokers[(image.leader - 1) as usize];
            let Some(leader_state) = leader.state(p) else { return false };
            let end = leader.disks[p as usize].end();
            leader_state.leader_epoch() == image.leader_epoch
                && leader_state.high_watermark() == end
                && image.replicas.iter().all(|&r| {
                    let b = &self.brokers[(r - 1) as usize];
                    b.image.next_offset() == self.image.next_offset()
                        && b.disks[p as usize].entries == leader.disks[p as usize].entries
                })
        })
    }

    fn check_converged(&self) {
        for b in &self.brokers {
            let registration = self.image.broker(b.id).expect("registered");
            assert!(!registration.fenced, "broker {} is still fenced", b.id);
        }
        if self.unclean_elected {
            return;
        }
        for a in self.acked.iter().filter(|a| !a.lost_with_disk) {
            let image = self.image.partition(Uuid(TOPIC_ID), a.partition).expect("the topic exists");
            for &r in &image.isr {
                let entry = self.brokers[(r - 1) as usize].disks[a.partition as usize].at(a.offset);
                assert_eq!(
                    entry.map(|e| e.write_id),
                    Some(a.write_id),
                    "acknowledged write {} is not at offset {} of partition {} on broker {r}",
                    a.write_id,
                    a.offset,
                    a.partition
                );
            }
        }
    }

    fn describe(&self) -> String {
        let mut out = String::new();
        for p in 0..self.settings.partitions {
            let image = self.image.partition(Uuid(TOPIC_ID), p).expect("the topic exists");
            out += &format!(
                "\npartition {p}: leader {} epoch {} isr {:?} replicas {:?}",
                image.leader, image.leader_epoch, image.isr, image.replicas
            );
            for b in &self.brokers {
                let disk = &b.disks[p as usize];
                let state = b.replicas.get(p as usize).and_then(Option::as_ref);
                out += &format!(
                    "\n  broker {} {:?} open {} end {} durable {} epochs {:?} state {:?}",
                    b.id,
                    b.life,
                    b.is_open(),
                    disk.end(),
                    disk.durable,
                    disk.epochs.entries(),
                    state.map(|s| (s.role(), s.leader_epoch(), s.isr().to_vec(), s.high_watermark()))
                );
            }
        }
        for b in &self.brokers {
            out += &format!(
                "\nbroker {} registration {:?} metadata offset {} of {} ISR changes pending {:?}",
                b.id,
                self.image.broker(b.id).map(|r| (r.epoch, r.fenced)),
                b.image.next_offset(),
                self.image.next_offset(),
                b.isr_changes
            );
        }
        out += &format!("\nmessages in flight {}", self.network.len());
        out
    }

    // ----- helpers -----------------------------------------------------------------

    fn replica(&self, i: usize, p: i32) -> &ReplicaState {
        self.brokers[i].replicas[p as usize].as_ref().expect("an open partition")
    }

    fn replica_mut(&mut self, i: usize, p: i32) -> &mut ReplicaState {
        self.brokers[i].replicas[p as usize].as_mut().expect("an open partition")
    }

    fn trace(&self, line: String) {
        if self.trace {
            println!("[{} ms] {line}", self.now);
        }
    }
}
