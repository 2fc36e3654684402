//! The bridge between the group coordinator state machine (`osprey_coordinator::group`) and
//! the broker: it holds the replies the coordinator answers later, appends the records it
//! asks to persist to `__consumer_offsets` (after its lock is released, on the blocking
//! pool, in the order it asked: `coordinator_appends`), reports them durable, runs its
//! timers, and loads and unloads `__consumer_offsets` partitions as this broker gains and
//! loses their leadership (`coordinator_leadership`).

use crate::broker::{internal_replication, now_ms, Broker};
use crate::coordinator_appends::AppendQueues;
use crate::coordinator_leadership::{Led, LoadMode, LoadRetries};
use crate::partition::{append_coordinator_records, Partition};
use crate::replies::Replies;
use osprey_cluster::NewTopic;
use osprey_coordinator::group::{
    partition_for, GroupConfig, GroupCoordinator, Output, PartitionLoad, PersistId, Record, Replay, ReplyId, Response,
};
use osprey_protocol::records::{Batches, EndTxnMarker};
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::oneshot;

/// Kafka's internal topic for group metadata and committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// A `__consumer_offsets` batch read back at load may not inflate beyond this.
const MAX_LOAD_BATCH_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug)]
pub struct Groups {
    inner: Mutex<Inner>,
    num_partitions: i32,
    /// The appends to each `__consumer_offsets` partition, queued under the lock in the
    /// coordinator's output order and run after it is released.
    appends: Arc<AppendQueues<i32, GroupAppend>>,
    /// Partitions whose load failed, retried after a back-off.
    load_retries: LoadRetries,
    /// Tests: a partition whose next append stalls until released.
    #[cfg(test)]
    stall: Mutex<Option<tests::Stall>>,
}

/// One `Persist` output of the coordinator: records for one group's partition.
#[derive(Debug)]
struct GroupAppend {
    id: PersistId,
    records: Vec<Record>,
    producer: Option<(i64, i16)>,
    /// The leader epoch the partition was loaded at: the append is made only while the
    /// partition is still led here at that epoch.
    epoch: Option<i32>,
}

#[derive(Debug)]
struct Inner {
    coordinator: GroupCoordinator,
    replies: Replies<Response>,
    /// Each partition loaded: the leader epoch of the load and the end of the log it
    /// read (`confirm_offsets_read` waits for the high watermark to reach it). Bounded
    /// by `offsets.topic.num.partitions`.
    loaded_log_ends: HashMap<i32, (i32, i64)>,
}

impl Groups {
    pub fn new(config: GroupConfig, num_partitions: i32) -> Groups {
        let mut coordinator = GroupCoordinator::new(config);
        coordinator.follow_leadership(num_partitions.max(1), now_ms());
        Groups {
            inner: Mutex::new(Inner { coordinator, replies: Replies::default(), loaded_log_ends: HashMap::new() }),
            num_partitions: num_partitions.max(1),
            appends: Arc::default(),
            load_retries: LoadRetries::default(),
            #[cfg(test)]
            stall: Mutex::new(None),
        }
    }

    /// The coordinator, exclusively. A poisoned lock means a panic (a broken invariant)
    /// left the coordinator half-updated: that is fatal, never served from (README,
    /// "Failure stance").
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("group coordinator lock poisoned by an earlier panic")
    }

    /// Runs `op` on the coordinator with a fresh reply id whose answer arrives on the
    /// returned receiver, then carries out the coordinator's outputs.
    pub fn call_later(
        &self,
        broker: &Arc<Broker>,
        op: impl FnOnce(&mut GroupCoordinator, ReplyId, i64),
    ) -> oneshot::Receiver<Response> {
        let mut inner = self.lock();
        let (id, rx) = inner.replies.hold();
        op(&mut inner.coordinator, ReplyId(id), now_ms());
        self.drain(broker, &mut inner);
        rx
    }

    /// Runs `op`, which answers at once, then carries out the outputs it queued.
    pub fn call<T>(&self, broker: &Arc<Broker>, op: impl FnOnce(&mut GroupCoordinator, i64) -> T) -> T {
        let mut inner = self.lock();
        let result = op(&mut inner.coordinator, now_ms());
        self.drain(broker, &mut inner);
        result
    }

    /// Runs the coordinator's timers (session and rebalance timeouts, offset expiry).
    pub fn tick(&self, broker: &Arc<Broker>) {
        self.call(broker, |c, now| c.tick(now));
    }

    /// Answers held replies and queues the requested appends, in the order they come
    /// out. The appends run after the lock is released (`coordinator_appends`).
    fn drain(&self, broker: &Arc<Broker>, inner: &mut Inner) {
        while let Some(output) = inner.coordinator.poll_output() {
            match output {
                Output::Respond { reply, response } => inner.replies.answer(reply.0, response),
                Output::Persist { id, group_id, records, producer } => {
                    let index = partition_for(&group_id, self.num_partitions);
                    let epoch = inner.coordinator.loaded_epoch(index);
                    let append = GroupAppend { id, records, producer, epoch };
                    let broker = broker.clone();
                    self.appends.push(index, append, move |append| run_append(&broker, index, append));
                }
            }
        }
    }

    /// Makes the coordinator serve `__consumer_offsets` partition `index` as `led` says
    /// (`coordinator_leadership`): begins loading it when it is newly led here (or at a
    /// new epoch), unloads it when it is not led here any more.
    pub fn follow_partition(&self, broker: &Arc<Broker>, index: i32, led: Led, mode: LoadMode) {
        let mut inner = self.lock();
        let current = inner.coordinator.partition_load(index);
        let Some((partition, epoch)) = led else {
            self.load_retries.forget(index);
            if current.is_some() {
                let dropped = inner.coordinator.unload_partition(index, self.num_partitions, now_ms());
                self.drain(broker, &mut inner);
                if dropped > 0 {
                    tracing::info!(
                        partition = index,
                        groups = dropped,
                        "consumer groups unloaded: no longer the leader"
                    );
                }
            }
            return;
        };
        if matches!(current, Some(PartitionLoad::Loading { epoch: e } | PartitionLoad::Loaded { epoch: e }) if e == epoch)
        {
            return;
        }
        if !self.load_retries.may_begin(index, epoch, Instant::now()) {
            return;
        }
        inner.coordinator.begin_load(index, epoch, now_ms());
        self.drain(broker, &mut inner);
        drop(inner);
        let broker = broker.clone();
        mode.run(move || load_partition(&broker, index, epoch, &partition));
    }
}

/// Reads `__consumer_offsets` partition `index` to its log end and hands it to the
/// coordinator for the load begun at `epoch`. The bulk is read without the coordinator
/// lock; what was appended meanwhile (a transaction marker) is read under it, so no
/// marker falls between the load and the markers applied after it.
fn load_partition(broker: &Arc<Broker>, index: i32, epoch: i32, partition: &Partition) {
    let started = std::time::Instant::now();
    let mut items = Vec::new();
    let read = read_replay(partition, partition.log.log_start_offset(), &mut items);
    let groups = &broker.groups;
    let mut inner = groups.lock();
    if inner.coordinator.partition_load(index) != Some(PartitionLoad::Loading { epoch }) {
        return;
    }
    let read = read.and_then(|next| read_replay(partition, next, &mut items));
    let count = items.len();
    let loaded = match read {
        Ok(log_end) => {
            let loaded = inner.coordinator.finish_load(index, epoch, items, now_ms());
            if let Some(Ok(_)) = loaded {
                inner.loaded_log_ends.insert(index, (epoch, log_end));
            }
            loaded
        }
        Err(e) => {
            inner.coordinator.unload_partition(index, groups.num_partitions, now_ms());
            Some(Err(osprey_coordinator::group::LoadError(e)))
        }
    };
    groups.drain(broker, &mut inner);
    drop(inner);
    if let Some(Ok(_)) = loaded {
        groups.load_retries.forget(index);
    }
    match loaded {
        Some(Ok(_)) if count == 0 => tracing::debug!(partition = index, epoch, "consumer groups loaded: none"),
        Some(Ok(summary)) => tracing::info!(
            partition = index,
            epoch,
            records = count,
            groups = summary.groups + summary.consumer_groups,
            offsets = summary.offsets,
            ms = started.elapsed().as_millis() as u64,
            "consumer groups loaded: this broker is the coordinator of __consumer_offsets-{index}"
        ),
        Some(Err(e)) => groups.load_retries.report_failure("group", OFFSETS_TOPIC, index, epoch, &e),
        None => {}
    }
}

/// Appends one persist of the coordinator to `__consumer_offsets` partition `index` (on
/// its queue's runner, the lock released); a failure to append is reported to the
/// coordinator at once, the outcome of a durability wait once it is known.
fn run_append(broker: &Arc<Broker>, index: i32, append: GroupAppend) {
    #[cfg(test)]
    tests::stall_if_asked(&broker.groups, index);
    let id = append.id;
    if let Err(code) = persist(broker, index, append) {
        broker.groups.call(broker, |c, now| c.persisted(id, Err(code), now));
    }
}

/// Appends records as one batch to the group's partition; once durable, tells the
/// coordinator (from a task, so no thread waits on the fsync).
fn persist(broker: &Arc<Broker>, index: i32, append: GroupAppend) -> Result<(), ErrorCode> {
    let partition = offsets_partition(broker, index)?;
    // Offsets committed in a transaction are a transactional batch of the producer,
    // completed by the transaction's marker on this partition.
    let what = "writing to __consumer_offsets";
    let epoch = append.epoch.ok_or(ErrorCode::NOT_COORDINATOR)?;
    let durable =
        append_coordinator_records(&partition, epoch, &broker.flusher, &append.records, append.producer, what)?.1;
    let broker = broker.clone();
    let id = append.id;
    tokio::spawn(async move {
        let result = crate::partition::coordinator_append_result(durable.await);
        broker.groups.call(&broker, |c, now| c.persisted(id, result, now));
    });
    Ok(())
}

/// Whether committed offsets just read from the coordinator of `__consumer_offsets`
/// partition `index`, loaded at leader epoch `loaded_epoch`, are still the latest:
/// NOT_COORDINATOR when they may not be, and the client looks the coordinator up again;
/// COORDINATOR_LOAD_IN_PROGRESS while they may include commits not yet replicated, and
/// the client retries.
///
/// A coordinator answers OffsetFetch from memory, so a broker cut off from the others
/// would go on answering with the offsets it last knew while a new leader of the
/// partition takes newer commits: a consumer restarting then would go back. The read is
/// current if, once it was made, the partition is still led here at the epoch it was
/// loaded at (a leader elected by the metadata this broker applied ends that at once; a
/// follower here that fetches from the new leader has applied it, so commits the ISR
/// acknowledged there with this broker in it come after) and the broker holds its lease
/// with the controller (a leader elected because this broker was fenced, or while it
/// shuts down, is elected only after the lease ran out).
///
/// It also waits for the partition's high watermark to reach the end of the log the load
/// read. A new leader loads its log to the end, and its log may hold commits above its
/// high watermark that no other ISR member has (appended by the previous leader, never
/// acknowledged); shown now, they are taken back if this broker loses the leadership to
/// that member before it fetched them, and a consumer's committed offset goes back
/// (replayed in `crates/coordinator/tests/cluster_coordinators_simulation.rs`). Kafka's
/// coordinator runtime reads at the last committed offset for the same reason.
pub fn confirm_offsets_read(broker: &Arc<Broker>, index: i32, loaded_epoch: i32) -> Result<(), ErrorCode> {
    let partition = offsets_partition(broker, index)?;
    let loaded_log_end =
        broker.groups.lock().loaded_log_ends.get(&index).filter(|(epoch, _)| *epoch == loaded_epoch).map(|l| l.1);
    let high_watermark = *partition.watch_high_watermark().borrow();
    let refused = read_refusal(partition.leads_at(loaded_epoch), broker.holds_lease(), high_watermark, loaded_log_end);
    let Some((reason, code)) = refused else { return Ok(()) };
    metrics::counter!("osprey_coordinator_reads_refused_total", "reason" => reason).increment(1);
    Err(code)
}

/// Why a coordinator's read is not confirmed (`confirm_offsets_read`), and the error the
/// client gets; `None`: confirmed.
fn read_refusal(
    leads_at_loaded_epoch: bool,
    holds_lease: bool,
    high_watermark: i64,
    loaded_log_end: Option<i64>,
) -> Option<(&'static str, ErrorCode)> {
    if !leads_at_loaded_epoch {
        Some(("leadership", ErrorCode::NOT_COORDINATOR))
    } else if !holds_lease {
        Some(("lease", ErrorCode::NOT_COORDINATOR))
    } else if loaded_log_end.is_none_or(|end| high_watermark < end) {
        Some(("uncommitted", ErrorCode::COORDINATOR_LOAD_IN_PROGRESS))
    } else {
        None
    }
}

/// The leader of an offsets-topic partition. It never creates the topic or opens its
/// logs (a metadata write on an append's path): a partition not served here (the topic
/// deleted by an admin, or a log not opened for a full disk) is NOT_COORDINATOR, as from
/// Kafka's coordinator runtime for a partition it has not loaded; the client looks the
/// coordinator up again, and its next FindCoordinator or group request creates or reopens
/// it from the blocking pool (`handlers::handle`), as Kafka does on first use.
fn offsets_partition(broker: &Arc<Broker>, index: i32) -> Result<Arc<Partition>, ErrorCode> {
    let topic = broker.image().topic(OFFSETS_TOPIC).map(|t| t.id);
    topic.and_then(|id| broker.replica_manager.partition(id, index)).ok_or(ErrorCode::NOT_COORDINATOR)
}

/// Creates `__consumer_offsets` (compacted, `offsets.topic.num.partitions`) if missing,
/// or opens its logs that could not be opened before.
pub fn ensure_offsets_topic(broker: &Arc<Broker>) -> Result<osprey_protocol::Uuid, ErrorCode> {
    let offsets_topic = || {
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), broker.settings.offsets_topic_segment_bytes.to_string());
        let config = broker.config();
        let rf = ("offsets.topic.replication.factor", config.offsets_topic_replication_factor);
        let (replication_factor, _) = internal_replication(&config, rf, None, broker.image().brokers().count());
        NewTopic {
            name: OFFSETS_TOPIC.into(),
            num_partitions: broker.settings.offsets_topic_num_partitions,
            replication_factor,
            configs,
            ..Default::default()
        }
    };
    let waiting = "consumer groups cannot join or commit offsets";
    let sized_by = "offsets.topic.num.partitions";
    let ready = broker.ensure_internal_topic(OFFSETS_TOPIC, sized_by, waiting, offsets_topic)?;
    if ready.opened_now {
        crate::coordinator_leadership::follow(broker, LoadMode::Now);
    }
    Ok(ready.id)
}

/// The records of a partition's log (to its log end), control batches left out.
pub(crate) fn read_all(partition: &Partition, out: &mut Vec<Record>) -> Result<i64, String> {
    read_all_from(partition, partition.log.log_start_offset(), out)
}

/// [`read_all`] from offset `from`; returns the offset after the last one read.
pub(crate) fn read_all_from(partition: &Partition, from: i64, out: &mut Vec<Record>) -> Result<i64, String> {
    let mut items = Vec::new();
    let next = read_replay(partition, from, &mut items)?;
    out.extend(items.into_iter().filter_map(|item| match item {
        Replay::Record(r) | Replay::Transactional { record: r, .. } => Some(r),
        Replay::Marker { .. } => None,
    }));
    Ok(next)
}

/// The log of a `__consumer_offsets` partition as the group coordinator replays it:
/// records, transactional records with their producer, and transaction markers.
/// Reads from `from` to the log end (a new leader's log holds every acknowledged record,
/// some perhaps still above its high watermark); returns the offset after the last read.
fn read_replay(partition: &Partition, from: i64, out: &mut Vec<Replay>) -> Result<i64, String> {
    let log = &partition.log;
    let mut offset = from.max(log.log_start_offset());
    let end = log.log_end_offset();
    while offset < end {
        let slice = log.read_bounded(offset, 1024 * 1024, end).map_err(|e| format!("{}: {e}", log.dir().display()))?;
        if slice.records.is_empty() || slice.next_offset <= offset {
            break;
        }
        for batch in Batches::new(slice.records.clone()) {
            let batch = batch.map_err(|e| format!("{}: {e}", log.dir().display()))?;
            let records = batch.records(MAX_LOAD_BATCH_BYTES).map_err(|e| e.to_string())?;
            let producer_id = batch.producer_id();
            if batch.is_control() {
                // COMMIT / ABORT markers; other control records mean nothing here.
                for r in records {
                    let r = r.map_err(|e| e.to_string())?;
                    if let Ok(marker) = EndTxnMarker::from_record(&r) {
                        out.push(Replay::Marker { producer_id, committed: marker.commit, partition: partition.index });
                    }
                }
                continue;
            }
            let transactional = batch.is_transactional();
            for r in records {
                let r = r.map_err(|e| e.to_string())?;
                if let Some(key) = r.key {
                    let record = Record { key, value: r.value };
                    out.push(if transactional {
                        Replay::Transactional { producer_id, record }
                    } else {
                        Replay::Record(record)
                    });
                }
            }
        }
        offset = slice.next_offset;
    }
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Settings;
    use osprey_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use osprey_protocol::messages::OffsetCommitRequest;
    use std::sync::mpsc;

    /// A partition whose next append stalls: `entered` says it has begun, `release` lets
    /// it go on.
    #[derive(Debug)]
    pub(super) struct Stall {
        partition: i32,
        entered: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
    }

    pub(super) fn stall_if_asked(groups: &Groups, partition: i32) {
        let stall = groups.stall.lock().unwrap().take_if(|s| s.partition == partition);
        if let Some(stall) = stall {
            stall.entered.send(()).unwrap();
            let _ = stall.release.recv();
        }
    }

    fn commit(group_id: &str, offset: i64) -> OffsetCommitRequest {
        OffsetCommitRequest {
            group_id: group_id.into(),
            topics: vec![OffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![OffsetCommitRequestPartition {
                    partition_index: 0,
                    committed_offset: offset,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn committed(response: Result<Response, oneshot::error::RecvError>) -> i16 {
        match response {
            Ok(Response::OffsetCommit(r)) => r.topics[0].partitions[0].error_code,
            other => panic!("not an OffsetCommit answer: {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_offsets_append_holds_neither_the_coordinator_lock_nor_other_groups() {
        let dir = std::env::temp_dir().join(format!("osprey-groups-stall-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let settings = Settings::single_node(addr, dir.clone());
        let broker = tokio::task::spawn_blocking(move || {
            let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).unwrap();
            let topic = NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, ..Default::default() };
            broker.create_topic(&topic, false).unwrap();
            ensure_offsets_topic(&broker).unwrap();
            broker
        })
        .await
        .unwrap();
        let n = broker.settings.offsets_topic_num_partitions;
        let stalled = "stalled-group";
        let other = (0..)
            .map(|i| format!("other-group-{i}"))
            .find(|g| partition_for(g, n) != partition_for(stalled, n))
            .unwrap();
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        *broker.groups.stall.lock().unwrap() =
            Some(Stall { partition: partition_for(stalled, n), entered: entered_tx, release: release_rx });

        // The stalled group's commit is issued from a blocking thread, so that this test
        // goes on even when the append runs on the caller's thread (as it did under the lock).
        let b = broker.clone();
        let stalled_rx = tokio::task::spawn_blocking(move || {
            b.groups.call_later(&b, |c, reply, now| c.commit_offsets(&commit(stalled, 5), 9, reply, now))
        });
        entered_rx.recv().unwrap();
        // Other tasks (the coordinators' timer, hand-overs) take the lock briefly, so one
        // failed try proves nothing; a lock held by the append stays held until released.
        let lock_free = (0..2000).any(|_| {
            let free = broker.groups.inner.try_lock().is_ok();
            if !free {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            free
        });
        if !lock_free {
            release_tx.send(()).unwrap();
        }
        assert!(lock_free, "the group coordinator's lock is held while an append runs");

        // Another group, on another partition, is served and made durable meanwhile.
        let other_rx =
            broker.groups.call_later(&broker, |c, reply, now| c.commit_offsets(&commit(&other, 7), 9, reply, now));
        assert_eq!(committed(other_rx.await), ErrorCode::NONE.code());
        let mut stalled_rx = stalled_rx.await.unwrap();
        assert!(stalled_rx.try_recv().is_err(), "the stalled commit is answered before its append");

        release_tx.send(()).unwrap();
        assert_eq!(committed(stalled_rx.await), ErrorCode::NONE.code());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_read_is_confirmed_only_once_the_high_watermark_reached_the_loaded_log_end() {
        let not_coordinator = ErrorCode::NOT_COORDINATOR;
        assert_eq!(read_refusal(false, true, 5, Some(5)), Some(("leadership", not_coordinator)));
        assert_eq!(read_refusal(true, false, 5, Some(5)), Some(("lease", not_coordinator)));
        // A new leader's log holds a commit at offset 4 its high watermark has not passed:
        // another ISR member may lack it and lead next.
        let waiting = Some(("uncommitted", ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
        assert_eq!(read_refusal(true, true, 4, Some(5)), waiting);
        assert_eq!(read_refusal(true, true, 5, None), waiting, "no load recorded at that epoch");
        assert_eq!(read_refusal(true, true, 5, Some(5)), None);
        assert_eq!(read_refusal(true, true, 9, Some(5)), None);
    }

    #[test]
    #[should_panic(expected = "group coordinator lock poisoned")]
    fn a_coordinator_poisoned_by_a_panic_is_never_used_again() {
        let groups = Groups::new(GroupConfig::default(), 1);
        std::thread::scope(|s| {
            let broke = s.spawn(|| {
                let _held = groups.lock();
                panic!("a broken invariant while the coordinator is locked");
            });
            assert!(broke.join().is_err());
        });
        drop(groups.lock());
    }
}
