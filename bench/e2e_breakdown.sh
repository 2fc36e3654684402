#!/usr/bin/env bash
# EndToEndLatency broken down into the broker's part and the client's, from loopback
# packets (method in bench/e2e_breakdown.py). Report: bench/results/E2E-BREAKDOWN.md.
#
#   bench/e2e_breakdown.sh [--rounds 3] [--messages 5000] [--variants kafka,osprey,osprey-nofsync] [--note TEXT]
#   bench/e2e_breakdown.sh --quick    # smoke test (scripts/test.sh): the debug build, osprey
#                                     # only, 300 records; report in bench/scratch/, figures meaningless
#
# Builds osprey in release (--quick: the debug build the tests compiled), fetches Kafka
# (its EndToEndLatency tool) and makes the venv as bench/run.sh does, and installs tcpdump
# (Debian's package) when it is missing and this runs as root.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

if ! command -v tcpdump >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get install -y -qq tcpdump >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq tcpdump >/dev/null)
    else
        echo "e2e_breakdown: needs tcpdump (and the right to capture on lo)" >&2
        exit 1
    fi
fi
if [ "${1:-}" = --quick ]; then
    shift
    "$root/scripts/build-debug-osprey.sh"
    bin="$root/target/debug/osprey"
    set -- --variants osprey --rounds 1 --messages 300 --out "$here/scratch/e2e-breakdown-quick" "$@"
else
    cargo build --release --locked -p osprey-server --bin osprey
    bin="$root/target/release/osprey"
    set -- --out "$here/results" "$@"
fi
# shellcheck source=bench/setup.sh
source "$here/setup.sh"
exec timeout --kill-after=30 3600 "$venv/bin/python" "$here/e2e_breakdown.py" \
    --kafka-lib "$kafka_lib" --osprey-bin "$bin" --workdir "$here/scratch/e2e-breakdown" "$@"
