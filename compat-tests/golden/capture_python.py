#!/usr/bin/env python3
"""Drives librdkafka (confluent-kafka) against the capture listener so that it sends the
requests the golden tests keep: ApiVersions, Metadata, Produce with every compression
codec, InitProducerId, ListOffsets, Fetch, FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, OffsetFetch, OffsetCommit, LeaveGroup.

Usage: capture_python.py HOST:PORT

Each client gets its own client.id, which the listener uses as the capture directory.
Every step is bounded in time; the exit code is non-zero if any step failed.
"""

import sys
import time

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, Producer, TopicPartition

TOPIC = "golden-rdkafka"
GROUP = "golden-rdkafka-group"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
STEP_TIMEOUT_S = 15
# Notices and worse only: librdkafka logs every telemetry subscription at info level.
LOG_LEVEL = 5


def produce(bootstrap, client_id, extra):
    """Sends a few keyed records with headers in one batch and waits for their acks."""
    failures = []

    def on_delivery(err, msg):
        if err is not None:
            failures.append(err)

    conf = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "log_level": LOG_LEVEL,
        "linger.ms": 50,
        "message.timeout.ms": STEP_TIMEOUT_S * 1000,
    }
    conf.update(extra)
    producer = Producer(conf)
    for i in range(5):
        # Repetitive values so that every codec actually compresses something.
        producer.produce(
            TOPIC,
            key=f"key-{i}".encode(),
            value=(f"value {i} " * 20).encode(),
            headers=[("trace", f"t{i}".encode()), ("empty", b"")],
            on_delivery=on_delivery,
        )
    remaining = producer.flush(STEP_TIMEOUT_S)
    if remaining or failures:
        raise RuntimeError(f"{client_id}: {remaining} undelivered, errors {failures}")


def consume_assigned(bootstrap):
    """Assign + consume: ListOffsets (earliest, latest), then Fetch. The Python client
    insists on a group.id even here; it is never joined."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "rdkafka-consumer-assign",
            "log_level": LOG_LEVEL,
            "group.id": "unused-golden-assign",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING), TopicPartition(TOPIC, 1, OFFSET_END)])
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error():
            print(f"consumer-assign: {msg.error()}", file=sys.stderr)
    consumer.close()


def consume_group(bootstrap):
    """Subscribe: FindCoordinator, JoinGroup (twice, KIP-394), SyncGroup, OffsetFetch,
    Heartbeat, then an explicit OffsetCommit and LeaveGroup on close."""
    assigned = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "rdkafka-consumer-group",
            "log_level": LOG_LEVEL,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "heartbeat.interval.ms": 500,
        }
    )
    consumer.subscribe([TOPIC], on_assign=lambda c, parts: assigned.extend(parts))
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.5)
    if not assigned:
        consumer.close()
        raise RuntimeError("consumer-group: no assignment")
    settle = time.monotonic() + 2
    while time.monotonic() < settle:
        consumer.poll(0.5)
    consumer.commit(offsets=[TopicPartition(TOPIC, p.partition, 0) for p in assigned], asynchronous=False)
    consumer.close()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bootstrap = sys.argv[1]
    print(f"confluent-kafka {confluent_kafka.__version__}, librdkafka {confluent_kafka.libversion()[0]}")
    steps = [
        (f"producer-{codec}", lambda c=codec: produce(bootstrap, f"rdkafka-producer-{codec_name(c)}",
                                                     {"compression.type": c, "acks": 1}))
        for codec in CODECS
    ]
    steps += [
        ("producer-idempotent", lambda: produce(bootstrap, "rdkafka-producer-idempotent",
                                                {"enable.idempotence": True, "acks": "all"})),
        ("consumer-assign", lambda: consume_assigned(bootstrap)),
        ("consumer-group", lambda: consume_group(bootstrap)),
    ]
    failed = 0
    for name, step in steps:
        started = time.monotonic()
        try:
            step()
            print(f"ok   {name} ({time.monotonic() - started:.1f}s)")
        except (KafkaException, RuntimeError) as e:
            failed += 1
            print(f"FAIL {name}: {e}")
    sys.exit(1 if failed else 0)


def codec_name(codec):
    return "uncompressed" if codec == "none" else codec


if __name__ == "__main__":
    main()
