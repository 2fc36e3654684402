//! Crash at every step of the log's file-system work: the simulated disk keeps an image
//! of what a power loss would leave just before each fsync and each creation, rename or
//! deletion of a file (names are durable only once their directory is fsynced), and each
//! image is recovered and checked. No acknowledged (durable-reported) record may be
//! lost, and nothing may be half-visible: the log is always a prefix of what was
//! appended, checkpoints hold their old or their new value, and recovery reports no
//! damage (a crash is not damage).

mod common;

use common::{batch, read_all, stamped};
use osprey_storage::{delete, shutdown, CrashMode, LogConfig, PartitionLog, PriorShutdown, SimStorage, Storage};
use std::path::Path;

const DIR: &str = "/data/topic-0";

/// Three 500-byte batches fill a segment, so a few appends roll several times.
fn small_segments() -> LogConfig {
    LogConfig { segment_bytes: 1600, index_interval_bytes: 256, ..LogConfig::default() }
}

fn open(storage: &SimStorage) -> PartitionLog<SimStorage> {
    PartitionLog::open(storage.clone(), DIR, small_segments(), 0).unwrap()
}

/// An appended record and the number of crash images taken before it was reported
/// durable: every image from that one on must hold it.
struct Acked {
    offset: i64,
    bytes: Vec<u8>,
    from_point: usize,
}

/// Opens `image` and checks that it holds every record of `acked` due at crash point
/// `point`, that the log is a prefix of `appended` (whole batches, no gap, no garbage),
/// and that recovery reported no damage.
fn check_image(image: &SimStorage, point: usize, appended: &[(i64, Vec<u8>)], acked: &[Acked]) -> Vec<(i64, Vec<u8>)> {
    let log = open(image);
    let report = log.recovery_report();
    assert!(report.damaged.is_empty(), "crash point {point}: a crash reported as damage: {report:?}");
    let all = read_all(&log);
    assert!(all.len() <= appended.len(), "crash point {point}: records nobody appended");
    assert_eq!(all, appended[..all.len()], "crash point {point}: not a prefix of the appended records");
    for a in acked.iter().filter(|a| a.from_point <= point) {
        let found = all.iter().find(|(offset, _)| *offset == a.offset);
        assert_eq!(found.map(|(_, b)| b), Some(&a.bytes), "crash point {point}: acknowledged offset {} lost", a.offset);
    }
    all
}

/// Appends `count` 500-byte batches from `first_seed`, each waited for (an acknowledgement
/// under fsync-before-ack), noting them in `appended` and `acked`.
fn append_acked(
    log: &PartitionLog<SimStorage>,
    storage: &SimStorage,
    seeds: std::ops::Range<u64>,
    appended: &mut Vec<(i64, Vec<u8>)>,
    acked: &mut Vec<Acked>,
) {
    for seed in seeds {
        let info = log.append(&batch(seed, 1, 500), 0, 0).unwrap();
        let bytes = stamped(batch(seed, 1, 500), info.base_offset, 0);
        appended.push((info.base_offset, bytes.clone()));
        log.wait_durable(info.last_offset).unwrap();
        acked.push(Acked { offset: info.base_offset, bytes, from_point: storage.crash_point_count() });
    }
}

#[test]
fn a_crash_at_any_step_of_segment_rolls_keeps_every_acknowledged_record() {
    let storage = SimStorage::new();
    let log = open(&storage);
    storage.record_crash_points();
    let (mut appended, mut acked) = (Vec::new(), Vec::new());
    append_acked(&log, &storage, 0..10, &mut appended, &mut acked);
    assert!(log.segment_count() >= 3, "the test must cross several rolls");
    let mut images = storage.crash_points();
    images.push(storage.crash(CrashMode::LoseUnsynced));
    assert!(images.len() > 20, "a roll is many steps; only {} crash points", images.len());
    for (point, image) in images.iter().enumerate() {
        check_image(image, point, &appended, &acked);
    }
    // The last image holds everything: each append was acknowledged.
    let last = images.len() - 1;
    assert_eq!(check_image(&images[last], last, &appended, &acked).len(), appended.len());
}

#[test]
fn a_torn_crash_after_a_roll_keeps_every_acknowledged_record() {
    for seed in 1..80u64 {
        let storage = SimStorage::new();
        let log = open(&storage);
        let (mut appended, mut acked) = (Vec::new(), Vec::new());
        append_acked(&log, &storage, 0..7, &mut appended, &mut acked);
        // Unacknowledged appends after the last roll: their bytes and names may tear.
        for s in 7..9u64 {
            let info = log.append(&batch(s, 1, 500), 0, 0).unwrap();
            appended.push((info.base_offset, stamped(batch(s, 1, 500), info.base_offset, 0)));
        }
        let mode = if seed % 2 == 0 { CrashMode::TearAndGarble { seed } } else { CrashMode::TearUnsynced { seed } };
        let all = check_image(&storage.crash(mode), usize::MAX, &appended, &acked);
        assert!(all.len() >= acked.len(), "seed {seed}");
    }
}

#[test]
fn a_crash_at_any_step_of_a_log_start_checkpoint_replace_shows_the_old_or_the_new_value() {
    let storage = SimStorage::new();
    let log = open(&storage);
    let (mut appended, mut acked) = (Vec::new(), Vec::new());
    append_acked(&log, &storage, 0..6, &mut appended, &mut acked);
    log.update_high_watermark(6).unwrap();
    storage.record_crash_points();
    assert_eq!(log.delete_records_before(4).unwrap(), 4);
    let done_at = storage.crash_point_count();
    let mut images = storage.crash_points();
    images.push(storage.crash(CrashMode::LoseUnsynced));
    for (point, image) in images.iter().enumerate() {
        let log = open(image);
        let start = log.log_start_offset();
        if point >= done_at {
            assert_eq!(start, 4, "crash point {point}: DeleteRecords was answered, its start offset lost");
        } else {
            assert!(start == 0 || start == 4, "crash point {point}: log start {start}, neither old nor new");
        }
        assert_eq!(read_all(&log), appended[start as usize..], "crash point {point}");
    }
}

#[test]
fn a_crash_at_any_step_of_a_leader_epoch_change_keeps_the_epoch_of_every_record() {
    let storage = SimStorage::new();
    let log = open(&storage);
    storage.record_crash_points();
    let mut acked_at = Vec::new();
    for (seed, epoch) in [(0u64, 1), (1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 3)] {
        let info = log.append(&batch(seed, 1, 500), epoch, 0).unwrap();
        log.wait_durable(info.last_offset).unwrap();
        acked_at.push((info.base_offset, epoch, storage.crash_point_count()));
    }
    let mut images = storage.crash_points();
    images.push(storage.crash(CrashMode::LoseUnsynced));
    for (point, image) in images.iter().enumerate() {
        let log = open(image);
        for &(offset, epoch, _) in acked_at.iter().filter(|a| a.2 <= point) {
            assert!(offset < log.log_end_offset(), "crash point {point}: offset {offset} lost");
            // OffsetForLeaderEpoch must see the epoch of each durable record.
            let (found, end) = log.end_offset_for_epoch(epoch);
            assert_eq!(found, epoch, "crash point {point}: epoch {epoch} of offset {offset} forgotten");
            assert!(end > offset, "crash point {point}: epoch {epoch} ends at {end}, before {offset}");
        }
    }
}

#[test]
fn a_crash_at_any_step_of_retention_leaves_whole_segments_and_a_durable_log_start() {
    let storage = SimStorage::new();
    let log = open(&storage);
    let (mut appended, mut acked) = (Vec::new(), Vec::new());
    append_acked(&log, &storage, 0..10, &mut appended, &mut acked);
    log.update_high_watermark(10).unwrap();
    log.delete_records_before(7).unwrap();
    storage.record_crash_points();
    let outcome = log.retention_pass(0).unwrap();
    assert!(outcome.deleted_segments >= 2, "{outcome:?}");
    let done_at = storage.crash_point_count();
    let segments_left = log.segment_count();
    let mut images = storage.crash_points();
    images.push(storage.crash(CrashMode::LoseUnsynced));
    for (point, image) in images.iter().enumerate() {
        let log = open(image);
        assert!(log.recovery_report().damaged.is_empty(), "crash point {point}: {:?}", log.recovery_report());
        assert_eq!(log.log_start_offset(), 7, "crash point {point}");
        assert_eq!(read_all(&log), appended[7..], "crash point {point}");
        if point >= done_at {
            assert_eq!(log.segment_count(), segments_left, "crash point {point}: deleted segments back");
        }
    }
}

#[test]
fn a_crash_at_any_step_of_a_clean_close_reopens_with_every_record() {
    let storage = SimStorage::new();
    let log = open(&storage);
    let (mut appended, mut acked) = (Vec::new(), Vec::new());
    append_acked(&log, &storage, 0..5, &mut appended, &mut acked);
    storage.record_crash_points();
    log.close().unwrap();
    let after_close = storage.crash(CrashMode::LoseUnsynced);
    assert!(open(&after_close).opened_clean(), "the clean-shutdown marker must be durable when close returns");
    let mut images = storage.crash_points();
    images.push(storage.crash(CrashMode::LoseUnsynced));
    for (point, image) in images.iter().enumerate() {
        let all = check_image(image, point, &appended, &acked);
        assert_eq!(all.len(), appended.len(), "crash point {point}");
    }
}

/// Opens the log as the broker does: the data directory's marker taken first.
fn open_as_broker(storage: &SimStorage) -> PartitionLog<SimStorage> {
    let prior = match shutdown::take(storage, Path::new(DATA_DIR)).unwrap() {
        Some(_) => PriorShutdown::Clean,
        None => PriorShutdown::SeeLogMarker,
    };
    PartitionLog::open_after(storage.clone(), DIR, small_segments(), 0, prior).unwrap()
}

const DATA_DIR: &str = "/data";

#[test]
fn a_crash_at_any_step_of_a_data_directory_shutdown_reopens_with_every_record() {
    let storage = SimStorage::new();
    let log = open(&storage);
    let (mut appended, mut acked) = (Vec::new(), Vec::new());
    append_acked(&log, &storage, 0..5, &mut appended, &mut acked);
    storage.record_crash_points();
    log.close_unmarked().unwrap();
    let closed = storage.crash(CrashMode::LoseUnsynced);
    assert!(!open_as_broker(&closed).opened_clean(), "no marker yet: recovered");
    shutdown::write(&storage, Path::new(DATA_DIR), Some(7)).unwrap();
    let marked = storage.crash(CrashMode::LoseUnsynced);
    let mut images = storage.crash_points();
    images.push(storage.crash(CrashMode::LoseUnsynced));
    for (point, image) in images.iter().enumerate() {
        let all = read_all(&open_as_broker(image));
        assert_eq!(all, appended, "crash point {point}");
    }
    let reopened = open_as_broker(&marked);
    assert!(reopened.opened_clean(), "the data directory's marker must be durable when write returns");
    assert_eq!(read_all(&reopened), appended);
    // Taken durably at start-up: a crash after it is unclean.
    let crashed = marked.crash(CrashMode::LoseUnsynced);
    assert!(!open_as_broker(&crashed).opened_clean(), "a crash after start-up must be recovered");
}

#[test]
fn a_roll_on_the_append_path_does_no_fsync_and_the_ack_waits_for_the_seal() {
    let storage = SimStorage::new();
    let log = open(&storage);
    let (mut appended, mut acked) = (Vec::new(), Vec::new());
    // The first roll of a new log seals inline: it has no recovery point yet.
    append_acked(&log, &storage, 0..4, &mut appended, &mut acked);
    assert!(log.segment_count() >= 2);
    let mut rolls = 0;
    for seed in 4..12u64 {
        let segments = log.segment_count();
        let before = storage.sync_count();
        let info = log.append(&batch(seed, 1, 500), 0, 0).unwrap();
        assert_eq!(storage.sync_count(), before, "append of {seed} fsynced");
        rolls += log.segment_count() - segments;
        appended.push((info.base_offset, stamped(batch(seed, 1, 500), info.base_offset, 0)));
        // The acknowledgement: the seal of the old segment and the new one's name are
        // durable when it returns.
        log.wait_durable(info.last_offset).unwrap();
        let after_ack = storage.crash(CrashMode::LoseUnsynced);
        let acked_now: Vec<Acked> = appended
            .iter()
            .map(|(offset, bytes)| Acked { offset: *offset, bytes: bytes.clone(), from_point: 0 })
            .collect();
        check_image(&after_ack, seed as usize, &appended, &acked_now);
    }
    assert!(rolls >= 2, "the test must roll on the append path");
}

#[test]
fn a_torn_crash_before_a_deferred_seal_ends_the_log_at_the_tear_without_reporting_damage() {
    for seed in 1..120u64 {
        let storage = SimStorage::new();
        let log = open(&storage);
        let (mut appended, mut acked) = (Vec::new(), Vec::new());
        append_acked(&log, &storage, 0..4, &mut appended, &mut acked);
        // Unacknowledged appends across deferred rolls: the old segment's tail and the
        // new segments are neither fsynced nor sealed.
        for s in 4..11u64 {
            let info = log.append(&batch(s, 1, 500), 0, 0).unwrap();
            appended.push((info.base_offset, stamped(batch(s, 1, 500), info.base_offset, 0)));
        }
        let mode = if seed % 2 == 0 { CrashMode::TearAndGarble { seed } } else { CrashMode::TearUnsynced { seed } };
        let image = storage.crash(mode);
        let all = check_image(&image, usize::MAX, &appended, &acked);
        assert!(all.len() >= acked.len(), "seed {seed}");
        // Recovered once, the log reopens as it is (the scanned segments were sealed).
        drop(all);
        let again = check_image(&image.crash(CrashMode::LoseUnsynced), usize::MAX, &appended, &acked);
        assert!(again.len() >= acked.len(), "seed {seed}");
    }
}

/// The two partitions of the topic a test deletes, and one of a topic it keeps.
const DELETED: [&str; 2] = ["/data/orders-0", "/data/orders-1"];
const KEPT: &str = "/data/kept-0";

/// A data directory holding [`DELETED`] and [`KEPT`], a few acknowledged batches each
/// (enough to roll), the logs dropped as the broker drops a deleted partition's. Returns
/// every partition's records, in the order of `DELETED` then `KEPT`.
fn data_dir_with_a_topic_to_delete(storage: &SimStorage) -> Vec<Vec<(i64, Vec<u8>)>> {
    let mut records = Vec::new();
    for (i, dir) in DELETED.iter().chain([&KEPT]).enumerate() {
        let log = PartitionLog::open(storage.clone(), *dir, small_segments(), 0).unwrap();
        let (mut appended, mut acked) = (Vec::new(), Vec::new());
        let first = 100 * i as u64;
        append_acked(&log, storage, first..first + 5, &mut appended, &mut acked);
        assert!(log.segment_count() >= 2);
        records.push(appended);
    }
    storage.sync_dir(Path::new(DATA_DIR)).unwrap();
    records
}

/// The broker's delete of a topic: its directories renamed for deletion (durable), then
/// removed.
fn delete_topic(storage: &SimStorage) {
    let dirs: Vec<_> = DELETED.iter().map(std::path::PathBuf::from).collect();
    let mut ids = (0..).map(|n: u32| format!("{n:032x}"));
    let renamed = delete::rename_for_delete(storage, Path::new(DATA_DIR), &dirs, &mut || ids.next().unwrap()).unwrap();
    assert_eq!(renamed.len(), DELETED.len());
    for dir in renamed {
        delete::remove(storage, &dir).unwrap();
    }
}

/// The broker's first step at start-up: directories an interrupted delete left are
/// removed, never loaded.
fn remove_pending_deletes(storage: &SimStorage) {
    for dir in delete::pending(storage, Path::new(DATA_DIR)).unwrap() {
        delete::remove(storage, &dir).unwrap();
    }
}

/// After start-up on `image`: no directory of a delete is left; each deleted partition is
/// gone or whole (opens without damage, with every record); the kept topic is whole.
/// Returns how many of the deleted partitions are present.
fn check_after_delete(image: &SimStorage, what: &str, records: &[Vec<(i64, Vec<u8>)>]) -> usize {
    remove_pending_deletes(image);
    let names = image.list(Path::new(DATA_DIR)).unwrap();
    assert!(!names.iter().any(|n| delete::is_delete_dir(n)), "{what}: a delete directory survived start-up: {names:?}");
    let mut present = 0;
    for (dir, appended) in DELETED.iter().chain([&KEPT]).zip(records) {
        if !image.exists(Path::new(dir)) {
            assert_ne!(*dir, KEPT, "{what}: the kept topic is gone");
            continue;
        }
        present += usize::from(*dir != KEPT);
        let log = PartitionLog::open(image.clone(), *dir, small_segments(), 0).unwrap();
        let report = log.recovery_report();
        assert!(report.damaged.is_empty(), "{what}: {dir} loaded half: {report:?}");
        assert_eq!(read_all(&log), *appended, "{dir} loaded half ({what})");
    }
    present
}

#[test]
fn a_crash_at_any_step_of_a_topic_delete_leaves_the_topic_whole_or_gone() {
    let storage = SimStorage::new();
    let records = data_dir_with_a_topic_to_delete(&storage);
    storage.record_crash_points();
    delete_topic(&storage);
    let mut images = storage.crash_points();
    images.push(storage.crash(CrashMode::LoseUnsynced));
    let mut whole = 0;
    for (point, image) in images.iter().enumerate() {
        // One directory fsync makes every rename durable at once: all or nothing.
        match check_after_delete(image, &format!("crash point {point}"), &records) {
            0 => {}
            n if n == DELETED.len() => whole += 1,
            n => panic!("crash point {point}: {n} of the topic's partitions left"),
        }
    }
    assert!(whole > 0, "no crash point before the delete became durable");
    let last = images.last().unwrap();
    assert_eq!(check_after_delete(last, "after the delete", &records), 0, "the delete is durable when it returns");
}

#[test]
fn a_torn_crash_during_a_topic_delete_leaves_each_partition_whole_or_gone() {
    for seed in 1..80u64 {
        let storage = SimStorage::new();
        let records = data_dir_with_a_topic_to_delete(&storage);
        delete_topic(&storage);
        // The removal's unlinks are not fsynced: a seed-chosen prefix of them survives.
        let mode = if seed % 2 == 0 { CrashMode::TearAndGarble { seed } } else { CrashMode::TearUnsynced { seed } };
        assert_eq!(check_after_delete(&storage.crash(mode), &format!("seed {seed}"), &records), 0);
    }
}

#[test]
fn a_crash_at_any_step_of_removing_a_left_delete_directory_at_start_up_loads_nothing_of_it() {
    let storage = SimStorage::new();
    let records = data_dir_with_a_topic_to_delete(&storage);
    let dirs: Vec<_> = DELETED.iter().map(std::path::PathBuf::from).collect();
    let mut ids = (0..).map(|n: u32| format!("{n:032x}"));
    delete::rename_for_delete(&storage, Path::new(DATA_DIR), &dirs, &mut || ids.next().unwrap()).unwrap();
    // The process died here; start-up removes what the delete left, and crashes too.
    let restarted = storage.crash(CrashMode::LoseUnsynced);
    restarted.record_crash_points();
    remove_pending_deletes(&restarted);
    let mut images = restarted.crash_points();
    assert!(images.len() > 10, "only {} crash points", images.len());
    images.push(restarted.crash(CrashMode::LoseUnsynced));
    for (point, image) in images.iter().enumerate() {
        assert_eq!(check_after_delete(image, &format!("start-up crash point {point}"), &records), 0);
    }
}
