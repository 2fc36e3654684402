"""The runner's pure parts: the fault schedule is a function of the seed (the same seed
draws the same rounds, what a replay relies on), pauses outlast the session and lag
timeouts, and the replica comparison finds two replicas holding different batches at one
offset. No broker runs here."""

import struct
import threading
from types import SimpleNamespace

import run  # puts compat-tests/python on sys.path

import cluster  # noqa: E402


def test_a_seed_draws_the_same_schedule_again():
    a = run.draw_schedule(42, 20, run.FAULTS, [1, 2, 3])
    assert a == run.draw_schedule(42, 20, run.FAULTS, [1, 2, 3])
    assert a != run.draw_schedule(43, 20, run.FAULTS, [1, 2, 3])
    assert {r["fault"] for r in a} <= set(run.FAULTS)


def test_pauses_outlast_the_session_and_lag_timeouts():
    timeout_s = max(run.BROKER_CONFIG["broker.session.timeout.ms"], run.BROKER_CONFIG["replica.lag.time.max.ms"]) / 1000
    pauses = [r for seed in range(20) for r in run.draw_schedule(seed, 10, ["pause"], [1, 2, 3])]
    assert pauses and all(r["hold_s"] > timeout_s and r["node"] in (1, 2, 3) for r in pauses)


def test_a_rolling_restart_visits_every_node_once():
    rolling = run.draw_schedule(5, 3, ["rolling"], [1, 2, 3, 4, 5])
    assert all(sorted(r["order"]) == [1, 2, 3, 4, 5] for r in rolling)


def test_a_full_disk_round_names_one_node_and_how_long_it_stays_full():
    rounds = [r for seed in range(20) for r in run.draw_schedule(seed, 5, ["fulldisk"], [1, 2, 3])]
    assert rounds and all(r["node"] in (1, 2, 3) and run.FULL_DISK_S[0] <= r["hold_s"] <= run.FULL_DISK_S[1]
                          for r in rounds)


def test_the_ballast_fills_a_file_system_to_its_last_byte(tmp_path, monkeypatch):
    """fill_with_ballast against a fake file that refuses writes past a size, as a full
    file system does (ENOSPC), whatever the chunk size."""
    import errno
    import io

    class SmallDisk(io.RawIOBase):
        def __init__(self, capacity):
            self.capacity, self.size = capacity, 0

        def writable(self):
            return True

        def write(self, b):
            if self.size + len(b) > self.capacity:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.size += len(b)
            return len(b)

    disk = SmallDisk(3 * (1 << 20) + 12345)
    monkeypatch.setattr(cluster, "open", lambda *a, **k: disk, raising=False)
    assert run.fill_with_ballast(tmp_path / "ballast") == disk.capacity == disk.size


def batch(base: int, records: int, epoch: int, producer_id: int, sequence: int, crc: int,
          producer_epoch: int = 0) -> bytes:
    """A v2 record batch header with no record bodies (enough for the comparison)."""
    body = struct.pack(">ibIhiqqqhii", epoch, 2, crc, 0, records - 1, 0, 0, producer_id, producer_epoch, sequence,
                       records)
    return struct.pack(">qi", base, len(body)) + body


def test_replicas_holding_different_batches_at_one_offset_are_found(tmp_path):
    same = batch(0, 2, 1, 7, 0, 111)
    logs = {1: same + batch(2, 2, 4, 1000, 758, 222), 2: same + batch(2, 1, 4, 0, 758, 333),
            3: same + batch(2, 2, 4, 1000, 758, 222)}
    nodes = []
    for node_id, data in logs.items():
        d = tmp_path / f"node-{node_id}" / "t-0"
        d.mkdir(parents=True)
        (d / "00000000000000000000.log").write_bytes(data)
        nodes.append(SimpleNamespace(node_id=node_id, dir=tmp_path / f"node-{node_id}"))
    assert run.batch_headers(nodes[0].dir / "t-0") == [(0, 1, 1, 7, 0, 111, 0), (2, 3, 4, 1000, 758, 222, 0)]
    found = run.replica_divergence(nodes, "t", 0, 4)
    assert len(found) == 1 and "node 2 holds batch 2-2 epoch 4 producer 0 sequence 758" in found[0], found
    assert run.replica_divergence([nodes[0], nodes[2]], "t", 0, 4) == []
    # Below a high watermark that the divergent batch is not under, nothing differs.
    assert run.replica_divergence(nodes, "t", 0, 2) == []


def test_each_copy_of_a_duplicated_record_names_the_batch_that_wrote_it(tmp_path):
    """A duplicate's evidence: which leader wrote each copy and under which producer epoch
    (two epochs: the client resent after an epoch bump; one: the broker missed a retry)."""
    d = tmp_path / "node-2" / "chaos-0"
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(batch(0, 19, 3, 1000, 40, 1) + batch(19, 19, 4, 1000, 0, 2, 1))
    nodes = [SimpleNamespace(node_id=1, dir=tmp_path / "node-1"), SimpleNamespace(node_id=2, dir=tmp_path / "node-2")]
    evidence = "chaos p-k1=p-k1:7 stored at 2 offsets: chaos-0@3, chaos-0@22"
    assert run.duplicate_copies(nodes, evidence) == [
        "chaos-0@3: batch 0-18 leader epoch 3, producer 1000 epoch 0 base sequence 40 (node 2)",
        "chaos-0@22: batch 19-37 leader epoch 4, producer 1000 epoch 1 base sequence 0 (node 2)",
    ]
    assert run.duplicate_copies(nodes, "chaos x=y stored at 2 offsets: chaos-1@5, chaos-1@9") == [
        "chaos-1@5: on no node's disk", "chaos-1@9: on no node's disk"]


def test_a_long_run_goes_on_from_its_ledger_where_it_stopped(tmp_path, monkeypatch):
    """`long` appends each finished run to its ledger and, started again, runs only the
    seeds the ledger lacks until it holds --rounds-total rounds; the report adds up every
    run in the ledger. A ledger kept with other settings is refused."""
    ran = []

    def fake_run_seed(args, seed, base):
        ran.append(seed)
        result = SimpleNamespace(valid=seed != 1001, counts={"acknowledged": 10},
                                 findings={"lost": [] if seed != 1001 else ["chaos-0@3 lost"]})
        run_ = SimpleNamespace(schedule=[{"fault": "kill"}] * args.rounds, problems=[],
                               replay_command=lambda: f"run --seed {seed}")
        return result, run_, 1.0

    monkeypatch.setattr(run, "run_seed", fake_run_seed)
    argv = ["long", "--rounds", "6", "--faults", "kill", "--ledger", str(tmp_path / "l.jsonl"),
            "--report", str(tmp_path / "R.md"), "--workdir", str(tmp_path / "w")]
    monkeypatch.setattr(run, "osprey_bin", lambda: __import__("pathlib").Path(__file__))
    assert run.main(argv + ["--rounds-total", "12"]) == 1  # seed 1001 lost a record
    assert ran == [1000, 1001]
    assert run.main(argv + ["--rounds-total", "18"]) == 0
    assert ran == [1000, 1001, 1002]
    report = (tmp_path / "R.md").read_text()
    assert "**18 of 18 fault rounds**" in report and "| kill | 18 |" in report, report
    assert "| acknowledged (acks=all, idempotent) | 30 |" in report and "| lost | 1 |" in report, report
    assert "- seed 1001" in report and "chaos-0@3 lost" in report, report
    import pytest
    with pytest.raises(SystemExit, match="other settings"):
        run.main(argv + ["--rounds-total", "24", "--producers", "3"])


def test_a_workload_that_does_not_stop_is_reported_with_the_call_it_is_stuck_in():
    release = threading.Event()

    def blocked_in_a_client_call():
        release.wait(30)

    thread = threading.Thread(target=blocked_in_a_client_call, daemon=True)
    thread.start()
    try:
        where = run.where_stuck(thread)
    finally:
        release.set()
        thread.join()
    innermost, *callers = where.removeprefix("stuck in ").split(" <- ")
    assert "(threading.py:" in innermost, where
    assert callers[-1].startswith("release.wait(30) (test_run.py:"), where
    assert run.where_stuck(thread) == "its stack is gone"


def long_args(**changes):
    args = dict(nodes=3, rounds=6, faults=["kill"], producers=2, transactions=True, groups=True, unclean=False,
                unsafe=False, share=False)
    args.update(changes)
    return SimpleNamespace(**args)


def test_a_long_run_without_share_groups_keeps_the_ledger_config_of_earlier_runs():
    """Ledgers kept before `--share` existed must still add up: the key is absent unless on."""
    assert "share" not in run.long_config(long_args())
    assert run.long_config(long_args(share=True))["share"] is True


def test_the_share_tally_counts_a_record_done_once_accepted_rejected_or_delivered_up_to_the_limit():
    tally = run.ShareTally()
    universe = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    tally.delivered((0, 0), 1)
    tally.acknowledged((0, 0), "ACCEPT")
    tally.delivered((0, 1), 1)
    tally.acknowledged((0, 1), "REJECT")
    tally.delivered((0, 2), run.SHARE_DELIVERY_COUNT_LIMIT)
    tally.acknowledged((0, 2), "RELEASE")
    tally.delivered((0, 3), 1)
    tally.acknowledged((0, 3), "RELEASE")
    assert tally.unaccounted(universe) == [(0, 3), (1, 0)]


def test_a_record_named_by_the_dlq_is_accounted_for_by_the_drain():
    """Archived at the limit after acquisitions no member saw: only the DLQ shows it."""
    tally = run.ShareTally()
    tally.delivered((0, 0), 1)
    tally.in_dlq({(0, 0)})
    assert tally.unaccounted([(0, 0)]) == []


def test_failed_dlq_writes_are_read_from_every_nodes_log_across_restarts(tmp_path):
    log = tmp_path / "node-1.log"
    log.write_text(
        "2026-12-06T20:36:36.655632Z  WARN dead-letter queue write failed; the records are archived without it "
        'group="chaos-share-group" topic=chaos-share partition=2 first_offset=17 last_offset=19 error=producing to '
        "dlq.chaos-share-0: NOT_ENOUGH_REPLICAS: \n"
        "===== killed with SIGKILL\n===== start\n"
        "2026-12-06T20:37:00.000000Z  WARN dead-letter queue write failed; something else\n")
    nodes = [SimpleNamespace(log_path=log, proc=None), SimpleNamespace(log_path=tmp_path / "absent.log", proc=None)]
    assert run.failed_dlq_writes(nodes) == {
        "writes": [["chaos-share-group", "chaos-share", 2, 17, 19]], "unparsed": 1, "metrics_failed": 0,
        "metrics_nodes": 0}


def test_a_series_is_read_from_a_metrics_page_by_its_labels():
    page = ('# TYPE osprey_share_dlq_writes_total counter\nosprey_share_dlq_writes_total{result="ok"} 4\n'
            'osprey_share_dlq_writes_total{result="failed"} 2\n')
    assert run.series_value(page, 'osprey_share_dlq_writes_total{result="failed"}') == 2.0
    assert run.series_value(page, "osprey_share_dlq_records_total") == 0.0
