"""The schedule machine (pure): when a schedule fires and what a fire does.

A schedule's document (`ScheduleState`) holds its definition and a *cursor*: every scheduled
time at or before it has been decided (started a run, skipped, buffered or counted as missed),
and `next_time` is the first one after it. Its durable timers are derived from it (`timers`):
`fire` at the next time plus its jitter, and `buffer` while a `buffer_one` fire waits for the
previous run to close. The actor (`foliot.kinds.schedule`) reads the world — whether the last
run is still open — and performs what the machine decides: it starts runs and commits.

- `tick(state, now)`: a fire timer came due. Scheduled times whose fire is later than
  `catchupWindow` past due are counted as missed (after an outage: the older ones), and the
  earliest time still within the window is returned to act on; the next one follows at once on
  the next timer, so fires made after an outage are made once each, in order.
- `decide(state, scheduled, previous_open)`: what the overlap policy makes of that time.
- `apply(state, action, now, run_id)`: the document after the action was performed.
- `trigger` is `decide` for the current time without moving the cursor; a backfill starts a
  run for each time in its range and moves nothing but the counter of fires.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..workflow.model import Timer
from .definition import Schedule, jitter_of, load_schedule

MISSED_COUNT_CAP: Final = 10_000  # scheduled times counted one by one per tick at most (cron)
RECHECK_MIN_MS: Final = 1_000
RECHECK_MAX_MS: Final = 30_000  # a buffered fire starts at most this long after its run closed
BACKFILL_MAX: Final = 1_000  # scheduled times one backfill may start


@attrs.frozen
class ScheduleState:
    app: str
    name: str
    schedule: Schedule
    created_at: int
    updated_at: int
    cursor: int  # every scheduled time at or before this has been decided
    next_time: int | None  # the first scheduled time after the cursor (None: no more)
    paused: bool = False
    pause_reason: str | None = None
    fired: int = 0
    skipped: int = 0
    missed: int = 0
    last_time: int | None = None  # the scheduled time of the last run the schedule started
    last_run_id: str | None = None
    buffered: int | None = None  # buffer_one: a scheduled time waiting for the last run to close
    buffered_since: int | None = None
    recheck_at: int | None = None
    armings: int = 0  # numbers each recheck arming (its timer key)
    last_error: str | None = None
    version: int = 0  # the row's write version

    def due(self, scheduled: int) -> int:
        """When the fire of `scheduled` is made: the time plus its deterministic jitter."""
        return scheduled + jitter_of(self.app, self.name, scheduled, self.schedule.jitter_ms)

    def timers(self) -> list[tuple[str, Timer]]:
        """The durable timers this schedule needs; none while paused."""
        if self.paused:
            return []
        out: list[tuple[str, Timer]] = []
        if self.next_time is not None:
            out.append(("fire", Timer("fire", self.due(self.next_time), str(self.next_time))))
        if self.buffered is not None and self.recheck_at is not None:
            out.append(("buffer", Timer("recheck", self.recheck_at, f"{self.buffered}#{self.armings}")))
        return out

    def next_fires(self, count: int) -> list[int]:
        """The next `count` scheduled times (none while paused)."""
        if self.paused or self.next_time is None:
            return []
        out = [self.next_time]
        while len(out) < count:
            at = self.schedule.next_after(out[-1])
            if at is None:
                break
            out.append(at)
        return out


@attrs.frozen
class Action:
    """What to do with one scheduled time.

    `start`: start a run for `scheduled` (after cancelling run `cancel`, when set); `buffer`
    then becomes the fire held for later (buffer_one). `skip`: the overlap policy skips it.
    `hold`: buffer_one keeps `scheduled` until the last run closes. `advance_to`: the tick's
    scheduled time the cursor moves to (None for a trigger)."""

    kind: str  # start | skip | hold
    scheduled: int
    advance_to: int | None = None
    cancel: str | None = None
    buffer: int | None = None


def _next(schedule: Schedule, cursor: int) -> int | None:
    return schedule.next_after(cursor)


def create(app: str, name: str, schedule: Schedule, paused: bool | None, now: int) -> ScheduleState:
    """A new schedule: it fires from now on (or from `startAt`, when later)."""
    cursor = now
    return ScheduleState(
        app=app,
        name=name,
        schedule=schedule,
        created_at=now,
        updated_at=now,
        cursor=cursor,
        next_time=_next(schedule, cursor),
        paused=bool(paused),
        pause_reason=None,
    )


def replace(state: ScheduleState, schedule: Schedule, paused: bool | None, now: int) -> ScheduleState:
    """A PUT over an existing schedule. The same definition again changes nothing (not even
    the cursor); a new one fires from now on. `paused` left out keeps the current pause."""
    same = schedule.document == state.schedule.document
    cursor = state.cursor if same else max(state.cursor, now)
    pause = state.paused if paused is None else paused
    reason = state.pause_reason if pause and paused is None else None
    return attrs.evolve(
        state,
        schedule=schedule,
        updated_at=now,
        cursor=cursor,
        next_time=_next(schedule, cursor),
        paused=pause,
        pause_reason=reason,
    )


def pause(state: ScheduleState, reason: str | None, now: int) -> ScheduleState:
    return attrs.evolve(state, paused=True, pause_reason=reason, updated_at=now)


def unpause(state: ScheduleState, now: int) -> ScheduleState:
    """Fires that fell in the pause are neither made nor counted; the next one is after now."""
    if not state.paused:
        return state
    cursor = max(state.cursor, now)
    recheck = None if state.buffered is None else now
    return attrs.evolve(
        state,
        paused=False,
        pause_reason=None,
        updated_at=now,
        cursor=cursor,
        next_time=_next(state.schedule, cursor),
        recheck_at=recheck,
        armings=state.armings + (recheck is not None),
    )


def tick(state: ScheduleState, now: int) -> tuple[ScheduleState, int | None]:
    """A fire timer came due at `now`: (the document with the missed times counted and the
    cursor past them, the scheduled time to act on now or None)."""
    if state.paused or state.next_time is None:
        return state, None
    schedule = state.schedule
    window = schedule.catchup_window_ms
    cursor, missed = state.cursor, 0
    # Every time at or before this is missed whatever its jitter: counted in bulk.
    surely_missed = now - window - schedule.jitter_ms - 1
    if state.next_time <= surely_missed:
        count, last = schedule.count_between(cursor, surely_missed, MISSED_COUNT_CAP)
        missed += count
        cursor = surely_missed if count >= MISSED_COUNT_CAP else max(cursor, last)
    at = state.next_time if cursor == state.cursor else _next(schedule, cursor)
    act: int | None = None
    while at is not None:
        due = state.due(at)
        if due > now:
            break
        if now - due > window:
            missed += 1
            cursor = at
            at = _next(schedule, at)
            continue
        act = at
        break
    if missed == 0 and cursor == state.cursor:
        return state, act
    changed = attrs.evolve(state, cursor=cursor, next_time=at, missed=state.missed + missed, updated_at=now)
    return changed, act


def previous_run(state: ScheduleState) -> str | None:
    """The run whose being open the overlap policy asks about (None: it does not ask)."""
    if state.schedule.overlap == "allow":
        return None
    return state.last_run_id


def decide(state: ScheduleState, scheduled: int, previous_open: bool, *, advance: bool = True) -> Action:
    """The overlap policy applied to `scheduled` (a tick's time, or a trigger's when not
    `advance`), given whether the last run the schedule started is still open."""
    to = scheduled if advance else None
    overlap = state.schedule.overlap
    if overlap == "allow" or (not previous_open and state.buffered is None):
        return Action("start", scheduled, to)
    if overlap == "skip":
        return Action("skip", scheduled, to)
    if overlap == "cancel_previous":
        return Action("start", scheduled, to, cancel=state.last_run_id if previous_open else None)
    # buffer_one
    if not previous_open:
        assert state.buffered is not None
        # The held fire goes first; this one is held behind it.
        return Action("start", state.buffered, to, buffer=scheduled)
    if state.buffered is None:
        return Action("hold", scheduled, to)
    return Action("skip", scheduled, to)


def recheck(state: ScheduleState, previous_open: bool, now: int) -> tuple[ScheduleState, Action | None]:
    """The buffer timer came due: start the held fire once the last run closed, else look
    again later (the delay doubles with the wait, from 1 s up to `RECHECK_MAX_MS`)."""
    if state.buffered is None or state.paused:
        return state, None
    if not previous_open:
        return state, Action("start", state.buffered)
    since = state.buffered_since if state.buffered_since is not None else now
    delay = min(max(RECHECK_MIN_MS, (now - since) // 2), RECHECK_MAX_MS)
    return attrs.evolve(state, recheck_at=now + delay, armings=state.armings + 1, updated_at=now), None


def apply(
    state: ScheduleState,
    action: Action,
    now: int,
    run_id: str | None = None,
    error: str | None = None,
    *,
    counted: bool = True,
) -> ScheduleState:
    """The document once `action` was performed (`run_id`: the run started for it, or found
    started for that time before; `error`: why a start was refused, counted as skipped;
    `counted`: False when that run is already in `fired`, e.g. a backfill or a trigger started
    it, so `fired` stays the number of runs the schedule started)."""
    changes: dict[str, Any] = {"updated_at": now}
    if action.advance_to is not None and action.advance_to > state.cursor:
        changes["cursor"] = action.advance_to
        changes["next_time"] = _next(state.schedule, action.advance_to)
    buffered: int | None = state.buffered
    if action.kind == "start":
        if run_id is not None:
            changes.update(
                fired=state.fired + counted, last_time=action.scheduled, last_run_id=run_id, last_error=None
            )
        else:
            changes.update(skipped=state.skipped + 1, last_error=error)
        if buffered == action.scheduled:
            buffered = None
        if action.buffer is not None:
            buffered = action.buffer
    elif action.kind == "skip":
        changes["skipped"] = state.skipped + 1
    elif action.kind == "hold":
        buffered = action.scheduled
    if buffered != state.buffered:
        changes["buffered"] = buffered
        if buffered is None:
            changes.update(buffered_since=None, recheck_at=None)
        else:
            changes.update(buffered_since=now, recheck_at=now + RECHECK_MIN_MS, armings=state.armings + 1)
    return attrs.evolve(state, **changes)


def backfill_times(state: ScheduleState, start: int, end: int) -> list[int] | None:
    """Every scheduled time in `[start, end)`, in order, regardless of pause and of `startAt`
    and `endAt`; None when there are more than `BACKFILL_MAX`."""
    unbounded = attrs.evolve(state.schedule, start_at=None, end_at=None)
    times = unbounded.times(start - 1, end - 1, BACKFILL_MAX + 1)
    return None if len(times) > BACKFILL_MAX else times


# ------------------------------------------------------------------ the stored form

_STATE_FIELDS: Final = (
    "cursor",
    "next_time",
    "paused",
    "pause_reason",
    "fired",
    "skipped",
    "missed",
    "last_time",
    "last_run_id",
    "buffered",
    "buffered_since",
    "recheck_at",
    "armings",
    "last_error",
)


def state_to_dict(state: ScheduleState) -> dict[str, Any]:
    """The document's own fields (the definition and the row's columns aside)."""
    return {name: getattr(state, name) for name in _STATE_FIELDS}


def state_from_parts(
    app: str,
    name: str,
    document: dict[str, Any],
    fields: dict[str, Any],
    created_at: int,
    updated_at: int,
    version: int,
) -> ScheduleState:
    known = {k: v for k, v in fields.items() if k in _STATE_FIELDS}
    return ScheduleState(
        app=app,
        name=name,
        schedule=load_schedule(document),
        created_at=created_at,
        updated_at=updated_at,
        version=version,
        **known,
    )
