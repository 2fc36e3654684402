//! Brokers of a cluster against three real controller nodes in one process, over
//! loopback sockets (port 0): each broker learns the cluster id, follows the committed
//! metadata log in order, registers and is unfenced once caught up; metadata writes go
//! to the active controller and are answered once the writer's image shows them;
//! producer id blocks are unique across brokers; the active controller is stopped and
//! brokers find the next one; a broker that stops heartbeating is fenced; a controlled
//! shutdown is agreed.

#[path = "support/controller_nodes.rs"]
mod controller_nodes;
use osprey_cluster::{MetadataImage, NewTopic};
use osprey_protocol::ErrorCode;
use osprey_server::cluster_link::{ClusterLink, LinkConfig, Publisher};
use osprey_server::config::BrokerConfig;
use osprey_server::controller_node::{active_apis, ControllerNode};
use osprey_server::interbroker::NodeAddress;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

const SESSION_TIMEOUT_MS: i32 = 3_000;
const HEARTBEAT_INTERVAL_MS: i32 = 200;

struct Controllers {
    dirs: Vec<PathBuf>,
    ports: Vec<u16>,
    nodes: Vec<Option<ControllerNode>>,
}

impl Controllers {
    fn start(test: &str) -> Controllers {
        let base = std::env::temp_dir().join(format!("osprey-cluster-link-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dirs: Vec<PathBuf> = (1..=3).map(|n| base.join(format!("controller-{n}"))).collect();
        let listeners: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let ports: Vec<u16> = listeners.iter().map(|l| l.local_addr().unwrap().port()).collect();
        let mut broker_config = BrokerConfig::default();
        broker_config.cluster.broker_session_timeout_ms = SESSION_TIMEOUT_MS;
        broker_config.cluster.broker_heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS;
        let nodes = listeners
            .into_iter()
            .zip(1..=3)
            .map(|(listener, id)| {
                let config = controller_nodes::node_config(id, &ports, dirs[id as usize - 1].clone());
                Some(ControllerNode::start(config, vec![listener], active_apis(&broker_config)).unwrap())
            })
            .collect();
        Controllers { dirs, ports, nodes }
    }

    fn active(&self) -> Option<i32> {
        self.nodes.iter().flatten().map(|n| n.quorum()).find(|q| q.is_leader()).map(|q| q.replica().node_id)
    }

    async fn stop(&mut self, id: i32) {
        let node = self.nodes[id as usize - 1].take().unwrap();
        tokio::task::spawn_blocking(move || node.shutdown()).await.unwrap();
    }

    async fn stop_all(mut self) {
        for id in 1..=3 {
            if self.nodes[id as usize - 1].is_some() {
                self.stop(id).await;
            }
        }
        let _ = std::fs::remove_dir_all(self.dirs[0].parent().unwrap());
    }
}

/// A broker's link, the offsets of the images it published (in order), and its stop.
struct Broker {
    link: Arc<ClusterLink>,
    published: Arc<Mutex<Vec<u64>>>,
    stop: watch::Sender<bool>,
}

impl Broker {
    fn start(node_id: i32, controllers: &Controllers) -> Broker {
        let link = ClusterLink::new(LinkConfig {
            node_id,
            controllers: (1..=3)
                .map(|n| (n, NodeAddress::new("127.0.0.1", controllers.ports[n as usize - 1])))
                .collect(),
            listeners: vec![osprey_cluster::BrokerListener {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9000 + node_id as u16,
                security_protocol: 0,
            }],
            rack: Some(format!("rack-{node_id}")),
            log_dir_ids: Vec::new(),
            heartbeat_interval: Duration::from_millis(HEARTBEAT_INTERVAL_MS as u64),
            session_timeout: Duration::from_millis(SESSION_TIMEOUT_MS as u64),
            request_timeout: Duration::from_secs(20),
            fetch_max_wait: Duration::from_millis(500),
            max_response_bytes: 100 * 1024 * 1024,
            controller_tls: None,
        });
        let published = Arc::new(Mutex::new(Vec::new()));
        let record = published.clone();
        let publisher: Publisher = Arc::new(move |image: Arc<MetadataImage>| {
            record.lock().unwrap().push(image.applied);
            Box::pin(async {})
        });
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(link.clone().follow(publisher, stopped.clone()));
        tokio::spawn(link.clone().run_lifecycle(stopped));
        Broker { link, published, stop }
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.link.published()
    }
}

/// Waits until `done`; a guard against hanging, not a timing assertion.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never happened: {what}");
}

/// Runs a blocking call of the link (the broker makes them from its blocking pool).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.unwrap()
}

fn topic(name: &str, partitions: i32, replication_factor: i16) -> NewTopic {
    NewTopic { name: name.into(), num_partitions: partitions, replication_factor, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_follow_register_write_through_the_active_controller_and_survive_its_loss() {
    let mut controllers = Controllers::start("main");
    let brokers = [Broker::start(11, &controllers), Broker::start(12, &controllers)];
    eventually("both brokers are unfenced", || brokers.iter().all(|b| b.link.registration().caught_up_once)).await;
    for b in &brokers {
        let image = b.image();
        assert!(image.cluster_id.is_some(), "learned the cluster id from the log");
        let registered: Vec<(i32, bool, Option<String>)> =
            image.brokers().map(|r| (r.id, r.fenced, r.rack.clone())).collect();
        assert!(registered.iter().any(|(id, _, rack)| *id == 11 && rack.as_deref() == Some("rack-11")));
    }

    // A topic created through broker 11: answered once 11's own image has it.
    let link = brokers[0].link.clone();
    let id = blocking(move || link.create_topic(&topic("spread", 4, 1), false)).await.unwrap();
    let created = brokers[0].image().topic_by_id(id).cloned().expect("the writer's image has the topic at once");
    let leaders: std::collections::BTreeSet<i32> = created.partitions.iter().map(|p| p.leader).collect();
    assert_eq!(leaders, [11, 12].into(), "partitions are placed over both brokers");
    eventually("broker 12 sees the topic", || brokers[1].image().topic("spread").is_some()).await;

    // Replication factor beyond the brokers registered is refused, with Kafka's message.
    let link = brokers[0].link.clone();
    let refused = blocking(move || link.create_topic(&topic("wide", 1, 3), false)).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::INVALID_REPLICATION_FACTOR, "{refused:?}");

    // Producer id blocks from the controller never overlap across brokers.
    let (a, b) = (brokers[0].link.clone(), brokers[1].link.clone());
    let first = blocking(move || a.allocate_producer_ids()).await.unwrap();
    let second = blocking(move || b.allocate_producer_ids()).await.unwrap();
    assert!(first.end <= second.start || second.end <= first.start, "{first:?} and {second:?} overlap");

    // The active controller goes away: writes reach the next one.
    let active = controllers.active().expect("an active controller");
    controllers.stop(active).await;
    let link = brokers[1].link.clone();
    let id = blocking(move || link.create_topic(&topic("after-failover", 1, 1), false)).await.unwrap();
    assert!(brokers[1].image().topic_by_id(id).is_some());
    eventually("broker 11 follows the new active controller", || brokers[0].image().topic("after-failover").is_some())
        .await;

    // Every broker applied the log in order: each image's offset above the previous.
    for b in &brokers {
        let offsets = b.published.lock().unwrap().clone();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "published out of order: {offsets:?}");
    }

    // Broker 12 stops heartbeating: the controller fences it and 11 sees that.
    brokers[1].stop.send_replace(true);
    eventually("broker 12 is fenced", || brokers[0].image().broker(12).is_some_and(|r| r.fenced)).await;

    // Broker 11 asks for a controlled shutdown and the controller agrees.
    assert!(brokers[0].link.controlled_shutdown(Duration::from_secs(30)).await);
    brokers[0].stop.send_replace(true);
    controllers.stop_all().await;
}
