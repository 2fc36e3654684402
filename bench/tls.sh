#!/usr/bin/env bash
# Produce and consume throughput and broker CPU per GiB over TLS against PLAINTEXT, Osprey
# and Kafka 4.4 side by side (issue 18). Report: bench/results/TLS.md (and tls.json).
#
#   bench/tls.sh [--records 300000] [--reps 3] [--note TEXT]
#
# Builds osprey in release, fetches Kafka and makes the venv as bench/run.sh does; needs
# the openssl command (Debian's openssl package) for the certificates.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

cargo build --release --locked -p osprey-server --bin osprey

# shellcheck source=bench/setup.sh
source "$here/setup.sh"

exec timeout --kill-after=30 3600 "$venv/bin/python" "$here/tls.py" \
    --osprey-bin "$root/target/release/osprey" --kafka-lib "$kafka_lib" \
    --workdir "$here/scratch/tls" --out "$here/results" "$@"
