//! Partition replication between the brokers of a cluster (issue 15), with Kafka's
//! protocol, as Kafka's `ReplicaManager`, `ReplicaFetcherManager` and
//! `AlterPartitionManager` do it:
//!
//! - `fetcher.rs`: a follower fetches from each partition's leader with Fetch (replica
//!   id and broker epoch in `ReplicaState`, v15+), appends what it gets as the leader
//!   wrote it, truncates where the leader's answer names a diverging epoch (KIP-320),
//!   and takes the leader's high watermark and log start offset;
//! - `isr.rs`: the ISR changes a leader's replica state machines propose go to the
//!   active controller as AlterPartition, and the answers come back to the machines;
//!   the ISR expiration tick (`replica.lag.time.max.ms`) runs here too.
//!
//! The leader's side of a follower fetch is in `handlers/fetch.rs`; each partition's
//! replication state (followers' positions, ISR, high watermark, acks=all waits) is its
//! replica state machine (`osprey_cluster::replica`), driven by `partition.rs`.
//!
//! Durability: a follower fetches again only once what it appended is durable (under
//! Osprey's default flush policy), so its fetch offset is also its durable end; the
//! leader's high watermark, and acks=all with it, never passes data that some ISR
//! member holds only in its page cache. With `flush.messages` / `flush.ms` relaxed, the
//! follower fetches again at once, as Kafka's do.

pub(crate) mod fetcher;
mod isr;
mod session;

use crate::broker::Broker;
use crate::cluster_link::ClusterLink;
use std::sync::Arc;
use tokio::sync::watch;

/// Starts the replica fetchers, the AlterPartition sender and the ISR expiration tick of
/// a broker of a cluster; they run until `stopped`.
pub fn spawn(broker: Arc<Broker>, link: Arc<ClusterLink>, stopped: watch::Receiver<bool>) {
    if let Some(changes) = broker.take_isr_changes() {
        tokio::spawn(isr::send_isr_changes(broker.clone(), link.clone(), changes, stopped.clone()));
    }
    tokio::spawn(isr::expire_isr(broker.clone(), stopped.clone()));
    tokio::spawn(fetcher::manage_fetchers(broker, link, stopped));
}
