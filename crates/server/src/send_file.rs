//! Writing a response whose record bytes were left out of its encoding: from their
//! segment file straight to the socket with sendfile(2) on a plain TCP connection (the
//! page cache to the socket, never through a buffer of ours), or from their own buffer
//! without first copying them into the response's.
//!
//! A Fetch of a large range (a consumer catching up, a follower) used to read its
//! batches into a fresh zeroed buffer, copy them into the encoded response, and copy that
//! into the socket: three passes over every byte before the kernel's own. Now the
//! encoder writes everything but those bytes (`encode_response_leaving_out`), and the
//! writer sends the pieces in order.

use crate::dispatch::Answer;
use bytes::{BufMut, Bytes, BytesMut};
use osprey_protocol::frame::encode_response_leaving_out;
use osprey_storage::FileChunk;
use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;

/// Records at least this long are left out of the encoded response and written on their
/// own (from their file, or from their buffer); shorter ones cost less copied into it,
/// as one write carries the whole response. The fetch handler leaves them in their
/// segment file from this size on.
pub const MIN_BYTES: usize = 32 * 1024;

/// Where a response goes: a connection's write half, which can send file bytes.
pub trait ResponseSink: AsyncWrite + Unpin + Send + 'static {
    /// Writes `chunk`'s bytes.
    fn send_file(&mut self, chunk: &FileChunk) -> impl Future<Output = io::Result<()>> + Send;
}

/// Plain TCP: sendfile(2), the pages going from the page cache to the socket.
impl ResponseSink for OwnedWriteHalf {
    fn send_file(&mut self, chunk: &FileChunk) -> impl Future<Output = io::Result<()>> + Send {
        send_file_to_socket(self, chunk.clone())
    }
}

/// Any other stream (TLS): the bytes must pass through memory to be encrypted; read on
/// the blocking pool, then written. (The fetch handler reads them into the response on
/// a TLS listener already; this is the fallback.)
impl<S: AsyncRead + AsyncWrite + Send + 'static> ResponseSink for tokio::io::WriteHalf<S> {
    fn send_file(&mut self, chunk: &FileChunk) -> impl Future<Output = io::Result<()>> + Send {
        let chunk = chunk.clone();
        async move {
            let bytes = tokio::task::spawn_blocking(move || chunk.read()).await.map_err(io::Error::other)??;
            self.write_all(&bytes).await
        }
    }
}

/// A piece written after the encoded bytes before it.
enum LeftOut<'a> {
    File(&'a FileChunk),
    Buffer(Bytes),
}

/// Why a response was not written.
#[derive(Debug)]
pub enum WriteError {
    /// It does not encode: a handler's bug, not the client's.
    Encode(String),
    Io(io::Error),
}

/// Encodes `answer` into `out` (size prefix first) and writes it, with the records it
/// left out, to `wr`; the bytes written.
pub async fn write_answer<W: ResponseSink>(
    wr: &mut W,
    correlation_id: i32,
    api_version: i16,
    answer: &Answer,
    out: &mut BytesMut,
) -> Result<usize, WriteError> {
    out.clear();
    out.put_i32(0);
    let mut left_out = Vec::new();
    let mut mismatched = false;
    let mut leave_out = |field: usize, bytes: &Bytes| match answer.chunks.get(field) {
        Some(Some(chunk)) => {
            // A chunk's field is empty in the body; anything else is a misnumbering.
            mismatched |= !bytes.is_empty();
            left_out.push(LeftOut::File(chunk));
            Some(chunk.len() as usize)
        }
        _ if bytes.len() >= MIN_BYTES => {
            left_out.push(LeftOut::Buffer(bytes.clone()));
            Some(bytes.len())
        }
        _ => None,
    };
    let gaps = encode_response_leaving_out(correlation_id, api_version, &answer.body, out, &mut leave_out)
        .map_err(|e| WriteError::Encode(format!("response does not encode (a bug): {e}")))?;
    if mismatched {
        return Err(WriteError::Encode("a file chunk matched a records field that has bytes (a bug)".into()));
    }
    let size = out.len() - 4 + gaps.iter().map(|g| g.len).sum::<usize>();
    let size = i32::try_from(size).map_err(|_| WriteError::Encode(format!("response of {size} bytes (a bug)")))?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    let mut from = 0;
    for (gap, piece) in gaps.iter().zip(&left_out) {
        wr.write_all(&out[from..gap.at]).await.map_err(WriteError::Io)?;
        match piece {
            LeftOut::File(chunk) => wr.send_file(chunk).await,
            LeftOut::Buffer(bytes) => wr.write_all(bytes).await,
        }
        .map_err(WriteError::Io)?;
        from = gap.at;
    }
    wr.write_all(&out[from..]).await.map_err(WriteError::Io)?;
    Ok(size as usize + 4)
}

/// sendfile(2) of the whole chunk to the connection's socket. The socket is
/// non-blocking: each call sends what its buffer takes, and the writer waits for room
/// as any write does. A call may still block on the disk (pages not in the page
/// cache), so it runs in `block_in_place`, which hands this worker's other tasks to
/// another thread meanwhile (the rule: no disk I/O holding an async worker).
async fn send_file_to_socket(wr: &mut OwnedWriteHalf, chunk: FileChunk) -> io::Result<()> {
    let stream = wr.as_ref();
    let socket: Arc<OwnedFd> = Arc::new(rustix::io::dup(stream)?);
    let (mut position, end) = (chunk.position(), chunk.position() + chunk.len());
    while position < end {
        stream.writable().await?;
        // Inside try_io, so that a "socket full" clears only the readiness seen before
        // the call: readiness that arrives during it is kept, and no wake-up is lost.
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            blocking(|| send_some(&socket, chunk.file(), &mut position, end))
        });
        match sent {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs `f`, which may block on the disk, off the worker's other tasks where the
/// runtime allows it (the server's multi-threaded one); a current-thread runtime (some
/// tests) runs it in place.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Sends from `*position` until `end`, the socket is full (`WouldBlock`, after any
/// progress, which `*position` keeps) or the file ends early.
fn send_some(socket: &OwnedFd, file: &std::fs::File, position: &mut u64, end: u64) -> io::Result<()> {
    while *position < end {
        let want = usize::try_from(end - *position).unwrap_or(usize::MAX).min(MAX_SENDFILE_BYTES);
        let mut offset = *position;
        match rustix::fs::sendfile(socket, file, Some(&mut offset), want) {
            Ok(0) => {
                // The segment was truncated under the response (a follower's log cut
                // back after a leader change): its declared length cannot be met, and
                // the connection must close rather than send a short frame. Rare and
                // worth seeing: the client refetches, but a pattern means a log that
                // keeps being cut under its readers.
                metrics::counter!("osprey_fetch_sends_cut_short_total").increment(1);
                tracing::warn!(
                    sent_to = *position,
                    declared_end = end,
                    "a segment file was cut shorter while a fetch response sent it; closing the connection (the client fetches again)"
                );
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment file shorter than the fetch response declared (truncated while being sent)",
                ));
            }
            Ok(n) => *position += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Linux sends at most this much per sendfile call.
const MAX_SENDFILE_BYTES: usize = 0x7fff_f000;

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::frame::encode_response;
    use osprey_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use osprey_protocol::messages::FetchResponse;
    use osprey_protocol::ResponseBody;
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    const FILE_BYTES: usize = 8 << 20;

    /// A file of `FILE_BYTES` pseudo-random bytes, removed when dropped.
    struct TempFile(std::path::PathBuf, Arc<std::fs::File>);

    impl TempFile {
        fn new(name: &str) -> TempFile {
            let path = std::env::temp_dir().join(format!("osprey-send-file-{name}-{}", std::process::id()));
            let mut file = std::fs::File::create(&path).unwrap();
            let mut x: u32 = 7;
            let bytes: Vec<u8> = (0..FILE_BYTES)
                .map(|_| {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (x >> 24) as u8
                })
                .collect();
            file.write_all(&bytes).unwrap();
            TempFile(path.clone(), Arc::new(std::fs::File::open(&path).unwrap()))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn partition(index: i32, records: Option<Bytes>) -> PartitionData {
        PartitionData { partition_index: index, records, ..Default::default() }
    }

    /// A response whose first partition's records are `chunk` (left in the file), with a
    /// small inline field, a large in-memory one (left out of the encoding too) and a
    /// null one; and the same response with the chunk's bytes in place.
    fn answer_and_plain(chunk: &FileChunk) -> (Answer, ResponseBody) {
        let big: Bytes = (0..MIN_BYTES * 2).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
        let response = |first: Bytes| {
            ResponseBody::Fetch(FetchResponse {
                responses: vec![FetchableTopicResponse {
                    topic: "t".into(),
                    partitions: vec![
                        partition(0, Some(first)),
                        partition(1, Some(Bytes::from_static(b"small"))),
                        partition(2, Some(big.clone())),
                        partition(3, None),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            })
        };
        let answer = Answer { body: response(Bytes::new()), chunks: vec![Some(chunk.clone()), None, None] };
        let in_place = chunk.read().map(response).unwrap_or_else(|_| response(Bytes::new()));
        (answer, in_place)
    }

    fn framed(version: i16, body: &ResponseBody) -> Vec<u8> {
        let mut out = BytesMut::new();
        out.put_i32(0);
        encode_response(42, version, body, &mut out).unwrap();
        let size = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&size.to_be_bytes());
        out.to_vec()
    }

    async fn connected_pair() -> (TcpStream, OwnedWriteHalf) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (_, wr) = server.into_split();
        (client, wr)
    }

    /// Reads one size-prefixed frame, after a pause that lets the sender fill the
    /// socket's buffer and wait for room.
    async fn read_frame(rd: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let size = rd.read_i32().await.unwrap();
        let mut frame = vec![0u8; size as usize];
        rd.read_exact(&mut frame).await.unwrap();
        let mut whole = size.to_be_bytes().to_vec();
        whole.extend(frame);
        whole
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_sent_from_a_file_over_tcp_arrive_as_the_plain_encoding() {
        let file = TempFile::new("tcp");
        let chunk = FileChunk::new(file.1.clone(), 100, (FILE_BYTES - 1000) as u64);
        for version in [4, 12, 16] {
            let (answer, plain) = answer_and_plain(&chunk);
            let (mut client, mut wr) = connected_pair().await;
            let reader = tokio::spawn(async move { read_frame(&mut client).await });
            let written = write_answer(&mut wr, 42, version, &answer, &mut BytesMut::new()).await.unwrap();
            let received = reader.await.unwrap();
            let expected = framed(version, &plain);
            assert_eq!(written, expected.len());
            assert!(received == expected, "v{version}: the frame differs from the plain encoding");
        }
    }

    #[tokio::test]
    async fn records_sent_from_a_file_on_a_current_thread_runtime_arrive_whole() {
        let file = TempFile::new("current-thread");
        let chunk = FileChunk::new(file.1.clone(), 0, FILE_BYTES as u64);
        let (answer, plain) = answer_and_plain(&chunk);
        let (mut client, mut wr) = connected_pair().await;
        let reader = tokio::spawn(async move { read_frame(&mut client).await });
        write_answer(&mut wr, 42, 12, &answer, &mut BytesMut::new()).await.unwrap();
        assert!(reader.await.unwrap() == framed(12, &plain));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_left_in_a_file_are_read_for_a_stream_that_cannot_send_files() {
        let file = TempFile::new("stream");
        let chunk = FileChunk::new(file.1.clone(), 1, (FILE_BYTES / 2) as u64);
        let (answer, plain) = answer_and_plain(&chunk);
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_, mut wr) = tokio::io::split(server);
        let reader = tokio::spawn(async move { read_frame(&mut client).await });
        write_answer(&mut wr, 42, 12, &answer, &mut BytesMut::new()).await.unwrap();
        assert!(reader.await.unwrap() == framed(12, &plain));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_shorter_than_its_chunk_fails_the_write_instead_of_sending_a_short_frame() {
        let file = TempFile::new("short");
        let chunk = FileChunk::new(file.1.clone(), (FILE_BYTES - 10) as u64, 1 << 20);
        let (answer, _) = answer_and_plain(&chunk);
        let (_client, mut tcp) = connected_pair().await;
        assert_cut_short(write_answer(&mut tcp, 42, 12, &answer, &mut BytesMut::new()).await);
        let (_client, server) = tokio::io::duplex(64 * 1024);
        let (_, mut stream) = tokio::io::split(server);
        assert_cut_short(write_answer(&mut stream, 42, 12, &answer, &mut BytesMut::new()).await);
    }

    fn assert_cut_short(written: Result<usize, WriteError>) {
        assert!(
            matches!(written, Err(WriteError::Io(ref e)) if e.kind() == io::ErrorKind::UnexpectedEof),
            "{written:?}"
        );
    }

    #[tokio::test]
    async fn a_chunk_matched_to_a_records_field_with_bytes_is_refused_as_a_bug() {
        let file = TempFile::new("mismatch");
        let chunk = FileChunk::new(file.1.clone(), 0, 10);
        let (mut answer, _) = answer_and_plain(&chunk);
        // The chunk now numbers the small field's place.
        answer.chunks = vec![None, Some(chunk)];
        let (_client, mut wr) = connected_pair().await;
        let written = write_answer(&mut wr, 42, 12, &answer, &mut BytesMut::new()).await;
        assert!(matches!(written, Err(WriteError::Encode(_))), "{written:?}");
    }
}
