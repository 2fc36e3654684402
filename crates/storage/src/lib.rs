//! The durable partition log: segments, indexes, recovery, retention, compaction and
//! producer state. Built in the storage issue; empty until then.
