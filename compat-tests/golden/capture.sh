#!/usr/bin/env bash
# Captures the request frames that real clients send and refreshes the golden files in
# crates/protocol/tests/golden/{librdkafka,java}/ (checked by crates/protocol/tests/golden.rs).
#
#   compat-tests/golden/capture.sh
#
# For each client family it starts the capture listener (an example of osprey-protocol,
# a fake broker on a free loopback port), runs the client program against it with a
# bounded time, stops it, and copies the first two frames of each API and version per
# client id. The golden files are replaced only when every client step succeeded.
# Needs network access to PyPI and Maven Central the first time (venv, Maven build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
golden="$root/crates/protocol/tests/golden"
client_timeout_s=90
work="$(mktemp -d)"
listener_pid=""

cleanup() {
    if [[ -n "$listener_pid" ]]; then
        kill "$listener_pid" 2>/dev/null || true
        wait "$listener_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "== building the capture listener and the clients"
cargo build --quiet --manifest-path "$root/Cargo.toml" -p osprey-protocol --example capture_listener
listener_bin="$root/target/debug/examples/capture_listener"
"$root/compat-tests/setup-venv.sh"
(cd "$root/compat-tests/java" && mvn -q -B package -DskipTests)

# run_family NAME COMMAND...: captures what COMMAND HOST:PORT sends into $work/NAME.
run_family() {
    local name="$1"
    shift
    "$listener_bin" --port 0 --out "$work/$name" >"$work/$name.port" 2>"$work/$name.listener.log" &
    listener_pid=$!
    local port=""
    for _ in $(seq 100); do
        port="$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/$name.port")"
        [[ -n "$port" ]] && break
        sleep 0.1
    done
    if [[ -z "$port" ]]; then
        echo "capture listener did not start" >&2
        cat "$work/$name.listener.log" >&2
        return 1
    fi
    echo "== $name against 127.0.0.1:$port"
    local rc=0
    timeout "$client_timeout_s" "$@" "127.0.0.1:$port" | tee "$work/$name.client.log" || rc=$?
    kill "$listener_pid" 2>/dev/null || true
    wait "$listener_pid" 2>/dev/null || true
    listener_pid=""
    # Anything the listener did besides answering (KIP-511 fallbacks, closed connections).
    grep -v ' answered$' "$work/$name.listener.log" | sed 's/^/   listener: /' | sort | uniq -c || true
    if [[ $rc -ne 0 ]]; then
        echo "$name client failed (exit $rc); listener log:" >&2
        tail -40 "$work/$name.listener.log" >&2
        return 1
    fi
}

run_family librdkafka "$root/compat-tests/.venv/bin/python" "$root/compat-tests/golden/capture_python.py"
run_family java java -cp "$root/compat-tests/java/target/classes:$root/compat-tests/java/target/lib/*" \
    dev.osprey.compat.GoldenCapture

echo "== copying frames into ${golden#"$root/"}"
for family in librdkafka java; do
    rm -rf "${golden:?}/$family"
    (
        cd "$work/$family"
        # Two frames of each API and version per client: enough to see both phases of a
        # JoinGroup (KIP-394) and a client's first and later Produce. The first frame of a
        # version the codec cannot decode (e.g. ApiVersions newer than it knows) is kept
        # per client so that the test notices when the codec learns it.
        find . -type f \( -name '*-[01].bin' -o -name '*-0.undecodable' \) | sort | while read -r f; do
            mkdir -p "$golden/$family/$(dirname "$f")"
            cp "$f" "$golden/$family/$f"
        done
    )
done
{
    echo "# Clients that produced these frames (written by compat-tests/golden/capture.sh)."
    head -1 "$work/librdkafka.client.log"
    head -1 "$work/java.client.log"
} >"$golden/CLIENTS.txt"
cat "$golden/CLIENTS.txt"
echo "$(find "$golden" -type f \( -name '*.bin' -o -name '*.undecodable' \) | wc -l) frames in ${golden#"$root/"}"
