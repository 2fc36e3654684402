#!/usr/bin/env bash
# Runs every test of the project: formatting, lints, unit, property, golden and
# integration tests, then the compatibility tests against real clients. Installs what
# it needs (Python packages, Maven artifacts, Go modules) on the way.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints the time since the start, so a slow run shows where its time went.
started=$(date +%s)
step() { printf '\n==> [%d s] %s\n' "$(( $(date +%s) - started ))" "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

# CI builds once from a clean checkout: incremental compilation's caches would only take
# disk (several GB), as would a second build of the dependencies for target/debug/osprey,
# which `cargo test` builds for the server's integration tests and the quick benchmarks
# reuse (scripts/build-debug-osprey.sh). The compatibility suites build their own
# optimised broker (scripts/build-compat-osprey.sh).
export CARGO_INCREMENTAL=0

step "cargo test (unit, property, golden, integration)"
cargo test --workspace --locked
export OSPREY_BUILT_BY_CARGO_TEST=1

step "seeded simulations, optimised, with --cfg tokio_unstable (in target/simulate): 1,000 seeds of each from 3,000,000, then exact replay and the pinned seeds"
# The flag lets the simulations seed Tokio's own generator (scripts/simulate.sh says why);
# its own target directory keeps it out of the workspace's build. The seeds are a fixed
# range that `cargo test` (seeds from 0) and the README's long runs (from 1,000,000) do
# not try; the whole-cluster simulations run an eighth as many.
scripts/simulate.sh 1000 3000000
RUSTFLAGS="${RUSTFLAGS:-} --cfg tokio_unstable" CARGO_TARGET_DIR=target/simulate \
  cargo test --release --locked -p osprey-cluster --test quorum_simulation --test cluster_simulation -- \
    seeds_replay_identically seeds_that_once_failed_pass
RUSTFLAGS="${RUSTFLAGS:-} --cfg tokio_unstable" CARGO_TARGET_DIR=target/simulate \
  cargo test --release --locked -p osprey-coordinator --test cluster_coordinators_simulation --test cluster_txn_simulation \
    seeds_replay_identically

if [ -x compat-tests/run.sh ]; then
  step "compat-tests against real clients"
  compat-tests/run.sh
fi

step "bench/run.sh quick (smoke test of the osprey-vs-Kafka benchmark harness)"
bench/run.sh quick

step "bench/commits.sh --quick (smoke test of the offset-commit benchmark)"
bench/commits.sh --quick

step "bench/e2e_breakdown.sh --quick (smoke test of the EndToEndLatency breakdown)"
bench/e2e_breakdown.sh --quick

step "all tests passed"
