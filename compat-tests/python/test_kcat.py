"""kcat (Debian's build, linked against the system's older librdkafka) as a producer,
consumer and metadata client. `run.sh` installs it where it can; without it these tests
are reported as skipped, not passed."""

import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install kcat)")
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def kcat(broker, *args, stdin: bytes = b"", timeout: float = 30) -> str:
    out = subprocess.run(
        [KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, timeout=timeout, check=False
    )
    assert out.returncode == 0, f"kcat {' '.join(args)} exited {out.returncode}: {out.stderr.decode(errors='replace')}"
    return out.stdout.decode()


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trips_keyed_messages_with_each_codec(broker, codec):
    topic = f"kcat-{codec}"
    lines = [f"k{i % 3}:{codec}-value-{i}" for i in range(50)]
    kcat(broker, "-P", "-t", topic, "-z", codec, "-K:", stdin=("\n".join(lines) + "\n").encode())
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k:%s:%o\n")
    got = out.splitlines()
    assert [g.rsplit(":", 1)[0] for g in got] == lines
    assert [int(g.rsplit(":", 1)[1]) for g in got] == list(range(50))


def test_kcat_lists_brokers_and_topics(broker):
    kcat(broker, "-P", "-t", "kcat-meta", stdin=b"one\n")
    out = kcat(broker, "-L")
    assert "1 brokers:" in out and 'topic "kcat-meta" with 1 partitions' in out, out
