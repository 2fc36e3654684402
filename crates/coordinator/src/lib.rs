//! The group and transaction coordinators of Osprey, as Kafka's `group-coordinator` and
//! `transaction-coordinator` modules: deterministic state machines with no I/O, no clock
//! and no tokio.
//!
//! - [`group`]: consumer groups, classic (JoinGroup / SyncGroup / Heartbeat) and KIP-848
//!   (ConsumerGroupHeartbeat), their committed offsets and their `__consumer_offsets`
//!   records.
//! - [`share_state`]: the share coordinator, the durable state of share partitions
//!   (KIP-932) and its `__share_group_state` records.
//! - [`share`]: a share partition's in-flight records on its leader (KIP-932 share
//!   groups): acquisition, acknowledgement, lock expiry and the state it persists.
//! - [`txn`]: transactions (InitProducerId, AddPartitionsToTxn, EndTxn, ...) and their
//!   `__transaction_state` records.
//!
//! The server feeds them requests, time and "this append is durable", and runs the
//! outputs they return (appends, responses, markers). The simulations under `tests/`
//! drive them the same way with seeded schedules and check invariants at every step.

pub mod group;
pub mod share;
pub mod share_state;
pub mod txn;
