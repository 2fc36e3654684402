//! The `Quorum` handle as the server uses it: a follower refuses a proposal naming the
//! leader (NOT_CONTROLLER), a write without a majority times out (REQUEST_TIMED_OUT),
//! consumers follow applied batches in order, and a member on a real disk keeps its
//! batches across a restart and snapshots by bytes.

use osprey_cluster::image::MetadataRecord;
use osprey_cluster::quorum::{
    AppliedEvent, ControllerEndpoint, ProposeError, Quorum, QuorumConfig, RaftRpc, RaftRpcReply, ReplicaKey, Transport,
    TransportError,
};
use osprey_storage::fs::{SimStorage, StdStorage};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A member and whether it is reachable.
type Member = (Arc<Quorum>, bool);

/// An in-process network: members by node id.
#[derive(Default, Clone)]
struct Router {
    members: Arc<Mutex<BTreeMap<i32, Member>>>,
}

impl Router {
    fn set_reachable(&self, node_id: i32, reachable: bool) {
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

fn key(n: i32) -> ReplicaKey {
    ReplicaKey::new(n, [n as u8; 16])
}

fn endpoint(n: i32) -> ControllerEndpoint {
    ControllerEndpoint::new("127.0.0.1", 9000 + n as u16)
}

fn record(n: i64) -> MetadataRecord {
    MetadataRecord::ProducerIdsAllocated { next: n }
}

/// Three members on simulated disks, initialized by member 1, with a leader elected.
async fn three_members() -> (Router, Vec<Arc<Quorum>>) {
    let router = Router::default();
    let mut quorums = Vec::new();
    for n in 1..=3 {
        let mut config = QuorumConfig::new(key(n), endpoint(n));
        config.request_timeout_ms = 3_000;
        let transport = RouterTransport { from: n, router: router.clone() };
        let q = Arc::new(Quorum::start(config, SimStorage::new(), Path::new("/meta"), transport).await.unwrap());
        router.members.lock().unwrap().insert(n, (q.clone(), true));
        quorums.push(q);
    }
    let voters = (1..=3).map(|n| (key(n), endpoint(n))).collect();
    quorums[0].initialize(voters).await.unwrap();
    wait_for_leader(&quorums).await;
    (router, quorums)
}

/// Waits until `done`; a guard against hanging, not a timing assertion.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(120), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never happened: {what}");
}

async fn wait_for_leader(quorums: &[Arc<Quorum>]) -> Arc<Quorum> {
    eventually("a leader is elected", || quorums.iter().any(|q| q.is_leader())).await;
    quorums.iter().find(|q| q.is_leader()).unwrap().clone()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_follower_refuses_a_proposal_and_names_the_leader() {
    let (_router, quorums) = three_members().await;
    let leader = wait_for_leader(&quorums).await;
    let applied = leader.propose(vec![record(1)]).await.unwrap();
    assert!(applied.index > 0 && applied.term == leader.term());
    let follower = quorums.iter().find(|q| !q.is_leader()).unwrap();
    match follower.propose(vec![record(2)]).await {
        Err(ProposeError::NotLeader { leader: Some(id), endpoint: Some(at) }) => {
            assert_eq!(id, leader.replica());
            assert_eq!(at, endpoint(id.node_id));
        }
        other => panic!("a follower answered {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_write_without_a_majority_times_out() {
    let (router, quorums) = three_members().await;
    let leader = wait_for_leader(&quorums).await;
    for q in &quorums {
        if q.replica() != leader.replica() {
            router.set_reachable(q.replica().node_id, false);
        }
    }
    assert_eq!(leader.propose(vec![record(1)]).await, Err(ProposeError::TimedOut));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_broker_is_added_as_a_learner_and_removed() {
    let (router, quorums) = three_members().await;
    let leader = wait_for_leader(&quorums).await;
    leader.propose(vec![record(1)]).await.unwrap();
    let transport = RouterTransport { from: 4, router: router.clone() };
    let broker = QuorumConfig::new(key(4), endpoint(4));
    let broker = Arc::new(Quorum::start(broker, SimStorage::new(), Path::new("/meta"), transport).await.unwrap());
    router.members.lock().unwrap().insert(4, (broker.clone(), true));
    leader.add_learner(key(4), endpoint(4)).await.unwrap();
    eventually("the learner applies the batch", || broker.applied().image.next_producer_id == 1).await;
    assert!(!leader.voters().contains(&key(4)), "a learner does not vote");
    leader.remove_learner(key(4)).await.unwrap();
    assert!(!leader.members().contains_key(&key(4)));
    let voter = quorums.iter().find(|q| !q.is_leader()).unwrap().replica();
    assert!(leader.remove_learner(voter).await.is_err(), "a voter is not removed as a learner");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn consumers_follow_every_applied_batch_in_order() {
    let (_router, quorums) = three_members().await;
    let leader = wait_for_leader(&quorums).await;
    let follower = quorums.iter().find(|q| !q.is_leader()).unwrap().clone();
    let (image, mut events) = follower.subscribe();
    let mut next = image.last_applied.map_or(0, |l| l.index + 1);
    let mut last_index = 0;
    for n in 1..=20 {
        last_index = leader.propose(vec![record(n), record(n + 1000)]).await.unwrap().index;
    }
    let mut seen = Vec::new();
    while next <= last_index {
        match events.recv().await.unwrap() {
            AppliedEvent::Entry { index, batch, .. } => {
                assert_eq!(index, next, "entries arrive in log order without a gap");
                next += 1;
                if let Some(batch) = batch {
                    assert_eq!(batch.records.len(), 2, "a batch is applied whole");
                    seen.push(batch.records[0].clone());
                }
            }
            AppliedEvent::Snapshot { .. } => panic!("no snapshot was due"),
        }
    }
    assert_eq!(seen, (1..=20).map(record).collect::<Vec<_>>());
    assert_eq!(follower.applied().image.next_producer_id, 1020);
}

#[tokio::test(flavor = "current_thread")]
async fn a_member_on_a_real_disk_keeps_its_batches_across_a_restart_and_snapshots_by_bytes() {
    let dir = std::env::temp_dir().join(format!("osprey-quorum-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = QuorumConfig::new(key(1), endpoint(1));
    config.election_timeout_ms = 50;
    config.heartbeat_interval_ms = 10;
    config.max_record_bytes_between_snapshots = 2_000;
    config.entries_kept_below_snapshot = 0;
    let start = |config: QuorumConfig| {
        let transport = RouterTransport { from: 1, router: Router::default() };
        Quorum::start(config, StdStorage, &dir, transport)
    };
    let quorum = start(config.clone()).await.unwrap();
    quorum.initialize([(key(1), endpoint(1))].into_iter().collect()).await.unwrap();
    let mut last = 0;
    for n in 1..=100 {
        last = quorum.propose(vec![record(n)]).await.unwrap().index;
    }
    // Snapshots are taken in the background once 2,000 bytes were applied.
    let meta = dir.join("__cluster_metadata-0");
    let snapshots = || {
        std::fs::read_dir(&meta)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("snapshot-") && n.ends_with(".json"))
    };
    eventually("a snapshot is written", || snapshots().count() > 0).await;
    quorum.shutdown().await;
    assert_eq!(snapshots().count(), 1, "older snapshots are deleted");

    let quorum = start(config).await.unwrap();
    assert!(quorum.had_quorum_state());
    eventually("the log is re-applied", || quorum.applied().last_applied.is_some_and(|l| l.index >= last)).await;
    assert_eq!(quorum.applied().image.next_producer_id, 100, "every batch is back after the restart");
    quorum.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_broker_fetches_committed_records_from_any_member_and_long_polls_for_the_next() {
    use osprey_cluster::quorum::{MetadataFetchContent, MetadataFetchRequest};
    let (_router, quorums) = three_members().await;
    let leader = wait_for_leader(&quorums).await;
    let follower = quorums.iter().find(|q| !q.is_leader()).unwrap().clone();
    let fetch = |next_offset: u64, max_wait_ms: u64| MetadataFetchRequest {
        broker_id: 7,
        next_offset,
        max_wait_ms,
        max_records: 100,
    };
    let not_formed = follower.fetch_metadata(&fetch(0, 0)).await;
    assert!(matches!(not_formed.content, MetadataFetchContent::NotReady { .. }), "{not_formed:?}");

    let cluster_id = MetadataRecord::ClusterId { id: "c".into() };
    leader.propose(vec![cluster_id.clone(), record(1)]).await.unwrap();
    leader.propose(vec![record(2)]).await.unwrap();
    eventually("the follower applies both batches", || follower.applied().image.applied == 3).await;
    let answer = follower.fetch_metadata(&fetch(0, 0)).await;
    let hint = answer.leader.expect("the follower knows the leader");
    assert_eq!((hint.node_id, hint.endpoint), (leader.replica().node_id, endpoint(leader.replica().node_id)));
    match answer.content {
        MetadataFetchContent::Records { first_offset: 0, records } => {
            assert_eq!(records, vec![cluster_id, record(1), record(2)], "openraft's own entries carry no records")
        }
        other => panic!("{other:?}"),
    }

    // Nothing past offset 3 yet: the fetch waits, and answers with the next commit.
    let waiting = {
        let follower = follower.clone();
        let request = fetch(3, 60_000);
        tokio::spawn(async move { follower.fetch_metadata(&request).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "a fetch with nothing new waits");
    leader.propose(vec![record(3)]).await.unwrap();
    match waiting.await.unwrap().content {
        MetadataFetchContent::Records { first_offset: 3, records } => assert_eq!(records, vec![record(3)]),
        other => panic!("{other:?}"),
    }
    // With nothing committed, the wait ends (at most MAX_FETCH_WAIT_MS) with no records.
    match follower.fetch_metadata(&fetch(4, u64::MAX)).await.content {
        MetadataFetchContent::Records { first_offset: 4, records } => assert!(records.is_empty()),
        other => panic!("{other:?}"),
    }
}
