//! Kafka's `StandardAuthorizer` (`authorizer.class.name=
//! org.apache.kafka.metadata.authorizer.StandardAuthorizer`): whether a principal,
//! connected from a host, may perform an operation on a resource, decided from the ACLs
//! of the cluster metadata. No I/O and no state but its configuration: the ACLs are
//! passed in (the metadata image's), so every broker decides from the same records.
//!
//! The rules are Kafka's (`StandardAuthorizerData.authorize` and `findResult`):
//! - a super user (`super.users`) may do everything;
//! - an ACL applies to a resource when its type is the resource's and it is the
//!   resource's literal name, the `*` literal, or a prefix of the name (PREFIXED);
//! - of those, an ACL matches the request when its principal is the requester's or
//!   `User:*`, its host is the client's address or `*`, and its operation is the one
//!   asked or ALL; an ALLOW ACL also matches an operation it implies (READ, WRITE,
//!   DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
//! - a matching DENY wins over any ALLOW; a matching ALLOW allows;
//! - with no ACL applying to the resource at all, `allow.everyone.if.no.acl.found`
//!   decides (false by default: denied).

use osprey_cluster::acl::{
    operation, pattern_type, permission_type, AclEntry, WILDCARD_HOST, WILDCARD_PRINCIPAL, WILDCARD_RESOURCE,
};
use std::collections::BTreeSet;

/// The one value of `authorizer.class.name` that enables an authorizer.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The authorizer's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorizer {
    /// `super.users`: principals (`User:admin`) allowed everything.
    super_users: BTreeSet<String>,
    /// `allow.everyone.if.no.acl.found`.
    allow_everyone_if_no_acl_found: bool,
}

/// Who asks: the connection's principal (`User:alice`) and the client's IP address as
/// text (`127.0.0.1`), as ACL hosts are written.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub principal: &'a str,
    pub host: &'a str,
}

impl Authorizer {
    /// The authorizer `authorizer.class.name` asks for, if any (the config table allows
    /// only empty or [`STANDARD_AUTHORIZER`]). `super_users` is `super.users`:
    /// principals separated by semicolons.
    pub fn from_config(class_name: &str, super_users: &str, allow_everyone_if_no_acl_found: bool) -> Option<Self> {
        if class_name.trim().is_empty() {
            return None;
        }
        let super_users = super_users.split(';').map(str::trim).filter(|p| !p.is_empty()).map(str::to_string).collect();
        Some(Authorizer { super_users, allow_everyone_if_no_acl_found })
    }

    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.contains(principal)
    }

    /// Whether `who` may perform `op` on the resource of `resource_type` named `name`.
    pub fn authorize<'a>(
        &self,
        acls: impl IntoIterator<Item = &'a AclEntry>,
        who: Requester<'_>,
        resource_type: i8,
        name: &str,
        op: i8,
    ) -> bool {
        if self.is_super_user(who.principal) {
            return true;
        }
        let mut any_acl = false;
        let mut allowed = false;
        for acl in acls.into_iter().filter(|acl| applies_to(acl, resource_type, name)) {
            any_acl = true;
            match decision(acl, who, op) {
                Some(false) => return false,
                Some(true) => allowed = true,
                None => {}
            }
        }
        allowed || (!any_acl && self.allow_everyone_if_no_acl_found)
    }

    /// Whether `who` may perform `op` on some resource of `resource_type` (Kafka's
    /// `Authorizer.authorizeByResourceType`, which idempotent produce asks of WRITE on
    /// topics): an ALLOW ACL for it that no DENY ACL covers. A literal or prefixed deny
    /// covers an allow of the same name, or of a name it is a prefix of; a deny on the
    /// `*` literal covers everything.
    pub fn authorize_by_resource_type<'a>(
        &self,
        acls: impl IntoIterator<Item = &'a AclEntry> + Clone,
        who: Requester<'_>,
        resource_type: i8,
        op: i8,
    ) -> bool {
        if self.is_super_user(who.principal) {
            return true;
        }
        let matching = |permission: i8| {
            acls.clone().into_iter().filter(move |acl| {
                acl.resource_type == resource_type
                    && acl.permission_type == permission
                    && (acl.operation == op || acl.operation == operation::ALL)
                    && principal_and_host_match(acl, who)
            })
        };
        let denies: Vec<&AclEntry> = matching(permission_type::DENY).collect();
        if denies.iter().any(|d| d.pattern_type == pattern_type::LITERAL && d.resource_name == WILDCARD_RESOURCE) {
            return false;
        }
        let covered = |allow: &AclEntry| {
            denies.iter().any(|d| match d.pattern_type {
                pattern_type::PREFIXED => allow.resource_name.starts_with(&d.resource_name),
                _ => allow.pattern_type == pattern_type::LITERAL && allow.resource_name == d.resource_name,
            })
        };
        let allowed = matching(permission_type::ALLOW).any(|allow| !covered(allow));
        let no_acl_of_type = || !acls.clone().into_iter().any(|acl| acl.resource_type == resource_type);
        allowed || (self.allow_everyone_if_no_acl_found && no_acl_of_type())
    }
}

/// The ACL is about this resource: its type, and its literal name, the `*` literal, or
/// a prefix of its name.
fn applies_to(acl: &AclEntry, resource_type: i8, name: &str) -> bool {
    acl.resource_type == resource_type
        && match acl.pattern_type {
            pattern_type::LITERAL => acl.resource_name == name || acl.resource_name == WILDCARD_RESOURCE,
            pattern_type::PREFIXED => name.starts_with(&acl.resource_name),
            _ => false,
        }
}

fn principal_and_host_match(acl: &AclEntry, who: Requester<'_>) -> bool {
    (acl.principal == who.principal || acl.principal == WILDCARD_PRINCIPAL)
        && (acl.host == WILDCARD_HOST || acl.host == who.host)
}

/// Kafka's `findResult`: `Some(true)` an ALLOW that matches, `Some(false)` a DENY that
/// matches, `None` an ACL that says nothing about this request.
fn decision(acl: &AclEntry, who: Requester<'_>, op: i8) -> Option<bool> {
    if !principal_and_host_match(acl, who) {
        return None;
    }
    let allow = acl.permission_type == permission_type::ALLOW;
    let op_matches = acl.operation == operation::ALL || acl.operation == op || (allow && implies(acl.operation, op));
    op_matches.then_some(allow)
}

/// An ALLOW of `granted` also allows `asked` (Kafka's `IMPLIES_DESCRIBE` and
/// `IMPLIES_DESCRIBE_CONFIGS`).
fn implies(granted: i8, asked: i8) -> bool {
    match asked {
        operation::DESCRIBE => {
            matches!(granted, operation::READ | operation::WRITE | operation::DELETE | operation::ALTER)
        }
        operation::DESCRIBE_CONFIGS => granted == operation::ALTER_CONFIGS,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_cluster::acl::resource_type::{CLUSTER, GROUP, TOPIC};
    use proptest::prelude::*;

    const ALICE: Requester<'static> = Requester { principal: "User:alice", host: "10.0.0.1" };

    fn acl(resource_type: i8, pattern: i8, name: &str, principal: &str, op: i8, permission: i8) -> AclEntry {
        AclEntry {
            resource_type,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission_type: permission,
        }
    }

    fn allow(name: &str, op: i8) -> AclEntry {
        acl(TOPIC, pattern_type::LITERAL, name, "User:alice", op, permission_type::ALLOW)
    }

    fn deny(name: &str, op: i8) -> AclEntry {
        acl(TOPIC, pattern_type::LITERAL, name, "User:alice", op, permission_type::DENY)
    }

    fn standard(super_users: &str) -> Authorizer {
        Authorizer::from_config(STANDARD_AUTHORIZER, super_users, false).unwrap()
    }

    #[test]
    fn no_class_name_is_no_authorizer_and_super_users_split_on_semicolons() {
        assert!(Authorizer::from_config("", "User:a", false).is_none());
        let a = standard(" User:admin ; User:ANONYMOUS;");
        assert!(a.is_super_user("User:admin") && a.is_super_user("User:ANONYMOUS"));
        assert!(!a.is_super_user("User:alice"));
    }

    #[test]
    fn nothing_is_allowed_without_an_acl_unless_everyone_is_allowed_then() {
        let a = standard("");
        assert!(!a.authorize(&[], ALICE, TOPIC, "t", operation::READ));
        let open = Authorizer::from_config(STANDARD_AUTHORIZER, "", true).unwrap();
        assert!(open.authorize(&[], ALICE, TOPIC, "t", operation::READ));
        // An ACL on the resource for someone else closes it to alice even then.
        let bobs = [acl(TOPIC, pattern_type::LITERAL, "t", "User:bob", operation::READ, permission_type::ALLOW)];
        assert!(!open.authorize(&bobs, ALICE, TOPIC, "t", operation::READ));
        assert!(open.authorize(&bobs, ALICE, TOPIC, "other", operation::READ));
    }

    #[test]
    fn literal_wildcard_and_prefixed_acls_apply_to_the_names_they_cover() {
        let a = standard("");
        let acls = [
            allow("exact", operation::READ),
            allow("*", operation::WRITE),
            acl(TOPIC, pattern_type::PREFIXED, "orders-", "User:alice", operation::DELETE, permission_type::ALLOW),
        ];
        assert!(a.authorize(&acls, ALICE, TOPIC, "exact", operation::READ));
        assert!(!a.authorize(&acls, ALICE, TOPIC, "exactly", operation::READ));
        assert!(a.authorize(&acls, ALICE, TOPIC, "anything", operation::WRITE));
        assert!(a.authorize(&acls, ALICE, TOPIC, "orders-eu", operation::DELETE));
        assert!(!a.authorize(&acls, ALICE, TOPIC, "order", operation::DELETE));
        assert!(!a.authorize(&acls, ALICE, GROUP, "exact", operation::READ));
    }

    #[test]
    fn allow_implies_describe_and_describe_configs_but_deny_only_denies_what_it_names() {
        let a = standard("");
        assert!(a.authorize(&[allow("t", operation::WRITE)], ALICE, TOPIC, "t", operation::DESCRIBE));
        assert!(a.authorize(&[allow("t", operation::ALTER_CONFIGS)], ALICE, TOPIC, "t", operation::DESCRIBE_CONFIGS));
        assert!(!a.authorize(&[allow("t", operation::DESCRIBE)], ALICE, TOPIC, "t", operation::READ));
        assert!(a.authorize(&[allow("t", operation::ALL)], ALICE, TOPIC, "t", operation::ALTER));
        let acls = [allow("t", operation::ALL), deny("t", operation::WRITE)];
        assert!(!a.authorize(&acls, ALICE, TOPIC, "t", operation::WRITE));
        assert!(a.authorize(&acls, ALICE, TOPIC, "t", operation::DESCRIBE));
    }

    #[test]
    fn principal_wildcard_and_hosts_are_matched() {
        let a = standard("");
        let mut everyone = acl(TOPIC, pattern_type::LITERAL, "t", "User:*", operation::READ, permission_type::ALLOW);
        assert!(a.authorize([&everyone], ALICE, TOPIC, "t", operation::READ));
        everyone.host = "10.0.0.2".into();
        assert!(!a.authorize([&everyone], ALICE, TOPIC, "t", operation::READ));
        everyone.host = "10.0.0.1".into();
        assert!(a.authorize([&everyone], ALICE, TOPIC, "t", operation::READ));
    }

    #[test]
    fn by_resource_type_needs_an_allow_no_deny_covers() {
        let a = standard("");
        assert!(!a.authorize_by_resource_type(&[], ALICE, TOPIC, operation::WRITE));
        let allowed = [allow("t", operation::WRITE)];
        assert!(a.authorize_by_resource_type(&allowed, ALICE, TOPIC, operation::WRITE));
        assert!(!a.authorize_by_resource_type(&allowed, ALICE, CLUSTER, operation::WRITE));
        let covered = [allow("t", operation::WRITE), deny("t", operation::WRITE)];
        assert!(!a.authorize_by_resource_type(&covered, ALICE, TOPIC, operation::WRITE));
        let everywhere = [allow("t", operation::WRITE), allow("u", operation::ALL), deny("*", operation::WRITE)];
        assert!(!a.authorize_by_resource_type(&everywhere, ALICE, TOPIC, operation::WRITE));
        let prefix = [
            allow("orders-eu", operation::WRITE),
            acl(TOPIC, pattern_type::PREFIXED, "orders-", "User:alice", operation::WRITE, permission_type::DENY),
        ];
        assert!(!a.authorize_by_resource_type(&prefix, ALICE, TOPIC, operation::WRITE));
    }

    fn any_acl() -> impl Strategy<Value = AclEntry> {
        (
            prop::sample::select(vec![TOPIC, GROUP]),
            prop::sample::select(vec![pattern_type::LITERAL, pattern_type::PREFIXED]),
            prop::sample::select(vec!["", "t", "t1", "*", "u"]),
            prop::sample::select(vec!["User:alice", "User:bob", "User:*"]),
            prop::sample::select(vec!["*", "10.0.0.1", "10.0.0.2"]),
            operation::ALL..=operation::IDEMPOTENT_WRITE,
            prop::sample::select(vec![permission_type::ALLOW, permission_type::DENY]),
        )
            .prop_map(|(resource_type, pattern, name, principal, host, op, permission)| {
                let mut a = acl(resource_type, pattern, name, principal, op, permission);
                a.host = host.into();
                a
            })
    }

    proptest! {
        /// Adding a DENY for the asked operation on the resource's literal name, for
        /// the requester, refuses whatever else the ACLs allow.
        #[test]
        fn a_matching_deny_always_wins(acls in prop::collection::vec(any_acl(), 0..12), op in operation::READ..=operation::IDEMPOTENT_WRITE) {
            let a = Authorizer::from_config(STANDARD_AUTHORIZER, "", true).unwrap();
            let mut acls = acls;
            acls.push(acl(TOPIC, pattern_type::LITERAL, "t1", "User:alice", op, permission_type::DENY));
            prop_assert!(!a.authorize(&acls, ALICE, TOPIC, "t1", op));
        }

        /// A super user is allowed whatever the ACLs say.
        #[test]
        fn a_super_user_is_always_allowed(acls in prop::collection::vec(any_acl(), 0..12), op in operation::READ..=operation::IDEMPOTENT_WRITE) {
            let a = standard("User:alice");
            prop_assert!(a.authorize(&acls, ALICE, TOPIC, "t1", op));
            prop_assert!(a.authorize_by_resource_type(&acls, ALICE, TOPIC, op));
        }

        /// DescribeAcls's MATCH filter for a name selects exactly the ACLs the
        /// authorizer applies to a resource of that name (what `kafka-acls.sh --list
        /// --resource-pattern-type match` shows is what is enforced).
        #[test]
        fn a_match_filter_selects_the_acls_that_apply(acl in any_acl(), name in prop::sample::select(vec!["t", "t1", "u", "*", "x"])) {
            let filter = osprey_cluster::acl::AclFilter {
                resource_type: TOPIC,
                resource_name: Some(name.to_string()),
                pattern_type: pattern_type::MATCH,
                principal: None,
                host: None,
                operation: operation::ANY,
                permission_type: permission_type::ANY,
            };
            prop_assert_eq!(filter.matches(&acl), applies_to(&acl, TOPIC, name));
        }

        /// Removing every DENY never turns an allowed request into a refused one.
        #[test]
        fn removing_denies_never_refuses_more(acls in prop::collection::vec(any_acl(), 0..12), op in operation::READ..=operation::IDEMPOTENT_WRITE) {
            let a = standard("");
            let allows: Vec<AclEntry> = acls.iter().filter(|x| x.permission_type == permission_type::ALLOW).cloned().collect();
            if a.authorize(&acls, ALICE, TOPIC, "t1", op) {
                prop_assert!(a.authorize(&allows, ALICE, TOPIC, "t1", op));
            }
        }
    }
}
