//! The transaction coordinator in the whole-cluster simulation: the controller quorum,
//! brokers replicating their partitions and the faults of osprey-cluster's
//! `tests/sim/cluster.rs` (its module docs say what is modelled), with a
//! `__transaction_state` topic and a transactional data topic whose partitions the
//! brokers replicate like any other, and a [`TransactionCoordinator`] on each broker
//! driven as `crates/server` drives it (`transactions.rs`, `txn_interbroker.rs`,
//! `coordinator_leadership.rs`):
//!
//! - a broker whose replica of a `__transaction_state` partition becomes leader begins
//!   loading it at its leader epoch (the coordinator epoch) a step or more later, and
//!   finishes at once or a step or more later with every record of its log, to the log
//!   end; a
//!   partition no longer led there, or led at another epoch, is unloaded (or loaded
//!   afresh);
//! - the coordinator's persists are appended as one entry of the partition's log,
//!   acks=all, only while the partition is led at the epoch it was loaded at, and
//!   reported to `persisted` once the append completes;
//! - its markers go, a step or more later (the marker channel's back-off), to the leader
//!   of each partition in the coordinator's broker's metadata (perhaps stale), which
//!   appends them acks=all as its leader, after the checks the partition's producer state
//!   makes (`ProducerStateManager`): a marker of an older coordinator epoch than the last
//!   one for its producer is TRANSACTION_COORDINATOR_FENCED, of an older producer epoch
//!   INVALID_PRODUCER_EPOCH; each partition's result goes to `marker_written`;
//! - one client per transactional id (two ids per `__transaction_state` partition), with
//!   transaction version 1 or 2 as the seed says: InitProducerId, then transactions of one
//!   or two data partitions (AddPartitionsToTxn, an acks=all transactional append to each
//!   partition's leader, EndTxn commit or abort), sent to the coordinator its
//!   FindCoordinator-like lookup names. On an error, a lost request (the broker crashed)
//!   or one held past [`GIVE_UP_MS`], it starts again with InitProducerId, as a new
//!   producer instance would.
//!
//! A broker's coordinator is in memory only: a crash loses it, and the restarted broker
//! starts an empty one that loads what it leads.
//!
//! Invariants, on top of the cluster simulation's (which check every append here as an
//! acknowledged write: answered once, below the high watermark, never lost):
//!
//! - (t1) atomicity: in every broker's log of a data partition, below its high watermark,
//!   a transaction's records are decided by the next marker of their producer; every
//!   record of a transaction, on every partition and broker, is decided the same way, and
//!   as its EndTxn said when that was acknowledged;
//! - (t2) producer epochs only grow: each InitProducerId or EndTxn v5 answered without
//!   error gives the transactional id's producer id (a new one only when the epoch is
//!   exhausted) with an epoch above every one acknowledged before;
//! - (t3) every request is answered once, by the broker incarnation it was sent to, and
//!   each coordinator's own invariants hold after every call;
//! - (t4) liveness: once the faults heal and the cluster converged, each transactional
//!   id's coordinator (the leader of its partition in the committed metadata) has it
//!   loaded at the committed leader epoch with no transaction open or completing and no
//!   marker or persist outstanding, no client waits, and every transactional record in
//!   the data partitions' leaders is decided by a marker and committed (no hanging
//!   transaction holding back read_committed consumers).
//!
//! Not modelled: AddOffsetsToTxn and TxnOffsetCommit (the markers on
//! `__consumer_offsets`), the partition leader's verification of transaction version 1
//! appends (KIP-890 part 1: the client only appends to partitions it added), idempotent
//! sequence numbers, the network between brokers and between the client and the brokers
//! (requests and markers cross none), and the transactional id expiration.

#[path = "../../cluster/tests/sim/cluster.rs"]
mod cluster;
#[path = "../../cluster/tests/sim/mod.rs"]
mod sim;

use cluster::{
    assert_caught, assert_seeds_replay, broker_index, run_seed, run_seeds, Extension, PartitionKey, TopicSpec, World,
};
use osprey_cluster::image::NO_LEADER;
use osprey_cluster::replica::ReplicaState;
use osprey_coordinator::group::{partition_for, Record};
use osprey_coordinator::txn::{
    Output, PersistId, ReplyId, Response, TransactionCoordinator, TxnConfig, TxnMarker, TxnState,
};
use osprey_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use osprey_protocol::messages::{EndTxnRequest, InitProducerIdRequest};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const STATE_TOPIC: &str = "__transaction_state";
const STATE_TOPIC_ID: [u8; 16] = [0x7e; 16];
/// `transaction.state.log.num.partitions`, small: leaderships move often.
const STATE_PARTITIONS: i32 = 3;
/// Clients, each with its own transactional id, per state partition.
const IDS_PER_PARTITION: usize = 2;
/// The transactional data topic. Its name starts with `__` only to keep the cluster
/// simulation's own client away from it.
const DATA_TOPIC: &str = "__txn_data";
const DATA_TOPIC_ID: [u8; 16] = [0xda; 16];
const DATA_PARTITIONS: i32 = 3;
/// The clients' `transaction.timeout.ms`: short, so that the coordinators abort some.
const TXN_TIMEOUT_MS: i32 = 6_000;
/// A client gives up on a request held this long and starts again.
const GIVE_UP_MS: i64 = 10_000;
/// Per mille of restarts after which the client stays away for [`AWAY_MS`], as a
/// producer that died would: its open transaction times out.
const AWAY_PER_MILLE: u64 = 300;
const AWAY_MS: i64 = 8_000;
/// InitProducerId v4 (the client's form; the version does not change the coordinator's
/// decisions).
const INIT_VERSION: i16 = 4;
/// Per client and step: the chance it sends its next request, when it has one to send.
const CLIENT_PER_MILLE: u64 = 600;
/// Per client and step, before the heal, when it holds a producer and no transaction.
const BEGIN_PER_MILLE: u64 = 500;
/// Per mille of transactions ended with a commit (when every append was acknowledged).
const COMMIT_PER_MILLE: u64 = 750;
/// A broker hands its coordinator the leaderships it has at each step with this chance.
const FOLLOW_PER_MILLE: u64 = 500;
/// A load begun is finished at each later step with this chance.
const LOAD_FINISH_PER_MILLE: u64 = 500;
/// Each step, a coordinator sends the markers it has queued with this chance (the
/// marker channel's back-off).
const MARKERS_PER_MILLE: u64 = 500;

/// What one entry of a log holds, by its write id.
#[derive(Debug, Clone)]
enum Written {
    /// A `__transaction_state` record.
    State(Record),
    /// A transactional record of `client`'s transaction `number`.
    Data { client: usize, number: u64, producer_id: i64, producer_epoch: i16 },
    /// A COMMIT or ABORT marker.
    Marker { producer_id: i64, producer_epoch: i16, coordinator_epoch: i32, committed: bool },
}

/// An append in flight, by its request id (unique across the brokers).
#[derive(Debug, Clone)]
enum Append {
    /// A coordinator's persist: on its own broker.
    Persist { coordinator: usize, incarnation: u64, id: PersistId },
    /// A marker sent by a coordinator to the partition's leader.
    Marker { coordinator: usize, incarnation: u64, transactional_id: String, coordinator_epoch: i32, partition: i32 },
    /// A client's transactional record.
    Data { client: usize, number: u64 },
}

/// One broker incarnation's transaction coordinator.
struct Coordinator {
    incarnation: u64,
    txns: TransactionCoordinator,
    /// Markers to send at a later step.
    markers: VecDeque<(String, TxnMarker)>,
}

/// A client's request, by reply id.
#[derive(Debug, Clone)]
struct Sent {
    client: usize,
    broker: usize,
    incarnation: u64,
    asked: Asked,
    at_ms: i64,
}

#[derive(Debug, Clone)]
enum Asked {
    Init,
    Add,
    End { committed: bool },
}

/// The transaction a client has begun.
#[derive(Debug, Clone)]
struct Open {
    number: u64,
    partitions: Vec<i32>,
    /// AddPartitionsToTxn was answered without error, and the appends were sent.
    added: bool,
    /// Appends not answered yet, by request id.
    appending: BTreeSet<u64>,
    /// An append failed: the transaction can only abort.
    failed: bool,
}

/// One producer of a transactional id.
struct Client {
    transactional_id: String,
    /// Transaction version 2 (AddPartitionsToTxn v5, EndTxn v5), else 1 (v4).
    tv2: bool,
    /// The producer id and epoch it holds; `None`: it needs InitProducerId.
    producer: Option<(i64, i16)>,
    /// The newest producer id and epoch acknowledged to it, for (t2).
    newest: Option<(i64, i16)>,
    open: Option<Open>,
    /// Its request in flight.
    waiting: Option<u64>,
    next_number: u64,
    /// It sends nothing before this time.
    away_until_ms: i64,
}

impl Client {
    /// Drops what it holds and starts again with InitProducerId (a new producer
    /// instance), perhaps only after a while.
    fn restart(&mut self, away: bool, now_ms: i64) {
        self.producer = None;
        self.open = None;
        self.waiting = None;
        if away {
            self.away_until_ms = now_ms + AWAY_MS;
        }
    }

    fn version(&self) -> i16 {
        if self.tv2 {
            5
        } else {
            4
        }
    }
}

/// How a transaction's records were decided, first seen.
#[derive(Debug, Clone)]
struct Decided {
    committed: bool,
    how: String,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    inits_acknowledged: usize,
    transactions_begun: usize,
    commits_acknowledged: usize,
    aborts_acknowledged: usize,
    requests_failed: usize,
    requests_lost: usize,
    requests_abandoned: usize,
    appends_acknowledged: usize,
    appends_failed: usize,
    markers_written: usize,
    markers_fenced: usize,
    markers_failed: usize,
    records_committed: usize,
    records_aborted: usize,
    loads: usize,
    /// Loads put off (a step) until the high watermark reaches the log end.
    loads_waiting: usize,
    /// Loads of a log with records above the high watermark (in the old variant).
    loads_uncommitted: usize,
    unloads: usize,
    coordinators_lost: usize,
    transactions_timed_out: usize,
}

/// The coordinators of every broker and the clients, as the cluster simulation's
/// [`Extension`].
struct Transactions {
    state_topic: Uuid,
    data_topic: Uuid,
    config: TxnConfig,
    clients: Vec<Client>,
    /// By broker index; `None` while the broker is down.
    coordinators: Vec<Option<Coordinator>>,
    written: BTreeMap<u64, Written>,
    /// By request id: the broker the append was made on, and what it was.
    appends: BTreeMap<u64, (usize, Append)>,
    /// The client requests held by coordinators, by reply id.
    sent: BTreeMap<u64, Sent>,
    /// Requests the clients gave up on: a late answer is no violation.
    abandoned: BTreeSet<u64>,
    next_reply: u64,
    next_producer_id: i64,
    /// Per (client, transaction number), the acknowledged EndTxn: committed or not.
    ended: BTreeMap<(usize, u64), bool>,
    /// Per (client, transaction number), how its records were decided.
    decided: BTreeMap<(usize, u64), Decided>,
    counts: Counts,
    /// The time of the last step.
    now_ms: i64,
    /// When a coordinator loads: as the server does, except in the old variant.
    load: Load,
    /// The broken glue: a persist is reported durable as soon as the leader appended it,
    /// before it is replicated (as acks=1 would).
    persist_before_replicated: bool,
}

/// When and how far a coordinator reads its partition's log when it loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Once the high watermark reached the log end, to the log end, as
    /// `transactions::load_partition` does ([`load_is_committed`]).
    Committed,
    /// At once, to the log end (the server before): a new leader's log may hold records
    /// above its high watermark that a later leader lacks, and the coordinator acts on
    /// them (see `a_new_coordinator_completes_no_transaction_its_high_watermark_has_not_passed`).
    Uncommitted,
}

/// Whether a coordinator may load its partition from `replica`'s log, `log_end` long:
/// only once every record it would read is committed (the high watermark reached the log
/// end), since what it finds there has effects beyond the partition (markers) that a
/// later leader without those records could contradict.
fn load_is_committed(replica: &ReplicaState, log_end: i64) -> bool {
    replica.high_watermark() >= log_end
}

impl Transactions {
    fn new() -> Transactions {
        let config = TxnConfig {
            transaction_state_log_num_partitions: STATE_PARTITIONS,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 1_000,
            ..TxnConfig::default()
        };
        // Transactional ids spread evenly over the state partitions, so that each
        // partition's moves matter.
        let mut ids: Vec<Vec<String>> = vec![Vec::new(); STATE_PARTITIONS as usize];
        for i in 0.. {
            let id = format!("txn-{i}");
            let slot = &mut ids[partition_for(&id, STATE_PARTITIONS) as usize];
            if slot.len() < IDS_PER_PARTITION {
                slot.push(id);
            }
            if ids.iter().all(|s| s.len() == IDS_PER_PARTITION) {
                break;
            }
        }
        let clients = ids
            .into_iter()
            .flatten()
            .map(|transactional_id| Client {
                transactional_id,
                tv2: false,
                producer: None,
                newest: None,
                open: None,
                waiting: None,
                next_number: 0,
                away_until_ms: 0,
            })
            .collect();
        Transactions {
            state_topic: Uuid(STATE_TOPIC_ID),
            data_topic: Uuid(DATA_TOPIC_ID),
            config,
            clients,
            coordinators: Vec::new(),
            written: BTreeMap::new(),
            appends: BTreeMap::new(),
            sent: BTreeMap::new(),
            abandoned: BTreeSet::new(),
            next_reply: 0,
            next_producer_id: 1000,
            ended: BTreeMap::new(),
            decided: BTreeMap::new(),
            counts: Counts::default(),
            now_ms: 0,
            load: Load::Committed,
            persist_before_replicated: false,
        }
    }

    fn state_key(&self, index: i32) -> PartitionKey {
        (self.state_topic, index)
    }

    fn data_key(&self, index: i32) -> PartitionKey {
        (self.data_topic, index)
    }

    /// Each running broker incarnation has its coordinator; the clients' transaction
    /// versions are drawn once, from the world's generator.
    fn start_coordinators(&mut self, w: &mut World) {
        if self.coordinators.is_empty() {
            for c in &mut self.clients {
                c.tv2 = w.rng().chance(500);
            }
        }
        self.coordinators.resize_with(w.brokers(), || None);
        for b in 0..w.brokers() {
            let current = self.coordinators[b].as_ref().is_some_and(|c| c.incarnation == w.incarnation(b));
            if w.is_up(b) && !current {
                let txns = TransactionCoordinator::new(self.config.clone());
                let incarnation = w.incarnation(b);
                self.coordinators[b] = Some(Coordinator { incarnation, txns, markers: VecDeque::new() });
            }
        }
    }

    /// `Transactions::follow_partition` for broker `b`.
    fn follow_leadership(&mut self, w: &mut World, b: usize, now_ms: i64) {
        for index in 0..STATE_PARTITIONS {
            let led = w.replica(b, self.state_key(index)).filter(|r| r.is_leader()).map(|r| r.leader_epoch());
            let Some(c) = self.coordinators[b].as_mut() else { return };
            let (loading, loaded) = (c.txns.loading_epoch(index), c.txns.loaded_epoch(index));
            let id = w.broker_id(b);
            let begun = match led {
                None => {
                    if loading.is_some() || loaded.is_some() {
                        c.txns.unload_partition(index);
                        self.counts.unloads += 1;
                        w.trace(now_ms, format!("broker {id} unloads {STATE_TOPIC}-{index}"));
                    }
                    None
                }
                Some(epoch) if loaded == Some(epoch) => None,
                Some(epoch) => {
                    if loading != Some(epoch) {
                        c.txns.begin_load(index, epoch);
                        w.trace(now_ms, format!("broker {id} begins loading {STATE_TOPIC}-{index} at epoch {epoch}"));
                    }
                    Some(epoch)
                }
            };
            // A load begun finishes at this step or a later one: the server reads a small
            // partition in a few milliseconds, often before any follower fetched again.
            if let Some(epoch) = begun.filter(|_| w.rng().chance(LOAD_FINISH_PER_MILLE)) {
                self.finish_load(w, b, index, epoch, now_ms);
            }
            self.drain(w, b, now_ms);
        }
    }

    /// `transactions::load_partition`: every record of the partition's log, to its end,
    /// once they are all committed (else the load stays begun, tried again at a later
    /// step).
    fn finish_load(&mut self, w: &mut World, b: usize, index: i32, epoch: i32, now_ms: i64) {
        let key = self.state_key(index);
        let entries = w.log(b, key).map(|d| d.entries.clone()).unwrap_or_default();
        let Some(replica) = w.replica(b, key) else { return };
        if !load_is_committed(replica, entries.len() as i64) {
            if self.load == Load::Committed {
                self.counts.loads_waiting += 1;
                return;
            }
            self.counts.loads_uncommitted += 1;
        }
        let mut records = Vec::new();
        for entry in &entries {
            match self.written.get(&entry.write_id) {
                Some(Written::State(record)) => records.push(record.clone()),
                other => {
                    return w.violation(format!("{STATE_TOPIC}-{index} holds write {}: {other:?}", entry.write_id))
                }
            }
        }
        let Some(c) = self.coordinators[b].as_mut() else { return };
        let count = records.len();
        match c.txns.load(index, epoch, records, now_ms) {
            Ok(summary) => {
                self.counts.loads += 1;
                let id = w.broker_id(b);
                w.trace(
                    now_ms,
                    format!(
                        "broker {id} loaded {STATE_TOPIC}-{index} at epoch {epoch}: {count} records, {} completing",
                        summary.completing
                    ),
                );
            }
            Err(e) => w.violation(format!("broker {} cannot load {STATE_TOPIC}-{index}: {e}", w.broker_id(b))),
        }
    }

    /// Carries out broker `b`'s coordinator outputs (`transactions::drain`): persists are
    /// appended at once, markers queued for a later step, answers go to the clients.
    fn drain(&mut self, w: &mut World, b: usize, now_ms: i64) {
        loop {
            let Some(c) = self.coordinators[b].as_mut() else { return };
            if let Err(e) = c.txns.check_invariants() {
                w.violation(format!("broker {}'s transaction coordinator: {e}", w.broker_id(b)));
            }
            let Some(output) = c.txns.poll_output() else { return };
            match output {
                Output::Respond { reply, response } => self.answered(w, b, reply, response, now_ms),
                Output::WriteMarkers { transactional_id, marker } => c.markers.push_back((transactional_id, marker)),
                Output::Persist { id, partition, record } => {
                    let Some(epoch) = c.txns.loaded_epoch(partition) else {
                        c.txns.persisted(id, Err(ErrorCode::NOT_COORDINATOR), now_ms);
                        continue;
                    };
                    let write_id = w.new_write_ids(1)[0];
                    self.written.insert(write_id, Written::State(record));
                    let key = (self.state_topic, partition);
                    match w.append_as_leader(b, key, epoch, vec![write_id], now_ms) {
                        Ok(request_id) => {
                            let incarnation = c.incarnation;
                            self.appends.insert(request_id, (b, Append::Persist { coordinator: b, incarnation, id }));
                            if self.persist_before_replicated {
                                // Its completion is then ignored, as a persist reported twice.
                                c.txns.persisted(id, Ok(()), now_ms);
                            }
                        }
                        Err(code) => {
                            self.written.remove(&write_id);
                            c.txns.persisted(id, Err(code), now_ms);
                        }
                    }
                }
            }
        }
    }

    /// Broker `b`'s coordinator sends the markers it queued, each partition's to the
    /// leader its broker's metadata names (`txn_interbroker::route_markers`).
    fn send_markers(&mut self, w: &mut World, b: usize, now_ms: i64) {
        let Some(c) = self.coordinators[b].as_mut() else { return };
        let queued = std::mem::take(&mut c.markers);
        let incarnation = c.incarnation;
        for (transactional_id, marker) in queued {
            for (topic, partition) in &marker.partitions {
                let tp = (topic.clone(), *partition);
                let result = if topic == DATA_TOPIC {
                    self.write_marker(w, b, &transactional_id, &marker, *partition, now_ms)
                } else {
                    w.violation(format!("a marker for {topic}-{partition}, a partition no client added"));
                    Err(ErrorCode::NONE)
                };
                match result {
                    Ok((l, request_id)) => {
                        let append = Append::Marker {
                            coordinator: b,
                            incarnation,
                            transactional_id: transactional_id.clone(),
                            coordinator_epoch: marker.coordinator_epoch,
                            partition: *partition,
                        };
                        self.appends.insert(request_id, (l, append));
                    }
                    Err(error) => {
                        self.count_marker_failure(error);
                        let Some(c) = self.coordinators[b].as_mut() else { return };
                        c.txns.marker_written(&transactional_id, marker.coordinator_epoch, &tp, error, now_ms);
                    }
                }
            }
            self.drain(w, b, now_ms);
        }
    }

    fn count_marker_failure(&mut self, error: ErrorCode) {
        if matches!(error, ErrorCode::TRANSACTION_COORDINATOR_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH) {
            self.counts.markers_fenced += 1;
        } else {
            self.counts.markers_failed += 1;
        }
    }

    /// WriteTxnMarkers for one partition at the leader broker `b`'s metadata names: the
    /// producer state's checks on the leader's log, then an acks=all append as leader.
    /// Returns the leader and the append's request id.
    fn write_marker(
        &mut self,
        w: &mut World,
        b: usize,
        transactional_id: &str,
        marker: &TxnMarker,
        partition: i32,
        now_ms: i64,
    ) -> Result<(usize, u64), ErrorCode> {
        let key = self.data_key(partition);
        let leader = w.image(b).partition(self.data_topic, partition).map_or(NO_LEADER, |p| p.leader);
        if leader == NO_LEADER || broker_index(leader) >= w.brokers() {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        let l = broker_index(leader);
        let epoch = w.replica(l, key).filter(|r| r.is_leader()).map(|r| r.leader_epoch());
        let epoch = epoch.ok_or(ErrorCode::NOT_LEADER_OR_FOLLOWER)?;
        let (producer_epoch, coordinator_epoch) = self.producer_state(w, l, key, marker.producer_id);
        if coordinator_epoch > marker.coordinator_epoch {
            return Err(ErrorCode::TRANSACTION_COORDINATOR_FENCED);
        }
        if producer_epoch > marker.producer_epoch {
            return Err(ErrorCode::INVALID_PRODUCER_EPOCH);
        }
        let write_id = w.new_write_ids(1)[0];
        let written = Written::Marker {
            producer_id: marker.producer_id,
            producer_epoch: marker.producer_epoch,
            coordinator_epoch: marker.coordinator_epoch,
            committed: marker.committed,
        };
        self.written.insert(write_id, written);
        let appended = w.append_as_leader(l, key, epoch, vec![write_id], now_ms);
        if appended.is_err() {
            self.written.remove(&write_id);
        } else {
            let what = if marker.committed { "COMMIT" } else { "ABORT" };
            let (id, p) = (w.broker_id(l), marker.producer_id);
            w.trace(
                now_ms,
                format!(
                    "broker {id} appends {what} of {transactional_id} (producer {p}, coordinator epoch {}) to {DATA_TOPIC}-{partition}",
                    marker.coordinator_epoch
                ),
            );
        }
        appended.map(|request_id| (l, request_id))
    }

    /// The producer state broker `l`'s log of `key` holds for `producer_id`: its newest
    /// producer epoch and the coordinator epoch of its last marker (-1 for none).
    fn producer_state(&self, w: &World, l: usize, key: PartitionKey, producer_id: i64) -> (i16, i32) {
        let mut state = (-1i16, -1i32);
        for entry in w.log(l, key).map(|d| d.entries.as_slice()).unwrap_or_default() {
            match self.written.get(&entry.write_id) {
                Some(&Written::Data { producer_id: p, producer_epoch, .. }) if p == producer_id => {
                    state.0 = state.0.max(producer_epoch);
                }
                Some(&Written::Marker { producer_id: p, producer_epoch, coordinator_epoch, .. })
                    if p == producer_id =>
                {
                    state = (state.0.max(producer_epoch), coordinator_epoch);
                }
                _ => {}
            }
        }
        state
    }

    /// The broker the client's FindCoordinator names for `client`'s transactional id
    /// ([`World::find_coordinator`]), if it runs a coordinator.
    fn find_coordinator(&self, w: &mut World, client: usize) -> Option<usize> {
        let index = partition_for(&self.clients[client].transactional_id, STATE_PARTITIONS);
        w.find_coordinator(self.state_topic, index).filter(|&b| self.coordinators[b].is_some())
    }

    /// The client's next request, if it has one to send: InitProducerId, a new
    /// transaction's AddPartitionsToTxn (before the heal only), or EndTxn.
    fn act(&mut self, w: &mut World, i: usize, faults: bool, now_ms: i64) {
        let client = &self.clients[i];
        if client.waiting.is_some() || client.away_until_ms > now_ms {
            return;
        }
        let asked = match (client.producer, &client.open) {
            (None, _) => Asked::Init,
            (Some(_), None) if faults && w.rng().chance(BEGIN_PER_MILLE) => Asked::Add,
            (Some(_), None) => return,
            (Some(_), Some(open)) if open.added && open.appending.is_empty() => {
                Asked::End { committed: !open.failed && w.rng().chance(COMMIT_PER_MILLE) }
            }
            (Some(_), Some(_)) => return,
        };
        let Some(b) = self.find_coordinator(w, i) else { return };
        let reply = self.next_reply;
        self.next_reply += 1;
        let incarnation = w.incarnation(b);
        self.sent.insert(reply, Sent { client: i, broker: b, incarnation, asked: asked.clone(), at_ms: now_ms });
        let client = &mut self.clients[i];
        client.waiting = Some(reply);
        let transactional_id = client.transactional_id.clone();
        let version = client.version();
        let next = &mut self.next_producer_id;
        let mut allocate = || {
            *next += 1;
            Ok(*next)
        };
        let c = &mut self.coordinators[b].as_mut().expect("found up").txns;
        match asked {
            Asked::Init => {
                let request = InitProducerIdRequest {
                    transactional_id: Some(transactional_id),
                    transaction_timeout_ms: TXN_TIMEOUT_MS,
                    producer_id: -1,
                    producer_epoch: -1,
                    ..Default::default()
                };
                c.init_producer_id(&request, INIT_VERSION, ReplyId(reply), &mut allocate, now_ms);
            }
            Asked::Add => {
                let (producer_id, producer_epoch) = client.producer.expect("held");
                let first = w.rng().below(DATA_PARTITIONS as u64) as i32;
                let mut partitions = vec![first];
                if w.rng().chance(600) {
                    partitions.push((first + 1 + w.rng().below(DATA_PARTITIONS as u64 - 1) as i32) % DATA_PARTITIONS);
                }
                let number = client.next_number;
                client.next_number += 1;
                self.counts.transactions_begun += 1;
                let transaction = AddPartitionsToTxnTransaction {
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    topics: vec![AddPartitionsToTxnTopic {
                        name: DATA_TOPIC.into(),
                        partitions: partitions.clone(),
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                client.open =
                    Some(Open { number, partitions, added: false, appending: BTreeSet::new(), failed: false });
                c.add_partitions(&transaction, version, ReplyId(reply), now_ms);
            }
            Asked::End { committed } => {
                let (producer_id, producer_epoch) = client.producer.expect("held");
                let request =
                    EndTxnRequest { transactional_id, producer_id, producer_epoch, committed, ..Default::default() };
                c.end_txn(&request, version, ReplyId(reply), &mut allocate, now_ms);
            }
        }
        self.drain(w, b, now_ms);
    }

    /// (t3), and what the client does with an answer.
    fn answered(&mut self, w: &mut World, b: usize, reply: ReplyId, response: Response, now_ms: i64) {
        let Some(sent) = self.sent.remove(&reply.0) else {
            if !self.abandoned.remove(&reply.0) {
                w.violation(format!("broker {} answered request {} twice, or one never sent", w.broker_id(b), reply.0));
            }
            return;
        };
        if sent.broker != b || sent.incarnation != w.incarnation(b) {
            w.violation(format!(
                "request {} answered by broker {} incarnation {}",
                reply.0,
                w.broker_id(b),
                w.incarnation(b)
            ));
        }
        let i = sent.client;
        self.clients[i].waiting = None;
        let (error, ids) = match (&sent.asked, &response) {
            (Asked::Init, Response::InitProducerId(r)) => (r.error_code, Some((r.producer_id, r.producer_epoch))),
            (Asked::Add, Response::AddPartitionsToTxn { error }) => (error.code(), None),
            (Asked::End { .. }, Response::EndTxn(r)) => {
                (r.error_code, self.clients[i].tv2.then_some((r.producer_id, r.producer_epoch)))
            }
            (asked, response) => {
                return w.violation(format!("request {} ({asked:?}) answered with {response:?}", reply.0));
            }
        };
        if error != ErrorCode::NONE.code() {
            self.counts.requests_failed += 1;
            let away = w.rng().chance(AWAY_PER_MILLE);
            self.clients[i].restart(away, now_ms);
            return;
        }
        if let Some(ids) = ids {
            self.check_newer(w, i, ids, &sent.asked);
            self.clients[i].producer = Some(ids);
        }
        match sent.asked {
            Asked::Init => self.counts.inits_acknowledged += 1,
            Asked::Add => self.append_data(w, i, now_ms),
            Asked::End { committed } => {
                let open = self.clients[i].open.take().expect("an EndTxn ends the open transaction");
                if committed {
                    self.counts.commits_acknowledged += 1;
                } else {
                    self.counts.aborts_acknowledged += 1;
                }
                self.ended.insert((i, open.number), committed);
                if let Some(d) = self.decided.get(&(i, open.number)).filter(|d| d.committed != committed) {
                    let id = &self.clients[i].transactional_id;
                    w.violation(format!(
                        "ACKNOWLEDGED {} UNDONE: {id} transaction {} was decided otherwise ({})",
                        if committed { "COMMIT" } else { "ABORT" },
                        open.number,
                        d.how
                    ));
                }
            }
        }
    }

    /// (t2): `ids` from an answer without error is newer than every producer id and epoch
    /// the client was given before.
    fn check_newer(&mut self, w: &mut World, i: usize, ids: (i64, i16), asked: &Asked) {
        let client = &mut self.clients[i];
        if let Some(newest) = client.newest {
            let exhausted = newest.1 >= i16::MAX - 1;
            let newer = if ids.0 == newest.0 { ids.1 > newest.1 } else { exhausted };
            if !newer {
                let id = &client.transactional_id;
                w.violation(format!(
                    "EPOCH NOT NEWER: {id}'s {asked:?} answered producer {} epoch {} after producer {} epoch {} was acknowledged",
                    ids.0, ids.1, newest.0, newest.1
                ));
            }
        }
        client.newest = Some(ids);
    }

    /// After AddPartitionsToTxn: a transactional record to each partition's leader (a
    /// broker that believes it leads; there may be two).
    fn append_data(&mut self, w: &mut World, i: usize, now_ms: i64) {
        let client = &self.clients[i];
        let (producer_id, producer_epoch) = client.producer.expect("held");
        let Some(open) = client.open.clone() else { return };
        let mut appending = BTreeSet::new();
        let mut failed = false;
        for &partition in &open.partitions {
            let key = self.data_key(partition);
            let leaders: Vec<usize> =
                (0..w.brokers()).filter(|&b| w.replica(b, key).is_some_and(|r| r.is_leader())).collect();
            let Some(&l) = leaders.get(w.rng().below(leaders.len().max(1) as u64) as usize) else {
                failed = true;
                continue;
            };
            let epoch = w.replica(l, key).expect("leads").leader_epoch();
            let write_id = w.new_write_ids(1)[0];
            let number = open.number;
            self.written.insert(write_id, Written::Data { client: i, number, producer_id, producer_epoch });
            match w.append_as_leader(l, key, epoch, vec![write_id], now_ms) {
                Ok(request_id) => {
                    appending.insert(request_id);
                    self.appends.insert(request_id, (l, Append::Data { client: i, number }));
                }
                Err(_) => {
                    self.written.remove(&write_id);
                    failed = true;
                }
            }
        }
        if failed {
            self.counts.appends_failed += 1;
        }
        let open = self.clients[i].open.as_mut().expect("open");
        open.added = true;
        open.failed |= failed;
        open.appending = appending;
    }

    /// A transactional append of client `i` answered (or lost with its broker).
    fn data_appended(&mut self, i: usize, number: u64, request_id: u64, result: Result<(), ErrorCode>) {
        let Some(open) = self.clients[i].open.as_mut().filter(|o| o.number == number) else { return };
        if open.appending.remove(&request_id) {
            if result.is_ok() {
                self.counts.appends_acknowledged += 1;
            } else {
                self.counts.appends_failed += 1;
                open.failed = true;
            }
        }
    }

    /// A marker appended by broker `l` for a coordinator answered (or lost with `l`).
    fn marker_appended(&mut self, w: &mut World, append: Append, result: Result<(), ErrorCode>, now_ms: i64) {
        let Append::Marker { coordinator, incarnation, transactional_id, coordinator_epoch, partition } = append else {
            return;
        };
        let error = result.err().unwrap_or(ErrorCode::NONE);
        if error == ErrorCode::NONE {
            self.counts.markers_written += 1;
        } else {
            self.count_marker_failure(error);
        }
        let Some(c) = self.coordinators[coordinator].as_mut().filter(|c| c.incarnation == incarnation) else { return };
        let tp = (DATA_TOPIC.to_string(), partition);
        c.txns.marker_written(&transactional_id, coordinator_epoch, &tp, error, now_ms);
        self.drain(w, coordinator, now_ms);
    }

    /// (t1) over every up broker's log of the data partitions, below its high watermark:
    /// each transactional record is decided by the next marker of its producer.
    fn check_decisions(&mut self, w: &mut World) {
        for b in 0..w.brokers() {
            for partition in 0..DATA_PARTITIONS {
                let key = self.data_key(partition);
                let Some(hw) = w.replica(b, key).map(|r| r.high_watermark()) else { continue };
                let entries = w.log(b, key).map(|d| d.entries.clone()).unwrap_or_default();
                let mut undecided: BTreeMap<i64, Vec<(usize, u64)>> = BTreeMap::new();
                for (offset, entry) in entries.iter().take(hw.max(0) as usize).enumerate() {
                    match self.written.get(&entry.write_id) {
                        Some(&Written::Data { client, number, producer_id, .. }) => {
                            undecided.entry(producer_id).or_default().push((client, number));
                        }
                        Some(&Written::Marker { producer_id, committed, coordinator_epoch, .. }) => {
                            for txn in undecided.remove(&producer_id).unwrap_or_default() {
                                let how = format!(
                                    "{} at {DATA_TOPIC}-{partition} offset {offset} on broker {} (coordinator epoch {coordinator_epoch})",
                                    if committed { "COMMIT" } else { "ABORT" },
                                    w.broker_id(b)
                                );
                                self.decide(w, txn, committed, how);
                            }
                        }
                        other => w.violation(format!("{DATA_TOPIC}-{partition} holds {other:?}")),
                    }
                }
            }
        }
    }

    fn decide(&mut self, w: &mut World, txn: (usize, u64), committed: bool, how: String) {
        let id = &self.clients[txn.0].transactional_id;
        match self.decided.get(&txn) {
            Some(d) if d.committed != committed => {
                return w.violation(format!("TORN TRANSACTION: {id} transaction {}: {how}, but {}", txn.1, d.how));
            }
            Some(_) => return,
            None => {}
        }
        if let Some(&ended) = self.ended.get(&txn).filter(|&&e| e != committed) {
            w.violation(format!(
                "ACKNOWLEDGED {} UNDONE: {id} transaction {}: {how}",
                if ended { "COMMIT" } else { "ABORT" },
                txn.1
            ));
        }
        if committed {
            self.counts.records_committed += 1;
        } else {
            self.counts.records_aborted += 1;
        }
        self.decided.insert(txn, Decided { committed, how });
    }

    /// The clients give up on requests held too long.
    fn give_up(&mut self, now_ms: i64) {
        let late: Vec<u64> = self.sent.iter().filter(|(_, s)| now_ms - s.at_ms > GIVE_UP_MS).map(|(&r, _)| r).collect();
        for reply in late {
            let sent = self.sent.remove(&reply).expect("listed");
            self.abandoned.insert(reply);
            self.counts.requests_abandoned += 1;
            self.clients[sent.client].restart(false, now_ms);
        }
    }
}

impl Extension for Transactions {
    fn topics(&self) -> Vec<TopicSpec> {
        // Kafka's default: no unclean election, so no acknowledged write may be lost.
        vec![
            TopicSpec {
                name: STATE_TOPIC.into(),
                id: STATE_TOPIC_ID,
                partitions: STATE_PARTITIONS as usize,
                unclean_election: false,
            },
            TopicSpec {
                name: DATA_TOPIC.into(),
                id: DATA_TOPIC_ID,
                partitions: DATA_PARTITIONS as usize,
                unclean_election: false,
            },
        ]
    }

    fn step(&mut self, w: &mut World, now_ms: i64, faults: bool) {
        self.now_ms = now_ms;
        self.start_coordinators(w);
        for b in 0..w.brokers() {
            if w.rng().chance(FOLLOW_PER_MILLE) {
                self.follow_leadership(w, b, now_ms);
            }
            if let Some(c) = self.coordinators[b].as_mut() {
                let before = c.txns.stats().fenced_producers;
                c.txns.tick(now_ms);
                self.counts.transactions_timed_out += (c.txns.stats().fenced_producers - before) as usize;
            }
            self.drain(w, b, now_ms);
            if w.rng().chance(MARKERS_PER_MILLE) {
                self.send_markers(w, b, now_ms);
            }
        }
        self.give_up(now_ms);
        for i in 0..self.clients.len() {
            if w.rng().chance(CLIENT_PER_MILLE) {
                self.act(w, i, faults, now_ms);
            }
        }
    }

    fn broker_crashed(&mut self, w: &mut World, b: usize) {
        let incarnation = self.coordinators.get(b).and_then(Option::as_ref).map(|c| c.incarnation);
        if let Some(incarnation) = incarnation {
            self.coordinators[b] = None;
            self.counts.coordinators_lost += 1;
            // The requests it held are never answered: the clients start again.
            let lost: Vec<u64> = self
                .sent
                .iter()
                .filter(|(_, s)| (s.broker, s.incarnation) == (b, incarnation))
                .map(|(&r, _)| r)
                .collect();
            for reply in lost {
                let sent = self.sent.remove(&reply).expect("listed");
                self.counts.requests_lost += 1;
                self.clients[sent.client].restart(false, self.now_ms);
            }
        }
        // The appends it held are never answered: their senders see the connection close.
        let now_ms = self.now_ms;
        let held: Vec<u64> = self.appends.iter().filter(|(_, (on, _))| *on == b).map(|(&r, _)| r).collect();
        for request_id in held {
            let (_, append) = self.appends.remove(&request_id).expect("listed");
            match append {
                Append::Persist { .. } => {}
                Append::Data { client, number } => {
                    self.data_appended(client, number, request_id, Err(ErrorCode::NETWORK_EXCEPTION))
                }
                marker @ Append::Marker { .. } => {
                    self.marker_appended(w, marker, Err(ErrorCode::NETWORK_EXCEPTION), now_ms)
                }
            }
        }
    }

    fn append_completed(
        &mut self,
        w: &mut World,
        b: usize,
        key: PartitionKey,
        request_id: u64,
        result: Result<(), ErrorCode>,
        now_ms: i64,
    ) {
        let Some((_, append)) = self.appends.remove(&request_id) else {
            return w.violation(format!("append {request_id} of {key:?} completed twice on broker {}", w.broker_id(b)));
        };
        match append {
            Append::Persist { coordinator, incarnation, id } => {
                let Some(c) = self.coordinators[coordinator].as_mut().filter(|c| c.incarnation == incarnation) else {
                    return w.violation(format!(
                        "a persist completed on broker {} without its coordinator",
                        w.broker_id(b)
                    ));
                };
                c.txns.persisted(id, result, now_ms);
                self.drain(w, coordinator, now_ms);
            }
            Append::Data { client, number } => self.data_appended(client, number, request_id, result),
            marker @ Append::Marker { .. } => self.marker_appended(w, marker, result, now_ms),
        }
    }

    fn check(&mut self, w: &mut World) {
        self.check_decisions(w);
    }

    fn converged(&mut self, w: &mut World) -> Result<(), String> {
        if let Some(c) = self.clients.iter().find(|c| c.waiting.is_some() || c.open.is_some()) {
            return Err(format!("{} has a request or a transaction open", c.transactional_id));
        }
        let latest = w.latest_image().clone();
        for client in &self.clients {
            let id = &client.transactional_id;
            let index = partition_for(id, STATE_PARTITIONS);
            let p = latest.partition(self.state_topic, index).ok_or("no __transaction_state")?;
            let b = broker_index(p.leader);
            let c =
                self.coordinators.get(b).and_then(Option::as_ref).ok_or(format!("no coordinator on {}", p.leader))?;
            if c.txns.loaded_epoch(index) != Some(p.leader_epoch) {
                return Err(format!("{STATE_TOPIC}-{index} is not loaded on {} at epoch {}", p.leader, p.leader_epoch));
            }
            if let Some(t) = c.txns.transaction(id) {
                let settled = matches!(t.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort);
                if !settled || t.pending_state.is_some() {
                    return Err(format!("{id} is {:?} (pending {:?}) on {}", t.state, t.pending_state, p.leader));
                }
            }
        }
        for (b, c) in self.coordinators.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.txns.persists_in_flight() > 0 || !c.markers.is_empty() {
                return Err(format!("broker {} has persists or markers outstanding", w.broker_id(b)));
            }
        }
        for partition in 0..DATA_PARTITIONS {
            let p = latest.partition(self.data_topic, partition).ok_or("no data topic")?;
            let l = broker_index(p.leader);
            let replica = w.replica(l, self.data_key(partition)).ok_or(format!("no replica on {}", p.leader))?;
            let entries = w.log(l, self.data_key(partition)).map(|d| d.entries.clone()).unwrap_or_default();
            if replica.high_watermark() < entries.len() as i64 {
                return Err(format!("{DATA_TOPIC}-{partition}'s high watermark is below its log end on {}", p.leader));
            }
            let mut undecided: BTreeMap<i64, usize> = BTreeMap::new();
            for entry in &entries {
                match self.written.get(&entry.write_id) {
                    Some(Written::Data { producer_id, .. }) => *undecided.entry(*producer_id).or_default() += 1,
                    Some(Written::Marker { producer_id, .. }) => {
                        undecided.remove(producer_id);
                    }
                    _ => {}
                }
            }
            if let Some((producer_id, n)) = undecided.first_key_value() {
                return Err(format!(
                    "{DATA_TOPIC}-{partition} on {}: {n} records of producer {producer_id} undecided",
                    p.leader
                ));
            }
        }
        Ok(())
    }

    fn counts(&self) -> Vec<(&'static str, usize)> {
        let c = &self.counts;
        vec![
            ("inits_acknowledged", c.inits_acknowledged),
            ("transactions_begun", c.transactions_begun),
            ("commits_acknowledged", c.commits_acknowledged),
            ("aborts_acknowledged", c.aborts_acknowledged),
            ("requests_failed", c.requests_failed),
            ("requests_lost", c.requests_lost),
            ("requests_abandoned", c.requests_abandoned),
            ("appends_acknowledged", c.appends_acknowledged),
            ("appends_failed", c.appends_failed),
            ("markers_written", c.markers_written),
            ("markers_fenced", c.markers_fenced),
            ("markers_failed", c.markers_failed),
            ("records_committed", c.records_committed),
            ("records_aborted", c.records_aborted),
            ("loads", c.loads),
            ("loads_waiting", c.loads_waiting),
            ("loads_uncommitted", c.loads_uncommitted),
            ("unloads", c.unloads),
            ("coordinators_lost", c.coordinators_lost),
            ("transactions_timed_out", c.transactions_timed_out),
        ]
    }
}

fn transactions() -> Option<Box<dyn Extension>> {
    Some(Box::new(Transactions::new()))
}

/// Over the seeds, transactions must have committed, aborted and timed out, markers
/// must have moved with leadership, and `also` must have happened, or the invariants
/// checked little.
fn assert_exercised(counts: &BTreeMap<&'static str, usize>, also: &[&str]) {
    let always = [
        "commits_acknowledged",
        "aborts_acknowledged",
        "records_committed",
        "records_aborted",
        "markers_failed",
        "requests_failed",
        "loads",
        "transactions_timed_out",
    ];
    for name in always.iter().chain(also) {
        assert!(counts.get(name).is_some_and(|&n| n > 0), "{name} never happened over the seeds: {counts:?}");
    }
}

#[test]
fn transaction_coordinators_keep_transactions_atomic_as_leadership_moves() {
    let counts = run_seeds(3, 16, transactions);
    assert_exercised(&counts, &["unloads", "coordinators_lost", "requests_lost"]);
}

/// With four brokers a state partition's leadership mostly moves with a crash.
#[test]
fn transaction_coordinators_on_four_brokers() {
    assert_exercised(&run_seeds(4, 6, transactions), &["coordinators_lost"]);
}

/// The checks can fail: a coordinator whose persists are reported durable once its
/// leader appended them, before they are replicated, acknowledges transitions that a
/// later leader lacks. Scans from `SIM_FIRST_SEED` (0) for the first seed that catches
/// it.
#[test]
fn coordinators_that_acknowledge_unreplicated_persists_are_caught() {
    let what = "coordinators acknowledging persists before they are replicated";
    assert_caught(what, 0, 300, &["UNDONE", "TORN", "EPOCH NOT NEWER", "undecided"], |seed| {
        let broken = Transactions { persist_before_replicated: true, ..Transactions::new() };
        run_seed(seed, 3, false, Some(Box::new(broken)));
    });
}

/// Two runs of a seed agree, event for event (see `cluster_simulation.rs`'s test of the
/// same name for why only one seed, and no counts, without `--cfg tokio_unstable`).
#[test]
fn seeds_replay_identically() {
    assert_seeds_replay(4, 3, transactions);
}

/// Why a coordinator loads its partition only once the high watermark reached the log
/// end ([`load_is_committed`]), replayed step by step with the same replica state
/// machines and coordinator as the simulation: broker 1's coordinator persists a
/// PrepareCommit that reaches broker 2 only, and crashes before the high watermark passes
/// it (so the EndTxn is never acknowledged). Broker 2, elected, loads its log to the end
/// (a new leader's log holds every acknowledged record, some perhaps above its high
/// watermark), finds the transaction prepared and completes it: COMMIT markers go out,
/// and one is written (to `__txn_data-0`) before broker 2 is fenced. Broker 3, elected
/// from the ISR, never had the PrepareCommit: the transaction is ongoing there, times
/// out and is aborted, and its ABORT marker decides `__txn_data-1`. The transaction's
/// records are committed on one partition and aborted on the other.
#[test]
fn a_new_coordinator_completes_no_transaction_its_high_watermark_has_not_passed() {
    // `SIM_HUNT_UNCOMMITTED=n` runs n seeds of the simulation from `SIM_FIRST_SEED` with
    // the old loads and prints those that fail.
    if let Some(n) = std::env::var("SIM_HUNT_UNCOMMITTED").ok().and_then(|n| n.parse::<u64>().ok()) {
        let first = std::env::var("SIM_FIRST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0u64);
        let mut uncommitted = 0;
        for seed in first..first + n {
            let old = Transactions { load: Load::Uncommitted, ..Transactions::new() };
            match std::panic::catch_unwind(|| run_seed(seed, 3, false, Some(Box::new(old)))) {
                Ok(outcome) => {
                    uncommitted += outcome.extension.iter().find(|(k, _)| *k == "loads_uncommitted").map_or(0, |c| c.1)
                }
                Err(_) => eprintln!("HUNT: seed {seed} fails with the old loads"),
            }
        }
        eprintln!("HUNT: {uncommitted} loads of uncommitted records in the seeds that passed");
    }
    use sim::replication::{self, Disk};

    let (config, assignment) = (replication::three_replica_config, replication::three_replica_assignment);
    type Broker<'a> = (Option<ReplicaState>, &'a mut Disk);
    let txn_config = TxnConfig { transaction_state_log_num_partitions: 1, ..TxnConfig::default() };
    let mut disks: [Disk; 3] = Default::default();
    let mut replicas: [Option<ReplicaState>; 3] = Default::default();
    let mut records: Vec<Record> = Vec::new();
    let (id, partitions) = ("payments", [(DATA_TOPIC.to_string(), 0), (DATA_TOPIC.to_string(), 1)]);
    let mut next_producer_id = || Ok(1000);
    // A coordinator of the one state partition at `epoch`, loaded from `disk` to its end.
    let load = |disk: &Disk, records: &[Record], epoch: i32| {
        let mut c = TransactionCoordinator::new(txn_config.clone());
        c.begin_load(0, epoch);
        let read = disk.entries.iter().map(|e| records[e.write_id as usize].clone());
        c.load(0, epoch, read.collect::<Vec<_>>(), 0).expect("loads");
        c
    };
    // The coordinator's next persist, appended by the leader `l` (write id: its index in
    // `records`).
    let persist = |c: &mut TransactionCoordinator, records: &mut Vec<Record>, l: &mut Broker| {
        let output = std::iter::from_fn(|| c.poll_output()).find(|o| matches!(o, Output::Persist { .. }));
        let Some(Output::Persist { id, record, .. }) = output else { panic!("no persist") };
        records.push(record);
        let leader = l.0.as_mut().expect("open");
        replication::append_writes(leader, l.1, &[records.len() as u64 - 1], 0, 0);
        // Made durable at once (fsync_before_ack counts only durable data).
        l.1.durable = l.1.end();
        leader.local_log_changed(l.1.local_log(), 0);
        id
    };
    // One fetch of follower `f` (node `node`) from the leader at `epoch`.
    let fetch = |l: &mut Broker, f: &mut Broker, node: i32, epoch: i32| {
        let follower = f.0.as_mut().expect("open");
        let request = replication::follower_fetch(follower, f.1, node, epoch, 0);
        let answer = replication::answer_fetch(l.0.as_mut().expect("open"), l.1, &request, || 100, 0);
        replication::apply_fetch_answer(follower, f.1, answer, 0);
    };
    let hw = |b: &Broker| b.0.as_ref().expect("open").high_watermark();
    let committed = |b: &Broker| load_is_committed(b.0.as_ref().expect("open"), b.1.end());

    for node in 1..=3 {
        let i = node as usize - 1;
        replication::apply_assignment(&mut replicas[i], &mut disks[i], config(node), assignment(1, 0, &[1, 2, 3]), 0);
    }
    let [d1, d2, d3] = &mut disks;
    let [r1, r2, r3] = replicas;
    let (mut b1, mut b2, mut b3) = ((r1, d1), (r2, d2), (r3, d3));

    // Broker 1's coordinator: InitProducerId and AddPartitionsToTxn, each replicated to
    // brokers 2 and 3 and acknowledged.
    let mut c1 = load(b1.1, &records, 0);
    let init = InitProducerIdRequest {
        transactional_id: Some(id.into()),
        transaction_timeout_ms: TXN_TIMEOUT_MS,
        ..Default::default()
    };
    c1.init_producer_id(&init, INIT_VERSION, ReplyId(1), &mut next_producer_id, 0);
    let add = AddPartitionsToTxnTransaction {
        transactional_id: id.into(),
        producer_id: 1000,
        producer_epoch: 0,
        topics: vec![AddPartitionsToTxnTopic { name: DATA_TOPIC.into(), partitions: vec![0, 1], ..Default::default() }],
        ..Default::default()
    };
    for step in 0..2 {
        let persisted = persist(&mut c1, &mut records, &mut b1);
        for _ in 0..2 {
            fetch(&mut b1, &mut b2, 2, 0);
            fetch(&mut b1, &mut b3, 3, 0);
        }
        assert_eq!(hw(&b1), b1.1.end(), "acknowledged");
        c1.persisted(persisted, Ok(()), 0);
        if step == 0 {
            c1.add_partitions(&add, 4, ReplyId(2), 0);
        }
    }
    // EndTxn(commit): the PrepareCommit reaches broker 2 only.
    let end = EndTxnRequest {
        transactional_id: id.into(),
        producer_id: 1000,
        producer_epoch: 0,
        committed: true,
        ..Default::default()
    };
    c1.end_txn(&end, 4, ReplyId(3), &mut next_producer_id, 0);
    persist(&mut c1, &mut records, &mut b1);
    fetch(&mut b1, &mut b2, 2, 0);
    assert_eq!((b2.1.end(), b3.1.end(), hw(&b1)), (3, 2, 2), "never acknowledged");

    // Broker 1 crashes; broker 2 is elected and loads its log to the end.
    for (node, b) in [(2, &mut b2), (3, &mut b3)] {
        replication::apply_assignment(&mut b.0, b.1, config(node), assignment(2, 1, &[2, 3]), 10);
    }
    assert!(b2.0.as_ref().is_some_and(ReplicaState::is_leader));
    assert!(!committed(&b2), "the PrepareCommit is above broker 2's high watermark");
    let mut c2 = load(b2.1, &records, 1);
    let commit = std::iter::from_fn(|| c2.poll_output()).find_map(|o| match o {
        Output::WriteMarkers { marker, .. } => Some(marker),
        _ => None,
    });
    let commit = commit.expect("loaded at the log end, the prepared transaction is completed");
    assert!(commit.committed && commit.partitions == partitions, "{commit:?}");
    // Its marker is written to __txn_data-0; __txn_data-1's leader is moving. Broker 2 is
    // fenced before broker 3 fetched; broker 3 is elected from the ISR.
    replication::apply_assignment(&mut b3.0, b3.1, config(3), assignment(3, 2, &[3]), 20);
    assert!(committed(&b3));
    let mut c3 = load(b3.1, &records, 2);
    assert_eq!(c3.transaction(id).map(|t| t.state), Some(TxnState::Ongoing), "the PrepareCommit is gone");
    // The abort timer's first run only schedules the next.
    c3.tick(TXN_TIMEOUT_MS as i64);
    c3.tick(TXN_TIMEOUT_MS as i64 + 20_000);
    let abort = std::iter::from_fn(|| c3.poll_output()).find(|o| matches!(o, Output::Persist { .. }));
    let Some(Output::Persist { id: fence, .. }) = abort else { panic!("the timed-out transaction is not aborted") };
    c3.persisted(fence, Ok(()), TXN_TIMEOUT_MS as i64 + 20_000);
    let abort = std::iter::from_fn(|| c3.poll_output()).find_map(|o| match o {
        Output::WriteMarkers { marker, .. } => Some(marker),
        _ => None,
    });
    let abort = abort.expect("ABORT markers");
    assert!(!abort.committed && abort.partitions.contains(&partitions[1]), "{abort:?}");
    // __txn_data-0 holds COMMIT, __txn_data-1 ABORT: the transaction is torn. Had broker
    // 2 waited for its high watermark (`load_is_committed`), it would have written nothing
    // before it was fenced.
}
