//! How the quorum's files are written: CRC-framed payloads, and small files replaced
//! atomically (temporary file, fsync, rename, directory fsync).

use osprey_storage::fs::{Storage, StorageFile};
use std::io;
use std::path::Path;

/// A frame declaring more than this is damage, not data: the largest entry the quorum
/// writes is one RPC's worth (`QuorumConfig::max_rpc_bytes` is far below it).
pub(crate) const MAX_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// Bytes before a frame's payload: `len u32 | crc32c u32`.
pub(crate) const FRAME_HEADER_BYTES: usize = 8;

/// `len u32 | crc32c u32 | payload`, big-endian as the partition log.
pub(crate) fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// The payloads of the intact frames at the start of `bytes`, each with its position,
/// and the length of that intact prefix. The first short, oversized or CRC-failing frame
/// ends it: a write torn by a crash.
pub(crate) fn decode_frames(bytes: &[u8]) -> (Vec<(u64, &[u8])>, usize) {
    let mut frames = Vec::new();
    let mut pos = 0;
    while bytes.len() - pos >= FRAME_HEADER_BYTES {
        let len = u32::from_be_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]]) as usize;
        let crc = u32::from_be_bytes([bytes[pos + 4], bytes[pos + 5], bytes[pos + 6], bytes[pos + 7]]);
        // Check the declared length against the bytes left before slicing.
        if len > MAX_FRAME_BYTES || bytes.len() - pos - FRAME_HEADER_BYTES < len {
            break;
        }
        let payload = &bytes[pos + FRAME_HEADER_BYTES..pos + FRAME_HEADER_BYTES + len];
        if crc32c::crc32c(payload) != crc {
            break;
        }
        frames.push((pos as u64, payload));
        pos += FRAME_HEADER_BYTES + len;
    }
    (frames, pos)
}

/// The whole contents of a file.
pub(crate) fn read_all<S: Storage>(storage: &S, path: &Path) -> io::Result<Vec<u8>> {
    let file = storage.open(path, false)?;
    let len = file.len()?;
    let len = usize::try_from(len).map_err(|_| io::Error::other("file too large to read"))?;
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// The payload of a one-frame file; `Ok(None)` if the file does not exist, an error if
/// it exists and its frame is not intact.
pub(crate) fn read_frame_file<S: Storage>(storage: &S, path: &Path) -> io::Result<Option<Vec<u8>>> {
    if !storage.exists(path) {
        return Ok(None);
    }
    let bytes = read_all(storage, path)?;
    let (frames, valid) = decode_frames(&bytes);
    match frames.first() {
        Some((_, payload)) if valid == bytes.len() && frames.len() == 1 => Ok(Some(payload.to_vec())),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} is damaged", path.display()))),
    }
}

/// Replaces `dir/name` by a one-frame file holding `payload`. With `durable`, the new
/// contents survive a crash once this returns (temporary file, fsync, rename, directory
/// fsync); without, a crash leaves the old file or the new one, either intact or damaged
/// (readers must treat damage as "absent").
pub(crate) fn replace_file<S: Storage>(
    storage: &S,
    dir: &Path,
    name: &str,
    payload: &[u8],
    durable: bool,
) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(payload.len() + FRAME_HEADER_BYTES);
    encode_frame(payload, &mut bytes);
    let tmp = dir.join(format!("{name}.tmp"));
    let file = storage.open(&tmp, true)?;
    file.set_len(0)?;
    file.write_all_at(&bytes, 0)?;
    if durable {
        file.sync_data()?;
    }
    storage.rename(&tmp, &dir.join(name))?;
    if durable {
        storage.sync_dir(dir)?;
    }
    Ok(())
}
