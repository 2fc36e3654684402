"""The Prometheus endpoint after known traffic: request counters per API, bytes and
messages in per topic, open connections. Traffic is sent on a raw socket so that the
exact number of requests is known; a librdkafka round trip then shows up as well."""

import os
import re
import time
import urllib.request

import clients
import kafkawire as kw
from conftest import REPO_ROOT

UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_OUT_OF_RANGE = 1

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


def scrape_until(broker, settled, timeout=15.0, what="the metrics to settle"):
    """Scrapes until `settled(samples)` holds (counts move once a response is written,
    gauges at the next refresh, every 5 s); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(broker)
        try:
            if settled(samples):
                return samples
        except AssertionError:  # a series not there yet
            pass
        assert time.monotonic() < deadline, f"never within {timeout}s: {what}"
        time.sleep(0.2)


def stage(samples, api, name, part="sum"):
    """The `_sum` (seconds) or `_count` of one stage of one API's requests."""
    return value(samples, f"osprey_request_stage_seconds_{part}", api=api, stage=name)


STAGES = ("queue", "local", "remote", "response_queue", "send")


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
        while True:
            samples = scrape(broker)
            if samples.get(("osprey_groups", frozenset({("state", "Reconciling")})), 0) >= 1:
                break
            assert time.monotonic() < deadline, "the group was never counted as Reconciling"
            second.poll(0.5)
        # Counted in the same refresh as its state: both members.
        assert value(samples, "osprey_group_members", group=group) == 2
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

    # A failed produce and fetch of each topic, so its failure counters show too.
    with kw.Conn(broker.host, broker.port) as conn:
        for i, topic in enumerate((gone, kept)):
            _, parts = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(i, topic, 5, kw.record_batch([(None, b"x")]))))
            assert parts[0][2] == UNKNOWN_TOPIC_OR_PARTITION, parts
            _, parts = kw.parse_fetch_v4(conn.roundtrip(kw.fetch_v4(10 + i, topic, 0, 1000, max_wait_ms=0)))
            assert parts[0][2] == OFFSET_OUT_OF_RANGE, parts

    per_topic = [
        "osprey_topic_bytes_in_total",
        "osprey_topic_bytes_out_total",
        "osprey_topic_messages_in_total",
        "osprey_topic_produce_requests_total",
        "osprey_topic_failed_produce_requests_total",
        "osprey_topic_fetch_requests_total",
        "osprey_topic_failed_fetch_requests_total",
        "osprey_partition_log_size_bytes",
        "osprey_partition_log_segments",
        "osprey_partition_log_start_offset",
        "osprey_partition_log_end_offset",
        "osprey_partition_high_watermark",
        "osprey_consumer_committed_offset",
        "osprey_consumer_lag",
    ]
    per_group = ["osprey_consumer_committed_offset", "osprey_consumer_lag", "osprey_group_generation",
                 "osprey_group_members"]
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

    from confluent_kafka import TopicPartition

    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (Debian's prometheus package; compat-tests/run.sh installs it as root)"
    # Traffic that makes every kind of metric appear: produce (fsync histogram, topic
    # counters), fetch, a failed produce and fetch, a group with a member and a commit.
    clients.create_topic(broker, "linted")
    p = clients.producer(broker, acks="all")
    clients.produce_all(p, "linted", [{"key": b"k", "value": b"v%d" % i} for i in range(20)])
    with kw.Conn(broker.host, broker.port) as conn:
        conn.roundtrip(kw.produce_v3(1, "linted", 3, kw.record_batch([(None, b"x")])))
        conn.roundtrip(kw.fetch_v4(2, "linted", 0, 1000, max_wait_ms=0))
    c = clients.consumer(broker, **{"group.id": "linted-group", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["linted"])
        clients.consume_exactly(c, 20)
        c.commit(offsets=[TopicPartition("linted", 0, 20)], asynchronous=False)
        # The partition and group gauges refresh every 5 s: one refresh may show the
        # member before its commit, so wait for both.
        scrape_until(broker, lambda s: value(s, "osprey_group_members", group="linted-group") == 1
                     and value(s, "osprey_consumer_committed_offset", group="linted-group", topic="linted") == 20)
        with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
            text = r.read()
    finally:
        c.close()
    for family in (b"osprey_fsync_duration_seconds_bucket", b"osprey_request_stage_seconds_bucket",
                   b"osprey_topic_failed_produce_requests_total", b"osprey_topic_failed_fetch_requests_total",
                   b"osprey_consumer_committed_offset", b"osprey_partition_log_segments", b"process_cpu_seconds_total",
                   b"osprey_build_info", b"osprey_runtime_worker_busy_seconds_total", b"osprey_requests_in_flight"):
        assert family in text, family
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    problems = (checked.stdout + checked.stderr).decode().strip()
    assert checked.returncode == 0 and not problems, problems


def test_a_long_poll_waits_in_remote_and_a_request_behind_it_in_queue(start_broker):
    """Kafka's RequestMetrics stages: a Fetch parked in its long poll shows the wait under
    `remote`, not `local` (its p99 once read as max.wait.ms of handler work). With a
    pending-response budget of one byte, an ApiVersions sent behind it on the same
    connection cannot start until the fetch is answered: it is counted in
    `osprey_request_queue_size` meanwhile, and its wait under `queue`. Each request's five
    stages add up to its `osprey_request_duration_seconds`."""
    wait_s = 3.0
    broker = start_broker({"osprey.max.pending.response.bytes.per.connection": 1})
    clients.create_topic(broker, "polled")
    before = scrape(broker)

    def delta(samples, api, name, part="sum"):
        return stage(samples, api, name, part) - before.get(
            (f"osprey_request_stage_seconds_{part}", frozenset({("api", api), ("stage", name)})), 0)

    with kw.Conn(broker.host, broker.port, timeout=30) as conn:
        # Nothing to read at offset 0 of the empty topic: the fetch waits out max.wait.ms.
        conn.send(kw.fetch_v4(1, "polled", 0, 0, max_wait_ms=int(wait_s * 1000)))
        conn.send(kw.api_versions_v0(2))
        parked = scrape_until(
            broker,
            lambda s: value(s, "osprey_requests_in_flight") == 2 and value(s, "osprey_request_queue_size") == 1,
            timeout=wait_s / 2,
            what="the fetch parked and the ApiVersions queued behind it",
        )
        assert value(parked, "osprey_requests_in_flight") == 2
        correlation_id, parts = kw.parse_fetch_v4(conn.recv_frame())
        assert correlation_id == 1 and parts[0][2] == kw.NONE and parts[0][4] == b"", parts
        assert kw.parse_api_versions_v0(conn.recv_frame())[0] == 2

    after = scrape_until(
        broker,
        lambda s: delta(s, "Fetch", "send", "count") == 1 and delta(s, "ApiVersions", "send", "count") == 1,
        what="both requests counted",
    )
    for api in ("Fetch", "ApiVersions"):
        assert [delta(after, api, name, "count") for name in STAGES] == [1, 1, 1, 1, 1], api
    # The fetch's answer took at least max.wait.ms from its frame read, and all of the
    # wait is remote: whatever else it did (an empty read, twice) is far shorter.
    fetch = {name: delta(after, "Fetch", name) for name in STAGES}
    assert fetch["remote"] >= wait_s / 2, fetch
    assert fetch["local"] < wait_s / 2, fetch
    assert sum(fetch.values()) >= wait_s, fetch
    # The ApiVersions waited for the fetch's answer before its handler started.
    behind = {name: delta(after, "ApiVersions", name) for name in STAGES}
    assert behind["queue"] >= wait_s / 2, behind
    assert behind["remote"] == 0 and behind["local"] < wait_s / 2, behind
    for api, stages in (("Fetch", fetch), ("ApiVersions", behind)):
        total = value(after, "osprey_request_duration_seconds_sum", api=api) - before.get(
            ("osprey_request_duration_seconds_sum", frozenset({("api", api)})), 0)
        assert abs(total - sum(stages.values())) < 1e-3, (api, total, stages)
    # Answered: nothing in flight or queued any more.
    assert value(after, "osprey_requests_in_flight") == 0
    assert value(after, "osprey_request_queue_size") == 0


def test_per_topic_request_counts_count_each_partition_and_its_failures(broker):
    """Kafka's BrokerTopicMetrics TotalProduceRequestsPerSec / FailedProduceRequestsPerSec
    and their Fetch pair: each partition of a request for an existing topic counts once,
    and once more as failed when answered with an error. A topic that does not exist
    adds no series."""
    topic = "counted"
    clients.create_topic(broker, topic)
    batch = kw.record_batch([(None, b"v")])
    with kw.Conn(broker.host, broker.port) as conn:
        for i in range(2):
            _, parts = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(i, topic, 0, batch)))
            assert parts[0][2] == kw.NONE, parts
        _, parts = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(2, topic, 9, batch)))
        assert parts[0][2] == UNKNOWN_TOPIC_OR_PARTITION, parts
        _, parts = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(3, "never-created", 0, batch)))
        assert parts[0][2] == UNKNOWN_TOPIC_OR_PARTITION, parts
        _, parts = kw.parse_fetch_v4(conn.roundtrip(kw.fetch_v4(4, topic, 0, 0)))
        assert parts[0][2] == kw.NONE and parts[0][4], parts
        _, parts = kw.parse_fetch_v4(conn.roundtrip(kw.fetch_v4(5, topic, 0, 1000, max_wait_ms=0)))
        assert parts[0][2] == OFFSET_OUT_OF_RANGE, parts
    samples = scrape_until(
        broker,
        lambda s: value(s, "osprey_requests_total", api="Produce") == 4 and value(s, "osprey_requests_total", api="Fetch") == 2,
        what="the raw requests counted",
    )
    assert value(samples, "osprey_topic_produce_requests_total", topic=topic) == 3
    assert value(samples, "osprey_topic_failed_produce_requests_total", topic=topic) == 1
    assert value(samples, "osprey_topic_fetch_requests_total", topic=topic) == 2
    assert value(samples, "osprey_topic_failed_fetch_requests_total", topic=topic) == 1
    assert not [n for n, ls in samples if ("topic", "never-created") in ls]
    # Every request is timed in every stage.
    for name in STAGES:
        assert stage(samples, "Produce", name, "count") == 4, name
        assert stage(samples, "Fetch", name, "count") == 2, name


def test_partition_gauges_show_the_log_start_offset_and_segments(broker):
    """Kafka's `kafka.log:type=Log` LogStartOffset and NumLogSegments: a segment per
    batch or so (segment.ms=1 rolls at the first append a millisecond after the segment
    began), then DeleteRecords moves the start."""
    from confluent_kafka import TopicPartition

    topic = "segmented"
    clients.create_topic(broker, topic, config={"segment.ms": "1"})
    p = clients.producer(broker, acks="all", **{"linger.ms": 0})
    for i in range(6):
        assert [r.error for r in clients.produce_all(p, topic, [{"value": b"m%d" % i}])] == [None]
    a = clients.admin(broker)
    deleted = a.delete_records([TopicPartition(topic, 0, 4)], request_timeout=clients.TIMEOUT_S)
    for f in deleted.values():
        f.result(timeout=clients.TIMEOUT_S)
    samples = scrape_until(
        broker,
        lambda s: value(s, "osprey_partition_log_start_offset", topic=topic, partition="0") == 4,
        what="the log start offset moved to 4",
    )
    assert value(samples, "osprey_partition_log_end_offset", topic=topic, partition="0") == 6
    # Segments wholly below the start may already be gone; those from offset 4 on stay.
    assert value(samples, "osprey_partition_log_segments", topic=topic, partition="0") >= 2


def test_group_gauges_show_members_and_committed_offsets(broker):
    """A classic group with one subscribed member and a commit: its member count and its
    committed offset (kafka_exporter's kafka_consumergroup_members / _current_offset);
    once the member leaves, the count is 0 and the offset stays."""
    from confluent_kafka import TopicPartition

    topic, group = "membered", "membered-group"
    clients.create_topic(broker, topic)
    clients.produce_all(clients.producer(broker, acks="all"), topic, [{"value": b"m%d" % i} for i in range(10)])
    c = clients.consumer(broker, **{"group.id": group, "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not c.assignment():
            assert time.monotonic() < deadline, "never assigned"
            c.poll(0.2)
        c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        labels = {"group": group, "topic": topic, "partition": "0"}
        samples = scrape_until(
            broker,
            lambda s: value(s, "osprey_group_members", group=group) == 1
            and value(s, "osprey_consumer_committed_offset", **labels) == 4,
            what="one member and the commit shown",
        )
        assert value(samples, "osprey_consumer_lag", **labels) == 6
    finally:
        c.close()
    samples = scrape_until(broker, lambda s: value(s, "osprey_group_members", group=group) == 0, what="the member gone")
    assert value(samples, "osprey_consumer_committed_offset", **labels) == 4


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time the kernel has charged process `pid` (proc(5))."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[14 - 3]) + int(fields[15 - 3])) / os.sysconf("SC_CLK_TCK")


def check_process_metrics(endpoint, pid: int, started_after: float):
    """The standard process metrics `endpoint` serves describe process `pid`, started
    after `started_after` (seconds since the epoch); the build info names the crate's
    version."""
    import tomllib

    # CPU time is charged a clock tick at a time: an idle node may show none yet, so the
    # scrape's figure is checked against the kernel's, read on either side of it.
    cpu_before = cpu_seconds(pid)
    samples = scrape(endpoint)
    cpu_after = cpu_seconds(pid)
    now = time.time()
    assert started_after - 1 <= value(samples, "process_start_time_seconds") <= now + 1
    assert cpu_before <= value(samples, "process_cpu_seconds_total") <= cpu_after
    with open(f"/proc/{pid}/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    resident = value(samples, "process_resident_memory_bytes")
    assert rss_kib * 1024 / 2 <= resident <= rss_kib * 1024 * 2, (resident, rss_kib)
    assert value(samples, "process_virtual_memory_bytes") >= resident
    open_fds = value(samples, "process_open_fds")
    assert 3 <= open_fds <= value(samples, "process_max_fds")
    assert abs(open_fds - len(os.listdir(f"/proc/{pid}/fd"))) <= 10
    cargo = tomllib.loads((REPO_ROOT / "Cargo.toml").read_text())
    version = cargo["workspace"]["package"]["version"]
    assert samples[("osprey_build_info", frozenset({("version", version)}))] == 1
    assert value(samples, "osprey_runtime_workers") >= 1
    assert value(samples, "osprey_runtime_worker_busy_seconds_total") > 0
    assert value(samples, "osprey_runtime_global_queue_depth") >= 0


def test_process_metrics_and_build_info_describe_the_broker(start_broker):
    started_after = time.time()
    broker = start_broker()
    clients.create_topic(broker, "processed")
    check_process_metrics(broker, broker.pid, started_after)


def test_a_controller_only_node_serves_process_metrics_and_build_info(tmp_path):
    from cluster import Cluster, Node

    started_after = time.time()
    quorum = Cluster(tmp_path, [Node(tmp_path, 1, "controller")])
    node = quorum.nodes[0]
    quorum.start()
    try:
        quorum.wait_for("its /metrics", lambda: node.gauge("osprey_build_info") == 1)

        class Endpoint:
            metrics_url = f"http://127.0.0.1:{node.metrics_port}/metrics"

        check_process_metrics(Endpoint, node.proc.pid, started_after)
    finally:
        quorum.stop()
