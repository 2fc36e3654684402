#!/usr/bin/env python3
"""Produce and consume throughput, and broker CPU seconds per GiB, over TLS against
PLAINTEXT, Osprey and Apache Kafka 4.4 side by side (issue 18's figures).

Started by bench/tls.sh (which builds osprey in release, fetches Kafka and makes the
venv). The run makes a CA and a server certificate for 127.0.0.1 with the openssl
command, and gives both brokers the same key and certificate: Kafka as an encrypted
PKCS#8 PEM (its PEM key stores need one; PBES1 SHA1-3DES, as JDK 17 reads no PBES2),
Osprey unencrypted (it reads PBES2 only). Decrypting happens once at start; the
handshakes are the same RSA 2048 key's. One broker at a time, each with a
PLAINTEXT and an SSL listener (TLS 1.3 and 1.2 enabled, the JVM's and rustls' default
suites), its data on a fresh directory.

For each broker, repetition and listener, on a fresh topic of one partition:
- produce: Kafka's ProducerPerformance, --records records of 1 KiB, acks=1, batching
  tuned (batch.size 256 KiB, linger.ms 20), as bench/run.sh's like-for-like produce;
- consume: Kafka's ConsumerPerformance reading them back from the start (fetch MiB/s,
  the group join left out);
and the broker's CPU seconds (user + system, /proc) spent during each, per GiB moved.
The clients run on the same machine and compete with the broker for its cores: the
throughput is the pair's, the CPU per GiB the broker's alone.

The figures of a run go to OUT/tls.json; OUT/TLS.md is the report: medians over the
repetitions, Osprey against Kafka per listener, and each broker's TLS cost (TLS against
its own PLAINTEXT).

Usage: tls.py --osprey-bin PATH --kafka-lib DIR --workdir DIR --out DIR
              [--records 300000] [--reps 3] [--note TEXT]
"""

import argparse
import datetime
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the broker classes and helpers of the main benchmark)

KEY_PASSWORD = "bench-secret"
LISTENERS = ("plaintext", "tls")
WORKLOADS = ("produce", "consume")
BATCHING = ["batch.size=262144", "linger.ms=20"]


def run(*args, cwd):
    subprocess.run(args, check=True, capture_output=True, cwd=cwd)


def make_certificates(directory: Path):
    """(Kafka's key store, Osprey's key store, trust store): PEM files with the key
    (encrypted PKCS#8 for Kafka, plain for Osprey) and the certificate (CN=localhost,
    SAN 127.0.0.1), and the CA's certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=Bench CA",
        "-keyout", "ca.key", "-out", "ca.pem", cwd=directory)
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", "server.key", "-out", "server.csr", cwd=directory)
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=directory)
    run("openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-passout", f"pass:{KEY_PASSWORD}",
        "-in", "server.key", "-out", "server.enc.key", cwd=directory)
    certificate = (directory / "server.pem").read_text()
    kafka_store = directory / "kafka-keystore.pem"
    kafka_store.write_text((directory / "server.enc.key").read_text() + certificate)
    osprey_store = directory / "osprey-keystore.pem"
    osprey_store.write_text((directory / "server.key").read_text() + certificate)
    return kafka_store, osprey_store, directory / "ca.pem"


def ssl_keys(keystore, truststore, encrypted):
    keys = ["ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}", "ssl.truststore.type=PEM",
            f"ssl.truststore.location={truststore}"]
    return keys + ([f"ssl.key.password={KEY_PASSWORD}"] if encrypted else [])


class KafkaTls(bench.KafkaBroker):
    """Kafka with an SSL listener beside the PLAINTEXT one."""

    def __init__(self, root, kafka_lib, keystore, truststore):
        self.tls_port = bench.free_port()
        self._ssl = ssl_keys(keystore, truststore, encrypted=True)
        super().__init__(root, kafka_lib)

    def command(self):
        text = self.config.read_text()
        if "SSL://" not in text:
            lines = []
            for line in text.splitlines():
                if line.startswith("listeners="):
                    line = line.replace("PLAINTEXT://", f"SSL://127.0.0.1:{self.tls_port},PLAINTEXT://", 1)
                elif line.startswith("advertised.listeners="):
                    line += f",SSL://127.0.0.1:{self.tls_port}"
                elif line.startswith("listener.security.protocol.map="):
                    line += ",SSL:SSL"
                lines.append(line)
            lines += self._ssl
            self.config.write_text("\n".join(lines) + "\n")
        return super().command()


class OspreyTls(bench.OspreyBroker):
    """Osprey at its defaults with an SSL listener beside the PLAINTEXT one."""

    def __init__(self, root, bin_path, keystore, truststore):
        super().__init__("osprey", root, bin_path, ssl_keys(keystore, truststore, encrypted=False))
        self.tls_port = bench.free_port()

    def command(self):
        cmd = super().command()
        at = cmd.index(f"listeners=PLAINTEXT://127.0.0.1:{self.port}")
        cmd[at] += f",SSL://127.0.0.1:{self.tls_port}"
        return cmd


def client_config(workdir: Path, listener, broker, truststore):
    """(bootstrap, a client properties file) for `listener` of `broker`."""
    path = workdir / f"client-{listener}.properties"
    if listener == "plaintext":
        path.write_text("security.protocol=PLAINTEXT\n")
        return broker.bootstrap, path
    path.write_text("\n".join([
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={truststore}",
        "",
    ]))
    return f"127.0.0.1:{broker.tls_port}", path


def produce(opts, bootstrap, config, topic):
    out = bench.java("org.apache.kafka.tools.ProducerPerformance",
                     ["--topic", topic, "--num-records", str(opts.records), "--record-size",
                      str(bench.RECORD_BYTES), "--throughput", "-1", "--command-config", str(config),
                      "--command-property", f"bootstrap.servers={bootstrap}", "acks=1", *BATCHING],
                     f"{opts.kafka_lib}/*", 900)
    found = bench.PERF_SUMMARY.findall(out)
    if not found or int(found[-1][0]) != opts.records:
        raise bench.BenchError(f"ProducerPerformance summary missing or short:\n{out[-2000:]}")
    return float(found[-1][2])


def consume(opts, bootstrap, config, topic):
    out = bench.java("org.apache.kafka.tools.ConsumerPerformance",
                     ["--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(opts.records),
                      "--timeout", "60000", "--command-config", str(config),
                      "--group", f"bench-{topic}-{time.monotonic_ns()}"],
                     f"{opts.kafka_lib}/*", 900)
    rows = [line.split(", ") for line in out.splitlines() if line[:4].isdigit() and line[4:5] == "-"]
    fields = rows[-1] if rows else []
    if len(fields) < 10 or int(fields[4]) < opts.records:
        raise bench.BenchError(f"ConsumerPerformance read too little:\n{out[-2000:]}")
    return float(fields[8])


def drop_page_cache():
    """Writes dirty pages out and empties the page cache, so that a session's writes find
    free memory instead of reclaiming the previous session's pages: on a machine whose
    page cache has filled its memory, that reclaim is charged to the writing broker (it
    tripled Osprey's produce CPU per GiB in a run). Needs root; False without it."""
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def session(opts, variant, rep, stores, truststore):
    """One broker's figures for every listener and workload: {key: value}."""
    root = opts.workdir / f"{variant}-{rep}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    opts.caches_dropped = drop_page_cache() and opts.caches_dropped
    if variant == "kafka":
        broker = KafkaTls(root, opts.kafka_lib, stores[0], truststore)
    else:
        broker = OspreyTls(root, opts.osprey_bin, stores[1], truststore)
    figures = {}
    try:
        broker.start()
        gib = opts.records * bench.RECORD_BYTES / (1 << 30)
        for listener in LISTENERS:
            topic = f"tls-bench-{listener}"
            bench.create_topic(broker, topic, 1)
            bootstrap, config = client_config(root, listener, broker, truststore)
            for workload, measure in (("produce", produce), ("consume", consume)):
                cpu_before, _ = broker.usage()
                figures[f"{workload} {listener} MiB/s"] = measure(opts, bootstrap, config, topic)
                cpu_after, _ = broker.usage()
                figures[f"{workload} {listener} CPU s/GiB"] = (cpu_after - cpu_before) / gib
        return figures
    finally:
        broker.stop()


def median(values):
    return statistics.median(values) if values else None


def write_report(opts, runs, out: Path):
    medians = {v: {k: median([r[k] for r in runs[v]]) for k in runs[v][0]} for v in runs if runs[v]}
    lines = [
        "# TLS against PLAINTEXT: Osprey and Apache Kafka 4.4",
        "",
        f"Written by `bench/tls.sh` on {datetime.date.today()}: {opts.records:,} records of 1 KiB per "
        f"workload, one partition, {opts.reps} repetitions per broker (medians). Produce: Kafka's "
        "ProducerPerformance, acks=1, batch.size 256 KiB, linger.ms 20. Consume: ConsumerPerformance "
        "from the start (fetch MiB/s). CPU: the broker's user + system seconds during the workload, per "
        "GiB moved. Both brokers use the same RSA 2048 key and certificate, PEM, and their "
        "default TLS versions and suites (Kafka's key store holds it encrypted, Osprey's plain: "
        "decrypted once at start); the clients are Kafka's Java tools on the same machine.",
        "",
        f"Machine: {bench.machine_description()}. Revision: {opts.revision}. "
        + ("The page cache was emptied before each broker's session (`drop_caches`), so that no "
           "session's writes pay for reclaiming another's pages." if opts.caches_dropped else
           "The page cache could not be emptied between sessions (not root): a machine whose memory is "
           "full of page cache charges the reclaim to the writing broker, which makes produce CPU noisy.")
        + (f" {opts.note}" if opts.note else ""),
        "",
        "| figure | Kafka | Osprey | Osprey / Kafka |",
        "|---|---|---|---|",
    ]
    for workload in WORKLOADS:
        for listener in LISTENERS:
            for unit in ("MiB/s", "CPU s/GiB"):
                key = f"{workload} {listener} {unit}"
                k, o = medians.get("kafka", {}).get(key), medians.get("osprey", {}).get(key)
                ratio = f"{o / k:.2f}x" if k and o is not None else "-"
                lines.append(f"| {key} | {bench.fmt(k) if k is not None else '-'} | "
                             f"{bench.fmt(o) if o is not None else '-'} | {ratio} |")
    lines += ["", "Each broker's TLS cost (TLS against its own PLAINTEXT):", "",
              "| figure | Kafka | Osprey |", "|---|---|---|"]
    for workload in WORKLOADS:
        for unit in ("MiB/s", "CPU s/GiB"):
            cells = []
            for variant in ("kafka", "osprey"):
                m = medians.get(variant, {})
                plain, tls = m.get(f"{workload} plaintext {unit}"), m.get(f"{workload} tls {unit}")
                cells.append(f"{tls / plain:.2f}x" if plain and tls is not None else "-")
            lines.append(f"| {workload} {unit} | {cells[0]} | {cells[1]} |")
    lines.append("")
    (out / "TLS.md").write_text("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--osprey-bin", type=Path, required=True)
    parser.add_argument("--kafka-lib", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--note", default="")
    opts = parser.parse_args()
    # Before anything is written: the report's own files must not make the tree dirty.
    opts.revision = bench.git_revision()
    opts.caches_dropped = True
    opts.workdir.mkdir(parents=True, exist_ok=True)
    opts.out.mkdir(parents=True, exist_ok=True)
    kafka_store, osprey_store, truststore = make_certificates(opts.workdir / "pki")
    runs = {"kafka": [], "osprey": []}
    try:
        for rep in range(opts.reps):
            # Alternated, so that a slow spell of the machine does not fall on one broker.
            for variant in (("kafka", "osprey") if rep % 2 == 0 else ("osprey", "kafka")):
                figures = session(opts, variant, rep, (kafka_store, osprey_store), truststore)
                runs[variant].append(figures)
                print(f"rep {rep} {variant}: " + ", ".join(f"{k} {bench.fmt(v)}" for k, v in figures.items()),
                      flush=True)
    finally:
        bench.kill_all()
    (opts.out / "tls.json").write_text(json.dumps({"records": opts.records, "runs": runs}, indent=1))
    write_report(opts, runs, opts.out)
    print(f"report: {opts.out / 'TLS.md'}")


if __name__ == "__main__":
    main()
