//! Codec throughput: a Produce request and a Fetch response each carrying 1 MiB of record
//! batches (records are never touched by the codec: zero-copy slices), and a request
//! header. Run with `cargo bench -p osprey-protocol --bench codec`.

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use osprey_protocol::frame::{encode_request, split_request};
use osprey_protocol::messages::{fetch_response, produce_request, FetchResponse, ProduceRequest};
use osprey_protocol::{Message, RequestBody, RequestHeader};

const PARTITIONS: usize = 16;
const BATCH_BYTES: usize = 64 * 1024;

fn batch_bytes(seed: u8) -> Bytes {
    (0..BATCH_BYTES).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<u8>>().into()
}

fn produce_request() -> ProduceRequest {
    ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![produce_request::TopicProduceData {
            name: "bench".into(),
            partition_data: (0..PARTITIONS)
                .map(|p| produce_request::PartitionProduceData {
                    index: p as i32,
                    records: Some(batch_bytes(p as u8)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn fetch_response() -> FetchResponse {
    FetchResponse {
        responses: vec![fetch_response::FetchableTopicResponse {
            topic: "bench".into(),
            partitions: (0..PARTITIONS)
                .map(|p| fetch_response::PartitionData {
                    partition_index: p as i32,
                    high_watermark: 1_000_000,
                    records: Some(batch_bytes(p as u8)),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn bench_message<M: Message>(c: &mut Criterion, name: &str, msg: &M, version: i16) {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version).expect("encode");
    let encoded = buf.freeze();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(encoded.len() as u64));
    group.bench_function("decode", |b| b.iter(|| M::decode(&mut black_box(encoded.clone()), version).expect("decode")));
    group.bench_function("encode", |b| {
        let mut out = BytesMut::with_capacity(encoded.len() + 1024);
        b.iter(|| {
            out.clear();
            black_box(msg).encode(&mut out, version).expect("encode");
        })
    });
    group.finish();
}

fn codec(c: &mut Criterion) {
    bench_message(c, "produce_request_1MiB_v11", &produce_request(), 11);
    bench_message(c, "fetch_response_1MiB_v16", &fetch_response(), 16);

    let header = RequestHeader {
        request_api_key: 1,
        request_api_version: 16,
        correlation_id: 7,
        client_id: Some("rdkafka".into()),
        ..Default::default()
    };
    let body = RequestBody::Fetch(Default::default());
    let mut frame = BytesMut::new();
    encode_request(&header, &body, &mut frame).expect("encode");
    frame.put_slice(&[0; 64]);
    let frame = frame.freeze();
    let mut group = c.benchmark_group("request_header");
    group.throughput(Throughput::Elements(1));
    group.bench_function("split", |b| b.iter(|| split_request(black_box(frame.clone())).expect("split")));
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
