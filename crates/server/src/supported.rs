//! What ApiVersions advertises: only APIs and versions that are implemented and driven
//! by a real-client test. Clients believe this table, so it must never run ahead of
//! the handlers.
//!
//! Minimums follow the traps in PROTOCOL-NOTES.md: librdkafka (up to 2.11) enables
//! features only when the range *contains* an old version (gzip/snappy/lz4 need Produce
//! 0 in range, batch v2 needs Produce 3 and Fetch 4, ...), so Produce is advertised from
//! 0 and v0-2 are refused when they actually arrive, as Kafka 4 does.
//!
//! SaslHandshake and SaslAuthenticate are advertised on every listener, as Kafka does;
//! outside a SASL listener's authentication they are answered ILLEGAL_SASL_STATE.
//!
//! Absent on purpose (README "Not served yet"): delegation tokens; a client asking for
//! them is told the broker does not support them rather than given an answer that
//! pretends they exist.

use osprey_protocol::ApiKey;

/// (api, min, max) as advertised.
pub const ADVERTISED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 11),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 10),
    (ApiKey::OffsetFetch, 1, 10),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 5),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    // v5 is transaction version 2 (KIP-890 part 2): see `advertised_at`.
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 2),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::GetTelemetrySubscriptions, 0, 0),
    (ApiKey::PushTelemetry, 0, 0),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // Answered UNSUPPORTED_VERSION while `share.version` is 0, as Kafka lists them then too.
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 2),
    (ApiKey::ShareAcknowledge, 1, 2),
    // Share groups' offsets (`kafka-share-groups.sh`), behind share.version as the above.
    (ApiKey::DescribeShareGroupOffsets, 0, 1),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
    // Streams groups (KIP-1071), answered UNSUPPORTED_VERSION while `streams.version` is 0.
    (ApiKey::StreamsGroupHeartbeat, 0, 1),
    (ApiKey::StreamsGroupDescribe, 0, 1),
    // Broker to broker: share partitions' leaders and group coordinators to the share
    // coordinator (handlers/share_state.rs). Not behind share.version, as in Kafka.
    (ApiKey::InitializeShareGroupState, 0, 0),
    (ApiKey::ReadShareGroupState, 0, 0),
    (ApiKey::WriteShareGroupState, 0, 1),
    (ApiKey::DeleteShareGroupState, 0, 0),
    (ApiKey::ReadShareGroupStateSummary, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    // With `authorizer.class.name` unset, answered SECURITY_DISABLED as Kafka does (acls.rs).
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// The highest `transaction.version` feature level this broker implements.
pub const MAX_TRANSACTION_VERSION: i16 = 2;

/// The highest `share.version` feature level this broker implements: 1, share groups
/// (KIP-932); 2, their dead-letter queues (KIP-1191).
pub const MAX_SHARE_VERSION: i16 = 2;

/// The highest `streams.version` feature level this broker implements: 1, streams groups
/// (KIP-1071).
pub const MAX_STREAMS_VERSION: i16 = 1;

/// Whether streams groups are on: the finalized `streams.version`
/// (`osprey.streams.version`) is 1 or more (Kafka's `StreamsVersion.streamsGroupSupported`).
pub fn streams_groups_enabled(streams_version: i16) -> bool {
    streams_version >= 1
}

/// Whether share groups are on: the finalized `share.version` (`osprey.share.version`)
/// is 1 or more (Kafka's `ShareVersion.supportsShareGroups`).
pub fn share_groups_enabled(share_version: i16) -> bool {
    share_version >= 1
}

/// The advertised range of `key`, if the broker serves it, with transaction version 2.
pub fn advertised(key: ApiKey) -> Option<(i16, i16)> {
    ADVERTISED.iter().find(|(k, _, _)| *k == key).map(|&(_, min, max)| (min, max))
}

/// The advertised range of `key` when the finalized `transaction.version` is
/// `transaction_version`: below 2, EndTxn and TxnOffsetCommit stop at v4, their last
/// versions before transaction version 2 (Kafka's `LAST_BEFORE_TRANSACTION_V2_VERSION`),
/// so no client starts the KIP-890 part 2 protocol.
pub fn advertised_at(key: ApiKey, transaction_version: i16) -> Option<(i16, i16)> {
    let (min, max) = advertised(key)?;
    let capped = transaction_version < 2 && matches!(key, ApiKey::EndTxn | ApiKey::TxnOffsetCommit);
    Some((min, if capped { max.min(4) } else { max }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_ranges_are_within_what_the_codec_knows() {
        for &(key, min, max) in ADVERTISED {
            let (cmin, cmax) = key.versions();
            assert!(min <= max, "{key:?}");
            assert!(cmin <= min && max <= cmax, "{key:?} advertises {min}-{max}, codec knows {cmin}-{cmax}");
        }
    }

    #[test]
    fn transaction_version_1_hides_the_part_2_versions() {
        assert_eq!(advertised_at(ApiKey::EndTxn, 1), Some((0, 4)));
        assert_eq!(advertised_at(ApiKey::TxnOffsetCommit, 1), Some((0, 4)));
        assert_eq!(advertised_at(ApiKey::EndTxn, 2), Some((0, 5)));
        assert_eq!(advertised_at(ApiKey::Produce, 1), advertised(ApiKey::Produce));
    }

    #[test]
    fn librdkafka_feature_traps_are_respected() {
        assert_eq!(advertised(ApiKey::Produce).map(|r| r.0), Some(0));
        assert_eq!(advertised(ApiKey::ApiVersions).map(|r| r.0), Some(0));
        assert!(advertised(ApiKey::Fetch).is_some_and(|(min, max)| min <= 4 && max >= 10));
        assert!(advertised(ApiKey::ListOffsets).is_some_and(|(min, _)| min <= 1));
    }
}
