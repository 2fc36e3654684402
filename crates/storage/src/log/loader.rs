//! Loading a partition log from its directory (Kafka's `LogLoader`): the clean-shutdown
//! marker, leftovers of interrupted deletions and compaction swaps, the segments (the
//! last one, and those past the recovery point, scanned and cut after their last valid
//! batch; damage in sealed ones kept aside and reported, see [`crate::recovery`]), the
//! checkpoints, the leader-epoch cache and the producer state.

use super::*;

impl<S: Storage> PartitionLog<S> {
    /// Opens (creating if needed) the partition log in `dir`. Without a clean-shutdown
    /// marker the last segment is scanned, CRC-checked and truncated after its last valid
    /// batch, and its indexes rebuilt. `now_ms` starts the `segment.ms` clock.
    ///
    /// The marker looked for is the log's own, written by [`close`](Self::close); a
    /// broker that records clean shutdowns per data directory uses
    /// [`open_after`](Self::open_after) instead.
    pub fn open(storage: S, dir: impl Into<PathBuf>, config: LogConfig, now_ms: i64) -> Result<Self> {
        Self::open_after(storage, dir, config, now_ms, PriorShutdown::SeeLogMarker)
    }

    /// [`open`](Self::open), told by the caller how the log was last shut down: after
    /// [`PriorShutdown::Clean`] (the data directory's marker, see [`crate::shutdown`]) the
    /// recovery scan is skipped whatever the log's directory holds. A log's own marker
    /// (left by [`close`](Self::close), or by a version that wrote one per log) counts as
    /// clean in both cases, and is removed.
    pub fn open_after(
        storage: S,
        dir: impl Into<PathBuf>,
        config: LogConfig,
        now_ms: i64,
        prior: PriorShutdown,
    ) -> Result<Self> {
        let dir = dir.into();
        storage.create_dir_all(&dir).map_err(|e| StorageError::io("create dir", &dir, e))?;
        let names = storage.list(&dir).map_err(|e| StorageError::io("list", &dir, e))?;
        let own_marker = names.iter().any(|n| n == CLEAN_SHUTDOWN_FILE);
        let clean = own_marker || prior == PriorShutdown::Clean;
        if own_marker {
            // Removed (durably) before anything can change the log, so a crash from here
            // on is seen as unclean.
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            storage.remove(&marker).map_err(|e| StorageError::io("remove", &marker, e))?;
            storage.sync_dir(&dir).map_err(|e| StorageError::io("fsync dir", &dir, e))?;
        }
        for name in names.iter().filter(|n| n.ends_with(DELETED_SUFFIX) || n.ends_with(".tmp")) {
            let path = dir.join(name);
            storage.remove(&path).map_err(|e| StorageError::io("remove", &path, e))?;
        }
        cleaner::recover_swaps(&storage, &dir, &names)?;
        let names = storage.list(&dir).map_err(|e| StorageError::io("list", &dir, e))?;
        let mut bases: Vec<i64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
        bases.sort_unstable();

        let mut damaged = Vec::new();
        let recovery_point = checkpoint::read_i64(&storage, &dir, RECOVERY_POINT_CHECKPOINT);
        let (segments, first_unsealed) =
            open_segments(&storage, &dir, &bases, clean, recovery_point, &config, &mut damaged)?;
        if clean {
            tracing::debug!(dir = %dir.display(), "clean shutdown marker found; recovery skipped");
        } else if !bases.is_empty() {
            tracing::info!(dir = %dir.display(), "no clean shutdown marker; the last segment was scanned and recovered");
        }
        let extents: Vec<recovery::Extent> = segments
            .iter()
            .map(|seg| recovery::Extent {
                base_offset: seg.base_offset,
                next_offset: seg.next_offset,
                loss_reported: damaged.iter().any(|d| d.first_offset == seg.next_offset),
            })
            .collect();
        damaged.extend(recovery::missing_ranges(
            &dir,
            &extents,
            &orphan_index_bases(&names, &bases),
            checkpoint::read_i64(&storage, &dir, LOG_START_OFFSET_CHECKPOINT),
            checkpoint::read_i64(&storage, &dir, HIGH_WATERMARK_CHECKPOINT),
            config.cleanup_policy.compact,
        ));
        damaged.sort_by_key(|d| d.first_offset);
        for range in &damaged {
            range.log(&dir);
        }
        let mut state = LogState {
            segments,
            log_start_offset: 0,
            high_watermark: 0,
            epochs: LeaderEpochCache::default(),
            producers: ProducerStateTable::default(),
            open_sealed: VecDeque::new(),
            active_since_ms: now_ms,
            first_dirty_offset: 0,
            appended_records: 0,
            flushed_records: 0,
            oldest_unflushed_ms: None,
            generation: 0,
            offline: None,
            hw_checkpointed: None,
            producers_snapshotted: None,
            unsealed: Vec::new(),
            pending_snapshot: None,
            recovery_point: None,
            failed_writes: std::collections::HashMap::new(),
        };
        if state.segments.is_empty() {
            let start = checkpoint::read_i64(&storage, &dir, LOG_START_OFFSET_CHECKPOINT).unwrap_or(0).max(0);
            state.segments.push(Segment::create(&storage, &dir, start)?);
            storage.sync_dir(&dir).map_err(|e| StorageError::io("fsync dir", &dir, e))?;
        }
        let first_base = state.segments[0].base_offset;
        let leo = state.log_end_offset();
        let start = checkpoint::read_i64(&storage, &dir, LOG_START_OFFSET_CHECKPOINT).unwrap_or(first_base);
        state.log_start_offset = start.clamp(first_base, leo);
        let hw_checkpoint = checkpoint::read_i64(&storage, &dir, HIGH_WATERMARK_CHECKPOINT);
        state.high_watermark = hw_checkpoint.unwrap_or(0).clamp(state.log_start_offset, leo);
        // What the next open would compute from the file as it is (none reads as 0).
        state.hw_checkpointed = Some(hw_checkpoint.unwrap_or(0)).filter(|&hw| hw == state.high_watermark);
        let first_dirty = checkpoint::read_i64(&storage, &dir, CLEANER_OFFSET_CHECKPOINT).unwrap_or(0);
        state.first_dirty_offset = first_dirty.clamp(state.log_start_offset, leo);
        state.epochs = load_epochs(&storage, &dir, &state)?;
        // After a crash the active segment's aborted index is rebuilt by the producer
        // state scan, which must then start no later than that segment.
        let replay_from = match (clean, first_unsealed) {
            (true, _) => leo,
            (false, Some(base)) => base,
            (false, None) => state.active().base_offset,
        };
        state.recovery_point = recovery_point;
        if first_unsealed.is_some() {
            // The segments rolled but not sealed before the crash are sealed now.
            let active = state.active().base_offset;
            checkpoint::write(&storage, &dir, RECOVERY_POINT_CHECKPOINT, &[active.to_string()])?;
            state.recovery_point = Some(active);
        }
        let (producers, aborted, snapshot) = load_producers(&storage, &dir, &state, replay_from)?;
        state.producers = producers;
        // An empty log's empty table needs no snapshot: the next open finds the same.
        let no_batches = state.segments.iter().all(|seg| seg.size == 0);
        state.producers_snapshotted =
            snapshot.filter(|&offset| offset == leo).or((snapshot.is_none() && no_batches).then_some(leo));
        insert_aborted(&mut state, aborted);
        if let Some(ts) = state.active().first_batch_timestamp {
            state.active_since_ms = ts.min(now_ms);
        }
        // Whatever recovery kept may still sit only in the page cache (the previous
        // process could have died after writing it): make it durable before treating it
        // as such. After a clean shutdown the close fsynced it before the marker.
        if !clean {
            let active = state.active();
            active.handle()?.sync_data().map_err(|e| StorageError::io("fsync", &active.path, e))?;
        }
        let durability = DurableState {
            durable_end: leo,
            synced_end: leo,
            rolls_taken: 0,
            rolls_sealed: 0,
            flushing: false,
            generation: 0,
            waiters: Vec::new(),
            offline: None,
        };
        Ok(PartitionLog {
            dir,
            storage,
            config: std::sync::RwLock::new(config),
            state: Mutex::new(state),
            durability: Mutex::new(durability),
            durable_changed: Condvar::new(),
            fsyncs: FsyncCounters::default(),
            queued_on_flusher: AtomicBool::new(false),
            cleaning: Mutex::new(()),
            sealing: Mutex::new(()),
            opened_clean: clean || bases.is_empty(),
            recovery: RecoveryReport { damaged },
            journal: std::sync::OnceLock::new(),
            journal_stalled: AtomicBool::new(false),
        })
    }
}

/// `00000000000000000042.log` → 42.
fn parse_segment_name(name: &str) -> Option<i64> {
    parse_offset_name(name, ".log")
}

/// `<20 digits><suffix>` → the offset.
fn parse_offset_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// The segments opened, and the base offset of the first recovered as unsealed.
type OpenedSegments<F> = (Vec<Segment<F>>, Option<i64>);

/// Opens segments oldest first. The last one is recovered (CRC scan) unless the shutdown
/// was clean; older ones up to the recovery point were sealed with their indexes. A
/// damaged sealed segment is cut after its last valid batch (its tail copied aside) and
/// a segment overlapping its predecessor is renamed aside; the segments after either are
/// kept, since they hold acknowledged, durable data (see [`crate::recovery`]). The
/// losses are added to `damaged`.
///
/// Segments past the recovery point were rolled on the append path and the crash may
/// have come before their seal: they are scanned like the last one and sealed now, and
/// a torn one ends the log (what follows it was never acknowledged, since an
/// acknowledgement waits for the seal). Returns the segments and the base offset of the
/// first one recovered that way.
fn open_segments<S: Storage>(
    storage: &S,
    dir: &Path,
    bases: &[i64],
    clean: bool,
    recovery_point: Option<i64>,
    config: &LogConfig,
    damaged: &mut Vec<DamagedRange>,
) -> Result<OpenedSegments<S::File>> {
    let mut segments: Vec<Segment<S::File>> = Vec::new();
    let mut first_unsealed = None;
    for (i, &base) in bases.iter().enumerate() {
        let sealed = i + 1 < bases.len();
        if let Some(prev) = segments.last().filter(|prev| prev.next_offset > base) {
            let next_base = bases.get(i + 1).copied();
            damaged.push(set_aside_overlapping(storage, dir, base, prev.next_offset, next_base)?);
            continue;
        }
        let unsealed = sealed && !clean && recovery_point.is_some_and(|point| bases[i + 1] > point);
        if unsealed {
            first_unsealed.get_or_insert(base);
            let (mut seg, cut) = Segment::open(storage, dir, base, false, false, config.index_interval_bytes)?;
            if cut.is_some() {
                for &later in &bases[i + 1..] {
                    Segment::<S::File>::delete_files(storage, dir, later)?;
                }
                storage.sync_dir(dir).map_err(|e| StorageError::io("fsync dir", dir, e))?;
                tracing::info!(dir = %dir.display(), segment = base, "an unsealed segment was torn by the crash; the log ends there");
                segments.push(seg);
                break;
            }
            seg.persist_indexes(storage, dir)?;
            segments.push(seg);
            continue;
        }
        let (seg, cut) = Segment::open(storage, dir, base, clean || sealed, sealed, config.index_interval_bytes)?;
        if let Some(cut) = cut.filter(|_| sealed) {
            damaged.push(DamagedRange {
                kind: DamageKind::CutShort,
                file: seg.path.clone(),
                first_offset: seg.next_offset,
                end_offset: bases[i + 1].max(seg.next_offset),
                bytes: cut.bytes,
                quarantined: cut.quarantined,
            });
        }
        segments.push(seg);
    }
    // Sealed segments are reopened when read; only the active one keeps its file open.
    let sealed = segments.len().saturating_sub(1);
    for seg in &mut segments[..sealed] {
        seg.file = None;
    }
    Ok((segments, first_unsealed))
}

/// Renames a segment that starts below the end of the one before it to
/// `<name>.log.overlapping` (its index files, derived data, are deleted), so the log
/// stays a sequence of increasing offsets without destroying the bytes. What it held
/// beyond the previous segment's end, up to the next segment, is no longer served.
fn set_aside_overlapping<S: Storage>(
    storage: &S,
    dir: &Path,
    base: i64,
    prev_end: i64,
    next_base: Option<i64>,
) -> Result<DamagedRange> {
    let path = segment::log_path(dir, base);
    let len = storage.open(&path, false).and_then(|f| f.len()).map_err(|e| StorageError::io("open", &path, e))?;
    let to = PathBuf::from(format!("{}{}", path.display(), recovery::OVERLAPPING_SUFFIX));
    storage.rename(&path, &to).map_err(|e| StorageError::io("rename", &path, e))?;
    Segment::<S::File>::delete_files(storage, dir, base)?;
    storage.sync_dir(dir).map_err(|e| StorageError::io("fsync dir", dir, e))?;
    Ok(DamagedRange {
        kind: DamageKind::Overlapping,
        file: path,
        first_offset: prev_end,
        end_offset: next_base.map_or(prev_end, |next| next.max(prev_end)),
        bytes: len,
        quarantined: Some(to),
    })
}

/// Base offsets of segments whose index files are present but whose `.log` is not.
fn orphan_index_bases(names: &[String], bases: &[i64]) -> Vec<i64> {
    let mut orphans: Vec<i64> = names
        .iter()
        .filter_map(|n| {
            parse_offset_name(n, ".index")
                .or_else(|| parse_offset_name(n, ".timeindex"))
                .or_else(|| parse_offset_name(n, ".txnindex"))
        })
        .filter(|b| bases.binary_search(b).is_err())
        .collect();
    orphans.sort_unstable();
    orphans.dedup();
    orphans
}

/// The epoch checkpoint, cut to the recovered log; rebuilt from batch headers if missing.
fn load_epochs<S: Storage>(storage: &S, dir: &Path, state: &LogState<S::File>) -> Result<LeaderEpochCache> {
    let leo = state.log_end_offset();
    let parsed = checkpoint::read(storage, dir, LEADER_EPOCH_CHECKPOINT).map(|lines| {
        lines
            .iter()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
            })
            .collect::<Vec<(i32, i64)>>()
    });
    let mut cache = match parsed {
        Some(entries) => LeaderEpochCache::from_entries(entries),
        None => {
            let mut cache = LeaderEpochCache::default();
            for seg in &state.segments {
                let view = SegmentView::transient(seg, storage, 0)?;
                view.find(0, |h| {
                    cache.assign(h.partition_leader_epoch, h.base_offset);
                    false
                })?;
            }
            cache
        }
    };
    cache.truncate_from_end(leo);
    cache.truncate_from_start(state.log_start_offset);
    Ok(cache)
}

/// Offsets of the `<offset>.snapshot` files in `dir`.
pub(super) fn list_snapshots<S: Storage>(storage: &S, dir: &Path) -> Result<Vec<i64>> {
    let names = storage.list(dir).map_err(|e| StorageError::io("list", dir, e))?;
    Ok(names.iter().filter_map(|n| parse_offset_name(n, SNAPSHOT_SUFFIX)).collect())
}

pub(super) fn remove_snapshot<S: Storage>(storage: &S, dir: &Path, offset: i64) -> Result<()> {
    let path = dir.join(format!("{}{SNAPSHOT_SUFFIX}", segment::file_stem(offset)));
    storage.remove(&path).map_err(|e| StorageError::io("remove", &path, e))
}

/// Producer state as of the log end: the newest readable snapshot at or below it, then
/// the headers of the batches after it. Snapshots beyond the log end (the log was
/// truncated or lost its tail) are deleted; a torn one is skipped for an older one.
///
/// Snapshots above `replay_from` are not used (kept), so every marker from there on is
/// replayed; the aborts found are returned with their LSO for the caller to index (those
/// already indexed are skipped by [`insert_aborted`]).
pub(super) fn load_producers<S: Storage>(
    storage: &S,
    dir: &Path,
    state: &LogState<S::File>,
    replay_from: i64,
) -> Result<(ProducerStateTable, Vec<AbortedTxn>, Option<i64>)> {
    let leo = state.log_end_offset();
    let mut snapshots = list_snapshots(storage, dir)?;
    snapshots.sort_unstable();
    let mut table = None;
    let mut from = state.segments[0].base_offset;
    let mut snapshot = None;
    for &offset in snapshots.iter().rev() {
        if offset > leo {
            remove_snapshot(storage, dir, offset)?;
            continue;
        }
        if offset > replay_from {
            continue;
        }
        if offset < state.segments[0].base_offset {
            break;
        }
        let path = dir.join(format!("{}{SNAPSHOT_SUFFIX}", segment::file_stem(offset)));
        let parsed =
            read_bounded_file(storage, &path, MAX_SNAPSHOT_BYTES).and_then(|b| ProducerStateTable::from_snapshot(&b));
        match parsed {
            Some(t) => {
                table = Some(t);
                from = offset;
                snapshot = Some(offset);
                break;
            }
            None => {
                tracing::warn!(file = %path.display(), "unreadable producer snapshot; using an older one or the log")
            }
        }
    }
    let mut table = table.unwrap_or_default();
    let mut aborted = Vec::new();
    for seg in state.segments.iter().filter(|seg| seg.next_offset > from) {
        let view = SegmentView::transient(seg, storage, seg.index_lookup(from))?;
        let mut failed = None;
        let mut position = view.start_position;
        view.find(view.start_position, |h| {
            let at = position;
            position += h.total_size();
            if h.base_offset < from {
                return false;
            }
            // Only control batches are read beyond their header (markers are tiny).
            let mut body = Vec::new();
            if h.is_control() {
                body.resize(h.total_size() as usize, 0);
                if let Err(e) = view.file.read_exact_at(&mut body, at) {
                    failed = Some(StorageError::io("read", &view.path, e));
                    return true;
                }
            }
            aborted.extend(record_batch(&mut table, h, &body));
            false
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok((table, aborted, snapshot))
}

/// Applies one appended (or replayed) batch to the producer state; for an ABORT marker
/// returns the index entry, whose LSO is the state's right after the marker (Kafka's
/// `ProducerStateManager.lastStableOffset(completedTxn)`).
pub(super) fn record_batch(table: &mut ProducerStateTable, h: &BatchHeader, batch: &[u8]) -> Option<AbortedTxn> {
    if !h.is_control() {
        table.record(h);
        return None;
    }
    if h.producer_id < 0 {
        return None;
    }
    let marker = txn_index::marker_of(h, batch)?;
    let done = table.complete_txn(h, marker.commit, marker.coordinator_epoch);
    if done.commit {
        return None;
    }
    Some(AbortedTxn {
        producer_id: done.producer_id,
        first_offset: done.first_offset,
        last_offset: done.last_offset,
        last_stable_offset: table.first_unstable_offset().unwrap_or(done.last_offset + 1),
    })
}

/// Adds replayed aborts to the segments holding their markers (skipping those indexed).
pub(super) fn insert_aborted<F>(state: &mut LogState<F>, aborted: Vec<AbortedTxn>) {
    for a in aborted {
        let i = state.segments.partition_point(|seg| seg.base_offset <= a.last_offset).saturating_sub(1);
        txn_index::insert(&mut state.segments[i].aborted_txns, a);
    }
}

fn read_bounded_file<S: Storage>(storage: &S, path: &Path, max: u64) -> Option<Vec<u8>> {
    let file = storage.open(path, false).ok()?;
    let len = file.len().ok()?;
    if len > max {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0).ok()?;
    Some(buf)
}
