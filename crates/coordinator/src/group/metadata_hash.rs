//! Kafka's metadata hash of a group's subscribed topics (KIP-1101,
//! `Utils.computeTopicHash` / `computeGroupHash`): XXH3-64 over the bytes hash4j's
//! `HashStream64` streams. The hash is stored in ShareGroupMetadataValue and
//! StreamsGroupMetadataValue; a group whose stored hash differs from the topics' bumps its
//! epoch, so Osprey computes it exactly as Kafka does (checked against hash4j in the tests
//! below).

use crate::group::consumer::TopicInfo;
use twox_hash::XxHash3_64;

/// `TOPIC_HASH_MAGIC_BYTE`: the version of the topic hash.
const TOPIC_HASH_MAGIC_BYTE: u8 = 0;

/// hash4j's `putString`: the UTF-16 code units (little-endian), then their count.
fn put_string(bytes: &mut Vec<u8>, s: &str) {
    let mut units = 0i32;
    for unit in s.encode_utf16() {
        bytes.extend_from_slice(&unit.to_le_bytes());
        units += 1;
    }
    bytes.extend_from_slice(&units.to_le_bytes());
}

/// `computeTopicHash` of an existing topic: magic byte, id (most then least significant
/// long), name, partition count, then each partition with its sorted racks (Osprey has
/// no racks: none).
pub fn topic_hash(name: &str, info: TopicInfo) -> i64 {
    let id = info.topic_id.0;
    let mut bytes = Vec::with_capacity(32 + 2 * name.len() + 4 * info.num_partitions.max(0) as usize);
    bytes.push(TOPIC_HASH_MAGIC_BYTE);
    // hash4j's putLong writes little-endian; the Uuid's bytes are big-endian longs.
    let msb = i64::from_be_bytes(id[..8].try_into().expect("8 bytes"));
    let lsb = i64::from_be_bytes(id[8..].try_into().expect("8 bytes"));
    bytes.extend_from_slice(&msb.to_le_bytes());
    bytes.extend_from_slice(&lsb.to_le_bytes());
    put_string(&mut bytes, name);
    bytes.extend_from_slice(&info.num_partitions.to_le_bytes());
    for partition in 0..info.num_partitions.max(0) {
        bytes.extend_from_slice(&partition.to_le_bytes());
    }
    XxHash3_64::oneshot(&bytes) as i64
}

/// `computeGroupHash`: the topics' hashes in name order; 0 without topics.
pub fn group_hash<'a>(topic_hashes: impl IntoIterator<Item = (&'a String, i64)>) -> i64 {
    let mut sorted: Vec<(&String, i64)> = topic_hashes.into_iter().collect();
    if sorted.is_empty() {
        return 0;
    }
    sorted.sort();
    let bytes: Vec<u8> = sorted.iter().flat_map(|(_, hash)| hash.to_le_bytes()).collect();
    XxHash3_64::oneshot(&bytes) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::Uuid;

    fn uuid(msb: i64, lsb: i64) -> Uuid {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&msb.to_be_bytes());
        bytes[8..].copy_from_slice(&lsb.to_be_bytes());
        Uuid(bytes)
    }

    /// Expected values computed with hash4j 0.22.0 (Kafka 4.4's) streaming exactly what
    /// `Utils.computeTopicHash` / `computeGroupHash` stream.
    #[test]
    fn hashes_match_kafka_hash4j() {
        let orders = topic_hash(
            "orders",
            TopicInfo { topic_id: uuid(0x0102030405060708, 0x090a0b0c0d0e0f10), num_partitions: 3 },
        );
        assert_eq!(orders, 3653115502262934565);
        let payments = topic_hash("payments-é", TopicInfo { topic_id: uuid(-5, 77), num_partitions: 1 });
        assert_eq!(payments, -686088233208175719);
        let (a, b) = ("orders".to_string(), "payments-é".to_string());
        assert_eq!(group_hash([(&b, payments), (&a, orders)]), 4769402728603978067);
        assert_eq!(group_hash([]), 0);
    }
}
