//! ACLs as the cluster metadata keeps them (Kafka's `StandardAcl`, written as
//! AccessControlEntryRecord and removed by RemoveAccessControlEntryRecord, each with an
//! id), and the filters DescribeAcls and DeleteAcls match them with (Kafka's
//! `AclBindingFilter`, with its ANY and MATCH semantics).
//!
//! The codes are Kafka's wire codes (`ResourceType`, `PatternType`, `AclOperation`,
//! `AclPermissionType`), kept as `i8` as the records and requests carry them.

/// The most ACLs the cluster keeps (Osprey's bound; Kafka has none): a CreateAcls past it
/// is refused with POLICY_VIOLATION, so that no admin client can grow the metadata image,
/// and every authorization's scan of it, without limit.
pub const MAX_ACLS: usize = 100_000;

use serde::{Deserialize, Serialize};

/// Kafka's `ResourceType` codes.
pub mod resource_type {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's `PatternType` codes.
pub mod pattern_type {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// Kafka's `AclOperation` codes.
pub mod operation {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
    /// The highest code Kafka defines.
    pub const MAX: i8 = DESCRIBE_TOKENS;
}

/// Kafka's `AclPermissionType` codes.
pub mod permission_type {
    pub const UNKNOWN: i8 = 0;
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// The literal resource name that matches every name of its type (`*`).
pub const WILDCARD_RESOURCE: &str = "*";
/// The host that matches every client address.
pub const WILDCARD_HOST: &str = "*";
/// The principal that matches every user (`User:*`).
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The only name of the CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// One ACL: who (principal, host) may or may not (permission) do what (operation) to
/// which resources (type, name and pattern type LITERAL or PREFIXED).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclEntry {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// What DescribeAcls and DeleteAcls select ACLs with; `None` names match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclFilter {
    /// A filter with an UNKNOWN field (Kafka's `AclBindingFilter.isUnknown`), which
    /// matches nothing and is refused as an invalid request.
    pub fn is_unknown(&self) -> bool {
        self.resource_type == resource_type::UNKNOWN
            || self.pattern_type == pattern_type::UNKNOWN
            || self.operation == operation::UNKNOWN
            || self.permission_type == permission_type::UNKNOWN
    }

    /// Kafka's `AclBindingFilter.matches`: the pattern filter and the entry filter both
    /// match.
    pub fn matches(&self, acl: &AclEntry) -> bool {
        self.matches_pattern(acl) && self.matches_entry(acl)
    }

    /// Kafka's `ResourcePatternFilter.matches`. ANY matches every pattern type with the
    /// name as given; MATCH matches the patterns that would apply to a resource of that
    /// name: the literal name, the `*` literal, and every prefix of it.
    fn matches_pattern(&self, acl: &AclEntry) -> bool {
        if self.resource_type != resource_type::ANY && self.resource_type != acl.resource_type {
            return false;
        }
        let any_or_match = matches!(self.pattern_type, pattern_type::ANY | pattern_type::MATCH);
        if !any_or_match && self.pattern_type != acl.pattern_type {
            return false;
        }
        let Some(name) = &self.resource_name else { return true };
        if self.pattern_type == pattern_type::ANY || self.pattern_type == acl.pattern_type {
            return *name == acl.resource_name;
        }
        match acl.pattern_type {
            pattern_type::LITERAL => *name == acl.resource_name || acl.resource_name == WILDCARD_RESOURCE,
            pattern_type::PREFIXED => name.starts_with(&acl.resource_name),
            _ => false,
        }
    }

    /// Kafka's `AccessControlEntryFilter.matches`.
    fn matches_entry(&self, acl: &AclEntry) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == operation::ANY || self.operation == acl.operation)
            && (self.permission_type == permission_type::ANY || self.permission_type == acl.permission_type)
    }
}

impl AclEntry {
    /// Kafka's checks of a new ACL (`AclControlManager.validateNewAcl`, and the CLUSTER
    /// name check of `AclApis.handleCreateAcls`): the message of the INVALID_REQUEST
    /// it is refused with.
    pub fn validate(&self) -> Result<(), String> {
        if matches!(self.resource_type, resource_type::UNKNOWN | resource_type::ANY) || self.resource_type > 7 {
            return Err(format!("Invalid resourceType {}", self.resource_type));
        }
        if !matches!(self.pattern_type, pattern_type::LITERAL | pattern_type::PREFIXED) {
            return Err(format!("Invalid patternType {}", self.pattern_type));
        }
        if matches!(self.operation, operation::UNKNOWN | operation::ANY)
            || !(0..=operation::MAX).contains(&self.operation)
        {
            return Err(format!("Invalid operation {}", self.operation));
        }
        if !matches!(self.permission_type, permission_type::DENY | permission_type::ALLOW) {
            return Err(format!("Invalid permissionType {}", self.permission_type));
        }
        if self.resource_name.is_empty() {
            return Err("Resource name should not be empty".to_string());
        }
        if self.resource_type == resource_type::CLUSTER && self.resource_name != CLUSTER_NAME {
            return Err(format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        if !self.principal.contains(':') {
            return Err(format!(
                "Could not parse principal from `{}` (no colon is present separating the principal type from the \
                 principal name)",
                self.principal
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(pattern: i8, name: &str) -> AclEntry {
        AclEntry {
            resource_type: resource_type::TOPIC,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: operation::READ,
            permission_type: permission_type::ALLOW,
        }
    }

    fn filter(pattern: i8, name: Option<&str>) -> AclFilter {
        AclFilter {
            resource_type: resource_type::ANY,
            resource_name: name.map(str::to_string),
            pattern_type: pattern,
            principal: None,
            host: None,
            operation: operation::ANY,
            permission_type: permission_type::ANY,
        }
    }

    #[test]
    fn match_filter_selects_the_literal_the_wildcard_and_the_prefixes_that_apply_to_a_name() {
        let f = filter(pattern_type::MATCH, Some("orders-eu"));
        assert!(f.matches(&acl(pattern_type::LITERAL, "orders-eu")));
        assert!(f.matches(&acl(pattern_type::LITERAL, "*")));
        assert!(f.matches(&acl(pattern_type::PREFIXED, "orders-")));
        assert!(!f.matches(&acl(pattern_type::LITERAL, "orders-")));
        assert!(!f.matches(&acl(pattern_type::PREFIXED, "orders-eu-1")));
    }

    #[test]
    fn any_filter_matches_every_pattern_type_by_exact_name_and_literal_filters_only_literals() {
        let any = filter(pattern_type::ANY, Some("orders-"));
        assert!(any.matches(&acl(pattern_type::PREFIXED, "orders-")));
        assert!(any.matches(&acl(pattern_type::LITERAL, "orders-")));
        assert!(!any.matches(&acl(pattern_type::LITERAL, "*")));
        assert!(filter(pattern_type::ANY, None).matches(&acl(pattern_type::PREFIXED, "x")));
        let literal = filter(pattern_type::LITERAL, Some("*"));
        assert!(literal.matches(&acl(pattern_type::LITERAL, "*")));
        assert!(!literal.matches(&acl(pattern_type::LITERAL, "a")));
        assert!(!filter(pattern_type::PREFIXED, None).matches(&acl(pattern_type::LITERAL, "a")));
    }

    #[test]
    fn entry_filters_compare_principal_host_operation_and_permission() {
        let mut f = filter(pattern_type::ANY, None);
        f.principal = Some("User:bob".into());
        assert!(!f.matches(&acl(pattern_type::LITERAL, "t")));
        f.principal = Some("User:alice".into());
        f.operation = operation::WRITE;
        assert!(!f.matches(&acl(pattern_type::LITERAL, "t")));
        f.operation = operation::READ;
        f.permission_type = permission_type::DENY;
        assert!(!f.matches(&acl(pattern_type::LITERAL, "t")));
        f.permission_type = permission_type::ALLOW;
        assert!(f.matches(&acl(pattern_type::LITERAL, "t")));
    }

    #[test]
    fn new_acls_are_checked_as_kafka_checks_them() {
        assert!(acl(pattern_type::LITERAL, "t").validate().is_ok());
        assert!(acl(pattern_type::MATCH, "t").validate().unwrap_err().contains("patternType"));
        assert!(acl(pattern_type::LITERAL, "").validate().is_err());
        let mut no_colon = acl(pattern_type::LITERAL, "t");
        no_colon.principal = "alice".into();
        assert!(no_colon.validate().unwrap_err().contains("no colon"));
        let mut cluster = acl(pattern_type::LITERAL, "other");
        cluster.resource_type = resource_type::CLUSTER;
        assert!(cluster.validate().is_err());
        cluster.resource_name = CLUSTER_NAME.into();
        assert!(cluster.validate().is_ok());
        let mut any_op = acl(pattern_type::LITERAL, "t");
        any_op.operation = operation::ANY;
        assert!(any_op.validate().is_err());
    }
}
