#!/usr/bin/env bash
# Failover figures of a 3-node cluster, Apache Kafka and Osprey side by side (method:
# bench/cluster.py). Report: bench/results/CLUSTER.md.
#
#   bench/cluster.sh [--variants kafka,kafka-rf1,osprey] [--reps 3] [--note TEXT]
#
# Builds osprey in release, fetches Kafka and makes the venv (bench/release.sh).
exec "$(dirname "${BASH_SOURCE[0]}")/release.sh" cluster 3600 "$@"
