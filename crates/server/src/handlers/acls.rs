//! DescribeAcls, CreateAcls and DeleteAcls. ACLs live in the cluster metadata as Kafka
//! keeps them (AccessControlEntryRecord, RemoveAccessControlEntryRecord, each ACL under
//! an id): created and deleted by the controller (this node's own, or the cluster's
//! active controller, which decides with [`decide_create`] and [`decide_delete`]), and
//! read by every broker's authorizer from its image.
//!
//! Without an authorizer (`authorizer.class.name` unset) Kafka still serves these APIs
//! and answers SECURITY_DISABLED, so that clients and `kafka-acls.sh` report "No
//! Authorizer is configured" instead of "not supported by the broker"; so does Osprey.
//! With one, DescribeAcls needs DESCRIBE on the cluster and the others ALTER, as in
//! Kafka's `AclApis`.

use crate::access::Access;
use crate::broker::Broker;
use osprey_cluster::acl::{operation, AclEntry, AclFilter};
use osprey_cluster::{ControllerError, MetadataImage, MetadataRecord};
use osprey_protocol::messages::create_acls_response::AclCreationResult;
use osprey_protocol::messages::delete_acls_request::DeleteAclsFilter;
use osprey_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use osprey_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use osprey_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Kafka's message for DescribeAcls (`AclApis.handleDescribeAcls`).
const DESCRIBE_MESSAGE: &str = "No Authorizer is configured on the broker";
/// Kafka's message for each creation and each deletion filter.
const ALTER_MESSAGE: &str = "No Authorizer is configured.";

pub fn describe(access: &Access, req: DescribeAclsRequest) -> ResponseBody {
    let refused = |code: ErrorCode, message: &str| {
        crate::telemetry::error_code(ApiKey::DescribeAcls, code);
        ResponseBody::DescribeAcls(DescribeAclsResponse {
            error_code: code.code(),
            error_message: Some(message.to_string()),
            ..Default::default()
        })
    };
    if !access.enabled() {
        return refused(ErrorCode::SECURITY_DISABLED, DESCRIBE_MESSAGE);
    }
    if !access.allows_cluster(operation::DESCRIBE) {
        return refused(ErrorCode::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.");
    }
    let filter = AclFilter {
        resource_type: req.resource_type_filter,
        resource_name: req.resource_name_filter,
        pattern_type: req.pattern_type_filter,
        principal: req.principal_filter,
        host: req.host_filter,
        operation: req.operation,
        permission_type: req.permission_type,
    };
    if filter.is_unknown() {
        return refused(ErrorCode::INVALID_REQUEST, "The request contained an invalid filter");
    }
    ResponseBody::DescribeAcls(DescribeAclsResponse {
        resources: described(access.image(), &filter),
        ..Default::default()
    })
}

/// The ACLs `filter` matches, grouped by resource pattern (Kafka's answer groups them
/// the same way), in a stable order.
fn described(image: &MetadataImage, filter: &AclFilter) -> Vec<DescribeAclsResource> {
    let mut by_resource: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
    for (_, acl) in image.acls().filter(|(_, acl)| filter.matches(acl)) {
        by_resource.entry((acl.resource_type, &acl.resource_name, acl.pattern_type)).or_default().push(
            AclDescription {
                principal: acl.principal.clone(),
                host: acl.host.clone(),
                operation: acl.operation,
                permission_type: acl.permission_type,
                ..Default::default()
            },
        );
    }
    by_resource
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| DescribeAclsResource {
            resource_type,
            resource_name: name.to_string(),
            pattern_type,
            acls,
            ..Default::default()
        })
        .collect()
}

/// Runs on the blocking pool: it writes the metadata log, through this node's own
/// controller or the cluster's active controller.
pub fn create(broker: &Arc<Broker>, access: &Access, req: CreateAclsRequest, version: i16) -> ResponseBody {
    let refusal = refusal(access);
    if let Some((code, message)) = refusal {
        return ResponseBody::CreateAcls(create_failed(&req, code, message));
    }
    let response = match broker.cluster_link() {
        Some(link) => return link.forward(RequestBody::CreateAcls(req), version, true),
        None => broker.with_controller(|c| {
            let (response, records) = decide_create(c.image(), &req);
            if !records.is_empty() {
                c.commit_records(records)?;
            }
            Ok(response)
        }),
    };
    let response = response.unwrap_or_else(|ControllerError { code, message }| create_failed(&req, code, &message));
    ResponseBody::CreateAcls(response)
}

/// CreateAcls and DeleteAcls without an authorizer: SECURITY_DISABLED, as Kafka answers.
/// With one, the authorizer checked ALTER on the cluster already (`crate::authorization`).
fn refusal(access: &Access) -> Option<(ErrorCode, &'static str)> {
    (!access.enabled()).then_some((ErrorCode::SECURITY_DISABLED, ALTER_MESSAGE))
}

/// Runs on the blocking pool, as [`create`].
pub fn delete(broker: &Arc<Broker>, access: &Access, req: DeleteAclsRequest, version: i16) -> ResponseBody {
    let refusal = refusal(access);
    if let Some((code, message)) = refusal {
        return ResponseBody::DeleteAcls(delete_failed(&req, code, message));
    }
    let response = match broker.cluster_link() {
        Some(link) => return link.forward(RequestBody::DeleteAcls(req), version, true),
        None => broker.with_controller(|c| {
            let (response, records) = decide_delete(c.image(), &req);
            if !records.is_empty() {
                c.commit_records(records)?;
            }
            Ok(response)
        }),
    };
    let response = response.unwrap_or_else(|ControllerError { code, message }| delete_failed(&req, code, &message));
    ResponseBody::DeleteAcls(response)
}

/// Kafka's `AclControlManager.createAcls`: each creation checked on its own; an ACL
/// that exists already (or earlier in the request) succeeds without a new record; each
/// new one gets a random id.
pub(crate) fn decide_create(
    image: &MetadataImage,
    req: &CreateAclsRequest,
) -> (CreateAclsResponse, Vec<MetadataRecord>) {
    let mut known: BTreeSet<AclEntry> = image.acls().map(|(_, acl)| acl.clone()).collect();
    let mut records = Vec::new();
    let results = req
        .creations
        .iter()
        .map(|c| {
            let acl = AclEntry {
                resource_type: c.resource_type,
                resource_name: c.resource_name.clone(),
                pattern_type: c.resource_pattern_type,
                principal: c.principal.clone(),
                host: c.host.clone(),
                operation: c.operation,
                permission_type: c.permission_type,
            };
            if let Err(message) = acl.validate() {
                return creation_result(ErrorCode::INVALID_REQUEST, Some(message));
            }
            if known.contains(&acl) {
                return creation_result(ErrorCode::NONE, None);
            }
            if known.len() >= osprey_cluster::acl::MAX_ACLS {
                let message = format!(
                    "The cluster holds {} ACLs, the most Osprey keeps; delete some before creating more.",
                    osprey_cluster::acl::MAX_ACLS
                );
                return creation_result(ErrorCode::POLICY_VIOLATION, Some(message));
            }
            match osprey_cluster::controller::random_uuid() {
                Ok(id) => {
                    known.insert(acl.clone());
                    records.push(MetadataRecord::AccessControlEntry { id: id.0, acl });
                    creation_result(ErrorCode::NONE, None)
                }
                Err(e) => creation_result(ErrorCode::UNKNOWN_SERVER_ERROR, Some(e.to_string())),
            }
        })
        .collect();
    (CreateAclsResponse { results, ..Default::default() }, records)
}

/// Kafka's `AclControlManager.deleteAcls`: every ACL each filter matches is removed and
/// listed under that filter (an ACL two filters match is listed under both and removed
/// once); a filter with an UNKNOWN field is INVALID_REQUEST.
pub(crate) fn decide_delete(
    image: &MetadataImage,
    req: &DeleteAclsRequest,
) -> (DeleteAclsResponse, Vec<MetadataRecord>) {
    let mut removed: BTreeSet<[u8; 16]> = BTreeSet::new();
    let filter_results = req
        .filters
        .iter()
        .map(|f| {
            let filter = delete_filter(f);
            if filter.is_unknown() {
                let message = "Unknown patternFilter or entryFilter.".to_string();
                return DeleteAclsFilterResult {
                    error_code: ErrorCode::INVALID_REQUEST.code(),
                    error_message: Some(message),
                    ..Default::default()
                };
            }
            let matching_acls = image
                .acls()
                .filter(|(_, acl)| filter.matches(acl))
                .map(|(id, acl)| {
                    removed.insert(*id);
                    matching_acl(acl)
                })
                .collect();
            DeleteAclsFilterResult { matching_acls, ..Default::default() }
        })
        .collect();
    let records = removed.into_iter().map(|id| MetadataRecord::RemoveAccessControlEntry { id }).collect();
    (DeleteAclsResponse { filter_results, ..Default::default() }, records)
}

/// The answer when nothing was created: `code` and `message` for every creation.
pub(crate) fn create_failed(req: &CreateAclsRequest, code: ErrorCode, message: &str) -> CreateAclsResponse {
    crate::telemetry::error_code(ApiKey::CreateAcls, code);
    let results = req.creations.iter().map(|_| creation_result(code, Some(message.to_string()))).collect();
    CreateAclsResponse { results, ..Default::default() }
}

/// The answer when nothing was deleted: `code` and `message` for every filter.
pub(crate) fn delete_failed(req: &DeleteAclsRequest, code: ErrorCode, message: &str) -> DeleteAclsResponse {
    crate::telemetry::error_code(ApiKey::DeleteAcls, code);
    let filter_results = req
        .filters
        .iter()
        .map(|_| DeleteAclsFilterResult {
            error_code: code.code(),
            error_message: Some(message.to_string()),
            ..Default::default()
        })
        .collect();
    DeleteAclsResponse { filter_results, ..Default::default() }
}

fn creation_result(code: ErrorCode, message: Option<String>) -> AclCreationResult {
    AclCreationResult { error_code: code.code(), error_message: message, ..Default::default() }
}

fn delete_filter(f: &DeleteAclsFilter) -> AclFilter {
    AclFilter {
        resource_type: f.resource_type_filter,
        resource_name: f.resource_name_filter.clone(),
        pattern_type: f.pattern_type_filter,
        principal: f.principal_filter.clone(),
        host: f.host_filter.clone(),
        operation: f.operation,
        permission_type: f.permission_type,
    }
}

fn matching_acl(acl: &AclEntry) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl {
        resource_type: acl.resource_type,
        resource_name: acl.resource_name.clone(),
        pattern_type: acl.pattern_type,
        principal: acl.principal.clone(),
        host: acl.host.clone(),
        operation: acl.operation,
        permission_type: acl.permission_type,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authorizer::{Authorizer, STANDARD_AUTHORIZER};
    use osprey_cluster::acl::{pattern_type, permission_type, resource_type};
    use osprey_protocol::messages::create_acls_request::AclCreation;

    fn creation(name: &str, pattern: i8, principal: &str, op: i8) -> AclCreation {
        AclCreation {
            resource_type: resource_type::TOPIC,
            resource_name: name.into(),
            resource_pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission_type: permission_type::ALLOW,
            ..Default::default()
        }
    }

    fn filter(name: Option<&str>, pattern: i8) -> DeleteAclsFilter {
        DeleteAclsFilter {
            resource_type_filter: resource_type::ANY,
            resource_name_filter: name.map(str::to_string),
            pattern_type_filter: pattern,
            principal_filter: None,
            host_filter: None,
            operation: operation::ANY,
            permission_type: permission_type::ANY,
            ..Default::default()
        }
    }

    fn created(image: &mut MetadataImage, creations: Vec<AclCreation>) -> Vec<i16> {
        let (response, records) = decide_create(image, &CreateAclsRequest { creations, ..Default::default() });
        for r in &records {
            image.apply(r);
        }
        response.results.iter().map(|r| r.error_code).collect()
    }

    fn admin(image: &MetadataImage) -> Access {
        let authorizer = Authorizer::from_config(STANDARD_AUTHORIZER, "User:admin", false);
        Access::for_test(authorizer, image.clone(), "User:admin", "127.0.0.1")
    }

    #[test]
    fn no_acl_is_created_past_the_bound_and_a_repeat_still_succeeds() {
        let mut image = MetadataImage::default();
        for n in 0..osprey_cluster::acl::MAX_ACLS {
            let acl = AclEntry {
                resource_type: resource_type::TOPIC,
                resource_name: format!("t{n}"),
                pattern_type: pattern_type::LITERAL,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: operation::READ,
                permission_type: permission_type::ALLOW,
            };
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(n as u64).to_be_bytes());
            image.apply(&MetadataRecord::AccessControlEntry { id, acl });
        }
        let codes = created(
            &mut image,
            vec![
                creation("t0", pattern_type::LITERAL, "User:alice", operation::READ),
                creation("new", pattern_type::LITERAL, "User:alice", operation::READ),
            ],
        );
        assert_eq!(codes, vec![0, ErrorCode::POLICY_VIOLATION.code()]);
        assert_eq!(image.acls().count(), osprey_cluster::acl::MAX_ACLS);
    }

    #[test]
    fn creations_are_checked_one_by_one_and_a_repeat_adds_no_record() {
        let mut image = MetadataImage::default();
        let codes = created(
            &mut image,
            vec![
                creation("t", pattern_type::LITERAL, "User:alice", operation::READ),
                creation("t", pattern_type::MATCH, "User:alice", operation::READ),
                creation("t", pattern_type::LITERAL, "alice", operation::READ),
                creation("t", pattern_type::LITERAL, "User:alice", operation::READ),
                creation("p-", pattern_type::PREFIXED, "User:bob", operation::WRITE),
            ],
        );
        let invalid = ErrorCode::INVALID_REQUEST.code();
        assert_eq!(codes, vec![0, invalid, invalid, 0, 0]);
        assert_eq!(image.acls().count(), 2);
        // Created again in a later request: still one of each.
        assert_eq!(created(&mut image, vec![creation("t", pattern_type::LITERAL, "User:alice", operation::READ)]), [0]);
        assert_eq!(image.acls().count(), 2);
    }

    #[test]
    fn describe_groups_matching_acls_by_resource_and_refuses_unknown_filters() {
        let mut image = MetadataImage::default();
        created(
            &mut image,
            vec![
                creation("t", pattern_type::LITERAL, "User:alice", operation::READ),
                creation("t", pattern_type::LITERAL, "User:bob", operation::WRITE),
                creation("t-", pattern_type::PREFIXED, "User:bob", operation::WRITE),
                creation("u", pattern_type::LITERAL, "User:bob", operation::WRITE),
            ],
        );
        let request = |name: Option<&str>, pattern: i8| DescribeAclsRequest {
            resource_type_filter: resource_type::TOPIC,
            resource_name_filter: name.map(str::to_string),
            pattern_type_filter: pattern,
            principal_filter: None,
            host_filter: None,
            operation: operation::ANY,
            permission_type: permission_type::ANY,
            ..Default::default()
        };
        let ResponseBody::DescribeAcls(r) = describe(&admin(&image), request(Some("t-1"), pattern_type::MATCH)) else {
            panic!()
        };
        let found: Vec<(&str, usize)> = r.resources.iter().map(|r| (r.resource_name.as_str(), r.acls.len())).collect();
        assert_eq!(found, [("t-", 1)]);
        let ResponseBody::DescribeAcls(r) = describe(&admin(&image), request(Some("t"), pattern_type::ANY)) else {
            panic!()
        };
        let found: Vec<(&str, usize)> = r.resources.iter().map(|r| (r.resource_name.as_str(), r.acls.len())).collect();
        assert_eq!(found, [("t", 2)]);
        let ResponseBody::DescribeAcls(r) = describe(&admin(&image), request(None, pattern_type::UNKNOWN)) else {
            panic!()
        };
        assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code());
    }

    #[test]
    fn describe_without_an_authorizer_is_security_disabled_and_without_describe_cluster_is_refused() {
        let off = Access::for_test(None, MetadataImage::default(), "User:admin", "127.0.0.1");
        let ResponseBody::DescribeAcls(r) = describe(&off, Default::default()) else { panic!() };
        assert_eq!(r.error_code, ErrorCode::SECURITY_DISABLED.code());
        let authorizer = Authorizer::from_config(STANDARD_AUTHORIZER, "User:admin", false);
        let alice = Access::for_test(authorizer, MetadataImage::default(), "User:alice", "127.0.0.1");
        let ResponseBody::DescribeAcls(r) = describe(&alice, Default::default()) else { panic!() };
        assert_eq!(r.error_code, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code());
    }

    #[test]
    fn delete_lists_what_each_filter_matched_and_removes_each_acl_once() {
        let mut image = MetadataImage::default();
        created(
            &mut image,
            vec![
                creation("t", pattern_type::LITERAL, "User:alice", operation::READ),
                creation("t-", pattern_type::PREFIXED, "User:bob", operation::WRITE),
                creation("u", pattern_type::LITERAL, "User:bob", operation::WRITE),
            ],
        );
        let request = DeleteAclsRequest {
            filters: vec![
                filter(Some("t-x"), pattern_type::MATCH),
                filter(None, pattern_type::PREFIXED),
                filter(None, pattern_type::UNKNOWN),
            ],
            ..Default::default()
        };
        let (response, records) = decide_delete(&image, &request);
        let listed: Vec<Vec<&str>> = response
            .filter_results
            .iter()
            .map(|r| r.matching_acls.iter().map(|a| a.resource_name.as_str()).collect())
            .collect();
        assert_eq!(listed, vec![vec!["t-"], vec!["t-"], vec![]]);
        assert_eq!(response.filter_results[2].error_code, ErrorCode::INVALID_REQUEST.code());
        assert_eq!(records.len(), 1);
        for r in &records {
            image.apply(r);
        }
        let left: Vec<&str> = image.acls().map(|(_, a)| a.resource_name.as_str()).collect();
        assert_eq!(left.len(), 2);
        assert!(!left.contains(&"t-"));
    }

    /// Through the broker's request path: a CreateAcls from a super user is committed to
    /// the metadata log, listed by DescribeAcls, and lets alice see the topic at her next
    /// Metadata request.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acls_created_through_the_broker_are_listed_and_enforced_on_the_next_request() {
        use crate::broker::{Settings, DEFAULT_LISTENER};
        use crate::dispatch::{Client, Reply, Request};
        use osprey_protocol::messages::{MetadataRequest, MetadataResponse};
        use osprey_protocol::RequestHeader;

        let dir = std::env::temp_dir().join(format!("osprey-acls-enforced-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut settings = Settings::single_node(addr, dir.clone());
        let mut config = crate::config::BrokerConfig::default();
        config.authorizer = Authorizer::from_config(STANDARD_AUTHORIZER, "User:ANONYMOUS", false);
        settings.config = Arc::new(config);
        let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).unwrap();
        let topic = osprey_cluster::NewTopic {
            name: "t".into(),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        };
        broker.create_topic(&topic, false).unwrap();

        let answer = |principal: &str, api_key: ApiKey, version: i16, body: RequestBody| {
            let client = Client {
                peer: "127.0.0.1:1".parse().unwrap(),
                listener: DEFAULT_LISTENER.into(),
                principal: principal.into(),
            };
            let header = RequestHeader { request_api_version: version, ..RequestHeader::default() };
            crate::handlers::handle(&broker, Request { api_key, header, body }, &client)
        };
        async fn resolved(reply: Reply) -> ResponseBody {
            match reply {
                Reply::Now(body) => body,
                Reply::Later(pending) | Reply::Ordered(pending) => pending.await,
                other => panic!("{other:?}"),
            }
        }
        let metadata = || RequestBody::Metadata(MetadataRequest { topics: None, ..Default::default() });
        let names = |body: ResponseBody| match body {
            ResponseBody::Metadata(MetadataResponse { topics, .. }) => {
                topics.into_iter().filter_map(|t| t.name).collect::<Vec<_>>()
            }
            other => panic!("{other:?}"),
        };
        assert!(names(resolved(answer("User:alice", ApiKey::Metadata, 12, metadata())).await).is_empty());

        let creations = vec![creation("t", pattern_type::LITERAL, "User:alice", operation::READ)];
        let create = RequestBody::CreateAcls(CreateAclsRequest { creations: creations.clone(), ..Default::default() });
        // alice may not create ACLs; the cluster's super user may.
        let ResponseBody::CreateAcls(refused) = resolved(answer("User:alice", ApiKey::CreateAcls, 3, create)).await
        else {
            panic!()
        };
        assert_eq!(refused.results[0].error_code, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code());
        let create = RequestBody::CreateAcls(CreateAclsRequest { creations, ..Default::default() });
        let ResponseBody::CreateAcls(created) = resolved(answer("User:ANONYMOUS", ApiKey::CreateAcls, 3, create)).await
        else {
            panic!()
        };
        assert_eq!(created.results[0].error_code, 0);
        assert_eq!(broker.image().acls().count(), 1);
        assert_eq!(names(resolved(answer("User:alice", ApiKey::Metadata, 12, metadata())).await), ["t"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
