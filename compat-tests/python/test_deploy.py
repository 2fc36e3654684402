"""The operator recipes of deploy/ (issue 19), each tested as far as this machine can:

- the alert rules (deploy/prometheus/osprey-alerts.yml) pass `promtool check rules`, and
  their unit tests (`promtool test rules osprey-alerts.test.yml`) cover every alert
  firing and not firing; the sample prometheus.yml passes `promtool check config`;
- a real Prometheus (Debian's package) scrapes a real 3-node cluster every second with
  the alert rules loaded; after one node is killed with SIGKILL the under-replicated
  alert fires in it (from a copy of the rules whose `for:` durations are cut to 5 s: the
  expressions are the shipped ones, the five minutes are not waited for), and once the
  node is back and some traffic has run, every query of every panel of the Grafana
  dashboard (deploy/grafana/osprey.json) returns data, or the test names each one that
  does not;
- the systemd units pass `systemd-analyze verify` (their ExecStart pointed at the binary
  under test), and each installs a deploy/config file of its role;
- the Containerfile copies files that exist, runs the binary its builder stage builds,
  and its default command starts a broker (the binary run with that command: no image is
  built here, no registry being reachable);
- compose.yaml's three nodes, started as processes with exactly the commands compose
  gives them (host names and ports mapped to free loopback ports), form the cluster and
  serve on both listeners, and prometheus.yml scrapes those nodes.

Debian's prometheus, prometheus-node-exporter and systemd packages provide the tools
(compat-tests/run.sh installs them as root); without them these tests fail, naming the
package. Every wait polls until true; times are never asserted.
"""

import json
import math
import re
import shutil
import signal
import subprocess
import time
import types
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import clients
import kafkawire
from cluster import WAIT_S, combined, listed_brokers, metadata_states
from conftest import REPO_ROOT, free_port, osprey_bin

DEPLOY = REPO_ROOT / "deploy"
ALERTS = DEPLOY / "prometheus" / "osprey-alerts.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "osprey-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "osprey.json"
TOOL_TIMEOUT_S = 120

# Faster failure detection than Kafka's defaults, as in test_replication.py: a killed
# node is fenced after 3 s and leaves the ISRs after 2 s of lag.
FAST = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 2000,
}


def need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: apt-get install {package} (compat-tests/run.sh does, as root)")
    return path


def run_tool(*args, cwd=None):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=cwd)


# ----- alert rules -------------------------------------------------------------------


def test_alert_rules_and_prometheus_config_pass_promtool():
    need("promtool", "prometheus")
    checked = run_tool("promtool", "check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = run_tool("promtool", "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr
    # The sample config loads the rules beside it.
    assert f"Checking {ALERTS}" in config.stdout + config.stderr, config.stdout + config.stderr


def test_alert_rule_unit_tests_pass_and_cover_every_alert_firing_and_not_firing():
    need("promtool", "prometheus")
    tested = run_tool("promtool", "test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout + tested.stderr, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r}
    cases = [c for t in yaml.safe_load(ALERT_TESTS.read_text())["tests"] for c in t.get("alert_rule_test", [])]
    fired = {c["alertname"] for c in cases if c.get("exp_alerts")}
    silent = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert alerts - fired == set(), f"alerts never tested firing: {sorted(alerts - fired)}"
    assert alerts - silent == set(), f"alerts never tested not firing: {sorted(alerts - silent)}"
    assert {c["alertname"] for c in cases} <= alerts, "a test names an alert the rules do not have"


# ----- a live Prometheus ---------------------------------------------------------------


class Process:
    """A helper process with its output in a file, stopped with SIGTERM."""

    def __init__(self, name: str, args, log_path: Path):
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def check_running(self):
        code = self.proc.poll()
        assert code is None, f"{self.name} exited with {code}:\n{self.log_tail()}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def http_get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


class Prometheus(Process):
    """Debian's prometheus on a free port, its storage under `workdir`, scraping and
    evaluating every second."""

    def __init__(self, workdir: Path, scrape: dict, rule_files):
        workdir.mkdir(parents=True)
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                               for job, targets in scrape.items()],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        super().__init__("prometheus", [
            need("prometheus", "prometheus"), f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
        ], workdir / "prometheus.log")
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self):
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            self.check_running()
            try:
                if http_get(f"{self.url}/-/ready", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {WAIT_S}s:\n{self.log_tail()}")

    def api(self, path: str, **params):
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            _, body = http_get(url)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{path} {params}: HTTP {e.code}: {e.read().decode()}") from None
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str):
        """The instant vector (or scalar) `expr` evaluates to now: [(labels, value)]."""
        data = self.api("query", query=expr)
        if data["resultType"] == "vector":
            return [(r["metric"], float(r["value"][1])) for r in data["result"]]
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        raise AssertionError(f"{expr}: a {data['resultType']}, not an instant vector")

    def value(self, expr: str):
        """The single value of `expr`, or None when it has none."""
        result = self.query(expr)
        return result[0][1] if len(result) == 1 else None

    def alerts(self, name: str, state: str):
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name and a["state"] == state]


def rules_with_short_for(path: Path, to: Path) -> Path:
    """The shipped rules with every `for:` cut to 5 s: the same expressions, without
    waiting minutes for them to hold."""
    rules = yaml.safe_load(path.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "5s"
    to.write_text(yaml.safe_dump(rules, sort_keys=False))
    return to


DASHBOARD_VARIABLES = {"job": "osprey", "instance": ".*", "node_job": "node", "__rate_interval": "1m"}


def with_variables(expr: str) -> str:
    """A dashboard query as Grafana sends it with the test's variable values."""

    def value(m):
        name = m.group(1) or m.group(2)
        assert name in DASHBOARD_VARIABLES, f"the dashboard uses ${name}, which this test does not know: {expr}"
        return DASHBOARD_VARIABLES[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def dashboard_queries():
    """(where, PromQL) of every panel target and every query variable of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
            assert m, f"variable {var['name']}: {var['definition']}"
            found.append((f"variable ${var['name']}", f"count by ({m.group(2)}) ({m.group(1)})"))
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    panels += [p for row in dashboard["panels"] if row["type"] == "row" for p in row.get("panels", [])]
    for p in panels:
        assert p.get("targets"), f"panel {p['title']!r} has no query"
        for t in p["targets"]:
            found.append((f"panel {p['title']!r} query {t['refId']}", t["expr"]))
    return [(where, with_variables(expr)) for where, expr in found]


def without_data(prometheus: Prometheus, queries):
    """The queries that evaluate to nothing, or only to NaN (a quantile of no events)."""
    return [(where, expr) for where, expr in queries
            if not any(not math.isnan(v) for _, v in prometheus.query(expr))]


def some_traffic(bootstrap: str, topic: str):
    """acks=all writes, a group that reads part of them and commits (so it has lag), one
    committed and one aborted transaction."""
    target = types.SimpleNamespace(bootstrap=bootstrap)
    p = clients.producer(target, acks="all")
    reports = clients.produce_all(p, topic, [{"value": b"v%d" % i, "key": b"k%d" % i} for i in range(300)])
    assert [r.error for r in reports] == [None] * 300
    c = clients.consumer(target, **{"group.id": "dashboard-readers", "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        read = clients.consume_exactly(c, 100, timeout=60, settle=0)
        ends = {}
        for m in read:
            ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
        c.commit(offsets=[TopicPartition(topic, p, end) for p, end in ends.items()], asynchronous=False)
    finally:
        c.close()
    t = Producer(dict(clients.COMMON, **{"bootstrap.servers": bootstrap, "transactional.id": "dashboard-txn"}))
    t.init_transactions(60)
    for commit in (True, False):
        t.begin_transaction()
        t.produce(topic, b"in a transaction")
        t.flush(30)
        (t.commit_transaction if commit else t.abort_transaction)(60)


def test_dashboard_is_grafana_json_with_a_data_source_variable_and_no_overlapping_panels():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids repeat"
    cells = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, f"{p['title']!r} is wider than the dashboard"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert all(t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == ["Cluster health", "Throughput", "Request latency", "Replication and ISR", "Consumer groups",
                    "Disk and fsync", "Transactions", "Process"]


@pytest.mark.timeout(600)
def test_under_replicated_alert_fires_on_a_kill_and_every_dashboard_query_has_data(tmp_path, request):
    need("prometheus", "prometheus")
    (tmp_path / "cluster").mkdir()
    cluster = combined(tmp_path / "cluster", FAST)
    request.node._osprey_brokers = cluster.nodes
    exporter_port = free_port()
    helpers = []
    try:
        cluster.start()
        want = {n.node_id for n in cluster.nodes}
        cluster.wait_for("every broker lists all three", lambda: all(listed_brokers(n) == want for n in cluster.nodes))
        cluster.wait_for_all_voters()
        exporter = Process("prometheus-node-exporter", [
            need("prometheus-node-exporter", "prometheus-node-exporter"),
            f"--web.listen-address=127.0.0.1:{exporter_port}", "--collector.disable-defaults",
            "--collector.filesystem"], tmp_path / "node-exporter.log")
        helpers.append(exporter)
        prometheus = Prometheus(tmp_path / "prometheus", {
            "osprey": [f"127.0.0.1:{n.metrics_port}" for n in cluster.nodes],
            "node": [f"127.0.0.1:{exporter_port}"],
        }, [rules_with_short_for(ALERTS, tmp_path / "osprey-alerts-5s.yml")])
        helpers.append(prometheus)
        prometheus.wait_ready()

        topic = "dashboard"
        admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": cluster.bootstrap()}))
        new = NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([new], operation_timeout=10)[topic].result(timeout=60)

        def healthy():
            exporter.check_running()
            return (prometheus.value('sum(up{job="osprey"})') == 3
                    and prometheus.value('sum(osprey_controller_active{job="osprey"})') == 1
                    and prometheus.value('sum(osprey_under_replicated_partitions{job="osprey"})') == 0
                    and prometheus.value('sum(osprey_leader_partitions{job="osprey"})') is not None)

        cluster.wait_for("Prometheus sees three nodes, one active controller, nothing under-replicated", healthy)
        assert not prometheus.alerts("OspreyUnderReplicatedPartitions", "firing")

        victim = cluster.node(3)
        victim.kill9()
        survivors = {f"127.0.0.1:{n.metrics_port}" for n in cluster.nodes if n is not victim}
        fired = cluster.wait_for(
            "OspreyUnderReplicatedPartitions firing in Prometheus",
            lambda: prometheus.alerts("OspreyUnderReplicatedPartitions", "firing"), timeout=2 * WAIT_S)
        assert {a["labels"]["instance"] for a in fired} <= survivors, fired
        down = cluster.wait_for("OspreyBrokerDown firing for the killed node",
                                lambda: prometheus.alerts("OspreyBrokerDown", "firing"), timeout=2 * WAIT_S)
        assert f"127.0.0.1:{victim.metrics_port}" in {a["labels"]["instance"] for a in down}, down

        victim.start()
        cluster.wait_for("the node back in every ISR, as Prometheus sees it", healthy, timeout=2 * WAIT_S)
        cluster.wait_for("the under-replicated alert resolved",
                         lambda: not prometheus.alerts("OspreyUnderReplicatedPartitions", "firing"))

        some_traffic(cluster.bootstrap(), topic)
        queries = dashboard_queries()
        # The rates need two scrapes after the traffic, the partition and group gauges a
        # refresh (5 s): poll until every query has data, then name those that never did.
        deadline = time.monotonic() + WAIT_S
        missing = without_data(prometheus, queries)
        while missing and time.monotonic() < deadline:
            time.sleep(2)
            missing = without_data(prometheus, missing)
        assert not missing, f"{len(missing)} of {len(queries)} dashboard queries return no data:\n" + "\n".join(
            f"  {where}: {expr}" for where, expr in missing)
        # A cluster node's exposition (controller, quorum and replication families a
        # single broker lacks) is as clean for promtool as a single broker's.
        for n in cluster.nodes:
            with urllib.request.urlopen(f"http://127.0.0.1:{n.metrics_port}/metrics", timeout=10) as r:
                text = r.read()
            assert b"osprey_controller_active" in text and b"osprey_under_replicated_partitions" in text
            checked = subprocess.run([need("promtool", "prometheus"), "check", "metrics"], input=text,
                                     capture_output=True, timeout=60)
            problems = (checked.stdout + checked.stderr).decode().strip()
            assert checked.returncode == 0 and not problems, f"node {n.node_id}: {problems}"
        for h in helpers:
            h.stop()
        cluster.stop()
    finally:
        for h in helpers:
            h.stop()
        cluster.kill_all()


# ----- systemd -----------------------------------------------------------------------

UNIT_ROLES = {
    "osprey.service": "broker,controller",
    "osprey-controller.service": "controller",
    "osprey-broker.service": "broker",
}


def read_properties(path: Path) -> dict:
    keys = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            keys[key.strip()] = value.strip()
    return keys


def test_systemd_units_pass_systemd_analyze_verify_and_install_a_config_of_their_role(tmp_path):
    need("systemd-analyze", "systemd")
    units = sorted((DEPLOY / "systemd").glob("*.service"))
    assert {u.name for u in units} == set(UNIT_ROLES)
    for unit in units:
        text = unit.read_text()
        m = re.search(r"^ExecStart=(\S+) (\S+)$", text, re.M)
        assert m, f"{unit.name}: no ExecStart=BINARY CONFIG"
        binary, config = m.groups()
        # The header's install steps put a file of deploy/ at the config path.
        installed = re.search(rf"install -D -m 0644 (\S+) {re.escape(config)}$", text, re.M)
        assert installed, f"{unit.name}: the install steps put nothing at {config}"
        keys = read_properties(REPO_ROOT / installed.group(1))
        assert keys["process.roles"] == UNIT_ROLES[unit.name], f"{unit.name} installs {installed.group(1)}"
        # ProtectSystem=strict: only the StateDirectory (/var/lib/osprey) is writable.
        assert "StateDirectory=osprey" in text and "ProtectSystem=strict" in text
        for d in keys["log.dirs"].split(",") + [keys.get("metadata.log.dir", "/var/lib/osprey")]:
            assert d.startswith("/var/lib/osprey"), f"{unit.name}: {d} is read-only to the service"
        # systemd-analyze checks that ExecStart's binary exists: the binary under test.
        copy = tmp_path / unit.name
        copy.write_text(text.replace(f"ExecStart={binary} ", f"ExecStart={osprey_bin()} "))
        verified = run_tool("systemd-analyze", "verify", str(copy))
        # It reports a bad key or value as a warning and still exits 0: any output fails.
        assert verified.returncode == 0 and not (verified.stdout + verified.stderr).strip(), (
            f"{unit.name}:\n{verified.stdout}{verified.stderr}")


# ----- container recipes -------------------------------------------------------------


class PortMap:
    """Rewrites the addresses of a container deployment to free loopback ports: each
    (node, port) gets its own, so three nodes that all listen on :9092 in their own
    containers can run side by side; paths under /var/lib/osprey move to a test dir."""

    ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*):(?P<port>\d{2,5})\b")
    LOOPBACK = ("0.0.0.0", "localhost", "127.0.0.1")

    def __init__(self, hosts: dict):
        self.hosts = hosts  # host name -> node
        self.ports = {}

    def port(self, node, port: int) -> int:
        if (node, port) not in self.ports:
            self.ports[(node, port)] = free_port()
        return self.ports[(node, port)]

    def rewrite(self, text: str, node, data_dir: Path = None) -> str:
        def address(m):
            host, port = m["host"], int(m["port"])
            if host in self.hosts:
                return f"127.0.0.1:{self.port(self.hosts[host], port)}"
            if host in self.LOOPBACK:
                return f"127.0.0.1:{self.port(node, port)}"
            return m.group(0)

        text = self.ADDRESS.sub(address, text)
        return text if data_dir is None else text.replace("/var/lib/osprey", str(data_dir))


def containerfile():
    """The Containerfile's instructions as (stage, instruction, arguments), continuation
    lines joined and comments dropped."""
    lines, joined = [], ""
    for line in (DEPLOY / "Containerfile").read_text().splitlines():
        if not joined and (not line.strip() or line.lstrip().startswith("#")):
            continue
        joined += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            lines.append(joined.strip())
            joined = ""
    stage, out = None, []
    for line in lines:
        op, _, rest = line.partition(" ")
        if op == "FROM":
            stage = rest.split(" AS ")[-1] if " AS " in rest else "runtime"
        out.append((stage, op, rest))
    return out


def image_files():
    """{path in the image: path in the repository} of the runtime stage's COPYs from the
    build context (a directory maps every file under it)."""
    files = {}
    for stage, op, rest in containerfile():
        if stage == "runtime" and op == "COPY" and not rest.startswith("--from"):
            src, dst = rest.split()
            source = REPO_ROOT / src
            assert source.exists(), f"COPY {src}: no such file in the build context"
            if source.is_dir():
                for f in source.rglob("*"):
                    files[dst.rstrip("/") + "/" + str(f.relative_to(source))] = f
            else:
                files[dst] = source
    return files


def start_as_in_image(name: str, args, ports: PortMap, node, workdir: Path, files=None):
    """Runs the binary under test with a container's arguments: its config file is the
    repository file the image copies (or the file `files` maps its path to: {path in
    the container: local file}), both rewritten by `ports`."""
    workdir.mkdir(parents=True)
    data = workdir / "data"
    config = workdir / Path(args[0]).name
    config.write_text(ports.rewrite((files or image_files())[args[0]].read_text(), node, data))
    rest = [ports.rewrite(a, node, data) for a in args[1:]]
    return Process(name, [str(osprey_bin()), str(config), *rest], workdir / "osprey.log")


def assert_no_unknown_keys(p: Process):
    log = p.log_path.read_text(errors="replace")
    assert "not used by osprey" not in log, f"{p.name} was given keys osprey does not know:\n{p.log_tail()}"


def wait_api_versions(p: Process, port: int):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        p.check_running()
        try:
            with kafkawire.Conn("127.0.0.1", port, timeout=2.0) as c:
                _, error, ranges = kafkawire.parse_api_versions_v0(c.roundtrip(kafkawire.api_versions_v0(1)))
                if error == 0 and kafkawire.API_PRODUCE in ranges:
                    return
        except (OSError, kafkawire.Closed):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{p.name} does not answer ApiVersions on {port}:\n{p.log_tail()}")


def stop_cleanly(p: Process):
    p.proc.send_signal(signal.SIGTERM)
    code = p.proc.wait(timeout=60)
    assert code == 0, f"{p.name} exited with {code} after SIGTERM:\n{p.log_tail()}"


def test_containerfile_runs_the_binary_it_builds_and_its_default_command_starts_a_broker(tmp_path):
    instructions = containerfile()
    stages = [rest for _, op, rest in instructions if op == "FROM"]
    assert len(stages) == 2 and " AS builder" in stages[0] and "debian" in stages[1] and "slim" in stages[1], stages
    workdir = next(rest for stage, op, rest in instructions if stage == "builder" and op == "WORKDIR")
    build = next(rest for stage, op, rest in instructions if stage == "builder" and op == "RUN")
    assert "cargo build --release" in build and "-p osprey-server" in build and "--bin osprey" in build, build
    copied = next(rest.split()[1:] for stage, op, rest in instructions if op == "COPY" and rest.startswith("--from=builder"))
    assert copied[0] == f"{workdir}/target/release/osprey", f"the builder makes {workdir}/target/release/osprey, not {copied[0]}"
    entrypoint = json.loads(next(rest for _, op, rest in instructions if op == "ENTRYPOINT"))
    assert entrypoint == [copied[1]], f"ENTRYPOINT {entrypoint} is not the binary copied to {copied[1]}"
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert "target/" in ignored, "the build context would carry target/"

    command = json.loads(next(rest for _, op, rest in instructions if op == "CMD"))
    ports = PortMap({})
    p = start_as_in_image("the image's default command", command, ports, "single", tmp_path / "single")
    try:
        wait_api_versions(p, ports.port("single", 9092))
        status, text = http_get(f"http://127.0.0.1:{ports.port('single', 9644)}/metrics")
        assert status == 200 and "osprey_connections" in text
        assert_no_unknown_keys(p)
        stop_cleanly(p)
    finally:
        p.stop()


def plaintext_port(listeners: str, ports: PortMap, node) -> int:
    """The loopback port that the PLAINTEXT address of a node's `listeners` or
    `advertised.listeners` is mapped to."""
    address = ports.rewrite(listeners, node)
    return int(address.split("PLAINTEXT://")[1].split(",")[0].rsplit(":", 1)[1])


def assert_nodes_form_a_cluster_that_serves(processes: dict, plaintext: dict, advertised: dict, metrics_urls: dict,
                                            node_ids: set, topic: str):
    """Nodes started from a container recipe ({name: Process}, with the loopback ports
    their PLAINTEXT listeners and advertised addresses are mapped to) answer ApiVersions,
    list each other, tell clients addresses that reach them, and take a topic of
    replication factor 3, an acks=all produce and a consume; each serves its metrics URL,
    and none was given a key osprey does not know."""
    for name, p in processes.items():
        wait_api_versions(p, plaintext[name])
    brokers = [types.SimpleNamespace(host="127.0.0.1", port=port) for port in plaintext.values()]
    deadline = time.monotonic() + WAIT_S
    while not all(listed_brokers(b) == node_ids for b in brokers):
        for p in processes.values():
            p.check_running()
        assert time.monotonic() < deadline, f"the nodes never listed each other ({sorted(node_ids)})"
        time.sleep(0.5)

    # Every node tells clients the others' advertised addresses, which reach them.
    assert advertised == plaintext, "a node advertises another port than it listens on"
    for b in brokers:
        md = metadata_states(b)
        assert md is not None and sorted(md[0].values()) == sorted(advertised.values()), md
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in advertised.values())
    admin = AdminClient(dict(clients.COMMON, **{"bootstrap.servers": bootstrap}))
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=10)[topic].result(timeout=60)
    target = types.SimpleNamespace(bootstrap=bootstrap)
    reports = clients.produce_all(clients.producer(target, acks="all"), topic, [{"value": b"x"}] * 10)
    assert [r.error for r in reports] == [None] * 10
    assert len(clients.read_partitions(target, topic, [0], 10)) == 10
    for name, p in processes.items():
        status, _ = http_get(metrics_urls[name])
        assert status == 200, f"{name}: {metrics_urls[name]} answered {status}"
        assert_no_unknown_keys(p)


def compose():
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def override(command, key: str) -> str:
    values = [a.split("=", 1)[1] for a in command if a.startswith(f"{key}=")]
    assert len(values) == 1, f"{key} given {len(values)} times in {command}"
    return values[0]


@pytest.mark.timeout(300)
def test_compose_nodes_started_with_their_commands_form_a_cluster_prometheus_scrapes(tmp_path):
    spec = compose()
    nodes = {name: s for name, s in spec["services"].items() if name.startswith("osprey-")}
    assert len(nodes) == 3
    for name, s in nodes.items():
        assert s["build"] == {"context": "..", "dockerfile": "deploy/Containerfile"}, s["build"]
        assert s["hostname"] == name
    ports = PortMap({name: name for name in nodes})
    processes = {name: start_as_in_image(name, s["command"], ports, name, tmp_path / name) for name, s in nodes.items()}
    try:
        plaintext = {name: plaintext_port(override(s["command"], "listeners"), ports, name) for name, s in nodes.items()}
        advertised = {name: plaintext_port(override(s["command"], "advertised.listeners"), ports, name)
                      for name, s in nodes.items()}
        metrics = {name: override(s["command"], "metrics.listener").rsplit(":", 1)[1] for name, s in nodes.items()}
        metrics_urls = {name: f"http://127.0.0.1:{ports.port(name, int(port))}/metrics" for name, port in metrics.items()}
        assert_nodes_form_a_cluster_that_serves(processes, plaintext, advertised, metrics_urls, {1, 2, 3}, "compose")

        # prometheus.yml scrapes these nodes' metrics listeners, and compose mounts it.
        scraped = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
        targets = {c["job_name"]: set(t for sc in c["static_configs"] for t in sc["targets"]) for c in scraped}
        assert targets["osprey"] == {f"{name}:{port}" for name, port in metrics.items()}
        assert targets["node"] == {"node-exporter:9100"} and "node-exporter" in spec["services"]
        assert "./prometheus:/etc/prometheus:ro" in spec["services"]["prometheus"]["volumes"]
        for p in processes.values():
            stop_cleanly(p)
    finally:
        for p in processes.values():
            p.stop()

