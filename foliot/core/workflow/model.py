"""The run document and the records a transition produces. Plain frozen data, JSON-able."""

from __future__ import annotations

import operator
import sys
from typing import Any, Final

import attrs
import cattrs

from .flow import DEFAULT_PRIORITY, Bucket

OPEN_STATUSES: Final = frozenset({"queued", "running", "waiting", "sleeping", "stuck", "paused"})
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled", "timed_out"})
STATUSES: Final = OPEN_STATUSES | TERMINAL_STATUSES


@attrs.frozen
class ErrorInfo:
    """`{step, class, message}`: why a step or run failed.

    A run whose `onFailure` path (its compensation) reached `$fail` fails with the failure that
    was compensated, `compensated_by` naming the `onFailure` step; a step's `failError` makes the
    run's error its own class and message, the failure that led to `$fail` kept as `cause`."""

    step: str | None
    cls: str
    message: str
    compensated_by: str | None = None
    cause: ErrorInfo | None = None

    @property
    def compensated(self) -> ErrorInfo | None:
        """The failure a compensation ran for, when this error ended it (itself or its cause)."""
        if self.compensated_by is not None:
            return self
        if self.cause is not None and self.cause.compensated_by is not None:
            return self.cause
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "class": self.cls, "message": self.message}
        if self.compensated_by is not None:
            out["compensatedBy"] = self.compensated_by
        if self.cause is not None:
            out["cause"] = self.cause.to_json()
        return out


@attrs.frozen
class TaskRef:
    """The run's open task: one attempt at one task step."""

    token: str
    step: str
    attempt: int
    generation: int
    queue: str | None
    deadline: int | None  # None while a queued task waits for a poller
    accepted: bool = False  # the handler answered 202
    claimed_by: str | None = None

    def idempotency_key(self, run_id: str) -> str:
        return f"{run_id}:{self.generation}:{self.step}:{self.attempt}"


@attrs.frozen
class Timer:
    """The run's step timer. `key` names one arming: a firing applies only while the run still
    holds a timer with that key, so a stale or duplicated firing can never end a later arming.

    Step-timer keys end in `#<n>`, the run's arming counter (`Run.armings`); documents stored
    before the counter existed hold keys without it and still match their own firings."""

    kind: str  # sleep | wait_timeout | task_deadline | queue_timeout | retry
    due: int
    key: str


@attrs.frozen
class BufferedSignal:
    """A signal kept until the run reaches a wait for it (bounded per run, see `machine`)."""

    name: str
    payload: Any
    signal_id: str | None
    at: int | None = None  # when it arrived (None in documents stored before pause existed)


@attrs.frozen
class HeldOutcome:
    """A task answer recorded while the run was paused, applied when it is unpaused.

    `kind` is `completed` (the output is already in `state`; `next` is the step it named),
    `failed` (an attempt failure: retried or not by the step's policy at unpause) or
    `step_failed` (the step failed for good: bad output or `next`)."""

    kind: str
    at: int
    next: str | None = None
    error: ErrorInfo | None = None
    retryable: bool = False


@attrs.frozen
class ParentRef:
    """A child run's link to the step of its parent that started it (`index`: the item of a
    map or the branch of a parallel step, in the step's order; 0 for a run step)."""

    run_id: str
    step: str
    generation: int
    attempt: int
    index: int = 0
    on_close: str = "cancel"  # the step's onParentClose: cancel | abandon

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "step": self.step,
            "generation": self.generation,
            "attempt": self.attempt,
            "index": self.index,
        }


@attrs.frozen
class ChildSlot:
    index: int
    run_id: str


@attrs.frozen
class FanOut:
    """A run, map or parallel step waiting for its child runs (at most one per run).

    Children start in item order; `started` is how many have (the next item's index), `open`
    the ones not closed yet. Outputs are not kept here: a map's list is read from the children
    when the last one closes, so the parent's document stays small at any fan-out."""

    step: str
    kind: str  # run | map | parallel
    generation: int
    attempt: int
    total: int
    started: int
    open: tuple[ChildSlot, ...] = ()
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    def slot(self, run_id: str) -> ChildSlot | None:
        return next((slot for slot in self.open if slot.run_id == run_id), None)


@attrs.frozen
class ScheduleRef:
    """The schedule fire that started a run: the schedule's name and the scheduled time (and a
    trigger's `reason`, when it gave one)."""

    name: str
    scheduled_time: int
    reason: str | None = None


@attrs.frozen
class Run:
    run_id: str
    app: str
    workflow: str
    version: int
    status: str
    input: Any
    state: dict[str, Any]
    generation: int
    created_at: int
    updated_at: int
    trace_id: str
    business_key: str | None = None
    current_step: str | None = None
    attempt: int | None = None
    wait_signal: str | None = None
    wait_signals: tuple[str, ...] = ()  # a first-of-N wait's names (`wait_signal` is then None)
    wake_at: int | None = None
    deadline: int | None = None
    run_timeout_ms: int | None = None
    closed_at: int | None = None
    error: ErrorInfo | None = None
    task: TaskRef | None = None
    timer: Timer | None = None
    carried_error: ErrorInfo | None = None
    # Set when a step's failure took its `onFailure` path: that failure (`compensated_by` the
    # `onFailure` step), the run's error if the path reaches `$fail` (cleared by a rewind, on
    # entering the failed step again, and when the run completes)
    compensating: ErrorInfo | None = None
    buffer: tuple[BufferedSignal, ...] = ()
    armings: int = 0  # step timers armed so far; numbers the next one (Timer.key)
    step_since: int | None = None  # when the run entered `current_step` (None: stored before)
    paused_from: str | None = None  # while `paused`: the status it returns to at unpause
    held: HeldOutcome | None = None  # while `paused`: a task answer waiting for the unpause
    parent: ParentRef | None = None  # a child run: the parent step that started it
    depth: int = 0  # how many parents above this run
    # Runs this run may still create below it, its children and theirs (FOLIOT_MAX_TREE_RUNS at
    # a top-level start, a share of its parent's for a child); None: not bounded (stored before)
    tree: int | None = None
    fan: FanOut | None = None  # at a run, map or parallel step: its children
    output: Any = None  # once completed: the value at the workflow's `output` path, or `state`
    # A workflow with `concurrency`: "<workflow>/<key value>", the slot group the run takes (or
    # waits for, while `queued`)
    concurrency_key: str | None = None
    # A debounced start not begun yet: "<workflow>/<debounce key>" (cleared when it begins)
    debounce_key: str | None = None
    schedule: ScheduleRef | None = None  # started by a schedule's fire
    priority: int = 3  # 1 (highest)..5: its tasks' priority unless a step sets its own (issue 23)
    seq: int = 0  # the last event's sequence number; also the row's write version

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    @property
    def holds_slot(self) -> bool:
        """An open run of a workflow with `concurrency` that was admitted (not waiting)."""
        if self.concurrency_key is None or not self.is_open or self.status == "queued":
            return False
        if self.current_step is None:
            return False  # never admitted (stuck while queued, say)
        return not (self.status == "paused" and self.paused_from == "queued")

    @property
    def waits_for_slot(self) -> bool:
        return self.concurrency_key is not None and self.status == "queued"

    def timers(self) -> list[tuple[str, Timer]]:
        """The durable timers this run needs: its step timer and its run deadline."""
        out: list[tuple[str, Timer]] = []
        if not self.is_open:
            return out
        # A paused run's step timer stays in its document but not in the wheel: one that comes
        # due during the pause fires at unpause (see `machine._on_unpause`).
        if self.timer is not None and self.status != "paused":
            out.append(("step", self.timer))
        if self.deadline is not None:
            out.append(("run", Timer("run_timeout", self.deadline, str(self.generation))))
        return out


@attrs.frozen
class Event:
    seq: int
    at: int
    generation: int
    type: str
    step: str | None = None
    attempt: int | None = None
    data: dict[str, Any] = attrs.Factory(dict)


@attrs.frozen
class TaskRow:
    """A task's durable record: how a token is found, and why it closed."""

    token: str
    run_id: str
    app: str
    generation: int
    step: str
    attempt: int
    queue: str | None
    status: str  # open | closed
    close_reason: str | None  # answered | timed_out | cancelled | superseded
    deadline: int | None
    created_at: int
    # The attempt's flow control (issue 23), written when it opens and kept as it changes:
    # what recovery offers an unclaimed queued task again with.
    priority: int = DEFAULT_PRIORITY
    buckets: tuple[Bucket, ...] = ()


_codec = cattrs.Converter()


def _getter(cls: type) -> tuple[tuple[str, ...], Any]:
    names = tuple(field.name for field in attrs.fields(cls))
    return names, operator.attrgetter(*names)


_RUN_NAMES, _run_values = _getter(Run)
_FLAT = {
    cls: _getter(cls)
    for cls in (ErrorInfo, TaskRef, Timer, BufferedSignal, HeldOutcome, ParentRef, ChildSlot, ScheduleRef)
}
_NESTED_ONE: Final = ("task", "timer", "parent", "schedule")
_ERRORS: Final = ("error", "carried_error", "compensating")
_FAN_NAMES, _fan_values = _getter(FanOut)


def _flat(obj: Any) -> dict[str, Any]:
    names, values = _FLAT[type(obj)]
    return dict(zip(names, values(obj), strict=True))


def _flat_error(error: ErrorInfo) -> dict[str, Any]:
    flat = _flat(error)
    if error.cause is not None:
        flat["cause"] = _flat_error(error.cause)
    return flat


def replace_run(run: Run, changes: dict[str, Any]) -> Run:
    """`attrs.evolve(run, **changes)`, faster: the fields read in one C call (a signal's
    transitions copy the 26-field document several times)."""
    values = dict(zip(_RUN_NAMES, _run_values(run), strict=True))
    values.update(changes)
    return Run(**values)


def run_to_dict(run: Run) -> dict[str, Any]:
    """The run document's JSON form, as cattrs unstructures it (tested against it), written
    out by hand: it is serialised at every commit, and cattrs' generic walk cost ~3x."""
    out = dict(zip(_RUN_NAMES, _run_values(run), strict=True))
    for name in _NESTED_ONE:
        value = out[name]
        if value is not None:
            out[name] = _flat(value)
    for name in _ERRORS:
        value = out[name]
        if value is not None:
            out[name] = _flat_error(value)
    held = run.held
    if held is not None:
        flat = _flat(held)
        if held.error is not None:
            flat["error"] = _flat_error(held.error)
        out["held"] = flat
    out["wait_signals"] = list(run.wait_signals)
    out["buffer"] = [_flat(signal) for signal in run.buffer]
    fan = run.fan
    if fan is not None:
        flat_fan = dict(zip(_FAN_NAMES, _fan_values(fan), strict=True))
        flat_fan["open"] = [_flat(slot) for slot in fan.open]
        out["fan"] = flat_fan
    return out


# Names that many parked runs share; a document read from storage gets one copy of each
# (interned) instead of its own strings, so a rehydrated run is as small as a fresh one.
_SHARED_NAMES: Final = ("app", "workflow", "status", "current_step", "wait_signal")
_SHARED_NESTED: Final = (("timer", "kind"), ("task", "step"), ("task", "queue"))


def run_from_dict(data: dict[str, Any]) -> Run:
    """A run document from its JSON form (`data` is consumed: shared names are interned in it)."""
    for name in _SHARED_NAMES:
        value = data.get(name)
        if type(value) is str:
            data[name] = sys.intern(value)
    for outer, name in _SHARED_NESTED:
        inner = data.get(outer)
        if type(inner) is dict and type(inner.get(name)) is str:
            inner[name] = sys.intern(inner[name])
    # Unknown keys are ignored: documents written before migration 0002 still carry
    # `signal_ids`, which now live in the `signal_ids` table.
    return _codec.structure(data, Run)
