"""The Prometheus endpoint after known traffic: request counters per API, bytes and
messages in per topic, open connections. Traffic is sent on a raw socket so that the
exact number of requests is known; a librdkafka round trip then shows up as well."""

import re
import time
import urllib.request

import clients
import kafkawire as kw

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def scrape(broker) -> dict:
    """{(name, frozenset(labels)): value} of every sample."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def value(samples, name, **labels):
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    assert found, f"no sample {name}{labels}; have {sorted({n for n, _ in samples})}"
    return sum(found)


def test_metrics_count_requests_bytes_messages_and_connections(broker):
    clients.create_topic(broker, "metered")
    batches = [kw.record_batch([(b"k%d" % i, b"v" * (100 + i)), (None, b"w")]) for i in range(3)]
    with kw.Conn(broker.host, broker.port) as c:
        for i, batch in enumerate(batches):
            _, parts = kw.parse_produce_v3(c.roundtrip(kw.produce_v3(i, "metered", 0, batch)))
            assert [(p[2], p[3]) for p in parts] == [(kw.NONE, 2 * i)]
        for i in range(2):
            _, parts = kw.parse_fetch_v4(c.roundtrip(kw.fetch_v4(10 + i, "metered", 0, 0)))
            assert [(p[2], p[3]) for p in parts] == [(kw.NONE, 6)]

        # This raw connection is the only client connection open now. A request is
        # counted once its response is written, which can be just after the client has
        # read it: scrape until the counts settle (or the deadline passes).
        def settled(samples):
            return (
                value(samples, "osprey_connections") == 1
                and value(samples, "osprey_requests_total", api="Produce", version="3") >= 3
                and value(samples, "osprey_requests_total", api="Fetch", version="4") >= 2
            )

        deadline = time.monotonic() + 10
        while True:
            samples = scrape(broker)
            if settled(samples) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert value(samples, "osprey_connections") == 1
    assert value(samples, "osprey_requests_total", api="Produce", version="3") == 3
    assert value(samples, "osprey_requests_total", api="Fetch", version="4") == 2
    assert value(samples, "osprey_topic_bytes_in_total", topic="metered") == sum(len(b) for b in batches)
    assert value(samples, "osprey_topic_messages_in_total", topic="metered") == 6

    # A real client's traffic is counted too.
    p = clients.producer(broker, acks="all")
    reports = clients.produce_all(p, "metered", [{"value": b"z" * 10} for _ in range(4)])
    assert [r.error for r in reports] == [None] * 4
    clients.read_partitions(broker, "metered", [0], 10)
    after = scrape(broker)
    assert value(after, "osprey_topic_messages_in_total", topic="metered") == 10
    assert value(after, "osprey_requests_total", api="Produce") > 3 and value(after, "osprey_requests_total", api="Fetch") > 2
    assert value(after, "osprey_topic_bytes_out_total", topic="metered") > 0


def test_metrics_show_groups_by_state_generation_and_consumer_lag(broker):
    topic = "lagged"
    clients.create_topic(broker, topic)
    p = clients.producer(broker, acks="all")
    clients.produce_all(p, topic, [{"value": b"m%d" % i} for i in range(10)])
    c = clients.consumer(broker, **{"group.id": "lag-group", "enable.auto.commit": False})
    from confluent_kafka import TopicPartition

    try:
        c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    finally:
        c.close()
    # Group gauges are refreshed every 5 s.
    deadline = time.monotonic() + 15
    while True:
        samples = scrape(broker)
        try:
            lag = value(samples, "osprey_consumer_lag", group="lag-group", topic=topic, partition="0")
            empty = value(samples, "osprey_groups", state="Empty")
            break
        except AssertionError:
            assert time.monotonic() < deadline, "group gauges never appeared"
            time.sleep(0.5)
    assert lag == 6
    assert empty >= 1
    assert value(samples, "osprey_group_generation", group="lag-group") == 0


def test_a_deleted_kip848_group_leaves_the_state_gauges(broker):
    """A consumer group held in Reconciling (its first member does not poll, so it never
    revokes what the second member is to get), then deleted: its state gauge returns to 0."""
    topic, group = "gauged", "gauged-kip848"
    clients.create_topic(broker, topic, partitions=4)
    conf = {"group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest"}
    first = clients.consumer(broker, **conf)
    second = None
    try:
        first.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(first.assignment()) < 4:
            assert time.monotonic() < deadline, first.assignment()
            first.poll(0.2)
        second = clients.consumer(broker, **conf)
        second.subscribe([topic])
        deadline = time.monotonic() + 30
        while scrape(broker).get(("osprey_groups", frozenset({("state", "Reconciling")})), 0) < 1:
            assert time.monotonic() < deadline, "the group was never counted as Reconciling"
            second.poll(0.5)
    finally:
        first.close()
        if second is not None:
            second.close()
    a = clients.admin(broker)
    deleted = a.delete_consumer_groups([group], request_timeout=clients.TIMEOUT_S)
    deleted[group].result(timeout=clients.TIMEOUT_S)
    # Group gauges are refreshed every 5 s.
    deadline = time.monotonic() + 15
    while value(scrape(broker), "osprey_groups", state="Reconciling") != 0:
        assert time.monotonic() < deadline, "a deleted group is still counted as Reconciling"
        time.sleep(0.5)


def test_a_deleted_topics_and_groups_series_leave_the_metrics(broker):
    """As Kafka removes a deleted topic's metrics: after DeleteTopics and DeleteGroups the
    topic's counters and partition gauges and the group's gauges leave /metrics, while
    another topic's and group's stay, and so do global counters that never moved."""
    from confluent_kafka import TopicPartition

    gone, kept = "metered-gone", "metered-kept"
    for topic in (gone, kept):
        clients.create_topic(broker, topic)
        p = clients.producer(broker, acks="all")
        assert [r.error for r in clients.produce_all(p, topic, [{"value": b"x"} for _ in range(3)])] == [None] * 3
        clients.read_partitions(broker, topic, [0], 3)
        c = clients.consumer(broker, **{"group.id": topic + "-group", "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        finally:
            c.close()

    def series(samples, label, value):
        return sorted(n for n, ls in samples if (label, value) in ls)

    per_topic = [
        "osprey_topic_bytes_in_total",
        "osprey_topic_bytes_out_total",
        "osprey_topic_messages_in_total",
        "osprey_partition_log_size_bytes",
        "osprey_partition_log_end_offset",
        "osprey_partition_high_watermark",
        "osprey_consumer_lag",
    ]
    per_group = ["osprey_consumer_lag", "osprey_group_generation"]
    # Partition and group gauges are refreshed every 5 s.
    deadline = time.monotonic() + 30
    while True:
        samples = scrape(broker)
        if all(series(samples, "topic", t) == sorted(per_topic) for t in (gone, kept)) and all(
            series(samples, "group", t + "-group") == sorted(per_group) for t in (gone, kept)
        ):
            break
        assert time.monotonic() < deadline, (series(samples, "topic", gone), series(samples, "group", gone + "-group"))
        time.sleep(0.5)

    a = clients.admin(broker)
    a.delete_topics([gone], request_timeout=clients.TIMEOUT_S)[gone].result(timeout=clients.TIMEOUT_S)
    group = gone + "-group"
    a.delete_consumer_groups([group], request_timeout=clients.TIMEOUT_S)[group].result(timeout=clients.TIMEOUT_S)
    # Series untouched for 30 s leave at the next scrape; the bound is generous.
    deadline = time.monotonic() + 80
    while True:
        samples = scrape(broker)
        left = series(samples, "topic", gone) + series(samples, "group", group)
        if not left:
            break
        assert time.monotonic() < deadline, f"still shown after the topic and group were deleted: {left}"
        time.sleep(1)
    assert series(samples, "topic", kept) == sorted(per_topic)
    assert series(samples, "group", kept + "-group") == sorted(per_group)
    assert value(samples, "osprey_topic_messages_in_total", topic=kept) == 3
    # Never moved since start, yet still shown.
    assert value(samples, "osprey_txn_commits_total") == 0
    assert value(samples, "osprey_requests_total", api="DeleteTopics") >= 1
    value(samples, "osprey_connections")


def test_promtool_finds_nothing_to_lint_in_the_metrics(broker):
    """Names, types and suffixes as Prometheus expects them (`promtool check metrics`:
    a counter ends in `_total`, nothing else does, units spelled out)."""
    import shutil
    import subprocess

    import pytest

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; compat-tests/run.sh installs it as root)")
    # Traffic that makes every kind of metric appear: produce (fsync histogram, topic
    # counters), fetch, a group with a commit.
    clients.create_topic(broker, "linted")
    p = clients.producer(broker, acks="all")
    clients.produce_all(p, "linted", [{"key": b"k", "value": b"v%d" % i} for i in range(20)])
    clients.read_partitions(broker, "linted", [0], 20, group_id="linted-group")
    time.sleep(6)  # the partition gauges refresh every 5 s
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        text = r.read()
    assert b"osprey_fsync_duration_seconds_bucket" in text
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    problems = (checked.stdout + checked.stderr).decode().strip()
    assert checked.returncode == 0 and not problems, problems
