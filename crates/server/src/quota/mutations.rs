//! A single node's controller mutation quota (`controller_mutation_rate`, KIP-599): the
//! CreateTopics, DeleteTopics and CreatePartitions handlers ask [`admit`] before each
//! topic and [`draw`] after it, as a cluster's active controller does in its decisions
//! (`controller_node::decisions`); the buckets are `osprey_cluster::mutation_quota`'s.

use crate::broker::Broker;
use crate::dispatch::Requester;
use osprey_cluster::mutation_quota::{self, MutationRequest};
use osprey_cluster::ControllerError;
use osprey_protocol::ApiKey;

/// The mutation quota state of one request of `api` at `version` from `requester`.
pub fn request(requester: &Requester, api: ApiKey, version: i16) -> MutationRequest {
    MutationRequest::new(&requester.principal, &requester.client_id, mutation_quota::is_strict(api as i16, version))
}

/// Before a topic changes: THROTTLING_QUOTA_EXCEEDED while a strict request's bucket is
/// below zero.
pub fn admit(broker: &Broker, request: &mut MutationRequest) -> Result<(), ControllerError> {
    let image = broker.image();
    let mut quotas = broker.mutation_quotas.lock().expect("mutation quotas poisoned");
    quotas.admit(image.client_quotas(), request, super::monotonic_ms()).map_err(ControllerError::from)
}

/// After a topic changed by `partitions` partitions (created or deleted).
pub fn draw(broker: &Broker, request: &mut MutationRequest, partitions: usize) {
    let image = broker.image();
    let mut quotas = broker.mutation_quotas.lock().expect("mutation quotas poisoned");
    let partitions = u32::try_from(partitions).unwrap_or(u32::MAX);
    quotas.draw(image.client_quotas(), request, partitions, super::monotonic_ms());
}
