#!/usr/bin/env bash
# Replicated throughput, latency, cost and failover: 3 Osprey nodes against 3 Kafka nodes,
# replication factor 3, min.insync.replicas=2, acks=all (method: bench/replicated.py).
# Report: bench/results/REPLICATED.md (with --quick: bench/scratch/replicated/REPLICATED.md,
# a smoke test that leaves the results alone).
#
#   bench/replicated.sh [--variants kafka,osprey,osprey-nofsync] [--reps N] [--quick] [--records N] [--note TEXT]
#
# Builds osprey in release, fetches Kafka and makes the venv as bench/run.sh does.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

cargo build --release --locked -p osprey-server --bin osprey

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 3600 "$venv/bin/python" "$here/replicated.py" \
    --kafka-lib "$kafka_lib" --osprey-bin "$root/target/release/osprey" \
    --workdir "$here/scratch/replicated" --out "$here/results" "$@"
