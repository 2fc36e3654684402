#!/bin/sh
# Builds and runs the storage figures (raw disk vs PartitionLog appends, fsync latency,
# sequential read, recovery scan) in a fresh directory under /tmp, removed afterwards.
# Usage: crates/storage/examples/storage_figures.sh [seconds-per-figure] [rounds]
set -eu
cd "$(dirname "$0")/../../.."
cargo build --release -p osprey-storage --example storage_figures
dir=$(mktemp -d /tmp/osprey-figures.XXXXXX)
trap 'rm -rf "$dir"' EXIT
./target/release/examples/storage_figures "$dir" "${1:-3}" "${2:-7}"
