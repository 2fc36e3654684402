//! Replica fetchers (Kafka's `ReplicaFetcherManager` and `ReplicaFetcherThread`): for
//! each leader this broker follows partitions of, `num.replica.fetchers` tasks, each
//! fetching its share of those partitions with Kafka's Fetch and appending what comes
//! back as the leader wrote it.
//!
//! A fetcher works out its partitions from the broker's image at every round, so a
//! leader change, a new partition or a deleted topic takes effect at the next fetch; a
//! fetcher left with no partition stops, and the manager starts one when a leader gets
//! partitions to follow again. Each fetcher keeps an incremental fetch session with its
//! leader (`session.rs`): after the first, full fetch, only partitions whose fetch state
//! changed are named.

use super::session::FetchSession;
use crate::broker::{now_ms, Broker};
use crate::cluster_link::ClusterLink;
use crate::interbroker::{client_id, ClientConfig, NodeAddress, NodeClient};
use crate::partition::Partition;
use crate::telemetry::{LogLimiter, REPEATED_FAILURE_LOG_INTERVAL};
use osprey_cluster::replica::fetch::{truncation_offset, EpochEnd};
use osprey_cluster::{MetadataImage, PartitionImage};
use osprey_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic, ReplicaState};
use osprey_protocol::messages::fetch_response::PartitionData;
use osprey_protocol::messages::FetchRequest;
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody, Uuid};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Retry pause for a partition whose leader does not know the epoch this broker's
/// metadata has yet (or no longer leads): the metadata reaches every broker within
/// milliseconds of each other, so Kafka's `replica.fetch.backoff.ms` (1 s) would only
/// delay the high watermark after every leader change.
const METADATA_RACE_BACKOFF: Duration = Duration::from_millis(50);

/// Starts and forgets fetchers as the metadata changes, until `stopped`.
pub async fn manage_fetchers(broker: Arc<Broker>, link: Arc<ClusterLink>, mut stopped: watch::Receiver<bool>) {
    let mut published = link.watch_published();
    let mut running: HashMap<(i32, i32), tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        running.retain(|_, task| !task.is_finished());
        let image = broker.image();
        let fetchers = broker.config().num_replica_fetchers.max(1);
        for leader in leaders_followed(&image, broker.settings.node_id) {
            for fetcher_id in 0..fetchers {
                running.entry((leader, fetcher_id)).or_insert_with(|| {
                    let fetcher = Fetcher::new(broker.clone(), leader, fetcher_id, fetchers);
                    tokio::spawn(fetcher.run(stopped.clone()))
                });
            }
        }
        tokio::select! {
            _ = stopped.changed() => return,
            changed = published.changed() => if changed.is_err() { return },
        }
    }
}

/// The brokers that lead a partition this broker follows.
fn leaders_followed(image: &MetadataImage, node_id: i32) -> Vec<i32> {
    let mut leaders: Vec<i32> =
        image.topics().flat_map(|t| &t.partitions).filter(|p| follows(p, node_id)).map(|p| p.leader).collect();
    leaders.sort_unstable();
    leaders.dedup();
    leaders
}

fn follows(p: &PartitionImage, node_id: i32) -> bool {
    p.leader >= 0 && p.leader != node_id && p.replicas.contains(&node_id)
}

/// One fetcher: some of the partitions one leader leads and this broker follows.
struct Fetcher {
    broker: Arc<Broker>,
    leader: i32,
    fetcher_id: i32,
    fetchers: i32,
    client: Option<NodeClient>,
    /// Partitions not to fetch before this instant (they failed).
    delayed: HashMap<(Uuid, i32), Instant>,
    /// This fetcher's partitions in the image they were worked out from: worked out
    /// again only when the image changes, not at every fetch.
    assigned: Option<(Arc<MetadataImage>, Vec<Assigned>)>,
    /// A leader that is down fails every fetch, one per back-off: one line per
    /// `FAILURE_LOG_INTERVAL`, with how many were held back (all are counted).
    failures_logged: LogLimiter,
    /// The incremental fetch session with the leader.
    session: FetchSession,
}

/// A full disk fails every fetched append: one line per interval for the broker.
static FOLLOWER_APPEND_FAILURES_LOGGED: LogLimiter = LogLimiter::new();

/// At most one "replica fetch failed" line per fetcher this often.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A followed partition: topic id, index, the leader epoch the image gives it.
type Assigned = (Uuid, i32, i32);

/// A partition in one fetch round.
struct Followed {
    partition: Arc<Partition>,
    leader_epoch: i32,
}

impl Fetcher {
    fn new(broker: Arc<Broker>, leader: i32, fetcher_id: i32, fetchers: i32) -> Fetcher {
        Fetcher {
            broker,
            leader,
            fetcher_id,
            fetchers,
            client: None,
            delayed: HashMap::new(),
            assigned: None,
            failures_logged: LogLimiter::new(),
            session: FetchSession::default(),
        }
    }

    async fn run(mut self, mut stopped: watch::Receiver<bool>) {
        tracing::info!(leader = self.leader, fetcher_id = self.fetcher_id, "replica fetcher started");
        loop {
            if *stopped.borrow() {
                return;
            }
            let image = self.broker.image();
            let Some(address) = self.leader_address(&image) else {
                // The leader is not registered (yet): its partitions move or it returns.
                if !self.sleep(self.backoff(), &mut stopped).await {
                    return;
                }
                continue;
            };
            let round = self.partitions(&image);
            if round.is_empty() {
                if !self.assigned(&image).is_empty() {
                    // Everything is delayed or not open yet.
                    if !self.sleep(METADATA_RACE_BACKOFF, &mut stopped).await {
                        return;
                    }
                    continue;
                }
                tracing::info!(
                    leader = self.leader,
                    fetcher_id = self.fetcher_id,
                    "replica fetcher stopped: nothing left to follow"
                );
                return;
            }
            let client = self.client(address);
            let (request, was_full) = self.request(&image, &round);
            let sent = tokio::select! {
                _ = stopped.changed() => return,
                sent = client.send_with(ApiKey::Fetch, move |version| RequestBody::Fetch(version_of(request, version))) => sent,
            };
            let response = match sent {
                Ok(response) => match response.body {
                    ResponseBody::Fetch(fetch) => fetch,
                    _ => {
                        self.session.failed();
                        continue;
                    }
                },
                Err(e) => {
                    self.session.failed();
                    if let Some(unlogged) = self.failures_logged.admit(FAILURE_LOG_INTERVAL) {
                        tracing::warn!(leader = self.leader, error = %e, unlogged, "replica fetch failed");
                    }
                    crate::telemetry::replica_fetch_failed("request");
                    if !self.sleep(self.backoff(), &mut stopped).await {
                        return;
                    }
                    continue;
                }
            };
            let top = super::isr::error_code(response.error_code);
            if self.session.answered(top, response.session_id, was_full) {
                // The leader lost the session or its epoch: the next fetch is full.
                crate::telemetry::replica_fetch_failed(top.name());
                continue;
            }
            if top != ErrorCode::NONE {
                if let Some(unlogged) = self.failures_logged.admit(FAILURE_LOG_INTERVAL) {
                    tracing::warn!(leader = self.leader, error = top.name(), unlogged, "replica fetch refused");
                }
                crate::telemetry::replica_fetch_failed(top.name());
                if !self.sleep(self.backoff(), &mut stopped).await {
                    return;
                }
                continue;
            }
            let by_key: BTreeMap<(Uuid, i32), Followed> =
                round.into_iter().map(|f| ((f.partition.topic_id, f.partition.index), f)).collect();
            let mut answers = Vec::new();
            for topic in response.responses {
                for data in topic.partitions {
                    if let Some(followed) = by_key.get(&(topic.topic_id, data.partition_index)) {
                        answers.push((followed.partition.clone(), followed.leader_epoch, data));
                    }
                }
            }
            // Appends, fsyncs and truncations: on the blocking pool.
            let outcomes = tokio::task::spawn_blocking(move || {
                answers
                    .into_iter()
                    .map(|(partition, epoch, data)| (partition.clone(), apply(&partition, epoch, data)))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            let now = Instant::now();
            for (partition, outcome) in outcomes {
                let delay = match outcome {
                    Outcome::Done => continue,
                    Outcome::MetadataRace => METADATA_RACE_BACKOFF,
                    Outcome::Failed => self.backoff(),
                };
                self.delayed.insert((partition.topic_id, partition.index), now + delay);
            }
        }
    }

    /// Waits `pause`, or returns false once `stopped`.
    async fn sleep(&self, pause: Duration, stopped: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = stopped.changed() => false,
            _ = tokio::time::sleep(pause) => true,
        }
    }

    fn backoff(&self) -> Duration {
        Duration::from_millis(self.broker.config().replica_fetch_backoff_ms.max(0) as u64)
    }

    /// The leader's endpoint on `inter.broker.listener.name`, if it is registered.
    fn leader_address(&self, image: &MetadataImage) -> Option<NodeAddress> {
        let name = &self.broker.settings.config.inter_broker_listener_name;
        let registration = image.broker(self.leader)?;
        let listener = registration.listeners.iter().find(|l| &l.name == name).or(registration.listeners.first())?;
        Some(NodeAddress::new(listener.host.clone(), listener.port))
    }

    fn client(&mut self, address: NodeAddress) -> NodeClient {
        match &self.client {
            Some(client) => {
                if client.address() != address {
                    client.set_address(address);
                }
                client.clone()
            }
            None => {
                let config = self.broker.config();
                let mut client_config =
                    ClientConfig::new(client_id::replica_fetcher(self.broker.settings.node_id, self.fetcher_id));
                // The leader may hold the fetch for replica.fetch.wait.max.ms.
                client_config.request_timeout_ms += config.replica_fetch_wait_max_ms.max(0) as u64;
                client_config.max_response_bytes =
                    client_config.max_response_bytes.max(config.replica_fetch_response_max_bytes.max(0) as usize);
                client_config.security = self.broker.settings.interbroker.clone();
                let client = NodeClient::new(client_config, self.leader, address);
                self.client = Some(client.clone());
                client
            }
        }
    }

    /// This fetcher's share of a leader's partitions (Kafka's `getFetcherId`).
    fn mine(&self, topic_id: Uuid, index: i32) -> bool {
        let hash = topic_id.0.iter().fold(index as u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(*b)));
        (hash % self.fetchers as u32) as i32 == self.fetcher_id
    }

    /// (topic id, partition, leader epoch) of every partition this fetcher follows in
    /// `image`, delayed or not.
    fn assigned(&mut self, image: &Arc<MetadataImage>) -> &[Assigned] {
        let stale = self.assigned.as_ref().is_none_or(|(seen, _)| !Arc::ptr_eq(seen, image));
        if stale {
            let node = self.broker.settings.node_id;
            let mut assigned = Vec::new();
            for topic in image.topics() {
                for p in &topic.partitions {
                    if p.leader == self.leader && follows(p, node) && self.mine(topic.id, p.index) {
                        assigned.push((topic.id, p.index, p.leader_epoch));
                    }
                }
            }
            self.assigned = Some((image.clone(), assigned));
        }
        self.assigned.as_ref().map_or(&[], |(_, a)| a.as_slice())
    }

    /// The partitions to fetch in this round: followed, open, and not delayed.
    fn partitions(&mut self, image: &Arc<MetadataImage>) -> Vec<Followed> {
        let now = Instant::now();
        self.delayed.retain(|_, until| *until > now);
        let assigned = self.assigned(image).to_vec();
        let mut round = Vec::new();
        for (topic_id, index, leader_epoch) in assigned {
            if self.delayed.contains_key(&(topic_id, index)) {
                continue;
            }
            if let Some(partition) = self.broker.replica_manager.replica(topic_id, index) {
                round.push(Followed { partition, leader_epoch });
            }
        }
        round
    }

    /// The Fetch for this round, at the newest version (names by id, `ReplicaState`);
    /// [`version_of`] adapts it to the version the connection agreed. In the fetch
    /// session, only the partitions whose fetch state changed are named; and whether the
    /// fetch is a full one.
    fn request(&mut self, image: &MetadataImage, round: &[Followed]) -> (FetchRequest, bool) {
        let config = self.broker.config();
        let epoch = self.broker.cluster_link().and_then(|l| l.registration().epoch).unwrap_or(-1);
        let wanted = round
            .iter()
            .map(|f| {
                let log = &f.partition.log;
                let offsets = log.offsets();
                let data = FetchPartition {
                    partition: f.partition.index,
                    current_leader_epoch: f.leader_epoch,
                    fetch_offset: offsets.log_end_offset,
                    last_fetched_epoch: log.leader_epochs().last().map_or(-1, |&(epoch, _)| epoch),
                    log_start_offset: offsets.log_start_offset,
                    partition_max_bytes: config.replica_fetch_max_bytes,
                    ..Default::default()
                };
                ((f.partition.topic_id, f.partition.index), data)
            })
            .collect();
        let fetch = self.session.next_fetch(wanted);
        let name = |topic_id: Uuid| image.topic_by_id(topic_id).map(|t| t.name.clone()).unwrap_or_default();
        let mut topics: Vec<FetchTopic> = Vec::new();
        for ((topic_id, _), data) in &fetch.send {
            match topics.iter_mut().find(|t| t.topic_id == *topic_id) {
                Some(t) => t.partitions.push(data.clone()),
                None => topics.push(FetchTopic {
                    topic: name(*topic_id),
                    topic_id: *topic_id,
                    partitions: vec![data.clone()],
                    ..Default::default()
                }),
            }
        }
        let mut forgotten_topics_data: Vec<ForgottenTopic> = Vec::new();
        for (topic_id, index) in &fetch.forget {
            match forgotten_topics_data.iter_mut().find(|t| t.topic_id == *topic_id) {
                Some(t) => t.partitions.push(*index),
                None => forgotten_topics_data.push(ForgottenTopic {
                    topic: name(*topic_id),
                    topic_id: *topic_id,
                    partitions: vec![*index],
                    ..Default::default()
                }),
            }
        }
        let was_full = fetch.is_full();
        let request = FetchRequest {
            replica_id: self.broker.settings.node_id,
            replica_state: ReplicaState {
                replica_id: self.broker.settings.node_id,
                replica_epoch: epoch,
                ..Default::default()
            },
            max_wait_ms: config.replica_fetch_wait_max_ms,
            min_bytes: config.replica_fetch_min_bytes,
            max_bytes: config.replica_fetch_response_max_bytes,
            isolation_level: 0,
            session_id: fetch.session_id,
            session_epoch: fetch.epoch,
            topics,
            forgotten_topics_data,
            ..Default::default()
        };
        (request, was_full)
    }
}

/// The request for `version`: the replica id moved into `ReplicaState` at v15.
fn version_of(mut request: FetchRequest, version: i16) -> FetchRequest {
    if version >= 15 {
        request.replica_id = -1;
    }
    request
}

/// What came of one partition's answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Done,
    /// The leader's metadata and this broker's disagree for now: try again shortly.
    MetadataRace,
    /// Try again after `replica.fetch.backoff.ms`.
    Failed,
}

/// Applies one partition's answer to a fetch made at leader epoch `epoch`, if the replica
/// still follows at that epoch (`Partition::as_follower_at`): a leadership change while
/// the fetch was out voids the answer, and the partition is fetched again from its
/// leader now.
pub(crate) fn apply(partition: &Partition, epoch: i32, data: PartitionData) -> Outcome {
    partition.as_follower_at(epoch, || apply_at_epoch(partition, data)).unwrap_or_else(|| {
        crate::telemetry::replica_fetch_failed("leader_changed");
        Outcome::MetadataRace
    })
}

/// Applies one partition's answer: truncates where the logs diverge, appends the records
/// (and makes them durable before the next fetch, under Osprey's flush policy), and takes
/// the leader's high watermark and log start offset.
fn apply_at_epoch(partition: &Partition, data: PartitionData) -> Outcome {
    let code = super::isr::error_code(data.error_code);
    match code {
        ErrorCode::NONE => {}
        ErrorCode::NOT_LEADER_OR_FOLLOWER
        | ErrorCode::FENCED_LEADER_EPOCH
        | ErrorCode::UNKNOWN_LEADER_EPOCH
        | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        | ErrorCode::UNKNOWN_TOPIC_ID => return Outcome::MetadataRace,
        ErrorCode::OFFSET_OUT_OF_RANGE => {
            return out_of_range(partition, &data);
        }
        other => {
            tracing::warn!(topic = %partition.topic, partition = partition.index, error = other.name(), "replica fetch failed for the partition");
            crate::telemetry::replica_fetch_failed(other.name());
            return Outcome::Failed;
        }
    }
    let diverging = &data.diverging_epoch;
    if diverging.epoch >= 0 || diverging.end_offset >= 0 {
        return truncate_diverging(partition, diverging.epoch, diverging.end_offset);
    }
    let records = data.records.unwrap_or_default();
    if !records.is_empty() {
        let log = &partition.log;
        if let Err(e) = log.append_as_follower(&records, now_ms()) {
            if let Some(unlogged) = FOLLOWER_APPEND_FAILURES_LOGGED.admit(REPEATED_FAILURE_LOG_INTERVAL) {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, unlogged, "replicated batches not appended");
            }
            crate::telemetry::replica_fetch_failed("append");
            return Outcome::Failed;
        }
        crate::telemetry::replica_bytes_in(&partition.topic, records.len() as u64);
        if partition.fsync_before_ack() {
            // The next fetch offset tells the leader this is durable here.
            if let Err(e) = log.flush() {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "replicated batches not made durable");
                crate::telemetry::replica_fetch_failed("fsync");
                return Outcome::Failed;
            }
        }
        partition.log_changed();
    }
    partition.leader_high_watermark(data.high_watermark);
    follow_log_start(partition, data.log_start_offset);
    Outcome::Done
}

/// The leader's log diverges from this one after `epoch` ends at `end_offset`
/// (KIP-320): truncate to where they agree, as Kafka's `truncateOnFetchResponse`. The
/// next fetch names this log's new last epoch, and the leader checks again.
fn truncate_diverging(partition: &Partition, epoch: i32, end_offset: i64) -> Outcome {
    let log = &partition.log;
    let diverging = EpochEnd { epoch, end_offset };
    let to = truncation_offset(diverging, log.high_watermark(), log.log_end_offset(), |e| log.end_offset_for_epoch(e));
    truncate(partition, to, "the log diverges from the leader's")
}

fn truncate(partition: &Partition, offset: i64, why: &str) -> Outcome {
    match partition.log.truncate_to(offset) {
        Ok(end) => {
            tracing::info!(topic = %partition.topic, partition = partition.index, truncated_to = end, "log truncated: {why}");
            crate::telemetry::replica_truncated();
            partition.log_truncated();
            Outcome::Done
        }
        Err(e) => {
            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "truncation failed");
            Outcome::Failed
        }
    }
}

/// OFFSET_OUT_OF_RANGE: this log ends past the leader's (after an unclean election) or
/// before its log start (retention or DeleteRecords removed what this follower lacks).
/// The first is truncated to the leader's high watermark; the second starts over, empty,
/// at the leader's log start offset (Kafka's `truncateFullyAndStartAt`).
fn out_of_range(partition: &Partition, data: &PartitionData) -> Outcome {
    let end = partition.log.log_end_offset();
    if data.log_start_offset >= 0 && end < data.log_start_offset {
        return match partition.log.truncate_fully_and_start_at(data.log_start_offset) {
            Ok(start) => {
                tracing::warn!(topic = %partition.topic, partition = partition.index, log_end_offset = end, restarted_at = start, "this replica ended before the leader's log starts: emptied, it fetches from the leader's log start");
                crate::telemetry::replica_truncated();
                partition.log_truncated();
                Outcome::Done
            }
            Err(e) => {
                tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "the log could not start over at the leader's log start");
                Outcome::Failed
            }
        };
    }
    if data.high_watermark >= 0 && end > data.high_watermark {
        return truncate(partition, data.high_watermark, "it ends past the leader's log");
    }
    crate::telemetry::replica_fetch_failed("out_of_range");
    Outcome::Failed
}

/// The leader's log start offset moved (retention, DeleteRecords): follow it, up to what
/// is committed here.
fn follow_log_start(partition: &Partition, leader_log_start_offset: i64) {
    let log = &partition.log;
    let target = leader_log_start_offset.min(log.high_watermark());
    if target > log.log_start_offset() {
        if let Err(e) = log.delete_records_before(target) {
            tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e, "log start offset not moved to the leader's");
        }
    }
}
