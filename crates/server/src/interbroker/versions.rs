//! What the peer said it supports in ApiVersions, and the version this client picks
//! for each request: the highest that both sides support, as Kafka's `NodeApiVersions`
//! (`latestUsableVersion`) picks it.

use osprey_protocol::messages::ApiVersionsResponse;
use osprey_protocol::ApiKey;
use std::collections::HashMap;

/// The peer's ApiVersions table, by wire API key (it may list keys the codec does not
/// know, such as the controller's, and those are kept for raw requests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerVersions {
    ranges: HashMap<i16, (i16, i16)>,
}

/// Why no version of a request can be sent to this peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub api_key: i16,
    /// The versions this side can send (the codec's, or the one asked for in raw mode).
    pub ours: (i16, i16),
    /// The versions the peer advertised, `None` if it does not list the API at all.
    pub theirs: Option<(i16, i16)>,
}

impl PeerVersions {
    /// The table of an ApiVersions response. A range with min > max is dropped: the
    /// peer cannot mean it, and choosing a version from it would be a guess.
    pub fn from_response(response: &ApiVersionsResponse) -> PeerVersions {
        let ranges = response
            .api_keys
            .iter()
            .filter(|k| k.min_version >= 0 && k.min_version <= k.max_version)
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        PeerVersions { ranges }
    }

    /// The versions the peer advertised for a wire API key.
    pub fn range(&self, api_key: i16) -> Option<(i16, i16)> {
        self.ranges.get(&api_key).copied()
    }

    /// The highest version of `api` that the codec and the peer both support.
    pub fn usable(&self, api: ApiKey) -> Result<i16, Unsupported> {
        highest_common(api as i16, api.versions(), self.range(api as i16))
    }

    /// Whether a raw request of `api_key` at `api_version` may be sent. A key the peer
    /// lists must be sent at a version it lists. A key it does not list is refused if it
    /// is one of Kafka's (the codec knows it): the peer does not serve it. Any other key
    /// is Osprey-private (the openraft RPCs), which by design no ApiVersions advertises,
    /// and goes out as asked; a peer that does not know it closes the connection, as
    /// Kafka's brokers do with an unknown key.
    pub fn check_raw(&self, api_key: i16, api_version: i16) -> Result<(), Unsupported> {
        let unsupported = |theirs| Unsupported { api_key, ours: (api_version, api_version), theirs };
        match self.range(api_key) {
            Some((min, max)) if (min..=max).contains(&api_version) => Ok(()),
            Some(range) => Err(unsupported(Some(range))),
            None if ApiKey::from_i16(api_key).is_some() => Err(unsupported(None)),
            None => Ok(()),
        }
    }
}

/// The highest version in both ranges.
fn highest_common(api_key: i16, ours: (i16, i16), theirs: Option<(i16, i16)>) -> Result<i16, Unsupported> {
    let Some((their_min, their_max)) = theirs else {
        return Err(Unsupported { api_key, ours, theirs });
    };
    let high = ours.1.min(their_max);
    if high >= ours.0.max(their_min) {
        Ok(high)
    } else {
        Err(Unsupported { api_key, ours, theirs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::messages::api_versions_response::ApiVersion;

    fn peer(ranges: &[(i16, i16, i16)]) -> PeerVersions {
        PeerVersions::from_response(&ApiVersionsResponse {
            api_keys: ranges
                .iter()
                .map(|&(api_key, min_version, max_version)| ApiVersion {
                    api_key,
                    min_version,
                    max_version,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    #[test]
    fn picks_the_highest_version_both_sides_support() {
        let (_, codec_max) = ApiKey::Metadata.versions();
        assert_eq!(peer(&[(3, 0, codec_max + 5)]).usable(ApiKey::Metadata), Ok(codec_max));
        assert_eq!(peer(&[(3, 0, 4)]).usable(ApiKey::Metadata), Ok(4));
    }

    #[test]
    fn disjoint_ranges_and_absent_apis_are_unsupported_with_both_ranges() {
        let (codec_min, codec_max) = ApiKey::Fetch.versions();
        let old = peer(&[(1, 0, codec_min - 1)]);
        assert_eq!(
            old.usable(ApiKey::Fetch),
            Err(Unsupported { api_key: 1, ours: (codec_min, codec_max), theirs: Some((0, codec_min - 1)) })
        );
        let none = peer(&[]);
        assert_eq!(none.usable(ApiKey::Fetch).map_err(|u| u.theirs), Err(None));
    }

    #[test]
    fn an_inverted_or_negative_range_is_ignored() {
        let p = peer(&[(3, 5, 2), (0, -1, 3)]);
        assert_eq!(p.range(3), None);
        assert_eq!(p.range(0), None);
    }

    #[test]
    fn raw_requests_check_listed_keys_refuse_unlisted_kafka_keys_and_pass_private_ones() {
        let p = peer(&[(18, 0, 4), (62, 0, 4)]);
        assert_eq!(p.check_raw(18, 4), Ok(()));
        assert_eq!(p.check_raw(62, 4), Ok(()));
        assert_eq!(p.check_raw(62, 5).map_err(|u| u.theirs), Err(Some((0, 4))));
        assert_eq!(p.check_raw(ApiKey::Produce as i16, 9).map_err(|u| u.theirs), Err(None));
        assert_eq!(p.check_raw(10_001, 0), Ok(()));
    }
}
