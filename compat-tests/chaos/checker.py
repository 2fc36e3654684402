"""The history checker of the chaos tool (issue 17): a pure function from a history to a
verdict with its evidence. No clock, no sockets, no broker: `check(events)` reads what
the runner recorded and says what the clients saw that Kafka's guarantees forbid.

A history is a file of JSON lines, one event each:

- `{"type": "meta", ...}`: facts about the run (`seed`, `unclean`, the config, how to
  replay it). Several meta lines are merged; `unclean: true` turns lost and divergent
  records into counted losses instead of violations (unclean leader election may lose
  acknowledged writes by design).
- `{"type": "invoke", "id": N, "process": P, "f": F, "time": T, "value": {...}}` when a
  client starts an operation, and `{"type": "ok"|"fail"|"info", "id": N, ...}` when it
  completes: `ok` it happened, `fail` it did not, `info` nobody knows (a timeout). The
  checker treats `fail` of a produce as indeterminate too: librdkafka's message timeout
  may fire for a batch the broker stored.
- `{"type": "fault", "time": T, ...}`: what the fault injector did; shown as context.

Operations (`f`) and their values:

- `send`: an idempotent acks=all produce. Invoke `{topic, key, value}`; ok
  `{partition, offset}` (offset null when librdkafka knows the batch was persisted but
  not where: a later batch of the producer succeeded after this one's request timed out). The send order of a key is the order of its producer's
  invocations.
- `txn`: one transaction of a transactional producer. Invoke `{txn}`; completion
  `{txn, outcome: "commit"|"abort", records: [[topic, key, value], ...]}` (ok: that
  outcome returned; fail/info: `outcome` is what was attempted).
- `poll`: records a consumer got. Ok `{isolation, group?, records: [[topic, partition,
  offset, key, value], ...]}` (`group` for a consumer group member, absent for an
  assign-only reader).
- `commit`: a consumer group member's manual commit. Invoke `{group, offsets: [[topic,
  partition, offset], ...]}`; ok when the broker accepted it.
- `committed`: a probe of a group's committed offsets. Ok `{group, offsets: [[topic,
  partition, offset], ...], final?: true}`; the one marked `final` is read after the run.
- `final_read`: a whole partition read after the faults healed. Ok `{topic, partition,
  isolation, high_watermark, records: [[offset, key, value], ...]}`.
- `share_open`: a share consumer instance (KIP-932) created and subscribed. Invoke
  `{group, instance}`. Every record an instance is given was acquired after this
  invocation (the client fetches only once it exists), whatever it buffered; that is the
  time a delivery is compared with confirmations at.
- `share_poll`: records a share consumer instance was given. Ok `{group, instance,
  records: [[topic, partition, offset, key, value, delivery_count], ...]}`.
- `share_ack`: a share consumer's commit_sync of its explicit acknowledgements. Invoke
  `{group, instance, acks: [[topic, partition, offset, "ACCEPT"|"RELEASE"|"REJECT",
  delivery_count], ...]}`; ok `{results: [[topic, partition, error|null], ...]}`, the
  client's result per partition. An acknowledgement is confirmed when the commit
  returned ok with a null result for its partition; any other outcome (an error, no
  result, an exception, no answer) may or may not have taken effect.
- `dlq_read`: the share group's whole dead-letter queue topic (KIP-1191, meta
  `share_dlq_topic`), read after the drain. Ok `{topic, high_watermarks, records:
  [[partition, offset, key, value, [[header, value], ...]], ...]}`.
- `dlq_failures`: the DLQ writes the brokers gave up on (the records archived without
  their DLQ records), from their logs. Ok `{writes: [[group, topic, partition,
  first_offset, last_offset], ...], unparsed, metrics_failed, metrics_nodes}`: `unparsed`
  failure lines whose offsets could not be read, `metrics_failed` the failures the
  running brokers' /metrics count (since their last start), `metrics_nodes` how many
  answered.

What is checked:

- acks=all idempotent sends: every acknowledged record is in the final read of its
  partition, at the offset it was acknowledged at (lost); no record is stored twice
  (duplicated); every reader saw the same record at each offset of a partition
  (divergent); each key's records are in its send order (reordered); no reader saw a
  record nobody sent (phantom).
- Transactions, in read_committed reads: never a record of a transaction whose abort
  returned (aborted read); in the final read, every transaction whose commit returned
  whole (lost commit), and any transaction either whole or absent (partial).
- Consumer groups with manual commits: a partition's committed offset never goes back
  (an observation that ended before another started is never larger than it); every
  record below the final committed offset was delivered to some member (skipped).
- Share groups (KIP-932), per record (topic, partition, offset), no stronger than Kafka
  promises. An acknowledgement is answered once it is durable (KIP-932: the share-partition
  leader writes the state with WriteShareGroupState before it answers), so a confirmed
  ACCEPT or REJECT is final; one whose answer was lost may or may not have taken effect.
  Acquisition is not persisted and "the delivery count cannot be relied upon to be precise
  in all situations" (KIP-932): after a leader change a record acquired but not
  acknowledged is delivered again with its last persisted count, so counts may repeat or
  drop back to what was last acknowledged. Hence:
  - no record's ACCEPT or REJECT is confirmed twice (share_accepted_twice);
  - no record whose ACCEPT or REJECT was confirmed is delivered to a consumer instance
    opened after that confirmation returned (share_redelivered); an instance opened
    earlier may hand out a record it acquired before, stale;
  - a record whose RELEASE of its delivery with count n was confirmed is not delivered,
    to an instance opened after that, with a count of n or less; no count is below 1
    (share_count_backwards);
  - every record of a share topic in the final read was, by the end of the drain that
    follows the heal, delivered and acknowledged ACCEPT or REJECT by someone (confirmed
    or not), or delivered with a count of at least the delivery count limit (meta
    `share_delivery_count_limit`), after which the broker archives it
    (share_unaccounted). This assumes the broker's count of a record exceeds the highest
    one a client saw by less than the limit's margin: an acquisition whose answer no
    client read (a consumer closed with a fetch in flight) raises the count unseen. With
    a dead-letter queue, a record the DLQ names, or a failed DLQ write covers, was
    archived too.
- Share groups' dead-letter queues (KIP-1191, meta `share_dlq_topic`), at least once
  and no stronger. A REJECT's ARCHIVING is written to the DLQ only once it is durable,
  and a new leader writes what it finds ARCHIVING again; a lock expiry at the delivery
  count limit is written to the DLQ at once, before its state write, which a new leader
  (or the share coordinator, fencing an old one) may never see; a write that fails for
  good archives the records without DLQ records (logged). Hence:
  - every DLQ record names, in its headers, a record of a share topic that the final read
    holds, with the group's id, in partition (source partition modulo the DLQ's
    partitions), and, with `share_dlq_copy`, the key and value of that record (or none,
    headers only, when the broker could not read it: counted) (dlq_wrong_record);
  - no record whose ACCEPT was confirmed has a DLQ record "Offset rejected by client."
    (dlq_accepted): both are durable transitions out of ACQUIRED, only one can be. One
    with "delivery count exceeded" is counted (dlq_exceeded_accepted), not a violation: a
    lock expiry's DLQ write may stand while its state write is lost;
  - a DLQ record "Offset rejected by client." is for a record some consumer sent a
    REJECT for (confirmed or not); every delivery count is 1 to the limit, and the
    count of "Offset delivery count exceeded the threshold." is the limit (the count
    never passes it, and only a record at the limit is archived for it; a record
    rejected at its last delivery and loaded again by a new leader is told by its count,
    as Kafka tells it) (dlq_wrong_cause). No client sees every acquisition, so no more is
    asked of the deliveries a client saw;
  - every record whose REJECT was confirmed has a DLQ record, unless a failed DLQ write
    covers it (counted), or failures were counted whose offsets are unknown (then every
    missing record is counted) (dlq_missing).
"""

import argparse
import json
import sys
from collections import defaultdict

# How many examples of each kind of finding the verdict prints.
EXAMPLES = 10

SHARE_VIOLATIONS = ("share_accepted_twice", "share_redelivered", "share_count_backwards", "share_unaccounted")
DLQ_VIOLATIONS = ("dlq_wrong_record", "dlq_accepted", "dlq_wrong_cause", "dlq_missing")
VIOLATIONS = ("lost", "duplicated", "divergent", "reordered", "phantom", "aborted_read", "lost_commit",
              "partial_txn", "commit_backwards", "skipped", "incomplete") + SHARE_VIOLATIONS + DLQ_VIOLATIONS
# The kinds that unclean leader election may cause by design: counted, not violations
# (an unclean leader of a `__share_group_state` partition loses acknowledgements too, and
# one of the DLQ topic its records).
UNCLEAN_LOSSES = ("lost", "divergent") + SHARE_VIOLATIONS + DLQ_VIOLATIONS
# Kafka's default `share.delivery.count.limit`, when the history does not say.
SHARE_DELIVERY_COUNT_LIMIT = 5
TERMINAL_ACKS = ("ACCEPT", "REJECT")
# KIP-1191's DLQ record headers, in Kafka's order, and its two causes.
DLQ_HEADERS = ("__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset", "__dlq.errors.group",
               "__dlq.errors.delivery.count", "__dlq.errors.message")
DLQ_REJECTED = "Offset rejected by client."
DLQ_EXCEEDED = "Offset delivery count exceeded the threshold."


class Result:
    """The verdict: `findings` maps a kind to its evidence lines, `counts` the totals the
    report prints, `valid` is False when any finding is a violation in this mode."""

    def __init__(self, meta: dict):
        self.meta = meta
        self.findings = defaultdict(list)
        self.counts = defaultdict(int)

    @property
    def unclean(self) -> bool:
        return bool(self.meta.get("unclean"))

    def add(self, kind: str, evidence: str):
        assert kind in VIOLATIONS, kind
        self.findings[kind].append(evidence)

    def violations(self) -> dict:
        """The findings that fail the run: everything, except the losses unclean leader
        election is allowed to cause when it is on."""
        return {k: v for k, v in self.findings.items()
                if v and not (self.unclean and k in UNCLEAN_LOSSES)}

    @property
    def valid(self) -> bool:
        return not self.violations()

    def summary(self) -> dict:
        found = {k: len(v) for k, v in self.findings.items() if v}
        return {"valid": self.valid, "unclean": self.unclean, "counts": dict(self.counts), "findings": found}

    def render(self) -> str:
        lines = []
        seed = self.meta.get("seed")
        head = "VALID" if self.valid else "INVALID"
        lines.append(f"verdict: {head}" + (f" (seed {seed})" if seed is not None else ""))
        lines.append("counts: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))
        for kind in VIOLATIONS:
            found = self.findings.get(kind)
            if not found:
                continue
            tolerated = self.unclean and kind in UNCLEAN_LOSSES
            label = "counted (unclean leader election on)" if tolerated else "VIOLATION"
            lines.append(f"{kind}: {len(found)} {label}")
            lines.extend(f"  - {e}" for e in found[:EXAMPLES])
            if len(found) > EXAMPLES:
                lines.append(f"  ... and {len(found) - EXAMPLES} more")
        if not self.valid and self.meta.get("replay"):
            lines.append(f"replay: {self.meta['replay']}")
        return "\n".join(lines)


def load(path) -> list:
    """The events of a history file; a torn last line (the runner was killed) is dropped."""
    events = []
    with open(path) as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            if i != len(lines) - 1:
                raise
    return events


def check(events) -> Result:
    """The verdict over a history (a list of event dicts, in the order written)."""
    h = _History(events)
    result = Result(h.meta)
    _check_agreement(h, result)
    _check_sends(h, result)
    _check_transactions(h, result)
    _check_groups(h, result)
    _check_share_groups(h, result)
    return result


# ----- the history, indexed -----------------------------------------------------------


class _Op:
    __slots__ = ("id", "process", "f", "invoke", "invoke_time", "type", "value", "time")

    def __init__(self, invoke: dict):
        self.id = invoke["id"]
        self.process = invoke.get("process")
        self.f = invoke["f"]
        self.invoke = invoke.get("value") or {}
        self.invoke_time = invoke.get("time", 0.0)
        self.type = None  # None while it never completed: indeterminate
        self.value = {}
        self.time = None

    def complete(self, event: dict):
        self.type = event["type"]
        self.value = event.get("value") or {}
        self.time = event.get("time")

    @property
    def ok(self) -> bool:
        return self.type == "ok"

    def where(self) -> str:
        end = f"{self.time:.3f}" if self.time is not None else "never"
        return f"{self.process} op {self.id} [{self.invoke_time:.3f}..{end}]"


class _History:
    def __init__(self, events):
        self.meta = {}
        self.ops = []
        self.faults = []
        pending = {}
        for e in events:
            kind = e.get("type")
            if kind == "meta":
                self.meta.update({k: v for k, v in e.items() if k != "type"})
            elif kind == "fault":
                self.faults.append(e)
            elif kind == "invoke":
                op = _Op(e)
                pending[op.id] = op
                self.ops.append(op)
            elif kind in ("ok", "fail", "info"):
                op = pending.pop(e["id"], None)
                if op is None:  # a completion without its invocation: keep what it says
                    op = _Op(dict(e, value={}))
                    self.ops.append(op)
                op.complete(e)
        self.by_f = defaultdict(list)
        for op in self.ops:
            self.by_f[op.f].append(op)
        # (topic, partition, isolation) -> the final read's op; the last one wins.
        self.final = {}
        for op in self.by_f["final_read"]:
            if op.ok:
                v = op.value
                self.final[(v["topic"], v["partition"], v.get("isolation", "read_uncommitted"))] = op

    def final_records(self, topic: str, partition: int, isolation: str = "read_uncommitted"):
        op = self.final.get((topic, partition, isolation))
        return None if op is None else op.value["records"]

    def reads(self):
        """Every record any reader saw: (topic, partition, offset, key, value, isolation, op)."""
        for op in self.by_f["poll"]:
            if op.ok:
                iso = op.value.get("isolation", "read_uncommitted")
                for t, p, o, k, v in op.value.get("records", []):
                    yield t, p, o, k, v, iso, op
        for op in self.by_f["share_poll"]:
            if op.ok:
                for t, p, o, k, v, _count in op.value.get("records", []):
                    yield t, p, o, k, v, "read_uncommitted", op
        for op in self.final.values():
            v = op.value
            for o, k, val in v["records"]:
                yield v["topic"], v["partition"], o, k, val, v.get("isolation", "read_uncommitted"), op

    def fault_near(self, t) -> str:
        """The last fault injected before time `t`, as context for a finding."""
        if t is None:
            return ""
        before = [f for f in self.faults if f.get("time", 0) <= t]
        if not before:
            return ""
        f = before[-1]
        return f"; last fault before: {f.get('fault')} {f.get('node', '')} at {f.get('time', 0):.3f}".rstrip()


# ----- checks -------------------------------------------------------------------------


def _check_agreement(h: _History, result: Result):
    """Every reader saw the same record at each offset, and each record at one offset only."""
    at = {}  # (topic, partition, offset) -> (key, value, op)
    where = defaultdict(set)  # (topic, key, value) -> {(partition, offset)}
    for t, p, o, k, v, _iso, op in h.reads():
        seen = at.get((t, p, o))
        if seen is None:
            at[(t, p, o)] = (k, v, op)
        elif (seen[0], seen[1]) != (k, v):
            result.add("divergent", f"{t}-{p} offset {o}: {seen[2].process} read {seen[0]}={seen[1]} "
                                    f"({seen[2].where()}) but {op.process} read {k}={v} ({op.where()})")
            at[(t, p, o)] = (k, v, op)  # report each further disagreement once
        where[(t, k, v)].add((p, o))
    for (t, k, v), places in where.items():
        if len(places) > 1:
            result.add("duplicated", f"{t} {k}={v} stored at {len(places)} offsets: "
                                     + ", ".join(f"{t}-{p}@{o}" for p, o in sorted(places)))
    result.counts["offsets_read"] = len(at)


def _check_sends(h: _History, result: Result):
    sends = h.by_f["send"]
    known = set()
    order = {}  # (topic, key, value) -> its place in its key's send order
    next_seq = defaultdict(int)
    for op in sends:
        t, k, v = op.invoke["topic"], op.invoke["key"], op.invoke["value"]
        known.add((t, k, v))
        order[(t, k, v)] = next_seq[(op.process, t, k)]
        next_seq[(op.process, t, k)] += 1
    for op in h.by_f["txn"]:
        for t, k, v in op.value.get("records", []):
            known.add((t, k, v))
    result.counts["sends"] = len(sends)
    acked = [op for op in sends if op.ok]
    result.counts["acknowledged"] = len(acked)
    # librdkafka acknowledges an idempotent batch whose request timed out once a later
    # batch of the same producer succeeds (it was persisted), without its offset.
    result.counts["acknowledged_without_offset"] = sum(1 for op in acked if op.value.get("offset") in (None, -1))
    result.counts["send_failed"] = sum(1 for op in sends if op.type == "fail")
    result.counts["send_indeterminate"] = sum(1 for op in sends if op.type in (None, "info"))

    for op in acked:
        t, k, v = op.invoke["topic"], op.invoke["key"], op.invoke["value"]
        p, o = op.value["partition"], op.value["offset"]
        records = h.final_records(t, p)
        if records is None:
            result.add("incomplete", f"no final read of {t}-{p}: cannot check {k}={v} acknowledged at offset {o}")
            continue
        in_final = {oo for oo, kk, vv in records if (kk, vv) == (k, v)}
        if not in_final:
            holder = next(((kk, vv) for oo, kk, vv in records if oo == o), None)
            what = (f"offset {o} holds {holder[0]}={holder[1]}" if holder else
                    "offset absent" if o is not None and o >= 0 else "acknowledged without an offset")
            hw = h.final[(t, p, "read_uncommitted")].value.get("high_watermark")
            result.add("lost", f"{t}-{p}: {k}={v} acknowledged at offset {o} by {op.where()}, not in the final "
                               f"read (high watermark {hw}; {what}){h.fault_near(op.time)}")
        elif o is not None and o >= 0 and o not in in_final:
            result.add("divergent", f"{t}-{p}: {k}={v} acknowledged at offset {o} ({op.where()}) but stored at "
                                    f"{sorted(in_final)}")

    # Per-key order in each final read: the send order, without going back.
    for (t, p, iso), fop in h.final.items():
        if iso != "read_uncommitted":
            continue
        last = {}
        for o, k, v in fop.value["records"]:
            seq = order.get((t, k, v))
            if seq is None:
                continue
            prev = last.get(k)
            if prev is not None and seq <= prev[0]:
                result.add("reordered", f"{t}-{p}: key {k}: {v} (send #{seq}) at offset {o} after "
                                        f"send #{prev[0]} at offset {prev[1]}")
            last[k] = (seq, o)

    for t, p, o, k, v, _iso, op in h.reads():
        if (t, k, v) not in known:
            result.add("phantom", f"{t}-{p} offset {o}: {k}={v} read by {op.process} ({op.where()}) was never sent")
            known.add((t, k, v))  # once per record


def _check_transactions(h: _History, result: Result):
    txns = h.by_f["txn"]
    owner = {}  # (topic, key, value) -> txn op
    for op in txns:
        for t, k, v in op.value.get("records", []):
            owner[(t, k, v)] = op
    committed = [op for op in txns if op.ok and op.value.get("outcome") == "commit"]
    aborted = [op for op in txns if op.ok and op.value.get("outcome") == "abort"]
    result.counts["txn_committed"] = len(committed)
    result.counts["txn_aborted"] = len(aborted)
    result.counts["txn_indeterminate"] = len(txns) - len(committed) - len(aborted)
    if not txns:
        return

    reported = set()
    for t, p, o, k, v, iso, op in h.reads():
        if iso != "read_committed":
            continue
        txn = owner.get((t, k, v))
        if txn is not None and txn.ok and txn.value.get("outcome") == "abort" and txn.id not in reported:
            reported.add(txn.id)
            result.add("aborted_read", f"{op.process} ({op.where()}) read {k}={v} at {t}-{p}@{o}, a record of "
                                       f"transaction {txn.value.get('txn')} whose abort returned ({txn.where()})")

    # The final read_committed reads: each transaction whole or absent, committed ones whole.
    final_topics = {t for (t, _p, iso) in h.final if iso == "read_committed"}
    if not final_topics:
        result.add("incomplete", "transactions ran but no partition was read read_committed at the end")
        return
    visible = set()
    for (t, p, iso), fop in h.final.items():
        if iso == "read_committed":
            visible.update((t, k, v) for _o, k, v in fop.value["records"])
    for op in txns:
        records = [tuple(r) for r in op.value.get("records", [])]
        if not records or not all(r[0] in final_topics for r in records):
            continue
        seen = [r for r in records if r in visible]
        name = op.value.get("txn")
        if op.ok and op.value.get("outcome") == "commit" and len(seen) < len(records):
            missing = [f"{k}={v}" for t, k, v in records if (t, k, v) not in visible]
            result.add("lost_commit", f"transaction {name} committed ({op.where()}) but {len(missing)} of its "
                                      f"{len(records)} records are not in the final read_committed read: "
                                      f"{', '.join(missing[:5])}{h.fault_near(op.time)}")
        elif seen and len(seen) < len(records):
            result.add("partial_txn", f"transaction {name} ({op.type or 'never completed'}, {op.where()}): "
                                      f"{len(seen)} of its {len(records)} records visible read_committed")
    result.counts["txn_records_visible"] = sum(1 for r in owner if r in visible)


def _check_groups(h: _History, result: Result):
    # Observations of a partition's committed offset: (value, start, end, what).
    observed = defaultdict(list)
    for op in h.by_f["commit"]:
        if op.ok:
            for t, p, off in op.invoke.get("offsets", []):
                observed[(op.invoke["group"], t, p)].append((off, op.invoke_time, op.time, f"commit by {op.where()}"))
    final_committed = {}
    for op in h.by_f["committed"]:
        if op.ok:
            g = op.value["group"]
            for t, p, off in op.value.get("offsets", []):
                # No committed offset (-1001, OFFSET_INVALID) is below any committed one:
                # after a commit returned, "nothing committed" is a step back too.
                off = max(off, -1)
                observed[(g, t, p)].append((off, op.invoke_time, op.time, f"committed probe {op.where()}"))
                if op.value.get("final") and off >= 0:
                    final_committed[(g, t, p)] = off
    result.counts["commits"] = sum(1 for op in h.by_f["commit"] if op.ok)

    for (g, t, p), obs in observed.items():
        # An observation X that ended before Y began must not exceed Y.
        by_end = sorted(obs, key=lambda x: x[2])
        best = None  # the largest value among observations ended so far
        i = 0
        for y in sorted(obs, key=lambda x: x[1]):
            while i < len(by_end) and by_end[i][2] < y[1]:
                if best is None or by_end[i][0] > best[0]:
                    best = by_end[i]
                i += 1
            if best is not None and y[0] < best[0]:
                result.add("commit_backwards", f"group {g} {t}-{p}: committed offset {best[0]} ({best[3]}) then "
                                               f"{y[0]} ({y[3]}){h.fault_near(y[1])}")
                best = None  # one report per drop; the next compares against what follows

    consumed = defaultdict(set)
    for op in h.by_f["poll"]:
        if op.ok and op.value.get("group"):
            for t, p, o, _k, _v in op.value.get("records", []):
                consumed[(op.value["group"], t, p)].add(o)
    for (g, t, p), upto in final_committed.items():
        records = h.final_records(t, p)
        if records is None:
            result.add("incomplete", f"no final read of {t}-{p}: cannot check group {g}'s commits up to {upto}")
            continue
        skipped = [(o, k, v) for o, k, v in records if o < upto and o not in consumed[(g, t, p)]]
        result.counts["group_records_checked"] += sum(1 for o, _k, _v in records if o < upto)
        if skipped:
            o, k, v = skipped[0]
            result.add("skipped", f"group {g} {t}-{p}: committed up to {upto} but {len(skipped)} records below it "
                                  f"were never delivered to a member, first {k}={v} at offset {o}")


class _ShareRecord:
    """What happened to one record in a share group: its deliveries (delivery count, when
    the instance that got it opened, the poll) and its acknowledgements (type, count,
    confirmed, the commit)."""

    __slots__ = ("deliveries", "acks")

    def __init__(self):
        self.deliveries = []
        self.acks = []

    def confirmed(self, *types):
        return [(kind, count, op) for kind, count, confirmed, op in self.acks if confirmed and kind in types]

    def sent(self, *types):
        return [(kind, count, op) for kind, count, _confirmed, op in self.acks if kind in types]


def _share_records(h: _History) -> dict:
    """(topic, partition, offset) -> its _ShareRecord, from the share consumers' polls and
    commits."""
    opened = {op.invoke["instance"]: op.invoke_time for op in h.by_f["share_open"]}
    records = defaultdict(_ShareRecord)
    for op in h.by_f["share_poll"]:
        if op.ok:
            since = opened.get(op.value.get("instance"))
            for t, p, o, _k, _v, count in op.value.get("records", []):
                records[(t, p, o)].deliveries.append((count, since, op))
    for op in h.by_f["share_ack"]:
        results = {(t, p): error for t, p, error in op.value.get("results", [])} if op.ok else {}
        for t, p, o, kind, count in op.invoke.get("acks", []):
            confirmed = (t, p) in results and results[(t, p)] is None
            records[(t, p, o)].acks.append((kind, count, confirmed, op))
    return records


def _check_share_groups(h: _History, result: Result):
    records = _share_records(h)
    limit = h.meta.get("share_delivery_count_limit", SHARE_DELIVERY_COUNT_LIMIT)
    result.counts["share_deliveries"] = sum(len(r.deliveries) for r in records.values())
    result.counts["share_acks_confirmed"] = sum(1 for r in records.values() for a in r.acks if a[2])
    result.counts["share_acks_unconfirmed"] = sum(1 for r in records.values() for a in r.acks if not a[2])
    for (t, p, o), r in sorted(records.items()):
        where = f"{t}-{p}@{o}"
        done = sorted(r.confirmed(*TERMINAL_ACKS), key=lambda a: a[2].time)
        if len(done) > 1:
            result.add("share_accepted_twice", f"{where}: {done[0][0]} of delivery {done[0][1]} confirmed "
                                               f"({done[0][2].where()}) and again {done[1][0]} of delivery "
                                               f"{done[1][1]} ({done[1][2].where()}){h.fault_near(done[1][2].time)}")
        if done:
            confirmed_at = done[0][2].time
            later = [d for d in r.deliveries if d[1] is not None and d[1] > confirmed_at]
            if later:
                count, since, op = later[0]
                result.add("share_redelivered", f"{where}: {done[0][0]} confirmed ({done[0][2].where()}), then "
                                                f"delivered with count {count} to {op.value.get('instance')} "
                                                f"opened at {since:.3f} ({op.where()}){h.fault_near(op.time)}")
        _check_share_counts(h, result, where, r)
    archived = _check_share_dlq(h, result, records, limit)
    _check_share_accounted(h, result, records, limit, archived)


def _check_share_counts(h: _History, result: Result, where: str, r: _ShareRecord):
    """Delivery counts of one record: at least 1, and above the count of a RELEASE whose
    confirmation returned before the instance delivering it opened."""
    released = r.confirmed("RELEASE")
    for count, since, op in r.deliveries:
        if count is None or count < 1:
            result.add("share_count_backwards", f"{where}: delivered with count {count} ({op.where()})")
            return
        for _kind, n, ack in released:
            if since is not None and since > ack.time and count <= n:
                result.add("share_count_backwards", f"{where}: RELEASE of delivery {n} confirmed "
                                                    f"({ack.where()}), then delivered with count {count} to "
                                                    f"{op.value.get('instance')} opened at {since:.3f} "
                                                    f"({op.where()}){h.fault_near(op.time)}")
                return


def _check_share_accounted(h: _History, result: Result, records: dict, limit: int, archived):
    """Every record of a share topic read at the end was accepted, rejected or delivered
    up to the delivery count limit, or archived as the DLQ shows (`archived(t, p, o)`),
    by the end of the drain."""
    topics = h.meta.get("share_topics") or []
    for t in topics:
        partitions = sorted(p for (tt, p, iso) in h.final if tt == t and iso == "read_uncommitted")
        if not partitions:
            result.add("incomplete", f"share topic {t} was consumed but never read at the end")
            continue
        for p in partitions:
            for o, k, v in h.final_records(t, p):
                r = records.get((t, p, o))
                result.counts["share_records"] += 1
                if r is not None and r.confirmed("ACCEPT"):
                    result.counts["share_accepted"] += 1
                elif r is not None and r.confirmed("REJECT"):
                    result.counts["share_rejected"] += 1
                elif r is not None and r.sent(*TERMINAL_ACKS):
                    result.counts["share_done_unconfirmed"] += 1
                elif r is not None and max((count or 0 for count, _, _ in r.deliveries), default=0) >= limit:
                    result.counts["share_archived_at_limit"] += 1
                elif archived(t, p, o):
                    result.counts["share_archived_at_limit"] += 1
                else:
                    seen = sorted(count for count, _, _ in r.deliveries) if r is not None else []
                    result.add("share_unaccounted", f"{t}-{p}@{o}: {k}={v} neither accepted nor rejected nor "
                                                    f"delivered {limit} times by the end: delivered with counts "
                                                    f"{seen or 'never'}, acknowledged {_acks_of(r)}")


def _dlq_failures(h: _History, op):
    """The share group's failed DLQ writes as `op` (a `dlq_failures`) reports them,
    {(topic, partition): [(first, last), ...]}, and whether some failures' offsets are
    unknown (a log line not understood, or more failures on /metrics than in the logs)."""
    if op is None:
        return {}, False
    group = h.meta.get("share_group")
    ranges = defaultdict(list)
    writes = op.value.get("writes", [])
    for g, t, p, first, last in writes:
        if group is None or g == group:
            ranges[(t, p)].append((first, last))
    unknown = op.value.get("unparsed", 0) > 0 or op.value.get("metrics_failed", 0) > len(writes)
    return ranges, unknown


def _check_share_dlq(h: _History, result: Result, records: dict, limit: int):
    """The dead-letter queue read at the end against the share records' history; returns
    `archived(t, p, o)`: whether the DLQ names the record or a failed DLQ write covers it."""
    topic = h.meta.get("share_dlq_topic")
    if not topic:
        return lambda t, p, o: False
    read = next((op for op in reversed(h.by_f["dlq_read"]) if op.ok), None)
    if read is None:
        result.add("incomplete", f"the share group's dead-letter queue {topic} was never read at the end")
        return lambda t, p, o: False
    reported = next((op for op in reversed(h.by_f["dlq_failures"]) if op.ok), None)
    failed, unknown = _dlq_failures(h, reported)

    def covered(t, p, o):
        return any(first <= o <= last for first, last in failed.get((t, p), []))

    named = set()
    for dp, do, key, value, headers in read.value.get("records", []):
        source = _dlq_source(h, result, f"{topic}-{dp}@{do}", dp, key, value, headers)
        if source is not None:
            named.add(source[:3])
            _check_dlq_cause(h, result, f"{topic}-{dp}@{do}", source, records.get(source[:3]), limit)
    result.counts["dlq_records"] = len(read.value.get("records", []))
    result.counts["dlq_sources"] = len(named)
    result.counts["dlq_failed_writes"] = sum(len(r) for r in failed.values())
    if reported is not None:  # the brokers' own count, and how many answered it
        result.counts["dlq_metrics_failed"] = int(reported.value.get("metrics_failed", 0))
        result.counts["dlq_metrics_nodes"] = reported.value.get("metrics_nodes", 0)
    _check_dlq_complete(h, result, records, named, covered, unknown)
    return lambda t, p, o: (t, p, o) in named or covered(t, p, o)


def _dlq_source(h: _History, result: Result, where: str, dlq_partition: int, key, value, headers):
    """The record a DLQ record names, (topic, partition, offset, delivery count, message),
    once its headers, its partition and its copy of the record are checked; None (and a
    finding) when they are wrong."""
    found = dict(headers)
    missing = [name for name in DLQ_HEADERS if name not in found]
    if missing:
        result.add("dlq_wrong_record", f"{where}: no header {', '.join(missing)} (headers {headers})")
        return None
    t, group = found["__dlq.errors.topic"], h.meta.get("share_group")
    try:
        p, o = int(found["__dlq.errors.partition"]), int(found["__dlq.errors.offset"])
        count = int(found["__dlq.errors.delivery.count"])
    except (TypeError, ValueError):
        result.add("dlq_wrong_record", f"{where}: headers not numbers where Kafka writes decimals: {headers}")
        return None
    named = f"names {t}-{p}@{o}"
    if t not in (h.meta.get("share_topics") or []) or (group is not None and found["__dlq.errors.group"] != group):
        result.add("dlq_wrong_record", f"{where}: {named} of group {found['__dlq.errors.group']}, not a share "
                                       f"topic of group {group}")
        return None
    log = h.final_records(t, p)
    original = None if log is None else next(((k, v) for oo, k, v in log if oo == o), None)
    if original is None:
        hw = "no final read" if log is None else f"the final read ends at {1 + max((r[0] for r in log), default=-1)}"
        result.add("dlq_wrong_record", f"{where}: {named}, which the log does not hold ({hw})")
        return None
    partitions = h.meta.get("share_dlq_partitions")
    if partitions and dlq_partition != p % partitions:
        result.add("dlq_wrong_record", f"{where}: {named}, in DLQ partition {dlq_partition}, not {p % partitions} "
                                       f"(source partition modulo {partitions})")
    if not h.meta.get("share_dlq_copy"):
        original = (None, None)
    if (key, value) == (None, None) and original != (None, None):
        result.counts["dlq_headers_only"] += 1
    elif (key, value) != original:
        result.add("dlq_wrong_record", f"{where}: {named}, which holds {original[0]}={original[1]}, but copies "
                                       f"{key}={value}")
    return t, p, o, count, found["__dlq.errors.message"]


def _check_dlq_cause(h: _History, result: Result, where: str, source, r, limit: int):
    """A DLQ record's cause and delivery count against what the consumers did to its record."""
    t, p, o, count, message = source
    named = f"names {t}-{p}@{o} with delivery count {count}"
    if not 1 <= count <= limit:
        result.add("dlq_wrong_cause", f"{where}: {named}, outside 1 to the delivery count limit {limit}")
    accepted = r.confirmed("ACCEPT") if r is not None else []
    if message == DLQ_REJECTED:
        result.counts["dlq_rejected"] += 1
        if r is None or not r.sent("REJECT"):
            result.add("dlq_wrong_cause", f"{where}: {named}, '{message}', but no consumer sent a REJECT for it "
                                          f"(acknowledged {_acks_of(r)})")
        if accepted:
            result.add("dlq_accepted", f"{where}: {named}, '{message}', but its ACCEPT of delivery "
                                       f"{accepted[0][1]} was confirmed ({accepted[0][2].where()})"
                                       f"{h.fault_near(accepted[0][2].time)}")
    elif message == DLQ_EXCEEDED:
        result.counts["dlq_exceeded"] += 1
        if count != limit:
            result.add("dlq_wrong_cause", f"{where}: {named}, '{message}', but the limit is {limit}")
        if accepted:
            result.counts["dlq_exceeded_accepted"] += 1
    else:
        result.add("dlq_wrong_cause", f"{where}: {named}, with message {message!r}, neither of KIP-1191's")


def _acks_of(r):
    """A record's acknowledgements as evidence: type, delivery count, confirmed or not."""
    acks = [f"{kind} {count} {'ok' if ok else 'unconfirmed'}" for kind, count, ok, _ in r.acks] if r else []
    return acks or "never"


def _check_dlq_complete(h: _History, result: Result, records: dict, named: set, covered, unknown: bool):
    """Every record whose REJECT was confirmed is in the DLQ, unless a failed write covers it."""
    for (t, p, o), r in sorted(records.items()):
        rejects = r.confirmed("REJECT")
        if not rejects:
            continue
        result.counts["dlq_rejects_confirmed"] += 1
        if (t, p, o) in named:
            result.counts["dlq_rejects_found"] += 1
        elif covered(t, p, o) or unknown:
            result.counts["dlq_missing_failed_write"] += 1
        else:
            _kind, n, op = rejects[0]
            result.add("dlq_missing", f"{t}-{p}@{o}: REJECT of delivery {n} confirmed ({op.where()}), but no DLQ "
                                      f"record names it and no failed DLQ write covers it{h.fault_near(op.time)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Checks a chaos history file and prints the verdict.")
    parser.add_argument("history", help="a JSON-lines history written by run.py")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON after the verdict")
    args = parser.parse_args(argv)
    result = check(load(args.history))
    print(result.render())
    if args.json:
        print(json.dumps(result.summary(), sort_keys=True))
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
