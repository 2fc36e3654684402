#!/usr/bin/env bash
# Runs bench/NAME.py against a release build of osprey and Apache Kafka: the shared body
# of bench/cluster.sh, bench/partitions.sh and bench/replicated.sh.
#
#   bench/release.sh NAME BOUND_S [ARGS...]
#
# Builds osprey in release, fetches Kafka and makes the venv (bench/setup.sh), then runs
# bench/NAME.py with the Kafka jars, that binary, bench/scratch/NAME as its work directory
# and bench/results for its report, followed by ARGS. BOUND_S is a backstop: each script
# bounds its own steps.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

name="$1"
bound_s="$2"
shift 2

cargo build --release --locked -p osprey-server --bin osprey

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 "$bound_s" "$venv/bin/python" "$here/$name.py" \
    --kafka-lib "$kafka_lib" --osprey-bin "$root/target/release/osprey" \
    --workdir "$here/scratch/$name" --out "$here/results" "$@"
