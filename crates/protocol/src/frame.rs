//! Request and response headers, and which header version goes with which request.
//!
//! A request on the wire is `int32 size | header | body`; the size prefix belongs to the
//! transport (the server reads it and checks it against `socket.request.max.bytes`
//! before reading the frame), so everything here starts at the header.

use crate::messages::ApiKey;
pub use crate::messages::{RequestHeader, ResponseHeader};
use crate::wire::{get_i16, DecodeError, EncodeError, Message};
use bytes::{Bytes, BytesMut};

/// The header version of a request: 2 when the API version is flexible, else 1.
///
/// Flexibility is open-ended (`N+`), so a version newer than the codec knows is read with
/// the newest header; this is what lets an ApiVersions request of an unknown version be
/// parsed and answered (KIP-511).
pub fn request_header_version(api_key: ApiKey, api_version: i16) -> i16 {
    if api_key.flexible_from().is_some_and(|f| api_version >= f) {
        2
    } else {
        1
    }
}

/// The header version of a response: 1 when flexible, except that ApiVersions responses
/// always use header v0 so that a client can read them whatever version it asked for.
pub fn response_header_version(api_key: ApiKey, api_version: i16) -> i16 {
    if api_key != ApiKey::ApiVersions && api_key.flexible_from().is_some_and(|f| api_version >= f) {
        1
    } else {
        0
    }
}

/// A request split into its header and the still-encoded body.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFrame {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    /// The body bytes, not yet decoded (a shared slice of the frame, no copy).
    pub body: Bytes,
}

/// Why a request frame could not be split; each case tells the server how to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The API key is not one Kafka clients use with a broker; Kafka closes the connection.
    #[error("unknown api key {api_key} (correlation id {correlation_id})")]
    UnknownApiKey { api_key: i16, correlation_id: i32 },
    #[error("malformed request header: {0}")]
    Header(#[from] DecodeError),
}

/// Splits a frame (without its size prefix) into header and body.
pub fn split_request(mut frame: Bytes) -> Result<RequestFrame, FrameError> {
    let mut peek = frame.clone();
    let key = get_i16(&mut peek, "RequestHeader.request_api_key")?;
    let version = get_i16(&mut peek, "RequestHeader.request_api_version")?;
    let Some(api_key) = ApiKey::from_i16(key) else {
        let correlation_id = crate::wire::get_i32(&mut peek, "RequestHeader.correlation_id")?;
        return Err(FrameError::UnknownApiKey { api_key: key, correlation_id });
    };
    let header = RequestHeader::decode(&mut frame, request_header_version(api_key, version))?;
    Ok(RequestFrame { api_key, header, body: frame })
}

/// Encodes a request header followed by its body: what a client (or a test) sends.
pub fn encode_request(
    header: &RequestHeader,
    body: &crate::messages::RequestBody,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let api_key = body.api_key();
    header.encode(buf, request_header_version(api_key, header.request_api_version))?;
    body.encode(buf, header.request_api_version)
}

/// Encodes a response header (for `api_key` at `api_version`) followed by the body.
pub fn encode_response(
    correlation_id: i32,
    api_version: i16,
    body: &crate::messages::ResponseBody,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let header = ResponseHeader { correlation_id, ..Default::default() };
    header.encode(buf, response_header_version(body.api_key(), api_version))?;
    body.encode(buf, api_version)
}

/// Reads a response header for a request of `api_key` at `api_version`.
pub fn decode_response_header(
    buf: &mut Bytes,
    api_key: ApiKey,
    api_version: i16,
) -> Result<ResponseHeader, DecodeError> {
    ResponseHeader::decode(buf, response_header_version(api_key, api_version))
}
