"""The production store: PostgreSQL through asyncpg, driven from Trio by trio-asyncio.

One asyncio loop is opened around the store's life (`open_postgres`), and every unit of work
crosses into it exactly once (`_call`): the whole transaction runs on the asyncio side, so a
commit costs one crossing, not one per statement. Connection failures surface as
`StorageUnavailable` (the API answers 503 and changes nothing); the pool reconnects by itself
when the database returns.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, TypeVar

import asyncpg
import trio
import trio_asyncio

from ..errors import StaleWrite, StorageError, StorageUnavailable, UniqueViolation
from ..workflow.model import Event, Run, TaskRow, run_from_dict, run_to_dict
from .base import (
    ApiKeyRecord,
    AppRecord,
    IdempotencyRecord,
    RunFilter,
    SecretRecord,
    TimerRecord,
    UnitOfWork,
    WorkflowRecord,
    event_rows,
    idempotency_row,
    json_dumps,
    task_rows,
    timer_rows,
)

T = TypeVar("T")
log = logging.getLogger("foliot.storage.postgres")

_MIGRATION_LOCK = 0x0F0110_7  # pg_advisory_lock key: one migrator at a time
_UNAVAILABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    TimeoutError,
)


def _translate(exc: BaseException) -> StorageError:
    if isinstance(exc, asyncpg.UniqueViolationError):
        name = exc.constraint_name or ""
        if name == "runs_open_business_key":
            return UniqueViolation("business_key", str(exc))
        if name.startswith("idempotency"):
            return UniqueViolation("idempotency", str(exc))
        return UniqueViolation(name or "unique", str(exc))
    if isinstance(exc, _UNAVAILABLE):
        return StorageUnavailable(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, StorageError):
        return exc
    return StorageError(f"{type(exc).__name__}: {exc}")


class PostgresStore:
    """`Store` on PostgreSQL. Create with `open_postgres`."""

    def __init__(self, url: str, loop: Any) -> None:
        self.url = url
        self._loop = loop  # the trio-asyncio loop; explicit, so any Trio task may call in
        self._pool: asyncpg.Pool | None = None

    async def _call(
        self, fn: Callable[[asyncpg.Connection], Awaitable[T]], *, write: bool = False, limit_s: float = 10.0
    ) -> T:
        """Run `fn(conn)` on the asyncio side, in a transaction when it writes; one crossing.

        Bounded by `limit_s`: a database that stops answering is reported as unavailable
        instead of holding the caller, and the pool is rebuilt so no half-dead connection
        survives the outage.
        """

        async def inner() -> T:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self.url, min_size=1, max_size=10, timeout=5, command_timeout=limit_s
                )
            async with self._pool.acquire(timeout=5) as conn:
                if write:
                    async with conn.transaction():
                        return await fn(conn)
                return await fn(conn)

        try:
            with trio.fail_after(limit_s):
                result: T = await trio_asyncio.aio_as_trio(inner, loop=self._loop)()
            return result
        except StorageError:
            raise
        except trio.TooSlowError:
            self._reset_pool()
            raise StorageUnavailable(f"the database did not answer within {limit_s:.0f}s") from None
        except Exception as exc:
            error = _translate(exc)
            if isinstance(error, StorageUnavailable):
                self._reset_pool()
            raise error from exc

    def _reset_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()

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
        pool = self._pool
        self._pool = None
        if pool is not None:

            async def shut() -> None:
                await pool.close()

            with trio.move_on_after(5):
                await trio_asyncio.aio_as_trio(shut, loop=self._loop)()

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

        await self._call(apply)

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
        await self._call(lambda c: _apply_unit(c, unit), write=True)

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

    async def count_open_runs(self) -> dict[str, int]:
        rows = await self._call(
            lambda c: c.fetch("SELECT status, COUNT(*) AS n FROM runs WHERE is_open GROUP BY status")
        )
        return {r["status"]: r["n"] for r in rows}


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


async def _apply_unit(conn: asyncpg.Connection, unit: UnitOfWork) -> None:
    run = unit.run
    doc = json_dumps(run_to_dict(run))
    if unit.expected_seq is None:
        await conn.execute(
            "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at, seq, doc)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            run.run_id,
            run.app,
            run.workflow,
            run.status,
            run.business_key,
            run.is_open,
            run.created_at,
            run.seq,
            doc,
        )
    else:
        status = await conn.execute(
            "UPDATE runs SET status = $2, is_open = $3, seq = $4, doc = $5 WHERE run_id = $1 AND seq = $6",
            run.run_id,
            run.status,
            run.is_open,
            run.seq,
            doc,
            unit.expected_seq,
        )
        if status != "UPDATE 1":
            raise StaleWrite(f"run {run.run_id} changed underneath seq {unit.expected_seq}")
    if unit.events:
        await conn.executemany(
            "INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            event_rows(unit),
        )
    if unit.tasks:
        await conn.executemany(
            "INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status,"
            " close_reason, deadline, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
            " ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
            " close_reason = excluded.close_reason, deadline = excluded.deadline",
            task_rows(unit),
        )
    await conn.execute("DELETE FROM timers WHERE run_id = $1", run.run_id)
    timers = timer_rows(run)
    if timers:
        await conn.executemany(
            "INSERT INTO timers (run_id, slot, kind, key, due_at) VALUES ($1, $2, $3, $4, $5)", timers
        )
    if unit.idempotency is not None:
        await conn.execute(
            "INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            *idempotency_row(unit.idempotency),
        )


@asynccontextmanager
async def open_postgres(url: str) -> AsyncIterator[PostgresStore]:
    """Open the asyncio loop (one per process), connect, migrate; close all on exit."""
    async with trio_asyncio.open_loop() as loop:
        store = PostgresStore(url, loop)
        try:
            await store.connect()
            await store.migrate()
            yield store
        finally:
            with trio.CancelScope(shield=True):
                await store.close()
