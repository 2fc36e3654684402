#!/usr/bin/env bash
# Many partitions, osprey against Apache Kafka 4.4 on this machine: partitions created per
# second, and start-up and shutdown time, memory and open files with 1,000 to 50,000
# partitions. Report: bench/results/PARTITIONS.md (and partitions.json).
#
#   bench/partitions.sh [--creation 1000,10000] [--lifecycle 1000,10000,50000] [--brokers osprey,kafka]
#
# Builds osprey in release, fetches Kafka (bench/pom.xml) and makes the venv as
# bench/run.sh does; each figure uses a fresh broker on free ports and a temp directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

cargo build --release --locked -p osprey-server --bin osprey

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 7200 "$venv/bin/python" "$here/partitions.py" \
    --kafka-lib "$kafka_lib" --osprey-bin "$root/target/release/osprey" \
    --workdir "$here/scratch/partitions" --out "$here/results" "$@"
