//! The Kafka wire protocol without I/O: bytes in, typed messages out, and back.
//!
//! - [`messages`]: every request and response at every version, generated from
//!   `protocol-specs/` by `osprey-codegen`; plus the internal-topic records and the
//!   consumer protocol.
//! - [`frame`]: request and response headers, and the rules choosing their versions;
//!   responses encoded with their records left out, for zero-copy fetch.
//! - [`records`]: record batches (v2), their records, CRCs and compression.
//! - [`wire`]: the primitive encodings, bounded so that no declared length or count is
//!   trusted beyond the bytes actually present.
//!
//! No sockets, no clocks, no async: the server crate owns those.

pub mod error_code;
pub mod frame;
pub mod messages;
pub mod records;
pub mod wire;

pub use error_code::ErrorCode;
pub use frame::{RequestHeader, ResponseHeader};
pub use messages::{ApiKey, RequestBody, ResponseBody};
pub use wire::{DecodeError, EncodeError, Message, Uuid};

#[cfg(test)]
mod tests;
