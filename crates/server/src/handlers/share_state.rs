//! The share-group state APIs (KIP-932): InitializeShareGroupState, ReadShareGroupState,
//! WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary, which
//! share partitions' leaders and group coordinators on other brokers send to the share
//! coordinator of a share partition (`crate::share_persister` is the sending side).
//! Answered by `broker.share_states` as Kafka's `ShareCoordinatorService` answers them:
//!
//! - A request without a group id or topics, or (all but Initialize) with a topic without
//!   partitions, gets an empty answer.
//! - Each share partition is answered on its own, grouped by topic id (a partition named
//!   twice is answered once). The coordinator runtime's errors come first: NOT_COORDINATOR
//!   when its `__share_group_state` partition is not led here, COORDINATOR_LOAD_IN_PROGRESS
//!   while it loads, worded "Unable to write share group state: ..."; then the shard's:
//!   INVALID_REQUEST for a negative partition, UNKNOWN_TOPIC_OR_PARTITION for a topic or
//!   partition the metadata does not have, and the coordinator's own (reads and writes of
//!   an uninitialised share partition, fenced epochs).
//! - Writes, initialisations and deletions are answered once their record is durable;
//!   reads at once.
//!
//! The bounds below are Osprey's: Kafka has none, and a request beyond them is refused
//! INVALID_REQUEST, partition by partition.
//!
//! Kafka checks the metadata after a write's or read's uninitialised and fencing checks;
//! here it comes before them, so a request failing both is answered
//! UNKNOWN_TOPIC_OR_PARTITION where Kafka answers the other error.

use crate::broker::Broker;
use crate::dispatch::Reply;
use osprey_cluster::MetadataImage;
use osprey_coordinator::group::ReplyId;
use osprey_coordinator::share_state::{ShareKey, ShareStateCoordinator, StateError, WriteState};
use osprey_protocol::messages::{
    delete_share_group_state_request as delete_req, delete_share_group_state_response as delete_resp,
    initialize_share_group_state_request as init_req, initialize_share_group_state_response as init_resp,
    read_share_group_state_request as read_req, read_share_group_state_response as read_resp,
    read_share_group_state_summary_request as summary_req, read_share_group_state_summary_response as summary_resp,
    write_share_group_state_request as write_req, write_share_group_state_response as write_resp,
    DeleteShareGroupStateRequest, DeleteShareGroupStateResponse, InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse, ReadShareGroupStateRequest, ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse, WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody, Uuid};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Most share partitions one state request may name. Kafka's persister sends a share
/// partition's leader's or a group's partitions for one share coordinator together; a
/// share group spans far fewer partitions than this, and the bound keeps one request's
/// answer, and the work it queues on the coordinator, small.
pub const MAX_PARTITIONS_PER_REQUEST: usize = 10_000;

/// Most state batches one share partition of a WriteShareGroupState may carry. A share
/// partition's leader writes the delivery state of its in-flight window, at most
/// `group.share.partition.max.record.locks` (10 000 at the most) records, one batch each
/// at worst; acquisition takes whole record batches, so the window can run past that
/// bound by one fetch, for which the doubling leaves room.
pub const MAX_STATE_BATCHES_PER_WRITE: usize = 20_000;

/// Kafka's `Errors` messages for the errors these APIs word themselves.
const NOT_COORDINATOR_MESSAGE: &str = "This is not the correct coordinator.";
const LOADING_MESSAGE: &str = "The coordinator is loading and hence can't process requests.";
pub(crate) const UNKNOWN_PARTITION_MESSAGE: &str = "This server does not host this topic-partition.";
const NEGATIVE_PARTITION_MESSAGE: &str = "The partition id cannot be a negative number.";

/// InitializeShareGroupState: each share partition's state made fresh at its state epoch
/// and start offset, answered once durable. (Kafka skips a topic without partitions here
/// rather than answering nothing.)
pub fn initialize(broker: &Arc<Broker>, req: InitializeShareGroupStateRequest) -> Reply {
    changes(broker, req, false, |change, p| {
        change.run(|c, key, reply, now| c.initialize(reply, key, p.state_epoch, p.start_offset, now))
    })
}

/// WriteShareGroupState: each share partition's start offset and state batches (and, v1,
/// its delivery-complete count) written, fenced by leader and state epochs, answered once
/// durable.
pub fn write(broker: &Arc<Broker>, req: WriteShareGroupStateRequest) -> Reply {
    changes(broker, req, true, |change, p| {
        if p.state_batches.len() > MAX_STATE_BATCHES_PER_WRITE {
            let message = format!(
                "{} state batches in one write; at most {MAX_STATE_BATCHES_PER_WRITE} are taken",
                p.state_batches.len()
            );
            return Pending::Now(Err(StateError { code: ErrorCode::INVALID_REQUEST, message }));
        }
        let write = WriteState {
            state_epoch: p.state_epoch,
            leader_epoch: p.leader_epoch,
            start_offset: p.start_offset,
            delivery_complete_count: p.delivery_complete_count,
            batches: p.state_batches.iter().map(Into::into).collect(),
        };
        change.run(|c, key, reply, now| c.write(reply, key, write, now))
    })
}

/// DeleteShareGroupState: each share partition's state deleted (a tombstone), answered
/// once durable; a share partition without state is answered at once.
pub fn delete(broker: &Arc<Broker>, req: DeleteShareGroupStateRequest) -> Reply {
    changes(broker, req, true, |change, _| change.run(|c, key, reply, now| c.delete(reply, key, now)))
}

/// ReadShareGroupState: each share partition's state epoch, start offset and state
/// batches. A leader reading with a newer leader epoch fences the older one's writes.
pub fn read(broker: &Arc<Broker>, req: ReadShareGroupStateRequest) -> ResponseBody {
    reads(broker, req, |c, key, p, now| {
        let state = c.read(key, p.leader_epoch, now)?;
        Ok(read_resp::PartitionResult {
            partition: p.partition,
            state_epoch: state.state_epoch,
            start_offset: state.start_offset,
            state_batches: state.batches.iter().map(Into::into).collect(),
            ..Default::default()
        })
    })
}

/// ReadShareGroupStateSummary: each share partition's state and leader epochs, start
/// offset and (v1) delivery-complete count; -1s for one without state.
pub fn read_summary(broker: &Arc<Broker>, req: ReadShareGroupStateSummaryRequest) -> ResponseBody {
    reads(broker, req, |c, key, p, _| {
        let s = c.read_summary(key);
        Ok(summary_resp::PartitionResult {
            partition: p.partition,
            state_epoch: s.state_epoch,
            leader_epoch: s.leader_epoch,
            start_offset: s.start_offset,
            delivery_complete_count: s.delivery_complete_count,
            ..Default::default()
        })
    })
}

/// What the five requests and their answers share: a group id, share partitions by
/// topic id, and per-partition results by topic id.
pub trait StateRequest: Sized + Send + 'static {
    /// A share partition of the request.
    type Partition;
    /// A share partition's result in the answer.
    type Result: Send + 'static;
    const API: ApiKey;
    /// The operation, as Kafka words its errors ("Unable to write share group state").
    const OPERATION: &'static str;
    fn group_id(&self) -> &str;
    /// The number of share partitions of each topic named.
    fn partitions_per_topic(&self) -> Vec<usize>;
    fn into_partitions(self) -> Vec<(Uuid, Self::Partition)>;
    fn partition_of(p: &Self::Partition) -> i32;
    fn failed_result(partition: i32, code: i16, message: Option<String>) -> Self::Result;
    /// The answer of these results, by topic.
    fn answer(results: Vec<(Uuid, Vec<Self::Result>)>) -> ResponseBody;
    /// Every share partition answered `code` with `message`, as Kafka's
    /// `toGlobalErrorResponse` (a refused request).
    fn failed(&self, code: ErrorCode, message: &str) -> ResponseBody;
}

/// An Initialize, Write or Delete: each share partition checked ([`check_key`]), then
/// changed by `change` on the coordinator, answered once every change is durable (or
/// refused). `strict`: a topic without partitions makes the whole answer empty.
fn changes<R: StateRequest>(
    broker: &Arc<Broker>,
    req: R,
    strict: bool,
    change: impl Fn(Change<'_>, R::Partition) -> Pending,
) -> Reply {
    if let Some(answer) = answered_whole(&req, strict) {
        return Reply::Now(answer);
    }
    let image = broker.image();
    let group_id = req.group_id().to_string();
    let pending: Vec<_> = req
        .into_partitions()
        .into_iter()
        .map(|(topic_id, p)| {
            let partition = R::partition_of(&p);
            let key = ShareKey { group_id: group_id.clone(), topic_id, partition };
            let pending = match broker.share_states.call(broker, |c, _| check_key(c, &image, &key)) {
                Err(e) => Pending::Now(Err(e)),
                Ok(()) => change(Change { broker, key }, p),
            };
            (topic_id, partition, pending)
        })
        .collect();
    Reply::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(pending.len());
        for (topic_id, partition, pending) in pending {
            let outcome = match pending {
                Pending::Now(outcome) => outcome,
                // Held by the coordinator until durable: the request's remote time.
                Pending::Later(rx) => crate::telemetry::stages::remote_wait(rx).await.unwrap_or_else(|_| {
                    // The coordinator dropped the reply (a bug); the client must still get an answer.
                    let message = "no answer from the share coordinator".to_string();
                    Err(StateError { code: ErrorCode::UNKNOWN_SERVER_ERROR, message })
                }),
            };
            let (code, message) = match outcome {
                Ok(()) => (ErrorCode::NONE.code(), None),
                Err(e) => worded::<R>(e),
            };
            results.push((topic_id, partition, R::failed_result(partition, code, message)));
        }
        R::answer(by_topic(results))
    }))
}

/// A Read or ReadSummary: each share partition checked ([`check_key`]) and read by
/// `read` under one hold of the coordinator's lock, answered at once.
fn reads<R: StateRequest>(
    broker: &Arc<Broker>,
    req: R,
    read: impl Fn(&mut ShareStateCoordinator, &ShareKey, &R::Partition, i64) -> Result<R::Result, StateError>,
) -> ResponseBody {
    if let Some(answer) = answered_whole(&req, true) {
        return answer;
    }
    let image = broker.image();
    let group_id = req.group_id().to_string();
    let results = req
        .into_partitions()
        .into_iter()
        .map(|(topic_id, p)| {
            let partition = R::partition_of(&p);
            let key = ShareKey { group_id: group_id.clone(), topic_id, partition };
            let result = broker.share_states.call(broker, |c, now| {
                check_key(c, &image, &key)?;
                read(c, &key, &p, now)
            });
            let result = result.unwrap_or_else(|e| {
                let (code, message) = worded::<R>(e);
                R::failed_result(partition, code, message)
            });
            (topic_id, partition, result)
        })
        .collect();
    R::answer(by_topic(results))
}

/// A share partition that passed [`check_key`], about to be changed on the coordinator.
struct Change<'a> {
    broker: &'a Arc<Broker>,
    key: ShareKey,
}

impl Change<'_> {
    /// `op` on the coordinator, its answer once durable. The check before and the change
    /// take the coordinator's lock one after the other: a partition unloaded in between
    /// is answered NOT_COORDINATOR by the coordinator itself.
    fn run(self, op: impl FnOnce(&mut ShareStateCoordinator, ShareKey, ReplyId, i64)) -> Pending {
        let key = self.key;
        Pending::Later(self.broker.share_states.call_later(self.broker, |c, reply, now| op(c, key, reply, now)))
    }
}

/// A share partition's change: refused now, or answered by the coordinator once durable.
enum Pending {
    Now(Result<(), StateError>),
    Later(oneshot::Receiver<Result<(), StateError>>),
}

/// Kafka answers a request without a group id, without topics or (`strict`) with a topic
/// without partitions with an empty response; more than [`MAX_PARTITIONS_PER_REQUEST`]
/// share partitions are refused, each INVALID_REQUEST. `None`: answered partition by
/// partition.
fn answered_whole<R: StateRequest>(req: &R, strict: bool) -> Option<ResponseBody> {
    let counts = req.partitions_per_topic();
    if req.group_id().is_empty() || counts.is_empty() || (strict && counts.contains(&0)) {
        return Some(R::answer(Vec::new()));
    }
    let total: usize = counts.iter().sum();
    (total > MAX_PARTITIONS_PER_REQUEST).then(|| {
        crate::telemetry::error_code(R::API, ErrorCode::INVALID_REQUEST);
        let message =
            format!("{total} share partitions in one request; at most {MAX_PARTITIONS_PER_REQUEST} are taken");
        req.failed(ErrorCode::INVALID_REQUEST, &message)
    })
}

/// Results grouped by topic id, topics in the order they first come; a partition named
/// twice keeps the place of its first answer and the value of its last, as Kafka's maps
/// of topic to partition keep one answer each.
fn by_topic<R>(results: Vec<(Uuid, i32, R)>) -> Vec<(Uuid, Vec<R>)> {
    let mut topics: Vec<(Uuid, Vec<(i32, R)>)> = Vec::new();
    for (topic_id, partition, result) in results {
        let index = match topics.iter().position(|(id, _)| *id == topic_id) {
            Some(i) => i,
            None => {
                topics.push((topic_id, Vec::new()));
                topics.len() - 1
            }
        };
        let partitions = &mut topics[index].1;
        match partitions.iter_mut().find(|(p, _)| *p == partition) {
            Some(slot) => slot.1 = result,
            None => partitions.push((partition, result)),
        }
    }
    topics.into_iter().map(|(id, ps)| (id, ps.into_iter().map(|(_, r)| r).collect())).collect()
}

/// Kafka's checks of a share partition before its coordinator shard sees it: the
/// coordinator runtime's (its `__share_group_state` partition loaded here), then the
/// shard's (a partition id that is not negative, a topic and partition the metadata has).
fn check_key(c: &ShareStateCoordinator, image: &MetadataImage, key: &ShareKey) -> Result<(), StateError> {
    let error = |code, message: &str| Err(StateError { code, message: message.to_string() });
    match c.serving_error(key) {
        Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS) => {
            return error(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, LOADING_MESSAGE)
        }
        Some(code) => return error(code, NOT_COORDINATOR_MESSAGE),
        None => {}
    }
    if key.partition < 0 {
        return error(ErrorCode::INVALID_REQUEST, NEGATIVE_PARTITION_MESSAGE);
    }
    let partitions = image.topic_by_id(key.topic_id).map_or(0, |t| t.partitions.len());
    if usize::try_from(key.partition).is_ok_and(|p| p >= partitions) {
        return error(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_PARTITION_MESSAGE);
    }
    Ok(())
}

/// A share partition's error as Kafka's `ShareCoordinatorService` words it: the
/// coordinator runtime's (moved, loading, a failed append) as "Unable to <operation>:
/// ...", the shard's (uninitialised, fenced, a bad partition) as they are. Counted.
fn worded<R: StateRequest>(e: StateError) -> (i16, Option<String>) {
    crate::telemetry::error_code(R::API, e.code);
    let runtime = matches!(
        e.code,
        ErrorCode::NOT_COORDINATOR
            | ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
            | ErrorCode::COORDINATOR_NOT_AVAILABLE
            | ErrorCode::UNKNOWN_SERVER_ERROR
    );
    let message = if runtime { format!("Unable to {}: {}", R::OPERATION, e.message) } else { e.message };
    (e.code.code(), Some(message))
}

/// [`StateRequest`] for one of the five requests: its request and response modules,
/// the names of its topic entries and results.
macro_rules! state_request {
    ($request:ident, $response:ident, $api:ident, $operation:literal,
     $req:ident :: $data:ident, $resp:ident :: $result:ident) => {
        impl StateRequest for $request {
            type Partition = $req::PartitionData;
            type Result = $resp::PartitionResult;
            const API: ApiKey = ApiKey::$api;
            const OPERATION: &'static str = $operation;
            fn group_id(&self) -> &str {
                &self.group_id
            }
            fn partitions_per_topic(&self) -> Vec<usize> {
                self.topics.iter().map(|t| t.partitions.len()).collect()
            }
            fn into_partitions(self) -> Vec<(Uuid, Self::Partition)> {
                let topics = self.topics.into_iter();
                topics.flat_map(|t: $req::$data| t.partitions.into_iter().map(move |p| (t.topic_id, p))).collect()
            }
            fn partition_of(p: &Self::Partition) -> i32 {
                p.partition
            }
            fn failed_result(partition: i32, error_code: i16, error_message: Option<String>) -> Self::Result {
                $resp::PartitionResult { partition, error_code, error_message, ..Default::default() }
            }
            fn answer(results: Vec<(Uuid, Vec<Self::Result>)>) -> ResponseBody {
                let results = results
                    .into_iter()
                    .map(|(topic_id, partitions)| $resp::$result { topic_id, partitions, ..Default::default() })
                    .collect();
                ResponseBody::$api($response { results, ..Default::default() })
            }
            fn failed(&self, code: ErrorCode, message: &str) -> ResponseBody {
                let failed = |p: &Self::Partition| Self::failed_result(p.partition, code.code(), Some(message.into()));
                let topics = self.topics.iter().map(|t| (t.topic_id, t.partitions.iter().map(failed).collect()));
                Self::answer(topics.collect())
            }
        }
    };
}
state_request!(
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    InitializeShareGroupState,
    "initialize share group state",
    init_req::InitializeStateData,
    init_resp::InitializeStateResult
);
state_request!(
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupState,
    "read share group state",
    read_req::ReadStateData,
    read_resp::ReadStateResult
);
state_request!(
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
    WriteShareGroupState,
    "write share group state",
    write_req::WriteStateData,
    write_resp::WriteStateResult
);
state_request!(
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    DeleteShareGroupState,
    "delete share group state",
    delete_req::DeleteStateData,
    delete_resp::DeleteStateResult
);
state_request!(
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    ReadShareGroupStateSummary,
    "read share group state summary",
    summary_req::ReadStateSummaryData,
    summary_resp::ReadStateSummaryResult
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{answer, broker_in};
    use osprey_cluster::NewTopic;
    use osprey_coordinator::share_state::{partition_for, ShareStateConfig};
    use osprey_protocol::messages::{
        delete_share_group_state_request as delete_req, initialize_share_group_state_request as init_req,
        read_share_group_state_request as read_req, read_share_group_state_summary_request as summary_req,
        write_share_group_state_request as write_req,
    };
    use osprey_protocol::RequestBody;
    use std::path::PathBuf;

    const INVALID: i16 = ErrorCode::INVALID_REQUEST as i16;

    /// A single node with a topic `t` of two partitions; with `__share_group_state` made
    /// (and so its partitions led and loaded here) when `coordinating`.
    async fn broker(name: &str, coordinating: bool) -> (Arc<Broker>, PathBuf, Uuid) {
        let (broker, dir) = broker_in(name);
        let b = broker.clone();
        let t = tokio::task::spawn_blocking(move || {
            let topic = NewTopic { name: "t".into(), num_partitions: 2, replication_factor: 1, ..Default::default() };
            let t = b.create_topic(&topic, false).unwrap().id;
            if coordinating {
                crate::share_states::ensure_share_state_topic(&b).unwrap();
            }
            t
        })
        .await
        .unwrap();
        (broker, dir, t)
    }

    async fn call(broker: &Arc<Broker>, api_key: ApiKey, version: i16, body: RequestBody) -> ResponseBody {
        answer(broker, api_key, version, body).await
    }

    async fn initialize(broker: &Arc<Broker>, topic_id: Uuid, partitions: &[i32]) -> Vec<(i32, i16)> {
        let partitions = partitions
            .iter()
            .map(|&partition| init_req::PartitionData {
                partition,
                state_epoch: 0,
                start_offset: 0,
                ..Default::default()
            })
            .collect();
        let topics = vec![init_req::InitializeStateData { topic_id, partitions, ..Default::default() }];
        let req = InitializeShareGroupStateRequest { group_id: "queue".into(), topics, ..Default::default() };
        let body =
            call(broker, ApiKey::InitializeShareGroupState, 0, RequestBody::InitializeShareGroupState(req)).await;
        let ResponseBody::InitializeShareGroupState(resp) = body else { panic!("{body:?}") };
        resp.results.iter().flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.error_code))).collect()
    }

    fn write_request(topic_id: Uuid, partition: i32, leader_epoch: i32, batches: usize) -> WriteShareGroupStateRequest {
        let state_batches = (0..batches as i64)
            .map(|i| write_req::StateBatch {
                first_offset: 5 + 2 * i,
                last_offset: 6 + 2 * i,
                delivery_state: 2,
                delivery_count: 1,
                ..Default::default()
            })
            .collect();
        let partitions = vec![write_req::PartitionData {
            partition,
            state_epoch: 0,
            leader_epoch,
            start_offset: 5,
            delivery_complete_count: 4,
            state_batches,
            ..Default::default()
        }];
        let topics = vec![write_req::WriteStateData { topic_id, partitions, ..Default::default() }];
        WriteShareGroupStateRequest { group_id: "queue".into(), topics, ..Default::default() }
    }

    async fn write(broker: &Arc<Broker>, req: WriteShareGroupStateRequest) -> Vec<(i32, i16, Option<String>)> {
        let body = call(broker, ApiKey::WriteShareGroupState, 1, RequestBody::WriteShareGroupState(req)).await;
        let ResponseBody::WriteShareGroupState(resp) = body else { panic!("{body:?}") };
        resp.results
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.error_code, p.error_message.clone())))
            .collect()
    }

    async fn read(
        broker: &Arc<Broker>,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
    ) -> read_resp::PartitionResult {
        let partitions = vec![read_req::PartitionData { partition, leader_epoch, ..Default::default() }];
        let topics = vec![read_req::ReadStateData { topic_id, partitions, ..Default::default() }];
        let req = ReadShareGroupStateRequest { group_id: "queue".into(), topics, ..Default::default() };
        let body = call(broker, ApiKey::ReadShareGroupState, 0, RequestBody::ReadShareGroupState(req)).await;
        let ResponseBody::ReadShareGroupState(mut resp) = body else { panic!("{body:?}") };
        resp.results.remove(0).partitions.remove(0)
    }

    async fn summary(broker: &Arc<Broker>, topic_id: Uuid, partition: i32) -> summary_resp::PartitionResult {
        let partitions = vec![summary_req::PartitionData { partition, leader_epoch: 0, ..Default::default() }];
        let topics = vec![summary_req::ReadStateSummaryData { topic_id, partitions, ..Default::default() }];
        let req = ReadShareGroupStateSummaryRequest { group_id: "queue".into(), topics, ..Default::default() };
        let body =
            call(broker, ApiKey::ReadShareGroupStateSummary, 1, RequestBody::ReadShareGroupStateSummary(req)).await;
        let ResponseBody::ReadShareGroupStateSummary(mut resp) = body else { panic!("{body:?}") };
        resp.results.remove(0).partitions.remove(0)
    }

    /// Initialise, write, read, summarise and delete a share partition's state through
    /// the request path, as another broker's persister does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_share_partitions_state_is_initialized_written_read_and_deleted() {
        let (broker, dir, t) = broker("share-state-round-trip", true).await;
        assert_eq!(initialize(&broker, t, &[0]).await, [(0, 0)]);
        assert_eq!(write(&broker, write_request(t, 0, 1, 2)).await, [(0, 0, None)]);
        let state = read(&broker, t, 0, 1).await;
        let batches: Vec<_> =
            state.state_batches.iter().map(|b| (b.first_offset, b.last_offset, b.delivery_state)).collect();
        assert_eq!((state.error_code, state.state_epoch, state.start_offset), (0, 0, 5));
        assert_eq!(batches, [(5, 8, 2)], "the two acknowledged batches, combined");
        let s = summary(&broker, t, 0).await;
        assert_eq!((s.error_code, s.start_offset, s.leader_epoch, s.delivery_complete_count), (0, 5, 1, 4));

        let partitions = vec![delete_req::PartitionData { partition: 0, ..Default::default() }];
        let topics = vec![delete_req::DeleteStateData { topic_id: t, partitions, ..Default::default() }];
        let req = DeleteShareGroupStateRequest { group_id: "queue".into(), topics, ..Default::default() };
        let body = call(&broker, ApiKey::DeleteShareGroupState, 0, RequestBody::DeleteShareGroupState(req)).await;
        let ResponseBody::DeleteShareGroupState(resp) = body else { panic!("{body:?}") };
        assert_eq!(resp.results[0].partitions[0].error_code, 0);
        let s = summary(&broker, t, 0).await;
        assert_eq!((s.error_code, s.start_offset, s.leader_epoch, s.state_epoch), (0, -1, -1, 0), "no state");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each share partition gets its own error, with Kafka's codes and words.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_share_partition_is_answered_with_its_own_error() {
        let (broker, dir, t) = broker("share-state-errors", true).await;
        let unknown = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code();
        assert_eq!(initialize(&broker, t, &[0, -1, 2]).await, [(0, 0), (-1, INVALID), (2, unknown)]);
        assert_eq!(initialize(&broker, Uuid([9; 16]), &[0]).await, [(0, unknown)]);
        let uninitialised = write(&broker, write_request(t, 1, 1, 1)).await;
        assert_eq!(uninitialised[0].1, INVALID);
        assert_eq!(read(&broker, t, 1, 1).await.error_code, INVALID);
        let negative = read(&broker, t, -1, 1).await;
        let message = Some("The partition id cannot be a negative number.".to_string());
        assert_eq!((negative.error_code, negative.error_message), (INVALID, message));

        // A newer leader's read fences the older leader's writes.
        assert_eq!(read(&broker, t, 0, 3).await.error_code, 0);
        let fenced = write(&broker, write_request(t, 0, 2, 1)).await;
        assert_eq!(fenced[0].1, ErrorCode::FENCED_LEADER_EPOCH.code());

        // Osprey's bounds: too many batches for one partition, too many partitions.
        let too_long = write(&broker, write_request(t, 0, 3, MAX_STATE_BATCHES_PER_WRITE + 1)).await;
        assert_eq!(too_long[0].1, INVALID);
        let mut too_wide = write_request(t, 0, 3, 0);
        let one = too_wide.topics[0].partitions[0].clone();
        too_wide.topics[0].partitions = vec![one; MAX_PARTITIONS_PER_REQUEST + 1];
        let refused = write(&broker, too_wide).await;
        assert_eq!(refused.len(), MAX_PARTITIONS_PER_REQUEST + 1);
        assert!(refused.iter().all(|(_, code, _)| *code == INVALID));

        // A partition named twice, in two entries of its topic: one answer, one topic.
        let mut twice = write_request(t, 0, 3, 1);
        twice.topics.push(twice.topics[0].clone());
        assert_eq!(write(&broker, twice).await, [(0, 0, None)]);
        // Kafka's empty answers: no group id, a topic without partitions.
        let mut no_group = write_request(t, 0, 3, 1);
        no_group.group_id.clear();
        assert!(write(&broker, no_group).await.is_empty());
        let mut no_partitions = write_request(t, 0, 3, 1);
        no_partitions.topics.push(write_req::WriteStateData { topic_id: t, ..Default::default() });
        assert!(write(&broker, no_partitions).await.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Without `__share_group_state` led here, every share partition is NOT_COORDINATOR,
    /// worded as Kafka's service words it, and the persister looks the coordinator up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn share_partitions_whose_state_is_not_led_here_are_not_coordinator() {
        let (broker, dir, t) = broker("share-state-not-coordinator", false).await;
        let not_coordinator = ErrorCode::NOT_COORDINATOR.code();
        let written = write(&broker, write_request(t, 0, 1, 1)).await;
        let message = "Unable to write share group state: This is not the correct coordinator.";
        assert_eq!(written, [(0, not_coordinator, Some(message.to_string()))]);
        let s = summary(&broker, t, 0).await;
        let message = "Unable to read share group state summary: This is not the correct coordinator.";
        assert_eq!((s.error_code, s.error_message.as_deref()), (not_coordinator, Some(message)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The coordinator runtime's errors come before the shard's, as in Kafka: a loading
    /// partition is COORDINATOR_LOAD_IN_PROGRESS even for a share partition the metadata
    /// does not have.
    #[test]
    fn the_runtimes_errors_come_before_the_shards() {
        let config = ShareStateConfig::default();
        let partitions = config.state_topic_num_partitions;
        let mut c = ShareStateCoordinator::new(config);
        c.follow_leadership();
        let key = ShareKey { group_id: "queue".into(), topic_id: Uuid([9; 16]), partition: -1 };
        let image = MetadataImage::default();
        assert_eq!(check_key(&c, &image, &key).unwrap_err().code, ErrorCode::NOT_COORDINATOR);
        c.begin_load(partition_for(&key, partitions), 0);
        let loading = check_key(&c, &image, &key).unwrap_err();
        assert_eq!(
            (loading.code, loading.message.as_str()),
            (ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, LOADING_MESSAGE)
        );
        c.finish_load(partition_for(&key, partitions), 0, []);
        assert_eq!(check_key(&c, &image, &key).unwrap_err().code, ErrorCode::INVALID_REQUEST);
        // A coordinator serving every partition: only the metadata is left to check.
        let every = ShareStateCoordinator::new(ShareStateConfig::default());
        let key = ShareKey { partition: 0, ..key };
        assert_eq!(check_key(&every, &image, &key).unwrap_err().code, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    }
}
