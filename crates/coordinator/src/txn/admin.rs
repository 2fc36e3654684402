//! DescribeTransactions and ListTransactions (KIP-664).

use super::state::TxnState;
use super::TransactionCoordinator;
use osprey_protocol::messages::describe_transactions_response::{TopicData, TransactionState as DescribedState};
use osprey_protocol::messages::list_transactions_response::TransactionState as ListedState;
use osprey_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse};
use osprey_protocol::ErrorCode;

impl TransactionCoordinator {
    /// DescribeTransactions for one id (Kafka's `handleDescribeTransactions`): the server
    /// calls it for each id it is authorized to describe and collects the answers.
    pub fn describe(&self, transactional_id: &str) -> DescribedState {
        let mut described = DescribedState { transactional_id: transactional_id.to_string(), ..Default::default() };
        let error = if transactional_id.is_empty() {
            ErrorCode::INVALID_REQUEST
        } else if let Err(error) = self.coordinator_epoch(transactional_id) {
            error
        } else {
            match self.txns.get(transactional_id) {
                // Dead: being expired.
                None => ErrorCode::TRANSACTIONAL_ID_NOT_FOUND,
                Some(m) if m.state == TxnState::Dead => ErrorCode::TRANSACTIONAL_ID_NOT_FOUND,
                Some(m) => {
                    for (topic, partition) in &m.partitions {
                        match described.topics.iter_mut().find(|t| &t.topic == topic) {
                            Some(t) => t.partitions.push(*partition),
                            None => described.topics.push(TopicData {
                                topic: topic.clone(),
                                partitions: vec![*partition],
                                ..Default::default()
                            }),
                        }
                    }
                    described.producer_id = m.producer_id;
                    described.producer_epoch = m.producer_epoch;
                    described.transaction_state = m.state.name().to_string();
                    described.transaction_timeout_ms = m.txn_timeout_ms;
                    described.transaction_start_time_ms = m.txn_start_ms;
                    ErrorCode::NONE
                }
            }
        };
        described.error_code = error.code();
        described
    }

    /// ListTransactions (Kafka's `listTransactionStates`): the ids of this coordinator
    /// matching every filter given; unknown state names come back in
    /// `unknown_state_filters`. `duration_filter` (v1+) keeps transactions running longer
    /// than that many ms. `transactional_id_pattern` (v2) is applied by the server.
    pub fn list(&self, request: &ListTransactionsRequest, now_ms: i64) -> ListTransactionsResponse {
        let mut response = ListTransactionsResponse::default();
        let mut states = Vec::new();
        for name in &request.state_filters {
            match TxnState::from_name(name) {
                Some(state) => states.push(state),
                None => response.unknown_state_filters.push(name.clone()),
            }
        }
        let include = |m: &super::state::TxnMetadata| {
            m.state != TxnState::Dead
                && (request.producer_id_filters.is_empty() || request.producer_id_filters.contains(&m.producer_id))
                && (request.state_filters.is_empty() || states.contains(&m.state))
                && (request.duration_filter < 0 || now_ms - m.txn_start_ms > request.duration_filter)
        };
        response.transaction_states = self
            .txns
            .values()
            .filter(|m| include(m))
            .map(|m| ListedState {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                transaction_state: m.state.name().to_string(),
                ..Default::default()
            })
            .collect();
        response
    }
}
