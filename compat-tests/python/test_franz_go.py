"""franz-go (Go) consumers against Osprey, while what they fetch changes under them:
group rebalances with fetches in flight, added partitions, seeks. franz-go resets its
KIP-227 fetch session with its old session id and epoch 0; Kafka closes that session
and opens a new one. The scenarios are `compat-tests/go/franzfetch`, built here with
`go build` into `compat-tests/go/bin/` (gitignored; Go caches the build)."""

import shutil
import subprocess
from pathlib import Path

import pytest

GO_DIR = Path(__file__).resolve().parents[1] / "go"
BINARY = GO_DIR / "bin" / "franzfetch"
SCENARIO_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def franzfetch():
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed: the franz-go scenarios cannot be built")
    subprocess.run([go, "build", "-o", str(BINARY), "./franzfetch"], cwd=GO_DIR, check=True, timeout=600)
    return BINARY


def run_scenario(binary, broker, scenario, tmp_path):
    log = tmp_path / f"franz-{scenario}.log"
    with open(log, "wb") as err:
        try:
            done = subprocess.run(
                [str(binary), "-brokers", broker.bootstrap, "-scenario", scenario, "-topic", f"franz-{scenario}",
                 "-timeout", f"{SCENARIO_TIMEOUT_S}s"],
                stdout=subprocess.PIPE, stderr=err, timeout=SCENARIO_TIMEOUT_S + 30,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"franzfetch {scenario} hung past its own deadline")
    text = log.read_text(errors="replace")
    resets = text.count("resetting fetch session")
    tail = "\n".join(text.splitlines()[-40:])
    assert done.returncode == 0, f"franzfetch {scenario} exited {done.returncode}:\n{tail}"
    assert done.stdout.strip() == b"ok"
    # Each reset is answered with a new session, not with the same error again.
    assert resets < 20, f"{resets} fetch session resets: franz-go is looping\n{tail}"


@pytest.mark.timeout(720)
def test_franz_go_group_members_join_and_leave_and_partitions_are_added(franzfetch, broker, tmp_path):
    run_scenario(franzfetch, broker, "group", tmp_path)


@pytest.mark.timeout(720)
def test_franz_go_direct_consumer_seeks_back_and_adds_a_partition(franzfetch, broker, tmp_path):
    run_scenario(franzfetch, broker, "seek", tmp_path)
