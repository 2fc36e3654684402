//! The coordinators' appends, run after their lock is released, on threads meant for
//! disk I/O, in the order the coordinator asked for them.
//!
//! A coordinator decides under its lock. The appends it asks for are queued, still under
//! that lock, on the queue of the partition they go to (a `__consumer_offsets` or
//! `__transaction_state` partition, or a data partition for a marker), so each queue
//! holds them in output order. At most one runner per queue, on the blocking pool, takes
//! them out in that order and appends them: a group's persists land in its partition in
//! the order they were issued (the group coordinator's persist_order.rs relies on it),
//! the lock is free for other groups meanwhile, and a partition whose disk stalls holds
//! up only its own queue.
//!
//! The replica manager queues client appends on the same kind of queue, one per
//! partition (`replica_manager.rs`).
//!
//! The queues are not bounded here: each entry is an output of a request the network
//! layer admitted (`osprey.max.inflight.requests.per.connection`, `max.connections`) or of
//! a coordinator timer, and stays only until its append has been issued.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

/// Per-partition queues of appends of type `J`, keyed by `K`.
#[derive(Debug)]
pub struct AppendQueues<K, J> {
    queues: Mutex<HashMap<K, Queue<J>>>,
}

#[derive(Debug)]
struct Queue<J> {
    jobs: VecDeque<J>,
    /// A runner is taking jobs out of this queue: a new job waits for it.
    running: bool,
}

impl<K, J> Default for AppendQueues<K, J> {
    fn default() -> Self {
        AppendQueues { queues: Mutex::new(HashMap::new()) }
    }
}

impl<K, J> AppendQueues<K, J>
where
    K: Eq + Hash + Clone + Send + 'static,
    J: Send + 'static,
{
    /// Queues `job` behind the jobs queued for `key` and, unless a runner is at work on
    /// that queue, starts one that runs `run` on each job in queue order. Never runs a job
    /// itself, so a caller may hold its coordinator lock (and should, to queue in output
    /// order).
    pub fn push(self: &Arc<Self>, key: K, job: J, run: impl Fn(J) + Send + 'static) {
        let mut queues = self.lock();
        let queue = queues.entry(key.clone()).or_insert_with(|| Queue { jobs: VecDeque::new(), running: false });
        queue.jobs.push_back(job);
        if queue.running {
            return;
        }
        queue.running = true;
        drop(queues);
        let this = self.clone();
        let runner = move || this.run_until_empty(&key, run);
        // Inside the runtime (every request and timer): its blocking pool. Elsewhere (a
        // start-up path outside it), a thread of its own; never the caller's thread.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(runner)),
            Err(_) => drop(std::thread::spawn(runner)),
        }
    }

    /// Jobs queued and not yet taken by a runner, over every queue.
    pub fn queued(&self) -> usize {
        self.lock().values().map(|q| q.jobs.len()).sum()
    }

    fn run_until_empty(&self, key: &K, run: impl Fn(J)) {
        loop {
            let batch: Vec<J> = {
                let mut queues = self.lock();
                let Some(queue) = queues.get_mut(key) else { return };
                if queue.jobs.is_empty() {
                    queues.remove(key);
                    return;
                }
                queue.jobs.drain(..).collect()
            };
            for job in batch {
                run(job);
            }
        }
    }

    /// The queues, exclusively. Poisoned, the lock is never used again, as every lock of
    /// the broker (README, "Failure stance").
    fn lock(&self) -> MutexGuard<'_, HashMap<K, Queue<J>>> {
        self.queues.lock().expect("coordinator append queues poisoned by an earlier panic")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn one_queue_runs_in_push_order_and_a_stalled_queue_holds_up_only_itself() {
        let queues: Arc<AppendQueues<i32, (i32, u32)>> = Arc::default();
        let (done_tx, done_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let run = move |(key, n): (i32, u32)| {
            if key == 0 && n == 0 {
                // Partition 0's first append stalls until the test releases it.
                release_rx.lock().unwrap().recv().unwrap();
            }
            done_tx.send((key, n)).unwrap();
        };
        for n in 0..3 {
            queues.push(0, (0, n), run.clone());
        }
        for n in 0..3 {
            queues.push(1, (1, n), run.clone());
        }
        // Partition 1's appends all complete while partition 0's first is stalled.
        let first_three: Vec<_> = (0..3).map(|_| done_rx.recv().unwrap()).collect();
        assert_eq!(first_three, vec![(1, 0), (1, 1), (1, 2)]);
        release_tx.send(()).unwrap();
        let rest: Vec<_> = (0..3).map(|_| done_rx.recv().unwrap()).collect();
        assert_eq!(rest, vec![(0, 0), (0, 1), (0, 2)]);
    }
}
