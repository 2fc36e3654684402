#!/usr/bin/env bash
# Builds the broker the compatibility suites run against (compat-tests/run.sh): Cargo's
# `compat` profile, optimised as a release build is, with the debug build's debug
# assertions and overflow checks kept. Prints the binary's path last, on stdout; cargo's
# own output goes to stderr.
#
# Why optimised: several suites have fixed time budgets written against an optimised
# Kafka (franz-go's TestTxnEtl must end each transaction within its 60 s timeout,
# TestShareGroupETL must move 500,000 records in 4 minutes), and the unoptimised debug
# build, on 2 cores shared with the clients, sometimes ran out of them for want of
# throughput (issue 21's notes of 2026-12-07). The checks stay, so an overflow or a
# broken debug assertion still fails a test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --profile compat -p osprey-server --bin osprey >&2
dir="${CARGO_TARGET_DIR:-target}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
echo "$dir/compat/osprey"
