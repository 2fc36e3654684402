//! A controller without a log for unit tests: decisions applied straight to an image.

use crate::cluster_control::{
    BrokerHeartbeatInput, BrokerHeartbeatReply, BrokerRegistrationInput, ClusterControl, ClusterControlConfig,
    ControllerResult,
};
use crate::image::{BrokerListener, MetadataImage, MetadataRecord, PartitionImage};
use osprey_protocol::Uuid;
use std::collections::BTreeMap;

pub const CLUSTER_ID: &str = "test-cluster";
pub const SESSION_MS: i64 = 9_000;
pub const TOPIC: [u8; 16] = [7; 16];

pub struct TestCluster {
    pub image: MetadataImage,
    pub control: ClusterControl,
}

impl TestCluster {
    pub fn new() -> TestCluster {
        TestCluster {
            image: MetadataImage::default(),
            control: ClusterControl::new(ClusterControlConfig {
                cluster_id: Some(CLUSTER_ID.into()),
                broker_session_timeout_ms: SESSION_MS,
                unclean_leader_election_enable: false,
                min_insync_replicas: 1,
                eligible_leader_replicas_enabled: true,
            }),
        }
    }

    /// As `new`, with eligible leader replicas (KIP-966) off.
    pub fn without_elr() -> TestCluster {
        let mut c = TestCluster::new();
        c.control = ClusterControl::new(ClusterControlConfig {
            eligible_leader_replicas_enabled: false,
            ..c.control.config().clone()
        });
        c
    }

    /// Applies a decision's records, as the quorum would once they commit.
    pub fn commit<T>(&mut self, result: ControllerResult<T>) -> T {
        for r in &result.records {
            self.image.apply(r);
        }
        result.response
    }

    pub fn registration(id: i32, incarnation: u8) -> BrokerRegistrationInput {
        BrokerRegistrationInput {
            broker_id: id,
            cluster_id: CLUSTER_ID.into(),
            incarnation_id: Uuid([incarnation; 16]),
            listeners: vec![BrokerListener {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9000 + id as u16,
                security_protocol: 0,
            }],
            rack: None,
            previous_broker_epoch: -1,
        }
    }

    /// Registers a broker and heartbeats it unfenced; returns its epoch.
    pub fn add_broker(&mut self, id: i32, now_ms: i64) -> i64 {
        let result = self.control.register_broker(&self.image, &Self::registration(id, id as u8), now_ms).unwrap();
        let epoch = self.commit(result);
        let reply = self.heartbeat(id, epoch, now_ms, false);
        assert!(!reply.is_fenced);
        epoch
    }

    pub fn heartbeat(&mut self, id: i32, epoch: i64, now_ms: i64, want_shut_down: bool) -> BrokerHeartbeatReply {
        let request = BrokerHeartbeatInput {
            broker_id: id,
            broker_epoch: epoch,
            current_metadata_offset: self.image.next_offset() as i64,
            want_fence: false,
            want_shut_down,
        };
        let result = self.control.broker_heartbeat(&self.image, &request, now_ms).unwrap();
        self.commit(result)
    }

    /// A topic whose partitions have these replica lists, every replica in the ISR.
    pub fn add_topic(&mut self, replicas: Vec<Vec<i32>>, configs: BTreeMap<String, String>) {
        self.image.apply(&MetadataRecord::CreateTopic { name: "t".into(), id: TOPIC, replicas, configs, isrs: None });
    }

    pub fn partition(&self, index: i32) -> &PartitionImage {
        self.image.partition(Uuid(TOPIC), index).unwrap()
    }
}
