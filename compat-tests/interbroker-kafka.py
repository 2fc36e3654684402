#!/usr/bin/env python3
"""The inter-broker client (crates/server/src/interbroker) against Apache Kafka 4.4.

Starts one Kafka KRaft node (bench/bench.py's KafkaBroker) on loopback ports, then runs
the ignored Rust test that drives the client against it: ApiVersions, CreateTopics,
Metadata, Produce and Fetch on the broker listener, and the ApiVersions table of the
controller listener. Exits with the test's status.

Usage: compat-tests/.venv/bin/python compat-tests/interbroker-kafka.py [KAFKA_LIB_DIR]
       (default bench/scratch/kafka-lib in this repository, where bench/run.sh puts the jars)
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import bench  # noqa: E402


def main():
    kafka_lib = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1] / "bench" / "scratch" / "kafka-lib")
    with tempfile.TemporaryDirectory(prefix="osprey-interbroker-kafka-") as tmp:
        kafka = bench.KafkaBroker(Path(tmp), kafka_lib)
        try:
            kafka.start()
            env = dict(os.environ,
                       OSPREY_KAFKA_BOOTSTRAP=kafka.bootstrap,
                       OSPREY_KAFKA_CONTROLLER=f"127.0.0.1:{kafka.controller_port}")
            test = "api_versions_metadata_create_topics_produce_fetch_round_trip_against_kafka"
            done = subprocess.run(
                ["cargo", "test", "-p", "osprey-server", "--test", "interbroker", "--",
                 "--ignored", "--exact", test],
                cwd=ROOT, env=env)
            return done.returncode
        finally:
            kafka.stop()
            bench.kill_all()


if __name__ == "__main__":
    sys.exit(main())
