//! Request and response headers, and which header version goes with which request.
//!
//! A request on the wire is `int32 size | header | body`; the size prefix belongs to the
//! transport (the server reads it and checks it against `socket.request.max.bytes`
//! before reading the frame), so everything here starts at the header.
//!
//! A response can also be encoded with its records left out
//! ([`encode_response_leaving_out`]), for the server to send them from the log file.

use crate::messages::ApiKey;
pub use crate::messages::{RequestHeader, ResponseHeader};
use crate::wire::{
    get_i16, put_bytes, put_records_len, DecodeError, EncodeError, Message, RecordsMark, RecordsMarking,
};
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

/// A records field left out of a response encoded by [`encode_response_leaving_out`]: the
/// buffer holds its length prefix, and its `len` bytes go on the wire at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsGap {
    /// The offset in the buffer (from its start, so counting anything written before the
    /// response) at which the field's bytes belong: right after its length prefix.
    pub at: usize,
    /// The length the prefix declares: what the caller said it will send.
    pub len: usize,
    /// Which records field: the ordinal among the response's non-null records fields, in
    /// encoding order, from 0.
    pub field: usize,
}

/// Encodes a response as [`encode_response`] does, except for the records fields that
/// `leave_out` chooses, so that their bytes can go from the log file to the socket without
/// passing through this buffer (zero-copy fetch).
///
/// `leave_out(n, records)` is asked once for each non-null records field, `n` counting them
/// in encoding order from 0. `Some(len)` leaves the field out: the buffer gets a length
/// prefix declaring `len` bytes (which need not be `records.len()`: the caller sends what
/// it said) and a [`RecordsGap`]. `None` writes the field as usual. Gaps come in increasing
/// `at`; the response on the wire is `buf[..g0.at]`, g0's bytes, `buf[g0.at..g1.at]`, g1's
/// bytes, ..., `buf[last.at..]`. A `len` its length prefix cannot declare is the error
/// [`encode_response`] gives for records of that length; on any error `buf` holds a partial
/// encoding, as [`encode_response`] would leave it.
pub fn encode_response_leaving_out(
    correlation_id: i32,
    api_version: i16,
    body: &crate::messages::ResponseBody,
    buf: &mut BytesMut,
    leave_out: &mut dyn FnMut(usize, &Bytes) -> Option<usize>,
) -> Result<Vec<RecordsGap>, EncodeError> {
    // The encoders only mark where records fields go (the decisions cannot be asked from
    // inside them without a borrowed callback in a thread-local, which needs unsafe code);
    // the guard's drop stops the marking even when encoding fails.
    let marking = RecordsMarking::start();
    encode_response(correlation_id, api_version, body, buf)?;
    let marks = marking.finish();
    put_records_back(buf, &marks, leave_out)
}

/// Puts the marked records fields into `buf`, each as `leave_out` decides: a length prefix
/// and a gap, or the whole field.
fn put_records_back(
    buf: &mut BytesMut,
    marks: &[RecordsMark],
    leave_out: &mut dyn FnMut(usize, &Bytes) -> Option<usize>,
) -> Result<Vec<RecordsGap>, EncodeError> {
    let Some(first) = marks.first() else {
        return Ok(Vec::new());
    };
    let decisions: Vec<Option<usize>> =
        marks.iter().enumerate().map(|(field, mark)| leave_out(field, &mark.records)).collect();
    // What follows the first field moves right by the prefixes (and any records kept)
    // put in front of it, so it is copied once more: only the response's own fields,
    // small next to the records it frames. Reserved once, for all of it: grown by
    // doubling instead, a response of many kept records would be copied again per step.
    let rest = buf.split_off(first.at).freeze();
    let kept: usize = marks.iter().zip(&decisions).filter(|(_, d)| d.is_none()).map(|(m, _)| m.records.len()).sum();
    // A length prefix takes at most 5 bytes (a compact u32 uvarint; an int32 takes 4).
    buf.reserve(rest.len() + kept + marks.len() * 5);
    let mut copied = first.at;
    let mut gaps = Vec::new();
    for (field, (mark, decision)) in marks.iter().zip(decisions).enumerate() {
        buf.extend_from_slice(&rest[copied - first.at..mark.at - first.at]);
        copied = mark.at;
        match decision {
            Some(len) => {
                put_records_len(buf, len, mark.compact, mark.field)?;
                gaps.push(RecordsGap { at: buf.len(), len, field });
            }
            None => put_bytes(buf, &mark.records, mark.compact, mark.field)?,
        }
    }
    buf.extend_from_slice(&rest[copied - first.at..]);
    Ok(gaps)
}

/// Reads a response header for a request of `api_key` at `api_version`.
pub fn decode_response_header(
    buf: &mut Bytes,
    api_key: ApiKey,
    api_version: i16,
) -> Result<ResponseHeader, DecodeError> {
    ResponseHeader::decode(buf, response_header_version(api_key, api_version))
}
