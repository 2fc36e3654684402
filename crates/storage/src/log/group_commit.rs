//! Group commit: one fsync covers every append written before it started, and waiters
//! (blocking, or callbacks served by the [`Flusher`](crate::durability::Flusher) pool of
//! `durability.rs`) are answered when it completes. The same commit first seals the
//! segments rolled since the last one (indexes, data, producer snapshot, high watermark,
//! recovery point), so an append never fsyncs and no offset after a roll counts as
//! durable before the seal does.

use super::*;

/// Segments to seal, with the checkpoints written after them, taken under the state lock.
struct SealBatch<F> {
    segments: Vec<SealWork<F>>,
    snapshot: Option<(i64, Vec<u8>)>,
    high_watermark: i64,
    /// The active segment's base offset when the batch was taken.
    recovery_point: i64,
}

impl<S: Storage> PartitionLog<S> {
    /// Seals every pending segment now, under the state lock (and `sealing`, or with no
    /// seal in flight).
    pub(super) fn seal_now(&self, state: &mut LogState<S::File>) -> Result<()> {
        let rolls = lock(&self.durability).rolls_taken;
        if let Some(batch) = self.take_seal_work(state)? {
            self.write_seal(&batch)?;
            state.recovery_point = Some(batch.recovery_point);
        }
        let mut d = lock(&self.durability);
        d.rolls_sealed = d.rolls_sealed.max(rolls);
        Ok(())
    }

    /// Under the state lock: what sealing the pending segments writes, or `None`.
    fn take_seal_work(&self, state: &mut LogState<S::File>) -> Result<Option<SealBatch<S::File>>> {
        if state.unsealed.is_empty() {
            return Ok(None);
        }
        let mut segments = Vec::new();
        let last = state.segments.len() - 1;
        for base in std::mem::take(&mut state.unsealed) {
            // A segment deleted or made active again since its roll needs no seal.
            if let Some(seg) = state.segments[..last].iter_mut().find(|seg| seg.base_offset == base) {
                segments.push(seg.seal_work(&self.storage, &self.dir)?);
            }
        }
        // The files are rewritten now; until then, what they hold is not known here.
        state.hw_checkpointed = None;
        state.producers_snapshotted = None;
        Ok(Some(SealBatch {
            segments,
            snapshot: state.pending_snapshot.take(),
            high_watermark: state.high_watermark,
            recovery_point: state.active().base_offset,
        }))
    }

    /// Writes a seal: the segments' indexes and data, then the producer snapshot, the
    /// high watermark and last the recovery point, whose directory fsync also makes the
    /// names of the new segment and index files durable.
    fn write_seal(&self, batch: &SealBatch<S::File>) -> Result<()> {
        for seg in &batch.segments {
            seg.write(&self.storage)?;
        }
        if let Some((offset, bytes)) = &batch.snapshot {
            self.write_snapshot_bytes(*offset, bytes)?;
        }
        let hw = batch.high_watermark.to_string();
        checkpoint::write(&self.storage, &self.dir, HIGH_WATERMARK_CHECKPOINT, &[hw])?;
        let point = batch.recovery_point.to_string();
        checkpoint::write(&self.storage, &self.dir, RECOVERY_POINT_CHECKPOINT, &[point])
    }

    // ----- durability -----------------------------------------------------------------

    /// Blocks until every offset up to and including `offset` is durable (fsynced). The
    /// calling thread does the fsync itself if none is running, else waits for the
    /// running one and, if that did not cover `offset`, starts the next: concurrent
    /// callers share fsyncs.
    pub fn wait_durable(&self, offset: i64) -> Result<()> {
        self.wait_until(offset, false)
    }

    /// [`wait_durable`](Self::wait_durable), counting only what the segments themselves
    /// hold durably (`segments`), or also what the commit journal does.
    fn wait_until(&self, offset: i64, segments: bool) -> Result<()> {
        let target = offset.saturating_add(1);
        let generation = self.check_waitable(target)?;
        let mut d = lock(&self.durability);
        loop {
            if let Some(reason) = &d.offline {
                return Err(self.offline_error(reason));
            }
            if (if segments { d.synced_end } else { d.durable_end }) >= target {
                return Ok(());
            }
            if d.generation != generation {
                return Err(StorageError::Truncated(offset));
            }
            if !d.flushing {
                d.flushing = true;
                drop(d);
                self.run_flush();
                d = lock(&self.durability);
                continue;
            }
            d = self.durable_changed.wait(d).expect(POISONED);
        }
    }

    /// Rejects waiting for offsets not yet appended (no fsync could ever satisfy it);
    /// returns the truncation generation the wait belongs to.
    fn check_waitable(&self, target: i64) -> Result<u64> {
        let s = lock(&self.state);
        let leo = s.log_end_offset();
        if target > leo {
            return Err(StorageError::OffsetOutOfRange {
                offset: target - 1,
                log_start_offset: s.log_start_offset,
                log_end_offset: leo,
            });
        }
        Ok(s.generation)
    }

    /// Blocks until the append described by `info` may be acknowledged under this log's
    /// flush policy: after an fsync by default; immediately if `flush.messages` or
    /// `flush.ms` is set (Kafka's behaviour).
    pub fn wait_for_ack(&self, info: &AppendInfo) -> Result<()> {
        match self.config().flush_policy() {
            FlushPolicy::FsyncBeforeAck => self.wait_durable(info.last_offset),
            FlushPolicy::Periodic { .. } => Ok(()),
        }
    }

    /// Non-blocking form of [`wait_durable`](Self::wait_durable): `callback` runs once
    /// `offset` is durable, on the thread that completed the fsync (a `flusher` thread
    /// or another caller of `wait_durable`), or at once if it already is.
    pub fn on_durable(self: &Arc<Self>, offset: i64, flusher: &Flusher, callback: DurableCallback) {
        let target = offset.saturating_add(1);
        if let Err(e) = self.check_waitable(target) {
            callback(Err(e));
            return;
        }
        {
            let mut d = lock(&self.durability);
            if let Some(reason) = &d.offline {
                let err = self.offline_error(reason);
                drop(d);
                callback(Err(err));
                return;
            }
            if d.durable_end < target {
                d.waiters.push((target, callback));
                if let Some(link) = self.journal.get().filter(|_| !d.journal_blocked(self)) {
                    // The journal's next fsync covers this log's appends up to here.
                    drop(d);
                    link.journal.schedule(flusher);
                    return;
                }
                drop(d);
                if !self.queued_on_flusher.swap(true, Ordering::AcqRel) && !flusher.schedule(self.clone()) {
                    // No flusher: serve the waiter on this thread rather than leave it hanging.
                    self.queued_on_flusher.store(false, Ordering::Release);
                    self.flush_waiters();
                }
                return;
            }
        }
        callback(Ok(()));
    }

    /// fsyncs everything written so far to the segments (sharing the fsync with
    /// concurrent callers), whatever the commit journal holds.
    pub fn flush(&self) -> Result<()> {
        let leo = self.log_end_offset();
        self.wait_until(leo - 1, true)
    }

    /// For `flush.ms`: fsyncs if the oldest unflushed append is older than `flush.ms`.
    /// The broker calls this periodically (Kafka's `log.flush.scheduler.interval.ms`).
    /// Returns whether it flushed.
    pub fn flush_if_due(&self, now_ms: i64) -> Result<bool> {
        let Some(ms) = self.config().flush_ms else { return Ok(false) };
        let due = lock(&self.state).oldest_unflushed_ms.is_some_and(|t| now_ms.saturating_sub(t) >= ms as i64);
        if due {
            self.flush()?;
        }
        Ok(due)
    }

    /// Offsets below this are durable.
    pub fn durable_end_offset(&self) -> i64 {
        lock(&self.durability).durable_end
    }

    /// fsync counts and latency, for metrics.
    pub fn fsync_stats(&self) -> FsyncStats {
        self.fsyncs.snapshot()
    }

    /// One group commit: seals the segments rolled since the last one, then fsyncs the
    /// active segment. The caller has set `flushing`; this clears it.
    fn run_flush(&self) {
        let sealing = lock(&self.sealing);
        // From here on, what the journal could not vouch for is covered by this fsync.
        self.journal_stalled.store(false, Ordering::Release);
        // The seal and the log end it covers are taken together: a roll after this
        // point is sealed by the next group commit, before its offsets count as durable.
        let (seal, leo, file, path, generation, records, rolls) = {
            let mut s = lock(&self.state);
            let rolls = lock(&self.durability).rolls_taken;
            let seal = self.take_seal_work(&mut s);
            let a = s.active();
            (seal, s.log_end_offset(), a.file.clone(), a.path.clone(), s.generation, s.appended_records, rolls)
        };
        let started = Instant::now();
        let sealed = match &seal {
            Ok(Some(batch)) => self.write_seal(batch).map(|()| {
                lock(&self.state).recovery_point = Some(batch.recovery_point);
            }),
            Ok(None) => Ok(()),
            Err(e) => Err(StorageError::io("seal", &self.dir, std::io::Error::other(e.to_string()))),
        };
        drop(sealing);
        let result = match (&sealed, &file) {
            (Err(e), _) => Err(std::io::Error::other(e.to_string())),
            (Ok(_), Some(file)) => file.sync_data(),
            (Ok(_), None) => Err(std::io::Error::other("active segment file is closed")),
        };
        self.fsyncs.record(started.elapsed(), result.is_ok());

        let mut state = lock(&self.state);
        let mut d = lock(&self.durability);
        d.flushing = false;
        match result {
            Ok(()) if state.generation == generation => {
                d.durable_end = d.durable_end.max(leo);
                d.synced_end = d.synced_end.max(leo);
                d.rolls_sealed = d.rolls_sealed.max(rolls);
                state.flushed_records = state.flushed_records.max(records);
                if state.log_end_offset() == leo {
                    state.oldest_unflushed_ms = None;
                }
            }
            Ok(()) => {}
            Err(e) => {
                // After a failed fsync the kernel may have dropped the dirty pages; a retry
                // could "succeed" without the data. Only reopening (recovery) is safe.
                let reason = format!("fsync {}: {e}", path.display());
                tracing::error!(dir = %self.dir.display(), %reason, "log going offline");
                state.offline = Some(reason.clone());
                d.offline = Some(reason);
            }
        }
        // A waiter registered while a truncation removed its offset (it passed the check
        // before the truncation, and was pushed after it) can never be satisfied.
        let leo_now = state.log_end_offset();
        drop(state);
        let (orphaned, waiting): (Vec<_>, Vec<_>) = d.waiters.drain(..).partition(|(end, _)| *end > leo_now);
        d.waiters = waiting;
        let ready = take_ready_waiters(&mut d);
        let offline = d.offline.clone();
        self.durable_changed.notify_all();
        drop(d);
        for cb in ready {
            cb(match &offline {
                Some(reason) => Err(self.offline_error(reason)),
                None => Ok(()),
            });
        }
        for (end, cb) in orphaned {
            cb(Err(StorageError::Truncated(end - 1)));
        }
    }
}

impl<S: Storage> Flushable for PartitionLog<S> {
    fn flush_waiters(&self) {
        loop {
            let mut d = lock(&self.durability);
            while d.flushing {
                d = self.durable_changed.wait(d).expect(POISONED);
            }
            let pending = d.waiters.iter().any(|(end, _)| *end > d.durable_end);
            if !pending || d.offline.is_some() {
                let ready = take_ready_waiters(&mut d);
                let offline = d.offline.clone();
                drop(d);
                for cb in ready {
                    cb(match &offline {
                        Some(reason) => Err(self.offline_error(reason)),
                        None => Ok(()),
                    });
                }
                return;
            }
            d.flushing = true;
            drop(d);
            self.run_flush();
        }
    }

    fn dequeued(&self) {
        self.queued_on_flusher.store(false, Ordering::Release);
    }
}

/// Waiters whose offsets are durable, or all of them if the log is offline.
fn take_ready_waiters(d: &mut DurableState) -> Vec<DurableCallback> {
    let durable_end = d.durable_end;
    let offline = d.offline.is_some();
    let (ready, waiting): (Vec<_>, Vec<_>) = d.waiters.drain(..).partition(|(end, _)| offline || *end <= durable_end);
    d.waiters = waiting;
    ready.into_iter().map(|(_, cb)| cb).collect()
}

impl DurableState {
    /// Whether the journal cannot vouch for this log's next offsets: a roll waits for
    /// its seal, or a journal fsync already covered entries the log could not count.
    fn journal_blocked<S: Storage>(&self, log: &PartitionLog<S>) -> bool {
        self.rolls_taken != self.rolls_sealed
            || log.journal_stalled.load(Ordering::Acquire)
            || log.journal.get().is_none_or(|link| !link.journal.is_online())
    }
}

impl<S: Storage> PartitionLog<S> {
    /// Attaches the log to a commit journal (once; see [`crate::journal::Journal::attach`]).
    pub(crate) fn set_journal(&self, link: JournalLink) {
        let _ = self.journal.set(link);
    }

    /// Appends the journal's batches that recovery did not keep: those from the log end
    /// on, in order (a follower's log may have gaps the leader's compaction left, so a
    /// batch may start past the end if the one before it in the journal ended there).
    /// Then fsyncs the segments. Returns the batches appended.
    pub(crate) fn replay_journal(&self, batches: &[JournalBatch]) -> Result<usize> {
        let mut appended = 0;
        let mut previous_end = None;
        for b in batches {
            let leo = self.log_end_offset();
            if b.last_offset < leo {
                previous_end = Some(b.last_offset + 1);
                continue;
            }
            let follows = b.base_offset == leo || (b.base_offset > leo && previous_end == Some(leo));
            if !follows {
                tracing::warn!(dir = %self.dir.display(), log_end_offset = leo, batch_base_offset = b.base_offset,
                    "the commit journal's next batch does not follow the log; the rest of it is not replayed");
                break;
            }
            self.append_as_follower(&b.bytes, replay_now_ms())?;
            appended += 1;
            previous_end = Some(b.last_offset + 1);
        }
        if appended > 0 {
            self.flush()?;
            tracing::info!(dir = %self.dir.display(), batches = appended, log_end_offset = self.log_end_offset(),
                "batches replayed from the commit journal");
        }
        Ok(appended)
    }
}

impl<S: Storage> JournaledLog for PartitionLog<S> {
    fn journal_durable(&self, generation: u64, base: i64, end: i64) {
        let mut d = lock(&self.durability);
        let counts = d.offline.is_none()
            && d.generation == generation
            && d.durable_end >= base
            && d.rolls_taken == d.rolls_sealed;
        if counts {
            d.durable_end = d.durable_end.max(end);
            let ready = take_ready_waiters(&mut d);
            self.durable_changed.notify_all();
            drop(d);
            for cb in ready {
                cb(Ok(()));
            }
        } else if d.waiters.iter().any(|(target, _)| *target > d.durable_end) {
            // Waiters this fsync cannot answer (a roll not sealed, entries delivered out of
            // order, or appended before a truncation and kept by it): a segment fsync does.
            if d.generation == generation {
                self.journal_stalled.store(true, Ordering::Release);
            }
            drop(d);
            self.flush_waiters();
        } else if d.generation == generation && d.durable_end < end {
            // No waiter yet, but the next one for these offsets must not count on the
            // journal, whose fsync for them is over.
            self.journal_stalled.store(true, Ordering::Release);
        }
    }

    fn journal_failed(&self) {
        self.journal_stalled.store(true, Ordering::Release);
        self.flush_waiters();
    }

    fn sync_segments(&self) -> Result<()> {
        self.flush()
    }
}

fn replay_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
