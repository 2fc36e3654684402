//! The active controller on a 3-member quorum in one process (an in-memory transport),
//! driven through `ControllerApis::handle` with Kafka request bodies, on tokio's paused
//! clock: registration and fencing, placement over unfenced brokers, session expiry,
//! producer-id blocks across a failover, NOT_CONTROLLER from a follower, request order,
//! and REQUEST_TIMED_OUT without a majority.

#[path = "support/controller_cluster.rs"]
mod controller_cluster;

use controller_cluster::*;
use osprey_protocol::messages::create_topics_request::CreatableTopic;
use osprey_protocol::messages::*;
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody};
use osprey_server::controller_node::apis::ControllerApis;
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn brokers_unfence_when_caught_up_and_topics_are_placed_over_them() {
    let c = Cluster::start().await;
    let at = c.active().await;
    let epochs = c.register(at, 1..=3).await;
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "epochs are record offsets, increasing: {epochs:?}");
    let behind = c.heartbeat(at, 1, epochs[0], epochs[0] - 1).await;
    assert!(!behind.is_caught_up && behind.is_fenced, "not caught up with its registration: stays fenced");
    for (id, epoch) in (1..=3).zip(&epochs) {
        let reply = c.heartbeat(at, id, *epoch, *epoch).await;
        assert!(reply.is_caught_up && !reply.is_fenced);
    }
    let stale = c.heartbeat(at, 1, epochs[0] + 100, epochs[0]).await;
    assert_eq!(stale.error_code, ErrorCode::STALE_BROKER_EPOCH.code());

    let created = c.create_topic(at, "rf3", 6, 3).await;
    assert_eq!((created.error_code, created.num_partitions, created.replication_factor), (0, 6, 3));
    let image = c.image(at);
    let topic = image.topic("rf3").expect("committed before the answer");
    assert_eq!(topic.id, created.topic_id);
    for p in &topic.partitions {
        assert_eq!(p.replicas.iter().copied().collect::<BTreeSet<_>>(), BTreeSet::from([1, 2, 3]));
        assert_eq!(p.isr.len(), 3);
    }
    let refused = c.create_topic(at, "rf4", 1, 4).await;
    assert_eq!(refused.error_code, ErrorCode::INVALID_REPLICATION_FACTOR.code());
    assert!(c.image(at).topic("rf4").is_none());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_follower_answers_not_controller() {
    let c = Cluster::start().await;
    let at = c.active().await;
    let follower = (at + 1) % 3;
    match c.send(follower, registration(1), 4).await {
        ResponseBody::BrokerRegistration(r) => assert_eq!(r.error_code, ErrorCode::NOT_CONTROLLER.code()),
        other => panic!("{other:?}"),
    }
    let refused = c.create_topic(follower, "t", 1, 1).await;
    assert_eq!(refused.error_code, ErrorCode::NOT_CONTROLLER.code());
    assert!(c.image(at).broker(1).is_none() && c.image(at).topic("t").is_none());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn requests_take_effect_in_the_order_they_arrive() {
    let c = Cluster::start().await;
    let at = c.active().await;
    c.three_unfenced_brokers().await;
    let create = RequestBody::CreateTopics(CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: "t".into(),
            num_partitions: 2,
            replication_factor: 3,
            ..Default::default()
        }],
        timeout_ms: 60_000,
        ..Default::default()
    });
    let delete = RequestBody::DeleteTopics(DeleteTopicsRequest {
        topic_names: vec!["t".into()],
        timeout_ms: 60_000,
        ..Default::default()
    });
    let header = |key: i16, version: i16| RequestHeader {
        request_api_key: key,
        request_api_version: version,
        ..Default::default()
    };
    // Both handed over before either is answered: the delete is decided on the image
    // that holds the create, not yet committed.
    let created = c.controllers[at].handle(header(19, 7), create);
    let deleted = c.controllers[at].handle(header(20, 5), delete);
    let (created, deleted) = (created.await, deleted.await);
    let ResponseBody::CreateTopics(created) = created else { panic!() };
    let ResponseBody::DeleteTopics(deleted) = deleted else { panic!() };
    assert_eq!(created.topics[0].error_code, 0);
    assert_eq!(deleted.responses[0].error_code, 0, "{deleted:?}");
    assert_eq!(deleted.responses[0].topic_id, created.topics[0].topic_id);
    assert!(c.image(at).topic("t").is_none());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_broker_without_heartbeats_is_fenced_and_its_partitions_get_new_leaders() {
    let c = Cluster::start().await;
    let at = c.active().await;
    let epochs = c.three_unfenced_brokers().await;
    assert_eq!(c.create_topic(at, "t", 6, 3).await.error_code, 0);
    let before = c.image(at).topic("t").unwrap().clone();
    let led_by_3: Vec<i32> = before.partitions.iter().filter(|p| p.leader == 3).map(|p| p.index).collect();
    assert!(!led_by_3.is_empty(), "placement gives broker 3 some leaderships: {before:?}");
    // Brokers 1 and 2 heartbeat every second for twice the session timeout; 3 is silent.
    for _ in 0..(2 * SESSION_TIMEOUT_MS / 1000) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (id, epoch) in [(1, epochs[0]), (2, epochs[1])] {
            assert!(!c.heartbeat(at, id, epoch, epoch).await.is_fenced);
        }
    }
    let image = c.image(at);
    assert!(image.broker(3).unwrap().fenced, "broker 3's session expired");
    assert!(!image.broker(1).unwrap().fenced && !image.broker(2).unwrap().fenced);
    let after = image.topic("t").unwrap();
    for index in led_by_3 {
        let (old, new) = (&before.partitions[index as usize], &after.partitions[index as usize]);
        assert!(old.isr.contains(&new.leader) && new.leader != 3, "a new leader from the ISR: {new:?}");
        assert!(new.leader_epoch > old.leader_epoch, "the leader epoch is bumped");
        assert!(!new.isr.contains(&3));
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn producer_id_blocks_never_overlap_across_a_failover_and_no_broker_is_fenced_at_once() {
    let c = Cluster::start().await;
    let first = c.active().await;
    let epochs = c.three_unfenced_brokers().await;
    let mut blocks = Vec::new();
    for (id, epoch) in (1..=3).zip(&epochs) {
        let r = c.allocate_producer_ids(first, id, *epoch).await;
        assert_eq!(r.error_code, 0);
        blocks.push((r.producer_id_start, r.producer_id_start + i64::from(r.producer_id_len)));
    }
    // The active controller is cut off; another member takes over.
    c.router.set_reachable(first as i32 + 1, false);
    eventually("another controller is active", || {
        c.controllers.iter().enumerate().any(|(i, ctl)| i != first && ctl.is_active())
    })
    .await;
    let second = c.controllers.iter().enumerate().position(|(i, ctl)| i != first && ctl.is_active()).unwrap();
    let image = c.image(second);
    assert!(image.brokers().all(|b| !b.fenced), "activate gave every broker a fresh session");
    // Heartbeats resume against the new controller, within a session, from 1 and 2;
    // broker 3 stays silent and only its session from activate can expire.
    for (id, epoch) in (1..=2).zip(&epochs) {
        let reply = c.heartbeat(second, id, *epoch, *epoch).await;
        assert!(!reply.is_fenced && reply.error_code == 0, "{reply:?}");
    }
    for (id, epoch) in (1..=3).zip(&epochs) {
        let r = c.allocate_producer_ids(second, id, *epoch).await;
        assert_eq!(r.error_code, 0);
        blocks.push((r.producer_id_start, r.producer_id_start + i64::from(r.producer_id_len)));
    }
    blocks.sort();
    assert!(blocks.windows(2).all(|w| w[0].1 <= w[1].0), "blocks overlap: {blocks:?}");
    for _ in 0..(2 * SESSION_TIMEOUT_MS / 1000) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (id, epoch) in [(1, epochs[0]), (2, epochs[1])] {
            assert!(!c.heartbeat(second, id, epoch, epoch).await.is_fenced);
        }
    }
    assert!(c.image(second).broker(3).unwrap().fenced, "the new controller fences a silent broker");
    // The old one, cut off, still leads its term (openraft has no check-quorum), but its
    // own proposals cannot commit: fencing the brokers whose sessions it saw expire times
    // out, and a failed proposal ends its period. It answers NOT_CONTROLLER, before and
    // after it hears of the new term.
    eventually("the cut-off controller is no longer active", || !c.controllers[first].is_active()).await;
    let old = c.allocate_producer_ids(first, 1, epochs[0]).await;
    assert_eq!(old.error_code, ErrorCode::NOT_CONTROLLER.code(), "{old:?}");
    c.router.set_reachable(first as i32 + 1, true);
    assert_eq!(c.allocate_producer_ids(first, 1, epochs[0]).await.error_code, ErrorCode::NOT_CONTROLLER.code());
    let image = c.image(second);
    assert!(!image.broker(1).unwrap().fenced, "the old controller's fencing while cut off never committed");
    assert!(image.next_producer_id <= blocks.last().unwrap().1, "nor did its producer-id blocks");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn create_topics_without_a_majority_times_out() {
    let c = Cluster::start().await;
    let at = c.active().await;
    c.three_unfenced_brokers().await;
    for n in 1..=3 {
        if n != at as i32 + 1 {
            c.router.set_reachable(n, false);
        }
    }
    let body = RequestBody::CreateTopics(CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: "t".into(),
            num_partitions: 1,
            replication_factor: 3,
            ..Default::default()
        }],
        timeout_ms: 2_000,
        ..Default::default()
    });
    match c.send(at, body, 7).await {
        ResponseBody::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, ErrorCode::REQUEST_TIMED_OUT.code(), "{r:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn partitions_grow_and_a_leader_shrinks_its_isr() {
    use osprey_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    let c = Cluster::start().await;
    let at = c.active().await;
    let epochs = c.three_unfenced_brokers().await;
    assert_eq!(c.create_topic(at, "t", 1, 3).await.error_code, 0);
    let grow = RequestBody::CreatePartitions(CreatePartitionsRequest {
        topics: vec![CreatePartitionsTopic { name: "t".into(), count: 3, ..Default::default() }],
        timeout_ms: 60_000,
        ..Default::default()
    });
    let ResponseBody::CreatePartitions(grown) = c.send(at, grow, 3).await else { panic!() };
    assert_eq!(grown.results[0].error_code, 0, "{grown:?}");
    let topic = c.image(at).topic("t").unwrap().clone();
    assert_eq!(topic.partitions.len(), 3);
    assert!(topic.partitions.iter().all(|p| p.replicas.len() == 3));

    let p = &topic.partitions[0];
    let leader = p.leader;
    let dropped = *p.isr.iter().find(|&&b| b != leader).unwrap();
    let shrunk: Vec<i32> = p.isr.iter().copied().filter(|&b| b != dropped).collect();
    let alter = |partition_epoch: i32| alter_isr(&epochs, topic.id, p, &shrunk, partition_epoch);
    let ResponseBody::AlterPartition(altered) = c.send(at, alter(p.partition_epoch), 3).await else { panic!() };
    let answer = &altered.topics[0].partitions[0];
    assert_eq!((altered.error_code, answer.error_code), (0, 0), "{altered:?}");
    assert_eq!(answer.isr, shrunk);
    assert_eq!(c.image(at).topic("t").unwrap().partitions[0].isr, shrunk, "committed before the answer");
    let ResponseBody::AlterPartition(stale) = c.send(at, alter(p.partition_epoch), 3).await else { panic!() };
    assert_eq!(stale.topics[0].partitions[0].error_code, ErrorCode::INVALID_UPDATE_VERSION.code());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_batch_too_large_for_the_log_fails_alone_and_the_controller_goes_on() {
    let c = Cluster::start_with(|q| q.max_rpc_bytes = 64 * 1024).await;
    let at = c.active().await;
    c.three_unfenced_brokers().await;
    let big = c.create_topic(at, "big", 5_000, 3).await;
    assert_eq!(big.error_code, ErrorCode::UNKNOWN_SERVER_ERROR.code(), "{big:?}");
    // The refused records were in the speculative image; it is rebuilt from the log, so
    // the topic does not exist and the next request is decided without it.
    let again = c.create_topic(at, "big", 2, 3).await;
    assert_eq!(again.error_code, 0, "{again:?}");
    assert_eq!(c.image(at).topic("big").unwrap().partitions.len(), 2);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn requests_beyond_the_queue_bound_are_answered_request_timed_out() {
    let c = Cluster::start_configured(|_| {}, |a| a.max_queued_requests = 2).await;
    let at = c.active().await;
    let header = RequestHeader { request_api_key: 62, request_api_version: 4, ..Default::default() };
    // Handed over before the controller task runs again: two fit in the queue.
    let replies: Vec<_> = (1..=3).map(|id| c.controllers[at].handle(header.clone(), registration(id))).collect();
    let mut codes = Vec::new();
    for reply in replies {
        let ResponseBody::BrokerRegistration(r) = reply.await else { panic!() };
        codes.push(r.error_code);
    }
    assert_eq!(codes, vec![0, 0, ErrorCode::REQUEST_TIMED_OUT.code()]);
    assert!(c.image(at).broker(3).is_none(), "the refused registration wrote nothing");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_controller_is_active_once_the_quorum_committed_its_cluster_id_and_checks_it() {
    let c = Cluster::start_without_waiting(|_| {}, |a| a.cluster.cluster_id = None).await;
    let leader = c.leader().await;
    let code = |r: ResponseBody| match r {
        ResponseBody::BrokerRegistration(r) => r.error_code,
        other => panic!("{other:?}"),
    };
    // Not formed: the broker retries elsewhere, as against a controller not active.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(c.controllers.iter().all(|ctl| !ctl.is_active()), "no cluster id, no active controller");
    assert_eq!(code(c.send(leader, registration(1), 4).await), ErrorCode::NOT_CONTROLLER.code());
    // What the bootstrap commits first (controller_node/membership.rs).
    let committed = osprey_cluster::MetadataRecord::ClusterId { id: CLUSTER_ID.into() };
    c.quorums[leader].propose(vec![committed]).await.unwrap();
    let at = c.active().await;
    let mut wrong = registration(2);
    if let RequestBody::BrokerRegistration(r) = &mut wrong {
        r.cluster_id = "another-cluster".into();
    }
    assert_eq!(code(c.send(at, wrong, 4).await), ErrorCode::INCONSISTENT_CLUSTER_ID.code());
    assert_eq!(code(c.send(at, registration(1), 4).await), 0, "the committed id is the one brokers register with");
    let image = c.image(at);
    assert!(image.broker(2).is_none());
    assert_eq!(image.broker(1).unwrap().epoch, 1, "the broker epoch counts the ClusterId record at offset 0");
}

fn alter(
    resource_type: i8,
    name: &str,
    configs: &[(&str, i8, Option<&str>)],
) -> incremental_alter_configs_request::AlterConfigsResource {
    incremental_alter_configs_request::AlterConfigsResource {
        resource_type,
        resource_name: name.into(),
        configs: configs
            .iter()
            .map(|(k, op, v)| incremental_alter_configs_request::AlterableConfig {
                name: k.to_string(),
                config_operation: *op,
                value: v.map(String::from),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

async fn incremental(
    c: &Cluster,
    at: usize,
    resources: Vec<incremental_alter_configs_request::AlterConfigsResource>,
    validate_only: bool,
) -> Vec<(i16, Option<String>)> {
    let body = RequestBody::IncrementalAlterConfigs(IncrementalAlterConfigsRequest {
        resources,
        validate_only,
        ..Default::default()
    });
    match c.send(at, body, 1).await {
        ResponseBody::IncrementalAlterConfigs(r) => {
            r.responses.into_iter().map(|r| (r.error_code, r.error_message)).collect()
        }
        other => panic!("{other:?}"),
    }
}

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn incremental_alter_configs_commits_topic_broker_and_group_configs_per_resource() {
    let c = Cluster::start().await;
    let at = c.active().await;
    c.three_unfenced_brokers().await;
    assert_eq!(c.create_topic(at, "t", 1, 1).await.error_code, 0);

    let dry = incremental(&c, at, vec![alter(2, "t", &[("retention.ms", SET, Some("1000"))])], true).await;
    assert_eq!(dry, vec![(0, None)]);
    assert!(c.image(at).topic("t").unwrap().configs.is_empty(), "validate_only writes nothing");

    let answers = incremental(
        &c,
        at,
        vec![
            alter(2, "t", &[("retention.ms", SET, Some("1000")), ("cleanup.policy", APPEND, Some("compact"))]),
            alter(2, "t", &[("retention.ms", SET, Some("soon"))]),
            alter(2, "missing", &[("retention.ms", SET, Some("1"))]),
            alter(2, "", &[("retention.ms", SET, Some("1"))]),
            alter(4, "", &[("log.retention.ms", SET, Some("7200000"))]),
            alter(4, "2", &[("log.cleanup.policy", APPEND, Some("compact"))]),
            alter(4, "2", &[("node.id", SET, Some("5"))]),
            alter(4, "two", &[("log.retention.ms", SET, Some("1"))]),
            alter(32, "g", &[("consumer.session.timeout.ms", SET, Some("50000"))]),
            alter(32, "g", &[("consumer.session.timeout.ms", SET, Some("1"))]),
            alter(8, "1", &[("kafka.server", SET, Some("DEBUG"))]),
            alter(16, "m", &[("metrics", SET, Some("x"))]),
        ],
        false,
    )
    .await;
    let codes: Vec<i16> = answers.iter().map(|(code, _)| *code).collect();
    let message = |i: usize| answers[i].1.clone().unwrap_or_default();
    assert_eq!(
        codes,
        vec![
            0,
            ErrorCode::INVALID_CONFIG.code(),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(),
            ErrorCode::INVALID_REQUEST.code(),
            0,
            0,
            ErrorCode::INVALID_REQUEST.code(),
            ErrorCode::INVALID_REQUEST.code(),
            0,
            ErrorCode::INVALID_CONFIG.code(),
            ErrorCode::INVALID_REQUEST.code(),
            ErrorCode::INVALID_REQUEST.code(),
        ],
        "{answers:?}"
    );
    assert_eq!(message(3), "Default topic resources are not allowed.");
    assert!(message(6).contains("Cannot update these configs dynamically"), "{}", message(6));
    assert_eq!(message(7), "Unable to parse broker name as a base 10 number.");
    assert!(message(10).contains("BROKER_LOGGER"), "{}", message(10));

    // Committed before the answer; refused resources wrote nothing.
    let image = c.image(at);
    let topic = &image.topic("t").unwrap().configs;
    assert_eq!(topic.get("retention.ms").map(String::as_str), Some("1000"));
    assert_eq!(topic.get("cleanup.policy").map(String::as_str), Some("delete,compact"), "appended to the default");
    assert_eq!(image.broker_configs("").unwrap().get("log.retention.ms").map(String::as_str), Some("7200000"));
    assert_eq!(
        image.broker_configs("2").unwrap().get("log.cleanup.policy").map(String::as_str),
        Some("delete,compact")
    );
    assert_eq!(image.group_configs("g").unwrap().get("consumer.session.timeout.ms").map(String::as_str), Some("50000"));
    assert!(!image.broker_configs("2").unwrap().contains_key("node.id"));

    let deleted = incremental(&c, at, vec![alter(2, "t", &[("retention.ms", DELETE, None)])], false).await;
    assert_eq!(deleted, vec![(0, None)]);
    assert!(!c.image(at).topic("t").unwrap().configs.contains_key("retention.ms"));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn legacy_alter_configs_replaces_a_resources_whole_set() {
    use osprey_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let c = Cluster::start().await;
    let at = c.active().await;
    c.three_unfenced_brokers().await;
    assert_eq!(c.create_topic(at, "t", 1, 1).await.error_code, 0);
    let set = incremental(&c, at, vec![alter(2, "t", &[("retention.ms", SET, Some("1000"))])], false).await;
    assert_eq!(set, vec![(0, None)]);
    let resource = |resource_type: i8, name: &str, k: &str, v: &str| AlterConfigsResource {
        resource_type,
        resource_name: name.into(),
        configs: vec![AlterableConfig { name: k.into(), value: Some(v.into()), ..Default::default() }],
        ..Default::default()
    };
    let body = RequestBody::AlterConfigs(AlterConfigsRequest {
        resources: vec![
            resource(2, "t", "segment.ms", "60000"),
            resource(4, "1", "log.retention.ms", "7200000"),
            resource(32, "g", "consumer.session.timeout.ms", "50000"),
        ],
        ..Default::default()
    });
    let ResponseBody::AlterConfigs(answer) = c.send(at, body, 2).await else { panic!() };
    let codes: Vec<i16> = answer.responses.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![0, 0, ErrorCode::INVALID_REQUEST.code()], "{answer:?}");
    let image = c.image(at);
    let topic = &image.topic("t").unwrap().configs;
    assert_eq!(topic.get("segment.ms").map(String::as_str), Some("60000"));
    assert!(!topic.contains_key("retention.ms"), "the legacy form resets what it does not name");
    assert_eq!(image.broker_configs("1").unwrap().get("log.retention.ms").map(String::as_str), Some("7200000"));
    assert!(image.group_configs("g").is_none());

    // A follower answers NOT_CONTROLLER for every resource.
    let follower = (at + 1) % 3;
    let refused = incremental(&c, follower, vec![alter(2, "t", &[]), alter(32, "g", &[])], false).await;
    assert!(refused.iter().all(|(code, _)| *code == ErrorCode::NOT_CONTROLLER.code()), "{refused:?}");
}

/// Broker 3 loses its leaderships (its session expires while 1 and 2 heartbeat), comes
/// back, and the leaders take it back into their ISRs: its partitions are now led by
/// another replica while it, their preferred replica, could lead. The brokers' epochs
/// and the indexes of those partitions of topic "t".
async fn preferred_replica_back_in_the_isr(c: &Cluster, at: usize) -> (Vec<i64>, Vec<i32>) {
    let epochs = c.three_unfenced_brokers().await;
    assert_eq!(c.create_topic(at, "t", 6, 3).await.error_code, 0);
    let preferred_3: Vec<i32> =
        c.image(at).topic("t").unwrap().partitions.iter().filter(|p| p.replicas[0] == 3).map(|p| p.index).collect();
    assert!(!preferred_3.is_empty(), "placement makes broker 3 some partitions' first replica");
    for _ in 0..(2 * SESSION_TIMEOUT_MS / 1000) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for (id, epoch) in [(1, epochs[0]), (2, epochs[1])] {
            c.heartbeat(at, id, epoch, epoch).await;
        }
    }
    assert!(c.image(at).broker(3).unwrap().fenced);
    let caught_up = c.image(at).applied as i64;
    assert!(!c.heartbeat(at, 3, epochs[2], caught_up).await.is_fenced, "broker 3 is back");
    let topic = c.image(at).topic("t").unwrap().clone();
    for &index in &preferred_3 {
        let p = &topic.partitions[index as usize];
        assert!(p.leader != 3 && !p.isr.contains(&3), "led elsewhere without 3: {p:?}");
        let isr: Vec<i32> = p.isr.iter().copied().chain([3]).collect();
        let expand = alter_isr(&epochs, topic.id, p, &isr, p.partition_epoch);
        let ResponseBody::AlterPartition(r) = c.send(at, expand, 3).await else { panic!() };
        assert_eq!((r.error_code, r.topics[0].partitions[0].error_code), (0, 0), "{r:?}");
    }
    (epochs, preferred_3)
}

/// The leader of `p` (of topic `topic_id`) asks for `isr` at `partition_epoch`, each
/// member with its broker epoch from `epochs` (brokers 1..).
fn alter_isr(
    epochs: &[i64],
    topic_id: osprey_protocol::Uuid,
    p: &osprey_cluster::PartitionImage,
    isr: &[i32],
    partition_epoch: i32,
) -> RequestBody {
    use osprey_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
    let broker_epoch = |b: i32| epochs[b as usize - 1];
    RequestBody::AlterPartition(AlterPartitionRequest {
        broker_id: p.leader,
        broker_epoch: broker_epoch(p.leader),
        topics: vec![TopicData {
            topic_id,
            partitions: vec![PartitionData {
                partition_index: p.index,
                leader_epoch: p.leader_epoch,
                new_isr_with_epochs: isr
                    .iter()
                    .map(|&b| BrokerState { broker_id: b, broker_epoch: broker_epoch(b), ..Default::default() })
                    .collect(),
                partition_epoch,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

fn elect(election_type: i8, topics: Option<Vec<(&str, Vec<i32>)>>) -> RequestBody {
    RequestBody::ElectLeaders(ElectLeadersRequest {
        election_type,
        topic_partitions: topics.map(|ts| {
            ts.into_iter()
                .map(|(topic, partitions)| elect_leaders_request::TopicPartitions {
                    topic: topic.into(),
                    partitions,
                    ..Default::default()
                })
                .collect()
        }),
        timeout_ms: 60_000,
        ..Default::default()
    })
}

/// (topic, partition, error code) of each answer.
async fn elected(c: &Cluster, at: usize, body: RequestBody) -> (i16, Vec<(String, i32, i16)>) {
    let ResponseBody::ElectLeaders(r) = c.send(at, body, 2).await else { panic!() };
    let results = r
        .replica_election_results
        .iter()
        .flat_map(|t| t.partition_result.iter().map(|p| (t.topic.clone(), p.partition_id, p.error_code)))
        .collect();
    (r.error_code, results)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn elect_leaders_moves_leadership_to_the_preferred_replica_once() {
    let c = Cluster::start_configured(|_| {}, |config| config.auto_leader_rebalance_enable = false).await;
    let at = c.active().await;
    let (_, preferred_3) = preferred_replica_back_in_the_isr(&c, at).await;
    let before = c.image(at).topic("t").unwrap().clone();

    let all: Vec<i32> = (0..6).chain([99]).collect();
    let (top, results) = elected(&c, at, elect(0, Some(vec![("t", all), ("nope", vec![0])]))).await;
    assert_eq!(top, 0);
    for (topic, partition, code) in &results {
        let expected = if topic == "nope" || *partition == 99 {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        } else if preferred_3.contains(partition) {
            ErrorCode::NONE
        } else {
            ErrorCode::ELECTION_NOT_NEEDED
        };
        assert_eq!(*code, expected.code(), "{topic}-{partition}: {results:?}");
    }
    let after = c.image(at).topic("t").unwrap().clone();
    for p in &after.partitions {
        assert_eq!(p.leader, p.replicas[0], "led by its preferred replica: {p:?}");
        let old = &before.partitions[p.index as usize];
        let moved = preferred_3.contains(&p.index);
        assert_eq!(p.leader_epoch > old.leader_epoch, moved, "epoch bumped only where leadership moved");
    }

    // Nothing left to do: a null list answers the topic with no partition in it, a named
    // partition ELECTION_NOT_NEEDED, and an unclean election finds every partition led.
    let (_, results) = elected(&c, at, elect(0, None)).await;
    assert!(results.is_empty(), "{results:?}");
    let (_, results) = elected(&c, at, elect(0, Some(vec![("t", vec![preferred_3[0]])]))).await;
    assert_eq!(results, vec![("t".to_string(), preferred_3[0], ErrorCode::ELECTION_NOT_NEEDED.code())]);
    let (_, results) = elected(&c, at, elect(1, Some(vec![("t", vec![0])]))).await;
    assert_eq!(results, vec![("t".to_string(), 0, ErrorCode::ELECTION_NOT_NEEDED.code())]);
    let (top, results) = elected(&c, at, elect(7, Some(vec![("t", vec![0])]))).await;
    assert_eq!(top, ErrorCode::INVALID_REQUEST.code());
    assert_eq!(results, vec![("t".to_string(), 0, ErrorCode::INVALID_REQUEST.code())]);
    assert_eq!(c.image(at).topic("t").unwrap(), &after, "no change after the first election");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_controller_moves_leadership_back_to_preferred_replicas_by_itself() {
    const CHECK_MS: u64 = 20_000;
    let c = Cluster::start_configured(|_| {}, |config| config.leader_imbalance_check_interval_ms = CHECK_MS).await;
    let at = c.active().await;
    let (epochs, preferred_3) = preferred_replica_back_in_the_isr(&c, at).await;
    let mut waited = 0;
    while preferred_3.iter().any(|&i| c.image(at).topic("t").unwrap().partitions[i as usize].leader != 3) {
        assert!(waited <= 2 * CHECK_MS, "no rebalance within two check intervals");
        tokio::time::sleep(Duration::from_secs(1)).await;
        waited += 1_000;
        let offset = c.image(at).applied as i64;
        for (id, epoch) in (1..=3).zip(&epochs) {
            assert!(!c.heartbeat(at, id, *epoch, offset).await.is_fenced);
        }
    }
    let topic = c.image(at).topic("t").unwrap().clone();
    assert!(topic.partitions.iter().all(|p| p.leader == p.replicas[0]), "{topic:?}");
}

/// The controller mutation quota (KIP-599) measures what a broker forwards for a client
/// (`handle_from` with the client's principal, as an EnvelopeRequest arrives), never what
/// a sender asks for itself (`handle`: a broker's internal topics and auto-creations), even
/// under a default quota that would cover the broker's own principal and client id.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn only_requests_forwarded_for_a_client_are_measured_by_the_mutation_quota() {
    use osprey_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let c = Cluster::start().await;
    let at = c.active().await;
    c.three_unfenced_brokers().await;
    let header = |key: i16, version: i16, client_id: &str| RequestHeader {
        request_api_key: key,
        request_api_version: version,
        client_id: Some(client_id.into()),
        ..Default::default()
    };
    // One mutation a second for every user (an 11-token bucket each).
    let quota = RequestBody::AlterClientQuotas(AlterClientQuotasRequest {
        entries: vec![EntryData {
            entity: vec![EntityData { entity_type: "user".into(), entity_name: None, ..Default::default() }],
            ops: vec![OpData {
                key: "controller_mutation_rate".into(),
                value: 1.0,
                remove: false,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    });
    let ResponseBody::AlterClientQuotas(set) = c.controllers[at].handle(header(49, 1, "admin"), quota).await else {
        panic!()
    };
    assert_eq!(set.entries[0].error_code, 0);
    let create = |name: &str, partitions: i32| {
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: partitions,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 60_000,
            ..Default::default()
        })
    };
    let code = |r: ResponseBody| match r {
        ResponseBody::CreateTopics(r) => (r.topics[0].error_code, r.throttle_time_ms),
        other => panic!("{other:?}"),
    };
    let forwarded = |name: &str, partitions: i32| {
        c.controllers[at].handle_from(header(19, 7, "app"), create(name, partitions), Some("User:alice"))
    };
    // Alice's 20 partitions are accepted (the bucket was full), then she is refused.
    assert_eq!(code(forwarded("a1", 20).await), (0, 0));
    let (refused, throttle) = code(forwarded("a2", 1).await);
    assert_eq!(refused, ErrorCode::THROTTLING_QUOTA_EXCEEDED.code());
    assert!(throttle > 0);
    // A broker's own creations (User:ANONYMOUS, under the same default) are not measured.
    for n in 0..3 {
        let own = c.controllers[at].handle(header(19, 7, "osprey-broker-1"), create(&format!("internal-{n}"), 20));
        assert_eq!(code(own.await), (0, 0));
    }
    // Bob, forwarded, has a bucket of his own.
    let bob = c.controllers[at].handle_from(header(19, 7, "app"), create("b1", 5), Some("User:bob"));
    assert_eq!(code(bob.await), (0, 0));
}
