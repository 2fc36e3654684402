//! The active controller (Kafka's `QuorumController`): Kafka's controller APIs decided
//! on the metadata image and committed through the quorum (crates/cluster/DESIGN.md,
//! "The active controller").
//!
//! One task takes requests in arrival order. While this node leads the quorum it decides
//! each on the *speculative image* (the applied image plus every record proposed and not
//! yet applied, Kafka's approach), proposes the request's records as one batch, and
//! answers once that batch is committed; the next request is decided at once, on the
//! image that already includes this one's records. A decision that writes nothing is
//! answered once everything proposed before it is committed, so answers never get ahead
//! of the log.
//!
//! Becoming active: the quorum elected this node and its log is applied up to its last
//! entry (the new term's first entry included, so everything earlier leaders committed
//! is in the image) and the image holds the cluster id the bootstrap committed (unless
//! the config fixes one); then every registered broker gets a fresh heartbeat session
//! (`activate`), so none is fenced for heartbeats the previous controller received.
//! Losing leadership (or a proposal refused as not the leader): pending answers become
//! NOT_CONTROLLER, the speculative image is dropped, and every new request is answered
//! NOT_CONTROLLER until this node is active again.
//!
//! A timer fences brokers whose session expired (`broker.session.timeout.ms`), runs
//! the periodic unclean election (`unclean.leader.election.interval.ms`) and, with
//! `auto.leader.rebalance.enable`, moves leadership back to preferred replicas every
//! `leader.imbalance.check.interval.seconds`.
//!
//! **Metadata offsets.** A broker's "metadata offset" (BrokerHeartbeat's
//! `current_metadata_offset`, a registration's `register_offset`, the broker epoch) is
//! the offset of a metadata *record*: records are numbered from 0 in log order across
//! all batches, as in Kafka's `__cluster_metadata`, and openraft's own entries (a new
//! leader's blank entry, membership changes) have none. It is `MetadataImage::applied`
//! counted on the same records on every node, so the controller can give a broker its
//! epoch (the offset of its registration record) when it decides, before the batch has
//! an openraft index. A broker reports the offset of the last record it applied.

use super::apis::{ControllerApis, ControllerReply};
use super::decisions::{self, Controls};
use osprey_cluster::cluster_control::{ClusterControl, ClusterControlConfig};
use osprey_cluster::image::NO_LEADER;
use osprey_cluster::mutation_quota::{self, MutationQuotas, MutationRequest};
use osprey_cluster::quorum::{ProposeError, Quorum};
use osprey_cluster::topic_control::TopicControl;
use osprey_cluster::{MetadataImage, MetadataRecord};
use osprey_protocol::{ErrorCode, RequestBody, RequestHeader, ResponseBody};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// The API keys and versions the active controller serves: Kafka 4.4's controller's
/// ranges, as in protocol-specs.
pub const SUPPORTED: [(i16, i16, i16); 16] = [
    (19, 2, 7),
    (20, 1, 6),
    (30, 1, 3),
    (31, 1, 3),
    (33, 0, 2),
    (37, 0, 3),
    (43, 0, 2),
    (44, 0, 1),
    (45, 0, 1),
    (46, 0, 0),
    (49, 0, 1),
    (51, 0, 0),
    (56, 2, 3),
    (62, 0, 4),
    (63, 0, 2),
    (67, 0, 0),
];

/// A topic config check for CreateTopics (the broker's own, by default).
pub type TopicConfigCheck = Arc<dyn Fn(&str, &str) -> Result<(), String> + Send + Sync>;

/// How the active controller runs. Kafka's config names where Kafka has one.
#[derive(Clone)]
pub struct ActiveControllerConfig {
    /// The cluster id brokers must register with (`None`: the one the quorum committed,
    /// in the applied image), `broker.session.timeout.ms`, and the cluster default of
    /// `unclean.leader.election.enable`.
    pub cluster: ClusterControlConfig,
    /// `num.partitions`, for a CreateTopics that asks for -1.
    pub default_partitions: i32,
    /// `default.replication.factor`, for a CreateTopics that asks for -1.
    pub default_replication_factor: i16,
    /// `osprey.max.partitions`: the most partitions the cluster may hold.
    pub max_partitions: i32,
    /// `request.timeout.ms` (30000): the longest an answer waits for its records to
    /// commit (a request's own smaller `timeout_ms` wins); then REQUEST_TIMED_OUT.
    pub request_timeout_ms: u64,
    /// `broker.heartbeat.interval.ms` (2000): a heartbeat's answer waits at most half of
    /// it for a commit, as in Kafka's `ControllerApis`, so the broker's next one is not
    /// held up behind it.
    pub broker_heartbeat_interval_ms: u64,
    /// `unclean.leader.election.interval.ms` (Kafka's default 300000): how often offline
    /// partitions of topics that allow it get an unclean leader.
    pub unclean_leader_election_interval_ms: u64,
    /// `auto.leader.rebalance.enable` (true): preferred elections on the timer.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds` (300), in milliseconds.
    pub leader_imbalance_check_interval_ms: u64,
    /// The most requests queued for the controller task; more are answered
    /// REQUEST_TIMED_OUT (retriable) rather than held without bound.
    pub max_queued_requests: usize,
    /// Seeds replica placement (tests replay a placement); `None`: from entropy.
    pub placement_seed: Option<u64>,
    pub validate_topic_config: TopicConfigCheck,
    /// The node's configuration: dynamic broker configs are checked with its
    /// `validate_dynamic`, group configs against its `group.consumer.*` bounds, and list
    /// configs are appended to from its values.
    pub broker_config: Arc<crate::config::BrokerConfig>,
}

impl ActiveControllerConfig {
    /// Kafka's defaults for a cluster with this id (`None`: the applied image's).
    pub fn new(cluster_id: Option<String>) -> ActiveControllerConfig {
        ActiveControllerConfig {
            cluster: ClusterControlConfig {
                cluster_id,
                broker_session_timeout_ms: osprey_cluster::controller::DEFAULT_BROKER_SESSION_TIMEOUT_MS,
                unclean_leader_election_enable: false,
                min_insync_replicas: 1,
                eligible_leader_replicas_enabled: true,
            },
            default_partitions: 1,
            default_replication_factor: 1,
            max_partitions: osprey_cluster::controller::MAX_PARTITIONS_PER_TOPIC,
            request_timeout_ms: 30_000,
            broker_heartbeat_interval_ms: 2_000,
            unclean_leader_election_interval_ms: 300_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: 300_000,
            max_queued_requests: 4096,
            placement_seed: None,
            validate_topic_config: Arc::new(|k, v| {
                crate::config::validate_topic_config(k, v).map_err(|e| e.to_string())
            }),
            broker_config: Arc::default(),
        }
    }
}

impl ActiveControllerConfig {
    /// The settings of a node's configuration. The cluster id is the one the quorum
    /// committed: a new node learns it only from the log.
    pub fn from_config(config: &crate::config::BrokerConfig) -> ActiveControllerConfig {
        let mut active = ActiveControllerConfig::new(None);
        active.cluster.broker_session_timeout_ms = i64::from(config.cluster.broker_session_timeout_ms);
        active.cluster.unclean_leader_election_enable = config.unclean_leader_election_enable;
        active.cluster.min_insync_replicas = config.min_insync_replicas;
        active.broker_heartbeat_interval_ms = u64::try_from(config.cluster.broker_heartbeat_interval_ms).unwrap_or(1);
        active.default_partitions = config.num_partitions;
        active.unclean_leader_election_interval_ms =
            u64::try_from(config.unclean_leader_election_interval_ms).unwrap_or(1).max(1);
        active.auto_leader_rebalance_enable = config.auto_leader_rebalance_enable;
        active.leader_imbalance_check_interval_ms =
            u64::try_from(config.leader_imbalance_check_interval_seconds).unwrap_or(1).max(1).saturating_mul(1000);
        active.default_replication_factor = config.default_replication_factor.clamp(1, i32::from(i16::MAX)) as i16;
        active.max_partitions = config.max_partitions;
        active.broker_config = Arc::new(config.clone());
        active
    }
}

impl std::fmt::Debug for ActiveControllerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveControllerConfig")
            .field("cluster", &self.cluster)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .finish_non_exhaustive()
    }
}

/// One request waiting for the controller task.
#[derive(Debug)]
struct Queued {
    version: i16,
    body: RequestBody,
    /// Who asks, for the controller mutation quota (CreateTopics, DeleteTopics,
    /// CreatePartitions only).
    mutation: Option<MutationRequest>,
    reply: oneshot::Sender<ResponseBody>,
}

/// The handle the controller listener calls; the task stops when it is dropped.
#[derive(Debug)]
pub struct ActiveController {
    requests: mpsc::Sender<Queued>,
    active: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ActiveController {
    /// Starts the controller task over this quorum member. Call inside a tokio runtime.
    pub fn new(quorum: Arc<Quorum>, config: ActiveControllerConfig) -> ActiveController {
        let (requests, receiver) = mpsc::channel(config.max_queued_requests.max(1));
        let (active_tx, active) = watch::channel(false);
        let core = Core::new(quorum, config, active_tx);
        let task = tokio::spawn(core.run(receiver));
        ActiveController { requests, active, task }
    }

    /// Whether this node is the active controller now (leads the quorum and has applied
    /// its log): what `ActiveControllerCount` reports.
    pub fn is_active(&self) -> bool {
        *self.active.borrow()
    }

    /// Changes of [`ActiveController::is_active`], for a caller that waits for them.
    pub fn watch_active(&self) -> watch::Receiver<bool> {
        self.active.clone()
    }
}

impl Drop for ActiveController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ControllerApis for ActiveController {
    fn supported(&self) -> Vec<(i16, i16, i16)> {
        SUPPORTED.to_vec()
    }

    fn handle_from(&self, header: RequestHeader, body: RequestBody, forwarded_for: Option<&str>) -> ControllerReply {
        let version = header.request_api_version;
        let api_key = body.api_key() as i16;
        let mutates = matches!(
            body,
            RequestBody::CreateTopics(_) | RequestBody::DeleteTopics(_) | RequestBody::CreatePartitions(_)
        );
        let mutation = forwarded_for.filter(|_| mutates).map(|principal| {
            let client_id = header.client_id.as_deref().unwrap_or_default();
            MutationRequest::new(principal, client_id, mutation_quota::is_strict(api_key, version))
        });
        let fallback = decisions::failed(&body, version, ErrorCode::NOT_CONTROLLER, "The controller stopped.");
        let (reply, answer) = oneshot::channel();
        // Queued here, not in the returned future, so requests take effect in the order
        // `handle` is called whatever order the futures are polled in.
        if let Err(e) = self.requests.try_send(Queued { version, body, mutation, reply }) {
            let busy = matches!(e, mpsc::error::TrySendError::Full(_));
            let Queued { body, .. } = e.into_inner();
            let response = if busy {
                tracing::warn!("controller request queue full; answering REQUEST_TIMED_OUT");
                decisions::failed(&body, version, ErrorCode::REQUEST_TIMED_OUT, "The controller is overloaded.")
            } else {
                fallback
            };
            return Box::pin(async move { response });
        }
        Box::pin(async move { answer.await.unwrap_or(fallback) })
    }
}

/// One period of this node as the active controller and what it has proposed.
struct Active {
    /// Counts this node's activations: a period ends for good even when the next one is
    /// in the same quorum term (after a proposal was refused).
    generation: u64,
    term: u64,
    /// The applied image plus every record proposed in this term and not yet applied.
    speculative: MetadataImage,
    /// The most recent proposal's outcome: `None` until it has one, then whether it
    /// committed. A decision that writes nothing is answered once it committed.
    last_proposal: Option<watch::Receiver<Option<bool>>>,
    next_unclean_election: Instant,
    /// When the next preferred-leader rebalance is due (if enabled).
    next_leader_balance: Instant,
}

/// The controller task's state.
struct Core {
    quorum: Arc<Quorum>,
    config: ActiveControllerConfig,
    cluster: ClusterControl,
    topics: TopicControl,
    active: Option<Active>,
    active_tx: watch::Sender<bool>,
    started: Instant,
    /// Proposals that failed in a way that ends their period (by generation).
    failures: (mpsc::UnboundedSender<u64>, mpsc::UnboundedReceiver<u64>),
    /// The last generation that ended: answers still waiting from it (or an earlier
    /// one) become NOT_CONTROLLER at once, as Kafka's controller fails every pending
    /// event when it renounces, even though a record may still commit.
    ended_generation: watch::Sender<u64>,
    /// The generation of the next activation.
    next_generation: u64,
    /// When the gauges were last computed: they scan every partition, so a stream of
    /// heartbeats recomputes them at most once per [`GAUGE_REFRESH`].
    gauges_at: Option<Instant>,
    /// A change since then that the gauges do not show yet: the timer refreshes them.
    gauges_stale: bool,
    /// The controller mutation quota's buckets (`controller_mutation_rate`), kept in
    /// memory as Kafka's controller keeps them: a new active controller starts full.
    mutation_quotas: MutationQuotas,
}

/// How often a stream of requests may recompute the controller's gauges.
const GAUGE_REFRESH: Duration = Duration::from_secs(1);

impl Core {
    fn new(quorum: Arc<Quorum>, config: ActiveControllerConfig, active_tx: watch::Sender<bool>) -> Core {
        // 0 until this node becomes the active controller, so that a controller that is
        // not active shows 0 rather than no series (Kafka's ActiveControllerCount).
        metrics::gauge!("osprey_controller_active").set(0.0);
        let mut topics = TopicControl::new(Vec::new(), config.default_partitions, config.default_replication_factor);
        topics.set_max_partitions(config.max_partitions);
        if let Some(seed) = config.placement_seed {
            topics.set_placement_seed(seed);
        }
        Core {
            cluster: ClusterControl::new(config.cluster.clone()),
            topics,
            quorum,
            config,
            active: None,
            active_tx,
            started: Instant::now(),
            failures: mpsc::unbounded_channel(),
            ended_generation: watch::channel(0).0,
            next_generation: 1,
            gauges_at: None,
            gauges_stale: false,
            mutation_quotas: MutationQuotas::default(),
        }
    }

    async fn run(mut self, mut requests: mpsc::Receiver<Queued>) {
        let mut metrics = self.quorum.metrics();
        let mut quorum_running = true;
        loop {
            self.check_leadership();
            let wake = self.next_wake();
            tokio::select! {
                biased;
                changed = metrics.changed(), if quorum_running => {
                    if changed.is_err() {
                        quorum_running = false;
                        self.deactivate("the quorum stopped");
                    }
                }
                Some(generation) = self.failures.1.recv() => {
                    if self.active.as_ref().is_some_and(|a| a.generation == generation) {
                        self.deactivate("a proposal failed");
                    }
                }
                queued = requests.recv() => match queued {
                    Some(q) => self.handle(q),
                    None => break,
                },
                _ = tokio::time::sleep_until(wake.unwrap_or_else(far_future)), if wake.is_some() => self.on_timer(),
            }
        }
        self.deactivate("the controller stopped");
    }

    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    /// Becomes active once this node leads and has applied its whole log; stops being
    /// active when it no longer leads or the term moved on.
    fn check_leadership(&mut self) {
        let (leads, term, caught_up) = {
            let metrics = self.quorum.metrics();
            let m = metrics.borrow();
            let applied = m.last_applied.map(|l| l.index);
            (m.state.is_leader(), m.current_term, applied.is_some() && applied >= m.last_log_index)
        };
        match &self.active {
            Some(a) if !leads || a.term != term => self.deactivate("leadership moved"),
            None if leads && caught_up && self.knows_cluster_id() => self.activate(term),
            _ => {}
        }
    }

    /// Whether brokers can be told which cluster they register with. Without a
    /// configured id, the controller waits for the `ClusterId` record the bootstrap
    /// commits first: activating before it would leave that record out of the
    /// speculative image, and every record offset decided after (broker epochs) one
    /// short.
    fn knows_cluster_id(&self) -> bool {
        self.config.cluster.cluster_id.is_some() || self.quorum.with_applied(|a| a.image.cluster_id.is_some())
    }

    fn activate(&mut self, term: u64) {
        let image = self.quorum.with_applied(|a| a.image.clone());
        let now_ms = self.now_ms();
        self.cluster.activate(&image, now_ms);
        tracing::info!(term, records = image.applied, "Becoming the active controller.");
        let interval = Duration::from_millis(self.config.unclean_leader_election_interval_ms.max(1));
        let generation = self.next_generation;
        self.next_generation += 1;
        self.active = Some(Active {
            generation,
            term,
            speculative: image,
            last_proposal: None,
            next_unclean_election: Instant::now() + interval,
            next_leader_balance: Instant::now() + self.leader_balance_interval(),
        });
        let _ = self.active_tx.send(true);
        metrics::gauge!("osprey_controller_active").set(1.0);
        self.gauges_at = None;
        self.report_gauges();
    }

    fn deactivate(&mut self, why: &str) {
        let Some(a) = self.active.take() else { return };
        tracing::info!(term = a.term, why, "No longer the active controller.");
        let _ = self.active_tx.send(false);
        self.ended_generation.send_replace(a.generation);
        metrics::gauge!("osprey_controller_active").set(0.0);
        for name in [
            "osprey_controller_fenced_brokers",
            "osprey_controller_active_brokers",
            "osprey_controller_offline_partitions",
            "osprey_controller_preferred_replica_imbalance",
        ] {
            metrics::gauge!(name).set(0.0);
        }
    }

    fn handle(&mut self, q: Queued) {
        let Some(active) = &mut self.active else {
            let _ = q.reply.send(not_controller(&q.body, q.version));
            return;
        };
        let now_ms = self.started.elapsed().as_millis() as i64;
        let validate = self.config.validate_topic_config.clone();
        let broker_config = self.config.broker_config.clone();
        let mut controls = Controls {
            broker_config: &broker_config,
            cluster: &mut self.cluster,
            topics: &mut self.topics,
            validate_topic_config: &*validate,
            default_partitions: self.config.default_partitions,
            now_ms,
            mutation_quotas: &mut self.mutation_quotas,
            mutation: q.mutation,
        };
        let Some(decided) = decisions::decide(&mut controls, &mut active.speculative, q.version, &q.body) else {
            let _ = q.reply.send(decisions::failed(&q.body, q.version, ErrorCode::UNSUPPORTED_VERSION, "Not served."));
            return;
        };
        let own = match &q.body {
            RequestBody::BrokerHeartbeat(_) => Some((self.config.broker_heartbeat_interval_ms / 2).max(1)),
            body => decisions::request_timeout_ms(body),
        };
        let deadline = own.map_or(self.config.request_timeout_ms, |ms| ms.min(self.config.request_timeout_ms));
        let answer = Answer { version: q.version, body: q.body, ok: decided.response, reply: q.reply };
        self.propose(decided.records, Some(answer), deadline);
        self.report_gauges();
    }

    /// Proposes `records` (if any) and answers once they commit; `answer` is `None` for
    /// the controller's own proposals (fencing, elections), which no one waits for.
    fn propose(&mut self, records: Vec<MetadataRecord>, answer: Option<Answer>, deadline_ms: u64) {
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
            // A heartbeat answered unfenced is the broker's lease (`cluster_link::lifecycle`):
            // a controller cut off from its quorum, which another may have replaced, must not
            // grant one from its image. Answered once a quorum confirmed this leader after
            // the heartbeat came in.
            let confirm = matches!(answer.body, RequestBody::BrokerHeartbeat(_)).then(|| self.quorum.clone());
            if pending.is_none() && confirm.is_none() {
                answer.succeed();
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
                    Ok(()) => answer.succeed(),
                }
            });
            return;
        }
        let quorum = self.quorum.clone();
        let mut proposal: Pin<Box<dyn Future<Output = _> + Send>> =
            Box::pin(async move { quorum.propose(records).await });
        // Polled once here: the first poll hands the batch to openraft's queue, so the
        // batches of requests decided one after the other are in the log in that order.
        let first = poll_once(proposal.as_mut());
        if let Poll::Ready(Err(e)) = &first {
            // Never reached the log, but its records are in the speculative image: it is
            // no longer the log's future, so this period ends (Kafka renounces).
            tracing::warn!(error = %e, "proposal refused before it reached the log");
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
                Poll::Pending => tokio::select! {
                    committed = tokio::time::timeout(Duration::from_millis(deadline_ms), proposal) => {
                        committed.unwrap_or(Err(ProposeError::TimedOut))
                    }
                    _ = ended.wait_for(|ended| *ended >= generation) => {
                        Err(ProposeError::NotLeader { leader: None, endpoint: None })
                    }
                },
            };
            match (&outcome, answer) {
                (Ok(_), Some(answer)) => answer.succeed(),
                (Err(e), Some(answer)) => answer.fail(e),
                (Err(e), None) => tracing::warn!(error = %e, "the controller's own proposal failed"),
                (Ok(_), None) => {}
            }
            let _ = done_tx.send(Some(outcome.is_ok()));
            // Any failure ends the period, a timeout included: the records are in the
            // speculative image and may or may not commit later, so every decision after
            // them rests on records the log may never hold. Kept active, the period
            // answered each later decision that writes nothing (broker heartbeats among
            // them) after this failed proposal, failing it for good while nothing new
            // was written: no broker's lease was renewed after a heal (cluster_simulation
            // seed 1,001,393). Deactivated, the node becomes active again from the
            // applied image once it has applied its whole log.
            if outcome.is_err() {
                let _ = failures.send(generation);
            }
        });
    }

    /// When the timer next has work: a session deadline or the unclean election.
    fn next_wake(&self) -> Option<Instant> {
        let active = self.active.as_ref()?;
        let session = self
            .cluster
            .next_deadline(&active.speculative)
            .map(|ms| self.started + Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0) + 1));
        let gauges = self.gauges_at.filter(|_| self.gauges_stale).map(|at| at + GAUGE_REFRESH);
        let balance = self.config.auto_leader_rebalance_enable.then_some(active.next_leader_balance);
        Some([session, gauges, balance].into_iter().flatten().fold(active.next_unclean_election, Instant::min))
    }

    fn leader_balance_interval(&self) -> Duration {
        Duration::from_millis(self.config.leader_imbalance_check_interval_ms.max(1))
    }

    /// Kafka's `maybeBalancePartitionLeaders`: a preferred election for every partition
    /// whose preferred replica can lead and does not, in passes of at most
    /// `MAX_ELECTIONS_PER_IMBALANCE` partitions, one proposal each.
    fn balance_partition_leaders(&mut self) {
        let mut moved = 0;
        loop {
            let Some(active) = &mut self.active else { return };
            let result = self.cluster.balance_partition_leaders(&active.speculative);
            for r in &result.records {
                active.speculative.apply(r);
            }
            moved += result.records.len();
            let more = result.response;
            if !result.records.is_empty() {
                self.propose_internal(result.records);
            }
            if !more {
                break;
            }
        }
        if moved > 0 {
            tracing::info!(
                partitions = moved,
                "leadership moved back to preferred replicas (auto.leader.rebalance.enable)"
            );
            metrics::counter!("osprey_controller_preferred_leader_elections_total").increment(moved as u64);
        }
    }

    /// Fences brokers whose session expired, one proposal each (each election sees the
    /// previous one's result), and runs the unclean election when due.
    fn on_timer(&mut self) {
        let now_ms = self.now_ms();
        loop {
            let Some(active) = &mut self.active else { return };
            let result = self.cluster.tick(&active.speculative, now_ms);
            let Some(broker) = result.response else { break };
            for r in &result.records {
                active.speculative.apply(r);
            }
            tracing::info!(broker, "broker fenced: its session expired");
            self.propose_internal(result.records);
        }
        let interval = Duration::from_millis(self.config.unclean_leader_election_interval_ms.max(1));
        let Some(active) = &mut self.active else { return };
        if Instant::now() >= active.next_unclean_election {
            active.next_unclean_election = Instant::now() + interval;
            let result = self.cluster.elect_unclean_leaders(&active.speculative);
            if result.response > 0 {
                for r in &result.records {
                    active.speculative.apply(r);
                }
                tracing::warn!(partitions = result.response, "unclean leader election");
                self.propose_internal(result.records);
            }
        }
        let balance_interval = self.leader_balance_interval();
        let Some(active) = &mut self.active else { return };
        if self.config.auto_leader_rebalance_enable && Instant::now() >= active.next_leader_balance {
            active.next_leader_balance = Instant::now() + balance_interval;
            self.balance_partition_leaders();
        }
        self.report_gauges();
    }

    /// A proposal of the controller's own (fencing, elections).
    fn propose_internal(&mut self, records: Vec<MetadataRecord>) {
        // An unclean election leaves its leader recovering (KIP-704): count and say it.
        for r in &records {
            if let MetadataRecord::PartitionChange { topic_id, partition, leader, leader_recovery_state, .. } = r {
                if *leader_recovery_state == osprey_cluster::image::LEADER_RECOVERING {
                    let topic = osprey_protocol::Uuid(*topic_id);
                    tracing::warn!(%topic, partition, leader, "unclean leader election: a replica outside the ISR leads; acknowledged records it lacks are lost");
                    metrics::counter!("osprey_controller_unclean_leader_elections_total").increment(1);
                }
            }
        }
        self.propose(records, None, self.config.request_timeout_ms);
    }

    /// Kafka's controller metrics, from the speculative image.
    fn report_gauges(&mut self) {
        let Some(active) = &self.active else { return };
        let now = Instant::now();
        if self.gauges_at.is_some_and(|at| now < at + GAUGE_REFRESH) {
            self.gauges_stale = true;
            return;
        }
        self.gauges_at = Some(now);
        self.gauges_stale = false;
        let image = &active.speculative;
        let fenced = image.brokers().filter(|b| b.fenced).count();
        let unfenced = image.brokers().count() - fenced;
        let offline = image.topics().flat_map(|t| &t.partitions).filter(|p| p.leader == NO_LEADER).count();
        metrics::gauge!("osprey_controller_fenced_brokers").set(fenced as f64);
        metrics::gauge!("osprey_controller_active_brokers").set(unfenced as f64);
        metrics::gauge!("osprey_controller_offline_partitions").set(offline as f64);
        let imbalanced =
            image.topics().flat_map(|t| &t.partitions).filter(|p| p.replicas.first() != Some(&p.leader)).count();
        metrics::gauge!("osprey_controller_preferred_replica_imbalance").set(imbalanced as f64);
    }
}

/// A request's answers: `ok` once its records commit, or its error form.
struct Answer {
    version: i16,
    body: RequestBody,
    ok: ResponseBody,
    reply: oneshot::Sender<ResponseBody>,
}

impl Answer {
    fn succeed(self) {
        let _ = self.reply.send(self.ok);
    }

    /// Kafka's controller answers NOT_CONTROLLER when it lost leadership before the
    /// commit and REQUEST_TIMED_OUT when the commit did not come in time.
    fn fail(self, e: &ProposeError) {
        let code = match e {
            ProposeError::NotLeader { .. } | ProposeError::Stopped(_) => ErrorCode::NOT_CONTROLLER,
            ProposeError::TimedOut => ErrorCode::REQUEST_TIMED_OUT,
            ProposeError::TooLarge { .. } | ProposeError::Refused(_) => ErrorCode::UNKNOWN_SERVER_ERROR,
        };
        let _ = self.reply.send(decisions::failed(&self.body, self.version, code, &e.to_string()));
    }
}

fn not_controller(body: &RequestBody, version: i16) -> ResponseBody {
    decisions::failed(body, version, ErrorCode::NOT_CONTROLLER, "This node is not the active controller.")
}

/// Polls `future` once, with a waker that does nothing: the task that goes on to await
/// it polls it again, which registers that task's waker.
fn poll_once<T>(future: Pin<&mut (dyn Future<Output = T> + Send)>) -> Poll<T> {
    let waker = std::task::Waker::noop();
    future.poll(&mut std::task::Context::from_waker(waker))
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}
