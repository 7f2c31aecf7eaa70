"""The embedded default store: stdlib sqlite3 in WAL mode.

Writes go through one writer thread that takes every unit of work queued while the previous
batch was committing and commits them together (group commit), each inside its own SAVEPOINT
so one refused write does not sink its neighbours. The thread is Foliot's own (fed by a
`queue.SimpleQueue`, answering through the Trio token): a `trio.to_thread` crossing costs
about twice the CPU of this hand-off, and a signal commits twice. With `inline=True` (tests
under a mock clock) the SQL runs on the Trio thread instead, so virtual time cannot jump while
a statement is in flight.

The run store's methods are `SqlRunStore`'s (`run_store.py`, the SQL both stores share); this
module gives them their primitives (`_one`, `_all`, `_transact`) and holds the writer, its
multi-row batch statements and the migrations.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from ..core.errors import StaleWrite, StorageError, StorageUnavailable, UniqueViolation
from . import checkpoint, run_sql
from .base import SIGNAL_ID_UNIQUE, UnitOfWork
from .batch import BatchRows, chunks, plan_batch
from .checkpoint import BACKSTOP_PAGES, JOURNAL_SIZE_LIMIT, Checkpointer
from .flow import FlowSqlite
from .health import ProbeSqlite
from .run_sql import SQLITE
from .run_store import SqlRunStore
from .schedules import ScheduleSql
from .sessions import SessionsSqlite
from .sql import Kind, Op, Tx, marks
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


class SqliteStore(SqlRunStore, SwfSqlite, ProbeSqlite, SessionsSqlite, ScheduleSql, FlowSqlite):
    """`Store` on one SQLite file (or `:memory:` for tests)."""

    dialect = SQLITE

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
            unit_jobs = [job for job in batch if job.unit is not None]
            units = [job.unit for job in unit_jobs if job.unit is not None]
            one_by_one, together = batch, 0
            if units and len(units) == len(batch):
                # Units only (the common batch): no savepoint around the set (two statements,
                # each a GIL hand-over, saved); refused, the transaction starts over one by one.
                try:
                    refused, alone = _apply_units(conn, units)
                except Exception:
                    conn.execute("ROLLBACK")
                    conn.execute("BEGIN IMMEDIATE")
                else:
                    together, one_by_one = _settle_units(unit_jobs, refused, alone), [batch[i] for i in alone]
            elif units:
                conn.execute("SAVEPOINT units")
                try:
                    refused, alone = _apply_units(conn, units)
                    conn.execute("RELEASE units")
                except Exception:
                    conn.execute("ROLLBACK TO units")
                    conn.execute("RELEASE units")
                else:
                    together = _settle_units(unit_jobs, refused, alone)
                    one_by_one = [job for job in batch if job.unit is None] + [unit_jobs[i] for i in alone]
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

    # ------------------------------------------------------------------ the run store's primitives

    async def _one(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> Any:
        """Point reads by key run on the Trio thread (`_read`), scans on the reader thread."""
        if self.inline or not scan:
            await trio.lowlevel.checkpoint()
            try:
                return self._reader.execute(sql, args).fetchone()
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
        return await self._read(lambda c: c.execute(sql, args).fetchone(), scan=True)

    async def _all(self, sql: str, args: Sequence[Any] = (), *, scan: bool = False) -> list[Any]:
        if self.inline or not scan:
            await trio.lowlevel.checkpoint()
            try:
                return self._reader.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
        return await self._read(lambda c: c.execute(sql, args).fetchall(), scan=True)

    async def _transact(self, make: Callable[[], Tx[T]], unit: UnitOfWork | None = None) -> T:
        return await self._write(lambda conn: run_tx(conn, make()), unit)


def _settle_units(jobs: list[_Job], refused: dict[int, UniqueViolation], alone: tuple[int, ...]) -> int:
    """The refused guarded units get their error (they wrote nothing), those whose `otherwise`
    the set wrote instead the answer False; how many units the set wrote (the ones left `alone`
    are written one by one after it)."""
    errors = 0
    for i, error in refused.items():
        unit = jobs[i].unit
        if unit is not None and unit.otherwise is not None:
            jobs[i].result = False
        else:
            jobs[i].error = error
            errors += 1
    return len(jobs) - errors - len(alone)


def run_tx(conn: sqlite3.Connection, tx: Tx[T]) -> T:
    """Drive the transaction `tx` on `conn` (in the writer's transaction): each statement it
    yields is run and its answer sent back; what it returns is the result."""
    answer: Any = None
    try:
        while True:
            answer = _answer(conn, tx.send(answer))
    except StopIteration as stop:
        result: T = stop.value
        return result


def _answer(conn: sqlite3.Connection, op: Op) -> Any:
    kind = op.kind
    if kind is Kind.CHANGE:
        return conn.execute(op.sql, op.args).rowcount
    if kind is Kind.ONE:
        return conn.execute(op.sql, op.args).fetchone()
    if kind is Kind.ALL:
        return conn.execute(op.sql, op.args).fetchall()
    conn.executemany(op.sql, op.args)
    return None


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


_MAX_PARAMS = 999  # SQLite's smallest SQLITE_MAX_VARIABLE_NUMBER (builds before 3.32)


def _insert_many(conn: sqlite3.Connection, head: str, rows: list[tuple[Any, ...]], tail: str = "") -> None:
    """Insert `rows` with multi-row VALUES (`head`, the rows' marks, `tail`): one statement (one
    GIL hand-over on the writer thread, where `executemany` takes one per row) for up to
    `_MAX_PARAMS` values."""
    if not rows:
        return
    width = len(rows[0])
    row_marks = marks(width)
    for part in chunks(rows, width, _MAX_PARAMS):
        values = ", ".join([row_marks] * len(part))
        conn.execute(head + values + tail, [value for row in part for value in row])


# The batch's runs moving on: `BatchRows.updates` columns, by number.
_UPDATE_RUNS = (
    "UPDATE runs SET status = ?2, is_open = ?3, seq = ?4, doc = ?5, workflow = ?6, closed_at = ?7,"
    " current_step = ?9, step_since = ?10, workflow_version = ?11, error_class = ?12"
    " WHERE run_id = ?1 AND seq = ?8"
)


def _apply_units(
    conn: sqlite3.Connection, units: list[UnitOfWork]
) -> tuple[dict[int, UniqueViolation], tuple[int, ...]]:
    """Write several units with a few statements (`batch.plan_batch`): the units without a guard
    as a set, then the guards of the others read (a statement or two per key) and the admitted
    ones as a set (with the `otherwise` of a refused one that has it). Answers the guarded units
    refused (by place; they wrote nothing; those whose `otherwise` was written are not among
    them) and the units left to be written one by one (a schedule's fire: `run_sql.unit_tx`).
    Raises when the set is refused (a stale write, a taken key); the caller then rolls back and
    writes them one by one."""
    plan = plan_batch(units)
    if plan is None:
        raise StorageError("these units cannot be written as one set")
    _write_rows(conn, plan.first)
    refused: dict[int, UniqueViolation] = {}
    if plan.guarded:
        held: dict[tuple[str, str], int] = {}
        heads: dict[tuple[str, str], list[str]] = {}
        for app, key, n in plan.slot_reads():
            held[(app, key)] = conn.execute(run_sql.COUNT_SLOTS, (app, key)).fetchone()[0]
            heads[(app, key)] = [r[0] for r in conn.execute(run_sql.QUEUE_HEADS, (app, key, n))]
        taken = [
            c for c in plan.claim_reads() if conn.execute(run_sql.GET_DEBOUNCE, c).fetchone() is not None
        ]
        refused = plan.refusals(held, heads, taken)
        _write_rows(conn, plan.then(refused))
    return refused, plan.alone


def _write_rows(conn: sqlite3.Connection, rows: BatchRows) -> None:
    """One set of rows, table by table; raises when any of it is refused."""
    _insert_many(conn, run_sql.INSERT_RUN_HEAD, rows.inserts)
    if rows.updates:
        cur = conn.executemany(_UPDATE_RUNS, rows.updates)
        if cur.rowcount != len(rows.updates):
            raise StaleWrite("a run changed underneath its expected seq")
    _insert_many(conn, run_sql.INSERT_EVENT_HEAD, rows.events)
    _insert_many(conn, run_sql.INSERT_TASK_HEAD, rows.tasks, run_sql.UPSERT_TASK_TAIL)
    for part in chunks([(run_id,) for run_id in rows.replaced_timers], 1, _MAX_PARAMS):
        conn.execute(f"DELETE FROM timers WHERE run_id IN {marks(len(part))}", [run_id for (run_id,) in part])
    _insert_many(conn, run_sql.INSERT_TIMER_HEAD, rows.timers)
    _insert_many(conn, run_sql.INSERT_SIGNAL_ID_HEAD, rows.signal_ids)
    _insert_many(conn, run_sql.INSERT_IDEMPOTENCY_HEAD, rows.idempotency)
    for replacing in rows.idempotency_replacing:
        cur = conn.execute(run_sql.REPLACE_EXPIRED_IDEMPOTENCY, replacing)
        if cur.rowcount != 1:
            raise UniqueViolation("idempotency", "a live record holds this Idempotency-Key")
    if rows.slots:
        conn.executemany(run_sql.SET_SLOT, rows.slots)
    if rows.debounce_released:
        conn.executemany(run_sql.RELEASE_DEBOUNCE, rows.debounce_released)
    _insert_many(conn, run_sql.INSERT_DEBOUNCE_HEAD, rows.debounce_claimed)


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
