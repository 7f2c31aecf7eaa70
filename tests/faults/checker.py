"""The fault harness's checker, in the style of Jepsen: a history of client operations (each
invocation with its outcome: `ok`, `fail` or `unknown`) and what the engine holds afterwards,
judged without any I/O.

The history is what the workload's clients saw (`Op`); the observation is what the harness
read once every fault was healed (`Observed`): every run's document and events, the signals
each run still buffers (from its stored document), the runs listed by business key, every
push delivery the handler received and every task a worker claimed, and, on a cluster, the
fencing audit (tests/cluster/history.py). `check` proves:

- every acknowledged start exists exactly once (one run per start, the one answered); a start
  that only ever failed definitely left no run; an unknown one left at most one;
- every acknowledged signal was received once and is consumed once or still buffered; a
  signal acknowledged `delivered` was consumed; one that only ever failed left nothing;
- every task attempt has one idempotency key, `runId:generation:step:attempt`, and every
  delivery (push) or claim (pull) of it carries that key and names an attempt the history
  dispatched; a repeated key is counted (at-least-once), a second attempt opened while the
  previous one had no outcome is a duplicate under a different key;
- every run's history is one linear history whose timers fired once per arming
  (`history_problems`), and its stored status is the one its history ends in;
- nothing an operator was told succeeded is missing (an acknowledged cancel left the run
  cancelled, an acknowledged redrive a `run_redriven` of that generation, an acknowledged
  `complete` a `task_completed` of that attempt);
- on a cluster, no event row was written by a node after its lease ended (`fencing_problems`),
  and no push left a node for a partition it did not hold.

A violation carries the shortest history that shows it: the operations on its subject, its
run's events and the deliveries of its keys, in time order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..cluster.history import LeaseHistory, Write, fencing_problems, history_problems

Op = dict[str, Any]  # {n, proc, f, item, value, t0, t1, type: ok|fail|unknown, result}
Event = dict[str, Any]
TERMINAL = {
    "run_completed": "completed",
    "run_failed": "failed",
    "run_cancelled": "cancelled",
    "run_timed_out": "timed_out",
}
ACKED_SIGNAL = ("delivered", "buffered", "duplicate")


@attrs.frozen
class Violation:
    kind: str  # lost_start, duplicate_start, lost_signal, ..., status, timers, fencing
    subject: str  # a run id, an item, a key
    message: str
    evidence: tuple[str, ...] = ()

    def render(self) -> str:
        lines = [f"[{self.kind}] {self.subject}: {self.message}"]
        lines += [f"    {line}" for line in self.evidence]
        return "\n".join(lines)


@attrs.define
class Observed:
    runs: dict[str, dict[str, Any]]  # runId -> run document
    events: dict[str, list[Event]]  # runId -> events, oldest first
    buffers: dict[str, list[str | None]]  # runId -> signalIds the stored run still buffers
    by_business_key: dict[str, list[str]]  # businessKey -> every runId listed with it
    deliveries: list[dict[str, Any]] = attrs.Factory(list)  # pushes: key, runId, …, at, node
    claims: list[dict[str, Any]] = attrs.Factory(list)  # pulled tasks, as deliveries
    writes: list[Write] | None = None  # the fencing audit (cluster only)
    leases: LeaseHistory | None = None
    node_of: Mapping[str, str] = attrs.Factory(dict)  # writer application_name -> node id
    partition_of: Callable[[str], int] | None = None


@attrs.define
class Counts:
    """One column group of the figures table."""

    acknowledged: int = 0  # operations answered ok
    lost: int = 0  # acknowledged and missing
    duplicated_same_key: int = 0  # a key delivered (or claimed) again: at-least-once
    duplicated_other_key: int = 0  # the same work under another key, or twice
    violations: int = 0


@attrs.define
class Report:
    violations: list[Violation]
    counts: Counts

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self, seed: int | None = None, limit: int = 10) -> str:
        head = f"seed {seed}: " if seed is not None else ""
        if self.ok:
            return f"{head}no violation ({self.counts})"
        kinds = Counter(v.kind for v in self.violations)
        text = [f"{head}{len(self.violations)} violation(s) {dict(kinds)} ({self.counts}); the shortest:"]
        for v in sorted(self.violations, key=lambda v: len(v.evidence))[:limit]:
            text.append(v.render())
        return "\n".join(text)


def attempt_key(run_id: str, generation: int, step: str, attempt: int) -> str:
    return f"{run_id}:{generation}:{step}:{attempt}"


def _op_line(op: Op) -> str:
    result = op.get("result") or {}
    return (
        f"op#{op['n']} {op['t0']:.3f}-{op['t1']:.3f} {op['proc']} {op['f']} item={op.get('item')} "
        f"{op.get('value')} -> {op['type']} {result}"
    )


def _event_line(run_id: str, e: Event) -> str:
    return (
        f"event {run_id} seq={e['seq']} {e['type']} step={e.get('step')} gen={e.get('generation')} "
        f"attempt={e.get('attempt')} {e.get('data') or {}}"
    )


def _delivery_line(d: Mapping[str, Any], what: str = "delivery") -> str:
    node = f" from {d['node']}" if d.get("node") else ""
    body = f"({d['runId']},{d['generation']},{d['step']},{d['attempt']})"
    return f"{what} {d['at']:.3f}{node} key={d['key']} body={body}"


class _Check:
    def __init__(self, history: Sequence[Op], seen: Observed) -> None:
        self.history = sorted(history, key=lambda op: (op["t0"], op["n"]))
        self.seen = seen
        self.out: list[Violation] = []
        self.counts = Counts(acknowledged=sum(1 for op in history if op["type"] == "ok"))
        self.ops_by_run: dict[str, list[Op]] = defaultdict(list)
        self.ops_by_item: dict[Any, list[Op]] = defaultdict(list)
        for op in self.history:
            self.ops_by_item[(op["f"] == "start", op.get("item"))].append(op)
            run_id = (op.get("value") or {}).get("runId") or (op.get("result") or {}).get("runId")
            if run_id:
                self.ops_by_run[run_id].append(op)

    def bad(self, kind: str, subject: str, message: str, evidence: Iterable[str] = ()) -> None:
        self.out.append(Violation(kind, subject, message, tuple(evidence)))

    def story(self, run_ids: Iterable[str], ops: Iterable[Op] = (), keys: Iterable[str] = ()) -> list[str]:
        """The operations, events and deliveries about these runs (and keys), ordered."""
        ids = [r for r in dict.fromkeys(run_ids) if r]
        lines: list[tuple[float, str]] = []
        chosen = {op["n"]: op for op in ops}
        for run_id in ids:
            chosen.update({op["n"]: op for op in self.ops_by_run.get(run_id, [])})
        lines += [(op["t0"], _op_line(op)) for op in chosen.values()]
        for run_id in ids:
            for e in self.seen.events.get(run_id, []):
                lines.append((float(e.get("atS", 0.0)), _event_line(run_id, e)))
        wanted = set(keys)
        for d in self.seen.deliveries:
            if d["runId"] in ids or d["key"] in wanted:
                lines.append((d["at"], _delivery_line(d)))
        for d in self.seen.claims:
            if d["runId"] in ids or d["key"] in wanted:
                lines.append((d["at"], _delivery_line(d, "claim")))
        return [text for _, text in sorted(lines, key=lambda x: x[0])]

    # ------------------------------------------------------------------ starts

    def starts(self) -> None:
        by_item: dict[Any, list[Op]] = defaultdict(list)
        for op in self.history:
            if op["f"] == "start":
                by_item[op["item"]].append(op)
        for item, ops in by_item.items():
            key = ops[0]["value"]["businessKey"]
            acked = {op["result"]["runId"] for op in ops if op["type"] == "ok"}
            listed = self.seen.by_business_key.get(key, [])
            mine = [r for r in listed if (self.seen.runs.get(r, {}).get("input") or {}).get("item") == item]
            if len(acked) > 1:
                self.counts.duplicated_other_key += len(acked) - 1
                self.bad(
                    "duplicate_start",
                    f"item {item}",
                    f"one start answered several runs {sorted(acked)}",
                    self.story(acked, ops),
                )
            if len(mine) > 1:
                self.counts.duplicated_other_key += len(mine) - 1
                self.bad(
                    "duplicate_start",
                    f"item {item}",
                    f"{len(mine)} runs for one start: {mine}",
                    self.story(mine, ops),
                )
            for run_id in acked:
                if run_id not in self.seen.runs or run_id not in mine:
                    self.counts.lost += 1
                    self.bad(
                        "lost_start",
                        f"item {item}",
                        f"acknowledged run {run_id} is missing",
                        self.story([run_id], ops),
                    )
            if not acked and mine and all(op["type"] == "fail" for op in ops):
                self.bad(
                    "failed_start_applied",
                    f"item {item}",
                    f"every start was refused, yet run {mine} exists",
                    self.story(mine, ops),
                )

    # ------------------------------------------------------------------ signals

    def signals(self) -> None:
        by_id: dict[tuple[str, str], list[Op]] = defaultdict(list)
        for op in self.history:
            if op["f"] == "signal":
                by_id[(op["value"]["runId"], op["value"]["signalId"])].append(op)
        for (run_id, signal_id), ops in by_id.items():
            events = self.seen.events.get(run_id, [])
            received = [
                e
                for e in events
                if e["type"] == "signal_received" and (e.get("data") or {}).get("signalId") == signal_id
            ]
            consumed = [
                e
                for e in events
                if e["type"] == "signal_consumed" and (e.get("data") or {}).get("signalId") == signal_id
            ]
            buffered = self.seen.buffers.get(run_id, []).count(signal_id)
            statuses = [op["result"].get("status") for op in ops if op["type"] == "ok"]
            acked = [s for s in statuses if s in ACKED_SIGNAL]
            subject = f"{run_id} signal {signal_id}"
            if len(received) > 1 or len(consumed) > 1 or (consumed and buffered):
                self.counts.duplicated_same_key += max(len(received), len(consumed) + buffered) - 1
                self.bad(
                    "duplicate_signal",
                    subject,
                    f"received {len(received)}x, consumed {len(consumed)}x, buffered {buffered}x",
                    self.story([run_id], ops),
                )
            if acked and not received:
                self.counts.lost += 1
                self.bad(
                    "lost_signal",
                    subject,
                    f"acknowledged {acked} but never received",
                    self.story([run_id], ops),
                )
            elif acked and not consumed and not buffered:
                self.counts.lost += 1
                self.bad(
                    "lost_signal",
                    subject,
                    f"acknowledged {acked}: neither consumed nor buffered",
                    self.story([run_id], ops),
                )
            if "delivered" in acked and not consumed:
                self.bad(
                    "lost_signal",
                    subject,
                    "acknowledged delivered but not consumed",
                    self.story([run_id], ops),
                )
            if not statuses and received and all(op["type"] == "fail" for op in ops):
                self.bad(
                    "failed_signal_applied",
                    subject,
                    "every send was refused, yet it was received",
                    self.story([run_id], ops),
                )

    # ------------------------------------------------------------------ tasks

    def tasks(self) -> None:
        dispatched: dict[str, tuple[str, Event]] = {}
        outcome: dict[str, int] = {}
        for run_id, events in self.seen.events.items():
            opened: dict[tuple[int, str], tuple[str, int]] = {}  # (gen, step) -> (key, seq)
            for e in events:
                if e["type"] not in ("task_dispatched", "task_completed", "task_failed", "task_timed_out"):
                    continue
                key = attempt_key(run_id, int(e["generation"]), str(e["step"]), int(e["attempt"] or 0))
                where = (int(e["generation"]), str(e["step"]))
                if e["type"] == "task_dispatched":
                    before = opened.get(where)
                    if before is not None and before[0] not in outcome:
                        self.counts.duplicated_other_key += 1
                        self.bad(
                            "duplicate_attempt",
                            key,
                            f"dispatched while attempt {before[0]} had no outcome",
                            self.story([run_id], keys=[key, before[0]]),
                        )
                    opened[where] = (key, int(e["seq"]))
                    dispatched[key] = (run_id, e)
                else:
                    outcome.setdefault(key, int(e["seq"]))
        for what, seen in (("delivery", self.seen.deliveries), ("claim", self.seen.claims)):
            counts = Counter(d["key"] for d in seen)
            self.counts.duplicated_same_key += sum(n - 1 for n in counts.values())
            for d in seen:
                body_key = attempt_key(d["runId"], int(d["generation"]), d["step"], int(d["attempt"]))
                if d["key"] != body_key:
                    self.counts.duplicated_other_key += 1
                    self.bad(
                        "wrong_key",
                        d["key"],
                        f"a {what} of attempt {body_key} carried key {d['key']}",
                        self.story([d["runId"]], keys=[d["key"]]),
                    )
                elif d["key"] not in dispatched and d["runId"] in self.seen.events:
                    self.bad(
                        "phantom_attempt",
                        d["key"],
                        f"a {what} of an attempt the history never dispatched",
                        self.story([d["runId"]], keys=[d["key"]]),
                    )

    # ------------------------------------------------------------------ runs

    def runs(self) -> None:
        for run_id, events in self.seen.events.items():
            for problem in history_problems(run_id, events):
                if "terminal events at" not in problem:  # judged below, redrives allowed
                    self.bad("history", run_id, problem, self.story([run_id]))
            for i, e in enumerate(events):
                after = events[i + 1]["type"] if i + 1 < len(events) else None
                if e["type"] in TERMINAL and after not in (None, "run_redriven", "run_rewound"):
                    self.bad(
                        "history",
                        run_id,
                        f"seq {e['seq']}: {e['type']} followed by {after}",
                        self.story([run_id]),
                    )
            doc = self.seen.runs.get(run_id)
            if doc is None:
                continue
            expected = explained_status(events)
            if expected is not None and expected != doc["status"]:
                self.bad(
                    "status",
                    run_id,
                    f"stored status {doc['status']!r}, its history ends {expected!r}",
                    self.story([run_id]),
                )
            generations = 1 + sum(1 for e in events if e["type"] in ("run_redriven", "run_rewound"))
            if doc.get("generation") != generations:
                self.bad(
                    "status",
                    run_id,
                    f"generation {doc.get('generation')}, history has {generations}",
                    self.story([run_id]),
                )

    def liveness(self) -> None:
        """Once every fault is healed and the settle time has passed, no run may still be
        running or sleeping, nor wait for a signal it was sent (acknowledged)."""
        acked: dict[str, set[str]] = defaultdict(set)  # runId -> names of acknowledged signals
        for op in self.history:
            if op["f"] == "signal" and op["type"] == "ok":
                acked[op["value"]["runId"]].add(op["value"]["name"])
        for run_id, doc in self.seen.runs.items():
            status = doc["status"]
            if status in ("running", "sleeping", "stuck") or (
                status == "waiting" and doc.get("waitSignal") in acked.get(run_id, set())
            ):
                self.bad(
                    "stalled",
                    run_id,
                    f"still {status} at {doc.get('currentStep')!r} after healing",
                    self.story([run_id]),
                )

    # ------------------------------------------------------------------ operators

    def interventions(self) -> None:
        for op in self.history:
            if op["type"] != "ok" or op["f"] not in ("cancel", "redrive", "complete"):
                continue
            run_id = op["value"]["runId"]
            events = self.seen.events.get(run_id, [])
            doc = self.seen.runs.get(run_id)
            if op["f"] == "cancel":
                if (
                    doc is None
                    or doc["status"] != "cancelled"
                    or not any(e["type"] == "run_cancelled" for e in events)
                ):
                    self.counts.lost += 1
                    status = None if doc is None else doc["status"]
                    self.bad(
                        "lost_cancel",
                        run_id,
                        f"cancel acknowledged, run is {status}",
                        self.story([run_id], [op]),
                    )
            elif op["f"] == "redrive":
                generation = op["result"].get("generation")
                if not any(e["type"] == "run_redriven" and e.get("generation") == generation for e in events):
                    self.counts.lost += 1
                    self.bad(
                        "lost_redrive",
                        run_id,
                        f"redrive to generation {generation} acknowledged, not in history",
                        self.story([run_id], [op]),
                    )
            else:
                key = op["value"]["key"]
                if not any(
                    e["type"] == "task_completed"
                    and attempt_key(run_id, int(e["generation"]), str(e["step"]), int(e["attempt"] or 0))
                    == key
                    for e in events
                ):
                    self.counts.lost += 1
                    self.bad(
                        "lost_complete",
                        key,
                        "complete acknowledged, no task_completed for it",
                        self.story([run_id], [op]),
                    )

    # ------------------------------------------------------------------ cluster

    def fencing(self) -> None:
        seen = self.seen
        if seen.writes is None or seen.leases is None or seen.partition_of is None:
            return
        for problem in fencing_problems(seen.writes, seen.leases, seen.partition_of, seen.node_of):
            run_id = problem.split(" ", 1)[0]
            self.bad("fencing", run_id, problem, self.story([run_id]))
        for d in seen.deliveries:
            node = d.get("node")
            if not node:
                continue
            # Judged at the moment the node sent it (its deadline less the step's timeout), not
            # when the handler read it: a push sent under the lease may arrive after its end.
            sent_us = int(d.get("sentAt", d["at"]) * 1e6)
            partition = seen.partition_of(d["runId"])
            lease = seen.leases.at(partition, sent_us)
            if lease is None or lease.node_id != node or lease.expires_at * 1000 <= sent_us:
                holder = None if lease is None else (lease.node_id, lease.epoch, lease.expires_at)
                near = [
                    (c.node_id, c.epoch, c.expires_at, c.at_us)
                    for c in seen.leases.changes.get(partition, [])
                    if abs(c.at_us - sent_us) < 15_000_000
                ]
                self.bad(
                    "push_unleased",
                    d["key"],
                    f"pushed by {node} at {sent_us} (arrived {int(d['at'] * 1e6)}; its clock"
                    f" {d.get('clockLag', 0.0) * 1000:.0f} ms behind the wall clock) while the lease of "
                    f"partition {partition} was {holder}; its changes within 15 s (node, epoch, "
                    f"expires ms, at us): {near}",
                    self.story([d["runId"]], keys=[d["key"]]),
                )


def explained_status(events: Sequence[Event]) -> str | None:
    """The status a run's history ends in, folding its events (None when the history holds an
    event this fold does not know, so it cannot say)."""
    status = None
    paused_from: str | None = None
    for e in events:
        kind, data = e["type"], e.get("data") or {}
        if kind in TERMINAL:
            status = TERMINAL[kind]
        elif kind in (
            "run_started",
            "run_redriven",
            "run_rewound",
            "sleep_finished",
            "signal_consumed",
            "wait_timed_out",
            "task_dispatched",
            "retry_scheduled",
            "task_completed",
            "task_failed",
            "task_timed_out",
            "step_completed",
            "task_accepted",
            "task_claimed",
        ):
            status = "running" if status != "paused" else status
        elif kind == "sleep_started":
            status = "sleeping" if status != "paused" else status
        elif kind == "step_started":
            if status != "paused":
                status = "waiting" if data.get("kind") == "wait" else "running"
        elif kind == "run_paused":
            paused_from, status = status, "paused"
        elif kind == "run_unpaused":
            status = paused_from
        elif kind in ("signal_received", "step_failed", "run_stuck"):
            if kind == "run_stuck":
                status = "stuck"
        else:
            return None
    return status


def check(history: Sequence[Op], seen: Observed, *, settled: bool = True) -> Report:
    """`settled`: every fault was healed and the workload had time to finish (stalled runs
    are then violations too)."""
    c = _Check(history, seen)
    if settled:
        c.liveness()
    c.starts()
    c.signals()
    c.tasks()
    c.runs()
    c.interventions()
    c.fencing()
    c.counts.violations = len(c.out)
    return Report(c.out, c.counts)
