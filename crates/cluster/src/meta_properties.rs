//! `meta.properties` in the data directory: the cluster id and node id this directory
//! belongs to, as Kafka keeps them, so a directory is never served by the wrong node.

use std::io;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
}

impl MetaProperties {
    /// Reads the file in `dir`, or creates it with a new random cluster id. A directory
    /// that belongs to another node id is an error: serving it would mix two nodes' data.
    pub fn load_or_create(dir: &Path, node_id: i32) -> io::Result<MetaProperties> {
        let path = dir.join("meta.properties");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let get = |key: &str| {
                    text.lines()
                        .filter_map(|l| l.split_once('='))
                        .find(|(k, _)| k.trim() == key)
                        .map(|(_, v)| v.trim().to_string())
                };
                let cluster_id = get("cluster.id").ok_or_else(|| invalid(&path, "has no cluster.id"))?;
                let stored: i32 = get("node.id")
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| invalid(&path, "has no valid node.id"))?;
                if stored != node_id {
                    return Err(invalid(
                        &path,
                        &format!("belongs to node.id={stored} but this broker is node.id={node_id}; use that node id or another log.dirs"),
                    ));
                }
                Ok(MetaProperties { cluster_id, node_id })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let meta = MetaProperties { cluster_id: new_cluster_id()?, node_id };
                let tmp = dir.join("meta.properties.tmp");
                std::fs::write(
                    &tmp,
                    format!(
                        "# Written by osprey. Do not edit.\nversion=1\ncluster.id={}\nnode.id={}\n",
                        meta.cluster_id, node_id
                    ),
                )?;
                std::fs::File::open(&tmp)?.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                std::fs::File::open(dir)?.sync_all()?;
                Ok(meta)
            }
            Err(e) => Err(e),
        }
    }
}

fn invalid(path: &Path, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{} {what}", path.display()))
}

/// A random id printed as Kafka prints cluster ids (URL-safe base64 of 16 bytes).
fn new_cluster_id() -> io::Result<String> {
    Ok(crate::controller::random_uuid()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_read_back_and_node_id_checked() {
        let dir = std::env::temp_dir().join(format!("osprey-meta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = MetaProperties::load_or_create(&dir, 1).unwrap();
        assert_eq!(a.cluster_id.len(), 22);
        let b = MetaProperties::load_or_create(&dir, 1).unwrap();
        assert_eq!(a, b);
        let err = MetaProperties::load_or_create(&dir, 2).unwrap_err();
        assert!(err.to_string().contains("node.id=1"), "{err}");
    }
}
