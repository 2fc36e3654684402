"""Starts the real `osprey` binary for each test: free ports, a fresh data directory,
readiness checked with a raw ApiVersions v0 request, output captured to a file that is
shown when the test fails, and a clean SIGTERM stop (exit code 0) at the end.

The binary is `$OSPREY_BIN`, default `target/debug/osprey` under the repository root.
"""

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import kafkawire

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 200
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def osprey_bin() -> Path:
    path = Path(os.environ.get("OSPREY_BIN", "target/debug/osprey"))
    return path if path.is_absolute() else REPO_ROOT / path


_PORTS_HANDED_OUT: set = set()


def free_port() -> int:
    """A port the OS just handed out for port 0, never one this test run handed out before.

    The port is free again once the probing socket closes, so the OS may offer it twice in a
    row (CI once gave a broker's listener and its metrics listener the same port); remembering
    what was handed out keeps the ports of one run distinct."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _PORTS_HANDED_OUT:
            _PORTS_HANDED_OUT.add(port)
            return port


class Broker:
    """One osprey process. Ports and data directory stay the same across restarts."""

    def __init__(self, workdir: Path, overrides=None, env=None):
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.port = free_port()
        self.metrics_port = free_port()
        self.overrides = dict(overrides or {})
        # Set for the process over this one's environment; None unsets a variable.
        self.env = dict(env or {})
        self.proc = None
        self.starts = 0

    # ----- addresses ----------------------------------------------------------------

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int:
        return self.proc.pid

    # ----- lifecycle ----------------------------------------------------------------

    def start(self):
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self):
        """Starts the process without waiting for it to be ready."""
        assert self.proc is None, "already running"
        args = self.command()
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"===== start #{self.starts}: {' '.join(args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.environment())

    def command(self) -> list:
        binary = osprey_bin()
        assert binary.is_file(), f"{binary} does not exist: build it (cargo build -p osprey-server --bin osprey)"
        args = [
            str(binary),
            "--override", f"listeners=PLAINTEXT://{self.host}:{self.port}",
            "--override", f"log.dirs={self.data_dir}",
            "--override", f"metrics.listener={self.host}:{self.metrics_port}",
        ]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def environment(self) -> dict:
        """This process's environment, without colours unless `env` says otherwise."""
        env = dict(os.environ, NO_COLOR="1")
        for key, value in self.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def wait_ready(self, timeout: float = READY_TIMEOUT_S):
        """Until the broker answers a raw ApiVersions v0 request on its listener."""
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise AssertionError(f"osprey exited with {code} while starting:\n{self.log_tail()}")
            try:
                with kafkawire.Conn(self.host, self.port, timeout=2.0) as c:
                    correlation_id, error_code, ranges = kafkawire.parse_api_versions_v0(
                        c.roundtrip(kafkawire.api_versions_v0(7))
                    )
                    if correlation_id == 7 and error_code == 0 and kafkawire.API_PRODUCE in ranges:
                        return
                    last_error = f"ApiVersions answered correlation {correlation_id}, error {error_code}"
            except (OSError, kafkawire.Closed) as e:
                last_error = e
            time.sleep(0.05)
        raise AssertionError(f"osprey not ready after {timeout}s ({last_error}):\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> float:
        """SIGTERM; asserts a clean exit (code 0). Returns how long the stop took."""
        assert self.proc is not None, "not running"
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None
            raise AssertionError(f"osprey did not stop within {timeout}s of SIGTERM:\n{self.log_tail()}")
        self.proc = None
        assert code == 0, f"osprey exited with {code} after SIGTERM:\n{self.log_tail()}"
        return time.monotonic() - started

    def kill9(self):
        """SIGKILL: the process dies at once, as in a power cut of the process."""
        assert self.proc is not None, "not running"
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None
        with open(self.log_path, "ab") as log:
            log.write(b"===== killed with SIGKILL\n")

    def restart(self, clean: bool = True):
        """Stops (SIGTERM if `clean`, else SIGKILL) and starts on the same data and ports."""
        if clean:
            self.stop()
        else:
            self.kill9()
        return self.start()

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ----- observations -------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return _ANSI.sub("", self.log_path.read_text(errors="replace"))
        except FileNotFoundError:
            return ""

    def log_since_last_start(self) -> str:
        text = self.log_text()
        marker = f"===== start #{self.starts}:"
        return text[text.rfind(marker):] if marker in text else text

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc status")

    def partition_dirs(self, topic: str):
        return sorted(p for p in self.data_dir.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] == topic)


# ----- fixtures -----------------------------------------------------------------------


@pytest.fixture
def start_broker(tmp_path, request):
    """`start_broker(**overrides)` starts a broker (keys with dots: pass a dict).
    Every broker still running at the end is stopped with SIGTERM and must exit 0."""
    brokers = []
    request.node._osprey_brokers = brokers

    def start(overrides=None, **kw):
        merged = dict(overrides or {})
        merged.update({k.replace("_", "."): v for k, v in kw.items()})
        b = Broker(tmp_path / f"broker{len(brokers)}", merged)
        b.workdir.mkdir(parents=True)
        brokers.append(b)
        return b.start()

    yield start
    failures = []
    for b in brokers:
        if b.proc is None:
            continue
        try:
            b.stop()
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n\n".join(failures)


@pytest.fixture
def broker(start_broker) -> Broker:
    """A fresh broker with default settings, for one test."""
    return start_broker()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for i, b in enumerate(getattr(item, "_osprey_brokers", [])):
            report.sections.append((f"osprey broker {i} log ({b.log_path})", b.log_tail()))
