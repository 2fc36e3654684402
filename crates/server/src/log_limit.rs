//! A log filter that lets through at most one warning or error per call site per
//! interval from one crate: openraft logs an ERROR for every RPC to a peer that fails
//! ("RPCError", "while requesting vote"), and replication retries a dead peer every
//! 500 ms, so one stopped controller would fill its peers' logs with two lines a second
//! for as long as it is down. The first line of each kind still shows at once, and one
//! again per interval while the condition lasts; openraft's own code is not ours to
//! change, its events are.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::callsite::Identifier;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::layer::{Context, Filter};

/// How often one openraft call site may log a warning or an error.
pub const OPENRAFT_REPEAT_INTERVAL: Duration = Duration::from_secs(30);

/// Limits the warnings and errors of targets under `target_prefix` to one per call site
/// per `interval`; every other event passes.
#[derive(Debug)]
pub struct RepeatLimit {
    target_prefix: &'static str,
    interval: Duration,
    /// When each limited call site last let an event through. Bounded by the number of
    /// call sites compiled in.
    last: Mutex<HashMap<Identifier, Instant>>,
}

impl RepeatLimit {
    pub fn new(target_prefix: &'static str, interval: Duration) -> RepeatLimit {
        RepeatLimit { target_prefix, interval, last: Mutex::new(HashMap::new()) }
    }

    /// openraft's warnings and errors, one per call site per [`OPENRAFT_REPEAT_INTERVAL`].
    pub fn openraft() -> RepeatLimit {
        RepeatLimit::new("openraft", OPENRAFT_REPEAT_INTERVAL)
    }

    fn limits(&self, meta: &Metadata<'_>) -> bool {
        // More verbose levels compare greater: WARN and ERROR are at most WARN.
        meta.is_event() && *meta.level() <= Level::WARN && meta.target().starts_with(self.target_prefix)
    }

    fn let_through(&self, meta: &Metadata<'_>) -> bool {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match last.get(&meta.callsite()) {
            Some(at) if now.duration_since(*at) < self.interval => false,
            _ => {
                last.insert(meta.callsite(), now);
                true
            }
        }
    }
}

impl<S> Filter<S> for RepeatLimit {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        !self.limits(meta) || self.let_through(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // Limited call sites are asked about at every event; the rest never again.
        if self.limits(meta) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    /// Collects what the fmt layer writes.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(interval: Duration, emit: impl Fn()) -> Vec<String> {
        let lines = Lines::default();
        let writer = lines.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_filter(RepeatLimit::new("openraft", interval));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        text.lines().map(String::from).collect()
    }

    fn emit() {
        for i in 0..5 {
            tracing::error!(target: "openraft::replication", i, "RPCError");
            tracing::warn!(target: "openraft::core", i, "timeout");
            tracing::info!(target: "openraft::core", i, "an info line");
            tracing::error!(target: "osprey_server", i, "our own error");
        }
    }

    #[test]
    fn repeated_openraft_warnings_and_errors_show_once_per_call_site_and_the_rest_always() {
        let lines = logged(Duration::from_secs(3600), emit);
        let count = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
        assert_eq!(count("RPCError"), 1, "{lines:?}");
        assert_eq!(count("timeout"), 1, "a call site of its own");
        assert_eq!(count("an info line"), 5, "only warnings and errors are limited");
        assert_eq!(count("our own error"), 5, "other targets pass");
        assert!(lines.iter().any(|l| l.contains("RPCError") && l.contains("i=0")), "the first one shows");
    }

    #[test]
    fn once_the_interval_passed_a_call_site_logs_again() {
        let lines = logged(Duration::ZERO, emit);
        assert_eq!(lines.iter().filter(|l| l.contains("RPCError")).count(), 5);
    }
}
