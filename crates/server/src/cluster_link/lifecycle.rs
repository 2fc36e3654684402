//! Registration and heartbeats (Kafka's `BrokerLifecycleManager`): the broker registers
//! with the active controller once it knows the cluster id, then heartbeats every
//! `broker.heartbeat.interval.ms` with the offset of the last metadata record it
//! published. The controller unfences it once that offset reaches its registration, and
//! fences it after `broker.session.timeout.ms` without a heartbeat. A heartbeat answered
//! STALE_BROKER_EPOCH (the controller forgot the registration, e.g. it unregistered the
//! broker) registers again.
//!
//! Controlled shutdown: heartbeats then ask to shut down (`want_shut_down`); the
//! controller moves leadership away and answers `should_shut_down` once none is left
//! here, and only then does the broker stop serving.
//!
//! The lease: a heartbeat the controller answered unfenced was sent at a time `t`, so the
//! controller heard from this broker no earlier than `t`, and cannot fence it (nor
//! elect other leaders in its place for being unreachable) before
//! `t + broker.session.timeout.ms` on its own clock. Until then, what this broker leads is
//! led nowhere else unless the metadata it applies says so: reads answered from memory
//! (committed offsets) are current only while this holds ([`ClusterLink::holds_lease`]).

use super::ClusterLink;
use osprey_protocol::messages::broker_registration_request::Listener;
use osprey_protocol::messages::{BrokerHeartbeatRequest, BrokerRegistrationRequest};
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody, Uuid};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Where the broker stands with the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The broker epoch of the current registration (`None` until registered).
    pub epoch: Option<i64>,
    /// Whether the controller has this broker fenced (true until it says otherwise).
    pub fenced: bool,
    /// The controller agreed to a controlled shutdown: no leadership is left here.
    pub should_shut_down: bool,
    /// Set once the broker was first unfenced: it has caught up with the metadata.
    pub caught_up_once: bool,
    /// Until when the controller keeps this broker's session at the least: the send time
    /// of the last heartbeat answered unfenced, plus `broker.session.timeout.ms`. None
    /// while fenced or unregistered.
    pub lease_until: Option<Instant>,
}

impl Default for Registration {
    /// Not registered, so fenced.
    fn default() -> Registration {
        Registration { epoch: None, fenced: true, should_shut_down: false, caught_up_once: false, lease_until: None }
    }
}

impl ClusterLink {
    /// Registers and heartbeats until `stopped`.
    pub async fn run_lifecycle(self: Arc<Self>, mut stopped: watch::Receiver<bool>) {
        let incarnation = match osprey_cluster::controller::random_uuid() {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(error = %e, "no randomness for the broker's incarnation id; cannot register");
                return;
            }
        };
        let mut published = self.watch_published();
        loop {
            if *stopped.borrow() {
                return;
            }
            // Registration needs the cluster id, which comes with the metadata.
            let cluster_id = loop {
                if let Some(id) = published.borrow_and_update().cluster_id.clone() {
                    break id;
                }
                tokio::select! {
                    _ = published.changed() => {}
                    _ = stopped.changed() => return,
                }
            };
            let Some(epoch) = self.register(&cluster_id, incarnation, &mut stopped).await else { return };
            tracing::info!(broker_epoch = epoch, %cluster_id, "registered with the active controller");
            self.registration.send_modify(|r| {
                r.epoch = Some(epoch);
                r.fenced = true;
            });
            if !self.heartbeat_until_stale(epoch, &mut stopped).await {
                return;
            }
            tracing::warn!("the controller no longer knows this broker's registration; registering again");
        }
    }

    /// Registers until the controller accepts (or `stopped`).
    async fn register(&self, cluster_id: &str, incarnation: Uuid, stopped: &mut watch::Receiver<bool>) -> Option<i64> {
        let listeners: Vec<Listener> = self
            .config
            .listeners
            .iter()
            .map(|l| Listener {
                name: l.name.clone(),
                host: l.host.clone(),
                port: l.port,
                security_protocol: l.security_protocol,
                ..Default::default()
            })
            .collect();
        let mut failures = 0u32;
        loop {
            let build = |_version: i16| {
                RequestBody::BrokerRegistration(BrokerRegistrationRequest {
                    broker_id: self.config.node_id,
                    cluster_id: cluster_id.to_string(),
                    incarnation_id: incarnation,
                    listeners: listeners.clone(),
                    rack: self.config.rack.clone(),
                    log_dirs: self.config.log_dir_ids.clone(),
                    previous_broker_epoch: self.previous_broker_epoch(),
                    ..Default::default()
                })
            };
            let deadline = Instant::now() + self.config.request_timeout;
            let sent = tokio::select! {
                sent = self.send_to_controller(ApiKey::BrokerRegistration, build, deadline) => sent,
                _ = stopped.changed() => return None,
            };
            let why = match sent {
                Ok(response) => match response.body {
                    ResponseBody::BrokerRegistration(r) if r.error_code == 0 => return Some(r.broker_epoch),
                    ResponseBody::BrokerRegistration(r) => {
                        let code = ErrorCode::from_code(r.error_code);
                        if code == Some(ErrorCode::INCONSISTENT_CLUSTER_ID) {
                            tracing::error!(
                                %cluster_id,
                                "the active controller refuses this broker's cluster id: this node's directories \
                                 belong to another cluster"
                            );
                        }
                        format!("registration refused: {}", code.map_or("unknown error", |c| c.name()))
                    }
                    other => format!("unexpected answer {:?}", other.api_key()),
                },
                Err(e) => e.to_string(),
            };
            failures += 1;
            if failures == 1 || failures.is_multiple_of(20) {
                tracing::warn!(attempts = failures, why, "broker registration not accepted yet; retrying");
            }
            let pause = self.config.heartbeat_interval.min(Duration::from_millis(500));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stopped.changed() => return None,
            }
        }
    }

    /// Heartbeats every interval. Returns false once `stopped`, true when the
    /// registration went stale (register again).
    async fn heartbeat_until_stale(&self, epoch: i64, stopped: &mut watch::Receiver<bool>) -> bool {
        let mut shutting_down = self.shutting_down.subscribe();
        let mut published = self.watch_published();
        let mut failures = 0u32;
        loop {
            let want_shut_down = *shutting_down.borrow_and_update();
            let offset = self.published().applied as i64 - 1;
            let build = |_version: i16| {
                RequestBody::BrokerHeartbeat(BrokerHeartbeatRequest {
                    broker_id: self.config.node_id,
                    broker_epoch: epoch,
                    current_metadata_offset: offset,
                    want_fence: false,
                    want_shut_down,
                    ..Default::default()
                })
            };
            let sent_at = Instant::now();
            let deadline = sent_at + self.config.heartbeat_interval.max(Duration::from_millis(100));
            let sent = tokio::select! {
                sent = self.send_to_controller(ApiKey::BrokerHeartbeat, build, deadline) => Some(sent),
                _ = stopped.changed() => return false,
            };
            match sent {
                Some(Ok(response)) => match response.body {
                    ResponseBody::BrokerHeartbeat(r) if r.error_code == 0 => {
                        failures = 0;
                        let was = self.registration();
                        if was.fenced && !r.is_fenced {
                            tracing::info!(metadata_offset = offset, "the controller unfenced this broker");
                        } else if !was.fenced && r.is_fenced {
                            tracing::warn!("the controller fenced this broker");
                        }
                        metrics::gauge!("osprey_broker_fenced").set(if r.is_fenced { 1.0 } else { 0.0 });
                        self.registration.send_modify(|s| {
                            s.fenced = r.is_fenced;
                            s.should_shut_down = r.should_shut_down;
                            s.caught_up_once |= !r.is_fenced;
                            s.lease_until = (!r.is_fenced).then_some(sent_at + self.config.session_timeout);
                        });
                    }
                    ResponseBody::BrokerHeartbeat(r) if r.error_code == ErrorCode::STALE_BROKER_EPOCH.code() => {
                        self.registration.send_modify(|s| {
                            s.epoch = None;
                            s.fenced = true;
                            s.lease_until = None;
                        });
                        return true;
                    }
                    ResponseBody::BrokerHeartbeat(r) => {
                        failures += 1;
                        let code = ErrorCode::from_code(r.error_code).map_or("UNKNOWN_SERVER_ERROR", |c| c.name());
                        metrics::counter!("osprey_broker_heartbeat_failures_total", "reason" => code).increment(1);
                        if failures == 1 || failures.is_multiple_of(20) {
                            tracing::warn!(error = code, "heartbeat refused by the controller");
                        }
                    }
                    _ => failures += 1,
                },
                Some(Err(e)) => {
                    failures += 1;
                    metrics::counter!("osprey_broker_heartbeat_failures_total", "reason" => "unreachable").increment(1);
                    if failures == 3 || failures.is_multiple_of(30) {
                        tracing::warn!(error = %e, "heartbeats are not reaching the active controller");
                    }
                }
                None => {}
            }
            let pause = tokio::time::sleep(self.config.heartbeat_interval);
            // While fenced, a heartbeat goes out as soon as more metadata is applied, so
            // the controller unfences the broker once it caught up, not an interval later.
            let fenced = self.registration().fenced;
            tokio::select! {
                _ = pause => {}
                // A shutdown request goes out at once.
                _ = shutting_down.changed() => {}
                _ = published.changed(), if fenced => {}
                _ = stopped.changed() => return false,
            }
        }
    }

    /// Asks for a controlled shutdown and waits until the controller has moved every
    /// leadership away (`should_shut_down`), or `timeout`. Returns whether it agreed.
    pub async fn controlled_shutdown(&self, timeout: Duration) -> bool {
        if self.registration().epoch.is_none() {
            return false;
        }
        self.shutting_down.send_replace(true);
        let mut registration = self.watch_registration();
        let agreed = registration.wait_for(|r| r.should_shut_down);
        tokio::time::timeout(timeout, agreed).await.is_ok_and(|r| r.is_ok())
    }
}
