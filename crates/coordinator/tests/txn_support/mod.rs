//! A test server around the transaction coordinator: it keeps `__transaction_state` as
//! a list of records per partition, holds persists and markers until the test lets them
//! through, and records every answer (failing on a second answer to the same request).

#![allow(dead_code)]

use osprey_coordinator::group::Record;
use osprey_coordinator::txn::{
    transactions_of, Output, PersistId, ReplyId, Response, TransactionCoordinator, TxnConfig, TxnMarker,
};
use osprey_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use osprey_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest,
};
use osprey_protocol::ErrorCode;
use std::collections::{BTreeMap, VecDeque};

pub const FIRST_PRODUCER_ID: i64 = 1000;

pub struct Harness {
    pub c: TransactionCoordinator,
    pub now: i64,
    pub next_producer_id: i64,
    pub coordinator_epoch: i32,
    /// `__transaction_state`, per partition, as durable.
    pub log: BTreeMap<i32, Vec<Record>>,
    pub persists: VecDeque<(PersistId, i32, Record)>,
    pub markers: VecDeque<(String, TxnMarker)>,
    pub answers: BTreeMap<ReplyId, Response>,
    /// Replies in the order they were answered.
    pub answer_order: Vec<ReplyId>,
    next_reply: u64,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(TxnConfig::default())
    }

    /// A coordinator leading every `__transaction_state` partition at epoch 0.
    pub fn with_config(config: TxnConfig) -> Harness {
        let partitions = config.transaction_state_log_num_partitions;
        let mut h = Harness {
            c: TransactionCoordinator::new(config),
            now: 1_000_000,
            next_producer_id: FIRST_PRODUCER_ID,
            coordinator_epoch: 0,
            log: BTreeMap::new(),
            persists: VecDeque::new(),
            markers: VecDeque::new(),
            answers: BTreeMap::new(),
            answer_order: Vec::new(),
            next_reply: 0,
        };
        for p in 0..partitions {
            h.c.load(p, 0, Vec::new(), h.now).unwrap();
        }
        h
    }

    pub fn reply(&mut self) -> ReplyId {
        self.next_reply += 1;
        ReplyId(self.next_reply)
    }

    /// Moves the coordinator's outputs into the harness's queues.
    pub fn drain(&mut self) {
        while let Some(output) = self.c.poll_output() {
            match output {
                Output::Respond { reply, response } => {
                    let previous = self.answers.insert(reply, response);
                    assert!(previous.is_none(), "{reply:?} answered twice");
                    self.answer_order.push(reply);
                }
                Output::Persist { id, partition, record } => self.persists.push_back((id, partition, record)),
                Output::WriteMarkers { transactional_id, marker } => self.markers.push_back((transactional_id, marker)),
            }
        }
        self.c.check_invariants().unwrap();
    }

    /// Makes the oldest held persist durable.
    pub fn persist_one(&mut self) -> Option<Record> {
        let (id, partition, record) = self.persists.pop_front()?;
        self.log.entry(partition).or_default().push(record.clone());
        self.c.persisted(id, Ok(()), self.now);
        self.drain();
        Some(record)
    }

    /// Fails the oldest held persist with `error`.
    pub fn fail_persist(&mut self, error: ErrorCode) {
        let (id, _, _) = self.persists.pop_front().expect("a persist is held");
        self.c.persisted(id, Err(error), self.now);
        self.drain();
    }

    pub fn persist_all(&mut self) {
        while self.persist_one().is_some() {}
    }

    /// Writes every held marker successfully.
    pub fn write_markers(&mut self) -> Vec<(String, TxnMarker)> {
        let mut written = Vec::new();
        while let Some((id, marker)) = self.markers.pop_front() {
            for tp in &marker.partitions {
                self.c.marker_written(&id, marker.coordinator_epoch, tp, ErrorCode::NONE, self.now);
            }
            self.drain();
            written.push((id, marker));
        }
        written
    }

    /// Lets every persist and marker through until nothing is held.
    pub fn settle(&mut self) {
        while !self.persists.is_empty() || !self.markers.is_empty() {
            self.persist_all();
            self.write_markers();
        }
    }

    pub fn answer(&mut self, reply: ReplyId) -> Option<Response> {
        self.answers.get(&reply).cloned()
    }

    pub fn tick(&mut self, advance_ms: i64) {
        self.now += advance_ms;
        self.c.tick(self.now);
        self.drain();
    }

    // Requests: each returns its ReplyId, with outputs drained (nothing let through).

    pub fn init_request(&mut self, request: &InitProducerIdRequest, version: i16) -> ReplyId {
        let reply = self.reply();
        let next = &mut self.next_producer_id;
        let mut allocate = || {
            let id = *next;
            *next += 1;
            Ok(id)
        };
        self.c.init_producer_id(request, version, reply, &mut allocate, self.now);
        self.drain();
        reply
    }

    pub fn init(&mut self, transactional_id: &str, timeout_ms: i32) -> ReplyId {
        let request = InitProducerIdRequest {
            transactional_id: Some(transactional_id.into()),
            transaction_timeout_ms: timeout_ms,
            ..Default::default()
        };
        self.init_request(&request, 4)
    }

    /// InitProducerId, let through: (error, producer id, epoch).
    pub fn init_settled(&mut self, transactional_id: &str, timeout_ms: i32) -> (ErrorCode, i64, i16) {
        let reply = self.init(transactional_id, timeout_ms);
        self.persist_all();
        init_result(&self.answer(reply).expect("InitProducerId answered"))
    }

    pub fn add(
        &mut self,
        transactional_id: &str,
        producer: (i64, i16),
        partitions: &[(&str, i32)],
        version: i16,
    ) -> ReplyId {
        let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
        for (topic, p) in partitions {
            match topics.iter_mut().find(|t| t.name == *topic) {
                Some(t) => t.partitions.push(*p),
                None => topics.push(AddPartitionsToTxnTopic {
                    name: topic.to_string(),
                    partitions: vec![*p],
                    ..Default::default()
                }),
            }
        }
        // v4+ carries transactions in a list (the server's form); v0-3 one at top level.
        let request = if version >= 4 {
            let transaction = AddPartitionsToTxnTransaction {
                transactional_id: transactional_id.into(),
                producer_id: producer.0,
                producer_epoch: producer.1,
                topics,
                ..Default::default()
            };
            AddPartitionsToTxnRequest { transactions: vec![transaction], ..Default::default() }
        } else {
            AddPartitionsToTxnRequest {
                v3_and_below_transactional_id: transactional_id.into(),
                v3_and_below_producer_id: producer.0,
                v3_and_below_producer_epoch: producer.1,
                v3_and_below_topics: topics,
                ..Default::default()
            }
        };
        let transaction = transactions_of(&request, version).remove(0);
        let reply = self.reply();
        self.c.add_partitions(&transaction, version, reply, self.now);
        self.drain();
        reply
    }

    /// AddPartitionsToTxn v3, let through: its error.
    pub fn add_settled(
        &mut self,
        transactional_id: &str,
        producer: (i64, i16),
        partitions: &[(&str, i32)],
    ) -> ErrorCode {
        let reply = self.add(transactional_id, producer, partitions, 3);
        self.persist_all();
        add_result(&self.answer(reply).expect("AddPartitionsToTxn answered"))
    }

    pub fn add_offsets(&mut self, transactional_id: &str, producer: (i64, i16), group_id: &str) -> ReplyId {
        let request = AddOffsetsToTxnRequest {
            transactional_id: transactional_id.into(),
            producer_id: producer.0,
            producer_epoch: producer.1,
            group_id: group_id.into(),
            ..Default::default()
        };
        let reply = self.reply();
        self.c.add_offsets(&request, 3, reply, self.now);
        self.drain();
        reply
    }

    pub fn end(&mut self, transactional_id: &str, producer: (i64, i16), committed: bool, version: i16) -> ReplyId {
        let request = EndTxnRequest {
            transactional_id: transactional_id.into(),
            producer_id: producer.0,
            producer_epoch: producer.1,
            committed,
            ..Default::default()
        };
        let reply = self.reply();
        let next = &mut self.next_producer_id;
        let mut allocate = || {
            let id = *next;
            *next += 1;
            Ok(id)
        };
        self.c.end_txn(&request, version, reply, &mut allocate, self.now);
        self.drain();
        reply
    }

    pub fn end_error(&mut self, reply: ReplyId) -> Option<ErrorCode> {
        self.answer(reply).map(|r| end_result(&r))
    }

    /// The EndTxn answer: (error, producer id, epoch).
    pub fn end_answer(&mut self, reply: ReplyId) -> Option<(ErrorCode, i64, i16)> {
        self.answer(reply).map(|r| end_ids(&r))
    }

    /// EndTxn v5 (transaction version 2), let through with its markers: (error, producer
    /// id, epoch).
    pub fn end_v2_settled(
        &mut self,
        transactional_id: &str,
        producer: (i64, i16),
        committed: bool,
    ) -> (ErrorCode, i64, i16) {
        let reply = self.end(transactional_id, producer, committed, 5);
        self.settle();
        self.end_answer(reply).expect("EndTxn answered")
    }

    /// AddPartitionsToTxn v5 (as the server sends it for a TV2 producer), let through: its
    /// error.
    pub fn add_v2_settled(
        &mut self,
        transactional_id: &str,
        producer: (i64, i16),
        partitions: &[(&str, i32)],
    ) -> ErrorCode {
        let reply = self.add(transactional_id, producer, partitions, 5);
        self.persist_all();
        add_result(&self.answer(reply).expect("AddPartitionsToTxn answered"))
    }

    /// Reloads every partition from the durable log at the next coordinator epoch, as a
    /// new coordinator would (held persists and markers are dropped).
    pub fn reload(&mut self) {
        self.coordinator_epoch += 1;
        self.persists.clear();
        self.markers.clear();
        let partitions = self.c.config().transaction_state_log_num_partitions;
        for p in 0..partitions {
            let records = self.log.get(&p).cloned().unwrap_or_default();
            self.c.load(p, self.coordinator_epoch, records, self.now).unwrap();
        }
        self.drain();
    }

    pub fn verify(&self, transactional_id: &str, producer: (i64, i16), partitions: &[(&str, i32)]) -> Vec<ErrorCode> {
        let transaction = AddPartitionsToTxnTransaction {
            transactional_id: transactional_id.into(),
            producer_id: producer.0,
            producer_epoch: producer.1,
            verify_only: true,
            topics: partitions
                .iter()
                .map(|(t, p)| AddPartitionsToTxnTopic {
                    name: t.to_string(),
                    partitions: vec![*p],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        self.c.verify(&transaction).into_iter().map(|(_, e)| e).collect()
    }
}

pub fn code(error: i16) -> ErrorCode {
    ErrorCode::from_code(error).expect("a known error code")
}

pub fn init_result(response: &Response) -> (ErrorCode, i64, i16) {
    match response {
        Response::InitProducerId(r) => (code(r.error_code), r.producer_id, r.producer_epoch),
        other => panic!("not an InitProducerId answer: {other:?}"),
    }
}

pub fn add_result(response: &Response) -> ErrorCode {
    match response {
        Response::AddPartitionsToTxn { error } => *error,
        Response::AddOffsetsToTxn(r) => code(r.error_code),
        other => panic!("not an AddPartitionsToTxn answer: {other:?}"),
    }
}

pub fn end_ids(response: &Response) -> (ErrorCode, i64, i16) {
    match response {
        Response::EndTxn(r) => (code(r.error_code), r.producer_id, r.producer_epoch),
        other => panic!("not an EndTxn answer: {other:?}"),
    }
}

pub fn end_result(response: &Response) -> ErrorCode {
    match response {
        Response::EndTxn(r) => code(r.error_code),
        other => panic!("not an EndTxn answer: {other:?}"),
    }
}
