#!/usr/bin/env python3
"""Offset commits after every message, Osprey against Kafka 4.4 (issue 21).

Started by bench/commits.sh (which builds osprey in release, fetches Kafka, makes the
venv and builds bench/commitbench). segmentio/kafka-go's Reader commits each message's
offset synchronously when it has a GroupID and CommitInterval 0, its default: a consumer
then waits one OffsetCommit round trip per message. bench/commitbench runs R such
readers, each the only member of a group of its own (the groups' offsets land on
different `__consumer_offsets` partitions), over one topic prefilled with 100-byte
records.

Each repetition runs every broker variant in turn (Kafka, osprey at its default, osprey
with fsync relaxed to Kafka's setting, or as --variants says), each on a fresh data directory, and for each
reader count reports the commits per second of all readers together and the per-message
latency percentiles; for osprey also the fsyncs per commit (from its fsync histogram).
The report goes to OUT/COMMITS.md, the raw figures to OUT/commits.json.

Usage: commits.py --kafka-lib DIR --osprey-bin PATH --commitbench PATH --workdir DIR --out DIR
                  [--readers 1,8,32] [--messages 3000] [--reps 3] [--note TEXT]
                  [--variants kafka+osprey+osprey-nofsync+osprey:osprey.log.flusher.threads=16]
"""

import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the broker classes and helpers of the main benchmark)
import cluster  # noqa: E402  (the options every benchmark here takes)

TOPIC = "commits"
VARIANTS = ("kafka", "osprey", "osprey-nofsync")
LABELS = {"kafka": "Kafka", "osprey": "osprey (fsync, default)", "osprey-nofsync": "osprey (like Kafka)"}


def label(variant):
    """A column's name; `osprey:KEY=VALUE` is osprey at its default but for that setting."""
    return LABELS.get(variant) or f"osprey ({variant.split(':', 1)[1]})"


def make_broker(variant, root, opts):
    if variant.startswith("osprey:"):
        return bench.OspreyBroker(variant, root, opts.osprey_bin, variant.split(":", 1)[1].split(","))
    return bench.make_broker(variant, root, opts)


def prefill(broker, messages):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)], operation_timeout=30).values():
        future.result(60)
    broker.wait_ready(TOPIC, time.monotonic())
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(messages):
        producer.produce(TOPIC, b"%099d" % i)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise bench.BenchError("prefill: records still unsent after 60 s")


def check_committed(broker, groups, messages):
    """Each group's committed offset is `messages`, the next after those it read (kafka-go
    commits the next offset to read): the commits the figures count took effect."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for group in groups:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, 0)])]
        answer = next(iter(admin.list_consumer_group_offsets(request, request_timeout=30).values())).result(60)
        offset = answer.topic_partitions[0].offset
        if offset != messages:
            raise bench.BenchError(f"{broker.variant}: group {group} committed offset {offset}, not {messages}")


def readers_run(opts, broker, readers, rep):
    """One commitbench run; its JSON figures, plus fsyncs per commit for osprey."""
    fsyncs_before = broker.fsync_counters()
    result = subprocess.run(
        [str(opts.commitbench), "-brokers", broker.bootstrap, "-topic", TOPIC, "-readers", str(readers),
         "-messages", str(opts.messages), "-group-prefix", f"r{readers}-{rep}", "-timeout", "10m"],
        capture_output=True, text=True, timeout=700)
    if result.returncode != 0:
        raise bench.BenchError(f"commitbench -readers {readers} against {broker.variant}: {result.stderr[-2000:]}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    check_committed(broker, [f"r{readers}-{rep}-{i}" for i in range(readers)], opts.messages)
    if fsyncs_before is not None:
        count = broker.fsync_counters()[0] - fsyncs_before[0]
        # Includes the group joins' writes: a few per reader.
        figures["fsyncs_per_commit"] = count / (readers * opts.messages)
    return figures


def session(opts, variant, rep):
    root = opts.workdir / f"{variant}-{rep}"
    shutil.rmtree(root, ignore_errors=True)
    broker = make_broker(variant, root, opts)
    try:
        broker.start()
        prefill(broker, opts.messages + 10)
        return {str(r): readers_run(opts, broker, r, rep) for r in opts.readers}
    except Exception:
        kept = opts.workdir / f"failed-{variant}-{rep}.log"
        shutil.copyfile(root / "broker.log", kept)
        print(f"{variant} failed; its log: {kept}", flush=True)
        raise
    finally:
        broker.stop()
        bench.kill_all()
        shutil.rmtree(root, ignore_errors=True)


def median(values):
    return bench.median_cell([v for v in values if v is not None])


def report(opts, runs, started_at):
    lines = [
        "# Offset commits after every message: osprey against Apache Kafka 4.4.0",
        "",
        f"- Date: {started_at:%Y-%m-%d %H:%M} UTC; osprey {opts.revision} ({bench.build_of(opts.osprey_bin)} build)",
        f"- Machine: {bench.machine_description()}",
    ]
    if opts.note:
        lines.append(f"- Note: {opts.note}")
    lines += [
        f"- {opts.reps} repetition(s), brokers alternated ({' '.join(opts.variants)} ...), each on a fresh data"
        " directory on loopback; each cell is the median, then (lowest-highest) over the repetitions.",
        "- Workload (bench/commitbench): segmentio/kafka-go v0.4.51 Readers, each the only member of a group"
        " of its own, CommitInterval 0 (its default: every ReadMessage commits that message's offset"
        f" synchronously, OffsetCommit v2), {opts.messages} messages each after a first one that joins"
        " the group; commits/s counts all readers together; latency is one ReadMessage (served from"
        " prefetched batches, so mostly the commit's round trip).",
        "- osprey (like Kafka) runs with `log.flush.interval.messages` at Kafka's default (never fsync on the"
        " write path); osprey's default answers a commit once it is fsynced: in the data directory's commit"
        " journal, one fsync shared by every `__consumer_offsets` partition (`osprey.log.journal.topics`;"
        " `osprey.log.journal.topics=` turns it off, and each commit fsyncs its own partition).",
        "",
        "| readers | figure | " + " | ".join(label(v) for v in opts.variants) + " | "
        + " | ".join(f"ratio, {label(v)}" for v in opts.variants if v != "kafka") + " |",
        "|---|---|" + "---|" * (2 * len(opts.variants) - 1),
    ]
    for readers in opts.readers:
        key = str(readers)
        for figure, name, higher in (("messages_per_s", "commits/s", True), ("p50_ms", "latency ms p50", False),
                                     ("p99_ms", "latency ms p99", False),
                                     ("fsyncs_per_commit", "fsyncs per commit", False)):
            values = {v: [run[v][key].get(figure) for run in runs if v in run] for v in opts.variants}
            medians = {v: bench.statistics.median([x for x in values[v] if x is not None])
                       if any(x is not None for x in values[v]) else None for v in opts.variants}
            ratios = []
            for v in opts.variants[1:]:
                k, o = medians["kafka"], medians[v]
                ratios.append(bench.fmt(o / k) if k and o is not None else "n/a")
            better = "higher is better" if higher else "lower is better"
            lines.append(f"| {readers} | {name} ({better}) | " + " | ".join(median(values[v]) for v in opts.variants)
                         + " | " + " | ".join(ratios) + " |")
    lines += ["", "Raw figures of every run: `commits.json`.", ""]
    return "\n".join(lines)


def main():
    parser = cluster.arguments(__doc__.split("\n")[0], VARIANTS, reps=3)
    # Joined by + rather than commas: an osprey:KEY=VALUE variant may hold several settings.
    parser.set_defaults(variants="+".join(VARIANTS))
    parser.add_argument("--commitbench", required=True, type=Path)
    parser.add_argument("--readers", default="1,8,32")
    parser.add_argument("--messages", type=int, default=3000)
    opts = parser.parse_args()
    opts.readers = [int(r) for r in opts.readers.split(",")]
    opts.variants = opts.variants.split("+")
    if opts.variants[0] != "kafka":
        parser.error("--variants: kafka first, the ratios are against it")
    # make_broker reads the pinned flag of the main benchmark's sizes.
    opts.sizes = bench.MODES["full"]
    started_at = datetime.datetime.now(datetime.timezone.utc)
    # Taken before the run: the report's own files, written at its end, would count as changes.
    opts.revision = bench.git_revision()
    runs = []
    try:
        for rep in range(opts.reps):
            run = {}
            for variant in opts.variants:
                run[variant] = session(opts, variant, rep)
                print(f"rep {rep} {variant}: " + ", ".join(
                    f"{r} readers {f['messages_per_s']:.0f}/s" for r, f in run[variant].items()), flush=True)
            runs.append(run)
    finally:
        bench.kill_all()
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "commits.json").write_text(json.dumps(runs, indent=1) + "\n")
    (opts.out / "COMMITS.md").write_text(report(opts, runs, started_at))
    print((opts.out / "COMMITS.md").read_text())


if __name__ == "__main__":
    main()
