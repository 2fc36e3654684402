//! ApiVersions: the truthful table of what this broker serves (see `supported.rs`), and
//! from v3 the `transaction.version` feature (KIP-584), which tells clients whether to use
//! transaction version 2 (KIP-890 part 2).

use crate::broker::Broker;
use crate::supported::{advertised_at, ADVERTISED, MAX_TRANSACTION_VERSION};
use osprey_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use osprey_protocol::messages::ApiVersionsResponse;
use osprey_protocol::{ErrorCode, ResponseBody};

/// The epoch of the finalized features: they change only with the broker's configuration.
const FINALIZED_FEATURES_EPOCH: i64 = 1;

fn table(transaction_version: i16) -> Vec<ApiVersion> {
    ADVERTISED
        .iter()
        .filter_map(|&(key, _, _)| {
            let (min, max) = advertised_at(key, transaction_version)?;
            Some(ApiVersion { api_key: key as i16, min_version: min, max_version: max, ..Default::default() })
        })
        .collect()
}

pub fn handle(broker: &Broker, _version: i16) -> ResponseBody {
    let transaction_version = broker.settings.transaction_version;
    ResponseBody::ApiVersions(ApiVersionsResponse {
        api_keys: table(transaction_version),
        supported_features: vec![SupportedFeatureKey {
            name: "transaction.version".into(),
            min_version: 0,
            max_version: MAX_TRANSACTION_VERSION,
            ..Default::default()
        }],
        finalized_features_epoch: FINALIZED_FEATURES_EPOCH,
        finalized_features: vec![FinalizedFeatureKey {
            name: "transaction.version".into(),
            max_version_level: transaction_version,
            min_version_level: transaction_version,
            ..Default::default()
        }],
        ..Default::default()
    })
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
