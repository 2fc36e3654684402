"""The checker tested on crafted histories: a clean one passes, and each kind of
violation the chaos runs look for (a lost write, a duplicate, a divergent offset, a
reordered key, an aborted read, a lost or partial transaction, a commit going backwards,
a skipped record, a share group's acknowledgement confirmed twice or forgotten, a delivery
count going back, a record of a share topic nobody accepted) is flagged with its evidence.
Unclean leader election turns losses into counted findings. No broker runs here."""

import gzip
import json
from pathlib import Path

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

    def share_open(self, instance):
        self.op(instance.split("#")[0], "share_open", {"group": "sg", "instance": instance}, value={"instance": instance})

    def share_poll(self, instance, records, topic="s"):
        """`records`: (partition, offset, delivery count); key and value from the offset."""
        self.op(instance.split("#")[0], "share_poll", {"group": "sg", "instance": instance}, value={
            "group": "sg", "instance": instance,
            "records": [[topic, p, o, f"k{o}", f"v{o}", n] for p, o, n in records]})

    def share_ack(self, instance, acks, outcome="ok", failed=(), topic="s"):
        """`acks`: (partition, offset, type, delivery count); the partitions in `failed`
        answered with an error, every other one confirmed (when `outcome` is ok)."""
        partitions = sorted({p for p, _, _, _ in acks})
        value = {"results": [[topic, p, "INVALID_RECORD_STATE" if p in failed else None] for p in partitions]}
        self.op(instance.split("#")[0], "share_ack", {"group": "sg", "instance": instance,
                                                      "acks": [[topic, p, o, k, n] for p, o, k, n in acks]},
                outcome, value if outcome == "ok" else {"error": "timed out"})

    def share_final(self, offsets, partition=0, topic="s"):
        """The share topic's final read, and its sends, acknowledged."""
        for o in offsets:
            self.send(f"k{o}", f"v{o}", partition, o, topic=topic)
        self.final(partition, [(o, f"k{o}", f"v{o}") for o in offsets], topic=topic)

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


def share_history():
    """A share group on topic s (one partition, records 0-3): one accepted, one released
    and accepted by another member, one rejected, one accepted but the answer lost; then a
    member opened before a confirmation is handed that record, stale, and a new member
    after a failover gets a record with the same count again."""
    h = History(share_topics=["s"], share_delivery_count_limit=3)
    h.share_open("a#1")
    h.share_open("b#1")
    h.share_poll("a#1", [(0, 0, 1), (0, 1, 1)])
    h.share_ack("a#1", [(0, 0, "ACCEPT", 1), (0, 1, "RELEASE", 1)])
    h.share_poll("b#1", [(0, 1, 2), (0, 2, 1)])
    h.share_ack("b#1", [(0, 1, "ACCEPT", 2), (0, 2, "REJECT", 1)])
    h.share_poll("a#1", [(0, 3, 1)])
    h.share_ack("a#1", [(0, 3, "ACCEPT", 1)], outcome="info")  # may or may not have taken effect
    h.share_poll("b#1", [(0, 1, 2)])  # stale: b#1 opened before the ACCEPT of 1 returned
    h.share_ack("b#1", [(0, 1, "ACCEPT", 2)], failed=[0])
    h.share_open("a#2")
    h.share_poll("a#2", [(0, 3, 1)])  # the ACCEPT of 3 did not take effect; count 1 again (failover)
    h.share_ack("a#2", [(0, 3, "ACCEPT", 1)])
    h.share_final(range(4))
    return h


def test_a_share_group_history_within_what_kafka_promises_passes(tmp_path):
    result = share_history().check(tmp_path)
    assert result.valid, result.render()
    assert (result.counts["share_records"], result.counts["share_accepted"], result.counts["share_rejected"]) == (4, 3, 1)
    assert result.counts["share_acks_unconfirmed"] == 2


def test_an_accept_confirmed_twice_is_flagged():
    h = share_history()
    h.share_poll("a#2", [(0, 0, 2)])
    h.share_ack("a#2", [(0, 0, "ACCEPT", 2)])
    result = flagged(h, "share_accepted_twice", "s-0@0", "ACCEPT of delivery 1", "ACCEPT of delivery 2")
    assert "share_redelivered" in result.findings


def test_a_record_delivered_to_a_member_opened_after_its_accept_was_confirmed_is_flagged():
    h = share_history()
    h.share_open("c#1")
    h.share_poll("c#1", [(0, 2, 2)])  # rejected (confirmed) before c#1 opened
    h.share_ack("c#1", [(0, 2, "RELEASE", 2)], failed=[0])
    flagged(h, "share_redelivered", "s-0@2", "REJECT confirmed", "count 2 to c#1")


def test_a_stale_delivery_to_a_member_opened_before_the_confirmation_passes():
    h = share_history()
    h.share_poll("a#1", [(0, 0, 1)])  # a#1 opened before the ACCEPT of 0 was confirmed
    h.share_ack("a#1", [(0, 0, "ACCEPT", 1)], failed=[0])
    assert h.check().valid


def test_a_delivery_count_at_or_below_a_confirmed_release_is_flagged():
    h = History(share_topics=["s"])
    h.share_open("a#1")
    h.share_poll("a#1", [(0, 0, 1)])
    h.share_ack("a#1", [(0, 0, "RELEASE", 1)])
    h.share_open("a#2")
    h.share_poll("a#2", [(0, 0, 1)])
    h.share_ack("a#2", [(0, 0, "ACCEPT", 1)])
    h.share_final([0])
    flagged(h, "share_count_backwards", "s-0@0", "RELEASE of delivery 1 confirmed", "count 1 to a#2")


def test_a_delivery_count_repeated_after_an_unconfirmed_release_passes():
    h = History(share_topics=["s"])
    h.share_open("a#1")
    h.share_poll("a#1", [(0, 0, 2)])
    h.share_ack("a#1", [(0, 0, "RELEASE", 2)], outcome="info")
    h.share_open("a#2")
    h.share_poll("a#2", [(0, 0, 1)])  # the leader failed over: the count is what was persisted
    h.share_ack("a#2", [(0, 0, "ACCEPT", 1)])
    h.share_final([0])
    assert h.check().valid


def test_a_delivery_count_below_one_is_flagged():
    h = History(share_topics=["s"])
    h.share_open("a#1")
    h.share_poll("a#1", [(0, 0, 0)])
    h.share_ack("a#1", [(0, 0, "ACCEPT", 0)])
    h.share_final([0])
    flagged(h, "share_count_backwards", "s-0@0", "count 0")


def test_share_records_never_delivered_or_only_released_are_unaccounted():
    h = History(share_topics=["s"], share_delivery_count_limit=3)
    h.share_open("a#1")
    h.share_poll("a#1", [(0, 0, 1), (0, 1, 3), (0, 2, 2)])
    h.share_ack("a#1", [(0, 0, "ACCEPT", 1), (0, 1, "RELEASE", 3), (0, 2, "RELEASE", 2)])
    h.share_final(range(4))
    result = flagged(h, "share_unaccounted", "s-0@2: k2=v2", "counts [2]", "s-0@3: k3=v3", "never")
    assert len(result.findings["share_unaccounted"]) == 2
    assert result.counts["share_archived_at_limit"] == 1  # offset 1: released at the limit, archived


def test_a_share_topic_without_a_final_read_cannot_pass():
    h = History(share_topics=["s"])
    h.share_open("a#1")
    h.share_poll("a#1", [(0, 0, 1)])
    h.share_ack("a#1", [(0, 0, "ACCEPT", 1)])
    flagged(h, "incomplete", "share topic s")


def test_a_share_delivery_of_another_record_than_the_log_holds_is_divergent():
    h = share_history()
    h.op("a", "share_poll", {}, value={"group": "sg", "instance": "a#2", "records": [["s", 0, 2, "k9", "v9", 3]]})
    flagged(h, "divergent", "offset 2", "k9=v9")


def test_unclean_election_counts_share_losses_instead_of_failing():
    h = share_history()
    h.events[0]["unclean"] = True
    h.share_open("c#1")
    h.share_poll("c#1", [(0, 0, 2)])
    h.share_ack("c#1", [(0, 0, "ACCEPT", 2)])
    result = h.check()
    assert result.valid and result.findings["share_accepted_twice"], result.render()


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


# ----- a history recorded from osprey, with faults injected ----------------------------------

RECORDED = Path(__file__).resolve().parent / "testdata" / "share-history.jsonl.gz"


def recorded_share_history() -> list:
    """The share group's part of a real run (`run.py run --seed 2 --rounds 2 --share`
    against osprey: a bridge and a split partition, members closed and opened, the drain):
    its meta and faults, the share topic's sends and final read, every share operation."""
    with gzip.open(RECORDED, "rt") as f:
        return [json.loads(line) for line in f]


def confirmed(events, kind: str) -> list:
    """(partition, offset, delivery count) of the records whose `kind` acknowledgement was
    confirmed, in the order confirmed."""
    invoked = {e["id"]: e for e in events if e["type"] == "invoke" and e["f"] == "share_ack"}
    found = []
    for e in events:
        if e["type"] == "ok" and e.get("f") == "share_ack":
            ok = {p for _t, p, error in e["value"]["results"] if error is None}
            found += [(p, o, n) for _t, p, o, k, n in invoked[e["id"]]["value"]["acks"] if k == kind and p in ok]
    return found


def inject_delivery(events, partition: int, offset: int, count: int, ack: str = None, ack_ok: bool = True):
    """Appends what a broker that forgot a record's state would cause: a member opened
    after everything recorded is given the record (and acknowledges it)."""
    h = History()
    h.events = []
    h.next_id = max(e.get("id", 0) for e in events)
    h.clock = max(e.get("time", 0) for e in events) + 1
    h.share_open("injected#1")
    h.share_poll("injected#1", [(partition, offset, count)], topic="chaos-share")
    if ack:
        h.share_ack("injected#1", [(partition, offset, ack, count)], topic="chaos-share",
                    failed=() if ack_ok else (partition,))
    for e in h.events:  # the key and value the log holds at that offset
        for r in e.get("value", {}).get("records", []):
            r[3], r[4] = record_at(events, partition, offset)
    return events + h.events


def record_at(events, partition: int, offset: int):
    for e in events:
        if e["type"] == "ok" and e.get("f") == "final_read" and e["value"]["partition"] == partition:
            return next((k, v) for o, k, v in e["value"]["records"] if o == offset)
    raise AssertionError(f"no final read of partition {partition}")


def test_the_recorded_share_history_passes():
    result = checker.check(recorded_share_history())
    assert result.valid, result.render()
    assert result.counts["share_records"] > 400 and result.counts["share_accepted"] > 400


def test_an_acknowledgement_the_broker_forgot_is_caught_in_the_recorded_history():
    events = recorded_share_history()
    p, o, n = confirmed(events, "ACCEPT")[100]
    result = checker.check(inject_delivery(events, p, o, n + 1, ack="ACCEPT"))
    assert not result.valid
    assert set(result.violations()) == {"share_accepted_twice", "share_redelivered"}, result.render()
    assert f"chaos-share-{p}@{o}" in result.findings["share_redelivered"][0]


def test_a_rejected_record_delivered_again_is_caught_in_the_recorded_history():
    events = recorded_share_history()
    p, o, n = confirmed(events, "REJECT")[0]
    result = checker.check(inject_delivery(events, p, o, n + 1, ack="ACCEPT", ack_ok=False))
    assert set(result.violations()) == {"share_redelivered"}, result.render()
    assert "REJECT confirmed" in result.findings["share_redelivered"][0]


def test_a_delivery_count_gone_back_is_caught_in_the_recorded_history():
    events = recorded_share_history()
    p, o, n = confirmed(events, "RELEASE")[0]
    result = checker.check(inject_delivery(events, p, o, n))
    assert "share_count_backwards" in result.violations(), result.render()
    assert f"RELEASE of delivery {n} confirmed" in result.findings["share_count_backwards"][0]


def test_a_record_no_member_was_given_is_caught_in_the_recorded_history():
    events = recorded_share_history()
    p, o, _n = confirmed(events, "ACCEPT")[-1]
    for e in events:  # as if the broker had skipped it: never delivered, never acknowledged
        v = e.get("value") or {}
        if e.get("f") == "share_poll" and e["type"] == "ok":
            v["records"] = [r for r in v["records"] if (r[1], r[2]) != (p, o)]
        if e.get("f") == "share_ack" and e["type"] == "invoke":
            v["acks"] = [a for a in v["acks"] if (a[1], a[2]) != (p, o)]
    result = checker.check(events)
    assert set(result.violations()) == {"share_unaccounted"}, result.render()
    assert result.findings["share_unaccounted"] == [
        f"chaos-share-{p}@{o}: {'='.join(record_at(events, p, o))} neither accepted nor rejected nor delivered 5 "
        f"times by the end: delivered with counts never, acknowledged never"]


# ----- share groups' dead-letter queues (KIP-1191) ------------------------------------------


def dlq_record(partition, offset, count, message, group="sg", topic="s", copied=True, dlq_partitions=2):
    """A DLQ record as the runner records it (its own offset set by History.dlq_read):
    Kafka's headers naming `topic`-`partition`@`offset`, the original's key and value."""
    headers = [["__dlq.errors.topic", topic], ["__dlq.errors.partition", str(partition)],
               ["__dlq.errors.offset", str(offset)], ["__dlq.errors.group", group],
               ["__dlq.errors.delivery.count", str(count)], ["__dlq.errors.message", message]]
    key, value = (f"k{offset}", f"v{offset}") if copied else (None, None)
    return [partition % dlq_partitions, None, key, value, headers]


def dlq_read(h, records):
    """The whole DLQ topic read at the end; each record's offset follows its partition's last."""
    next_offset = {}
    for r in records:
        r[1] = next_offset.get(r[0], 0)
        next_offset[r[0]] = r[1] + 1
    h.op("dlq-reader", "dlq_read", {"topic": "dlq.s"},
         value={"topic": "dlq.s", "high_watermarks": {str(p): o for p, o in next_offset.items()}, "records": records})


def dlq_failures(h, writes=(), unparsed=0, metrics_failed=0):
    h.op("dlq-reader", "dlq_failures", {},
         value={"writes": [list(w) for w in writes], "unparsed": unparsed, "metrics_failed": metrics_failed})


REJECTED, EXCEEDED = checker.DLQ_REJECTED, checker.DLQ_EXCEEDED


def written():
    """The DLQ records of dlq_history's records."""
    return [dlq_record(0, 1, 1, REJECTED), dlq_record(0, 2, 1, REJECTED), dlq_record(0, 1, 1, REJECTED),
            dlq_record(1, 10, 3, EXCEEDED), dlq_record(1, 11, 3, EXCEEDED, copied=False)]


def dlq_history(dlq=None, failures=(("sg", "s", 0, 3, 3),)):
    """A share group with a DLQ on topic s (records 0-3 on partition 0, 10-11 on partition
    1, delivery count limit 3): 0 accepted; 1 rejected (its DLQ record written twice, at
    least once); 2 rejected without an answer (written); 3 rejected, its DLQ write failed
    for good (logged); 10 released at the limit (written, "exceeded"); 11 never seen by a
    client, archived at the limit after acquisitions whose answers were lost (written,
    headers only: the broker could not read the original)."""
    h = History(share_topics=["s"], share_group="sg", share_delivery_count_limit=3, share_dlq_topic="dlq.s",
                share_dlq_partitions=2, share_dlq_copy=True)
    h.share_open("a#1")
    h.share_open("b#1")
    h.share_poll("a#1", [(0, 0, 1), (0, 1, 1), (1, 10, 1)])
    h.share_ack("a#1", [(0, 0, "ACCEPT", 1), (0, 1, "REJECT", 1), (1, 10, "RELEASE", 1)])
    h.share_poll("b#1", [(0, 2, 1), (1, 10, 2)])
    h.share_ack("b#1", [(0, 2, "REJECT", 1), (1, 10, "RELEASE", 2)], outcome="info")
    h.share_open("a#2")
    h.share_poll("a#2", [(0, 3, 1), (1, 10, 3)])
    h.share_ack("a#2", [(0, 3, "REJECT", 1), (1, 10, "RELEASE", 3)])
    h.share_final(range(4))
    h.share_final([10, 11], partition=1)
    dlq_read(h, written() if dlq is None else dlq)
    dlq_failures(h, failures)
    return h


def test_a_dead_letter_queue_within_what_kip_1191_promises_passes(tmp_path):
    result = dlq_history().check(tmp_path)
    assert result.valid, result.render()
    c = result.counts
    assert (c["dlq_records"], c["dlq_sources"], c["dlq_rejected"], c["dlq_exceeded"]) == (5, 4, 3, 2)
    assert c["dlq_headers_only"] == 1 and c["dlq_failed_writes"] == 1
    assert (c["dlq_rejects_confirmed"], c["dlq_rejects_found"], c["dlq_missing_failed_write"]) == (2, 1, 1)
    assert c["share_archived_at_limit"] == 2  # 10 seen at the limit, 11 only in the DLQ


def test_a_dlq_record_naming_an_offset_the_log_does_not_hold_is_flagged():
    h = dlq_history(dlq=[dlq_record(0, 1, 1, REJECTED), dlq_record(0, 9, 1, REJECTED)])
    flagged(h, "dlq_wrong_record", "names s-0@9, which the log does not hold (the final read ends at 4)")


def test_a_dlq_record_copying_another_value_than_the_log_holds_is_flagged():
    record = dlq_record(0, 1, 1, REJECTED)
    record[3] = "v2"
    flagged(dlq_history(dlq=[record]), "dlq_wrong_record", "names s-0@1, which holds k1=v1, but copies k1=v2")


def test_a_dlq_record_of_another_group_is_flagged():
    flagged(dlq_history(dlq=[dlq_record(0, 1, 1, REJECTED, group="other")]), "dlq_wrong_record",
            "of group other, not a share topic of group sg")


def test_a_dlq_record_in_another_partition_than_the_source_modulo_the_dlq_partitions_is_flagged():
    record = dlq_record(1, 10, 3, EXCEEDED)
    record[0] = 0
    flagged(dlq_history(dlq=[record]), "dlq_wrong_record", "in DLQ partition 0, not 1")


def test_a_dlq_record_without_kafkas_headers_is_flagged():
    record = dlq_record(0, 1, 1, REJECTED)
    record[4] = [hd for hd in record[4] if hd[0] != "__dlq.errors.delivery.count"]
    flagged(dlq_history(dlq=[record]), "dlq_wrong_record", "no header __dlq.errors.delivery.count")


def test_a_record_rejected_into_the_dlq_whose_accept_was_confirmed_is_flagged():
    h = dlq_history()
    h.share_open("c#1")
    h.share_poll("c#1", [(0, 2, 2)])  # 2's REJECT was never answered: it did not take effect...
    h.share_ack("c#1", [(0, 2, "ACCEPT", 2)])  # ...yet the DLQ holds it as rejected
    result = flagged(h, "dlq_accepted", "names s-0@2 with delivery count 1", "ACCEPT of delivery 2 was confirmed")
    assert set(result.violations()) == {"dlq_accepted"}, result.render()


def test_a_record_past_the_limit_in_the_dlq_whose_accept_was_confirmed_is_counted():
    """A lock expiry at the limit writes the DLQ before its state: a new leader that never
    saw that state write delivers the record again, and it may be accepted."""
    h = dlq_history()
    h.share_open("c#1")
    h.share_poll("c#1", [(1, 11, 3)])
    h.share_ack("c#1", [(1, 11, "ACCEPT", 3)])
    result = h.check()
    assert result.valid, result.render()
    assert result.counts["dlq_exceeded_accepted"] == 1


def test_a_record_in_the_dlq_as_rejected_that_nobody_rejected_is_flagged():
    result = flagged(dlq_history(dlq=[dlq_record(1, 10, 3, REJECTED)]), "dlq_wrong_cause",
                     "names s-1@10 with delivery count 3, 'Offset rejected by client.', but no consumer sent a REJECT",
                     "RELEASE 3 ok")
    assert "dlq_missing" in result.violations()  # 1's confirmed REJECT is not in this DLQ either


def test_a_record_in_the_dlq_as_exceeded_below_the_limit_is_flagged():
    flagged(dlq_history(dlq=written() + [dlq_record(0, 0, 2, EXCEEDED)]),
            "dlq_wrong_cause", "names s-0@0 with delivery count 2", "but the limit is 3")


def test_a_dlq_record_with_a_count_past_the_limit_or_an_unknown_message_is_flagged():
    flagged(dlq_history(dlq=written() + [dlq_record(0, 1, 4, REJECTED)]), "dlq_wrong_cause",
            "delivery count 4, outside 1 to the delivery count limit 3")
    flagged(dlq_history(dlq=written() + [dlq_record(0, 1, 1, "Poison pill.")]), "dlq_wrong_cause",
            "with message 'Poison pill.', neither of KIP-1191's")


def test_a_confirmed_reject_missing_from_the_dlq_without_a_failed_write_is_flagged():
    result = flagged(dlq_history(failures=()), "dlq_missing", "s-0@3: REJECT of delivery 1 confirmed",
                     "no failed DLQ write covers it")
    assert len(result.findings["dlq_missing"]) == 1


def test_a_confirmed_reject_missing_after_failures_of_unknown_offsets_is_counted():
    for unknown in (dict(unparsed=1), dict(metrics_failed=1)):
        h = dlq_history(failures=())
        h.events = [e for e in h.events if e.get("f") != "dlq_failures"]
        dlq_failures(h, (), **unknown)
        result = h.check()
        assert result.valid, result.render()
        assert result.counts["dlq_missing_failed_write"] == 1


def test_a_record_archived_unseen_and_missing_from_the_dlq_is_unaccounted():
    dlq = [dlq_record(0, 1, 1, REJECTED), dlq_record(0, 2, 1, REJECTED), dlq_record(1, 10, 3, EXCEEDED)]
    flagged(dlq_history(dlq=dlq), "share_unaccounted", "s-1@11: k11=v11", "delivered with counts never")


def test_a_dead_letter_queue_never_read_cannot_pass():
    h = dlq_history()
    h.events = [e for e in h.events if e.get("f") != "dlq_read"]
    flagged(h, "incomplete", "dead-letter queue dlq.s was never read")
