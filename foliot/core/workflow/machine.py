"""The step machine: `transition(run, definition, message, ctx) -> Transition`.

Everything the SPEC says about what a run does next lives here, as a pure function of the run
document, the workflow definition, one input message and the current time. It reads no clock,
does no I/O and never raises for a message it cannot apply: a refused intervention comes back
as a `Rejected` reply with the run unchanged.

Actors call it, commit `Transition.run` + `events` + `tasks` in one unit of work, and only then
perform `effects` and send the reply (durable before effect).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import attrs

from .compat import FAN_OUT_CHANGED, STRANDED, Fans, Verdict, refused_text, step_verdict
from .definition import CHILD_KINDS, END, FAIL, MAX_DEPTH, MAX_ITEMS, STUCK, Definition, Step
from .duration import DurationError, parse_timestamp
from .flow import Bucket, step_bucket
from .model import (
    TERMINAL_STATUSES,
    BufferedSignal,
    ChildSlot,
    ErrorInfo,
    Event,
    FanOut,
    HeldOutcome,
    ParentRef,
    Run,
    TaskRef,
    TaskRow,
    Timer,
    replace_run,
)
from .payload import DepthError, PayloadError, loads, payload_size
from .predicate import evaluate, lookup

MAX_IMMEDIATE_STEPS: Final = 1000  # choices looping on themselves park the run as stuck


# --------------------------------------------------------------------------- inputs


@attrs.frozen
class Completed:
    """A task answered with output (`next` from a `foliot-next` header or `complete`)."""

    output: Any
    next: str | None = None


@attrs.frozen
class Failed:
    cls: str
    message: str
    retryable: bool


@attrs.frozen
class Accepted:
    """The handler answered 202: the task stays open until its deadline.

    `deadline` is the one the push carried (send time + the step's timeout); the machine arms
    the durable deadline timer from it, since a push attempt has none until it is sent."""

    deadline: int | None = None


Outcome = Completed | Failed | Accepted


@attrs.frozen
class TaskAnswer:
    token: str
    outcome: Outcome
    via_api: bool = False  # through `complete`: bad output also answers 400


@attrs.frozen
class TimerFired:
    slot: str  # step | run
    kind: str
    key: str


@attrs.frozen
class SignalIn:
    name: str
    payload: Any = None
    signal_id: str | None = None


@attrs.frozen
class Claim:
    token: str
    worker_id: str | None = None


@attrs.frozen
class Heartbeat:
    token: str


@attrs.frozen
class Cancel:
    reason: str | None = None


@attrs.frozen
class Redrive:
    reason: str | None = None


@attrs.frozen
class Rewind:
    to_step: str
    target: Definition | None = None  # the definition of `version`, when moving versions
    version: int | None = None
    reason: str | None = None


@attrs.frozen
class Skip:
    output: Any = None
    reason: str | None = None


@attrs.frozen
class EditState:
    set: dict[str, Any] = attrs.Factory(dict)
    unset: tuple[str, ...] = ()
    reason: str = ""


@attrs.frozen
class Pause:
    reason: str | None = None


@attrs.frozen
class Unpause:
    reason: str | None = None


@attrs.frozen
class MarkStuck:
    """The supervisor gave up on an actor that kept crashing."""

    cls: str
    message: str


@attrs.frozen
class Debounce:
    """Another start of a pending debounced run's burst: its input replaces the run's, and it
    begins at `due` instead (`period` after this start)."""

    input: Any
    due: int


@attrs.frozen
class Admit:
    """A queued run may take a concurrency slot now: it starts its first step. The store's
    guard decides (`UnitOfWork.slot`): a refused admission is not committed and the run stays
    queued."""


@attrs.frozen
class ChildRunClosed:
    """A child run closed (`status` is terminal), or could not be started at all (`status`
    `failed` with the reason in `error`). Sent by the child after its commit; also re-sent
    from storage when the parent is recovered, so duplicates and stale ones are ignored."""

    run_id: str
    parent: ParentRef
    status: str
    output: Any = None
    error: ErrorInfo | None = None
    unused: int = 0  # the part of its tree budget the child did not spend: back to its parent


@attrs.frozen
class TreeTooLarge:
    """The child runs a transition asked for would, with their own children, create more runs in
    one unit of work than the node allows (`FOLIOT_MAX_TREE_RUNS`): the step that asked fails
    with `too_many_runs` (not retried: the same input asks for the same tree) and none of them
    is created. Also when they would put the app over its open-runs limit (`code`
    `quota_exceeded`, issue 37)."""

    step: str
    generation: int
    attempt: int
    message: str
    code: str = "too_many_runs"


@attrs.frozen
class ChildNotStarted:
    """A child this run asked for in the same commit could not be started (its workflow or
    version does not exist): it counts as a failed child that never had a run. Applied by
    `child_not_started` before the commit, never sent between actors; `run_id` is the id the
    request reserved, never stored and never shown."""

    run_id: str
    parent: ParentRef
    error: ErrorInfo


@attrs.frozen
class Gathered:
    """The outputs of a map's or parallel step's children, read from storage once the last of
    them closed (`Transition.gather`), in item order; None for a child that did not complete."""

    step: str
    generation: int
    attempt: int
    outputs: tuple[Any, ...]
    # Not 0: the outputs read so far already passed the payload limit (this many bytes), and the
    # rest were not read; `outputs` is empty.
    too_large: int = 0


@attrs.frozen
class Migrate:
    """Move an open run to `version` of its workflow (`POST …/workflows/{name}/migrate`).

    A run whose step is compatible (see `compat.step_verdict`) stays where it stands; one whose
    step changed what is in flight, or that `step_map` sends elsewhere, re-enters its (mapped)
    step under a new generation, as a rewind does. A stranded step with no entry is refused.
    A run waiting for its step's children keeps them, or is refused (`_migrate_fan`)."""

    target: Definition
    version: int
    step_map: tuple[tuple[str, str], ...] = ()
    reason: str | None = None


Message = (
    TaskAnswer
    | TimerFired
    | SignalIn
    | Claim
    | Heartbeat
    | Cancel
    | Redrive
    | Rewind
    | Skip
    | EditState
    | Pause
    | Unpause
    | MarkStuck
    | ChildRunClosed
    | TreeTooLarge
    | ChildNotStarted
    | Gathered
    | Admit
    | Debounce
    | Migrate
)


# --------------------------------------------------------------------------- outputs


@attrs.frozen
class Dispatch:
    """Send the run's open task: push it to `path` or offer it to the queue.

    `timeout_ms` is the step's timeout: a push's deadline is counted from when it is sent."""

    task: TaskRef
    path: str
    timeout_ms: int
    priority: int = 3  # the step's priority, else the run's (issue 23)
    buckets: tuple[Bucket, ...] = ()  # the rate-limit buckets a send takes a token from


def dispatch_of(run: Run, definition: Definition, step: Step, task: TaskRef) -> Dispatch:
    """The effect that sends `task`: with its priority and the step's rate-limit bucket."""
    assert step.timeout_ms is not None
    return Dispatch(task, step.push_path(definition.name), step.timeout_ms, *flow_of(run, definition, step))


def flow_of(run: Run, definition: Definition, step: Step) -> tuple[int, tuple[Bucket, ...]]:
    """(priority, buckets) of a send of `step`'s task (issue 23)."""
    priority = step.priority if step.priority is not None else run.priority
    if step.rate_limit is None:
        return priority, ()
    scope = {"input": run.input, "state": run.state}
    return priority, (step_bucket(run.app, definition.name, step.name, step.rate_limit, scope),)


@attrs.frozen
class Abort:
    """Stop an in-flight push or withdraw a queued offer; the task is closed."""

    token: str


@attrs.frozen
class Claimed:
    """A poller claimed a queued task: hand it the task."""

    task: TaskRef


@attrs.frozen
class Withdraw:
    """Take a queued, unclaimed task off its queue while the run is paused; it stays open and
    is offered again at unpause."""

    token: str


@attrs.frozen
class CancelChildren:
    """Cancel these child runs: their parent closed or stopped waiting for them."""

    run_ids: tuple[str, ...]
    reason: str


@attrs.frozen
class NotifyParent:
    """This run is a child that just closed: tell its parent."""

    parent_run_id: str
    message: ChildRunClosed


@attrs.frozen
class WakeQueued:
    """A slot of this concurrency key may be free: its oldest queued runs should try, as many
    as `limit` leaves room for (the limit the emitting run's definition gives the key; None:
    unknown, the oldest one tries)."""

    key: str
    limit: int | None = None


Effect = Dispatch | Abort | Claimed | Withdraw | CancelChildren | NotifyParent | WakeQueued


@attrs.frozen
class ChildRequest:
    """A child run to create in the same unit of work as the transition that asked for it.

    The machine cannot read definitions: the actor resolves `workflow` and `version` (None: the
    latest), starts the child with `start(...)` and commits both, or answers `ChildRunClosed` with
    the reason it could not."""

    run_id: str
    workflow: str
    version: int | None
    input: Any
    parent: ParentRef
    depth: int
    tree: int | None = None  # the child's share of its parent's tree budget


@attrs.frozen
class Gather:
    """Read the outputs of this step's children (all closed) and answer `Gathered`."""

    step: str
    generation: int
    attempt: int
    total: int


@attrs.frozen
class Ok:
    value: Any = None


@attrs.frozen
class Rejected:
    status: int
    code: str
    message: str
    field: str | None = None  # the request field at fault, for a 400/413 (the message starts with it)


Reply = Ok | Rejected


@attrs.frozen
class Context:
    now: int
    new_token: Callable[[], str]
    payload_max: int = 262_144
    signal_buffer_max: int = 100  # buffered signals per run
    signal_buffer_max_bytes: int = 1_048_576  # their payloads' compact-JSON bytes, summed
    new_run_id: Callable[[], str] | None = None  # a child run's id (run, map and parallel steps)
    # How many of `n` child runs an app may start now, and if fewer, in how many ms to try
    # again (the app's lane, `actors/lanes.py`); None: every one.
    grant_children: Callable[[str, int], tuple[int, int]] | None = None


@attrs.frozen
class Transition:
    run: Run
    events: tuple[Event, ...] = ()
    effects: tuple[Effect, ...] = ()
    tasks: tuple[TaskRow, ...] = ()
    reply: Reply = Ok()
    changed: bool = True
    # signalIds the run took: committed with the transition into a table whose unique key
    # refuses a second one (the actor then answers `duplicate` and commits nothing).
    signal_ids: tuple[str, ...] = ()
    children: tuple[ChildRequest, ...] = ()  # child runs to create with this commit
    gather: Gather | None = None  # read the children's outputs and apply `Gathered`


def chain(first: Transition, second: Transition) -> Transition:
    """`first` then `second` (computed on `first.run`) as one transition: one commit.

    Child runs `first` asked for that `second` no longer waits for are dropped (never created),
    and so are cancellations of them; their `child_started` becomes `child_not_started` (no
    `runId`: the history names no run that does not exist)."""
    children = first.children + second.children
    effects = first.effects + second.effects
    events = first.events
    if first.children:
        fan = second.run.fan
        wanted = {slot.run_id for slot in fan.open} if fan is not None else set()
        dropped = {c.run_id for c in first.children if c.run_id not in wanted}
        if dropped:
            children = tuple(c for c in children if c.run_id not in dropped)
            effects = tuple(_without(e, dropped) for e in effects)
            reason = {"reason": "its step stopped waiting for its children before it started"}
            events = _not_started(events, dropped, reason)
    return Transition(
        second.run,
        events + second.events,
        effects,
        first.tasks + second.tasks,
        first.reply,
        True,
        first.signal_ids + second.signal_ids,
        children,
        second.gather,
    )


def child_not_started(
    tr: Transition, request: ChildRequest, error: ErrorInfo, definition: Definition, ctx: Context
) -> Transition:
    """`tr` after the actor found it cannot start `request` (`error`: its workflow or version
    does not exist): one transition, the request withdrawn. The history records
    `child_not_started` (the workflow, `class` and `message`, no `runId`) where `child_started`
    was, and the step goes on as for a failed child."""
    events = _not_started(tr.events, {request.run_id}, {"class": error.cls, "message": error.message})
    tr = attrs.evolve(tr, events=events)
    return chain(
        tr, transition(tr.run, definition, ChildNotStarted(request.run_id, request.parent, error), ctx)
    )


def _not_started(events: tuple[Event, ...], run_ids: set[str], why: dict[str, Any]) -> tuple[Event, ...]:
    """`events` with the `child_started` of `run_ids` recorded as `child_not_started` instead."""
    out = []
    for e in events:
        if e.type == "child_started" and e.data.get("runId") in run_ids:
            data = {k: v for k, v in e.data.items() if k != "runId"}
            e = attrs.evolve(e, type="child_not_started", data={**data, **why})
        out.append(e)
    return tuple(out)


def _without(effect: Effect, dropped: set[str]) -> Effect:
    if isinstance(effect, CancelChildren):
        return CancelChildren(tuple(i for i in effect.run_ids if i not in dropped), effect.reason)
    return effect


# --------------------------------------------------------------------------- classification


def classify_response(status: int, body: bytes, next_header: str | None) -> Outcome:
    """Turn a handler's HTTP answer into an outcome (SPEC §6 'Answers')."""
    if status == 202:
        return Accepted()
    if 200 <= status < 300:
        if not body.strip():
            return Completed(None, next_header)
        try:
            output = loads(_json_text(body))
        except DepthError as exc:
            return Failed("invalid_output", f"the handler's answer {exc}", False)
        except ValueError:  # UnicodeDecodeError and PayloadError included
            return Failed("invalid_output", "the handler's answer is not JSON", False)
        return Completed(output, next_header)
    retryable = status in (408, 429) or status >= 500 or status < 200
    cls, message = f"http_{status}", f"the handler answered {status}"
    try:
        parsed = loads(_json_text(body)) if body.strip() else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        err = parsed["error"]
        if isinstance(err.get("class"), str) and err["class"]:
            cls = err["class"][:128]
        if isinstance(err.get("message"), str):
            message = err["message"][:2048]
        if isinstance(err.get("retryable"), bool):
            retryable = err["retryable"]
    return Failed(cls, message, retryable)


def connection_failure(message: str) -> Failed:
    return Failed("connection_error", message, True)


def timeout_failure(message: str = "the attempt passed its deadline") -> Failed:
    return Failed("timeout", message, True)


def queue_timeout_failure() -> Failed:
    return Failed("queue_timeout", "no worker claimed the task within the step's queueTimeout", True)


def _json_text(body: bytes) -> str:
    """A handler's body as text, in the encodings `json.loads` itself detects."""
    return body.decode(json.detect_encoding(body))


# --------------------------------------------------------------------------- the builder


class _Tx:
    """Accumulates one transition. Internal: the public surface stays pure and frozen."""

    def __init__(self, run: Run, definition: Definition, ctx: Context) -> None:
        self._run = run
        self._changes: dict[str, Any] = {}  # set but not yet applied to `_run`
        self.definition = definition
        self.ctx = ctx
        self.events: list[Event] = []
        self.effects: list[Effect] = []
        self.tasks: list[TaskRow] = []
        self.signal_ids: list[str] = []
        self.children: list[ChildRequest] = []
        self.gather: Gather | None = None
        self.reply: Reply = Ok()
        self.failure: ErrorInfo | None = None  # a step's own failure on its way to `onFailure: $fail`

    @property
    def run(self) -> Run:
        """The run with every change so far. Changes are applied when the run is read, so the
        sets and events between two reads cost one copy of the document, not one each."""
        if self._changes:
            self._run = replace_run(self._run, self._changes)
            self._changes = {}
        return self._run

    def _get(self, name: str) -> Any:
        changes = self._changes
        return changes[name] if name in changes else getattr(self._run, name)

    def set(self, **changes: Any) -> None:
        self._changes.update(changes)

    def wake(self, key: str) -> None:
        """`WakeQueued` for `key`, with the limit this run's definition gives it."""
        self.effects.append(WakeQueued(key, self.definition.slot_limit(key)))

    def emit(
        self,
        type_: str,
        step: str | None = None,
        attempt: int | None = None,
        /,
        **data: Any,
    ) -> None:
        seq = self._get("seq") + 1
        self._changes["seq"] = seq
        self.events.append(Event(seq, self.ctx.now, self._get("generation"), type_, step, attempt, data))

    def done(self) -> Transition:
        self._changes["updated_at"] = self.ctx.now
        run = self.run
        return Transition(
            run,
            tuple(self.events),
            tuple(self.effects),
            tuple(self.tasks),
            self.reply,
            signal_ids=tuple(self.signal_ids),
            children=tuple(self.children),
            gather=self.gather,
        )

    # ------------------------------------------------------------------ tasks

    def task_row(self, task: TaskRef, status: str, reason: str | None) -> TaskRow:
        return TaskRow(
            token=task.token,
            run_id=self.run.run_id,
            app=self.run.app,
            generation=task.generation,
            step=task.step,
            attempt=task.attempt,
            queue=task.queue,
            status=status,
            close_reason=reason,
            deadline=task.deadline,
            created_at=self.ctx.now,
        )

    def close_task(self, reason: str) -> None:
        task = self.run.task
        if task is None:
            return
        self.tasks.append(self.task_row(task, "closed", reason))
        if reason != "answered" and reason != "timed_out":
            self.effects.append(Abort(task.token))
        self.set(task=None)

    def arm(self, kind: str, due: int, label: str) -> Timer:
        """A new step timer. Its key carries the run's arming counter, so no firing of an
        earlier arming (same step, same generation, same token) can ever match it."""
        n = self.run.armings + 1
        self.set(armings=n)
        return Timer(kind, due, f"{label}#{n}")

    # ------------------------------------------------------------------ parking and closing

    def park(self, status: str, **changes: Any) -> None:
        fields: dict[str, Any] = {
            "status": status,
            "wait_signal": None,
            "wait_signals": (),
            "wake_at": None,
            "timer": None,
            "paused_from": None,
            "held": None,
        }
        fields.update(changes)
        self.set(**fields)

    def finish(self, status: str, event: str, error: ErrorInfo | None = None, **data: Any) -> None:
        self.close_task("cancelled" if status == "cancelled" else "superseded")
        self.drop_fan(f"its parent {self.run.run_id} is {status}")
        output = self.output() if status == "completed" else None
        self.park(status, closed_at=self.ctx.now, error=error, output=output, debounce_key=None)
        if status == "completed" and self.run.compensating is not None:
            self.set(compensating=None)  # the onFailure path recovered
        if error is not None:
            data = {"class": error.cls, "message": error.message, **data}
            if error.compensated_by is not None:
                data["compensatedBy"] = error.compensated_by
            if error.cause is not None:
                data["cause"] = error.cause.to_json()
        self.emit(event, self.run.current_step, **data)
        if self.run.concurrency_key is not None:
            self.wake(self.run.concurrency_key)  # its slot is free
        parent = self.run.parent
        if parent is not None:
            closed = ChildRunClosed(self.run.run_id, parent, status, output, error, self.run.tree or 0)
            self.effects.append(NotifyParent(parent.run_id, closed))

    def output(self) -> Any:
        """The run's output: the value at the workflow's `output` path, else its whole state."""
        path = self.definition.output
        if path is None:
            return self.run.state
        return lookup(path, self.scope())[1]

    def drop_fan(self, reason: str) -> None:
        """The run stops waiting for its step's children: cancel the open ones (unless the step
        says `onParentClose: abandon`)."""
        fan = self.run.fan
        if fan is None:
            return
        self.set(fan=None)
        step = self.definition.index.get(fan.step)
        if fan.open and (step is None or step.on_parent_close == "cancel"):
            self.effects.append(CancelChildren(tuple(slot.run_id for slot in fan.open), reason))

    def hold(self, kind: str, **fields: Any) -> None:
        """Paused: keep a task answer for the unpause (the task is closed, its timer moot)."""
        self.set(held=HeldOutcome(kind, self.ctx.now, **fields), timer=None)

    def step_failed_or_hold(self, step: Step, error: ErrorInfo) -> None:
        if self.run.status == "paused":
            self.hold("step_failed", error=error)
        else:
            self.step_failed(step, error)

    def stuck(self, step: str | None, cls: str, message: str) -> None:
        error = ErrorInfo(step, cls, message)
        self.close_task("superseded")
        self.park("stuck", error=error)
        self.emit("run_stuck", step, **{"class": cls, "message": message})

    def fail_run(self, step: str | None, cls: str, message: str) -> None:
        self.finish("failed", "run_failed", ErrorInfo(step, cls, message))

    # ------------------------------------------------------------------ stepping

    def enter(self, name: str) -> None:
        """Move to `name` and run immediate steps until the run parks or closes."""
        for _ in range(MAX_IMMEDIATE_STEPS):
            follow = self._enter_once(name)
            if follow is None:
                return
            name = follow
        self.stuck(name, "loop_detected", f"more than {MAX_IMMEDIATE_STEPS} steps without parking")

    def _enter_once(self, name: str) -> str | None:
        if name in (END, FAIL, STUCK):
            self.leave_step_slot()
        if name == END:
            self.finish("completed", "run_completed")
            return None
        if name == FAIL:
            self.reach_fail()
            return None
        if name == STUCK:
            self.stuck(self.run.current_step, "stuck_by_definition", "the workflow reached $stuck")
            return None
        step = self.definition.step(name)
        self.leave_step_slot()
        carried = self.run.carried_error if step.kind == "task" else None
        self.set(current_step=name, step_since=self.ctx.now, attempt=None, error=None, carried_error=carried)
        compensating = self.run.compensating
        if compensating is not None and compensating.step == name:
            self.set(compensating=None)  # the failed step is tried again: its compensation is over
        self.emit("step_started", name, kind=step.kind)
        if step.kind == "task":
            if step.concurrency is not None:
                self.queue_at_step(step)
            else:
                self.start_attempt(step, 1)
            return None
        if step.kind == "sleep":
            return self.enter_sleep(step)
        if step.kind == "wait":
            return self.enter_wait(step)
        if step.kind in CHILD_KINDS:
            return self.enter_children(step, 1)
        return self.evaluate_choice(step)

    def reach_fail(self) -> None:
        """The run reached `$fail` from its current step. Its error: the step's `failError` (the
        failure that led here kept as `cause`), else that failure itself (the step's own, by
        `onFailure: $fail`, or the one its `onFailure` path compensated, with `compensatedBy`),
        else `failed_by_definition`."""
        at = self.run.current_step
        root = self.failure or self.run.compensating
        self.failure = None
        step = self.definition.index.get(at) if at is not None else None
        own = step.fail_error if step is not None else None
        if own is not None:
            error = ErrorInfo(at, own.cls, own.message, cause=root)
        elif root is not None:
            error = root
        else:
            error = ErrorInfo(at, "failed_by_definition", "the workflow reached $fail")
        self.finish("failed", "run_failed", error)

    def leave_step_slot(self) -> None:
        """Leaving a task step with `concurrency`: its slot (or its place in the queue) is given
        up, and the key's queue may move."""
        key = self.run.concurrency_key
        if key is not None and "#" in key.partition("/")[0]:
            self.set(concurrency_key=None)
            self.wake(key)

    def queue_at_step(self, step: Step) -> None:
        """A task step with `concurrency`: wait for a slot of its key (`Admit` sends the first
        attempt)."""
        assert step.concurrency is not None
        key = step_concurrency_key(self.definition, step, self.scope())
        self.park("queued", concurrency_key=key, attempt=None)
        self.emit("step_queued", step.name, key=key.partition("/")[2], limit=step.concurrency.limit)
        self.wake(key)  # a slot may be free: the key's oldest run tries

    def start_attempt(self, step: Step, attempt: int) -> None:
        """Record the attempt (durable before effect) with no deadline yet: a push's deadline
        counts from when the dispatcher sends it, a queued task's from its claim."""
        assert step.timeout_ms is not None
        task = TaskRef(
            token=self.ctx.new_token(),
            step=step.name,
            attempt=attempt,
            generation=self.run.generation,
            queue=step.queue,
            deadline=None,
        )
        timer = None
        if step.queue_timeout_ms is not None:
            due = self.ctx.now + step.queue_timeout_ms
            timer = self.arm("queue_timeout", due, task.token)
        self.park("running", attempt=attempt, task=task, timer=timer)
        dispatch = dispatch_of(self.run, self.definition, step, task)
        row = self.task_row(task, "open", None)
        self.tasks.append(attrs.evolve(row, priority=dispatch.priority, buckets=dispatch.buckets))
        self.emit(
            "task_dispatched",
            step.name,
            attempt,
            idempotencyKey=task.idempotency_key(self.run.run_id),
            queue=step.queue,
            deadline=None,
        )
        self.effects.append(dispatch)

    def enter_sleep(self, step: Step) -> str | None:
        if step.duration_ms is not None:
            due = self.ctx.now + step.duration_ms
        elif step.until_ms is not None:
            due = step.until_ms
        else:
            assert step.until_path is not None
            found, value = lookup(step.until_path, self.scope())
            try:
                if not found or not isinstance(value, str):
                    raise DurationError("missing")
                due = parse_timestamp(value)
            except DurationError:
                where = ".".join(step.until_path)
                self.fail_run(step.name, "invalid_sleep", f"{where} is not an RFC 3339 timestamp")
                return None
        self.emit("sleep_started", step.name, wakeAt=due)
        if due <= self.ctx.now:
            self.emit("sleep_finished", step.name)
            self.emit("step_completed", step.name)
            return step.next
        timer = self.arm("sleep", due, f"{self.run.generation}:{step.name}")
        self.park("sleeping", wake_at=due, timer=timer)
        return None

    def enter_wait(self, step: Step) -> str | None:
        awaited = step.awaited
        for i, buffered in enumerate(self.run.buffer):
            if buffered.name in awaited:
                self.set(buffer=self.run.buffer[:i] + self.run.buffer[i + 1 :])
                return self.consume_signal(step, buffered)
        timer = None
        wake_at = None
        if step.timeout_ms is not None:
            wake_at = self.ctx.now + step.timeout_ms
            timer = self.arm("wait_timeout", wake_at, f"{self.run.generation}:{step.name}")
        self.park("waiting", wait_signal=step.signal, wait_signals=step.signals, wake_at=wake_at, timer=timer)
        return None

    def consume_signal(self, step: Step, signal: BufferedSignal) -> str:
        """The wait is over: `state[step]` is the payload (for a first-of-N wait,
        `{signal, payload}`), and the run goes on at `next` (or the signal's `onSignal`)."""
        output = signal.payload if not step.signals else {"signal": signal.name, "payload": signal.payload}
        self.set(state={**self.run.state, step.name: output})
        self.emit("signal_consumed", step.name, name=signal.name, signalId=signal.signal_id)
        self.emit("step_completed", step.name)
        return step.after_signal(signal.name)

    def evaluate_choice(self, step: Step) -> str | None:
        scope = self.scope()
        for index, choice in enumerate(step.choices):
            if evaluate(choice.when, scope):
                self.emit("choice_evaluated", step.name, matched=index, next=choice.next)
                return choice.next
        if step.default is not None:
            self.emit("choice_evaluated", step.name, matched=None, next=step.default)
            return step.default
        self.emit("choice_evaluated", step.name, matched=None, next=None)
        self.stuck(step.name, "no_choice_matched", "no choice matched and the step has no default")
        return None

    def scope(self) -> dict[str, Any]:
        return {"input": self.run.input, "state": self.run.state}

    # ------------------------------------------------------------------ child runs

    def enter_children(self, step: Step, attempt: int) -> str | None:
        """A run, map or parallel step: start its first children and wait for them."""
        self.set(attempt=attempt)
        if self.run.depth >= MAX_DEPTH:
            message = f"a run at depth {self.run.depth} cannot start children (at most {MAX_DEPTH} levels)"
            self.step_failed(step, ErrorInfo(step.name, "child_depth_exceeded", message))
            return None
        if step.kind == "map":
            assert step.items_path is not None
            found, items = lookup(step.items_path, self.scope())
            where = ".".join(step.items_path)
            if not found or not isinstance(items, list):
                self.step_failed(step, ErrorInfo(step.name, "invalid_items", f"{where} is not an array"))
                return None
            if len(items) > MAX_ITEMS:
                message = f"{where} holds {len(items)} items, over the {MAX_ITEMS}-item limit"
                self.step_failed(step, ErrorInfo(step.name, "too_many_items", message))
                return None
            total = len(items)
            if total == 0:
                self.set(state={**self.run.state, step.name: []})
                self.emit("step_completed", step.name, attempt)
                return step.next
        else:
            total = len(step.branches)
            path = step.branches[0].input_path
            if step.kind == "run" and path is not None and not lookup(path, self.scope())[0]:
                message = f"inputPath {'.'.join(path)} is not in the run's input or state"
                self.step_failed(step, ErrorInfo(step.name, "invalid_input", message))
                return None
        tree = self.run.tree
        if tree is not None and total > tree:
            message = (
                f"step {step.name!r} would start {total} child runs; the run's tree may create"
                f" {tree} more (maxTreeRuns: FOLIOT_MAX_TREE_RUNS or the app's override, shared"
                " down the tree): none was started"
            )
            self.step_failed(step, ErrorInfo(step.name, "too_many_runs", message))
            return None
        fan = FanOut(step.name, step.kind, self.run.generation, attempt, total, 0)
        self.park("waiting", fan=fan, timer=None, wake_at=None)
        self.top_up(step)
        return None

    def top_up(self, step: Step) -> None:
        """Start children in item order until the step's concurrency is reached, as many as the
        app's lane grants now (`Context.grant_children`); the rest are started by a `top_up`
        timer when the lane has room again (or when a child closes first)."""
        fan = self.run.fan
        assert fan is not None
        limit = step.max_concurrency if step.kind == "map" else fan.total
        want = min(limit - len(fan.open), fan.total - fan.started)
        if want <= 0:
            return
        granted, retry_ms = want, 0
        if self.ctx.grant_children is not None:
            granted, retry_ms = self.ctx.grant_children(self.run.app, want)
        paced = self.run.timer is not None and self.run.timer.kind == "top_up"
        if granted < want:
            due = self.ctx.now + max(retry_ms, 10)
            timer = self.arm("top_up", due, f"{fan.generation}:{step.name}:{fan.attempt}")
            self.set(timer=timer, wake_at=due)
            if not paced:
                self.emit("children_paced", step.name, fan.attempt, waiting=want - granted, retryAt=due)
        elif paced:
            self.set(timer=None, wake_at=None)
        if granted <= 0:
            return
        if step.kind == "run" and step.timeout_ms is not None:
            timer = self.arm(
                "child_timeout", self.ctx.now + step.timeout_ms, f"{self.run.generation}:{step.name}"
            )
            self.set(timer=timer, wake_at=timer.due)
        limit = min(limit, len(fan.open) + granted)
        items: Any = None
        if step.kind == "map" and fan.started < fan.total and len(fan.open) < limit:
            assert step.items_path is not None
            items = lookup(step.items_path, self.scope())[1]
        opened = list(fan.open)
        started = fan.started
        while started < fan.total and len(opened) < limit:
            branch = step.branches[started] if step.kind == "parallel" else step.branches[0]
            if step.kind == "map":
                # The items as they are now: an operator's edit reaches the children not started.
                child_input = items[started] if isinstance(items, list) and started < len(items) else None
            elif branch.input_path is not None:
                child_input = lookup(branch.input_path, self.scope())[1]
            else:
                child_input = self.run.input
            assert self.ctx.new_run_id is not None, "child runs need Context.new_run_id"
            child_id = self.ctx.new_run_id()
            ref = ParentRef(
                self.run.run_id, step.name, fan.generation, fan.attempt, started, step.on_parent_close
            )
            share = None
            tree = self.run.tree
            if tree is not None:
                # Each child not started yet costs one; what is left is shared among them.
                remaining = fan.total - started
                share = max(0, tree - remaining) // remaining
                self.set(tree=tree - 1 - share)
            self.children.append(
                ChildRequest(
                    child_id, branch.workflow, branch.version, child_input, ref, self.run.depth + 1, share
                )
            )
            which = {"branch": branch.name} if step.kind == "parallel" else {"index": started}
            self.emit(
                "child_started", step.name, fan.attempt, runId=child_id, workflow=branch.workflow, **which
            )
            opened.append(ChildSlot(started, child_id))
            started += 1
        self.set(fan=attrs.evolve(fan, open=tuple(opened), started=started))

    def fan_progress(self, step: Step) -> None:
        """After a child closed: start the next ones, or read the outputs once all are done."""
        fan = self.run.fan
        assert fan is not None
        self.top_up(step)
        fan = self.run.fan
        assert fan is not None
        if not fan.open and fan.started >= fan.total:
            self.gather = Gather(step.name, fan.generation, fan.attempt, fan.total)

    # ------------------------------------------------------------------ task outcomes

    def step_failed(self, step: Step, error: ErrorInfo) -> None:
        """A task step failed for good: go to `onFailure`, else fail the run."""
        self.emit(
            "step_failed", step.name, self.run.attempt, **{"class": error.cls, "message": error.message}
        )
        if step.on_failure is not None:
            self.set(carried_error=error)
            if step.on_failure == FAIL:
                self.failure = error  # no compensation: the run fails with this failure
            elif step.on_failure not in (END, STUCK):
                self.set(compensating=attrs.evolve(error, compensated_by=step.on_failure))
            self.enter(step.on_failure)
            return
        self.fail_run(step.name, error.cls, error.message)

    def attempt_failed(self, step: Step, failure: Failed) -> None:
        attempt = self.run.attempt or 1
        retry = step.retry
        assert retry is not None
        if retry.allows(attempt, failure.cls, failure.retryable):
            delay = retry.backoff_ms(attempt)
            due = self.ctx.now + delay
            timer = self.arm("retry", due, f"{self.run.generation}:{step.name}:{attempt + 1}")
            self.park("running", timer=timer)
            self.emit("retry_scheduled", step.name, attempt, delayMs=delay, nextAttempt=attempt + 1, at=due)
            return
        self.step_failed(step, ErrorInfo(step.name, failure.cls, failure.message))


# --------------------------------------------------------------------------- entry points


def start(
    *,
    run_id: str,
    app: str,
    definition: Definition,
    version: int,
    input: Any,
    business_key: str | None,
    run_timeout_ms: int | None,
    trace_id: str,
    ctx: Context,
    parent: ParentRef | None = None,
    depth: int = 0,
    debounce: tuple[str, int] | None = None,
    priority: int = 3,
    tree: int | None = None,
) -> Transition:
    """A new run: `run_started`, then the first step (a child run: `parent` started it)."""
    timeout = run_timeout_ms if run_timeout_ms is not None else definition.run_timeout_ms
    run = Run(
        run_id=run_id,
        app=app,
        workflow=definition.name,
        version=version,
        status="running",
        input=input,
        state={},
        generation=1,
        created_at=ctx.now,
        updated_at=ctx.now,
        trace_id=trace_id,
        business_key=business_key,
        run_timeout_ms=timeout,
        deadline=ctx.now + timeout if timeout is not None else None,
        parent=parent,
        depth=depth,
        priority=priority,
        tree=tree,
    )
    tx = _Tx(run, definition, ctx)
    if parent is None:
        tx.emit("run_started", None, version=version, businessKey=business_key)
    else:
        tx.emit("run_started", None, version=version, businessKey=business_key, parent=parent.to_json())
    if debounce is not None:
        # A trailing debounced start: it begins at `due` unless its burst goes on (`Debounce`).
        key, due = debounce
        timer = tx.arm("debounce", due, f"{definition.name}/{key}")
        tx.set(debounce_key=f"{definition.name}/{key}")
        tx.park("sleeping", wake_at=due, timer=timer)
        tx.emit("start_debounced", None, key=key, startsAt=due)
        tx.reply = Ok(tx.run)
        return tx.done()
    _begin(tx)
    tx.reply = Ok(tx.run)
    return tx.done()


def _begin(tx: _Tx) -> None:
    """A new run's first step, or its place in its concurrency key's queue."""
    definition = tx.definition
    if definition.concurrency is not None:
        # It waits for a slot first; `Admit` (tried at once by the caller) starts its first step.
        key = concurrency_key(definition, tx.run.input)
        tx.set(status="queued", concurrency_key=key)
        tx.emit("run_queued", None, key=key.partition("/")[2], limit=definition.concurrency.limit)
        return
    tx.enter(definition.first.name)


def step_concurrency_key(definition: Definition, step: Step, scope: dict[str, Any]) -> str:
    """`<workflow>#<step>/<value>`: the slot group of a run at a task step with `concurrency`
    (`#` is in no name, so it never meets a workflow's own key)."""
    assert step.concurrency is not None
    path = step.concurrency.key
    value = lookup(path, scope)[1] if path is not None else None
    return f"{definition.name}#{step.name}/{_key_text(value)}"


def _key_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def concurrency_key(definition: Definition, input: Any) -> str:
    """`<workflow>/<value>`: the slot group of a run (the value at the key's path as text:
    strings as they are, other JSON compact; a missing path and no key at all are `""`)."""
    assert definition.concurrency is not None
    path = definition.concurrency.key
    value: Any = None
    if path is not None:
        value = lookup(path, {"input": input, "state": {}})[1]
    return f"{definition.name}/{_key_text(value)}"


def transition(run: Run, definition: Definition, message: Message, ctx: Context) -> Transition:
    """Apply one message to a run. `definition` is the version the run is pinned to."""
    tx = _Tx(run, definition, ctx)
    handler = _HANDLERS[type(message)]
    unchanged = handler(tx, message)
    if unchanged is not None:
        return Transition(run, reply=unchanged, changed=False)
    return tx.done()


def mark_stuck(run: Run, definition: Definition, cls: str, message: str, ctx: Context) -> Transition:
    return transition(run, definition, MarkStuck(cls, message), ctx)


def _closed_task_reply() -> Rejected:
    return Rejected(409, "task_closed", "the task is closed (answered, timed out, superseded or cancelled)")


def _current_task(tx: _Tx, token: str) -> TaskRef | None:
    task = tx.run.task
    if task is None or task.token != token or task.generation != tx.run.generation:
        return None
    return task


def _on_answer(tx: _Tx, msg: TaskAnswer) -> Reply | None:
    task = _current_task(tx, msg.token)
    if task is None or not tx.run.is_open:
        return _closed_task_reply()
    step = tx.definition.step(task.step)
    outcome = msg.outcome
    paused = tx.run.status == "paused"
    if paused and _deadline_passed(tx.run, tx.ctx.now):
        return _closed_task_reply()  # the deadline came first; it fires at unpause
    if isinstance(outcome, Accepted):
        if task.accepted:
            return Ok(None)
        assert step.timeout_ms is not None
        deadline = outcome.deadline
        if deadline is None:
            deadline = task.deadline if task.deadline is not None else tx.ctx.now + step.timeout_ms
        accepted = attrs.evolve(task, accepted=True, deadline=deadline)
        tx.set(task=accepted, timer=tx.arm("task_deadline", deadline, task.token))
        tx.tasks.append(tx.task_row(accepted, "open", None))
        tx.emit("task_accepted", step.name, task.attempt, deadline=deadline)
        return None
    tx.close_task("answered")
    if msg.via_api:
        # Answered through `complete` while a push of the attempt may still wait (for its
        # rate-limit token, a sender) or be in flight: it is not sent after the answer, and
        # takes no token for a closed attempt (found by tests/sim, seed 168).
        tx.effects.append(Abort(task.token))
    if isinstance(outcome, Failed):
        tx.emit(
            "task_failed",
            step.name,
            task.attempt,
            **{"class": outcome.cls, "message": outcome.message, "retryable": outcome.retryable},
        )
        if paused:
            tx.hold(
                "failed",
                error=ErrorInfo(step.name, outcome.cls, outcome.message),
                retryable=outcome.retryable,
            )
        else:
            tx.attempt_failed(step, outcome)
        return None
    try:
        size = payload_size(outcome.output)
    except PayloadError as exc:
        size, too_large = -1, str(exc)
    else:
        too_large = ""
    if size > tx.ctx.payload_max or size < 0:
        message = too_large or (
            f"the output of step {step.name!r} is {size} bytes, over the {tx.ctx.payload_max}-byte limit"
        )
        cls = "output_too_large" if not too_large else "invalid_output"
        tx.emit(
            "task_failed", step.name, task.attempt, **{"class": cls, "message": message, "retryable": False}
        )
        tx.step_failed_or_hold(step, ErrorInfo(step.name, cls, message))
        if msg.via_api:
            tx.reply = Rejected(400, cls, message)
        return None
    if outcome.next is not None and not tx.definition.has_target(outcome.next):
        message = f"next step {outcome.next!r} is no step of workflow {tx.definition.name!r}"
        tx.emit(
            "task_failed",
            step.name,
            task.attempt,
            **{"class": "invalid_next", "message": message, "retryable": False},
        )
        tx.step_failed_or_hold(step, ErrorInfo(step.name, "invalid_next", message))
        if msg.via_api:
            tx.reply = Rejected(400, "invalid_next", message)
        return None
    tx.set(state={**tx.run.state, step.name: outcome.output}, carried_error=None)
    tx.emit("task_completed", step.name, task.attempt, next=outcome.next)
    if paused:
        tx.hold("completed", next=outcome.next)
        return None
    tx.emit("step_completed", step.name, task.attempt)
    tx.enter(outcome.next or step.next)
    return None


def _deadline_passed(run: Run, now: int) -> bool:
    """A paused run's task deadline came due (its timer waits for the unpause)."""
    timer = run.timer
    return timer is not None and timer.kind == "task_deadline" and timer.due <= now


def _on_timer(tx: _Tx, msg: TimerFired) -> Reply | None:
    run = tx.run
    if not run.is_open:
        return Ok(None)
    if msg.slot == "run":
        if run.deadline is None or msg.key != str(run.generation):
            return Ok(None)
        error = ErrorInfo(run.current_step, "run_timeout", "the run passed its runTimeout")
        tx.finish("timed_out", "run_timed_out", error)
        return None
    timer = run.timer
    if timer is None or timer.kind != msg.kind or timer.key != msg.key:
        return Ok(None)  # stale: the step moved on since the timer was armed
    if run.status == "paused":
        return Ok(None)  # kept in the document: it fires at unpause
    if timer.kind == "debounce":
        tx.set(timer=None, wake_at=None, debounce_key=None, status="running")
        tx.emit("debounce_ended", None, waitedMs=tx.ctx.now - run.created_at)
        _begin(tx)
        if tx.run.waits_for_slot:
            # Queued now, not at its start (`adopt` wakes only new runs): the key's oldest run
            # tries a slot at once, and the pump learns a run waits (found by tests/sim, seed 65).
            assert tx.run.concurrency_key is not None
            tx.wake(tx.run.concurrency_key)
        return None
    assert run.current_step is not None
    step = tx.definition.step(run.current_step)
    tx.set(timer=None)
    if timer.kind == "task_deadline":
        task = run.task
        assert task is not None
        tx.close_task("timed_out")
        tx.emit("task_timed_out", step.name, task.attempt)
        tx.attempt_failed(step, timeout_failure())
    elif timer.kind == "queue_timeout":
        task = run.task
        assert task is not None
        tx.close_task("timed_out")
        tx.effects.append(Abort(task.token))  # off its queue: no poller may take it now
        tx.emit("task_timed_out", step.name, task.attempt, **{"class": "queue_timeout"})
        tx.attempt_failed(step, queue_timeout_failure())
    elif timer.kind == "retry":
        if step.kind in CHILD_KINDS:
            follow = tx.enter_children(step, (run.attempt or 1) + 1)
            if follow is not None:
                tx.enter(follow)
        else:
            tx.start_attempt(step, (run.attempt or 1) + 1)
    elif timer.kind == "top_up":
        if run.fan is not None and run.fan.step == step.name:
            tx.set(timer=timer)  # still paced: `top_up` clears it, or arms it again quietly
            tx.fan_progress(step)  # the app's lane has room again: the next children
    elif timer.kind == "child_timeout":
        fan = run.fan
        assert fan is not None
        tx.drop_fan(f"its parent's step {step.name!r} timed out")
        ids = ", ".join(slot.run_id for slot in fan.open)
        tx.emit("child_timed_out", step.name, run.attempt, runIds=[slot.run_id for slot in fan.open])
        failure = Failed("child_timed_out", f"child run {ids} did not close within the step's timeout", True)
        tx.attempt_failed(step, failure)
    elif timer.kind == "sleep":
        tx.emit("sleep_finished", step.name)
        tx.emit("step_completed", step.name)
        tx.enter(step.next)
    elif timer.kind == "wait_timeout":
        tx.emit("wait_timed_out", step.name)
        if step.on_timeout is not None:
            tx.enter(step.on_timeout)
        else:
            names = step.signal if step.signal is not None else list(step.signals)
            tx.fail_run(step.name, "wait_timeout", f"signal {names!r} did not arrive in time")
    return None


def _on_signal(tx: _Tx, msg: SignalIn) -> Reply | None:
    run = tx.run
    if msg.signal_id is not None and "\x00" in msg.signal_id:
        # Stored as text under a unique key; PostgreSQL text cannot hold U+0000.
        return Rejected(400, "invalid_request", "signalId: must not contain U+0000", "signalId")
    if msg.signal_id is not None and any(b.signal_id == msg.signal_id for b in run.buffer):
        return Ok("duplicate")  # still buffered; ids already consumed are caught by the store
    if run.status in TERMINAL_STATUSES:
        return Rejected(409, "run_closed", f"run {run.run_id} is {run.status}")
    waiting = run.status == "waiting" and (run.wait_signal == msg.name or msg.name in run.wait_signals)
    if not waiting and (refusal := _buffer_refusal(run, msg, tx.ctx)) is not None:
        return refusal
    if msg.signal_id is not None:
        tx.signal_ids.append(msg.signal_id)
    signal = BufferedSignal(msg.name, msg.payload, msg.signal_id, tx.ctx.now)
    tx.emit(
        "signal_received",
        run.current_step if waiting else None,
        name=msg.name,
        signalId=msg.signal_id,
        buffered=not waiting,
    )
    if not waiting:
        tx.set(buffer=(*run.buffer, signal))
        tx.reply = Ok("buffered")
        return None
    assert run.current_step is not None
    step = tx.definition.step(run.current_step)
    tx.set(timer=None)
    tx.enter(tx.consume_signal(step, signal))
    tx.reply = Ok("delivered")
    return None


def _buffer_refusal(run: Run, msg: SignalIn, ctx: Context) -> Rejected | None:
    """Why a signal the run does not wait for cannot be buffered, or None when it fits.

    The buffer lives in the run document, which is rewritten on every transition: it is bounded
    in count and in payload bytes. A refused signal leaves nothing behind; the sender may retry
    once the run has consumed some.
    """
    count = len(run.buffer)
    if count >= ctx.signal_buffer_max:
        return Rejected(
            409,
            "signal_buffer_full",
            f"run {run.run_id} already buffers {count} signals, the limit; retry once it has consumed some",
        )
    try:
        size = payload_size(msg.payload) + sum(payload_size(b.payload) for b in run.buffer)
    except PayloadError as exc:
        return Rejected(400, "invalid_request", f"payload: {exc}", "payload")
    if size > ctx.signal_buffer_max_bytes:
        return Rejected(
            413,
            "signal_buffer_too_large",
            f"buffering this signal would hold {size} bytes of payloads for run {run.run_id},"
            f" over the {ctx.signal_buffer_max_bytes}-byte limit; retry once it has consumed some",
        )
    return None


def _on_claim(tx: _Tx, msg: Claim) -> Reply | None:
    task = _current_task(tx, msg.token)
    if task is None or not tx.run.is_open or task.queue is None or task.claimed_by is not None:
        return _closed_task_reply()
    if tx.run.status == "paused":
        return Rejected(
            409, "run_paused", f"run {tx.run.run_id} is paused; its task is offered again at unpause"
        )
    step = tx.definition.step(task.step)
    assert step.timeout_ms is not None
    deadline = tx.ctx.now + step.timeout_ms
    claimed = attrs.evolve(task, deadline=deadline, claimed_by=msg.worker_id or "")
    tx.set(task=claimed, timer=tx.arm("task_deadline", deadline, task.token))
    tx.tasks.append(tx.task_row(claimed, "open", None))
    tx.emit("task_claimed", step.name, task.attempt, workerId=msg.worker_id, deadline=deadline)
    tx.effects.append(Claimed(claimed))
    tx.reply = Ok(claimed)
    return None


def _on_heartbeat(tx: _Tx, msg: Heartbeat) -> Reply | None:
    task = _current_task(tx, msg.token)
    if task is None or not tx.run.is_open:
        return _closed_task_reply()
    if task.queue is not None and task.claimed_by is None:
        return Rejected(409, "task_not_claimed", "a queued task must be claimed before heartbeats")
    step = tx.definition.step(task.step)
    assert step.timeout_ms is not None
    deadline = tx.ctx.now + step.timeout_ms
    extended = attrs.evolve(task, deadline=deadline)
    tx.set(task=extended, timer=tx.arm("task_deadline", deadline, task.token))
    tx.tasks.append(tx.task_row(extended, "open", None))
    tx.reply = Ok({"cancelRequested": False, "deadline": deadline})
    return None


def _invalid_status(run: Run, action: str) -> Rejected:
    where = f" at {run.current_step!r}" if run.current_step else ""
    return Rejected(409, "invalid_status", f"cannot {action} a run that is {run.status}{where}")


def _skippable(run: Run, definition: Definition) -> bool:
    if run.status not in ("running", "waiting", "sleeping", "stuck", "failed") or run.current_step is None:
        return False
    return run.current_step in definition.index and definition.step(run.current_step).kind != "choice"


#: Whether a run, as it stands, accepts each intervention (else 409 `invalid_status`): the one
#: predicate the handlers below ask, and the console too (it offers only these).
INTERVENTIONS: Final[dict[str, Callable[[Run, Definition], bool]]] = {
    "cancel": lambda run, _: run.is_open,
    "redrive": lambda run, _: run.status in ("failed", "stuck", "timed_out") and run.current_step is not None,
    # Not a trailing debounced run that has not begun (`debounce_key` set): it would begin past
    # its key's concurrency slot and leave its burst claimed (every later start of the key 409).
    "rewind": lambda run, _: run.status not in ("cancelled", "paused", "queued") and run.debounce_key is None,
    "skip": _skippable,
    "state": lambda run, _: run.status != "cancelled",
    "pause": lambda run, _: run.is_open and run.status != "paused",
    "unpause": lambda run, _: run.status == "paused",
}


def accepts(run: Run, action: str, definition: Definition) -> bool:
    """Whether `run` accepts intervention `action` (a key of `INTERVENTIONS`) by its status."""
    return INTERVENTIONS[action](run, definition)


def _on_cancel(tx: _Tx, msg: Cancel) -> Reply | None:
    if not accepts(tx.run, "cancel", tx.definition):
        return _invalid_status(tx.run, "cancel")
    tx.finish("cancelled", "run_cancelled", None, reason=msg.reason)
    tx.reply = Ok(tx.run)
    return None


def _on_redrive(tx: _Tx, msg: Redrive) -> Reply | None:
    run = tx.run
    if not accepts(run, "redrive", tx.definition) or run.current_step is None:
        return _invalid_status(run, "redrive")
    refusal = compensated_refusal(run)
    if refusal is not None:
        return Rejected(409, "compensated", refusal)
    step_name = run.current_step
    tx.close_task("superseded")
    tx.drop_fan(f"its parent {run.run_id} was redriven")
    changes: dict[str, Any] = {"generation": run.generation + 1, "closed_at": None, "error": None}
    if run.status == "timed_out" and run.run_timeout_ms is not None:
        changes["deadline"] = tx.ctx.now + run.run_timeout_ms
    tx.set(**changes)
    tx.emit("run_redriven", step_name, reason=msg.reason, fromStatus=run.status)
    tx.park("running")
    tx.enter(step_name)
    tx.reply = Ok(tx.run)
    return None


def compensated_refusal(run: Run) -> str | None:
    """Why a redrive of `run` is refused, when it failed at `$fail` after its `onFailure` path
    (its compensation) ran: a redrive would run the compensation again, never the failed step."""
    compensated = run.error.compensated if run.status == "failed" and run.error is not None else None
    if compensated is None:
        return None
    return (
        f"step {compensated.step!r} failed ({compensated.cls}) and its onFailure path "
        f"({compensated.compensated_by!r}) ran and reached $fail: a redrive would run the "
        f"compensation again; rewind to {compensated.step!r} to retry the failed step"
    )


def _on_rewind(tx: _Tx, msg: Rewind) -> Reply | None:
    run = tx.run
    if run.debounce_key is not None and run.status != "paused":
        return Rejected(
            409,
            "invalid_status",
            f"cannot rewind run {run.run_id}: a debounced run that has not begun (it begins when its"
            " burst ends; cancel it to drop it)",
        )
    if not accepts(run, "rewind", tx.definition):
        return _invalid_status(run, "rewind")
    target = msg.target or tx.definition
    if msg.to_step not in target.index:
        return Rejected(
            400,
            "invalid_request",
            f"toStep: {msg.to_step!r} is no step of version {msg.version or run.version}",
            "toStep",
        )
    tx.close_task("superseded")
    tx.drop_fan(f"its parent {run.run_id} was rewound")
    changes: dict[str, Any] = {
        "generation": run.generation + 1,
        "closed_at": None,
        "error": None,
        "carried_error": None,
        "compensating": None,
    }
    if msg.version is not None:
        changes["version"] = msg.version
    if run.status == "timed_out" and run.run_timeout_ms is not None:
        changes["deadline"] = tx.ctx.now + run.run_timeout_ms
    tx.set(**changes)
    tx.definition = target
    tx.emit(
        "run_rewound",
        msg.to_step,
        reason=msg.reason,
        fromStep=run.current_step,
        fromVersion=run.version,
        toVersion=tx.run.version,
    )
    tx.park("running")
    tx.enter(msg.to_step)
    tx.reply = Ok(tx.run)
    return None


def _on_skip(tx: _Tx, msg: Skip) -> Reply | None:
    run = tx.run
    if not accepts(run, "skip", tx.definition) or run.current_step is None:
        return _invalid_status(run, "skip")
    step = tx.definition.step(run.current_step)
    if (err := _check_size(msg.output, tx.ctx.payload_max, "output")) is not None:
        return err
    tx.close_task("superseded")
    tx.drop_fan(f"its parent's step {step.name!r} was skipped")
    tx.set(state={**run.state, step.name: msg.output}, closed_at=None, error=None, carried_error=None)
    tx.emit("step_skipped", step.name, run.attempt, reason=msg.reason, fromStatus=run.status)
    tx.park("running")
    tx.enter(step.next)
    tx.reply = Ok(tx.run)
    return None


def _check_size(value: Any, limit: int, field: str) -> Rejected | None:
    try:
        size = payload_size(value)
    except PayloadError as exc:
        return Rejected(400, "invalid_request", f"{field}: {exc}", field)
    if size > limit:
        return Rejected(
            413, "payload_too_large", f"{field} is {size} bytes, over the {limit}-byte limit", field
        )
    return None


def _on_edit(tx: _Tx, msg: EditState) -> Reply | None:
    run = tx.run
    if not accepts(run, "state", tx.definition):
        return _invalid_status(run, "edit the state of")
    for key, value in msg.set.items():
        if (err := _check_size(value, tx.ctx.payload_max, f"set.{key}")) is not None:
            return err
    state = dict(run.state)
    state.update(msg.set)
    for key in msg.unset:
        state.pop(key, None)
    tx.set(state=state)
    tx.emit("state_edited", run.current_step, set=sorted(msg.set), unset=sorted(msg.unset), reason=msg.reason)
    tx.reply = Ok(tx.run)
    return None


def _on_pause(tx: _Tx, msg: Pause) -> Reply | None:
    """Freeze the run where it stands: nothing is dispatched and nothing advances it until
    `Unpause`. An in-flight push finishes (its answer is held), signals are buffered, step
    timers that come due wait for the unpause; the run timeout keeps running."""
    run = tx.run
    if not accepts(run, "pause", tx.definition):
        return _invalid_status(run, "pause")
    tx.set(status="paused", paused_from=run.status)
    tx.emit("run_paused", run.current_step, reason=msg.reason, fromStatus=run.status)
    task = run.task
    if task is not None and task.queue is not None and task.claimed_by is None:
        tx.effects.append(Withdraw(task.token))
    tx.reply = Ok(tx.run)
    return None


def _on_unpause(tx: _Tx, msg: Unpause) -> Reply | None:
    run = tx.run
    if not accepts(run, "unpause", tx.definition):
        return _invalid_status(run, "unpause")
    tx.set(status=run.paused_from or "running", paused_from=None, held=None)
    tx.emit("run_unpaused", run.current_step, reason=msg.reason, toStatus=tx.run.status)
    if tx.run.status == "queued" and run.concurrency_key is not None:
        tx.wake(run.concurrency_key)
        tx.reply = Ok(tx.run)
        return None
    _resume(tx, run.held)
    tx.reply = Ok(tx.run)
    return None


def _resume(tx: _Tx, held: HeldOutcome | None) -> None:
    """What the pause held back, in the order it happened: a task answer; else a signal the
    run waits for that arrived before its step timer came due; else that timer; else a queued
    task goes back on its queue."""
    run = tx.run
    if run.current_step is None or run.current_step not in tx.definition.index:
        return
    step = tx.definition.step(run.current_step)
    if held is not None:
        if held.kind == "completed":
            tx.emit("step_completed", step.name, run.attempt)
            tx.enter(held.next or step.next)
        elif held.kind == "failed":
            assert held.error is not None
            tx.attempt_failed(step, Failed(held.error.cls, held.error.message, held.retryable))
        else:
            assert held.error is not None
            tx.step_failed(step, held.error)
        return
    timer = run.timer
    due = timer is not None and timer.due <= tx.ctx.now
    if run.status == "waiting" and step.kind == "wait":
        for i, buffered in enumerate(run.buffer):
            if buffered.name not in step.awaited:
                continue
            if due and buffered.at is not None and timer is not None and buffered.at > timer.due:
                break  # the timeout came first
            tx.set(buffer=run.buffer[:i] + run.buffer[i + 1 :], timer=None)
            tx.enter(tx.consume_signal(step, buffered))
            return
    if due:
        assert timer is not None
        _on_timer(tx, TimerFired("step", timer.kind, timer.key))
        return
    if run.fan is not None and step.kind in ("map", "parallel"):
        tx.fan_progress(step)  # children that closed during the pause: start the next ones
        return
    task = run.task
    if task is not None and task.queue is not None and task.claimed_by is None and step.timeout_ms:
        tx.effects.append(dispatch_of(tx.run, tx.definition, step, task))


def _on_mark_stuck(tx: _Tx, msg: MarkStuck) -> Reply | None:
    if not tx.run.is_open:
        return Ok(None)
    tx.stuck(tx.run.current_step, msg.cls, msg.message)
    return None


def _on_debounce(tx: _Tx, msg: Debounce) -> Reply | None:
    run = tx.run
    timer = run.timer
    pending = run.status == "sleeping" or (run.status == "paused" and run.paused_from == "sleeping")
    if run.debounce_key is None or not pending or timer is None or timer.kind != "debounce":
        return Rejected(409, "not_pending", f"run {run.run_id} has begun; its burst is over")
    check = _check_size(msg.input, tx.ctx.payload_max, "input")
    if check is not None:
        return check
    tx.set(input=msg.input, wake_at=msg.due, timer=tx.arm("debounce", msg.due, run.debounce_key))
    tx.emit("start_debounced", None, key=run.debounce_key.partition("/")[2], startsAt=msg.due)
    tx.reply = Ok(tx.run)
    return None


def _on_admit(tx: _Tx, msg: Admit) -> Reply | None:
    run = tx.run
    if run.status != "queued" or run.concurrency_key is None:
        return Ok("not_queued")
    tx.set(status="running")
    key = run.concurrency_key.partition("/")[2]
    tx.wake(run.concurrency_key)  # the next one may fit too
    if run.current_step is not None and run.current_step in tx.definition.index:
        since = run.step_since if run.step_since is not None else run.created_at
        tx.emit("step_admitted", run.current_step, key=key, waitedMs=tx.ctx.now - since)
        tx.start_attempt(tx.definition.step(run.current_step), 1)
    else:
        tx.emit("run_admitted", None, key=key, waitedMs=tx.ctx.now - run.created_at)
        tx.enter(tx.definition.first.name)
    tx.reply = Ok(tx.run)
    return None


_CHILD_CLASSES: Final = {"timed_out": "child_timed_out", "cancelled": "child_cancelled"}


def _on_child_closed(tx: _Tx, msg: ChildRunClosed | ChildNotStarted) -> Reply | None:
    """A child closed (or could not start): record it in the step's fan-out, then move the step
    on. Stale (another generation, attempt or step), duplicated and unknown children change
    nothing."""
    run = tx.run
    fan = run.fan
    ref = msg.parent
    if (
        not run.is_open
        or run.status == "stuck"
        or fan is None
        or ref.generation != fan.generation
        or ref.step != fan.step
        or ref.attempt != fan.attempt
    ):
        return Ok("stale")
    slot = fan.slot(msg.run_id)
    if slot is None:
        return Ok("stale")
    unused = getattr(msg, "unused", 0)
    if unused and run.tree is not None:
        tx.set(tree=run.tree + unused)  # the child's budget it did not spend comes back
    step = tx.definition.step(fan.step)
    opened = tuple(s for s in fan.open if s.run_id != msg.run_id)
    paused = run.status == "paused"
    which: dict[str, Any] = {"index": slot.index}
    if step.kind == "parallel":
        which = {"branch": step.branches[slot.index].name}
    # A child that never started has no run to name: its `child_not_started` is in the history.
    never = msg.error if isinstance(msg, ChildNotStarted) else None
    status = "failed" if isinstance(msg, ChildNotStarted) else msg.status
    if status == "completed":
        assert isinstance(msg, ChildRunClosed)
        fan = attrs.evolve(fan, open=opened, completed=fan.completed + 1)
        tx.emit("child_completed", step.name, fan.attempt, runId=msg.run_id, **which)
    else:
        cls = _CHILD_CLASSES.get(status, "child_failed")
        if never is None:
            child_error = msg.error.cls if msg.error is not None else status
            tx.emit(
                "child_failed",
                step.name,
                fan.attempt,
                runId=msg.run_id,
                status=status,
                error=child_error,
                **which,
            )
        if status == "cancelled":
            fan = attrs.evolve(fan, open=opened, cancelled=fan.cancelled + 1)
        else:
            fan = attrs.evolve(fan, open=opened, failed=fan.failed + 1)
        if step.kind == "run":
            if never is not None:
                text = f"{never.message}: step {step.name!r} could not start its child run"
                error = ErrorInfo(step.name, never.cls, text)
            else:
                detail = f": {msg.error.cls}: {msg.error.message}" if msg.error is not None else ""
                error = ErrorInfo(step.name, cls, f"child run {msg.run_id} is {status}{detail}")
            tx.set(fan=None, timer=None, wake_at=None)
            if paused:
                tx.hold("failed", error=error, retryable=True)
            else:
                tx.attempt_failed(step, Failed(error.cls, error.message, True))
            return None
        tolerated = step.kind == "map" and fan.failed + fan.cancelled <= step.tolerance(fan.total)
        if not tolerated:
            tx.set(fan=fan)
            tx.drop_fan(f"a sibling of it in step {step.name!r} failed")
            if step.kind == "map":
                last = f"{msg.run_id} ({status})" if never is None else f"item {slot.index} ({never.message})"
                # The open children are cancelled now (unless abandoned); the rest never start.
                if step.on_parent_close == "abandon":
                    closing = f"{fan.cancelled} cancelled, {len(fan.open)} abandoned"
                else:
                    closing = f"{fan.cancelled + len(fan.open)} cancelled"
                unstarted = fan.total - fan.started
                cls, text = (
                    "map_failed",
                    (
                        f"{fan.failed + fan.cancelled} of {fan.total} children did not complete (tolerated:"
                        f" {step.tolerance(fan.total)}): {fan.completed} completed, {fan.failed} failed,"
                        f" {closing}{f', {unstarted} not started' if unstarted else ''}; the last was {last}"
                    ),
                )
            else:
                branch = step.branches[slot.index].name
                if never is not None:
                    cls, text = "branch_failed", f"branch {branch!r} could not start: {never.message}"
                else:
                    cls, text = "branch_failed", f"branch {branch!r} (child run {msg.run_id}) is {status}"
            tx.step_failed_or_hold(step, ErrorInfo(step.name, cls, text))
            return None
    assert isinstance(msg, ChildRunClosed)  # only a run that closed completes
    if step.kind == "run":
        try:
            size = payload_size(msg.output)
        except PayloadError:
            size = tx.ctx.payload_max + 1
        tx.set(fan=None, timer=None, wake_at=None)
        if size > tx.ctx.payload_max:
            limit = tx.ctx.payload_max
            text = f"the output of child run {msg.run_id} is {size} bytes, over the {limit}-byte limit"
            tx.step_failed_or_hold(step, ErrorInfo(step.name, "output_too_large", text))
            return None
        tx.set(state={**tx.run.state, step.name: msg.output}, carried_error=None)
        if paused:
            tx.hold("completed")
            return None
        tx.emit("step_completed", step.name, fan.attempt)
        tx.enter(step.next)
        return None
    tx.set(fan=fan)
    if not paused:
        tx.fan_progress(step)
    return None


def _on_tree_too_large(tx: _Tx, msg: TreeTooLarge) -> Reply | None:
    """The step's fan-out would create too many runs: it fails (no retry), nothing is started."""
    run = tx.run
    fan = run.fan
    if (
        not run.is_open
        or fan is None
        or (fan.step, fan.generation, fan.attempt) != (msg.step, msg.generation, msg.attempt)
    ):
        return Ok("stale")
    step = tx.definition.step(fan.step)
    tx.set(fan=None, timer=None, wake_at=None)
    tx.step_failed_or_hold(step, ErrorInfo(step.name, msg.code, msg.message))
    return None


def _on_gathered(tx: _Tx, msg: Gathered) -> Reply | None:
    """The outputs of a map's or parallel step's children: the step's result, and on."""
    run = tx.run
    fan = run.fan
    if (
        not run.is_open
        or run.status in ("paused", "stuck")
        or fan is None
        or fan.open
        or fan.started < fan.total
        or (msg.step, msg.generation, msg.attempt) != (fan.step, fan.generation, fan.attempt)
    ):
        return Ok("stale")
    step = tx.definition.step(fan.step)
    value: Any
    if step.kind == "parallel":
        value = {branch.name: out for branch, out in zip(step.branches, msg.outputs, strict=False)}
    else:
        value = list(msg.outputs)
    tx.set(fan=None)
    try:
        size = msg.too_large or payload_size(value)
    except PayloadError:
        size = tx.ctx.payload_max + 1
    if size > tx.ctx.payload_max:
        limit = tx.ctx.payload_max
        which = "are" if not msg.too_large else "pass, with some still unread,"
        text = (
            f"the children's outputs of step {step.name!r} {which} {size} bytes, over the {limit}-byte limit"
        )
        tx.step_failed(step, ErrorInfo(step.name, "output_too_large", text))
        return None
    tx.set(state={**run.state, step.name: value}, carried_error=None)
    tx.emit(
        "step_completed",
        step.name,
        fan.attempt,
        completed=fan.completed,
        failed=fan.failed,
        cancelled=fan.cancelled,
    )
    tx.enter(step.next)
    return None


_HANDLERS: Final[dict[type, Callable[[_Tx, Any], Reply | None]]] = {
    Admit: _on_admit,
    Debounce: _on_debounce,
    ChildRunClosed: _on_child_closed,
    TreeTooLarge: _on_tree_too_large,
    ChildNotStarted: _on_child_closed,
    Gathered: _on_gathered,
    TaskAnswer: _on_answer,
    TimerFired: _on_timer,
    SignalIn: _on_signal,
    Claim: _on_claim,
    Heartbeat: _on_heartbeat,
    Cancel: _on_cancel,
    Redrive: _on_redrive,
    Rewind: _on_rewind,
    Skip: _on_skip,
    EditState: _on_edit,
    Pause: _on_pause,
    Unpause: _on_unpause,
    MarkStuck: _on_mark_stuck,
}


def _on_migrate(tx: _Tx, msg: Migrate) -> Reply | None:
    run = tx.run
    if not run.is_open:
        return _invalid_status(run, "migrate")
    if run.version == msg.version:
        return Ok("already")
    step = run.current_step
    mapped = dict(msg.step_map).get(step) if step is not None else None
    if mapped is not None and mapped not in msg.target.index:
        field = f"stepMap.{step}"
        return Rejected(
            400, "invalid_request", f"{field}: {mapped!r} is no step of version {msg.version}", field
        )
    verdict = step_verdict(tx.definition, msg.target, step)
    fan = run.fan
    if fan is not None:  # waiting for its step's children: they are kept, or the run refused
        return _migrate_fan(tx, msg, fan, verdict, mapped)
    if verdict.verdict == STRANDED and mapped is None:
        return Rejected(
            409,
            "stranded",
            f"step {step!r} is no step of version {msg.version}; give a stepMap entry for it",
            "stepMap",
        )
    to_step = mapped or step
    in_place = to_step == step and verdict.in_place
    if not in_place and run.status == "paused":
        return Rejected(
            409,
            "run_paused",
            f"run {run.run_id} is paused at {step!r}; unpause it to re-enter a changed step",
        )
    data = {"reason": msg.reason, "fromVersion": run.version, "toVersion": msg.version, "fromStep": step}
    if in_place:
        tx.set(version=msg.version)
        tx.definition = msg.target
        tx.emit("run_migrated", step, **data, toStep=step, inPlace=True)
        if run.status == "queued" and run.concurrency_key is not None:
            old_key = run.concurrency_key
            if run.current_step is None:
                # Queued before its first step: it waits in the queue its new version names, as a
                # start of that version would (none: it begins at once).
                new = concurrency_key(msg.target, run.input) if msg.target.concurrency is not None else None
                if new != old_key:
                    tx.set(status="running", concurrency_key=None)
                    tx.wake(old_key)  # the runs behind it may move up
                    _begin(tx)
                    if tx.run.concurrency_key is not None:
                        tx.wake(tx.run.concurrency_key)
                    tx.reply = Ok(tx.run)
                    return None
            tx.wake(old_key)  # its new version's limit may leave it a slot now
        tx.reply = Ok(tx.run)
        return None
    assert to_step is not None
    tx.close_task("superseded")
    tx.drop_fan(f"its parent {run.run_id} was migrated")
    tx.set(generation=run.generation + 1, error=None, carried_error=None, version=msg.version)
    tx.definition = msg.target
    tx.emit("run_migrated", to_step, **data, toStep=to_step, inPlace=False)
    tx.park("running")
    tx.enter(to_step)
    tx.reply = Ok(tx.run)
    return None


def _migrate_fan(tx: _Tx, msg: Migrate, fan: FanOut, verdict: Verdict, mapped: str | None) -> Reply | None:
    """Migrate a run waiting for the children of its run, map or parallel step. A version change
    never starts finished work again: the run stays at its step with its completed and running
    children (same generation), and only the items not started yet follow the new step (a map's
    new maxConcurrency starts more of them at once); a new step that no longer names those
    children (`compat.FAN_IDENTITY`), or a `stepMap` entry moving the run elsewhere, refuses it."""
    run = tx.run
    step = run.current_step
    moved_to = mapped if mapped is not None and mapped != step else None
    fans = Fans.of(fan)
    if moved_to is not None or not verdict.keeps_fan:
        text = refused_text(fan.kind, step, fans, f"v{msg.version}", verdict, moved_to)
        return Rejected(409, FAN_OUT_CHANGED, f"run {run.run_id} {text}")
    assert step is not None
    tx.set(version=msg.version)
    tx.definition = msg.target
    data = {"reason": msg.reason, "fromVersion": run.version, "toVersion": msg.version, "fromStep": step}
    tx.emit("run_migrated", step, **data, toStep=step, inPlace=True, children=fans.to_json())
    if run.status == "waiting":
        tx.top_up(msg.target.step(step))  # the items not started follow the new step
    tx.reply = Ok(tx.run)
    return None


_HANDLERS[Migrate] = _on_migrate
