//! `meta.properties` in every log directory and in `metadata.log.dir`: the cluster id and
//! node id the directory belongs to and the directory's own id, as Kafka 4.4 keeps them
//! (`MetaProperties` v1 with `directory.id`, KIP-858), so a directory is never served by
//! the wrong node or joined to the wrong cluster.
//!
//! The file is Kafka's: `version=1`, `cluster.id`, `node.id`, `directory.id`, written as
//! `Properties.store` writes it on Kafka's JDK 17 (a blank comment, a comment line, then
//! the keys in hash order: `node.id`, `directory.id`, `version`, `cluster.id`), through a
//! temporary file that is fsynced and renamed, then the directory fsynced. A directory
//! written by Kafka's `kafka-storage.sh format` is read as is, and one written by
//! `osprey format` is readable by Kafka.
//!
//! [`ensure`] is what start-up calls (no format step is ever required: a directory without
//! the file gets one); [`format`] is `osprey format`, `kafka-storage.sh format`'s twin.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use osprey_protocol::Uuid;

/// The file's name in each directory.
pub const FILE_NAME: &str = "meta.properties";

/// The one version Kafka's KRaft mode reads and writes.
const VERSION: u32 = 1;

/// What one directory's `meta.properties` says (version 1, complete).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// The cluster the directory belongs to: Kafka's 22-character base64 id.
    pub cluster_id: String,
    /// The node that owns the directory.
    pub node_id: i32,
    /// This directory's own random id (KIP-858), created with the file and kept.
    pub directory_id: Uuid,
}

impl MetaProperties {
    /// The file's text, as Kafka writes it (see the module doc for the key order).
    pub fn to_file_text(&self) -> String {
        format!(
            "#\n#Written by osprey\nnode.id={}\ndirectory.id={}\nversion={VERSION}\ncluster.id={}\n",
            self.node_id, self.directory_id, self.cluster_id
        )
    }

    /// The pre-0.1 fields alone (`cluster.id` and `node.id`), for the error messages that
    /// compare two directories.
    fn owner(&self) -> (&str, i32) {
        (&self.cluster_id, self.node_id)
    }
}

/// One directory as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// No `meta.properties` (or no directory yet).
    Empty,
    /// A complete version-1 file.
    Complete(MetaProperties),
    /// A file Osprey wrote before directory ids (no `directory.id`, perhaps no
    /// `version`): the cluster and node are known and the file is rewritten complete.
    Legacy {
        /// `cluster.id`.
        cluster_id: String,
        /// `node.id`.
        node_id: i32,
        /// A `directory.id` found without `version`: kept by the upgrade.
        directory_id: Option<Uuid>,
    },
}

/// Why a set of directories cannot be used (or formatted).
#[derive(Debug, thiserror::Error)]
pub enum MetaPropertiesError {
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A file that is not a meta.properties Osprey or Kafka's KRaft mode can use.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A directory of another cluster.
    #[error(
        "{} belongs to cluster {found}, but this node is in cluster {expected}; \
         give this node a directory of cluster {expected}, or empty this one if its data is no longer needed",
        path.display()
    )]
    OtherCluster {
        /// The file.
        path: PathBuf,
        /// The cluster id the node uses (another directory's, or the one asked for).
        expected: String,
        /// The cluster id in the file.
        found: String,
    },
    /// A directory of another node.
    #[error(
        "{} belongs to node.id={found} but this node is node.id={expected}; if you moved your data, set \
         node.id={found}; to make a new node, use empty directories",
        path.display()
    )]
    OtherNode {
        /// The file.
        path: PathBuf,
        /// This node's `node.id`.
        expected: i32,
        /// The node id in the file.
        found: i32,
    },
    /// Two directories with the same directory id (one was copied from the other).
    #[error(
        "{} and {} have the same directory.id {id}; one was copied from the other: remove meta.properties from the copy",
        first.display(),
        second.display()
    )]
    DuplicateDirectoryId {
        /// One directory.
        first: PathBuf,
        /// The other.
        second: PathBuf,
        /// The shared id.
        id: Uuid,
    },
    /// `osprey format` on a formatted directory without `--ignore-formatted`.
    #[error(
        "Log directory {} is already formatted. Use --ignore-formatted to ignore this directory and format the others.",
        path.display()
    )]
    AlreadyFormatted {
        /// The directory.
        path: PathBuf,
    },
    /// A cluster id that is not a Kafka UUID.
    #[error("Cluster ID string {0} does not appear to be a valid UUID: use `osprey random-uuid` to make one")]
    BadClusterId(String),
    /// No randomness from the OS.
    #[error("cannot generate a random id: {0}")]
    Random(String),
}

/// Reads `dir/meta.properties`.
pub fn read(dir: &Path) -> Result<Stored, MetaPropertiesError> {
    let path = dir.join(FILE_NAME);
    let text = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Stored::Empty),
        Err(source) => return Err(MetaPropertiesError::Io { path, source }),
    };
    // Kafka reads the file as ISO-8859-1; every value it holds is ASCII.
    let text: String = text.iter().map(|&b| char::from(b)).collect();
    parse(&text).map_err(|message| MetaPropertiesError::Invalid { path, message })
}

/// Parses the text of a `meta.properties` file.
pub fn parse(text: &str) -> Result<Stored, String> {
    let get = |key: &str| {
        text.lines()
            .map(str::trim_start)
            .filter(|l| !l.starts_with('#') && !l.starts_with('!'))
            .filter_map(|l| l.split_once(['=', ':']))
            .filter(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().to_string())
            .next_back()
    };
    let version = get("version");
    if let Some(v) = &version {
        if v != "1" {
            return Err(format!(
                "version={v}: only version 1 (KRaft) is supported; version 0 is a ZooKeeper-mode Kafka directory, \
                 which Kafka 4 no longer reads either"
            ));
        }
    }
    let cluster_id = get("cluster.id").filter(|c| !c.is_empty()).ok_or("has no cluster.id")?;
    let node_id = match get("node.id") {
        Some(n) => n.parse::<i32>().map_err(|_| format!("node.id={n} is not a base-10 number"))?,
        None if get("broker.id").is_some() => {
            return Err("has broker.id but no node.id: a ZooKeeper-mode Kafka directory, which Kafka 4 \
                        no longer reads either"
                .into())
        }
        None => return Err("has no node.id".into()),
    };
    let directory_id = match get("directory.id") {
        Some(id) => {
            let directory_id = parse_uuid(&id).ok_or_else(|| format!("directory.id={id} is not a UUID"))?;
            if is_reserved_directory_id(directory_id) {
                return Err(format!("directory.id={id} is one of Kafka's reserved directory ids"));
            }
            Some(directory_id)
        }
        None => None,
    };
    match (version, directory_id) {
        (Some(_), Some(directory_id)) => Ok(Stored::Complete(MetaProperties { cluster_id, node_id, directory_id })),
        _ => Ok(Stored::Legacy { cluster_id, node_id, directory_id }),
    }
}

/// What [`ensure`] found and did in each directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// The cluster id every directory now holds.
    pub cluster_id: String,
    /// Each directory (in the order given) and its properties.
    pub dirs: Vec<(PathBuf, MetaProperties)>,
    /// Directories that had no `meta.properties` and were given one.
    pub created: Vec<PathBuf>,
    /// Directories whose old Osprey `meta.properties` was upgraded in place.
    pub upgraded: Vec<PathBuf>,
}

/// At start-up: checks that every directory (`log.dirs` and `metadata.log.dir`, each
/// once) belongs to this node and to one cluster, and gives each one without a
/// `meta.properties` a new one (no format step is needed), upgrading old Osprey files
/// in place. `cluster_id`: the cluster this node must be in, when known (from the
/// quorum); otherwise the directories' own, or a new random one when all are empty.
/// Checks happen before anything is written, so a refused start changes nothing.
pub fn ensure(dirs: &[PathBuf], node_id: i32, cluster_id: Option<&str>) -> Result<Ensured, MetaPropertiesError> {
    let found = distinct(dirs).iter().map(|d| read(d).map(|s| (d.clone(), s))).collect::<Result<Vec<_>, _>>()?;
    let agreed = check_owners(&found, node_id, cluster_id)?;
    let cluster_id = match agreed {
        Some(id) => id,
        None => random_uuid()?.to_string(),
    };
    let mut taken: Vec<(PathBuf, Uuid)> = Vec::new();
    for (dir, stored) in &found {
        let id = match stored {
            Stored::Complete(meta) => meta.directory_id,
            Stored::Legacy { directory_id: Some(id), .. } => *id,
            _ => continue,
        };
        if let Some((first, _)) = taken.iter().find(|(_, t)| *t == id) {
            return Err(MetaPropertiesError::DuplicateDirectoryId { first: first.clone(), second: dir.clone(), id });
        }
        taken.push((dir.clone(), id));
    }
    let mut out =
        Ensured { cluster_id: cluster_id.clone(), dirs: Vec::new(), created: Vec::new(), upgraded: Vec::new() };
    for (dir, stored) in found {
        let meta = match stored {
            Stored::Complete(meta) => meta,
            Stored::Empty | Stored::Legacy { .. } => {
                let directory_id = match stored {
                    Stored::Legacy { directory_id: Some(id), .. } => id,
                    _ => {
                        let id = new_directory_id(&taken)?;
                        taken.push((dir.clone(), id));
                        id
                    }
                };
                let meta = MetaProperties { cluster_id: cluster_id.clone(), node_id, directory_id };
                write(&dir, &meta)?;
                if stored == Stored::Empty {
                    out.created.push(dir.clone());
                } else {
                    out.upgraded.push(dir.clone());
                }
                meta
            }
        };
        out.dirs.push((dir, meta));
    }
    Ok(out)
}

/// What `osprey format` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Formatted {
    /// Directories given a new `meta.properties`.
    pub written: Vec<(PathBuf, MetaProperties)>,
    /// Directories left as they were (already formatted, `--ignore-formatted`).
    pub skipped: Vec<PathBuf>,
}

/// `osprey format --cluster-id ID`, as `kafka-storage.sh format`: writes `meta.properties`
/// into every directory that has none. A formatted directory is an error unless
/// `ignore_formatted`, and is never rewritten; one of another cluster or node is always
/// an error.
pub fn format(
    dirs: &[PathBuf],
    node_id: i32,
    cluster_id: &str,
    ignore_formatted: bool,
) -> Result<Formatted, MetaPropertiesError> {
    if parse_uuid(cluster_id).is_none() {
        return Err(MetaPropertiesError::BadClusterId(cluster_id.to_string()));
    }
    let found = distinct(dirs).iter().map(|d| read(d).map(|s| (d.clone(), s))).collect::<Result<Vec<_>, _>>()?;
    check_owners(&found, node_id, Some(cluster_id))?;
    if let Some((dir, _)) = found.iter().find(|(_, s)| *s != Stored::Empty) {
        if !ignore_formatted {
            return Err(MetaPropertiesError::AlreadyFormatted { path: dir.clone() });
        }
    }
    let mut taken: Vec<(PathBuf, Uuid)> = found
        .iter()
        .filter_map(|(d, s)| match s {
            Stored::Complete(m) => Some((d.clone(), m.directory_id)),
            Stored::Legacy { directory_id, .. } => directory_id.map(|id| (d.clone(), id)),
            Stored::Empty => None,
        })
        .collect();
    let mut out = Formatted { written: Vec::new(), skipped: Vec::new() };
    for (dir, stored) in found {
        if stored != Stored::Empty {
            out.skipped.push(dir);
            continue;
        }
        let directory_id = new_directory_id(&taken)?;
        taken.push((dir.clone(), directory_id));
        let meta = MetaProperties { cluster_id: cluster_id.to_string(), node_id, directory_id };
        write(&dir, &meta)?;
        out.written.push((dir, meta));
    }
    Ok(out)
}

/// `dirs` without repeats (`metadata.log.dir` is usually the first of `log.dirs`).
fn distinct(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if !out.contains(d) {
            out.push(d.clone());
        }
    }
    out
}

/// Every stored file must name `node_id`, and all must name one cluster (`expected` if
/// given). Returns that cluster id, if any directory had one.
fn check_owners(
    found: &[(PathBuf, Stored)],
    node_id: i32,
    expected: Option<&str>,
) -> Result<Option<String>, MetaPropertiesError> {
    let mut cluster: Option<String> = expected.map(str::to_string);
    for (dir, stored) in found {
        let (cluster_id, stored_node) = match stored {
            Stored::Empty => continue,
            Stored::Complete(meta) => meta.owner(),
            Stored::Legacy { cluster_id, node_id, .. } => (cluster_id.as_str(), *node_id),
        };
        let path = dir.join(FILE_NAME);
        if stored_node != node_id {
            return Err(MetaPropertiesError::OtherNode { path, expected: node_id, found: stored_node });
        }
        match &cluster {
            Some(c) if c != cluster_id => {
                return Err(MetaPropertiesError::OtherCluster {
                    path,
                    expected: c.clone(),
                    found: cluster_id.to_string(),
                })
            }
            Some(_) => {}
            None => cluster = Some(cluster_id.to_string()),
        }
    }
    Ok(cluster)
}

/// Writes `dir/meta.properties` so that a crash leaves the old file or the new one, never
/// a torn one: a temporary file, fsync, rename over, fsync of the directory.
pub fn write(dir: &Path, meta: &MetaProperties) -> Result<(), MetaPropertiesError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MetaPropertiesError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    let path = dir.join(FILE_NAME);
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        file.write_all(meta.to_file_text().as_bytes()).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))?;
    // Read back what was written: the pair of the check above (STYLE: assert in pairs).
    match read(dir)? {
        Stored::Complete(back) if back == *meta => Ok(()),
        other => Err(MetaPropertiesError::Invalid { path, message: format!("reads back as {other:?}, not {meta:?}") }),
    }
}

/// A random id as Kafka's `Uuid.randomUuid` makes one: a version-4 UUID whose text does
/// not start with `-` (a command line would take it for an option).
pub fn random_uuid() -> Result<Uuid, MetaPropertiesError> {
    loop {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).map_err(|e| MetaPropertiesError::Random(e.to_string()))?;
        id[6] = (id[6] & 0x0f) | 0x40;
        id[8] = (id[8] & 0x3f) | 0x80;
        let id = Uuid(id);
        if !id.to_string().starts_with('-') {
            return Ok(id);
        }
    }
}

/// A directory id not reserved by Kafka and not used by another directory of this node.
fn new_directory_id(taken: &[(PathBuf, Uuid)]) -> Result<Uuid, MetaPropertiesError> {
    loop {
        let id = random_uuid()?;
        if !is_reserved_directory_id(id) && !taken.iter().any(|(_, t)| *t == id) {
            return Ok(id);
        }
    }
}

/// Kafka's `DirectoryId.reserved`: the first 64 bits zero and the rest below 100
/// (UNASSIGNED, LOST, MIGRATING and room for more).
fn is_reserved_directory_id(id: Uuid) -> bool {
    let (high, low) = id.0.split_at(8);
    high.iter().all(|&b| b == 0) && u64::from_be_bytes(low.try_into().unwrap_or([0xff; 8])) < 100
}

/// Parses Kafka's text form of a UUID: 22 characters of URL-safe base64, no padding.
pub fn parse_uuid(text: &str) -> Option<Uuid> {
    let text = text.as_bytes();
    if text.len() != 22 {
        return None;
    }
    let mut bits: u32 = 0;
    let mut n = 0;
    let mut out = [0u8; 16];
    let mut i = 0;
    for &c in text {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            if i == 16 {
                return None;
            }
            out[i] = (bits >> n) as u8;
            i += 1;
        }
    }
    // 22 characters carry 132 bits: the last 4 must be zero, as Java's decoder insists.
    (i == 16 && bits & ((1 << n) - 1) == 0).then_some(Uuid(out))
}

impl fmt::Display for Stored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stored::Empty => f.write_str("no meta.properties"),
            Stored::Complete(m) => {
                write!(f, "cluster.id={} node.id={} directory.id={}", m.cluster_id, m.node_id, m.directory_id)
            }
            Stored::Legacy { cluster_id, node_id, .. } => write!(f, "cluster.id={cluster_id} node.id={node_id} (old)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("osprey-meta-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn sub(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn stored(dir: &Path) -> MetaProperties {
        match read(dir).unwrap() {
            Stored::Complete(m) => m,
            other => panic!("{}: {other:?}", dir.display()),
        }
    }

    #[test]
    fn first_start_writes_one_cluster_id_and_a_directory_id_per_directory() {
        let t = TempDir::new("first");
        let dirs = [t.sub("a"), t.sub("b"), t.sub("meta")];
        let e = ensure(&dirs, 3, None).unwrap();
        assert_eq!(e.created, dirs);
        assert_eq!(e.cluster_id.len(), 22);
        let metas: Vec<MetaProperties> = dirs.iter().map(|d| stored(d)).collect();
        assert!(metas.iter().all(|m| m.cluster_id == e.cluster_id && m.node_id == 3));
        assert_ne!(metas[0].directory_id, metas[1].directory_id);
        assert_ne!(metas[1].directory_id, metas[2].directory_id);
        assert_ne!(metas[0].directory_id, metas[2].directory_id);
    }

    #[test]
    fn ids_are_kept_across_starts() {
        let t = TempDir::new("kept");
        let dirs = [t.sub("a"), t.sub("b")];
        let first = ensure(&dirs, 1, None).unwrap();
        let second = ensure(&dirs, 1, None).unwrap();
        assert_eq!(first.dirs, second.dirs);
        assert!(second.created.is_empty() && second.upgraded.is_empty());
    }

    #[test]
    fn a_new_directory_joins_the_cluster_of_the_others() {
        let t = TempDir::new("join");
        let first = ensure(&[t.sub("a")], 1, None).unwrap();
        let second = ensure(&[t.sub("a"), t.sub("b")], 1, None).unwrap();
        assert_eq!(second.created, [t.sub("b")]);
        assert_eq!(stored(&t.sub("b")).cluster_id, first.cluster_id);
    }

    #[test]
    fn a_directory_of_another_node_is_refused_naming_both_ids() {
        let t = TempDir::new("node");
        ensure(&[t.sub("a")], 1, None).unwrap();
        let err = ensure(&[t.sub("a")], 2, None).unwrap_err();
        assert!(matches!(err, MetaPropertiesError::OtherNode { expected: 2, found: 1, .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("node.id=1") && text.contains("node.id=2"), "{text}");
    }

    #[test]
    fn a_directory_of_another_cluster_is_refused_naming_both_ids_and_nothing_is_written() {
        let t = TempDir::new("cluster");
        let a = ensure(&[t.sub("a")], 1, None).unwrap().cluster_id;
        let b = ensure(&[t.sub("b")], 1, None).unwrap().cluster_id;
        let err = ensure(&[t.sub("a"), t.sub("b"), t.sub("c")], 1, None).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&a) && text.contains(&b), "{text}");
        assert_eq!(read(&t.sub("c")).unwrap(), Stored::Empty, "a refused start writes nothing");
        let err = ensure(&[t.sub("a")], 1, Some(&b)).unwrap_err();
        assert!(
            matches!(&err, MetaPropertiesError::OtherCluster { expected, found, .. } if *expected == b && *found == a)
        );
    }

    #[test]
    fn an_old_osprey_file_is_upgraded_in_place_keeping_its_ids() {
        for old in [
            "version=1\ncluster.id=Gx6yo2ctTU2nUtxsNaTT-w\nnode.id=4\n",
            "cluster.id=Gx6yo2ctTU2nUtxsNaTT-w\nnode.id=4\n",
        ] {
            let t = TempDir::new("upgrade");
            std::fs::create_dir_all(t.sub("a")).unwrap();
            std::fs::write(t.sub("a").join(FILE_NAME), format!("# Written by osprey. Do not edit.\n{old}")).unwrap();
            let e = ensure(&[t.sub("a")], 4, None).unwrap();
            assert_eq!(e.upgraded, [t.sub("a")]);
            let m = stored(&t.sub("a"));
            assert_eq!((m.cluster_id.as_str(), m.node_id), ("Gx6yo2ctTU2nUtxsNaTT-w", 4));
            assert!(!t.sub("a").join("meta.properties.tmp").exists());
            assert_eq!(ensure(&[t.sub("a")], 4, None).unwrap().dirs[0].1, m, "the new directory id is kept");
        }
    }

    #[test]
    fn a_directory_id_without_a_version_is_kept_by_the_upgrade() {
        let t = TempDir::new("keepid");
        std::fs::create_dir_all(t.sub("a")).unwrap();
        let old = "cluster.id=Gx6yo2ctTU2nUtxsNaTT-w\nnode.id=4\ndirectory.id=q2QEQBBdQIm2b8eNQfN5Dg\n";
        std::fs::write(t.sub("a").join(FILE_NAME), old).unwrap();
        assert_eq!(ensure(&[t.sub("a")], 4, None).unwrap().upgraded, [t.sub("a")]);
        assert_eq!(stored(&t.sub("a")).directory_id.to_string(), "q2QEQBBdQIm2b8eNQfN5Dg");
    }

    #[test]
    fn kafka_written_files_are_read_and_ours_are_kafkas_format() {
        // As kafka-storage.sh format writes it on JDK 17.
        let kafka = "#\n#Tue Dec 01 08:03:13 UTC 2026\nnode.id=1\ndirectory.id=q2QEQBBdQIm2b8eNQfN5Dg\nversion=1\n\
                     cluster.id=MkU3OEVBNTcwNTJENDM2Qg\n";
        let Stored::Complete(m) = parse(kafka).unwrap() else { panic!("not complete") };
        assert_eq!((m.cluster_id.as_str(), m.node_id), ("MkU3OEVBNTcwNTJENDM2Qg", 1));
        assert_eq!(m.directory_id.to_string(), "q2QEQBBdQIm2b8eNQfN5Dg");
        let ours = m.to_file_text();
        let keys: Vec<&str> =
            ours.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
        assert_eq!(keys, ["node.id", "directory.id", "version", "cluster.id"]);
        assert_eq!(parse(&ours).unwrap(), Stored::Complete(m));
    }

    #[test]
    fn zookeeper_era_and_broken_files_are_refused() {
        assert!(parse("version=0\nbroker.id=1\ncluster.id=x\n").unwrap_err().contains("version 0"));
        assert!(parse("broker.id=1\ncluster.id=x\n").unwrap_err().contains("broker.id"));
        assert!(parse("version=1\nnode.id=1\n").unwrap_err().contains("cluster.id"));
        assert!(parse("version=1\ncluster.id=x\nnode.id=one\n").unwrap_err().contains("node.id"));
        assert!(parse("version=1\ncluster.id=x\nnode.id=1\ndirectory.id=nope\n").unwrap_err().contains("directory.id"));
        assert!(parse("version=1\ncluster.id=x\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\n")
            .unwrap_err()
            .contains("reserved"));
    }

    #[test]
    fn a_copied_directory_is_refused() {
        let t = TempDir::new("copy");
        ensure(&[t.sub("a")], 1, None).unwrap();
        std::fs::create_dir_all(t.sub("b")).unwrap();
        std::fs::copy(t.sub("a").join(FILE_NAME), t.sub("b").join(FILE_NAME)).unwrap();
        let err = ensure(&[t.sub("a"), t.sub("b")], 1, None).unwrap_err();
        assert!(matches!(err, MetaPropertiesError::DuplicateDirectoryId { .. }), "{err}");
    }

    #[test]
    fn format_writes_empty_directories_and_refuses_formatted_ones_unless_told() {
        let t = TempDir::new("format");
        let id = random_uuid().unwrap().to_string();
        let done = format(&[t.sub("a")], 2, &id, false).unwrap();
        assert_eq!(done.written.len(), 1);
        let err = format(&[t.sub("a"), t.sub("b")], 2, &id, false).unwrap_err();
        assert!(matches!(&err, MetaPropertiesError::AlreadyFormatted { path } if *path == t.sub("a")), "{err}");
        assert_eq!(read(&t.sub("b")).unwrap(), Stored::Empty);
        let done = format(&[t.sub("a"), t.sub("b")], 2, &id, true).unwrap();
        assert_eq!((done.skipped, done.written.len()), (vec![t.sub("a")], 1));
        assert_eq!(ensure(&[t.sub("a"), t.sub("b")], 2, None).unwrap().cluster_id, id);
        let other = random_uuid().unwrap().to_string();
        let err = format(&[t.sub("a")], 2, &other, true).unwrap_err();
        assert!(matches!(err, MetaPropertiesError::OtherCluster { .. }), "{err}");
        assert!(matches!(format(&[t.sub("c")], 2, "not-a-uuid", false), Err(MetaPropertiesError::BadClusterId(_))));
    }

    #[test]
    fn uuids_round_trip_through_kafkas_text_form() {
        for _ in 0..100 {
            let id = random_uuid().unwrap();
            assert_eq!(parse_uuid(&id.to_string()), Some(id));
            assert!(!id.to_string().starts_with('-'));
        }
        assert_eq!(parse_uuid("AAAAAAAAAAAAAAAAAAAAAQ"), Some(Uuid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])));
        assert_eq!(parse_uuid("AAAAAAAAAAAAAAAAAAAAAB"), None, "non-zero trailing bits");
        assert_eq!(parse_uuid("AAAAAAAAAAAAAAAAAAAAA"), None);
        assert_eq!(parse_uuid("AAAAAAAAAAAAAAAAAAAA+Q"), None);
    }
}
