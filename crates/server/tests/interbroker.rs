//! The inter-broker client (`osprey_server::interbroker`): round trips against a real,
//! in-process Osprey broker, and its behaviour against fake peers built here that
//! misbehave (never answer, close mid-response, answer out of order, send oversized or
//! garbage frames). Every socket binds port 0. Timeouts are short so that the tests are
//! quick, but nothing asserts how long anything took.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use osprey_protocol::frame::{encode_response, split_request};
use osprey_protocol::messages::api_versions_response::ApiVersion;
use osprey_protocol::messages::create_topics_request::CreatableTopic;
use osprey_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use osprey_protocol::messages::metadata_request::MetadataRequestTopic;
use osprey_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use osprey_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest, FetchRequest, MetadataRequest, MetadataResponse,
    ProduceRequest,
};
use osprey_protocol::records::{BatchBuilder, Compression, RecordBatch};
use osprey_protocol::wire::Message;
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, RequestHeader, ResponseBody, ResponseHeader};
use osprey_server::broker::{Broker, Settings, DEFAULT_LISTENER};
use osprey_server::interbroker::{
    client_id, ClientConfig, ClientError, ConnectFailure, DisconnectReason, NodeAddress, NodeClient, NodeClients,
};
use osprey_server::network;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const PEER: i32 = 7;

/// Short bounds, so that a test that waits for a timeout does not wait long.
fn quick_config() -> ClientConfig {
    let mut config = ClientConfig::new(client_id::replica_fetcher(1, 0));
    config.connect_timeout_ms = 2_000;
    config.request_timeout_ms = 2_000;
    config.reconnect_backoff_ms = 5;
    config.reconnect_backoff_max_ms = 20;
    config
}

// ---------------------------------------------------------------------------------------
// Against a real broker.

struct RealBroker {
    broker: Arc<Broker>,
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    dir: std::path::PathBuf,
}

async fn start_broker(name: &str) -> RealBroker {
    let dir = std::env::temp_dir().join(format!("osprey-interbroker-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let settings = Settings::single_node(addr, dir.clone());
    let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).expect("open broker");
    let plaintext = network::ClientListener { name: DEFAULT_LISTENER.into(), socket: listener, tls: None, sasl: None };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    osprey_server::background::spawn(broker.clone(), Duration::from_secs(60), Duration::from_secs(1), stopped.clone());
    let server = tokio::spawn(network::serve(broker.clone(), vec![plaintext], stopped, Duration::from_secs(5)));
    RealBroker { broker, addr, stop, server, dir }
}

impl RealBroker {
    async fn stop(self) {
        let _ = self.stop.send(true);
        self.server.await.expect("server task");
        let _ = self.broker.shutdown(std::time::Instant::now() + Duration::from_secs(60));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_metadata_create_topics_produce_fetch_round_trip_against_osprey() {
    let real = start_broker("round-trip").await;
    let client = NodeClient::new(quick_config(), real.broker.settings.node_id, real.addr.into());
    round_trips(&client, "replicated").await;
    drop(client);
    real.stop().await;
}

/// The same round trips against Apache Kafka: `compat-tests/interbroker-kafka.py` starts
/// a Kafka 4.4 node and runs this with its listeners in `OSPREY_KAFKA_BOOTSTRAP` and
/// `OSPREY_KAFKA_CONTROLLER` (host:port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a running Kafka: run compat-tests/interbroker-kafka.py"]
async fn api_versions_metadata_create_topics_produce_fetch_round_trip_against_kafka() {
    let address = |var: &str| -> NodeAddress {
        let value = std::env::var(var).unwrap_or_else(|_| panic!("{var}=host:port of the Kafka node"));
        let (host, port) = value.rsplit_once(':').expect("host:port");
        NodeAddress::new(host, port.parse().expect("port"))
    };
    let client = NodeClient::new(quick_config(), 1, address("OSPREY_KAFKA_BOOTSTRAP"));
    round_trips(&client, &format!("interbroker-{}", std::process::id())).await;

    // The controller listener lists the controller's APIs, which the codec may not
    // know; the table keeps them, for raw requests.
    let controller =
        NodeClient::new(ClientConfig::new(client_id::to_controller(1)), 1, address("OSPREY_KAFKA_CONTROLLER"));
    let versions = controller.peer_versions().await.expect("controller handshake");
    for (api, name) in [(62, "BrokerRegistration"), (63, "BrokerHeartbeat")] {
        assert!(versions.range(api).is_some(), "the controller lists {name}");
    }
}

/// ApiVersions, CreateTopics, Metadata, Produce and Fetch through `client`, with a new
/// topic of that name.
async fn round_trips(client: &NodeClient, topic_name: &str) {
    // ApiVersions: the handshake's table, and the request itself at the chosen version.
    let versions = client.peer_versions().await.expect("handshake");
    let (_, fetch_max) = ApiKey::Fetch.versions();
    assert_eq!(versions.usable(ApiKey::Fetch), Ok(fetch_max.min(versions.range(1).unwrap().1)));
    let answered = client
        .send(RequestBody::ApiVersions(ApiVersionsRequest {
            // Kafka refuses an empty name or version from v3 (INVALID_REQUEST).
            client_software_name: "osprey-test".into(),
            client_software_version: "1.0".into(),
            ..Default::default()
        }))
        .await
        .expect("ApiVersions");
    let ResponseBody::ApiVersions(api_versions) = answered.body else { panic!("{answered:?}") };
    assert_eq!(api_versions.error_code, 0);
    assert!(api_versions.api_keys.iter().any(|k| k.api_key == ApiKey::Produce as i16));

    // CreateTopics.
    let create = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: topic_name.into(),
            num_partitions: 2,
            replication_factor: 1,
            ..Default::default()
        }],
        timeout_ms: 10_000,
        ..Default::default()
    };
    let created = client.send(RequestBody::CreateTopics(create)).await.expect("CreateTopics");
    let ResponseBody::CreateTopics(created) = created.body else { panic!("{created:?}") };
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");

    // Metadata names it, with its id.
    let metadata = metadata_with_leaders(client, topic_name).await;
    let topic = &metadata.topics[0];
    assert_eq!((topic.error_code, topic.partitions.len()), (0, 2), "{topic:?}");
    let topic_id = topic.topic_id;

    // Produce one batch, naming the topic as the chosen version wants it.
    let mut builder = BatchBuilder::new(Compression::None);
    builder.append(1_700_000_000_000, Some(b"k"), Some(b"replicate me"), &[]).expect("append");
    let batch = builder.build().expect("batch").into_bytes();
    let produced = client
        .send_with(ApiKey::Produce, |version| {
            let (name, topic_id) = topic_by_name_or_id(version, topic_name, topic_id);
            RequestBody::Produce(ProduceRequest {
                acks: -1,
                timeout_ms: 10_000,
                topic_data: vec![TopicProduceData {
                    name,
                    topic_id,
                    partition_data: vec![PartitionProduceData {
                        index: 1,
                        records: Some(batch.clone()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            })
        })
        .await
        .expect("Produce");
    let ResponseBody::Produce(produced) = produced.body else { panic!("{produced:?}") };
    let partition = &produced.responses[0].partition_responses[0];
    assert_eq!((partition.error_code, partition.base_offset), (0, 0), "{partition:?}");

    // Fetch it back, as a follower would (by id from v13).
    let fetched = client
        .send_with(ApiKey::Fetch, |version| {
            let (topic, topic_id) = topic_by_name_or_id(version, topic_name, topic_id);
            RequestBody::Fetch(FetchRequest {
                max_wait_ms: 0,
                min_bytes: 1,
                max_bytes: 1 << 20,
                topics: vec![FetchTopic {
                    topic,
                    topic_id,
                    partitions: vec![FetchPartition {
                        partition: 1,
                        fetch_offset: 0,
                        partition_max_bytes: 1 << 20,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            })
        })
        .await
        .expect("Fetch");
    let ResponseBody::Fetch(fetched) = fetched.body else { panic!("{fetched:?}") };
    let data = &fetched.responses[0].partitions[0];
    assert_eq!((data.error_code, data.high_watermark), (0, 1), "{data:?}");
    let records = RecordBatch::new(data.records.clone().expect("records")).expect("one batch");
    assert_eq!(records.records_count(), 1);
    assert!(records.validate_crc());
}

/// Produce and Fetch name a topic by id from v13, by name before.
fn topic_by_name_or_id(version: i16, name: &str, id: osprey_protocol::Uuid) -> (String, osprey_protocol::Uuid) {
    if version >= 13 {
        (String::new(), id)
    } else {
        (name.to_string(), osprey_protocol::Uuid::ZERO)
    }
}

/// Metadata for one topic, asked again (a bounded number of times) until every
/// partition has a leader: a Kafka broker learns of a new topic from the controller a
/// moment after CreateTopics answers.
async fn metadata_with_leaders(client: &NodeClient, topic_name: &str) -> MetadataResponse {
    for _ in 0..200 {
        let metadata = client
            .send(RequestBody::Metadata(MetadataRequest {
                topics: Some(vec![MetadataRequestTopic { name: Some(topic_name.into()), ..Default::default() }]),
                ..Default::default()
            }))
            .await
            .expect("Metadata");
        let ResponseBody::Metadata(metadata) = metadata.body else { panic!("{metadata:?}") };
        let topic = &metadata.topics[0];
        if topic.error_code == 0 && !topic.partitions.is_empty() && topic.partitions.iter().all(|p| p.leader_id >= 0) {
            return metadata;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("topic {topic_name} has no leader for every partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_mode_and_unsupported_apis_against_osprey() {
    let real = start_broker("raw").await;
    let client = NodeClient::new(quick_config(), real.broker.settings.node_id, real.addr.into());

    // Raw: a Metadata request encoded here, its response body decoded here.
    let version = client.peer_versions().await.expect("handshake").usable(ApiKey::Metadata).expect("Metadata");
    let mut body = BytesMut::new();
    MetadataRequest { topics: Some(vec![]), ..Default::default() }.encode(&mut body, version).unwrap();
    let raw = client.send_raw(ApiKey::Metadata as i16, version, body.freeze()).await.expect("raw Metadata");
    let metadata = MetadataResponse::decode_exact(raw, version).expect("decodes");
    assert_eq!(metadata.brokers.len(), 1);

    // An API the broker does not advertise (delegation tokens are not served).
    let refused = client.send(RequestBody::DescribeDelegationToken(Default::default())).await;
    assert!(matches!(refused, Err(ClientError::Unsupported { api_key: 41, theirs: None, .. })), "{refused:?}");
    // Raw, at a version outside the advertised range.
    let range = client.peer_versions().await.unwrap().range(ApiKey::Metadata as i16).unwrap();
    let refused = client.send_raw(ApiKey::Metadata as i16, range.1 + 1, Bytes::new()).await;
    assert!(matches!(refused, Err(ClientError::Unsupported { theirs: Some(r), .. }) if r == range), "{refused:?}");

    // ApiVersions v5 naming the wrong node: the broker says so and the connect fails.
    let mut wrong = quick_config();
    wrong.cluster_id = Some(real.broker.cluster_id.clone());
    let misaddressed = NodeClient::new(wrong.clone(), real.broker.settings.node_id + 1, real.addr.into());
    let refused = misaddressed.peer_versions().await;
    assert!(matches!(refused, Err(ClientError::Connect { reason: ConnectFailure::WrongPeer, .. })), "{refused:?}");
    let addressed = NodeClient::new(wrong, real.broker.settings.node_id, real.addr.into());
    addressed.peer_versions().await.expect("the right node of the right cluster");

    drop((client, misaddressed, addressed));
    real.stop().await;
}

// ---------------------------------------------------------------------------------------
// Against fake peers.

/// A request as a fake peer reads it.
#[derive(Debug)]
struct Received {
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: Option<String>,
    body: Bytes,
}

async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let size = stream.read_i32().await.ok()?;
    let mut frame = vec![0; usize::try_from(size).ok()?];
    stream.read_exact(&mut frame).await.ok()?;
    let frame = Bytes::from(frame);
    match split_request(frame.clone()) {
        Ok(r) => Some(Received {
            api_key: r.header.request_api_key,
            version: r.header.request_api_version,
            correlation_id: r.header.correlation_id,
            client_id: r.header.client_id,
            body: r.body,
        }),
        // A private key: its header is flexible (v2).
        Err(_) => {
            let mut rest = frame;
            let h = RequestHeader::decode(&mut rest, 2).ok()?;
            Some(Received {
                api_key: h.request_api_key,
                version: h.request_api_version,
                correlation_id: h.correlation_id,
                client_id: h.client_id,
                body: rest,
            })
        }
    }
}

fn response_frame(correlation_id: i32, version: i16, body: &ResponseBody) -> Vec<u8> {
    let mut buf = BytesMut::new();
    encode_response(correlation_id, version, body, &mut buf).expect("encode response");
    let mut framed = (buf.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&buf);
    framed
}

async fn respond(stream: &mut TcpStream, request: &Received, body: &ResponseBody) {
    let _ = stream.write_all(&response_frame(request.correlation_id, request.version, body)).await;
}

/// Every API the codec knows, at the codec's versions.
fn everything() -> ResponseBody {
    ResponseBody::ApiVersions(ApiVersionsResponse {
        api_keys: ApiKey::ALL
            .iter()
            .map(|&k| ApiVersion {
                api_key: k as i16,
                min_version: k.versions().0,
                max_version: k.versions().1,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// Reads the client's ApiVersions and answers it with [`everything`].
async fn handshake(stream: &mut TcpStream) -> Received {
    let request = read_request(stream).await.expect("ApiVersions");
    assert_eq!(request.api_key, ApiKey::ApiVersions as i16);
    respond(stream, &request, &everything()).await;
    request
}

/// Answers every request with an empty Metadata response until the client closes.
async fn answer_all(stream: &mut TcpStream) {
    while let Some(request) = read_request(stream).await {
        respond(stream, &request, &metadata_response()).await;
    }
}

fn metadata_response() -> ResponseBody {
    ResponseBody::Metadata(MetadataResponse::default())
}

fn metadata_request() -> RequestBody {
    RequestBody::Metadata(MetadataRequest { topics: Some(vec![]), ..Default::default() })
}

/// A fake peer: each accepted connection is handed to `serve` with its number (0, 1,
/// ...); the listener's address is returned.
async fn fake_peer<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(usize, TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(n, stream));
            n += 1;
        }
    });
    addr
}

/// The first connection reads requests and never answers; later ones answer everything.
#[tokio::test]
async fn a_peer_that_never_answers_times_out_fails_the_others_and_the_next_request_reconnects() {
    let addr = fake_peer(|n, mut stream| async move {
        handshake(&mut stream).await;
        while let Some(request) = read_request(&mut stream).await {
            if n > 0 {
                respond(&mut stream, &request, &metadata_response()).await;
            }
        }
    })
    .await;
    let mut config = quick_config();
    config.request_timeout_ms = 300;
    let client = NodeClient::new(config, PEER, addr.into());
    client.peer_versions().await.expect("handshake");

    let (first, second) = tokio::join!(client.send(metadata_request()), async {
        // Queued behind the first, on the same connection.
        tokio::task::yield_now().await;
        client.send(metadata_request()).await
    });
    let outcomes = [first, second];
    assert!(
        outcomes.iter().any(|r| matches!(r, Err(ClientError::RequestTimedOut { node: PEER, timeout_ms: 300 }))),
        "{outcomes:?}"
    );
    // The other one either timed out too or was failed by the close that the first
    // timeout caused; it never succeeds on a peer that never answers.
    for outcome in &outcomes {
        assert!(
            matches!(
                outcome,
                Err(ClientError::RequestTimedOut { .. })
                    | Err(ClientError::Disconnected { reason: DisconnectReason::RequestTimedOut { .. }, .. })
            ),
            "{outcome:?}"
        );
    }
    // The timeout closed the connection; the next request gets a new one, which answers.
    let answered = client.send(metadata_request()).await.expect("new connection answers");
    assert!(matches!(answered.body, ResponseBody::Metadata(_)));
}

/// Three requests in flight; the peer writes half of a response and closes.
#[tokio::test]
async fn a_peer_closing_mid_response_fails_every_request_in_flight_and_the_next_reconnects() {
    let (seen, mut seen_rx) = mpsc::unbounded_channel();
    let addr = fake_peer(move |n, mut stream| {
        let seen = seen.clone();
        async move {
            handshake(&mut stream).await;
            if n == 0 {
                let mut requests = Vec::new();
                for _ in 0..3 {
                    requests.push(read_request(&mut stream).await.expect("request"));
                }
                let _ = seen.send(requests.iter().map(|r| r.correlation_id).collect::<Vec<_>>());
                let whole = response_frame(requests[0].correlation_id, requests[0].version, &metadata_response());
                let _ = stream.write_all(&whole[..whole.len() / 2]).await;
                return; // closes the socket
            }
            answer_all(&mut stream).await;
        }
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    let outcomes = futures_join3(
        client.send(metadata_request()),
        client.send(metadata_request()),
        client.send(metadata_request()),
    )
    .await;
    for outcome in &outcomes {
        assert!(
            matches!(outcome, Err(ClientError::Disconnected { node: PEER, reason: DisconnectReason::PeerClosed })),
            "{outcome:?}"
        );
    }
    // They were pipelined: the peer read all three before answering any, each with its
    // own correlation id.
    let ids = seen_rx.recv().await.expect("peer saw three requests");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(client.in_flight(), 0);

    let answered = client.send(metadata_request()).await.expect("next request reconnects");
    assert!(matches!(answered.body, ResponseBody::Metadata(_)));
}

/// Waits for something that a broken client would never do, failing after a minute
/// instead of hanging the test run. Not a timing assertion: a working client does it at
/// once, and a minute is only a guard.
async fn not_forever<T>(what: impl std::future::Future<Output = T>, expected: &str) -> T {
    tokio::time::timeout(Duration::from_secs(60), what).await.unwrap_or_else(|_| panic!("expected: {expected}"))
}

async fn futures_join3<T>(
    a: impl std::future::Future<Output = T>,
    b: impl std::future::Future<Output = T>,
    c: impl std::future::Future<Output = T>,
) -> [T; 3] {
    let (a, b, c) = tokio::join!(a, b, c);
    [a, b, c]
}

/// Kafka brokers answer one connection's requests in order, and Kafka's client takes any
/// other correlation id as a protocol error; so does this one.
#[tokio::test]
async fn a_response_out_of_order_closes_the_connection_with_both_requests_failed() {
    let addr = fake_peer(|_, mut stream| async move {
        handshake(&mut stream).await;
        let first = read_request(&mut stream).await.expect("first");
        let second = read_request(&mut stream).await.expect("second");
        respond(&mut stream, &second, &metadata_response()).await;
        respond(&mut stream, &first, &metadata_response()).await;
        let _ = read_request(&mut stream).await;
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    let (first, second) = tokio::join!(client.send(metadata_request()), client.send(metadata_request()));
    for outcome in [&first, &second] {
        assert!(
            matches!(
                outcome,
                Err(ClientError::Disconnected {
                    reason: DisconnectReason::UnexpectedCorrelationId { expected: Some(e), got: g },
                    ..
                }) if g == &(e + 1)
            ),
            "{outcome:?}"
        );
    }
}

/// A peer that declares a frame over `max_response_bytes`, or a negative one: the
/// connection closes before any of it is read.
#[tokio::test]
async fn an_oversized_or_negative_response_size_closes_the_connection() {
    for (declared, expected) in [
        (1_000_000i32, DisconnectReason::ResponseTooLarge { size: 1_000_000, max: 4096 }),
        (-1, DisconnectReason::NegativeFrameSize(-1)),
    ] {
        let addr = fake_peer(move |_, mut stream| async move {
            handshake(&mut stream).await;
            let _ = read_request(&mut stream).await;
            let _ = stream.write_all(&declared.to_be_bytes()).await;
            let _ = stream.write_all(&[0; 64]).await;
            let _ = read_request(&mut stream).await;
        })
        .await;
        let mut config = quick_config();
        config.max_response_bytes = 4096;
        let client = NodeClient::new(config, PEER, addr.into());
        let outcome = client.send(metadata_request()).await;
        assert_eq!(outcome.unwrap_err(), ClientError::Disconnected { node: PEER, reason: expected });
    }
}

/// A body that does not decode fails its request and leaves the connection up (the
/// frame was whole, so the stream is still in step); a header that does not decode
/// closes it.
#[tokio::test]
async fn a_garbage_body_fails_its_request_and_a_garbage_header_closes_the_connection() {
    let (connections, mut connections_rx) = mpsc::unbounded_channel();
    let addr = fake_peer(move |n, mut stream| {
        let connections = connections.clone();
        async move {
            let _ = connections.send(n);
            handshake(&mut stream).await;
            let mut answered = 0;
            while let Some(request) = read_request(&mut stream).await {
                let mut frame = request.correlation_id.to_be_bytes().to_vec();
                match answered {
                    // A flexible response header (an empty tag buffer), then a body: a
                    // throttle time of -1 and a brokers count whose varint is cut short.
                    0 => frame.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0xff, 0xff]),
                    // A tag buffer that claims more tags than there are bytes.
                    _ => frame.extend_from_slice(&[0x7f]),
                }
                let mut framed = (frame.len() as i32).to_be_bytes().to_vec();
                framed.extend_from_slice(&frame);
                let _ = stream.write_all(&framed).await;
                answered += 1;
            }
        }
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    let version = client.peer_versions().await.unwrap().usable(ApiKey::Metadata).unwrap();
    assert!(version >= 9, "flexible Metadata expected, got v{version}");

    let garbage_body = client.send(metadata_request()).await;
    assert!(
        matches!(&garbage_body, Err(ClientError::MalformedResponse { node: PEER, api_key: 3, version: v, .. }) if *v == version),
        "{garbage_body:?}"
    );
    let garbage_header = client.send(metadata_request()).await;
    assert!(
        matches!(&garbage_header, Err(ClientError::Disconnected { reason: DisconnectReason::MalformedHeader(_), .. })),
        "{garbage_header:?}"
    );
    // Both on the first connection: the garbage body did not close it.
    assert_eq!(connections_rx.recv().await, Some(0));
    assert!(connections_rx.try_recv().is_err());
}

/// `max_in_flight_requests` requests go out before any is answered, and no more.
#[tokio::test]
async fn requests_are_pipelined_up_to_the_in_flight_bound() {
    let (read_two, mut read_two_rx) = mpsc::unbounded_channel();
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    let go_rx = Arc::new(tokio::sync::Mutex::new(Some(go_rx)));
    let addr = fake_peer(move |_, mut stream| {
        let read_two = read_two.clone();
        let go_rx = go_rx.clone();
        async move {
            handshake(&mut stream).await;
            let a = read_request(&mut stream).await.expect("a");
            let b = read_request(&mut stream).await.expect("b");
            let _ = read_two.send(());
            if let Some(go) = go_rx.lock().await.take() {
                let _ = go.await;
            }
            respond(&mut stream, &a, &metadata_response()).await;
            respond(&mut stream, &b, &metadata_response()).await;
            answer_all(&mut stream).await;
        }
    })
    .await;
    let mut config = quick_config();
    config.max_in_flight_requests = 2;
    let client = NodeClient::new(config, PEER, addr.into());
    client.peer_versions().await.expect("handshake");
    let sends = tokio::spawn({
        let client = client.clone();
        async move {
            futures_join3(
                client.send(metadata_request()),
                client.send(metadata_request()),
                client.send(metadata_request()),
            )
            .await
        }
    });
    // The peer answers nothing until it has two requests.
    not_forever(read_two_rx.recv(), "the peer got two requests before answering any: they are pipelined")
        .await
        .expect("peer alive");
    assert_eq!(client.in_flight(), 2, "the bound holds the third back");
    go.send(()).unwrap();
    for outcome in sends.await.unwrap() {
        outcome.expect("answered");
    }
}

/// ApiVersions at a version the peer does not know: it answers UNSUPPORTED_VERSION with
/// its range (KIP-511) and the client asks again at that range's top.
#[tokio::test]
async fn the_handshake_falls_back_to_the_peers_api_versions_version() {
    let (versions, mut versions_rx) = mpsc::unbounded_channel();
    let addr = fake_peer(move |_, mut stream| {
        let versions = versions.clone();
        async move {
            let first = read_request(&mut stream).await.expect("ApiVersions");
            let _ = versions.send(first.version);
            let refusal = ResponseBody::ApiVersions(ApiVersionsResponse {
                error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
                api_keys: vec![ApiVersion { api_key: 18, min_version: 0, max_version: 2, ..Default::default() }],
                ..Default::default()
            });
            // Written at v0, as KIP-511 says.
            let _ = stream.write_all(&response_frame(first.correlation_id, 0, &refusal)).await;
            let second = read_request(&mut stream).await.expect("ApiVersions again");
            let _ = versions.send(second.version);
            respond(&mut stream, &second, &everything()).await;
            answer_all(&mut stream).await;
        }
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    client.send(metadata_request()).await.expect("connected after the fallback");
    assert_eq!(versions_rx.recv().await, Some(ApiKey::ApiVersions.versions().1));
    assert_eq!(versions_rx.recv().await, Some(2));
}

#[tokio::test]
async fn connect_failures_are_typed() {
    // Nobody listens: a port bound and released.
    let closed_port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let client = NodeClient::new(quick_config(), PEER, closed_port.into());
    let refused = client.send(metadata_request()).await;
    assert!(matches!(refused, Err(ClientError::Connect { reason: ConnectFailure::Io(_), .. })), "{refused:?}");

    // Reads ApiVersions, then closes without a word (after reading, so that the close
    // is a FIN, not a reset for unread bytes).
    let addr = fake_peer(|_, mut stream| async move {
        let _ = read_request(&mut stream).await;
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    let closed = client.send(metadata_request()).await;
    assert!(
        matches!(
            closed,
            Err(ClientError::Connect { reason: ConnectFailure::Handshake(DisconnectReason::PeerClosed), .. })
        ),
        "{closed:?}"
    );

    // Accepts and never answers ApiVersions: the connect timeout bounds the handshake.
    let addr = fake_peer(|_, mut stream| async move {
        let _ = read_request(&mut stream).await;
        let _ = read_request(&mut stream).await;
    })
    .await;
    let mut config = quick_config();
    config.connect_timeout_ms = 200;
    let client = NodeClient::new(config, PEER, addr.into());
    let silent = client.send(metadata_request()).await;
    assert!(
        matches!(silent, Err(ClientError::Connect { reason: ConnectFailure::TimedOut { timeout_ms: 200 }, .. })),
        "{silent:?}"
    );
}

/// Raw mode with a private key: header v2 out (with the client id), header v1 back, the
/// body bytes untouched both ways.
#[tokio::test]
async fn raw_mode_carries_private_api_keys_with_flexible_headers() {
    let (seen, mut seen_rx) = mpsc::unbounded_channel();
    let addr = fake_peer(move |_, mut stream| {
        let seen = seen.clone();
        async move {
            handshake(&mut stream).await;
            while let Some(request) = read_request(&mut stream).await {
                let mut frame = BytesMut::new();
                ResponseHeader { correlation_id: request.correlation_id, ..Default::default() }
                    .encode(&mut frame, 1)
                    .unwrap();
                frame.put_slice(b"echo:");
                frame.put_slice(&request.body);
                let mut framed = (frame.len() as i32).to_be_bytes().to_vec();
                framed.extend_from_slice(&frame);
                let _ = seen.send((request.api_key, request.version, request.client_id));
                let _ = stream.write_all(&framed).await;
            }
        }
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    let answer = client.send_raw(10_001, 3, Bytes::from_static(b"{\"vote\":1}")).await.expect("raw");
    assert_eq!(answer.chunk(), b"echo:{\"vote\":1}");
    assert_eq!(seen_rx.recv().await, Some((10_001, 3, Some("broker-1-fetcher-0".to_string()))));
}

/// A metadata update moves the node: the old connection closes, the next request goes
/// to the new address.
#[tokio::test]
async fn a_new_address_closes_the_old_connection_and_the_next_request_goes_there() {
    let (events, mut events_rx) = mpsc::unbounded_channel();
    let serve = move |name: &'static str| {
        let events = events.clone();
        move |_, mut stream: TcpStream| {
            let events = events.clone();
            async move {
                handshake(&mut stream).await;
                while let Some(request) = read_request(&mut stream).await {
                    let _ = events.send((name, "request"));
                    respond(&mut stream, &request, &metadata_response()).await;
                }
                let _ = events.send((name, "closed"));
            }
        }
    };
    let old = fake_peer(serve("old")).await;
    let new = fake_peer(serve("new")).await;
    let client = NodeClient::new(quick_config(), PEER, old.into());
    client.send(metadata_request()).await.expect("old address");
    assert_eq!(events_rx.recv().await, Some(("old", "request")));

    client.set_address(NodeAddress::from(new));
    assert_eq!(client.address(), NodeAddress::from(new));
    assert_eq!(events_rx.recv().await, Some(("old", "closed")));
    client.send(metadata_request()).await.expect("new address");
    assert_eq!(events_rx.recv().await, Some(("new", "request")));
}

/// With one request in flight allowed, a caller gives up on a request the peer never
/// answers. The slot stays taken (the request is still on the wire), so the next
/// request times out waiting for it; that timeout closes the connection, and the one
/// after gets a new connection instead of waiting forever.
#[tokio::test]
async fn an_abandoned_unanswered_request_does_not_wedge_the_client() {
    let (read_one, mut read_one_rx) = mpsc::unbounded_channel();
    let addr = fake_peer(move |n, mut stream| {
        let read_one = read_one.clone();
        async move {
            handshake(&mut stream).await;
            while let Some(request) = read_request(&mut stream).await {
                if n == 0 {
                    let _ = read_one.send(());
                } else {
                    respond(&mut stream, &request, &metadata_response()).await;
                }
            }
        }
    })
    .await;
    let mut config = quick_config();
    config.max_in_flight_requests = 1;
    config.request_timeout_ms = 300;
    let client = NodeClient::new(config, PEER, addr.into());
    let abandoned = tokio::spawn({
        let client = client.clone();
        async move { client.send(metadata_request()).await }
    });
    read_one_rx.recv().await.expect("the peer read the first request");
    abandoned.abort();
    let _ = abandoned.await;
    assert_eq!(client.in_flight(), 1, "the abandoned request still holds its slot");

    let waited = client.send(metadata_request()).await;
    assert_eq!(waited.unwrap_err(), ClientError::RequestTimedOut { node: PEER, timeout_ms: 300 });
    assert_eq!(client.in_flight(), 0, "the timeout closed the connection and freed the slot");
    client.send(metadata_request()).await.expect("a new connection answers");
}

/// A failed connect is retried by the next request (after the back-off), and succeeds
/// once the peer is there.
#[tokio::test]
async fn the_request_after_a_failed_connect_connects_again() {
    let addr = fake_peer(|n, mut stream| async move {
        // The first connection fails its handshake; the rest are served.
        let first = read_request(&mut stream).await.expect("ApiVersions");
        if n == 0 {
            return;
        }
        respond(&mut stream, &first, &everything()).await;
        answer_all(&mut stream).await;
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    let failed = client.send(metadata_request()).await;
    assert!(matches!(failed, Err(ClientError::Connect { node: PEER, .. })), "{failed:?}");
    client.send(metadata_request()).await.expect("second attempt connects");
}

/// Dropping the last clone of the client closes its connection.
#[tokio::test]
async fn dropping_the_client_closes_its_connection() {
    let (closed, mut closed_rx) = mpsc::unbounded_channel();
    let addr = fake_peer(move |_, mut stream| {
        let closed = closed.clone();
        async move {
            handshake(&mut stream).await;
            answer_all(&mut stream).await;
            let _ = closed.send(());
        }
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    let clone = client.clone();
    client.send(metadata_request()).await.expect("answered");
    drop(client);
    clone.send(metadata_request()).await.expect("a clone keeps the connection");
    drop(clone);
    not_forever(closed_rx.recv(), "the peer saw the connection close").await.expect("peer alive");
}

/// A response when no request is in flight is a protocol error: the connection closes,
/// and the client connects again for the next request.
#[tokio::test]
async fn an_unsolicited_response_closes_the_connection() {
    let (connections, mut connections_rx) = mpsc::unbounded_channel();
    let addr = fake_peer(move |n, mut stream| {
        let connections = connections.clone();
        async move {
            handshake(&mut stream).await;
            if n == 0 {
                let _ = stream.write_all(&response_frame(99, 0, &metadata_response())).await;
                // Wait for the client to close the connection.
                let _ = read_request(&mut stream).await;
                let _ = connections.send("first closed");
                return;
            }
            answer_all(&mut stream).await;
        }
    })
    .await;
    let client = NodeClient::new(quick_config(), PEER, addr.into());
    client.peer_versions().await.expect("handshake");
    let closed = not_forever(connections_rx.recv(), "the client closed the connection").await;
    assert_eq!(closed, Some("first closed"));
    client.send(metadata_request()).await.expect("answered on a new connection");
}

/// What a fake peer sends back after the handshake, in the property test below.
#[derive(Debug, Clone)]
enum Reply {
    /// Any bytes at all.
    Stream(Vec<u8>),
    /// A well-framed response to the first request (correlation id 1), random inside.
    Body(Vec<u8>),
}

fn reply_strategy() -> impl proptest::strategy::Strategy<Value = Reply> {
    use proptest::prelude::*;
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Reply::Stream),
        proptest::collection::vec(any::<u8>(), 0..256).prop_map(Reply::Body),
    ]
}

/// Whatever the peer answers before closing, the request ends with an answer or an
/// error, and never with a timeout: a timeout here would mean the reader task died
/// (a panic inside a task does not reach the test) or stopped reading.
fn peer_garbage_ends_the_request_without_hanging(reply: Reply) -> Result<(), proptest::test_runner::TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let bytes = match reply {
            Reply::Stream(bytes) => bytes,
            Reply::Body(body) => {
                let mut framed = ((body.len() + 4) as i32).to_be_bytes().to_vec();
                framed.extend_from_slice(&1i32.to_be_bytes());
                framed.extend_from_slice(&body);
                framed
            }
        };
        let addr = fake_peer(move |_, mut stream| {
            let bytes = bytes.clone();
            async move {
                handshake(&mut stream).await;
                let _ = read_request(&mut stream).await;
                let _ = stream.write_all(&bytes).await;
            }
        })
        .await;
        let mut config = quick_config();
        config.request_timeout_ms = 10_000;
        config.max_response_bytes = 1024;
        let client = NodeClient::new(config, PEER, addr.into());
        let outcome = client.send(metadata_request()).await;
        proptest::prop_assert!(!matches!(outcome, Err(ClientError::RequestTimedOut { .. })), "{outcome:?}");
        Ok(())
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
    #[test]
    fn any_reply_from_the_peer_ends_the_request_without_a_panic_or_a_hang(reply in reply_strategy()) {
        peer_garbage_ends_the_request_without_hanging(reply)?;
    }
}

/// One client per node: asking again for a node gives the same client (one
/// connection), pointed at the node's latest address; a forgotten node's connection
/// closes once nobody holds its client.
#[tokio::test]
async fn node_clients_keep_one_client_per_node_and_follow_its_address() {
    let (events, mut events_rx) = mpsc::unbounded_channel();
    let serve = move |name: &'static str| {
        let events = events.clone();
        move |_, mut stream: TcpStream| {
            let events = events.clone();
            async move {
                let _ = events.send((name, "connected"));
                handshake(&mut stream).await;
                answer_all(&mut stream).await;
                let _ = events.send((name, "closed"));
            }
        }
    };
    let a = fake_peer(serve("a")).await;
    let b = fake_peer(serve("b")).await;
    let nodes = NodeClients::new(quick_config());
    nodes.client(1, a.into()).send(metadata_request()).await.expect("node 1");
    nodes.client(1, a.into()).send(metadata_request()).await.expect("node 1 again");
    assert_eq!(events_rx.recv().await, Some(("a", "connected")));
    assert!(nodes.get(2).is_none());

    // Node 1 moves to b.
    let moved = nodes.client(1, b.into());
    assert_eq!(events_rx.recv().await, Some(("a", "closed")));
    moved.send(metadata_request()).await.expect("node 1 at b");
    assert_eq!(events_rx.recv().await, Some(("b", "connected")));
    assert_eq!(nodes.get(1).map(|c| c.address()), Some(NodeAddress::from(b)));

    // Node 1 leaves the cluster.
    nodes.retain(|id| id != 1);
    assert!(nodes.get(1).is_none());
    drop(moved);
    let closed = not_forever(events_rx.recv(), "node 1's connection closed").await;
    assert_eq!(closed, Some(("b", "closed")));
    // The first connection was not made twice.
    assert!(events_rx.try_recv().is_err());
}

/// Counts counter increments by `name{label=value,...}`, for the metrics test.
#[derive(Default)]
struct CapturedCounters(Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>);

struct CapturedCounter {
    key: String,
    counts: Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

impl metrics::CounterFn for CapturedCounter {
    fn increment(&self, value: u64) {
        *self.counts.lock().unwrap().entry(self.key.clone()).or_default() += value;
    }

    fn absolute(&self, value: u64) {
        self.counts.lock().unwrap().insert(self.key.clone(), value);
    }
}

impl metrics::Recorder for CapturedCounters {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        let key = format!("{}{{{}}}", key.name(), labels.join(","));
        metrics::Counter::from_arc(Arc::new(CapturedCounter { key, counts: self.0.clone() }))
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// Requests are counted by API and result, connections by attempt and failure. One
/// thread, so that the recorder local to it sees every task.
#[test]
fn requests_and_connections_are_counted_by_api_and_result() {
    let recorder = CapturedCounters::default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            // Answers the first request, then a body that does not decode.
            let addr = fake_peer(|_, mut stream| async move {
                handshake(&mut stream).await;
                let first = read_request(&mut stream).await.expect("first");
                respond(&mut stream, &first, &metadata_response()).await;
                let second = read_request(&mut stream).await.expect("second");
                let mut frame = 6i32.to_be_bytes().to_vec();
                frame.extend_from_slice(&second.correlation_id.to_be_bytes());
                frame.extend_from_slice(&[0, 0xff]);
                let _ = stream.write_all(&frame).await;
                let _ = read_request(&mut stream).await;
            })
            .await;
            let served = NodeClient::new(quick_config(), PEER, addr.into());
            served.send(metadata_request()).await.expect("answered");
            served.send(metadata_request()).await.expect_err("garbage");
            let nobody = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
            let unreachable = NodeClient::new(quick_config(), PEER, nobody.into());
            unreachable.send(metadata_request()).await.expect_err("nobody listens");
        })
    });
    let counts = recorder.0.lock().unwrap().clone();
    let count = |key: &str| counts.get(key).copied().unwrap_or(0);
    assert_eq!(count("osprey_interbroker_requests_total{api=Metadata,result=ok}"), 1, "{counts:?}");
    assert_eq!(count("osprey_interbroker_requests_total{api=Metadata,result=malformed}"), 1, "{counts:?}");
    assert_eq!(count("osprey_interbroker_requests_total{api=Metadata,result=connect_failed}"), 1, "{counts:?}");
    assert_eq!(count("osprey_interbroker_connection_attempts_total{}"), 2, "{counts:?}");
    assert_eq!(count("osprey_interbroker_connection_failures_total{}"), 1, "{counts:?}");
}

/// Failures to reach an old address do not delay the first attempt at a new one: with a
/// back-off of ten minutes after the failure, the request to the new address still
/// goes at once.
#[tokio::test]
async fn a_new_address_is_tried_without_the_old_addresses_back_off() {
    let nobody = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let mut config = quick_config();
    config.reconnect_backoff_ms = 600_000;
    config.reconnect_backoff_max_ms = 600_000;
    let client = NodeClient::new(config, PEER, nobody.into());
    client.send(metadata_request()).await.expect_err("nobody listens");

    let addr = fake_peer(|_, mut stream| async move {
        handshake(&mut stream).await;
        answer_all(&mut stream).await;
    })
    .await;
    client.set_address(addr.into());
    not_forever(client.send(metadata_request()), "the new address is tried at once").await.expect("answered");
}
