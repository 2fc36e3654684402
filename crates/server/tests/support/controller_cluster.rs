//! A 3-member controller quorum in one process over an in-memory transport, an
//! `ActiveController` on each, and helpers that send Kafka request bodies through
//! `ControllerApis::handle` (shared by the active controller's test binaries).
#![allow(dead_code)]

use osprey_cluster::quorum::{
    ControllerEndpoint, Quorum, QuorumConfig, RaftRpc, RaftRpcReply, ReplicaKey, Transport, TransportError,
};
use osprey_cluster::MetadataImage;
use osprey_protocol::messages::broker_registration_request::Listener;
use osprey_protocol::messages::create_topics_request::CreatableTopic;
use osprey_protocol::messages::*;
use osprey_protocol::{RequestBody, ResponseBody, Uuid};
use osprey_server::controller_node::apis::ControllerApis;
use osprey_server::controller_node::{ActiveController, ActiveControllerConfig};
use osprey_storage::fs::SimStorage;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Member = (Arc<Quorum>, bool);

/// An in-process network: members by node id, each reachable or not.
#[derive(Default, Clone)]
pub struct Router {
    members: Arc<Mutex<BTreeMap<i32, Member>>>,
}

impl Router {
    pub fn set_reachable(&self, node_id: i32, reachable: bool) {
        if let Some(m) = self.members.lock().unwrap().get_mut(&node_id) {
            m.1 = reachable;
        }
    }
}

struct RouterTransport {
    from: i32,
    router: Router,
}

impl Transport for RouterTransport {
    async fn send(
        &self,
        target: ReplicaKey,
        _endpoint: &ControllerEndpoint,
        rpc: RaftRpc,
        _timeout: Duration,
    ) -> Result<RaftRpcReply, TransportError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let member = {
            let members = self.router.members.lock().unwrap();
            let reachable = |n: &i32| members.get(n).is_some_and(|m| m.1);
            if !reachable(&self.from) || !reachable(&target.node_id) {
                None
            } else {
                members.get(&target.node_id).map(|m| m.0.clone())
            }
        };
        match member {
            Some(q) => Ok(q.handle_rpc(rpc).await),
            None => Err(TransportError::Unreachable(format!("{target}"))),
        }
    }
}

pub const CLUSTER_ID: &str = "active-test";
pub const SESSION_TIMEOUT_MS: i64 = 9_000;

pub struct Cluster {
    pub router: Router,
    pub quorums: Vec<Arc<Quorum>>,
    pub controllers: Vec<Arc<ActiveController>>,
}

impl Cluster {
    /// Three quorum members, an active controller on each, one of them active.
    pub async fn start() -> Cluster {
        Cluster::start_with(|_| {}).await
    }

    /// As `start`, with each member's quorum config changed by `change`.
    pub async fn start_with(change: impl Fn(&mut QuorumConfig)) -> Cluster {
        Cluster::start_configured(change, |_| {}).await
    }

    /// As `start`, with each member's quorum and controller configs changed.
    pub async fn start_configured(
        change: impl Fn(&mut QuorumConfig),
        change_controller: impl Fn(&mut ActiveControllerConfig),
    ) -> Cluster {
        let cluster = Cluster::start_without_waiting(change, change_controller).await;
        cluster.active().await;
        cluster
    }

    /// As `start_configured`, without waiting for an active controller (there is none
    /// while the controllers take the cluster id from a log that has none yet).
    pub async fn start_without_waiting(
        change: impl Fn(&mut QuorumConfig),
        change_controller: impl Fn(&mut ActiveControllerConfig),
    ) -> Cluster {
        let router = Router::default();
        let mut quorums = Vec::new();
        let mut controllers = Vec::new();
        for n in 1..=3 {
            let mut config = QuorumConfig::new(key(n), endpoint(n));
            config.request_timeout_ms = 3_000;
            change(&mut config);
            let transport = RouterTransport { from: n, router: router.clone() };
            let q = Arc::new(Quorum::start(config, SimStorage::new(), Path::new("/meta"), transport).await.unwrap());
            router.members.lock().unwrap().insert(n, (q.clone(), true));
            let mut config = ActiveControllerConfig::new(Some(CLUSTER_ID.into()));
            config.cluster.broker_session_timeout_ms = SESSION_TIMEOUT_MS;
            config.placement_seed = Some(n as u64);
            change_controller(&mut config);
            controllers.push(Arc::new(ActiveController::new(q.clone(), config)));
            quorums.push(q);
            // openraft checks election timeouts on a tick (1.5 heartbeat intervals) and
            // draws each member's timeout once: members started at the same instant of
            // paused time tick together and two candidates can split the vote forever.
            // Started apart, their ticks never coincide, as between real processes.
            tokio::time::sleep(Duration::from_millis(125)).await;
        }
        let voters = (1..=3).map(|n| (key(n), endpoint(n))).collect();
        quorums[0].initialize(voters).await.unwrap();
        Cluster { router, quorums, controllers }
    }

    /// The index of the quorum's leader, once there is one.
    pub async fn leader(&self) -> usize {
        eventually("a leader is elected", || self.quorums.iter().any(|q| q.is_leader())).await;
        self.quorums.iter().position(|q| q.is_leader()).unwrap()
    }

    /// The index of the active controller, once there is one.
    pub async fn active(&self) -> usize {
        eventually("a controller is active", || self.controllers.iter().any(|c| c.is_active())).await;
        self.controllers.iter().position(|c| c.is_active()).unwrap()
    }

    pub async fn send(&self, at: usize, body: RequestBody, version: i16) -> ResponseBody {
        let header = RequestHeader {
            request_api_key: body.api_key() as i16,
            request_api_version: version,
            ..Default::default()
        };
        self.controllers[at].handle(header, body).await
    }

    /// What member `at` has applied.
    pub fn image(&self, at: usize) -> MetadataImage {
        self.quorums[at].applied().image
    }

    /// Registers brokers 1..=n; their epochs (the offsets of their registration records).
    pub async fn register(&self, at: usize, brokers: std::ops::RangeInclusive<i32>) -> Vec<i64> {
        let mut epochs = Vec::new();
        for id in brokers {
            match self.send(at, registration(id), 4).await {
                ResponseBody::BrokerRegistration(r) => {
                    assert_eq!(r.error_code, 0, "broker {id} registers");
                    epochs.push(r.broker_epoch);
                }
                other => panic!("{other:?}"),
            }
        }
        epochs
    }

    pub async fn heartbeat(&self, at: usize, id: i32, epoch: i64, offset: i64) -> BrokerHeartbeatResponse {
        let body = RequestBody::BrokerHeartbeat(BrokerHeartbeatRequest {
            broker_id: id,
            broker_epoch: epoch,
            current_metadata_offset: offset,
            ..Default::default()
        });
        match self.send(at, body, 2).await {
            ResponseBody::BrokerHeartbeat(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Brokers 1..=3 registered and unfenced on the active controller; their epochs.
    pub async fn three_unfenced_brokers(&self) -> Vec<i64> {
        let at = self.active().await;
        let epochs = self.register(at, 1..=3).await;
        for (id, epoch) in (1..=3).zip(&epochs) {
            assert!(self.image(at).broker(id).unwrap().fenced, "a new registration is fenced");
            let reply = self.heartbeat(at, id, *epoch, *epoch).await;
            assert_eq!(reply.error_code, 0);
            assert!(reply.is_caught_up && !reply.is_fenced, "caught up with its registration: unfenced");
        }
        assert!(self.image(at).brokers().all(|b| !b.fenced));
        epochs
    }

    pub async fn create_topic(&self, at: usize, name: &str, partitions: i32, rf: i16) -> CreatableTopicResultOwned {
        let body = RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: partitions,
                replication_factor: rf,
                ..Default::default()
            }],
            timeout_ms: 60_000,
            ..Default::default()
        });
        match self.send(at, body, 7).await {
            ResponseBody::CreateTopics(mut r) => r.topics.remove(0),
            other => panic!("{other:?}"),
        }
    }

    pub async fn allocate_producer_ids(&self, at: usize, id: i32, epoch: i64) -> AllocateProducerIdsResponse {
        let body = RequestBody::AllocateProducerIds(AllocateProducerIdsRequest {
            broker_id: id,
            broker_epoch: epoch,
            ..Default::default()
        });
        match self.send(at, body, 0).await {
            ResponseBody::AllocateProducerIds(r) => r,
            other => panic!("{other:?}"),
        }
    }
}

pub type CreatableTopicResultOwned = create_topics_response::CreatableTopicResult;

pub fn key(n: i32) -> ReplicaKey {
    ReplicaKey::new(n, [n as u8; 16])
}

pub fn endpoint(n: i32) -> ControllerEndpoint {
    ControllerEndpoint::new("127.0.0.1", 9000 + n as u16)
}

pub fn registration(id: i32) -> RequestBody {
    RequestBody::BrokerRegistration(BrokerRegistrationRequest {
        broker_id: id,
        cluster_id: CLUSTER_ID.into(),
        incarnation_id: Uuid([id as u8; 16]),
        listeners: vec![Listener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092 + id as u16,
            ..Default::default()
        }],
        rack: None,
        ..Default::default()
    })
}

/// Waits until `done`; a guard against hanging, not a timing assertion.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(300), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never happened: {what}");
}
