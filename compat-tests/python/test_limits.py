"""Connection limits from the broker config: `connections.max.idle.ms` closes idle
connections, `max.connections` refuses connections beyond it, and a connection that
is closed frees its slot."""

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


def test_connections_beyond_max_connections_are_closed_and_slots_are_freed(start_broker):
    broker = start_broker({"max.connections": "2"})
    # The fixture's own readiness probe may still hold a slot for a moment after it
    # closed (the broker frees it when it notices), so the first two may need a retry.
    deadline = time.monotonic() + 5
    while True:
        a = kw.Conn(broker.host, broker.port)
        b = kw.Conn(broker.host, broker.port)
        try:
            a.roundtrip(kw.api_versions_v0(1))
            b.roundtrip(kw.api_versions_v0(2))
            break
        except (kw.Closed, ConnectionResetError):
            a.close()
            b.close()
            assert time.monotonic() < deadline, "two connections never both fitted under max.connections=2"
            time.sleep(0.1)
    try:
        with kw.Conn(broker.host, broker.port) as third:
            assert third.is_closed_by_peer(timeout=5), "a third connection was accepted with max.connections=2"
        a.close()
        # The slot is released when the broker notices the close.
        deadline = time.monotonic() + 5
        while True:
            c = kw.Conn(broker.host, broker.port)
            try:
                c.roundtrip(kw.api_versions_v0(3))
                c.close()
                break
            except (kw.Closed, ConnectionResetError):
                c.close()
                assert time.monotonic() < deadline, "the freed slot never came back"
                time.sleep(0.1)
        b.roundtrip(kw.api_versions_v0(4))
    finally:
        a.close()
        b.close()
