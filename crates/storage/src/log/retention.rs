//! Retention and compaction orchestration (the part of Kafka's `UnifiedLog` that deletes
//! old segments, and the driver of its `LogCleaner`): DeleteRecords, retention passes,
//! the background scrubber's steps and compaction passes, each planned under the log's
//! lock with the file work done outside it where it can be. The cleaning itself is in
//! [`crate::cleaner`], the CRC checks in [`crate::scrub`].

use super::*;

/// What a compaction pass reads, planned under the lock.
struct CleanPlan<F> {
    /// The cleanable sealed segments, from the log start.
    sources: Vec<SourceSegment<F>>,
    first_dirty: i64,
    /// End of the cleanable section (a segment boundary).
    end: i64,
    delete_horizon_ms: i64,
    /// Aborted transactions overlapping `[sources[0].base_offset, end)`, from every
    /// segment's `.txnindex` (a marker may lie beyond the cleanable section).
    aborted: Vec<AbortedTxn>,
    producer_last_batches: std::collections::HashMap<i64, crate::producer::LastBatch>,
    generation: u64,
    dirty_ratio: f64,
}

impl<S: Storage> PartitionLog<S> {
    /// DeleteRecords: moves the log start offset to `offset` (at most the high
    /// watermark), durably; the segments wholly below it go in the next retention pass.
    /// Returns the new log start offset.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64> {
        let mut s = lock(&self.state);
        if offset > s.high_watermark || offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: s.log_start_offset,
                log_end_offset: s.log_end_offset(),
            });
        }
        if offset > s.log_start_offset {
            self.write_log_start_checkpoint(offset)?;
            s.log_start_offset = offset;
            if s.epochs.truncate_from_start(offset) {
                self.write_epoch_checkpoint(&s)?;
            }
        }
        Ok(s.log_start_offset)
    }

    /// One retention pass, for the broker's background thread: deletes the oldest whole
    /// segments that are below the log start offset, older than `retention.ms`, or
    /// beyond `retention.bytes`, never the active segment nor data at or above the high
    /// watermark (an expired active segment is rolled first, as Kafka does). Files are
    /// renamed under the lock and unlinked after it, so appends
    /// are not blocked by the deletion itself.
    pub fn retention_pass(&self, now_ms: i64) -> Result<RetentionOutcome> {
        let c = self.config();
        // No seal may be writing index files of a segment this pass deletes.
        let _sealing = lock(&self.sealing);
        let mut s = lock(&self.state);
        let expired = |seg: &Segment<S::File>| {
            c.cleanup_policy.delete
                && c.retention_ms >= 0
                && seg.max_timestamp >= 0
                && now_ms.saturating_sub(seg.max_timestamp) > c.retention_ms
        };
        // As Kafka: an active segment past retention.ms is rolled so it can go too (only
        // once all of it is below the high watermark).
        let active = s.active();
        if active.size > 0 && expired(active) && active.next_offset <= s.high_watermark {
            if let Err(e) = self.roll(&mut s, now_ms, true) {
                drop(s);
                self.go_offline(format!("segment roll for retention failed: {e}"));
                return Err(e);
            }
        }
        let total: u64 = s.size_bytes();
        let mut remaining = total;
        let mut n = 0;
        while n + 1 < s.segments.len() {
            let seg = &s.segments[n];
            let below_start = seg.next_offset <= s.log_start_offset;
            let expired = expired(seg);
            let oversized =
                c.cleanup_policy.delete && c.retention_bytes >= 0 && remaining - seg.size >= c.retention_bytes as u64;
            if !(below_start || ((expired || oversized) && seg.next_offset <= s.high_watermark)) {
                break;
            }
            remaining -= seg.size;
            n += 1;
        }
        let mut outcome = RetentionOutcome { log_start_offset: s.log_start_offset, ..Default::default() };
        if n == 0 {
            return Ok(outcome);
        }
        let doomed: Vec<Segment<S::File>> = s.segments.drain(..n).collect();
        let new_start = s.segments[0].base_offset.max(s.log_start_offset);
        if new_start != s.log_start_offset {
            self.write_log_start_checkpoint(new_start)?;
            s.log_start_offset = new_start;
        }
        if s.epochs.truncate_from_start(new_start) {
            self.write_epoch_checkpoint(&s)?;
        }
        let mut renamed = Vec::new();
        for seg in &doomed {
            for path in segment_files(&self.dir, seg.base_offset) {
                let to = PathBuf::from(format!("{}{DELETED_SUFFIX}", path.display()));
                if self.storage.rename(&path, &to).is_ok() {
                    renamed.push(to);
                }
            }
        }
        drop(s);
        for path in renamed {
            if let Err(e) = self.storage.remove(&path) {
                // Left for the next open to remove; not worth failing the pass.
                tracing::warn!(file = %path.display(), error = %e, "could not delete old segment file");
            }
        }
        self.storage.sync_dir(&self.dir).map_err(|e| StorageError::io("fsync dir", &self.dir, e))?;
        outcome.deleted_segments = doomed.len();
        outcome.deleted_bytes = doomed.iter().map(|seg| seg.size).sum();
        outcome.log_start_offset = new_start;
        tracing::info!(dir = %self.dir.display(), segments = n, bytes = outcome.deleted_bytes, log_start_offset = new_start, "retention deleted segments");
        Ok(outcome)
    }

    // ----- scrubbing ------------------------------------------------------------------

    /// One step of the background scrubber (see [`crate::scrub`]): verifies about
    /// `max_bytes` of batches (at least one) of the sealed segment at `cursor`, moving it
    /// to the next sealed segment at the end of one. The active segment is never
    /// scrubbed (its batches are verified on append and by recovery). Reads run without
    /// the lock.
    pub fn scrub(&self, cursor: &mut ScrubCursor<S::File>, max_bytes: u64) -> Result<ScrubStep> {
        let mut step = ScrubStep::default();
        if cursor.current.is_none() {
            let s = lock(&self.state);
            let sealed = &s.segments[..s.segments.len() - 1];
            let Some(seg) = sealed.iter().find(|seg| seg.base_offset >= cursor.next_base) else {
                cursor.next_base = i64::MIN;
                step.pass_done = true;
                return Ok(step);
            };
            cursor.current = Some(ScrubTarget {
                base_offset: seg.base_offset,
                path: seg.path.clone(),
                file: seg.handle_or_open(&self.storage)?,
                size: seg.size,
                position: 0,
                generation: s.generation,
            });
        }
        let Some(target) = cursor.current.as_mut() else { return Ok(step) };
        let (bytes, findings, segment_done) = scrub::verify_step(target, max_bytes);
        step.bytes = bytes;
        let truncated = lock(&self.state).generation != target.generation;
        if !truncated {
            step.findings = findings;
        }
        // Truncated meanwhile: the bytes read may be new ones at old positions; skip on.
        if segment_done || truncated {
            cursor.next_base = target.base_offset.saturating_add(1);
            cursor.current = None;
        }
        Ok(step)
    }

    // ----- compaction -----------------------------------------------------------------

    /// One compaction pass (`cleanup.policy` containing `compact`), for the broker's
    /// background cleaner; see [`crate::cleaner`] for the rules. Cleans sealed segments
    /// only, up to the high watermark and `min.compaction.lag.ms`, when the dirty ratio
    /// reaches `min.cleanable.dirty.ratio` (or a dirty segment is older than
    /// `max.compaction.lag.ms`). The key → offset map is limited to `offset_map_bytes`
    /// (like `log.cleaner.dedupe.buffer.size`); a dirty section with more keys is cleaned
    /// a prefix per pass. The lock is taken only to plan and to swap each cleaned
    /// segment in (renames and directory fsyncs); reading, filtering and writing run
    /// without it, so appends and reads continue. A second concurrent call returns at
    /// once with nothing done.
    pub fn clean(&self, now_ms: i64, offset_map_bytes: usize) -> Result<CleanOutcome> {
        let Ok(_one_cleaner) = self.cleaning.try_lock() else { return Ok(CleanOutcome::default()) };
        let config = self.config();
        if !config.cleanup_policy.compact {
            return Ok(CleanOutcome::default());
        }
        let plan = match self.plan_clean(&config, now_ms)? {
            Ok(plan) => plan,
            Err(skipped) => return Ok(skipped),
        };
        let mut outcome = CleanOutcome { dirty_ratio: plan.dirty_ratio, ..Default::default() };
        // Transactions that ended before the dirty section are left out, or their
        // producer's later data would read as aborted.
        let dirty_aborted = plan.aborted.iter().filter(|t| t.last_offset >= plan.first_dirty).copied().collect();
        let (map, map_end) = cleaner::build_offset_map(
            &self.storage,
            &plan.sources,
            plan.first_dirty,
            plan.end,
            dirty_aborted,
            offset_map_bytes,
        )?;
        outcome.map_full = map_end < plan.end;
        let rules = CleanRules {
            map: &map,
            delete_horizon_ms: plan.delete_horizon_ms,
            map_end,
            producer_last_batches: &plan.producer_last_batches,
            index_interval_bytes: config.index_interval_bytes,
            now_ms,
            delete_retention_ms: config.delete_retention_ms,
        };
        let mut txns = cleaner::TxnTracker::new(plan.aborted);
        let covered = plan.sources.iter().take_while(|src| src.base_offset < map_end).count();
        let targets = &plan.sources[..covered];
        for range in cleaner::group_by_size(targets, config.segment_bytes, config.segment_index_bytes) {
            let group = &targets[range];
            let Some(cleaned) = cleaner::clean_segment(&self.storage, &self.dir, group, &rules, &mut txns)? else {
                continue;
            };
            let (before, after) = (group.iter().map(|src| src.size).sum::<u64>(), cleaned.segment.size);
            if !self.swap_in_cleaned(group, cleaned.segment, plan.generation)? {
                tracing::info!(dir = %self.dir.display(), "log changed under the cleaner (truncation or retention); pass abandoned");
                return Ok(outcome);
            }
            outcome.cleaned_segments += group.len();
            outcome.segments_after += 1;
            outcome.bytes_before += before;
            outcome.bytes_after += after;
            outcome.records_removed += cleaned.records_removed;
        }
        let mut s = lock(&self.state);
        if s.generation == plan.generation && map_end > s.first_dirty_offset {
            checkpoint::write(&self.storage, &self.dir, CLEANER_OFFSET_CHECKPOINT, &[map_end.to_string()])?;
            s.first_dirty_offset = map_end;
        }
        outcome.first_dirty_offset = s.first_dirty_offset;
        drop(s);
        if outcome.cleaned_segments > 0 {
            tracing::info!(dir = %self.dir.display(), segments = outcome.cleaned_segments, bytes_before = outcome.bytes_before, bytes_after = outcome.bytes_after, records_removed = outcome.records_removed, first_dirty_offset = outcome.first_dirty_offset, "log compacted");
        }
        Ok(outcome)
    }

    /// Under the lock: which segments a pass reads and up to where, or why it is skipped.
    fn plan_clean(&self, c: &LogConfig, now_ms: i64) -> Result<std::result::Result<CleanPlan<S::File>, CleanOutcome>> {
        let s = lock(&self.state);
        if let Some(reason) = &s.offline {
            return Err(self.offline_error(reason));
        }
        let skipped = |ratio: f64, first_dirty: i64| CleanOutcome {
            dirty_ratio: ratio,
            first_dirty_offset: first_dirty,
            ..Default::default()
        };
        // Segments wholly below the log start are retention's to delete.
        let start =
            s.segments.iter().position(|seg| seg.next_offset > s.log_start_offset).unwrap_or(s.segments.len() - 1);
        let mut end = start;
        // Never the active segment, nor data above the high watermark (a new leader may
        // truncate it) or the last stable offset (Kafka's firstUncleanableOffset: an open
        // transaction's fate is not known, so neither is which of its values win), nor
        // records younger than min.compaction.lag.ms.
        let stable_end = s.last_stable_offset();
        while end + 1 < s.segments.len() {
            let seg = &s.segments[end];
            let too_young =
                seg.max_timestamp >= 0 && now_ms.saturating_sub(seg.max_timestamp) < c.min_compaction_lag_ms;
            if seg.next_offset > stable_end || too_young {
                break;
            }
            end += 1;
        }
        let first_dirty = s.first_dirty_offset.max(s.log_start_offset);
        let cleanable = &s.segments[start..end];
        let (clean, dirty): (Vec<_>, Vec<_>) = cleanable.iter().partition(|seg| seg.next_offset <= first_dirty);
        let clean_bytes: u64 = clean.iter().map(|seg| seg.size).sum();
        let dirty_bytes: u64 = dirty.iter().map(|seg| seg.size).sum();
        if dirty_bytes == 0 {
            return Ok(Err(skipped(0.0, first_dirty)));
        }
        let dirty_ratio = dirty_bytes as f64 / (clean_bytes + dirty_bytes) as f64;
        let overdue = dirty.first().is_some_and(|seg| {
            let ts = seg.first_batch_timestamp.unwrap_or(seg.max_timestamp);
            ts >= 0 && now_ms.saturating_sub(ts) > c.max_compaction_lag_ms
        });
        if dirty_ratio < c.min_cleanable_dirty_ratio && !overdue {
            return Ok(Err(skipped(dirty_ratio, first_dirty)));
        }
        // Kafka's legacy delete horizon: the newest timestamp of the clean section, minus
        // delete.retention.ms. Nothing clean yet: no tombstone is old enough.
        let delete_horizon_ms =
            clean.last().map_or(i64::MIN, |seg| seg.max_timestamp.saturating_sub(c.delete_retention_ms));
        let mut sources = Vec::with_capacity(cleanable.len());
        for seg in cleanable {
            sources.push(SourceSegment {
                base_offset: seg.base_offset,
                file: seg.file.clone(),
                path: seg.path.clone(),
                size: seg.size,
                next_offset: seg.next_offset,
                max_timestamp: seg.max_timestamp,
                index_entries: seg.offset_index.len(),
                aborted_txns: seg.aborted_txns.clone(),
            });
        }
        let end_offset = cleanable.last().map_or(first_dirty, |seg| seg.next_offset);
        let pass_start = cleanable.first().map_or(first_dirty, |seg| seg.base_offset);
        let aborted = s
            .segments
            .iter()
            .flat_map(|seg| seg.aborted_txns.iter())
            .filter(|t| t.last_offset >= pass_start && t.first_offset < end_offset)
            .copied()
            .collect();
        Ok(Ok(CleanPlan {
            sources,
            first_dirty,
            end: end_offset,
            delete_horizon_ms,
            aborted,
            producer_last_batches: s.producers.last_batches(),
            generation: s.generation,
            dirty_ratio,
        }))
    }

    /// Under the lock: replaces the segments of `group` by their cleaned copy (see
    /// [`cleaner::commit_swap`]) if the log still holds them unchanged; otherwise
    /// discards the copy and returns false.
    fn swap_in_cleaned(
        &self,
        group: &[SourceSegment<S::File>],
        mut cleaned: Segment<S::File>,
        generation: u64,
    ) -> Result<bool> {
        let base = cleaned.base_offset;
        // No seal may be writing index files of a segment this swap replaces.
        let _sealing = lock(&self.sealing);
        let mut s = lock(&self.state);
        let last = s.segments.len() - 1;
        let found = s.segments[..last].iter().position(|seg| seg.base_offset == base);
        let unchanged = found.is_some_and(|i| {
            i + group.len() <= last
                && group
                    .iter()
                    .zip(&s.segments[i..])
                    .all(|(src, seg)| src.base_offset == seg.base_offset && src.size == seg.size)
        });
        let (Some(i), true) = (found, unchanged && s.generation == generation && s.offline.is_none()) else {
            drop(s);
            cleaner::discard_cleaned(&self.storage, &self.dir, base);
            return Ok(false);
        };
        let merged: Vec<i64> = group[1..].iter().map(|src| src.base_offset).collect();
        if let Err(e) = cleaner::commit_swap(&self.storage, &self.dir, base, &merged) {
            // Files and memory may now disagree; reopening (recovery) reconciles them.
            drop(s);
            self.go_offline(format!("compaction swap of segment {base} failed: {e}"));
            return Err(e);
        }
        let end = i + group.len();
        // The group's offset range is kept (its last batch always survives).
        debug_assert_eq!(cleaned.next_offset, s.segments[end - 1].next_offset);
        cleaned.path = segment::log_path(&self.dir, base);
        // Reopened by path when next read; readers holding the old files finish on them.
        cleaned.file = None;
        cleaned.first_batch_timestamp = s.segments[i].first_batch_timestamp;
        s.segments.splice(i..end, [cleaned]);
        s.open_sealed.retain(|b| !group.iter().any(|src| src.base_offset == *b));
        // The cleaned files were written and fsynced whole: nothing left to seal.
        s.unsealed.retain(|b| !group.iter().any(|src| src.base_offset == *b));
        Ok(true)
    }
}

fn segment_files(dir: &Path, base: i64) -> [PathBuf; 4] {
    let stem = segment::file_stem(base);
    // The `.log` last, as in `Segment::delete_files`.
    [
        dir.join(format!("{stem}.index")),
        dir.join(format!("{stem}.timeindex")),
        dir.join(format!("{stem}.txnindex")),
        dir.join(format!("{stem}.log")),
    ]
}
