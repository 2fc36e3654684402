#!/usr/bin/env bash
# Many partitions, osprey against Apache Kafka 4.4 on this machine: partitions created per
# second, and start-up and shutdown time, memory and open files with 1,000 to 50,000
# partitions. Report: bench/results/PARTITIONS.md (and partitions.json).
#
#   bench/partitions.sh [--creation 1000,10000] [--lifecycle 1000,10000,50000] [--brokers osprey,kafka]
#
# Builds osprey in release, fetches Kafka and makes the venv (bench/release.sh); each
# figure uses a fresh broker on free ports and a temp directory.
exec "$(dirname "${BASH_SOURCE[0]}")/release.sh" partitions 7200 "$@"
