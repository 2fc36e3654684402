#!/usr/bin/env bash
# Builds target/debug/osprey, the binary the quick benchmarks run (and a compatibility
# suite run on its own; compat-tests/run.sh uses scripts/build-compat-osprey.sh), unless scripts/test.sh says its `cargo test --workspace` already built it (cargo
# builds a package's binaries for its integration tests). Building it again with
# `cargo build -p osprey-server` would compile every dependency a second time, with the
# binary's own features instead of those the tests unify: gigabytes more in target/ and
# minutes on two cores, for the same program.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${OSPREY_BUILT_BY_CARGO_TEST:-}" = 1 ] && [ -x target/debug/osprey ]; then
    exit 0
fi
cargo build --locked -p osprey-server --bin osprey
