"""Flow control in the database (issue 23): an app's weight and rate limit (`app_flow`), and
the rate-limit buckets (`rate_buckets`), one statement set for both backends (`?` placeholders;
PostgreSQL runs them `numbered`).

A bucket's row is its theoretical arrival time (TAT) in epoch microseconds. Tokens are taken
only when sends go, and only while the bucket is free (`flow.take_tokens`): in one transaction,
each bucket's row is read and locked (created free if missing) in name order, then moved on, so
nodes of a cluster taking at once are ordered by the row's lock and never share a slot, and no
later slot is ever reserved (nothing to give back when a waiting send is dropped).
A bucket whose TAT passed is full again (as one never used), so the pruner deletes the ones idle
for a while (`prune_rate_buckets`, a bounded batch per statement).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import asyncpg
import attrs

from ..core.workflow.flow import take_tokens
from ..core.workflow.model import OPEN_STATUSES
from .pg_calls import PgCalls
from .sql import numbered

T = TypeVar("T")

GET_FLOW: Final = "SELECT app, weight, rate_limit, rate_period_ms, updated_at FROM app_flow WHERE app = ?"
PUT_FLOW: Final = (
    "INSERT INTO app_flow (app, weight, rate_limit, rate_period_ms, updated_at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (app) DO UPDATE SET weight = excluded.weight, rate_limit = excluded.rate_limit,"
    " rate_period_ms = excluded.rate_period_ms, updated_at = excluded.updated_at"
)
# Per-app limits (issue 37): an app's overrides as JSON (`core/limits.py`), none: its defaults.
GET_LIMITS: Final = "SELECT limits FROM app_limits WHERE app = ?"
PUT_LIMITS: Final = (
    "INSERT INTO app_limits (app, limits, updated_at) VALUES (?, ?, ?)"
    " ON CONFLICT (app) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at"
)
DROP_LIMITS: Final = "DELETE FROM app_limits WHERE app = ?"
# An app's open runs from the counters the `runs` triggers keep (`run_counts`, migration 0020):
# a read of at most (open statuses x shards) rows by primary key, never a scan of `runs`.
OPEN_RUNS: Final = "SELECT COALESCE(SUM(n), 0) FROM run_counts WHERE app = ? AND status IN ({})".format(
    ", ".join(f"'{status}'" for status in sorted(OPEN_STATUSES))
)
# args: bucket. Its TAT, its row locked until the transaction ends (created free, TAT 0, if
# missing: a row of a never-used bucket cannot be locked), so what is decided from it holds.
LOCK_BUCKET: Final = (
    "INSERT INTO rate_buckets (bucket, tat) VALUES (?, 0) ON CONFLICT (bucket) DO UPDATE SET"
    " tat = rate_buckets.tat RETURNING tat"
)
SET_BUCKET: Final = "UPDATE rate_buckets SET tat = ? WHERE bucket = ?"
GET_BUCKET: Final = "SELECT tat FROM rate_buckets WHERE bucket = ?"
# (idle_before, limit): buckets whose last slot ended before `idle_before`, the oldest first, at
# most `limit` (the `rate_buckets_by_tat` index, migration 0078). A bucket whose TAT passed is
# full again, exactly as a bucket never used: deleting it changes no send.
PRUNE_BUCKETS_SQLITE: Final = (
    "DELETE FROM rate_buckets WHERE bucket IN"
    " (SELECT bucket FROM rate_buckets WHERE tat < ? ORDER BY tat LIMIT ?) AND tat < ?"
)
# PostgreSQL: a bucket being moved on by a send's token right now is left for the next pass
# (SKIP LOCKED); one a token moved on meanwhile fails `tat < ?` again and stays.
PRUNE_BUCKETS_POSTGRES: Final = (
    "DELETE FROM rate_buckets WHERE bucket IN (SELECT bucket FROM rate_buckets WHERE tat < ?"
    " ORDER BY tat LIMIT ? FOR UPDATE SKIP LOCKED) AND tat < ?"
)


@attrs.frozen
class AppFlow:
    """What the admin set for an app's pushes (`PUT /apps/{app}` `weight`, `rateLimit`)."""

    app: str
    weight: int = 1
    rate_limit: int | None = None  # sends per `rate_period_ms`; None: no limit of its own
    rate_period_ms: int | None = None
    updated_at: int = 0


class FlowStore(Protocol):
    async def get_app_flow(self, app: str) -> AppFlow | None: ...

    async def put_app_flow(self, flow: AppFlow) -> None: ...

    async def get_app_limits(self, app: str) -> dict[str, int | float]:
        """The app's limit overrides (empty: none)."""
        ...

    async def put_app_limits(self, app: str, limits: Mapping[str, int | float], now: int) -> None:
        """Replace the app's overrides (empty: its row deleted)."""
        ...

    async def open_runs_of(self, app: str) -> int:
        """The app's open runs, from the `run_counts` counters (no scan)."""
        ...

    async def take_rate_tokens(
        self, buckets: Sequence[tuple[str, int]], count: int, now_us: int
    ) -> tuple[int, tuple[str, int] | None]:
        """Take up to `count` tokens of each `(bucket, interval_us)` that are free at `now_us`
        (`flow.take_tokens`): (how many, None); else nothing is taken: (0, (a bucket not free,
        its TAT in µs))."""
        ...

    async def rate_bucket(self, bucket: str) -> int | None:
        """A bucket's theoretical arrival time (µs), None when it was never used (or pruned)."""
        ...

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        """Delete up to `limit` buckets whose TAT is before `idle_before_us`; how many."""
        ...


def _limits(text: str) -> dict[str, int | float]:
    found = json.loads(text)
    return {str(k): v for k, v in found.items() if isinstance(v, int | float)}


def _take_sqlite(
    conn: sqlite3.Connection, buckets: Sequence[tuple[str, int]], count: int, now_us: int
) -> tuple[int, tuple[str, int] | None]:
    ordered = sorted(buckets)
    tats = [int(conn.execute(LOCK_BUCKET, (name,)).fetchone()[0]) for name, _ in ordered]
    granted, moved, busy = take_tokens(ordered, tats, count, now_us)
    for name, tat in moved:
        conn.execute(SET_BUCKET, (tat, name))
    return granted, busy


async def _take_postgres(
    conn: asyncpg.Connection, buckets: Sequence[tuple[str, int]], count: int, now_us: int
) -> tuple[int, tuple[str, int] | None]:
    ordered = sorted(buckets)  # name order: two takes of the same buckets lock them in one order
    tats = [int(await conn.fetchval(numbered(LOCK_BUCKET), name)) for name, _ in ordered]
    granted, moved, busy = take_tokens(ordered, tats, count, now_us)
    for name, tat in moved:
        await conn.execute(numbered(SET_BUCKET), tat, name)
    return granted, busy


class FlowSqlite:
    if TYPE_CHECKING:  # provided by SqliteStore

        async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
            raise NotImplementedError

        async def _read(self, fn: Callable[[sqlite3.Connection], T], *, scan: bool = False) -> T:
            raise NotImplementedError

    async def get_app_flow(self, app: str) -> AppFlow | None:
        row = await self._read(lambda c: c.execute(GET_FLOW, (app,)).fetchone())
        return None if row is None else AppFlow(*row)

    async def put_app_flow(self, flow: AppFlow) -> None:
        await self._write(lambda c: c.execute(PUT_FLOW, attrs.astuple(flow)))

    async def get_app_limits(self, app: str) -> dict[str, int | float]:
        row = await self._read(lambda c: c.execute(GET_LIMITS, (app,)).fetchone())
        return {} if row is None else _limits(row[0])

    async def put_app_limits(self, app: str, limits: Mapping[str, int | float], now: int) -> None:
        if not limits:
            await self._write(lambda c: c.execute(DROP_LIMITS, (app,)))
            return
        text = json.dumps(dict(limits), sort_keys=True)
        await self._write(lambda c: c.execute(PUT_LIMITS, (app, text, now)))

    async def open_runs_of(self, app: str) -> int:
        row = await self._read(lambda c: c.execute(OPEN_RUNS, (app,)).fetchone())
        return int(row[0])

    async def take_rate_tokens(
        self, buckets: Sequence[tuple[str, int]], count: int, now_us: int
    ) -> tuple[int, tuple[str, int] | None]:
        return await self._write(lambda c: _take_sqlite(c, buckets, count, now_us))

    async def rate_bucket(self, bucket: str) -> int | None:
        row = await self._read(lambda c: c.execute(GET_BUCKET, (bucket,)).fetchone())
        return None if row is None else int(row[0])

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        args = (idle_before_us, limit, idle_before_us)
        return int(await self._write(lambda c: c.execute(PRUNE_BUCKETS_SQLITE, args).rowcount))


class FlowPostgres(PgCalls):
    async def get_app_flow(self, app: str) -> AppFlow | None:
        row = await self._call(lambda c: c.fetchrow(numbered(GET_FLOW), app))
        return None if row is None else AppFlow(*row)

    async def put_app_flow(self, flow: AppFlow) -> None:
        await self._call(lambda c: c.execute(numbered(PUT_FLOW), *attrs.astuple(flow)), write=True)

    async def get_app_limits(self, app: str) -> dict[str, int | float]:
        text = await self._call(lambda c: c.fetchval(numbered(GET_LIMITS), app))
        return {} if text is None else _limits(str(text))

    async def put_app_limits(self, app: str, limits: Mapping[str, int | float], now: int) -> None:
        if not limits:
            await self._call(lambda c: c.execute(numbered(DROP_LIMITS), app), write=True)
            return
        text = json.dumps(dict(limits), sort_keys=True)
        await self._call(lambda c: c.execute(numbered(PUT_LIMITS), app, text, now), write=True)

    async def open_runs_of(self, app: str) -> int:
        value = await self._call(lambda c: c.fetchval(numbered(OPEN_RUNS), app))
        return int(value or 0)

    async def take_rate_tokens(
        self, buckets: Sequence[tuple[str, int]], count: int, now_us: int
    ) -> tuple[int, tuple[str, int] | None]:
        return await self._call(lambda c: _take_postgres(c, buckets, count, now_us), write=True)

    async def rate_bucket(self, bucket: str) -> int | None:
        value = await self._call(lambda c: c.fetchval(numbered(GET_BUCKET), bucket))
        return None if value is None else int(value)

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        sql = numbered(PRUNE_BUCKETS_POSTGRES)
        status = await self._call(lambda c: c.execute(sql, idle_before_us, limit, idle_before_us), write=True)
        return int(str(status).rsplit(" ", 1)[-1])
