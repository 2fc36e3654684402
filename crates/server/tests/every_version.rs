//! Every API and version that ApiVersions advertises is answered: random, valid requests
//! of each (from the codec's generator) go to a real broker over a socket, and each gets
//! a response that decodes at the request's version. A handler that builds a response
//! its version cannot carry closes the connection, and fails here.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use osprey_protocol::frame::{decode_response_header, encode_request};
use osprey_protocol::wire::TestRng;
use osprey_protocol::{ApiKey, RequestBody, RequestHeader, ResponseBody};
use osprey_server::broker::{Broker, Settings, DEFAULT_LISTENER};
use osprey_server::{network, supported};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Requests per (API, version).
const ROUNDS: i32 = 8;

/// Random values stay valid; these keep them cheap and quick (no waits of minutes, no
/// millions of partitions, no fire-and-forget produce that would have no response).
fn tame(body: &mut RequestBody, rng: &mut TestRng, shared_id: osprey_protocol::Uuid) {
    match body {
        RequestBody::Produce(p) => {
            if p.acks == 0 {
                p.acks = 1;
            }
            for t in &mut p.topic_data {
                if rng.chance(2) {
                    t.name = "shared".into();
                    t.topic_id = shared_id;
                }
                for part in &mut t.partition_data {
                    part.index = part.index.rem_euclid(3);
                }
            }
        }
        RequestBody::Fetch(f) => {
            f.max_wait_ms = f.max_wait_ms.rem_euclid(20);
            for t in &mut f.topics {
                if rng.chance(2) {
                    t.topic = "shared".into();
                    t.topic_id = shared_id;
                }
                for part in &mut t.partitions {
                    part.partition = part.partition.rem_euclid(3);
                    part.fetch_offset = part.fetch_offset.rem_euclid(3);
                    part.current_leader_epoch = part.current_leader_epoch.rem_euclid(3) - 1;
                }
            }
        }
        RequestBody::ListOffsets(l) => {
            for t in &mut l.topics {
                if rng.chance(2) {
                    t.name = "shared".into();
                }
                for part in &mut t.partitions {
                    part.partition_index = part.partition_index.rem_euclid(3);
                    part.timestamp = part.timestamp.rem_euclid(5) - 4;
                    part.current_leader_epoch = part.current_leader_epoch.rem_euclid(3) - 1;
                }
            }
        }
        RequestBody::OffsetForLeaderEpoch(o) => {
            for t in &mut o.topics {
                if rng.chance(2) {
                    t.topic = "shared".into();
                }
                for part in &mut t.partitions {
                    part.partition = part.partition.rem_euclid(3);
                    part.current_leader_epoch = part.current_leader_epoch.rem_euclid(3) - 1;
                }
            }
        }
        RequestBody::DeleteRecords(d) => {
            for t in &mut d.topics {
                if rng.chance(2) {
                    t.name = "shared".into();
                }
                for part in &mut t.partitions {
                    part.partition_index = part.partition_index.rem_euclid(3);
                    part.offset = part.offset.rem_euclid(3) - 1;
                }
            }
        }
        RequestBody::DescribeConfigs(d) => {
            for r in &mut d.resources {
                if rng.chance(2) {
                    r.resource_type = 2;
                    r.resource_name = "shared".into();
                    r.configuration_keys = None;
                } else if rng.chance(2) {
                    r.resource_type = 4;
                    r.resource_name = "1".into();
                }
            }
        }
        RequestBody::CreateTopics(c) => {
            for t in &mut c.topics {
                t.num_partitions = t.num_partitions.rem_euclid(4) - 1;
                t.replication_factor = t.replication_factor.rem_euclid(3) - 1;
                t.assignments.clear();
            }
        }
        RequestBody::JoinGroup(j) => {
            // A join that is accepted waits for the rebalance: keep that short.
            j.rebalance_timeout_ms = j.rebalance_timeout_ms.rem_euclid(100);
            j.session_timeout_ms = 6000 + j.session_timeout_ms.rem_euclid(1000);
        }
        RequestBody::CreatePartitions(c) => {
            for t in &mut c.topics {
                t.count = t.count.rem_euclid(5);
            }
        }
        RequestBody::Metadata(m) => {
            // Name the shared topic now and then, so the found path is covered too.
            if let Some(topics) = &mut m.topics {
                for t in topics.iter_mut() {
                    if rng.chance(2) {
                        t.name = Some("shared".into());
                    }
                }
            }
        }
        _ => {}
    }
}

async fn round_trip(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &RequestBody,
) -> ResponseBody {
    let header = RequestHeader {
        request_api_key: key as i16,
        request_api_version: version,
        correlation_id,
        client_id: Some("every-version".into()),
        ..Default::default()
    };
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    encode_request(&header, body, &mut frame).expect("random requests encode");
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    stream.write_all(&frame).await.expect("send");
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut len))
        .await
        .unwrap_or_else(|_| panic!("{} v{version}: no response within 10 s", key.name()))
        .unwrap_or_else(|e| {
            panic!("{} v{version}: connection closed instead of a response ({e}); request {body:?}", key.name())
        });
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).await.expect("response body");
    let mut buf = Bytes::from(buf);
    let header = decode_response_header(&mut buf, key, version).expect("response header");
    assert_eq!(header.correlation_id, correlation_id);
    let response = ResponseBody::decode(key, &mut buf, version)
        .unwrap_or_else(|e| panic!("{} v{version}: response does not decode: {e}", key.name()));
    assert!(!buf.has_remaining(), "{} v{version}: bytes after the response", key.name());
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_api_version_gets_a_decodable_response() {
    let dir = std::env::temp_dir().join(format!("osprey-every-version-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut settings = Settings::single_node(addr, dir.clone());
    // A new group's first JoinGroup would otherwise wait 3 s for more members.
    let mut config = osprey_server::config::BrokerConfig::default();
    config.group_initial_rebalance_delay_ms = 0;
    settings.config = std::sync::Arc::new(config);
    let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).expect("open broker");
    let shared = broker
        .create_topic(
            &osprey_cluster::NewTopic {
                name: "shared".into(),
                num_partitions: 2,
                replication_factor: 1,
                ..Default::default()
            },
            false,
        )
        .expect("create topic");
    let plaintext = network::ClientListener { name: DEFAULT_LISTENER.into(), socket: listener, tls: None, sasl: None };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    osprey_server::background::spawn(broker.clone(), Duration::from_secs(60), Duration::from_secs(1), stopped.clone());
    let server = tokio::spawn(network::serve(broker.clone(), vec![plaintext], stopped, Duration::from_secs(5)));

    let mut rng = TestRng::new(0x0e5e);
    let mut answered = 0;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    for &(key, min, max) in supported::ADVERTISED {
        for version in min..=max {
            for _ in 0..ROUNDS {
                let mut body = RequestBody::random(key, &mut rng, version);
                tame(&mut body, &mut rng, shared.id);
                let response = round_trip(&mut stream, key, version, answered, &body).await;
                assert_eq!(response.api_key(), key);
                answered += 1;
            }
        }
    }
    let pairs: i32 = supported::ADVERTISED.iter().map(|(_, min, max)| i32::from(max - min + 1)).sum();
    assert_eq!(answered, pairs * ROUNDS);
    drop(stream);
    let _ = stop.send(true);
    server.await.expect("server task");
    let _ = broker.shutdown(std::time::Instant::now() + std::time::Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
}
