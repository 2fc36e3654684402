#!/usr/bin/env bash
# Offset commits after every message (segmentio/kafka-go's default), osprey against
# Kafka 4.4, side by side. Report: bench/results/COMMITS.md (and commits.json).
#
#   bench/commits.sh [--readers 1,8,32] [--messages 3000] [--reps 3] [--note TEXT] [--variants kafka+osprey+...]
#
# Builds osprey in release and bench/commitbench (Go), fetches Kafka and makes the venv
# as bench/run.sh does.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

cargo build --release --locked -p osprey-server --bin osprey
mkdir -p "$here/scratch"
(cd "$here/commitbench" && go build -o "$here/scratch/commitbench" .)

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 3600 "$venv/bin/python" "$here/commits.py" \
    --kafka-lib "$kafka_lib" --osprey-bin "$root/target/release/osprey" \
    --commitbench "$here/scratch/commitbench" \
    --workdir "$here/scratch/commits" --out "$here/results" "$@"
