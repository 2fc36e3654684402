//! The bridge between the share coordinator (`osprey_coordinator::share_state`, the
//! durable state of KIP-932 share partitions) and the broker, as `groups.rs` is for the
//! group coordinator: it holds the writes the coordinator answers later, appends the
//! records it asks to persist to `__share_group_state` (after its lock is released, in
//! the order it asked: `coordinator_appends`), reports them durable with their offsets,
//! and loads and unloads `__share_group_state` partitions as this broker gains and loses
//! their leadership (`coordinator_leadership`).
//!
//! Not yet served to clients: the share partitions that write here and the share-group
//! state APIs (InitializeShareGroupState .. ReadShareGroupStateSummary) come with the
//! share groups themselves (issue 20); this is their durable store.

use crate::broker::{internal_replication, now_ms, Broker};
use crate::coordinator_appends::AppendQueues;
use crate::coordinator_leadership::{Led, LoadMode, LoadRetries};
use crate::partition::{append_coordinator_records, coordinator_append_result, Partition};
use crate::replies::Replies;
use osprey_cluster::NewTopic;
use osprey_coordinator::group::{PartitionLoad, PersistId, ReplyId};
use osprey_coordinator::share_state::{
    Output, ShareStateConfig, ShareStateCoordinator, StateError, StateLoadError, StateRecord,
};
use osprey_protocol::records::Batches;
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::oneshot;

/// Kafka's internal topic for the durable state of share partitions.
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

/// A `__share_group_state` batch read back at load may not inflate beyond this.
const MAX_LOAD_BATCH_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug)]
pub struct ShareStates {
    inner: Mutex<Inner>,
    num_partitions: i32,
    /// The appends to each `__share_group_state` partition, queued under the lock in the
    /// coordinator's output order and run after it is released.
    appends: Arc<AppendQueues<i32, StateAppend>>,
    /// Partitions whose load failed, retried after a back-off.
    load_retries: LoadRetries,
}

/// One `Persist` output of the coordinator.
#[derive(Debug)]
struct StateAppend {
    id: PersistId,
    record: StateRecord,
    /// The leader epoch the partition was loaded at: the append is made only while the
    /// partition is still led here at that epoch.
    epoch: Option<i32>,
}

#[derive(Debug)]
struct Inner {
    coordinator: ShareStateCoordinator,
    replies: Replies<Result<(), StateError>>,
}

impl ShareStates {
    pub fn new(config: ShareStateConfig) -> ShareStates {
        let num_partitions = config.state_topic_num_partitions.max(1);
        let mut coordinator = ShareStateCoordinator::new(config);
        coordinator.follow_leadership();
        ShareStates {
            inner: Mutex::new(Inner { coordinator, replies: Replies::default() }),
            num_partitions,
            appends: Arc::default(),
            load_retries: LoadRetries::default(),
        }
    }

    /// `share.coordinator.state.topic.num.partitions`.
    pub fn num_partitions(&self) -> i32 {
        self.num_partitions
    }

    /// The coordinator, exclusively. A poisoned lock means a panic (a broken invariant)
    /// left it half-updated: fatal, never served from (README, "Failure stance").
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("share coordinator lock poisoned by an earlier panic")
    }

    /// Runs `op` on the coordinator with a fresh reply id whose answer arrives on the
    /// returned receiver, then carries out the coordinator's outputs.
    pub fn call_later(
        &self,
        broker: &Arc<Broker>,
        op: impl FnOnce(&mut ShareStateCoordinator, ReplyId, i64),
    ) -> oneshot::Receiver<Result<(), StateError>> {
        let mut inner = self.lock();
        let (id, rx) = inner.replies.hold();
        op(&mut inner.coordinator, ReplyId(id), now_ms());
        self.drain(broker, &mut inner);
        rx
    }

    /// Runs `op`, which answers at once, then carries out the outputs it queued.
    pub fn call<T>(&self, broker: &Arc<Broker>, op: impl FnOnce(&mut ShareStateCoordinator, i64) -> T) -> T {
        let mut inner = self.lock();
        let result = op(&mut inner.coordinator, now_ms());
        self.drain(broker, &mut inner);
        result
    }

    /// Answers held replies and queues the requested appends, in the order they come out.
    fn drain(&self, broker: &Arc<Broker>, inner: &mut Inner) {
        while let Some(output) = inner.coordinator.poll_output() {
            match output {
                Output::Respond { reply, result } => inner.replies.answer(reply.0, result),
                Output::Persist { id, partition, record } => {
                    let epoch = inner.coordinator.loaded_epoch(partition);
                    let append = StateAppend { id, record, epoch };
                    let broker = broker.clone();
                    self.appends.push(partition, append, move |append| run_append(&broker, partition, append));
                }
            }
        }
    }

    /// Makes the coordinator serve `__share_group_state` partition `index` as `led` says:
    /// begins loading it when newly led here (or at a new epoch), unloads it when not.
    pub fn follow_partition(&self, broker: &Arc<Broker>, index: i32, led: Led, mode: LoadMode) {
        let mut inner = self.lock();
        let current = inner.coordinator.partition_load(index);
        let Some((partition, epoch)) = led else {
            self.load_retries.forget(index);
            if current.is_some() {
                inner.coordinator.unload_partition(index);
                self.drain(broker, &mut inner);
                tracing::info!(partition = index, "share partition state unloaded: no longer the leader");
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
        inner.coordinator.begin_load(index, epoch);
        self.drain(broker, &mut inner);
        drop(inner);
        let broker = broker.clone();
        mode.run(move || load_partition(&broker, index, epoch, &partition));
    }
}

/// Reads `__share_group_state` partition `index` to its log end and hands its records to
/// the coordinator for the load begun at `epoch`. The bulk is read without the
/// coordinator lock (a large partition must not stall every other share partition's
/// writes); what was appended meanwhile is read under it, so nothing falls between the
/// read and the replay.
fn load_partition(broker: &Arc<Broker>, index: i32, epoch: i32, partition: &Partition) {
    let started = Instant::now();
    let states = &broker.share_states;
    let bulk = read_records(partition, partition.log.log_start_offset());
    let mut inner = states.lock();
    if inner.coordinator.partition_load(index) != Some(PartitionLoad::Loading { epoch }) {
        return;
    }
    let read = bulk.and_then(|(mut records, next)| {
        records.extend(read_records(partition, next)?.0);
        Ok(records)
    });
    let loaded = match read {
        Ok(records) => {
            let count = records.len();
            inner.coordinator.finish_load(index, epoch, records).then_some(Ok(count))
        }
        Err(e) => {
            inner.coordinator.unload_partition(index);
            Some(Err(e))
        }
    };
    states.drain(broker, &mut inner);
    drop(inner);
    match loaded {
        Some(Ok(count)) => {
            states.load_retries.forget(index);
            tracing::info!(
                partition = index,
                epoch,
                records = count,
                ms = started.elapsed().as_millis() as u64,
                "share partition state loaded: this broker is the share coordinator of {SHARE_STATE_TOPIC}-{index}"
            );
        }
        Some(Err(e)) => states.load_retries.report_failure("share", SHARE_STATE_TOPIC, index, epoch, &e),
        None => {}
    }
}

/// The records of `partition`'s log from offset `from` to its end, with their offsets,
/// oldest first, and the offset after the last one read.
fn read_records(partition: &Partition, from: i64) -> Result<(Vec<(i64, StateRecord)>, i64), StateLoadError> {
    let log = &partition.log;
    let in_log = |e: &dyn std::fmt::Display| StateLoadError(format!("{}: {e}", log.dir().display()));
    let mut out = Vec::new();
    let mut offset = from.max(log.log_start_offset());
    let end = log.log_end_offset();
    while offset < end {
        let slice = log.read_bounded(offset, 1024 * 1024, end).map_err(|e| in_log(&e))?;
        if slice.records.is_empty() || slice.next_offset <= offset {
            break;
        }
        for batch in Batches::new(slice.records.clone()) {
            let batch = batch.map_err(|e| in_log(&e))?;
            if batch.is_control() {
                continue;
            }
            let base_offset = batch.base_offset();
            for r in batch.records(MAX_LOAD_BATCH_BYTES).map_err(|e| in_log(&e))? {
                let r = r.map_err(|e| in_log(&e))?;
                let Some(key) = r.key else { continue };
                if let Some(record) = StateRecord::from_record(key, r.value)? {
                    out.push((base_offset + i64::from(r.offset_delta), record));
                }
            }
        }
        offset = slice.next_offset;
    }
    Ok((out, offset))
}

/// Appends one persist of the coordinator (on its queue's runner, the lock released); a
/// failure to append is reported at once, the outcome of the durability wait once known.
fn run_append(broker: &Arc<Broker>, index: i32, append: StateAppend) {
    let id = append.id;
    if let Err(code) = persist(broker, index, append) {
        broker.share_states.call(broker, |c, now| c.persisted(id, Err(code), now));
    }
}

fn persist(broker: &Arc<Broker>, index: i32, append: StateAppend) -> Result<(), ErrorCode> {
    let partition = state_partition(broker, index)?;
    let epoch = append.epoch.ok_or(ErrorCode::NOT_COORDINATOR)?;
    let what = "writing to __share_group_state";
    let records = [append.record.to_record()];
    let (offset, durable) = append_coordinator_records(&partition, epoch, &broker.flusher, &records, None, what)?;
    let broker = broker.clone();
    let id = append.id;
    tokio::spawn(async move {
        let result = coordinator_append_result(durable.await).map(|()| offset);
        broker.share_states.call(&broker, |c, now| c.persisted(id, result, now));
    });
    Ok(())
}

/// The leader of a `__share_group_state` partition, as `groups::offsets_partition`: never
/// creates the topic on an append's path.
fn state_partition(broker: &Arc<Broker>, index: i32) -> Result<Arc<Partition>, ErrorCode> {
    let topic = broker.image().topic(SHARE_STATE_TOPIC).map(|t| t.id);
    topic.and_then(|id| broker.replica_manager.partition(id, index)).ok_or(ErrorCode::NOT_COORDINATOR)
}

/// Creates `__share_group_state` if missing, with Kafka's settings: deleted, not
/// compacted, by the coordinator's pruning (retention.ms -1), segments of
/// `share.coordinator.state.topic.segment.bytes`, `share.coordinator.state.topic.min.isr`.
pub fn ensure_share_state_topic(broker: &Arc<Broker>) -> Result<osprey_protocol::Uuid, ErrorCode> {
    let state_topic = || {
        let config = broker.config();
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "delete".to_string());
        configs.insert("retention.ms".to_string(), "-1".to_string());
        configs.insert("segment.bytes".to_string(), config.share_coordinator_state_topic_segment_bytes.to_string());
        let rf = (
            "share.coordinator.state.topic.replication.factor",
            config.share_coordinator_state_topic_replication_factor,
        );
        let min_isr =
            ("share.coordinator.state.topic.min.isr", i32::from(config.share_coordinator_state_topic_min_isr));
        let (replication_factor, min_isr) =
            internal_replication(&config, rf, Some(min_isr), broker.image().brokers().count());
        if let Some(min_isr) = min_isr {
            configs.insert("min.insync.replicas".to_string(), min_isr.to_string());
        }
        NewTopic {
            name: SHARE_STATE_TOPIC.into(),
            num_partitions: broker.share_states.num_partitions(),
            replication_factor,
            configs,
            ..Default::default()
        }
    };
    let waiting = "share groups cannot keep their state";
    let sized_by = "share.coordinator.state.topic.num.partitions";
    let ready = broker.ensure_internal_topic(SHARE_STATE_TOPIC, sized_by, waiting, state_topic)?;
    if ready.opened_now {
        crate::coordinator_leadership::follow(broker, LoadMode::Now);
    }
    Ok(ready.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Settings;
    use osprey_coordinator::share_state::{ShareKey, StateBatch, WriteState};
    use osprey_protocol::Uuid;
    use std::time::Duration;

    fn open(dir: &std::path::Path, addr: std::net::SocketAddr) -> Arc<Broker> {
        let settings = Settings::single_node(addr, dir.to_path_buf());
        Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).unwrap()
    }

    /// A write answered Ok is in `__share_group_state`: a broker opened again on the same
    /// directory loads it back (the share partition's state survives a restart).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_acknowledged_share_state_write_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("osprey-share-states-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let key = ShareKey { group_id: "queue".into(), topic_id: Uuid([9; 16]), partition: 0 };
        let batches = vec![StateBatch { first_offset: 5, last_offset: 9, delivery_state: 2, delivery_count: 1 }];

        let (d, k) = (dir.clone(), key.clone());
        let broker = tokio::task::spawn_blocking(move || {
            let broker = open(&d, addr);
            ensure_share_state_topic(&broker).unwrap();
            broker
        })
        .await
        .unwrap();
        let init = broker.share_states.call_later(&broker, |c, reply, now| c.initialize(reply, k.clone(), 0, 0, now));
        assert_eq!(init.await.unwrap(), Ok(()));
        let write = WriteState {
            state_epoch: 0,
            leader_epoch: 0,
            start_offset: 5,
            delivery_complete_count: 5,
            batches: batches.clone(),
        };
        let written = broker.share_states.call_later(&broker, |c, reply, now| c.write(reply, k, write, now));
        assert_eq!(written.await.unwrap(), Ok(()));
        tokio::task::spawn_blocking(move || broker.shutdown(Instant::now() + Duration::from_secs(60)).unwrap())
            .await
            .unwrap();

        let d = dir.clone();
        let broker = tokio::task::spawn_blocking(move || {
            let broker = open(&d, addr);
            crate::coordinator_leadership::follow(&broker, LoadMode::Now);
            broker
        })
        .await
        .unwrap();
        let read = broker.share_states.call(&broker, |c, now| c.read(&key, 0, now)).unwrap();
        assert_eq!((read.start_offset, read.batches), (5, batches));
        let partition = broker.share_states.call(&broker, |c, _| c.partition_of(&key));
        assert_eq!(
            broker.share_states.lock().coordinator.redundant_offset(partition),
            Some(0),
            "the initial snapshot is still needed"
        );
        tokio::task::spawn_blocking(move || broker.shutdown(Instant::now() + Duration::from_secs(60)).unwrap())
            .await
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
