"""`Store` on PostgreSQL through asyncpg: each method is one call across the bridge
(`bridge.py`) to the driver (`writer.py`), reads on a pool connection, writes group-committed.

The run store's methods are `SqlRunStore`'s (`storage/run_store.py`, the SQL both stores share);
this class gives them their primitives (`_one`, `_all`, `_transact`), and adds the SWF, cluster
and notification mixins, the migrations and the lifecycle (`open_postgres`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, TypeVar

import asyncpg
import trio

from ...core.errors import StorageError, StorageUnavailable
from ..base import UnitOfWork
from ..cluster import ClusterPostgres
from ..fence import Fence
from ..flow import FlowPostgres
from ..health import ProbePostgres
from ..notify import NotifyPostgres
from ..run_sql import POSTGRES
from ..run_store import SqlRunStore
from ..schedules import ScheduleSql
from ..sessions import SessionsPostgres
from ..sql import Kind, Tx, numbered
from ..swf_postgres import SwfPostgres
from .bridge import Bridge, LoopThread, TrioAsyncio, log_loop_error
from .writer import CONNECT_TIMEOUT_S, LIMIT_S, POOL_SIZE, WRITERS, Driver, translate

T = TypeVar("T")
log = logging.getLogger("foliot.storage.postgres")

_MIGRATION_LOCK = 0x0F0110_7  # pg_advisory_lock key: one migrator at a time


class PostgresStore(
    SqlRunStore,
    SwfPostgres,
    ClusterPostgres,
    NotifyPostgres,
    ProbePostgres,
    SessionsPostgres,
    ScheduleSql,
    FlowPostgres,
):
    """`Store` on PostgreSQL. Create with `open_postgres`."""

    dialect = POSTGRES

    def __init__(
        self,
        url: str,
        bridge: Bridge,
        *,
        pool_size: int = POOL_SIZE,
        writers: int = WRITERS,
        limit_s: float = LIMIT_S,
        session: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self._bridge = bridge
        self._limit_s = limit_s
        self._driver = Driver(url, pool_size, writers, limit_s, session)

    @property
    def pending_writes(self) -> int:
        """Units of work waiting for a group-commit writer (read by admission control and /metrics)."""
        return len(self._driver.queue)

    async def _call(
        self,
        fn: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        write: bool = False,
        limit_s: float | None = None,
        unit: UnitOfWork | None = None,
        fences: tuple[Fence, ...] = (),
        lane: bool = False,
    ) -> T:
        """Run `fn(conn)` on the asyncio side (in the group-committed transaction when it
        writes); one crossing. Bounded by `limit_s`, queueing for a connection included.
        A write with `fences` is refused (`Fenced`, nothing written) unless those leases hold.
        `lane`: on the lease keeper's own connection, outside the pool (`lane.py`)."""
        limit = self._limit_s if limit_s is None else limit_s
        driver = self._driver
        try:
            if write:
                return await self._bridge.run(lambda: driver.write(fn, limit, unit, fences), limit)
            if lane:
                return await self._bridge.run(lambda: driver.on_lane(fn, limit), limit)
            return await self._bridge.run(lambda: driver.read(fn, limit), limit)
        except StorageError:
            raise
        except trio.Cancelled:
            raise
        except BaseException as exc:  # whatever the driver threw: this caller's
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise translate(exc) from exc

    async def _on_loop(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T:
        """Run a coroutine of the driver's own on the asyncio side (`foliot.storage.notify`)."""
        return await self._bridge.run(make, limit_s)

    @property
    def stats(self) -> dict[str, int]:
        return {
            "batches": self._driver.batches,
            "units": self._driver.units,
            "units_together": self._driver.units_together,
        }

    async def start(self) -> None:
        await self._bridge.run(self._driver.start, CONNECT_TIMEOUT_S)

    async def connect(self, attempts: int = 30) -> None:
        """Wait for the database at start-up (it may still be booting)."""
        for attempt in range(attempts):
            try:
                await self.ping()
                return
            except StorageUnavailable as exc:
                if attempt == attempts - 1:
                    raise
                log.warning("PostgreSQL not reachable yet (%s); retrying", exc)
                await trio.sleep(1)

    async def close(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            try:
                await self._bridge.run(self._driver.close, 8)
            except StorageError as exc:
                log.warning("closing the store: %s", exc)

    async def ping(self) -> None:
        await self._call(lambda c: c.fetchval("SELECT 1"), limit_s=3.0)

    async def migrate(self) -> None:
        async def apply(conn: asyncpg.Connection) -> None:
            await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY)"
                )
                done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
                folder = resources.files("foliot.storage") / "migrations" / "postgres"
                for entry in sorted(folder.iterdir(), key=lambda e: e.name):
                    version = int(entry.name.split("_", 1)[0])
                    if version in done:
                        continue
                    async with conn.transaction():
                        await conn.execute(entry.read_text())
                        await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)

        await self._call(apply, limit_s=60.0)

    # ------------------------------------------------------------------ the run store's primitives

    async def _one(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> Any:
        text = numbered(sql)
        return await self._call(lambda c: c.fetchrow(text, *args))

    async def _all(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> list[Any]:
        text = numbered(sql)
        found: list[Any] = await self._call(lambda c: c.fetch(text, *args))
        return found

    async def _transact(self, make: Callable[[], Tx[T]], unit: UnitOfWork | None = None) -> T:
        """In the group-committed transaction; a unit of work is fenced by its leases."""
        fences = () if unit is None else unit.fences
        return await self._call(lambda c: run_tx(c, make()), write=True, unit=unit, fences=fences)


async def run_tx(conn: asyncpg.Connection, tx: Tx[T]) -> T:
    """Drive the transaction `tx` on `conn` (in the writer's transaction): each statement it
    yields is run (numbered, so asyncpg prepares it once) and its answer sent back."""
    answer: Any = None
    try:
        while True:
            op = tx.send(answer)
            kind, sql = op.kind, numbered(op.sql)
            if kind is Kind.CHANGE:
                status = await conn.execute(sql, *op.args)
                answer = int(status.rsplit(" ", 1)[-1])
            elif kind is Kind.ONE:
                answer = await conn.fetchrow(sql, *op.args)
            elif kind is Kind.ALL:
                answer = await conn.fetch(sql, *op.args)
            else:
                answer = await conn.executemany(sql, op.args)
    except StopIteration as stop:
        result: T = stop.value
        return result


@asynccontextmanager
async def open_postgres(
    url: str,
    *,
    bridge: str | None = None,
    pool_size: int = POOL_SIZE,
    writers: int = WRITERS,
    limit_s: float = LIMIT_S,
    session: Mapping[str, str] | None = None,
) -> AsyncIterator[PostgresStore]:
    """Start the driver's asyncio loop (its own thread, or trio-asyncio's), connect, migrate;
    close all on exit. Nothing from the asyncio side can escape from here. `session`: settings
    every connection of the pool starts with (`session_settings`)."""
    bridge = bridge or os.environ.get("FOLIOT_PG_BRIDGE", "thread")
    if bridge == "thread":
        loop_thread = LoopThread()
        try:
            async with _serve(url, loop_thread, pool_size, writers, limit_s, session) as store:
                yield store
        finally:
            with trio.CancelScope(shield=True):
                await loop_thread.stop()
    elif bridge == "trio-asyncio":
        import trio_asyncio

        async with trio_asyncio.open_loop() as loop:
            # As on the thread's loop: trio-asyncio's default handler would re-raise a driver
            # callback's error (a connection lost while connecting) into the loop's nursery.
            loop.set_exception_handler(log_loop_error)
            async with _serve(url, TrioAsyncio(loop), pool_size, writers, limit_s, session) as store:
                yield store
    else:
        raise ValueError(f"unknown bridge {bridge!r}")


@asynccontextmanager
async def _serve(
    url: str,
    bridge: Bridge,
    pool_size: int,
    writers: int,
    limit_s: float,
    session: Mapping[str, str] | None,
) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(
        url,
        bridge,
        pool_size=pool_size,
        writers=min(writers, pool_size),
        limit_s=limit_s,
        session=session,
    )
    try:
        await store.start()
        await store.connect()
        await store.migrate()
        yield store
    finally:
        await store.close()
