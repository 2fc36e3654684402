#!/usr/bin/env bash
# Failover figures of a 3-node cluster, Apache Kafka and Osprey side by side (method:
# bench/cluster.py). Report: bench/results/CLUSTER.md.
#
#   bench/cluster.sh [--variants kafka,kafka-rf1,osprey] [--reps 3] [--note TEXT]
#
# Builds osprey in release, fetches Kafka and makes the venv as bench/run.sh does.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

cargo build --release --locked -p osprey-server --bin osprey

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 3600 "$venv/bin/python" "$here/cluster.py" \
    --kafka-lib "$kafka_lib" --osprey-bin "$root/target/release/osprey" \
    --workdir "$here/scratch/cluster" --out "$here/results" "$@"
