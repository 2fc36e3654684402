//! DescribeAcls, CreateAcls and DeleteAcls without an authorizer. Kafka with no
//! `authorizer.class.name` still serves these APIs and answers SECURITY_DISABLED, so
//! clients and `kafka-acls.sh` report "No Authorizer is configured" instead of "not
//! supported by the broker"; this broker does the same, with Kafka's messages, until it
//! has an authorizer of its own.

use osprey_protocol::messages::create_acls_response::AclCreationResult;
use osprey_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use osprey_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsResponse,
};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};

/// Kafka's message for DescribeAcls (`AclApis.handleDescribeAcls`).
const DESCRIBE_MESSAGE: &str = "No Authorizer is configured on the broker";
/// Kafka's message for each creation and each deletion filter.
const ALTER_MESSAGE: &str = "No Authorizer is configured.";

pub fn describe() -> ResponseBody {
    crate::telemetry::error_code(ApiKey::DescribeAcls, ErrorCode::SECURITY_DISABLED);
    ResponseBody::DescribeAcls(DescribeAclsResponse {
        error_code: ErrorCode::SECURITY_DISABLED.code(),
        error_message: Some(DESCRIBE_MESSAGE.to_string()),
        ..Default::default()
    })
}

/// One SECURITY_DISABLED result per requested creation, in request order.
pub fn create(req: CreateAclsRequest) -> ResponseBody {
    let results = req
        .creations
        .iter()
        .inspect(|_| crate::telemetry::error_code(ApiKey::CreateAcls, ErrorCode::SECURITY_DISABLED))
        .map(|_| AclCreationResult {
            error_code: ErrorCode::SECURITY_DISABLED.code(),
            error_message: Some(ALTER_MESSAGE.to_string()),
            ..Default::default()
        })
        .collect();
    ResponseBody::CreateAcls(CreateAclsResponse { results, ..Default::default() })
}

/// One SECURITY_DISABLED result per filter, in request order, matching nothing.
pub fn delete(req: DeleteAclsRequest) -> ResponseBody {
    let filter_results = req
        .filters
        .iter()
        .inspect(|_| crate::telemetry::error_code(ApiKey::DeleteAcls, ErrorCode::SECURITY_DISABLED))
        .map(|_| DeleteAclsFilterResult {
            error_code: ErrorCode::SECURITY_DISABLED.code(),
            error_message: Some(ALTER_MESSAGE.to_string()),
            ..Default::default()
        })
        .collect();
    ResponseBody::DeleteAcls(DeleteAclsResponse { filter_results, ..Default::default() })
}
