"""The idempotent producer under faults: a TCP proxy between librdkafka and the broker
cuts connections at random (every 0.3-1 s, and at every 10,000th message) while
100,000 keyed messages go out with 5 requests in
flight. Retried batches must be stored once: a read_uncommitted consumer then finds
every message exactly once, in order per key (zero duplicates, zero gaps)."""

import random
import socket
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

import clients
from conftest import free_port

MESSAGES = 100_000
KEYS = 50
PARTITIONS = 4


class ChaosProxy:
    """Forwards 127.0.0.1:port to the broker; `cut()` closes a random live connection."""

    def __init__(self, port: int, target_port: int):
        self.port = port
        self.target = ("127.0.0.1", target_port)
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        self.pairs = []
        self.lock = threading.Lock()
        self.running = True
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while self.running:
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self, rng: random.Random):
        """Closes one live connection, waiting up to 2 s for one to exist."""
        deadline = time.monotonic() + 2
        while True:
            with self.lock:
                if any(p[0].fileno() != -1 for p in self.pairs):
                    break
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
        with self.lock:
            live = [p for p in self.pairs if p[0].fileno() != -1]
            if not live:
                return
            client, upstream = rng.choice(live)
            self.pairs.remove((client, upstream))
        for s in (client, upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.cuts += 1

    def close(self):
        self.running = False
        self.server.close()
        with self.lock:
            for pair in self.pairs:
                for s in pair:
                    try:
                        s.close()
                    except OSError:
                        pass


def test_idempotent_producer_with_cut_connections_stores_each_message_once_in_order(start_broker):
    rng = random.Random(848)
    # The broker advertises the proxy, so every client connection goes through it.
    proxy_port = free_port()
    broker = start_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
    proxy = ChaosProxy(proxy_port, broker.port)
    try:
        clients.create_topic(broker, "exactly-once-ish", partitions=PARTITIONS)
        p = clients.producer(
            broker,
            bootstrap_servers=f"127.0.0.1:{proxy_port}",
            enable_idempotence=True,
            acks="all",
            max_in_flight_requests_per_connection=5,
            linger_ms=2,
            batch_num_messages=200,
            message_timeout_ms=120_000,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=100,
        )
        errors = []

        def report(err, msg):
            if err is not None:
                errors.append(err)

        stop_chaos = threading.Event()

        def chaos():
            # Often enough that requests are in flight at every cut, rarely enough that
            # librdkafka reconnects (and re-bootstraps) between cuts and makes progress.
            while not stop_chaos.wait(rng.uniform(0.3, 1.0)):
                proxy.cut(rng)

        chaos_thread = threading.Thread(target=chaos, daemon=True)
        chaos_thread.start()
        for i in range(MESSAGES):
            key = i % KEYS
            seq = i // KEYS
            while True:
                try:
                    p.produce("exactly-once-ish", key=b"%d" % key, value=b"%d:%d" % (key, seq), on_delivery=report)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 1000 == 0:
                p.poll(0)
            if i % 10_000 == 9_999:
                # Besides the random cuts, one at every 10k messages, so a fast run still
                # has its in-flight requests cut at least ten times.
                proxy.cut(rng)
        remaining = p.flush(180)
        stop_chaos.set()
        chaos_thread.join()
        assert remaining == 0, f"{remaining} messages undelivered"
        assert errors == [], f"{len(errors)} delivery errors, first: {errors[0]}"
        assert proxy.cuts >= 10, f"only {proxy.cuts} connections were cut: the test did not exercise retries"

        c = clients.consumer(broker, bootstrap_servers=f"127.0.0.1:{proxy_port}", isolation_level="read_uncommitted")
        try:
            c.assign([TopicPartition("exactly-once-ish", part, OFFSET_BEGINNING) for part in range(PARTITIONS)])
            got = clients.consume_exactly(c, MESSAGES, timeout=120)
        finally:
            c.close()
        next_seq = {}
        for m in got:
            key, seq = (int(x) for x in m.value().split(b":"))
            assert next_seq.get(key, 0) == seq, f"key {key}: expected seq {next_seq.get(key, 0)}, got {seq} (duplicate or gap)"
            next_seq[key] = seq + 1
        assert sum(next_seq.values()) == MESSAGES
    finally:
        proxy.close()
