"""`Store` on PostgreSQL through asyncpg: each method is one call across the bridge
(`bridge.py`) to the driver (`writer.py`), reads on a pool connection, writes group-committed.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, TypeVar

import asyncpg
import attrs
import trio

from ...errors import StaleWrite, StorageError, StorageUnavailable
from ...workflow.model import Event, Run, TaskRow, run_from_dict
from ..base import (
    OVERDUE_SQL,
    PRUNE_EVENTS_PER_RUN,
    ApiKeyRecord,
    AppRecord,
    IdempotencyRecord,
    OverdueGroup,
    RunFilter,
    SecretRecord,
    TimerRecord,
    UnitOfWork,
    WorkflowRecord,
    prune_pick,
)
from ..cluster import ClusterPostgres
from ..console import OperatorTokenRecord, RunQuery, open_by_status, run_count_sql, run_query_sql
from ..fence import Fence
from ..keycheck import KeyCheckPostgres
from ..notify import NotifyPostgres
from ..swf_postgres import SwfPostgres
from .bridge import Bridge, LoopThread, TrioAsyncio, log_loop_error
from .units import apply_unit
from .writer import CONNECT_TIMEOUT_S, LIMIT_S, POOL_SIZE, WRITERS, Driver, translate

T = TypeVar("T")
log = logging.getLogger("foliot.storage.postgres")

_MIGRATION_LOCK = 0x0F0110_7  # pg_advisory_lock key: one migrator at a time


class PostgresStore(SwfPostgres, ClusterPostgres, KeyCheckPostgres, NotifyPostgres):
    """`Store` on PostgreSQL. Create with `open_postgres`."""

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
    ) -> T:
        """Run `fn(conn)` on the asyncio side (in the group-committed transaction when it
        writes); one crossing. Bounded by `limit_s`, queueing for a connection included.
        A write with `fences` is refused (`Fenced`, nothing written) unless those leases hold."""
        limit = self._limit_s if limit_s is None else limit_s
        driver = self._driver
        try:
            if write:
                return await self._bridge.run(lambda: driver.write(fn, limit, unit, fences), limit)
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

    # ------------------------------------------------------------------ apps

    async def put_app(
        self, name: str, handler_base_url: str, description: str | None, now: int
    ) -> tuple[AppRecord, bool]:
        async def fn(conn: asyncpg.Connection) -> tuple[AppRecord, bool]:
            row = await conn.fetchrow(
                "UPDATE apps SET handler_base_url = $2, description = $3, updated_at = $4"
                " WHERE name = $1 RETURNING *",
                name,
                handler_base_url,
                description,
                now,
            )
            if row is None:
                raise StaleWrite("app does not exist")
            return AppRecord(**dict(row)), False

        return await self._call(fn, write=True)

    async def create_app(self, app: AppRecord, key: ApiKeyRecord, secret: SecretRecord) -> bool:
        async def fn(conn: asyncpg.Connection) -> bool:
            status = await conn.execute(
                "INSERT INTO apps (name, handler_base_url, description, created_at, updated_at)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
                app.name,
                app.handler_base_url,
                app.description,
                app.created_at,
                app.updated_at,
            )
            if status.endswith(" 0"):
                return False
            await _insert_key(conn, key)
            await _insert_secret(conn, secret)
            return True

        return await self._call(fn, write=True)

    async def get_app(self, name: str) -> AppRecord | None:
        row = await self._call(lambda c: c.fetchrow("SELECT * FROM apps WHERE name = $1", name))
        return None if row is None else AppRecord(**dict(row))

    async def add_api_key(self, key: ApiKeyRecord) -> None:
        await self._call(lambda c: _insert_key(c, key), write=True)

    async def revoke_api_key(self, app: str, key_id: str, now: int) -> bool:
        status = await self._call(
            lambda c: c.execute(
                "UPDATE api_keys SET revoked_at = $3 WHERE app = $1 AND key_id = $2 AND revoked_at IS NULL",
                app,
                key_id,
                now,
            ),
            write=True,
        )
        return bool(status == "UPDATE 1")

    async def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        row = await self._call(lambda c: c.fetchrow("SELECT * FROM api_keys WHERE key_id = $1", key_id))
        return None if row is None else ApiKeyRecord(**dict(row))

    async def list_api_keys(self, app: str) -> list[ApiKeyRecord]:
        rows = await self._call(
            lambda c: c.fetch(
                "SELECT * FROM api_keys WHERE app = $1 AND revoked_at IS NULL ORDER BY created_at, key_id",
                app,
            )
        )
        return [ApiKeyRecord(**dict(r)) for r in rows]

    async def rotate_signing_secret(self, secret: SecretRecord, grace_until: int) -> None:
        async def fn(conn: asyncpg.Connection) -> None:
            await conn.execute(
                "UPDATE signing_secrets SET expires_at = $2 WHERE app = $1"
                " AND (expires_at IS NULL OR expires_at > $2)",
                secret.app,
                grace_until,
            )
            await _insert_secret(conn, secret)

        await self._call(fn, write=True)

    async def list_signing_secrets(self, app: str) -> list[SecretRecord]:
        rows = await self._call(
            lambda c: c.fetch(
                "SELECT * FROM signing_secrets WHERE app = $1 ORDER BY created_at, secret_id", app
            )
        )
        return [SecretRecord(**dict(r)) for r in rows]

    # ------------------------------------------------------------------ workflows

    async def add_workflow_version(
        self, app: str, name: str, document: str, now: int
    ) -> tuple[WorkflowRecord, bool]:
        async def fn(conn: asyncpg.Connection) -> tuple[WorkflowRecord, bool]:
            # Serialise registrations of one workflow so two can't both take version n+1.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"{app}/{name}")
            row = await conn.fetchrow(
                "SELECT * FROM workflows WHERE app = $1 AND name = $2 ORDER BY version DESC LIMIT 1",
                app,
                name,
            )
            if row is not None and row["document"] == document:
                return WorkflowRecord(**dict(row)), False
            version = 1 if row is None else row["version"] + 1
            await conn.execute(
                "INSERT INTO workflows (app, name, version, document, created_at)"
                " VALUES ($1, $2, $3, $4, $5)",
                app,
                name,
                version,
                document,
                now,
            )
            return WorkflowRecord(app, name, version, document, now), True

        return await self._call(fn, write=True)

    async def get_workflow(self, app: str, name: str, version: int | None) -> WorkflowRecord | None:
        if version is None:
            row = await self._call(
                lambda c: c.fetchrow(
                    "SELECT * FROM workflows WHERE app = $1 AND name = $2 ORDER BY version DESC LIMIT 1",
                    app,
                    name,
                )
            )
        else:
            row = await self._call(
                lambda c: c.fetchrow(
                    "SELECT * FROM workflows WHERE app = $1 AND name = $2 AND version = $3",
                    app,
                    name,
                    version,
                )
            )
        return None if row is None else WorkflowRecord(**dict(row))

    async def list_workflows(self, app: str, limit: int, after: str | None = None) -> list[WorkflowRecord]:
        rows = await self._call(
            lambda c: c.fetch(
                "SELECT DISTINCT ON (name) * FROM workflows WHERE app = $1 AND name > $2"
                " ORDER BY name, version DESC LIMIT $3",
                app,
                after or "",
                limit,
            )
        )
        return [WorkflowRecord(**dict(r)) for r in rows]

    # ------------------------------------------------------------------ runs

    async def commit(self, unit: UnitOfWork) -> None:
        await self._call(lambda c: apply_unit(c, unit), write=True, unit=unit, fences=unit.fences)

    async def get_run(self, run_id: str) -> Run | None:
        doc = await self._call(lambda c: c.fetchval("SELECT doc FROM runs WHERE run_id = $1", run_id))
        return None if doc is None else _run(doc)

    async def find_open_run(self, app: str, workflow: str, business_key: str) -> Run | None:
        doc = await self._call(
            lambda c: c.fetchval(
                "SELECT doc FROM runs WHERE app = $1 AND workflow = $2 AND business_key = $3 AND is_open",
                app,
                workflow,
                business_key,
            )
        )
        return None if doc is None else _run(doc)

    async def list_runs(self, flt: RunFilter, limit: int, after: tuple[int, str] | None) -> list[Run]:
        clauses, params = ["app = $1"], [flt.app]
        for column, value in (
            ("workflow", flt.workflow),
            ("status", flt.status),
            ("business_key", flt.business_key),
        ):
            if value is not None:
                params.append(value)
                clauses.append(f"{column} = ${len(params)}")
        args: list[Any] = list(params)
        if after is not None:
            args.extend(after)
            clauses.append(f"(created_at, run_id) < (${len(args) - 1}, ${len(args)})")
        args.append(limit)
        sql = (
            f"SELECT doc FROM runs WHERE {' AND '.join(clauses)}"
            f" ORDER BY created_at DESC, run_id DESC LIMIT ${len(args)}"
        )
        rows = await self._call(lambda c: c.fetch(sql, *args))
        return [_run(r["doc"]) for r in rows]

    async def list_events(self, run_id: str, after: int, limit: int) -> list[Event]:
        rows = await self._call(
            lambda c: c.fetch(
                "SELECT * FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                run_id,
                after,
                limit,
            )
        )
        return [
            Event(
                r["seq"], r["at"], r["generation"], r["type"], r["step"], r["attempt"], json.loads(r["data"])
            )
            for r in rows
        ]

    async def get_idempotency(self, app: str, key: str) -> IdempotencyRecord | None:
        row = await self._call(
            lambda c: c.fetchrow("SELECT * FROM idempotency WHERE app = $1 AND key = $2", app, key)
        )
        return None if row is None else IdempotencyRecord(**dict(row))

    async def signal_taken(self, run_id: str, signal_id: str) -> bool:
        found = await self._call(
            lambda c: c.fetchval(
                "SELECT 1 FROM signal_ids WHERE run_id = $1 AND signal_id = $2", run_id, signal_id
            )
        )
        return found is not None

    # ------------------------------------------------------------------ retention

    async def prune_closed_runs(self, closed_before: int, limit: int) -> int:
        async def fn(conn: asyncpg.Connection) -> int:
            # SKIP LOCKED: a run being reopened (rewind) right now is left for the next pass.
            candidates = await conn.fetch(
                "SELECT run_id, seq FROM runs WHERE NOT is_open AND closed_at < $1"
                " ORDER BY closed_at, run_id LIMIT $2 FOR UPDATE SKIP LOCKED",
                closed_before,
                limit,
            )
            ids = prune_pick([(r["run_id"], r["seq"]) for r in candidates], limit * PRUNE_EVENTS_PER_RUN)
            if not ids:
                return 0
            for table in ("events", "tasks", "timers", "signal_ids"):
                await conn.execute(f"DELETE FROM {table} WHERE run_id = ANY($1::text[])", ids)
            status = await conn.execute("DELETE FROM runs WHERE run_id = ANY($1::text[])", ids)
            return int(status.split()[-1])

        return await self._call(fn, write=True)

    async def prune_idempotency(self, created_before: int, limit: int) -> int:
        status = await self._call(
            lambda c: c.execute(
                "DELETE FROM idempotency WHERE (app, key) IN (SELECT app, key FROM idempotency"
                " WHERE created_at < $1 ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
                created_before,
                limit,
            ),
            write=True,
        )
        return int(status.split()[-1])

    # ------------------------------------------------------------------ tasks and timers

    async def get_task(self, token: str) -> TaskRow | None:
        row = await self._call(lambda c: c.fetchrow("SELECT * FROM tasks WHERE token = $1", token))
        return None if row is None else TaskRow(**dict(row))

    async def open_tasks(self) -> list[TaskRow]:
        rows = await self._call(
            lambda c: c.fetch("SELECT * FROM tasks WHERE status = 'open' ORDER BY created_at")
        )
        return [TaskRow(**dict(r)) for r in rows]

    async def timers_due_before(
        self, before: int, limit: int, after: tuple[int, str, str] | None = None
    ) -> list[TimerRecord]:
        if after is None:
            rows = await self._call(
                lambda c: c.fetch(
                    "SELECT * FROM timers WHERE due_at < $1 ORDER BY due_at, run_id, slot LIMIT $2",
                    before,
                    limit,
                )
            )
        else:
            rows = await self._call(
                lambda c: c.fetch(
                    "SELECT * FROM timers WHERE due_at < $1 AND (due_at, run_id, slot) > ($2, $3, $4)"
                    " ORDER BY due_at, run_id, slot LIMIT $5",
                    before,
                    *after,
                    limit,
                )
            )
        return [TimerRecord(**dict(r)) for r in rows]

    # ------------------------------------------------------------------ the operator console

    async def timers_for_run(self, run_id: str) -> list[TimerRecord]:
        rows = await self._call(
            lambda c: c.fetch("SELECT * FROM timers WHERE run_id = $1 ORDER BY slot", run_id)
        )
        return [TimerRecord(**dict(r)) for r in rows]

    async def count_timers(self, cap: int) -> int:
        n = await self._call(
            lambda c: c.fetchval("SELECT COUNT(*) FROM (SELECT 1 FROM timers LIMIT $1) t", cap)
        )
        return int(n)

    async def run_counts(self) -> dict[tuple[str, str], int]:
        rows = await self._call(
            lambda c: c.fetch("SELECT app, status, SUM(n) AS n FROM run_counts GROUP BY app, status")
        )
        return {(r["app"], r["status"]): int(r["n"]) for r in rows if r["n"]}

    async def query_runs(self, q: RunQuery, limit: int, after: tuple[int, str] | None) -> list[Run]:
        sql, params = run_query_sql(q, limit, after, postgres=True)
        rows = await self._call(lambda c: c.fetch(sql, *params))
        return [_run(r["doc"]) for r in rows]

    async def count_runs(self, q: RunQuery, cap: int) -> int:
        sql, params = run_count_sql(q, cap, postgres=True)
        n = await self._call(lambda c: c.fetchval(sql, *params))
        return int(n)

    async def add_operator_token(self, token: OperatorTokenRecord) -> None:
        await self._call(
            lambda c: c.execute(
                "INSERT INTO operator_tokens (token_id, name, role, secret_hash, created_at, revoked_at)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                *attrs.astuple(token),
            ),
            write=True,
        )

    async def get_operator_token(self, token_id: str) -> OperatorTokenRecord | None:
        row = await self._call(
            lambda c: c.fetchrow("SELECT * FROM operator_tokens WHERE token_id = $1", token_id)
        )
        return None if row is None else OperatorTokenRecord(**dict(row))

    async def list_operator_tokens(self) -> list[OperatorTokenRecord]:
        rows = await self._call(
            lambda c: c.fetch(
                "SELECT * FROM operator_tokens WHERE revoked_at IS NULL ORDER BY created_at, token_id"
            )
        )
        return [OperatorTokenRecord(**dict(r)) for r in rows]

    async def revoke_operator_token(self, token_id: str, now: int) -> bool:
        status = await self._call(
            lambda c: c.execute(
                "UPDATE operator_tokens SET revoked_at = $2 WHERE token_id = $1 AND revoked_at IS NULL",
                token_id,
                now,
            ),
            write=True,
        )
        return bool(status == "UPDATE 1")

    async def overdue_runs(self, since_before: int, limit: int) -> list[OverdueGroup]:
        sql = OVERDUE_SQL.format(true="TRUE", p1="$1", p2="$2")
        rows = await self._call(lambda c: c.fetch(sql, since_before, limit))
        return [
            OverdueGroup(r["app"], r["workflow"], r["current_step"], r["status"], r["n"], r["oldest"])
            for r in rows
        ]

    async def count_open_runs(self) -> dict[str, int]:
        return open_by_status(await self.run_counts())


def _run(doc: str) -> Run:
    return run_from_dict(json.loads(doc))


async def _insert_key(conn: asyncpg.Connection, key: ApiKeyRecord) -> None:
    await conn.execute(
        "INSERT INTO api_keys (key_id, app, secret_hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5)",
        key.key_id,
        key.app,
        key.secret_hash,
        key.created_at,
        key.revoked_at,
    )


async def _insert_secret(conn: asyncpg.Connection, secret: SecretRecord) -> None:
    await conn.execute(
        "INSERT INTO signing_secrets (secret_id, app, secret_enc, created_at, expires_at)"
        " VALUES ($1, $2, $3, $4, $5)",
        secret.secret_id,
        secret.app,
        secret.secret_enc,
        secret.created_at,
        secret.expires_at,
    )


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
