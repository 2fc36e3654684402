//! Kafka's EnvelopeRequest (KIP-590): how a broker forwards a client's CreateTopics,
//! DeleteTopics or CreatePartitions to the active controller with who sent it, so that
//! the controller measures the client's `controller_mutation_rate` (KIP-599) as Kafka's
//! does. The envelope carries the client's request (header and body, at the client's
//! version and with its client id), its principal (Kafka's `DefaultPrincipalData`,
//! version-prefixed as `DefaultKafkaPrincipalBuilder.serialize` writes it) and its
//! address; the answer carries the controller's response, header and body.
//!
//! Both ends are here: [`wrap`] and [`unwrap_response`] for the broker, [`open`] and
//! [`answer`] for the controller listener.

use crate::dispatch::Requester;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use osprey_protocol::frame::{decode_response_header, encode_request, encode_response, split_request};
use osprey_protocol::messages::{DefaultPrincipalData, EnvelopeRequest, EnvelopeResponse};
use osprey_protocol::wire::Message;
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, RequestHeader, ResponseBody};
use std::net::IpAddr;

/// The APIs brokers forward in an envelope; a controller opens no other.
pub const FORWARDED: [ApiKey; 3] = [ApiKey::CreateTopics, ApiKey::DeleteTopics, ApiKey::CreatePartitions];

/// The version of `DefaultPrincipalData` Kafka writes.
const PRINCIPAL_DATA_VERSION: i16 = 0;

/// The envelope of `body` (read from the client at `version`) from `requester`.
pub fn wrap(requester: &Requester, body: &RequestBody, version: i16) -> Result<EnvelopeRequest, String> {
    let header = RequestHeader {
        request_api_key: body.api_key() as i16,
        request_api_version: version,
        correlation_id: 0,
        client_id: Some(requester.client_id.clone()),
        ..Default::default()
    };
    let mut request_data = BytesMut::new();
    encode_request(&header, body, &mut request_data).map_err(|e| format!("request does not encode: {e}"))?;
    let host = match requester.host.to_canonical() {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    Ok(EnvelopeRequest {
        request_data: request_data.freeze(),
        request_principal: Some(encode_principal(&requester.principal)?),
        client_host_address: Bytes::from(host),
        ..Default::default()
    })
}

/// The controller's response to the request `wrap` enveloped (`api` at `version`).
pub fn unwrap_response(envelope: &EnvelopeResponse, api: ApiKey, version: i16) -> Result<ResponseBody, ErrorCode> {
    let code = ErrorCode::from_code(envelope.error_code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
    if envelope.error_code != 0 {
        return Err(code);
    }
    let mut data = envelope.response_data.clone().ok_or(ErrorCode::UNKNOWN_SERVER_ERROR)?;
    decode_response_header(&mut data, api, version).map_err(|_| ErrorCode::UNKNOWN_SERVER_ERROR)?;
    let body = ResponseBody::decode(api, &mut data, version).map_err(|_| ErrorCode::UNKNOWN_SERVER_ERROR)?;
    if data.has_remaining() {
        return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
    }
    Ok(body)
}

/// An envelope's content, as the controller reads it.
#[derive(Debug)]
pub struct Opened {
    pub header: RequestHeader,
    pub body: RequestBody,
    /// The client's principal, `Type:name`.
    pub principal: String,
}

/// Reads an envelope; `Err` with the envelope error to answer (INVALID_REQUEST for what
/// does not decode or is not one of the [`FORWARDED`] APIs, UNSUPPORTED_VERSION for an
/// inner version `served` refuses).
pub fn open(
    envelope: &EnvelopeRequest,
    served: impl Fn(ApiKey) -> Option<(i16, i16)>,
) -> Result<Opened, (ErrorCode, String)> {
    let invalid = |why: String| (ErrorCode::INVALID_REQUEST, why);
    let principal =
        envelope.request_principal.as_ref().ok_or_else(|| invalid("an envelope without a principal".into()))?;
    let principal = decode_principal(principal).map_err(invalid)?;
    let frame = split_request(envelope.request_data.clone()).map_err(|e| invalid(format!("enveloped request: {e}")))?;
    let version = frame.header.request_api_version;
    if !FORWARDED.contains(&frame.api_key) {
        // A node's own APIs (registration, heartbeats, AlterPartition) never come in one.
        return Err(invalid(format!("{} is not forwarded in an envelope", frame.api_key.name())));
    }
    match served(frame.api_key) {
        Some((min, max)) if (min..=max).contains(&version) => {}
        _ => {
            let why = format!("{} v{version} is not served by this controller", frame.api_key.name());
            return Err((ErrorCode::UNSUPPORTED_VERSION, why));
        }
    }
    let body = RequestBody::decode(frame.api_key, &mut frame.body.clone(), version)
        .map_err(|e| invalid(format!("enveloped {} v{version}: {e}", frame.api_key.name())))?;
    Ok(Opened { header: frame.header, body, principal })
}

/// The envelope answering `opened` with `body`.
pub fn answer(header: &RequestHeader, body: &ResponseBody) -> EnvelopeResponse {
    let mut data = BytesMut::new();
    match encode_response(header.correlation_id, header.request_api_version, body, &mut data) {
        Ok(()) => EnvelopeResponse { response_data: Some(data.freeze()), error_code: 0, ..Default::default() },
        Err(e) => {
            tracing::error!(error = %e, "an enveloped response does not encode (a bug)");
            refused(ErrorCode::UNKNOWN_SERVER_ERROR)
        }
    }
}

/// An envelope refused whole.
pub fn refused(code: ErrorCode) -> EnvelopeResponse {
    EnvelopeResponse { response_data: None, error_code: code.code(), ..Default::default() }
}

fn encode_principal(principal: &str) -> Result<Bytes, String> {
    let (principal_type, name) = principal.split_once(':').unwrap_or(("User", principal));
    let data = DefaultPrincipalData {
        principal_type: principal_type.to_string(),
        name: name.to_string(),
        token_authenticated: false,
        ..Default::default()
    };
    let mut out = BytesMut::new();
    out.put_i16(PRINCIPAL_DATA_VERSION);
    data.encode(&mut out, PRINCIPAL_DATA_VERSION).map_err(|e| format!("principal does not encode: {e}"))?;
    Ok(out.freeze())
}

fn decode_principal(bytes: &Bytes) -> Result<String, String> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Err("principal too short for its version".into());
    }
    let version = buf.get_i16();
    let data = DefaultPrincipalData::decode_exact(buf, version).map_err(|e| format!("principal: {e}"))?;
    Ok(format!("{}:{}", data.principal_type, data.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::messages::create_topics_request::CreatableTopic;
    use osprey_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
    use std::sync::Arc;

    fn requester() -> Requester {
        Requester { principal: Arc::from("User:alice"), client_id: "admin-1".into(), host: "10.1.2.3".parse().unwrap() }
    }

    fn create(name: &str) -> RequestBody {
        RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: 3,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 1000,
            ..Default::default()
        })
    }

    #[test]
    fn a_request_goes_through_an_envelope_and_back_with_its_sender() {
        let envelope = wrap(&requester(), &create("t"), 7).unwrap();
        assert_eq!(&envelope.client_host_address[..], &[10, 1, 2, 3]);
        let opened = open(&envelope, |_| Some((2, 7))).unwrap();
        assert_eq!(opened.principal, "User:alice");
        assert_eq!(opened.header.client_id.as_deref(), Some("admin-1"));
        assert_eq!(opened.header.request_api_version, 7);
        assert_eq!(opened.body, create("t"));
        let response =
            ResponseBody::CreateTopics(CreateTopicsResponse { throttle_time_ms: 1234, ..Default::default() });
        let answered = answer(&opened.header, &response);
        assert_eq!(unwrap_response(&answered, ApiKey::CreateTopics, 7), Ok(response));
    }

    #[test]
    fn an_envelope_the_controller_cannot_serve_is_refused_with_the_reason() {
        let envelope = wrap(&requester(), &create("t"), 7).unwrap();
        let (code, _) = open(&envelope, |_| Some((2, 6))).unwrap_err();
        assert_eq!(code, ErrorCode::UNSUPPORTED_VERSION);
        let mut bad = envelope.clone();
        bad.request_principal = Some(Bytes::from_static(&[0]));
        assert_eq!(open(&bad, |_| Some((2, 7))).unwrap_err().0, ErrorCode::INVALID_REQUEST);
        bad.request_principal = None;
        assert_eq!(open(&bad, |_| Some((2, 7))).unwrap_err().0, ErrorCode::INVALID_REQUEST);
        let heartbeat = RequestBody::BrokerHeartbeat(Default::default());
        let own = wrap(&requester(), &heartbeat, 1).unwrap();
        assert_eq!(open(&own, |_| Some((0, 4))).unwrap_err().0, ErrorCode::INVALID_REQUEST);
        let mut truncated = envelope;
        truncated.request_data = truncated.request_data.slice(..truncated.request_data.len() - 3);
        assert_eq!(open(&truncated, |_| Some((2, 7))).unwrap_err().0, ErrorCode::INVALID_REQUEST);
        assert_eq!(
            unwrap_response(&refused(ErrorCode::CLUSTER_AUTHORIZATION_FAILED), ApiKey::CreateTopics, 7),
            Err(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
        );
    }
}
