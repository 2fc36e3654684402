#!/usr/bin/env bash
# Runs every test of the project: formatting, lints, unit, property, golden and
# integration tests, then the compatibility tests against real clients. Installs what
# it needs (Python packages, Maven artifacts, Go modules) on the way.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (unit, property, golden, integration)"
cargo test --workspace --locked

if [ -x compat-tests/run.sh ]; then
  step "compat-tests against real clients"
  compat-tests/run.sh
fi

step "bench/run.sh quick (smoke test of the osprey-vs-Kafka benchmark harness)"
bench/run.sh quick
