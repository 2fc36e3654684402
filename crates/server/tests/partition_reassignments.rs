//! AlterPartitionReassignments (45) and ListPartitionReassignments (46) on the active
//! controller of a 3-member quorum in one process, driven through
//! `ControllerApis::handle` with Kafka request bodies: a reassignment committed before
//! its answer, listed while in progress, refused with Kafka's per-partition errors, and
//! NOT_CONTROLLER from a follower.

#[path = "support/controller_cluster.rs"]
mod controller_cluster;

use controller_cluster::*;
use osprey_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use osprey_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use osprey_protocol::messages::*;
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody};

fn alter(topic: &str, targets: &[(i32, Option<Vec<i32>>)], allow_rf_change: bool) -> RequestBody {
    RequestBody::AlterPartitionReassignments(AlterPartitionReassignmentsRequest {
        timeout_ms: 60_000,
        allow_replication_factor_change: allow_rf_change,
        topics: vec![ReassignableTopic {
            name: topic.into(),
            partitions: targets
                .iter()
                .map(|(index, replicas)| ReassignablePartition {
                    partition_index: *index,
                    replicas: replicas.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    })
}

async fn altered(c: &Cluster, at: usize, body: RequestBody, version: i16) -> AlterPartitionReassignmentsResponse {
    match c.send(at, body, version).await {
        ResponseBody::AlterPartitionReassignments(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn listed(c: &Cluster, at: usize, topics: Option<Vec<(&str, Vec<i32>)>>) -> ListPartitionReassignmentsResponse {
    let body = RequestBody::ListPartitionReassignments(ListPartitionReassignmentsRequest {
        timeout_ms: 60_000,
        topics: topics.map(|topics| {
            topics
                .into_iter()
                .map(|(name, partition_indexes)| ListPartitionReassignmentsTopics {
                    name: name.into(),
                    partition_indexes,
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    });
    match c.send(at, body, 0).await {
        ResponseBody::ListPartitionReassignments(r) => r,
        other => panic!("{other:?}"),
    }
}

fn codes(r: &AlterPartitionReassignmentsResponse) -> Vec<(i32, i16)> {
    r.responses.iter().flat_map(|t| &t.partitions).map(|p| (p.partition_index, p.error_code)).collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_reassignment_is_committed_before_its_answer_and_listed_while_in_progress() {
    let c = Cluster::start().await;
    let at = c.active().await;
    c.three_unfenced_brokers().await;
    assert_eq!(c.create_topic(at, "t", 2, 1).await.error_code, 0);
    let first = c.image(at).topic("t").unwrap().partitions[0].clone();
    let from = first.replicas[0];
    let to: Vec<i32> = (1..=3).filter(|&b| b != from).collect();

    let body = alter("t", &[(0, Some(to.clone())), (7, Some(to.clone())), (1, None)], true);
    let r = altered(&c, at, body, 1).await;
    assert_eq!((r.error_code, r.allow_replication_factor_change), (0, true));
    assert_eq!(
        codes(&r),
        vec![
            (0, 0),
            (7, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code()),
            (1, ErrorCode::NO_REASSIGNMENT_IN_PROGRESS.code())
        ]
    );
    let moving = c.image(at).topic("t").unwrap().partitions[0].clone();
    let mut replicas = to.clone();
    replicas.push(from);
    assert_eq!(
        (moving.replicas.clone(), moving.adding_replicas.clone(), moving.removing_replicas.clone()),
        (replicas.clone(), to.clone(), vec![from]),
        "committed before the answer"
    );

    let all = listed(&c, at, None).await;
    assert_eq!(all.error_code, 0);
    assert_eq!(all.topics.len(), 1);
    let ongoing = &all.topics[0].partitions;
    assert_eq!(ongoing.len(), 1);
    assert_eq!(
        (ongoing[0].partition_index, &ongoing[0].replicas, &ongoing[0].adding_replicas, &ongoing[0].removing_replicas),
        (0, &replicas, &to, &vec![from])
    );
    assert!(listed(&c, at, Some(vec![("t", vec![1]), ("nope", vec![0])])).await.topics.is_empty());

    let refused = altered(&c, at, alter("t", &[(1, Some(to.clone()))], false), 1).await;
    let answer = &refused.responses[0].partitions[0];
    assert_eq!(answer.error_code, ErrorCode::INVALID_REPLICATION_FACTOR.code());
    assert_eq!(answer.error_message.as_deref(), Some("The replication factor is changed from 1 to 2"));
    assert!(!refused.allow_replication_factor_change, "echoed");
    let unknown = altered(&c, at, alter("t", &[(1, Some(vec![9]))], true), 0).await;
    assert_eq!(
        unknown.responses[0].partitions[0].error_message.as_deref(),
        Some("The manual partition assignment includes broker 9, but no such broker is registered.")
    );

    let cancelled = altered(&c, at, alter("t", &[(0, None)], true), 0).await;
    assert_eq!(codes(&cancelled), vec![(0, 0)]);
    assert_eq!(c.image(at).topic("t").unwrap().partitions[0].replicas, vec![from]);
    assert!(listed(&c, at, None).await.topics.is_empty(), "nothing in progress after the cancel");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_follower_answers_not_controller_for_both() {
    let c = Cluster::start().await;
    let at = c.active().await;
    let follower = (at + 1) % 3;
    let r = altered(&c, follower, alter("t", &[(0, Some(vec![1]))], true), 1).await;
    assert_eq!(r.error_code, ErrorCode::NOT_CONTROLLER.code());
    assert_eq!(codes(&r), vec![(0, ErrorCode::NOT_CONTROLLER.code())], "and on every partition, as Kafka");
    let l = listed(&c, follower, Some(vec![("t", vec![0])])).await;
    assert_eq!(l.error_code, ErrorCode::NOT_CONTROLLER.code());
}
