#!/usr/bin/env bash
# A 3-node Osprey cluster on loopback, for trying a cluster out and for tests.
#
#   deploy/cluster.sh start  [--topology combined|split] [--dir D] [--base-port P]
#                            [--bin PATH] [--timeout S]
#   deploy/cluster.sh stop   [--dir D] [--timeout S]
#   deploy/cluster.sh status [--dir D]
#
# combined (default): nodes 1-3, each process.roles=broker,controller.
# split: controllers 1-3 (process.roles=controller), then brokers 4-6 (process.roles=broker).
#
# Each process gets a slot s (combined: s = node.id; split: s = node.id, controllers 1-3,
# brokers 4-6) and the ports P+10(s-1) (PLAINTEXT), P+10(s-1)+1 (CONTROLLER) and
# P+10(s-1)+2 (metrics). With the default P=19092: node 1 on 19092/19093/19094, node 2 on
# 19102/19103/19104, ... Each process runs `osprey deploy/config/ROLE.properties` with
# issue 14's per-node keys as --override (D/node-N/command shows the exact command); its
# data is D/node-N/data, its output D/node-N/node.log, its pid D/node-N/pid.
#
# start waits until the cluster answers (every controller has the cluster id in its
# meta.properties, every broker's Metadata lists all brokers), prints the bootstrap
# servers, and exits 0. If a process exits or the cluster does not answer within
# --timeout (default 60 s), it stops every process it started and exits 1. Data is kept
# across stop/start; delete D to start afresh.
# stop sends SIGTERM (brokers before controllers) and waits for each process to exit;
# one still running after --timeout (default 60 s) is killed with SIGKILL and stop exits 1.
#
# The binary: --bin, else $OSPREY_BIN, else target/release/osprey, else target/debug/osprey
# of this repository, else `osprey` on PATH. Build it with
# `cargo build --release -p osprey-server --bin osprey`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
HOST=127.0.0.1
NODES_PER_ROLE=3

usage() {
    sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

die() {
    echo "cluster.sh: $*" >&2
    exit 1
}

# ----- layout -------------------------------------------------------------------------

client_port() { echo $((base_port + 10 * ($1 - 1))); }
controller_port() { echo $((base_port + 10 * ($1 - 1) + 1)); }
metrics_port() { echo $((base_port + 10 * ($1 - 1) + 2)); }
node_dir() { echo "$dir/node-$1"; }

# Sets `controllers` and `brokers` (node ids) for the topology.
layout() {
    case "$topology" in
        combined) controllers="1 2 3" brokers="1 2 3" ;;
        split) controllers="1 2 3" brokers="4 5 6" ;;
        *) die "--topology is combined or split, not '$topology'" ;;
    esac
}

voters() {
    local out="" n
    for n in $controllers; do out+="${out:+,}$n@$HOST:$(controller_port "$n")"; done
    echo "$out"
}

bootstrap_servers() {
    local out="" n
    for n in $brokers; do out+="${out:+,}$HOST:$(client_port "$n")"; done
    echo "$out"
}

is_controller() { [[ " $controllers " == *" $1 "* ]]; }
is_broker() { [[ " $brokers " == *" $1 "* ]]; }

all_nodes() {
    local n
    for n in $(echo $controllers $brokers | tr ' ' '\n' | sort -nu); do echo "$n"; done
}

# The command line of node n: the role's commented config, then issue 14's keys.
node_command() {
    local n=$1 roles config listeners advertised=""
    if is_controller "$n" && is_broker "$n"; then
        roles=broker,controller config=combined
        listeners="PLAINTEXT://$HOST:$(client_port "$n"),CONTROLLER://$HOST:$(controller_port "$n")"
    elif is_controller "$n"; then
        roles=controller config=controller
        listeners="CONTROLLER://$HOST:$(controller_port "$n")"
    else
        roles=broker config=broker
        listeners="PLAINTEXT://$HOST:$(client_port "$n")"
    fi
    is_broker "$n" && advertised="PLAINTEXT://$HOST:$(client_port "$n")"
    printf '%s\n' "$bin" "$here/config/$config.properties" \
        --override "node.id=$n" \
        --override "process.roles=$roles" \
        --override "controller.quorum.voters=$(voters)" \
        --override "listeners=$listeners"
    [[ -n "$advertised" ]] && printf '%s\n' --override "advertised.listeners=$advertised"
    printf '%s\n' \
        --override "controller.listener.names=CONTROLLER" \
        --override "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    is_broker "$n" && printf '%s\n' --override "inter.broker.listener.name=PLAINTEXT"
    printf '%s\n' \
        --override "log.dirs=$(node_dir "$n")/data" \
        --override "metrics.listener=$HOST:$(metrics_port "$n")"
}

# ----- processes ----------------------------------------------------------------------

# The pid of node n if that process is running and is this node's osprey (a pid file
# outlives its process, and the kernel reuses pids).
running_pid() {
    local pidfile pid
    pidfile="$(node_dir "$1")/pid"
    [[ -f "$pidfile" ]] || return 1
    pid="$(cat "$pidfile")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/cmdline" ]] || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF "log.dirs=$(node_dir "$1")/data" || return 1
    echo "$pid"
}

# The words, quoted for a shell only where they need it.
shell_words() {
    local word out=""
    for word in "$@"; do
        [[ "$word" =~ ^[A-Za-z0-9_./:=,@+-]+$ ]] || word="$(printf '%q' "$word")"
        out+="${out:+ }$word"
    done
    echo "$out"
}

start_node() {
    local n=$1 nd cmd=()
    nd="$(node_dir "$n")"
    mkdir -p "$nd/data"
    mapfile -t cmd < <(node_command "$n")
    shell_words "${cmd[@]}" > "$nd/command"
    echo "===== $(date -u +%FT%TZ) start: $(cat "$nd/command")" >> "$nd/node.log"
    # Its own session: a Ctrl-C in this terminal later does not reach the cluster.
    NO_COLOR=1 setsid "${cmd[@]}" >> "$nd/node.log" 2>&1 < /dev/null &
    echo $! > "$nd/pid"
    started+=("$n")
}

# SIGTERM to the given nodes, then waits for all of them; SIGKILL to any left after
# $timeout seconds. Returns 1 if one had to be killed.
stop_nodes() {
    local n pid deadline left status=0
    local -A pids=()
    for n in "$@"; do
        if pid="$(running_pid "$n")"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids[$n]=$pid
        fi
    done
    deadline=$((SECONDS + timeout))
    while :; do
        left=()
        for n in "${!pids[@]}"; do
            kill -0 "${pids[$n]}" 2>/dev/null && left+=("$n")
        done
        [[ ${#left[@]} -eq 0 ]] && break
        if ((SECONDS >= deadline)); then
            for n in "${left[@]}"; do
                echo "cluster.sh: node $n (pid ${pids[$n]}) still running ${timeout}s after SIGTERM: SIGKILL" >&2
                kill -KILL "${pids[$n]}" 2>/dev/null || true
            done
            status=1
            sleep 0.2
            break
        fi
        sleep 0.1
    done
    for n in "$@"; do rm -f "$(node_dir "$n")/pid"; done
    return $status
}

# Brokers first, so that they can hand their partitions over while the controllers run.
stop_cluster() {
    local only_brokers=() n status=0
    for n in $brokers; do is_controller "$n" || only_brokers+=("$n"); done
    if [[ ${#only_brokers[@]} -gt 0 ]]; then
        stop_nodes "${only_brokers[@]}" || status=1
        stop_nodes $controllers || status=1
    else
        stop_nodes $(all_nodes) || status=1
    fi
    return $status
}

# ----- readiness ----------------------------------------------------------------------

# How many brokers the broker on this port lists in its Metadata, or nothing. A raw
# Metadata v1 request for no topics (api key 3, version 1, correlation id 7, client id
# "cluster.sh"); the answer starts with its size, the correlation id and the count of
# brokers, 4 bytes each. Bash's /dev/tcp, so that no Kafka client is needed.
listed_brokers() {
    timeout 3 bash -c '
        exec 3<>"/dev/tcp/$0/$1" || exit 1
        printf "\x00\x00\x00\x18\x00\x03\x00\x01\x00\x00\x00\x07\x00\x0acluster.sh\x00\x00\x00\x00" >&3
        head -c 12 <&3 | od -An -v -tu1' "$HOST" "$1" 2>/dev/null |
        awk '{ for (i = 1; i <= NF; i++) b[n++] = $i } END { if (n == 12 && b[4] == 0 && b[7] == 7)
            print b[8] * 16777216 + b[9] * 65536 + b[10] * 256 + b[11] }'
}

# The cluster.id in node n's meta.properties, once the quorum has agreed on one.
cluster_id() {
    local meta
    meta="$(node_dir "$1")/data/meta.properties"
    [[ -f "$meta" ]] && sed -n 's/^cluster\.id=//p' "$meta"
}

# Fails (with the node's log tail) if a started process has exited.
check_alive() {
    local n
    for n in "${started[@]}"; do
        if ! running_pid "$n" > /dev/null; then
            echo "cluster.sh: node $n exited; the end of $(node_dir "$n")/node.log:" >&2
            tail -n 20 "$(node_dir "$n")/node.log" >&2
            return 1
        fi
    done
}

# Polls `check` every 0.2 s until it succeeds; fails if a process exits or at the deadline.
wait_until() {
    local what=$1 check=$2
    while ! $check; do
        check_alive || return 1
        if ((SECONDS >= deadline)); then
            echo "cluster.sh: not within ${timeout}s: $what" >&2
            return 1
        fi
        sleep 0.2
    done
}

quorum_agreed() {
    local n id first=""
    for n in $controllers; do
        id="$(cluster_id "$n")"
        [[ -n "$id" ]] || return 1
        [[ -z "$first" || "$id" == "$first" ]] || die "controllers disagree on the cluster id: $first and $id"
        first=$id
    done
}

brokers_listed() {
    local n count want
    want=$(echo $brokers | wc -w)
    for n in $brokers; do
        count="$(listed_brokers "$(client_port "$n")")"
        [[ "$count" == "$want" ]] || return 1
    done
}

# ----- commands -----------------------------------------------------------------------

find_binary() {
    local candidate
    for candidate in "${bin:-}" "${OSPREY_BIN:-}" "$root/target/release/osprey" "$root/target/debug/osprey" \
        "$(command -v osprey || true)"; do
        if [[ -n "$candidate" && -x "$candidate" ]]; then
            bin="$(cd "$(dirname "$candidate")" && pwd)/$(basename "$candidate")"
            return
        fi
    done
    die "no osprey binary: build it with 'cargo build --release -p osprey-server --bin osprey', or pass --bin"
}

save_state() {
    printf 'topology=%s\nbase_port=%s\n' "$topology" "$base_port" > "$dir/cluster.env"
}

load_state() {
    [[ -f "$dir/cluster.env" ]] || die "no cluster in $dir (no cluster.env): start one first"
    topology="$(sed -n 's/^topology=//p' "$dir/cluster.env")"
    base_port="$(sed -n 's/^base_port=//p' "$dir/cluster.env")"
    layout
}

undo_start() {
    if [[ $start_done != 1 ]]; then
        echo "cluster.sh: start failed; stopping the ${#started[@]} process(es) it started" >&2
        local n first=() last=()
        for n in "${started[@]}"; do
            if is_controller "$n"; then last+=("$n"); else first+=("$n"); fi
        done
        [[ ${#first[@]} -eq 0 ]] || stop_nodes "${first[@]}" || true
        [[ ${#last[@]} -eq 0 ]] || stop_nodes "${last[@]}" || true
        exit 1
    fi
}

cmd_start() {
    find_binary
    layout
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if [[ -f "$dir/cluster.env" ]]; then
        local saved_topology saved_port
        saved_topology="$(sed -n 's/^topology=//p' "$dir/cluster.env")"
        saved_port="$(sed -n 's/^base_port=//p' "$dir/cluster.env")"
        [[ "$saved_topology" == "$topology" && "$saved_port" == "$base_port" ]] ||
            die "$dir holds a $saved_topology cluster on base port $saved_port: start it with those, or use another --dir"
    fi
    local n
    for n in $(all_nodes); do
        running_pid "$n" > /dev/null && die "node $n already runs (pid $(running_pid "$n")): deploy/cluster.sh stop --dir $dir"
    done
    save_state
    started=()
    start_done=0
    # Whatever ends this script from here on (a failed wait, a command that fails, a
    # Ctrl-C), a start that did not finish leaves no process behind.
    trap 'undo_start' EXIT
    trap 'exit 130' INT TERM
    deadline=$((SECONDS + timeout))
    echo "osprey: $bin"
    if [[ "$topology" == split ]]; then
        # Controllers first, as Kafka's operations guide starts them: brokers register
        # with the active controller.
        for n in $controllers; do start_node "$n"; done
        wait_until "the controllers agree on a cluster id" quorum_agreed
        echo "controllers $(echo $controllers | tr ' ' ','): cluster id $(cluster_id "${controllers%% *}")"
        for n in $brokers; do start_node "$n"; done
    else
        for n in $(all_nodes); do start_node "$n"; done
        wait_until "the controllers agree on a cluster id" quorum_agreed
    fi
    wait_until "every broker lists all $(echo $brokers | wc -w) brokers in Metadata" brokers_listed
    start_done=1
    echo "cluster id: $(cluster_id "${controllers%% *}")"
    echo "controller quorum voters: $(voters)"
    echo "bootstrap servers: $(bootstrap_servers)"
}

cmd_stop() {
    dir="$(cd "$dir" 2> /dev/null && pwd)" || die "no directory $dir"
    load_state
    if stop_cluster; then
        echo "stopped"
    else
        die "stopped, some only with SIGKILL (see the node.log files under $dir)"
    fi
}

cmd_status() {
    dir="$(cd "$dir" 2> /dev/null && pwd)" || die "no directory $dir"
    load_state
    local n pid role up=0 total=0 listed
    echo "topology $topology, base port $base_port, cluster id $(cluster_id "${controllers%% *}")"
    for n in $(all_nodes); do
        total=$((total + 1))
        role=broker
        is_controller "$n" && role=controller
        is_controller "$n" && is_broker "$n" && role=broker,controller
        if pid="$(running_pid "$n")"; then
            up=$((up + 1))
            listed=""
            is_broker "$n" && listed=", Metadata lists $(listed_brokers "$(client_port "$n")" || true) broker(s)"
            echo "node $n ($role): running, pid $pid$listed"
        else
            echo "node $n ($role): stopped"
        fi
    done
    echo "controller quorum voters: $(voters)"
    echo "bootstrap servers: $(bootstrap_servers)"
    [[ $up -eq $total ]]
}

[[ $# -ge 1 ]] || usage
command=$1
shift
topology=combined
dir="${TMPDIR:-/tmp}/osprey-cluster"
base_port=19092
timeout=60
bin=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --topology) topology=${2:?}; shift 2 ;;
        --dir) dir=${2:?}; shift 2 ;;
        --base-port) base_port=${2:?}; shift 2 ;;
        --bin) bin=${2:?}; shift 2 ;;
        --timeout) timeout=${2:?}; shift 2 ;;
        -h | --help) usage ;;
        *) echo "cluster.sh: unknown argument '$1'" >&2; usage ;;
    esac
done
[[ "$base_port" =~ ^[0-9]+$ ]] && ((base_port >= 1024 && base_port + 10 * 2 * NODES_PER_ROLE < 65536)) ||
    die "--base-port must leave room for its ports between 1024 and 65535, not '$base_port'"
[[ "$timeout" =~ ^[0-9]+$ ]] || die "--timeout is whole seconds, not '$timeout'"

case "$command" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) usage ;;
esac
