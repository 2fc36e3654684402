//! KIP-848 regular-expression subscriptions (SubscribedTopicRegex): Kafka's
//! `GroupMetadataManager` checks a member's pattern when it arrives, resolves the
//! group's patterns against the cluster's topics, and resolves them again when the
//! topics change (`refreshRegularExpressions`).
//!
//! A pattern is RE2 syntax (Kafka compiles it with RE2/J) and must match a whole topic
//! name (`Matcher.matches`); every topic is a candidate, internal ones included, as in
//! Kafka. Resolution happens on a heartbeat of the group, with the topics the heartbeat
//! brought: when a member brings a pattern the group has not resolved, or when the
//! topics' version has moved since the last resolution. A change in the resolved topics
//! changes the group's subscription metadata, which bumps the group epoch as a changed
//! subscription does.
//!
//! Kafka also persists each resolution (ConsumerGroupRegularExpression records) so that
//! a new coordinator need not resolve again; here a loaded group starts unresolved and
//! resolves on its first heartbeat, which yields the same topics from the same metadata.

use super::{ConsumerGroup, TopicsView};
use regex::{Regex, RegexBuilder};
use std::collections::{BTreeMap, BTreeSet};

/// The topics each of a group's patterns matched, and the topics' version they were
/// matched against.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ResolvedRegexes {
    pub topics_by_pattern: BTreeMap<String, BTreeSet<String>>,
    pub topics_version: Option<u64>,
}

/// Compiles `pattern` to match whole topic names; the error is Kafka's message for
/// INVALID_REGULAR_EXPRESSION. `max_compiled_bytes` bounds the compiled program, so a
/// client cannot make the coordinator build an automaton of any size.
pub(crate) fn compile(pattern: &str, max_compiled_bytes: usize) -> Result<Regex, String> {
    let build = |source: &str| RegexBuilder::new(source).size_limit(max_compiled_bytes).build();
    let invalid = |e: regex::Error| format!("SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}.");
    // The pattern on its own first: wrapped, `a)|(b` would parse as two anchored halves
    // instead of failing as RE2/J fails it.
    build(pattern).map_err(invalid)?;
    build(&format!("^(?:{pattern})$")).map_err(invalid)
}

impl ConsumerGroup {
    /// The distinct patterns the group's members subscribe with.
    pub(super) fn subscribed_patterns(&self) -> BTreeSet<&str> {
        self.members.values().filter_map(|m| m.subscribed_topic_regex.as_deref()).collect()
    }

    /// Resolves the group's patterns again if a pattern is new or gone, or the topics
    /// changed since the last resolution. Patterns were checked when they arrived; one
    /// that does not compile now (a lowered size bound) matches nothing.
    pub(super) fn refresh_regexes(&mut self, topics: &dyn TopicsView, max_compiled_bytes: usize) {
        let patterns: BTreeSet<String> = self.subscribed_patterns().into_iter().map(str::to_string).collect();
        let version = topics.version();
        let resolved = &self.resolved_regexes;
        let same_patterns = resolved.topics_by_pattern.keys().eq(patterns.iter());
        if same_patterns && (patterns.is_empty() || resolved.topics_version == Some(version)) {
            return;
        }
        let compiled: Vec<(String, Option<Regex>)> =
            patterns.into_iter().map(|p| (p.clone(), compile(&p, max_compiled_bytes).ok())).collect();
        let mut topics_by_pattern: BTreeMap<String, BTreeSet<String>> =
            compiled.iter().map(|(p, _)| (p.clone(), BTreeSet::new())).collect();
        topics.for_each_name(&mut |name| {
            for (pattern, regex) in &compiled {
                if regex.as_ref().is_some_and(|r| r.is_match(name)) {
                    topics_by_pattern.entry(pattern.clone()).or_default().insert(name.to_string());
                }
            }
        });
        self.resolved_regexes = ResolvedRegexes { topics_by_pattern, topics_version: Some(version) };
    }

    /// The topics `pattern` resolved to (none before it is resolved).
    pub(super) fn regex_topics(&self, pattern: &str) -> impl Iterator<Item = &String> {
        self.resolved_regexes.topics_by_pattern.get(pattern).into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::consumer::{ConsumerMember, TopicInfo};
    use osprey_protocol::Uuid;

    fn topics(names: &[&str]) -> BTreeMap<String, TopicInfo> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), TopicInfo { topic_id: Uuid([i as u8 + 1; 16]), num_partitions: 1 }))
            .collect()
    }

    fn group_with_pattern(pattern: &str) -> ConsumerGroup {
        let mut group = ConsumerGroup::new("g");
        let mut member = ConsumerMember::new("m");
        member.subscribed_topic_regex = Some(pattern.to_string());
        group.members.insert("m".into(), member);
        group
    }

    fn resolved(group: &ConsumerGroup, pattern: &str) -> Vec<String> {
        group.regex_topics(pattern).cloned().collect()
    }

    #[test]
    fn patterns_kafka_accepts_compile_and_match_whole_names() {
        let all = topics(&["PFX-a", "PFX-b", "orders", "order", "X", "Y", "XY", "__consumer_offsets", "pre-PFX-c"]);
        let cases: [(&str, &[&str]); 6] = [
            (".*", &["PFX-a", "PFX-b", "X", "XY", "Y", "__consumer_offsets", "order", "orders", "pre-PFX-c"]),
            ("PFX-.*", &["PFX-a", "PFX-b"]),
            ("X|Y", &["X", "Y"]),
            ("order[s]", &["orders"]),
            ("^PFX-.*", &["PFX-a", "PFX-b"]),
            (".*(?:(?:__consumer_offsets)|(?:PFX-a)).*", &["PFX-a", "__consumer_offsets"]),
        ];
        for (pattern, expected) in cases {
            let mut group = group_with_pattern(pattern);
            group.refresh_regexes(&all, 1 << 20);
            assert_eq!(resolved(&group, pattern), expected.to_vec(), "pattern {pattern}");
        }
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_refused_with_kafkas_wording() {
        let error = compile("order[s", 1 << 20).unwrap_err();
        assert!(error.starts_with("SubscribedTopicRegex `order[s` is not a valid regular expression"), "{error}");
    }

    #[test]
    fn a_pattern_cannot_close_the_anchoring_group() {
        assert!(compile("a)|(b", 1 << 20).is_err());
    }

    #[test]
    fn a_pattern_larger_than_the_compiled_size_bound_is_refused() {
        // Nested counted repetitions expand to a large program.
        assert!(compile("(a{100}){100}", 1 << 20).is_ok());
        assert!(compile("((a{100}){100}){100}", 1 << 20).is_err());
    }

    #[test]
    fn topics_created_and_deleted_are_resolved_again_when_the_version_moves() {
        let mut group = group_with_pattern("PFX-.*");
        let mut all = topics(&["PFX-a", "other"]);
        group.refresh_regexes(&all, 1 << 20);
        assert_eq!(resolved(&group, "PFX-.*"), ["PFX-a"]);
        all.insert("PFX-b".into(), TopicInfo { topic_id: Uuid([9; 16]), num_partitions: 2 });
        group.refresh_regexes(&all, 1 << 20);
        assert_eq!(resolved(&group, "PFX-.*"), ["PFX-a", "PFX-b"]);
        all.remove("PFX-a");
        group.refresh_regexes(&all, 1 << 20);
        assert_eq!(resolved(&group, "PFX-.*"), ["PFX-b"]);
    }

    #[test]
    fn a_pattern_nobody_uses_any_more_is_forgotten() {
        let mut group = group_with_pattern("PFX-.*");
        let all = topics(&["PFX-a"]);
        group.refresh_regexes(&all, 1 << 20);
        group.members.get_mut("m").expect("member").subscribed_topic_regex = None;
        group.refresh_regexes(&all, 1 << 20);
        assert!(group.resolved_regexes.topics_by_pattern.is_empty());
    }
}
