//! Located reads, for zero-copy fetch: where in a segment file the batches of a read
//! lie, found from the offset index and batch headers, without reading the batches'
//! bytes, so the server can send them with sendfile(2) and they never pass through the
//! broker's memory. The batches chosen are those [`PartitionLog::read_limited`] returns.

use std::fs::File;
use std::io;

use super::*;
use crate::segment::Located;

/// Bytes a walk of headers reads at a time after a small batch, whose next neighbours'
/// headers are likely in the same read. After a larger one it reads the next header
/// alone: reading ahead would read that batch's body.
const HEADER_READ_AHEAD: usize = 8 << 10;

/// Whole batches exactly as stored, `len` bytes at `position` of a segment file: the
/// result of [`PartitionLog::read_located`], for a transport to send with sendfile(2).
///
/// The file stays open as long as the chunk lives, so a segment deleted meanwhile
/// (retention, or replaced by compaction) is still read whole. But a follower's
/// truncation cuts the same file: it can shorten it under the chunk, and appends after
/// it write other batches at the same positions. A reader that finds fewer bytes than
/// `len` must treat it as an error (never send a short chunk as if whole); the window
/// for a rewrite lasts from the read until the bytes are sent.
///
/// A chunk holds a descriptor until dropped, on [`FdLimited`](crate::FdLimited) storage
/// beyond its budget if the budget closed the segment's handle meanwhile.
#[derive(Debug, Clone)]
pub struct FileChunk {
    file: Arc<File>,
    position: u64,
    len: u64,
}

// A chunk is never empty: an empty read returns no chunk.
#[allow(clippy::len_without_is_empty)]
impl FileChunk {
    /// `len` bytes of `file` from `position` (the log makes its own from reads; this is
    /// for writers tested without a log).
    pub fn new(file: Arc<File>, position: u64, len: u64) -> FileChunk {
        FileChunk { file, position, len }
    }

    /// The segment file, open while this handle is held.
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Where the first batch starts in the file.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Bytes of whole batches from `position`.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The bytes, read into memory, for transports that cannot send from a file (TLS).
    /// `UnexpectedEof` if the file was cut shorter since the chunk was located.
    pub fn read(&self) -> io::Result<Bytes> {
        let len = usize::try_from(self.len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut buf = Vec::with_capacity(len);
        self.file.read_exact_at_into(&mut buf, len, self.position)?;
        Ok(Bytes::from(buf))
    }
}

impl<F: StorageFile> SegmentView<F> {
    /// The batches `read_batches` would return from `first`, located rather than read
    /// if they total at least `min_bytes` and the segment is an OS file. Batches from
    /// `first` to `known_included` (see [`Segment::known_included`]) are returned
    /// without reading their headers; only those after it are walked.
    pub(super) fn locate_batches(
        &self,
        first: Located,
        limits: &ReadLimits,
        known_included: u64,
        min_bytes: usize,
    ) -> Result<(Batches, i64)> {
        let position = first.position;
        let window = self.window(position, limits.max_bytes);
        let most = if limits.min_one_batch { window.max(first.header.total_size()) } else { window };
        if most < min_bytes as u64 {
            // Too small to be worth a chunk whatever the walk finds: one pread.
            return self.read_batches(position, limits);
        }
        let Some(file) = self.file.os_file().map_err(|e| StorageError::io("open", &self.path, e))? else {
            return self.read_batches(position, limits);
        };
        let skip = known_included.saturating_sub(position);
        let chosen = self.walk_headers(position, window, limits, skip)?;
        if chosen.next_offset.is_none() && skip > 0 {
            // Without it the bytes before it would be returned with no next offset. The
            // index and the size came from the same instant, so the segment was cut and
            // rewritten since (a follower's truncation), or the index is wrong.
            return Err(self.index_disagrees(known_included));
        }
        let next_offset = chosen.next_offset.unwrap_or(i64::MIN);
        if chosen.len > 0 && chosen.len >= min_bytes as u64 {
            let chunk = FileChunk { file, position, len: chosen.len };
            return Ok((Batches::Located(chunk), next_offset));
        }
        let mut buf = Vec::with_capacity(chosen.len as usize);
        self.read_into(&mut buf, chosen.len, position)?;
        Ok((Batches::Read(Bytes::from(buf)), next_offset))
    }

    fn index_disagrees(&self, position: u64) -> StorageError {
        tracing::error!(file = %self.path.display(), position, "the offset index names a batch a read does not return; not serving it");
        let reason = format!("offset index entry at byte {position} does not match the batches");
        StorageError::io("read", &self.path, io::Error::new(io::ErrorKind::InvalidData, reason))
    }

    /// The read's rules (`choose`) applied to headers read from the file, from `from`
    /// bytes after the first batch at `position`.
    fn walk_headers(&self, position: u64, window: u64, limits: &ReadLimits, from: u64) -> Result<Chosen> {
        let mut headers = HeaderReader::new(self, position + window);
        self.choose(position, window, limits, from, |used| headers.header_at(position + used))
    }
}

/// Reads the batch headers a walk asks for, in increasing positions, through a small
/// read-ahead buffer.
struct HeaderReader<'a, F> {
    view: &'a SegmentView<F>,
    /// Nothing at or past this is read (the end of the read's window).
    end: u64,
    buf: [u8; HEADER_READ_AHEAD],
    /// File position of `buf[0]`, and bytes of `buf` read there.
    buf_position: u64,
    buf_len: usize,
    /// Bytes the next read asks for.
    ahead: usize,
}

impl<'a, F: StorageFile> HeaderReader<'a, F> {
    fn new(view: &'a SegmentView<F>, end: u64) -> Self {
        HeaderReader { view, end, buf: [0; HEADER_READ_AHEAD], buf_position: 0, buf_len: 0, ahead: HEADER_LEN }
    }

    fn header_at(&mut self, position: u64) -> Result<BatchHeader> {
        let held =
            position >= self.buf_position && position + HEADER_LEN as u64 <= self.buf_position + self.buf_len as u64;
        if !held {
            let left = self.end.saturating_sub(position);
            let len = (self.ahead as u64).min(left).max(HEADER_LEN as u64) as usize;
            self.view
                .file
                .read_exact_at(&mut self.buf[..len], position)
                .map_err(|e| StorageError::io("read", &self.view.path, e))?;
            (self.buf_position, self.buf_len) = (position, len);
        }
        let from = (position - self.buf_position) as usize;
        let header = BatchHeader::parse(&self.buf[from..self.buf_len]).map_err(|r| self.view.corrupt(position, r))?;
        self.ahead = if header.total_size() < (HEADER_READ_AHEAD / 4) as u64 { HEADER_READ_AHEAD } else { HEADER_LEN };
        Ok(header)
    }
}
