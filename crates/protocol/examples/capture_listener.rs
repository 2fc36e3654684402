//! A fake broker that records the request frames real Kafka clients send, for the golden
//! tests (`crates/protocol/tests/golden.rs`, driven by `compat-tests/golden/capture.sh`).
//!
//! It is not a broker: it stores nothing and answers each request just well enough for
//! a client to go on to its next request. Every answer is built and encoded with the
//! codec, so a client that proceeds has also accepted our response encoding.
//!
//! ```text
//! cargo run -p osprey-protocol --example capture_listener -- --port 0 --out DIR [--partitions N] [--keep N]
//! ```
//!
//! Each frame (without its size prefix) is written to
//! `DIR/<client-id>/<ApiName>-v<version>-<n>.bin`, the first `--keep` of each API and
//! version per client. A frame whose body the codec cannot decode is written with the
//! extension `.undecodable` instead, so that it is looked at rather than committed.
//! With `--port 0` the port is chosen by the system; the first line on stdout is
//! `listening on 127.0.0.1:<port>` either way.

use bytes::{Bytes, BytesMut};
use osprey_protocol::frame::{encode_response, split_request, FrameError, RequestFrame};
use osprey_protocol::messages::{
    api_versions_response, fetch_response, find_coordinator_response, join_group_response, leave_group_response,
    list_offsets_response, metadata_response, offset_commit_response, offset_fetch_response, produce_response,
    ApiVersionsResponse, FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    GetTelemetrySubscriptionsResponse, HeartbeatResponse, InitProducerIdResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, ProduceRequest,
    ProduceResponse, PushTelemetryResponse, SyncGroupRequest, SyncGroupResponse,
};
use osprey_protocol::{ApiKey, RequestBody, RequestHeader, ResponseBody, Uuid};
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use std::{env, fs, process, thread};

/// Larger than any client's default `max.request.size` (1 MiB); a larger declared size
/// closes the connection before anything is allocated.
const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// Connections served at once; more are closed on accept.
const MAX_CONNECTIONS: usize = 64;
/// A connection silent for this long is closed, so that no thread lingers.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// A Fetch is answered after its max wait, but never later than this: long enough that
/// idle consumers do not spin, short enough to keep a capture run quick.
const FETCH_WAIT_CAP_MS: u64 = 500;
const NODE_ID: i32 = 1;
const UNSUPPORTED_VERSION: i16 = 35;
const MEMBER_ID_REQUIRED: i16 = 79;
const UNKNOWN_TOPIC_ID: i16 = 100;

/// The ranges Kafka 4.2 advertises for the APIs this listener answers, with the lower
/// bounds librdkafka needs to see (PROTOCOL-NOTES, "Advertised ranges: traps"). Each is
/// further capped at what the codec knows.
const ADVERTISED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 11),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 10),
    (ApiKey::OffsetFetch, 1, 10),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::ApiVersions, 0, 5),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::GetTelemetrySubscriptions, 0, 0),
    (ApiKey::PushTelemetry, 0, 0),
];

fn main() {
    let args = match Args::parse(env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("capture_listener: {message}");
            eprintln!("usage: capture_listener --port P --out DIR [--partitions N] [--keep N]");
            process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("capture_listener: {e}");
        process::exit(1);
    }
}

#[derive(Debug)]
struct Args {
    port: u16,
    out: PathBuf,
    partitions: i32,
    keep: usize,
}

impl Args {
    fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let (mut port, mut out, mut partitions, mut keep) = (None, None, 2, 3);
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = |e: std::num::ParseIntError| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--port" => port = Some(value.parse().map_err(bad)?),
                "--out" => out = Some(PathBuf::from(&value)),
                "--partitions" => partitions = value.parse().map_err(bad)?,
                "--keep" => keep = value.parse().map_err(bad)?,
                _ => return Err(format!("unknown argument {flag}")),
            }
        }
        if !(1..=64).contains(&partitions) {
            return Err("--partitions must be 1-64".into());
        }
        Ok(Args { port: port.ok_or("--port is required")?, out: out.ok_or("--out is required")?, partitions, keep })
    }
}

fn run(args: Args) -> io::Result<()> {
    fs::create_dir_all(&args.out)?;
    let listener = TcpListener::bind(("127.0.0.1", args.port))?;
    let port = listener.local_addr()?.port();
    println!("listening on 127.0.0.1:{port}");
    io::stdout().flush()?;
    let state = Arc::new(State {
        out: args.out,
        keep: args.keep,
        host: "127.0.0.1".into(),
        port: i32::from(port),
        partitions: args.partitions,
        topics: Mutex::new(BTreeSet::new()),
        saved: Mutex::new(HashMap::new()),
        log_end_offsets: Mutex::new(HashMap::new()),
        next_member: AtomicU64::new(1),
        connections: AtomicUsize::new(0),
    });
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                eprintln!("accept: {e}");
                continue;
            }
        };
        if state.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            state.connections.fetch_sub(1, Ordering::SeqCst);
            eprintln!("too many connections, closing one");
            let _ = stream.shutdown(Shutdown::Both);
            continue;
        }
        let shared = Arc::clone(&state);
        let spawned = thread::Builder::new().name("connection".into()).spawn(move || {
            let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            if let Err(e) = serve(&shared, stream) {
                // A client hanging up, even mid-response, is how connections end here.
                let hung_up = matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                );
                if !hung_up {
                    eprintln!("{peer}: {e}");
                }
            }
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            // The stream went down with the closure; only the count is left to undo.
            state.connections.fetch_sub(1, Ordering::SeqCst);
            eprintln!("cannot start a connection thread: {e}");
        }
    }
    Ok(())
}

/// What every connection shares: where frames go, and the little the fake broker
/// remembers (topics it was asked about, produced offsets).
#[derive(Debug)]
struct State {
    out: PathBuf,
    keep: usize,
    host: String,
    port: i32,
    partitions: i32,
    topics: Mutex<BTreeSet<String>>,
    /// How many frames were written per `<client>/<Api>-v<version>`.
    saved: Mutex<HashMap<String, usize>>,
    log_end_offsets: Mutex<HashMap<(String, i32), i64>>,
    next_member: AtomicU64,
    connections: AtomicUsize,
}

/// A poisoned lock only means another connection's thread died; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn serve(state: &State, mut stream: TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_nodelay(true)?;
    loop {
        let frame = read_frame(&mut stream)?;
        let response = match handle_frame(state, frame) {
            Outcome::Respond(response) => response,
            Outcome::Silent => continue,
            // Kafka closes the connection on a request it cannot parse; so do we.
            Outcome::Close => return stream.shutdown(Shutdown::Both),
        };
        let size = u32::try_from(response.len()).map_err(|_| io::Error::other("response too large"))?;
        stream.write_all(&size.to_be_bytes())?;
        stream.write_all(&response)?;
    }
}

/// Reads one size-prefixed frame, checking the declared size before allocating.
fn read_frame(stream: &mut TcpStream) -> io::Result<Bytes> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix)?;
    let size = i32::from_be_bytes(prefix);
    let size = usize::try_from(size).ok().filter(|s| (1..=MAX_FRAME_BYTES).contains(s));
    let Some(size) = size else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "frame size out of range"));
    };
    let mut frame = vec![0u8; size];
    stream.read_exact(&mut frame)?;
    Ok(Bytes::from(frame))
}

/// What to do after a request.
enum Outcome {
    /// Send these bytes (response header + body, without the size prefix).
    Respond(BytesMut),
    /// No response is due (acks=0 produce).
    Silent,
    Close,
}

/// Records the frame and works out the response.
fn handle_frame(state: &State, frame: Bytes) -> Outcome {
    let RequestFrame { api_key, header, body } = match split_request(frame.clone()) {
        Ok(split) => split,
        Err(FrameError::UnknownApiKey { api_key, correlation_id }) => {
            eprintln!("unknown api key {api_key} (correlation id {correlation_id}): closing");
            return Outcome::Close;
        }
        Err(e) => {
            eprintln!("bad request header: {e}: closing");
            return Outcome::Close;
        }
    };
    let version = header.request_api_version;
    let client = header.client_id.clone().unwrap_or_default();
    let decoded = RequestBody::decode(api_key, &mut body.clone(), version);
    save_frame(state, &header, api_key, &frame, decoded.is_ok());
    let request = match decoded {
        Ok(request) => request,
        // KIP-511: an ApiVersions newer than we know is answered in v0 with our ranges, so
        // that the client retries at a version we share; a malformed one is just closed.
        Err(e) if api_key == ApiKey::ApiVersions && version > api_key.versions().1 => {
            eprintln!("[{client}] ApiVersions v{version}: {e}: answering v0 UNSUPPORTED_VERSION (KIP-511)");
            return encode(&header, 0, ResponseBody::ApiVersions(api_versions(UNSUPPORTED_VERSION)));
        }
        Err(e) => {
            eprintln!("[{client}] {} v{version}: {e}: closing", api_key.name());
            return Outcome::Close;
        }
    };
    match respond(state, &header, request) {
        Reply::Body(body) => {
            eprintln!("[{client}] {} v{version} answered", api_key.name());
            encode(&header, version, *body)
        }
        Reply::Nothing => {
            eprintln!("[{client}] {} v{version} needs no answer", api_key.name());
            Outcome::Silent
        }
        Reply::Close => {
            eprintln!("[{client}] {} v{version} is not served here: closing", api_key.name());
            Outcome::Close
        }
    }
}

fn encode(header: &RequestHeader, version: i16, body: ResponseBody) -> Outcome {
    let mut buf = BytesMut::new();
    match encode_response(header.correlation_id, version, &body, &mut buf) {
        Ok(()) => Outcome::Respond(buf),
        Err(e) => {
            eprintln!("cannot encode {} v{version} response: {e}: closing", body.api_key().name());
            Outcome::Close
        }
    }
}

/// Writes the frame if fewer than `keep` of its client, API and version are saved yet.
fn save_frame(state: &State, header: &RequestHeader, api_key: ApiKey, frame: &Bytes, decodable: bool) {
    let client = sanitize(header.client_id.as_deref().unwrap_or(""));
    let stem = format!("{}-v{}", api_key.name(), header.request_api_version);
    let n = {
        let mut saved = lock(&state.saved);
        let n = saved.entry(format!("{client}/{stem}")).or_insert(0);
        if *n >= state.keep {
            return;
        }
        *n += 1;
        *n - 1
    };
    let dir = state.out.join(&client);
    let ext = if decodable { "bin" } else { "undecodable" };
    let path = dir.join(format!("{stem}-{n}.{ext}"));
    if let Err(e) = fs::create_dir_all(&dir).and_then(|()| fs::write(&path, frame)) {
        eprintln!("cannot write {}: {e}", path.display());
    }
}

/// A client id as a directory name: safe characters only, never empty, bounded length.
fn sanitize(client_id: &str) -> String {
    let name: String = client_id
        .chars()
        .take(100)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    if name.is_empty() || name.starts_with('.') {
        format!("client{name}")
    } else {
        name
    }
}

enum Reply {
    Body(Box<ResponseBody>),
    /// acks=0 produce: the client expects no response.
    Nothing,
    /// An API this listener does not serve (nor advertise).
    Close,
}

fn respond(state: &State, header: &RequestHeader, request: RequestBody) -> Reply {
    let version = header.request_api_version;
    let body = match request {
        RequestBody::ApiVersions(_) => ResponseBody::ApiVersions(api_versions(0)),
        RequestBody::Metadata(r) => ResponseBody::Metadata(metadata(state, r)),
        RequestBody::Produce(r) if r.acks == 0 => {
            produce(state, r);
            return Reply::Nothing;
        }
        RequestBody::Produce(r) => ResponseBody::Produce(produce(state, r)),
        RequestBody::Fetch(r) => ResponseBody::Fetch(fetch(r)),
        RequestBody::ListOffsets(r) => ResponseBody::ListOffsets(list_offsets(r)),
        RequestBody::FindCoordinator(r) => ResponseBody::FindCoordinator(find_coordinator(state, r, version)),
        RequestBody::JoinGroup(r) => ResponseBody::JoinGroup(join_group(state, header, r, version)),
        RequestBody::SyncGroup(r) => ResponseBody::SyncGroup(sync_group(r)),
        RequestBody::Heartbeat(_) => ResponseBody::Heartbeat(HeartbeatResponse::default()),
        RequestBody::LeaveGroup(r) => ResponseBody::LeaveGroup(leave_group(r)),
        RequestBody::OffsetFetch(r) => ResponseBody::OffsetFetch(offset_fetch(r, version)),
        RequestBody::OffsetCommit(r) => ResponseBody::OffsetCommit(offset_commit(r)),
        RequestBody::InitProducerId(_) => ResponseBody::InitProducerId(InitProducerIdResponse {
            producer_id: 1000,
            producer_epoch: 0,
            ..Default::default()
        }),
        RequestBody::GetTelemetrySubscriptions(_) => ResponseBody::GetTelemetrySubscriptions(telemetry()),
        RequestBody::PushTelemetry(_) => ResponseBody::PushTelemetry(PushTelemetryResponse::default()),
        _ => return Reply::Close,
    };
    Reply::Body(Box::new(body))
}

fn api_versions(error_code: i16) -> ApiVersionsResponse {
    let api_keys = ADVERTISED
        .iter()
        .filter_map(|&(key, min, max)| {
            let (codec_min, codec_max) = key.versions();
            let (min, max) = (min.max(codec_min), max.min(codec_max));
            (min <= max).then_some(api_versions_response::ApiVersion {
                api_key: key as i16,
                min_version: min,
                max_version: max,
                ..Default::default()
            })
        })
        .collect();
    ApiVersionsResponse { error_code, api_keys, ..Default::default() }
}

/// A stable, non-zero id per topic name (FNV-1a, twice with different offsets).
fn topic_id(name: &str) -> Uuid {
    let fnv = |basis: u64| name.bytes().fold(basis, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    id[8..].copy_from_slice(&(fnv(0x8422_2325_cbf2_9ce4) | 1).to_be_bytes());
    Uuid(id)
}

/// Every topic asked for exists, with `partitions` partitions all led by this listener.
fn metadata(state: &State, request: MetadataRequest) -> MetadataResponse {
    let names: Vec<Result<String, Uuid>> = match request.topics {
        Some(topics) if !topics.is_empty() => {
            let known = lock(&state.topics).clone();
            topics
                .into_iter()
                .map(|t| match t.name {
                    Some(name) => Ok(name),
                    None => known.iter().find(|n| topic_id(n) == t.topic_id).cloned().ok_or(t.topic_id),
                })
                .collect()
        }
        // Null (or, at v0, empty) asks for every topic: those seen so far.
        _ => lock(&state.topics).iter().cloned().map(Ok).collect(),
    };
    let topics = names
        .into_iter()
        .map(|name| match name {
            Ok(name) => {
                lock(&state.topics).insert(name.clone());
                metadata_topic(state, name)
            }
            Err(id) => metadata_response::MetadataResponseTopic {
                error_code: UNKNOWN_TOPIC_ID,
                name: None,
                topic_id: id,
                ..Default::default()
            },
        })
        .collect();
    MetadataResponse {
        brokers: vec![metadata_response::MetadataResponseBroker {
            node_id: NODE_ID,
            host: state.host.clone(),
            port: state.port,
            rack: None,
            ..Default::default()
        }],
        cluster_id: Some("osprey-golden-capture".into()),
        controller_id: NODE_ID,
        topics,
        ..Default::default()
    }
}

fn metadata_topic(state: &State, name: String) -> metadata_response::MetadataResponseTopic {
    let partitions = (0..state.partitions)
        .map(|index| metadata_response::MetadataResponsePartition {
            partition_index: index,
            leader_id: NODE_ID,
            leader_epoch: 0,
            replica_nodes: vec![NODE_ID],
            isr_nodes: vec![NODE_ID],
            ..Default::default()
        })
        .collect();
    metadata_response::MetadataResponseTopic {
        topic_id: topic_id(&name),
        name: Some(name),
        partitions,
        ..Default::default()
    }
}

/// Succeeds every partition, handing out consecutive offsets per partition.
fn produce(state: &State, request: ProduceRequest) -> ProduceResponse {
    let mut log_end_offsets = lock(&state.log_end_offsets);
    let responses = request
        .topic_data
        .into_iter()
        .map(|topic| {
            let key = if topic.name.is_empty() { topic.topic_id.to_string() } else { topic.name.clone() };
            let partition_responses = topic
                .partition_data
                .iter()
                .map(|p| {
                    let end = log_end_offsets.entry((key.clone(), p.index)).or_insert(0);
                    let base_offset = *end;
                    *end += records_count(p.records.as_deref().unwrap_or_default());
                    produce_response::PartitionProduceResponse {
                        index: p.index,
                        base_offset,
                        log_start_offset: 0,
                        ..Default::default()
                    }
                })
                .collect();
            produce_response::TopicProduceResponse {
                name: topic.name,
                topic_id: topic.topic_id,
                partition_responses,
                ..Default::default()
            }
        })
        .collect();
    ProduceResponse { responses, ..Default::default() }
}

/// The recordsCount of a v2 batch (bytes 57-60), or 1 if the batch is too short to say.
fn records_count(batch: &[u8]) -> i64 {
    match batch.get(57..61) {
        Some(&[a, b, c, d]) => i64::from(i32::from_be_bytes([a, b, c, d]).max(1)),
        _ => 1,
    }
}

/// Every partition is empty: no records, high watermark 0. Answered after the client's
/// max wait (capped) as a broker with no data would.
fn fetch(request: FetchRequest) -> FetchResponse {
    let wait_ms = u64::try_from(request.max_wait_ms).unwrap_or(0).min(FETCH_WAIT_CAP_MS);
    thread::sleep(Duration::from_millis(wait_ms));
    let responses = request
        .topics
        .into_iter()
        .map(|topic| fetch_response::FetchableTopicResponse {
            partitions: topic
                .partitions
                .iter()
                .map(|p| fetch_response::PartitionData {
                    partition_index: p.partition,
                    high_watermark: 0,
                    last_stable_offset: 0,
                    log_start_offset: 0,
                    ..Default::default()
                })
                .collect(),
            topic: topic.topic,
            topic_id: topic.topic_id,
            ..Default::default()
        })
        .collect();
    FetchResponse { responses, ..Default::default() }
}

fn list_offsets(request: ListOffsetsRequest) -> ListOffsetsResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| list_offsets_response::ListOffsetsTopicResponse {
            partitions: topic
                .partitions
                .iter()
                .map(|p| list_offsets_response::ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    offset: 0,
                    leader_epoch: 0,
                    ..Default::default()
                })
                .collect(),
            name: topic.name,
            ..Default::default()
        })
        .collect();
    ListOffsetsResponse { topics, ..Default::default() }
}

/// This listener coordinates every group and transactional id.
fn find_coordinator(state: &State, request: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| find_coordinator_response::Coordinator {
                key,
                node_id: NODE_ID,
                host: state.host.clone(),
                port: state.port,
                error_message: None,
                ..Default::default()
            })
            .collect();
        return FindCoordinatorResponse { error_message: None, coordinators, ..Default::default() };
    }
    FindCoordinatorResponse {
        error_message: None,
        node_id: NODE_ID,
        host: state.host.clone(),
        port: state.port,
        ..Default::default()
    }
}

/// KIP-394: a v4+ join without a member id gets one with MEMBER_ID_REQUIRED; a join with
/// one completes at once with the joiner as the only member and the leader.
fn join_group(state: &State, header: &RequestHeader, request: JoinGroupRequest, version: i16) -> JoinGroupResponse {
    let member_id = if request.member_id.is_empty() {
        let n = state.next_member.fetch_add(1, Ordering::SeqCst);
        format!("{}-{n:08}", header.client_id.as_deref().unwrap_or("member"))
    } else {
        request.member_id.clone()
    };
    let protocol_type = (version >= 7).then(|| request.protocol_type.clone());
    if request.member_id.is_empty() && version >= 4 {
        return JoinGroupResponse {
            error_code: MEMBER_ID_REQUIRED,
            member_id,
            protocol_name: if version >= 7 { None } else { Some(String::new()) },
            ..Default::default()
        };
    }
    let Some(protocol) = request.protocols.into_iter().next() else {
        return JoinGroupResponse { error_code: 23 /* INCONSISTENT_GROUP_PROTOCOL */, ..Default::default() };
    };
    JoinGroupResponse {
        generation_id: 1,
        protocol_type,
        protocol_name: Some(protocol.name),
        leader: member_id.clone(),
        members: vec![join_group_response::JoinGroupResponseMember {
            member_id: member_id.clone(),
            group_instance_id: request.group_instance_id,
            metadata: protocol.metadata,
            ..Default::default()
        }],
        member_id,
        ..Default::default()
    }
}

/// The member gets back what it (as leader) assigned to itself.
fn sync_group(request: SyncGroupRequest) -> SyncGroupResponse {
    let assignment = request
        .assignments
        .into_iter()
        .find(|a| a.member_id == request.member_id)
        .map(|a| a.assignment)
        .unwrap_or_default();
    SyncGroupResponse {
        protocol_type: request.protocol_type,
        protocol_name: request.protocol_name,
        assignment,
        ..Default::default()
    }
}

fn leave_group(request: LeaveGroupRequest) -> LeaveGroupResponse {
    let members = request
        .members
        .into_iter()
        .map(|m| leave_group_response::MemberResponse {
            member_id: m.member_id,
            group_instance_id: m.group_instance_id,
            ..Default::default()
        })
        .collect();
    LeaveGroupResponse { members, ..Default::default() }
}

/// No group has committed offsets (-1), so consumers fall back to auto.offset.reset.
fn offset_fetch(request: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    if version >= 8 {
        let groups = request
            .groups
            .into_iter()
            .map(|group| offset_fetch_response::OffsetFetchResponseGroup {
                topics: group
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|t| offset_fetch_response::OffsetFetchResponseTopics {
                        partitions: t
                            .partition_indexes
                            .iter()
                            .map(|&partition_index| offset_fetch_response::OffsetFetchResponsePartitions {
                                partition_index,
                                committed_offset: -1,
                                ..Default::default()
                            })
                            .collect(),
                        name: t.name,
                        topic_id: t.topic_id,
                        ..Default::default()
                    })
                    .collect(),
                group_id: group.group_id,
                ..Default::default()
            })
            .collect();
        return OffsetFetchResponse { groups, ..Default::default() };
    }
    let topics = request
        .topics
        .unwrap_or_default()
        .into_iter()
        .map(|t| offset_fetch_response::OffsetFetchResponseTopic {
            partitions: t
                .partition_indexes
                .iter()
                .map(|&partition_index| offset_fetch_response::OffsetFetchResponsePartition {
                    partition_index,
                    committed_offset: -1,
                    ..Default::default()
                })
                .collect(),
            name: t.name,
            ..Default::default()
        })
        .collect();
    OffsetFetchResponse { topics, ..Default::default() }
}

fn offset_commit(request: OffsetCommitRequest) -> OffsetCommitResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|t| offset_commit_response::OffsetCommitResponseTopic {
            partitions: t
                .partitions
                .iter()
                .map(|p| offset_commit_response::OffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    ..Default::default()
                })
                .collect(),
            name: t.name,
            topic_id: t.topic_id,
            ..Default::default()
        })
        .collect();
    OffsetCommitResponse { topics, ..Default::default() }
}

/// A subscription asking for no metrics: the client then pushes nothing and only asks
/// again after the push interval.
fn telemetry() -> GetTelemetrySubscriptionsResponse {
    GetTelemetrySubscriptionsResponse {
        client_instance_id: topic_id("client-instance"),
        subscription_id: 1,
        accepted_compression_types: vec![0],
        push_interval_ms: 300_000,
        telemetry_max_bytes: 1024 * 1024,
        delta_temporality: true,
        requested_metrics: Vec::new(),
        ..Default::default()
    }
}
