#!/usr/bin/env bash
# Offset commits after every message (segmentio/kafka-go's default), osprey against
# Kafka 4.4, side by side. Report: bench/results/COMMITS.md (and commits.json).
#
#   bench/commits.sh [--readers 1,8,32] [--messages 3000] [--reps 3] [--note TEXT] [--variants kafka+osprey+...]
#   bench/commits.sh --quick     # smoke test (scripts/test.sh): the debug build, tiny sizes, seconds
#
# Builds osprey (release; --quick reuses the debug build the tests compiled) and
# bench/commitbench (Go), fetches Kafka and makes the venv as bench/run.sh does. The
# quick run's report goes to bench/scratch/commits-quick and means nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

if [ "${1:-}" = --quick ]; then
    shift
    "$root/scripts/build-debug-osprey.sh"
    osprey="$root/target/debug/osprey" out="$here/scratch/commits-quick" bound_s=300
    set -- --readers 1,2 --messages 20 --reps 1 --variants kafka+osprey "$@"
else
    cargo build --release --locked -p osprey-server --bin osprey
    osprey="$root/target/release/osprey" out="$here/results" bound_s=3600
fi
mkdir -p "$here/scratch"
(cd "$here/commitbench" && go build -o "$here/scratch/commitbench" .)

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 "$bound_s" "$venv/bin/python" "$here/commits.py" \
    --kafka-lib "$kafka_lib" --osprey-bin "$osprey" \
    --commitbench "$here/scratch/commitbench" \
    --workdir "$here/scratch/commits" --out "$out" "$@"
