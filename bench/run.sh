#!/usr/bin/env bash
# Osprey against Apache Kafka 4.4, side by side, on this machine.
#
#   bench/run.sh full [--note "what else ran"] [--reps N] [--variants kafka,osprey,...]   # by hand: figures in bench/results/
#   bench/run.sh quick                                      # smoke test (scripts/test.sh): seconds
#   bench/run.sh cold [--reps N]                            # the restart and cold-log read alone
#   bench/run.sh pinned [--note TEXT] [--reps N]            # full's workloads, broker on CPU 0, clients on CPU 1
#
# Fetches the Kafka broker and tools from Maven Central (bench/pom.xml), builds osprey
# (release for full; quick reuses the debug build that the tests already compiled),
# makes bench/scratch/venv (confluent-kafka, matplotlib) and runs bench/bench.py, which
# alternates the brokers and kills both on any failure. Exits non-zero when a workload
# failed; the last line says how many figures were obtained.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

mode="${1:-quick}"
shift || true
case "$mode" in
    quick) profile=debug; out="$here/scratch/quick"; bound_s=300 ;;
    full) profile=release; out="$here/results"; bound_s=7200 ;;
    cold) profile=release; out="$here/results/cold"; bound_s=3600 ;;
    pinned) profile=release; out="$here/results/pinned"; bound_s=7200 ;;
    *) echo "usage: bench/run.sh quick|full|cold|pinned [--note TEXT] [--reps N] [--variants kafka,...]" >&2; exit 2 ;;
esac

if [ "$profile" = release ]; then
    cargo build --release --locked -p osprey-server --bin osprey
else
    "$here/../scripts/build-debug-osprey.sh"
fi

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

# The bound is a backstop: bench.py bounds each tool and broker start itself, and on
# SIGTERM kills the brokers before it exits.
exec timeout --kill-after=30 "$bound_s" "$venv/bin/python" "$here/bench.py" --mode "$mode" \
    --kafka-lib "$kafka_lib" --osprey-bin "$root/target/$profile/osprey" --profile "$profile" \
    --out "$out" --workdir "$here/scratch/tmp" "$@"
