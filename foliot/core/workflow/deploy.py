"""Safe deploys: what a candidate version of a workflow would do to runs in flight and to runs
recorded (pure; the dry-run endpoint feeds it pages read from storage).

- `compare(run, old, candidate)`: where an open run stands in the candidate (`compat`).
- `OpenRuns`: open runs grouped by (version, step, status) with counts, up to 20 example
  runIds, the verdict of the group and what a migration would do to its runs (`migrate_plan`),
  plus the state keys they lack; fed groups the store counted (`add_group`), the fan-outs of
  groups at child steps (`add_fans`) and the states of the runs whose step has reads that
  matter (`add_state`), or a run at a time (`add`), so memory stays bounded whatever the number
  of runs.
- `replay(events, recorded_run, candidate)`: a closed run's recorded history fed through the
  candidate's machine, with the recorded inputs; `same`, or the first divergence.
- `state_keys_read(candidate)`: the `input.*`/`state.*` paths the candidate reads.

**What a replay can know.** Events record that a task completed (step, attempt, `next`) but not
its output; the output comes from the recorded run's final `state[step]`. A step that ran several
times (a loop, a rewind, a retry after a bad output) therefore replays every time with its last
output, so a choice that looked at an earlier output may be reported as diverging (or agreeing)
when it did not. Signal payloads come from `state` of the step that consumed them, state edits
from the final state, map and parallel results from `state[step]`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from . import machine
from .compat import (
    COMPATIBLE,
    FAN_OUT_CHANGED,
    MOVES,
    STRANDED,
    Difference,
    Fans,
    Verdict,
    kept_text,
    refused_text,
    step_verdict,
)
from .definition import CHILD_KINDS, SENTINELS, Definition, Step
from .model import ErrorInfo, Event, FanOut, ParentRef, Run
from .predicate import All, AnyOf, Compare, Not, Predicate, lookup

__all__ = [
    "COMPATIBLE",
    "MOVES",
    "STRANDED",
    "Difference",
    "Divergence",
    "Fans",
    "Lacking",
    "OpenRuns",
    "ReadPath",
    "Replayed",
    "Verdict",
    "compare",
    "migrate_plan",
    "missing_keys",
    "replay",
    "state_keys_read",
]

MAX_EXAMPLES: Final = 20


def compare(run: Run, old_definition: Definition | None, candidate: Definition) -> Verdict:
    """Where `run` (pinned to `old_definition`) stands in `candidate`."""
    return step_verdict(old_definition, candidate, run.current_step)


def migrate_plan(
    verdict: Verdict,
    step: str | None,
    status: str,
    count: int,
    kind: str | None,
    fans: Fans,
    to: str = "the candidate",
    queue: str | None = None,
) -> list[dict[str, Any]]:
    """What `POST …/migrate` (no `stepMap`) does to `count` open runs at `step` in `status`
    whose step (of kind `kind` in their version) compares to the target as `verdict`, `fans.runs`
    of them waiting for the step's children: the machine's `Migrate`, said of a group. Each
    entry: `{outcome, runs, code, message}`, outcome `stays` (same generation), `reenters`
    (the step restarts under generation + 1) or `refused` (with the refusal's code)."""
    plan: list[dict[str, Any]] = []

    def say(outcome: str, runs: int, message: str, code: str | None = None) -> None:
        plan.append({"outcome": outcome, "runs": runs, "code": code, "message": message})

    if fans.runs:
        kind_of = kind or "child"
        if verdict.verdict != STRANDED and verdict.keeps_fan:
            kept = kept_text(kind_of, fans, to, verdict.differences)
            say("stays", fans.runs, f"stays at {kind_of} step {step!r} with its children: {kept}")
        else:
            say("refused", fans.runs, refused_text(kind_of, step, fans, to, verdict), FAN_OUT_CHANGED)
    rest = count - fans.runs
    if rest <= 0:
        return plan
    if verdict.verdict == STRANDED:
        say(
            "refused",
            rest,
            f"{to} has no step {step!r}: refused without a stepMap entry (with one: re-enters the"
            " mapped step, generation + 1)",
            "stranded",
        )
    elif verdict.in_place and queue is not None:
        say("stays", rest, queue)
    elif verdict.in_place:
        say("stays", rest, "stays where it stands: same generation, its task or timer untouched")
    elif status == "paused":
        say("refused", rest, f"paused at {step!r}: unpause it to re-enter the changed step", "run_paused")
    else:
        say("reenters", rest, f"re-enters {step!r} with generation + 1: what is in flight there starts again")
    return plan


# --------------------------------------------------------------------------- state keys read


@attrs.frozen
class ReadPath:
    """A path the candidate reads: `step` (None: the workflow's `output`) and `field` say where."""

    path: tuple[str, ...]
    step: str | None
    field: str
    optional: bool = False  # an `exists` predicate: a missing key is what it asks about

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


def _predicate_paths(p: Predicate, out: list[tuple[tuple[str, ...], bool]]) -> None:
    if isinstance(p, Compare):
        out.append((p.path, p.op == "exists"))
    elif isinstance(p, All | AnyOf):
        for item in p.items:
            _predicate_paths(item, out)
    elif isinstance(p, Not):
        _predicate_paths(p.item, out)


def state_keys_read(candidate: Definition) -> tuple[ReadPath, ...]:
    """Every `input.*`/`state.*` path the candidate's inputPaths, itemsPaths, untilPaths, choice
    predicates and `output` read, in step order (duplicates kept: each names where it is read)."""
    reads: list[ReadPath] = []
    for step in candidate.steps:
        if step.kind == "run" and step.branches and step.branches[0].input_path is not None:
            reads.append(ReadPath(step.branches[0].input_path, step.name, "inputPath"))
        if step.kind == "parallel":
            for j, branch in enumerate(step.branches):
                if branch.input_path is not None:
                    reads.append(ReadPath(branch.input_path, step.name, f"branches[{j}].inputPath"))
        if step.items_path is not None:
            reads.append(ReadPath(step.items_path, step.name, "itemsPath"))
        if step.until_path is not None:
            reads.append(ReadPath(step.until_path, step.name, "untilPath"))
        for j, choice in enumerate(step.choices):
            found: list[tuple[tuple[str, ...], bool]] = []
            _predicate_paths(choice.when, found)
            for path, optional in found:
                reads.append(ReadPath(path, step.name, f"choices[{j}].when", optional))
    if candidate.output is not None:
        reads.append(ReadPath(candidate.output, None, "output"))
    return tuple(reads)


def successors(step: Step) -> tuple[str, ...]:
    """The steps a step may go on to (sentinels left out; a task's `foliot-next` is not known)."""
    names = [step.next, step.on_failure, step.on_timeout, step.default]
    names += [target for _, target in step.on_signal]
    names += [choice.next for choice in step.choices]
    return tuple(n for n in names if n is not None and n not in SENTINELS)


def reachable(candidate: Definition, start: str | None) -> frozenset[str]:
    """The steps of `candidate` a run at `start` may still enter (`start` included); every step
    when `start` is not one of the candidate's (a stranded run may be mapped anywhere)."""
    if start is None or start not in candidate.index:
        return frozenset(candidate.index)
    seen = {start}
    todo = [start]
    while todo:
        for nxt in successors(candidate.index[todo.pop()]):
            if nxt not in seen and nxt in candidate.index:
                seen.add(nxt)
                todo.append(nxt)
    return frozenset(seen)


def relevant_reads(
    reads: Sequence[ReadPath], candidate: Definition, step: str | None
) -> tuple[ReadPath, ...]:
    """Of `reads`, those a run at `step` will still make and whose key no step it may still
    enter writes first: `state.X...` read where step X is ahead of the run is not missing yet.
    Each (path, step, field) once: a predicate naming a path twice reads it once per run."""
    ahead = reachable(candidate, step)
    out = []
    seen: set[tuple[tuple[str, ...], str | None, str]] = set()
    for read in reads:
        if read.optional or (read.step is not None and read.step not in ahead):
            continue
        if read.path[0] == "state" and len(read.path) > 1 and read.path[1] in ahead:
            continue
        key = (read.path, read.step, read.field)
        if key not in seen:
            seen.add(key)
            out.append(read)
    return tuple(out)


def missing_keys(reads: Sequence[ReadPath], input: Any, state: Any) -> tuple[ReadPath, ...]:
    """The reads whose path the run's input and state lack."""
    scope = {"input": input, "state": state}
    return tuple(read for read in reads if not lookup(read.path, scope)[0])


# --------------------------------------------------------------------------- open runs


@attrs.define
class _Group:
    version: int
    step: str | None
    status: str
    verdict: Verdict
    kind: str | None  # the step's kind in the runs' version
    count: int = 0
    examples: list[str] = attrs.Factory(list)
    fans: Fans = attrs.Factory(Fans)


@attrs.define
class _Missing:
    read: ReadPath
    count: int = 0
    examples: list[str] = attrs.Factory(list)


@attrs.frozen
class Lacking:
    """The open runs of one group (at `step`) that lack `path`, as the store counts them:
    `count`, and the newest of them as (created_at, run_id), newest first, MAX_EXAMPLES at most."""

    step: str | None
    path: tuple[str, ...]
    count: int
    newest: tuple[tuple[int, str], ...] = ()


class OpenRuns:
    """Open runs aggregated a page at a time: O(groups + paths), never O(runs)."""

    def __init__(self, candidate: Definition) -> None:
        self.candidate = candidate
        self.reads = state_keys_read(candidate)
        self.total = 0
        self._groups: dict[tuple[int, str | None, str], _Group] = {}
        self._verdicts: dict[tuple[int, str | None], Verdict] = {}
        self._relevant: dict[str | None, tuple[ReadPath, ...]] = {}
        self._missing: dict[tuple[str, str | None, str], _Missing] = {}
        self._concurrency: dict[int, Any] = {}  # version -> its `concurrency`

    @property
    def reads_state(self) -> bool:
        """Whether `add` needs the runs' input and state (else pass None for them)."""
        return bool(self.reads)

    def verdict(self, version: int, step: str | None, old: Definition | None) -> Verdict:
        key = (version, step)
        found = self._verdicts.get(key)
        if found is None:
            found = self._verdicts[key] = step_verdict(old, self.candidate, step)
            if old is not None:
                self._concurrency[version] = old.concurrency
        return found

    def queue_change(self, version: int, step: str | None, status: str) -> str | None:
        """What a migrate does to runs of `version` queued before their first step when the
        candidate's `concurrency` differs from theirs (None: nothing of the kind)."""
        if status != "queued" or step is not None or version not in self._concurrency:
            return None
        old, new = self._concurrency[version], self.candidate.concurrency
        if old == new:
            return None
        if new is None:
            return "leaves its concurrency queue (the candidate has no `concurrency`) and begins"
        if old is not None and old.key == new.key:
            return f"stays queued; the candidate's concurrency limit is {new.limit} (was {old.limit})"
        return f"moves to the queue of the candidate's concurrency key (limit {new.limit}), after its runs"

    def relevant(self, step: str | None) -> tuple[ReadPath, ...]:
        """The candidate's reads that matter for a run at `step` (`relevant_reads`): a group
        whose step has none needs no run's input or state."""
        found = self._relevant.get(step)
        if found is None:
            found = self._relevant[step] = relevant_reads(self.reads, self.candidate, step)
        return found

    def add(
        self,
        run_id: str,
        version: int,
        step: str | None,
        status: str,
        old: Definition | None,
        input: Any = None,
        state: Any = None,
        fan: FanOut | None = None,
    ) -> None:
        """One run: `add_group` of one, `add_fans` of its fan-out, then `add_state`."""
        self.add_group(version, step, status, old, 1, (run_id,))
        if fan is not None:
            self.add_fans(version, step, status, Fans.of(fan))
        self.add_state(run_id, step, input, state)

    def add_group(
        self,
        version: int,
        step: str | None,
        status: str,
        old: Definition | None,
        count: int,
        examples: Iterable[str],
    ) -> None:
        """`count` runs of a group at once (counted by the store), `examples` their first
        runIds in the order runs are fed (newest first); the group's example list keeps its
        first MAX_EXAMPLES."""
        self.total += count
        key = (version, step, status)
        group = self._groups.get(key)
        if group is None:
            at = old.index.get(step) if old is not None and step is not None else None
            kind = at.kind if at is not None else None
            group = self._groups[key] = _Group(version, step, status, self.verdict(version, step, old), kind)
        group.count += count
        for run_id in examples:
            if len(group.examples) >= MAX_EXAMPLES:
                break
            group.examples.append(run_id)

    def waits_for_children(self, version: int, step: str | None, status: str) -> bool:
        """Whether runs of this group (added) may wait for children: their step is a run, map
        or parallel step of their version (then `add_fans` says what their fan-outs hold)."""
        group = self._groups.get((version, step, status))
        return group is not None and group.kind in CHILD_KINDS

    def add_fans(self, version: int, step: str | None, status: str, fans: Fans) -> None:
        """The fan-outs of a group's runs waiting for children, summed (after `add_group`)."""
        group = self._groups[(version, step, status)]
        group.fans = group.fans.plus(fans)

    def add_state(self, run_id: str, step: str | None, input: Any, state: Any) -> None:
        """The missing-state-keys check of one run at `step` (None `state`: not read, skipped).
        Fed in the same order as the groups' runs, the report is the one `add` would give."""
        if not self.reads or state is None:
            return
        for read in missing_keys(self.relevant(step), input, state):
            mkey = (read.dotted, read.step, read.field)
            entry = self._missing.get(mkey)
            if entry is None:
                entry = self._missing[mkey] = _Missing(read)
            entry.count += 1
            if len(entry.examples) < MAX_EXAMPLES:
                entry.examples.append(run_id)

    def paths(self, step: str | None) -> tuple[tuple[str, ...], ...]:
        """The distinct paths of the reads that matter at `step` (`relevant`), in read order:
        what the store checks the runs of a group at `step` for (`add_lacking`)."""
        return tuple(dict.fromkeys(read.path for read in self.relevant(step)))

    def add_lacking(self, lacking: Iterable[Lacking]) -> None:
        """The missing-state-keys check of one version's open runs, counted by the store: for
        each group whose step has reads that matter and each of its `paths`, how many runs lack
        the path and the newest of them (in any order). Fed the versions newest first, the
        report is the one `add_state` of every run gives (fed newest first across each
        version's groups): the same counts and examples, entries made in the order their
        first run would make them (which orders entries of equal size and path)."""
        found: dict[tuple[str, str | None, str], list[tuple[Lacking, int]]] = {}
        reads: dict[tuple[str, str | None, str], ReadPath] = {}
        for item in lacking:
            if item.count <= 0:
                continue
            for rank, read in enumerate(self.relevant(item.step)):
                if read.path == item.path:
                    mkey = (read.dotted, read.step, read.field)
                    found.setdefault(mkey, []).append((item, rank))
                    reads[mkey] = read
        # a new entry is made by its newest run, and one run lacking several reads makes
        # them in read order
        firsts = []
        for mkey, items in found.items():
            if mkey not in self._missing:
                item, rank = max(items, key=lambda pair: pair[0].newest[:1])
                firsts.append((item.newest[:1], -rank, mkey))
        for *_, mkey in sorted(firsts, reverse=True):
            self._missing[mkey] = _Missing(reads[mkey])
        for mkey, items in found.items():
            entry = self._missing[mkey]
            entry.count += sum(item.count for item, _ in items)
            room = MAX_EXAMPLES - len(entry.examples)
            if room > 0:
                merged = heapq.merge(*(item.newest for item, _ in items), reverse=True)
                entry.examples.extend(run_id for _, run_id in itertools.islice(merged, room))

    def groups(self) -> list[dict[str, Any]]:
        """Largest groups first; stranded before moves before compatible at equal size."""
        rank = {STRANDED: 0, MOVES: 1, COMPATIBLE: 2}
        ordered = sorted(
            self._groups.values(),
            key=lambda g: (-g.count, rank[g.verdict.verdict], g.version, g.step or "", g.status),
        )
        return [
            {
                "version": g.version,
                "step": g.step,
                "status": g.status,
                "count": g.count,
                "verdict": g.verdict.verdict,
                "differences": [d.to_json() for d in g.verdict.differences],
                "migrate": migrate_plan(
                    g.verdict,
                    g.step,
                    g.status,
                    g.count,
                    g.kind,
                    g.fans,
                    queue=self.queue_change(g.version, g.step, g.status),
                ),
                "exampleRunIds": g.examples,
            }
            for g in ordered
        ]

    def missing(self) -> list[dict[str, Any]]:
        ordered = sorted(self._missing.values(), key=lambda m: (-m.count, m.read.dotted))
        return [
            {
                "path": m.read.dotted,
                "readBy": m.read.step,
                "field": m.read.field,
                "runs": m.count,
                "exampleRunIds": m.examples,
            }
            for m in ordered
        ]


# --------------------------------------------------------------------------- replay

# Recorded events the machine emits only in answer to an input; the replay turns each into that
# input. Every other event is one the candidate must emit itself, in the same order.
_TIMER_EVENTS: Final = {
    "sleep_finished": ("sleep",),
    "wait_timed_out": ("wait_timeout",),
    "child_timed_out": ("child_timeout",),
    "task_timed_out": ("task_deadline", "queue_timeout"),
}
_IGNORED: Final = frozenset({"run_migrated"})  # an operator's move between versions: not replayed


@attrs.frozen
class Divergence:
    seq: int | None  # the recorded event where the candidate parts ways (None: past its end)
    reason: (
        str  # step_missing | choice | next | kind | signal | retry | timer | children | task | end | event
    )
    message: str
    recorded: dict[str, Any] | None = None  # {type, step}
    candidate: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "reason": self.reason,
            "message": self.message,
            "recorded": self.recorded,
            "candidate": self.candidate,
        }


@attrs.frozen
class Replayed:
    run_id: str
    divergence: Divergence | None
    compared: int  # recorded events the candidate matched
    truncated: bool = False  # the history was cut at the replay's event limit

    @property
    def same(self) -> bool:
        return self.divergence is None


def _brief(event: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"type": event.type, "step": event.step}
    if event.type == "choice_evaluated":
        out["next"] = event.data.get("next")
    return out


class _Diverged(Exception):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(divergence.message)
        self.divergence = divergence


class _Player:
    def __init__(self, events: Sequence[Event], recorded: Run, candidate: Definition) -> None:
        self.rec = [e for e in events if e.type not in _IGNORED]
        self.recorded = recorded
        self.candidate = candidate
        self.i = 0
        self.tokens = (f"replay-{n}" for n in itertools.count(1))
        # A child that could not start has no id: the candidate draws a fresh one in its place.
        children = [e for e in self.rec if e.type in ("child_started", "child_not_started")]
        self.child_ids = iter([str(e.data["runId"]) if "runId" in e.data else None for e in children])
        self.not_started: list[tuple[str, ErrorInfo]] = []
        self.fresh = (f"replay-child-{n}" for n in itertools.count(1))
        self.run: Run | None = None

    def ctx(self, now: int) -> machine.Context:
        return machine.Context(
            now=now,
            new_token=lambda: next(self.tokens),
            payload_max=1 << 62,  # recorded outputs were accepted once: never refuse them here
            signal_buffer_max=1 << 30,
            signal_buffer_max_bytes=1 << 62,
            new_run_id=lambda: next(self.child_ids, None) or next(self.fresh),  # None: not started
        )

    def diverge(self, reason: str, message: str, candidate: Event | None = None) -> _Diverged:
        r = self.rec[self.i] if self.i < len(self.rec) else None
        return _Diverged(
            Divergence(
                r.seq if r is not None else None,
                reason,
                message,
                _brief(r) if r is not None else None,
                _brief(candidate) if candidate is not None else None,
            )
        )

    def missing_step(self, step: str | None) -> bool:
        return step is not None and step not in SENTINELS and step not in self.candidate.index

    def play(self) -> None:
        first = self.rec[0]
        rec = self.recorded
        tr = machine.start(
            run_id=rec.run_id,
            app=rec.app,
            definition=self.candidate,
            version=rec.version,
            input=rec.input,
            business_key=rec.business_key,
            run_timeout_ms=rec.run_timeout_ms,
            trace_id=rec.trace_id,
            ctx=self.ctx(first.at),
            parent=rec.parent,
            depth=rec.depth,
        )
        self.apply(tr, first.at)
        budget = 4 * len(self.rec) + 16
        while self.i < len(self.rec) and budget > 0:
            budget -= 1
            r = self.rec[self.i]
            before = self.i
            msg = self.message_for(r)
            assert self.run is not None
            tr = machine.transition(self.run, self.candidate, msg, self.ctx(r.at))
            if isinstance(tr.reply, machine.Rejected) or not tr.changed:
                why = tr.reply.message if isinstance(tr.reply, machine.Rejected) else "it changes nothing"
                raise self.diverge(
                    _REASON_OF_INPUT.get(r.type, "event"),
                    f"the recorded {r.type} at {r.step!r} does not apply to the candidate"
                    f" ({self._where()}): {why}",
                )
            self.apply(tr, r.at)
            if self.i == before:
                raise self.diverge(
                    "event", f"the candidate does not answer the recorded {r.type} at {r.step!r}"
                )

    def _where(self) -> str:
        run = self.run
        assert run is not None
        return f"the run is {run.status} at {run.current_step!r}"

    def apply(self, tr: machine.Transition, now: int) -> None:
        self.run = tr.run
        self.check(tr.events)
        while self.not_started:
            # The recorded run could not start this child: so it goes in the candidate too.
            child, error = self.not_started.pop(0)
            fan = self.run.fan
            slot = fan.slot(child) if fan is not None else None
            if fan is None or slot is None:
                continue
            ref = ParentRef(self.run.run_id, fan.step, fan.generation, fan.attempt, slot.index)
            message = machine.ChildNotStarted(child, ref, error)
            self.apply(machine.transition(self.run, self.candidate, message, self.ctx(now)), now)
        if tr.gather is not None:
            self.apply(
                machine.transition(tr.run, self.candidate, self.gathered(tr.gather), self.ctx(now)), now
            )

    def gathered(self, gather: machine.Gather) -> machine.Gathered:
        value = self.recorded.state.get(gather.step)
        step = self.candidate.index[gather.step]
        if step.kind == "parallel":
            source = value if isinstance(value, dict) else {}
            outputs = tuple(source.get(b.name) for b in step.branches)
        else:
            items = list(value) if isinstance(value, list) else []
            outputs = tuple(items[: gather.total]) + (None,) * max(0, gather.total - len(items))
        return machine.Gathered(gather.step, gather.generation, gather.attempt, outputs)

    def check(self, emitted: Iterable[Event]) -> None:
        for e in emitted:
            if self.i >= len(self.rec):
                raise self.diverge(
                    "end",
                    f"the recorded run ends here; the candidate goes on with {e.type} at {e.step!r}",
                    e,
                )
            r = self.rec[self.i]
            if r.type == "child_not_started" and e.type == "child_started" and r.step == e.step:
                if "class" in r.data:  # this one could not start; else a sibling dropped with it
                    error = ErrorInfo(r.step, str(r.data["class"]), str(r.data.get("message", "")))
                    self.not_started.append((str(e.data.get("runId")), error))
            elif not _same(r, e):
                raise self.diverge(*self.classify(r, e), e)
            self.i += 1

    def classify(self, r: Event, e: Event) -> tuple[str, str]:
        if r.type == "children_paced" or (
            e.type == "child_started" and any(x.type == "children_paced" for x in self.rec)
        ):
            return (
                "paced",
                f"the recorded run's children of {r.step!r} were paced by its app's lane"
                " (FOLIOT_APP_CHILD_RATE); a replay starts them at once and cannot follow it",
            )
        if self.missing_step(r.step):
            return "step_missing", f"step {r.step!r} is no step of the candidate (renamed or removed)"
        if r.type == e.type == "choice_evaluated":
            return (
                "choice",
                f"choice {r.step!r} branches to {e.data.get('next')!r} on the recorded state"
                f" (recorded: {r.data.get('next')!r})",
            )
        if r.type == "retry_scheduled" and e.type in ("step_failed", "run_failed"):
            return (
                "retry",
                f"the candidate's retry policy of {r.step!r} gives up at attempt {r.attempt}"
                " (recorded: retried)",
            )
        if e.type == "retry_scheduled" and r.type in ("step_failed", "run_failed"):
            return (
                "retry",
                f"the candidate retries {e.step!r} after attempt {e.attempt}, where the recorded run gave up",
            )
        if r.type == e.type == "signal_received":
            if e.data.get("buffered"):
                return (
                    "signal",
                    f"signal {r.data.get('name')!r} arrives while the candidate does not wait for it",
                )
            return (
                "signal",
                f"the candidate waits for signal {r.data.get('name')!r} at {e.step!r};"
                " the recorded run did not",
            )
        if r.type == e.type == "step_started" and r.step == e.step:
            return (
                "kind",
                f"step {r.step!r} is a {e.data.get('kind')} step in the candidate"
                f" (recorded: {r.data.get('kind')})",
            )
        if r.type == e.type == "step_started":
            return "next", f"the candidate goes on to {e.step!r} (recorded: {r.step!r})"
        if e.type == "step_started":
            return (
                "next",
                f"the candidate goes on to {e.step!r} where the recorded run had {r.type} at {r.step!r}",
            )
        return "event", f"the candidate emits {e.type} at {e.step!r} (recorded: {r.type} at {r.step!r})"

    def message_for(self, r: Event) -> machine.Message:
        run = self.run
        assert run is not None
        data = r.data
        if self.missing_step(r.step):
            raise self.diverge(
                "step_missing", f"step {r.step!r} is no step of the candidate (renamed or removed)"
            )
        state = self.recorded.state
        if r.type in ("task_completed", "task_failed", "task_accepted", "task_claimed"):
            task = run.task
            if task is None or task.step != r.step:
                raise self.diverge(
                    "task",
                    f"the recorded run answered a task of {r.step!r}; {self._where()} with no such task",
                )
            if r.type == "task_claimed":
                return machine.Claim(task.token, data.get("workerId"))
            outcome: machine.Outcome
            if r.type == "task_completed":
                outcome = machine.Completed(state.get(r.step) if r.step else None, data.get("next"))
            elif r.type == "task_failed":
                outcome = machine.Failed(
                    str(data.get("class")), str(data.get("message", "")), bool(data.get("retryable", False))
                )
            else:
                outcome = machine.Accepted(data.get("deadline"))
            return machine.TaskAnswer(task.token, outcome)
        if r.type in _TIMER_EVENTS:
            timer = run.timer
            kinds = _TIMER_EVENTS[r.type]
            if timer is None or timer.kind not in kinds:
                held = timer.kind if timer is not None else "none"
                raise self.diverge(
                    "timer",
                    f"the recorded {r.type} at {r.step!r} has no {kinds[0]} timer in the candidate"
                    f" ({self._where()}, timer: {held})",
                )
            return machine.TimerFired("step", timer.kind, timer.key)
        if r.type == "run_timed_out":
            return machine.TimerFired("run", "run_timeout", str(run.generation))
        if r.type == "signal_received":
            name = str(data.get("name"))
            return machine.SignalIn(name, self.signal_payload(r), data.get("signalId"))
        if r.type in ("child_completed", "child_failed"):
            return self.child_closed(r)
        reason = data.get("reason")
        if r.type == "run_cancelled":
            return machine.Cancel(reason)
        if r.type == "run_paused":
            return machine.Pause(reason)
        if r.type == "run_unpaused":
            return machine.Unpause(reason)
        if r.type == "run_redriven":
            return machine.Redrive(reason)
        if r.type == "run_rewound" and r.step is not None:
            return machine.Rewind(r.step, reason=reason)
        if r.type == "step_skipped":
            return machine.Skip(state.get(r.step) if r.step else None, reason)
        if r.type == "state_edited":
            keys = [str(k) for k in data.get("set", [])]
            values = {k: state.get(k) for k in keys}
            return machine.EditState(values, tuple(str(k) for k in data.get("unset", [])), str(reason or ""))
        if r.type == "run_stuck":
            return machine.MarkStuck(str(data.get("class")), str(data.get("message", "")))
        timer = run.timer
        if timer is not None and timer.kind == "retry":
            return machine.TimerFired("step", timer.kind, timer.key)
        if r.type in ("task_dispatched", "child_started", "step_started") and r.attempt not in (None, 1):
            raise self.diverge(
                "retry",
                f"the recorded run retried {r.step!r} (attempt {r.attempt});"
                f" the candidate does not ({self._where()})",
            )
        raise self.diverge(
            "event",
            f"the recorded run went on with {r.type} at {r.step!r}; the candidate stops ({self._where()})",
        )

    def signal_payload(self, r: Event) -> Any:
        """The payload of a recorded signal: from `state` of the step that consumed it."""
        name, sid = r.data.get("name"), r.data.get("signalId")
        for later in self.rec[self.i :]:
            if later.type != "signal_consumed" or later.data.get("name") != name:
                continue
            if sid is not None and later.data.get("signalId") != sid:
                continue
            value = self.recorded.state.get(later.step) if later.step else None
            if isinstance(value, dict) and set(value) == {"signal", "payload"} and value["signal"] == name:
                return value["payload"]  # a first-of-N wait keeps {signal, payload}
            return value
        return None

    def child_closed(self, r: Event) -> machine.ChildRunClosed:
        run = self.run
        assert run is not None
        fan = run.fan
        child = str(r.data.get("runId"))
        slot = fan.slot(child) if fan is not None else None
        if fan is None or slot is None:
            raise self.diverge(
                "children",
                f"the recorded child run {child} of {r.step!r} is not one the candidate waits for"
                f" ({self._where()})",
            )
        ref = ParentRef(run.run_id, fan.step, fan.generation, fan.attempt, slot.index)
        if r.type == "child_completed":
            output = self.recorded.state.get(fan.step) if fan.kind == "run" else None
            return machine.ChildRunClosed(child, ref, "completed", output)
        status = str(r.data.get("status", "failed"))
        error = ErrorInfo(None, str(r.data.get("error", status)), "")
        return machine.ChildRunClosed(child, ref, status, None, error)

    def finish(self) -> None:
        """The recorded history is over: a closed recorded run the candidate keeps open diverges."""
        run = self.run
        assert run is not None
        if not run.is_open or self.recorded.is_open:
            return
        if run.status == "waiting" and run.fan is None:
            names = run.wait_signal or ", ".join(run.wait_signals)
            raise self.diverge(
                "signal",
                f"the candidate waits at {run.current_step!r} for signal {names!r}, which the run never got",
            )
        if run.status == "waiting":
            raise self.diverge(
                "children", f"the candidate waits for child runs at {run.current_step!r} the run never had"
            )
        if run.status == "sleeping":
            raise self.diverge(
                "timer", f"the candidate sleeps at {run.current_step!r}, a sleep the run never had"
            )
        raise self.diverge(
            "end",
            f"the recorded run is {self.recorded.status};"
            f" the candidate is {run.status} at {run.current_step!r}",
        )


_REASON_OF_INPUT: Final = {
    "task_completed": "task",
    "task_failed": "task",
    "task_accepted": "task",
    "task_claimed": "task",
    "sleep_finished": "timer",
    "wait_timed_out": "timer",
    "task_timed_out": "timer",
    "child_timed_out": "timer",
    "signal_received": "signal",
    "child_completed": "children",
    "child_failed": "children",
}


def _same(r: Event, e: Event) -> bool:
    if r.type != e.type or r.step != e.step:
        return False
    if (
        r.type in ("task_dispatched", "task_completed", "task_failed", "retry_scheduled")
        and r.attempt != e.attempt
    ):
        return False
    if r.type == "choice_evaluated":
        return bool(r.data.get("next") == e.data.get("next"))
    if r.type == "step_started":
        return bool(r.data.get("kind") == e.data.get("kind"))
    if r.type == "signal_received":
        return bool(r.data.get("buffered") == e.data.get("buffered"))
    return True


def replay(
    events: Sequence[Event], recorded_run: Run, candidate: Definition, *, truncated: bool = False
) -> Replayed:
    """Feed `recorded_run`'s history through `candidate`'s machine with the recorded inputs;
    the first event where it parts ways, or None (`same`). `truncated`: `events` is a prefix of
    the history (an event limit), so a candidate that goes on past it is not a divergence."""
    ordered = sorted(events, key=lambda e: e.seq)
    player = _Player(ordered, recorded_run, candidate)
    if not player.rec or player.rec[0].type != "run_started":
        divergence = Divergence(None, "event", "the recorded history does not start with run_started")
        return Replayed(recorded_run.run_id, divergence, 0, truncated)
    try:
        player.play()
        if player.i < len(player.rec):
            raise player.diverge("event", "the replay did not settle (a loop of inputs)")
        if not truncated:
            player.finish()
    except _Diverged as stop:
        if truncated and stop.divergence.reason == "end":
            return Replayed(recorded_run.run_id, None, player.i, truncated)
        return Replayed(recorded_run.run_id, stop.divergence, player.i, truncated)
    return Replayed(recorded_run.run_id, None, player.i, truncated)
