//! The client-facing handlers on a broker whose metadata image puts it in a cluster
//! (`test_support::broker_in_cluster`): brokers 1 (this one) and 2 alive, 3 fenced, 4 never
//! registered; topic `t` with partition 0 led here, 1 led by broker 2 (epoch 5) and 2
//! led by nobody (epoch 7).

use super::*;
use crate::broker::{Broker, DEFAULT_LISTENER};
use crate::dispatch::Reply;
use crate::test_support::{broker_in, broker_in_cluster, create_topic, partition_change, INTERNAL_PARTITIONS, TOPIC_T};
use osprey_coordinator::group::partition_for;
use osprey_protocol::messages::*;
use osprey_protocol::{ErrorCode, ResponseBody};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

/// NOT_LEADER_OR_FOLLOWER.
const NOT_LEADER: i16 = 6;
/// UNKNOWN_TOPIC_OR_PARTITION.
const UNKNOWN: i16 = 3;

struct Cleanup(Arc<Broker>, PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn cluster(name: &str) -> Cleanup {
    let (broker, dir) = broker_in_cluster(name);
    Cleanup(broker, dir)
}

/// The one client listener of these brokers, as the produce and fetch handlers take it.
fn plaintext() -> Arc<str> {
    DEFAULT_LISTENER.into()
}

/// The port this broker advertises on its one client listener.
fn advertised_port(broker: &Broker) -> i32 {
    broker.settings.advertised_listener(DEFAULT_LISTENER).map_or(-1, |l| i32::from(l.port))
}

async fn later(reply: Reply) -> ResponseBody {
    match reply {
        Reply::Now(body) => body,
        Reply::Later(pending) | Reply::Ordered(pending) => pending.await,
        Reply::Records(pending) => pending.await.into_body_read(),
        other => panic!("{other:?}"),
    }
}

fn metadata(broker: &Arc<Broker>, topics: Option<&[&str]>, version: i16) -> MetadataResponse {
    metadata_on(broker, DEFAULT_LISTENER, topics, version)
}

/// Metadata asked on the client listener `listener`.
fn metadata_on(broker: &Arc<Broker>, listener: &str, topics: Option<&[&str]>, version: i16) -> MetadataResponse {
    let topics = topics.map(|names| {
        names
            .iter()
            .map(|n| metadata_request::MetadataRequestTopic { name: Some(n.to_string()), ..Default::default() })
            .collect()
    });
    let req = MetadataRequest { topics, allow_auto_topic_creation: false, ..Default::default() };
    let ResponseBody::Metadata(resp) = metadata::handle(broker, req, version, listener) else { panic!("not Metadata") };
    resp
}

#[test]
fn metadata_lists_unfenced_brokers_with_racks_and_partitions_as_the_image_has_them() {
    let c = cluster("view-metadata");
    let port = advertised_port(&c.0);
    let resp = metadata(&c.0, None, 12);
    let brokers: Vec<_> =
        resp.brokers.iter().map(|b| (b.node_id, b.host.as_str(), b.port, b.rack.as_deref())).collect();
    assert_eq!(brokers, [(1, "127.0.0.1", port, Some("rack-a")), (2, "b2.example", 9092, Some("rack-b"))]);
    assert_eq!(resp.controller_id, 1, "this broker, alive");

    let t = resp.topics.iter().find(|t| t.name.as_deref() == Some("t")).unwrap();
    assert_eq!(t.error_code, 0);
    let p = |i: usize| &t.partitions[i];
    assert_eq!((p(0).error_code, p(0).leader_id, p(0).leader_epoch), (0, 1, 0));
    assert_eq!((p(0).replica_nodes.clone(), p(0).offline_replicas.clone()), (vec![1, 2, 3], vec![3]));
    assert_eq!((p(1).error_code, p(1).leader_id, p(1).leader_epoch), (0, 2, 5));
    assert_eq!((p(1).isr_nodes.clone(), p(1).offline_replicas.clone()), (vec![2, 1], vec![3]));
    // No leader: LEADER_NOT_AVAILABLE, leader -1, the epoch still given (as Kafka).
    let no_leader = ErrorCode::LEADER_NOT_AVAILABLE.code();
    assert_eq!((p(2).error_code, p(2).leader_id, p(2).leader_epoch), (no_leader, -1, 7));
    assert_eq!((p(2).replica_nodes.clone(), p(2).offline_replicas.clone()), (vec![3, 4], vec![3, 4]));

    // v0 lists only the live replicas, and says that some are missing.
    let v0 = metadata(&c.0, Some(&["t"]), 0);
    let p0 = &v0.topics[0].partitions[0];
    assert_eq!((p0.error_code, p0.leader_id), (ErrorCode::REPLICA_NOT_AVAILABLE.code(), 1));
    assert_eq!((p0.replica_nodes.clone(), p0.isr_nodes.clone()), (vec![1, 2], vec![1, 2]));
}

#[test]
fn metadata_and_describe_cluster_name_this_broker_as_controller_while_it_is_alive() {
    let c = cluster("view-controller");
    let described = || {
        let req = DescribeClusterRequest { endpoint_type: 1, ..Default::default() };
        let ResponseBody::DescribeCluster(resp) = describe_cluster::handle(&c.0, req, 1, DEFAULT_LISTENER) else {
            panic!()
        };
        resp.controller_id
    };
    // Never broker 2, although alive: a client asking this broker reaches this broker.
    let seen: BTreeSet<(i32, i32)> =
        (0..50).map(|_| (metadata(&c.0, Some(&[]), 12).controller_id, described())).collect();
    assert_eq!(seen, BTreeSet::from([(1, 1)]));
}

#[test]
fn a_fenced_broker_names_a_random_live_broker_as_controller() {
    let c = cluster("view-controller-fenced");
    c.0.apply_records_for_test(&[osprey_cluster::MetadataRecord::FenceBroker { id: 1, epoch: 10 }]);
    let seen: BTreeSet<i32> = (0..50).map(|_| metadata(&c.0, Some(&[]), 12).controller_id).collect();
    // Broker 2 is the only live one: never this fenced broker, nor fenced broker 3.
    assert_eq!(seen, BTreeSet::from([2]));
    c.0.apply_records_for_test(&[osprey_cluster::MetadataRecord::FenceBroker { id: 2, epoch: 20 }]);
    assert_eq!(metadata(&c.0, Some(&[]), 12).controller_id, -1, "no live broker");
}

#[test]
fn metadata_for_a_missing_topic_says_whether_its_name_could_exist() {
    let c = cluster("view-missing-topic");
    let resp = metadata(&c.0, Some(&["nope", "bad name"]), 12);
    assert_eq!(resp.topics[0].error_code, UNKNOWN);
    assert_eq!(resp.topics[1].error_code, ErrorCode::INVALID_TOPIC_EXCEPTION.code());
}

#[test]
fn a_single_node_is_its_only_broker_and_controller() {
    let (broker, dir) = broker_in("view-single-node");
    let _cleanup = Cleanup(broker.clone(), dir);
    let topic =
        osprey_cluster::NewTopic { name: "t".into(), num_partitions: 2, replication_factor: -1, ..Default::default() };
    broker.create_topic(&topic, false).unwrap();
    let s = &broker.settings;
    let resp = metadata(&broker, None, 12);
    let brokers: Vec<_> = resp.brokers.iter().map(|b| (b.node_id, b.host.clone(), b.port, b.rack.clone())).collect();
    let advertised = s.advertised_listener(DEFAULT_LISTENER).unwrap();
    assert_eq!(brokers, [(1, advertised.host.clone(), i32::from(advertised.port), None)]);
    assert_eq!(resp.controller_id, 1);
    for p in &resp.topics[0].partitions {
        assert_eq!((p.error_code, p.leader_id, p.offline_replicas.len()), (0, 1, 0));
    }
    let req = DescribeClusterRequest { endpoint_type: 1, ..Default::default() };
    let ResponseBody::DescribeCluster(resp) = describe_cluster::handle(&broker, req, 1, DEFAULT_LISTENER) else {
        panic!()
    };
    assert_eq!((resp.controller_id, resp.brokers.len(), resp.brokers[0].broker_id), (1, 1, 1));
}

/// A Metadata request naming a coordinator's missing internal topic creates it as the
/// coordinator does (Kafka's `AutoTopicCreationManager`): its coordinator's partition
/// count and configs, not the topic defaults (num.partitions 1), which would leave every
/// key hashing to another partition without a coordinator for good. Another topic gets
/// the defaults.
#[test]
fn metadata_creates_a_coordinators_internal_topic_as_the_coordinator_does() {
    let (broker, dir) = broker_in("view-auto-create-internal");
    let _cleanup = Cleanup(broker.clone(), dir);
    let names = ["__consumer_offsets", "__transaction_state", "__share_group_state", "plain"];
    let topics = names
        .iter()
        .map(|n| metadata_request::MetadataRequestTopic { name: Some(n.to_string()), ..Default::default() })
        .collect();
    let req = MetadataRequest { topics: Some(topics), allow_auto_topic_creation: true, ..Default::default() };
    let ResponseBody::Metadata(resp) = metadata::handle(&broker, req, 12, DEFAULT_LISTENER) else { panic!() };
    let created: Vec<_> =
        resp.topics.iter().map(|t| (t.name.clone().unwrap(), t.error_code, t.partitions.len())).collect();
    let count = |n: i32| usize::try_from(n).unwrap();
    assert_eq!(
        created,
        [
            ("__consumer_offsets".to_string(), 0, count(broker.settings.offsets_topic_num_partitions)),
            ("__transaction_state".to_string(), 0, count(broker.settings.config.transaction_state_log_num_partitions)),
            ("__share_group_state".to_string(), 0, count(broker.share_states.num_partitions())),
            ("plain".to_string(), 0, 1),
        ]
    );
    assert!(created.iter().take(3).all(|(_, _, partitions)| *partitions > 1), "the defaults are above one partition");
    let cleanup_policy = |name: &str| broker.image().topic(name).unwrap().configs.get("cleanup.policy").cloned();
    assert_eq!(cleanup_policy("__consumer_offsets").as_deref(), Some("compact"));
    assert_eq!(cleanup_policy("__share_group_state").as_deref(), Some("delete"));
    assert_eq!(cleanup_policy("plain"), None);
}

/// (node id, host, port) of each broker a Metadata answer lists.
fn endpoints(resp: &MetadataResponse) -> Vec<(i32, String, i32)> {
    resp.brokers.iter().map(|b| (b.node_id, b.host.clone(), b.port)).collect()
}

/// (node id, host, port) of each broker a DescribeCluster v1 answer asked on `listener` lists.
fn described_endpoints(broker: &Arc<Broker>, listener: &str) -> Vec<(i32, String, i32)> {
    let req = DescribeClusterRequest { endpoint_type: 1, ..Default::default() };
    let ResponseBody::DescribeCluster(resp) = describe_cluster::handle(broker, req, 1, listener) else { panic!() };
    resp.brokers.into_iter().map(|b| (b.broker_id, b.host, b.port)).collect()
}

/// (error, node id, host, port) of the group coordinator of `key`, asked on `listener`.
fn group_coordinator_on(broker: &Arc<Broker>, listener: &str, key: String) -> (i16, i32, String, i32) {
    let req = FindCoordinatorRequest { key_type: 0, coordinator_keys: vec![key], ..Default::default() };
    let ResponseBody::FindCoordinator(resp) = find_coordinator::handle(broker, req, 4, listener) else { panic!() };
    let c = &resp.coordinators[0];
    (c.error_code, c.node_id, c.host.clone(), c.port)
}

fn listener(name: &str, host: &str, port: u16) -> osprey_cluster::BrokerListener {
    osprey_cluster::BrokerListener { name: name.into(), host: host.into(), port, security_protocol: 0 }
}

#[test]
fn a_single_node_answers_with_its_advertised_endpoint_on_the_listener_asked() {
    let dir = std::env::temp_dir().join(format!("osprey-view-single-two-listeners-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Never bound: the answers give the advertised endpoints, not this.
    let mut settings = crate::broker::Settings::single_node("127.0.0.1:1".parse().unwrap(), dir.clone());
    settings.advertised_listeners =
        vec![listener("INTERNAL", "10.0.0.1", 9092), listener("EXTERNAL", "broker.example", 19092)];
    let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).unwrap();
    let _cleanup = Cleanup(broker.clone(), dir);
    let topic =
        osprey_cluster::NewTopic { name: "t".into(), num_partitions: 1, replication_factor: -1, ..Default::default() };
    broker.create_topic(&topic, false).unwrap();

    for (name, host, port) in [("INTERNAL", "10.0.0.1", 9092), ("EXTERNAL", "broker.example", 19092)] {
        let resp = metadata_on(&broker, name, None, 12);
        assert_eq!(endpoints(&resp), [(1, host.to_string(), port)], "Metadata on {name}");
        let p = &resp.topics[0].partitions[0];
        assert_eq!((p.error_code, p.leader_id), (0, 1));
        assert_eq!(described_endpoints(&broker, name), [(1, host.to_string(), port)], "DescribeCluster on {name}");
        assert_eq!(group_coordinator_on(&broker, name, "g".into()), (0, 1, host.to_string(), port));
    }
    // A listener this node does not advertise (no connection comes in on one): no
    // broker, and its partitions' leader is not on it.
    let resp = metadata_on(&broker, "OTHER", None, 12);
    assert!(resp.brokers.is_empty());
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_id), (ErrorCode::LISTENER_NOT_FOUND.code(), -1));
}

/// A cluster of [`broker_in_cluster`] whose brokers 1 and 3 registered INTERNAL and
/// EXTERNAL listeners (EXTERNAL first, so that answering with a broker's first listener
/// shows) and broker 2 INTERNAL only, with `__consumer_offsets` led by 2, 3 and 1.
fn cluster_with_two_listeners(name: &str) -> Cleanup {
    let c = cluster(name);
    let register = |id: i32, listeners: Vec<osprey_cluster::BrokerListener>, fenced: bool| {
        let mut record = crate::test_support::registration(id, "unused", 1, "rack", fenced);
        if let osprey_cluster::MetadataRecord::RegisterBroker { listeners: l, .. } = &mut record {
            *l = listeners;
        }
        record
    };
    let offsets = [9; 16];
    c.0.apply_records_for_test(&[
        register(1, vec![listener("EXTERNAL", "e1.example", 19091), listener("INTERNAL", "i1.example", 9091)], false),
        register(2, vec![listener("INTERNAL", "i2.example", 9092)], false),
        register(3, vec![listener("EXTERNAL", "e3.example", 19093), listener("INTERNAL", "i3.example", 9093)], true),
        create_topic("__consumer_offsets", offsets, vec![vec![2, 1], vec![3, 1], vec![1, 2]]),
    ]);
    c
}

#[test]
fn brokers_are_given_on_the_listener_the_request_came_in_on_and_left_out_without_it() {
    let c = cluster_with_two_listeners("view-two-listeners");

    let internal = metadata_on(&c.0, "INTERNAL", Some(&["t"]), 12);
    assert_eq!(endpoints(&internal), [(1, "i1.example".into(), 9091), (2, "i2.example".into(), 9092)]);
    let p = &internal.topics[0].partitions;
    assert_eq!((p[1].error_code, p[1].leader_id), (0, 2));
    assert_eq!(p[0].offline_replicas, [3], "fenced");

    let external = metadata_on(&c.0, "EXTERNAL", Some(&["t"]), 12);
    assert_eq!(endpoints(&external), [(1, "e1.example".into(), 19091)], "broker 2 has no EXTERNAL listener");
    let p = &external.topics[0].partitions;
    assert_eq!((p[0].error_code, p[0].leader_id), (0, 1));
    assert_eq!(p[0].offline_replicas, [2, 3], "not on the listener, or fenced");
    // Led by broker 2, which is not on EXTERNAL: LISTENER_NOT_FOUND from v6, as Kafka.
    assert_eq!((p[1].error_code, p[1].leader_id), (ErrorCode::LISTENER_NOT_FOUND.code(), -1));
    let v5 = metadata_on(&c.0, "EXTERNAL", Some(&["t"]), 5);
    let p1 = &v5.topics[0].partitions[1];
    assert_eq!((p1.error_code, p1.leader_id), (ErrorCode::LEADER_NOT_AVAILABLE.code(), -1));

    assert_eq!(described_endpoints(&c.0, "INTERNAL"), [(1, "i1.example".into(), 9091), (2, "i2.example".into(), 9092)]);
    assert_eq!(described_endpoints(&c.0, "EXTERNAL"), [(1, "e1.example".into(), 19091)]);

    // The coordinator of partition 2 (led here) on each listener; partition 0's leader,
    // broker 2, coordinates nothing for EXTERNAL clients.
    assert_eq!(group_coordinator_on(&c.0, "INTERNAL", key_on(2)), (0, 1, "i1.example".into(), 9091));
    assert_eq!(group_coordinator_on(&c.0, "EXTERNAL", key_on(2)), (0, 1, "e1.example".into(), 19091));
    assert_eq!(group_coordinator_on(&c.0, "INTERNAL", key_on(0)), (0, 2, "i2.example".into(), 9092));
    let unavailable = (ErrorCode::COORDINATOR_NOT_AVAILABLE.code(), -1, String::new(), -1);
    assert_eq!(group_coordinator_on(&c.0, "EXTERNAL", key_on(0)), unavailable);
}

#[test]
fn describe_cluster_lists_unfenced_brokers_and_the_fenced_ones_only_when_asked() {
    let c = cluster("view-describe-cluster");
    let brokers = |version: i16, include_fenced_brokers: bool| {
        let req = DescribeClusterRequest { endpoint_type: 1, include_fenced_brokers, ..Default::default() };
        let ResponseBody::DescribeCluster(resp) = describe_cluster::handle(&c.0, req, version, DEFAULT_LISTENER) else {
            panic!()
        };
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.controller_id, 1);
        resp.brokers.iter().map(|b| (b.broker_id, b.rack.clone().unwrap(), b.is_fenced)).collect::<Vec<_>>()
    };
    let live = vec![(1, "rack-a".to_string(), false), (2, "rack-b".to_string(), false)];
    assert_eq!(brokers(1, false), live);
    assert_eq!(brokers(2, false), live);
    let mut all = live.clone();
    all.push((3, "rack-c".to_string(), true));
    assert_eq!(brokers(2, true), all);
}

fn produce_request(partitions: &[i32]) -> ProduceRequest {
    use osprey_protocol::records::{BatchBuilder, Compression};
    produce_batches(partitions.iter().map(|&index| (index, BatchBuilder::new(Compression::None), "v")))
}

/// An acks=1 Produce to topic `t` of one record (`k`, value) per partition, each in the
/// batch its builder starts.
fn produce_batches<'a>(
    batches: impl IntoIterator<Item = (i32, osprey_protocol::records::BatchBuilder, &'a str)>,
) -> ProduceRequest {
    let partition_data = batches
        .into_iter()
        .map(|(index, mut batch, value)| {
            batch.append(0, Some(b"k"), Some(value.as_bytes()), &[]).unwrap();
            produce_request::PartitionProduceData {
                index,
                records: Some(batch.build().unwrap().into_bytes()),
                ..Default::default()
            }
        })
        .collect();
    ProduceRequest {
        // acks=1: partition 0's ISR names brokers that do not fetch in this test, and
        // acks=all would wait for them until the timeout.
        acks: 1,
        timeout_ms: 30_000,
        topic_data: vec![produce_request::TopicProduceData { name: "t".into(), partition_data, ..Default::default() }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn produce_to_a_partition_led_elsewhere_answers_not_leader_and_names_the_leader() {
    let c = cluster("view-produce");
    let answer = |version: i16| {
        let reply = produce::handle(&c.0, produce_request(&[0, 1, 2, 9]), version, &plaintext());
        async move {
            let ResponseBody::Produce(resp) = later(reply).await else { panic!("not Produce") };
            resp
        }
    };
    let v9 = answer(9).await;
    let codes: Vec<i16> = v9.responses[0].partition_responses.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, [0, NOT_LEADER, NOT_LEADER, UNKNOWN]);
    assert!(v9.node_endpoints.is_empty(), "v9 has no current leaders");

    // KIP-951: v10+ names the current leader and where to find it.
    let v10 = answer(10).await;
    let p = &v10.responses[0].partition_responses;
    assert_eq!((p[0].error_code, p[0].base_offset), (0, 1), "the partition led here takes the batch");
    assert_eq!((p[1].current_leader.leader_id, p[1].current_leader.leader_epoch), (2, 5));
    assert_eq!((p[2].current_leader.leader_id, p[2].current_leader.leader_epoch), (-1, 7));
    assert_eq!((p[3].error_code, p[3].current_leader.leader_id), (UNKNOWN, -1));
    let endpoints: Vec<_> = v10.node_endpoints.iter().map(|e| (e.node_id, e.host.as_str(), e.port)).collect();
    assert_eq!(endpoints, [(2, "b2.example", 9092)]);
}

#[tokio::test(flavor = "current_thread")]
async fn produce_names_the_current_leader_at_its_endpoint_on_the_listener_asked() {
    let c = cluster_with_two_listeners("view-produce-two-listeners");
    let answer = |listener: &str| {
        let reply = produce::handle(&c.0, produce_request(&[1]), 10, &listener.into());
        async move {
            let ResponseBody::Produce(resp) = later(reply).await else { panic!("not Produce") };
            resp
        }
    };
    let internal = answer("INTERNAL").await;
    assert_eq!(internal.responses[0].partition_responses[0].current_leader.leader_id, 2);
    let endpoints: Vec<_> = internal.node_endpoints.iter().map(|e| (e.node_id, e.host.as_str(), e.port)).collect();
    assert_eq!(endpoints, [(2, "i2.example", 9092)]);
    // Broker 2 has no EXTERNAL listener: named as leader, with no endpoint to go to.
    let external = answer("EXTERNAL").await;
    assert_eq!(external.responses[0].partition_responses[0].current_leader.leader_id, 2);
    assert!(external.node_endpoints.is_empty());
}

fn fetch_request(partitions: &[i32]) -> FetchRequest {
    let partitions = partitions
        .iter()
        .map(|&partition| fetch_request::FetchPartition {
            partition,
            current_leader_epoch: -1,
            partition_max_bytes: 1 << 20,
            ..Default::default()
        })
        .collect();
    FetchRequest {
        max_wait_ms: 0,
        max_bytes: 1 << 20,
        session_epoch: -1,
        topics: vec![fetch_request::FetchTopic { topic: "t".into(), partitions, ..Default::default() }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn fetch_from_a_partition_led_elsewhere_answers_not_leader_and_names_the_leader_from_v16() {
    let c = cluster("view-fetch");
    for version in [12, 15, 16] {
        let mut req = fetch_request(&[0, 1, 2, 9]);
        if version >= 13 {
            req.topics[0].topic_id = osprey_protocol::Uuid(TOPIC_T);
        }
        let ResponseBody::Fetch(resp) = later(fetch::handle(&c.0, req, version, &plaintext(), None)).await else {
            panic!()
        };
        let p = &resp.responses[0].partitions;
        let codes: Vec<i16> = p.iter().map(|p| p.error_code).collect();
        assert_eq!(codes, [0, NOT_LEADER, NOT_LEADER, UNKNOWN], "v{version}");
        let leaders: Vec<_> = p.iter().map(|p| (p.current_leader.leader_id, p.current_leader.leader_epoch)).collect();
        let endpoints: Vec<_> = resp.node_endpoints.iter().map(|e| (e.node_id, e.rack.clone())).collect();
        if version >= 16 {
            assert_eq!(leaders, [(-1, -1), (2, 5), (-1, 7), (-1, -1)]);
            assert_eq!(endpoints, [(2, Some("rack-b".to_string()))]);
        } else {
            assert!(leaders.iter().all(|l| *l == (-1, -1)), "v{version}: {leaders:?}");
            assert!(endpoints.is_empty());
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn offsets_and_records_of_a_partition_led_elsewhere_answer_not_leader() {
    let c = cluster("view-offsets");
    let req = ListOffsetsRequest {
        topics: vec![list_offsets_request::ListOffsetsTopic {
            name: "t".into(),
            partitions: [0, 1, 2, 9]
                .map(|i| list_offsets_request::ListOffsetsPartition {
                    partition_index: i,
                    current_leader_epoch: -1,
                    timestamp: -1,
                    ..Default::default()
                })
                .to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::ListOffsets(resp) = later(list_offsets::handle(&c.0, req, 7)).await else { panic!() };
    let codes: Vec<i16> = resp.topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, [0, NOT_LEADER, NOT_LEADER, UNKNOWN], "ListOffsets");

    let req = OffsetForLeaderEpochRequest {
        topics: vec![offset_for_leader_epoch_request::OffsetForLeaderTopic {
            topic: "t".into(),
            partitions: [0, 1, 2, 9]
                .map(|partition| offset_for_leader_epoch_request::OffsetForLeaderPartition {
                    partition,
                    current_leader_epoch: -1,
                    leader_epoch: 0,
                    ..Default::default()
                })
                .to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::OffsetForLeaderEpoch(resp) = offset_for_leader_epoch::handle(&c.0, req) else { panic!() };
    let codes: Vec<i16> = resp.topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, [0, NOT_LEADER, NOT_LEADER, UNKNOWN], "OffsetForLeaderEpoch");

    let req = DeleteRecordsRequest {
        topics: vec![delete_records_request::DeleteRecordsTopic {
            name: "t".into(),
            partitions: [0, 1, 2, 9]
                .map(|partition_index| delete_records_request::DeleteRecordsPartition {
                    partition_index,
                    offset: -1,
                    ..Default::default()
                })
                .to_vec(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::DeleteRecords(resp) = delete_records::handle(&c.0, req) else { panic!() };
    let codes: Vec<i16> = resp.topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, [0, NOT_LEADER, NOT_LEADER, UNKNOWN], "DeleteRecords");

    let req = DescribeProducersRequest {
        topics: vec![describe_producers_request::TopicRequest {
            name: "t".into(),
            partition_indexes: vec![0, 1, 2, 9],
            ..Default::default()
        }],
        ..Default::default()
    };
    let ResponseBody::DescribeProducers(resp) = transactions::describe_producers(&c.0, req) else { panic!() };
    let codes: Vec<i16> = resp.topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, [0, NOT_LEADER, NOT_LEADER, UNKNOWN], "DescribeProducers");
}

/// A key whose partition of an internal topic is `partition`.
fn key_on(partition: i32) -> String {
    (0..).map(|i| format!("key-{i}")).find(|k| partition_for(k, INTERNAL_PARTITIONS) == partition).unwrap()
}

#[test]
fn find_coordinator_answers_the_live_leader_of_the_keys_partition() {
    let c = cluster("view-find-coordinator");
    // __consumer_offsets led by 2, 3 (fenced, not yet moved) and here; __transaction_state
    // by nobody, 2 and here.
    let offsets = [9; 16];
    let state = [10; 16];
    let records = [
        create_topic("__consumer_offsets", offsets, vec![vec![2, 1], vec![3, 1], vec![1, 2]]),
        create_topic("__transaction_state", state, vec![vec![3, 4], vec![2, 1], vec![1, 2]]),
        partition_change(state, 0, -1, vec![3], vec![3, 4], 1),
    ];
    c.0.apply_records_for_test(&records);
    let port = advertised_port(&c.0);
    let find = |key_type: i8, keys: Vec<String>| {
        let req = FindCoordinatorRequest { key_type, coordinator_keys: keys, ..Default::default() };
        let ResponseBody::FindCoordinator(resp) = find_coordinator::handle(&c.0, req, 4, DEFAULT_LISTENER) else {
            panic!()
        };
        resp.coordinators.into_iter().map(|c| (c.error_code, c.node_id, c.host, c.port)).collect::<Vec<_>>()
    };
    let unavailable = (ErrorCode::COORDINATOR_NOT_AVAILABLE.code(), -1, String::new(), -1);
    let groups = find(0, vec![key_on(0), key_on(1), key_on(2)]);
    assert_eq!(groups[0], (0, 2, "b2.example".to_string(), 9092));
    assert_eq!(groups[1], unavailable, "a fenced leader coordinates nothing");
    assert_eq!(groups[2], (0, 1, "127.0.0.1".to_string(), port));
    let transactions = find(1, vec![key_on(0), key_on(1), key_on(2)]);
    assert_eq!(transactions[0], unavailable, "no leader");
    assert_eq!(transactions[1], (0, 2, "b2.example".to_string(), 9092));
    assert_eq!(transactions[2], (0, 1, "127.0.0.1".to_string(), port));

    // Before v4: one key, in the request's `key`.
    let req = FindCoordinatorRequest { key: key_on(0), key_type: 0, ..Default::default() };
    let ResponseBody::FindCoordinator(resp) = find_coordinator::handle(&c.0, req, 3, DEFAULT_LISTENER) else {
        panic!()
    };
    assert_eq!((resp.error_code, resp.node_id, resp.host.as_str(), resp.port), (0, 2, "b2.example", 9092));
}

#[test]
fn find_coordinator_names_the_leader_of_a_share_keys_state_partition() {
    use crate::share_states::SHARE_STATE_TOPIC;
    use osprey_coordinator::share_state::ShareKey;
    let c = cluster("view-find-share-coordinator");
    let partitions = c.0.share_states.num_partitions();
    // Even partitions of __share_group_state led by broker 2, odd ones here.
    let replicas = (0..partitions).map(|p| if p % 2 == 0 { vec![2, 1] } else { vec![1, 2] }).collect();
    c.0.apply_records_for_test(&[create_topic(SHARE_STATE_TOPIC, [11; 16], replicas)]);
    let key_on = |parity: i32| {
        let key =
            |i: i32| ShareKey { group_id: format!("g{i}"), topic_id: osprey_protocol::Uuid(TOPIC_T), partition: 0 };
        let key = (0..).map(key).find(|k| osprey_coordinator::share_state::partition_for(k, partitions) % 2 == parity);
        key.unwrap().coordinator_key()
    };
    let req =
        FindCoordinatorRequest { key_type: 2, coordinator_keys: vec![key_on(0), key_on(1)], ..Default::default() };
    let ResponseBody::FindCoordinator(resp) = find_coordinator::handle(&c.0, req, 6, DEFAULT_LISTENER) else {
        panic!()
    };
    let found: Vec<_> = resp.coordinators.into_iter().map(|c| (c.error_code, c.node_id, c.host, c.port)).collect();
    let port = advertised_port(&c.0);
    assert_eq!(found, [(0, 2, "b2.example".to_string(), 9092), (0, 1, "127.0.0.1".to_string(), port)]);
}

#[test]
fn describe_configs_of_another_broker_is_refused_as_kafka_does() {
    let c = cluster("view-describe-configs");
    let describe = |name: &str| {
        let req = DescribeConfigsRequest {
            resources: vec![describe_configs_request::DescribeConfigsResource {
                resource_type: describe_configs::RESOURCE_BROKER,
                resource_name: name.into(),
                configuration_keys: None,
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::DescribeConfigs(resp) = describe_configs::handle(&c.0, req, 4) else { panic!() };
        let r = resp.results.into_iter().next().unwrap();
        (r.error_code, r.error_message, r.configs.len())
    };
    let (code, _, configs) = describe("1");
    assert_eq!(code, 0);
    assert!(configs > 0);
    let invalid = ErrorCode::INVALID_REQUEST.code();
    let message = "Unexpected broker id, expected 1 or empty string, but received 2".to_string();
    assert_eq!(describe("2"), (invalid, Some(message), 0));
    let message = "Broker id must be an integer, but it is: one".to_string();
    assert_eq!(describe("one"), (invalid, Some(message), 0));
}

#[test]
fn describe_topic_partitions_gives_no_leader_and_offline_replicas_from_the_image() {
    let c = cluster("view-describe-topic-partitions");
    let req = DescribeTopicPartitionsRequest {
        topics: vec![describe_topic_partitions_request::TopicRequest { name: "t".into(), ..Default::default() }],
        response_partition_limit: 100,
        ..Default::default()
    };
    let ResponseBody::DescribeTopicPartitions(resp) = describe_topic_partitions::handle(&c.0, req, DEFAULT_LISTENER)
    else {
        panic!()
    };
    let p: Vec<_> =
        resp.topics[0].partitions.iter().map(|p| (p.leader_id, p.leader_epoch, p.offline_replicas.clone())).collect();
    assert_eq!(p, [(1, 0, vec![3]), (2, 5, vec![3]), (-1, 7, vec![3, 4])]);
}

fn produce_one(acks: i16, timeout_ms: i32) -> ProduceRequest {
    ProduceRequest { acks, timeout_ms, ..produce_request(&[0]) }
}

fn produced(resp: ResponseBody) -> produce_response::PartitionProduceResponse {
    let ResponseBody::Produce(resp) = resp else { panic!("not Produce") };
    resp.responses[0].partition_responses[0].clone()
}

/// A follower's fetch of partition 0 (led here) at `fetch_offset`: replica id in the
/// v12 field or in `ReplicaState` from v15.
fn follower_fetch(replica_id: i32, fetch_offset: i64, version: i16) -> FetchRequest {
    let mut req = fetch_request(&[0]);
    req.topics[0].partitions[0].fetch_offset = fetch_offset;
    if version >= 13 {
        req.topics[0].topic_id = osprey_protocol::Uuid(TOPIC_T);
    }
    if version >= 15 {
        req.replica_state = fetch_request::ReplicaState { replica_id, replica_epoch: 20, ..Default::default() };
    } else {
        req.replica_id = replica_id;
    }
    req
}

async fn fetched(c: &Cleanup, req: FetchRequest, version: i16) -> fetch_response::PartitionData {
    let ResponseBody::Fetch(resp) = later(fetch::handle(&c.0, req, version, &plaintext(), None)).await else {
        panic!("not Fetch")
    };
    resp.responses[0].partitions[0].clone()
}

#[tokio::test(flavor = "current_thread")]
async fn acks_all_waits_for_every_isr_follower_and_times_out_without_them() {
    let c = cluster("view-acks-all-timeout");
    // Partition 0's ISR is [1, 2, 3]; 2 and 3 never fetch here.
    let answer = produced(later(produce::handle(&c.0, produce_one(-1, 200), 9, &plaintext())).await);
    assert_eq!(answer.error_code, ErrorCode::REQUEST_TIMED_OUT.code(), "{answer:?}");
    let partition = c.0.replica_manager.partition(osprey_protocol::Uuid(TOPIC_T), 0).unwrap();
    assert_eq!(partition.snapshot().high_watermark, 0, "nothing is committed without the followers");
    assert_eq!(partition.log.log_end_offset(), 1, "the batch stays in the log, as in Kafka");
}

#[tokio::test(flavor = "current_thread")]
async fn follower_fetches_read_past_the_high_watermark_and_move_it() {
    let c = cluster("view-follower-fetch");
    let waiting = tokio::spawn(later(produce::handle(&c.0, produce_one(-1, 30_000), 9, &plaintext())));
    let partition = c.0.replica_manager.partition(osprey_protocol::Uuid(TOPIC_T), 0).unwrap();
    // The leader's own copy counts once fsynced (by the flusher, in the background): the
    // high watermark below can only reach 1 after that.
    while partition.log.durable_end_offset() < 1 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // A consumer sees nothing past the high watermark; a follower reads the batch.
    let consumer = fetched(&c, fetch_request(&[0]), 12).await;
    assert!(consumer.records.as_ref().is_none_or(|r| r.is_empty()), "{consumer:?}");
    let follower = fetched(&c, follower_fetch(2, 0, 12), 12).await;
    assert_eq!(follower.error_code, 0);
    assert!(follower.records.as_ref().is_some_and(|r| !r.is_empty()), "the follower reads past the high watermark");
    assert_eq!(follower.high_watermark, 0);
    // Each follower comes back for offset 1: it has the batch, durably.
    assert_eq!(fetched(&c, follower_fetch(2, 1, 12), 12).await.error_code, 0);
    assert!(!waiting.is_finished(), "broker 3 is still in the ISR and has not fetched");
    let last = fetched(&c, follower_fetch(3, 1, 15), 15).await;
    assert_eq!((last.error_code, last.high_watermark), (0, 1), "v15 names the replica in ReplicaState");
    let answer = produced(waiting.await.unwrap());
    assert_eq!((answer.error_code, answer.base_offset), (0, 0), "acknowledged once every ISR member has it");
}

#[tokio::test(flavor = "current_thread")]
async fn a_fetcher_that_is_not_a_follower_reads_nothing_past_the_high_watermark() {
    let c = cluster("view-not-a-follower");
    let answer = produced(later(produce::handle(&c.0, produce_one(1, 30_000), 9, &plaintext())).await);
    assert_eq!(answer.error_code, 0);
    for (replica_id, version) in [(7, 12), (1, 12), (7, 15)] {
        let got = fetched(&c, follower_fetch(replica_id, 0, version), version).await;
        assert_eq!(got.error_code, NOT_LEADER, "replica {replica_id} at v{version}");
        assert!(got.records.as_ref().is_none_or(|r| r.is_empty()));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_fetch_from_a_diverging_epoch_is_told_where_the_leaders_log_ends() {
    let c = cluster("view-diverging");
    for acks in [1, 1] {
        assert_eq!(
            produced(later(produce::handle(&c.0, produce_one(acks, 30_000), 9, &plaintext())).await).error_code,
            0
        );
    }
    // The fetcher's last batch is from epoch 0 at offset 4; this log's epoch 0 ends at 2.
    let mut req = follower_fetch(2, 5, 12);
    req.topics[0].partitions[0].last_fetched_epoch = 0;
    let got = fetched(&c, req, 12).await;
    assert_eq!(got.error_code, 0);
    assert_eq!((got.diverging_epoch.epoch, got.diverging_epoch.end_offset), (0, 2), "epoch 0 ends at offset 2 here");
    assert!(got.records.as_ref().is_none_or(|r| r.is_empty()), "no records with a diverging epoch");
    // An epoch newer than any this log has cannot be placed: OFFSET_OUT_OF_RANGE, as Kafka.
    let mut req = follower_fetch(2, 5, 12);
    req.topics[0].partitions[0].last_fetched_epoch = 3;
    assert_eq!(fetched(&c, req, 12).await.error_code, ErrorCode::OFFSET_OUT_OF_RANGE.code());
    // In step: no diverging epoch, records as usual.
    let mut req = follower_fetch(2, 1, 12);
    req.topics[0].partitions[0].last_fetched_epoch = 0;
    let got = fetched(&c, req, 12).await;
    assert_eq!((got.diverging_epoch.epoch, got.diverging_epoch.end_offset), (-1, -1));
    assert!(got.records.as_ref().is_some_and(|r| !r.is_empty()));
}

#[tokio::test(flavor = "current_thread")]
async fn a_follower_makes_what_it_fetched_durable_before_it_fetches_again() {
    use crate::replication::fetcher::{apply, Outcome};
    let c = cluster("view-follower-durable");
    let answer = produced(later(produce::handle(&c.0, produce_one(1, 30_000), 9, &plaintext())).await);
    assert_eq!(answer.error_code, 0, "{answer:?}");
    // Partition 0's batch, as a leader answers a follower, applied to partition 1, which
    // broker 2 leads and this broker follows.
    let from_leader = fetched(&c, follower_fetch(2, 0, 12), 12).await;
    assert!(from_leader.records.as_ref().is_some_and(|r| !r.is_empty()), "{from_leader:?}");
    let follower = c.0.replica_manager.replica(osprey_protocol::Uuid(TOPIC_T), 1).unwrap();
    assert!(!follower.is_leader());
    let data = fetch_response::PartitionData { partition_index: 1, log_start_offset: 0, ..from_leader };
    assert_eq!(apply(&follower, follower.leader_epoch(), data), Outcome::Done);
    assert_eq!(follower.log.log_end_offset(), 1, "appended as the leader wrote it");
    // The next fetch names offset 1, which tells the leader the batch is on disk here.
    assert_eq!(follower.log.durable_end_offset(), 1, "fsynced before the fetcher fetches again");
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_to_a_fetch_made_before_the_leadership_changed_applies_nothing() {
    // Seed 1066 of the chaos long run: a fetch to a deposed leader came back after this
    // replica had followed the new leader and truncated for it, and its records were
    // appended again, past the point where the new leader's log diverges.
    use crate::replication::fetcher::{apply, Outcome};
    let c = cluster("view-follower-stale-answer");
    let answer = produced(later(produce::handle(&c.0, produce_one(1, 30_000), 9, &plaintext())).await);
    assert_eq!(answer.error_code, 0, "{answer:?}");
    let from_leader = fetched(&c, follower_fetch(2, 0, 12), 12).await;
    assert!(from_leader.records.as_ref().is_some_and(|r| !r.is_empty()), "{from_leader:?}");
    let follower = c.0.replica_manager.replica(osprey_protocol::Uuid(TOPIC_T), 1).unwrap();
    let fetched_at = follower.leader_epoch();
    // The leadership moves on (a new epoch) while the fetch is out.
    let image = c.0.image();
    let mut moved = image.topic_by_id(osprey_protocol::Uuid(TOPIC_T)).unwrap().partitions[1].clone();
    moved.leader_epoch = fetched_at + 1;
    moved.partition_epoch += 1;
    follower.apply_assignment(&moved);
    assert!(!follower.is_leader());
    let data = fetch_response::PartitionData { partition_index: 1, log_start_offset: 0, ..from_leader };
    assert_eq!(apply(&follower, fetched_at, data.clone()), Outcome::MetadataRace);
    assert_eq!(follower.log.log_end_offset(), 0, "nothing of the old epoch's answer appended");
    // At the epoch it follows now, an answer applies.
    assert_eq!(apply(&follower, fetched_at + 1, data), Outcome::Done);
    assert_eq!(follower.log.log_end_offset(), 1);
}

/// One idempotent batch of producer 7, epoch 0, at `sequence`, for partition 1.
fn idempotent_produce(sequence: i32) -> ProduceRequest {
    use osprey_protocol::records::{BatchBuilder, Compression};
    let value = format!("v{sequence}");
    produce_batches([(1, BatchBuilder::new(Compression::None).producer(7, 0, sequence), value.as_str())])
}

#[tokio::test(flavor = "current_thread")]
async fn a_gap_left_by_batches_refused_before_the_leadership_landed_is_not_out_of_order() {
    // Seed 3 of the chaos runs: a producer's batches 1 and 2 reach this broker just before
    // it applies its election and are refused NOT_LEADER_OR_FOLLOWER; batch 3 comes after,
    // while the log's last batch of the producer is 0 (the old leader's, replicated). Kafka
    // answers it OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka renumbers batches the old
    // leader may have written, and stores them twice. Here batch 3 gets the refusal its
    // predecessors got, and all three are taken once they come in order.
    use osprey_protocol::records::{BatchBuilder, Compression};
    let c = cluster("view-refused-gap");
    let partition = c.0.replica_manager.replica(osprey_protocol::Uuid(TOPIC_T), 1).unwrap();
    let mut replicated = BatchBuilder::new(Compression::None).producer(7, 0, 0).partition_leader_epoch(5);
    replicated.append(0, Some(b"k"), Some(b"v0"), &[]).unwrap();
    partition.log.append_as_follower(replicated.build().unwrap().as_bytes(), 0).unwrap();
    let send = |sequence: i32| {
        let reply = produce::handle(&c.0, idempotent_produce(sequence), 9, &plaintext());
        async move { produced(later(reply).await) }
    };
    for sequence in [1, 2] {
        assert_eq!(send(sequence).await.error_code, NOT_LEADER, "batch {sequence} before the election");
    }
    // The election lands: this broker leads partition 1 at a new epoch.
    let image = c.0.image();
    let mut elected = image.topic_by_id(osprey_protocol::Uuid(TOPIC_T)).unwrap().partitions[1].clone();
    elected.leader = 1;
    elected.leader_epoch += 1;
    elected.partition_epoch += 1;
    partition.apply_assignment(&elected);
    assert!(partition.is_leader());

    let third = send(3).await;
    assert_eq!(third.error_code, NOT_LEADER, "the gap is this broker's refusals: {third:?}");
    // In order, each is taken once.
    let mut taken = Vec::new();
    for sequence in [1, 2, 3] {
        let r = send(sequence).await;
        taken.push((r.error_code, r.base_offset));
    }
    assert_eq!(taken, [(0, 1), (0, 2), (0, 3)]);
    // A gap no refusal here explains is out of order, as in Kafka.
    assert_eq!(send(6).await.error_code, ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.code());
}

/// A leader of a `__transaction_state` partition loads it only once the partition's high
/// watermark has reached its log end (`transactions::load_partition`): a record above it
/// may be one a later leader never has, and a prepared transaction found there would be
/// completed with markers at once (`crates/coordinator/tests/cluster_txn_simulation.rs`,
/// `a_new_coordinator_completes_no_transaction_its_high_watermark_has_not_passed`).
#[tokio::test(flavor = "current_thread")]
async fn transactions_load_only_once_the_state_partitions_records_are_committed() {
    use crate::coordinator_leadership::LoadMode;
    use osprey_coordinator::txn::{Output, ReplyId, TransactionCoordinator, TxnConfig};
    const STATE: [u8; 16] = [9; 16];
    let c = cluster("view-txn-load-waits");
    let state = create_topic("__transaction_state", STATE, vec![vec![1, 2], vec![2, 1], vec![2, 1]]);
    c.0.apply_records_for_test(&[state]);
    let partition = c.0.replica_manager.partition(osprey_protocol::Uuid(STATE), 0).unwrap();
    // A transactional id of partition 0, initialized by a coordinator of its own: its record,
    // appended here as leader, fetched by no follower yet.
    let id = (0..).map(|i| format!("txn-{i}")).find(|id| partition_for(id, INTERNAL_PARTITIONS) == 0).unwrap();
    let config = TxnConfig { transaction_state_log_num_partitions: INTERNAL_PARTITIONS, ..TxnConfig::default() };
    let mut own = TransactionCoordinator::new(config);
    own.load(0, 0, Vec::new(), 0).unwrap();
    let init = InitProducerIdRequest {
        transactional_id: Some(id.clone()),
        transaction_timeout_ms: 60_000,
        ..Default::default()
    };
    own.init_producer_id(&init, 4, ReplyId(1), &mut || Ok(4000), 0);
    let Some(Output::Persist { record, .. }) = own.poll_output() else { panic!("no persist") };
    let _waiting = crate::partition::append_coordinator_records(&partition, 0, &c.0.flusher, &[record], None, "test")
        .expect("appended as leader");
    while partition.log.durable_end_offset() < 1 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!((partition.snapshot().high_watermark, partition.log.log_end_offset()), (0, 1));

    let coordinator = |c: &Cleanup| {
        c.0.transactions.call(&c.0, |t, _| (t.loading_epoch(0), t.loaded_epoch(0), t.transaction(&id).is_some()))
    };
    c.0.transactions.follow_partition(&c.0, 0, Some((partition.clone(), 0)), LoadMode::Now);
    assert_eq!(coordinator(&c), (Some(0), None, false), "begun, waiting for the high watermark");
    c.0.transactions.follow_partition(&c.0, 0, Some((partition.clone(), 0)), LoadMode::Now);
    assert_eq!(coordinator(&c), (Some(0), None, false), "still waiting: nothing moved it");

    // Broker 2 fetches the record, then comes back past it: the high watermark reaches 1.
    let mut fetch = follower_fetch(2, 0, 12);
    fetch.topics[0].topic = "__transaction_state".into();
    assert_eq!(fetched(&c, fetch.clone(), 12).await.error_code, 0);
    fetch.topics[0].partitions[0].fetch_offset = 1;
    assert_eq!(fetched(&c, fetch, 12).await.error_code, 0);
    assert_eq!(partition.snapshot().high_watermark, 1);
    c.0.transactions.follow_partition(&c.0, 0, Some((partition.clone(), 0)), LoadMode::Now);
    assert_eq!(coordinator(&c), (None, Some(0), true), "loaded, with the committed record");
}
