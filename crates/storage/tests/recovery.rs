//! Damage beyond a torn last write: a sealed segment cut or corrupted, a segment file
//! deleted. Recovery must keep every intact segment (they hold acknowledged, fsynced
//! data), report what it lost, and the scrubber must find corruption open does not scan.

mod common;

use std::path::{Path, PathBuf};

use common::{batch, read_all, split, stamped};
use osprey_storage::{DamageKind, LogConfig, PartitionLog, ScrubCursor, SimStorage, Storage};

const DIR: &str = "/data/topic-0";
const BATCHES: u64 = 40;

fn small_segments() -> LogConfig {
    LogConfig { segment_bytes: 4096, index_interval_bytes: 256, ..LogConfig::default() }
}

fn open(storage: &SimStorage) -> PartitionLog<SimStorage> {
    PartitionLog::open(storage.clone(), DIR, small_segments(), 0).unwrap()
}

/// Appends `BATCHES` one-record batches, each acknowledged (durable), and stops without
/// a clean close (as `kill -9`). Returns the batches as stored and the segment files.
fn acknowledged_log(storage: &SimStorage) -> (Vec<(i64, Vec<u8>)>, Vec<PathBuf>) {
    let log = open(storage);
    let mut acked = Vec::new();
    for i in 0..BATCHES {
        let info = log.append(&batch(i, 1, 500), 0, 0).unwrap();
        log.wait_for_ack(&info).unwrap();
        acked.push((info.base_offset, stamped(batch(i, 1, 500), info.base_offset, 0)));
    }
    drop(log);
    (acked, segment_files(storage))
}

fn segment_files(storage: &SimStorage) -> Vec<PathBuf> {
    let mut names: Vec<String> = storage.list(Path::new(DIR)).unwrap();
    names.retain(|n| n.ends_with(".log"));
    names.sort();
    names.iter().map(|n| Path::new(DIR).join(n)).collect()
}

fn base_of(path: &Path) -> i64 {
    path.file_name().unwrap().to_str().unwrap().trim_end_matches(".log").parse().unwrap()
}

/// Checks the served batches against the expected ones: offsets first, for a readable
/// failure, then the bytes.
fn assert_served(got: &[(i64, Vec<u8>)], expected: &[(i64, Vec<u8>)], what: &str) {
    let offsets = |v: &[(i64, Vec<u8>)]| v.iter().map(|(o, _)| *o).collect::<Vec<_>>();
    assert_eq!(offsets(got), offsets(expected), "{what}");
    assert!(got == expected, "{what}: same offsets, different bytes");
}

/// The acknowledged batches of segment `i` (by base offsets).
fn in_segment(acked: &[(i64, Vec<u8>)], files: &[PathBuf], i: usize) -> Vec<(i64, Vec<u8>)> {
    let start = base_of(&files[i]);
    let end = files.get(i + 1).map_or(i64::MAX, |f| base_of(f));
    acked.iter().filter(|(o, _)| *o >= start && *o < end).cloned().collect()
}

#[test]
fn truncated_older_segment_after_a_crash_keeps_every_later_segment() {
    let storage = SimStorage::new();
    let (acked, files) = acknowledged_log(&storage);
    assert!(files.len() >= 5, "the test needs several sealed segments");
    let mut bytes = storage.contents(&files[1]).unwrap();
    let original_len = bytes.len();
    bytes.truncate(original_len - 100); // tears its last batch
    storage.put(&files[1], bytes);

    let log = open(&storage);
    let damaged_seg = in_segment(&acked, &files, 1);
    let (lost_offset, _) = damaged_seg.last().unwrap().clone();
    let expected: Vec<_> = acked.iter().filter(|(o, _)| *o != lost_offset).cloned().collect();
    assert_served(&read_all(&log), &expected, "every intact batch, in every later segment, is still served");
    assert_eq!(log.log_end_offset(), BATCHES as i64);

    let report = log.recovery_report();
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    let d = &report.damaged[0];
    assert_eq!(d.kind, DamageKind::CutShort);
    assert_eq!(d.file, files[1]);
    assert_eq!((d.first_offset, d.end_offset), (lost_offset, base_of(&files[2])));
    // The cut bytes are copied aside, not destroyed.
    let quarantined = storage.contents(d.quarantined.as_ref().unwrap()).unwrap();
    assert_eq!(quarantined.len() as u64, d.bytes);
    assert_eq!(quarantined.len(), damaged_seg.last().unwrap().1.len() - 100);

    // A fetch inside the lost range gets the next batch the log holds.
    let slice = log.read(lost_offset, 1 << 20).unwrap();
    assert_eq!(split(&slice.records)[0].0, base_of(&files[2]));
    // And the log takes appends at its old end.
    assert_eq!(log.append(&batch(99, 1, 10), 0, 0).unwrap().base_offset, BATCHES as i64);
}

#[test]
fn corrupt_byte_in_an_older_segment_cuts_only_that_segment_and_indexes_are_rebuilt() {
    let storage = SimStorage::new();
    let (acked, files) = acknowledged_log(&storage);
    let seg = in_segment(&acked, &files, 1);
    assert!(seg.len() >= 4);
    // Flip a record byte of the segment's second batch, and lose its offset index so
    // open rescans the segment with CRCs (an index that does not match does the same).
    let mut bytes = storage.contents(&files[1]).unwrap();
    let second_batch_at = seg[0].1.len();
    bytes[second_batch_at + 100] ^= 0x40;
    storage.put(&files[1], bytes);
    storage.remove(&files[1].with_extension("index")).unwrap();

    let log = open(&storage);
    let lost: Vec<i64> = seg[1..].iter().map(|(o, _)| *o).collect();
    let expected: Vec<_> = acked.iter().filter(|(o, _)| !lost.contains(o)).cloned().collect();
    assert_served(&read_all(&log), &expected, "intact batches");
    let report = log.recovery_report().clone();
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    assert_eq!(report.damaged[0].kind, DamageKind::CutShort);
    assert_eq!((report.damaged[0].first_offset, report.damaged[0].end_offset), (seg[1].0, base_of(&files[2])));
    assert!(storage.exists(&files[1].with_extension("index")), "the rebuilt index is written back");
    drop(log);

    // The next open finds the segment consistent; the hole is still reported, as a gap.
    let log = open(&storage);
    assert_served(&read_all(&log), &expected, "intact batches");
    let again = &log.recovery_report().damaged;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].kind, DamageKind::Gap);
    assert_eq!((again[0].first_offset, again[0].end_offset), (seg[1].0, base_of(&files[2])));
}

#[test]
fn deleted_older_segment_file_is_reported_and_the_rest_is_served() {
    let storage = SimStorage::new();
    let (acked, files) = acknowledged_log(&storage);
    storage.remove(&files[2]).unwrap();

    let log = open(&storage);
    let (first, end) = (base_of(&files[2]), base_of(&files[3]));
    let expected: Vec<_> = acked.iter().filter(|(o, _)| *o < first || *o >= end).cloned().collect();
    assert_served(&read_all(&log), &expected, "intact batches");
    let report = log.recovery_report();
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    let d = &report.damaged[0];
    assert_eq!(
        (d.kind, d.file.clone(), d.first_offset, d.end_offset),
        (DamageKind::MissingSegment, files[2].clone(), first, end)
    );
    let slice = log.read(first + 1, 1 << 20).unwrap();
    assert_eq!(split(&slice.records)[0].0, end, "a fetch in the gap moves on to the next batch held");
}

#[test]
fn segment_deleted_with_its_indexes_leaves_a_gap_that_is_reported() {
    let storage = SimStorage::new();
    let (_, files) = acknowledged_log(&storage);
    for ext in ["log", "index", "timeindex", "txnindex"] {
        let _ = storage.remove(&files[3].with_extension(ext));
    }
    let log = open(&storage);
    let report = log.recovery_report();
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    let d = &report.damaged[0];
    assert_eq!((d.kind, d.first_offset, d.end_offset), (DamageKind::Gap, base_of(&files[3]), base_of(&files[4])));
}

#[test]
fn healthy_logs_report_nothing_after_a_crash_or_a_clean_close() {
    let storage = SimStorage::new();
    acknowledged_log(&storage);
    let log = open(&storage);
    assert_eq!(log.recovery_report().damaged, vec![]);
    log.close().unwrap();
    drop(log);
    assert_eq!(open(&storage).recovery_report().damaged, vec![]);
}

#[test]
fn scrubber_finds_a_flipped_byte_in_a_sealed_segment() {
    let storage = SimStorage::new();
    let (acked, files) = acknowledged_log(&storage);
    let seg = in_segment(&acked, &files, 2);
    let mut bytes = storage.contents(&files[2]).unwrap();
    let third_batch_at = seg[0].1.len() + seg[1].1.len();
    bytes[third_batch_at + 200] ^= 0x01;
    storage.put(&files[2], bytes);

    // Open trusts sealed segments' indexes and does not see it.
    let log = open(&storage);
    assert_eq!(log.recovery_report().damaged, vec![]);

    let mut cursor = ScrubCursor::default();
    let mut findings = Vec::new();
    let mut bytes_verified = 0;
    let largest_batch = acked.iter().map(|(_, b)| b.len() as u64).max().unwrap();
    loop {
        let step = log.scrub(&mut cursor, 1000).unwrap();
        assert!(step.bytes < 1000 + largest_batch, "a step reads its budget and at most one batch more");
        bytes_verified += step.bytes;
        findings.extend(step.findings);
        if step.pass_done {
            break;
        }
    }
    let sealed_bytes: u64 = files[..files.len() - 1].iter().map(|f| storage.contents(f).unwrap().len() as u64).sum();
    assert_eq!(bytes_verified, sealed_bytes, "one pass verifies every sealed byte once");
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].file, files[2]);
    assert_eq!(findings[0].position, third_batch_at as u64);
    assert_eq!(findings[0].batch_base_offset, Some(seg[2].0));
    assert!(findings[0].reason.contains("crc mismatch"), "{}", findings[0].reason);
    // The next pass starts over.
    assert_eq!(log.scrub(&mut cursor, 1000).unwrap().findings, vec![]);
}

#[test]
fn deleted_first_segment_is_reported_and_the_log_starts_after_it() {
    let storage = SimStorage::new();
    let (acked, files) = acknowledged_log(&storage);
    storage.remove(&files[0]).unwrap();
    let log = open(&storage);
    let first_kept = base_of(&files[1]);
    let report = log.recovery_report();
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    let d = &report.damaged[0];
    assert_eq!((d.kind, d.first_offset, d.end_offset), (DamageKind::MissingSegment, 0, first_kept));
    assert_eq!(log.log_start_offset(), first_kept);
    let expected: Vec<_> = acked.iter().filter(|(o, _)| *o >= first_kept).cloned().collect();
    assert_served(&read_all(&log), &expected, "every later segment");
}

#[test]
fn segment_overlapping_its_predecessor_is_set_aside_and_later_segments_kept() {
    let storage = SimStorage::new();
    let (acked, files) = acknowledged_log(&storage);
    // A stray copy of segment 2 under a base offset inside segment 1.
    let stray_base = base_of(&files[2]) - 1;
    let stray = Path::new(DIR).join(format!("{stray_base:020}.log"));
    storage.put(&stray, storage.contents(&files[2]).unwrap());

    let log = open(&storage);
    assert_served(&read_all(&log), &acked, "every acknowledged batch");
    let report = log.recovery_report();
    assert_eq!(report.damaged.len(), 1, "{report:?}");
    let d = &report.damaged[0];
    assert_eq!((d.kind, d.file.clone()), (DamageKind::Overlapping, stray.clone()));
    // It held nothing beyond segment 1 that segment 2 does not hold: no offset is lost.
    assert_eq!((d.first_offset, d.end_offset), (base_of(&files[2]), base_of(&files[2])));
    assert!(!storage.exists(&stray));
    assert!(storage.exists(d.quarantined.as_ref().unwrap()), "the stray file is renamed aside, not deleted");
}

#[test]
fn scrubber_reports_nothing_for_a_segment_truncated_and_rewritten_under_it() {
    let storage = SimStorage::new();
    let (acked, _) = acknowledged_log(&storage);
    let log = open(&storage);
    let mut cursor = ScrubCursor::default();
    let first = log.scrub(&mut cursor, 1).unwrap();
    assert!(first.bytes > 0 && first.findings.is_empty() && !first.pass_done);
    // Cut inside the segment being scrubbed and write batches of another size there, so
    // the scrubber's next position falls inside a new batch.
    log.truncate_to(acked[2].0).unwrap();
    for i in 0..30 {
        let info = log.append(&batch(100 + i, 1, 333), 0, 0).unwrap();
        log.wait_for_ack(&info).unwrap();
    }
    loop {
        let step = log.scrub(&mut cursor, 1000).unwrap();
        assert_eq!(step.findings, vec![], "bytes rewritten by a truncation are not corruption");
        if step.pass_done {
            break;
        }
    }
}
