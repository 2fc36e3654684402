//! Deletes partition directories crash-safely, as Kafka's `LogManager.asyncDelete`: each
//! is renamed to `<topic>-<partition>.<unique id>-delete` and the data directory fsynced
//! on the caller's thread (so a deleted topic is durably gone from its names when
//! DeleteTopics answers), then removed file by file on a thread of its own, so a large
//! topic's unlinks hold up no request. A crash during the removal leaves the rest under
//! the `-delete` name, which the next start removes and never loads (see
//! [`osprey_storage::delete`]).

use osprey_storage::{delete, StdStorage};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// The background half: a thread removing renamed directories, in the order given.
#[derive(Debug)]
pub struct LogDeleter {
    data_dir: PathBuf,
    jobs: mpsc::Sender<Job>,
}

enum Job {
    Remove(PathBuf),
    /// Answers once every removal queued before it is done.
    Flush(mpsc::Sender<()>),
}

impl LogDeleter {
    /// Starts the deleter for `data_dir`. The thread ends when the deleter is dropped,
    /// after the removals already queued; what it did not reach is removed at the next
    /// start.
    pub fn start(data_dir: &Path) -> io::Result<LogDeleter> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new().name("osprey-log-deleter".into()).spawn(move || {
            for job in queue {
                match job {
                    Job::Remove(dir) => match delete::remove(&StdStorage, &dir) {
                        Ok(()) => tracing::debug!(dir = %dir.display(), "deleted partition directory removed"),
                        Err(e) => tracing::warn!(
                            dir = %dir.display(),
                            error = %e,
                            "could not remove a deleted partition's directory; the next start retries"
                        ),
                    },
                    Job::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        })?;
        Ok(LogDeleter { data_dir: data_dir.to_path_buf(), jobs })
    }

    /// Deletes `dirs` (partition directories in the data directory, their logs closed or
    /// dropped): renamed for deletion, durably, before this returns; removed later. An
    /// error means the renames may not be durable; nothing was removed then, and the next
    /// start finds each directory under its old name (a partition of no current topic,
    /// removed) or its new one.
    pub fn delete(&self, dirs: &[PathBuf]) -> io::Result<()> {
        let renamed = delete::rename_for_delete(&StdStorage, &self.data_dir, dirs, &mut unique_id)
            .map_err(|e| io::Error::other(e.to_string()))?;
        self.remove(renamed);
        Ok(())
    }

    /// Queues already-renamed directories (found at start-up) for removal.
    pub fn remove(&self, renamed: Vec<PathBuf>) {
        for dir in renamed {
            // Only fails once the thread is gone (shutdown): the next start removes it.
            let _ = self.jobs.send(Job::Remove(dir));
        }
    }

    /// Waits until every removal queued so far is done (tests, and anything that must
    /// see the directories gone).
    pub fn wait_idle(&self) {
        let (done, wait) = mpsc::channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// Kafka's unique id for a delete directory: a random UUID without dashes (the clock and a
/// counter if the OS has no randomness to give).
fn unique_id() -> String {
    static FALLBACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        let n = FALLBACK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&(crate::broker::now_ms() as u64).to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
