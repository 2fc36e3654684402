//! A share partition's settings, with Kafka's names and defaults (`ShareGroupConfig`,
//! `GroupConfig`).

/// The settings a share partition runs with. The broker-level names are Kafka's
/// `group.share.*`; a group can override them (`share.record.lock.duration.ms`, ...) and
/// the server passes the values in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareConfig {
    /// `group.share.record.lock.duration.ms` (default 30000, Kafka's range 1000..=3600000):
    /// how long an acquired record stays locked to its member.
    pub record_lock_duration_ms: i64,
    /// `group.share.delivery.count.limit` (default 5, range 2..=10): after this many
    /// deliveries a released or timed-out record is ARCHIVED instead of AVAILABLE.
    pub delivery_count_limit: i16,
    /// `group.share.partition.max.record.locks` (default 2000 since Kafka 4.1, range
    /// 100..=10000): the in-flight window, `end_offset - start_offset`.
    pub partition_max_record_locks: i32,
    /// The group's `share.renew.acknowledge.enable` (default true): whether RENEW
    /// acknowledgements (KIP-1222) are taken.
    pub renew_acknowledge_enabled: bool,
    /// Whether the group has a dead-letter queue (KIP-1191): `share.version` 2 or more
    /// and the group's `errors.deadletterqueue.topic.name` set. Rejected records, and
    /// records out of deliveries, then go through ARCHIVING to the DLQ topic.
    pub dlq_enabled: bool,
}

impl Default for ShareConfig {
    fn default() -> Self {
        ShareConfig {
            record_lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            partition_max_record_locks: 2000,
            renew_acknowledge_enabled: true,
            dlq_enabled: false,
        }
    }
}

impl ShareConfig {
    /// Whether the values are in Kafka's ranges (tests use smaller windows).
    pub fn validate(&self) -> Result<(), String> {
        if !(1000..=3_600_000).contains(&self.record_lock_duration_ms) {
            return Err(format!("group.share.record.lock.duration.ms {}", self.record_lock_duration_ms));
        }
        if !(2..=10).contains(&self.delivery_count_limit) {
            return Err(format!("group.share.delivery.count.limit {}", self.delivery_count_limit));
        }
        if !(100..=10_000).contains(&self.partition_max_record_locks) {
            return Err(format!("group.share.partition.max.record.locks {}", self.partition_max_record_locks));
        }
        Ok(())
    }

    /// Where a rejected record, or one out of deliveries, goes: ARCHIVING (to the
    /// dead-letter queue) when the group has one, else ARCHIVED.
    pub(super) fn archive_state(&self) -> super::RecordState {
        match self.dlq_enabled {
            true => super::RecordState::Archiving,
            false => super::RecordState::Archived,
        }
    }

    pub(super) fn max_record_locks(&self) -> i64 {
        i64::from(self.partition_max_record_locks.max(1))
    }

    /// From this delivery count on, redeliveries are throttled (Kafka's
    /// `throttleRecordsDeliveryLimit`: half the limit, at least 2).
    pub(super) fn throttle_delivery_count(&self) -> i16 {
        let half = (self.delivery_count_limit + 1) / 2;
        half.max(2)
    }
}

/// `share.auto.offset.reset`: where a share group with no state starts on a partition.
/// The server resolves it against the log (ListOffsets semantics) and passes the offset to
/// [`super::SharePartition::load`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareAutoOffsetReset {
    /// `earliest`: the log start offset.
    Earliest,
    /// `latest` (Kafka's default): the log end offset.
    #[default]
    Latest,
    /// `by_duration:<ISO-8601 duration>`: the first offset whose timestamp is at least
    /// `now - duration_ms`.
    ByDuration { duration_ms: i64 },
}

impl ShareAutoOffsetReset {
    /// Parses Kafka's values: `earliest`, `latest`, `by_duration:PnDTnHnMn.nS`.
    pub fn parse(value: &str) -> Option<ShareAutoOffsetReset> {
        let value = value.trim();
        match value.to_ascii_lowercase().as_str() {
            "earliest" => return Some(ShareAutoOffsetReset::Earliest),
            "latest" => return Some(ShareAutoOffsetReset::Latest),
            _ => {}
        }
        let duration = value.get(..12).filter(|p| p.eq_ignore_ascii_case("by_duration:")).map(|_| &value[12..])?;
        parse_iso8601_duration_ms(duration).map(|duration_ms| ShareAutoOffsetReset::ByDuration { duration_ms })
    }
}

/// Java's `Duration.parse` for what `by_duration` uses: `PnDTnHnMn.nS`, non-negative
/// (Kafka rejects negative durations).
fn parse_iso8601_duration_ms(text: &str) -> Option<i64> {
    let rest = text.strip_prefix('P').or_else(|| text.strip_prefix('p'))?;
    let (days, time) = match rest.find(['T', 't']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let mut ms: i64 = 0;
    let mut any = false;
    if !days.is_empty() {
        let n: i64 = days.strip_suffix(['D', 'd'])?.parse().ok()?;
        ms = ms.checked_add(n.checked_mul(86_400_000)?)?;
        any = true;
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        for (unit, unit_ms) in [(['H', 'h'], 3_600_000i64), (['M', 'm'], 60_000)] {
            if let Some(i) = time.find(unit) {
                let n: i64 = time[..i].parse().ok()?;
                ms = ms.checked_add(n.checked_mul(unit_ms)?)?;
                time = &time[i + 1..];
                any = true;
            }
        }
        if let Some(seconds) = time.strip_suffix(['S', 's']) {
            let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
            let whole: i64 = whole.parse().ok()?;
            let fraction_ms: i64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
            ms = ms.checked_add(whole.checked_mul(1000)?)?.checked_add(fraction_ms)?;
            any = true;
        } else if !time.is_empty() {
            return None;
        }
    }
    (any && ms >= 0).then_some(ms)
}
