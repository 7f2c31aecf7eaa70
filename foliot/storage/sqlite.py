"""The embedded default store: stdlib sqlite3 in WAL mode.

Writes go through one writer thread that takes every unit of work queued while the previous
batch was committing and commits them together (group commit), each inside its own SAVEPOINT
so one refused write does not sink its neighbours. The thread is Foliot's own (fed by a
`queue.SimpleQueue`, answering through the Trio token): a `trio.to_thread` crossing costs
about twice the CPU of this hand-off, and a signal commits twice. With `inline=True` (tests
under a mock clock) the SQL runs on the Trio thread instead, so virtual time cannot jump while
a statement is in flight.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from ..core.errors import StaleWrite, StorageError, StorageUnavailable, UniqueViolation
from ..core.workflow.model import Event, Run, TaskRow, run_from_dict
from . import checkpoint
from .base import (
    OVERDUE_SQL,
    PRUNE_EVENTS_PER_RUN,
    SIGNAL_ID_UNIQUE,
    ApiKeyRecord,
    AppRecord,
    IdempotencyRecord,
    OverdueGroup,
    RunFilter,
    SecretRecord,
    TimerRecord,
    UnitOfWork,
    WorkflowRecord,
    event_rows,
    idempotency_row,
    prune_pick,
    run_row,
    search_columns,
    signal_id_rows,
    step_columns,
    task_rows,
    timer_rows,
)
from .batch import batch_rows, chunks
from .checkpoint import BACKSTOP_PAGES, JOURNAL_SIZE_LIMIT, Checkpointer
from .console import OperatorTokenRecord, RunQuery, open_by_status, run_count_sql, run_query_sql
from .health import ProbeSqlite
from .keycheck import KeyCheckSqlite
from .sessions import SessionsSqlite
from .swf_sqlite import SwfSqlite

T = TypeVar("T")
log = logging.getLogger("foliot.storage")
_BATCH_MAX = 256
_QUEUE_MAX = 10_000  # writes queued for the writer thread; more wait for room
_CLOSE_GRACE_S = 10.0


@attrs.define
class _Job:
    fn: Callable[[sqlite3.Connection], Any]
    done: trio.Event = attrs.Factory(trio.Event)
    result: Any = None
    error: BaseException | None = None
    unit: UnitOfWork | None = None  # a commit: written with the batch's other units at once


def _create_private(path: str) -> None:
    """Create the database file mode 0600 before SQLite opens it: SQLite gives its -wal and
    -shm files the database file's permissions, so they are private too."""
    if path == ":memory:":
        return
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _translate(exc: sqlite3.Error) -> StorageError:
    if isinstance(exc, sqlite3.IntegrityError):
        text = str(exc)
        if "runs.app, runs.workflow, runs.business_key" in text:
            return UniqueViolation("business_key", text)
        if "idempotency" in text:
            return UniqueViolation("idempotency", text)
        if "signal_ids." in text:
            return UniqueViolation(SIGNAL_ID_UNIQUE, text)
        return UniqueViolation("unique", text)
    if isinstance(exc, sqlite3.OperationalError):
        return StorageUnavailable(str(exc))
    return StorageError(str(exc))


class SqliteStore(SwfSqlite, KeyCheckSqlite, ProbeSqlite, SessionsSqlite):
    """`Store` on one SQLite file (or `:memory:` for tests)."""

    def __init__(self, path: str, *, inline: bool = False) -> None:
        self.path = path
        self.inline = inline
        _create_private(path)
        self._writer = _connect(path)
        # Checkpoints run in a thread of their own (`checkpoint.py`); the writer's commits only
        # do one past the backstop. Not for `:memory:` (no log) or an inline store (tests).
        self._checkpointer: Checkpointer | None = None
        if not inline and path != ":memory:":
            self._checkpointer = Checkpointer(lambda: _connect(path), checkpoint.INTERVAL_S)
            self._writer.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
            self._writer.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        # A second connection lets readers go on while a batch commits (WAL); `:memory:` has
        # one database per connection, so there the writer's connection serves reads too.
        self._reader = self._writer if inline or path == ":memory:" else _connect(path)
        self._read_limiter = trio.CapacityLimiter(1)
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()  # None: stop
        self._room = trio.Semaphore(_QUEUE_MAX)
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.batches = 0
        self.committed = 0
        self.units_together = 0  # units written by the batch's set statements (not one by one)

    @property
    def pending_writes(self) -> int:
        """Units of work waiting for the writer (read by admission control)."""
        return self.writer_queue + self.writer_blocked

    @property
    def writer_queue(self) -> int:
        """Writes queued for the writer thread and not yet taken by it."""
        return self._jobs.qsize()

    @property
    def wal_checkpoints(self) -> int:
        """Checkpoints the checkpoint thread has run."""
        return 0 if self._checkpointer is None else self._checkpointer.checkpoints

    @property
    def writer_blocked(self) -> int:
        """Callers waiting for room because `_QUEUE_MAX` writes are queued."""
        return self._room.statistics().tasks_waiting

    # ------------------------------------------------------------------ plumbing

    def start_writer(self) -> None:
        """Start the writer thread (from the Trio thread: it answers through its token); an
        inline store writes on the Trio thread and needs none."""
        if self.inline:
            return
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._write_loop, name="foliot-sqlite-writer", daemon=True)
        self._thread.start()
        if self._checkpointer is not None:
            self._checkpointer.start()

    async def stop_writer(self, grace_s: float) -> bool:
        """Let the writer finish what is queued, then stop it; False when it did not end within
        `grace_s` (a batch stuck in SQLite: its connection must then be left open)."""
        thread = self._thread
        if thread is None:
            return True
        self._jobs.put(None)
        with trio.move_on_after(grace_s):
            await trio.to_thread.run_sync(thread.join, abandon_on_cancel=True)
            if self._checkpointer is not None:  # a checkpoint under way ends first
                await trio.to_thread.run_sync(self._checkpointer.stop, grace_s, abandon_on_cancel=True)
        return not thread.is_alive()

    def _write_loop(self) -> None:
        """The writer thread: take what queued, commit it as one batch, answer in Trio."""
        jobs = self._jobs
        token = self._token
        assert token is not None
        while True:
            first = jobs.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < _BATCH_MAX:
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
            self._commit_batch(batch)
            if self._checkpointer is not None:
                self._checkpointer.committed()
            try:
                token.run_sync_soon(self._finished, batch)
            except trio.RunFinishedError:
                return
            if stop:
                return

    def _finished(self, batch: list[_Job]) -> None:
        for job in batch:
            job.done.set()
            self._room.release()

    def _commit_batch(self, batch: list[_Job]) -> None:
        """Commit `batch` in one transaction. Never raises: whatever goes wrong becomes the error
        of the job it belongs to (or of every job, when the transaction itself fails), so the
        writer task outlives any job (a RecursionError or a UnicodeEncodeError in one job's
        document conversion included)."""
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for job in batch:
                job.error = _translate(exc)
            return
        try:
            # The batch's units of work first, all together; if the set is refused (a stale
            # write, a taken business key, ...), one by one below, so only the culprit fails.
            units = [job.unit for job in batch if job.unit is not None]
            one_by_one, together = batch, 0
            if units and len(units) == len(batch):
                # Units only (the common batch): no savepoint around the set (two statements,
                # each a GIL hand-over, saved); refused, the transaction starts over one by one.
                try:
                    _apply_units(conn, units)
                    together, one_by_one = len(units), []
                except Exception:
                    conn.execute("ROLLBACK")
                    conn.execute("BEGIN IMMEDIATE")
            elif units:
                conn.execute("SAVEPOINT units")
                try:
                    _apply_units(conn, units)
                    conn.execute("RELEASE units")
                    together = len(units)
                    one_by_one = [job for job in batch if job.unit is None]
                except Exception:
                    conn.execute("ROLLBACK TO units")
                    conn.execute("RELEASE units")
            for i, job in enumerate(one_by_one):
                conn.execute(f"SAVEPOINT j{i}")
                try:
                    job.result = job.fn(conn)
                    conn.execute(f"RELEASE j{i}")
                except Exception as exc:  # this job's error; its neighbours go on
                    conn.execute(f"ROLLBACK TO j{i}")
                    conn.execute(f"RELEASE j{i}")
                    job.error = _translate(exc) if isinstance(exc, sqlite3.Error) else exc
            conn.execute("COMMIT")
        except Exception as exc:  # the transaction itself failed: nothing of the batch is kept
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            error = _translate(exc) if isinstance(exc, sqlite3.Error) else StorageError(repr(exc))
            for job in batch:
                job.result, job.error = None, error
            return
        self.batches += 1
        self.committed += len(batch)
        self.units_together += together

    async def _write(self, fn: Callable[[sqlite3.Connection], T], unit: UnitOfWork | None = None) -> T:
        job = _Job(fn, unit=unit)
        if self.inline:
            self._commit_batch([job])
        else:
            await self._room.acquire()
            self._jobs.put(job)  # from here on the writer answers it, even if we are cancelled
            await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    async def _read(self, fn: Callable[[sqlite3.Connection], T], *, scan: bool = False) -> T:
        """Point reads by key run on the Trio thread: in WAL mode they never wait for the writer
        and cost less than a thread hop. Scans (lists, recovery) go to the reader thread."""
        try:
            if self.inline or not scan:
                await trio.lowlevel.checkpoint()
                return fn(self._reader)
            return await trio.to_thread.run_sync(fn, self._reader, limiter=self._read_limiter)
        except sqlite3.Error as exc:
            raise _translate(exc) from exc

    async def migrate(self) -> None:
        def apply(conn: sqlite3.Connection) -> None:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)")
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            folder = resources.files("foliot.storage") / "migrations" / "sqlite"
            for entry in sorted(folder.iterdir(), key=lambda e: e.name):
                version = int(entry.name.split("_", 1)[0])
                if version in done:
                    continue
                for statement in _statements(entry.read_text()):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations (version) VALUES (?)", (version,))

        await self._write(apply)

    async def ping(self) -> None:
        await self._read(lambda conn: conn.execute("SELECT 1").fetchone())

    async def close(self) -> None:
        """Close the connections. Call only once the writer thread has ended (`open_sqlite`
        does): closing a connection a thread is still using crashes the process."""
        if self._thread is None or not self._thread.is_alive():
            self._writer.close()
        if self._reader is not self._writer:
            self._reader.close()

    # ------------------------------------------------------------------ apps

    async def put_app(
        self, name: str, handler_base_url: str, description: str | None, now: int
    ) -> tuple[AppRecord, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[AppRecord, bool]:
            row = conn.execute("SELECT * FROM apps WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise StaleWrite("app does not exist")
            conn.execute(
                "UPDATE apps SET handler_base_url = ?, description = ?, updated_at = ? WHERE name = ?",
                (handler_base_url, description, now, name),
            )
            return AppRecord(name, handler_base_url, description, row["created_at"], now), False

        return await self._write(fn)

    async def create_app(self, app: AppRecord, key: ApiKeyRecord, secret: SecretRecord) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT OR IGNORE INTO apps (name, handler_base_url, description, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (app.name, app.handler_base_url, app.description, app.created_at, app.updated_at),
            )
            if cur.rowcount == 0:
                return False
            _insert_key(conn, key)
            _insert_secret(conn, secret)
            return True

        return await self._write(fn)

    async def get_app(self, name: str) -> AppRecord | None:
        row = await self._read(lambda c: c.execute("SELECT * FROM apps WHERE name = ?", (name,)).fetchone())
        return None if row is None else AppRecord(**dict(row))

    async def add_api_key(self, key: ApiKeyRecord) -> None:
        await self._write(lambda c: _insert_key(c, key))

    async def revoke_api_key(self, app: str, key_id: str, now: int) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE app = ? AND key_id = ? AND revoked_at IS NULL",
                (now, app, key_id),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        row = await self._read(
            lambda c: c.execute("SELECT * FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        )
        return None if row is None else ApiKeyRecord(**dict(row))

    async def list_api_keys(self, app: str) -> list[ApiKeyRecord]:
        rows = await self._read(
            lambda c: c.execute(
                "SELECT * FROM api_keys WHERE app = ? AND revoked_at IS NULL ORDER BY created_at, key_id",
                (app,),
            ).fetchall()
        )
        return [ApiKeyRecord(**dict(r)) for r in rows]

    async def rotate_signing_secret(self, secret: SecretRecord, grace_until: int) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE signing_secrets SET expires_at = ? WHERE app = ?"
                " AND (expires_at IS NULL OR expires_at > ?)",
                (grace_until, secret.app, grace_until),
            )
            _insert_secret(conn, secret)

        await self._write(fn)

    async def list_signing_secrets(self, app: str) -> list[SecretRecord]:
        rows = await self._read(
            lambda c: c.execute(
                "SELECT * FROM signing_secrets WHERE app = ? ORDER BY created_at, secret_id", (app,)
            ).fetchall()
        )
        return [SecretRecord(**dict(r)) for r in rows]

    # ------------------------------------------------------------------ workflows

    async def add_workflow_version(
        self, app: str, name: str, document: str, now: int
    ) -> tuple[WorkflowRecord, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[WorkflowRecord, bool]:
            row = conn.execute(
                "SELECT * FROM workflows WHERE app = ? AND name = ? ORDER BY version DESC LIMIT 1",
                (app, name),
            ).fetchone()
            if row is not None and row["document"] == document:
                return WorkflowRecord(**dict(row)), False
            version = 1 if row is None else row["version"] + 1
            conn.execute(
                "INSERT INTO workflows (app, name, version, document, created_at) VALUES (?, ?, ?, ?, ?)",
                (app, name, version, document, now),
            )
            return WorkflowRecord(app, name, version, document, now), True

        return await self._write(fn)

    async def get_workflow(self, app: str, name: str, version: int | None) -> WorkflowRecord | None:
        def fn(conn: sqlite3.Connection) -> Any:
            if version is None:
                return conn.execute(
                    "SELECT * FROM workflows WHERE app = ? AND name = ? ORDER BY version DESC LIMIT 1",
                    (app, name),
                ).fetchone()
            return conn.execute(
                "SELECT * FROM workflows WHERE app = ? AND name = ? AND version = ?",
                (app, name, version),
            ).fetchone()

        row = await self._read(fn)
        return None if row is None else WorkflowRecord(**dict(row))

    async def list_workflows(self, app: str, limit: int, after: str | None = None) -> list[WorkflowRecord]:
        rows = await self._read(
            lambda c: c.execute(
                "SELECT w.* FROM workflows w JOIN (SELECT name, MAX(version) AS v FROM workflows"
                " WHERE app = ? AND name > ? GROUP BY name) latest"
                " ON w.name = latest.name AND w.version = latest.v"
                " WHERE w.app = ? ORDER BY w.name LIMIT ?",
                (app, after or "", app, limit),
            ).fetchall(),
            scan=True,
        )
        return [WorkflowRecord(**dict(r)) for r in rows]

    # ------------------------------------------------------------------ runs

    async def commit(self, unit: UnitOfWork) -> None:
        await self._write(lambda conn: _apply_unit(conn, unit), unit)

    async def get_run(self, run_id: str) -> Run | None:
        row = await self._read(
            lambda c: c.execute("SELECT doc FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        )
        return None if row is None else _run(row["doc"])

    async def find_open_run(self, app: str, workflow: str, business_key: str) -> Run | None:
        row = await self._read(
            lambda c: c.execute(
                "SELECT doc FROM runs WHERE app = ? AND workflow = ? AND business_key = ? AND is_open = 1",
                (app, workflow, business_key),
            ).fetchone()
        )
        return None if row is None else _run(row["doc"])

    async def list_runs(self, flt: RunFilter, limit: int, after: tuple[int, str] | None) -> list[Run]:
        clauses, params = ["app = ?"], [flt.app]
        for column, value in (
            ("workflow", flt.workflow),
            ("status", flt.status),
            ("business_key", flt.business_key),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if after is not None:
            # Row-value form: SQLite walks the index from the cursor (the OR form read every row
            # before it; see storage/console.py).
            clauses.append("(created_at, run_id) < (?, ?)")
            params.extend([after[0], after[1]])  # type: ignore[list-item]
        sql = (
            f"SELECT doc FROM runs WHERE {' AND '.join(clauses)}"
            " ORDER BY created_at DESC, run_id DESC LIMIT ?"
        )
        rows = await self._read(lambda c: c.execute(sql, (*params, limit)).fetchall(), scan=True)
        return [_run(r["doc"]) for r in rows]

    async def list_events(self, run_id: str, after: int, limit: int) -> list[Event]:
        rows = await self._read(
            lambda c: c.execute(
                "SELECT * FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, after, limit),
            ).fetchall(),
            scan=True,
        )
        return [
            Event(r["seq"], r["at"], r["generation"], r["type"], r["step"], r["attempt"], _loads(r["data"]))
            for r in rows
        ]

    async def get_idempotency(self, app: str, key: str) -> IdempotencyRecord | None:
        row = await self._read(
            lambda c: c.execute("SELECT * FROM idempotency WHERE app = ? AND key = ?", (app, key)).fetchone()
        )
        return None if row is None else IdempotencyRecord(**dict(row))

    async def signal_taken(self, run_id: str, signal_id: str) -> bool:
        row = await self._read(
            lambda c: c.execute(
                "SELECT 1 FROM signal_ids WHERE run_id = ? AND signal_id = ?", (run_id, signal_id)
            ).fetchone()
        )
        return row is not None

    # ------------------------------------------------------------------ retention

    async def prune_closed_runs(self, closed_before: int, limit: int) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            candidates = conn.execute(
                "SELECT run_id, seq FROM runs WHERE is_open = 0 AND closed_at < ?"
                " ORDER BY closed_at, run_id LIMIT ?",
                (closed_before, limit),
            ).fetchall()
            ids = prune_pick([(r[0], r[1]) for r in candidates], limit * PRUNE_EVENTS_PER_RUN)
            if not ids:
                return 0
            marks = ", ".join("?" * len(ids))
            for table in ("events", "tasks", "timers", "signal_ids"):
                conn.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", ids)
            cur = conn.execute(f"DELETE FROM runs WHERE run_id IN ({marks})", ids)
            return cur.rowcount

        return await self._write(fn)

    async def prune_idempotency(self, created_before: int, limit: int) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency"
                " WHERE created_at < ? ORDER BY created_at LIMIT ?)",
                (created_before, limit),
            )
            return cur.rowcount

        return await self._write(fn)

    # ------------------------------------------------------------------ tasks and timers

    async def get_task(self, token: str) -> TaskRow | None:
        row = await self._read(
            lambda c: c.execute("SELECT * FROM tasks WHERE token = ?", (token,)).fetchone()
        )
        return None if row is None else TaskRow(**dict(row))

    async def open_tasks(self) -> list[TaskRow]:
        rows = await self._read(
            lambda c: c.execute("SELECT * FROM tasks WHERE status = 'open' ORDER BY created_at").fetchall(),
            scan=True,
        )
        return [TaskRow(**dict(r)) for r in rows]

    async def timers_due_before(
        self, before: int, limit: int, after: tuple[int, str, str] | None = None
    ) -> list[TimerRecord]:
        params: list[int | str]
        if after is None:
            sql, params = "SELECT * FROM timers WHERE due_at < ?", [before]
        else:
            sql = "SELECT * FROM timers WHERE due_at < ? AND (due_at, run_id, slot) > (?, ?, ?)"
            params = [before, *after]
        sql += " ORDER BY due_at, run_id, slot LIMIT ?"
        rows = await self._read(lambda c: c.execute(sql, (*params, limit)).fetchall(), scan=True)
        return [TimerRecord(**dict(r)) for r in rows]

    # ------------------------------------------------------------------ the operator console

    async def timers_for_run(self, run_id: str) -> list[TimerRecord]:
        rows = await self._read(
            lambda c: c.execute("SELECT * FROM timers WHERE run_id = ? ORDER BY slot", (run_id,)).fetchall()
        )
        return [TimerRecord(**dict(r)) for r in rows]

    async def count_timers(self, cap: int) -> int:
        row = await self._read(
            lambda c: c.execute("SELECT COUNT(*) FROM (SELECT 1 FROM timers LIMIT ?)", (cap,)).fetchone(),
            scan=True,
        )
        return int(row[0])

    async def run_counts(self) -> dict[tuple[str, str], int]:
        rows = await self._read(
            lambda c: c.execute("SELECT app, status, n FROM run_counts WHERE n <> 0").fetchall(), scan=True
        )
        return {(r["app"], r["status"]): r["n"] for r in rows}

    async def query_runs(self, q: RunQuery, limit: int, after: tuple[int, str] | None) -> list[Run]:
        sql, params = run_query_sql(q, limit, after, postgres=False)
        rows = await self._read(lambda c: c.execute(sql, params).fetchall(), scan=True)
        return [_run(r["doc"]) for r in rows]

    async def count_runs(self, q: RunQuery, cap: int) -> int:
        sql, params = run_count_sql(q, cap, postgres=False)
        row = await self._read(lambda c: c.execute(sql, params).fetchone(), scan=True)
        return int(row[0])

    async def add_operator_token(self, token: OperatorTokenRecord) -> None:
        await self._write(
            lambda c: c.execute(
                "INSERT INTO operator_tokens (token_id, name, role, secret_hash, created_at, revoked_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                attrs.astuple(token),
            )
        )

    async def get_operator_token(self, token_id: str) -> OperatorTokenRecord | None:
        row = await self._read(
            lambda c: c.execute("SELECT * FROM operator_tokens WHERE token_id = ?", (token_id,)).fetchone()
        )
        return None if row is None else OperatorTokenRecord(**dict(row))

    async def list_operator_tokens(self) -> list[OperatorTokenRecord]:
        rows = await self._read(
            lambda c: c.execute(
                "SELECT * FROM operator_tokens WHERE revoked_at IS NULL ORDER BY created_at, token_id"
            ).fetchall(),
            scan=True,
        )
        return [OperatorTokenRecord(**dict(r)) for r in rows]

    async def revoke_operator_token(self, token_id: str, now: int) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE operator_tokens SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL",
                (now, token_id),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def overdue_runs(self, since_before: int, limit: int) -> list[OverdueGroup]:
        sql = OVERDUE_SQL.format(true="1", p1="?", p2="?")
        rows = await self._read(lambda c: c.execute(sql, (since_before, limit)).fetchall(), scan=True)
        return [
            OverdueGroup(r["app"], r["workflow"], r["current_step"], r["status"], r["n"], r["oldest"])
            for r in rows
        ]

    async def count_open_runs(self) -> dict[str, int]:
        return open_by_status(await self.run_counts())


def _loads(text: str) -> Any:
    return json.loads(text)


def _run(doc: str) -> Run:
    return run_from_dict(_loads(doc))


def _insert_key(conn: sqlite3.Connection, key: ApiKeyRecord) -> None:
    conn.execute(
        "INSERT INTO api_keys (key_id, app, secret_hash, created_at, revoked_at) VALUES (?, ?, ?, ?, ?)",
        (key.key_id, key.app, key.secret_hash, key.created_at, key.revoked_at),
    )


def _insert_secret(conn: sqlite3.Connection, secret: SecretRecord) -> None:
    conn.execute(
        "INSERT INTO signing_secrets (secret_id, app, secret_enc, created_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (secret.secret_id, secret.app, secret.secret_enc, secret.created_at, secret.expires_at),
    )


_REPLACE_EXPIRED_IDEMPOTENCY = (
    "INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (app, key) DO UPDATE SET"
    " request_hash = excluded.request_hash, run_id = excluded.run_id,"
    " response = excluded.response, created_at = excluded.created_at"
    " WHERE idempotency.created_at < ?"
)


def _apply_unit(conn: sqlite3.Connection, unit: UnitOfWork) -> None:
    run = unit.run
    row = run_row(run)
    step, since = step_columns(run)
    version, error_class = search_columns(run)
    if unit.expected_seq is None:
        conn.execute(
            "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at, seq, doc,"
            " closed_at, current_step, step_since, workflow_version, error_class)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row, step, since, version, error_class),
        )
    else:
        cur = conn.execute(
            "UPDATE runs SET status = ?, is_open = ?, seq = ?, doc = ?, workflow = ?, closed_at = ?,"
            " current_step = ?, step_since = ?, workflow_version = ?, error_class = ?"
            " WHERE run_id = ? AND seq = ?",
            (
                run.status,
                run.is_open,
                run.seq,
                row[8],
                run.workflow,
                row[9],
                step,
                since,
                version,
                error_class,
                run.run_id,
                unit.expected_seq,
            ),
        )
        if cur.rowcount != 1:
            raise StaleWrite(f"run {run.run_id} changed underneath seq {unit.expected_seq}")
    if unit.events:
        conn.executemany(
            "INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            event_rows(unit),
        )
    if unit.tasks:
        conn.executemany(
            "INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status,"
            " close_reason, deadline, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
            " close_reason = excluded.close_reason, deadline = excluded.deadline",
            task_rows(unit),
        )
    conn.execute("DELETE FROM timers WHERE run_id = ?", (run.run_id,))
    conn.executemany(
        "INSERT INTO timers (run_id, slot, kind, key, due_at) VALUES (?, ?, ?, ?, ?)", timer_rows(run)
    )
    if unit.signal_ids:
        conn.executemany(
            "INSERT INTO signal_ids (run_id, signal_id, at) VALUES (?, ?, ?)", signal_id_rows(unit)
        )
    if unit.idempotency is not None:
        if unit.idempotency_expired_before is None:
            conn.execute(
                "INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                idempotency_row(unit.idempotency),
            )
        else:
            # An expired record not pruned yet is replaced; a live one refuses the unit.
            cur = conn.execute(
                _REPLACE_EXPIRED_IDEMPOTENCY,
                (*idempotency_row(unit.idempotency), unit.idempotency_expired_before),
            )
            if cur.rowcount != 1:
                raise UniqueViolation("idempotency", "a live record holds this Idempotency-Key")


def _statements(script: str) -> list[str]:
    """A migration's statements; a trigger's `BEGIN ... END` body keeps its inner semicolons."""
    out: list[str] = []
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                out.append(pending)
            pending = ""
    if pending.strip(" \n\t;"):
        out.append(pending)
    return out


_INSERT_RUN = (
    "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at, seq, doc, closed_at,"
    " current_step, step_since, workflow_version, error_class) VALUES "
)
_INSERT_EVENT = "INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data) VALUES "
_UPSERT_TASK = (
    "INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status, close_reason,"
    " deadline, created_at) VALUES {} ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
    " close_reason = excluded.close_reason, deadline = excluded.deadline"
)
_INSERT_TIMER = "INSERT INTO timers (run_id, slot, kind, key, due_at) VALUES "
_INSERT_SIGNAL_ID = "INSERT INTO signal_ids (run_id, signal_id, at) VALUES "
_INSERT_IDEMPOTENCY = "INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at) VALUES "
_MAX_PARAMS = 999  # SQLite's smallest SQLITE_MAX_VARIABLE_NUMBER (builds before 3.32)


def _insert_many(conn: sqlite3.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    """Insert `rows` with multi-row VALUES: one statement (one GIL hand-over on the writer
    thread, where `executemany` takes one per row) for up to `_MAX_PARAMS` values."""
    if not rows:
        return
    width = len(rows[0])
    marks = "(" + ", ".join("?" * width) + ")"
    for part in chunks(rows, width, _MAX_PARAMS):
        values = ", ".join([marks] * len(part))
        text = sql.format(values) if "{}" in sql else sql + values
        conn.execute(text, [value for row in part for value in row])


def _apply_units(conn: sqlite3.Connection, units: list[UnitOfWork]) -> None:
    """Write several units with a few statements (`batch_rows`). Raises when any unit would be
    refused; the caller then rolls back and writes them one by one with `_apply_unit`."""
    rows = batch_rows(units)
    if rows is None:
        raise StorageError("these units cannot be written as one set")
    _insert_many(conn, _INSERT_RUN, rows.inserts)
    if rows.updates:
        cur = conn.executemany(
            "UPDATE runs SET status = ?2, is_open = ?3, seq = ?4, doc = ?5, workflow = ?6, closed_at = ?7,"
            " current_step = ?9, step_since = ?10, workflow_version = ?11, error_class = ?12"
            " WHERE run_id = ?1 AND seq = ?8",
            rows.updates,
        )
        if cur.rowcount != len(rows.updates):
            raise StaleWrite("a run changed underneath its expected seq")
    _insert_many(conn, _INSERT_EVENT, rows.events)
    _insert_many(conn, _UPSERT_TASK, rows.tasks)
    for part in chunks([(run_id,) for run_id in rows.replaced_timers], 1, _MAX_PARAMS):
        marks = ", ".join("?" * len(part))
        conn.execute(f"DELETE FROM timers WHERE run_id IN ({marks})", [run_id for (run_id,) in part])
    _insert_many(conn, _INSERT_TIMER, rows.timers)
    _insert_many(conn, _INSERT_SIGNAL_ID, rows.signal_ids)
    _insert_many(conn, _INSERT_IDEMPOTENCY, rows.idempotency)
    for replacing in rows.idempotency_replacing:
        cur = conn.execute(_REPLACE_EXPIRED_IDEMPOTENCY, replacing)
        if cur.rowcount != 1:
            raise UniqueViolation("idempotency", "a live record holds this Idempotency-Key")


@asynccontextmanager
async def open_sqlite(path: str, *, inline: bool = False) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(path, inline=inline)
    try:
        store.start_writer()
        await store.migrate()
        yield store
    finally:
        with trio.CancelScope(shield=True):
            # The writer ends once the queue is drained; a batch in SQLite always finishes
            # first (the thread cannot be cancelled), bounded all the same.
            if not await store.stop_writer(_CLOSE_GRACE_S):
                log.warning("the SQLite writer did not stop within %.0f s", _CLOSE_GRACE_S)
            await store.close()  # no thread is using the connections any more
