//! Three controller nodes in one process over real loopback sockets (port 0): the
//! bootstrap from empty directories, a leader, commits through a stub active controller
//! reached over the CONTROLLER listener and through the quorum handle, one node stopped
//! (the other two still commit) and restarted (it catches up under the same replica
//! key), DescribeQuorum and DescribeCluster through the inter-broker client, and the
//! private keys left out of ApiVersions; a broker following the metadata log with
//! METADATA_FETCH from a node serving the active controller.

#[path = "support/controller_nodes.rs"]
mod controller_nodes;
use osprey_cluster::image::MetadataRecord;
use osprey_cluster::meta_properties::{self, Stored};
use osprey_cluster::quorum::{
    ControllerEndpoint, MetadataFetchContent, MetadataFetchRequest, MetadataFetchResponse, Quorum,
};
use osprey_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, DescribeClusterRequest, DescribeQuorumRequest,
};
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, RequestHeader, ResponseBody};
use osprey_server::controller_node::apis::{ControllerApis, ControllerReply};
use osprey_server::controller_node::{self as controller_node, rpc, ControllerNode, ControllerNodeConfig};
use osprey_server::interbroker::{ClientConfig, NodeAddress, NodeClient};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A stand-in for the active controller: AllocateProducerIds commits a block of 1,000
/// through the quorum and answers with it.
struct StubApis {
    quorum: Arc<Quorum>,
}

impl ControllerApis for StubApis {
    fn supported(&self) -> Vec<(i16, i16, i16)> {
        vec![(ApiKey::AllocateProducerIds as i16, 0, 0)]
    }

    fn handle_from(&self, _header: RequestHeader, _body: RequestBody, _forwarded_for: Option<&str>) -> ControllerReply {
        let quorum = self.quorum.clone();
        Box::pin(async move {
            let start = quorum.applied().image.next_producer_id;
            let next = start + 1000;
            let error_code = match quorum.propose(vec![MetadataRecord::ProducerIdsAllocated { next }]).await {
                Ok(_) => 0,
                Err(_) => ErrorCode::NOT_CONTROLLER.code(),
            };
            ResponseBody::AllocateProducerIds(AllocateProducerIdsResponse {
                error_code,
                producer_id_start: start,
                producer_id_len: 1000,
                ..Default::default()
            })
        })
    }
}

struct Cluster {
    dirs: Vec<PathBuf>,
    ports: Vec<u16>,
}

impl Cluster {
    /// A cluster whose directories are under a directory of its own (`test` names it).
    fn new(test: &str) -> Cluster {
        let base = std::env::temp_dir().join(format!("osprey-controller-quorum-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dirs = (1..=3).map(|n| base.join(format!("node-{n}"))).collect();
        Cluster { dirs, ports: Vec::new() }
    }

    fn config(&self, node_id: i32) -> ControllerNodeConfig {
        controller_nodes::node_config(node_id, &self.ports, self.dirs[node_id as usize - 1].clone())
    }

    fn start(&self, node_id: i32, listener: TcpListener) -> ControllerNode {
        let apis: osprey_server::controller_node::ApisFactory =
            Box::new(|quorum| Arc::new(StubApis { quorum }) as Arc<dyn ControllerApis>);
        ControllerNode::start(self.config(node_id), vec![listener], apis).unwrap()
    }

    fn client(&self, node_id: i32) -> NodeClient {
        let mut config = ClientConfig::new("test");
        config.request_timeout_ms = 10_000;
        NodeClient::new(config, node_id, NodeAddress::new("127.0.0.1", self.ports[node_id as usize - 1]))
    }

    async fn ask(&self, node_id: i32, body: RequestBody) -> ResponseBody {
        self.client(node_id).send(body).await.unwrap().body
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

fn leader_of(nodes: &[Option<ControllerNode>]) -> Option<i32> {
    nodes.iter().flatten().map(|n| n.quorum()).find(|q| q.is_leader()).map(|q| q.replica().node_id)
}

fn node(nodes: &[Option<ControllerNode>], id: i32) -> &ControllerNode {
    nodes[id as usize - 1].as_ref().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_controllers_bootstrap_commit_survive_a_stop_and_catch_up() {
    let mut cluster = Cluster::new("stop");
    let listeners: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    cluster.ports = listeners.iter().map(|l| l.local_addr().unwrap().port()).collect();
    eprintln!("controller ports: {:?}, dirs under {:?}", cluster.ports, cluster.dirs[0].parent());
    let mut nodes: Vec<Option<ControllerNode>> =
        listeners.into_iter().zip(1..=3).map(|(l, id)| Some(cluster.start(id, l))).collect();

    // Bootstrap: a leader, and every node learns the one cluster id into meta.properties.
    eventually("a leader is elected", || leader_of(&nodes).is_some()).await;
    eventually("every node learns the cluster id", || nodes.iter().flatten().all(|n| n.cluster_id().is_some())).await;
    let cluster_id = node(&nodes, 1).cluster_id().unwrap();
    for (dir, n) in cluster.dirs.iter().zip(nodes.iter().flatten()) {
        assert_eq!(n.cluster_id().as_deref(), Some(cluster_id.as_str()));
        match meta_properties::read(dir).unwrap() {
            Stored::Complete(m) => {
                assert_eq!(m.cluster_id, cluster_id);
                assert_eq!(m.directory_id.0, n.quorum().replica().directory_id, "the replica key is the directory's");
            }
            other => panic!("{} has {other:?}", dir.display()),
        }
    }
    let leader = leader_of(&nodes).unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    eventually("all three are voters", || node(&nodes, leader).quorum().voters().len() == 3).await;

    // ApiVersions lists what the listener and the stub serve, never the private keys.
    let versions = cluster.client(follower).peer_versions().await.unwrap();
    assert_eq!(versions.range(ApiKey::DescribeQuorum as i16), Some((0, 2)));
    assert_eq!(versions.range(ApiKey::AllocateProducerIds as i16), Some((0, 0)));
    assert!((rpc::HELLO..=rpc::INSTALL_SNAPSHOT).all(|k| versions.range(k).is_none()));

    // A Kafka request routed to the active controller commits on every node.
    match cluster.ask(leader, RequestBody::AllocateProducerIds(AllocateProducerIdsRequest::default())).await {
        ResponseBody::AllocateProducerIds(r) => assert_eq!((r.error_code, r.producer_id_start), (0, 0)),
        other => panic!("{other:?}"),
    }
    eventually("every node applies the block", || {
        nodes.iter().flatten().all(|n| n.quorum().applied().image.next_producer_id == 1000)
    })
    .await;

    // DescribeQuorum: the leader describes the quorum; a follower points elsewhere.
    let described = cluster.ask(leader, RequestBody::DescribeQuorum(DescribeQuorumRequest::default())).await;
    let ResponseBody::DescribeQuorum(d) = described else { panic!("not a DescribeQuorum") };
    let p = &d.topics[0].partitions[0];
    assert_eq!(d.topics[0].topic_name, "__cluster_metadata");
    assert_eq!((p.error_code, p.leader_id), (0, leader));
    assert_eq!(p.leader_epoch as u64, node(&nodes, leader).quorum().term());
    assert!(p.high_watermark > 0);
    let mut voter_ids: Vec<i32> = p.current_voters.iter().map(|v| v.replica_id).collect();
    voter_ids.sort();
    assert_eq!(voter_ids, [1, 2, 3]);
    assert!(p.current_voters.iter().all(|v| v.log_end_offset > 0 && v.last_fetch_timestamp > 0));
    assert_eq!(d.nodes.len(), 3);
    assert!(d
        .nodes
        .iter()
        .all(|n| n.listeners[0].name == "CONTROLLER" && n.listeners[0].port == cluster.ports[n.node_id as usize - 1]));
    let described = cluster.ask(follower, RequestBody::DescribeQuorum(DescribeQuorumRequest::default())).await;
    let ResponseBody::DescribeQuorum(d) = described else { panic!("not a DescribeQuorum") };
    assert_eq!(d.topics[0].partitions[0].error_code, ErrorCode::NOT_LEADER_OR_FOLLOWER.code());

    // DescribeCluster for controllers (KIP-919) names the active controller.
    let request = DescribeClusterRequest { endpoint_type: 2, ..Default::default() };
    let ResponseBody::DescribeCluster(c) = cluster.ask(follower, RequestBody::DescribeCluster(request)).await else {
        panic!("not a DescribeCluster")
    };
    assert_eq!((c.error_code, c.controller_id, c.cluster_id.as_str()), (0, leader, cluster_id.as_str()));
    assert_eq!(c.brokers.len(), 3);

    // Stop a follower: the other two still commit.
    let stopped = nodes[follower as usize - 1].take().unwrap();
    let stopped_key = stopped.quorum().replica();
    tokio::task::spawn_blocking(move || stopped.shutdown()).await.unwrap();
    let leader_quorum = node(&nodes, leader).quorum();
    leader_quorum.propose(vec![MetadataRecord::ProducerIdsAllocated { next: 5000 }]).await.unwrap();

    // Restart it on its directory and port: same replica key, and it catches up.
    let listener = TcpListener::bind(("127.0.0.1", cluster.ports[follower as usize - 1])).unwrap();
    nodes[follower as usize - 1] = Some(cluster.start(follower, listener));
    let restarted = node(&nodes, follower).quorum();
    assert_eq!(restarted.replica(), stopped_key, "a restart keeps the directory id");
    eventually("the restarted node catches up", || restarted.applied().image.next_producer_id == 5000).await;
    assert!(leader_of(&nodes).is_some());

    for n in nodes.into_iter().flatten() {
        tokio::task::spawn_blocking(move || n.shutdown()).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(cluster.dirs[0].parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_that_lost_its_disk_is_replaced_under_its_new_directory_id() {
    let mut cluster = Cluster::new("wipe");
    let listeners: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    cluster.ports = listeners.iter().map(|l| l.local_addr().unwrap().port()).collect();
    eprintln!("controller ports: {:?}, dirs {:?}", cluster.ports, cluster.dirs);
    let mut nodes: Vec<Option<ControllerNode>> =
        listeners.into_iter().zip(1..=3).map(|(l, id)| Some(cluster.start(id, l))).collect();
    eventually("a leader with three voters", || {
        leader_of(&nodes).is_some_and(|l| node(&nodes, l).quorum().voters().len() == 3)
    })
    .await;
    let leader = leader_of(&nodes).unwrap();
    let lost = (1..=3).find(|id| *id != leader).unwrap();
    let old_key = node(&nodes, lost).quorum().replica();

    let stopped = nodes[lost as usize - 1].take().unwrap();
    tokio::task::spawn_blocking(move || stopped.shutdown()).await.unwrap();
    std::fs::remove_dir_all(&cluster.dirs[lost as usize - 1]).unwrap();
    let listener = TcpListener::bind(("127.0.0.1", cluster.ports[lost as usize - 1])).unwrap();
    nodes[lost as usize - 1] = Some(cluster.start(lost, listener));
    let new_key = node(&nodes, lost).quorum().replica();
    assert_ne!(new_key, old_key, "an empty directory gets a new directory id");

    eventually("the new replica key replaces the old one among the voters", || {
        leader_of(&nodes).is_some_and(|l| {
            let voters = node(&nodes, l).quorum().voters();
            voters.len() == 3 && voters.contains(&new_key) && !voters.contains(&old_key)
        })
    })
    .await;
    let cluster_id = node(&nodes, leader).cluster_id();
    eventually("the replaced node learns the cluster id", || node(&nodes, lost).cluster_id() == cluster_id).await;
    let leader = leader_of(&nodes).unwrap();
    node(&nodes, leader).quorum().propose(vec![MetadataRecord::ProducerIdsAllocated { next: 42 }]).await.unwrap();
    eventually("the replaced node applies new entries", || {
        node(&nodes, lost).quorum().applied().image.next_producer_id == 42
    })
    .await;

    for n in nodes.into_iter().flatten() {
        tokio::task::spawn_blocking(move || n.shutdown()).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(cluster.dirs[0].parent().unwrap());
}

/// A request frame with header v2 (what the private keys and flexible versions use).
fn frame_v2(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&api_key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&correlation_id.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    f.push(0); // no tagged fields
    f.extend_from_slice(body);
    let mut out = (f.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&f);
    out
}

/// Sends `bytes` on a new connection and reads one response frame; `None` if the node
/// closed the connection instead.
async fn exchange(port: u16, bytes: &[u8]) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut size = [0u8; 4];
    let read =
        tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut size)).await.expect("no answer, no close");
    if read.is_err() {
        return None;
    }
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body).await.unwrap();
    Some(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_listener_closes_on_bad_input_and_keeps_serving() {
    let mut cluster = Cluster::new("bad-input");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    cluster.ports = vec![listener.local_addr().unwrap().port(); 3];
    let mut config = cluster.config(1);
    config.voters.truncate(1);
    config.limits.socket_request_max_bytes = 1024 * 1024;
    let apis: osprey_server::controller_node::ApisFactory =
        Box::new(|quorum| Arc::new(StubApis { quorum }) as Arc<dyn ControllerApis>);
    let node = ControllerNode::start(config, vec![listener], apis).unwrap();
    let port = cluster.ports[0];
    eventually("a one-voter quorum elects itself", || node.quorum().is_leader()).await;

    // Frame sizes outside 0..=socket.request.max.bytes close the connection before any read.
    assert_eq!(exchange(port, &(2 * 1024 * 1024i32).to_be_bytes()).await, None);
    assert_eq!(exchange(port, &(-5i32).to_be_bytes()).await, None);
    // A Kafka API a controller does not serve, an unknown key, a truncated header.
    assert_eq!(exchange(port, &frame_v2(ApiKey::Produce as i16, 9, 1, b"")).await, None);
    assert_eq!(exchange(port, &frame_v2(9_999, 0, 1, b"")).await, None);
    assert_eq!(exchange(port, &[0, 0, 0, 1, 0]).await, None);
    // Private keys: garbage, a wrong version, an RPC shorter than its replica key.
    let garbage = rpc::address(node.quorum().replica(), b"{\"Vote\":");
    assert_eq!(exchange(port, &frame_v2(rpc::VOTE, 0, 1, &garbage)).await, None);
    let incomplete = rpc::address(node.quorum().replica(), b"{\"AppendEntries\":{}}");
    assert_eq!(exchange(port, &frame_v2(rpc::VOTE, 0, 1, &incomplete)).await, None);
    assert_eq!(exchange(port, &frame_v2(rpc::VOTE, 1, 1, b"")).await, None);
    assert_eq!(exchange(port, &frame_v2(rpc::APPEND_ENTRIES, 0, 1, &[1, 2, 3])).await, None);
    assert_eq!(exchange(port, &frame_v2(rpc::HELLO, 0, 1, b"{not json")).await, None);
    // A metadata fetch missing its fields.
    assert_eq!(exchange(port, &frame_v2(rpc::METADATA_FETCH, 0, 1, b"{\"broker_id\":1}")).await, None);
    // An RPC for another replica of this node gets an empty answer, not a vote.
    let other = osprey_cluster::quorum::ReplicaKey::new(1, [0xee; 16]);
    let vote = rpc::address(other, b"{}");
    let answer = exchange(port, &frame_v2(rpc::VOTE, 0, 7, &vote)).await.expect("an answer");
    assert_eq!(answer, [0, 0, 0, 7, 0], "correlation id 7, no tagged fields, empty body");
    // ApiVersions of a version from the future: KIP-511's v0 answer with the table.
    let answer = exchange(port, &frame_v2(ApiKey::ApiVersions as i16, 99, 3, b"")).await.expect("an answer");
    assert_eq!(&answer[..6], &[0, 0, 0, 3, 0, 35], "correlation id 3, UNSUPPORTED_VERSION");

    // Still serving: a Hello is answered with this node's.
    let hello = osprey_cluster::quorum::Hello {
        replica: osprey_cluster::quorum::ReplicaKey::new(2, [2; 16]),
        endpoint: ControllerEndpoint::new("127.0.0.1", 1),
        cluster_id: None,
        has_quorum_state: false,
    };
    let answer = exchange(port, &frame_v2(rpc::HELLO, 0, 9, &rpc::encode_hello(&hello))).await.expect("an answer");
    let theirs = rpc::decode_hello(&answer[5..], 1 << 20).unwrap();
    assert_eq!(theirs.replica, node.quorum().replica());
    assert!(theirs.has_quorum_state);

    tokio::task::spawn_blocking(move || node.shutdown()).await.unwrap();
    let _ = std::fs::remove_dir_all(cluster.dirs[0].parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_formatted_cluster_id_is_committed_and_a_directory_of_another_cluster_fails_the_node() {
    let mut cluster = Cluster::new("formatted");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    cluster.ports = vec![listener.local_addr().unwrap().port(); 3];
    let formatted = meta_properties::random_uuid().unwrap().to_string();
    meta_properties::format(&[cluster.dirs[0].clone()], 1, &formatted, false).unwrap();
    let start = |listener: TcpListener| {
        let mut config = cluster.config(1);
        config.voters.truncate(1);
        let apis: osprey_server::controller_node::ApisFactory =
            Box::new(|quorum| Arc::new(StubApis { quorum }) as Arc<dyn ControllerApis>);
        ControllerNode::start(config, vec![listener], apis).unwrap()
    };
    let node = start(listener);
    eventually("the cluster id is learned", || node.cluster_id().is_some()).await;
    assert_eq!(node.cluster_id(), Some(formatted.clone()), "the id osprey format wrote is the cluster's");
    tokio::task::spawn_blocking(move || node.shutdown()).await.unwrap();

    // The directory now names another cluster than its quorum log: the node fails.
    let path = cluster.dirs[0].join(meta_properties::FILE_NAME);
    let other = meta_properties::random_uuid().unwrap().to_string();
    std::fs::write(&path, std::fs::read_to_string(&path).unwrap().replace(&formatted, &other)).unwrap();
    let node = start(TcpListener::bind(("127.0.0.1", cluster.ports[0])).unwrap());
    let why = tokio::time::timeout(Duration::from_secs(60), node.failed()).await.expect("the node fails");
    assert!(why.contains(&other) && why.contains(&formatted), "{why}");
    tokio::task::spawn_blocking(move || node.shutdown()).await.unwrap();
    let _ = std::fs::remove_dir_all(cluster.dirs[0].parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_voter_that_starts_late_is_added_by_the_leader() {
    let mut cluster = Cluster::new("late");
    let mut listeners: Vec<Option<TcpListener>> =
        (0..3).map(|_| Some(TcpListener::bind("127.0.0.1:0").unwrap())).collect();
    cluster.ports = listeners.iter().flatten().map(|l| l.local_addr().unwrap().port()).collect();
    eprintln!("controller ports: {:?}", cluster.ports);
    let mut nodes: Vec<Option<ControllerNode>> = vec![None, None, None];
    for id in [1, 2] {
        nodes[id as usize - 1] = Some(cluster.start(id, listeners[id as usize - 1].take().unwrap()));
    }
    eventually("two of three elect a leader and commit the cluster id", || {
        leader_of(&nodes).is_some() && nodes.iter().flatten().all(|n| n.cluster_id().is_some())
    })
    .await;
    assert_eq!(node(&nodes, leader_of(&nodes).unwrap()).quorum().voters().len(), 2, "initialized with the two");

    nodes[2] = Some(cluster.start(3, listeners[2].take().unwrap()));
    let late = node(&nodes, 3).quorum().replica();
    eventually("the late voter is a voter", || {
        leader_of(&nodes).is_some_and(|l| node(&nodes, l).quorum().voters().contains(&late))
    })
    .await;
    eventually("it learns the cluster id", || node(&nodes, 3).cluster_id() == node(&nodes, 1).cluster_id()).await;

    for n in nodes.into_iter().flatten() {
        tokio::task::spawn_blocking(move || n.shutdown()).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(cluster.dirs[0].parent().unwrap());
}

/// A broker's METADATA_FETCH over the CONTROLLER listener.
async fn fetch(client: &NodeClient, next_offset: u64, max_wait_ms: u64) -> MetadataFetchResponse {
    let request = MetadataFetchRequest { broker_id: 1, next_offset, max_wait_ms, max_records: 1_000 };
    let body = client.send_raw(rpc::METADATA_FETCH, rpc::VERSION, rpc::encode_fetch(&request)).await.unwrap();
    rpc::decode_fetch_response(&body, 1 << 20).unwrap()
}

fn fetched_records(response: MetadataFetchResponse, from: u64) -> Vec<MetadataRecord> {
    match response.content {
        MetadataFetchContent::Records { first_offset, records } if first_offset == from => records,
        other => panic!("expected records from {from}, got {other:?}"),
    }
}

fn created_topic(records: &[MetadataRecord]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match r {
            MetadataRecord::CreateTopic { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_follows_the_committed_metadata_log_over_the_controller_listener() {
    use osprey_protocol::messages::broker_registration_request::Listener;
    use osprey_protocol::messages::create_topics_request::CreatableTopic;
    use osprey_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use osprey_protocol::messages::{
        BrokerHeartbeatRequest, BrokerRegistrationRequest, CreateTopicsRequest, IncrementalAlterConfigsRequest,
    };
    let mut cluster = Cluster::new("metadata-fetch");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    cluster.ports = vec![listener.local_addr().unwrap().port(); 3];
    let start = |listener: TcpListener| {
        let mut config = cluster.config(1);
        config.voters.truncate(1);
        // A snapshot after every batch: the restarted node serves older offsets as the image.
        config.max_record_bytes_between_snapshots = 1;
        let apis = controller_node::active_apis(&osprey_server::config::BrokerConfig::default());
        ControllerNode::start(config, vec![listener], apis).unwrap()
    };
    let node = start(listener);
    eventually("the cluster id is committed", || node.cluster_id().is_some()).await;
    let cluster_id = node.cluster_id().unwrap();
    let client = cluster.client(1);

    let first = fetch(&client, 0, 0).await;
    assert_eq!(first.leader.as_ref().map(|l| l.node_id), Some(1), "the leader's node id");
    let records = fetched_records(first, 0);
    assert_eq!(records[0], MetadataRecord::ClusterId { id: cluster_id.clone() }, "offset 0 is the cluster id");

    // A broker registers with the committed id, catches up, and creates a topic.
    let registration = RequestBody::BrokerRegistration(BrokerRegistrationRequest {
        broker_id: 1,
        cluster_id: cluster_id.clone(),
        incarnation_id: osprey_protocol::Uuid([1; 16]),
        listeners: vec![Listener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
            ..Default::default()
        }],
        ..Default::default()
    });
    let epoch = eventually_async("the controller is active and registers the broker", || {
        let (cluster, registration) = (&cluster, registration.clone());
        async move {
            match cluster.ask(1, registration).await {
                ResponseBody::BrokerRegistration(r) if r.error_code == 0 => Some(r.broker_epoch),
                _ => None,
            }
        }
    })
    .await;
    let heartbeat = RequestBody::BrokerHeartbeat(BrokerHeartbeatRequest {
        broker_id: 1,
        broker_epoch: epoch,
        current_metadata_offset: epoch,
        ..Default::default()
    });
    match cluster.ask(1, heartbeat).await {
        ResponseBody::BrokerHeartbeat(r) => assert!(r.error_code == 0 && !r.is_fenced, "{r:?}"),
        other => panic!("{other:?}"),
    }
    let create = |name: &str| {
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: 2,
                replication_factor: -1,
                ..Default::default()
            }],
            timeout_ms: 10_000,
            ..Default::default()
        })
    };
    match cluster.ask(1, create("first")).await {
        ResponseBody::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
    // IncrementalAlterConfigs through the codec (v1, flexible), advertised in ApiVersions.
    match cluster.ask(1, RequestBody::ApiVersions(Default::default())).await {
        ResponseBody::ApiVersions(r) => {
            let served = |key: ApiKey| r.api_keys.iter().find(|k| k.api_key == key as i16).map(|k| k.max_version);
            assert_eq!((served(ApiKey::IncrementalAlterConfigs), served(ApiKey::AlterConfigs)), (Some(1), Some(2)));
        }
        other => panic!("{other:?}"),
    }
    let alter = RequestBody::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 2,
            resource_name: "first".into(),
            configs: vec![AlterableConfig {
                name: "retention.ms".into(),
                value: Some("1000".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    match cluster.ask(1, alter).await {
        ResponseBody::IncrementalAlterConfigs(r) => assert_eq!(r.responses[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
    let all = fetched_records(fetch(&client, 0, 0).await, 0);
    assert_eq!(created_topic(&all), vec!["first".to_string()], "the committed CreateTopics is in the log");
    let changed = all.iter().any(|r| {
        matches!(r, MetadataRecord::SetTopicConfig { key, value: Some(v), .. } if key == "retention.ms" && v == "1000")
    });
    assert!(changed, "the committed config change is in the log: {all:?}");

    // Nothing past the end yet: the fetch waits on its own connection and gets the next commit.
    let end = all.len() as u64;
    let waiting = {
        let client = cluster.client(1);
        tokio::spawn(async move { fetch(&client, end, 60_000).await })
    };
    match cluster.ask(1, create("second")).await {
        ResponseBody::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
    let mut next = fetched_records(waiting.await.unwrap(), end);
    if next.is_empty() {
        // The wait ended (it is bounded) before the commit: the next fetch has it.
        next = fetched_records(fetch(&client, end, 0).await, end);
    }
    assert_eq!(created_topic(&next), vec!["second".to_string()]);

    // Restarted from its snapshot, the node no longer holds the early records: a broker
    // asking for offset 0 gets the whole image.
    tokio::task::spawn_blocking(move || node.shutdown()).await.unwrap();
    let node = start(TcpListener::bind(("127.0.0.1", cluster.ports[0])).unwrap());
    let image = eventually_async("the restarted node serves the image", || {
        let client = cluster.client(1);
        async move {
            match fetch(&client, 0, 0).await.content {
                MetadataFetchContent::Image { image } => Some(*image),
                _ => None,
            }
        }
    })
    .await;
    assert_eq!(image.cluster_id.as_deref(), Some(cluster_id.as_str()));
    assert!(image.topic("first").is_some() && image.topic("second").is_some());
    tokio::task::spawn_blocking(move || node.shutdown()).await.unwrap();
    let _ = std::fs::remove_dir_all(cluster.dirs[0].parent().unwrap());
}

/// Retries `attempt` until it gives a value; a guard against hanging.
async fn eventually_async<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(v) = attempt().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("never happened: {what}"))
}

fn registration(broker_id: i32, cluster_id: &str) -> RequestBody {
    use osprey_protocol::messages::broker_registration_request::Listener;
    RequestBody::BrokerRegistration(osprey_protocol::messages::BrokerRegistrationRequest {
        broker_id,
        cluster_id: cluster_id.into(),
        incarnation_id: osprey_protocol::Uuid([broker_id as u8; 16]),
        listeners: vec![Listener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
            ..Default::default()
        }],
        ..Default::default()
    })
}

async fn register(cluster: &Cluster, at: i32, broker_id: i32, cluster_id: &str) -> i16 {
    match cluster.ask(at, registration(broker_id, cluster_id)).await {
        ResponseBody::BrokerRegistration(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_write_without_a_majority_fails_with_kafkas_error() {
    let mut cluster = Cluster::new("no-majority");
    let listeners: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    cluster.ports = listeners.iter().map(|l| l.local_addr().unwrap().port()).collect();
    let start = |cluster: &Cluster, id: i32, listener: TcpListener| {
        let apis = controller_node::active_apis(&osprey_server::config::BrokerConfig::default());
        ControllerNode::start(cluster.config(id), vec![listener], apis).unwrap()
    };
    let mut nodes: Vec<Option<ControllerNode>> =
        listeners.into_iter().zip(1..=3).map(|(l, id)| Some(start(&cluster, id, l))).collect();
    eventually("a leader and the cluster id", || {
        leader_of(&nodes).is_some() && nodes.iter().flatten().all(|n| n.cluster_id().is_some())
    })
    .await;
    let cluster_id = node(&nodes, 1).cluster_id().unwrap();
    let leader = eventually_async("the leader registers a broker", || {
        let (cluster, nodes, cluster_id) = (&cluster, &nodes, cluster_id.clone());
        async move {
            let leader = leader_of(nodes)?;
            (register(cluster, leader, 1, &cluster_id).await == 0).then_some(leader)
        }
    })
    .await;

    // The leader alone cannot commit: REQUEST_TIMED_OUT once controller.quorum.request.timeout.ms passed.
    let followers: Vec<i32> = (1..=3).filter(|&id| id != leader).collect();
    for &id in &followers {
        let n = nodes[id as usize - 1].take().unwrap();
        tokio::task::spawn_blocking(move || n.shutdown()).await.unwrap();
    }
    assert_eq!(register(&cluster, leader, 2, &cluster_id).await, ErrorCode::REQUEST_TIMED_OUT.code());

    // With a majority back, writes commit again.
    for &id in &followers {
        let listener = TcpListener::bind(("127.0.0.1", cluster.ports[id as usize - 1])).unwrap();
        nodes[id as usize - 1] = Some(start(&cluster, id, listener));
    }
    let leader = eventually_async("a write commits again", || {
        let (cluster, nodes, cluster_id) = (&cluster, &nodes, cluster_id.clone());
        async move {
            let leader = leader_of(nodes)?;
            (register(cluster, leader, 3, &cluster_id).await == 0).then_some(leader)
        }
    })
    .await;

    // A controller left alone that is not the leader answers NOT_CONTROLLER.
    let alone = (1..=3).find(|&id| id != leader).unwrap();
    for id in (1..=3).filter(|&id| id != alone) {
        let n = nodes[id as usize - 1].take().unwrap();
        tokio::task::spawn_blocking(move || n.shutdown()).await.unwrap();
    }
    assert_eq!(register(&cluster, alone, 4, &cluster_id).await, ErrorCode::NOT_CONTROLLER.code());

    for n in nodes.into_iter().flatten() {
        tokio::task::spawn_blocking(move || n.shutdown()).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(cluster.dirs[0].parent().unwrap());
}
