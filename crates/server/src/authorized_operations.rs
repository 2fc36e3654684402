//! The `authorized_operations` bit fields of Metadata, DescribeCluster, DescribeGroups,
//! ConsumerGroupDescribe and DescribeTopicPartitions (KIP-430).
//!
//! This broker has no authorizer, so, as Kafka's `AuthHelper.authorizedOperations` does
//! when `authorizer.class.name` is empty, every operation that applies to a resource type
//! is authorized: the answer is the full set Kafka's `AclEntry.supportedOperations` lists
//! for the type. When the client did not ask, the field keeps its schema default,
//! `i32::MIN` (bit 31 alone), which clients read as "not provided".

/// Kafka's `AclOperation` codes (the bit each one sets).
mod acl_operation {
    pub const READ: u8 = 3;
    pub const WRITE: u8 = 4;
    pub const CREATE: u8 = 5;
    pub const DELETE: u8 = 6;
    pub const ALTER: u8 = 7;
    pub const DESCRIBE: u8 = 8;
    pub const CLUSTER_ACTION: u8 = 9;
    pub const DESCRIBE_CONFIGS: u8 = 10;
    pub const ALTER_CONFIGS: u8 = 11;
    pub const IDEMPOTENT_WRITE: u8 = 12;
}
use acl_operation::*;

/// The field's value when the client did not ask for authorized operations.
pub const NOT_REQUESTED: i32 = i32::MIN;

/// Everything that applies to a topic.
pub const TOPIC: i32 = bits(&[READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS]);

/// Everything that applies to a consumer group (group configs are KIP-848's).
pub const GROUP: i32 = bits(&[READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS]);

/// Everything that applies to the cluster.
pub const CLUSTER: i32 =
    bits(&[CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE]);

/// `all` when the client asked for authorized operations, else the "not provided" value.
pub fn if_requested(requested: bool, all: i32) -> i32 {
    if requested {
        all
    } else {
        NOT_REQUESTED
    }
}

/// A group of a describe answer (DescribeGroups, ConsumerGroupDescribe,
/// ShareGroupDescribe), as the operations fields are filled in.
pub trait DescribedGroup {
    fn group_id(&self) -> &str;
    fn error_code(&self) -> i16;
    fn set_authorized_operations(&mut self, operations: i32);
}

macro_rules! described_group {
    ($($module:ident),+) => {$(
        impl DescribedGroup for osprey_protocol::messages::$module::DescribedGroup {
            fn group_id(&self) -> &str {
                &self.group_id
            }
            fn error_code(&self) -> i16 {
                self.error_code
            }
            fn set_authorized_operations(&mut self, operations: i32) {
                self.authorized_operations = operations;
            }
        }
    )+};
}
described_group!(
    describe_groups_response,
    consumer_group_describe_response,
    share_group_describe_response,
    streams_group_describe_response
);

/// Each group described without error gets every group operation when the client asked
/// (`requested`), else "not provided".
pub fn set_for_groups<G: DescribedGroup>(groups: &mut [G], requested: bool) {
    let operations = if_requested(requested, GROUP);
    for group in groups.iter_mut().filter(|g| g.error_code() == 0) {
        group.set_authorized_operations(operations);
    }
}

/// Kafka's `Utils.to32BitField`: bit `code` set for each operation.
const fn bits(operations: &[u8]) -> i32 {
    let mut field = 0i32;
    let mut i = 0;
    while i < operations.len() {
        field |= 1 << operations[i];
        i += 1;
    }
    field
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(field: i32) -> Vec<u8> {
        (0..32).filter(|bit| field & (1 << bit) != 0).collect()
    }

    #[test]
    fn sets_are_kafkas_supported_operations_per_resource_type() {
        assert_eq!(codes(TOPIC), [3, 4, 5, 6, 7, 8, 10, 11]);
        assert_eq!(codes(GROUP), [3, 6, 8, 10, 11]);
        assert_eq!(codes(CLUSTER), [5, 7, 8, 9, 10, 11, 12]);
        assert_eq!(codes(if_requested(false, TOPIC)), [31]);
    }
}
