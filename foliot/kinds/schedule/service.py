"""The schedule kind's entry points: create or replace, pause, unpause, trigger, backfill,
delete (messages to the schedule's actor), and the reads the faces show.

Every write goes through the schedule's actor (`sched:<app>:<name>`), on the node that owns its
partition; on another node `check_local` raises `Elsewhere` and the HTTP face forwards the
request, as for a run's signal.
"""

from __future__ import annotations

from typing import Any, Final

from ...actors.messages import Envelope, ReplySlot
from ...actors.placement import check_local
from ...core.errors import InvalidRequest, QuotaExceeded, Unavailable
from ...core.schedule import machine as sm
from ...core.schedule.definition import Schedule
from ...core.schedule.machine import ScheduleState
from ...core.workflow.duration import format_timestamp as ts
from ...storage.schedules import FireView, actor_id
from ..host import KindHost
from .actor import Backfill, Delete, Pause, Put, RunStarter, ScheduleKind, ScheduleMeter, Trigger, Unpause
from .offload import app_load_of, cron_work, next_fires_of

NEXT_FIRES: Final = 5
LAST_FIRES: Final = 10


class Schedules:
    """Schedules on one node: the kind the runtime drives, and what the faces ask of it."""

    def __init__(self, host: KindHost, runs: RunStarter, meter: ScheduleMeter | None = None) -> None:
        self.host = host
        self.kind = ScheduleKind(host, runs, meter)

    def _check_ready(self) -> None:
        if not self.host.ready:
            raise Unavailable("the engine is starting; retry shortly")

    async def ask(self, app: str, name: str, message: Any) -> tuple[Any, Any]:
        """Send a message to the schedule's actor; (its answer, its document) once committed."""
        self._check_ready()
        actor = actor_id(app, name)
        check_local(self.host.placement, actor)  # owned elsewhere: the request is forwarded
        slot = ReplySlot()
        await self.host.supervisor.ask(self.kind, actor, Envelope(message, slot))
        reply = await slot.wait()
        return reply, slot.value

    async def _workflow_exists(self, app: str, schedule: Schedule) -> None:
        directory = self.host.directory
        if schedule.version is None:
            if await directory.latest_workflow(app, schedule.workflow) is None:
                raise InvalidRequest(f"no workflow {schedule.workflow!r} in this app", field="workflow")
        elif await directory.maybe_definition(app, schedule.workflow, schedule.version) is None:
            raise InvalidRequest(
                f"workflow {schedule.workflow!r} has no version {schedule.version}", field="version"
            )

    async def put(
        self, app: str, name: str, schedule: Schedule, paused: bool | None
    ) -> tuple[ScheduleState, bool]:
        """Create or replace a schedule: (its document, created)."""
        await self._workflow_exists(app, schedule)
        await self._within_quotas(app, name, schedule)
        reply, state = await self.ask(app, name, Put(schedule, paused))
        return state, bool(reply["created"])

    async def _within_quotas(self, app: str, name: str, schedule: Schedule) -> None:
        """The app's bounds (issue 37): at most `schedules_per_app` schedules, and all of them
        (paused ones too: an unpause is not checked) at most `schedule_fire_rate_per_app` fires
        per second together (each overridden by the app's limits, `schedules`,
        `scheduleFireRate`). A replace that does not raise the app's rate is always taken (the
        limit may have been lowered since). Checked here, not under a lock: two PUTs of one app
        at the same instant may each pass."""
        limits = await self.host.directory.limits(app, self.host.settings)
        documents = await self.host.store.schedule_documents(app)
        exists, others, rate, own = await app_load_of(documents, name)
        most = limits.schedules
        if not exists and others + 1 > most:
            setting = limits.setting("schedules")
            raise QuotaExceeded(
                f"the app has {others} schedules, its limit ({setting}) is {most}",
                field="name",
                limit=setting,
                max=most,
            )
        fastest = limits.schedule_fire_rate
        after = rate + schedule.fire_rate()
        if after > fastest * (1 + 1e-9) and after > rate + own:
            setting = limits.setting("scheduleFireRate")
            raise QuotaExceeded(
                f"the app's schedules would fire up to {after:.4g}/s together, its limit"
                f" ({setting}) is {fastest:g}/s",
                field="every" if schedule.every_ms is not None else "cron",
                limit=setting,
                max=fastest,
            )

    async def pause(self, app: str, name: str, reason: str | None) -> ScheduleState:
        _, state = await self.ask(app, name, Pause(reason))
        return state  # type: ignore[no-any-return]

    async def unpause(self, app: str, name: str, reason: str | None) -> ScheduleState:
        _, state = await self.ask(app, name, Unpause(reason))
        return state  # type: ignore[no-any-return]

    async def trigger(self, app: str, name: str, reason: str | None = None) -> dict[str, Any]:
        reply, _ = await self.ask(app, name, Trigger(reason))
        return reply  # type: ignore[no-any-return]

    async def backfill(self, app: str, name: str, start: int, end: int) -> dict[str, Any]:
        """Start a run for every scheduled time in `[start, end)`; 400 when there are more than
        `BACKFILL_MAX`."""
        state = await self.document(app, name)
        if (
            state is not None
            and await cron_work(state.schedule, sm.backfill_times, state, start, end) is None
        ):
            raise InvalidRequest(f"the range holds more than {sm.BACKFILL_MAX} scheduled times", field="to")
        reply, _ = await self.ask(app, name, Backfill(start, end))
        return reply  # type: ignore[no-any-return]

    async def delete(self, app: str, name: str) -> None:
        await self.ask(app, name, Delete())

    # ------------------------------------------------------------------ reads

    async def document(self, app: str, name: str) -> ScheduleState | None:
        """The freshest view: the live actor's document, else storage."""
        actor = self.host.supervisor.actors.get(actor_id(app, name))
        if actor is not None and isinstance(actor.state, ScheduleState):
            return actor.state
        return await self.host.store.get_schedule(app, name)

    async def last_fires(self, app: str, name: str) -> list[FireView]:
        return await self.host.store.last_schedule_fires(app, name, LAST_FIRES)

    async def next_fires(self, states: list[ScheduleState], count: int = NEXT_FIRES) -> list[list[int]]:
        """Each schedule's next `count` scheduled times, cron's computed off the event loop."""
        return await next_fires_of(states, count)

    async def view(self, state: ScheduleState, fires: list[FireView] | None = None) -> dict[str, Any]:
        """`schedule_view` with its next fires computed off the event loop."""
        (upcoming,) = await self.next_fires([state])
        return schedule_view(state, upcoming, fires)

    async def views(self, states: list[ScheduleState]) -> list[dict[str, Any]]:
        """A listing's views (a page of up to 1,000 schedules): the next fires off the loop."""
        upcoming = await self.next_fires(states)
        return [schedule_view(state, u) for state, u in zip(states, upcoming, strict=True)]


def schedule_view(
    state: ScheduleState, next_fires: list[int], fires: list[FireView] | None = None
) -> dict[str, Any]:
    """A schedule as the API shows it: its definition, its state, its next fires (computed by
    the caller: `Schedules.view`) and (for one) its last fires."""
    view: dict[str, Any] = {
        "name": state.name,
        "app": state.app,
        **{k: v for k, v in state.schedule.document.items()},
        "paused": state.paused,
        "pauseReason": state.pause_reason,
        "nextFires": [ts(at) for at in next_fires],
        "fired": state.fired,
        "skipped": state.skipped,
        "missed": state.missed,
        "buffered": ts(state.buffered),
        "lastError": state.last_error,
        "createdAt": ts(state.created_at),
        "updatedAt": ts(state.updated_at),
    }
    if fires is not None:
        view["lastFires"] = [
            {
                "scheduledTime": ts(f.fire.scheduled_time),
                "runId": f.fire.run_id,
                "firedAt": ts(f.fire.fired_at),
                "source": f.fire.source,
                "reason": f.fire.reason,
                "status": f.status,
            }
            for f in fires
        ]
    return view


__all__ = ["Schedules", "schedule_view"]
