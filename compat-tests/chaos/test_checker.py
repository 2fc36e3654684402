"""The checker tested on crafted histories: a clean one passes, and each kind of
violation the chaos runs look for (a lost write, a duplicate, a divergent offset, a
reordered key, an aborted read, a lost or partial transaction, a commit going backwards,
a skipped record) is flagged with its evidence. Unclean leader election turns losses into
counted findings. No broker runs here."""

import json

import checker


class History:
    """Builds a history the way run.py records one: invoke, then a completion."""

    def __init__(self, **meta):
        self.events = [dict(type="meta", seed=7, **meta)]
        self.next_id = 0
        self.clock = 0.0

    def _tick(self):
        self.clock += 0.01
        return self.clock

    def op(self, process, f, invoke, outcome="ok", value=None):
        self.next_id += 1
        i = self.next_id
        self.events.append(dict(type="invoke", id=i, process=process, f=f, time=self._tick(), value=invoke))
        if outcome is not None:
            self.events.append(dict(type=outcome, id=i, process=process, f=f, time=self._tick(), value=value or {}))
        return i

    def send(self, key, value, partition, offset, outcome="ok", process="p0", topic="t"):
        ok = {"partition": partition, "offset": offset} if outcome == "ok" else {"error": "timed out"}
        self.op(process, "send", {"topic": topic, "key": key, "value": value}, outcome, ok)

    def final(self, partition, records, topic="t", isolation="read_uncommitted"):
        self.op("final", "final_read", {"topic": topic, "partition": partition},
                value={"topic": topic, "partition": partition, "isolation": isolation,
                       "high_watermark": 1 + max((r[0] for r in records), default=-1),
                       "records": [list(r) for r in records]})

    def poll(self, records, process="reader", isolation="read_uncommitted", group=None):
        value = {"isolation": isolation, "records": [list(r) for r in records]}
        if group:
            value["group"] = group
        self.op(process, "poll", {}, value=value)

    def txn(self, name, records, outcome, result="ok"):
        self.op("tx", "txn", {"txn": name}, result,
                {"txn": name, "outcome": outcome, "records": [list(r) for r in records]})

    def commit(self, group, offsets, process="member-0", outcome="ok"):
        self.op(process, "commit", {"group": group, "offsets": [list(o) for o in offsets]}, outcome)

    def committed(self, group, offsets, final=False):
        self.op("probe", "committed", {"group": group},
                value={"group": group, "offsets": [list(o) for o in offsets], "final": final})

    def check(self, tmp_path=None):
        if tmp_path is not None:  # through a file, as the CLI reads it
            path = tmp_path / "history.jsonl"
            path.write_text("".join(json.dumps(e) + "\n" for e in self.events))
            return checker.check(checker.load(path))
        return checker.check(self.events)


def clean_history():
    """Two keys on two partitions, a reader that saw part, a committed and an aborted
    transaction, a group that consumed and committed everything."""
    h = History()
    h.send("a", "a:0", 0, 0)
    h.send("b", "b:0", 1, 0)
    h.send("a", "a:1", 0, 1)
    h.send("a", "a:2", 0, 2, outcome="info")  # indeterminate: may or may not be there
    h.send("b", "b:1", 1, 1, outcome="fail")  # librdkafka's failures are indeterminate too
    h.poll([("t", 0, 0, "a", "a:0")])
    h.poll([("t", 0, 0, "a", "a:0"), ("t", 0, 1, "a", "a:1")], group="g", process="member-0")
    h.commit("g", [("t", 0, 2)])
    h.poll([("t", 1, 0, "b", "b:0")], group="g", process="member-1")
    h.commit("g", [("t", 1, 1)], process="member-1")
    h.txn("tx-1", [("x", "k1", "tx-1:0"), ("x", "k2", "tx-1:1")], "commit")
    h.txn("tx-2", [("x", "k1", "tx-2:0")], "abort")
    h.txn("tx-3", [("x", "k2", "tx-3:0")], "commit", result="info")  # indeterminate, absent
    h.poll([("x", 0, 0, "k1", "tx-1:0")], process="rc", isolation="read_committed")
    h.final(0, [(0, "a", "a:0"), (1, "a", "a:1"), (2, "a", "a:2")])
    h.final(1, [(0, "b", "b:0")])
    h.final(0, [(0, "k1", "tx-1:0"), (1, "k2", "tx-1:1")], topic="x", isolation="read_committed")
    h.committed("g", [("t", 0, 2), ("t", 1, 1)], final=True)
    return h


def test_a_clean_history_passes(tmp_path):
    result = clean_history().check(tmp_path)
    assert result.valid, result.render()
    assert result.counts["acknowledged"] == 3
    assert result.counts["txn_committed"] == 1 and result.counts["txn_aborted"] == 1
    assert "VALID (seed 7)" in result.render()


def flagged(h, kind, *words):
    result = h.check()
    assert not result.valid, result.render()
    assert kind in result.violations(), result.render()
    text = "\n".join(result.findings[kind])
    for w in words:
        assert w in text, text
    assert "INVALID" in result.render()
    return result


def test_a_lost_acknowledged_write_is_flagged():
    h = History()
    h.send("a", "a:0", 0, 0)
    h.send("a", "a:1", 0, 1)
    h.final(0, [(0, "a", "a:0")])
    flagged(h, "lost", "a=a:1", "offset 1")


def test_an_acknowledged_write_replaced_at_its_offset_is_lost():
    h = History()
    h.send("a", "a:0", 0, 0)
    h.send("b", "b:0", 0, 1, outcome="info")
    h.final(0, [(0, "b", "b:0")])
    flagged(h, "lost", "a=a:0", "offset 0 holds b=b:0")


def test_a_duplicate_is_flagged():
    h = History()
    h.send("a", "a:0", 0, 0)
    h.send("a", "a:1", 0, 1)
    h.final(0, [(0, "a", "a:0"), (1, "a", "a:1"), (2, "a", "a:0")])
    result = flagged(h, "duplicated", "a=a:0", "t-0@0", "t-0@2")
    assert "reordered" in result.findings  # a:0 after a:1 also breaks the key's order


def test_readers_that_disagree_on_an_offset_are_flagged():
    h = History()
    h.send("a", "a:0", 0, 0)
    h.send("b", "b:0", 0, 1, outcome="info")
    h.poll([("t", 0, 1, "b", "b:0")], process="reader-1")
    h.send("c", "c:0", 0, 1)
    h.final(0, [(0, "a", "a:0"), (1, "c", "c:0")])
    flagged(h, "divergent", "offset 1", "b=b:0", "c=c:0", "reader-1")


def test_a_record_acknowledged_at_another_offset_is_divergent():
    h = History()
    h.send("a", "a:0", 0, 5)
    h.final(0, [(0, "a", "a:0")])
    flagged(h, "divergent", "acknowledged at offset 5", "[0]")


def test_an_acknowledgement_without_an_offset_is_checked_for_presence_only():
    h = History()
    h.send("a", "a:0", 0, None)
    h.send("a", "a:1", 0, None)
    h.final(0, [(3, "a", "a:0")])
    result = flagged(h, "lost", "a=a:1", "acknowledged without an offset")
    assert "divergent" not in result.findings and result.counts["acknowledged_without_offset"] == 2


def test_a_key_out_of_send_order_is_flagged():
    h = History()
    h.send("a", "a:0", 0, 1)
    h.send("a", "a:1", 0, 0)
    h.final(0, [(0, "a", "a:1"), (1, "a", "a:0")])
    flagged(h, "reordered", "key a", "send #0")


def test_a_record_nobody_sent_is_flagged():
    h = History()
    h.send("a", "a:0", 0, 0)
    h.final(0, [(0, "a", "a:0"), (1, "z", "z:9")])
    flagged(h, "phantom", "z=z:9")


def test_a_record_of_an_aborted_transaction_read_committed_is_flagged():
    h = History()
    h.txn("tx-1", [("x", "k", "tx-1:0")], "abort")
    h.poll([("x", 0, 0, "k", "tx-1:0")], process="rc", isolation="read_committed")
    h.final(0, [], topic="x", isolation="read_committed")
    flagged(h, "aborted_read", "tx-1", "rc")


def test_an_aborted_record_read_uncommitted_is_allowed():
    h = History()
    h.txn("tx-1", [("x", "k", "tx-1:0")], "abort")
    h.poll([("x", 0, 0, "k", "tx-1:0")], process="ru", isolation="read_uncommitted")
    h.final(0, [], topic="x", isolation="read_committed")
    assert h.check().valid


def test_a_committed_transaction_missing_from_the_final_read_is_flagged():
    h = History()
    h.txn("tx-1", [("x", "k1", "tx-1:0"), ("x", "k2", "tx-1:1")], "commit")
    h.final(0, [], topic="x", isolation="read_committed")
    flagged(h, "lost_commit", "tx-1", "2 of its 2")


def test_half_a_transaction_is_flagged():
    h = History()
    h.txn("tx-1", [("x", "k1", "tx-1:0"), ("x", "k2", "tx-1:1")], "commit", result="info")
    h.final(0, [(0, "k1", "tx-1:0")], topic="x", isolation="read_committed")
    flagged(h, "partial_txn", "tx-1", "1 of its 2")


def test_a_committed_offset_going_backwards_is_flagged():
    h = History()
    h.send("a", "a:0", 0, 0)
    h.final(0, [(0, "a", "a:0")])
    h.commit("g", [("t", 0, 1)])
    h.committed("g", [("t", 0, 0)])
    flagged(h, "commit_backwards", "group g", "committed offset 1", "then 0")


def test_a_committed_offset_that_disappears_is_flagged():
    h = History()
    h.committed("g", [("t", 0, -1001)])  # before the first commit: nothing, and that is fine
    h.commit("g", [("t", 0, 1)])
    h.committed("g", [("t", 0, -1001)])
    flagged(h, "commit_backwards", "committed offset 1", "then -1")


def test_commits_moving_forwards_pass():
    h = History()
    h.send("a", "a:0", 0, 0)
    h.send("a", "a:1", 0, 1)
    h.final(0, [(0, "a", "a:0"), (1, "a", "a:1")])
    h.poll([("t", 0, 0, "a", "a:0"), ("t", 0, 1, "a", "a:1")], group="g", process="member-0")
    h.commit("g", [("t", 0, 1)])
    h.committed("g", [("t", 0, 1)])
    h.commit("g", [("t", 0, 2)], process="member-1")
    h.commit("g", [("t", 0, 0)], outcome="fail")  # refused: not a fact about the group
    h.committed("g", [("t", 0, 2)], final=True)
    result = h.check()
    assert result.valid, result.render()
    assert result.counts["group_records_checked"] == 2


def test_a_skipped_record_is_flagged():
    h = History()
    for i in range(3):
        h.send("a", f"a:{i}", 0, i)
    h.final(0, [(0, "a", "a:0"), (1, "a", "a:1"), (2, "a", "a:2")])
    h.poll([("t", 0, 0, "a", "a:0")], group="g", process="member-0")
    h.poll([("t", 0, 2, "a", "a:2")], group="g", process="member-1")
    h.commit("g", [("t", 0, 3)], process="member-1")
    h.committed("g", [("t", 0, 3)], final=True)
    flagged(h, "skipped", "group g", "a=a:1 at offset 1")


def test_unclean_election_counts_losses_instead_of_failing():
    h = History(unclean=True)
    h.send("a", "a:0", 0, 0)
    h.send("a", "a:1", 0, 1)
    h.final(0, [(0, "a", "a:0")])
    result = h.check()
    assert result.valid, result.render()
    assert len(result.findings["lost"]) == 1
    assert "counted (unclean leader election on)" in result.render()


def test_unclean_election_still_fails_on_a_duplicate():
    h = History(unclean=True)
    h.send("a", "a:0", 0, 0)
    h.final(0, [(0, "a", "a:0"), (1, "a", "a:0")])
    flagged(h, "duplicated", "a=a:0")


def test_a_partition_without_a_final_read_cannot_pass():
    h = History()
    h.send("a", "a:0", 3, 0)
    h.final(0, [])
    flagged(h, "incomplete", "t-3")


def test_a_torn_last_line_is_dropped(tmp_path):
    h = clean_history()
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in h.events) + '{"type": "inv')
    assert checker.check(checker.load(path)).valid


def test_the_command_line_exits_non_zero_on_a_violation(tmp_path, capsys):
    h = History(replay="run.py replay --seed 7")
    h.send("a", "a:0", 0, 0)
    h.final(0, [])
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in h.events))
    assert checker.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "INVALID (seed 7)" in out and "replay: run.py replay --seed 7" in out
    path.write_text("".join(json.dumps(e) + "\n" for e in clean_history().events))
    assert checker.main([str(path), "--json"]) == 0
