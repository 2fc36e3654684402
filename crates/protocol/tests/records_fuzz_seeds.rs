//! The seed corpus of the `record_batch` fuzz target (`fuzz/corpus/record_batch/seed-*`):
//! a small batch per codec, a transaction marker, a librdkafka-style raw snappy batch and
//! two batches back to back. The committed seeds must stay valid batches; set
//! `OSPREY_WRITE_FUZZ_SEEDS=1` to write them anew from the builder.

use bytes::Bytes;
use osprey_protocol::records::{
    compress_snappy_raw, decompress, BatchBuilder, Batches, Compression, EndTxnMarker, Header, RecordBatch,
};
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/record_batch")
}

fn small_batch(codec: Compression) -> RecordBatch {
    let mut builder = BatchBuilder::new(codec).producer(1_000, 0, 5).partition_leader_epoch(2);
    builder
        .append(1_700_000_000_000, Some(b"key-1"), Some(b"value one"), &[Header::new("h", Some(b"1"))])
        .expect("append");
    builder.append(1_700_000_000_007, None, Some(b"value two, no key"), &[]).expect("append");
    builder.append(1_700_000_000_003, Some(b"tombstone"), None, &[Header::new("null", None)]).expect("append");
    builder.build().expect("build")
}

/// The snappy batch re-framed as one raw block, as librdkafka sends it.
fn raw_snappy_batch() -> Vec<u8> {
    let java = small_batch(Compression::Snappy).into_bytes();
    let records = decompress(Compression::Snappy, &java[61..], 1 << 20).expect("records");
    let mut out = java[..61].to_vec();
    out.extend_from_slice(&compress_snappy_raw(&records).expect("raw"));
    let batch_length = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> =
        Compression::ALL.iter().map(|&c| (format!("seed-{c}"), small_batch(c).into_bytes().to_vec())).collect();
    let marker =
        BatchBuilder::end_txn_marker(EndTxnMarker { commit: true, coordinator_epoch: 3 }, 1_000, 0, 1_700_000_000_100)
            .expect("marker")
            .build()
            .expect("build");
    seeds.push(("seed-txn-marker".into(), marker.into_bytes().to_vec()));
    seeds.push(("seed-snappy-raw".into(), raw_snappy_batch()));
    let two = [small_batch(Compression::None).into_bytes(), small_batch(Compression::Lz4).into_bytes()].concat();
    seeds.push(("seed-two-batches".into(), two));
    seeds
}

#[test]
fn committed_fuzz_seeds_are_valid_batches() {
    let dir = corpus_dir();
    if std::env::var_os("OSPREY_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).expect("corpus dir");
        for (name, bytes) in seeds() {
            std::fs::write(dir.join(name), bytes).expect("write seed");
        }
    }
    for (name, _) in seeds() {
        let path = dir.join(&name);
        let Ok(bytes) = std::fs::read(&path) else {
            panic!("{} is missing: run with OSPREY_WRITE_FUZZ_SEEDS=1", path.display());
        };
        assert!(bytes.len() < 1024, "{name} should stay small");
        let batches: Vec<RecordBatch> = Batches::new(Bytes::from(bytes)).collect::<Result<_, _>>().expect(&name);
        assert!(!batches.is_empty(), "{name}");
        for batch in batches {
            assert!(batch.validate_crc(), "{name}");
            let records = batch.records(1 << 20).expect(&name).collect::<Result<Vec<_>, _>>().expect(&name);
            assert_eq!(records.len(), batch.records_count() as usize, "{name}");
        }
    }
}
