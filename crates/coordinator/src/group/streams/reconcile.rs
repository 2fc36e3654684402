//! Kafka 4.4's streams `CurrentAssignmentBuilder`: moves one member from its current
//! tasks towards its target, one step per heartbeat.
//!
//! A member first revokes the tasks its target no longer holds (it stays at its epoch,
//! UNREVOKED_TASKS, until a heartbeat's owned tasks no longer list them); then it moves
//! to the target's epoch and is given the target's tasks that nobody holds any more. An
//! active task has one owner in the whole group; a standby or warm-up task one per
//! process, and a process never holds a task twice (as active and standby). Tasks
//! another member still holds are given later (UNRELEASED_TASKS). A role change of the
//! member's own task happens in place: an active task demoted to standby keeps its state
//! store, a standby or warm-up promoted to active is kept until the active task is
//! granted.

use super::{AssignedTasks, MemberState, StreamsMember, Tasks, TasksTuple, TasksWithEpochs};
use std::collections::{BTreeMap, BTreeSet};

/// Which process holds each task now (Kafka's `currentActiveTaskToProcessId`,
/// `currentStandbyTaskProcessIds`, `currentWarmupTaskProcessIds`), from every member's
/// assigned and pending-revocation tasks.
#[derive(Debug, Clone, Default)]
pub struct TaskOwners {
    active: BTreeMap<(String, i32), String>,
    standby: BTreeMap<(String, i32), BTreeSet<String>>,
    warmup: BTreeMap<(String, i32), BTreeSet<String>>,
    /// Active tasks found held twice (an invariant Kafka enforces with an
    /// IllegalStateException).
    duplicates: Vec<(String, i32)>,
}

impl TaskOwners {
    pub fn add(&mut self, process_id: &str, tasks: &AssignedTasks) {
        for (subtopology, partitions) in &tasks.active {
            for partition in partitions.keys() {
                let key = (subtopology.clone(), *partition);
                if self.active.insert(key.clone(), process_id.to_string()).is_some() {
                    self.duplicates.push(key);
                }
            }
        }
        for (index, tasks) in [(&mut self.standby, &tasks.standby), (&mut self.warmup, &tasks.warmup)] {
            for (subtopology, partitions) in tasks {
                for partition in partitions {
                    index.entry((subtopology.clone(), *partition)).or_default().insert(process_id.to_string());
                }
            }
        }
    }

    /// Active tasks held by two members at once.
    pub fn duplicates(&self) -> &[(String, i32)] {
        &self.duplicates
    }

    fn active_process(&self, subtopology: &str, partition: i32) -> Option<&str> {
        self.active.get(&(subtopology.to_string(), partition)).map(String::as_str)
    }

    fn standby_on(&self, subtopology: &str, partition: i32, process_id: &str) -> bool {
        self.standby.get(&(subtopology.to_string(), partition)).is_some_and(|p| p.contains(process_id))
    }

    fn warmup_on(&self, subtopology: &str, partition: i32, process_id: &str) -> bool {
        self.warmup.get(&(subtopology.to_string(), partition)).is_some_and(|p| p.contains(process_id))
    }
}

/// The member must abandon its tasks and rejoin (a state this version does not know).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced(pub &'static str);

/// One reconciliation step of `member` towards `target` (of `target_epoch`), given who
/// holds what now and the tasks the member reported owning in this heartbeat (`None`:
/// not reported). Returns the member unchanged when it cannot move.
pub fn reconcile(
    member: &StreamsMember,
    target_epoch: i32,
    target: &TasksTuple,
    owners: &TaskOwners,
    owned: Option<&TasksTuple>,
) -> Result<StreamsMember, Fenced> {
    let builder = Builder { member, target_epoch, target, owners, owned };
    match member.state {
        MemberState::Stable if member.member_epoch != target_epoch => {
            Ok(builder.next_assignment(member.member_epoch, &member.assigned))
        }
        MemberState::Stable => Ok(member.clone()),
        MemberState::UnrevokedTasks => {
            // The tasks count as revoked once the member's owned tasks no longer list them.
            if builder.has_not_released(&member.pending_revocation) {
                return Ok(member.clone());
            }
            Ok(builder.next_assignment(member.member_epoch + 1, &member.assigned))
        }
        MemberState::UnreleasedTasks => Ok(builder.next_assignment(member.member_epoch, &member.assigned)),
        MemberState::Unknown => {
            if owned.is_none_or(|o| !o.is_empty()) {
                return Err(Fenced(
                    "The streams group member is in a unknown state. The member must abandon all its tasks and rejoin.",
                ));
            }
            Ok(builder.next_assignment(target_epoch, &member.assigned))
        }
    }
}

struct Builder<'a> {
    member: &'a StreamsMember,
    target_epoch: i32,
    target: &'a TasksTuple,
    owners: &'a TaskOwners,
    owned: Option<&'a TasksTuple>,
}

/// The three parts of a role's difference between current and target tasks: kept,
/// to revoke, to assign now.
struct Difference<T> {
    assigned: T,
    revoke: T,
    pending: T,
    unreleased: bool,
}

impl Builder<'_> {
    fn process(&self) -> &str {
        &self.member.process_id
    }

    /// Kafka's `computeNextAssignment`.
    fn next_assignment(&self, member_epoch: i32, current: &AssignedTasks) -> StreamsMember {
        let active = self.active_difference(&current.active, |s, p| self.is_unreleased_active(current, s, p));
        let mut standby =
            difference(&current.standby, &self.target.standby, |s, p| self.is_unreleased_standby(current, s, p));
        let mut warmup =
            difference(&current.warmup, &self.target.warmup, |s, p| self.is_unreleased_warmup(current, s, p));
        // A role change that depends on no other member happens at once: a demoted active
        // task is a standby now (its active part still waits for the release), a standby
        // becomes a warm-up or back without any revocation.
        let demoted: Tasks = super::task_set(&current.active);
        grant_held(&demoted, &mut standby.pending, &mut standby.assigned, None);
        grant_held(&current.standby, &mut warmup.pending, &mut warmup.assigned, Some(&mut standby.revoke));
        grant_held(&current.warmup, &mut standby.pending, &mut standby.assigned, Some(&mut warmup.revoke));
        let unreleased = active.unreleased || standby.unreleased || warmup.unreleased;
        let revoke = self.apply_promotions(current, active.revoke, &active.pending, &mut standby, &mut warmup);
        let assigned = AssignedTasks { active: active.assigned, standby: standby.assigned, warmup: warmup.assigned };
        let pending = AssignedTasks { active: active.pending, standby: standby.pending, warmup: warmup.pending };
        self.build_new_member(member_epoch, revoke, assigned, pending, unreleased)
    }

    /// Kafka's `computeAssignmentDifferenceWithEpoch`: kept and revoked active tasks keep
    /// their epochs, newly assigned ones get the target's.
    fn active_difference(
        &self,
        current: &TasksWithEpochs,
        is_unreleased: impl Fn(&str, i32) -> bool,
    ) -> Difference<TasksWithEpochs> {
        let mut result = Difference {
            assigned: TasksWithEpochs::new(),
            revoke: TasksWithEpochs::new(),
            pending: TasksWithEpochs::new(),
            unreleased: false,
        };
        let subtopologies: BTreeSet<&String> = current.keys().chain(self.target.active.keys()).collect();
        let empty_current = BTreeMap::new();
        let empty_target = BTreeSet::new();
        for subtopology in subtopologies {
            let current = current.get(subtopology).unwrap_or(&empty_current);
            let target = self.target.active.get(subtopology).unwrap_or(&empty_target);
            let (kept, revoked): (BTreeMap<i32, i32>, BTreeMap<i32, i32>) =
                current.iter().map(|(p, e)| (*p, *e)).partition(|(p, _)| target.contains(p));
            let mut pending = BTreeMap::new();
            for partition in target.iter().filter(|p| !kept.contains_key(p)) {
                if is_unreleased(subtopology, *partition) {
                    result.unreleased = true;
                } else {
                    pending.insert(*partition, self.target_epoch);
                }
            }
            insert_non_empty(&mut result.assigned, subtopology, kept);
            insert_non_empty(&mut result.revoke, subtopology, revoked);
            insert_non_empty(&mut result.pending, subtopology, pending);
        }
        result
    }

    /// An active task goes to this member only once nobody in the group holds it as
    /// active, and no other member of its process holds it as standby or warm-up (its own
    /// standby or warm-up is promoted in place).
    fn is_unreleased_active(&self, current: &AssignedTasks, subtopology: &str, partition: i32) -> bool {
        self.owners.active_process(subtopology, partition).is_some()
            || (self.owners.standby_on(subtopology, partition, self.process())
                && !holds(&current.standby, subtopology, partition))
            || (self.owners.warmup_on(subtopology, partition, self.process())
                && !holds(&current.warmup, subtopology, partition))
    }

    /// A standby task waits for the previous holder in the same process, and for another
    /// member of the process running it as active or warm-up.
    fn is_unreleased_standby(&self, current: &AssignedTasks, subtopology: &str, partition: i32) -> bool {
        let active_here = self.owners.active_process(subtopology, partition) == Some(self.process())
            && !current.active.get(subtopology).is_some_and(|ps| ps.contains_key(&partition));
        active_here
            || self.owners.standby_on(subtopology, partition, self.process())
            || (self.owners.warmup_on(subtopology, partition, self.process())
                && !holds(&current.warmup, subtopology, partition))
    }

    /// A warm-up task waits for the previous holder in the same process, and for the
    /// process running it as active or (another member) as standby.
    fn is_unreleased_warmup(&self, current: &AssignedTasks, subtopology: &str, partition: i32) -> bool {
        self.owners.active_process(subtopology, partition) == Some(self.process())
            || (self.owners.standby_on(subtopology, partition, self.process())
                && !holds(&current.standby, subtopology, partition))
            || self.owners.warmup_on(subtopology, partition, self.process())
    }

    /// Kafka's `applyPromotionsToActive`: a standby or warm-up the target makes active
    /// needs no revocation; it stays with the member until the active task is granted.
    fn apply_promotions(
        &self,
        current: &AssignedTasks,
        active_revoke: TasksWithEpochs,
        active_pending: &TasksWithEpochs,
        standby: &mut Difference<Tasks>,
        warmup: &mut Difference<Tasks>,
    ) -> AssignedTasks {
        self.drop_promoted(&current.standby, &mut standby.revoke);
        self.drop_promoted(&current.warmup, &mut warmup.revoke);
        let revoke = AssignedTasks {
            active: active_revoke,
            standby: std::mem::take(&mut standby.revoke),
            warmup: std::mem::take(&mut warmup.revoke),
        };
        let revoking = !revoke.is_empty() && self.has_not_released(&revoke);
        self.keep_promoted(&current.standby, &mut standby.assigned, active_pending, revoking);
        self.keep_promoted(&current.warmup, &mut warmup.assigned, active_pending, revoking);
        revoke
    }

    fn drop_promoted(&self, held: &Tasks, revoke: &mut Tasks) {
        for (subtopology, partitions) in held {
            for partition in partitions {
                if holds(&self.target.active, subtopology, *partition) {
                    remove_task(revoke, subtopology, *partition);
                }
            }
        }
    }

    fn keep_promoted(&self, held: &Tasks, assigned: &mut Tasks, active_pending: &TasksWithEpochs, revoking: bool) {
        for (subtopology, partitions) in held {
            let granted = active_pending.get(subtopology);
            for partition in partitions {
                let promoted_now = !revoking && granted.is_some_and(|g| g.contains_key(partition));
                if holds(&self.target.active, subtopology, *partition) && !promoted_now {
                    assigned.entry(subtopology.clone()).or_default().insert(*partition);
                }
            }
        }
    }

    /// Kafka's `hasNotReleased`: without owned tasks in this heartbeat nothing counts as
    /// released.
    fn has_not_released(&self, pending_revocation: &AssignedTasks) -> bool {
        self.owned.is_none_or(|owned| owned.contains_any(pending_revocation))
    }

    /// Kafka's `buildNewMember`.
    fn build_new_member(
        &self,
        member_epoch: i32,
        revoke: AssignedTasks,
        assigned: AssignedTasks,
        pending: AssignedTasks,
        unreleased: bool,
    ) -> StreamsMember {
        let mut next = self.member.clone();
        if !revoke.is_empty() && self.has_not_released(&revoke) {
            // Revoke first, at the current epoch.
            next.state = MemberState::UnrevokedTasks;
            next.set_epoch(member_epoch);
            next.assigned = assigned;
            next.pending_revocation = revoke;
            return next;
        }
        next.state = if unreleased { MemberState::UnreleasedTasks } else { MemberState::Stable };
        next.set_epoch(self.target_epoch);
        next.assigned = if pending.is_empty() { assigned } else { assigned.merge(&pending) };
        next.pending_revocation = AssignedTasks::default();
        next
    }
}

/// Kafka's `computeAssignmentDifference` for standby and warm-up tasks.
fn difference(current: &Tasks, target: &Tasks, is_unreleased: impl Fn(&str, i32) -> bool) -> Difference<Tasks> {
    let mut result =
        Difference { assigned: Tasks::new(), revoke: Tasks::new(), pending: Tasks::new(), unreleased: false };
    let subtopologies: BTreeSet<&String> = current.keys().chain(target.keys()).collect();
    let empty = BTreeSet::new();
    for subtopology in subtopologies {
        let current = current.get(subtopology).unwrap_or(&empty);
        let target = target.get(subtopology).unwrap_or(&empty);
        let kept: BTreeSet<i32> = current.intersection(target).copied().collect();
        let revoked: BTreeSet<i32> = current.difference(&kept).copied().collect();
        let mut pending = BTreeSet::new();
        for partition in target.difference(&kept) {
            if is_unreleased(subtopology, *partition) {
                result.unreleased = true;
            } else {
                pending.insert(*partition);
            }
        }
        insert_non_empty(&mut result.assigned, subtopology, kept);
        insert_non_empty(&mut result.revoke, subtopology, revoked);
        insert_non_empty(&mut result.pending, subtopology, pending);
    }
    result
}

/// Kafka's `demoteActiveTasksToStandby` and `convertReplicaRole`: a task the member
/// holds in one role and is to be given in another now is granted at once, and (a
/// replica role) needs no revocation.
fn grant_held(held: &Tasks, pending: &mut Tasks, assigned: &mut Tasks, mut revoke: Option<&mut Tasks>) {
    for (subtopology, partitions) in held {
        for partition in partitions {
            if holds(pending, subtopology, *partition) {
                remove_task(pending, subtopology, *partition);
                assigned.entry(subtopology.clone()).or_default().insert(*partition);
                if let Some(revoke) = revoke.as_deref_mut() {
                    remove_task(revoke, subtopology, *partition);
                }
            }
        }
    }
}

fn holds(tasks: &Tasks, subtopology: &str, partition: i32) -> bool {
    tasks.get(subtopology).is_some_and(|ps| ps.contains(&partition))
}

/// Removes one task, and its subtopology when it was the last.
fn remove_task(tasks: &mut Tasks, subtopology: &str, partition: i32) {
    if let Some(partitions) = tasks.get_mut(subtopology) {
        if partitions.remove(&partition) && partitions.is_empty() {
            tasks.remove(subtopology);
        }
    }
}

fn insert_non_empty<T: IsEmpty>(into: &mut BTreeMap<String, T>, subtopology: &str, tasks: T) {
    if !tasks.is_empty() {
        into.insert(subtopology.to_string(), tasks);
    }
}

trait IsEmpty {
    fn is_empty(&self) -> bool;
}

impl IsEmpty for BTreeSet<i32> {
    fn is_empty(&self) -> bool {
        BTreeSet::is_empty(self)
    }
}

impl IsEmpty for BTreeMap<i32, i32> {
    fn is_empty(&self) -> bool {
        BTreeMap::is_empty(self)
    }
}
