//! Kafka 4.4's `StickyTaskAssignor` (and its `ProcessState`): places every task of the
//! configured topology on the members, active tasks once, and each task of a stateful
//! subtopology `num.standby.replicas` more times as standby, never twice in one process.
//!
//! Load is counted per process (a Kafka Streams instance, which runs several members, its
//! stream threads): a process's load is its tasks over its members. Active tasks go back
//! to the member that ran them, else to a member holding them as standby (the most
//! caught-up first, by the changelog offsets members report), within a quota of tasks per
//! member; the rest go to the least loaded process, range-like (sorted by subtopology,
//! then partition). Standby tasks likewise: the previous active owner's process, then the
//! previous standby owners, then the least loaded process without the task.
//!
//! Kafka breaks ties between equally loaded processes and members in Java hash map and
//! heap order; here by process and member id, so that a seed replays exactly.

use super::{TaskOffsets, Tasks};
use std::collections::{BTreeMap, BTreeSet};

/// A task: subtopology id and partition.
pub type TaskId = (String, i32);

/// What the assignor knows of a member: Kafka's `MemberAssignmentState`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemberSpec {
    pub process_id: String,
    /// The member's current tasks (Kafka 4.4 ranks by what members hold now).
    pub active: Tasks,
    pub standby: Tasks,
    pub task_offsets: TaskOffsets,
}

/// A subtopology as the assignor sees it (Kafka's `TopologyDescriber`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubtopologySpec {
    pub num_tasks: i32,
    pub stateful: bool,
}

/// One member's new target: active and standby tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberAssignment {
    pub active: Tasks,
    pub standby: Tasks,
}

/// Assigns every task of `subtopologies` (by id) to `members` (by member id).
pub fn assign(
    members: &BTreeMap<String, MemberSpec>,
    subtopologies: &BTreeMap<String, SubtopologySpec>,
    num_standby_replicas: i32,
) -> BTreeMap<String, MemberAssignment> {
    if members.is_empty() {
        return BTreeMap::new();
    }
    let mut state = State::new(members, subtopologies, num_standby_replicas.max(0));
    let active: Vec<TaskId> = task_ids(subtopologies, true);
    state.assign_active(active);
    if state.num_standby_replicas > 0 {
        state.assign_standby(task_ids(subtopologies, false));
    }
    state.into_assignment(members)
}

/// Every task of every subtopology (only stateful ones unless `active`).
fn task_ids(subtopologies: &BTreeMap<String, SubtopologySpec>, active: bool) -> Vec<TaskId> {
    subtopologies
        .iter()
        .filter(|(_, s)| active || s.stateful)
        .flat_map(|(id, s)| (0..s.num_tasks).map(move |p| (id.clone(), p)))
        .collect()
}

/// Kafka's `ProcessState`.
#[derive(Debug, Default)]
struct Process {
    /// Members of the process and the tasks each was given in this round.
    member_task_counts: BTreeMap<String, i32>,
    task_count: i32,
    tasks: BTreeSet<TaskId>,
    active_by_member: BTreeMap<String, BTreeSet<TaskId>>,
    standby_by_member: BTreeMap<String, BTreeSet<TaskId>>,
}

impl Process {
    /// Tasks per member; Kafka's -1 for a process without members never occurs here.
    fn load(&self) -> f64 {
        f64::from(self.task_count) / self.member_task_counts.len().max(1) as f64
    }

    fn add(&mut self, member_id: &str, task: &TaskId, active: bool) -> i32 {
        self.task_count += 1;
        self.tasks.insert(task.clone());
        let by_member = if active { &mut self.active_by_member } else { &mut self.standby_by_member };
        by_member.entry(member_id.to_string()).or_default().insert(task.clone());
        let count = self.member_task_counts.entry(member_id.to_string()).or_default();
        *count += 1;
        *count
    }

    /// Kafka's `addTaskToLeastLoadedMember`: the member with the fewest tasks.
    fn add_to_least_loaded(&mut self, task: &TaskId, active: bool) -> i32 {
        let member = self
            .member_task_counts
            .iter()
            .min_by_key(|(id, count)| (**count, (*id).clone()))
            .map(|(id, _)| id.clone())
            .expect("a process has a member");
        self.add(&member, task, active)
    }

    fn count(&self, member_id: &str) -> i32 {
        self.member_task_counts.get(member_id).copied().unwrap_or(0)
    }
}

/// A member with its process (Kafka's `StickyTaskAssignor.Member`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    process_id: String,
    member_id: String,
}

/// Kafka's `StickyTaskAssignor.LocalState`.
struct State {
    num_standby_replicas: i32,
    processes: BTreeMap<String, Process>,
    previous_active: BTreeMap<TaskId, Member>,
    /// Members holding (or having reported state of) each task, best first.
    previous_standby: BTreeMap<TaskId, Vec<Member>>,
    total_active_tasks: i32,
    total_tasks: i32,
    members_with_active_capacity: i32,
    members_with_capacity: i32,
    active_tasks_per_member: i32,
    tasks_per_member: i32,
}

/// Kafka's `computeTasksPerMember`: the ceiling of tasks over members.
fn tasks_per_member(tasks: i32, members: i32) -> i32 {
    if members == 0 {
        return 0;
    }
    tasks / members + i32::from(tasks % members > 0)
}

impl State {
    fn new(
        members: &BTreeMap<String, MemberSpec>,
        subtopologies: &BTreeMap<String, SubtopologySpec>,
        num_standby_replicas: i32,
    ) -> State {
        let mut total_tasks = 0;
        let mut total_active_tasks = 0;
        for s in subtopologies.values() {
            total_tasks += s.num_tasks;
            total_active_tasks += s.num_tasks;
            if s.stateful {
                total_tasks += s.num_tasks * num_standby_replicas;
            }
        }
        let member_count = i32::try_from(members.len()).unwrap_or(i32::MAX);
        let mut processes: BTreeMap<String, Process> = BTreeMap::new();
        let mut previous_active = BTreeMap::new();
        // (member, is a current standby, offset sum) per task, ranked below.
        let mut candidates: BTreeMap<TaskId, Vec<(Member, bool, i64)>> = BTreeMap::new();
        for (member_id, spec) in members {
            let member = Member { process_id: spec.process_id.clone(), member_id: member_id.clone() };
            processes.entry(spec.process_id.clone()).or_default().member_task_counts.insert(member_id.clone(), 0);
            for (subtopology, partitions) in &spec.active {
                for partition in partitions {
                    previous_active.insert((subtopology.clone(), *partition), member.clone());
                }
            }
            let reported = |s: &str, p: i32| spec.task_offsets.offsets.get(s).and_then(|ps| ps.get(&p)).copied();
            for (subtopology, partitions) in &spec.standby {
                for partition in partitions {
                    let offset_sum = reported(subtopology, *partition).unwrap_or(0);
                    candidates.entry((subtopology.clone(), *partition)).or_default().push((
                        member.clone(),
                        true,
                        offset_sum,
                    ));
                }
            }
            // A member back under a new id after a restart holds no tasks, but the
            // offsets it reports for state on its disk make it a weaker candidate.
            for (subtopology, partitions) in &spec.task_offsets.offsets {
                for (partition, offset_sum) in partitions {
                    if spec.standby.get(subtopology).is_some_and(|ps| ps.contains(partition)) {
                        continue;
                    }
                    candidates.entry((subtopology.clone(), *partition)).or_default().push((
                        member.clone(),
                        false,
                        *offset_sum,
                    ));
                }
            }
        }
        let previous_standby = candidates
            .into_iter()
            .map(|(task, mut ranked)| {
                // Current standbys first, then the most caught-up (a stable sort, as Java's).
                ranked.sort_by_key(|(_, is_standby, offset_sum)| (!*is_standby, std::cmp::Reverse(*offset_sum)));
                (task, ranked.into_iter().map(|(m, _, _)| m).collect())
            })
            .collect();
        State {
            num_standby_replicas,
            processes,
            previous_active,
            previous_standby,
            total_active_tasks,
            total_tasks,
            members_with_active_capacity: member_count,
            members_with_capacity: member_count,
            active_tasks_per_member: tasks_per_member(total_active_tasks, member_count),
            tasks_per_member: tasks_per_member(total_tasks, member_count),
        }
    }

    fn process(&self, member: &Member) -> &Process {
        &self.processes[&member.process_id]
    }

    fn add(&mut self, member: &Member, task: &TaskId, active: bool) -> i32 {
        let count =
            self.processes.get_mut(&member.process_id).expect("known process").add(&member.member_id, task, active);
        self.after_add(count, active);
        count
    }

    /// Kafka's `maybeUpdateActiveTasksPerMember` and `maybeUpdateTotalTasksPerMember`: a
    /// member that filled its quota leaves the count, and the quota of the others is
    /// computed again.
    fn after_add(&mut self, count: i32, active: bool) {
        if active && count == self.active_tasks_per_member {
            self.members_with_active_capacity -= 1;
            self.total_active_tasks -= count;
            self.active_tasks_per_member = tasks_per_member(self.total_active_tasks, self.members_with_active_capacity);
        }
        if count == self.tasks_per_member {
            self.members_with_capacity -= 1;
            self.total_tasks -= count;
            self.tasks_per_member = tasks_per_member(self.total_tasks, self.members_with_capacity);
        }
    }

    /// The process with the least load, ties to the lowest id; `skip` leaves some out.
    fn least_loaded_process(&self, skip: impl Fn(&Process) -> bool) -> Option<String> {
        self.processes
            .iter()
            .filter(|(_, p)| !skip(p))
            .min_by(|(a_id, a), (b_id, b)| a.load().total_cmp(&b.load()).then_with(|| a_id.cmp(b_id)))
            .map(|(id, _)| id.clone())
    }

    /// Kafka's `assignActive`.
    fn assign_active(&mut self, mut tasks: Vec<TaskId>) {
        // Sorted by partition first: a range-like previous assignment pairs partitions.
        tasks.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        // 1. Back to the member that ran the task, within its quota.
        tasks.retain(|task| {
            let Some(member) = self.previous_active.get(task).cloned() else { return true };
            if self.process(&member).count(&member.member_id) < self.active_tasks_per_member {
                self.add(&member, task, true);
                return false;
            }
            true
        });
        // 2. To a member that held it as standby.
        tasks.retain(|task| {
            let Some(member) = self.previous_member_with_least_load(task, None) else { return true };
            if self.process(&member).count(&member.member_id) < self.active_tasks_per_member {
                self.add(&member, task, true);
                return false;
            }
            true
        });
        // 3. The rest, sorted by subtopology for a range-like assignment, to the least
        // loaded process.
        tasks.sort();
        for task in tasks {
            let process_id = self.least_loaded_process(|_| false).expect("members exist");
            let count = self.processes.get_mut(&process_id).expect("known").add_to_least_loaded(&task, true);
            self.after_add(count, true);
        }
    }

    /// Kafka's `findPrevMemberWithLeastLoad`: among the previous standby holders of
    /// `task` (best ranked first), the first, replaced by a later one only if both its
    /// process and it are less loaded; with `standby_task`, leaving out processes that
    /// already hold the task.
    fn previous_member_with_least_load(&self, task: &TaskId, standby_task: Option<&TaskId>) -> Option<Member> {
        let members = self.previous_standby.get(task)?;
        let mut candidate: Option<(&Member, f64, f64)> = None;
        for member in members {
            let process = self.process(member);
            if standby_task.is_some_and(|t| process.tasks.contains(t)) {
                continue;
            }
            let process_load = process.load();
            let member_load = f64::from(process.count(&member.member_id));
            match candidate {
                Some((_, best_process, best_member)) if !(process_load < best_process && member_load < best_member) => {
                }
                _ => candidate = Some((member, process_load, member_load)),
            }
        }
        candidate.map(|(m, _, _)| m.clone())
    }

    /// Kafka's `assignStandby`.
    fn assign_standby(&mut self, mut tasks: Vec<TaskId>) {
        tasks.sort_by(|a, b| (b.1, &b.0).cmp(&(a.1, &a.0)));
        let mut to_least_loaded: Vec<(TaskId, i32)> = Vec::new();
        for task in tasks {
            for i in 0..self.num_standby_replicas {
                // The process that ran it as active before.
                if let Some(member) = self.previous_active.get(&task).cloned() {
                    let process = self.process(&member);
                    if !process.tasks.contains(&task) && process.count(&member.member_id) < self.tasks_per_member {
                        self.add(&member, &task, false);
                        continue;
                    }
                }
                // A process that held it as standby.
                if let Some(member) = self.previous_member_with_least_load(&task, Some(&task)) {
                    if self.process(&member).count(&member.member_id) < self.tasks_per_member {
                        self.add(&member, &task, false);
                        continue;
                    }
                }
                to_least_loaded.push((task.clone(), self.num_standby_replicas - i));
                break;
            }
        }
        to_least_loaded.sort_by(|a, b| (&b.0 .0, b.0 .1).cmp(&(&a.0 .0, a.0 .1)));
        for (task, remaining) in to_least_loaded {
            for _ in 0..remaining {
                // Kafka's `assignStandbyToMemberWithLeastLoad`: the least loaded process
                // without the task; none left means not enough capacity (Kafka logs it).
                let Some(process_id) = self.least_loaded_process(|p| p.tasks.contains(&task)) else { break };
                let count = self.processes.get_mut(&process_id).expect("known").add_to_least_loaded(&task, false);
                self.after_add(count, false);
            }
        }
    }

    fn into_assignment(self, members: &BTreeMap<String, MemberSpec>) -> BTreeMap<String, MemberAssignment> {
        let mut result: BTreeMap<String, MemberAssignment> =
            members.keys().map(|id| (id.clone(), MemberAssignment::default())).collect();
        for process in self.processes.into_values() {
            for (by_member, active) in [(process.active_by_member, true), (process.standby_by_member, false)] {
                for (member_id, tasks) in by_member {
                    let assignment = result.entry(member_id).or_default();
                    let into = if active { &mut assignment.active } else { &mut assignment.standby };
                    for (subtopology, partition) in tasks {
                        into.entry(subtopology).or_default().insert(partition);
                    }
                }
            }
        }
        result
    }
}
