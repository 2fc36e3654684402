//! The cluster as clients see it, read from the metadata image (Kafka's
//! `KRaftMetadataCache`): which brokers are alive and where they listen, who leads a
//! partition and which replicas are offline.
//!
//! Every answer is for the listener the request came in on (Kafka's
//! `request.context.listenerName`): a broker is given at its endpoint on that listener,
//! and one registered without it is left out, as Kafka does. In a cluster the image
//! holds every broker's registration. A single node has none (its image only lists
//! topics, each led by this node): it is its own only broker, at the address it
//! advertises for that listener, exactly as before clusters existed.

use crate::broker::Broker;
use osprey_cluster::image::NO_LEADER;
use osprey_cluster::{BrokerRegistration, MetadataImage, PartitionImage, TopicImage};
use std::sync::Arc;

/// Where a broker is reached on one listener (Kafka's `Node`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// One snapshot of the image, read for a client connected on one listener.
#[derive(Debug, Clone)]
pub struct MetadataCache {
    image: Arc<MetadataImage>,
    /// This node's `node.id`.
    node_id: i32,
    /// This node as it advertises itself on the listener (`None`: it has no such
    /// client listener): the only broker of a single node.
    this_node: Option<Endpoint>,
    /// The name of the listener the client is connected on.
    listener: String,
}

/// Why a partition's leader cannot be given to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoLeader {
    /// No leader, or a leader that is not registered: LEADER_NOT_AVAILABLE.
    NotAvailable,
    /// The leader is registered without the client's listener: LISTENER_NOT_FOUND
    /// (Metadata v6+; older versions get LEADER_NOT_AVAILABLE).
    ListenerNotFound,
}

impl MetadataCache {
    /// The current image as seen by a client connected on `listener` (its name, as in
    /// `listeners`: `PLAINTEXT`, `INTERNAL`).
    pub fn for_listener(broker: &Broker, listener: &str) -> MetadataCache {
        let s = &broker.settings;
        let this_node = s.advertised_listener(listener).map(|l| Endpoint {
            node_id: s.node_id,
            host: l.host.clone(),
            port: i32::from(l.port),
            rack: None,
        });
        MetadataCache { image: broker.image(), node_id: s.node_id, this_node, listener: listener.to_string() }
    }

    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// No broker is registered: the single node, its own only broker.
    pub fn is_single_node(&self) -> bool {
        self.image.brokers().next().is_none()
    }

    /// Every unfenced broker with an endpoint on the listener, in id order (Kafka's
    /// `getAliveBrokerNodes`).
    pub fn alive_brokers(&self) -> Vec<Endpoint> {
        if self.is_single_node() {
            return self.this_node.iter().cloned().collect();
        }
        self.image.brokers().filter(|b| !b.fenced).filter_map(|b| self.endpoint_of(b)).collect()
    }

    /// Every registered broker on the listener, fenced ones included, with whether it is
    /// fenced, in id order (Kafka's `getBrokerNodes`, for DescribeCluster v2's
    /// `include_fenced_brokers`, KIP-1073).
    pub fn registered_brokers(&self) -> Vec<(Endpoint, bool)> {
        if self.is_single_node() {
            return self.this_node.iter().map(|e| (e.clone(), false)).collect();
        }
        self.image.brokers().filter_map(|b| self.endpoint_of(b).map(|e| (e, b.fenced))).collect()
    }

    /// The endpoint of broker `id` if it is registered, unfenced and on the listener
    /// (Kafka's `getAliveBrokerNode`).
    pub fn alive_broker(&self, id: i32) -> Option<Endpoint> {
        if self.is_single_node() {
            return self.this_node.clone().filter(|e| e.node_id == id);
        }
        self.image.broker(id).filter(|b| !b.fenced).and_then(|b| self.endpoint_of(b))
    }

    /// The id clients are given as the "controller" (Metadata, DescribeCluster): this
    /// broker while it is alive, else a random alive broker, else -1.
    ///
    /// Kafka in KRaft mode gives a random alive broker (`getRandomAliveBrokerId`): clients
    /// cannot reach the controllers, and every broker forwards what is meant for them
    /// (KIP-590). This broker is one of the alive ones, so naming it is an answer Kafka
    /// can give, and it is the one broker the client is known to reach, since it is
    /// answering. A random pick can name a broker that died and is not fenced yet:
    /// fencing waits `broker.session.timeout.ms`, and never comes while the controller
    /// quorum has no majority. librdkafka then waits for that broker until the admin
    /// request times out, rather than asking another.
    pub fn controller_id_for_clients(&self) -> i32 {
        if self.is_single_node() || self.image.broker(self.node_id).is_some_and(|b| !b.fenced) {
            return self.node_id;
        }
        self.random_alive_broker_id()
    }

    /// A random alive broker's id, or -1 when none is alive (Kafka's
    /// `getRandomAliveBrokerId`).
    fn random_alive_broker_id(&self) -> i32 {
        let alive: Vec<i32> = self.image.brokers().filter(|b| !b.fenced).map(|b| b.id).collect();
        if alive.is_empty() {
            return -1;
        }
        // No randomness from the OS (never seen on Linux): the first, still a live broker.
        let pick = getrandom::u32().unwrap_or(0) as usize;
        alive[pick % alive.len()]
    }

    /// The partition's leader for a client, as Kafka's Metadata answers it: a registered
    /// leader (fenced or not: it leads until the controller moves leadership) with an
    /// endpoint on the listener.
    pub fn leader(&self, partition: &PartitionImage) -> Result<Endpoint, NoLeader> {
        if partition.leader == NO_LEADER {
            return Err(NoLeader::NotAvailable);
        }
        if self.is_single_node() {
            return match partition.leader == self.node_id {
                true => self.this_node.clone().ok_or(NoLeader::ListenerNotFound),
                false => Err(NoLeader::NotAvailable),
            };
        }
        let broker = self.image.broker(partition.leader).ok_or(NoLeader::NotAvailable)?;
        self.endpoint_of(broker).ok_or(NoLeader::ListenerNotFound)
    }

    /// Replicas on brokers that are fenced, not registered or not on the listener
    /// (Kafka's `getOfflineReplicas`). A single node has none.
    pub fn offline_replicas(&self, replicas: &[i32]) -> Vec<i32> {
        if self.is_single_node() {
            return Vec::new();
        }
        replicas.iter().copied().filter(|id| !self.is_online(*id)).collect()
    }

    /// `replicas` without the offline ones (Metadata v0 lists only those).
    pub fn online_replicas(&self, replicas: &[i32]) -> Vec<i32> {
        if self.is_single_node() {
            return replicas.to_vec();
        }
        replicas.iter().copied().filter(|id| self.is_online(*id)).collect()
    }

    /// The current leader to tell a client that got NOT_LEADER_OR_FOLLOWER or
    /// FENCED_LEADER_EPOCH (KIP-951): the leader's id and epoch from the image, and its
    /// endpoint if it is alive on the listener (Kafka's `KafkaApis.getCurrentLeader`).
    /// (-1, -1, None) for a partition the image does not have.
    pub fn current_leader(&self, topic: Option<&TopicImage>, index: i32) -> (i32, i32, Option<Endpoint>) {
        let partition = topic.and_then(|t| self.image.partition(t.id, index));
        let Some(p) = partition else { return (NO_LEADER, -1, None) };
        (p.leader, p.leader_epoch, self.alive_broker(p.leader))
    }

    /// Registered, unfenced and on the listener.
    fn is_online(&self, id: i32) -> bool {
        self.image.broker(id).is_some_and(|b| !b.fenced && self.endpoint_of(b).is_some())
    }

    /// A registration's endpoint on the client's listener, if it has one.
    fn endpoint_of(&self, broker: &BrokerRegistration) -> Option<Endpoint> {
        let listener = broker.listeners.iter().find(|l| l.name == self.listener)?;
        Some(Endpoint {
            node_id: broker.id,
            host: listener.host.clone(),
            port: i32::from(listener.port),
            rack: broker.rack.clone(),
        })
    }
}
