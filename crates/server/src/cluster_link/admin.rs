//! A single node's controller ran in-process; in a cluster the same operations are Kafka
//! requests to the active controller (as Kafka's brokers forward CreateTopics and the
//! rest), retried on each controller until the active one answers, and answered to the
//! caller once this broker's own image has caught up with the controller's, so the
//! caller's next read shows the change.
//!
//! The broker calls these from the blocking pool (its handlers run controller writes
//! there); each runs its request on the runtime the link was started on.

use super::ClusterLink;
use osprey_cluster::{ControllerError, NewTopic};
use osprey_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use osprey_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use osprey_protocol::messages::delete_topics_request::DeleteTopicState;
use osprey_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use osprey_protocol::messages::*;
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody, Uuid};
use std::future::Future;
use tokio::time::Instant;

/// Kafka's ConfigResource types the broker alters through the controller.
pub const TOPIC_RESOURCE: i8 = 2;
pub const BROKER_RESOURCE: i8 = 4;
pub const GROUP_RESOURCE: i8 = 32;

/// IncrementalAlterConfigs operations.
const SET: i8 = 0;
const DELETE: i8 = 1;

impl ClusterLink {
    /// Runs `work` on the link's runtime and waits for it, from a thread that may block.
    fn block_on<T: Send>(&self, work: impl Future<Output = T> + Send) -> T {
        let handle = self.runtime.clone();
        // A thread of its own: this is never an async worker's thread, even when a caller
        // is one by mistake (then it blocks that worker instead of panicking).
        std::thread::scope(|s| match s.spawn(|| handle.block_on(work)).join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.config.request_timeout
    }

    /// Forwards a client's request (read at `version`) to the active controller, as
    /// Kafka's brokers forward, and returns its answer; with `wait_for_image`, once this
    /// broker's image has caught up with the controller's. When no controller answers,
    /// the request's error answer (`code` in every error field, as the controller's own).
    pub fn forward(&self, body: RequestBody, version: i16, wait_for_image: bool) -> ResponseBody {
        let api = body.api_key();
        let (code, message) = match self.write(api, body.clone(), wait_for_image) {
            Ok(answer) if answer.api_key() == api => return answer,
            Ok(_) => (ErrorCode::UNKNOWN_SERVER_ERROR, "unexpected answer from the controller".to_string()),
            Err(e) => (e.code, e.message),
        };
        crate::controller_node::failed_response(&body, version, code, &message)
    }

    /// Forwards a client's request as [`forward`](Self::forward) does, inside an
    /// EnvelopeRequest naming `requester`, so that the controller measures the client's
    /// controller mutation quota (KIP-590, KIP-599).
    pub fn forward_from(
        &self,
        requester: &crate::dispatch::Requester,
        body: RequestBody,
        version: i16,
        wait_for_image: bool,
    ) -> ResponseBody {
        let api = body.api_key();
        let failed =
            |code: ErrorCode, message: &str| crate::controller_node::failed_response(&body, version, code, message);
        let envelope = match crate::envelope::wrap(requester, &body, version) {
            Ok(e) => e,
            Err(why) => return failed(ErrorCode::UNKNOWN_SERVER_ERROR, &why),
        };
        let answer = self.write(ApiKey::Envelope, RequestBody::Envelope(envelope), wait_for_image);
        match answer {
            Ok(ResponseBody::Envelope(r)) => match crate::envelope::unwrap_response(&r, api, version) {
                Ok(answer) if answer.api_key() == api => answer,
                Ok(_) => failed(ErrorCode::UNKNOWN_SERVER_ERROR, "unexpected answer from the controller"),
                Err(code) => {
                    // Kafka's brokers answer UNKNOWN_SERVER_ERROR for an envelope refused
                    // whole: the client could not act on the envelope's own error.
                    tracing::warn!(
                        api = api.name(),
                        error = code.name(),
                        "the controller refused a forwarded request's envelope"
                    );
                    failed(
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        &format!("the controller refused the forwarded request: {}", code.name()),
                    )
                }
            },
            Ok(_) => failed(ErrorCode::UNKNOWN_SERVER_ERROR, "unexpected answer from the controller"),
            Err(e) => failed(e.code, &e.message),
        }
    }

    /// Sends `body` to the active controller, then waits for this broker's image.
    fn write(&self, api: ApiKey, body: RequestBody, wait_for_image: bool) -> Result<ResponseBody, ControllerError> {
        let deadline = self.deadline();
        self.block_on(async {
            let response = self
                .send_to_controller(api, |_| body.clone(), deadline)
                .await
                .map_err(|e| ControllerError::new(ErrorCode::REQUEST_TIMED_OUT, e.to_string()))?;
            if wait_for_image && !self.catch_up_with_controller(deadline).await {
                tracing::debug!(api = api.name(), "this broker's metadata has not caught up with the controller yet");
            }
            Ok(response.body)
        })
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.config.request_timeout.as_millis()).unwrap_or(i32::MAX)
    }

    pub fn create_topic(&self, topic: &NewTopic, validate_only: bool) -> Result<Uuid, ControllerError> {
        let request = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: topic.name.clone(),
                num_partitions: topic.num_partitions,
                replication_factor: topic.replication_factor,
                assignments: topic
                    .assignments
                    .iter()
                    .map(|(index, ids)| CreatableReplicaAssignment {
                        partition_index: *index,
                        broker_ids: ids.clone(),
                        ..Default::default()
                    })
                    .collect(),
                configs: topic
                    .configs
                    .iter()
                    .map(|(k, v)| CreatableTopicConfig {
                        name: k.clone(),
                        value: Some(v.clone()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            timeout_ms: self.timeout_ms(),
            validate_only,
            ..Default::default()
        };
        match self.write(ApiKey::CreateTopics, RequestBody::CreateTopics(request), !validate_only)? {
            ResponseBody::CreateTopics(r) => {
                let t = r.topics.into_iter().next().ok_or_else(|| empty_answer("CreateTopics"))?;
                check(t.error_code, t.error_message)?;
                Ok(t.topic_id)
            }
            _ => Err(empty_answer("CreateTopics")),
        }
    }

    pub fn delete_topic(&self, name: &str) -> Result<Uuid, ControllerError> {
        let request = DeleteTopicsRequest {
            topics: vec![DeleteTopicState { name: Some(name.to_string()), ..Default::default() }],
            topic_names: vec![name.to_string()],
            timeout_ms: self.timeout_ms(),
            ..Default::default()
        };
        match self.write(ApiKey::DeleteTopics, RequestBody::DeleteTopics(request), true)? {
            ResponseBody::DeleteTopics(r) => {
                let t = r.responses.into_iter().next().ok_or_else(|| empty_answer("DeleteTopics"))?;
                check(t.error_code, t.error_message)?;
                Ok(t.topic_id)
            }
            _ => Err(empty_answer("DeleteTopics")),
        }
    }

    pub fn create_partitions(&self, name: &str, count: i32, validate_only: bool) -> Result<(), ControllerError> {
        let request = CreatePartitionsRequest {
            topics: vec![CreatePartitionsTopic {
                name: name.to_string(),
                count,
                assignments: None,
                ..Default::default()
            }],
            timeout_ms: self.timeout_ms(),
            validate_only,
            ..Default::default()
        };
        match self.write(ApiKey::CreatePartitions, RequestBody::CreatePartitions(request), !validate_only)? {
            ResponseBody::CreatePartitions(r) => {
                let t = r.results.into_iter().next().ok_or_else(|| empty_answer("CreatePartitions"))?;
                check(t.error_code, t.error_message)
            }
            _ => Err(empty_answer("CreatePartitions")),
        }
    }

    /// AlterUserScramCredentials, decided by the active controller: its per-user results.
    pub fn alter_user_scram_credentials(
        &self,
        request: AlterUserScramCredentialsRequest,
    ) -> Result<AlterUserScramCredentialsResponse, ControllerError> {
        let body = RequestBody::AlterUserScramCredentials(request);
        match self.write(ApiKey::AlterUserScramCredentials, body, true)? {
            ResponseBody::AlterUserScramCredentials(r) => Ok(r),
            _ => Err(empty_answer("AlterUserScramCredentials")),
        }
    }

    /// AlterClientQuotas, decided by the active controller: its per-entity results.
    /// A `validate_only` request commits nothing, so there is nothing to wait for.
    pub fn alter_client_quotas(
        &self,
        request: AlterClientQuotasRequest,
    ) -> Result<AlterClientQuotasResponse, ControllerError> {
        let wait_for_image = !request.validate_only;
        match self.write(ApiKey::AlterClientQuotas, RequestBody::AlterClientQuotas(request), wait_for_image)? {
            ResponseBody::AlterClientQuotas(r) => Ok(r),
            _ => Err(empty_answer("AlterClientQuotas")),
        }
    }

    /// Sets (`Some`) or removes (`None`) configs of one resource.
    pub fn alter_configs(
        &self,
        resource_type: i8,
        resource_name: &str,
        changes: &[(String, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let request = IncrementalAlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type,
                resource_name: resource_name.to_string(),
                configs: changes
                    .iter()
                    .map(|(name, value)| AlterableConfig {
                        name: name.clone(),
                        config_operation: if value.is_some() { SET } else { DELETE },
                        value: value.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            validate_only,
            ..Default::default()
        };
        let body = RequestBody::IncrementalAlterConfigs(request);
        match self.write(ApiKey::IncrementalAlterConfigs, body, !validate_only)? {
            ResponseBody::IncrementalAlterConfigs(r) => {
                let t = r.responses.into_iter().next().ok_or_else(|| empty_answer("IncrementalAlterConfigs"))?;
                check(t.error_code, t.error_message)
            }
            _ => Err(empty_answer("IncrementalAlterConfigs")),
        }
    }

    /// A block of producer ids from the controller (AllocateProducerIds), unique across
    /// the cluster. Needs a registration (the broker epoch).
    pub fn allocate_producer_ids(&self) -> Result<std::ops::Range<i64>, ControllerError> {
        let Some(epoch) = self.registration().epoch else {
            return Err(ControllerError::new(
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                "this broker has not registered with the controller yet",
            ));
        };
        let request =
            AllocateProducerIdsRequest { broker_id: self.config.node_id, broker_epoch: epoch, ..Default::default() };
        match self.write(ApiKey::AllocateProducerIds, RequestBody::AllocateProducerIds(request), false)? {
            ResponseBody::AllocateProducerIds(r) => {
                check(r.error_code, None)?;
                if r.producer_id_len <= 0 {
                    return Err(empty_answer("AllocateProducerIds"));
                }
                Ok(r.producer_id_start..r.producer_id_start + i64::from(r.producer_id_len))
            }
            _ => Err(empty_answer("AllocateProducerIds")),
        }
    }
}

fn check(error_code: i16, message: Option<String>) -> Result<(), ControllerError> {
    if error_code == 0 {
        return Ok(());
    }
    let code = ErrorCode::from_code(error_code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
    Err(ControllerError::new(code, message.unwrap_or_default()))
}

fn empty_answer(api: &str) -> ControllerError {
    ControllerError::new(ErrorCode::UNKNOWN_SERVER_ERROR, format!("the controller's {api} answer has no result"))
}
