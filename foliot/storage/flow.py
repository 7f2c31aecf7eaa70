"""Flow control in the database (issue 23): an app's weight and rate limit (`app_flow`), and
the rate-limit buckets (`rate_buckets`), one statement set for both backends (`?` placeholders;
PostgreSQL runs them `numbered`).

A bucket's row is its theoretical arrival time in epoch microseconds; taking `n` tokens is one
upsert, `tat = max(tat, now) + n * interval`, answered with the new value (`RETURNING`), so
nodes of a cluster reserving at once are ordered by the row's lock and never share a slot.
A bucket whose TAT passed is full again (as one never used), so the pruner deletes the ones idle
for a while (`prune_rate_buckets`, a bounded batch per statement).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import attrs

from .pg_calls import PgCalls
from .sql import numbered

T = TypeVar("T")

GET_FLOW: Final = "SELECT app, weight, rate_limit, rate_period_ms, updated_at FROM app_flow WHERE app = ?"
PUT_FLOW: Final = (
    "INSERT INTO app_flow (app, weight, rate_limit, rate_period_ms, updated_at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (app) DO UPDATE SET weight = excluded.weight, rate_limit = excluded.rate_limit,"
    " rate_period_ms = excluded.rate_period_ms, updated_at = excluded.updated_at"
)
# args: bucket, now + total, now, now, total
TAKE_TOKENS: Final = (
    "INSERT INTO rate_buckets (bucket, tat) VALUES (?, ?) ON CONFLICT (bucket) DO UPDATE SET"
    " tat = CASE WHEN rate_buckets.tat > ? THEN rate_buckets.tat ELSE ? END + ? RETURNING tat"
)
GET_BUCKET: Final = "SELECT tat FROM rate_buckets WHERE bucket = ?"
# (idle_before, limit): buckets whose last slot ended before `idle_before`, the oldest first, at
# most `limit` (the `rate_buckets_by_tat` index, migration 0078). A bucket whose TAT passed is
# full again, exactly as a bucket never used: deleting it changes no send.
PRUNE_BUCKETS_SQLITE: Final = (
    "DELETE FROM rate_buckets WHERE bucket IN"
    " (SELECT bucket FROM rate_buckets WHERE tat < ? ORDER BY tat LIMIT ?) AND tat < ?"
)
# PostgreSQL: a bucket being moved on by a reservation right now is left for the next pass
# (SKIP LOCKED); one its reservation moved on meanwhile fails `tat < ?` again and stays.
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

    async def take_rate_tokens(self, bucket: str, interval_us: int, count: int, now_us: int) -> int:
        """Reserve `count` slots of `bucket`; its new theoretical arrival time (µs)."""
        ...

    async def rate_bucket(self, bucket: str) -> int | None:
        """A bucket's theoretical arrival time (µs), None when it was never used (or pruned)."""
        ...

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        """Delete up to `limit` buckets whose TAT is before `idle_before_us`; how many."""
        ...


def _take_args(bucket: str, interval_us: int, count: int, now_us: int) -> tuple[object, ...]:
    total = interval_us * count
    return (bucket, now_us + total, now_us, now_us, total)


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

    async def take_rate_tokens(self, bucket: str, interval_us: int, count: int, now_us: int) -> int:
        args = _take_args(bucket, interval_us, count, now_us)
        return int(await self._write(lambda c: c.execute(TAKE_TOKENS, args).fetchone()[0]))

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

    async def take_rate_tokens(self, bucket: str, interval_us: int, count: int, now_us: int) -> int:
        args = _take_args(bucket, interval_us, count, now_us)
        return int(await self._call(lambda c: c.fetchval(numbered(TAKE_TOKENS), *args), write=True))

    async def rate_bucket(self, bucket: str) -> int | None:
        value = await self._call(lambda c: c.fetchval(numbered(GET_BUCKET), bucket))
        return None if value is None else int(value)

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        sql = numbered(PRUNE_BUCKETS_POSTGRES)
        status = await self._call(lambda c: c.execute(sql, idle_before_us, limit, idle_before_us), write=True)
        return int(str(status).rsplit(" ", 1)[-1])
