//! Record batch throughput over 1 MiB of records: CRC validation, splitting a buffer into
//! batches, iterating records, validating them as Produce does before storing a batch,
//! and decompressing (and compressing) with every codec.
//! Run with `cargo bench -p osprey-protocol --bench records`.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use osprey_protocol::records::{compress, decompress, BatchBuilder, Batches, Compression, Header, RecordBatch};
use std::hint::black_box;
use std::time::Duration;

const MIB: usize = 1 << 20;
/// Roughly the size of a producer's record value in these benches.
const VALUE_BYTES: usize = 1_000;

/// A JSON-ish value, compressible about as much as typical event payloads are.
fn value(i: usize) -> Vec<u8> {
    let mut v = format!(
        r#"{{"user":{},"event":"{}","page":"/products/{}","session":"{:016x}","ts":{}}}"#,
        i * 7_919 % 100_000,
        ["click", "view", "purchase", "scroll"][i % 4],
        i * 31 % 5_000,
        (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        1_700_000_000_000u64 + i as u64,
    )
    .into_bytes();
    while v.len() < VALUE_BYTES {
        v.extend_from_slice(format!(" pad{:x}", v.len() * (i + 1)).as_bytes());
    }
    v.truncate(VALUE_BYTES);
    v
}

/// A batch with about `bytes` of records.
fn batch(codec: Compression, bytes: usize, first: usize) -> RecordBatch {
    let mut builder = BatchBuilder::new(codec).producer(1, 0, 0);
    let headers = [Header::new("trace", Some(b"0af7651916cd43dd8448eb211c80319c"))];
    let mut i = first;
    while builder.uncompressed_records_bytes() < bytes {
        let key = format!("key-{i}");
        builder.append(1_700_000_000_000 + i as i64, Some(key.as_bytes()), Some(&value(i)), &headers).expect("append");
        i += 1;
    }
    builder.build().expect("build")
}

fn crc(c: &mut Criterion) {
    let batch = batch(Compression::None, MIB, 0);
    let mut group = c.benchmark_group("records/crc");
    group.throughput(Throughput::Bytes(batch.size_bytes() as u64));
    group.bench_function("validate_1mib_batch", |b| b.iter(|| black_box(&batch).validate_crc()));
    group.finish();
}

fn batch_iteration(c: &mut Criterion) {
    // 1 MiB as 64 batches of 16 KiB, as a Fetch response or a segment read holds them.
    let mut buf = Vec::with_capacity(MIB + 64 * 100);
    let mut first = 0;
    while buf.len() < MIB {
        let b = batch(Compression::None, 16 * 1024, first);
        first += b.records_count() as usize;
        buf.extend_from_slice(b.as_bytes());
    }
    let buf = Bytes::from(buf);
    let mut group = c.benchmark_group("records/batches");
    group.throughput(Throughput::Bytes(buf.len() as u64));
    group.bench_function("split_1mib", |b| b.iter(|| Batches::new(black_box(buf.clone())).count()));
    group.bench_function("split_and_validate_crc_1mib", |b| {
        b.iter(|| {
            Batches::new(black_box(buf.clone())).filter(|b| b.as_ref().is_ok_and(RecordBatch::validate_crc)).count()
        })
    });
    group.finish();
}

fn record_iteration(c: &mut Criterion) {
    let batch = batch(Compression::None, MIB, 0);
    let mut group = c.benchmark_group("records/records");
    group.throughput(Throughput::Bytes(batch.size_bytes() as u64));
    group.bench_function("iterate_1mib_uncompressed", |b| {
        b.iter(|| black_box(&batch).records(2 * MIB).expect("records").filter(Result::is_ok).count())
    });
    group.finish();
}

/// What Produce now pays per batch: the walk over every record, and for a compressed batch
/// the streaming decompression under it (compare with `records/decompress`).
fn validation(c: &mut Criterion) {
    let mut group = c.benchmark_group("records/validate");
    for codec in Compression::ALL {
        let batch = batch(codec, MIB, 0);
        // Throughput in record bytes (uncompressed), as the other groups count it.
        group.throughput(Throughput::Bytes(batch.records(2 * MIB).expect("records").data().len() as u64));
        group.bench_function(format!("{}_1mib", codec.name()), |b| {
            b.iter(|| black_box(&batch).validate_records(64 * MIB, |_| {}).expect("valid"))
        });
    }
    group.finish();
}

fn codecs(c: &mut Criterion) {
    let plain = batch(Compression::None, MIB, 0);
    let records = plain.as_bytes().slice(61..);
    let mut group = c.benchmark_group("records/decompress");
    group.throughput(Throughput::Bytes(records.len() as u64));
    for codec in Compression::ALL.into_iter().skip(1) {
        let packed = compress(codec, &records).expect("compress");
        eprintln!("{codec}: {} -> {} bytes", records.len(), packed.len());
        group.bench_function(codec.name(), |b| b.iter(|| decompress(codec, black_box(&packed), 2 * MIB).expect("ok")));
    }
    group.finish();

    let mut group = c.benchmark_group("records/compress");
    group.throughput(Throughput::Bytes(records.len() as u64));
    for codec in Compression::ALL.into_iter().skip(1) {
        group.bench_function(codec.name(), |b| b.iter(|| compress(codec, black_box(&records)).expect("ok")));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the figures are for comparison on a shared two-core machine.
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = crc, batch_iteration, record_iteration, validation, codecs
}
criterion_main!(benches);
