//! KIP-848 regular-expression subscriptions: a member subscribing with a pattern is
//! assigned the partitions of every topic the pattern matches, topics created or
//! deleted later move in and out of the assignment at the next heartbeat, and the
//! number of distinct patterns per group is bounded.

mod group_consumer_support;

use group_consumer_support::*;
use osprey_coordinator::group::consumer::INVALID_REGULAR_EXPRESSION;
use osprey_coordinator::group::{ConsumerGroupState, GroupConfig, TopicInfo};
use std::collections::BTreeSet;

fn topics_of(h: &Harness, client: &Client) -> BTreeSet<String> {
    let names: std::collections::BTreeMap<_, _> = h.topics.iter().map(|(n, t)| (t.topic_id, n.clone())).collect();
    client.owned.keys().map(|id| names[id].clone()).collect()
}

fn add_topic(h: &mut Harness, name: &str, id: u8, partitions: i32) {
    h.topics.insert(name.to_string(), TopicInfo { topic_id: topic_id(id), num_partitions: partitions });
}

#[test]
fn a_pattern_subscription_is_assigned_every_matching_topic() {
    let mut h = Harness::new();
    add_topic(&mut h, "PFX-orders", 10, 2);
    add_topic(&mut h, "PFX-payments", 11, 1);
    let mut clients = vec![Client::with_pattern("member-a-0000000000001", "PFX-.*")];
    h.heartbeat(&mut clients[0]);
    h.converge(&mut clients);
    assert_eq!(topics_of(&h, &clients[0]), BTreeSet::from(["PFX-orders".to_string(), "PFX-payments".to_string()]));
    assert_eq!(clients[0].count(), 3);
}

#[test]
fn patterns_kafka_accepts_are_accepted() {
    for pattern in [".*", "PFX-.*", "t1|t2", "t[12]", "^t.*", ".*(?:(?:__consumer_offsets)|(?:t1)).*"] {
        let mut h = Harness::new();
        let response = h.send(&Client::with_pattern("member-a-0000000000001", pattern).request());
        assert_eq!(response.error_code, 0, "{pattern}: {:?}", response.error_message);
    }
}

#[test]
fn topics_created_and_deleted_after_subscribing_join_and_leave_the_assignment() {
    let mut h = Harness::new();
    let mut clients = vec![
        Client::with_pattern("member-a-0000000000001", "PFX-.*"),
        Client::with_pattern("member-b-0000000000002", "PFX-.*"),
    ];
    for client in &mut clients {
        h.heartbeat(client);
    }
    h.converge(&mut clients);
    assert_eq!(clients.iter().map(Client::count).sum::<usize>(), 0, "nothing matches yet");

    add_topic(&mut h, "PFX-orders", 10, 4);
    add_topic(&mut h, "unrelated", 11, 4);
    h.converge(&mut clients);
    assert_eq!(clients.iter().map(Client::count).collect::<Vec<_>>(), [2, 2]);
    assert!(clients.iter().all(|c| topics_of(&h, c) == BTreeSet::from(["PFX-orders".to_string()])));

    add_topic(&mut h, "PFX-late", 12, 2);
    h.converge(&mut clients);
    assert_eq!(clients.iter().map(Client::count).sum::<usize>(), 6);

    h.topics.remove("PFX-orders");
    h.converge(&mut clients);
    assert_eq!(clients.iter().map(Client::count).sum::<usize>(), 2);
    assert_eq!(h.coordinator.consumer_group_state(GROUP), Some(ConsumerGroupState::Stable));
}

#[test]
fn names_and_patterns_mix_in_one_group() {
    let mut h = Harness::new();
    add_topic(&mut h, "PFX-orders", 10, 2);
    let mut clients =
        vec![Client::new("member-a-0000000000001", &["t1"]), Client::with_pattern("member-b-0000000000002", "PFX-.*")];
    for client in &mut clients {
        h.heartbeat(client);
    }
    h.converge(&mut clients);
    assert_eq!(topics_of(&h, &clients[0]), BTreeSet::from(["t1".to_string()]));
    assert_eq!(topics_of(&h, &clients[1]), BTreeSet::from(["PFX-orders".to_string()]));
}

#[test]
fn a_group_takes_at_most_the_configured_number_of_distinct_patterns() {
    let config = GroupConfig { consumer_group_regex_max_patterns: 2, ..GroupConfig::default() };
    let mut h = Harness::with_config(config);
    let mut a = Client::with_pattern("member-a-0000000000001", "t1");
    let mut b = Client::with_pattern("member-b-0000000000002", "t2");
    h.heartbeat(&mut a);
    h.heartbeat(&mut b);
    // A pattern already in use does not count again.
    let mut c = Client::with_pattern("member-c-0000000000003", "t1");
    h.heartbeat(&mut c);
    let third = h.send(&Client::with_pattern("member-d-0000000000004", "t.*").request());
    assert_eq!(third.error_code, INVALID_REGULAR_EXPRESSION);
    assert!(third.error_message.unwrap().contains("osprey.group.consumer.regex.max.patterns"));
    // A member changing its own pattern replaces it: b was the only one using "t2".
    let mut change = b.request();
    change.subscribed_topic_regex = Some("t.*".into());
    assert_eq!(h.send(&change).error_code, 0);
}

#[test]
fn a_pattern_beyond_the_compiled_size_bound_is_refused() {
    let config = GroupConfig { consumer_group_regex_max_compiled_bytes: 10_000, ..GroupConfig::default() };
    let mut h = Harness::with_config(config);
    let response = h.send(&Client::with_pattern("member-a-0000000000001", "(t{100}){100}").request());
    assert_eq!(response.error_code, INVALID_REGULAR_EXPRESSION);
    assert_eq!(h.coordinator.consumer_group_state(GROUP), None);
}
