//! Member ids as Kafka makes them: `<client.id or group.instance.id>-<random UUID>`.
//!
//! The randomness comes from a seeded generator rather than the OS, so that the state
//! machine stays deterministic; the server seeds it with random bits.

#[derive(Debug)]
pub(super) struct MemberIdGenerator {
    state: u64,
}

impl MemberIdGenerator {
    pub fn new(seed: u64) -> MemberIdGenerator {
        MemberIdGenerator { state: seed }
    }

    /// SplitMix64: tiny, fast, and every seed gives a full-period sequence.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A version-4 UUID in Java's `UUID.toString` form.
    fn uuid(&mut self) -> String {
        let hi = (self.next_u64() & !0xf000) | 0x4000;
        let lo = (self.next_u64() & !(0xc << 60)) | (0x8 << 60);
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xffff,
            hi & 0xffff,
            lo >> 48,
            lo & 0xffff_ffff_ffff
        )
    }

    /// A random id in Kafka's `Uuid.toString` form (22 characters of URL-safe base64):
    /// the member ids ConsumerGroupHeartbeat v0 hands out.
    pub fn kafka_uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_be_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_be_bytes());
        osprey_protocol::Uuid(bytes).to_string()
    }

    /// Kafka's `GroupMetadata.generateMemberId`: static members are named after their
    /// instance id, dynamic ones after their client id.
    pub fn generate(&mut self, client_id: &str, group_instance_id: Option<&str>) -> String {
        let prefix = group_instance_id.unwrap_or(client_id);
        format!("{prefix}-{}", self.uuid())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_look_like_kafka_ones() {
        let mut ids = MemberIdGenerator::new(7);
        let id = ids.generate("consumer-1", None);
        let uuid = id.strip_prefix("consumer-1-").unwrap();
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "4");
        assert!(matches!(&uuid[19..20], "8" | "9" | "a" | "b"));
        assert!(ids.generate("c", Some("instance-a")).starts_with("instance-a-"));
        assert_ne!(ids.generate("c", None), ids.generate("c", None));
    }
}
