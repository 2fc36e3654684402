#!/usr/bin/env bash
# franz-go's own kgo integration tests (package github.com/twmb/franz-go/pkg/kgo, the
# module's *_test.go files) against a live Osprey, as the franz-go project runs them
# against Apache Kafka: KGO_SEEDS names the broker, KGO_TEST_RF=1 for a single node.
#
# The pinned module comes through the Go module proxy into GOMODCACHE; the module cache
# is read-only, so it is copied into compat-tests/go/kgo-scratch/ (gitignored) and
# `go test` runs there. Nothing of franz-go is kept in this repository.
#
# Usage: compat-tests/franz-go-kgo.sh [go test -run REGEX]
# Without a REGEX the whole suite runs, the tests on RUN_ALONE below after the others.
# OSPREY_BIN names the broker binary; by default the script builds and runs the optimised
# `compat` build, never the debug build, whose throughput the suite's fixed time budgets
# do not allow for (scripts/build-compat-osprey.sh says which tests and why).
# KGO_SEEDS set in the environment skips starting Osprey and tests that broker instead
# (this is how the suite's baseline against Apache Kafka is taken).
# Exits non-zero when a test fails that is not on EXPECTED_FAILURES below, when a test
# skips that is not on EXPECTED_SKIPS, when a listed test passes (so the lists cannot
# go stale), when the run times out, or when no test ran.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

FRANZ_GO_VERSION=v1.22.3
# The whole suite's bound (franz-go's own CI gives Kafka 5m on faster runners; here a
# loaded 2-core machine took about 6.5 min).
GO_TEST_TIMEOUT="${GO_TEST_TIMEOUT:-10m}"

# Tests known to fail against Osprey, each with its cause. Empty: every test that
# passes against Kafka 4.4 must pass here.
EXPECTED_FAILURES=(
)
# Open defects of Osprey that make a test fail in some runs and pass in others: a failure
# is printed in full and NOT counted, a pass is fine. Each names its cause (or what is known
# of it) and where it is tracked; take it off once fixed. Never a place for a test that
# fails every time.
INTERMITTENT=(
    # Known intermittent failures of open defects, each with what is known of it; empty now.
    # TestShareGroupETL was here (issue 20) until ShareFetch waited for MinBytes as Kafka's
    # DelayedShareFetch (02ffaaa); its later timeouts were the debug build's (RUN_ALONE).
)
# Tests the whole suite runs on their own, one at a time, after the others (each with its
# cause): the same unmodified test with the same budget, only not beside the others. A
# listed test that no longer runs fails the run, so the list cannot go stale.
RUN_ALONE=(
    # Empty. TestShareGroupETL was here while the suite ran against the debug build (its
    # ShareAcknowledge round trip took 16 ms beside TestGroupETL and TestTxnEtl instead of
    # 2.5 ms alone, and it ran out of its 4 minutes); against the `compat` build it passes
    # beside the others.
)
# The tests that may skip. Against a single Kafka 4.4 node the suite gives 152 passed,
# 0 failed, 4 skipped: the first two below and the SCRAM tests (added below when no
# SASL listener is given). Any other skip is a test Kafka passes and
# Osprey dodges (e.g. a version no longer advertised), so it fails the run.
EXPECTED_SKIPS=(
    # Kafka 4 lists Produce v0-2 in ApiVersions (and refuses them), as Osprey does; the
    # test only runs against a broker that does not list them.
    TestIssueProduceBrokerTooOldFailsRecords
    # Needs an OAUTHBEARER listener (KGO_TEST_OAUTH_SEEDS), which Osprey does not serve;
    # franz-go's own Kafka run sets one up that the baseline above leaves out. The SCRAM
    # tests run against the SASL_PLAINTEXT listener started below.
    TestOAuthAuth
)

run_regex="${1:-.}"

if ! command -v go >/dev/null 2>&1; then
    echo "franz-go-kgo: go is not installed" >&2
    exit 1
fi

scratch="$here/go/kgo-scratch"
mkdir -p "$scratch"
src="$(cd "$here/go" && go mod download -json "github.com/twmb/franz-go@$FRANZ_GO_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [ -z "$src" ] || [ ! -d "$src/pkg/kgo" ]; then
    echo "franz-go-kgo: could not download github.com/twmb/franz-go@$FRANZ_GO_VERSION" >&2
    exit 1
fi
module="$scratch/franz-go-$FRANZ_GO_VERSION"
if [ ! -f "$module/go.mod" ]; then
    rm -rf "$module"
    cp -r "$src" "$module.tmp"
    chmod -R u+w "$module.tmp"
    mv "$module.tmp" "$module"
fi

# Each run keeps its broker log and go test output until the next run.
rm -rf "$scratch"/run.*
work="$(mktemp -d "$scratch/run.XXXXXX")"
broker_pid=""
cleanup() {
    if [ -n "$broker_pid" ]; then
        kill -TERM "$broker_pid" 2>/dev/null || true
        wait "$broker_pid" 2>/dev/null || true
    fi
    rm -rf "$work/data"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

if [ -z "${KGO_SEEDS:-}" ]; then
    bin="${OSPREY_BIN:-}"
    if [ -z "$bin" ]; then
        bin="$("$root/scripts/build-compat-osprey.sh")"
    fi
    if [ ! -x "$bin" ]; then
        echo "franz-go-kgo: OSPREY_BIN=$bin is not an executable" >&2
        exit 1
    fi
    port="$(free_port)"
    sasl_port="$(free_port)"
    metrics_port="$(free_port)"
    # Kafka's shipped server.properties sets group.initial.rebalance.delay.ms=0, and so
    # does the Kafka baseline: new groups form at once (the suite makes many).
    "$bin" \
        --override "listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$sasl_port" \
        --override "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512" \
        --override "log.dirs=$work/data" \
        --override "metrics.listener=127.0.0.1:$metrics_port" \
        --override "group.initial.rebalance.delay.ms=0" \
        >"$work/broker.log" 2>&1 &
    broker_pid=$!
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
        if ! kill -0 "$broker_pid" 2>/dev/null; then
            echo "franz-go-kgo: osprey exited at startup:" >&2
            cat "$work/broker.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    export KGO_SEEDS="127.0.0.1:$port"
    # TestSCRAMAuth logs in as this user, created as an operator would
    # (AlterUserScramCredentials, with confluent-kafka from compat-tests/.venv).
    "$here/.venv/bin/python" - "127.0.0.1:$port" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
upsert = UserScramCredentialUpsertion("kgo", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"kgo-secret")
admin.alter_user_scram_credentials([upsert])["kgo"].result(timeout=30)
PY
    export KGO_TEST_SCRAM_SEEDS="127.0.0.1:$sasl_port"
    export KGO_TEST_SCRAM="kgo:kgo-secret:512"
fi
export KGO_TEST_RF=1
if [ -z "${KGO_TEST_SCRAM_SEEDS:-}" ]; then
    # A broker given in KGO_SEEDS without a SASL listener: the SCRAM tests skip.
    EXPECTED_SKIPS+=(TestSCRAMAuth TestSCRAMAuthBadCredentials)
fi

echo "franz-go-kgo: franz-go $FRANZ_GO_VERSION kgo tests against $KGO_SEEDS (log: $work)"
status=0
go_test() {
    local started=$(date +%s) code=0
    (cd "$module" && go test ./pkg/kgo/ -count=1 -timeout "$GO_TEST_TIMEOUT" -json "$@") \
        >>"$work/go-test.json" 2>>"$work/go-test.stderr" || code=$?
    echo "franz-go-kgo: go test $* took $(($(date +%s) - started)) s (exit $code)"
    [ "$code" -eq 0 ] || status=$code
}
alone=""
if [ "$run_regex" = . ]; then
    alone="${RUN_ALONE[*]}"
    go_test -skip "^(${alone// /|})\$"
    for t in "${RUN_ALONE[@]}"; do
        go_test -run "^$t\$"
    done
else
    go_test -run "$run_regex"
fi

python3 - "$work/go-test.json" "$status" "${EXPECTED_FAILURES[*]}" "${EXPECTED_SKIPS[*]}" \
    "$([ -n "$broker_pid" ] && echo osprey || echo other)" "${INTERMITTENT[*]}" "$alone" <<'EOF'
import json, re, sys
path, status = sys.argv[1], int(sys.argv[2])
run_alone = sys.argv[7].split()
expected, expected_skips = set(sys.argv[3].split()), set(sys.argv[4].split())
intermittent = set(sys.argv[6].split())
# The lists describe Osprey; another broker (the Kafka baseline) passes what Osprey skips.
osprey = sys.argv[5] == "osprey"
result, output = {}, {}
for line in open(path, encoding="utf-8", errors="replace"):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    test = event.get("Test")
    if not test or "/" in test:  # top-level tests only; subtests fail their parent
        continue
    if event["Action"] == "output":
        output.setdefault(test, []).append(event["Output"])
    elif event["Action"] in ("pass", "fail", "skip"):
        result[test] = event["Action"]
    elif event["Action"] == "run":
        result.setdefault(test, "unfinished")
def show(test):
    # The test's own lines (t.Log, t.Error, t.Fatal: "share_test.go:679: timed out: ...")
    # first, then the end of its output (mostly the client's log).
    lines = output.get(test, [])
    own = [l for l in lines if re.match(r"\s+\w+_test\.go:\d+: ", l)]
    sys.stdout.write("  its own log lines:\n" + "".join(own[-30:]))
    sys.stdout.write("  the end of its output:\n" + "".join(lines[-25:]))
count = lambda what: sorted(t for t, r in result.items() if r == what)
passed, failed, skipped, unfinished = count("pass"), count("fail"), count("skip"), count("unfinished")
bad = []
print(f"franz-go-kgo: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped, {len(unfinished)} unfinished")
for t in skipped:
    # The t.Skip line, e.g. "share_test.go:38: broker does not support share groups ...".
    reason = next((l.strip() for l in output.get(t, []) if re.match(r"\s*\w+_test\.go:\d+: ", l)), "")
    print(f"  skipped {t}: {reason}")
    if t not in expected_skips:
        print(f"  {t} skipped but is not on the expected-skip list: Kafka 4.4 runs it")
        bad.append(t)
for t in failed + unfinished:
    if osprey and t in intermittent and result[t] == "fail":
        print(f"  KNOWN INTERMITTENT failure {t}: an open defect, not counted (see INTERMITTENT)")
        show(t)
        continue
    tag = "expected failure" if t in expected else "FAILED"
    print(f"  {tag} {t} ({result[t]})")
    if t not in expected or not osprey:
        bad.append(t)
        show(t)
for t in sorted(expected):
    if osprey and result.get(t) == "pass":
        print(f"  {t} is on the expected-failure list but passed: take it off")
        bad.append(t)
for t in sorted(expected_skips):
    if osprey and result.get(t) == "pass":
        print(f"  {t} is on the expected-skip list but passed: take it off")
        bad.append(t)
for t in run_alone:
    if t not in result:
        print(f"  {t} is on RUN_ALONE but did not run: take it off")
        bad.append(t)
if not result:
    print("franz-go-kgo: no test ran")
    bad.append("(none ran)")
if status != 0 and not failed and not unfinished:
    print("franz-go-kgo: go test failed without a failing test (build error or timeout?)")
    bad.append("(go test)")
sys.exit(1 if bad else 0)
EOF
