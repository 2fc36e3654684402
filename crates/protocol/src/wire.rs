//! Primitive encodings of the Kafka protocol, and the [`Message`] trait the generated
//! types implement.
//!
//! Every read checks the bytes remaining first and every declared length or count is
//! compared with what is actually left before anything is allocated, so a frame that
//! claims a gigabyte costs nothing but an error.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

/// Why bytes could not be decoded; `field` names the message and field (`Struct.field`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{field}: needs {needed} bytes but only {remaining} are left")]
    Truncated { field: &'static str, needed: usize, remaining: usize },
    #[error("{field}: invalid length {length}")]
    InvalidLength { field: &'static str, length: i64 },
    #[error("{field}: null where the field is not nullable")]
    UnexpectedNull { field: &'static str },
    #[error("{field}: varint runs past {max_bytes} bytes")]
    VarintTooLong { field: &'static str, max_bytes: usize },
    #[error("{field}: string is not UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("{message} version {version} is not supported (the codec knows {min}-{max})")]
    UnsupportedVersion { message: &'static str, version: i16, min: i16, max: i16 },
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    #[error("{message}: {trailing} bytes left over after the message")]
    TrailingBytes { message: &'static str, trailing: usize },
}

/// Why a message could not be encoded at the requested version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{field} is set but does not exist at version {version}")]
    FieldNotInVersion { field: &'static str, version: i16 },
    #[error("{field} is null but not nullable at version {version}")]
    NullNotAllowed { field: &'static str, version: i16 },
    #[error("{field}: length {length} does not fit its encoding")]
    TooLong { field: &'static str, length: usize },
    #[error("{message} version {version} is not supported (the codec knows {min}-{max})")]
    UnsupportedVersion { message: &'static str, version: i16, min: i16, max: i16 },
}

/// A top-level message (request, response, header or internal record) with its versions.
pub trait Message: Sized + Default + Clone + PartialEq + fmt::Debug {
    const NAME: &'static str;
    /// The versions the spec describes, inclusive.
    const VERSIONS: (i16, i16);
    /// The first flexible version, if any.
    const FLEXIBLE_FROM: Option<i16>;

    /// Encodes without checking `version`.
    fn write(&self, buf: &mut BytesMut, version: i16) -> Result<(), EncodeError>;
    /// Decodes without checking `version`.
    fn read(buf: &mut Bytes, version: i16) -> Result<Self, DecodeError>;
    /// The fewest bytes any encoding of this message takes at `version`.
    fn min_len(version: i16) -> usize;

    fn is_flexible(version: i16) -> bool {
        Self::FLEXIBLE_FROM.is_some_and(|f| version >= f)
    }

    fn encode(&self, buf: &mut BytesMut, version: i16) -> Result<(), EncodeError> {
        let (min, max) = Self::VERSIONS;
        if !(min..=max).contains(&version) {
            return Err(EncodeError::UnsupportedVersion { message: Self::NAME, version, min, max });
        }
        self.write(buf, version)
    }

    fn decode(buf: &mut Bytes, version: i16) -> Result<Self, DecodeError> {
        let (min, max) = Self::VERSIONS;
        if !(min..=max).contains(&version) {
            return Err(DecodeError::UnsupportedVersion { message: Self::NAME, version, min, max });
        }
        Self::read(buf, version)
    }

    /// Decodes a message that must fill `buf` exactly (a whole request body, a record value).
    fn decode_exact(mut buf: Bytes, version: i16) -> Result<Self, DecodeError> {
        let m = Self::decode(&mut buf, version)?;
        if buf.has_remaining() {
            return Err(DecodeError::TrailingBytes { message: Self::NAME, trailing: buf.remaining() });
        }
        Ok(m)
    }
}

/// A message that can make random values of itself (tests, fuzz seeds, benchmarks).
#[cfg(any(test, feature = "testing"))]
pub trait RandomMessage: Message {
    fn random(rng: &mut TestRng, version: i16) -> Self;
}

/// Receives every message type in turn from `messages::visit_messages`.
#[cfg(any(test, feature = "testing"))]
pub trait MessageVisitor {
    fn visit<M: RandomMessage>(&mut self);
}

/// A 128-bit UUID (topic ids, directory ids), printed as Kafka prints it: URL-safe
/// base64 without padding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    pub const ZERO: Uuid = Uuid([0; 16]);

    pub fn is_zero(&self) -> bool {
        *self == Uuid::ZERO
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut bits: u32 = 0;
        let mut n = 0;
        let mut out = String::with_capacity(22);
        for &b in &self.0 {
            bits = (bits << 8) | u32::from(b);
            n += 8;
            while n >= 6 {
                n -= 6;
                out.push(ALPHABET[((bits >> n) & 63) as usize] as char);
            }
        }
        if n > 0 {
            out.push(ALPHABET[((bits << (6 - n)) & 63) as usize] as char);
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

/// A tagged field the spec does not know: skipped on decode, kept to re-encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTaggedField {
    pub tag: u32,
    pub data: Bytes,
}

fn need(buf: &Bytes, n: usize, field: &'static str) -> Result<(), DecodeError> {
    if buf.remaining() < n {
        return Err(DecodeError::Truncated { field, needed: n, remaining: buf.remaining() });
    }
    Ok(())
}

macro_rules! fixed {
    ($name:ident, $t:ty, $get:ident) => {
        pub fn $name(buf: &mut Bytes, field: &'static str) -> Result<$t, DecodeError> {
            need(buf, std::mem::size_of::<$t>(), field)?;
            Ok(buf.$get())
        }
    };
}
fixed!(get_i8, i8, get_i8);
fixed!(get_i16, i16, get_i16);
fixed!(get_i32, i32, get_i32);
fixed!(get_i64, i64, get_i64);
fixed!(get_u16, u16, get_u16);
fixed!(get_u32, u32, get_u32);
fixed!(get_f64, f64, get_f64);

/// Kafka reads any non-zero byte as true.
pub fn get_bool(buf: &mut Bytes, field: &'static str) -> Result<bool, DecodeError> {
    Ok(get_i8(buf, field)? != 0)
}

pub fn get_uuid(buf: &mut Bytes, field: &'static str) -> Result<Uuid, DecodeError> {
    need(buf, 16, field)?;
    let mut id = [0u8; 16];
    buf.copy_to_slice(&mut id);
    Ok(Uuid(id))
}

/// An unsigned varint of at most 5 bytes (a u32), as compact lengths and tags use.
pub fn get_uvarint(buf: &mut Bytes, field: &'static str) -> Result<u32, DecodeError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        need(buf, 1, field)?;
        let b = buf.get_u8();
        // The fifth byte may carry only the top four bits of a u32.
        if i == 4 && b > 0x0f {
            return Err(DecodeError::VarintTooLong { field, max_bytes: 5 });
        }
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError::VarintTooLong { field, max_bytes: 5 })
}

/// Splits off the next `len` bytes without copying them.
pub fn take(buf: &mut Bytes, len: usize, field: &'static str) -> Result<Bytes, DecodeError> {
    need(buf, len, field)?;
    Ok(buf.split_to(len))
}

/// Reads a length prefix: `None` for null. Classic: int16 (strings) or int32 (bytes,
/// arrays) with -1 for null; compact: uvarint of length + 1 with 0 for null.
fn get_length(buf: &mut Bytes, compact: bool, wide: bool, field: &'static str) -> Result<Option<usize>, DecodeError> {
    let len: i64 = if compact {
        i64::from(get_uvarint(buf, field)?) - 1
    } else if wide {
        i64::from(get_i32(buf, field)?)
    } else {
        i64::from(get_i16(buf, field)?)
    };
    match len {
        -1 => Ok(None),
        l if l < -1 => Err(DecodeError::InvalidLength { field, length: l }),
        l => Ok(Some(l as usize)),
    }
}

pub fn get_string(buf: &mut Bytes, compact: bool, field: &'static str) -> Result<String, DecodeError> {
    match get_length(buf, compact, false, field)? {
        None => Err(DecodeError::UnexpectedNull { field }),
        Some(len) => string_of(take(buf, len, field)?, field),
    }
}

pub fn get_nullable_string(buf: &mut Bytes, compact: bool, field: &'static str) -> Result<Option<String>, DecodeError> {
    match get_length(buf, compact, false, field)? {
        None => Ok(None),
        Some(len) => Ok(Some(string_of(take(buf, len, field)?, field)?)),
    }
}

fn string_of(bytes: Bytes, field: &'static str) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::InvalidUtf8 { field })
}

pub fn get_bytes(buf: &mut Bytes, compact: bool, field: &'static str) -> Result<Bytes, DecodeError> {
    match get_length(buf, compact, true, field)? {
        None => Err(DecodeError::UnexpectedNull { field }),
        Some(len) => take(buf, len, field),
    }
}

pub fn get_nullable_bytes(buf: &mut Bytes, compact: bool, field: &'static str) -> Result<Option<Bytes>, DecodeError> {
    match get_length(buf, compact, true, field)? {
        None => Ok(None),
        Some(len) => Ok(Some(take(buf, len, field)?)),
    }
}

/// An array count, refused when `count * min_element_len` exceeds the bytes left: such a
/// count is a lie, and must not size an allocation. (The generator passes the fewest
/// bytes an element can take at this version, so memory stays proportional to the frame.)
pub fn get_nullable_array_len(
    buf: &mut Bytes,
    compact: bool,
    min_element_len: usize,
    field: &'static str,
) -> Result<Option<usize>, DecodeError> {
    match get_length(buf, compact, true, field)? {
        Some(n) if n.saturating_mul(min_element_len.max(1)) > buf.remaining() => {
            Err(DecodeError::InvalidLength { field, length: n as i64 })
        }
        other => Ok(other),
    }
}

pub fn get_array_len(
    buf: &mut Bytes,
    compact: bool,
    min_element_len: usize,
    field: &'static str,
) -> Result<usize, DecodeError> {
    get_nullable_array_len(buf, compact, min_element_len, field)?.ok_or(DecodeError::UnexpectedNull { field })
}

/// The presence marker of a nullable struct: -1 null, anything else present.
pub fn get_struct_marker(buf: &mut Bytes, field: &'static str) -> Result<bool, DecodeError> {
    Ok(get_i8(buf, field)? < 0)
}

pub fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_length(
    buf: &mut BytesMut,
    len: usize,
    compact: bool,
    wide: bool,
    field: &'static str,
) -> Result<(), EncodeError> {
    let too_long = || EncodeError::TooLong { field, length: len };
    if compact {
        let n = u32::try_from(len).ok().and_then(|l| l.checked_add(1)).ok_or_else(too_long)?;
        put_uvarint(buf, n);
    } else if wide {
        buf.put_i32(i32::try_from(len).map_err(|_| too_long())?);
    } else {
        buf.put_i16(i16::try_from(len).map_err(|_| too_long())?);
    }
    Ok(())
}

pub fn put_string(buf: &mut BytesMut, s: &str, compact: bool, field: &'static str) -> Result<(), EncodeError> {
    put_length(buf, s.len(), compact, false, field)?;
    buf.put_slice(s.as_bytes());
    Ok(())
}

pub fn put_bytes(buf: &mut BytesMut, b: &[u8], compact: bool, field: &'static str) -> Result<(), EncodeError> {
    put_length(buf, b.len(), compact, true, field)?;
    buf.put_slice(b);
    Ok(())
}

/// Writes a `records` field: exactly as [`put_bytes`] does, unless this thread is encoding
/// a response with its records left out (`frame::encode_response_leaving_out`), in which
/// case it writes nothing and notes where the field goes.
pub fn put_records(buf: &mut BytesMut, records: &Bytes, compact: bool, field: &'static str) -> Result<(), EncodeError> {
    let marked = RECORDS_MARKS.with(|marks| match marks.borrow_mut().as_mut() {
        Some(marks) => {
            marks.push(RecordsMark { at: buf.len(), records: records.clone(), compact, field });
            true
        }
        None => false,
    });
    if marked {
        return Ok(());
    }
    put_bytes(buf, records, compact, field)
}

/// The length prefix of a records field holding `len` bytes, without the bytes.
pub(crate) fn put_records_len(
    buf: &mut BytesMut,
    len: usize,
    compact: bool,
    field: &'static str,
) -> Result<(), EncodeError> {
    put_length(buf, len, compact, true, field)
}

/// A non-null records field that [`put_records`] left out of the buffer while marking.
#[derive(Debug)]
pub(crate) struct RecordsMark {
    /// Where the field's length prefix and bytes belong in the buffer as it was written.
    pub(crate) at: usize,
    pub(crate) records: Bytes,
    pub(crate) compact: bool,
    pub(crate) field: &'static str,
}

thread_local! {
    /// The records fields met so far by the encode that a [`RecordsMarking`] scopes, or
    /// `None` outside one. A thread-local rather than a parameter so that the generated
    /// encoders keep one signature: encoding is synchronous and runs no caller code, so
    /// nothing else can run on this thread between the guard's start and its drop.
    static RECORDS_MARKS: RefCell<Option<Vec<RecordsMark>>> = const { RefCell::new(None) };
}

/// While alive, [`put_records`] on this thread marks records fields instead of writing
/// them. Dropping it (also on an encode's error path) turns marking off, so that no later
/// encode on the thread leaves records out.
#[derive(Debug)]
pub(crate) struct RecordsMarking {
    /// Not `Send`: the marks belong to the thread that started marking.
    _this_thread: PhantomData<*const ()>,
}

impl RecordsMarking {
    pub(crate) fn start() -> RecordsMarking {
        let earlier = RECORDS_MARKS.with(|marks| marks.replace(Some(Vec::new())));
        debug_assert!(earlier.is_none(), "records marking is not re-entrant");
        RecordsMarking { _this_thread: PhantomData }
    }

    /// The records fields marked, in the order they were encoded.
    pub(crate) fn finish(self) -> Vec<RecordsMark> {
        RECORDS_MARKS.with(|marks| marks.borrow_mut().take()).unwrap_or_default()
    }
}

impl Drop for RecordsMarking {
    fn drop(&mut self) {
        RECORDS_MARKS.with(|marks| marks.borrow_mut().take());
    }
}

pub fn put_array_len(buf: &mut BytesMut, n: usize, compact: bool, field: &'static str) -> Result<(), EncodeError> {
    put_length(buf, n, compact, true, field)
}

/// The null length: -1 as int16 for strings, int32 for bytes and arrays, 0 when compact.
pub fn put_null(buf: &mut BytesMut, compact: bool, wide: bool) {
    if compact {
        put_uvarint(buf, 0);
    } else if wide {
        buf.put_i32(-1);
    } else {
        buf.put_i16(-1);
    }
}

/// Writes the tagged-field section: known fields (already encoded) merged with unknown
/// ones, in ascending tag order as Kafka requires.
pub fn put_tagged_fields(
    buf: &mut BytesMut,
    mut fields: Vec<(u32, Bytes)>,
    unknown: &[RawTaggedField],
) -> Result<(), EncodeError> {
    fields.extend(unknown.iter().map(|f| (f.tag, f.data.clone())));
    fields.sort_by_key(|(tag, _)| *tag);
    let too_long = |length| EncodeError::TooLong { field: "_tagged_fields", length };
    put_uvarint(buf, u32::try_from(fields.len()).map_err(|_| too_long(fields.len()))?);
    for (tag, data) in fields {
        put_uvarint(buf, tag);
        put_uvarint(buf, u32::try_from(data.len()).map_err(|_| too_long(data.len()))?);
        buf.put_slice(&data);
    }
    Ok(())
}

/// The seeds a seeded simulation runs: `SIM_SEED=n` replays seed n alone; otherwise
/// `SIM_SEEDS` seeds (default `default_count`, what CI runs) from `SIM_FIRST_SEED`
/// (default 0), so a long run can try seeds CI never does (`scripts/simulate.sh`).
#[cfg(any(test, feature = "testing"))]
pub fn simulation_seeds(default_count: u64) -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(seed) = var("SIM_SEED") {
        return seed..seed + 1;
    }
    let first = var("SIM_FIRST_SEED").unwrap_or(0);
    first..first.saturating_add(var("SIM_SEEDS").unwrap_or(default_count))
}

/// A small deterministic generator (splitmix64) for random messages in tests.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Clone)]
pub struct TestRng(u64);

#[cfg(any(test, feature = "testing"))]
impl TestRng {
    pub fn new(seed: u64) -> TestRng {
        TestRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True one time in `n`.
    pub fn chance(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn float(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn uuid(&mut self) -> Uuid {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next_u64().to_be_bytes());
        id[8..].copy_from_slice(&self.next_u64().to_be_bytes());
        Uuid(id)
    }

    pub fn string(&mut self) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789._-";
        let len = self.below(12) as usize;
        (0..len).map(|_| CHARS[self.below(CHARS.len() as u64) as usize] as char).collect()
    }

    pub fn bytes(&mut self) -> Bytes {
        let len = self.below(24) as usize;
        (0..len).map(|_| self.next_u64() as u8).collect::<Vec<u8>>().into()
    }
}
