//! ListGroups v0-5, DescribeGroups v0-6 and DeleteGroups v0-2.

use super::consumer::CONSUMER_GROUP_TYPE;
use super::share::SHARE_GROUP_TYPE;
use super::state::GroupState;
use super::streams::STREAMS_GROUP_TYPE;
use super::{records, GroupCoordinator, ReplyId, Response};
use bytes::Bytes;
use osprey_protocol::messages::delete_groups_response::DeletableGroupResult;
use osprey_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use osprey_protocol::messages::list_groups_response::ListedGroup;
use osprey_protocol::messages::{DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse};
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;

/// The group type ListGroups v5 reports for every group here.
const CLASSIC_GROUP_TYPE: &str = "classic";

/// A DeleteGroups request waiting for its groups' tombstones.
#[derive(Debug)]
pub(super) struct DeleteBatch {
    reply: ReplyId,
    results: Vec<DeletableGroupResult>,
    outstanding: usize,
}

/// Whether a ListGroups filter lets `value` through: case-insensitively, empty means all.
fn wanted(filter: &[String], value: &str) -> bool {
    filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
}

/// A group of a modern type as ListGroups sees it: its id, its state as listed, and the
/// name its state filter matches (Kafka's `toLowerCaseString`: a streams group's
/// NotReady is filtered as "not_ready").
type ModernGroupRow<'a> = (&'a String, &'static str, &'static str);

/// The ListGroups rows of the groups of one modern type (KIP-848 consumer groups, KIP-932
/// share groups, KIP-1071 streams groups): the group type is their protocol type too.
fn listed_modern_groups<'a>(
    groups: impl Iterator<Item = ModernGroupRow<'a>>,
    group_type: &str,
    states: &[String],
    types: &[String],
    api_version: i16,
) -> Vec<ListedGroup> {
    groups
        .filter(|(_, _, filtered_as)| wanted(states, filtered_as) && wanted(types, group_type))
        .map(|(group_id, state, _)| ListedGroup {
            group_id: group_id.clone(),
            protocol_type: group_type.to_string(),
            group_state: if api_version >= 4 { state.to_string() } else { String::new() },
            group_type: if api_version >= 5 { group_type.to_string() } else { String::new() },
            ..Default::default()
        })
        .collect()
}

impl GroupCoordinator {
    /// ListGroups; `states` and `types` filter case-insensitively, empty means all.
    pub fn list_groups(&self, states: &[String], types: &[String], api_version: i16) -> ListGroupsResponse {
        let mut groups: Vec<ListedGroup> = self
            .groups
            .values()
            // A consumer or streams group's offsets-only entry is listed as that group.
            .filter(|g| {
                !self.consumer_groups.contains_key(&g.group_id) && !self.streams_groups.contains_key(&g.group_id)
            })
            .filter(|g| wanted(states, g.state.name()) && wanted(types, CLASSIC_GROUP_TYPE))
            .map(|g| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                group_state: if api_version >= 4 { g.state.name().to_string() } else { String::new() },
                group_type: if api_version >= 5 { CLASSIC_GROUP_TYPE.to_string() } else { String::new() },
                ..Default::default()
            })
            .collect();
        let consumer_groups = self.consumer_groups.values().map(|g| (&g.group_id, g.state().name(), g.state().name()));
        groups.extend(listed_modern_groups(consumer_groups, CONSUMER_GROUP_TYPE, states, types, api_version));
        let share_groups = self.share_groups.values().map(|g| (&g.group_id, g.state().name(), g.state().name()));
        groups.extend(listed_modern_groups(share_groups, SHARE_GROUP_TYPE, states, types, api_version));
        let streams_groups =
            self.streams_groups.values().map(|g| (&g.group_id, g.state().name(), g.state().filter_name()));
        groups.extend(listed_modern_groups(streams_groups, STREAMS_GROUP_TYPE, states, types, api_version));
        ListGroupsResponse { groups, ..Default::default() }
    }

    /// DescribeGroups. Members' metadata and assignments are shown only for a Stable
    /// group, as Kafka does. An unknown group is "Dead"; from v6 also GROUP_ID_NOT_FOUND.
    pub fn describe_groups(&self, group_ids: &[String], api_version: i16) -> DescribeGroupsResponse {
        let groups = group_ids.iter().map(|id| self.describe_group(id, api_version)).collect();
        DescribeGroupsResponse { groups, ..Default::default() }
    }

    fn describe_group(&self, group_id: &str, api_version: i16) -> DescribedGroup {
        let mut described = DescribedGroup {
            group_id: group_id.to_string(),
            authorized_operations: if api_version >= 3 {
                i32::MIN
            } else {
                DescribedGroup::default().authorized_operations
            },
            ..Default::default()
        };
        if let Some(error) = self.serving_error(group_id) {
            described.error_code = error.code();
            return described;
        }
        // A streams group's offsets-only entry is no classic group.
        let classic = self.groups.get(group_id).filter(|g| !g.is(GroupState::Dead) && !self.is_streams_group(group_id));
        let Some(group) = classic else {
            described.group_state = GroupState::Dead.name().to_string();
            if api_version >= 6 {
                described.error_code = ErrorCode::GROUP_ID_NOT_FOUND.code();
                // Kafka's `classicGroup(groupId)` on a group of another type.
                described.error_message = Some(if self.is_share_group(group_id) || self.is_streams_group(group_id) {
                    format!("Group {group_id} is not a classic group.")
                } else {
                    format!("Group {group_id} not found.")
                });
            }
            return described;
        };
        let stable_protocol = group.protocol_name.as_deref().filter(|_| group.is(GroupState::Stable));
        described.group_state = group.state.name().to_string();
        described.protocol_type = group.protocol_type.clone().unwrap_or_default();
        described.protocol_data = stable_protocol.unwrap_or("").to_string();
        described.members = group
            .members
            .iter()
            .map(|m| DescribedGroupMember {
                member_id: m.member_id.clone(),
                group_instance_id: if api_version >= 4 { m.group_instance_id.clone() } else { None },
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                member_metadata: stable_protocol.and_then(|p| m.metadata(p).cloned()).unwrap_or_default(),
                member_assignment: if stable_protocol.is_some() { m.assignment.clone() } else { Bytes::new() },
                ..Default::default()
            })
            .collect();
        described
    }

    /// DeleteGroups: an Empty group goes with its offsets (tombstones);
    /// NON_EMPTY_GROUP with members, GROUP_ID_NOT_FOUND if unknown. Answered for `reply`
    /// once every deleted group's tombstones are durable.
    pub fn delete_groups(&mut self, group_ids: &[String], reply: ReplyId) {
        let batch_id = self.next_batch_id;
        self.next_batch_id += 1;
        let mut batch = DeleteBatch { reply, results: Vec::new(), outstanding: 0 };
        for group_id in group_ids {
            if let Some(error) = self.serving_error(group_id) {
                let result =
                    DeletableGroupResult { group_id: group_id.clone(), error_code: error.code(), ..Default::default() };
                batch.results.push(result);
                continue;
            }
            // A consumer group (KIP-848) or a streams group (KIP-1071) goes only when it
            // has no members; its offsets live in the classic entry below. A share group
            // (KIP-932) has none.
            let taken = self
                .take_empty_share_group(group_id)
                .and_then(|share| match share {
                    Some(tombstones) => Ok(Some(tombstones)),
                    None => self.take_empty_consumer_group(group_id),
                })
                .and_then(|consumer| match consumer {
                    Some(tombstones) => Ok(Some(tombstones)),
                    None => self.take_empty_streams_group(group_id),
                });
            let consumer_tombstones = match taken {
                Ok(tombstones) => tombstones,
                Err(error) => {
                    batch.results.push(DeletableGroupResult {
                        group_id: group_id.clone(),
                        error_code: error.code(),
                        ..Default::default()
                    });
                    continue;
                }
            };
            let error = match self.groups.get(group_id).map(|g| g.state) {
                None | Some(GroupState::Dead) if consumer_tombstones.is_some() => {
                    let tombstones = consumer_tombstones.unwrap_or_default();
                    let then = records::Continuation::DeleteGroup { batch_id, group_id: group_id.clone() };
                    self.persist(group_id, tombstones, then);
                    batch.outstanding += 1;
                    ErrorCode::NONE
                }
                None | Some(GroupState::Dead) => ErrorCode::GROUP_ID_NOT_FOUND,
                Some(GroupState::Empty) => {
                    let group = self.groups.remove(group_id).expect("present");
                    let mut tombstones: Vec<records::Record> =
                        group.offsets.keys().map(|tp| records::offset_tombstone(group_id, tp)).collect();
                    // Open transactions' offsets go too (Kafka's `deleteAllOffsets`): a
                    // tombstone for each partition that has no committed offset to carry one.
                    tombstones.extend(
                        group
                            .pending_txn_partitions()
                            .iter()
                            .filter(|tp| !group.offsets.contains_key(*tp))
                            .map(|tp| records::offset_tombstone(group_id, tp)),
                    );
                    tombstones.push(records::group_tombstone(group_id));
                    tombstones.extend(consumer_tombstones.unwrap_or_default());
                    let then = records::Continuation::DeleteGroup { batch_id, group_id: group_id.clone() };
                    self.persist(group_id, tombstones, then);
                    batch.outstanding += 1;
                    ErrorCode::NONE
                }
                Some(_) => ErrorCode::NON_EMPTY_GROUP,
            };
            batch.results.push(DeletableGroupResult {
                group_id: group_id.clone(),
                error_code: error.code(),
                ..Default::default()
            });
        }
        if batch.outstanding == 0 {
            let response = DeleteGroupsResponse { results: batch.results, ..Default::default() };
            return self.respond(reply, Response::DeleteGroups(response));
        }
        self.delete_batches.insert(batch_id, batch);
    }

    /// An empty classic group gives way to a consumer or streams group taking its id
    /// (Kafka's `maybeDeleteEmptyClassicGroup`): its metadata goes, with a tombstone when
    /// it ever ran a protocol, while its committed offsets and open transactions' offsets
    /// stay in the entry, where the new group keeps its offsets. The records to write
    /// first; none when there is no such group.
    pub(super) fn convert_empty_classic_group(&mut self, group_id: &str, now_ms: i64) -> Vec<records::Record> {
        let Some(classic) = self.groups.get_mut(group_id) else { return Vec::new() };
        if classic.protocol_type.is_none() && classic.generation_id == 0 {
            return Vec::new();
        }
        let mut fresh = super::state::Group::new(group_id, now_ms);
        fresh.offsets = std::mem::take(&mut classic.offsets);
        fresh.pending_offset_commits = std::mem::take(&mut classic.pending_offset_commits);
        fresh.pending_txn_offsets = std::mem::take(&mut classic.pending_txn_offsets);
        *classic = fresh;
        vec![records::group_tombstone(group_id)]
    }

    pub(super) fn delete_group_persisted(&mut self, batch_id: u64, group_id: &str, result: Result<(), ErrorCode>) {
        let Some(batch) = self.delete_batches.get_mut(&batch_id) else { return };
        if let Err(error) = result {
            for r in batch.results.iter_mut().filter(|r| r.group_id == group_id) {
                r.error_code = error.code();
            }
        }
        batch.outstanding -= 1;
        if batch.outstanding == 0 {
            let batch = self.delete_batches.remove(&batch_id).expect("present");
            let response = DeleteGroupsResponse { results: batch.results, ..Default::default() };
            self.respond(batch.reply, Response::DeleteGroups(response));
        }
    }
}

impl GroupCoordinator {
    /// This broker is no longer the coordinator of `__consumer_offsets` partition
    /// `partition` (of `num_partitions`): its groups are dropped and their held JoinGroup
    /// and SyncGroup requests answered NOT_COORDINATOR (Kafka's `onGroupUnloaded`), so
    /// that the clients look up the new coordinator. Returns the number of groups dropped.
    ///
    /// Persists of those groups still in flight are failed first (NOT_COORDINATOR to the
    /// requests waiting on them); their later reports from the server are ignored, so
    /// nothing of a coordinator epoch that ended touches the groups when the partition
    /// is loaded again.
    pub fn unload_partition(&mut self, partition: i32, num_partitions: i32, now_ms: i64) -> usize {
        self.disown(partition);
        let on_partition = |id: &str| super::partition_for(id, num_partitions) == partition;
        for (id, result) in self.persist_order.abandon(on_partition, ErrorCode::NOT_LEADER_OR_FOLLOWER) {
            self.apply_persisted(id, result, now_ms);
        }
        let group_ids: Vec<String> = self.groups.keys().filter(|id| on_partition(id)).cloned().collect();
        for group_id in &group_ids {
            let Some(group) = self.groups.remove(group_id) else { continue };
            for member in group.members {
                if let Some(held) = member.join_reply {
                    let response =
                        super::rebalance::join_error(held.api_version, &member.member_id, ErrorCode::NOT_COORDINATOR);
                    self.respond_join(held, response);
                }
                if let Some(held) = member.sync_reply {
                    let response = super::rebalance::sync_response(
                        held.api_version,
                        ErrorCode::NOT_COORDINATOR,
                        None,
                        None,
                        Bytes::new(),
                    );
                    self.respond_sync(held, response);
                }
            }
        }
        group_ids.len()
            + drop_groups_of_partition(&mut self.consumer_groups, partition, num_partitions)
            + drop_groups_of_partition(&mut self.share_groups, partition, num_partitions)
            + drop_groups_of_partition(&mut self.streams_groups, partition, num_partitions)
    }
}

/// Drops the KIP-848 consumer groups, KIP-932 share groups or KIP-1071 streams groups of an unloaded
/// `__consumer_offsets` partition; how many.
fn drop_groups_of_partition<G>(groups: &mut BTreeMap<String, G>, partition: i32, num_partitions: i32) -> usize {
    let before = groups.len();
    groups.retain(|id, _| super::partition_for(id, num_partitions) != partition);
    before - groups.len()
}
