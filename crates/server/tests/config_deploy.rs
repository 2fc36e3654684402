//! The sample configuration shipped in `deploy/` must stay valid as keys evolve.

use osprey_server::config::parse_cli;
use std::path::PathBuf;

#[test]
fn deploy_server_properties_parses_with_no_unknown_keys() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/server.properties");
    let (config, unknown) =
        parse_cli(["osprey", path.to_str().expect("utf-8 path")]).expect("deploy/server.properties is valid");
    assert!(unknown.is_empty(), "unknown keys in deploy/server.properties: {unknown:?}");
    assert_eq!(config.node_id, 1);
    assert_eq!(config.num_partitions, 3);
    assert!(!config.auto_create_topics_enable);
    assert_eq!(config.flush_interval_messages, None, "the sample keeps fsync-before-ack");
}
