//! Fetch (v4+): read whole batches up to the high watermark (read_uncommitted) or the
//! last stable offset (read_committed), honouring partition and response byte limits
//! (KIP-74); when fewer than `min_bytes` are available, wait up to `max_wait_ms` for
//! appends without blocking anything else. Incremental fetch sessions (KIP-227) are
//! kept in `fetch_session.rs`. The reads (`pread`s of segment files) run on the blocking
//! pool, never on an async worker: a read that misses the page cache waits for the disk.
//!
//! A fetch with a replica id (`replica_id` up to v14, `replica_state` from v15) is a
//! follower's (Kafka's `ReplicaFetcherThread`): it reads up to the log end offset, not
//! the high watermark; its fetch offset tells the leader's replica state machine where
//! the follower is (which moves the high watermark and the ISR); and its long poll
//! wakes on appends. Any fetch that names the epoch of its last batch (v12+, KIP-320)
//! is answered with a diverging epoch when the log disagrees, so the fetcher truncates.

use crate::broker::{now_ms, Broker};
use crate::dispatch::{Answer, Reply};
use crate::fetch_session::{Begin, Context, PartitionFetch, PartitionKey, PartitionRead, Respond};
use crate::metadata_cache::MetadataCache;
use crate::partition::Partition;
use crate::telemetry;
use crate::telemetry::stages::remote_wait;
use osprey_cluster::replica::fetch::{diverging_epoch, FollowerFetch};
use osprey_cluster::{MetadataImage, TopicImage};
use osprey_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use osprey_protocol::messages::{FetchRequest, FetchResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use osprey_storage::{FileChunk, StorageError};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// What to read, resolved from the request (and its session) once.
struct Plan {
    broker: Arc<Broker>,
    /// The client listener the request came in on: leader hints name brokers on it.
    listener: Arc<str>,
    version: i16,
    /// read_committed (1): read up to the last stable offset, report aborted transactions.
    read_committed: bool,
    /// The response's byte limit: the request's `max_bytes`, at most the broker's
    /// `fetch.max.bytes`.
    max_bytes: usize,
    min_bytes: usize,
    session: Context,
    partitions: Vec<PartitionPlan>,
    /// A follower's fetch: its broker id and broker epoch (-1 before v15).
    replica: Option<(i32, i64)>,
    /// A partition's records at least this long stay in their segment file, for the
    /// connection's writer to send from there ([`crate::send_file`]); shorter ones, and
    /// every read on a TLS listener (whose bytes are encrypted in memory anyway), are
    /// read into the response.
    leave_in_file_bytes: usize,
}

/// One partition's answer: its response data, whose records are empty when they were
/// left in `chunk`.
struct PartitionAnswer {
    data: PartitionData,
    chunk: Option<FileChunk>,
}

impl PartitionAnswer {
    fn records_bytes(&self) -> usize {
        match &self.chunk {
            Some(chunk) => chunk.len() as usize,
            None => self.data.records.as_ref().map_or(0, |r| r.len()),
        }
    }
}

struct PartitionPlan {
    /// The topic's name if it exists, for its per-topic request counts.
    topic: Option<String>,
    key: PartitionKey,
    fetch: PartitionFetch,
    partition: Result<Arc<Partition>, ErrorCode>,
}

/// `readable`: the client's authorizer view when the broker has an authorizer. The
/// partitions a request names were checked already (`crate::authorization`); those an
/// incremental session carries from an earlier request are checked here, each time, as
/// Kafka checks every partition of the session's context.
pub fn handle(
    broker: &Arc<Broker>,
    req: FetchRequest,
    version: i16,
    listener: &Arc<str>,
    readable: Option<&crate::access::Access>,
) -> Reply {
    let by_id = version >= 13;
    let key = |topic: &str, topic_id, partition| PartitionKey {
        topic: if by_id { String::new() } else { topic.to_string() },
        topic_id: if by_id { topic_id } else { Default::default() },
        partition,
    };
    let mut requested = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            let fetch = PartitionFetch {
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: if version >= 12 { p.last_fetched_epoch } else { -1 },
            };
            requested.push((key(&t.topic, t.topic_id, p.partition), fetch));
        }
    }
    let forgotten: Vec<PartitionKey> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| key(&t.topic, t.topic_id, *p)))
        .collect();
    let (replica_id, replica_epoch) = if version >= 15 {
        (req.replica_state.replica_id, req.replica_state.replica_epoch)
    } else {
        (req.replica_id, -1)
    };
    let replica = (replica_id >= 0).then_some((replica_id, replica_epoch));
    // A follower's session is privileged (Kafka keeps followers' sessions over consumers').
    let begin = broker.fetch_sessions().begin(
        req.session_id,
        req.session_epoch,
        by_id,
        replica.is_some(),
        requested,
        &forgotten,
        now_ms(),
    );
    let (session, partitions) = match begin {
        Begin::Fetch { context, partitions } => {
            telemetry::fetch_served(match context {
                Context::Sessionless => "none",
                Context::Full { .. } => "full",
                Context::Incremental { .. } => "incremental",
            });
            (context, partitions)
        }
        Begin::Error(code) => {
            telemetry::error_code(ApiKey::Fetch, code);
            return Reply::Now(ResponseBody::Fetch(FetchResponse { error_code: code.code(), ..Default::default() }));
        }
    };
    let image = broker.image();
    let unknown = if by_id { ErrorCode::UNKNOWN_TOPIC_ID } else { ErrorCode::UNKNOWN_TOPIC_OR_PARTITION };
    // Each topic asked once per request.
    let mut may_read: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    let partitions = partitions
        .into_iter()
        .map(|(key, fetch)| {
            let topic = topic_of(&image, &key);
            if let Some(t) = topic {
                telemetry::topic_fetch_request(&t.name);
            }
            let mut partition = broker.replica_manager.partition_or_error(&image, topic, key.partition, unknown);
            if let (Some(access), Some(t), None) = (readable, topic, replica) {
                let allowed = *may_read
                    .entry(t.name.clone())
                    .or_insert_with(|| access.allows(crate::access::kind::TOPIC, &t.name, crate::access::op::READ));
                if !allowed {
                    partition = Err(ErrorCode::TOPIC_AUTHORIZATION_FAILED);
                }
            }
            if let (Some((replica_id, broker_epoch)), Ok(p)) = (replica, &partition) {
                // The follower's position, once per request and before the read, so the
                // high watermark it moves is in the answer. A fetcher that is not one of
                // the partition's followers reads nothing (Kafka's
                // `updateFollowerFetchState` refusing it).
                let follower = FollowerFetch {
                    replica_id,
                    current_leader_epoch: fetch.current_leader_epoch,
                    fetch_offset: fetch.fetch_offset,
                    durable_end_offset: fetch.fetch_offset,
                    last_fetched_epoch: fetch.last_fetched_epoch,
                };
                // A diverging log or an offset out of range is answered by the read below,
                // with the leader's offsets, from the same rule; its position is not taken.
                match p.follower_fetched(broker_epoch, &follower) {
                    Ok(_) | Err(ErrorCode::OFFSET_OUT_OF_RANGE) => {}
                    Err(code) => partition = Err(code),
                }
            }
            PartitionPlan { topic: topic.map(|t| t.name.clone()), key, fetch, partition }
        })
        .collect();
    let plan = Plan {
        broker: broker.clone(),
        listener: listener.clone(),
        version,
        read_committed: req.isolation_level == 1,
        max_bytes: req.max_bytes.clamp(0, broker.settings.config.fetch_max_bytes.max(0)) as usize,
        min_bytes: req.min_bytes.max(0) as usize,
        session,
        partitions,
        replica,
        leave_in_file_bytes: if listener_uses_tls(broker, listener) { usize::MAX } else { crate::send_file::MIN_BYTES },
    };
    Reply::Records(Box::pin(fetch(Arc::new(plan), req.max_wait_ms)))
}

fn listener_uses_tls(broker: &Broker, listener: &str) -> bool {
    broker.settings.config.listeners.iter().any(|l| *l.name == *listener && l.security_protocol.uses_tls())
}

/// The topic a session's partition key names: by id from v13, else by name.
fn topic_of<'a>(image: &'a MetadataImage, key: &PartitionKey) -> Option<&'a TopicImage> {
    if key.topic_id.is_zero() {
        image.topic(&key.topic)
    } else {
        image.topic_by_id(key.topic_id)
    }
}

/// Reads once, and answers at once or after a long poll.
async fn fetch(plan: Arc<Plan>, max_wait_ms: i32) -> Answer {
    let (reads, bytes, errors) = read_off_worker(&plan).await;
    // As Kafka: nothing to wait for (no partitions, e.g. a session's closing fetch) is
    // answered at once.
    if max_wait_ms <= 0 || plan.partitions.is_empty() || bytes >= plan.min_bytes.max(1) || errors {
        return respond(&plan, reads);
    }
    long_poll(plan, Duration::from_millis(max_wait_ms as u64)).await
}

/// Waits until a fetched partition's high watermark moves (then re-reads) or the wait
/// runs out.
async fn long_poll(plan: Arc<Plan>, wait: Duration) -> Answer {
    let deadline = tokio::time::Instant::now() + wait;
    let mut timed_out = false;
    loop {
        // Watch first, then read: a high watermark that moves after the read wakes the
        // wait. (Reading first would miss one that moved in between, and the fetch would
        // sit out its whole max.wait.ms with data waiting.)
        let mut wakeups = Wakeups::default();
        for p in &plan.partitions {
            if let Ok(partition) = &p.partition {
                // A follower waits for appends; a consumer for what it may read.
                wakeups.watch(if plan.replica.is_some() {
                    partition.watch_log_end_offset()
                } else {
                    partition.watch_high_watermark()
                });
            }
        }
        let (reads, bytes, errors) = read_off_worker(&plan).await;
        if timed_out || bytes >= plan.min_bytes.max(1) || errors {
            return respond(&plan, reads);
        }
        timed_out = wakeups.park(&plan.broker, deadline).await;
    }
}

/// What wakes a parked fetch (the watch keys of Kafka's fetch purgatories, for Fetch's
/// `DelayedFetch` and ShareFetch's `DelayedShareFetch`): a change of any value watched.
/// A fetch watches first, then looks, and parks if what it saw is not enough: a change
/// after the look wakes it.
#[derive(Default)]
pub(crate) struct Wakeups {
    watchers: JoinSet<()>,
}

impl Wakeups {
    /// Wakes the parked fetch when `value` changes from what it holds now.
    pub(crate) fn watch<T: Send + Sync + 'static>(&mut self, mut value: tokio::sync::watch::Receiver<T>) {
        value.borrow_and_update();
        self.watchers.spawn(async move {
            let _ = value.changed().await;
        });
    }

    /// Parks until a watched value changes (false: look again), or `deadline` passes or
    /// the broker stops (true: answer with what there is). Parked time is the request's
    /// remote time, not its local work.
    pub(crate) async fn park(mut self, broker: &Broker, deadline: tokio::time::Instant) -> bool {
        let stopping = broker.stopping();
        remote_wait(async {
            tokio::select! {
                // An empty set resolves at once; only wait on it when something is watched.
                Some(_) = self.watchers.join_next(), if !self.watchers.is_empty() => false,
                _ = tokio::time::sleep_until(deadline) => true,
                // Shutting down: answer parked fetches now rather than at their deadline.
                _ = stopping => true,
            }
        })
        .await
    }
}

/// [`read`] on the blocking pool.
async fn read_off_worker(plan: &Arc<Plan>) -> (Vec<PartitionAnswer>, usize, bool) {
    let plan = plan.clone();
    match tokio::task::spawn_blocking(move || read(&plan)).await {
        Ok(read) => read,
        // Only at runtime shutdown (a panic aborts the process): the connection is going
        // away, and the answer with it.
        Err(_) => std::future::pending().await,
    }
}

/// Reads every planned partition once, in order: the data, its record bytes in total,
/// and whether any partition failed (errors are answered at once rather than waited on).
///
/// As Kafka's `ReplicaManager.readFromLog` (KIP-74): each partition reads at most its
/// `partition_max_bytes` and what is left of the response's limit; the first partition
/// with data returns its first batch even if that is larger, so a consumer always makes
/// progress; once the limit is used up the remaining partitions return no records.
fn read(plan: &Plan) -> (Vec<PartitionAnswer>, usize, bool) {
    let mut reads = Vec::with_capacity(plan.partitions.len());
    let mut total = 0usize;
    let mut errors = false;
    for p in &plan.partitions {
        let left = plan.max_bytes.saturating_sub(total);
        let budget = (p.fetch.max_bytes.max(0) as usize).min(left);
        let read = read_partition(plan, p, budget, total == 0);
        errors |= read.data.error_code != 0;
        total += read.records_bytes();
        reads.push(read);
    }
    (reads, total, errors)
}

/// Builds the response: every partition of a full fetch, or those with news in an
/// incremental one, grouped by topic in read order.
fn respond(plan: &Plan, reads: Vec<PartitionAnswer>) -> Answer {
    for (p, read) in plan.partitions.iter().zip(&reads) {
        if let (Some(topic), true) = (&p.topic, read.data.error_code != ErrorCode::NONE.code()) {
            telemetry::topic_fetch_failed(topic);
        }
    }
    let summaries = plan.partitions.iter().zip(&reads).map(|(p, answer)| {
        let data = &answer.data;
        let read = PartitionRead {
            high_watermark: data.high_watermark,
            log_start_offset: data.log_start_offset,
            records_bytes: answer.records_bytes(),
            error: data.error_code != 0,
        };
        (&p.key, &p.fetch, read)
    });
    let answer = plan.broker.fetch_sessions().respond(&plan.session, summaries, now_ms());
    let (session_id, include) = match answer {
        Respond::Partitions { session_id, include } => (session_id, include),
        Respond::Error { code, session_id } => {
            telemetry::error_code(ApiKey::Fetch, code);
            let body = ResponseBody::Fetch(FetchResponse { error_code: code.code(), session_id, ..Default::default() });
            return Answer { body, chunks: Vec::new() };
        }
    };
    let mut resp = FetchResponse { session_id, ..Default::default() };
    // In the order the records fields are encoded: one per partition with records.
    let mut chunks = Vec::new();
    for ((p, read), included) in plan.partitions.iter().zip(reads).zip(include) {
        if !included {
            continue;
        }
        let n = read.records_bytes();
        let PartitionAnswer { data, chunk } = read;
        if data.records.is_some() {
            chunks.push(chunk);
        }
        if let (Ok(partition), true) = (&p.partition, n > 0) {
            telemetry::bytes_out(&partition.topic, n as u64);
        }
        let same_topic = resp.responses.last().is_some_and(|t| t.topic == p.key.topic && t.topic_id == p.key.topic_id);
        if !same_topic {
            resp.responses.push(FetchableTopicResponse {
                topic: p.key.topic.clone(),
                topic_id: p.key.topic_id,
                ..Default::default()
            });
        }
        if let Some(topic) = resp.responses.last_mut() {
            topic.partitions.push(data);
        }
    }
    if plan.version >= 16 {
        add_current_leaders(&plan.broker, &plan.listener, &mut resp);
    }
    Answer { body: ResponseBody::Fetch(resp), chunks }
}

/// KIP-951, Fetch v16+: a partition answered NOT_LEADER_OR_FOLLOWER or
/// FENCED_LEADER_EPOCH names the current leader and its epoch, and the response carries
/// the leader's endpoint (Kafka's `handleFetchRequest`; v12-15 have the field, but Kafka
/// fills it from v16 only).
fn add_current_leaders(broker: &Broker, listener: &str, resp: &mut FetchResponse) {
    let cache = MetadataCache::for_listener(broker, listener);
    let mut endpoints = std::collections::BTreeMap::new();
    let stale = [ErrorCode::NOT_LEADER_OR_FOLLOWER.code(), ErrorCode::FENCED_LEADER_EPOCH.code()];
    for topic in &mut resp.responses {
        let key = PartitionKey { topic: topic.topic.clone(), topic_id: topic.topic_id, partition: 0 };
        let found = topic_of(cache.image(), &key);
        for p in topic.partitions.iter_mut().filter(|p| stale.contains(&p.error_code)) {
            let (leader_id, leader_epoch, endpoint) = cache.current_leader(found, p.partition_index);
            p.current_leader = LeaderIdAndEpoch { leader_id, leader_epoch, ..Default::default() };
            if let Some(e) = endpoint {
                endpoints.insert(e.node_id, e);
            }
        }
    }
    resp.node_endpoints = endpoints
        .into_values()
        .map(|e| NodeEndpoint { node_id: e.node_id, host: e.host, port: e.port, rack: e.rack, ..Default::default() })
        .collect();
}

fn read_partition(plan: &Plan, p: &PartitionPlan, budget: usize, min_one_batch: bool) -> PartitionAnswer {
    let mut chunk = None;
    let data = read_partition_data(plan, p, budget, min_one_batch, &mut chunk);
    PartitionAnswer { data, chunk }
}

/// A partition's response data; its records left in `chunk` when the plan says so.
fn read_partition_data(
    plan: &Plan,
    p: &PartitionPlan,
    budget: usize,
    min_one_batch: bool,
    chunk: &mut Option<FileChunk>,
) -> PartitionData {
    let (read_committed, follower) = (plan.read_committed, plan.replica.is_some());
    let mut data = PartitionData {
        partition_index: p.key.partition,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        records: Some(Default::default()),
        ..Default::default()
    };
    let partition = match &p.partition {
        Ok(partition) => partition,
        Err(code) => return failed(data, *code),
    };
    // The leader epoch, high watermark and LSO from one snapshot of the replica state
    // machine, so the response never reports an LSO above its high watermark.
    let snapshot = partition.snapshot();
    let epoch = p.fetch.current_leader_epoch;
    if epoch >= 0 && epoch != snapshot.leader_epoch {
        let code = if epoch < snapshot.leader_epoch {
            ErrorCode::FENCED_LEADER_EPOCH
        } else {
            ErrorCode::UNKNOWN_LEADER_EPOCH
        };
        return failed(data, code);
    }
    let log = &partition.log;
    // Read after the snapshot: the log end offset is at least its high watermark.
    let offsets = log.offsets();
    data.high_watermark = snapshot.high_watermark;
    data.last_stable_offset = snapshot.last_stable_offset;
    data.log_start_offset = offsets.log_start_offset;
    let offset = p.fetch.fetch_offset;
    let end_offset_for = |epoch| log.end_offset_for_epoch(epoch);
    match diverging_epoch(p.fetch.last_fetched_epoch, offset, offsets.log_start_offset, end_offset_for) {
        Ok(Some(diverging)) => {
            data.diverging_epoch =
                EpochEndOffset { epoch: diverging.epoch, end_offset: diverging.end_offset, ..Default::default() };
            return data;
        }
        Ok(None) => {}
        Err(code) => return failed(data, code),
    }
    // A follower reads everything the leader has; a consumer up to the high watermark,
    // and read_committed up to the last stable offset: nothing of an open transaction.
    let bound = if follower {
        offsets.log_end_offset
    } else if read_committed {
        snapshot.last_stable_offset
    } else {
        snapshot.high_watermark
    };
    if offset >= bound && offset <= offsets.log_end_offset {
        // Caught up (or past the bound but inside the log): nothing to read yet.
        return data;
    }
    match log.read_located(offset, budget, bound, min_one_batch, plan.leave_in_file_bytes) {
        Ok((slice, located)) => {
            data.log_start_offset = slice.log_start_offset;
            if read_committed {
                // The consumer drops records of these producers from these offsets on
                // until it meets their ABORT markers.
                data.aborted_transactions = Some(
                    log.aborted_transactions(offset, slice.next_offset)
                        .into_iter()
                        .map(|(producer_id, first_offset)| AbortedTransaction {
                            producer_id,
                            first_offset,
                            ..Default::default()
                        })
                        .collect(),
                );
            }
            data.records = Some(slice.records);
            *chunk = located;
            data
        }
        Err(StorageError::OffsetOutOfRange { .. }) => failed(data, ErrorCode::OFFSET_OUT_OF_RANGE),
        Err(e) => {
            tracing::error!(topic = %partition.topic, partition = p.key.partition, error = %e, "fetch read failed");
            let code = if e.is_kafka_storage_error() {
                ErrorCode::KAFKA_STORAGE_ERROR
            } else {
                ErrorCode::UNKNOWN_SERVER_ERROR
            };
            failed(data, code)
        }
    }
}

fn failed(mut data: PartitionData, code: ErrorCode) -> PartitionData {
    telemetry::error_code(ApiKey::Fetch, code);
    data.error_code = code.code();
    data
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::DEFAULT_LISTENER;
    use crate::partition::append_coordinator_records;
    use osprey_cluster::NewTopic;
    use osprey_coordinator::group::Record;
    use osprey_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use std::sync::atomic::Ordering;

    /// A current-thread runtime runs its tasks on the thread that blocks on it; any other
    /// thread it starts is a blocking-pool thread, counted here.
    #[test]
    fn a_fetch_reads_the_log_on_the_blocking_pool() {
        let (broker, dir) = crate::test_support::broker_in("fetch-off-worker");
        let topic = NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, ..Default::default() };
        let topic = broker.create_topic(&topic, false).unwrap();
        let partition = broker.replica_manager.partition(topic.id, 0).unwrap();
        let record = Record { key: b"k".to_vec().into(), value: Some(b"v".to_vec().into()) };
        let (_, durable) =
            append_coordinator_records(&partition, -1, &broker.flusher, &[record], None, "test").unwrap();
        durable.blocking_recv().unwrap().unwrap();

        let (runtime, blocking_threads) = crate::test_support::counting_runtime();
        let req = FetchRequest {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            session_epoch: -1,
            topics: vec![FetchTopic {
                topic: "t".into(),
                partitions: vec![FetchPartition { partition: 0, partition_max_bytes: 1 << 20, ..Default::default() }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let body = runtime.block_on(async {
            match handle(&broker, req, 12, &DEFAULT_LISTENER.into(), None) {
                Reply::Now(body) => body,
                Reply::Records(pending) => pending.await.into_body_read(),
                other => panic!("{other:?}"),
            }
        });
        let ResponseBody::Fetch(resp) = body else { panic!("not a Fetch answer") };
        let data = &resp.responses[0].partitions[0];
        assert_eq!(data.error_code, 0);
        assert!(data.records.as_ref().is_some_and(|r| !r.is_empty()), "the record was read");
        assert!(blocking_threads.load(Ordering::SeqCst) > 0, "the read ran on the async worker");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn fetch_all(topic: &str) -> FetchRequest {
        FetchRequest {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            session_epoch: -1,
            topics: vec![FetchTopic {
                topic: topic.into(),
                partitions: vec![FetchPartition { partition: 0, partition_max_bytes: 1 << 20, ..Default::default() }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// On a plain listener a fetch of more than `send_file::MIN_BYTES` leaves its records
    /// in the segment file, for the writer to sendfile; on a TLS listener, whose bytes
    /// are encrypted in memory anyway, it reads them into the response. Either way the
    /// records are the log's.
    #[test]
    fn a_large_fetch_leaves_its_records_in_the_segment_file_except_on_a_tls_listener() {
        let dir = std::env::temp_dir().join(format!("osprey-fetch-located-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut settings = crate::broker::Settings::single_node(addr, dir.clone());
        let mut config = (*settings.config).clone();
        config.listeners.push(crate::config::Listener {
            name: "SECURE".into(),
            security_protocol: crate::config::SecurityProtocol::Ssl,
            host: "127.0.0.1".into(),
            port: 0,
        });
        settings.config = Arc::new(config);
        let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).unwrap();
        let topic = NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, ..Default::default() };
        let topic = broker.create_topic(&topic, false).unwrap();
        let partition = broker.replica_manager.partition(topic.id, 0).unwrap();
        let value: bytes::Bytes = vec![7u8; 1024].into();
        let records: Vec<Record> =
            (0..100).map(|_| Record { key: b"k".to_vec().into(), value: Some(value.clone()) }).collect();
        let (_, durable) = append_coordinator_records(&partition, -1, &broker.flusher, &records, None, "test").unwrap();
        durable.blocking_recv().unwrap().unwrap();
        let stored = partition.log.read(0, 1 << 20).unwrap().records;
        assert!(stored.len() >= crate::send_file::MIN_BYTES);

        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for (listener, leaves_in_file) in [(DEFAULT_LISTENER, true), ("SECURE", false)] {
            let answer = runtime.block_on(async {
                match handle(&broker, fetch_all("t"), 12, &listener.into(), None) {
                    Reply::Records(pending) => pending.await,
                    other => panic!("{other:?}"),
                }
            });
            assert_eq!(answer.chunks.iter().flatten().count(), usize::from(leaves_in_file), "on {listener}");
            assert_eq!(answer.records_bytes(), stored.len());
            let ResponseBody::Fetch(resp) = answer.into_body_read() else { panic!("not a Fetch answer") };
            assert_eq!(resp.responses[0].partitions[0].records.as_ref(), Some(&stored), "on {listener}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
