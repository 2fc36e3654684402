#!/usr/bin/env bash
# Replicated throughput, latency, cost and failover: 3 Osprey nodes against 3 Kafka nodes,
# replication factor 3, min.insync.replicas=2, acks=all (method: bench/replicated.py).
# Report: bench/results/REPLICATED.md (with --quick: bench/scratch/replicated/REPLICATED.md,
# a smoke test that leaves the results alone).
#
#   bench/replicated.sh [--variants kafka,osprey,osprey-nofsync] [--reps N] [--quick] [--records N] [--note TEXT]
#
# Builds osprey in release, fetches Kafka and makes the venv (bench/release.sh).
exec "$(dirname "${BASH_SOURCE[0]}")/release.sh" replicated 3600 "$@"
