#!/usr/bin/env bash
# Coordinator failover, issue 16's figures: the group coordinator (classic and KIP-848
# groups) and the transaction coordinator killed with SIGKILL, 3 Osprey nodes against 3
# Kafka nodes, each round on fresh clusters (method: bench/coordinators.py).
# Report: bench/results/COORDINATORS.md (with --quick: one round, its report in
# bench/scratch/coordinators/, a smoke test that leaves the results alone).
#
#   bench/coordinators.sh [--variants kafka,osprey] [--rounds 3] [--quick] [--note TEXT]
#
# Builds osprey in release, fetches Kafka and makes the venv (bench/release.sh).
exec "$(dirname "${BASH_SOURCE[0]}")/release.sh" coordinators 7200 "$@"
