"""Memory a client can make the broker hold is bounded (issue 12, item 3): request
bytes in flight across connections (`queued.max.request.bytes`), and responses built
for a connection that does not read them (fetch responses are built only when the
connection's writer comes to them; responses built at once count against
`osprey.max.pending.response.bytes.per.connection`). At a bound the broker stops
reading from the connection, counts it, and keeps serving everyone else.

A large frame is read into one buffer of its declared size rather than a buffer grown
by doubling, so it holds about its bytes, not twice them.

Without the bounds RSS reached 274 MiB (30 connections each sending 8 MiB of a declared
64 MiB frame) and 768 MiB (30 pipelined 30 MiB fetches left unread); see
bench/results/memory.md for the figures before and after.
"""

import socket
import struct
import time

import clients
import kafkawire as kw
from test_bad_input import assert_broker_still_serves
from test_metrics import scrape, value

# The broker's own ~40 MiB, plus a bound's worth of buffers (twice, for buffer growth).
RSS_LIMIT_BYTES = 140 * 1024 * 1024


class Peak:
    """The broker's peak RSS over repeated samples."""

    def __init__(self, broker):
        self.broker, self.bytes = broker, broker.rss_bytes()

    def sample(self):
        self.bytes = max(self.bytes, self.broker.rss_bytes())


def paused(broker, bound):
    return value(scrape(broker), "osprey_reads_paused_total", bound=bound) or 0


def test_large_frames_on_many_connections_are_bounded_broker_wide(start_broker):
    # 30 connections send 240 MiB between them; the broker holds at most 32 MiB of it.
    broker = start_broker({"queued.max.request.bytes": 32 << 20, "socket.request.max.bytes": 32 << 20})
    peak = Peak(broker)
    conns = []
    try:
        for _ in range(30):
            s = socket.create_connection((broker.host, broker.port))
            s.settimeout(0.5)
            s.sendall(struct.pack(">i", 30 << 20))
            conns.append(s)
        chunk = b"\0" * (1 << 20)
        for s in conns:
            try:
                for _ in range(8):
                    s.sendall(chunk)
                    peak.sample()
            except socket.timeout:
                pass  # the broker stopped reading this connection: the bound at work
        time.sleep(1)
        peak.sample()
        assert peak.bytes < RSS_LIMIT_BYTES, f"peak RSS {peak.bytes / 2**20:.0f} MiB"
        assert paused(broker, "queued.max.request.bytes") > 0
        assert_broker_still_serves(broker)
    finally:
        for s in conns:
            s.close()


def test_a_large_frame_takes_the_memory_of_its_bytes_not_twice(start_broker):
    # One frame of nearly the whole bound: read into one buffer of its declared size,
    # it adds what was sent. Growing by doubling (and copying at each step) left the
    # old broker 136 MiB larger here.
    bound = 64 << 20
    broker = start_broker({"queued.max.request.bytes": bound, "socket.request.max.bytes": bound})
    time.sleep(0.5)  # the broker's own start-up allocations settle
    peak = Peak(broker)
    rss_at_start = peak.bytes
    # What the broker holds besides the frame (a connection, the allocator's slack, the
    # last partly filled 2 MiB huge page).
    margin = 16 << 20
    with socket.create_connection((broker.host, broker.port)) as s:
        s.sendall(struct.pack(">i", bound))
        chunk = b"\0" * (1 << 20)
        for _ in range(60):  # 60 MiB of the 64 MiB declared, then the client stalls
            s.sendall(chunk)
            peak.sample()
        for _ in range(10):
            time.sleep(0.1)
            peak.sample()
        grown = peak.bytes - rss_at_start
        assert grown < bound + margin, f"RSS grew {grown / 2**20:.0f} MiB for a 60 MiB partial frame"
        assert_broker_still_serves(broker)


def test_frames_read_into_their_own_buffer_arrive_whole_with_the_next_one_pipelined(broker):
    # Frames past the shared read buffer's 2 MiB (and one of them sent before the one
    # ahead is answered) decode, store and read back byte for byte.
    topic = "memory-large-frames"
    clients.create_topic(broker, topic, config={"max.message.bytes": str(8 << 20)})
    batches = [kw.record_batch([(None, bytes([i]) * (3 << 20) + b"end")]) for i in range(1, 3)]
    with kw.Conn(broker.host, broker.port, timeout=60) as c:
        c.send(b"".join(kw.produce_v3(i, topic, 0, batch, acks=1) for i, batch in enumerate(batches)))
        c.send(kw.api_versions_v0(7))
        answers = [kw.parse_produce_v3(c.recv_frame()) for _ in batches]
        assert kw.parse_api_versions_v0(c.recv_frame())[:2] == (7, 0)
        assert [(correlation, results[0][2]) for correlation, results in answers] == [(0, 0), (1, 0)]
        c.send(kw.fetch_v4(9, topic, 0, 0, max_bytes=16 << 20, max_wait_ms=0))
        correlation, [(_, _, error, _hw, records)] = kw.parse_fetch_v4(c.recv_frame())
    assert (correlation, error) == (9, 0)
    # The broker sets each batch's offset and leader epoch; the rest (what the CRC
    # covers, from the attributes on) is stored as sent.
    stored, pos = [], 0
    while pos < len(records):
        end = pos + 12 + struct.unpack_from(">i", records, pos + 8)[0]
        stored.append(records[pos + 21:end])
        pos = end
    assert stored == [batch[21:] for batch in batches]


def test_pipelined_fetches_left_unread_are_bounded_per_connection(broker):
    topic = "memory-fetch"
    clients.create_topic(broker, topic)
    value_bytes = b"x" * (900 << 10)
    with kw.Conn(broker.host, broker.port, timeout=60) as c:
        for i in range(40):
            c.send(kw.produce_v3(i, topic, 0, kw.record_batch([(None, value_bytes)]), acks=1))
        errors = [kw.parse_produce_v3(c.recv_frame())[1][0][2] for _ in range(40)]
    assert set(errors) == {0}, errors
    peak = Peak(broker)
    s = socket.create_connection((broker.host, broker.port))
    try:
        s.settimeout(5)
        for i in range(30):
            s.sendall(kw.fetch_v4(i, topic, 0, 0, max_bytes=30 << 20, max_wait_ms=0))
            peak.sample()
        for _ in range(20):
            time.sleep(0.1)
            peak.sample()
        assert peak.bytes < RSS_LIMIT_BYTES, f"peak RSS {peak.bytes / 2**20:.0f} MiB"
        # A fetch's response is built (its reads run on the blocking pool) only when the
        # connection's writer comes to it, after the responses before it were written: at
        # most one is held, so the pending-response budget is never what stops reading
        # (osprey.max.inflight.requests.per.connection is); the RSS bound above is the point.
        assert_broker_still_serves(broker)
        # Reading the responses resumes the connection: every fetch is answered, in order.
        s.settimeout(30)
        conn = kw.Conn.__new__(kw.Conn)
        conn.sock = s
        for i in range(30):
            correlation, [(_, _, error, _hw, records)] = kw.parse_fetch_v4(conn.recv_frame())
            assert (correlation, error) == (i, 0)
            assert records
    finally:
        s.close()


def test_the_broker_runs_without_transparent_huge_pages(start_broker):
    # Its allocator asks for huge pages on its regions; each 2 MiB touched would then be
    # resident whole (98 MiB of huge pages after a short produce, before the opt-out).
    broker = start_broker({})
    status = open(f"/proc/{broker.proc.pid}/status").read()
    enabled = [line.split()[1] for line in status.splitlines() if line.startswith("THP_enabled:")]
    assert enabled == ["0"], f"THP_enabled in /proc/<broker>/status: {enabled}"
