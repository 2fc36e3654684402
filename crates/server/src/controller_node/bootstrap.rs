//! Bootstrap without a format step (DESIGN.md): this node's directory id, the Hello
//! exchange between configured voters until this node is a voter, and the cluster id
//! learned from the quorum's first committed `ClusterId` record into `meta.properties`.

use super::transport::ListenerTransport;
use super::{ControllerNodeConfig, NodeState};
use osprey_cluster::meta_properties::{self, MetaProperties, Stored};
use osprey_cluster::quorum::{decide_bootstrap, BootstrapDecision, ControllerEndpoint};
use osprey_protocol::Uuid;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often a node that is not a voter yet says Hello to the configured voters.
pub const HELLO_INTERVAL: Duration = Duration::from_millis(500);
/// How long the initializer waits for every configured voter once a majority answered:
/// a quorum initialized with all of them survives the loss of any minority from its
/// first moment (Kafka's static quorum), while one initialized with a bare majority has
/// no majority left if one of those dies before the others are added. A voter that is
/// down at first start does not hold the cluster up longer than this.
pub const ALL_VOTERS_GRACE: Duration = Duration::from_secs(3);
/// How long one Hello waits for its answer.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the applied image is checked for the cluster id.
const CLUSTER_ID_POLL: Duration = Duration::from_millis(100);

/// Where a directory id waits until the cluster id is known and `meta.properties` can be
/// written complete (Kafka's file needs both). Removed once it is.
const PENDING_DIRECTORY_ID: &str = "directory.id.pending";

/// This node's metadata directory identity at start-up.
#[derive(Debug, Clone)]
pub struct Identity {
    pub dir: PathBuf,
    pub node_id: i32,
    pub directory_id: Uuid,
    /// The cluster `meta.properties` names, if it exists.
    pub cluster_id: Option<String>,
}

impl Identity {
    /// Reads `meta.properties` of `dir` (refusing another node's directory); without
    /// one, the directory id is the pending one, made now if there is none yet.
    pub fn load(dir: &Path, node_id: i32) -> Result<Identity, String> {
        let stored = meta_properties::read(dir).map_err(|e| e.to_string())?;
        let (found_node, directory_id, cluster_id) = match stored {
            Stored::Complete(m) => (m.node_id, Some(m.directory_id), Some(m.cluster_id)),
            Stored::Legacy { cluster_id, node_id, directory_id } => (node_id, directory_id, Some(cluster_id)),
            Stored::Empty => (node_id, None, None),
        };
        if found_node != node_id {
            return Err(format!(
                "{} belongs to node.id={found_node} but this node is node.id={node_id}; to make a new node, use an \
                 empty metadata.log.dir",
                dir.join(meta_properties::FILE_NAME).display()
            ));
        }
        let directory_id = match directory_id {
            Some(id) => id,
            None => pending_directory_id(dir)?,
        };
        Ok(Identity { dir: dir.to_path_buf(), node_id, directory_id, cluster_id })
    }
}

/// The pending directory id of `dir`, made and made durable if there is none.
fn pending_directory_id(dir: &Path) -> Result<Uuid, String> {
    let path = dir.join(PENDING_DIRECTORY_ID);
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            return meta_properties::parse_uuid(text.trim())
                .ok_or_else(|| format!("{}: not a directory id: {text:?}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let id = meta_properties::random_uuid().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!("{PENDING_DIRECTORY_ID}.tmp"));
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        file.write_all(id.to_string().as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, &path).map_err(io)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok(id)
}

/// Says Hello to every other configured voter every [`HELLO_INTERVAL`] until this node is
/// a voter of the quorum, and initializes the quorum when `decide_bootstrap` says this
/// node must. The leader adds a configured voter it hears from (`membership.rs`), so a
/// node that starts late, or comes back with a new directory id, keeps saying Hello.
pub async fn hello_until_voter(
    node: Arc<NodeState>,
    transport: ListenerTransport,
    voters: Vec<(i32, ControllerEndpoint)>,
    mut stopped: watch::Receiver<bool>,
) {
    let configured: BTreeSet<i32> = voters.iter().map(|(id, _)| *id).collect();
    let others: Vec<(i32, ControllerEndpoint)> =
        voters.into_iter().filter(|(id, _)| *id != node.replica.node_id).collect();
    let mut initialized = false;
    let mut majority_since: Option<tokio::time::Instant> = None;
    loop {
        if node.quorum.voters().contains(&node.replica) {
            tracing::info!(replica = %node.replica, "this controller is a voter of the quorum");
            return;
        }
        let me = node.my_hello();
        let mut asks = tokio::task::JoinSet::new();
        for (id, endpoint) in &others {
            let (transport, me, id, endpoint) = (transport.clone(), me.clone(), *id, endpoint.clone());
            asks.spawn(async move { (id, transport.hello(id, &endpoint, &me, HELLO_TIMEOUT).await) });
        }
        let mut answers = Vec::new();
        while let Some(done) = asks.join_next().await {
            match done {
                Ok((_, Ok(hello))) => {
                    node.saw_hello(hello.clone());
                    answers.push(hello);
                }
                Ok((id, Err(why))) => tracing::debug!(voter = id, %why, "no Hello from a configured voter"),
                Err(_) => {}
            }
        }
        if !initialized {
            match decide_bootstrap(&me, &configured, &answers) {
                BootstrapDecision::Initialize(members)
                    if members.len() < configured.len()
                        && majority_since.get_or_insert_with(tokio::time::Instant::now).elapsed()
                            < ALL_VOTERS_GRACE =>
                {
                    tracing::debug!(
                        answered = members.len(),
                        voters = configured.len(),
                        "waiting for every configured voter before initializing"
                    );
                }
                BootstrapDecision::Initialize(members) => {
                    let keys: Vec<String> = members.keys().map(|k| k.to_string()).collect();
                    match node.quorum.initialize(members).await {
                        Ok(()) => {
                            tracing::info!(voters = ?keys, "initialized the controller quorum");
                            initialized = true;
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot initialize the controller quorum"),
                    }
                }
                decision => tracing::debug!(?decision, "bootstrap"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(HELLO_INTERVAL) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// Watches the applied image for the cluster id; once there, writes it to
/// `meta.properties` (with this node's directory id) and reports it in Hello. A
/// `meta.properties` that names another cluster fails the node.
pub async fn learn_cluster_id(
    node: Arc<NodeState>,
    identity: Identity,
    config: ControllerNodeConfig,
    failed: watch::Sender<Option<String>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut written = false;
    loop {
        if !written {
            if let Some(id) = node.quorum.with_applied(|a| a.image.cluster_id.clone()) {
                match record_cluster_id(&identity, &id) {
                    Ok(()) => {
                        tracing::info!(cluster_id = %id, node_id = config.node_id, "cluster id learned from the quorum");
                        node.set_cluster_id(id);
                        written = true;
                    }
                    Err(why) => {
                        tracing::error!("{why}");
                        let _ = failed.send(Some(why));
                        return;
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(CLUSTER_ID_POLL) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// Writes `meta.properties` for the cluster `id`, unless it already names it; refuses one
/// that names another cluster.
fn record_cluster_id(identity: &Identity, id: &str) -> Result<(), String> {
    let path = identity.dir.join(meta_properties::FILE_NAME);
    match meta_properties::read(&identity.dir).map_err(|e| e.to_string())? {
        Stored::Complete(m) if m.cluster_id == id => return Ok(()),
        Stored::Complete(MetaProperties { cluster_id: found, .. }) | Stored::Legacy { cluster_id: found, .. }
            if found != id =>
        {
            return Err(format!(
                "{} names cluster {found}, but the controller quorum's cluster is {id}; give this node an empty \
                 metadata.log.dir to join cluster {id}",
                path.display()
            ))
        }
        _ => {}
    }
    let meta =
        MetaProperties { cluster_id: id.to_string(), node_id: identity.node_id, directory_id: identity.directory_id };
    meta_properties::write(&identity.dir, &meta).map_err(|e| e.to_string())?;
    match std::fs::remove_file(identity.dir.join(PENDING_DIRECTORY_ID)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", identity.dir.join(PENDING_DIRECTORY_ID).display())),
    }
}
