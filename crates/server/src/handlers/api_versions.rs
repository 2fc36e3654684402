//! ApiVersions: the truthful table of what this broker serves (see `supported.rs`), and
//! from v3 the features (KIP-584) with the levels this broker implements; among them
//! `transaction.version`, which tells clients whether to use transaction version 2
//! (KIP-890 part 2), `share.version`, whether share groups (KIP-932) are on, and
//! `streams.version`, whether streams groups (KIP-1071) are.

use crate::broker::Broker;
use crate::supported::{advertised_at, ADVERTISED, MAX_SHARE_VERSION, MAX_STREAMS_VERSION, MAX_TRANSACTION_VERSION};
use osprey_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use osprey_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};

/// The epoch of the finalized features: they change only with the broker's configuration.
const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// `metadata.version` 4.2-IV1: the Kafka release whose client APIs this broker serves.
const METADATA_VERSION_4_2_IV1: i16 = 29;

/// A feature (KIP-584) as this broker reports it: the levels it can run at and the level
/// it runs at. Kafka 4.4 reports these seven; a feature at level 0 is one whose
/// protocol this broker does not implement.
struct Feature {
    name: &'static str,
    min: i16,
    max: i16,
    finalized: i16,
}

fn features(transaction_version: i16, share_version: i16, streams_version: i16) -> [Feature; 7] {
    let fixed = |name, level| Feature { name, min: level, max: level, finalized: level };
    [
        fixed("metadata.version", METADATA_VERSION_4_2_IV1),
        // The cluster metadata is this node's own log, not a KRaft quorum.
        fixed("kraft.version", 0),
        // The KIP-848 consumer group protocol.
        fixed("group.version", 1),
        // `osprey.transaction.version` picks 1 or 2 (KIP-890).
        Feature { name: "transaction.version", min: 1, max: MAX_TRANSACTION_VERSION, finalized: transaction_version },
        // Eligible leader replicas (KIP-966), on as in a new Kafka 4.4 cluster.
        Feature { name: "eligible.leader.replicas.version", min: 0, max: 1, finalized: 1 },
        // `osprey.share.version` turns share groups (KIP-932) on (1), with dead-letter
        // queues (KIP-1191, 2), or off (0).
        Feature { name: "share.version", min: 0, max: MAX_SHARE_VERSION, finalized: share_version },
        // `osprey.streams.version` turns streams groups (KIP-1071) on (1) or off (0).
        Feature { name: "streams.version", min: 0, max: MAX_STREAMS_VERSION, finalized: streams_version },
    ]
}

fn table(transaction_version: i16) -> Vec<ApiVersion> {
    ADVERTISED
        .iter()
        .filter_map(|&(key, _, _)| {
            let (min, max) = advertised_at(key, transaction_version)?;
            Some(ApiVersion { api_key: key as i16, min_version: min, max_version: max, ..Default::default() })
        })
        .collect()
}

pub fn handle(broker: &Broker, req: &ApiVersionsRequest, version: i16) -> ResponseBody {
    if version >= 3
        && !(software_name_or_version_ok(&req.client_software_name)
            && software_name_or_version_ok(&req.client_software_version))
    {
        crate::telemetry::error_code(ApiKey::ApiVersions, ErrorCode::INVALID_REQUEST);
        return invalid_request(
            "client_software_name or client_software_version is empty or not [a-zA-Z0-9][a-zA-Z0-9.-]*[a-zA-Z0-9]",
        );
    }
    if version >= 5 {
        if let Err(code) = check_addressee(broker, req) {
            crate::telemetry::error_code(ApiKey::ApiVersions, code);
            return ResponseBody::ApiVersions(ApiVersionsResponse { error_code: code.code(), ..Default::default() });
        }
    }
    let transaction_version = broker.settings.transaction_version;
    let config = &broker.settings.config;
    let features = features(transaction_version, config.share_version, config.streams_version);
    ResponseBody::ApiVersions(ApiVersionsResponse {
        api_keys: table(transaction_version),
        // Before v4 a supported range starting at 0 broke clients (KAFKA-17011), so
        // Kafka leaves those features out for them; so does this broker.
        supported_features: features
            .iter()
            .filter(|f| version >= 4 || f.min > 0)
            .map(|f| SupportedFeatureKey {
                name: f.name.into(),
                min_version: f.min,
                max_version: f.max,
                ..Default::default()
            })
            .collect(),
        finalized_features_epoch: FINALIZED_FEATURES_EPOCH,
        // Level 0 is "not finalized": Kafka lists only features above it.
        finalized_features: features
            .iter()
            .filter(|f| f.finalized > 0)
            .map(|f| FinalizedFeatureKey {
                name: f.name.into(),
                max_version_level: f.finalized,
                min_version_level: f.finalized,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// Kafka's `ApiVersionsRequest.isValid` (v3+): the client's software name and version
/// each match `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`, so an empty one is refused
/// with INVALID_REQUEST, as Kafka 4.4 answers.
fn software_name_or_version_ok(s: &str) -> bool {
    let bytes = s.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else { return false };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
}

/// v5: a client that names the cluster and node it means to reach (both or neither)
/// must have reached them; otherwise it is told to bootstrap again, as Kafka 4.4 does.
fn check_addressee(broker: &Broker, req: &ApiVersionsRequest) -> Result<(), ErrorCode> {
    match (&req.cluster_id, req.node_id) {
        (None, -1) => Ok(()),
        (None, _) | (Some(_), -1) => Err(ErrorCode::INVALID_REQUEST),
        (Some(cluster_id), node_id) if *cluster_id != broker.cluster_id || node_id != broker.settings.node_id => {
            Err(ErrorCode::REBOOTSTRAP_REQUIRED)
        }
        (Some(_), _) => Ok(()),
    }
}

/// KIP-511: the client asked a version we do not know. Answered in v0 with our ranges.
pub fn unsupported_version(broker: &Broker) -> ResponseBody {
    ResponseBody::ApiVersions(ApiVersionsResponse {
        error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
        api_keys: table(broker.settings.transaction_version),
        ..Default::default()
    })
}

/// A request of a known version that did not parse (e.g. a bad client software name).
pub fn invalid_request(why: &str) -> ResponseBody {
    tracing::debug!(reason = why, "malformed ApiVersions request");
    ResponseBody::ApiVersions(ApiVersionsResponse {
        error_code: ErrorCode::INVALID_REQUEST.code(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::software_name_or_version_ok as ok;
    use super::*;
    use crate::test_support::broker_with_config;

    /// `share.version` is supported from 0 to 2 and finalized at `osprey.share.version`
    /// (listed only above 0); the share-group APIs are listed either way, as Kafka lists them.
    #[test]
    fn share_version_is_finalized_at_the_configured_level() {
        for level in [0, 1, 2] {
            let (broker, dir) = broker_with_config(&format!("api-versions-share-{level}"), |c| c.share_version = level);
            let req = ApiVersionsRequest {
                client_software_name: "test".into(),
                client_software_version: "1".into(),
                ..Default::default()
            };
            let ResponseBody::ApiVersions(resp) = handle(&broker, &req, 4) else { panic!() };
            let supported = resp.supported_features.iter().find(|f| f.name == "share.version").unwrap();
            assert_eq!((supported.min_version, supported.max_version), (0, 2));
            let finalized = resp.finalized_features.iter().find(|f| f.name == "share.version");
            assert_eq!(finalized.map(|f| f.max_version_level), (level > 0).then_some(level));
            let heartbeat = resp.api_keys.iter().find(|k| k.api_key == ApiKey::ShareGroupHeartbeat as i16).unwrap();
            assert_eq!((heartbeat.min_version, heartbeat.max_version), (1, 1));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// `streams.version` likewise: supported 0 to 1, finalized at `osprey.streams.version`
    /// (1, as a new Kafka 4.4 cluster), listed only above 0.
    #[test]
    fn streams_version_is_finalized_at_the_configured_level() {
        for level in [0, 1] {
            let (broker, dir) =
                broker_with_config(&format!("api-versions-streams-{level}"), |c| c.streams_version = level);
            let req = ApiVersionsRequest {
                client_software_name: "test".into(),
                client_software_version: "1".into(),
                ..Default::default()
            };
            let ResponseBody::ApiVersions(resp) = handle(&broker, &req, 4) else { panic!() };
            let supported = resp.supported_features.iter().find(|f| f.name == "streams.version").unwrap();
            assert_eq!((supported.min_version, supported.max_version), (0, 1));
            let finalized = resp.finalized_features.iter().find(|f| f.name == "streams.version");
            assert_eq!(finalized.map(|f| f.max_version_level), (level > 0).then_some(level));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn software_names_as_kafka_checks_them() {
        for good in ["a", "librdkafka", "apache-kafka-java", "4.4.0", "v1.2-rc.3", "x9"] {
            assert!(ok(good), "{good}");
        }
        for bad in ["", "-a", "a-", ".", "a.", "a b", "é", "a_b"] {
            assert!(!ok(bad), "{bad:?}");
        }
    }
}
