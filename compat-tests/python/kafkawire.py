"""Just enough of the Kafka wire protocol, in plain Python, to send hand-made (and
deliberately broken) requests over a raw socket: request framing with header v1/v2,
ApiVersions, Produce v3 with a record batch v2 built here (CRC-32C included), Fetch v4
and v7 (sessions), Metadata v1, FindCoordinator v1, and the parsing of their responses. No client library, so the bytes are exactly what the
test says they are.
"""

import socket
import struct
import time

# Error codes (Kafka's numbers).
NONE = 0
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
INVALID_RECORD = 87
REBOOTSTRAP_REQUIRED = 129

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
API_API_VERSIONS = 18
API_OFFSET_FETCH = 9
API_FIND_COORDINATOR = 10
API_INIT_PRODUCER_ID = 22
API_ADD_PARTITIONS_TO_TXN = 24

# ----- CRC-32C (Castagnoli), table driven -------------------------------------------


def _crc32c_table():
    poly = 0x82F63B78  # reflected Castagnoli polynomial
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ----- primitive encoders ---------------------------------------------------------------


def varint(n: int) -> bytes:
    """Zigzag varint, as record fields use."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z & ~0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        else:
            out.append(z)
            return bytes(out)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n & ~0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        else:
            out.append(n)
            return bytes(out)


def compact_string(s: str) -> bytes:
    data = s.encode()
    return uvarint(len(data) + 1) + data


def string16(s) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def bytes32(b) -> bytes:
    if b is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(b)) + b


# ----- record batch v2 ------------------------------------------------------------------

BATCH_HEADER_BYTES = 61
CRC_POSITION = 17  # baseOffset 8 + batchLength 4 + partitionLeaderEpoch 4 + magic 1


def record(offset_delta: int, key, value, timestamp_delta: int = 0, headers=()) -> bytes:
    body = bytearray()
    body += b"\x00"  # attributes
    body += varint(timestamp_delta)
    body += varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += varint(-1)
        else:
            body += varint(len(field)) + field
    body += varint(len(headers))
    for hk, hv in headers:
        hk = hk.encode()
        body += varint(len(hk)) + hk
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + bytes(body)


def record_batch(records, base_timestamp=None, attributes=0, producer=(-1, -1, -1)) -> bytes:
    """An uncompressed v2 batch of (key, value) pairs, with a correct CRC-32C;
    `producer` is (producerId, producerEpoch, baseSequence)."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    encoded = b"".join(record(i, k, v) for i, (k, v) in enumerate(records))
    # attributes..end: the part the CRC covers.
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        len(records) - 1,  # lastOffsetDelta
        ts,  # baseTimestamp
        ts,  # maxTimestamp
        producer[0],  # producerId
        producer[1],  # producerEpoch
        producer[2],  # baseSequence
        len(records),
    ) + encoded
    batch_length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch, magic, crc, rest
    return struct.pack(">qiib", 0, batch_length, -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc


def raw_batch(records_section: bytes, records_count: int, attributes=0, base_timestamp=None) -> bytes:
    """A v2 batch around an arbitrary (possibly compressed, possibly lying) records
    section, declaring `records_count` records with lastOffsetDelta `records_count - 1`
    so the header agrees with itself, and a correct CRC-32C: only the records can give
    it away."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    after_crc = struct.pack(">hiqqqhii", attributes, records_count - 1, ts, ts, -1, -1, -1, records_count)
    after_crc += records_section
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiib", 0, batch_length, -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc


ATTR_GZIP = 1
ATTR_ZSTD = 4


def zstd_rle_frame(prefix: bytes, zeros: int) -> bytes:
    """A zstd frame holding `prefix` (one raw block) then `zeros` zero bytes as RLE
    blocks of 128 KiB, each 4 bytes on the wire: a bomb of N GiB takes N * 32 KiB. Written
    by hand from RFC 8878 (no zstd library needed): magic, a frame header with a 128 KiB
    window and no content size, then blocks."""
    block_max = 128 * 1024
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out += bytes([0x00, 7 << 3])  # descriptor: no size, no checksum; window 2^(10+7)
    blocks = []
    if prefix:
        blocks.append((0, len(prefix), prefix))  # raw block
    left = zeros
    while left > 0:
        n = min(left, block_max)
        blocks.append((1, n, b"\x00"))  # RLE block: one byte, repeated n times
        left -= n
    for i, (block_type, size, content) in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        header = last | (block_type << 1) | (size << 3)
        out += struct.pack("<I", header)[:3] + content
    return bytes(out)


def with_bad_crc(batch: bytes) -> bytes:
    """The same batch with its CRC field flipped, so it no longer matches the content."""
    crc = struct.unpack_from(">I", batch, CRC_POSITION)[0]
    return batch[:CRC_POSITION] + struct.pack(">I", crc ^ 0xDEADBEEF) + batch[CRC_POSITION + 4:]


def parse_batches(data: bytes):
    """Yields (base_offset, attributes, records_count, crc_ok) of each whole batch."""
    pos = 0
    while pos + BATCH_HEADER_BYTES <= len(data):
        base_offset, batch_length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + batch_length
        if end > len(data):
            return  # a partial batch at the end of a fetch is normal
        crc = struct.unpack_from(">I", data, pos + CRC_POSITION)[0]
        attributes = struct.unpack_from(">h", data, pos + 21)[0]
        records_count = struct.unpack_from(">i", data, pos + 57)[0]
        yield base_offset, attributes, records_count, crc == crc32c(data[pos + 21:end])
        pos = end


# ----- requests -------------------------------------------------------------------------


def request(api_key: int, version: int, correlation_id: int, body: bytes, client_id="osprey-compat", flexible=False) -> bytes:
    """A size-prefixed request frame: header v1 (v2 when `flexible`) then `body`."""
    header = struct.pack(">hhi", api_key, version, correlation_id) + string16(client_id)
    if flexible:
        header += b"\x00"  # no tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    return request(API_API_VERSIONS, 0, correlation_id, b"")


def api_versions_flexible(version: int, correlation_id: int, name=b"osprey-compat", ver=b"1.0") -> bytes:
    """ApiVersions v3+ layout (header v2, compact strings), at any version number."""
    body = uvarint(len(name) + 1) + name + uvarint(len(ver) + 1) + ver + b"\x00"
    return request(API_API_VERSIONS, version, correlation_id, body, flexible=True)


def api_versions_v5(correlation_id: int, cluster_id, node_id: int) -> bytes:
    """ApiVersions v5: v3's fields plus the cluster id (nullable) and node id the client
    believes it is talking to (-1: none)."""
    name, ver = b"osprey-compat", b"1.0"
    cluster = b"\x00" if cluster_id is None else uvarint(len(cluster_id) + 1) + cluster_id.encode()
    body = uvarint(len(name) + 1) + name + uvarint(len(ver) + 1) + ver + cluster + struct.pack(">i", node_id) + b"\x00"
    return request(API_API_VERSIONS, 5, correlation_id, body, flexible=True)


def produce_v3(correlation_id: int, topic: str, partition: int, records: bytes, acks=-1, timeout_ms=10000,
               transactional_id=None) -> bytes:
    body = string16(transactional_id) + struct.pack(">hi", acks, timeout_ms)
    body += struct.pack(">i", 1) + string16(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition) + bytes32(records)
    return request(API_PRODUCE, 3, correlation_id, body)


def produce(correlation_id: int, topic: str, partition: int, records: bytes, version: int, acks=-1,
            timeout_ms=10000) -> bytes:
    """Produce v3-v8: the request body is the same for all of them (zstd needs v7)."""
    assert 3 <= version <= 8
    frame = produce_v3(correlation_id, topic, partition, records, acks, timeout_ms)
    return frame[:6] + struct.pack(">h", version) + frame[8:]


def fetch_v4(correlation_id: int, topic: str, partition: int, offset: int, max_bytes=1 << 20, max_wait_ms=100) -> bytes:
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">i", 1) + string16(topic)
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, max_bytes)
    return request(API_FETCH, 4, correlation_id, body)


def fetch_v4_partitions(correlation_id: int, topic: str, partitions, max_bytes: int, max_wait_ms=0, min_bytes=1) -> bytes:
    """Fetch v4 of several partitions of one topic: `partitions` is [(partition, offset,
    partition_max_bytes)], `max_bytes` the response's limit."""
    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
    body += struct.pack(">i", 1) + string16(topic) + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">iqi", p, offset, limit) for p, offset, limit in partitions)
    return request(API_FETCH, 4, correlation_id, body)


def fetch_v7(correlation_id: int, session_id: int, epoch: int, topic: str, partitions, forgotten=(),
             max_bytes=1 << 20, max_wait_ms=0, min_bytes=1) -> bytes:
    """Fetch v7 (KIP-227 sessions): `partitions` is [(partition, offset)] named in this
    request, `forgotten` the partitions of `topic` to drop from the session."""
    body = struct.pack(">iiiibii", -1, max_wait_ms, min_bytes, max_bytes, 0, session_id, epoch)
    if partitions:
        body += struct.pack(">i", 1) + string16(topic) + struct.pack(">i", len(partitions))
        body += b"".join(struct.pack(">iqqi", p, offset, -1, 1 << 20) for p, offset in partitions)
    else:
        body += struct.pack(">i", 0)
    if forgotten:
        body += struct.pack(">i", 1) + string16(topic) + struct.pack(">i", len(forgotten))
        body += b"".join(struct.pack(">i", p) for p in forgotten)
    else:
        body += struct.pack(">i", 0)
    return request(API_FETCH, 7, correlation_id, body)


def metadata_v1(correlation_id: int, topics=()) -> bytes:
    """Metadata v1 for `topics` (None: every topic; empty: none, brokers only)."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(string16(t) for t in topics)
    return request(API_METADATA, 1, correlation_id, body)


def find_coordinator_v1(correlation_id: int, key: str, key_type: int) -> bytes:
    return request(API_FIND_COORDINATOR, 1, correlation_id, string16(key) + struct.pack(">b", key_type))


def offset_fetch_v1(correlation_id: int, group: str, topic: str, partitions) -> bytes:
    body = string16(group) + struct.pack(">i", 1) + string16(topic) + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">i", p) for p in partitions)
    return request(API_OFFSET_FETCH, 1, correlation_id, body)


def init_producer_id_v0(correlation_id: int, transactional_id, timeout_ms=60000) -> bytes:
    return request(API_INIT_PRODUCER_ID, 0, correlation_id, string16(transactional_id) + struct.pack(">i", timeout_ms))


def add_partitions_to_txn_v0(correlation_id: int, transactional_id: str, producer_id: int, epoch: int, topic: str,
                             partitions) -> bytes:
    body = string16(transactional_id) + struct.pack(">qh", producer_id, epoch)
    body += struct.pack(">i", 1) + string16(topic) + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">i", p) for p in partitions)
    return request(API_ADD_PARTITIONS_TO_TXN, 0, correlation_id, body)


# ----- responses ------------------------------------------------------------------------


class Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string16(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes32(self):
        n = self.take(">i")
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    # Flexible versions (KIP-482): unsigned varints, compact strings, tagged fields.

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def compact_string(self):
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def skip_tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def parse_api_versions_v0(payload: bytes):
    """(correlation_id, error_code, {api_key: (min, max)}) of an ApiVersions v0 response."""
    r = Reader(payload)
    correlation_id, error_code, n = r.take(">i"), r.take(">h"), r.take(">i")
    ranges = {}
    for _ in range(n):
        key, lo, hi = r.take(">hhh")
        ranges[key] = (lo, hi)
    return correlation_id, error_code, ranges


def parse_produce_v3(payload: bytes):
    """(correlation_id, [(topic, partition, error_code, base_offset)])."""
    r = Reader(payload)
    correlation_id = r.take(">i")
    out = []
    for _ in range(r.take(">i")):
        topic = r.string16()
        for _ in range(r.take(">i")):
            partition, error_code, base_offset, _append_time = r.take(">ihqq")
            out.append((topic, partition, error_code, base_offset))
    return correlation_id, out


def parse_produce_v8(payload: bytes):
    """(correlation_id, [(topic, partition, error_code, base_offset, record_errors, error_message)])
    where record_errors is [(batch_index, message)] (KIP-467)."""
    r = Reader(payload)
    correlation_id = r.take(">i")
    out = []
    for _ in range(r.take(">i")):
        topic = r.string16()
        for _ in range(r.take(">i")):
            partition, error_code, base_offset, _append_time, _log_start = r.take(">ihqqq")
            record_errors = [(r.take(">i"), r.string16()) for _ in range(r.take(">i"))]
            out.append((topic, partition, error_code, base_offset, record_errors, r.string16()))
    return correlation_id, out


def parse_metadata_v1(payload: bytes):
    """(correlation_id, {broker id: (host, port)}, controller id,
    {topic: (error_code, {partition: (error_code, leader, replicas, isr)})})."""
    r = Reader(payload)
    correlation_id = r.take(">i")
    brokers = {}
    for _ in range(r.take(">i")):
        broker_id, host, port = r.take(">i"), r.string16(), r.take(">i")
        r.string16()  # rack
        brokers[broker_id] = (host, port)
    controller_id = r.take(">i")
    topics = {}
    for _ in range(r.take(">i")):
        error_code, name, _internal = r.take(">h"), r.string16(), r.take(">b")
        partitions = {}
        for _ in range(r.take(">i")):
            partition_error, index, leader = r.take(">hii")
            replicas = [r.take(">i") for _ in range(r.take(">i"))]
            isr = [r.take(">i") for _ in range(r.take(">i"))]
            partitions[index] = (partition_error, leader, replicas, isr)
        topics[name] = (error_code, partitions)
    return correlation_id, brokers, controller_id, topics


def parse_find_coordinator_v1(payload: bytes):
    """(correlation_id, error_code, node_id)."""
    correlation_id, error_code, (node_id, _host, _port) = parse_find_coordinator_v1_node(payload)
    return correlation_id, error_code, node_id


def parse_find_coordinator_v1_node(payload: bytes):
    """(correlation_id, error_code, (node_id, host, port))."""
    r = Reader(payload)
    correlation_id, _throttle, error_code = r.take(">iih")
    r.string16()  # error message
    node_id, host, port = r.take(">i"), r.string16(), r.take(">i")
    return correlation_id, error_code, (node_id, host, port)


def parse_offset_fetch_v1(payload: bytes):
    """(correlation_id, [(topic, partition, committed_offset, metadata, error_code)]): v1
    has no group-level error code."""
    r = Reader(payload)
    correlation_id = r.take(">i")
    out = []
    for _ in range(r.take(">i")):
        topic = r.string16()
        for _ in range(r.take(">i")):
            partition, offset = r.take(">iq")
            metadata = r.string16()
            out.append((topic, partition, offset, metadata, r.take(">h")))
    return correlation_id, out


def parse_init_producer_id_v0(payload: bytes):
    """(correlation_id, error_code, producer_id, producer_epoch)."""
    correlation_id, _throttle, error_code, producer_id, epoch = Reader(payload).take(">iihqh")
    return correlation_id, error_code, producer_id, epoch


def parse_add_partitions_to_txn_v0(payload: bytes):
    """(correlation_id, [(topic, partition, error_code)])."""
    r = Reader(payload)
    correlation_id, _throttle = r.take(">ii")
    out = []
    for _ in range(r.take(">i")):
        topic = r.string16()
        for _ in range(r.take(">i")):
            partition, error_code = r.take(">ih")
            out.append((topic, partition, error_code))
    return correlation_id, out


def parse_fetch_v4(payload: bytes):
    """(correlation_id, [(topic, partition, error_code, high_watermark, records)])."""
    r = Reader(payload)
    correlation_id, _throttle = r.take(">ii")
    out = []
    for _ in range(r.take(">i")):
        topic = r.string16()
        for _ in range(r.take(">i")):
            partition, error_code, hw, _lso = r.take(">ihqq")
            aborted = r.take(">i")
            for _ in range(max(aborted, 0)):
                r.take(">qq")
            out.append((topic, partition, error_code, hw, r.bytes32() or b""))
    return correlation_id, out


def parse_fetch_v7(payload: bytes):
    """(correlation_id, error_code, session_id, [(topic, partition, error_code, high_watermark, records)])."""
    r = Reader(payload)
    correlation_id, _throttle, error_code, session_id = r.take(">iihi")
    out = []
    for _ in range(r.take(">i")):
        topic = r.string16()
        for _ in range(r.take(">i")):
            partition, partition_error, hw, _lso, _log_start = r.take(">ihqqq")
            aborted = r.take(">i")
            for _ in range(max(aborted, 0)):
                r.take(">qq")
            out.append((topic, partition, partition_error, hw, r.bytes32() or b""))
    return correlation_id, error_code, session_id, out


# ----- a raw connection -----------------------------------------------------------------


class Closed(Exception):
    """The broker closed the connection before a whole response arrived."""


class Conn:
    """One raw TCP connection with bounded timeouts on every operation."""

    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)

    def send(self, data: bytes):
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise Closed(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        """One response (without its size prefix); raises Closed on end of stream."""
        size = struct.unpack(">i", self.recv_exact(4))[0]
        assert 0 <= size < 64 << 20, f"response size {size}"
        return self.recv_exact(size)

    def roundtrip(self, frame: bytes) -> bytes:
        self.send(frame)
        return self.recv_frame()

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes (EOF or reset) within `timeout` with nothing
        more to read; False if it sends bytes or keeps the connection open."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return data == b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
