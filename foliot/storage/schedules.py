"""Schedules in the database (issue 22), one statement set for both backends.

A `schedules` row per (app, name), written only by the schedule's actor and guarded by its
`version` (`StaleWrite` when another writer moved it first); its durable timers are rows of the
shared `timers` table (actor kind `schedule`, the actor id `sched:<app>:<name>` in `run_id`),
derived from the document and written in the same transaction, as a run's are. The
`schedule_fires` rows are written by the run store's unit of work (`UnitOfWork.fire`), in the
transaction that inserts the fire's run: their key makes a scheduled time start one run, as
long as that run is kept (the pruner deletes a fire with its run, `run_sql.prune_runs_tx`).

Schedule rows carry no lease fence: their version guard already refuses a node that lost the
actor (its version is behind the new owner's first write), and the runs they start are fenced
by the runs' own partitions and made unique by the fire record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import attrs

from ..core.errors import StaleWrite
from ..core.schedule.machine import ScheduleState, state_from_parts, state_to_dict
from .sql import Tx, change, many, rows

if TYPE_CHECKING:
    from .base import UnitOfWork

T = TypeVar("T")

ACTOR_KIND: Final = "schedule"

_COLUMNS: Final = (
    "app, name, document, state, paused, pause_reason, fired, skipped, missed, last_time, last_run_id,"
    " version, created_at, updated_at"
)
INSERT: Final = (
    f"INSERT INTO schedules ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (app, name) DO NOTHING"
)
# (document, state, paused, pause_reason, fired, skipped, missed, last_time, last_run_id, version,
# updated_at, app, name, expected version)
UPDATE: Final = (
    "UPDATE schedules SET document = ?, state = ?, paused = ?, pause_reason = ?, fired = ?, skipped = ?,"
    " missed = ?, last_time = ?, last_run_id = ?, version = ?, updated_at = ?"
    " WHERE app = ? AND name = ? AND version = ?"
)
DELETE: Final = "DELETE FROM schedules WHERE app = ? AND name = ? AND version = ?"
GET: Final = f"SELECT {_COLUMNS} FROM schedules WHERE app = ? AND name = ?"
LIST: Final = f"SELECT {_COLUMNS} FROM schedules WHERE app = ? AND name > ? ORDER BY name LIMIT ?"
# (app, name, scheduled_time, limit): a page of fire records by key, each with whether its run
# is still kept (the pruner's sweep for records whose run went without them).
FIRES_PAGE: Final = (
    "SELECT f.app, f.name, f.scheduled_time, EXISTS (SELECT 1 FROM runs r WHERE r.run_id = f.run_id)"
    " FROM schedule_fires f WHERE (f.app, f.name, f.scheduled_time) > (?, ?, ?)"
    " ORDER BY f.app, f.name, f.scheduled_time LIMIT ?"
)
DELETE_ORPHAN_FIRE: Final = (
    "DELETE FROM schedule_fires WHERE app = ? AND name = ? AND scheduled_time = ?"
    " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = schedule_fires.run_id)"
)
FIRES_START: Final = ("", "", -1)  # before every key
# An app's definitions, for its quotas (`Schedules.put`): (name, document) of each.
DOCUMENTS: Final = "SELECT name, document FROM schedules WHERE app = ? ORDER BY name"
DELETE_TIMERS: Final = "DELETE FROM timers WHERE run_id = ?"
INSERT_TIMER: Final = (
    f"INSERT INTO timers (run_id, slot, kind, key, due_at, actor_kind) VALUES (?, ?, ?, ?, ?, '{ACTOR_KIND}')"
)
GET_FIRE: Final = (
    "SELECT app, name, scheduled_time, run_id, fired_at, source, reason FROM schedule_fires"
    " WHERE app = ? AND name = ? AND scheduled_time = ?"
)
# The last fires, newest scheduled time first, with their runs' statuses (NULL once pruned).
LAST_FIRES: Final = (
    "SELECT f.app, f.name, f.scheduled_time, f.run_id, f.fired_at, f.source, f.reason, r.status"
    " FROM schedule_fires f"
    " LEFT JOIN runs r ON r.run_id = f.run_id WHERE f.app = ? AND f.name = ?"
    " ORDER BY f.scheduled_time DESC LIMIT ?"
)


@attrs.frozen
class ScheduleFire:
    """A schedule's scheduled time and the one run it started (`schedule_fires`, unique per
    (app, schedule, time)): written in the same unit of work as that run's insert
    (`UnitOfWork.fire`)."""

    app: str
    name: str
    scheduled_time: int
    run_id: str
    fired_at: int
    source: str = "clock"  # what made it: `clock`, `trigger` or `backfill`
    reason: str | None = None  # a trigger's reason


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def actor_id(app: str, name: str) -> str:
    """The schedule's actor id (and its timers' `run_id`): names never hold a colon."""
    return f"sched:{app}:{name}"


@attrs.frozen
class FireView:
    """One fire as `GET …/schedules/{name}` lists it: the fire and its run's status now."""

    fire: ScheduleFire
    status: str | None  # None once the run was pruned


class ScheduleStore(Protocol):
    async def get_schedule(self, app: str, name: str) -> ScheduleState | None: ...

    async def list_schedules(self, app: str, limit: int, after: str | None = None) -> list[ScheduleState]: ...

    async def put_schedule(self, state: ScheduleState, expected_version: int | None) -> None:
        """Write the schedule (`state.version` is its new version) and make its timer rows its
        document's: inserted when `expected_version` is None, else updated where the row is at
        `expected_version`; `StaleWrite` when the row exists (insert) or moved on (update)."""
        ...

    async def delete_schedule(self, app: str, name: str, expected_version: int) -> None:
        """Delete the schedule and its timers (its fire records stay, each until its run is
        pruned); `StaleWrite` when it moved on or is gone."""
        ...

    async def schedule_documents(self, app: str) -> list[tuple[str, dict[str, Any]]]:
        """(name, definition document) of each of the app's schedules, by name."""
        ...

    async def prune_orphan_fires(
        self, after: tuple[str, str, int], limit: int
    ) -> tuple[int, tuple[str, str, int] | None]:
        """A page of up to `limit` fire records past key `after`: those whose run is gone
        (pruned before records went with their runs) deleted. (How many, the key to go on
        from; None at the end of the table.)"""
        ...

    async def get_schedule_fire(self, app: str, name: str, scheduled_time: int) -> ScheduleFire | None: ...

    async def last_schedule_fires(self, app: str, name: str, limit: int) -> list[FireView]: ...


def _row(state: ScheduleState) -> tuple[Any, ...]:
    return (
        _json(state.schedule.document),
        _json(state_to_dict(state)),
        state.paused,
        state.pause_reason,
        state.fired,
        state.skipped,
        state.missed,
        state.last_time,
        state.last_run_id,
        state.version,
        state.updated_at,
    )


def _state(row: Any) -> ScheduleState:
    return state_from_parts(
        row["app"],
        row["name"],
        json.loads(row["document"]),
        json.loads(row["state"]),
        row["created_at"],
        row["updated_at"],
        row["version"],
    )


def _fire(row: tuple[Any, ...]) -> ScheduleFire:
    app, name, scheduled_time, run_id, fired_at, source, reason = row
    return ScheduleFire(app, name, scheduled_time, run_id, fired_at, source or "clock", reason)


def sweep_fires_tx(after: tuple[str, str, int], limit: int) -> Tx[tuple[int, tuple[str, str, int] | None]]:
    found = yield rows(FIRES_PAGE, *after, limit)
    gone = [(r[0], r[1], r[2]) for r in found if not r[3]]
    if gone:
        yield many(DELETE_ORPHAN_FIRE, gone)
    last = found[-1] if len(found) == limit else None
    return len(gone), None if last is None else (last[0], last[1], last[2])


def put_tx(state: ScheduleState, expected_version: int | None) -> Tx[None]:
    values = _row(state)
    if expected_version is None:
        doc, st, paused, reason, fired, skipped, missed, last_time, last_run, version, updated = values
        done = yield change(
            INSERT,
            state.app,
            state.name,
            doc,
            st,
            paused,
            reason,
            fired,
            skipped,
            missed,
            last_time,
            last_run,
            version,
            state.created_at,
            updated,
        )
        if done != 1:
            raise StaleWrite(f"schedule {state.name!r} exists already")
    else:
        done = yield change(UPDATE, *values, state.app, state.name, expected_version)
        if done != 1:
            raise StaleWrite(f"schedule {state.name!r} changed underneath version {expected_version}")
    owner = actor_id(state.app, state.name)
    if expected_version is not None:
        yield change(DELETE_TIMERS, owner)
    timers = [(owner, slot, t.kind, t.key, t.due) for slot, t in state.timers()]
    if timers:
        yield many(INSERT_TIMER, timers)


def delete_tx(app: str, name: str, expected_version: int) -> Tx[None]:
    done = yield change(DELETE, app, name, expected_version)
    if done != 1:
        raise StaleWrite(f"schedule {name!r} changed underneath version {expected_version}")
    yield change(DELETE_TIMERS, actor_id(app, name))


class ScheduleSql:
    """`ScheduleStore` on the run store's primitives (both backends provide them)."""

    if TYPE_CHECKING:  # provided by each backend

        async def _one(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> Any:
            raise NotImplementedError

        async def _all(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> list[Any]:
            raise NotImplementedError

        async def _transact(self, make: Callable[[], Tx[T]], unit: UnitOfWork | None = None) -> T:
            raise NotImplementedError

    async def get_schedule(self, app: str, name: str) -> ScheduleState | None:
        row = await self._one(GET, (app, name))
        return None if row is None else _state(row)

    async def list_schedules(self, app: str, limit: int, after: str | None = None) -> list[ScheduleState]:
        return [_state(r) for r in await self._all(LIST, (app, after or "", limit), scan=True)]

    async def put_schedule(self, state: ScheduleState, expected_version: int | None) -> None:
        await self._transact(partial(put_tx, state, expected_version))

    async def delete_schedule(self, app: str, name: str, expected_version: int) -> None:
        await self._transact(partial(delete_tx, app, name, expected_version))

    async def schedule_documents(self, app: str) -> list[tuple[str, dict[str, Any]]]:
        return [(r["name"], json.loads(r["document"])) for r in await self._all(DOCUMENTS, (app,), scan=True)]

    async def prune_orphan_fires(
        self, after: tuple[str, str, int], limit: int
    ) -> tuple[int, tuple[str, str, int] | None]:
        return await self._transact(partial(sweep_fires_tx, after, limit))

    async def get_schedule_fire(self, app: str, name: str, scheduled_time: int) -> ScheduleFire | None:
        row = await self._one(GET_FIRE, (app, name, scheduled_time))
        return None if row is None else _fire(tuple(row))

    async def last_schedule_fires(self, app: str, name: str, limit: int) -> list[FireView]:
        found = await self._all(LAST_FIRES, (app, name, limit), scan=True)
        return [FireView(_fire(tuple(r)[:7]), r["status"]) for r in found]
