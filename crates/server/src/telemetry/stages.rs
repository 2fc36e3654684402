//! Where a request's time goes, as Kafka's RequestMetrics split it
//! (`osprey_request_stage_seconds{api, stage}`):
//!
//! - `queue`: from its frame read until its handler starts on it. A connection's
//!   requests are handled as they are read, so this is only the time spent waiting
//!   while the connection's unwritten responses fill its budget
//!   (`osprey.max.pending.response.bytes.per.connection`).
//! - `local`: the handler's own work: its synchronous part, and of its deferred part
//!   (reads and appends on the blocking pool, encoding) everything but remote waits.
//! - `remote`: waits in delayed operations, marked with [`remote_wait`] (Kafka's
//!   purgatory): a Fetch's long poll, a Produce's or a transaction marker's
//!   acknowledgement (followers for acks=all, and the fsync Osprey waits for before
//!   acknowledging), the group and transaction coordinators' answers that wait for a
//!   rebalance or a durable write, and the transaction checks sent to another broker.
//!   A controller write (CreateTopics and the like, forwarded to the active controller
//!   in a cluster) runs whole on the blocking pool and counts as `local`.
//! - `response_queue`: from the handler's return until the connection's writer takes
//!   the answer up, i.e. the wait behind the connection's earlier responses (responses
//!   go out in request order). A deferred answer only starts once the writer reaches
//!   it, so its local and remote time come after this wait, as in Kafka's response
//!   queue time.
//! - `send`: from the answer until its response is written to the socket (Kafka's
//!   response send time).
//!
//! The five add up to `osprey_request_duration_seconds`, from frame read to response
//! written. Work a handler hands to a task of its own is not the request's (an acks=0
//! produce's append, which nobody waits for).

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;
// tokio's clock: the std one in a real runtime, and the paused one in the tests below.
use tokio::time::Instant;

tokio::task_local! {
    /// The remote time of the deferred answer being polled: set by [`measured`], added
    /// to by [`remote_wait`].
    static REMOTE: Cell<Duration>;
}

/// Awaits `wait`, a delayed operation, counting its time in the request's `remote`
/// stage. Outside a request's deferred answer (a test calling a handler, a task of its
/// own) it only awaits.
pub async fn remote_wait<F: Future>(wait: F) -> F::Output {
    let started = Instant::now();
    let output = wait.await;
    let _ = REMOTE.try_with(|remote| remote.set(remote.get() + started.elapsed()));
    output
}

/// Runs a deferred answer to its end: its output, and how long it spent in
/// [`remote_wait`]s.
pub async fn measured<F: Future>(deferred: F) -> (F::Output, Duration) {
    REMOTE
        .scope(Cell::new(Duration::ZERO), async move {
            let output = deferred.await;
            (output, REMOTE.with(Cell::get))
        })
        .await
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    Queue,
    Local,
    Remote,
    ResponseQueue,
    Send,
}

impl Stage {
    const ALL: [Stage; 5] = [Stage::Queue, Stage::Local, Stage::Remote, Stage::ResponseQueue, Stage::Send];

    fn name(self) -> &'static str {
        match self {
            Stage::Queue => "queue",
            Stage::Local => "local",
            Stage::Remote => "remote",
            Stage::ResponseQueue => "response_queue",
            Stage::Send => "send",
        }
    }
}

/// One request's clock: each step of its way closes the time since the previous one
/// into a stage, so the stages add up to the whole.
#[derive(Debug)]
pub struct RequestTimes {
    mark: Instant,
    stages: [Duration; 5],
}

impl RequestTimes {
    /// Its frame was read just now.
    pub fn frame_read() -> RequestTimes {
        RequestTimes { mark: Instant::now(), stages: [Duration::ZERO; 5] }
    }

    pub fn handler_started(&mut self) {
        self.close(Stage::Queue);
    }

    /// The handler returned its answer, or the deferred part of one.
    pub fn handler_returned(&mut self) {
        self.close(Stage::Local);
    }

    /// The connection's writer took up the answer, after the responses before it; a
    /// deferred answer starts now.
    pub fn taken_up(&mut self) {
        self.close(Stage::ResponseQueue);
    }

    /// The deferred answer is ready, having spent `remote` in delayed operations.
    pub fn deferred_returned(&mut self, remote: Duration) {
        let now = Instant::now();
        let spent = now.duration_since(self.mark);
        let remote = remote.min(spent);
        self.stages[Stage::Remote as usize] += remote;
        self.stages[Stage::Local as usize] += spent - remote;
        self.mark = now;
    }

    /// Its response is written (or, for acks=0, dropped).
    pub fn written(&mut self) {
        self.close(Stage::Send);
    }

    /// From frame read to the last step.
    pub fn total(&self) -> Duration {
        self.stages.iter().sum()
    }

    /// Each stage's time, by name.
    pub fn stages(&self) -> impl Iterator<Item = (&'static str, Duration)> + '_ {
        Stage::ALL.iter().map(|&s| (s.name(), self.stages[s as usize]))
    }

    fn close(&mut self, stage: Stage) {
        let now = Instant::now();
        self.stages[stage as usize] += now.duration_since(self.mark);
        self.mark = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(times: &RequestTimes, name: &str) -> Duration {
        times.stages().find(|(n, _)| *n == name).map(|(_, d)| d).unwrap()
    }

    /// Paused time: only the sleeps advance the clock, by exactly what they sleep.
    #[tokio::test(start_paused = true)]
    async fn a_remote_wait_counts_as_remote_and_the_rest_of_the_deferred_work_as_local() {
        let mut times = RequestTimes::frame_read();
        times.handler_started();
        times.handler_returned();
        times.taken_up();
        let (answer, remote) = measured(async {
            tokio::time::sleep(Duration::from_millis(30)).await; // a read
            remote_wait(tokio::time::sleep(Duration::from_millis(500))).await; // a long poll
            7
        })
        .await;
        times.deferred_returned(remote);
        times.written();
        assert_eq!(answer, 7);
        assert_eq!(remote, Duration::from_millis(500));
        assert_eq!(stage(&times, "remote"), Duration::from_millis(500));
        assert_eq!(stage(&times, "local"), Duration::from_millis(30), "the wait was counted as local work");
        assert_eq!(times.total(), Duration::from_millis(530));
    }

    /// The wait behind earlier responses is `response_queue`, and writing is `send`,
    /// whatever kind of answer it is.
    #[tokio::test(start_paused = true)]
    async fn the_wait_for_the_writer_is_response_queue_and_the_write_is_send() {
        let mut times = RequestTimes::frame_read();
        times.handler_started();
        times.handler_returned();
        tokio::time::sleep(Duration::from_millis(40)).await; // the responses before it
        times.taken_up();
        tokio::time::sleep(Duration::from_millis(3)).await; // the write
        times.written();
        assert_eq!(stage(&times, "response_queue"), Duration::from_millis(40));
        assert_eq!(stage(&times, "send"), Duration::from_millis(3));
        assert_eq!(stage(&times, "local") + stage(&times, "remote") + stage(&times, "queue"), Duration::ZERO);
        assert_eq!(times.total(), Duration::from_millis(43));
    }

    #[tokio::test(start_paused = true)]
    async fn outside_a_measured_answer_a_remote_wait_only_waits() {
        assert_eq!(remote_wait(async { 3 }).await, 3);
    }
}
