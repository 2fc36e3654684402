//! Set-up shared by the unit tests that check where work runs.

use crate::broker::{Broker, Settings};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A single-node broker on a fresh data directory named for the test (removed first),
/// listening nowhere yet: its address is a port 0 binding's.
pub fn broker_in(name: &str) -> (Arc<Broker>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("osprey-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let broker = Broker::open(Settings::single_node(addr, dir.clone()), Box::new(|_: &str, _: &str| Ok(()))).unwrap();
    (broker, dir)
}

/// A current-thread runtime: it runs its tasks on the thread that blocks on it, so any
/// thread it starts is a blocking-pool thread, counted in the second value.
pub fn counting_runtime() -> (tokio::runtime::Runtime, Arc<AtomicUsize>) {
    let blocking_threads = Arc::new(AtomicUsize::new(0));
    let counted = blocking_threads.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    (runtime, blocking_threads)
}
