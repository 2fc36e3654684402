#!/usr/bin/env bash
# Java compatibility tests: the real osprey binary driven by kafka-clients 4.4 (producer,
# consumer, Admin) and by Kafka's own command-line tools, with JUnit 5 under Maven Surefire.
# Usage: compat-tests/java-tests.sh [maven args...], e.g. -Dtest=ToolsTest.
# Fails on any test failure, on a run that takes longer than the bound, and when no test ran.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
# About eight minutes once Maven's cache is warm (the three-node failover tests take most), the first run also downloads.
maven_timeout_s="${JAVA_TESTS_TIMEOUT_S:-1500}"

cd "$root"
# compat-tests/run.sh gives the `compat` build; alone, the script builds and runs the debug one.
if [ -z "${OSPREY_BIN:-}" ]; then
    "$root/scripts/build-debug-osprey.sh"
fi
osprey_bin="${OSPREY_BIN:-$root/target/debug/osprey}"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# Not -q: that would hide Surefire's "Tests run:" summary when everything passes.
(cd "$here/java" && timeout --kill-after=30 "$maven_timeout_s" \
    mvn -B --no-transfer-progress test -Dosprey.bin="$osprey_bin" "$@") 2>&1 | tee "$log" || status=$?
if [ "$status" -eq 124 ]; then
    echo "java-tests: Maven did not finish within ${maven_timeout_s}s" >&2
    exit 1
fi
if [ "$status" -ne 0 ]; then
    exit "$status"
fi
if ! grep -Eq '^\[INFO\] Tests run: [1-9][0-9]*, ' "$log"; then
    echo "java-tests: Surefire ran no test; that counts as a failure" >&2
    exit 1
fi
