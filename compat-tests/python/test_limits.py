"""Connection limits from the broker config: `connections.max.idle.ms` closes idle
connections, `max.connections` makes connections beyond it wait (as Kafka does), and a connection
that is closed frees its slot."""

import select
import time

import kafkawire as kw


def test_idle_connection_is_closed_after_connections_max_idle_ms(start_broker):
    broker = start_broker({"connections.max.idle.ms": "1000"})
    with kw.Conn(broker.host, broker.port) as c:
        c.roundtrip(kw.api_versions_v0(1))
        started = time.monotonic()
        assert c.is_closed_by_peer(timeout=10), "an idle connection stayed open"
        assert time.monotonic() - started >= 0.9
    # A busy connection is not idle: requests every 300 ms keep it open past the limit.
    with kw.Conn(broker.host, broker.port) as c:
        for i in range(8):
            c.roundtrip(kw.api_versions_v0(i))
            time.sleep(0.3)


def test_connections_beyond_max_connections_wait_and_are_served_as_slots_free(start_broker):
    """As Kafka's acceptor (KIP-402): at max.connections the broker stops accepting, so
    further connections wait in the listen backlog (socket.listen.backlog.size, 50)
    instead of being closed, and each is served when a served one closes."""
    broker = start_broker({"max.connections": "50"})
    conns = [kw.Conn(broker.host, broker.port) for _ in range(80)]
    try:
        for i, c in enumerate(conns):
            c.send(kw.api_versions_v0(i))
        # The fixture's readiness probe may hold a slot until the broker notices it
        # closed, so the fiftieth answer can lag; there is never a fifty-first.
        answered = set()
        deadline = time.monotonic() + 10
        while len(answered) < 50 and time.monotonic() < deadline:
            ready, _, _ = select.select([c.sock for c in conns if c not in answered], [], [], 0.5)
            for c in conns:
                if c.sock in ready:
                    c.recv_frame()
                    answered.add(c)
        assert len(answered) == 50, f"{len(answered)} of 80 connections served with max.connections=50"
        waiting = [c for c in conns if c not in answered]
        ready, _, _ = select.select([c.sock for c in waiting], [], [], 1.0)
        assert not ready, "a connection beyond max.connections was answered or closed"
        for c in answered:
            c.close()
        # The 30 that waited are served now, none closed.
        for i, c in enumerate(waiting):
            assert kw.parse_api_versions_v0(c.recv_frame())[1] == 0
            c.roundtrip(kw.api_versions_v0(100 + i))
    finally:
        for c in conns:
            c.close()
