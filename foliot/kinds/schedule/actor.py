"""A schedule as a kind of actor: the pure schedule machine over the generic runtime.

Each schedule is an actor `sched:<app>:<name>`, partitioned like runs, the only writer of its
row. Its durable timers (`ScheduleState.timers`: the next fire, the buffered fire's recheck)
are rows of the shared `timers` table, so a fire survives a restart and, after an outage, the
wheel hands the overdue timer out at once and the machine's catch-up rules apply. A fire starts
its run through the run kind's `start` (given as a `RunStarter`, never imported: one kind never
imports another) with the fire record in the run's unit of work; a scheduled time that fired
before (`UniqueViolation("schedule_fire")`: a restart between the run's commit and the
schedule's, a trigger racing the clock, another node) answers with the run it started then.
A cron schedule's arithmetic runs in a worker thread (`offload.cron_work`), never on the loop.

The schedule's own commit follows the run's; each message is one commit of the schedule row
guarded by its version (a `StaleWrite` reloads it and handles the message again).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ...actors.messages import Envelope
from ...actors.runtime import Actor
from ...core.errors import (
    CommitInDoubt,
    CommitUnknown,
    Conflict,
    Fenced,
    NotFound,
    OverQuota,
    Refused,
    StaleWrite,
    StorageError,
    UniqueViolation,
)
from ...core.schedule import machine as sm
from ...core.schedule.definition import Schedule
from ...core.schedule.machine import Action, ScheduleState
from ...core.workflow.duration import format_timestamp
from ...core.workflow.machine import Cancel
from ...core.workflow.model import Run, ScheduleRef, Timer
from ...storage.schedules import ACTOR_KIND, ScheduleFire
from ..readback import read_back
from .offload import cron_work

if TYPE_CHECKING:
    from ..host import KindHost

log = logging.getLogger("foliot.schedule")


class RunStarter(Protocol):
    """What a schedule needs of the run kind (`kinds.run.service.Runs` is one)."""

    @property
    def kind(self) -> Any: ...

    async def start(
        self,
        *,
        app: str,
        workflow: str,
        version: int | None,
        input: Any,
        business_key: str | None,
        run_timeout_ms: int | None,
        idempotency_key: str | None,
        request_hash: str,
        render: Any,
        schedule: ScheduleRef | None = None,
        fire: ScheduleFire | None = None,
    ) -> tuple[dict[str, Any], bool]: ...


class ScheduleMeter(Protocol):
    """What the schedule kind counts (`foliot.observe.metrics.Metrics` is one)."""

    def schedule_counted(self, outcome: str, n: int = 1) -> None:
        """`fired`, `skipped` or `missed`."""
        ...


# ------------------------------------------------------------------ messages


@attrs.frozen
class Missing:
    """No such schedule (the actor's document until a PUT creates it)."""

    app: str
    name: str


Doc = ScheduleState | Missing


@attrs.frozen
class Fired:
    slot: str
    kind: str
    key: str


@attrs.frozen
class Put:
    schedule: Schedule
    paused: bool | None


@attrs.frozen
class Pause:
    reason: str | None


@attrs.frozen
class Unpause:
    reason: str | None


@attrs.frozen
class Trigger:
    reason: str | None = None


@attrs.frozen
class Backfill:
    start: int
    end: int


@attrs.frozen
class Delete:
    pass


def parse_actor_id(actor_id: str) -> tuple[str, str]:
    _, app, name = actor_id.split(":", 2)
    return app, name


def business_key(name: str, scheduled: int) -> str:
    """`schedule:<name>:<scheduled time, RFC 3339 UTC>`."""
    return f"schedule:{name}:{format_timestamp(scheduled)}"


class ScheduleKind:
    """`Kind[Doc]`: loads schedules, drives `core.schedule.machine`, starts runs, commits."""

    name = ACTOR_KIND

    def __init__(self, host: KindHost, runs: RunStarter, meter: ScheduleMeter | None = None) -> None:
        self.host = host
        self.runs = runs
        self.meter = meter

    # ------------------------------------------------------------------ Kind

    async def load(self, actor_id: str) -> Doc:
        app, name = parse_actor_id(actor_id)
        found = await self.host.store.get_schedule(app, name)
        return Missing(app, name) if found is None else found

    def timers(self, state: Doc) -> Sequence[tuple[str, Timer]]:
        return state.timers() if isinstance(state, ScheduleState) else ()

    def firing(self, slot: str, kind: str, key: str) -> Fired:
        return Fired(slot, kind, key)

    def fired(self, message: Any) -> tuple[str, str] | None:
        return (message.slot, message.key) if type(message) is Fired else None

    def parked(self, state: Doc) -> bool:
        return True  # nothing in flight between messages: its timers bring it back

    def is_open(self, state: Doc) -> bool:
        return isinstance(state, ScheduleState)

    def unknown(self, actor_id: str) -> Any:
        return NotFound(f"schedule {parse_actor_id(actor_id)[1]!r} not found")

    def persistent(self, message: Any) -> bool:
        return False

    async def give_up(self, actor: Actor[Doc], exc: Exception) -> None:
        log.error("schedule %s: its actor crashed repeatedly (%s); its timers retry it", actor.id, exc)

    def describe(self, actor: Actor[Doc]) -> dict[str, Any]:
        state = actor.state
        if not isinstance(state, ScheduleState):
            return {"schedule": None}
        return {
            "app": state.app,
            "schedule": state.name,
            "paused": state.paused,
            "nextTime": format_timestamp(state.next_time),
        }

    # ------------------------------------------------------------------ messages

    async def handle(self, actor: Actor[Doc], envelope: Envelope) -> bool:
        """One try; True when the schedule's commit met a StaleWrite (reload, handle again)."""
        msg, slot = envelope.message, envelope.reply
        state = actor.state
        assert state is not None
        now = self.host.clock.now()
        try:
            if isinstance(msg, Put):
                result: Any = await self._put(actor, state, msg, now)
            elif isinstance(state, Missing):
                if slot is not None:
                    slot.fail(NotFound(f"schedule {state.name!r} not found"))
                return False
            elif isinstance(msg, Fired):
                await self._fired(actor, state, msg, now)
                return False
            elif isinstance(msg, Pause):
                result = await self._commit(actor, state, sm.pause(state, msg.reason, now))
            elif isinstance(msg, Unpause):
                result = await self._commit(
                    actor, state, await cron_work(state.schedule, sm.unpause, state, now)
                )
            elif isinstance(msg, Trigger):
                result = await self._trigger(actor, state, msg, now)
            elif isinstance(msg, Backfill):
                result = await self._backfill(actor, state, msg)
            elif isinstance(msg, Delete):
                await self.host.shielded(
                    lambda: self.host.store.delete_schedule(state.app, state.name, state.version)
                )
                self.host.timers.sync(self.name, actor.id, state.timers(), ())
                actor.state = Missing(state.app, state.name)
                result = {"deleted": True}
            else:  # pragma: no cover - a bug: every message is handled above
                raise TypeError(f"unknown schedule message {type(msg).__name__}")
        except Fenced:
            raise
        except StaleWrite:
            return True
        except Refused as exc:
            if slot is not None:
                slot.fail(exc)
            return False
        if slot is not None:
            slot.put(result, actor.state)
        return False

    async def _commit(self, actor: Actor[Doc], before: Doc, after: ScheduleState) -> ScheduleState:
        """Write the schedule at its next version, then make the wheel's timers its own."""
        if after is before:
            return after
        expected = before.version if isinstance(before, ScheduleState) else None
        after = attrs.evolve(after, version=(expected or 0) + 1)
        try:
            await self.host.shielded(lambda: self.host.store.put_schedule(after, expected))
        except CommitUnknown as exc:
            if not await self._landed(actor, after, exc):
                raise  # not written: nothing changed
        actor.state = after
        old = before.timers() if isinstance(before, ScheduleState) else ()
        self.host.timers.sync(self.name, actor.id, old, after.timers())
        return after

    async def _landed(self, actor: Actor[Doc], after: ScheduleState, error: CommitUnknown) -> bool:
        """After a commit whose answer was lost: the schedule read back. True, it landed (go on
        as committed); False, it did not (the error stands). Unreadable, or the database
        perhaps still applying it: `CommitInDoubt`, the actor reads the schedule again at its
        next message, and the wheel is given `after`'s timers as well as the ones it holds
        (a timer that did not land fires stale and is dropped; one that landed is not missed:
        the wheel has paged its window already and would not read it again before a restart)."""
        read, stored = await read_back(lambda: self.host.store.get_schedule(after.app, after.name), error)
        if read:
            # One writer per schedule (its actor), and every commit moves the version.
            return stored is not None and stored.version == after.version
        self.host.timers.sync(self.name, actor.id, (), after.timers())
        actor.state = None
        raise CommitInDoubt()

    async def _put(self, actor: Actor[Doc], state: Doc, msg: Put, now: int) -> dict[str, Any]:
        if isinstance(state, Missing):
            fresh = await cron_work(
                msg.schedule, sm.create, state.app, state.name, msg.schedule, msg.paused, now
            )
            await self._commit(actor, state, fresh)
            return {"created": True}
        replaced = await cron_work(msg.schedule, sm.replace, state, msg.schedule, msg.paused, now)
        await self._commit(actor, state, replaced)
        return {"created": False}

    # ------------------------------------------------------------------ fires

    async def _fired(self, actor: Actor[Doc], state: ScheduleState, msg: Fired, now: int) -> None:
        limits = await self.host.directory.limits(state.app, self.host.settings)
        wait_s = self.host.admission.lanes.take(
            state.app,
            trio.current_time(),
            limits.internal_rate,
            limits.internal_burst,
            who=(actor.id, msg.slot, msg.key),
        )
        if wait_s > 0:
            # Not this app's turn yet (`actors/lanes.py`): the firing goes back to the wheel
            # for then, holding none of its firings in flight; nothing is committed.
            self.host.timers.defer(actor.id, msg.slot, msg.key, now + int(wait_s * 1000) + 1)
            return
        if msg.slot == "buffer":
            if state.buffered is None or msg.key != f"{state.buffered}#{state.armings}":
                return  # stale: settled as applied
            previous_open = await self._is_open(sm.previous_run(state))
            after, action = sm.recheck(state, previous_open, now)
            if action is not None:
                after, _, _ = await self._perform(after, action, now)
            await self._commit(actor, state, after)
            return
        after, at = await cron_work(state.schedule, sm.tick, state, now)  # counts after an outage
        if at is not None:
            action = sm.decide(after, at, await self._is_open(sm.previous_run(after)))
            after, _, _ = await self._perform(after, action, now)
        await self._commit(actor, state, after)
        if after.missed > state.missed:
            self._count("missed", after.missed - state.missed)
            log.info("schedule %s/%s: %d fires missed", state.app, state.name, after.missed - state.missed)

    async def _trigger(
        self, actor: Actor[Doc], state: ScheduleState, msg: Trigger, now: int
    ) -> dict[str, Any]:
        action = sm.decide(state, now, await self._is_open(sm.previous_run(state)), advance=False)
        after, run_id, _ = await self._perform(state, action, now, "trigger", msg.reason)
        await self._commit(actor, state, after)
        if action.kind == "skip":
            outcome = "skipped"
        elif action.kind == "hold" or action.buffer == now:
            outcome = "buffered"  # held until the previous run closes (the held one, if any, started)
        else:
            outcome = "started" if run_id is not None else "refused"
        return {
            "scheduledTime": format_timestamp(now),
            "outcome": outcome,
            "runId": run_id if outcome == "started" else None,
            "error": after.last_error if outcome == "refused" else None,
        }

    async def _backfill(self, actor: Actor[Doc], state: ScheduleState, msg: Backfill) -> dict[str, Any]:
        times = await cron_work(state.schedule, sm.backfill_times, state, msg.start, msg.end)
        assert times is not None  # the service bounded the range
        started: list[dict[str, Any]] = []
        already = 0
        fired = 0
        for at in times:
            run_id, was_new, _, error = await self._start(state, at, "backfill")
            if run_id is None:
                raise Conflict(f"backfill stopped at {format_timestamp(at)}: {error}", startedCount=fired)
            fired += was_new
            already += not was_new
            started.append({"scheduledTime": format_timestamp(at), "runId": run_id, "new": was_new})
        if fired:
            self._count("fired", fired)
            await self._commit(
                actor, state, attrs.evolve(state, fired=state.fired + fired, updated_at=self.host.clock.now())
            )
        return {"fires": started, "started": fired, "alreadyFired": already}

    async def _perform(
        self,
        state: ScheduleState,
        action: Action,
        now: int,
        source: str = "clock",
        reason: str | None = None,
    ) -> tuple[ScheduleState, str | None, bool]:
        """Perform `action` (cancel, start): (the document after it, the run started or found
        started for that time before, whether it is new). A start the engine cannot make now
        (starting up, storage down) raises, so nothing is committed and the timer is handed
        out again. `source` (`clock` or `trigger`) and a trigger's `reason` are recorded on
        the fire and its run."""
        if action.kind in ("skip", "hold"):
            if action.kind == "skip":
                self._count("skipped")
            return await cron_work(state.schedule, sm.apply, state, action, now), None, False
        if action.cancel is not None:
            self._cancel(state, action.cancel)
        run_id, was_new, counted, error = await self._start(state, action.scheduled, source, reason)
        if run_id is None:
            self._count("skipped")
            when = format_timestamp(action.scheduled)
            log.warning("schedule %s/%s: the fire of %s was refused: %s", state.app, state.name, when, error)
            after = await cron_work(state.schedule, sm.apply, state, action, now, None, error)
            return after, None, False
        if was_new:
            self._count("fired")
        after = await cron_work(
            state.schedule, partial(sm.apply, counted=counted), state, action, now, run_id
        )
        return after, run_id, was_new

    async def _start(
        self, state: ScheduleState, at: int, source: str, reason: str | None = None
    ) -> tuple[str | None, bool, bool, str | None]:
        """Start the run of scheduled time `at`: (its run id, whether it is new, whether it is
        to be counted in `fired` now, the refusal). A run found started before is counted
        only when the clock meets its own fire again (its start committed, the schedule's
        commit lost): a trigger's or a backfill's run was counted when it was started."""
        spec = state.schedule
        try:
            body, _ = await self.runs.start(
                app=state.app,
                workflow=spec.workflow,
                version=spec.version,
                input=spec.input,
                business_key=business_key(state.name, at),
                run_timeout_ms=None,
                idempotency_key=None,
                request_hash="",
                render=_run_id_of,
                schedule=ScheduleRef(state.name, at, reason),
                fire=ScheduleFire(state.app, state.name, at, "", self.host.clock.now(), source, reason),
            )
        except UniqueViolation as exc:
            if exc.constraint != "schedule_fire":
                raise
            found = await self.host.store.get_schedule_fire(state.app, state.name, at)
            if found is None:  # pragma: no cover - the unique key said it was there
                raise StorageError("a schedule fire vanished") from exc
            return found.run_id, False, source == "clock" and found.source == "clock", None
        except (NotFound, Conflict, OverQuota) as exc:  # refused: counted as skipped, not retried
            return None, False, False, exc.message
        return str(body["runId"]), True, True, None

    def _cancel(self, state: ScheduleState, run_id: str) -> None:
        """cancel_previous: tell the previous run to cancel (without waiting: it may live on
        another node); the new run starts at once."""
        reason = f"schedule {state.name!r}: cancel_previous"
        self.host.tell_or_retry(self.runs.kind, run_id, Envelope(Cancel(reason)))

    async def _is_open(self, run_id: str | None) -> bool:
        if run_id is None:
            return False
        run = await self.host.store.get_run(run_id)
        return run is not None and run.is_open

    def _count(self, outcome: str, n: int = 1) -> None:
        if self.meter is not None:
            self.meter.schedule_counted(outcome, n)


def _run_id_of(run: Run) -> dict[str, Any]:
    return {"runId": run.run_id}
