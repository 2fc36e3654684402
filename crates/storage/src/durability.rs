//! Group commit support: fsync statistics and a small pool of flusher threads that serve
//! many partition logs, so an async caller can be notified instead of blocking.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::StorageError;

/// Called once with the outcome when the offsets it waits for are durable (or can never
/// be). Runs on whichever thread completed the covering fsync: keep it short (send on a
/// channel, wake a future).
pub type DurableCallback = Box<dyn FnOnce(Result<(), StorageError>) + Send + 'static>;

/// Something with pending durability waiters that a flusher thread can serve.
pub trait Flushable: Send + Sync + 'static {
    /// Performs group fsyncs until every registered waiter is answered.
    fn flush_waiters(&self);
    /// Clears the "queued on a flusher" flag, before `flush_waiters` runs, so appends
    /// that arrive during the fsync queue the log again.
    fn dequeued(&self);
}

/// Bound on logs queued for the flusher threads; a full queue makes `schedule` block
/// briefly, which pushes back on producers instead of growing memory without limit.
const FLUSH_QUEUE_CAPACITY: usize = 65_536;

/// A fixed pool of threads doing fsyncs for logs that have callback waiters.
pub struct Flusher {
    sender: Option<SyncSender<Arc<dyn Flushable>>>,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Flusher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flusher").field("threads", &self.threads.len()).finish()
    }
}

impl Flusher {
    /// Starts `threads` flusher threads (at least one). Several let fsyncs of different
    /// partitions (often on different disks) overlap.
    pub fn new(threads: usize) -> std::io::Result<Flusher> {
        let (sender, receiver) = mpsc::sync_channel::<Arc<dyn Flushable>>(FLUSH_QUEUE_CAPACITY);
        let receiver = Arc::new(Mutex::new(receiver));
        let mut flusher = Flusher { sender: Some(sender), threads: Vec::new() };
        for i in 0..threads.max(1) {
            let receiver = receiver.clone();
            let thread =
                std::thread::Builder::new().name(format!("osprey-flusher-{i}")).spawn(move || run(&receiver))?;
            flusher.threads.push(thread);
        }
        Ok(flusher)
    }

    /// Queues `log` for a flush. Returns false if the flusher is shut down.
    pub fn schedule(&self, log: Arc<dyn Flushable>) -> bool {
        self.sender.as_ref().is_some_and(|s| s.send(log).is_ok())
    }
}

fn run(receiver: &Mutex<Receiver<Arc<dyn Flushable>>>) {
    loop {
        let next = match receiver.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        match next {
            Ok(log) => {
                log.dequeued();
                // Not caught: a panic here is a broken invariant, and it stops the
                // process rather than leave logs with waiters nobody answers (README,
                // "Failure stance").
                log.flush_waiters();
            }
            Err(_) => return,
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        // Closing the channel ends each thread once the queue is drained.
        self.sender.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Counters for fsync latency, for the server's metrics.
#[derive(Debug, Default)]
pub(crate) struct FsyncCounters {
    count: AtomicU64,
    total_micros: AtomicU64,
    max_micros: AtomicU64,
    errors: AtomicU64,
}

/// fsync counts and latency of one log, as returned by `PartitionLog::fsync_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsyncStats {
    /// fsyncs done on the append path (group commits).
    pub count: u64,
    /// Their total duration.
    pub total: Duration,
    /// The slowest one.
    pub max: Duration,
    /// fsyncs that failed.
    pub errors: u64,
}

/// Called with the duration of every append-path fsync of every log in the process (the
/// server records it in a histogram); set once, at startup.
static FSYNC_OBSERVER: std::sync::OnceLock<fn(Duration)> = std::sync::OnceLock::new();

/// Installs the process's fsync observer; later calls are ignored.
pub fn set_fsync_observer(observer: fn(Duration)) {
    let _ = FSYNC_OBSERVER.set(observer);
}

impl FsyncCounters {
    pub fn record(&self, took: Duration, ok: bool) {
        if let Some(observe) = FSYNC_OBSERVER.get() {
            observe(took);
        }
        let micros = took.as_micros().min(u128::from(u64::MAX)) as u64;
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_micros.fetch_add(micros, Ordering::Relaxed);
        self.max_micros.fetch_max(micros, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> FsyncStats {
        FsyncStats {
            count: self.count.load(Ordering::Relaxed),
            total: Duration::from_micros(self.total_micros.load(Ordering::Relaxed)),
            max: Duration::from_micros(self.max_micros.load(Ordering::Relaxed)),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}
