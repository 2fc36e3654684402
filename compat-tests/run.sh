#!/usr/bin/env bash
# Compatibility tests: the real osprey binary driven by real Kafka clients
# (confluent-kafka, i.e. librdkafka) and by raw sockets, with pytest; the chaos tool's
# checker tests and quick seeds (chaos/); then the Java suite (java-tests.sh) and franz-go's own kgo
# tests (franz-go-kgo.sh).
# Usage: compat-tests/run.sh [pytest args...], e.g. -k durability; the arguments go to
# pytest only, the chaos, Java and franz-go suites run whole.
# Fails on any test failure, and when no test ran at all.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

# Every suite below runs against the optimised `compat` build (debug assertions and
# overflow checks kept; scripts/build-compat-osprey.sh says why), unless OSPREY_BIN names
# another binary.
if [ -z "${OSPREY_BIN:-}" ]; then
    OSPREY_BIN="$("$root/scripts/build-compat-osprey.sh")"
fi
export OSPREY_BIN
"$here/setup-venv.sh"
# kcat where it can be installed (Debian's package); its tests skip, visibly, without it.
if ! command -v kcat >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq kcat >/dev/null) \
        || echo "compat-tests: kcat could not be installed; its tests will be skipped" >&2
fi

# Debian's prometheus (promtool and the server), prometheus-node-exporter and systemd
# (systemd-analyze): promtool lints the metrics endpoint (skipped without it), and
# test_deploy.py checks the deploy recipes with all of them (it fails without them).
missing=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v prometheus-node-exporter >/dev/null 2>&1 || missing+=(prometheus-node-exporter)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
# openssl: test_tls.py makes its certificates with it.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 \
        || (apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null)) \
        || echo "compat-tests: ${missing[*]} could not be installed; test_deploy.py will fail" >&2
fi

# Go (on the machine; franz-go-kgo.sh below needs it too): test_kubernetes.py builds
# kubeconform and takes Kubernetes' OpenAPI document from the Go module proxy.
if ! command -v go >/dev/null 2>&1; then
    echo "compat-tests: go is not installed; test_kubernetes.py and franz-go-kgo.sh will fail" >&2
fi

# Kafka 4.4's jars (bench/scratch/kafka-lib, as the benchmark uses them): the quorum test
# drives Kafka's kafka-metadata-quorum tool against osprey's controllers.
# shellcheck source=bench/setup.sh
(here="$root/bench" && source "$root/bench/setup.sh")

status=0
started=$(date +%s)
took() { echo "compat-tests: $1 done at $(( $(date +%s) - started )) s (status so far $status)"; }
"$here/.venv/bin/python" -m pytest "$here/python" -q -ra \
    -p no:cacheprovider --timeout=120 --timeout-method=signal "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "compat-tests: pytest collected no tests; that counts as a failure" >&2
    status=1
fi
took pytest
# The chaos tool (chaos/, issue 17): the history checker's own tests, then its quick
# seeds (three 3-node clusters under kills, pauses, rolling restarts and, as root, network
# partitions, with every workload: about five minutes), whatever pytest said.
"$here/.venv/bin/python" -m pytest "$here/chaos" -q -p no:cacheprovider || status=$?
"$here/.venv/bin/python" "$here/chaos/run.py" quick || status=$?
took chaos
# The Java client and Kafka's own tools (Maven), whatever pytest said.
"$here/java-tests.sh" || status=$?
took java
# franz-go's own kgo integration tests (Go), whatever the others said.
"$here/franz-go-kgo.sh" || status=$?
took franz-go
exit "$status"
