#!/usr/bin/env python3
"""Coordinator failover: 3 Osprey nodes against 3 Kafka nodes (issue 16's figures).

Started by bench/coordinators.sh (which builds osprey in release, fetches Kafka and makes
the venv). The scenarios are the bodies of two tests of
compat-tests/python/test_coordinator_failover.py, imported from there and timed here; the
tests check what they leave behind, this script only records it. Each scenario of each
round runs on a fresh cluster of three combined broker+controller nodes on loopback
(the tests' three_nodes and start_three; Kafka formatted with StorageTool first):

1. `classic` and `consumer` (kill9_of_the_group_coordinator, group.protocol=classic, then
   consumer, KIP-848): 1200 keyed messages in 6 partitions (replication factor 3,
   min.insync.replicas=2); two members consume them, each committing every message
   after processing it (a synchronous commit, auto-commit off). Once 400 commits have
   returned, the node that coordinates the group is killed with SIGKILL. Figures, from
   the kill: the first commit that returns (the group consuming again), every message
   consumed, and the committed offsets read back (OffsetFetch, every 0.2 s, by a
   consumer outside the group) at the high watermarks.
2. `transaction` (kill9_of_the_transaction_coordinator): one transactional producer runs
   transactions of 12 messages over 6 partitions, one after another, two of three
   committed and one aborted; 50 ms after transaction 10 begins, its transaction
   coordinator is killed with SIGKILL. The producer recovers as librdkafka requires
   (abort after an abortable error, a new producer after a fatal one). Figures: from the
   kill to the return of the next commit_transaction, and how long the transaction
   under way at the kill took from begin_transaction to its end, recovery included.

After each scenario the killed node is restarted and the scenario reads back what it
checks (committed offsets, read_committed messages); then the nodes are killed, their
data deleted and their logs kept in WORKDIR/ROUND-SCENARIO-VARIANT/node-N.log.

Configuration: both brokers at their defaults (broker.session.timeout.ms 9000,
broker.heartbeat.interval.ms 2000, group.initial.rebalance.delay.ms 3000, ...); the
clients at librdkafka's defaults except what the tests set (listed in the report).

Results: OUT/COORDINATORS.md and OUT/coordinators.json (with --quick: one round, both in
WORKDIR). --report-only RAW writes the report again from a coordinators.json.

Usage: coordinators.py --kafka-lib DIR --osprey-bin PATH --workdir DIR --out DIR
                       [--variants kafka,osprey] [--rounds 3] [--quick] [--note TEXT]
                       [--report-only RAW]
"""

import argparse
import datetime
import gc
import importlib.util
import json
import os
import shlex
import shutil
import signal
import statistics
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPAT = HERE.parent / "compat-tests" / "python"
sys.path.insert(0, str(HERE))
import bench  # noqa: E402  (the machine, the revision, Kafka's JVM flags and version)

VARIANTS = ("kafka", "osprey")
SCENARIOS = ("classic", "consumer", "transaction")
FIGURES = [
    ("classic", "first_commit_s", "classic group: kill → first commit, s"),
    ("classic", "all_consumed_s", "  kill → every message consumed, s"),
    ("classic", "commits_at_end_s", "  kill → commits at the log end, s"),
    ("consumer", "first_commit_s", "KIP-848 group: kill → first commit, s"),
    ("consumer", "all_consumed_s", "  kill → every message consumed, s"),
    ("consumer", "commits_at_end_s", "  kill → commits at the log end, s"),
    ("transaction", "first_commit_s", "transactions: kill → next committed transaction, s"),
    ("transaction", "txn_at_kill_s", "  the transaction under way at the kill took, s"),
]
# What the clients of the scenarios set (compat-tests/python/clients.py and the tests),
# against librdkafka's defaults; nothing is set on either broker.
CLIENT_SETTINGS = [
    "every client: `socket.timeout.ms=10000` (default 60000), `broker.address.family=v4`",
    "the group members: `enable.auto.commit=false`, `enable.auto.offset.store=false`, "
    "`auto.offset.reset=earliest`, `fetch.wait.max.ms=100` (default 500), "
    "`topic.metadata.refresh.interval.ms=5000` (default 300000), `group.protocol` as named; "
    "a synchronous commit after each message",
    "the producer that fills the group's topic: `acks=all`, `enable.idempotence=true`, `linger.ms=5`, "
    "`message.timeout.ms=20000`",
    "the transactional producer: `linger.ms=5`, `message.timeout.ms=30000`; init_transactions, "
    "commit_transaction and abort_transaction each with a 15 s timeout, retried while librdkafka says "
    "retriable, for up to 60 s",
]


def load_scenarios(opts):
    """The test module and compat-tests' KafkaTools, with the paths their modules read from
    the environment set first. compat-tests/python goes first on sys.path: its cluster.py
    is not bench/cluster.py."""
    os.environ["KAFKA_LIB"] = str(opts.kafka_lib.resolve())
    os.environ["OSPREY_BIN"] = str(opts.osprey_bin.resolve())
    sys.path.insert(0, str(COMPAT))
    import cluster
    import kafka_cluster
    import test_coordinator_failover

    # kafka-server-start.sh's heap and flags, as the other benchmarks run Kafka, rather
    # than the tests' smaller heap.
    kafka_cluster.KAFKA_JVM_FLAGS = bench.KAFKA_JVM_FLAGS
    return test_coordinator_failover, cluster.KafkaTools


def bench_module(name):
    """bench/NAME.py under the name bench_NAME (bench/cluster.py is not the tests' cluster.py)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH_CLUSTER = bench_module("cluster")  # script_args, chosen_variants


def run_scenario(tests, tools, opts, variant, round_, scenario):
    """One scenario on a fresh cluster: (figures and what happened, None) or (None, the
    error's first line)."""
    workdir = opts.workdir / f"{round_}-{scenario}-{variant}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    cluster = tests.three_nodes(workdir, {}, variant == "kafka")
    started = time.monotonic()
    try:
        tests.start_three(cluster)
        controller = active_controller(tools(workdir), cluster)
        if scenario == "transaction":
            run = tests.kill9_of_the_transaction_coordinator(cluster)
            found = {"first_commit_s": run.first_commit_s, "txn_at_kill_s": run.txn_at_kill_s,
                     "txn_at_kill": run.txn_at_kill, "txn_at_kill_outcome": run.runner.outcomes[run.txn_at_kill],
                     "outcomes": dict(Counter(run.runner.outcomes.values())),
                     "producers_made": run.runner.producers_made, "errors": dict(run.runner.errors),
                     "read_committed": len(run.read_committed),
                     "killed": run.victim.node_id, "new_coordinator": run.new_coordinator}
        else:
            run = tests.kill9_of_the_group_coordinator(cluster, scenario)
            hw = run.high_watermarks
            found = {"first_commit_s": run.first_commit_s, "all_consumed_s": run.all_consumed_s,
                     "commits_at_end_s": run.commits_at_end_s, "commits_at_kill": run.commits_at_kill,
                     "killed": run.killed.node_id, "new_coordinator": run.new_coordinator,
                     "commit_errors": run.commit_errors, "poll_errors": run.poll_errors,
                     "offset_readings": run.readings, "offset_violations": len(run.violations),
                     "committed_at_hw_after_restart": run.final == hw,
                     "never_consumed": sum(hw[p] - len(run.consumed[p]) for p in hw)}
        found["active_controller"] = controller
        found["scenario_s"] = time.monotonic() - started
        return found, None
    except Exception as e:  # a failed round: reported, and the next one runs
        traceback.print_exc()
        return None, (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
    finally:
        gc.collect()  # clients left to the cycle collector would go on reconnecting
        cluster.kill_all()
        for n in cluster.nodes:
            shutil.rmtree(n.dir, ignore_errors=True)


def active_controller(tools, cluster):
    """The active controller's node id, from kafka-metadata-quorum describe --status (None
    if the tool fails): a coordinator that is also the active controller takes the
    controller's election with it, and the fence of its broker starts on the new
    controller."""
    status = tools.quorum_status(("--bootstrap-server", cluster.bootstrap()))
    return int(status["LeaderId"]) if status and status.get("LeaderId", "").isdigit() else None


def run_all(opts, variants):
    """Every round: each scenario on each variant in turn, so that a change of the
    machine's load falls on both alike."""
    tests, tools = load_scenarios(opts)
    runs = {v: {s: [] for s in SCENARIOS} for v in variants}
    failures = {v: {s: [] for s in SCENARIOS} for v in variants}
    for round_ in range(1, opts.rounds + 1):
        for scenario in SCENARIOS:
            for variant in variants:
                found, error = run_scenario(tests, tools, opts, variant, round_, scenario)
                if error is None:
                    runs[variant][scenario].append(dict(found, round=round_))
                    print(f"round {round_} {scenario} {variant}: {json.dumps(found)}", flush=True)
                else:
                    failures[variant][scenario].append(f"round {round_}: {error}")
                    print(f"round {round_} {scenario} {variant} failed: {error}", flush=True)
    return runs, failures


# ----- the report -------------------------------------------------------------------------


def fmt(value):
    return "n/a" if value is None else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def values_of(record, variant, scenario, key):
    return [r[key] for r in record["runs"].get(variant, {}).get(scenario, []) if r.get(key) is not None]


def cell(values):
    return bench.median_cell(values, fmt)


def summary_lines(record, variants):
    compare = "kafka" in variants and "osprey" in variants
    lines = ["| figure | " + " | ".join(variants) + (" | osprey / kafka |" if compare else " |"),
             "|---" * (1 + len(variants) + compare) + "|"]
    for scenario, key, label in FIGURES:
        got = {v: values_of(record, v, scenario, key) for v in variants}
        cells = [cell(got[v]) for v in variants]
        if compare:
            ok = got["kafka"] and got["osprey"] and statistics.median(got["kafka"]) > 0
            cells.append(f"{statistics.median(got['osprey']) / statistics.median(got['kafka']):.2f}x" if ok else "n/a")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def round_lines(record, variants):
    lines = ["| round | scenario | variant | killed → new coordinator | figures, s | what happened |",
             "|---|---|---|---|---|---|"]
    for round_ in range(1, record["rounds"] + 1):
        for scenario in SCENARIOS:
            for variant in variants:
                found = next((r for r in record["runs"].get(variant, {}).get(scenario, []) if r["round"] == round_),
                             None)
                if found is None:
                    failed = [f for f in record["failures"].get(variant, {}).get(scenario, [])
                              if f.startswith(f"round {round_}:")]
                    lines.append(f"| {round_} | {scenario} | {variant} | | failed | "
                                 f"{failed[0].split(':', 1)[1].strip().replace('|', '/') if failed else ''} |")
                    continue
                figures = ", ".join(f"{key.removesuffix('_s')} {fmt(found.get(key))}"
                                    for s, key, _ in FIGURES if s == scenario)
                if scenario == "transaction":
                    happened = (f"transaction {found['txn_at_kill']} at the kill: {found['txn_at_kill_outcome']}; "
                                f"outcomes {found['outcomes']}; producers {found['producers_made']}; "
                                f"errors {found['errors']}")
                else:
                    happened = (f"killed at {found['commits_at_kill']} commits; commit errors "
                                f"{found['commit_errors']}; poll errors {found['poll_errors']}; committed at the "
                                f"high watermarks after the restart: {found['committed_at_hw_after_restart']}; "
                                f"never consumed {found['never_consumed']}; offsets read going back "
                                f"{found['offset_violations']}")
                controller = " (the active controller)" if found.get("active_controller") == found["killed"] else ""
                lines.append(f"| {round_} | {scenario} | {variant} | {found['killed']}{controller} → "
                             f"{found['new_coordinator']} | {figures} | {happened} |")
    return lines


def write_report(record, out):
    variants = [v for v in VARIANTS if v in record["runs"]]
    failed = sum(len(f) for per in record["failures"].values() for f in per.values())
    lines = [
        "# Coordinator failover: 3 Osprey nodes against 3 Kafka nodes (issue 16)", "",
        f"Command: `{record['command']}`", "",
        f"Date {record['date']}, revision {record['revision']}; {record['machine']}.", "",
        f"Load average (1, 5, 15 min) at the start: {record['load_start']}; at the end: {record['load_end']}. "
        f"The run took {record['run_s'] / 60:.0f} min.", "",
        *([record["note"], ""] if record["note"] else []),
        f"{record['rounds']} round(s), each scenario on a fresh 3-node cluster per variant; medians "
        f"(min-max in brackets){'; ' + str(failed) + ' failed scenario run(s), below' if failed else ''}. "
        "Every figure is seconds from the SIGKILL of the coordinator. Method: the docstring of "
        "`bench/coordinators.py`; the scenarios are those of "
        "`compat-tests/python/test_coordinator_failover.py`.", "",
        *summary_lines(record, variants), "",
        "Lower is better. Issue 16 quotes Kafka at about 30 s to consume everything after a group "
        "coordinator's kill, with the commits at the log end 1 s later, and 10-20 s for a transaction "
        "coordinator's. The kill comes at the 400th of 1200 commits: the time to every message consumed "
        "includes consuming the 800 left with a synchronous commit each, so past the first commit it "
        "measures the commit rate against the new coordinator as much as the failover.", "",
        "## Each round", "",
        "The killed node is marked when it was also the active controller (kafka-metadata-quorum, after "
        "the cluster started): then the controller's election comes first, and the fence of the dead "
        "broker (`broker.session.timeout.ms`) is counted by the new controller.", "",
        *round_lines(record, variants), "",
        "## Settings", "",
        f"- Brokers: no setting beyond each node's id, listeners, data directory and the static quorum "
        f"(`controller.quorum.voters`); Osprey also gets a `metrics.listener`. Everything else at each "
        f"broker's default, among them `broker.session.timeout.ms=9000`, `broker.heartbeat.interval.ms=2000`, "
        f"`group.initial.rebalance.delay.ms=3000`, `group.consumer.heartbeat.interval.ms=5000`, "
        f"`transaction.state.log.replication.factor=3`.",
        f"- Kafka {bench.KAFKA_VERSION}: three combined nodes, each a JVM with kafka-server-start.sh's flags "
        f"(`{' '.join(bench.KAFKA_JVM_FLAGS)}`).",
        "- Topics: 6 partitions, replication factor 3, `min.insync.replicas=2`; the internal topics at the "
        "brokers' defaults (replication factor 3, `transaction.state.log.min.isr=2`).",
        "- Clients (librdkafka through confluent-kafka 2.16.1), what the scenarios set against librdkafka's "
        "defaults:",
        *(f"  - {s}." for s in CLIENT_SETTINGS),
        "- The three nodes, the clients and the Kafka tools share one machine (loopback).",
    ]
    if failed:
        lines += ["", "## Failed runs", ""]
    for v in variants:
        for scenario, failed_runs in record["failures"].get(v, {}).items():
            lines += [f"- {v} {scenario}, {f}" for f in failed_runs]
    (out / "COORDINATORS.md").write_text("\n".join(lines) + "\n")


def load_average():
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one round, the report in WORKDIR: a smoke test")
    p.add_argument("--kafka-lib", type=Path, required=True)
    p.add_argument("--osprey-bin", type=Path, required=True)
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--note", default="")
    p.add_argument("--report-only", type=Path, metavar="RAW",
                   help="write OUT/COORDINATORS.md again from a coordinators.json, running nothing")
    opts = p.parse_args()
    if opts.report_only:
        write_report(json.loads(opts.report_only.read_text()), opts.out)
        print((opts.out / "COORDINATORS.md").read_text())
        return
    if opts.quick:
        opts.rounds = 1
    variants = BENCH_CLUSTER.chosen_variants(p, opts.variants, VARIANTS)
    command = " ".join(["bench/coordinators.sh", *map(shlex.quote, BENCH_CLUSTER.script_args(sys.argv[1:]))])
    record = {"command": command, "revision": bench.git_revision(), "machine": bench.machine_description(),
              "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
              "load_start": load_average(), "note": opts.note, "rounds": opts.rounds, "variants": variants}
    out = opts.workdir if opts.quick else opts.out
    out.mkdir(parents=True, exist_ok=True)
    opts.workdir.mkdir(parents=True, exist_ok=True)
    # The backstop's SIGTERM (bench/release.sh) exits through run_scenario's `finally`,
    # which kills the nodes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    runs, failures = run_all(opts, variants)
    record.update(load_end=load_average(), run_s=time.monotonic() - started, runs=runs, failures=failures)
    (out / "coordinators.json").write_text(json.dumps(record, indent=1))
    write_report(record, out)
    print((out / "COORDINATORS.md").read_text())
    if failures and any(f for per in failures.values() for f in per.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
