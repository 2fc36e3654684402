//! ApiVersions: the truthful table of what this broker serves (see `supported.rs`).

use crate::supported::ADVERTISED;
use osprey_protocol::messages::{api_versions_response::ApiVersion, ApiVersionsResponse};
use osprey_protocol::{ErrorCode, ResponseBody};

fn table() -> Vec<ApiVersion> {
    ADVERTISED
        .iter()
        .map(|&(key, min, max)| ApiVersion {
            api_key: key as i16,
            min_version: min,
            max_version: max,
            ..Default::default()
        })
        .collect()
}

pub fn handle(_version: i16) -> ResponseBody {
    ResponseBody::ApiVersions(ApiVersionsResponse { api_keys: table(), ..Default::default() })
}

/// KIP-511: the client asked a version we do not know. Answered in v0 with our ranges.
pub fn unsupported_version() -> ResponseBody {
    ResponseBody::ApiVersions(ApiVersionsResponse {
        error_code: ErrorCode::UNSUPPORTED_VERSION.code(),
        api_keys: table(),
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
