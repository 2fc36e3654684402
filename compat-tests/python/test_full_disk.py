"""A full disk (issue 17's fault, on one node): a broker whose log directory runs out of
space refuses appends with KAFKA_STORAGE_ERROR (retriable), keeps running and serving what
it has, and takes appends again once space is back. Nothing it acknowledged is lost or
torn, before or after a restart.

The log directory is a small tmpfs that the test mounts, grows and unmounts itself, so it
needs root (CI runs as root); elsewhere the test is skipped.
"""

import re
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import clients

TOPIC = "filling"
VALUE_BYTES = 10_000


@pytest.fixture
def small_fs(tmp_path):
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def storage_errors(broker) -> int:
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    found = re.search(r'^osprey_error_codes_total\{api="Produce",error="KAFKA_STORAGE_ERROR"\} (\d+)', text, re.M)
    return int(found.group(1)) if found else 0


def produce(broker, first: int, count: int):
    """Sends values first..first+count-1 (numbered, padded to VALUE_BYTES) with an
    idempotent acks=all producer; returns ({value number: offset} acknowledged, errors)."""
    p = Producer(dict(clients.COMMON, **{"bootstrap.servers": broker.bootstrap, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 5,
                                         "message.timeout.ms": 8000, "log_level": 0}))
    acked, errors = {}, []

    def delivered(err, msg):
        if err is None:
            acked[int(msg.value()[:8])] = msg.offset()
        else:
            errors.append(err.name())

    for n in range(first, first + count):
        while True:
            try:
                p.produce(TOPIC, value=b"%08d" % n + b"." * (VALUE_BYTES - 8), partition=0, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    return acked, errors


def read_all(broker):
    """[(offset, value number)] of the partition from its start to its end."""
    c = clients.consumer(broker, enable_partition_eof=True)
    try:
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                return got
            got.append((m.offset(), int(m.value()[:8])))
        raise AssertionError(f"the end of {TOPIC} not reached within 60 s; read {len(got)}")
    finally:
        c.close()


# small_fs comes first: fixtures are torn down in reverse, so the broker stops before the
# file system under it is unmounted.
def test_a_full_disk_refuses_appends_with_kafka_storage_error_and_loses_nothing_acknowledged(small_fs, start_broker):
    broker = start_broker({"log.dirs": str(small_fs / "data")})
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": broker.bootstrap}))
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": str(4 << 20)})])[TOPIC].result(30)

    # 24 MB of values into 16 MB: the disk fills on the way.
    acked, errors = produce(broker, 0, 2400)
    assert errors, f"all {len(acked)} values acknowledged: the disk never filled"
    assert broker.proc.poll() is None, f"the broker exited on a full disk:\n{broker.log_tail()}"
    assert storage_errors(broker) > 0, "no Produce answered KAFKA_STORAGE_ERROR"
    assert "No space left on device" in broker.log_tail(100_000)

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    more, errors_after = produce(broker, 10_000, 200)
    assert not errors_after and len(more) == 200, f"appends after space came back: {errors_after}"
    acked.update(more)

    for when in ("with space back", "after a restart"):
        got = read_all(broker)
        offsets = [o for o, _ in got]
        assert offsets == list(range(len(got))), f"{when}: offsets not contiguous from 0"
        at = dict((n, o) for o, n in got)
        lost = {n: o for n, o in acked.items() if at.get(n) != o}
        assert not lost, f"{when}: acknowledged values missing or moved (value: acked offset): {dict(list(lost.items())[:10])}"
        assert len(at) == len(got), f"{when}: a value appears twice"
        if when == "with space back":
            broker.restart()


KAFKA_STORAGE_ERROR = 56
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def test_an_idempotent_producers_batches_after_one_that_failed_on_a_full_disk_wait_for_its_retry(small_fs,
                                                                                              start_broker):
    """A producer pipelines batches (librdkafka keeps up to five in flight). When one fails
    on the full disk, the next does not follow the last written sequence. It must get the
    retriable KAFKA_STORAGE_ERROR: on OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that is not
    the oldest in flight, librdkafka bumps its epoch and renumbers every unacknowledged
    message, so one written but not yet acknowledged is written twice (librdkafka issue
    4953; the chaos runner's `fulldisk` fault found 19 records stored twice that way).
    Raw requests on one connection, as a pipelining producer sends them."""
    import kafkawire as kw
    from cluster import fill_with_ballast

    broker = start_broker({"log.dirs": str(small_fs / "data")})
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": broker.bootstrap}))
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    with kw.Conn(broker.host, broker.port) as conn:
        _, error, producer_id, epoch = kw.parse_init_producer_id_v0(conn.roundtrip(kw.init_producer_id_v0(1, None)))
        assert error == 0, f"InitProducerId: error {error}"
        correlation = 1

        def send(sequence: int, value_bytes: int = 100):
            nonlocal correlation
            correlation += 1
            batch = kw.record_batch([(b"k", b"%08d" % sequence + b"." * value_bytes)],
                                    producer=(producer_id, epoch, sequence))
            _, [(_, _, code, offset)] = kw.parse_produce_v3(conn.roundtrip(kw.produce_v3(correlation, TOPIC, 0, batch)))
            return code, offset

        deadline = time.monotonic() + 30
        while (answer := send(0)) != (0, 0):
            # The new partition's leadership may take a moment.
            assert time.monotonic() < deadline, f"first batch: {answer}"
            time.sleep(0.2)
        ballast = small_fs / "ballast"
        assert fill_with_ballast(ballast) > 0
        try:
            # Larger than a page: tmpfs may fit a small write into the segment's last page.
            assert send(1, value_bytes=64 << 10)[0] == KAFKA_STORAGE_ERROR, "the batch was written on a full disk"
            code, _ = send(2)
            assert code != OUT_OF_ORDER_SEQUENCE_NUMBER, "the batch after the failed one was answered out of order"
            assert code == KAFKA_STORAGE_ERROR, f"error {code}"
        finally:
            ballast.unlink()
        assert send(2)[0] == KAFKA_STORAGE_ERROR, "sequence 2 was taken before the failed sequence 1"
        assert send(1, value_bytes=64 << 10) == (0, 1)
        assert send(2) == (0, 2)
        assert send(2) == (0, 2), "a retry of a written batch is answered with its offset"
    assert [n for _, n in read_all(broker)] == [0, 1, 2]


# ----- a full disk under a controller quorum voter -----------------------------------------

QUORUM_STOPPED = "this node's controller quorum member stopped"


@pytest.mark.timeout(300)
def test_a_voter_whose_metadata_log_cannot_be_written_stops_and_rejoins_once_space_is_back(small_fs, tmp_path):
    """Node 3's data (its metadata log included) is on the small tmpfs, filled to the last
    byte: the next metadata records (topic creations) fail its metadata log write, and the
    node stops with exit code 1 and a line saying why, as Kafka halts, rather than run on
    with a dead voter. Once the space is back it starts again and the cluster is whole."""
    from cluster import Cluster, Node, fill_with_ballast, listed_brokers

    nodes = [Node(tmp_path, i, "broker,controller") for i in (1, 2, 3)]
    nodes[2].dir = small_fs / "data"
    cluster = Cluster(tmp_path, nodes)
    try:
        cluster.start()
        cluster.wait_for_all_voters()
        cluster.wait_for("every node listing the three brokers",
                         lambda: all(listed_brokers(n) == {1, 2, 3} for n in nodes))
        victim = nodes[2]
        ballast = small_fs / "ballast"
        assert fill_with_ballast(ballast) > 0
        admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap(nodes[:2])}))
        deadline = time.monotonic() + 120
        created = 0
        while victim.exited() is None:
            assert time.monotonic() < deadline, f"node 3 still runs on a full disk:\n{victim.log_tail()}"
            # Topics make metadata records, which every voter appends to its log.
            admin.create_topics([NewTopic(f"filler-{created}", 1, 2)])
            created += 1
            time.sleep(0.5)
        assert victim.exited() == 1, f"exit code {victim.exited()}:\n{victim.log_tail()}"
        assert QUORUM_STOPPED in victim.log_tail(100_000), victim.log_tail()
        ballast.unlink()
        victim.proc = None
        victim.start()
        cluster.wait_for("node 3 back: every node listing the three brokers",
                         lambda: all(listed_brokers(n) == {1, 2, 3} for n in nodes), timeout=120)
        cluster.stop()
    finally:
        cluster.kill_all()
