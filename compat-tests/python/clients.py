"""Thin helpers over confluent-kafka (librdkafka) with bounded timeouts everywhere, so a
test fails with a message instead of hanging."""

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 20.0

COMMON = {
    "broker.address.family": "v4",
    "socket.timeout.ms": 10000,
    "log_level": 4,
}


def _config_name(name: str) -> str:
    """Python keyword to librdkafka property: compression_type -> compression.type."""
    return name if name in ("log_level", "on_commit", "stats_cb", "throttle_cb") else name.replace("_", ".")


def producer(broker, **config) -> Producer:
    conf = dict(COMMON, **{"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "message.timeout.ms": 20000})
    conf.update({_config_name(k): v for k, v in config.items()})
    return Producer(conf)


def consumer(broker, **config) -> Consumer:
    conf = dict(
        COMMON,
        **{
            "bootstrap.servers": broker.bootstrap,
            # group.id is required by the client; assign() never joins the group and
            # nothing is committed.
            "group.id": "osprey-compat-assign",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 5000,
        },
    )
    conf.update({_config_name(k): v for k, v in config.items()})
    return Consumer(conf)


def admin(broker) -> AdminClient:
    return AdminClient(dict(COMMON, **{"bootstrap.servers": broker.bootstrap}))


def create_topic(broker, name: str, partitions: int = 1, config=None):
    a = admin(broker)  # must outlive the future: destroying it cancels the request
    futures = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
        request_timeout=TIMEOUT_S,
    )
    futures[name].result(timeout=TIMEOUT_S)


class Delivery:
    __slots__ = ("key", "value", "partition", "offset", "error", "timestamp")

    def __init__(self, msg, err):
        self.error = err
        self.key, self.value = msg.key(), msg.value()
        self.partition, self.offset = msg.partition(), msg.offset()
        self.timestamp = msg.timestamp()


def produce_all(p: Producer, topic: str, messages, **kwargs):
    """Produces each of `messages` (dicts of Producer.produce arguments) and flushes;
    returns the delivery reports in the order the messages were given."""
    reports = [None] * len(messages)

    def callback(i):
        def cb(err, msg):
            reports[i] = Delivery(msg, err)

        return cb

    for i, m in enumerate(messages):
        while True:
            try:
                p.produce(topic, on_delivery=callback(i), **m, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
    remaining = p.flush(TIMEOUT_S)
    assert remaining == 0, f"{remaining} messages still undelivered after {TIMEOUT_S}s"
    assert all(r is not None for r in reports)
    return reports


def consume_exactly(c: Consumer, count: int, timeout: float = TIMEOUT_S, settle: float = 0.5):
    """Polls until `count` messages arrived (failing on any error or timeout), then keeps
    polling `settle` seconds to make sure no extra message follows."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(got)} of {count} messages within {timeout}s"
        msg = c.poll(min(left, 0.5))
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        got.append(msg)
    end = time.monotonic() + settle
    while time.monotonic() < end:
        msg = c.poll(0.1)
        if msg is not None and not msg.error():
            raise AssertionError(f"an extra message after the expected {count}: {msg.topic()}[{msg.partition()}]@{msg.offset()}")
    return got


def read_partitions(broker, topic: str, partitions, count: int, **config):
    """Every message of `partitions` from the beginning, by assign; exactly `count`."""
    c = consumer(broker, **config)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        return consume_exactly(c, count)
    finally:
        c.close()


def wait_position(c: Consumer, tp: TopicPartition, timeout: float = TIMEOUT_S) -> int:
    """Polls until the consumer reached the end of `tp` (its start offset, e.g.
    OFFSET_END, resolved and fetched from) and returns that end offset. The consumer
    must have been made with enable_partition_eof=True."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is None:
            continue
        err = msg.error()
        assert err and err.code() == KafkaError._PARTITION_EOF, (
            f"unexpected {'error ' + str(err) if err else 'message at offset ' + str(msg.offset())} while waiting for the end"
        )
        if (msg.topic(), msg.partition()) == (tp.topic, tp.partition):
            return msg.offset()
    raise AssertionError(f"end of {tp.topic}[{tp.partition}] not reached within {timeout}s")


class Background:
    """A client workload on its own thread: `_run` loops until `stop` is set. A `with`
    block runs it; leaving the block stops it and waits for it."""

    def __init__(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        raise NotImplementedError

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()
