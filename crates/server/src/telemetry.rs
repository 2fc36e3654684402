//! Prometheus metrics. Every name is documented here and in the README; units are in
//! the names (`_seconds`, `_bytes`).
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `osprey_requests_total` | counter | api, version | requests answered (or, for acks=0, handled) |
//! | `osprey_request_errors_total` | counter | api, version | requests that closed their connection |
//! | `osprey_request_duration_seconds` | histogram | api | from frame read to response written |
//! | `osprey_request_stage_seconds` | histogram | api, stage | the same time split into `queue`, `local`, `remote`, `response_queue`, `send` ([`stages`]) |
//! | `osprey_requests_in_flight` | gauge | | requests read and not yet answered |
//! | `osprey_request_queue_size` | gauge | | requests read whose handler has not started (their connection's unwritten responses fill its budget) |
//! | `osprey_response_bytes_total` | counter | api | response bytes written |
//! | `osprey_error_codes_total` | counter | api, error | partition/topic-level error codes returned |
//! | `osprey_connections` | gauge | | open client connections |
//! | `osprey_frames_rejected_total` | counter | | frames over `socket.request.max.bytes` or negative (each also logged, at most once a second) |
//! | `osprey_quota_throttle_seconds` | histogram | quota | throttle time given to clients over a client quota (`produce`, `fetch`, `request`); `_count` is the throttled responses, `_sum` the seconds |
//! | `osprey_reads_paused_total` | counter | bound | times reading from a connection paused at `queued.max.request.bytes` or `osprey.max.pending.response.bytes.per.connection` |
//! | `osprey_topic_bytes_in_total` | counter | topic | record bytes appended |
//! | `osprey_topic_bytes_out_total` | counter | topic | record bytes returned by fetches |
//! | `osprey_topic_messages_in_total` | counter | topic | records appended |
//! | `osprey_topic_produce_requests_total` | counter | topic | partitions of Produce requests for the topic |
//! | `osprey_topic_failed_produce_requests_total` | counter | topic | of those, the ones answered with an error |
//! | `osprey_topic_fetch_requests_total` | counter | topic | partitions of Fetch requests (consumers' and followers') for the topic |
//! | `osprey_topic_failed_fetch_requests_total` | counter | topic | of those, the ones answered with an error |
//! | `osprey_partition_log_size_bytes` | gauge | topic, partition | bytes of log on disk |
//! | `osprey_partition_log_segments` | gauge | topic, partition | segments of the log |
//! | `osprey_partition_log_start_offset` | gauge | topic, partition | log start offset |
//! | `osprey_partition_log_end_offset` | gauge | topic, partition | log end offset |
//! | `osprey_partition_high_watermark` | gauge | topic, partition | high watermark |
//! | `osprey_groups` | gauge | state | consumer groups by state (Empty, Stable, PreparingRebalance, ...) |
//! | `osprey_group_generation` | gauge | group | the group's generation: each rebalance adds one |
//! | `osprey_group_members` | gauge | group | the group's members (classic or KIP-848) |
//! | `osprey_consumer_committed_offset` | gauge | group, topic, partition | the group's committed offset |
//! | `osprey_consumer_lag` | gauge | group, topic, partition | high watermark minus the committed offset, for the partitions the coordinator holds a replica of |
//! | `osprey_fsyncs_total` | counter | | group-commit fsyncs of partition logs |
//! | `osprey_fsync_duration_seconds` | histogram | | duration of each of them |
//! | `osprey_fsync_max_seconds` | gauge | | the slowest one since start |
//! | `osprey_fsync_errors_total` | counter | | failed fsyncs (each takes a partition offline) |
//! | `osprey_journal_entries_total` | counter | | appends (and truncations) recorded in the commit journal |
//! | `osprey_journal_fsyncs_total` | counter | | commit journal fsyncs (each also in `osprey_fsync_duration_seconds`) |
//! | `osprey_journal_bytes_total` | counter | | bytes written to commit journal files |
//! | `osprey_journal_errors_total` | counter | | failed journal writes or fsyncs (the journal then stops; its partitions fsync their own segments) |
//! | `osprey_journal_files_retired_total` | counter | | journal files retired (their partitions fsynced, the file deleted) |
//! | `osprey_journal_replayed_batches_total` | counter | | batches appended from the journal at start-up (after a crash) |
//! | `osprey_fetch_sends_cut_short_total` | counter | | fetch responses whose records, sent from a segment file, found the file shorter than declared (truncated under them): the connection was closed |
//! | `osprey_offline_partition_logs` | gauge | | partition logs held here that went offline after an I/O failure (fsync, roll, truncation); they refuse appends until restart |
//! | `osprey_producer_ids_allocated_total` | counter | | producer ids handed out (idempotent and transactional) |
//! | `osprey_txn_commits_total` | counter | | transactions committed (CompleteCommit durable) |
//! | `osprey_txn_aborts_total` | counter | | transactions aborted (by the client, a timeout or a fence) |
//! | `osprey_txn_fenced_producers_total` | counter | | producer epochs fenced by a new instance of the transactional id or a timeout |
//! | `osprey_txn_ongoing` | gauge | | transactions open or completing on this coordinator |
//! | `osprey_txn_transactional_ids` | gauge | | transactional ids this coordinator holds |
//! | `osprey_txn_markers_total` | counter | result | transaction markers made durable (commit, abort) |
//! | `osprey_log_damaged_ranges_total` | counter | kind | offset ranges partition logs lost to damage found when they were opened (cut_short, missing_segment, gap, overlapping) |
//! | `osprey_log_damaged_bytes_total` | counter | | bytes cut from damaged sealed segments at open (copied aside to `.damaged` files) |
//! | `osprey_log_scrub_bytes_total` | counter | | sealed segment bytes the scrubber verified |
//! | `osprey_log_scrub_corrupt_batches_total` | counter | | batches the scrubber found corrupt (each also logged) |
//! | `osprey_interbroker_requests_total` | counter | api, result | requests this node sent to another node (`interbroker`): ok, timeout, disconnected, connect_failed, unsupported, malformed, invalid |
//! | `osprey_interbroker_request_duration_seconds` | histogram | api | from a request's send to its response or failure, connecting included |
//! | `osprey_interbroker_connection_attempts_total` | counter | | connections this node opened to other nodes, tried |
//! | `osprey_interbroker_connection_failures_total` | counter | | of those, the ones that failed (connect or ApiVersions handshake) |
//! | `osprey_interbroker_connections` | gauge | | open connections to other nodes |
//! | `osprey_quorum_voter_replacements_total` | counter | | quorum voters the active controller replaced by the same node under a new metadata directory id (each also logged) |
//! | `osprey_internal_topic_create_errors_total` | counter | internal_topic | failed attempts to create `__consumer_offsets` or `__transaction_state` or open their logs (logged at most every 10 s per topic, with what to do) |
//! | `osprey_build_info` | gauge | version | 1, with the running version |
//! | `osprey_runtime_workers` | gauge | | worker threads of the async runtime |
//! | `osprey_runtime_worker_busy_seconds_total` | counter | | time those workers spent running tasks, summed |
//! | `osprey_runtime_global_queue_depth` | gauge | | tasks ready to run waiting in the runtime's shared queue |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | counter, gauges | | Prometheus' standard process metrics, from /proc |
//!
//! The last five rows are rendered at each scrape by [`process`] (the metrics crate's
//! counters are integers; CPU seconds are not).
//!
//! A series labelled with a deleted topic or group leaves `/metrics` once untouched for
//! [`IDLE_TIMEOUT`]; [`KeepAlive`] touches every other one at each refresh.

use crate::broker::Broker;
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Key,
    KeyName, Level, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use metrics_util::MetricKindMask;
use osprey_coordinator::group::{ConsumerGroupState, GroupState};
use osprey_protocol::{ApiKey, ErrorCode};
use osprey_storage::DamageKind;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

mod http;
mod process;
pub mod stages;

/// How often the partition and group gauges are refreshed and every live series touched.
const REFRESH: Duration = Duration::from_secs(5);

/// How often the recorder does its housekeeping (the exporter's default).
const UPKEEP: Duration = Duration::from_secs(5);

/// A counter or gauge untouched for this long leaves `/metrics` at the next scrape: the
/// series of deleted topics and groups, which [`KeepAlive`] stops touching. Well above
/// [`REFRESH`], so that a late refresh never drops (and so resets) a live series.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts the Prometheus endpoint (`GET /metrics`) and the periodic refresher, which
/// touches the global series until [`Telemetry::serve_broker`] hands it a broker, and
/// from then on refreshes its partition and group gauges too. Must run inside the tokio
/// runtime, and before anything that records a metric: a value recorded before the
/// recorder exists is lost (a combined node's controller became active before its
/// broker opened, and `osprey_controller_active` never appeared).
pub fn install(addr: SocketAddr) -> Result<Telemetry, String> {
    let kept = install_recorder(addr)?;
    let broker: Arc<OnceLock<Arc<Broker>>> = Arc::default();
    let served = broker.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REFRESH);
        loop {
            tick.tick().await;
            match served.get() {
                Some(broker) => {
                    refresh_partition_gauges(broker);
                    let groups = refresh_group_gauges(broker);
                    let topics = broker.image().topics().map(|t| t.name.clone()).collect();
                    kept.touch(&topics, &groups);
                }
                // No partitions or groups yet (a controller-only node never has any):
                // the global series (the quorum's, the inter-broker client's) kept alive.
                None => kept.touch(&HashSet::new(), &HashSet::new()),
            }
        }
    });
    Ok(Telemetry { broker })
}

/// The installed endpoint; a node with the broker role hands it its broker once open.
pub struct Telemetry {
    broker: Arc<OnceLock<Arc<Broker>>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("serves_broker", &self.broker.get().is_some()).finish()
    }
}

impl Telemetry {
    /// The partition and group gauges of `broker` are exported from now on: refreshed
    /// once at once (what recovery found when the logs were opened is there from the
    /// first scrape, not only after the first periodic refresh), then with the others.
    pub fn serve_broker(&self, broker: Arc<Broker>) {
        refresh_partition_gauges(&broker);
        refresh_group_gauges(&broker);
        let _ = self.broker.set(broker);
    }
}

/// The Prometheus recorder and its HTTP listener on `addr`, installed as the global one.
fn install_recorder(addr: SocketAddr) -> Result<KeepAlive, String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Suffix("duration_seconds".into()),
            &[0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0],
        )
        .and_then(|b| {
            // Finer at the low end: queueing and sending often take microseconds.
            b.set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full("osprey_request_stage_seconds".into()),
                &[
                    0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 10.0,
                ],
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full("osprey_quota_throttle_seconds".into()),
                &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0],
            )
        })
        .map_err(|e| e.to_string())?
        .idle_timeout(MetricKindMask::COUNTER | MetricKindMask::GAUGE, Some(IDLE_TIMEOUT))
        .build_recorder();
    let handle = recorder.handle();
    http::serve(addr, handle.clone())?;
    // What the exporter's own listener did: histograms' and idle series' housekeeping.
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
    let kept = KeepAlive::new(recorder);
    metrics::set_global_recorder(kept.clone()).map_err(|e| e.to_string())?;
    describe();
    Ok(kept)
}

/// The Prometheus recorder, remembering every counter and gauge registered so that each
/// refresh can touch the live ones. The exporter drops a series untouched for
/// [`IDLE_TIMEOUT`], so a deleted topic's or group's series leave `/metrics` (as Kafka
/// removes a deleted topic's metrics) while a global counter that rarely moves stays.
#[derive(Clone)]
struct KeepAlive(Arc<Kept>);

struct Kept {
    prometheus: PrometheusRecorder,
    counters: RwLock<HashSet<Key>>,
    gauges: RwLock<HashSet<Key>>,
}

/// Touches carry no metadata the exporter uses.
static TOUCH: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

impl KeepAlive {
    fn new(prometheus: PrometheusRecorder) -> KeepAlive {
        KeepAlive(Arc::new(Kept { prometheus, counters: RwLock::default(), gauges: RwLock::default() }))
    }

    fn remember(keys: &RwLock<HashSet<Key>>, key: &Key) {
        if !keys.read().unwrap_or_else(PoisonError::into_inner).contains(key) {
            keys.write().unwrap_or_else(PoisonError::into_inner).insert(key.clone());
        }
    }

    /// Forgets the series labelled with a topic or group not in these, and touches the
    /// others (adding 0 counts as an update).
    fn touch(&self, topics: &HashSet<String>, groups: &HashSet<String>) {
        let alive = |key: &Key| {
            key.labels().all(|label| match label.key() {
                "topic" => topics.contains(label.value()),
                "group" => groups.contains(label.value()),
                _ => true,
            })
        };
        let mut counters = self.0.counters.write().unwrap_or_else(PoisonError::into_inner);
        counters.retain(|key| alive(key));
        for key in counters.iter() {
            self.0.prometheus.register_counter(key, &TOUCH).increment(0);
        }
        drop(counters);
        let mut gauges = self.0.gauges.write().unwrap_or_else(PoisonError::into_inner);
        gauges.retain(|key| alive(key));
        for key in gauges.iter() {
            self.0.prometheus.register_gauge(key, &TOUCH).increment(0.0);
        }
    }
}

impl Recorder for KeepAlive {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.prometheus.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.prometheus.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.prometheus.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        KeepAlive::remember(&self.0.counters, key);
        self.0.prometheus.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        KeepAlive::remember(&self.0.gauges, key);
        self.0.prometheus.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.prometheus.register_histogram(key, metadata)
    }
}

fn describe() {
    describe_counter!("osprey_requests_total", "Requests handled, by API key and version.");
    describe_counter!(
        "osprey_tls_handshake_failures_total",
        "TLS handshakes that failed on an SSL listener, by listener and reason (timeout, not_tls, client_alert, client_certificate, principal_mapping, other)."
    );
    describe_counter!(
        "osprey_tls_reloads_total",
        "Reloads of an SSL listener's key store and trust store after their files changed, by listener and result (success, failure)."
    );
    describe_counter!(
        "osprey_sasl_authentication_failures_total",
        "Failed SASL authentications on a SASL listener, by listener and mechanism (UNSUPPORTED: a mechanism not enabled); each closes its connection."
    );
    describe_counter!(
        "osprey_authorization_failures_total",
        "Operations the authorizer refused (authorizer.class.name), by resource type and operation; topics hidden from Metadata and groups left out of ListGroups count too."
    );
    describe_counter!("osprey_request_errors_total", "Requests that closed their connection (malformed, unsupported).");
    describe_histogram!("osprey_request_duration_seconds", Unit::Seconds, "Time from frame read to response written.");
    describe_histogram!(
        "osprey_quota_throttle_seconds",
        Unit::Seconds,
        "Throttle time given to clients over a client quota, by quota (produce, fetch, request); each response throttled is one observation."
    );
    describe_histogram!(
        "osprey_request_stage_seconds",
        Unit::Seconds,
        "Request time by stage: queue (until handled), local (handler work), remote (delayed operations: long poll, acks), response_queue (behind the connection's earlier responses), send (until written)."
    );
    describe_gauge!("osprey_requests_in_flight", "Requests read and not yet answered.");
    describe_gauge!("osprey_request_queue_size", "Requests read whose handler has not started yet.");
    // Shown at 0 from the start; `increment`, not `set`: a request may be in flight already.
    gauge!("osprey_requests_in_flight").increment(0.0);
    gauge!("osprey_request_queue_size").increment(0.0);
    describe_counter!("osprey_response_bytes_total", Unit::Bytes, "Response bytes written.");
    describe_counter!("osprey_error_codes_total", "Error codes returned in responses, by API and error name.");
    describe_gauge!("osprey_connections", "Open client connections.");
    describe_counter!(
        "osprey_accept_errors_total",
        "Failed accepts of new connections (e.g. out of file descriptors)."
    );
    describe_counter!("osprey_frames_rejected_total", "Frames refused for a size outside socket.request.max.bytes.");
    describe_counter!(
        "osprey_reads_paused_total",
        "Times reading from a connection paused at a memory bound, by bound."
    );
    describe_counter!("osprey_topic_bytes_in_total", Unit::Bytes, "Record batch bytes appended, by topic.");
    describe_counter!("osprey_topic_bytes_out_total", Unit::Bytes, "Record batch bytes fetched, by topic.");
    describe_counter!("osprey_topic_messages_in_total", "Records appended, by topic.");
    describe_counter!("osprey_topic_produce_requests_total", "Partitions of Produce requests, by topic.");
    describe_counter!(
        "osprey_topic_failed_produce_requests_total",
        "Partitions of Produce requests answered with an error, by topic."
    );
    describe_counter!("osprey_topic_fetch_requests_total", "Partitions of Fetch requests, by topic.");
    describe_counter!(
        "osprey_topic_failed_fetch_requests_total",
        "Partitions of Fetch requests answered with an error, by topic."
    );
    describe_gauge!("osprey_partition_log_size_bytes", Unit::Bytes, "Log size on disk, by partition.");
    describe_gauge!("osprey_partition_log_segments", "Log segments, by partition.");
    describe_gauge!("osprey_partition_log_start_offset", "Log start offset, by partition.");
    describe_gauge!("osprey_partition_log_end_offset", "Log end offset, by partition.");
    describe_gauge!("osprey_partition_high_watermark", "High watermark, by partition.");
    describe_gauge!("osprey_groups", "Consumer groups by state.");
    describe_gauge!("osprey_group_generation", "Generation of each group; every rebalance adds one.");
    describe_gauge!("osprey_group_members", "Members of each group.");
    describe_gauge!("osprey_consumer_committed_offset", "Committed offset, by group and partition.");
    describe_gauge!("osprey_consumer_lag", "High watermark minus the committed offset, by group and partition.");
    describe_counter!("osprey_fsyncs_total", "Group-commit fsyncs of partition logs.");
    describe_histogram!("osprey_fsync_duration_seconds", Unit::Seconds, "Duration of each partition log fsync.");
    osprey_storage::set_fsync_observer(|took| histogram!("osprey_fsync_duration_seconds").record(took.as_secs_f64()));
    describe_gauge!("osprey_fsync_max_seconds", Unit::Seconds, "The slowest partition log fsync since start.");
    describe_counter!("osprey_fsync_errors_total", "Failed partition log fsyncs.");
    describe_counter!("osprey_journal_entries_total", "Appends and truncations recorded in the commit journal.");
    describe_counter!(
        "osprey_journal_fsyncs_total",
        "Commit journal fsyncs, each covering the appends of many partitions."
    );
    describe_counter!("osprey_journal_bytes_total", Unit::Bytes, "Bytes written to commit journal files.");
    describe_counter!(
        "osprey_journal_errors_total",
        "Failed commit journal writes or fsyncs; the journal then stops and its partitions fsync their own segments."
    );
    describe_counter!(
        "osprey_journal_files_retired_total",
        "Commit journal files retired (partitions fsynced, file deleted)."
    );
    describe_counter!("osprey_journal_replayed_batches_total", "Batches appended from the commit journal at start-up.");
    describe_counter!(
        "osprey_fetch_sends_cut_short_total",
        "Fetch responses whose segment file was cut shorter while being sent (connection closed)."
    );
    describe_gauge!(
        "osprey_offline_partition_logs",
        "Partition logs held here that went offline after an I/O failure (until restart)."
    );
    describe_counter!("osprey_producer_ids_allocated_total", "Producer ids handed out.");
    describe_counter!("osprey_txn_commits_total", "Transactions committed.");
    describe_counter!("osprey_txn_aborts_total", "Transactions aborted (client, timeout, fence).");
    describe_counter!("osprey_txn_fenced_producers_total", "Producer epochs fenced by a newer instance or a timeout.");
    describe_gauge!("osprey_txn_ongoing", "Transactions open or completing.");
    describe_gauge!("osprey_controller_active", "1 on the active controller, else 0 (ActiveControllerCount).");
    describe_gauge!("osprey_controller_fenced_brokers", "Fenced brokers, on the active controller.");
    describe_gauge!("osprey_controller_active_brokers", "Unfenced brokers, on the active controller.");
    describe_gauge!("osprey_controller_offline_partitions", "Partitions without a leader, on the active controller.");
    describe_gauge!(
        "osprey_controller_preferred_replica_imbalance",
        "Partitions not led by their preferred (first) replica, on the active controller."
    );
    describe_counter!(
        "osprey_controller_preferred_leader_elections_total",
        "Partitions the automatic rebalance moved back to their preferred replica, on the active controller."
    );
    describe_gauge!("osprey_broker_metadata_offset", "Offset of the last metadata record this broker applied.");
    describe_gauge!("osprey_broker_fenced", "1 while the controller has this broker fenced, else 0.");
    describe_counter!("osprey_broker_heartbeat_failures_total", "Heartbeats to the controller that failed, by reason.");
    describe_counter!(
        "osprey_coordinator_reads_refused_total",
        "OffsetFetch answers refused as possibly stale (NOT_COORDINATOR), by reason."
    );
    describe_counter!(
        "osprey_coordinator_lookups_refused_total",
        "FindCoordinator keys that would have named this broker while it held no lease (COORDINATOR_NOT_AVAILABLE)."
    );
    describe_counter!(
        "osprey_produce_gaps_answered_as_refusals_total",
        "Idempotent batches out of sequence only because this broker refused their predecessors moments \
         before (answered with that refusal, not OUT_OF_ORDER_SEQUENCE_NUMBER)."
    );
    describe_counter!(
        "osprey_broker_metadata_fetch_failures_total",
        "Metadata fetches from the controllers that failed."
    );
    describe_gauge!("osprey_partitions", "Partition replicas held on this broker.");
    describe_gauge!("osprey_leader_partitions", "Partitions this broker leads.");
    describe_gauge!("osprey_fetch_sessions", "Incremental fetch sessions (KIP-227) this broker holds.");
    describe_counter!("osprey_fetch_requests_total", "Fetch requests served, by session kind.");
    describe_counter!(
        "osprey_share_records_acquired_total",
        "Records acquired by share consumers (deliveries, redeliveries included)."
    );
    describe_counter!("osprey_share_acknowledgements_total", "Share acknowledgement batches applied, by outcome.");
    describe_counter!(
        "osprey_share_state_writes_total",
        "Share partition state writes to the share coordinator, by result."
    );
    describe_counter!(
        "osprey_share_lock_expiries_total",
        "Ticks on which acquisition locks expired and records became available again."
    );
    describe_counter!(
        "osprey_share_dlq_writes_total",
        "Share partitions' dead-letter queue writes (KIP-1191), by result (failed: archived without DLQ records)."
    );
    describe_counter!("osprey_share_dlq_records_total", "Records written to share groups' dead-letter queue topics.");
    describe_gauge!("osprey_share_sessions", "Open share sessions on this broker.");
    describe_gauge!(
        "osprey_under_replicated_partitions",
        "Partitions led here whose ISR is smaller than their replicas."
    );
    describe_gauge!("osprey_under_min_isr_partitions", "Partitions led here whose ISR is below min.insync.replicas.");
    describe_gauge!("osprey_at_min_isr_partitions", "Partitions led here whose ISR is exactly min.insync.replicas.");
    describe_gauge!("osprey_replica_max_lag_messages", "The most offsets a follower is behind a partition led here.");
    describe_gauge!("osprey_produce_acks_all_waiting", "Produce requests waiting for their acknowledgement.");
    describe_counter!("osprey_isr_shrinks_total", "ISR shrinks of partitions led here.");
    describe_counter!("osprey_isr_expands_total", "ISR expansions of partitions led here.");
    describe_counter!(
        "osprey_coordinator_load_failures_total",
        "Loads of a __consumer_offsets or __transaction_state partition that failed, by coordinator; each is retried after a back-off."
    );
    describe_counter!("osprey_isr_change_failures_total", "AlterPartition requests not taken, by reason.");
    describe_counter!("osprey_replica_fetch_failures_total", "Follower fetches that failed, by reason.");
    describe_counter!("osprey_replication_bytes_in_total", Unit::Bytes, "Bytes a follower appended from its leaders.");
    describe_counter!("osprey_replica_truncations_total", "Follower logs cut where they diverged from the leader's.");
    describe_counter!(
        "osprey_controller_unclean_leader_elections_total",
        "Partitions given a leader outside their ISR, on the active controller."
    );
    describe_gauge!("osprey_txn_transactional_ids", "Transactional ids held by this coordinator.");
    describe_counter!("osprey_txn_markers_total", "Transaction markers made durable, by result.");
    describe_counter!("osprey_log_damaged_ranges_total", "Offset ranges lost to log damage found at open, by kind.");
    describe_counter!("osprey_log_damaged_bytes_total", Unit::Bytes, "Bytes cut from damaged sealed segments at open.");
    describe_counter!("osprey_log_scrub_bytes_total", Unit::Bytes, "Sealed segment bytes verified by the scrubber.");
    describe_counter!("osprey_log_scrub_corrupt_batches_total", "Corrupt batches found by the scrubber.");
    describe_counter!("osprey_interbroker_requests_total", "Requests sent to other nodes, by API and result.");
    describe_histogram!(
        "osprey_interbroker_request_duration_seconds",
        Unit::Seconds,
        "Time from sending a request to another node to its response or failure."
    );
    describe_counter!("osprey_interbroker_connection_attempts_total", "Connections to other nodes tried.");
    describe_counter!("osprey_interbroker_connection_failures_total", "Connections to other nodes that failed.");
    describe_gauge!("osprey_interbroker_connections", "Open connections to other nodes.");
    describe_counter!(
        "osprey_quorum_voter_replacements_total",
        "Quorum voters replaced by the same node under a new metadata directory id (it lost its disk)."
    );
    describe_counter!(
        "osprey_internal_topic_create_errors_total",
        "Failed attempts to create an internal topic or open its logs, by internal topic."
    );
    // The label is not `topic`: a `topic` series leaves /metrics while its topic does not
    // exist, and this one matters most then. Shown at 0 from the start, so a scrape can
    // tell "no failure" from "not exported".
    for topic in [crate::groups::OFFSETS_TOPIC, osprey_coordinator::txn::TRANSACTION_STATE_TOPIC_NAME] {
        counter!("osprey_internal_topic_create_errors_total", "internal_topic" => topic).increment(0);
    }
    // Shown at 0 from the start, so a scrape can tell "none yet" from "not exported", and
    // so that `increase()` in an alert rule sees the first event (a series that appears
    // at 1 has no earlier sample to increase from).
    for name in [
        "osprey_isr_shrinks_total",
        "osprey_isr_expands_total",
        "osprey_controller_unclean_leader_elections_total",
        "osprey_replica_truncations_total",
        "osprey_producer_ids_allocated_total",
        "osprey_txn_commits_total",
        "osprey_txn_aborts_total",
        "osprey_txn_fenced_producers_total",
        "osprey_log_damaged_bytes_total",
        "osprey_log_scrub_bytes_total",
        "osprey_log_scrub_corrupt_batches_total",
    ] {
        counter!(name).increment(0);
    }
    gauge!("osprey_txn_ongoing").set(0.0);
}

/// Every state a group can be listed in, classic and KIP-848 consumer groups alike, at
/// 0: a state no group is in any more must be set back to 0 at each refresh, or its
/// gauge keeps the count of its last refresh (a deleted consumer group stayed counted
/// as Reconciling).
fn zeroed_group_states() -> std::collections::BTreeMap<String, u64> {
    let classic = GroupState::ALL.iter().map(|s| s.name());
    let consumer = ConsumerGroupState::ALL.iter().map(|s| s.name());
    classic.chain(consumer).map(|state| (state.to_string(), 0)).collect()
}

/// Returns the groups listed, whose series stay.
fn refresh_group_gauges(broker: &Arc<Broker>) -> HashSet<String> {
    let listed = broker.groups.call(broker, |c, _| c.list_groups(&[], &[], 5));
    let mut by_state = zeroed_group_states();
    let image = broker.image();
    for g in &listed.groups {
        *by_state.entry(g.group_state.clone()).or_default() += 1;
        let (generation, members, offsets) = broker.groups.call(broker, |c, _| {
            let generation = c.generation(&g.group_id).unwrap_or(0);
            (generation, c.member_count(&g.group_id), c.fetch_offsets(&g.group_id, None, false))
        });
        gauge!("osprey_group_generation", "group" => g.group_id.clone()).set(f64::from(generation));
        gauge!("osprey_group_members", "group" => g.group_id.clone()).set(members as f64);
        for t in &offsets.topics {
            let Some(topic) = image.topic(&t.name) else { continue };
            for p in &t.partitions {
                if p.committed_offset < 0 {
                    continue;
                }
                let labels = [
                    ("group", g.group_id.clone()),
                    ("topic", t.name.clone()),
                    ("partition", p.partition_index.to_string()),
                ];
                gauge!("osprey_consumer_committed_offset", &labels).set(p.committed_offset as f64);
                // Lag needs the high watermark: any replica held here, leader or follower
                // (the coordinator leads few of the partitions its groups consume; a
                // follower's high watermark trails the leader's by at most one fetch).
                let Some(partition) = broker.replica_manager.replica(topic.id, p.partition_index) else { continue };
                let lag = (partition.log.high_watermark() - p.committed_offset).max(0);
                gauge!("osprey_consumer_lag", &labels).set(lag as f64);
            }
        }
    }
    for (state, n) in by_state {
        gauge!("osprey_groups", "state" => state).set(n as f64);
    }
    listed.groups.into_iter().map(|g| g.group_id).collect()
}

/// Replication, as an operator watches it (the reference articles' list; the README
/// maps each to Kafka's JMX name): partitions and leaders held here, and of those led
/// here the under-replicated ones, those under and at `min.insync.replicas`, the largest
/// follower lag, the produce requests waiting for acks=all. (Offline partitions are the
/// active controller's: `osprey_controller_offline_partitions`.)
fn refresh_replication_gauges(broker: &Broker) {
    let (mut leaders, mut under_replicated, mut under_min_isr, mut at_min_isr) = (0u64, 0u64, 0u64, 0u64);
    let (mut max_lag, mut waiting) = (0i64, 0usize);
    let all = broker.replica_manager.partitions();
    for p in &all {
        let Some(status) = p.replication_status() else { continue };
        leaders += 1;
        under_replicated += u64::from(status.isr < status.replicas);
        under_min_isr += u64::from(status.isr < status.min_isr);
        at_min_isr += u64::from(status.isr == status.min_isr);
        max_lag = max_lag.max(status.max_follower_lag);
        waiting += status.waiting;
    }
    gauge!("osprey_partitions").set(all.len() as f64);
    gauge!("osprey_leader_partitions").set(leaders as f64);
    gauge!("osprey_under_replicated_partitions").set(under_replicated as f64);
    gauge!("osprey_under_min_isr_partitions").set(under_min_isr as f64);
    gauge!("osprey_at_min_isr_partitions").set(at_min_isr as f64);
    gauge!("osprey_replica_max_lag_messages").set(max_lag as f64);
    gauge!("osprey_produce_acks_all_waiting").set(waiting as f64);
    gauge!("osprey_fetch_sessions").set(broker.fetch_sessions().len() as f64);
}

/// A Fetch served: without a session, opening one (full) or in one (incremental).
pub fn fetch_served(session: &'static str) {
    counter!("osprey_fetch_requests_total", "session" => session).increment(1);
}

/// `count` records acquired by a share consumer.
pub fn share_records_acquired(count: i64) {
    counter!("osprey_share_records_acquired_total").increment(count.max(0) as u64);
}

/// A share acknowledgement applied (`ok`) or refused (the error's name).
pub fn share_acknowledgement(outcome: &'static str) {
    counter!("osprey_share_acknowledgements_total", "outcome" => outcome).increment(1);
}

/// A share state write completed: `ok` or the error's name.
pub fn share_state_write(result: &'static str) {
    counter!("osprey_share_state_writes_total", "result" => result).increment(1);
}

/// A share partition's dead-letter queue write (KIP-1191) ended: `ok` with the records
/// written, or `failed` (the records are archived without their DLQ records; the log says
/// why). Not labelled by group: group ids are the clients'.
pub fn share_dlq_write(result: &'static str, records: u64) {
    counter!("osprey_share_dlq_writes_total", "result" => result).increment(1);
    counter!("osprey_share_dlq_records_total").increment(records);
}

/// Acquisition locks expired on a share partition.
pub fn share_lock_expiry() {
    counter!("osprey_share_lock_expiries_total").increment(1);
}

/// Share sessions open now.
pub fn share_sessions(open: usize) {
    gauge!("osprey_share_sessions").set(open as f64);
}

/// The leader's ISR changed (AlterPartition committed): expanded or shrunk.
pub fn isr_changed(expanded: bool) {
    let name = if expanded { "osprey_isr_expands_total" } else { "osprey_isr_shrinks_total" };
    counter!(name).increment(1);
}

/// An ISR change not made: the controller was unreachable or refused it.
pub fn isr_change_failed(reason: &'static str) {
    counter!("osprey_isr_change_failures_total", "reason" => reason).increment(1);
}

/// A coordinator (`group` or `transaction`) failed to load one of its partitions.
pub fn coordinator_load_failed(coordinator: &'static str) {
    counter!("osprey_coordinator_load_failures_total", "coordinator" => coordinator).increment(1);
}

/// A follower's fetch failed (the request, or one partition's answer).
pub fn replica_fetch_failed(reason: &'static str) {
    counter!("osprey_replica_fetch_failures_total", "reason" => reason).increment(1);
}

/// Bytes a follower appended from its leader.
pub fn replica_bytes_in(topic: &str, bytes: u64) {
    counter!("osprey_replication_bytes_in_total", "topic" => topic.to_string()).increment(bytes);
}

/// A follower truncated its log where it diverged from its leader's.
pub fn replica_truncated() {
    counter!("osprey_replica_truncations_total").increment(1);
}

fn refresh_partition_gauges(broker: &Broker) {
    refresh_replication_gauges(broker);
    let (mut count, mut max, mut errors, mut offline) = (0u64, 0f64, 0u64, 0u64);
    for p in broker.replica_manager.partitions() {
        let f = p.log.fsync_stats();
        count += f.count;
        max = max.max(f.max.as_secs_f64());
        errors += f.errors;
        offline += u64::from(p.log.is_offline());
        let labels = [("topic", p.topic.clone()), ("partition", p.index.to_string())];
        let offsets = p.log.offsets();
        gauge!("osprey_partition_log_size_bytes", &labels).set(p.log.size_bytes() as f64);
        gauge!("osprey_partition_log_segments", &labels).set(p.log.segment_count() as f64);
        gauge!("osprey_partition_log_start_offset", &labels).set(offsets.log_start_offset as f64);
        gauge!("osprey_partition_log_end_offset", &labels).set(offsets.log_end_offset as f64);
        gauge!("osprey_partition_high_watermark", &labels).set(offsets.high_watermark as f64);
    }
    refresh_damage_counters(broker);
    counter!("osprey_fsyncs_total").absolute(count);
    gauge!("osprey_fsync_max_seconds").set(max);
    counter!("osprey_fsync_errors_total").absolute(errors);
    gauge!("osprey_offline_partition_logs").set(offline as f64);
    if let Some(journal) = &broker.journal {
        let j = journal.stats();
        counter!("osprey_journal_entries_total").absolute(j.entries);
        counter!("osprey_journal_fsyncs_total").absolute(j.fsyncs.count);
        counter!("osprey_journal_bytes_total").absolute(j.bytes);
        counter!("osprey_journal_errors_total").absolute(j.fsyncs.errors);
        counter!("osprey_journal_files_retired_total").absolute(j.retired);
        counter!("osprey_journal_replayed_batches_total").absolute(j.replayed);
    }
}

/// Damage found by recovery when the partitions were opened (each log keeps its report).
fn refresh_damage_counters(broker: &Broker) {
    let kinds = [DamageKind::CutShort, DamageKind::MissingSegment, DamageKind::Gap, DamageKind::Overlapping];
    let mut ranges = [0u64; 4];
    let mut bytes = 0;
    for p in broker.replica_manager.partitions() {
        for d in &p.log.recovery_report().damaged {
            if let Some(i) = kinds.iter().position(|&k| k == d.kind) {
                ranges[i] += 1;
            }
            bytes += d.bytes;
        }
    }
    for (kind, n) in kinds.iter().zip(ranges) {
        counter!("osprey_log_damaged_ranges_total", "kind" => kind.name()).absolute(n);
    }
    counter!("osprey_log_damaged_bytes_total").absolute(bytes);
}

fn api_name(key: Option<ApiKey>) -> &'static str {
    key.map_or("unknown", |k| k.name())
}

/// A request answered (its response written, or for acks=0 handled): counted, with its
/// time in all and per stage.
pub fn request_done(key: Option<ApiKey>, version: i16, times: &stages::RequestTimes, response_bytes: usize) {
    let api = api_name(key);
    counter!("osprey_requests_total", "api" => api, "version" => version.to_string()).increment(1);
    histogram!("osprey_request_duration_seconds", "api" => api).record(times.total().as_secs_f64());
    for (stage, took) in times.stages() {
        histogram!("osprey_request_stage_seconds", "api" => api, "stage" => stage).record(took.as_secs_f64());
    }
    counter!("osprey_response_bytes_total", "api" => api).increment(response_bytes as u64);
}

/// A request read and not yet answered (`osprey_requests_in_flight`, for as long as
/// this lives), and until its handler starts, waiting for it
/// (`osprey_request_queue_size`).
#[derive(Debug)]
pub struct InFlight {
    queued: bool,
}

impl InFlight {
    pub fn read() -> InFlight {
        gauge!("osprey_requests_in_flight").increment(1.0);
        gauge!("osprey_request_queue_size").increment(1.0);
        InFlight { queued: true }
    }

    pub fn handler_started(&mut self) {
        if std::mem::take(&mut self.queued) {
            gauge!("osprey_request_queue_size").decrement(1.0);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.handler_started();
        gauge!("osprey_requests_in_flight").decrement(1.0);
    }
}

pub fn request_failed(key: Option<ApiKey>, version: i16) {
    counter!("osprey_request_errors_total", "api" => api_name(key), "version" => version.to_string()).increment(1);
}

pub fn error_code(key: ApiKey, code: ErrorCode) {
    if code != ErrorCode::NONE {
        counter!("osprey_error_codes_total", "api" => key.name(), "error" => code.name()).increment(1);
    }
}

pub fn producer_id_allocated() {
    counter!("osprey_producer_ids_allocated_total").increment(1);
}

pub fn txn_marker(committed: bool) {
    counter!("osprey_txn_markers_total", "result" => if committed { "commit" } else { "abort" }).increment(1);
}

/// The transaction coordinator's counters moved by `delta`; `ongoing` and `ids` are its
/// current gauges.
pub fn txn_stats(delta: osprey_coordinator::txn::TxnStats, ongoing: usize, ids: usize) {
    if delta.commits > 0 {
        counter!("osprey_txn_commits_total").increment(delta.commits);
    }
    if delta.aborts > 0 {
        counter!("osprey_txn_aborts_total").increment(delta.aborts);
    }
    if delta.fenced_producers > 0 {
        counter!("osprey_txn_fenced_producers_total").increment(delta.fenced_producers);
    }
    gauge!("osprey_txn_ongoing").set(ongoing as f64);
    gauge!("osprey_txn_transactional_ids").set(ids as f64);
}

pub fn connection_opened() {
    gauge!("osprey_connections").increment(1.0);
}

pub fn connection_closed() {
    gauge!("osprey_connections").decrement(1.0);
}

/// How often a failure that repeats with every retry (a full disk failing each append,
/// a leader that is down) may log its line.
pub(crate) const REPEATED_FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Lets a line that can repeat many times a second into the log at most once per
/// interval, counting the ones it held back, so that a flood never floods the log.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter {
    last_logged_ms: AtomicU64,
    unlogged: AtomicU64,
}

impl LogLimiter {
    pub(crate) const fn new() -> LogLimiter {
        LogLimiter { last_logged_ms: AtomicU64::new(0), unlogged: AtomicU64::new(0) }
    }

    /// `Some(lines held back since the last one)` when this line may be logged now.
    pub(crate) fn admit(&self, interval: Duration) -> Option<u64> {
        let now_ms = crate::broker::now_ms().max(0) as u64;
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) >= interval.as_millis() as u64
            && self.last_logged_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            Some(self.unlogged.swap(0, Ordering::Relaxed))
        } else {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// A request to another node ended (`result` is "ok" or the error's kind).
pub fn interbroker_request(api: &'static str, result: &'static str, started: Instant) {
    counter!("osprey_interbroker_requests_total", "api" => api, "result" => result).increment(1);
    histogram!("osprey_interbroker_request_duration_seconds", "api" => api).record(started.elapsed().as_secs_f64());
}

/// The active controller replaced a voter by the same node's new replica key.
pub fn quorum_voter_replaced() {
    counter!("osprey_quorum_voter_replacements_total").increment(1);
}

pub fn interbroker_connection_attempt() {
    counter!("osprey_interbroker_connection_attempts_total").increment(1);
}

pub fn interbroker_connection_failed() {
    counter!("osprey_interbroker_connection_failures_total").increment(1);
}

pub fn interbroker_connection_opened() {
    gauge!("osprey_interbroker_connections").increment(1.0);
}

pub fn interbroker_connection_closed() {
    gauge!("osprey_interbroker_connections").decrement(1.0);
}

/// A failed `accept` (most often EMFILE: the open-file limit is reached): counted, and
/// logged at most once a second, since the accept loop retries every 50 ms.
pub fn accept_failed(error: &std::io::Error) {
    static LIMITER: LogLimiter = LogLimiter::new();
    counter!("osprey_accept_errors_total").increment(1);
    if let Some(unlogged) = LIMITER.admit(Duration::from_secs(1)) {
        tracing::error!(
            %error,
            unlogged,
            "cannot accept a connection; new connections wait unserved (if this is \"Too many open files\", raise `ulimit -n`)"
        );
    }
}

/// A TLS handshake failed (closed connection; logged at debug by the caller).
pub fn tls_handshake_failed(listener: &str, reason: &'static str) {
    counter!("osprey_tls_handshake_failures_total", "listener" => listener.to_string(), "reason" => reason)
        .increment(1);
}

/// A SASL authentication failed (the connection is answered after
/// `connection.failed.authentication.delay.ms` and closed): counted, and logged at INFO
/// with the peer and why, as Kafka logs it; at most ten lines a second, since clients
/// that are not authenticated choose how often this happens.
pub fn sasl_authentication_failed(peer: SocketAddr, listener: &str, mechanism: &'static str, detail: &str) {
    static LIMITER: LogLimiter = LogLimiter::new();
    counter!("osprey_sasl_authentication_failures_total", "listener" => listener.to_string(), "mechanism" => mechanism)
        .increment(1);
    if let Some(unlogged) = LIMITER.admit(Duration::from_millis(100)) {
        tracing::info!(%peer, listener, mechanism, reason = %detail, unlogged, "failed authentication");
    }
}

/// The authorizer refused `operation` on a resource of `resource_type` (Kafka's names:
/// `TOPIC`, `READ`).
pub fn authorization_failed(resource_type: &'static str, operation: &'static str) {
    counter!("osprey_authorization_failures_total", "resource_type" => resource_type, "operation" => operation)
        .increment(1);
}

/// A connection closed before it authenticated, for breaking the SASL protocol (a
/// request other than ApiVersions, SaslHandshake or SaslAuthenticate, an oversized
/// frame): logged at INFO, at most ten lines a second.
pub fn sasl_protocol_violation(peer: SocketAddr, listener: &str, detail: &str) {
    static LIMITER: LogLimiter = LogLimiter::new();
    if let Some(unlogged) = LIMITER.admit(Duration::from_millis(100)) {
        tracing::info!(%peer, listener, reason = %detail, unlogged, "closing connection during SASL authentication");
    }
}

/// An SSL listener's files changed and were reloaded (`success`) or did not load (`failure`).
pub fn tls_reloaded(listener: &str, result: &'static str) {
    counter!("osprey_tls_reloads_total", "listener" => listener.to_string(), "result" => result).increment(1);
}

/// A frame refused for its declared size: counted, and logged at most once a second
/// (a flood of them must not flood the log), with how many went unlogged meanwhile.
pub fn frame_rejected(peer: SocketAddr, size: i32, max_frame: usize) {
    static LIMITER: LogLimiter = LogLimiter::new();
    counter!("osprey_frames_rejected_total").increment(1);
    if let Some(unlogged) = LIMITER.admit(Duration::from_secs(1)) {
        tracing::warn!(
            %peer,
            size,
            max = max_frame,
            unlogged,
            "closing connection: frame size outside 0..=socket.request.max.bytes (not a Kafka client, or a bug)"
        );
    }
}

/// An internal topic (`__consumer_offsets`, `__transaction_state`) could not be created,
/// or its logs opened. Clients retry this every few hundred milliseconds for as long as
/// the cause lasts, so each attempt is counted and one line per topic is logged at most
/// every 10 s, saying what fails and how to fix it.
pub fn internal_topic_unavailable(topic: &str, error: &str, waiting: &str, fix: &str) {
    static OFFSETS: LogLimiter = LogLimiter::new();
    static OTHERS: LogLimiter = LogLimiter::new();
    counter!("osprey_internal_topic_create_errors_total", "internal_topic" => topic.to_string()).increment(1);
    let limiter = if topic == crate::groups::OFFSETS_TOPIC { &OFFSETS } else { &OTHERS };
    if let Some(unlogged) = limiter.admit(Duration::from_secs(10)) {
        tracing::error!(
            topic,
            error,
            unlogged,
            "cannot create internal topic {topic} or open its logs: {waiting} until it is served. To fix: {fix}"
        );
    }
}

/// A response to a client over its `quota` (`produce`, `fetch`, `request`) carried a throttle time
/// of `ms`, and its connection is muted for it.
pub fn quota_throttled(quota: &'static str, ms: u64) {
    histogram!("osprey_quota_throttle_seconds", "quota" => quota).record(ms as f64 / 1000.0);
}

/// Reading from a connection paused at a memory bound (named by its config key).
pub fn reading_paused(bound: &'static str) {
    counter!("osprey_reads_paused_total", "bound" => bound).increment(1);
}

pub fn bytes_in(topic: &str, bytes: u64, records: u64) {
    counter!("osprey_topic_bytes_in_total", "topic" => topic.to_string()).increment(bytes);
    counter!("osprey_topic_messages_in_total", "topic" => topic.to_string()).increment(records);
}

/// A partition of a Produce request for `topic`, which exists (Kafka's
/// BrokerTopicMetrics count each partition of a request).
pub fn topic_produce_request(topic: &str) {
    counter!("osprey_topic_produce_requests_total", "topic" => topic.to_string()).increment(1);
    // The failed count shows 0 from the topic's first request, as Kafka's meters do: a
    // dashboard's failed-requests query has data, and `rate()` sees the first failure.
    counter!("osprey_topic_failed_produce_requests_total", "topic" => topic.to_string()).increment(0);
}

/// A partition of a Produce request for `topic` answered with an error.
pub fn topic_produce_failed(topic: &str) {
    counter!("osprey_topic_failed_produce_requests_total", "topic" => topic.to_string()).increment(1);
}

/// A partition of a Fetch request (a consumer's or a follower's) for `topic`.
pub fn topic_fetch_request(topic: &str) {
    counter!("osprey_topic_fetch_requests_total", "topic" => topic.to_string()).increment(1);
    // 0 from the topic's first request, as for Produce.
    counter!("osprey_topic_failed_fetch_requests_total", "topic" => topic.to_string()).increment(0);
}

/// A partition of a Fetch request for `topic` answered with an error.
pub fn topic_fetch_failed(topic: &str) {
    counter!("osprey_topic_failed_fetch_requests_total", "topic" => topic.to_string()).increment(1);
}

pub fn bytes_out(topic: &str, bytes: u64) {
    counter!("osprey_topic_bytes_out_total", "topic" => topic.to_string()).increment(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_state_is_zeroed_before_counting_kip848_ones_included() {
        let zeroed = zeroed_group_states();
        for state in
            ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Assigning", "Reconciling"]
        {
            assert_eq!(zeroed.get(state), Some(&0), "{state}");
        }
    }
}
