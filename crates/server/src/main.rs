//! `osprey [server.properties] [--override key=value]...`: one process acting as broker
//! and controller. With no arguments: 127.0.0.1:9092, data under `./data`.
//! `osprey format` and `osprey random-uuid` are `kafka-storage.sh`'s.

use osprey_cluster::meta_properties;
use osprey_server::broker::{Broker, Settings};
use osprey_server::cluster_link::{ClusterLink, LinkConfig, Publisher};
use osprey_server::config::SecurityProtocol;
use osprey_server::config::{parse_command, validate_topic_config, BrokerConfig, Command, ConfigError, Listener};
use osprey_server::controller_node::{self, ControllerNode, ControllerNodeConfig};
use osprey_server::interbroker::NodeAddress;
use osprey_server::network::{self, ClientListener};
use osprey_server::{background, controller_listener, logging, telemetry};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

/// mimalloc returns freed memory to the OS; glibc's malloc kept what a burst of large
/// fetch responses had used long after the load ended.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long SIGTERM waits for in-flight requests before closing connections.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(30);

/// How long SIGTERM spends closing partition logs (flush, indexes; then the data
/// directory's clean-shutdown marker). If any log is not closed by then, no marker is
/// written and every log is recovered at the next start; under
/// fsync-before-ack that loses nothing acknowledged. With the drain above it bounds
/// how long the broker takes to stop, whatever the number of partitions.
const SHUTDOWN_CLOSE_LOGS: Duration = Duration::from_secs(30);

/// After the logs, how long threads still in an fsync may hold up the exit.
const SHUTDOWN_BLOCKING_GRACE: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    // mimalloc asks for transparent huge pages on its regions (madvise), so every 2 MiB
    // it touches became resident whole: a single broker after a short produce held 85-113
    // MiB, 98 MiB of it huge pages, against 15 MiB with them off (2026-12-06, Linux 6.18,
    // THP in madvise mode). Memory is what a small broker is for, so the process opts
    // out, before anything is allocated in earnest; on kernels without the call it runs
    // as before.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let (config, unknown) = match parse_command(std::env::args_os()) {
        Ok(Command::Serve { config, unknown }) => (config, unknown),
        Ok(Command::Format { config, unknown, cluster_id, ignore_formatted }) => {
            return format(&config, &unknown, &cluster_id, ignore_formatted)
        }
        Ok(Command::RandomUuid) => return random_uuid(),
        Err(ConfigError::Help(text)) => {
            println!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("osprey: {e}");
            return ExitCode::from(2);
        }
    };
    match logging::LogFormat::from_env() {
        Ok(format) => logging::init(format),
        Err(e) => {
            eprintln!("osprey: {e}");
            return ExitCode::from(2);
        }
    }
    stop_on_panic();
    raise_open_file_limit(config.max_connections);
    if !unknown.is_empty() {
        tracing::warn!(keys = ?unknown, "these configuration keys are not used by osprey");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        // First: a SIGTERM that arrives while the node starts must stop it cleanly, not
        // kill it with the default action.
        let mut signals = StopSignals::register()?;
        if is_controller_only(&config) {
            run_controller(config, &mut signals).await
        } else if let Some(why) = config.cluster.beyond_this_node(config.node_id) {
            tracing::info!(why, "this node is a broker of a multi-node cluster");
            run_in_cluster(config, &mut signals).await
        } else {
            run(config, &mut signals).await
        }
    });
    // A blocking thread stuck in an fsync must not keep the process alive.
    runtime.shutdown_timeout(SHUTDOWN_BLOCKING_GRACE);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `process.roles=controller`: the node runs the controller quorum and no broker.
fn is_controller_only(config: &BrokerConfig) -> bool {
    config.cluster.roles.controller && !config.cluster.roles.broker
}

/// `osprey format`: as `kafka-storage.sh format`, prints one line per directory written.
fn format(config: &BrokerConfig, unknown: &[String], cluster_id: &str, ignore_formatted: bool) -> ExitCode {
    if !unknown.is_empty() {
        eprintln!("osprey format: these configuration keys are not used by osprey: {}", unknown.join(", "));
    }
    let mut dirs = config.data_dirs.clone();
    dirs.push(config.cluster.metadata_log_dir.clone());
    match meta_properties::format(&dirs, config.node_id, cluster_id, ignore_formatted) {
        Ok(done) => {
            if done.written.is_empty() {
                println!("All of the log directories are already formatted.");
            }
            for (dir, meta) in &done.written {
                let kind = if *dir == config.cluster.metadata_log_dir { "metadata" } else { "data" };
                println!(
                    "Formatting {kind} directory {} with cluster.id {}, node.id {}, directory.id {}.",
                    dir.display(),
                    meta.cluster_id,
                    meta.node_id,
                    meta.directory_id
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("osprey format: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `osprey random-uuid`: a new cluster id, as `kafka-storage.sh random-uuid` prints one.
fn random_uuid() -> ExitCode {
    match meta_properties::random_uuid() {
        Ok(id) => {
            println!("{id}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("osprey random-uuid: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, as the JVM does for Kafka: every
/// connection is a file descriptor, and so is every open segment and index (half the
/// soft limit at most, see `osprey.log.max.open.files`). Says so at startup when an
/// explicitly set `max.connections` cannot be met with the limit it ends up with,
/// since past it accepting fails (EMFILE) and connections wait unserved.
fn raise_open_file_limit(max_connections: i32) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if let (Some(soft), Some(hard)) = (limit.current, limit.maximum) {
        if soft >= hard {
            return warn_if_short(max_connections, soft);
        }
        let raised = rustix::process::Rlimit { current: Some(hard), maximum: Some(hard) };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => limit = getrlimit(Resource::Nofile),
            Err(e) => tracing::warn!(error = %e, "cannot raise the soft open-file limit to the hard limit"),
        }
    }
    if let Some(soft) = limit.current {
        warn_if_short(max_connections, soft);
    }
}

/// Logs at startup when `max.connections` (if set) exceeds what the open-file limit
/// leaves for sockets.
fn warn_if_short(max_connections: i32, soft: u64) {
    let for_connections = soft - soft / 2;
    if max_connections < i32::MAX && max_connections as u64 > for_connections {
        tracing::error!(
            max_connections,
            open_file_limit = soft,
            for_connections,
            "max.connections cannot be met: up to half the open-file limit is kept for log segments, so \
             accepting fails beyond about {for_connections} connections; raise the hard `ulimit -n` to at least {}",
            2 * max_connections as u64
        );
    }
}

/// A panic is a broken invariant: the process stops (after the usual panic message)
/// rather than lose one task and go on serving the state it left half-updated (README,
/// "Failure stance"). Release builds abort on panic anyway (`panic = "abort"`); this
/// makes the debug build, which the compatibility tests run, behave the same.
fn stop_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

async fn run(config: BrokerConfig, signals: &mut StopSignals) -> Result<(), String> {
    let bound = bind_listeners(&config)?;
    let local = bound.client.first().map(|(_, addr, _)| *addr).ok_or("no client listener configured (listeners)")?;
    let mut settings = settings(&config, local, advertised_listeners(&config, &bound))?;
    settings.interbroker = bound.interbroker_security(&config, false)?;
    let data_dir = settings.data_dir.clone();
    let broker = tokio::task::spawn_blocking(move || {
        Broker::open(settings, Box::new(|k: &str, v: &str| validate_topic_config(k, v).map_err(|e| e.to_string())))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot open the data directory {}: {e}", data_dir.display()))?;
    if let Some(addr) = &config.metrics_listener {
        let addr = resolve(addr)?;
        telemetry::install(addr)?.serve_broker(broker.clone());
        tracing::info!(%addr, "metrics at http://{addr}/metrics");
    }
    let (stop, stopped) = watch::channel(false);
    background::spawn(
        broker.clone(),
        Duration::from_millis(config.retention_check_interval_ms.max(1000) as u64),
        Duration::from_millis(config.flush_scheduler_interval_ms.clamp(100, 60_000) as u64),
        stopped.clone(),
    );
    background::spawn_scrubber(broker.clone(), stopped.clone());
    tracing::info!(
        listener = %local,
        listeners = %bound.describe(),
        node_id = broker.settings.node_id,
        cluster_id = %broker.cluster_id,
        data = %broker.settings.data_dir.display(),
        "osprey is ready"
    );
    let (client, controller) = bound.into_sockets();
    let server = tokio::spawn(network::serve(broker.clone(), client, stopped.clone(), SHUTDOWN_DRAIN));
    let controller = tokio::spawn(controller_listener::serve(controller, stopped));
    signals.recv().await;
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    let _ = stop.send(true);
    broker.begin_shutdown();
    let _ = server.await;
    let _ = controller.await;
    close_broker(broker).await
}

/// A controller-only node: the quorum member and its CONTROLLER listener, until SIGTERM
/// or until the node fails (its `meta.properties` names another cluster).
async fn run_controller(config: BrokerConfig, signals: &mut StopSignals) -> Result<(), String> {
    let mut node_config = ControllerNodeConfig::from_broker_config(&config)?;
    let bound = bind_listeners(&config)?;
    node_config.tls = bound.controller_tls.clone();
    let described = bound.describe();
    let (client, controller) = bound.into_sockets();
    if !client.is_empty() {
        tracing::warn!("process.roles=controller: listeners other than controller.listener.names are not served");
    }
    let listeners =
        controller.into_iter().map(|l| l.into_std()).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    if let Some(addr) = &config.metrics_listener {
        let addr = resolve(addr)?;
        telemetry::install(addr)?;
        tracing::info!(%addr, "metrics at http://{addr}/metrics");
    }
    let apis = controller_node::active_apis(&config);
    let node = tokio::task::spawn_blocking(move || ControllerNode::start(node_config, listeners, apis))
        .await
        .map_err(|e| e.to_string())??;
    tracing::info!(listeners = %described, node_id = config.node_id, replica = %node.quorum().replica(), "osprey controller is ready");
    let outcome = tokio::select! {
        _ = signals.recv() => Ok(()),
        why = node.failed() => Err(why),
        why = quorum_member_failed(Some(&node)) => Err(why),
    };
    tracing::info!("shutting down the controller");
    let _ = tokio::task::spawn_blocking(move || node.shutdown()).await;
    outcome
}

/// A broker of a multi-node cluster (with the controller role too, in combined mode):
/// the controller quorum member first, then the broker, which learns the cluster id from
/// the quorum, follows its metadata, registers, and serves clients once the controller
/// has unfenced it (its metadata caught up), as Kafka's brokers start.
async fn run_in_cluster(config: BrokerConfig, signals: &mut StopSignals) -> Result<(), String> {
    let bound = bind_listeners(&config)?;
    let local = bound.client.first().map(|(_, addr, _)| *addr).ok_or("no client listener configured (listeners)")?;
    let mut settings = settings(&config, local, advertised_listeners(&config, &bound))?;
    settings.interbroker = bound.interbroker_security(&config, true)?;
    let controller_tls = bound.controller_tls.clone();
    let described = bound.describe();
    let (client, controller) = bound.into_sockets();
    // Before the controller starts: what it records from its first moment (becoming the
    // active controller) must reach /metrics.
    let telemetry = match &config.metrics_listener {
        Some(addr) => {
            let addr = resolve(addr)?;
            let installed = telemetry::install(addr)?;
            tracing::info!(%addr, "metrics at http://{addr}/metrics");
            Some(installed)
        }
        None => None,
    };
    let controller_node = if config.cluster.roles.controller {
        let mut node_config = ControllerNodeConfig::from_broker_config(&config)?;
        node_config.tls = controller_tls.clone();
        let listeners =
            controller.into_iter().map(|l| l.into_std()).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
        let apis = controller_node::active_apis(&config);
        let node = tokio::task::spawn_blocking(move || ControllerNode::start(node_config, listeners, apis))
            .await
            .map_err(|e| e.to_string())??;
        tracing::info!(replica = %node.quorum().replica(), "controller quorum member started");
        Some(node)
    } else {
        None
    };
    let (interval, session) = (config.cluster.broker_heartbeat_interval_ms, config.cluster.broker_session_timeout_ms);
    if interval.saturating_mul(2) > session {
        // Kafka logs the same error. Here it also costs availability: a broker's lease
        // (`cluster_link::lifecycle`) lapses between heartbeats, and its coordinators then
        // refuse OffsetFetch with NOT_COORDINATOR.
        tracing::error!(
            "broker.heartbeat.interval.ms ({interval} ms) must be less than or equal to half of the \
             broker.session.timeout.ms ({session} ms)"
        );
    }
    let mut link_settings = link_config(&config, settings.advertised_listeners.clone());
    link_settings.controller_tls = controller_tls.map(osprey_server::tls::InterBrokerTls::new);
    let link = ClusterLink::new(link_settings);
    let (stop, stopped) = watch::channel(false);
    tracing::info!(voters = ?config.cluster.voters.iter().map(|v| v.to_string()).collect::<Vec<_>>(), "fetching the cluster metadata from the controller quorum");
    let cluster_id = tokio::select! {
        id = link.learn_cluster_id(stopped.clone()) => id.ok_or("stopped")?,
        _ = signals.recv() => return stop_controller(controller_node, Ok(())).await,
    };
    if let Some(node) = &controller_node {
        // This node's controller writes meta.properties (with the directory id its
        // quorum replica key carries) once it learns the cluster id; the broker opens the
        // directories only after, so both agree on the directory id.
        while node.cluster_id().is_none() {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                why = node.failed() => return stop_controller(controller_node, Err(why)).await,
            }
        }
    }
    let data_dir = settings.data_dir.clone();
    let opening = {
        let (link, id) = (link.clone(), cluster_id.clone());
        tokio::task::spawn_blocking(move || {
            Broker::open_in_cluster(
                settings,
                Box::new(|k: &str, v: &str| validate_topic_config(k, v).map_err(|e| e.to_string())),
                link,
                &id,
            )
        })
    };
    let broker = match opening.await.map_err(|e| e.to_string())? {
        Ok(b) => b,
        Err(e) => {
            let why = format!("cannot open the data directory {}: {e}", data_dir.display());
            return stop_controller(controller_node, Err(why)).await;
        }
    };
    if let Some(telemetry) = &telemetry {
        telemetry.serve_broker(broker.clone());
    }
    let publisher: Publisher = {
        let broker = broker.clone();
        Arc::new(move |image| {
            let broker = broker.clone();
            Box::pin(async move {
                let _ = tokio::task::spawn_blocking(move || broker.publish(image)).await;
            })
        })
    };
    tokio::spawn(link.clone().follow(publisher, stopped.clone()));
    tokio::spawn(link.clone().run_lifecycle(stopped.clone()));
    // Followers fetch as soon as their partitions open, so a restarted broker catches up
    // while it is still fenced (it joins ISRs only once unfenced, KIP-841).
    osprey_server::replication::spawn(broker.clone(), link.clone(), stopped.clone());
    tracing::info!(%cluster_id, "waiting to catch up with the metadata and be unfenced by the controller");
    let mut registration = link.watch_registration();
    tokio::select! {
        _ = registration.wait_for(|r| r.caught_up_once) => {}
        _ = signals.recv() => {
            let _ = stop.send(true);
            return stop_controller(controller_node, close_broker(broker).await).await;
        }
    }
    {
        let broker = broker.clone();
        tokio::task::spawn_blocking(move || broker.caught_up())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    background::spawn(
        broker.clone(),
        Duration::from_millis(config.retention_check_interval_ms.max(1000) as u64),
        Duration::from_millis(config.flush_scheduler_interval_ms.clamp(100, 60_000) as u64),
        stopped.clone(),
    );
    background::spawn_scrubber(broker.clone(), stopped.clone());
    tracing::info!(
        listener = %local,
        listeners = %described,
        node_id = broker.settings.node_id,
        cluster_id = %broker.cluster_id,
        data = %broker.settings.data_dir.display(),
        "osprey is ready"
    );
    let server = tokio::spawn(network::serve(broker.clone(), client, stopped.clone(), SHUTDOWN_DRAIN));
    let quorum_failure = tokio::select! {
        _ = signals.recv() => None,
        why = quorum_member_failed(controller_node.as_ref()) => Some(why),
    };
    tracing::info!("controlled shutdown: asking the controller to move leadership away");
    // At most `broker.session.timeout.ms`: by then the controller fences a broker that
    // stopped heartbeating anyway, and a quorum without a majority never answers.
    let wait = Duration::from_millis(u64::try_from(config.cluster.broker_session_timeout_ms).unwrap_or(0).max(1));
    if link.controlled_shutdown(wait).await {
        tracing::info!("the controller moved every leadership away");
    } else {
        tracing::warn!("controlled shutdown not confirmed by the controller; stopping anyway");
    }
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    let _ = stop.send(true);
    broker.begin_shutdown();
    let _ = server.await;
    let closed = close_broker(broker).await;
    let outcome = stop_controller(controller_node, closed).await;
    quorum_failure.map_or(outcome, Err)
}

/// Resolves once this node's controller quorum member has stopped on a fatal error (a
/// metadata log write that failed: openraft stops the member, and the log refuses writes
/// until a restart), having logged why and what to do; never without a member. The node
/// then stops, as Kafka halts when its metadata log fails.
async fn quorum_member_failed(node: Option<&ControllerNode>) -> String {
    let Some(node) = node else { return std::future::pending().await };
    let mut metrics = node.quorum().metrics();
    let why = loop {
        if let Err(fatal) = &metrics.borrow_and_update().running_state {
            break fatal.to_string();
        }
        if metrics.changed().await.is_err() {
            break "it stopped".to_string();
        }
    };
    tracing::error!(
        error = %why,
        "this node's controller quorum member stopped (its metadata log could not be written); stopping \
         the node, as Kafka halts when its metadata log fails: fix the cause (a full disk: free space) and \
         start it again"
    );
    format!("the controller quorum member failed: {why}")
}

/// Closes the broker's partition logs, at most `SHUTDOWN_CLOSE_LOGS` (then the rest are
/// recovered at the next start).
async fn close_broker(broker: Arc<Broker>) -> Result<(), String> {
    let deadline = std::time::Instant::now() + SHUTDOWN_CLOSE_LOGS;
    let closing = tokio::task::spawn_blocking(move || broker.shutdown(deadline));
    // The deadline stops new closes; this bounds a close already stuck in an fsync.
    match tokio::time::timeout(SHUTDOWN_CLOSE_LOGS + SHUTDOWN_BLOCKING_GRACE, closing).await {
        Ok(Ok(Ok(()))) => {
            tracing::info!("stopped cleanly");
            Ok(())
        }
        Ok(Ok(Err(why))) => Err(format!("stopped: {why}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("stopped while partition logs were still closing; they are recovered at the next start".into()),
    }
}

/// Stops this node's controller quorum member, if it has one, last: the broker's
/// controlled shutdown needed the quorum.
async fn stop_controller(node: Option<ControllerNode>, outcome: Result<(), String>) -> Result<(), String> {
    if let Some(node) = node {
        tracing::info!("shutting down the controller");
        let _ = tokio::task::spawn_blocking(move || node.shutdown()).await;
    }
    outcome
}

/// The broker's link settings from its configuration.
fn link_config(config: &BrokerConfig, listeners: Vec<osprey_cluster::BrokerListener>) -> LinkConfig {
    let ms = |v: i32| Duration::from_millis(u64::try_from(v).unwrap_or(0).max(1));
    LinkConfig {
        node_id: config.node_id,
        controllers: config.cluster.voters.iter().map(|v| (v.id, NodeAddress::new(v.host.clone(), v.port))).collect(),
        listeners,
        rack: config.cluster.broker_rack.clone(),
        log_dir_ids: Vec::new(),
        heartbeat_interval: ms(config.cluster.broker_heartbeat_interval_ms),
        session_timeout: ms(config.cluster.broker_session_timeout_ms),
        request_timeout: REQUEST_TIMEOUT,
        fetch_max_wait: METADATA_FETCH_MAX_WAIT,
        max_response_bytes: config.socket_request_max_bytes.max(1024) as usize,
        controller_tls: None,
    }
}

/// Kafka's broker `request.timeout.ms` default: how long a request to the controller
/// is retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a metadata fetch waits at the controller for a new record. Short, so a
/// controller that stopped answering is left for another within about a second.
const METADATA_FETCH_MAX_WAIT: Duration = Duration::from_millis(1000);

/// Each client listener as advertised (`advertised.listeners` by name, else as bound),
/// with the bound port where a port 0 was asked for: what a broker registers, and what a
/// single node answers with on each listener.
fn advertised_listeners(config: &BrokerConfig, bound: &BoundListeners) -> Vec<osprey_cluster::BrokerListener> {
    bound
        .client
        .iter()
        .map(|(listener, addr, _)| {
            let advertised = config.advertised_listeners.iter().find(|a| a.name == listener.name);
            let host = advertised
                .map(|a| a.host.clone())
                .filter(|h| !h.is_empty() && h != "0.0.0.0" && h != "::")
                .unwrap_or_else(|| addr.ip().to_string());
            let port = advertised.map(|a| a.port).filter(|p| *p != 0).unwrap_or(addr.port());
            osprey_cluster::BrokerListener {
                name: listener.name.clone(),
                host,
                port,
                security_protocol: security_protocol_id(listener.security_protocol),
            }
        })
        .collect()
}

/// Kafka's `SecurityProtocol` ids.
fn security_protocol_id(protocol: SecurityProtocol) -> i16 {
    match protocol {
        SecurityProtocol::Plaintext => 0,
        SecurityProtocol::Ssl => 1,
        SecurityProtocol::SaslPlaintext => 2,
        SecurityProtocol::SaslSsl => 3,
    }
}

/// Every entry of `listeners`, bound, split into client and controller listeners, each
/// with the address it actually got (port 0 binds any free port).
struct BoundListeners {
    client: Vec<(Listener, SocketAddr, TcpListener)>,
    controller: Vec<(Listener, SocketAddr, TcpListener)>,
    /// The TLS of each SSL and SASL_SSL client listener, by name, its files read.
    tls: std::collections::HashMap<String, Arc<osprey_server::tls::ListenerTls>>,
    /// The SASL settings of each SASL client listener, by name.
    sasl: std::collections::HashMap<String, Arc<osprey_server::config::SaslSettings>>,
    /// The controller listener's TLS, when it is an SSL one: served by this node's
    /// controller, if it has the role, and the client side every node reaches the
    /// controllers with.
    controller_tls: Option<Arc<osprey_server::tls::ListenerTls>>,
}

impl BoundListeners {
    /// `NAME://address` of every listener as bound, for the "osprey is ready" line.
    fn describe(&self) -> String {
        let all = self.client.iter().chain(&self.controller);
        all.map(|(l, addr, _)| format!("{}://{addr}", l.name)).collect::<Vec<_>>().join(",")
    }

    /// TLS to other brokers, when the inter-broker listener is one of the SSL listeners,
    /// and the login, when it is one of the SASL listeners and there are other brokers
    /// (`in_cluster`) to log in to.
    fn interbroker_security(
        &self,
        config: &BrokerConfig,
        in_cluster: bool,
    ) -> Result<osprey_server::interbroker::Security, String> {
        let tls = self.tls.get(&config.inter_broker_listener_name).cloned();
        let sasl = if in_cluster { config.inter_broker_sasl().map_err(|e| e.to_string())? } else { None };
        if let Some(login) = &sasl {
            tracing::info!(
                listener = %config.inter_broker_listener_name,
                mechanism = login.mechanism.name(),
                user = %login.username,
                "brokers log in to each other with SASL"
            );
        }
        Ok(osprey_server::interbroker::Security {
            tls: tls.map(osprey_server::tls::InterBrokerTls::new),
            sasl: sasl.map(Arc::new),
        })
    }

    /// The client listeners, each with its name (which the requests it accepts carry to
    /// the handlers), and the controller listeners' sockets.
    fn into_sockets(self) -> (Vec<ClientListener>, Vec<TcpListener>) {
        let mut tls = self.tls;
        let mut sasl = self.sasl;
        let client = self.client.into_iter().map(|(l, _, socket)| ClientListener {
            tls: tls.remove(&l.name),
            sasl: sasl.remove(&l.name),
            name: l.name.into(),
            socket,
        });
        (client.collect(), self.controller.into_iter().map(|(_, _, socket)| socket).collect())
    }
}

/// Binds every listener before anything is opened, so that a port in use fails the start
/// at once and names the listener.
fn bind_listeners(config: &BrokerConfig) -> Result<BoundListeners, String> {
    let mut bound = BoundListeners {
        client: Vec::new(),
        controller: Vec::new(),
        tls: Default::default(),
        sasl: Default::default(),
        controller_tls: None,
    };
    if let Some(settings) = config.controller_tls_settings().map_err(|e| e.to_string())? {
        tracing::info!(listener = %osprey_server::tls::describe(&settings), "TLS controller listener");
        bound.controller_tls = Some(osprey_server::tls::ListenerTls::load(settings, true)?);
    }
    for listener in &config.listeners {
        let client = !config.controller_listener_names.contains(&listener.name);
        if client && listener.security_protocol.uses_sasl() {
            let settings = config.sasl_settings(&listener.name).map_err(|e| e.to_string())?;
            let mechanisms: Vec<&str> = settings.mechanisms.iter().map(|m| m.name()).collect();
            tracing::info!(listener = %listener.name, mechanisms = %mechanisms.join(","), "SASL listener");
            bound.sasl.insert(listener.name.clone(), Arc::new(settings));
        }
        if client && listener.security_protocol.uses_tls() {
            // Files read before anything binds: a bad key store stops the start, naming it.
            let settings = config.tls_settings(&listener.name).map_err(|e| e.to_string())?;
            tracing::info!(listener = %osprey_server::tls::describe(&settings), "TLS listener");
            let inter_broker = listener.name == config.inter_broker_listener_name;
            bound.tls.insert(listener.name.clone(), osprey_server::tls::ListenerTls::load(settings, inter_broker)?);
        }
        let bind = resolve(&listener.bind_address())?;
        let tcp = listen(bind, config.socket_listen_backlog_size).map_err(|e| {
            format!("cannot listen on {bind} (listeners: {listener}): {e}; is another broker running there?")
        })?;
        let local = tcp.local_addr().map_err(|e| e.to_string())?;
        let entry = (listener.clone(), local, tcp);
        if config.controller_listener_names.contains(&listener.name) {
            bound.controller.push(entry);
        } else {
            bound.client.push(entry);
        }
    }
    Ok(bound)
}

/// Binds a listener with `socket.listen.backlog.size`: at `max.connections`
/// new connections wait there until a slot frees up (the kernel caps it at
/// `net.core.somaxconn`).
fn listen(bind: SocketAddr, backlog: i32) -> std::io::Result<TcpListener> {
    let socket = if bind.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(bind)?;
    socket.listen(backlog.max(1) as u32)
}

/// The broker settings from the resolved configuration, the address the first client
/// listener actually bound and every client listener as advertised.
fn settings(
    config: &BrokerConfig,
    bound: SocketAddr,
    advertised: Vec<osprey_cluster::BrokerListener>,
) -> Result<Settings, String> {
    let data_dir = config.data_dirs.first().cloned().ok_or("log.dirs is empty")?;
    if config.data_dirs.len() > 1 {
        tracing::warn!(
            dirs = ?config.data_dirs,
            "several log.dirs are not supported yet: partitions go to the first; the others get a meta.properties only"
        );
    }
    let mut s = Settings::single_node(bound, data_dir);
    s.advertised_listeners = advertised;
    s.other_log_dirs = config.data_dirs[1..].to_vec();
    s.metadata_log_dir = Some(config.cluster.metadata_log_dir.clone());
    s.node_id = config.node_id;
    s.num_partitions = config.num_partitions;
    s.default_replication_factor =
        i16::try_from(config.default_replication_factor).map_err(|_| "default.replication.factor is too large")?;
    s.auto_create_topics = config.auto_create_topics_enable;
    s.delete_topic_enable = config.delete_topic_enable;
    s.socket_request_max_bytes = config.socket_request_max_bytes.max(0) as usize;
    s.max_connections = config.max_connections.max(1) as usize;
    s.connections_max_idle_ms = config.connections_max_idle_ms.max(0) as u64;
    s.connection_failed_authentication_delay_ms = config.connection_failed_authentication_delay_ms.max(0) as u64;
    s.sasl_server_max_receive_size = config.sasl_server_max_receive_size.max(1) as usize;
    s.connections_max_reauth_ms = config.connections_max_reauth_ms.max(0);
    s.max_inflight_per_connection = config.max_inflight_requests_per_connection.max(1) as usize;
    s.queued_max_request_bytes = usize::try_from(config.queued_max_request_bytes).ok();
    s.max_pending_response_bytes_per_connection = config.max_pending_response_bytes_per_connection.max(1) as usize;
    s.topic_defaults = config.topic_defaults().values().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    s.fetch_session_slots = config.max_incremental_fetch_session_cache_slots.max(0) as usize;
    s.offsets_topic_num_partitions = config.offsets_topic_num_partitions;
    s.offsets_topic_segment_bytes = config.offsets_topic_segment_bytes;
    s.transaction_version = config.transaction_version;
    s.config = Arc::new(config.clone());
    Ok(s)
}

fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

/// SIGTERM and SIGINT (Ctrl-C), registered before anything else: from then on neither
/// kills the process with its default action, and one that arrives while the node starts
/// is kept until the node waits for it, so a stop asked for during start-up is clean.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn register() -> Result<StopSignals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let register = |kind: SignalKind, name: &str| signal(kind).map_err(|e| format!("cannot handle {name}: {e}"));
        Ok(StopSignals {
            term: register(SignalKind::terminate(), "SIGTERM")?,
            interrupt: register(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// Waits for either signal (returns at once if one came since the last wait).
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
