#!/usr/bin/env bash
# Produce latency (acks=all, one in flight) on one partition while another topic rolls
# segments and the log cleaner compacts a large topic. Report: bench/results/LATENCY.md
# (and latency-LABEL.json per run; the report has one column per label).
#
#   bench/latency.sh --label before [--loaded-s 60] [--quiet-s 15] [--compact-mib 256] [--note TEXT]
#   bench/latency.sh --label before --osprey-bin PATH --revision REV   # a binary built elsewhere
#
# Builds osprey in release and makes the venv as bench/run.sh does (Kafka is not needed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

cargo build --release --locked -p osprey-server --bin osprey

need_kafka=0
# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 1800 "$venv/bin/python" "$here/latency.py" \
    --osprey-bin "$root/target/release/osprey" \
    --workdir "$here/scratch/latency" --out "$here/results" "$@"
