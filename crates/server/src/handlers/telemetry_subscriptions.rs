//! KIP-714 client telemetry: this broker collects none, so it hands every client an
//! empty subscription (no metrics requested), which keeps Java clients from pushing or
//! logging errors; PushTelemetry, if a client sends it anyway, is acknowledged.

use osprey_protocol::messages::{
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse, PushTelemetryResponse,
};
use osprey_protocol::ResponseBody;

/// How often a client asks again; it has nothing to push meanwhile.
const PUSH_INTERVAL_MS: i32 = 300_000;

pub fn handle_get(req: GetTelemetrySubscriptionsRequest) -> ResponseBody {
    let client_instance_id = if req.client_instance_id.is_zero() {
        osprey_cluster::controller::random_uuid().unwrap_or(osprey_protocol::Uuid([1; 16]))
    } else {
        req.client_instance_id
    };
    ResponseBody::GetTelemetrySubscriptions(GetTelemetrySubscriptionsResponse {
        client_instance_id,
        subscription_id: 0,
        accepted_compression_types: vec![0],
        push_interval_ms: PUSH_INTERVAL_MS,
        telemetry_max_bytes: 1024 * 1024,
        delta_temporality: true,
        requested_metrics: Vec::new(),
        ..Default::default()
    })
}

pub fn handle_push() -> ResponseBody {
    ResponseBody::PushTelemetry(PushTelemetryResponse::default())
}
