//! Each controller API decided on an image: the Kafka request in, the records to commit
//! and the response to send once they are committed out (and the response to send if
//! they never are). The image is the active controller's speculative one, and each
//! decision applies its records to it as it goes, so a request with several topics sees
//! its own earlier topics, and the next request sees this one.

use crate::config::BrokerConfig;
use crate::config_changes::{self, Changes, Outcome};
use crate::handlers::acls;
use crate::handlers::client_quotas;
use crate::handlers::elect_leaders;
use crate::handlers::partition_reassignments;
use crate::handlers::scram_credentials;
use osprey_cluster::alter_partition::{AlterPartitionInput, AlterPartitionItem, AlterPartitionTopic};
use osprey_cluster::cluster_control::{
    BrokerHeartbeatInput, BrokerRegistrationInput, ClusterControl, ControllerResult, PRODUCER_ID_BLOCK_SIZE,
};
use osprey_cluster::controller::ConfigValidator;
use osprey_cluster::mutation_quota::{MutationQuotas, MutationRequest};
use osprey_cluster::reassignment::{ReassignmentResult, TopicReassignmentResult};
use osprey_cluster::topic_control::TopicControl;
use osprey_cluster::{BrokerListener, ControllerError, MetadataImage, MetadataRecord, NewTopic};
use osprey_protocol::messages::alter_partition_response::{PartitionData, TopicData};
use osprey_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use osprey_protocol::messages::create_topics_response::CreatableTopicResult;
use osprey_protocol::messages::delete_topics_response::DeletableTopicResult;
use osprey_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use osprey_protocol::messages::*;
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody, Uuid};
use std::collections::{BTreeMap, HashSet};

/// Kafka's controller refuses a CreateTopics asking for more partitions than this in
/// all (`ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`): it also keeps one
/// request's batch well inside one quorum RPC.
pub const MAX_PARTITIONS_PER_REQUEST: i64 = crate::handlers::create_topics::MAX_PARTITIONS_PER_REQUEST;

/// What the controller decided for one request.
pub struct Decided {
    /// Proposed as one batch; empty when nothing changes.
    pub records: Vec<MetadataRecord>,
    /// Sent once `records` are committed.
    pub response: ResponseBody,
}

/// The decision makers and their inputs.
pub struct Controls<'a> {
    pub cluster: &'a mut ClusterControl,
    pub topics: &'a mut TopicControl,
    pub validate_topic_config: ConfigValidator<'a>,
    /// `num.partitions`, counted for a topic that asks for -1.
    pub default_partitions: i32,
    /// The node's configuration: dynamic broker configs are checked with it, group
    /// configs against its bounds, list configs appended to from its values.
    pub broker_config: &'a BrokerConfig,
    pub now_ms: i64,
    /// The controller mutation quota's buckets, and who the request is measured as
    /// (`None` for requests that mutate no partitions).
    pub mutation_quotas: &'a mut MutationQuotas,
    pub mutation: Option<MutationRequest>,
}

impl Controls<'_> {
    /// Before a topic's partitions are created or deleted: THROTTLING_QUOTA_EXCEEDED
    /// while a strict requester's bucket is below zero (KIP-599).
    fn admit_mutation(&mut self, image: &MetadataImage) -> Result<(), ControllerError> {
        let Some(request) = &mut self.mutation else { return Ok(()) };
        self.mutation_quotas.admit(image.client_quotas(), request, self.now_ms).map_err(ControllerError::from)
    }

    /// After a topic's `partitions` were created or deleted.
    fn draw_mutation(&mut self, image: &MetadataImage, partitions: usize) {
        let Some(request) = &mut self.mutation else { return };
        let partitions = u32::try_from(partitions).unwrap_or(u32::MAX);
        self.mutation_quotas.draw(image.client_quotas(), request, partitions, self.now_ms);
    }

    /// The response's `throttle_time_ms`: how long the mutation quota holds the client off.
    fn mutation_throttle_ms(&self) -> i32 {
        self.mutation.as_ref().map_or(0, |m| i32::try_from(m.throttle_ms).unwrap_or(i32::MAX))
    }
}

/// Decides `body` on `image`, applying the records to it. `None` for an API this
/// controller does not serve (the listener checked `supported` already).
pub fn decide(c: &mut Controls<'_>, image: &mut MetadataImage, version: i16, body: &RequestBody) -> Option<Decided> {
    let decided = match body {
        RequestBody::BrokerRegistration(r) => register_broker(c, image, r),
        RequestBody::BrokerHeartbeat(r) => broker_heartbeat(c, image, r),
        RequestBody::AllocateProducerIds(r) => allocate_producer_ids(c, image, r),
        RequestBody::AlterPartition(r) => alter_partition(c, image, r),
        RequestBody::CreateTopics(r) => create_topics(c, image, version, r),
        RequestBody::DeleteTopics(r) => delete_topics(c, image, version, r),
        RequestBody::CreatePartitions(r) => create_partitions(c, image, r),
        RequestBody::IncrementalAlterConfigs(r) => incremental_alter_configs(c, image, r),
        RequestBody::AlterConfigs(r) => alter_configs(c, image, r),
        RequestBody::ElectLeaders(r) => elect_leaders(c, image, r),
        RequestBody::AlterPartitionReassignments(r) => alter_partition_reassignments(c, image, r),
        RequestBody::ListPartitionReassignments(r) => list_partition_reassignments(image, r),
        RequestBody::AlterUserScramCredentials(r) => alter_user_scram_credentials(image, r),
        RequestBody::AlterClientQuotas(r) => alter_client_quotas(image, r),
        RequestBody::CreateAcls(r) => applied(image, acls::decide_create(image, r), ResponseBody::CreateAcls),
        RequestBody::DeleteAcls(r) => applied(image, acls::decide_delete(image, r), ResponseBody::DeleteAcls),
        _ => return None,
    };
    Some(decided)
}

/// How long the answer may wait for its commit: the request's own `timeout_ms` where it
/// has one (Kafka's controller takes its deadline from it), else `None`.
pub fn request_timeout_ms(body: &RequestBody) -> Option<u64> {
    let ms = match body {
        RequestBody::CreateTopics(r) => r.timeout_ms,
        RequestBody::DeleteTopics(r) => r.timeout_ms,
        RequestBody::CreatePartitions(r) => r.timeout_ms,
        RequestBody::ElectLeaders(r) => r.timeout_ms,
        RequestBody::AlterPartitionReassignments(r) => r.timeout_ms,
        RequestBody::ListPartitionReassignments(r) => r.timeout_ms,
        _ => return None,
    };
    u64::try_from(ms).ok().filter(|ms| *ms > 0)
}

/// The response when the request's records were not committed (or this node is not the
/// active controller): `code` in every error field, as Kafka's `getErrorResponse`.
pub fn failed(body: &RequestBody, version: i16, code: ErrorCode, message: &str) -> ResponseBody {
    let error_code = code.code();
    let message = Some(message.to_string());
    match body {
        RequestBody::BrokerRegistration(_) => ResponseBody::BrokerRegistration(BrokerRegistrationResponse {
            error_code,
            broker_epoch: -1,
            ..Default::default()
        }),
        RequestBody::BrokerHeartbeat(_) => {
            ResponseBody::BrokerHeartbeat(BrokerHeartbeatResponse { error_code, is_fenced: true, ..Default::default() })
        }
        RequestBody::AllocateProducerIds(_) => {
            ResponseBody::AllocateProducerIds(AllocateProducerIdsResponse { error_code, ..Default::default() })
        }
        RequestBody::AlterPartition(_) => {
            ResponseBody::AlterPartition(AlterPartitionResponse { error_code, ..Default::default() })
        }
        RequestBody::CreateTopics(r) => ResponseBody::CreateTopics(CreateTopicsResponse {
            topics: r
                .topics
                .iter()
                .map(|t| CreatableTopicResult {
                    name: t.name.clone(),
                    error_code,
                    error_message: message.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        RequestBody::DeleteTopics(r) => ResponseBody::DeleteTopics(DeleteTopicsResponse {
            responses: delete_targets(r, version)
                .into_iter()
                .map(|(name, topic_id)| DeletableTopicResult {
                    name,
                    topic_id,
                    error_code,
                    error_message: message.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        RequestBody::CreatePartitions(r) => ResponseBody::CreatePartitions(CreatePartitionsResponse {
            results: r
                .topics
                .iter()
                .map(|t| CreatePartitionsTopicResult {
                    name: t.name.clone(),
                    error_code,
                    error_message: message.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        RequestBody::IncrementalAlterConfigs(r) => {
            ResponseBody::IncrementalAlterConfigs(IncrementalAlterConfigsResponse {
                responses: r
                    .resources
                    .iter()
                    .map(|res| AlterConfigsResourceResponse {
                        error_code,
                        error_message: message.clone(),
                        resource_type: res.resource_type,
                        resource_name: res.resource_name.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
        }
        RequestBody::AlterUserScramCredentials(r) => ResponseBody::AlterUserScramCredentials(
            scram_credentials::failed(r, code, message.as_deref().unwrap_or("")),
        ),
        RequestBody::AlterClientQuotas(r) => {
            ResponseBody::AlterClientQuotas(client_quotas::failed(r, code, message.as_deref().unwrap_or("")))
        }
        RequestBody::CreateAcls(r) => {
            ResponseBody::CreateAcls(acls::create_failed(r, code, message.as_deref().unwrap_or("")))
        }
        RequestBody::DeleteAcls(r) => {
            ResponseBody::DeleteAcls(acls::delete_failed(r, code, message.as_deref().unwrap_or("")))
        }
        RequestBody::AlterConfigs(r) => ResponseBody::AlterConfigs(AlterConfigsResponse {
            responses: r
                .resources
                .iter()
                .map(|res| alter_configs_response::AlterConfigsResourceResponse {
                    error_code,
                    error_message: message.clone(),
                    resource_type: res.resource_type,
                    resource_name: res.resource_name.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        RequestBody::ElectLeaders(r) => ResponseBody::ElectLeaders(elect_leaders::failed(r, code, message)),
        // Kafka's getErrorResponse: the error at the top and on every partition named.
        RequestBody::AlterPartitionReassignments(r) => {
            let refused = |t: &osprey_cluster::reassignment::ReassignmentTarget| ReassignmentResult {
                partition_index: t.partition_index,
                error: code,
                message: message.clone(),
            };
            let results = partition_reassignments::targets(r)
                .into_iter()
                .map(|(name, targets)| TopicReassignmentResult {
                    name,
                    partitions: targets.iter().map(refused).collect(),
                })
                .collect();
            let mut response = partition_reassignments::alter_response(r, results);
            if let ResponseBody::AlterPartitionReassignments(body) = &mut response {
                body.error_code = error_code;
                body.error_message = message;
            }
            response
        }
        // Kafka's getErrorResponse: the error at the top, the partitions named listed bare.
        RequestBody::ListPartitionReassignments(r) => {
            let bare = |index: &i32| list_partition_reassignments_response::OngoingPartitionReassignment {
                partition_index: *index,
                ..Default::default()
            };
            let topics =
                r.topics.iter().flatten().map(|t| list_partition_reassignments_response::OngoingTopicReassignment {
                    name: t.name.clone(),
                    partitions: t.partition_indexes.iter().map(bare).collect(),
                    ..Default::default()
                });
            ResponseBody::ListPartitionReassignments(ListPartitionReassignmentsResponse {
                error_code,
                error_message: message,
                topics: topics.collect(),
                ..Default::default()
            })
        }
        RequestBody::DescribeQuorum(_) => ResponseBody::DescribeQuorum(DescribeQuorumResponse {
            error_code,
            error_message: message,
            ..Default::default()
        }),
        _ => ResponseBody::ApiVersions(Default::default()),
    }
}

/// Applies a decision's records to the image and hands them back with its answer.
fn apply<T>(image: &mut MetadataImage, result: ControllerResult<T>, records: &mut Vec<MetadataRecord>) -> T {
    for r in &result.records {
        image.apply(r);
    }
    records.extend(result.records);
    result.response
}

fn register_broker(c: &mut Controls<'_>, image: &mut MetadataImage, r: &BrokerRegistrationRequest) -> Decided {
    let input = BrokerRegistrationInput {
        broker_id: r.broker_id,
        cluster_id: r.cluster_id.clone(),
        incarnation_id: r.incarnation_id,
        listeners: r
            .listeners
            .iter()
            .map(|l| BrokerListener {
                name: l.name.clone(),
                host: l.host.clone(),
                port: l.port,
                security_protocol: l.security_protocol,
            })
            .collect(),
        rack: r.rack.clone(),
        previous_broker_epoch: r.previous_broker_epoch,
    };
    let mut records = Vec::new();
    let response = match c.cluster.register_broker(image, &input, c.now_ms) {
        Ok(result) => {
            let broker_epoch = apply(image, result, &mut records);
            tracing::info!(broker = r.broker_id, broker_epoch, "broker registered");
            BrokerRegistrationResponse { broker_epoch, ..Default::default() }
        }
        Err(e) => BrokerRegistrationResponse { error_code: e.code.code(), broker_epoch: -1, ..Default::default() },
    };
    Decided { records, response: ResponseBody::BrokerRegistration(response) }
}

fn broker_heartbeat(c: &mut Controls<'_>, image: &mut MetadataImage, r: &BrokerHeartbeatRequest) -> Decided {
    let input = BrokerHeartbeatInput {
        broker_id: r.broker_id,
        broker_epoch: r.broker_epoch,
        current_metadata_offset: r.current_metadata_offset,
        want_fence: r.want_fence,
        want_shut_down: r.want_shut_down,
    };
    let mut records = Vec::new();
    let response = match c.cluster.broker_heartbeat(image, &input, c.now_ms) {
        Ok(result) => {
            let reply = apply(image, result, &mut records);
            BrokerHeartbeatResponse {
                is_caught_up: reply.is_caught_up,
                is_fenced: reply.is_fenced,
                should_shut_down: reply.should_shut_down,
                ..Default::default()
            }
        }
        Err(e) => BrokerHeartbeatResponse { error_code: e.code.code(), is_fenced: true, ..Default::default() },
    };
    Decided { records, response: ResponseBody::BrokerHeartbeat(response) }
}

fn allocate_producer_ids(c: &mut Controls<'_>, image: &mut MetadataImage, r: &AllocateProducerIdsRequest) -> Decided {
    let mut records = Vec::new();
    let response = match c.cluster.allocate_producer_ids(image, r.broker_id, r.broker_epoch) {
        Ok(result) => {
            let block = apply(image, result, &mut records);
            AllocateProducerIdsResponse {
                producer_id_start: block.start,
                producer_id_len: PRODUCER_ID_BLOCK_SIZE as i32,
                ..Default::default()
            }
        }
        Err(e) => AllocateProducerIdsResponse { error_code: e.code.code(), ..Default::default() },
    };
    Decided { records, response: ResponseBody::AllocateProducerIds(response) }
}

fn alter_partition(c: &mut Controls<'_>, image: &mut MetadataImage, r: &AlterPartitionRequest) -> Decided {
    let input = AlterPartitionInput {
        broker_id: r.broker_id,
        broker_epoch: r.broker_epoch,
        topics: r
            .topics
            .iter()
            .map(|t| AlterPartitionTopic {
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| AlterPartitionItem {
                        partition_index: p.partition_index,
                        leader_epoch: p.leader_epoch,
                        // v2 sends ids only (epoch -1: not checked), v3 ids with epochs.
                        new_isr: if p.new_isr_with_epochs.is_empty() {
                            p.new_isr.iter().map(|&b| (b, -1)).collect()
                        } else {
                            p.new_isr_with_epochs.iter().map(|b| (b.broker_id, b.broker_epoch)).collect()
                        },
                        leader_recovery_state: p.leader_recovery_state,
                        partition_epoch: p.partition_epoch,
                    })
                    .collect(),
            })
            .collect(),
    };
    let mut records = Vec::new();
    let response = match c.cluster.alter_partition(image, &input) {
        Ok(result) => {
            let topics = apply(image, result, &mut records);
            AlterPartitionResponse {
                topics: topics
                    .into_iter()
                    .map(|t| TopicData {
                        topic_id: t.topic_id,
                        partitions: t
                            .partitions
                            .into_iter()
                            .map(|p| PartitionData {
                                partition_index: p.partition_index,
                                error_code: p.error.code(),
                                leader_id: p.leader_id,
                                leader_epoch: p.leader_epoch,
                                isr: p.isr,
                                leader_recovery_state: p.leader_recovery_state,
                                partition_epoch: p.partition_epoch,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }
        }
        Err(e) => AlterPartitionResponse { error_code: e.code.code(), ..Default::default() },
    };
    Decided { records, response: ResponseBody::AlterPartition(response) }
}

fn create_topics(c: &mut Controls<'_>, image: &mut MetadataImage, version: i16, r: &CreateTopicsRequest) -> Decided {
    let mut records = Vec::new();
    let asked = crate::handlers::create_topics::requested_partitions(&r.topics, c.default_partitions);
    if asked > MAX_PARTITIONS_PER_REQUEST {
        let refused = failed(
            &RequestBody::CreateTopics(r.clone()),
            version,
            ErrorCode::POLICY_VIOLATION,
            "Excessively large number of partitions per request.",
        );
        return Decided { records, response: refused };
    }
    let mut seen = HashSet::new();
    let duplicates: HashSet<&str> =
        r.topics.iter().filter(|t| !seen.insert(t.name.as_str())).map(|t| t.name.as_str()).collect();
    let mut response = CreateTopicsResponse::default();
    for t in &r.topics {
        let mut result = CreatableTopicResult { name: t.name.clone(), ..Default::default() };
        let outcome = if duplicates.contains(t.name.as_str()) {
            Err(ControllerError::new(ErrorCode::INVALID_REQUEST, "Duplicate topic name."))
        } else {
            new_topic(t).and_then(|new| {
                if !r.validate_only {
                    c.admit_mutation(image)?;
                }
                let decided = c.topics.create_topic(image, &new, r.validate_only, c.validate_topic_config)?;
                let created = apply(image, decided, &mut records);
                if !r.validate_only {
                    c.draw_mutation(image, created.partitions.len());
                }
                Ok(created)
            })
        };
        match outcome {
            Ok(created) => {
                result.topic_id = created.id;
                result.num_partitions = created.partitions.len() as i32;
                result.replication_factor = created.partitions.first().map_or(-1, |p| p.replicas.len() as i16);
            }
            Err(e) => {
                result.error_code = e.code.code();
                result.error_message = Some(e.message);
            }
        }
        response.topics.push(result);
    }
    response.throttle_time_ms = c.mutation_throttle_ms();
    Decided { records, response: ResponseBody::CreateTopics(response) }
}

fn new_topic(t: &create_topics_request::CreatableTopic) -> Result<NewTopic, ControllerError> {
    let mut configs = BTreeMap::new();
    for config in &t.configs {
        let Some(value) = &config.value else {
            return Err(ControllerError::new(
                ErrorCode::INVALID_CONFIG,
                format!("Null value not supported for topic configs: {}", config.name),
            ));
        };
        configs.insert(config.name.clone(), value.clone());
    }
    Ok(NewTopic {
        name: t.name.clone(),
        num_partitions: t.num_partitions,
        replication_factor: t.replication_factor,
        assignments: t.assignments.iter().map(|a| (a.partition_index, a.broker_ids.clone())).collect(),
        configs,
    })
}

/// The topics a DeleteTopics names: by name (v1-5, or v6 with a name) or by id (v6).
fn delete_targets(r: &DeleteTopicsRequest, version: i16) -> Vec<(Option<String>, Uuid)> {
    if version >= 6 {
        r.topics.iter().map(|t| (t.name.clone(), t.topic_id)).collect()
    } else {
        r.topic_names.iter().map(|n| (Some(n.clone()), Uuid::default())).collect()
    }
}

fn delete_topics(c: &mut Controls<'_>, image: &mut MetadataImage, version: i16, r: &DeleteTopicsRequest) -> Decided {
    let mut records = Vec::new();
    let mut response = DeleteTopicsResponse::default();
    for (name, topic_id) in delete_targets(r, version) {
        let mut result = DeletableTopicResult { name: name.clone(), topic_id, ..Default::default() };
        let name = match &name {
            Some(n) => Some(n.clone()),
            None => image.topic_by_id(topic_id).map(|t| t.name.clone()),
        };
        let outcome = match name {
            Some(_) if !c.broker_config.delete_topic_enable => {
                Err(ControllerError::new(ErrorCode::TOPIC_DELETION_DISABLED, "Topic deletion is disabled."))
            }
            Some(n) => c.admit_mutation(image).and_then(|()| {
                let partitions = image.topic(&n).map_or(0, |t| t.partitions.len());
                let deleted = c.topics.delete_topic(image, &n).map(|d| (n, apply(image, d, &mut records)))?;
                c.draw_mutation(image, partitions);
                Ok(deleted)
            }),
            None => Err(ControllerError::new(ErrorCode::UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")),
        };
        match outcome {
            Ok((n, id)) => {
                result.name = Some(n);
                result.topic_id = id;
            }
            Err(e) => {
                result.error_code = e.code.code();
                result.error_message = (version >= 5).then_some(e.message);
            }
        }
        response.responses.push(result);
    }
    response.throttle_time_ms = c.mutation_throttle_ms();
    Decided { records, response: ResponseBody::DeleteTopics(response) }
}

fn create_partitions(c: &mut Controls<'_>, image: &mut MetadataImage, r: &CreatePartitionsRequest) -> Decided {
    let mut records = Vec::new();
    let mut response = CreatePartitionsResponse::default();
    let mut seen = HashSet::new();
    for t in &r.topics {
        let outcome = if !seen.insert(t.name.as_str()) {
            Err(ControllerError::new(ErrorCode::INVALID_REQUEST, format!("Duplicate topic {} in the request", t.name)))
        } else if t.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
            Err(ControllerError::new(
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "Manual replica assignments for new partitions are not supported yet.",
            ))
        } else if r.validate_only {
            c.topics.create_partitions(image, &t.name, t.count, true).map(|d| apply(image, d, &mut records))
        } else {
            c.admit_mutation(image).and_then(|()| {
                let before = image.topic(&t.name).map_or(0, |topic| topic.partitions.len());
                let decided = c.topics.create_partitions(image, &t.name, t.count, false)?;
                apply(image, decided, &mut records);
                c.draw_mutation(image, usize::try_from(t.count).unwrap_or(0).saturating_sub(before));
                Ok(())
            })
        };
        let mut result = CreatePartitionsTopicResult { name: t.name.clone(), ..Default::default() };
        if let Err(e) = outcome {
            result.error_code = e.code.code();
            result.error_message = Some(e.message);
        }
        response.results.push(result);
    }
    response.throttle_time_ms = c.mutation_throttle_ms();
    Decided { records, response: ResponseBody::CreatePartitions(response) }
}

/// ElectLeaders (43): preferred or unclean elections for the partitions named, or for
/// every partition when the list is null (Kafka's `ReplicationControlManager.electLeaders`).
fn elect_leaders(c: &mut Controls<'_>, image: &mut MetadataImage, r: &ElectLeadersRequest) -> Decided {
    let (election, named) = match elect_leaders::parse(r) {
        Ok(parsed) => parsed,
        Err(e) => {
            let refused = elect_leaders::failed(r, e.code, Some(e.message));
            return Decided { records: Vec::new(), response: ResponseBody::ElectLeaders(refused) };
        }
    };
    let mut records = Vec::new();
    let results = apply(image, c.cluster.elect_leaders(image, election, named.as_deref()), &mut records);
    Decided { records, response: ResponseBody::ElectLeaders(elect_leaders::response(results)) }
}

/// AlterPartitionReassignments (45): each partition's reassignment started, changed or
/// cancelled on the image (crates/cluster/src/reassignment.rs), the records one batch.
fn alter_partition_reassignments(
    c: &mut Controls<'_>,
    image: &mut MetadataImage,
    r: &AlterPartitionReassignmentsRequest,
) -> Decided {
    let mut records = Vec::new();
    let topics = partition_reassignments::targets(r);
    let decided = c.cluster.alter_partition_reassignments(image, r.allow_replication_factor_change, &topics);
    let results = apply(image, decided, &mut records);
    Decided { records, response: partition_reassignments::alter_response(r, results) }
}

/// ListPartitionReassignments (46): the partitions with a reassignment in progress. It
/// writes nothing; its answer waits for what was proposed before it.
fn list_partition_reassignments(image: &MetadataImage, r: &ListPartitionReassignmentsRequest) -> Decided {
    let named = partition_reassignments::named(r);
    let listed = osprey_cluster::reassignment::list_partition_reassignments(image, named.as_deref());
    Decided { records: Vec::new(), response: partition_reassignments::list_response(listed) }
}

/// AlterUserScramCredentials (51): SCRAM users, each user's alterations all or none,
/// with Kafka's checks (see `handlers::scram_credentials`).
fn alter_user_scram_credentials(image: &mut MetadataImage, r: &AlterUserScramCredentialsRequest) -> Decided {
    let (results, records) = scram_credentials::decide(image, r);
    for record in &records {
        image.apply(record);
    }
    let response = AlterUserScramCredentialsResponse { results, ..Default::default() };
    Decided { records, response: ResponseBody::AlterUserScramCredentials(response) }
}

/// AlterClientQuotas (49): each entity's quotas all or none, with Kafka's checks (see
/// `handlers::client_quotas`); a `validate_only` request proposes nothing.
fn alter_client_quotas(image: &mut MetadataImage, r: &AlterClientQuotasRequest) -> Decided {
    let (response, records) = client_quotas::decide(image, r);
    let records = if r.validate_only { Vec::new() } else { records };
    for record in &records {
        image.apply(record);
    }
    Decided { records, response: ResponseBody::AlterClientQuotas(response) }
}

/// CreateAcls (30) and DeleteAcls (31), decided as on a single node (see
/// `handlers::acls`): the records applied to the image, and the answer.
fn applied<R>(image: &mut MetadataImage, decided: (R, Vec<MetadataRecord>), wrap: fn(R) -> ResponseBody) -> Decided {
    let (response, records) = decided;
    for record in &records {
        image.apply(record);
    }
    Decided { records, response: wrap(response) }
}

/// IncrementalAlterConfigs (44) for topics, brokers and groups, each resource all or
/// nothing, decided on the image with Kafka's per-resource errors.
fn incremental_alter_configs(
    c: &mut Controls<'_>,
    image: &mut MetadataImage,
    r: &IncrementalAlterConfigsRequest,
) -> Decided {
    let mut records = Vec::new();
    let mut response = IncrementalAlterConfigsResponse::default();
    for res in &r.resources {
        let name = res.resource_name.as_str();
        let outcome = match res.resource_type {
            config_changes::RESOURCE_TOPIC => existing_topic(image, name).and_then(|topic| {
                let defaults = effective_config(c.broker_config, image, "").topic_defaults();
                let changes = config_changes::topic_changes(&res.configs, &topic.configs, |k| {
                    defaults.value(k).map(String::from)
                })?;
                set_topic_configs(c, image, name, &changes, r.validate_only, &mut records)
            }),
            config_changes::RESOURCE_BROKER => {
                let requested: Vec<(&str, Option<&str>)> =
                    res.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())).collect();
                let needs_value = |i: usize| res.configs[i].config_operation != config_changes::OP_DELETE;
                config_changes::check_broker_request(name, &requested, needs_value, None).and_then(|()| {
                    let effective = effective_config(c.broker_config, image, name);
                    let changes = config_changes::broker_changes(&res.configs, image.broker_configs(name), |k| {
                        effective.value(k)
                    })?;
                    set_broker_configs(c, image, name, &changes, r.validate_only, &mut records)
                })
            }
            config_changes::RESOURCE_GROUP => config_changes::group_changes(&res.configs)
                .and_then(|changes| set_group_configs(c, image, name, &changes, r.validate_only, &mut records)),
            other => Err(not_altered_here(other)),
        };
        let (error_code, error_message) = split(outcome);
        response.responses.push(AlterConfigsResourceResponse {
            error_code,
            error_message,
            resource_type: res.resource_type,
            resource_name: res.resource_name.clone(),
            ..Default::default()
        });
    }
    Decided { records, response: ResponseBody::IncrementalAlterConfigs(response) }
}

/// AlterConfigs (33), the legacy form: each resource's set replaces its whole set, for
/// topics and brokers (groups only incrementally, as Kafka).
fn alter_configs(c: &mut Controls<'_>, image: &mut MetadataImage, r: &AlterConfigsRequest) -> Decided {
    let mut records = Vec::new();
    let mut response = AlterConfigsResponse::default();
    for res in &r.resources {
        let name = res.resource_name.as_str();
        let configs: Vec<(&str, Option<&str>)> =
            res.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())).collect();
        let outcome = match res.resource_type {
            config_changes::RESOURCE_TOPIC => existing_topic(image, name).and_then(|topic| {
                let changes = config_changes::whole_set_changes(Some(&topic.configs), &configs);
                set_topic_configs(c, image, name, &changes, r.validate_only, &mut records)
            }),
            config_changes::RESOURCE_BROKER => config_changes::check_broker_request(name, &configs, |_| true, None)
                .and_then(|()| {
                    let changes = config_changes::whole_set_changes(image.broker_configs(name), &configs);
                    set_broker_configs(c, image, name, &changes, r.validate_only, &mut records)
                }),
            config_changes::RESOURCE_GROUP => config_changes::check_legacy_resource(res.resource_type),
            other => Err(not_altered_here(other)),
        };
        let (error_code, error_message) = split(outcome);
        response.responses.push(alter_configs_response::AlterConfigsResourceResponse {
            error_code,
            error_message,
            resource_type: res.resource_type,
            resource_name: res.resource_name.clone(),
            ..Default::default()
        });
    }
    Decided { records, response: ResponseBody::AlterConfigs(response) }
}

/// A topic resource's topic, as Kafka's `ControllerConfigurationValidator` and
/// existence check refuse it.
fn existing_topic(image: &MetadataImage, name: &str) -> Outcome<osprey_cluster::TopicImage> {
    if name.is_empty() {
        return Err((ErrorCode::INVALID_REQUEST, "Default topic resources are not allowed.".into()));
    }
    image.topic(name).cloned().ok_or_else(|| config_changes::unknown_topic(name))
}

/// The node's configuration with the committed dynamic broker configs on top: the
/// cluster-wide default, and `resource`'s own when it names a broker. The static
/// configuration if they do not combine (they were each validated when set).
fn effective_config(config: &BrokerConfig, image: &MetadataImage, resource: &str) -> BrokerConfig {
    let none = BTreeMap::new();
    let default = image.broker_configs("").unwrap_or(&none);
    let own = if resource.is_empty() { &none } else { image.broker_configs(resource).unwrap_or(&none) };
    config.with_dynamic(default, own).unwrap_or_else(|_| config.clone())
}

fn set_topic_configs(
    c: &mut Controls<'_>,
    image: &mut MetadataImage,
    name: &str,
    changes: &Changes,
    validate_only: bool,
    records: &mut Vec<MetadataRecord>,
) -> Outcome {
    let decided = c.topics.set_topic_configs(image, name, changes, validate_only, c.validate_topic_config);
    decided.map(|d| apply(image, d, records)).map_err(|e| (e.code, e.message))
}

fn set_broker_configs(
    c: &mut Controls<'_>,
    image: &mut MetadataImage,
    name: &str,
    changes: &Changes,
    validate_only: bool,
    records: &mut Vec<MetadataRecord>,
) -> Outcome {
    let effective = effective_config(c.broker_config, image, name);
    // The whole set the resource would hold, with Kafka's per-key and cross-key rules.
    let validate = |configs: &BTreeMap<String, String>| {
        effective
            .validate_dynamic(configs, name.is_empty())
            .map_err(|message| ControllerError::new(ErrorCode::INVALID_REQUEST, message))
    };
    let decided = c.topics.set_broker_configs(image, name, changes, validate_only, &validate);
    decided.map(|d| apply(image, d, records)).map_err(|e| (e.code, e.message))
}

fn set_group_configs(
    c: &mut Controls<'_>,
    image: &mut MetadataImage,
    group: &str,
    changes: &Changes,
    validate_only: bool,
    records: &mut Vec<MetadataRecord>,
) -> Outcome {
    let bounds = c.broker_config.group_config_bounds();
    let validate =
        |configs: &BTreeMap<String, String>| osprey_coordinator::group::group_config::validate(configs, &bounds);
    let decided = c.topics.set_group_configs(image, group, changes, validate_only, &validate);
    decided.map(|d| apply(image, d, records)).map_err(|e| (e.code, e.message))
}

/// The resource types the controller does not alter, each with why.
fn not_altered_here(resource_type: i8) -> (ErrorCode, String) {
    let why = match resource_type {
        config_changes::RESOURCE_BROKER_LOGGER => {
            "BROKER_LOGGER resources are not kept in the metadata log: alter them on the broker they name".into()
        }
        config_changes::RESOURCE_CLIENT_METRICS => "CLIENT_METRICS resources are not supported by Osprey".into(),
        other => format!("Unknown resource type {other}"),
    };
    (ErrorCode::INVALID_REQUEST, why)
}

fn split(outcome: Outcome) -> (i16, Option<String>) {
    match outcome {
        Ok(()) => (0, None),
        Err((code, message)) => (code.code(), Some(message)),
    }
}
