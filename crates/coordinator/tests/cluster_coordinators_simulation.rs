//! The group coordinator in the whole-cluster simulation: the controller quorum, brokers
//! replicating their partitions and the faults of osprey-cluster's
//! `tests/sim/cluster.rs` (its module docs say what is modelled), with a
//! `__consumer_offsets` topic whose partitions the brokers replicate like any other, and
//! a [`GroupCoordinator`] on each broker driven as `crates/server` drives it
//! (`groups.rs`, `coordinator_leadership.rs`, `handlers/offset_fetch.rs`):
//!
//! - a broker whose replica of an offsets partition becomes leader begins loading it at
//!   its leader epoch (a step or more later: the server hands leadership over once the
//!   metadata is published), and finishes a step or more later (the server reads the log on the
//!   blocking pool) with every record of its log, to the log end; a partition no longer
//!   led there, or led at another epoch, is unloaded (or loaded afresh);
//! - the coordinator's persists are appended as one entry of the partition's log, acks=all,
//!   only while the partition is led at the epoch it was loaded at
//!   (`append_coordinator_records`), and reported to `persisted` once the append
//!   completes (the replica answers after the high watermark passed it);
//! - a client commits offsets of a few groups, monotonically increasing per partition,
//!   to the broker that its FindCoordinator-like lookup names (the offsets partition's
//!   leader in the metadata of a broker it asks, perhaps stale), and reads them back with
//!   OffsetFetch, answered from the coordinator's memory and confirmed as the server
//!   confirms it (`confirm_offsets_read`: still led at the loaded epoch, the broker holds
//!   its lease with the controller, and the high watermark reached the end of the log the
//!   load read). The client's requests cross no network; a
//!   broker that crashes drops the requests it holds.
//!
//! A broker's coordinator is in memory only: a crash loses it, and the restarted broker
//! starts an empty one that loads what it leads.
//!
//! Invariants, on top of the cluster simulation's (which check the offsets partitions'
//! appends as any acknowledged write: answered once, below the high watermark, never
//! lost):
//!
//! - (g1) no acknowledged commit is lost or seen to go back: an OffsetFetch answered by a
//!   coordinator without error shows, for each partition, at least the largest offset
//!   acknowledged or shown before it (the chaos checker's `commit_backwards`), and never
//!   an offset no commit sent, nor one the partition's log (on the broker answering) does
//!   not hold below its high watermark ("dirty read": a later leader may lack it);
//! - (g2) every request is answered once, by the broker incarnation it was sent to, and
//!   the coordinator's appends complete once each;
//! - (g3) at any time at most one broker answers reads for an offsets partition: it has
//!   it loaded at an epoch it leads at, and holds its lease;
//! - (g4) liveness: once the faults heal and the cluster converged, each group's
//!   coordinator (the leader of its partition in the committed metadata) has it loaded at
//!   the committed leader epoch, confirms its reads, answers every acknowledged commit
//!   (or a later one sent), and holds no request unanswered.
//!
//! Not modelled: transactions (TxnOffsetCommit, markers), group membership (joins,
//! rebalances: the client commits as a simple group), offset expiry, the coordinators'
//! real append queues (an append is issued at once, in output order), compaction of the
//! offsets topic, and the client's network.

#[path = "../../cluster/tests/sim/cluster.rs"]
mod cluster;
#[path = "../../cluster/tests/sim/mod.rs"]
mod sim;

use cluster::{
    assert_caught, assert_seeds_replay, broker_index, run_seed, run_seeds, Extension, PartitionKey, TopicSpec, World,
};
use osprey_cluster::replica::ReplicaState;
use osprey_coordinator::group::{
    partition_for, GroupConfig, GroupCoordinator, Output, PartitionLoad, PersistId, Record, Replay, ReplyId, Response,
};
use osprey_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use osprey_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
use osprey_protocol::messages::OffsetCommitRequest;
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::BTreeMap;

const OFFSETS_TOPIC: &str = "__consumer_offsets";
const OFFSETS_TOPIC_ID: [u8; 16] = [0x0f; 16];
/// `offsets.topic.num.partitions`, small: leaderships move often.
const OFFSETS_PARTITIONS: i32 = 3;
/// The groups the client commits for, one per offsets partition.
const GROUPS: usize = OFFSETS_PARTITIONS as usize;
/// The topic whose offsets the groups commit (it need not exist: a simple group commits
/// what it likes).
const CONSUMED_TOPIC: &str = "orders";
const CONSUMED_PARTITIONS: i32 = 2;
/// OffsetCommit v9 and OffsetFetch with the v8+ shape, as the server hands them over.
const COMMIT_VERSION: i16 = 9;
/// Per step, before the heal.
const COMMIT_PER_MILLE: u64 = 400;
/// Per step, before and after the heal.
const FETCH_PER_MILLE: u64 = 400;
/// A broker hands its coordinator the leaderships it has at each step with this chance:
/// the server does it once the metadata is published, a while after its replicas applied
/// it, and meanwhile a coordinator may go on serving a partition it no longer leads.
const FOLLOW_PER_MILLE: u64 = 500;
/// A load begun is finished at each later step with this chance (the server reads the
/// log on the blocking pool, while requests answer COORDINATOR_LOAD_IN_PROGRESS).
const LOAD_FINISH_PER_MILLE: u64 = 500;

/// Where a coordinator loaded an offsets partition: the leader epoch, and the end of
/// the log it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LoadedAt {
    epoch: i32,
    log_end: i64,
}

/// `confirm_offsets_read`'s checks of the partition (the lease is the broker's): the
/// replica still leads at the epoch loaded, and its high watermark has reached the end
/// of the log loaded, so that every commit the coordinator shows is on every ISR member.
/// A new leader's log may hold records above its high watermark, and loads them: shown
/// before they are committed, a later leader without them takes them back (see
/// `a_new_coordinator_answers_no_commit_its_high_watermark_has_not_passed`).
fn read_is_confirmed(replica: &ReplicaState, loaded: LoadedAt) -> bool {
    replica.is_leader() && replica.leader_epoch() == loaded.epoch && replica.high_watermark() >= loaded.log_end
}

/// One broker incarnation's group coordinator.
struct Coordinator {
    incarnation: u64,
    groups: GroupCoordinator,
    /// Its appends in flight: the request id of the append, and the persist it carries.
    appends: BTreeMap<u64, PersistId>,
    /// The offsets partitions it loaded, and where.
    loaded: BTreeMap<i32, LoadedAt>,
}

/// A request the client sent and the coordinator holds.
struct Pending {
    broker: usize,
    incarnation: u64,
    group: usize,
    /// The offsets committed, by partition of the consumed topic.
    offsets: Vec<(i32, i64)>,
}

/// The largest offset of a group's partition seen so far, and how.
#[derive(Debug, Clone)]
struct Observed {
    offset: i64,
    how: String,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    commits_sent: usize,
    commits_acknowledged: usize,
    commits_failed: usize,
    fetches_checked: usize,
    fetches_refused: usize,
    fetches_loading: usize,
    loads: usize,
    unloads: usize,
    appends_failed: usize,
    coordinators_lost: usize,
    /// Reads that showed an offset the partition's log does not hold below its high
    /// watermark (each a violation of (g1)'s premise).
    dirty_reads: usize,
}

/// The coordinators of every broker and the client, as the cluster simulation's
/// [`Extension`].
struct Coordinators {
    topic: Uuid,
    group_ids: Vec<String>,
    /// By broker index; `None` while the broker is down.
    coordinators: Vec<Option<Coordinator>>,
    /// The records of each coordinator append, by the write id of its log entry.
    records: BTreeMap<u64, Vec<Record>>,
    /// The client: its requests held by coordinators, by reply id.
    pending: BTreeMap<u64, Pending>,
    next_reply: u64,
    /// The last offset sent, per (group, partition).
    sent: BTreeMap<(usize, i32), i64>,
    /// The largest offset acknowledged, per (group, partition).
    acknowledged: BTreeMap<(usize, i32), i64>,
    /// The largest offset acknowledged or fetched, per (group, partition).
    observed: BTreeMap<(usize, i32), Observed>,
    counts: Counts,
    /// How reads are confirmed: as the server does, except in the broken variants.
    confirm_reads: Confirm,
}

/// How a coordinator confirms its reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Confirm {
    /// As `confirm_offsets_read` does: [`read_is_confirmed`] and the lease.
    Fully,
    /// Leadership at the loaded epoch and the lease, not the high watermark (the server
    /// before it waited for the high watermark).
    WithoutHighWatermark,
    /// Not at all: answered from memory.
    Never,
}

impl Coordinators {
    fn new() -> Coordinators {
        // One group per offsets partition, so that each partition's moves matter.
        let mut group_ids: Vec<Option<String>> = vec![None; GROUPS];
        for i in 0.. {
            let id = format!("group-{i}");
            let slot = &mut group_ids[partition_for(&id, OFFSETS_PARTITIONS) as usize];
            if slot.is_none() {
                *slot = Some(id);
            }
            if group_ids.iter().all(Option::is_some) {
                break;
            }
        }
        Coordinators {
            topic: Uuid(OFFSETS_TOPIC_ID),
            group_ids: group_ids.into_iter().flatten().collect(),
            coordinators: Vec::new(),
            records: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_reply: 0,
            sent: BTreeMap::new(),
            acknowledged: BTreeMap::new(),
            observed: BTreeMap::new(),
            counts: Counts::default(),
            confirm_reads: Confirm::Fully,
        }
    }

    fn key(&self, index: i32) -> PartitionKey {
        (self.topic, index)
    }

    /// Each running broker incarnation has its coordinator, following leadership.
    fn start_coordinators(&mut self, w: &World, now_ms: i64) {
        self.coordinators.resize_with(w.brokers(), || None);
        for b in 0..w.brokers() {
            let current = self.coordinators[b].as_ref().is_some_and(|c| c.incarnation == w.incarnation(b));
            if w.is_up(b) && !current {
                let mut groups = GroupCoordinator::new(GroupConfig::default());
                groups.follow_leadership(OFFSETS_PARTITIONS, now_ms);
                let incarnation = w.incarnation(b);
                self.coordinators[b] =
                    Some(Coordinator { incarnation, groups, appends: BTreeMap::new(), loaded: BTreeMap::new() });
            }
        }
    }

    /// `coordinator_leadership::follow` for broker `b`: loads what it leads at an epoch
    /// not loaded yet, finishes loads begun before, unloads what it does not lead.
    fn follow_leadership(&mut self, w: &mut World, b: usize, now_ms: i64) {
        for index in 0..OFFSETS_PARTITIONS {
            let key = self.key(index);
            let led = w.replica(b, key).filter(|r| r.is_leader()).map(|r| r.leader_epoch());
            let Some(c) = self.coordinators[b].as_mut() else { return };
            let current = c.groups.partition_load(index);
            match (led, current) {
                (None, None) => {}
                (None, Some(_)) => {
                    c.groups.unload_partition(index, OFFSETS_PARTITIONS, now_ms);
                    self.counts.unloads += 1;
                    let id = w.broker_id(b);
                    w.trace(now_ms, format!("broker {id} unloads __consumer_offsets-{index}"));
                }
                (Some(epoch), Some(PartitionLoad::Loaded { epoch: e })) if e == epoch => {}
                (Some(epoch), Some(PartitionLoad::Loading { epoch: e })) if e == epoch => {
                    if w.rng().chance(LOAD_FINISH_PER_MILLE) {
                        self.finish_load(w, b, index, epoch, now_ms);
                    }
                }
                (Some(epoch), _) => {
                    c.groups.begin_load(index, epoch, now_ms);
                    let id = w.broker_id(b);
                    w.trace(now_ms, format!("broker {id} begins loading __consumer_offsets-{index} at epoch {epoch}"));
                }
            }
            self.drain(w, b, now_ms);
        }
    }

    /// `groups::load_partition`: every record of the partition's log, to its log end.
    fn finish_load(&mut self, w: &mut World, b: usize, index: i32, epoch: i32, now_ms: i64) {
        let key = self.key(index);
        let mut items = Vec::new();
        let entries = w.log(b, key).map(|d| d.entries.clone()).unwrap_or_default();
        let log_end = entries.len() as i64;
        for entry in &entries {
            match self.records.get(&entry.write_id) {
                Some(records) => items.extend(records.iter().cloned().map(Replay::Record)),
                None => {
                    w.violation(format!("__consumer_offsets-{index} holds write {}, no coordinator's", entry.write_id))
                }
            }
        }
        let Some(c) = self.coordinators[b].as_mut() else { return };
        let count = items.len();
        match c.groups.finish_load(index, epoch, items, now_ms) {
            Some(Ok(_)) => {
                c.loaded.insert(index, LoadedAt { epoch, log_end });
                self.counts.loads += 1;
                let id = w.broker_id(b);
                w.trace(
                    now_ms,
                    format!("broker {id} loaded __consumer_offsets-{index} at epoch {epoch}: {count} records"),
                );
            }
            Some(Err(e)) => {
                w.violation(format!("broker {} cannot load __consumer_offsets-{index}: {e}", w.broker_id(b)))
            }
            None => {}
        }
    }

    /// Carries out broker `b`'s coordinator outputs (`Groups::drain`, with the appends
    /// issued at once rather than from a queue's runner).
    fn drain(&mut self, w: &mut World, b: usize, now_ms: i64) {
        loop {
            let Some(c) = self.coordinators[b].as_mut() else { return };
            let Some(output) = c.groups.poll_output() else { return };
            match output {
                Output::Respond { reply, response } => self.answered(w, b, reply, response),
                Output::Persist { id, group_id, records, producer: _ } => {
                    let index = partition_for(&group_id, OFFSETS_PARTITIONS);
                    let Some(epoch) = c.groups.loaded_epoch(index) else {
                        c.groups.persisted(id, Err(ErrorCode::NOT_COORDINATOR), now_ms);
                        continue;
                    };
                    let write_ids = w.new_write_ids(1);
                    let write_id = write_ids[0];
                    self.records.insert(write_id, records);
                    let key = (self.topic, index);
                    match w.append_as_leader(b, key, epoch, write_ids, now_ms) {
                        Ok(request_id) => {
                            c.appends.insert(request_id, id);
                        }
                        Err(code) => {
                            self.records.remove(&write_id);
                            self.counts.appends_failed += 1;
                            c.groups.persisted(id, Err(code), now_ms);
                        }
                    }
                }
            }
        }
    }

    /// (g2) and the acknowledgements of (g1): a held request answered.
    fn answered(&mut self, w: &mut World, b: usize, reply: ReplyId, response: Response) {
        let Some(pending) = self.pending.remove(&reply.0) else {
            w.violation(format!("broker {} answered request {} twice, or one never sent", w.broker_id(b), reply.0));
            return;
        };
        if pending.broker != b || pending.incarnation != w.incarnation(b) {
            w.violation(format!(
                "request {} answered by broker {} incarnation {}",
                reply.0,
                w.broker_id(b),
                w.incarnation(b)
            ));
        }
        let Response::OffsetCommit(response) = response else {
            w.violation(format!("request {} answered with {response:?}", reply.0));
            return;
        };
        let errors: BTreeMap<i32, i16> =
            response.topics.iter().flat_map(|t| &t.partitions).map(|p| (p.partition_index, p.error_code)).collect();
        for (partition, offset) in pending.offsets {
            if errors.get(&partition) != Some(&ErrorCode::NONE.code()) {
                self.counts.commits_failed += 1;
                continue;
            }
            self.counts.commits_acknowledged += 1;
            let key = (pending.group, partition);
            let acknowledged = self.acknowledged.entry(key).or_insert(offset);
            *acknowledged = offset.max(*acknowledged);
            let how = format!("commit acknowledged by broker {}", w.broker_id(b));
            if self.observed.get(&key).is_none_or(|o| o.offset < offset) {
                self.observed.insert(key, Observed { offset, how });
            }
        }
    }

    /// The broker the client's FindCoordinator names for `group` ([`World::find_coordinator`]),
    /// if it runs a coordinator.
    fn find_coordinator(&self, w: &mut World, group: usize) -> Option<usize> {
        let index = partition_for(&self.group_ids[group], OFFSETS_PARTITIONS);
        w.find_coordinator(self.topic, index).filter(|&b| self.coordinators[b].is_some())
    }

    /// The client commits new offsets for one or both partitions of a group.
    fn commit(&mut self, w: &mut World, now_ms: i64) {
        let group = w.rng().below(GROUPS as u64) as usize;
        let Some(b) = self.find_coordinator(w, group) else { return };
        let both = w.rng().chance(500);
        let first = w.rng().below(CONSUMED_PARTITIONS as u64) as i32;
        let partitions: Vec<i32> = if both { (0..CONSUMED_PARTITIONS).collect() } else { vec![first] };
        let mut offsets = Vec::new();
        for p in partitions {
            let step = 1 + w.rng().below(3) as i64;
            let sent = self.sent.entry((group, p)).or_insert(0);
            *sent += step;
            offsets.push((p, *sent));
        }
        let request = OffsetCommitRequest {
            group_id: self.group_ids[group].clone(),
            generation_id_or_member_epoch: -1,
            topics: vec![OffsetCommitRequestTopic {
                name: CONSUMED_TOPIC.into(),
                partitions: offsets
                    .iter()
                    .map(|&(partition_index, committed_offset)| OffsetCommitRequestPartition {
                        partition_index,
                        committed_offset,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let reply = self.next_reply;
        self.next_reply += 1;
        let incarnation = w.incarnation(b);
        self.pending.insert(reply, Pending { broker: b, incarnation, group, offsets });
        self.counts.commits_sent += 1;
        let c = self.coordinators[b].as_mut().expect("found up");
        c.groups.commit_offsets(&request, COMMIT_VERSION, ReplyId(reply), now_ms);
        self.drain(w, b, now_ms);
    }

    /// The client reads a group's offsets back (`handlers/offset_fetch.rs`'s `fetch`),
    /// and (g1) checks what an answer without error shows.
    fn fetch(&mut self, w: &mut World, now_ms: i64) {
        let group = w.rng().below(GROUPS as u64) as usize;
        let Some(b) = self.find_coordinator(w, group) else { return };
        let require_stable = w.rng().chance(500);
        let topics = [OffsetFetchRequestTopics {
            name: CONSUMED_TOPIC.into(),
            partition_indexes: (0..CONSUMED_PARTITIONS).collect(),
            ..Default::default()
        }];
        let group_id = &self.group_ids[group];
        let c = self.coordinators[b].as_ref().expect("found up");
        let answer = c.groups.fetch_offsets(group_id, Some(&topics), require_stable);
        let loaded = c.groups.loaded_partition_of(group_id);
        if answer.error_code != ErrorCode::NONE.code() {
            self.counts.fetches_loading +=
                usize::from(answer.error_code == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.code());
            return;
        }
        // `confirm_offsets_read`.
        let Some((index, epoch)) = loaded else {
            return w.violation(format!(
                "broker {} answered {group_id}'s offsets with no partition loaded",
                w.broker_id(b)
            ));
        };
        let loaded_at = c.loaded.get(&index).copied().filter(|l| l.epoch == epoch);
        let replica = w.replica(b, self.key(index));
        let confirmed = match self.confirm_reads {
            Confirm::Fully => replica.zip(loaded_at).is_some_and(|(r, l)| read_is_confirmed(r, l)) && w.holds_lease(b),
            Confirm::WithoutHighWatermark => w.leads_at(b, self.key(index), epoch) && w.holds_lease(b),
            Confirm::Never => true,
        };
        if !confirmed {
            self.counts.fetches_refused += 1;
            return;
        }
        self.counts.fetches_checked += 1;
        let committed = self.committed_offsets(w, b, index, group_id, &topics);
        for p in answer.topics.iter().flat_map(|t| &t.partitions) {
            let below_hw = committed.get(&p.partition_index).copied().unwrap_or(-1);
            if p.error_code == ErrorCode::NONE.code() && p.committed_offset > below_hw {
                self.counts.dirty_reads += 1;
                let id = w.broker_id(b);
                let what = format!(
                    "DIRTY READ {group_id} {CONSUMED_TOPIC}-{}: broker {id} answers {} with {below_hw} below its high watermark",
                    p.partition_index, p.committed_offset
                );
                w.trace(now_ms, what.clone());
                w.violation(what);
            }
            if p.error_code != ErrorCode::NONE.code() {
                continue;
            }
            let key = (group, p.partition_index);
            let (offset, id) = (p.committed_offset, w.broker_id(b));
            if let Some(o) = self.observed.get(&key).filter(|o| o.offset > offset) {
                return w.violation(format!(
                    "COMMIT BACKWARDS: {group_id} {CONSUMED_TOPIC}-{}: broker {id} (epoch {epoch}) answers offset {offset} after {} ({})",
                    p.partition_index, o.offset, o.how
                ));
            }
            if offset > self.sent.get(&key).copied().unwrap_or(-1) {
                return w.violation(format!("{group_id}: broker {id} answers offset {offset}, never committed"));
            }
            if offset >= 0 && self.observed.get(&key).is_none_or(|o| o.offset < offset) {
                let how = format!("fetched from broker {id} at epoch {epoch}");
                self.observed.insert(key, Observed { offset, how });
            }
        }
    }
}

impl Coordinators {
    /// The offsets of `group_id` that broker `b`'s log of offsets partition `index` holds
    /// below its high watermark: its records replayed into a coordinator of their own.
    fn committed_offsets(
        &self,
        w: &World,
        b: usize,
        index: i32,
        group_id: &str,
        topics: &[OffsetFetchRequestTopics],
    ) -> BTreeMap<i32, i64> {
        let key = self.key(index);
        let hw = w.replica(b, key).map_or(0, |r| r.high_watermark());
        let entries = w.log(b, key).map(|d| d.entries.clone()).unwrap_or_default();
        let records = entries.iter().take(hw.max(0) as usize).flat_map(|e| self.records.get(&e.write_id)).flatten();
        let mut replayed = GroupCoordinator::new(GroupConfig::default());
        if replayed.load(records.cloned(), 0).is_err() {
            return BTreeMap::new();
        }
        let answer = replayed.fetch_offsets(group_id, Some(topics), false);
        answer.topics.iter().flat_map(|t| &t.partitions).map(|p| (p.partition_index, p.committed_offset)).collect()
    }
}

impl Extension for Coordinators {
    fn topics(&self) -> Vec<TopicSpec> {
        // Kafka's default: no unclean election, so no acknowledged commit may be lost.
        vec![TopicSpec {
            name: OFFSETS_TOPIC.into(),
            id: OFFSETS_TOPIC_ID,
            partitions: OFFSETS_PARTITIONS as usize,
            unclean_election: false,
        }]
    }

    fn step(&mut self, w: &mut World, now_ms: i64, faults: bool) {
        self.start_coordinators(w, now_ms);
        for b in 0..w.brokers() {
            if w.rng().chance(FOLLOW_PER_MILLE) {
                self.follow_leadership(w, b, now_ms);
            }
            if let Some(c) = self.coordinators[b].as_mut() {
                c.groups.tick(now_ms);
            }
            self.drain(w, b, now_ms);
        }
        if faults && w.rng().chance(COMMIT_PER_MILLE) {
            self.commit(w, now_ms);
        }
        if w.rng().chance(FETCH_PER_MILLE) {
            self.fetch(w, now_ms);
        }
    }

    fn broker_crashed(&mut self, w: &mut World, b: usize) {
        if let Some(c) = self.coordinators.get_mut(b).and_then(Option::take) {
            self.counts.coordinators_lost += 1;
            // The requests it held are never answered: the client gives up on them.
            self.pending.retain(|_, p| (p.broker, p.incarnation) != (b, c.incarnation));
            let _ = w;
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
        let Some(c) = self.coordinators.get_mut(b).and_then(Option::as_mut) else {
            return w.violation(format!(
                "an append of {key:?} completed on broker {} without a coordinator",
                w.broker_id(b)
            ));
        };
        let Some(id) = c.appends.remove(&request_id) else {
            return w.violation(format!("append {request_id} of {key:?} completed twice on broker {}", w.broker_id(b)));
        };
        c.groups.persisted(id, result, now_ms);
        self.drain(w, b, now_ms);
    }

    fn check(&mut self, w: &mut World) {
        // (g3): at most one broker answers reads for each offsets partition.
        for index in 0..OFFSETS_PARTITIONS {
            let key = self.key(index);
            let serving: Vec<(i32, i32)> = (0..self.coordinators.len())
                .filter_map(|b| {
                    let epoch = self.coordinators[b].as_ref()?.groups.loaded_epoch(index)?;
                    (w.leads_at(b, key, epoch) && w.holds_lease(b)).then(|| (w.broker_id(b), epoch))
                })
                .collect();
            assert!(
                serving.len() <= 1,
                "seed {}: __consumer_offsets-{index} has several coordinators answering reads (broker, epoch): {serving:?}",
                w.seed
            );
        }
    }

    fn converged(&mut self, w: &mut World) -> Result<(), String> {
        let latest = w.latest_image().clone();
        for (group, group_id) in self.group_ids.iter().enumerate() {
            let index = partition_for(group_id, OFFSETS_PARTITIONS);
            let p = latest.partition(self.topic, index).ok_or("no __consumer_offsets")?;
            let b = broker_index(p.leader);
            let c =
                self.coordinators.get(b).and_then(Option::as_ref).ok_or(format!("no coordinator on {}", p.leader))?;
            if c.groups.loaded_epoch(index) != Some(p.leader_epoch) {
                return Err(format!(
                    "__consumer_offsets-{index} is not loaded on {} at epoch {}",
                    p.leader, p.leader_epoch
                ));
            }
            let loaded_at = c.loaded.get(&index).copied();
            let replica = w.replica(b, self.key(index));
            if !replica.zip(loaded_at).is_some_and(|(r, l)| read_is_confirmed(r, l)) || !w.holds_lease(b) {
                return Err(format!("broker {} cannot confirm its reads of {group_id}", p.leader));
            }
            let topics = [OffsetFetchRequestTopics {
                name: CONSUMED_TOPIC.into(),
                partition_indexes: (0..CONSUMED_PARTITIONS).collect(),
                ..Default::default()
            }];
            let answer = c.groups.fetch_offsets(group_id, Some(&topics), false);
            for q in answer.topics.iter().flat_map(|t| &t.partitions) {
                let key = (group, q.partition_index);
                let acknowledged = self.acknowledged.get(&key).copied().unwrap_or(-1);
                let sent = self.sent.get(&key).copied().unwrap_or(-1);
                if q.committed_offset < acknowledged || q.committed_offset > sent {
                    return Err(format!(
                        "{group_id} {CONSUMED_TOPIC}-{}: its coordinator answers {}, acknowledged {acknowledged}, sent {sent}",
                        q.partition_index, q.committed_offset
                    ));
                }
            }
        }
        let held = self.pending.values().find(|p| w.is_up(p.broker) && p.incarnation == w.incarnation(p.broker));
        if let Some(p) = held {
            return Err(format!(
                "broker {} holds a commit of {} unanswered",
                w.broker_id(p.broker),
                self.group_ids[p.group]
            ));
        }
        Ok(())
    }

    fn counts(&self) -> Vec<(&'static str, usize)> {
        let c = &self.counts;
        vec![
            ("commits_sent", c.commits_sent),
            ("commits_acknowledged", c.commits_acknowledged),
            ("commits_failed", c.commits_failed),
            ("fetches_checked", c.fetches_checked),
            ("fetches_refused", c.fetches_refused),
            ("fetches_loading", c.fetches_loading),
            ("loads", c.loads),
            ("unloads", c.unloads),
            ("appends_failed", c.appends_failed),
            ("coordinators_lost", c.coordinators_lost),
            ("dirty_reads", c.dirty_reads),
        ]
    }
}

fn coordinators() -> Option<Box<dyn Extension>> {
    Some(Box::new(Coordinators::new()))
}

/// Over the seeds, commits must have been acknowledged and read back, and `also` must
/// have happened, or the invariants checked little.
fn assert_exercised(counts: &BTreeMap<&'static str, usize>, also: &[&str]) {
    let always = ["commits_acknowledged", "commits_failed", "fetches_checked", "fetches_refused", "loads"];
    for name in always.iter().chain(also) {
        assert!(counts.get(name).is_some_and(|&n| n > 0), "{name} never happened over the seeds: {counts:?}");
    }
}

#[test]
fn group_coordinators_keep_acknowledged_commits_as_leadership_moves() {
    let counts = run_seeds(3, 24, coordinators);
    assert_exercised(&counts, &["unloads", "coordinators_lost"]);
}

/// With four brokers an offsets partition's leadership mostly moves with a crash.
#[test]
fn group_coordinators_on_four_brokers() {
    assert_exercised(&run_seeds(4, 8, coordinators), &["coordinators_lost"]);
}

/// The check of (g1) can fail: coordinators that answer OffsetFetch from memory without
/// confirming that they still lead (`confirm_offsets_read`) show a cut-off broker's old
/// offsets after newer commits were acknowledged by the new coordinator. Few seeds catch
/// it (one in about a hundred and thirty when written: seed 129 of 0..300), so the scan
/// starts at 120 unless `SIM_FIRST_SEED` says otherwise, and goes on for 300 seeds if
/// the simulation changed.
#[test]
fn coordinators_that_answer_reads_unconfirmed_are_caught() {
    let what = "coordinators answering reads without confirming their leadership";
    assert_caught(what, 120, 300, &["COMMIT BACKWARDS", "DIRTY READ"], |seed| {
        let broken = Coordinators { confirm_reads: Confirm::Never, ..Coordinators::new() };
        run_seed(seed, 3, false, Some(Box::new(broken)));
    });
}

/// Two runs of a seed agree, event for event (see `cluster_simulation.rs`'s test of the
/// same name for why only one seed, and no counts, without `--cfg tokio_unstable`).
#[test]
fn seeds_replay_identically() {
    assert_seeds_replay(4, 3, coordinators);
}

/// The shortest way for an OffsetFetch to go back, replayed step by step with the same
/// replica state machines and coordinators as the simulation (whose dirty-read check
/// finds the first half of it in a few seeds of a thousand): a commit appended by broker 1 reaches
/// broker 2 only; broker 1 crashes before the high watermark passes it (so it is never
/// acknowledged); broker 2, elected, loads its log to the end (a new leader's log holds
/// every acknowledged record, some perhaps above its high watermark) and answers the
/// commit; then broker 2 is fenced before broker 3 fetched it, and broker 3, elected from
/// the ISR, never had it. The client saw offset 5, then nothing (commit_backwards). A
/// coordinator therefore confirms a read only once the high watermark reached the end of
/// the log it loaded (`read_is_confirmed`), as Kafka's coordinator runtime reads at the
/// last committed offset.
#[test]
fn a_new_coordinator_answers_no_commit_its_high_watermark_has_not_passed() {
    // The simulation finds it too, in a few seeds of a thousand: with the old
    // confirmation, its dirty-read check fails seeds 1687, 2454 and 2658 of 0..2900
    // (release, `--cfg tokio_unstable`). `SIM_HUNT_DIRTY_READS=n` runs n seeds from
    // `SIM_FIRST_SEED` with the old confirmation and prints those that fail.
    if let Some(n) = std::env::var("SIM_HUNT_DIRTY_READS").ok().and_then(|n| n.parse::<u64>().ok()) {
        let first = std::env::var("SIM_FIRST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0u64);
        for seed in first..first + n {
            let old = Coordinators { confirm_reads: Confirm::WithoutHighWatermark, ..Coordinators::new() };
            if std::panic::catch_unwind(|| run_seed(seed, 3, false, Some(Box::new(old)))).is_err() {
                eprintln!("HUNT: seed {seed} fails with the old confirmation");
            }
        }
    }
    use osprey_cluster::replica::ReplicaState;
    use sim::replication::{self, Disk};

    let (config, assignment) = (replication::three_replica_config, replication::three_replica_assignment);
    let mut disks: [Disk; 3] = Default::default();
    let mut replicas: [Option<ReplicaState>; 3] = Default::default();
    let mut records: BTreeMap<u64, Vec<Record>> = BTreeMap::new();
    let group = "group-0";
    let topics =
        [OffsetFetchRequestTopics { name: CONSUMED_TOPIC.into(), partition_indexes: vec![0], ..Default::default() }];
    // A coordinator of the one offsets partition, loaded from `disk` to its end.
    let load = |disk: &Disk, records: &BTreeMap<u64, Vec<Record>>, epoch: i32| {
        let mut c = GroupCoordinator::new(GroupConfig::default());
        c.follow_leadership(1, 0);
        c.begin_load(0, epoch, 0);
        let items = disk.entries.iter().flat_map(|e| records[&e.write_id].iter().cloned().map(Replay::Record));
        assert!(matches!(c.finish_load(0, epoch, items.collect::<Vec<_>>(), 0), Some(Ok(_))));
        (c, LoadedAt { epoch, log_end: disk.end() })
    };
    let fetched =
        |c: &GroupCoordinator| c.fetch_offsets(group, Some(&topics), false).topics[0].partitions[0].committed_offset;

    for id in 1..=3 {
        let i = id as usize - 1;
        replication::apply_assignment(&mut replicas[i], &mut disks[i], config(id), assignment(1, 0, &[1, 2, 3]), 0);
    }
    // Broker 1's coordinator commits offset 5: one entry, acks=all.
    let (mut c1, _) = load(&disks[0], &records, 0);
    let request = OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: -1,
        topics: vec![OffsetCommitRequestTopic {
            name: CONSUMED_TOPIC.into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: 5,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    c1.commit_offsets(&request, COMMIT_VERSION, ReplyId(0), 0);
    let Some(Output::Persist { records: persisted, .. }) = c1.poll_output() else { panic!("no persist") };
    records.insert(0, persisted);
    let [d1, d2, _] = &mut disks;
    let [r1, r2, _] = &mut replicas;
    let (r1, r2) = (r1.as_mut().unwrap(), r2.as_mut().unwrap());
    replication::append_writes(r1, d1, &[0], 0, 0);
    // Broker 2 fetches it; broker 3 does not: the high watermark stays below it.
    let fetch = replication::follower_fetch(r2, d2, 2, 0, 0);
    let answer = replication::answer_fetch(r1, d1, &fetch, || 8, 0);
    replication::apply_fetch_answer(r2, d2, answer, 0);
    assert_eq!((d2.end(), r1.high_watermark()), (1, 0));

    // Broker 1 crashes; broker 2 is elected and loads its log to the end.
    for id in 2..=3 {
        let i = id as usize - 1;
        replication::apply_assignment(&mut replicas[i], &mut disks[i], config(id), assignment(2, 1, &[2, 3]), 10);
    }
    let (c2, loaded) = load(&disks[1], &records, 1);
    let r2 = replicas[1].as_ref().unwrap();
    assert_eq!(fetched(&c2), 5, "loaded from the log end, the commit is in the coordinator's memory");
    assert!(r2.is_leader() && r2.leader_epoch() == 1, "led at the loaded epoch: confirm_offsets_read's first check");
    assert!(
        !read_is_confirmed(r2, loaded),
        "broker 2 would answer offset 5, a commit its high watermark {} has not passed",
        r2.high_watermark()
    );

    // Broker 2 is fenced before broker 3 fetched; broker 3 is elected from the ISR.
    replication::apply_assignment(&mut replicas[2], &mut disks[2], config(3), assignment(3, 2, &[3]), 20);
    let (c3, loaded) = load(&disks[2], &records, 2);
    assert!(read_is_confirmed(replicas[2].as_ref().unwrap(), loaded));
    assert_eq!(fetched(&c3), -1, "what broker 2 would have shown is gone");
}
