"""The Kubernetes manifests of deploy/kubernetes/ (issue 19), tested as far as a machine
without a cluster can:

- kubeconform, built from its Go module, passes every manifest in strict mode against
  the JSON schemas of two Kubernetes releases, and refuses broken copies (a misspelled
  field, a wrong type, a missing required field, a repeated key, an unknown
  apiVersion). kubeconform downloads its schemas from GitHub by default; here they are
  made from Kubernetes' own OpenAPI document, api/openapi-spec/swagger.json of the
  k8s.io/kubernetes Go module, the way its schema repository makes them (each kind's
  definition standalone, strict: no property the API does not define);
- the manifests agree with each other (selectors, Service names, ports, probes, mount
  paths, the replica count and the quorum's voters) and with the other recipes (the
  image and grace period of compose.yaml, the keys of deploy/config/combined.properties);
- the StatefulSet's command, run by /bin/sh with the environment each pod gets (its
  name and namespace), execs osprey with the pod's arguments (so osprey is PID 1 and
  gets Kubernetes' SIGTERM); the three nodes started with those arguments (the pods'
  DNS names mapped to free loopback ports, as test_deploy.py does for compose.yaml)
  form a cluster that serves clients, pass both probes, and stop cleanly on SIGTERM.

Needs Go (on the machine; the module proxy for kubeconform and k8s.io/kubernetes).
Every wait polls until true; times are never asserted.
"""

import copy
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT
from test_deploy import (PortMap, assert_nodes_form_a_cluster_that_serves, compose, containerfile,
                         plaintext_port, read_properties, start_as_in_image, stop_cleanly)

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
GO_BIN = REPO_ROOT / "compat-tests" / "go" / "bin"
KUBECONFORM = "github.com/yannh/kubeconform/cmd/kubeconform"
KUBECONFORM_VERSION = "v0.8.0"
# Kubernetes' API as of 1.34 and of 1.37 (the newest release the Go module proxy served
# when this was written): a field too new for the older or removed from the newer fails.
KUBERNETES_VERSIONS = ("v1.34.4", "v1.37.2")
GO_TIMEOUT_S = 600
# What the test's pods are called and where they run.
NAMESPACE = "osprey-test"
CLUSTER_DOMAIN = "svc.cluster.local"
# Keys set per pod by the StatefulSet's command, and the keys whose values are a pod's
# addresses and paths rather than those of deploy/cluster.sh's node 1.
PER_POD_KEYS = {"node.id", "controller.quorum.voters", "advertised.listeners"}
ADDRESS_KEYS = {"listeners", "log.dirs", "metrics.listener"}


def go() -> str:
    path = shutil.which("go")
    if path is None:
        pytest.fail("go is not installed: kubeconform and the Kubernetes API schemas come from Go modules")
    return path


def run_go(*args, env=None, cwd=None):
    done = subprocess.run([go(), *args], capture_output=True, text=True, timeout=GO_TIMEOUT_S, cwd=cwd,
                          env=dict(os.environ, **(env or {})))
    assert done.returncode == 0, f"go {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def kubeconform():
    """kubeconform built by `go install` into compat-tests/go/bin (gitignored; Go caches
    the build, so a second run only links)."""
    run_go("install", f"{KUBECONFORM}@{KUBECONFORM_VERSION}", env={"GOBIN": str(GO_BIN)}, cwd=GO_BIN.parent)
    return GO_BIN / "kubeconform"


@pytest.fixture(scope="module")
def schemas(tmp_path_factory):
    """{Kubernetes version: directory of kubeconform's strict JSON schemas}, made from the
    OpenAPI document of the k8s.io/kubernetes module (downloaded into the module cache,
    18 MB a release)."""
    made = {}
    for version in KUBERNETES_VERSIONS:
        # Outside any module, so that no go.mod is read or written.
        where = tmp_path_factory.mktemp(f"go-{version}")
        module = json.loads(run_go("mod", "download", "-json", f"k8s.io/kubernetes@{version}", cwd=where))
        swagger = json.loads((Path(module["Dir"]) / "api" / "openapi-spec" / "swagger.json").read_text())
        made[version] = json_schemas(swagger, tmp_path_factory.mktemp(f"schemas-{version}"))
    return made


def json_schemas(swagger: dict, out: Path) -> Path:
    """One JSON schema file per kind of the OpenAPI (v2) document, named as kubeconform
    looks it up ({kind}-{group}-{version}.json, the group's first label; core kinds
    {kind}-{version}.json), as kubernetes-json-schema's "standalone-strict" ones are made:
    every object that lists its properties allows no others (kubectl's strict
    validation), an int-or-string is either, a quantity a string or a number, and each
    file carries the definitions it refers to."""
    definitions = forbid_other_properties(copy.deepcopy(swagger["definitions"]))
    definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"oneOf": [{"type": "string"},
                                                                                {"type": "integer"}]}
    definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {"oneOf": [{"type": "string"},
                                                                              {"type": "number"}]}
    for definition in definitions.values():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            group = gvk["group"].split(".")[0]
            name = "-".join(part for part in (gvk["kind"].lower(), group, gvk["version"]) if part) + ".json"
            referred = referred_definitions(definition, definitions, set())
            schema = dict(definition, definitions={d: definitions[d] for d in sorted(referred)})
            (out / name).write_text(json.dumps(schema))
    return out


def forbid_other_properties(node):
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for value in node.values():
            forbid_other_properties(value)
    elif isinstance(node, list):
        for value in node:
            forbid_other_properties(value)
    return node


def referred_definitions(node, definitions: dict, found: set) -> set:
    """The names of the definitions `node` refers to, directly or through others."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        # JSONSchemaProps has a property named "$ref": its value is a schema, not a string.
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            name = ref.removeprefix("#/definitions/")
            if name not in found:
                found.add(name)
                referred_definitions(definitions[name], definitions, found)
        for value in node.values():
            referred_definitions(value, definitions, found)
    elif isinstance(node, list):
        for value in node:
            referred_definitions(value, definitions, found)
    return found


def validate(kubeconform: Path, schema_dir: Path, *paths):
    """kubeconform -strict on `paths` with the schemas of `schema_dir` only (no download):
    (exit code, its JSON report)."""
    done = subprocess.run([str(kubeconform), "-strict", "-summary", "-output", "json",
                           "-schema-location", f"{schema_dir}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
                           *map(str, paths)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout)


def manifest_files():
    files = sorted(MANIFESTS.glob("*.yaml"))
    assert files, f"no manifests in {MANIFESTS}"
    return files


def manifests():
    """{kind: [object, ...]} of every document in deploy/kubernetes/."""
    found = {}
    for f in manifest_files():
        for doc in yaml.safe_load_all(f.read_text()):
            found.setdefault(doc["kind"], []).append(doc)
    return found


def the(kind: str):
    objects = manifests()[kind]
    assert len(objects) == 1, f"{len(objects)} {kind}s"
    return objects[0]


# ----- schemas -----------------------------------------------------------------------


@pytest.mark.timeout(GO_TIMEOUT_S * 3)
def test_manifests_pass_kubeconform_strict_against_two_kubernetes_releases(kubeconform, schemas):
    count = sum(len(objects) for objects in manifests().values())
    for version, schema_dir in schemas.items():
        code, report = validate(kubeconform, schema_dir, *manifest_files())
        assert code == 0 and report["summary"] == {"valid": count, "invalid": 0, "errors": 0, "skipped": 0}, (
            f"Kubernetes {version}: {json.dumps(report, indent=2)}")


# A broken copy of the StatefulSet each, and what kubeconform must say about it.
BROKEN = {
    "a misspelled field": (lambda s: s["spec"].update(podManagmentPolicy=s["spec"].pop("podManagementPolicy")),
                           "additional properties 'podManagmentPolicy' not allowed"),
    "a misspelled field in the pod template": (
        lambda s: container(s)["readinessProbe"].update(tcpSockett=container(s)["readinessProbe"].pop("tcpSocket")),
        "additional properties 'tcpSockett' not allowed"),
    "a port as a string": (lambda s: container(s)["ports"][0].update(containerPort="9092"), "want integer"),
    "a container without a name": (lambda s: container(s).pop("name"), "missing property 'name'"),
    "an apiVersion that does not exist": (lambda s: s.update(apiVersion="apps/v2"), "could not find schema"),
}


def container(statefulset: dict) -> dict:
    return statefulset["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.timeout(GO_TIMEOUT_S * 3)
def test_kubeconform_refuses_broken_copies_of_the_statefulset(kubeconform, schemas, tmp_path):
    schema_dir = schemas[KUBERNETES_VERSIONS[-1]]
    copies = {}
    for what, (breaks, _) in BROKEN.items():
        broken = the("StatefulSet")
        breaks(broken)
        copies[what] = tmp_path / (re.sub(r"\W+", "-", what) + ".yaml")
        copies[what].write_text(yaml.safe_dump(broken))
    # A key given twice: YAML allows it, kubectl takes the last; strict mode refuses it.
    text = (MANIFESTS / "statefulset.yaml").read_text()
    assert "\n  replicas: 3\n" in text
    copies["a repeated key"] = tmp_path / "repeated-key.yaml"
    copies["a repeated key"].write_text(text.replace("\n  replicas: 3\n", "\n  replicas: 3\n  replicas: 5\n"))
    expected = {what: said for what, (_, said) in BROKEN.items()} | {"a repeated key": 'key "replicas" already set'}
    for what, path in copies.items():
        code, report = validate(kubeconform, schema_dir, path)
        said = "\n".join(r["msg"] for r in report["resources"])
        assert code != 0 and report["summary"]["valid"] == 0, f"{what}: accepted: {json.dumps(report)}"
        assert expected[what] in said, f"{what}: {said}"


# ----- the manifests together --------------------------------------------------------


def pod_command(statefulset: dict):
    """The container's command and arguments, as one argv."""
    c = container(statefulset)
    return c.get("command", []) + c.get("args", [])


def container_port(statefulset: dict, port) -> int:
    """A probe's or Service's port: a number, or the name of a container port."""
    if isinstance(port, int):
        return port
    ports = {p["name"]: p["containerPort"] for p in container(statefulset)["ports"]}
    assert port in ports, f"no container port named {port}"
    return ports[port]


def config_files(statefulset: dict, config_maps, workdir: Path) -> dict:
    """{path in the container: local copy} of each ConfigMap key the pods mount."""
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    by_name = {m["metadata"]["name"]: m for m in config_maps}
    files = {}
    for mount in container(statefulset)["volumeMounts"]:
        volume = volumes.get(mount["name"], {})
        if "configMap" in volume:
            for key, text in by_name[volume["configMap"]["name"]]["data"].items():
                local = workdir / key
                local.write_text(text)
                files[f"{mount['mountPath']}/{key}"] = local
    return files


def test_manifests_agree_with_each_other_and_with_the_other_recipes(tmp_path):
    objects = manifests()
    assert sorted(objects) == ["ConfigMap", "PodDisruptionBudget", "Service", "StatefulSet"]
    sts = the("StatefulSet")
    spec, pod = sts["spec"], sts["spec"]["template"]["spec"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"

    services = {s["metadata"]["name"]: s["spec"] for s in objects["Service"]}
    headless = services[spec["serviceName"]]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    for name, s in services.items():
        assert s["selector"].items() <= labels.items(), f"Service {name} selects no pod"
        for p in s["ports"]:
            assert container_port(sts, p["targetPort"]) == p["port"], f"Service {name} port {p['name']}"
    pdb = the("PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()

    # The properties: combined.properties' keys and values but for a pod's addresses.
    files = config_files(sts, objects["ConfigMap"], tmp_path)
    [(config_path, config_file)] = files.items()
    keys = read_properties(config_file)
    combined = read_properties(REPO_ROOT / "deploy" / "config" / "combined.properties")
    assert set(keys) == set(combined) - PER_POD_KEYS, "the ConfigMap's keys are not combined.properties' keys"
    assert {k: v for k, v in keys.items() if k not in ADDRESS_KEYS} == {
        k: v for k, v in combined.items() if k not in ADDRESS_KEYS | PER_POD_KEYS}
    assert {k: keys[k] for k in ("default.replication.factor", "min.insync.replicas",
                                 "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                                 "transaction.state.log.min.isr")} == {
        "default.replication.factor": "3", "min.insync.replicas": "2", "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}
    assert config_path in " ".join(pod_command(sts)), f"the command does not read {config_path}"

    # Probes: ready once the PLAINTEXT listener accepts, alive while /metrics answers.
    listeners = dict(re.findall(r"(\w+)://[^:,]+:(\d+)", keys["listeners"]))
    c = container(sts)
    assert container_port(sts, c["readinessProbe"]["tcpSocket"]["port"]) == int(listeners["PLAINTEXT"])
    assert container_port(sts, c["livenessProbe"]["httpGet"]["port"]) == int(keys["metrics.listener"].rsplit(":", 1)[1])
    assert container_port(sts, "controller") == int(listeners["CONTROLLER"])

    # Data in the volume claim, under the image's /var/lib/osprey.
    [claim] = spec["volumeClaimTemplates"]
    [data_mount] = [m for m in c["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    assert keys["log.dirs"].startswith(data_mount["mountPath"] + "/")

    # The image, user and grace period of the other container recipes.
    node = next(s for name, s in compose()["services"].items() if name.startswith("osprey-"))
    assert c["image"] == node["image"]
    assert pod["terminationGracePeriodSeconds"] == int(node["stop_grace_period"].removesuffix("s"))
    useradd = next(rest for stage, op, rest in containerfile() if stage == "runtime" and op == "RUN")
    uid = re.search(r"--uid (\d+)", useradd).group(1)
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == int(uid)
    entrypoint = json.loads(next(rest for _, op, rest in containerfile() if op == "ENTRYPOINT"))
    assert f"exec {entrypoint[0]} " in pod_command(sts)[-1], "the command does not exec the image's osprey"


# ----- the pods' command -------------------------------------------------------------


def kubelet_expand(arg: str, env: dict) -> str:
    """What the kubelet does to a command or argument before running it: $(NAME) of a
    variable the container defines becomes its value, $$ becomes $, anything else stays."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), arg)


def pod_env(statefulset: dict, pod_name: str) -> dict:
    """The container's variables in pod `pod_name` of NAMESPACE, with the host name the
    kubelet sets."""
    fields = {"metadata.name": pod_name, "metadata.namespace": NAMESPACE}
    env = {"HOSTNAME": pod_name}
    for var in container(statefulset).get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in fields, f"{var['name']} comes from {path}, which this test does not give"
            env[var["name"]] = fields[path]
    return env


def run_pod_command(statefulset: dict, pod_name: str, workdir: Path):
    """Runs the container's command as a pod's container would, with a stand-in for the
    image's osprey that records its arguments: (exit code, stderr, the arguments, whether
    the stand-in ran in the process the command started, i.e. the shell exec'd it)."""
    entrypoint = json.loads(next(rest for _, op, rest in containerfile() if op == "ENTRYPOINT"))[0]
    workdir.mkdir(parents=True, exist_ok=True)
    stand_in = workdir / "osprey-stand-in"
    recorded, pid = workdir / "argv", workdir / "pid"
    stand_in.write_text(f"#!/bin/sh\necho $$ > {pid}\nprintf '%s\\0' \"$@\" > {recorded}\n")
    stand_in.chmod(0o755)
    env = pod_env(statefulset, pod_name)
    argv = [kubelet_expand(a, env).replace(entrypoint, str(stand_in)) for a in pod_command(statefulset)]
    proc = subprocess.Popen(argv, env=dict(env, PATH=os.environ["PATH"]), stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=30)
    if not recorded.exists():
        return proc.returncode, stderr, None, False
    args = recorded.read_text().split("\0")[:-1]
    return proc.returncode, stderr, args, int(pid.read_text()) == proc.pid


def pod_dns_name(statefulset: dict, pod_name: str) -> str:
    return f"{pod_name}.{statefulset['spec']['serviceName']}.{NAMESPACE}.{CLUSTER_DOMAIN}"


def test_pod_command_refuses_a_pod_name_without_an_ordinal(tmp_path):
    code, stderr, args, _ = run_pod_command(the("StatefulSet"), "osprey", tmp_path)
    assert code != 0 and args is None and "does not end in -N" in stderr, stderr


def test_a_pod_beyond_the_voters_stops_at_start_saying_so(tmp_path):
    """The StatefulSet scaled to four: osprey-3 is node 4, which is no voter."""
    sts = the("StatefulSet")
    pod = f"{sts['metadata']['name']}-{sts['spec']['replicas']}"
    code, stderr, args, _ = run_pod_command(sts, pod, tmp_path / "command")
    assert code == 0 and args, stderr
    files = config_files(sts, manifests()["ConfigMap"], tmp_path)
    p = start_as_in_image(pod, args, PortMap({}), pod, tmp_path / pod, files)
    try:
        code = p.proc.wait(timeout=60)
        assert code != 0, p.log_tail()
        assert "expected a list including this node's id 4" in p.log_tail(), p.log_tail()
    finally:
        p.stop()


@pytest.mark.timeout(300)
def test_pods_started_with_the_statefulset_command_form_a_cluster_and_pass_their_probes(tmp_path):
    sts = the("StatefulSet")
    pods = [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]
    files = config_files(sts, manifests()["ConfigMap"], tmp_path)
    argv = {}
    for pod in pods:
        code, stderr, args, exec_d = run_pod_command(sts, pod, tmp_path / "commands" / pod)
        assert code == 0 and args, f"{pod}: the command exited {code} without running osprey:\n{stderr}"
        assert exec_d, f"{pod}: osprey is not the process the command started (no exec): not PID 1, no SIGTERM"
        assert args[0] in files, f"{pod}: osprey reads {args[0]}, which no ConfigMap provides"
        argv[pod] = args

    # Node ids from the ordinals; every pod lists the same voters, by their DNS names.
    overrides = {pod: dict(a.split("=", 1) for a in args[2::2]) for pod, args in argv.items()}
    assert all(args[1::2] == ["--override"] * len(args[1::2]) for args in argv.values()), argv
    assert [overrides[pod]["node.id"] for pod in pods] == ["1", "2", "3"]
    voters = {o["controller.quorum.voters"] for o in overrides.values()}
    assert voters == {",".join(f"{i + 1}@{pod_dns_name(sts, pod)}:9093" for i, pod in enumerate(pods))}, voters

    ports = PortMap({pod_dns_name(sts, pod): pod for pod in pods})
    keys = read_properties(files[argv[pods[0]][0]])
    processes = {pod: start_as_in_image(pod, argv[pod], ports, pod, tmp_path / pod, files) for pod in pods}
    try:
        plaintext = {pod: plaintext_port(keys["listeners"], ports, pod) for pod in pods}
        advertised = {pod: plaintext_port(overrides[pod]["advertised.listeners"], ports, pod) for pod in pods}
        # The liveness probe's URL, as the kubelet asks it.
        live = container(sts)["livenessProbe"]["httpGet"]
        liveness = {pod: f"http://127.0.0.1:{ports.port(pod, container_port(sts, live['port']))}{live['path']}"
                    for pod in pods}
        assert_nodes_form_a_cluster_that_serves(processes, plaintext, advertised, liveness, {1, 2, 3}, "kubernetes")
        # The readiness probe: a TCP connection, as the kubelet opens it.
        ready = container_port(sts, container(sts)["readinessProbe"]["tcpSocket"]["port"])
        for pod in pods:
            socket.create_connection(("127.0.0.1", ports.port(pod, ready)), timeout=5).close()
        for p in processes.values():
            stop_cleanly(p)
    finally:
        for p in processes.values():
            p.stop()
