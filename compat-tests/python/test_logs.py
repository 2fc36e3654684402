"""The broker's log lines as systemd, a file or a log collector get them: ANSI colour codes
only when stderr is a terminal (and never with NO_COLOR set), JSON lines with
OSPREY_LOG_FORMAT=json, and a startup error naming the allowed formats for any other value.

Each test reads the raw bytes the process wrote: conftest's log helpers strip colour codes."""

import datetime
import json
import os
import pty
import select
import signal
import subprocess
import time

import clients
from conftest import READY_TIMEOUT_S, STOP_TIMEOUT_S, Broker

COLOUR = b"\x1b["


def run_broker(tmp_path, env) -> bytes:
    """Starts a broker whose output goes to a file (a pipe, not a terminal), creates a
    topic, stops it cleanly; returns what it wrote."""
    b = Broker(tmp_path / "broker", env=env)
    b.workdir.mkdir(parents=True)
    b.start()
    try:
        clients.create_topic(b, "logged")
    finally:
        b.stop()
    return b.log_path.read_bytes()


def test_log_lines_to_a_file_carry_no_colour_codes(tmp_path):
    """NO_COLOR unset and a colour terminal type in the environment: the output still is
    not a terminal, so it has no escape sequence."""
    written = run_broker(tmp_path, {"NO_COLOR": None, "TERM": "xterm-256color"})
    assert b"osprey is ready" in written
    assert COLOUR not in written, written[:2000]


def read_terminal(master: int, proc, until: bytes, timeout: float) -> bytes:
    """What the process writes to the terminal whose master side is `master`, until
    `until` shows up (or the process ends, or `timeout` passes)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while until not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every slave side is closed, the process is gone
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    return seen


def run_on_terminal(tmp_path, env) -> bytes:
    """Starts a broker whose stdout and stderr are a pseudo-terminal, waits until it is
    ready, stops it with SIGTERM (exit code 0); returns what it wrote there."""
    b = Broker(tmp_path / "terminal", env=env)
    b.workdir.mkdir(parents=True)
    master, slave = pty.openpty()
    proc = subprocess.Popen(b.command(), stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=b.environment())
    os.close(slave)
    try:
        seen = read_terminal(master, proc, b"osprey is ready", READY_TIMEOUT_S)
        assert b"osprey is ready" in seen, seen[-2000:]
        proc.send_signal(signal.SIGTERM)
        seen += read_terminal(master, proc, b"\0never\0", STOP_TIMEOUT_S)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0, seen[-2000:]
        return seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_log_lines_on_a_terminal_are_coloured_unless_no_color_is_set(tmp_path):
    coloured = run_on_terminal(tmp_path / "colour", {"NO_COLOR": None, "TERM": "xterm-256color"})
    assert COLOUR in coloured, coloured[:2000]
    plain = run_on_terminal(tmp_path / "no-color", {"NO_COLOR": "1", "TERM": "xterm-256color"})
    assert b"osprey is ready" in plain
    assert COLOUR not in plain, plain[:2000]


def test_json_log_lines_each_parse_with_timestamp_level_and_message(tmp_path):
    written = run_broker(tmp_path, {"OSPREY_LOG_FORMAT": "json", "NO_COLOR": None})
    lines = [l for l in written.decode().splitlines() if not l.startswith("===== start")]
    assert len(lines) >= 3, written
    events = []
    for line in lines:
        event = json.loads(line)  # every line, not only most of them
        assert event["level"] in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR"), line
        assert isinstance(event["fields"]["message"], str), line
        datetime.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
        events.append(event)
    ready = [e for e in events if e["fields"]["message"] == "osprey is ready"]
    assert len(ready) == 1, lines
    # An event's own fields stay fields, not text in the message.
    assert ready[0]["fields"]["node_id"] == 1, ready[0]
    assert COLOUR not in written


def test_an_unknown_log_format_stops_the_start_and_names_the_allowed_ones(tmp_path):
    b = Broker(tmp_path / "broker", env={"OSPREY_LOG_FORMAT": "yaml"})
    done = subprocess.run(b.command(), capture_output=True, text=True, timeout=30, env=b.environment(),
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "OSPREY_LOG_FORMAT" in done.stderr and "text" in done.stderr and "json" in done.stderr, done.stderr
    assert not b.data_dir.exists(), "the broker started before refusing the format"




def test_a_heartbeat_interval_over_half_the_broker_session_is_logged_as_an_error(tmp_path):
    """Kafka's check (its KafkaConfig logs the same): with heartbeats 5 s apart and a
    9 s session, one lost heartbeat fences the broker, and its lease lapses between two.
    Node 1 of a 3-node cluster has that interval; nodes 2 and 3 keep the default."""
    import cluster

    c = cluster.combined(tmp_path)
    c.node(1).write_config(c.voters, {"broker.heartbeat.interval.ms": 5000})
    c.start()
    try:
        c.wait_for("every node is ready", lambda: all("osprey is ready" in n.log_tail(10_000) for n in c.nodes))
    finally:
        c.stop()
    complaint = ("broker.heartbeat.interval.ms (5000 ms) must be less than or equal to half of the "
                 "broker.session.timeout.ms (9000 ms)")
    written = c.node(1).log_path.read_text()
    assert any("ERROR" in line and complaint in line for line in written.splitlines()), written[-3000:]
    for n in (c.node(2), c.node(3)):
        assert "must be less than or equal to half" not in n.log_path.read_text()
