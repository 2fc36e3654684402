"""A damaged log on disk: a sealed segment torn after `kill -9`, a byte flipped inside a
sealed segment. Osprey fsyncs before it acknowledges, so every segment after a damaged
one holds acknowledged data: recovery must keep it (Kafka's recovery deletes it), say
loudly what it lost, and the scrubber must find corruption recovery does not scan for."""

import re
import struct
import time
import urllib.request

import clients

SEGMENT_BYTES = 1 << 20  # the smallest segment.bytes Kafka allows
MESSAGES = 5000
VALUE_BYTES = 1000
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def metric(broker, name, **labels) -> float:
    """The sum of `name`'s samples carrying `labels` (0 if there are none)."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or line.startswith("#") or m.group(1) != name:
            continue
        have = set(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if set(labels.items()) <= have:
            total += float(m.group(3))
    return total


def produce_acknowledged(broker, topic):
    """MESSAGES values of VALUE_BYTES, acks=all; returns {offset: value}."""
    # Batches of ~16 records, so that a torn batch is a small part of its segment.
    p = clients.producer(broker, acks="all", linger_ms=5, batch_size=16384)
    messages = [{"value": f"{i:06d}".encode() + b"x" * (VALUE_BYTES - 6)} for i in range(MESSAGES)]
    reports = clients.produce_all(p, topic, messages)
    assert [r.error for r in reports] == [None] * MESSAGES
    return {r.offset: r.value for r in reports}


def segments(broker, topic):
    [d] = broker.partition_dirs(topic)
    return sorted(d.glob("*.log"))


def fill_segments_and_kill_9(broker, topic):
    """A topic of several 1 MiB segments, every message acknowledged, then `kill -9`.
    Returns {offset: value} and the segment files, oldest first."""
    clients.create_topic(broker, topic, config={"segment.bytes": str(SEGMENT_BYTES)})
    acked = produce_acknowledged(broker, topic)
    broker.kill9()
    files = segments(broker, topic)
    assert len(files) >= 4, f"the test needs several sealed segments, got {[f.name for f in files]}"
    return acked, files


def batch_starts(data: bytes):
    """Byte positions of the record batches in a segment file (walked by length)."""
    starts, pos = [], 0
    while pos + 12 <= len(data):
        starts.append(pos)
        (length,) = struct.unpack(">i", data[pos + 8 : pos + 12])
        pos += 12 + length
    return starts


def test_truncated_older_segment_after_kill_9_keeps_every_intact_segment(broker):
    topic = "damaged"
    acked, files = fill_segments_and_kill_9(broker, topic)
    # Tear the second segment's last batch, as a lost write would.
    damaged = files[1]
    data = damaged.read_bytes()
    last = batch_starts(data)[-1]
    (first_lost,) = struct.unpack(">q", data[last : last + 8])
    with open(damaged, "r+b") as f:
        f.truncate(len(data) - 500)
    end_lost = int(files[2].stem)
    assert int(damaged.stem) < first_lost < end_lost

    broker.start()
    # Every record outside the torn batch, in every later segment, is still consumed.
    expected = {o: v for o, v in acked.items() if not first_lost <= o < end_lost}
    got = clients.read_partitions(broker, topic, [0], len(expected))
    assert {m.offset(): m.value() for m in got} == expected
    assert len(segments(broker, topic)) == len(files), "a segment file was deleted"
    quarantined = list(damaged.parent.glob("*.damaged"))
    assert len(quarantined) == 1 and quarantined[0].stat().st_size == len(data) - 500 - last, (
        "the cut bytes were not kept aside"
    )

    log = broker.log_since_last_start()
    lost_lines = [line for line in log.splitlines() if "log damaged" in line and damaged.name in line]
    assert lost_lines, f"the broker does not name the damaged segment:\n{log}"
    assert f"cut_short [{first_lost}, {end_lost})" in log, f"the broker does not log the lost offset range:\n{log}"
    assert metric(broker, "osprey_log_damaged_ranges_total", kind="cut_short") == 1
    assert metric(broker, "osprey_log_damaged_bytes_total") == quarantined[0].stat().st_size

    # The partition takes writes at its old end.
    p = clients.producer(broker, acks="all")
    [report] = clients.produce_all(p, topic, [{"value": b"after"}])
    assert (report.error, report.offset) == (None, MESSAGES)


def test_deleted_older_segment_is_reported_at_startup(broker):
    topic = "missing-segment"
    acked, files = fill_segments_and_kill_9(broker, topic)
    files[1].unlink()
    first, end = int(files[1].stem), int(files[2].stem)

    broker.start()
    log = broker.log_since_last_start()
    assert f"missing_segment [{first}, {end})" in log, f"the gap is not reported:\n{log}"
    assert metric(broker, "osprey_log_damaged_ranges_total", kind="missing_segment") == 1
    expected = {o: v for o, v in acked.items() if not first <= o < end}
    got = clients.read_partitions(broker, topic, [0], len(expected))
    assert {m.offset(): m.value() for m in got} == expected


def test_scrubber_finds_a_flipped_byte_in_a_sealed_segment(start_broker):
    broker = start_broker({"osprey.log.scrub.bytes.per.second": 64 << 20})
    topic = "scrubbed"
    clients.create_topic(broker, topic, config={"segment.bytes": str(SEGMENT_BYTES)})
    produce_acknowledged(broker, topic)
    broker.stop()
    files = segments(broker, topic)
    target = files[1]
    data = bytearray(target.read_bytes())
    starts = batch_starts(bytes(data))
    middle = starts[len(starts) // 2]
    (base_offset,) = struct.unpack(">q", data[middle : middle + 8])
    data[middle + 100] ^= 0x01  # inside the records, covered by the batch CRC
    target.write_bytes(bytes(data))

    broker.start()
    # The first pass starts at startup; the next one only after the (default, hour-long)
    # pause, so the flipped byte is counted once.
    deadline = time.monotonic() + 60
    while "scrubber pass over sealed segments done" not in broker.log_since_last_start():
        assert time.monotonic() < deadline, f"no scrubber pass finished:\n{broker.log_since_last_start()}"
        time.sleep(0.2)
    time.sleep(6)  # metrics are exported as counted; the Prometheus scrape reads them live
    assert metric(broker, "osprey_log_scrub_corrupt_batches_total") == 1, broker.log_since_last_start()
    assert metric(broker, "osprey_log_scrub_bytes_total") >= sum(f.stat().st_size for f in files[:-1])
    findings = [line for line in broker.log_since_last_start().splitlines() if "scrubber found a corrupt batch" in line]
    assert len(findings) == 1, findings
    assert target.name in findings[0] and f"offset={base_offset}" in findings[0], findings
