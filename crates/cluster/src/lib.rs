//! Replication and the controller: partition leadership, ISR, leader epochs, metadata,
//! and the coordinators' state machines. Built with the broker issues; empty until then.
