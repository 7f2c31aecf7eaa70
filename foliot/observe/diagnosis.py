""" "Why is this run not moving?": one line and the facts behind it, from what the engine knows.

`diagnose(observation)` is pure: the run document, its in-flight attempt's record, its timers
as stored, the live actor's mailbox, the push queue's and the pull queue's state are gathered
by the caller (`foliot/http/diagnosis.py`) and passed in with the time. Nothing here reads a
clock, a socket or a database, so every stuck case is unit-tested as data
(`tests/unit/test_diagnosis.py`).

The summary names the one thing an operator should look at first; `facts` list everything
else that was checked, each with a stable `code` so tools can act on it. `attention` is true
when the run will not move without someone acting (an operator, a worker or a handler).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..core.workflow.duration import format_timestamp as ts
from ..core.workflow.model import Run, TaskRow
from ..core.workflow.signals import closest, listed

# A queue whose last poll is older than this (and has no poller waiting now) counts as unpolled.
POLL_QUIET_MS: Final = 60_000
# A stored timer due longer ago than this has not fired in time: the timer wheel is behind.
TIMER_LATE_MS: Final = 5_000


@attrs.frozen
class StoredTimer:
    slot: str  # step | run
    kind: str
    key: str
    due: int


@attrs.frozen
class QueueSeen:
    """What the pull queue knows about one (app, queue)."""

    name: str
    backlog: int  # offers waiting for a poller, this one included
    waiting_pollers: int  # pollers parked on the queue right now
    last_poll_at: int | None  # when a poller last asked (None: not since `tracked_since`)
    tracked_since: int  # when this server started watching pollers
    pollers: tuple[tuple[str, int], ...] = ()  # (workerId, last seen), most recent first


@attrs.frozen
class SlotSeen:
    """A queued run's place: its concurrency key and the runs before it."""

    key: str  # "customer=42" (the key path's last name and the value), or "" for the workflow
    ahead: int  # queued runs of the key older than this one
    held: int  # slots of the key held now
    limit: int


@attrs.frozen
class Observation:
    run: Run
    now: int
    task_row: TaskRow | None = None  # the open attempt's row (created_at = when it was recorded)
    push: str | None = None  # "queued" (waiting for a sender) | "sending" | None (not in the dispatcher)
    push_backlog: int = 0  # pushes of the run's app waiting for a sender
    timers: tuple[StoredTimer, ...] = ()  # the run's rows in the `timers` table
    live: bool = False  # an actor holds the run in memory
    mailbox: int = 0  # messages waiting in that actor's mailbox
    queue: QueueSeen | None = None
    last_failure: dict[str, Any] | None = None  # data of the run's last `task_failed` event
    slot: SlotSeen | None = None  # a queued run: its concurrency key and place
    rate_wait: tuple[str, int] | None = None  # (bucket label, slot epoch ms): held for a rate limit
    # The signal names the run's workflow can wait for, from its pinned version on (None: not
    # read); a buffered signal of another name is consumed by nobody.
    awaitable_signals: frozenset[str] | None = None
    # The run's step pushes with a timeout the synchronous push never reaches:
    # (the step's timeout, FOLIOT_SYNC_TASK_MAX_MS) in ms; None: it does not.
    over_sync_cap: tuple[int, int] | None = None


@attrs.frozen
class Fact:
    code: str
    text: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "text": self.text}


@attrs.frozen
class Diagnosis:
    summary: str
    attention: bool
    facts: tuple[Fact, ...]

    def to_json(self, run: Run) -> dict[str, Any]:
        return {
            "runId": run.run_id,
            "status": run.status,
            "summary": self.summary,
            "attention": self.attention,
            "facts": [f.to_json() for f in self.facts],
        }


def human(ms: int) -> str:
    """A duration for people: `850 ms`, `12 s`, `41 min`, `3 h 5 min`, `14 d 2 h`."""
    ms = max(ms, 0)
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    if s < 60:
        return f"{s} s"
    m = s // 60
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def _in_or_ago(due: int, now: int) -> str:
    return f"in {human(due - now)}" if due >= now else f"{human(now - due)} ago"


def _overdue(ms: int) -> str:
    return f"; its deadline passed {human(ms)} ago and the timeout is due"


def _failure_text(data: dict[str, Any] | None) -> str:
    if not data:
        return "an error"
    cls = str(data.get("class", "error"))
    message = str(data.get("message") or "")
    return f"{cls}: {message}" if message else cls


def _error_text(run: Run) -> str:
    if run.error is None:
        return "no error recorded"
    return f"{run.error.cls}: {run.error.message}" if run.error.message else run.error.cls


def diagnose(obs: Observation) -> Diagnosis:
    """The one-line answer and the facts behind it (see the module's docstring)."""
    run, now = obs.run, obs.now
    facts: list[Fact] = []
    summary, attention = _summary(obs, facts)
    facts.extend(_timer_facts(obs))
    if run.is_open and obs.over_sync_cap is not None and not (run.task is not None and run.task.accepted):
        timeout, cap = obs.over_sync_cap
        facts.append(
            Fact(
                "timeout_over_sync_cap",
                f"step `{run.current_step}` has a timeout of {human(timeout)} but a synchronous push is cut"
                f" at FOLIOT_SYNC_TASK_MAX_MS ({human(cap)}): each attempt fails with `timeout` unless"
                " the handler answers 202 and completes through the API (or the step takes a `queue`)",
            )
        )
    if any(f.code in ("timer_missing", "timer_late") for f in facts):
        attention = True
    if run.is_open and run.deadline is not None:
        facts.append(
            Fact("run_deadline", f"the run times out {_in_or_ago(run.deadline, now)} ({ts(run.deadline)})")
        )
    if run.buffer:
        counts: dict[str, int] = {}
        for signal in run.buffer:
            counts[signal.name] = counts.get(signal.name, 0) + 1
        listed = ", ".join(f"`{name}`" + (f" x{n}" if n > 1 else "") for name, n in counts.items())
        facts.append(Fact("signals_buffered", f"{len(run.buffer)} buffered signal(s): {listed}"))
        unawaited = _unawaited(obs, counts)
        if unawaited is not None:
            facts.append(unawaited)
            attention = True
    if obs.live:
        text = "in memory (a live actor)"
        if obs.mailbox:
            text += f"; {obs.mailbox} message(s) waiting in its mailbox"
        facts.append(Fact("actor_live", text))
    elif run.is_open:
        facts.append(
            Fact(
                "actor_passivated", "passivated (not in memory): its timer or the next message brings it back"
            )
        )
    return Diagnosis(summary, attention, tuple(facts))


def _unawaited(obs: Observation, counts: dict[str, int]) -> Fact | None:
    """Buffered signals no step of the run's workflow (its version or a later one) waits for:
    nobody will ever consume them; the closest awaited name is named, for a typo."""
    known = obs.awaitable_signals
    if known is None:
        return None
    stray = [name for name in counts if name not in known]
    if not stray:
        return None
    parts = []
    for name in stray:
        near = closest(name, known)
        parts.append(f"`{name}`" + (f" (did you mean `{near}`?)" if near is not None else ""))
    waits = ", ".join(f"`{n}`" for n in listed(known)) or "no signal"
    return Fact(
        "signal_unawaited",
        f"no step waits for buffered signal(s) {', '.join(parts)}: they will never be consumed "
        f"(the workflow waits for {waits})",
    )


def _summary(obs: Observation, facts: list[Fact]) -> tuple[str, bool]:
    run, now = obs.run, obs.now
    step = f"`{run.current_step}`" if run.current_step else "its step"
    closed_ago = human(now - (run.closed_at if run.closed_at is not None else run.updated_at))
    if run.status == "completed":
        return f"completed {closed_ago} ago; nothing to do", False
    if run.status == "cancelled":
        return f"cancelled {closed_ago} ago; a cancelled run never moves again", False
    if run.status == "failed":
        failed_step = f"`{run.error.step}`" if run.error is not None and run.error.step else step
        compensated = run.error.compensated if run.error is not None else None
        if compensated is not None:  # a redrive is refused (machine.compensated_refusal)
            return (
                f"failed at {failed_step} {closed_ago} ago ({_error_text(run)}); the onFailure path "
                f"(`{compensated.compensated_by}`) of `{compensated.step}`'s failure ran and reached "
                "$fail, so a redrive is refused (it would run the compensation again): rewind to "
                f"`{compensated.step}` to retry it",
                True,
            )
        return (
            f"failed at {failed_step} {closed_ago} ago ({_error_text(run)}); "
            "redrive or rewind it to continue",
            True,
        )
    if run.status == "timed_out":
        return (
            f"timed out at {step} {closed_ago} ago (its runTimeout passed); "
            "redrive it for a fresh deadline, or rewind it",
            True,
        )
    if run.status == "stuck":
        return (
            f"stuck at {step} for {human(now - run.updated_at)} ({_error_text(run)}); "
            "it waits for an operator: redrive, rewind, skip or cancel",
            True,
        )
    if run.status == "paused":
        text = f"paused at {step} for {human(now - run.updated_at)}"
        if run.paused_from:
            text += f" (it was {run.paused_from})"
        if run.held is not None:
            facts.append(
                Fact("answer_held", "a task answer arrived during the pause; it is applied at unpause")
            )
        return text + "; an operator paused it: unpause it to continue", True
    if run.status == "waiting":
        return _waiting(obs, step)
    if run.status == "queued":
        return _queued_for_slot(obs)
    if run.status == "sleeping" and run.debounce_key is not None and run.current_step is None:
        key = run.debounce_key.partition("/")[2]
        if run.wake_at is None:
            return f"pending: a debounced start (key `{key}`) with no start time", True
        return (
            f"pending: a debounced start waiting for its debounce window (key `{key}`) to end; it begins"
            f" at {ts(run.wake_at)} ({_in_or_ago(run.wake_at, now)}), later if another start of the"
            " key comes first",
            False,
        )
    if run.status == "sleeping":
        if run.wake_at is None:
            return f"sleeping at {step} with no wake-up time", True
        return f"sleeping at {step} until {ts(run.wake_at)} ({_in_or_ago(run.wake_at, now)})", False
    # running
    if run.task is None:
        if run.timer is not None and run.timer.kind == "retry":
            nxt = (run.attempt or 1) + 1
            return (
                f"attempt {run.attempt or 1} of {step} failed ({_failure_text(obs.last_failure)}); "
                f"attempt {nxt} {_in_or_ago(run.timer.due, now)}",
                False,
            )
        if obs.mailbox:
            return f"running {step}: {obs.mailbox} message(s) are being applied", False
        return f"running {step}", False
    return _attempt(obs, step, facts)


def _queued_for_slot(obs: Observation) -> tuple[str, bool]:
    run, now, slot = obs.run, obs.now, obs.slot
    age = human(now - run.created_at)
    if slot is None:
        return f"waiting for a concurrency slot for {age}", False
    where = f" on {slot.key}" if slot.key else (" of its step" if run.current_step else " of its workflow")
    at = f"at `{run.current_step}` " if run.current_step else ""
    text = (
        f"waiting {at}for a concurrency slot{where} ({slot.ahead} ahead of it; {slot.held} of {slot.limit}"
        f" slots held) for {age}"
    )
    if slot.held < slot.limit and slot.ahead == 0:
        return text + "; a slot is free: it is admitted within seconds", False
    return text + "; it starts when a run of that key closes", False


def _children(obs: Observation, step: str) -> tuple[str, bool]:
    """A run, map or parallel step waiting for its child runs."""
    run, now = obs.run, obs.now
    fan = run.fan
    assert fan is not None
    age = human(now - (run.step_since if run.step_since is not None else run.updated_at))
    paced = ""
    if run.timer is not None and run.timer.kind == "top_up":
        paced = (
            f"; its app's lane for child runs (FOLIOT_APP_CHILD_RATE) is full: the next start"
            f" {_in_or_ago(run.timer.due, now)}"
        )
    if fan.kind == "run":
        if not fan.open:
            return f"waiting at {step} to start its child run for {age}{paced}", False
        child = fan.open[0].run_id
        text = f"waiting at {step} for child run {child} (attempt {fan.attempt}) for {age}"
        if run.wake_at is not None:
            text += f"; the step times out {_in_or_ago(run.wake_at, now)}"
        return text, False
    pending = fan.total - fan.completed - fan.failed - fan.cancelled
    text = f"waiting for {pending} of {fan.total} children of {step}; {fan.completed} completed"
    if fan.failed or fan.cancelled:
        text += f", {fan.failed} failed, {fan.cancelled} cancelled"
    not_started = fan.total - fan.started
    text += f"; {len(fan.open)} open"
    if not_started:
        text += f", {not_started} not started yet"
    return text + f", for {age}{paced}", False


def _waiting(obs: Observation, step: str) -> tuple[str, bool]:
    run, now = obs.run, obs.now
    if run.fan is not None:
        return _children(obs, step)
    text = f"waiting at {step} for signal `{run.wait_signal}` for {human(now - run.updated_at)}"
    if run.wake_at is not None:
        text += f"; it times out {_in_or_ago(run.wake_at, now)}"
    else:
        text += "; no timeout: only that signal (or an operator) moves it"
    return text, False


def _attempt(obs: Observation, step: str, facts: list[Fact]) -> tuple[str, bool]:
    run, now = obs.run, obs.now
    task = run.task
    assert task is not None
    since = obs.task_row.created_at if obs.task_row is not None else run.updated_at
    age = human(now - since)
    attempt = f"attempt {task.attempt} of {step}"
    if obs.last_failure is not None and task.attempt > 1:
        facts.append(
            Fact("previous_failure", f"the previous attempt failed: {_failure_text(obs.last_failure)}")
        )
    if obs.rate_wait is not None:
        label, due = obs.rate_wait
        wait = max(0, due - now) / 1000
        return f"{attempt} is waiting for a rate-limit token on {label} (next in {wait:.1f} s)", False
    if task.queue is not None:
        if task.claimed_by is None:
            return _queued(obs, task.queue, age, facts)
        worker = f"worker `{task.claimed_by}`" if task.claimed_by else "a worker"
        text = f"{attempt} is claimed by {worker}"
        if task.deadline is not None:
            if task.deadline >= now:
                return text + f"; it must complete or heartbeat {_in_or_ago(task.deadline, now)}", False
            return (
                text + f"; its deadline passed {human(now - task.deadline)} ago and the timeout is due",
                True,
            )
        return text, False
    if task.accepted:
        text = f"the handler accepted {attempt} (202) {age} ago; waiting for it to complete out of band"
        if task.deadline is not None:
            if task.deadline >= now:
                return text + f" {_in_or_ago(task.deadline, now)} at the latest", False
            return (
                text + f"; its deadline passed {human(now - task.deadline)} ago and the timeout is due",
                True,
            )
        return text, False
    if obs.push == "sending":
        return f"pushing {attempt} to the handler for {age}", False
    if obs.push == "queued":
        return (
            f"{attempt} waits {age} for a sender ({obs.push_backlog} push(es) of app `{run.app}` queued)",
            obs.push_backlog > 0 and now - since > POLL_QUIET_MS,
        )
    if obs.mailbox:
        return f"{attempt}: its answer is being applied", False
    return (
        f"{attempt} was recorded {age} ago but is neither queued nor being pushed; "
        "it is re-delivered when the server restarts, or rewind/skip it now",
        True,
    )


def _queued(obs: Observation, queue: str, age: str, facts: list[Fact]) -> tuple[str, bool]:
    now = obs.now
    text = f"queued on `{queue}` for {age}"
    seen = obs.queue
    if seen is None:
        return text + f"; nothing is known about pollers of `{queue}`", True
    if seen.pollers:
        names = ", ".join(f"`{w}` {human(now - at)} ago" for w, at in seen.pollers[:5])
        facts.append(Fact("pollers_seen", f"pollers seen on `{queue}`: {names}"))
    facts.append(Fact("queue_backlog", f"{seen.backlog} task(s) wait on `{queue}`"))
    if seen.waiting_pollers:
        return text + f"; {seen.waiting_pollers} poller(s) are waiting on `{queue}` right now", False
    if seen.last_poll_at is None:
        return (
            text + f"; no poller has asked for `{queue}` since this server started "
            f"{human(now - seen.tracked_since)} ago",
            True,
        )
    quiet = now - seen.last_poll_at
    if quiet > POLL_QUIET_MS:
        return text + f"; no poller has asked for `{queue}` in {human(quiet)}", True
    return text + f"; a poller asked {human(quiet)} ago ({seen.backlog} task(s) in the backlog)", False


def _timer_facts(obs: Observation) -> list[Fact]:
    run, now = obs.run, obs.now
    out: list[Fact] = []
    stored = {(t.slot, t.key): t for t in obs.timers}
    for slot, timer in run.timers():
        found = stored.get((slot, timer.key))
        label = "run timeout" if slot == "run" else timer.kind.replace("_", " ")
        if found is None:
            out.append(
                Fact(
                    "timer_missing",
                    f"the {label} timer due {ts(timer.due)} is not in storage: it will not fire; "
                    "rewind or redrive the run",
                )
            )
        elif now - found.due > TIMER_LATE_MS:
            out.append(
                Fact(
                    "timer_late",
                    f"the {label} timer was due {human(now - found.due)} ago and has not fired: "
                    "the timer wheel is behind (see /admin/timers lag)",
                )
            )
        else:
            out.append(Fact("timer_stored", f"{label} timer in storage, due {_in_or_ago(found.due, now)}"))
    return out


# ---------------------------------------------------------------------- attention, for lists

# Why a run that looks healthy by its status is blocked: the runs list's `attention` filter and
# column (GET /apps/{app}/runs?attention=, the console, `foliot runs list --attention`).
ATTENTION_REASONS: Final = ("retrying", "no_poller", "overdue", "unconsumed_signal")
# Running at one step this long (or a timer this late) is `overdue`.
ATTENTION_OVERDUE_MS: Final = 3_600_000


def attention(
    run: Run,
    now: int,
    queue: QueueSeen | None = None,
    awaited: frozenset[str] | None = None,
    overdue_ms: int = ATTENTION_OVERDUE_MS,
) -> tuple[str, ...]:
    """The reasons (of `ATTENTION_REASONS`, in that order) an open run that is not visibly
    stuck needs a look, from its document and what this node knows without a read:

    - `retrying`: an attempt after the first is running, or the next one is scheduled;
    - `no_poller`: its attempt sits unclaimed on a pull queue nobody polled for
      `POLL_QUIET_MS` (`queue`: what the queue knows; None: not a queued attempt);
    - `overdue`: running at one step for `overdue_ms`, or a wake-up or deadline passed more
      than `TIMER_LATE_MS` ago without firing;
    - `unconsumed_signal`: it buffers a signal no step of its version waits for (`awaited`:
      the version's signal names; None: unknown, not judged).

    Closed, stuck and paused runs show their state in their status and get none."""
    if run.status not in ("running", "waiting", "sleeping"):
        return ()
    found: list[str] = []
    task = run.task
    if run.status == "running" and (
        (run.attempt or 1) > 1 or (task is None and run.timer is not None and run.timer.kind == "retry")
    ):
        found.append("retrying")
    if task is not None and task.queue is not None and task.claimed_by is None and queue is not None:
        last = queue.last_poll_at if queue.last_poll_at is not None else queue.tracked_since
        if queue.waiting_pollers == 0 and now - last > POLL_QUIET_MS:
            found.append("no_poller")
    since = run.step_since if run.step_since is not None else run.updated_at
    late = [t for t in (run.wake_at, task.deadline if task is not None else None) if t is not None]
    if (run.status == "running" and now - since > overdue_ms) or any(now - t > TIMER_LATE_MS for t in late):
        found.append("overdue")
    if awaited is not None and any(signal.name not in awaited for signal in run.buffer):
        found.append("unconsumed_signal")
    return tuple(found)
