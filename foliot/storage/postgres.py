"""The production store: PostgreSQL through asyncpg, on its own asyncio loop in its own thread.

asyncpg runs on a plain asyncio loop in a dedicated daemon thread (`_LoopThread`); a Trio task
hands it one coroutine per unit of work (`asyncio.run_coroutine_threadsafe`) and sleeps until
the result is handed back through the Trio token: one crossing each way, no per-statement hops,
and nothing the asyncio side raises (in any of its tasks) can reach Trio except as the result
of the one call concerned. trio-asyncio (the user's named bridge) remains selectable
(`bridge="trio-asyncio"`) and is what `bench/pg_commit.py` compares against; see
docs/decisions.md for the figures.

Timeouts are enforced on the asyncio side (`asyncio.timeout`, asyncpg `command_timeout`), never
by cancelling asyncpg from Trio: a Trio cancellation only stops the caller waiting, the asyncio
work runs to its own bounded end and releases its connection cleanly.

Writes are group-committed: `_call(fn, write=True)` queues `fn`; a writer drains what queued
while the previous batch committed and runs the lot in one transaction, each `fn` in its own
SAVEPOINT, so one refused write doesn't sink its neighbours. Nobody is answered before the
shared COMMIT returns ("durable before effect" holds).

Every driver error becomes a `StorageError` for the one caller concerned: connection trouble,
timeouts and a full pool are `StorageUnavailable` (the API answers 503 and changes nothing).
The pool is never torn down while in use: broken connections are dropped by asyncpg at release
and `pool.expire_connections()` makes the idle ones reconnect after an outage.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager, suppress
from functools import partial
from importlib import resources
from typing import Any, Protocol, TypeVar

import asyncpg
import attrs
import outcome
import trio

from ..core.errors import Fenced, StaleWrite, StorageError, StorageUnavailable, UniqueViolation
from ..core.workflow.model import Event, Run, TaskRow, run_from_dict
from .base import (
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
from .batch import BatchRows, batch_rows
from .cluster import NOW_MS, ClusterPostgres
from .console import OperatorTokenRecord, RunQuery, open_by_status, run_count_sql, run_query_sql
from .fence import Fence
from .health import ProbePostgres
from .keycheck import KeyCheckPostgres
from .notify import NotifyPostgres
from .sessions import SessionsPostgres
from .swf_postgres import SwfPostgres

T = TypeVar("T")
log = logging.getLogger("foliot.storage.postgres")

_MIGRATION_LOCK = 0x0F0110_7  # pg_advisory_lock key: one migrator at a time
POOL_SIZE = 10  # connections: WRITERS for group commits, the rest for reads
WRITERS = 2  # batches in flight at once (one commits while the next is written)
BATCH_MAX = 256  # units of work in one transaction
CONNECT_TIMEOUT_S = 5.0
LIMIT_S = 10.0  # default bound on one call, queueing for a connection included

# Errors that mean "the database (or the way to it) is in trouble", not "this write is wrong".
_CONNECTION_TROUBLE: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionError included
    EOFError,
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08
    asyncpg.exceptions.OperatorInterventionError,  # class 57: shutdown, cancel, cannot connect now
    asyncpg.exceptions.InsufficientResourcesError,  # class 53: too many connections, disk full
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # 25006: a standby, or default_transaction_read_only
    asyncpg.exceptions.TransactionRollbackError,  # class 40: deadlock, serialization: retry later
    asyncpg.InterfaceError,  # includes connection closed, in-transaction misuse after a cancel
    asyncpg.InternalClientError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
)
_BUSY: tuple[type[BaseException], ...] = (
    TimeoutError,  # asyncio.TimeoutError is TimeoutError on 3.11
    asyncio.CancelledError,
    concurrent.futures.CancelledError,
)


def _translate(exc: BaseException) -> StorageError:
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, asyncpg.UniqueViolationError):
        name = exc.constraint_name or ""
        if name == "runs_open_business_key":
            return UniqueViolation("business_key", str(exc))
        if name.startswith("idempotency"):
            return UniqueViolation("idempotency", str(exc))
        return UniqueViolation(name or "unique", str(exc))
    if isinstance(exc, _BUSY):
        return StorageUnavailable(f"the database did not answer in time ({type(exc).__name__})")
    if isinstance(exc, _CONNECTION_TROUBLE):
        return StorageUnavailable(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, (asyncpg.PostgresError, asyncpg.exceptions.PostgresLogMessage)):
        return StorageError(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, Exception):
        return StorageError(f"{type(exc).__name__}: {exc}")
    # A BaseException from the driver's side (never Trio's own): still one caller's failure.
    return StorageUnavailable(f"{type(exc).__name__}: {exc}")


def _is_connection_trouble(exc: BaseException) -> bool:
    # TimeoutError is an OSError, but a slow answer is not a broken connection.
    return isinstance(exc, _CONNECTION_TROUBLE) and not isinstance(
        exc, (TimeoutError, asyncpg.exceptions.TransactionRollbackError)
    )


# ---------------------------------------------------------------------------------- bridges


class _Bridge(Protocol):
    loop: asyncio.AbstractEventLoop

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T: ...


class _LoopThread:
    """A plain asyncio loop in a daemon thread; Trio tasks submit coroutines to it.

    `run` crosses once each way, and crossings travel together: calls submitted while the loop
    thread has not yet taken the previous ones share one wake-up of it, and answers ready
    together share one `TrioToken.run_sync_soon` (a wake-up is a system call and a GIL
    hand-over on each side; one per call made the threads wait on each other under load).
    A Trio cancellation abandons the wait only (the coroutine finishes on its own bounded
    terms), so asyncpg is never cancelled mid-query or mid-release from outside.
    """

    def __init__(self) -> None:
        # Constructed directly: once trio_asyncio is imported, asyncio.new_event_loop() is patched.
        self.loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop()
        self.loop.set_exception_handler(_log_loop_error)
        # Calls waiting for the loop thread, answers waiting for Trio; each flag says a wake-up
        # to take them is already on its way (set by the sender, cleared by the taker first).
        self._calls: collections.deque[tuple[Callable[[], Coroutine[Any, Any, Any]], _Deliver]] = (
            collections.deque()
        )
        self._calls_woken = False
        self._answers: collections.deque[tuple[_Deliver, outcome.Outcome[Any]]] = collections.deque()
        self._answers_woken = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._running: set[asyncio.Task[Any]] = set()  # the loop holds its tasks weakly
        self.wakeups = 0  # loop-thread wake-ups for calls (fewer than calls under load)
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="foliot-postgres", daemon=True)
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(
                        asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 5)
                    )
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            except BaseException as exc:  # the thread must end quietly
                log.warning("asyncio loop shut down untidily: %r", exc)
            finally:
                self.loop.close()

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T:
        task = trio.lowlevel.current_task()
        waiting = True

        def deliver(result: outcome.Outcome[Any]) -> None:  # on the Trio thread
            nonlocal waiting
            if waiting:
                waiting = False
                trio.lowlevel.reschedule(task, result)

        def abort(_: Any) -> trio.lowlevel.Abort:
            nonlocal waiting
            waiting = False
            return trio.lowlevel.Abort.SUCCEEDED

        self._token = trio.lowlevel.current_trio_token()
        self._submit(make, deliver)
        # Safety net only: the asyncio side bounds itself; this bounds a wedged loop thread.
        with trio.move_on_after(limit_s + 5):
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
            return result
        raise StorageUnavailable(f"the database did not answer within {limit_s + 5:.0f}s")

    def _submit(self, make: Callable[[], Coroutine[Any, Any, Any]], deliver: _Deliver) -> None:
        """On the Trio thread: queue the call; wake the loop thread unless a wake-up is pending."""
        if self.loop.is_closed():
            raise StorageUnavailable("the store is closed")
        self._calls.append((make, deliver))
        if not self._calls_woken:
            self._calls_woken = True
            try:
                self.loop.call_soon_threadsafe(self._take_calls)
            except RuntimeError as exc:  # the loop closed meanwhile
                self._calls_woken = False
                self._calls.pop()
                raise StorageUnavailable(f"the store is closed ({exc})") from None

    def _take_calls(self) -> None:
        """On the loop thread: start every queued call (the flag is cleared before taking, so a
        call queued meanwhile is taken now or brings a wake-up of its own)."""
        self._calls_woken = False
        self.wakeups += 1
        while self._calls:
            make, deliver = self._calls.popleft()
            try:
                task = self.loop.create_task(make())
            except BaseException as exc:
                self._answer(deliver, outcome.Error(exc))
                continue
            self._running.add(task)
            task.add_done_callback(partial(self._finished, deliver))

    def _finished(self, deliver: _Deliver, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        self._answer(deliver, outcome.capture(task.result))

    def _answer(self, deliver: _Deliver, result: outcome.Outcome[Any]) -> None:
        """On the loop thread: queue an answer; wake Trio unless a wake-up is pending."""
        self._answers.append((deliver, result))
        if not self._answers_woken and self._token is not None:
            self._answers_woken = True
            with suppress(trio.RunFinishedError):  # Trio is gone: nobody to tell
                self._token.run_sync_soon(self._take_answers)

    def _take_answers(self) -> None:
        """On the Trio thread: hand every queued answer to its caller."""
        self._answers_woken = False
        while self._answers:
            deliver, result = self._answers.popleft()
            deliver(result)

    async def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        with trio.move_on_after(10):
            await trio.to_thread.run_sync(self._thread.join, abandon_on_cancel=True)


_Deliver = Callable[[outcome.Outcome[Any]], None]


class _TrioAsyncio:
    """The former bridge: trio-asyncio's loop inside Trio's (kept for comparison)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T:
        import trio_asyncio

        # Shielded (asyncpg is never cancelled from Trio); the asyncio side bounds itself.
        with trio.CancelScope(shield=True):
            with trio.move_on_after(limit_s + 5):
                result: T = await trio_asyncio.aio_as_trio(make, loop=self.loop)()
                return result
        raise StorageUnavailable(f"the database did not answer within {limit_s + 5:.0f}s")


def _log_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An error in a background asyncio task (a connection lost while idle, a close that
    failed): asyncpg has already dropped the connection; log it, never propagate it."""
    exc = context.get("exception")
    log.warning("postgres driver: %s%s", context.get("message", ""), f" ({exc!r})" if exc else "")


# ---------------------------------------------------------------------------------- asyncio side


class _Job:
    __slots__ = ("deadline", "fences", "fn", "future", "unit")

    def __init__(
        self,
        fn: Callable[[asyncpg.Connection], Awaitable[Any]],
        deadline: float,
        unit: UnitOfWork | None = None,
        fences: tuple[Fence, ...] = (),
    ) -> None:
        self.fn = fn
        self.unit = unit  # a commit: written with the batch's other units at once
        self.fences = fences  # written only while these leases hold (several nodes)
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.deadline = deadline

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        if self.future.done():
            return
        if error is None:
            self.future.set_result(result)
        else:
            self.future.set_exception(_translate(error))


class _Driver:
    """Everything on the asyncio side: the pool, the write queue, the writers."""

    def __init__(
        self,
        url: str,
        pool_size: int,
        writers: int,
        limit_s: float,
        session: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self.session = dict(session or {})
        self.pool_size = pool_size
        self.writer_count = writers
        self.limit_s = limit_s
        self.pool: asyncpg.Pool | None = None
        self.queue: collections.deque[_Job] = collections.deque()
        self.wake: asyncio.Event | None = None
        self.writers: list[asyncio.Task[None]] = []
        self.closed = False
        self.batches = 0
        self.units = 0
        self.units_together = 0  # units written by the batch's set statements (not one by one)
        self._expired_at = 0.0
        self._background: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        # min_size=0: nothing connects here, so a database still booting is not an error yet.
        self.pool = await asyncpg.create_pool(
            self.url,
            min_size=0,
            max_size=self.pool_size,
            timeout=CONNECT_TIMEOUT_S,
            command_timeout=self.limit_s,
            max_inactive_connection_lifetime=60,
            reset=_keep_session,
            # Per node (`open_postgres`): its application_name, and how long a transaction may
            # sit idle before PostgreSQL ends the session.
            server_settings=self.session or None,
        )
        self.wake = asyncio.Event()
        self.writers = [asyncio.create_task(self._writer()) for _ in range(self.writer_count)]

    def _trouble(self, exc: BaseException) -> None:
        """A connection broke: have the idle ones replaced too (the in-use ones at release).

        At most once a second: a burst of callers failing together expires the pool once."""
        if not _is_connection_trouble(exc) or self.pool is None or self.closed:
            return
        now = time.monotonic()
        if now - self._expired_at >= 1.0:
            self._expired_at = now
            task = asyncio.get_running_loop().create_task(self._expire())
            self._background.add(task)  # held, so it isn't collected before it runs
            task.add_done_callback(self._background.discard)

    async def _expire(self) -> None:
        try:
            assert self.pool is not None
            await self.pool.expire_connections()
        except Exception as exc:
            log.debug("expire_connections: %r", exc)

    async def read(self, fn: Callable[[asyncpg.Connection], Awaitable[T]], limit_s: float) -> T:
        if self.closed or self.pool is None:
            raise StorageUnavailable("the store is closed")
        deadline = time.monotonic() + limit_s
        try:
            conn = await self._acquire(deadline)
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    return await fn(conn)
            finally:
                await self.pool.release(conn)
        except StorageError:
            raise
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and _cancelling():
                raise  # the loop is shutting down
            self._trouble(exc)
            if isinstance(exc, TimeoutError):
                raise StorageUnavailable(f"the database did not answer within {limit_s:.1f}s") from None
            raise _translate(exc) from exc

    async def _acquire(self, deadline: float) -> asyncpg.Connection:
        """A pool connection by `deadline`. Waiting in line for one is not an outage: nothing is
        reset; a caller who waited too long is told the store is busy (503)."""
        assert self.pool is not None
        try:
            return await self.pool.acquire(timeout=max(0.001, deadline - time.monotonic()))
        except TimeoutError:
            raise StorageUnavailable("busy: no database connection became free in time") from None

    async def write(
        self,
        fn: Callable[[asyncpg.Connection], Awaitable[T]],
        limit_s: float,
        unit: UnitOfWork | None = None,
        fences: tuple[Fence, ...] = (),
    ) -> T:
        if self.closed or self.wake is None:
            raise StorageUnavailable("the store is closed")
        job = _Job(fn, time.monotonic() + limit_s, unit, fences)
        self.queue.append(job)
        self.wake.set()
        result: T = await job.future  # the writer bounds every batch; a job never waits unbounded
        return result

    async def _writer(self) -> None:
        assert self.wake is not None and self.pool is not None
        while not self.closed:
            if not self.queue:
                self.wake.clear()
                await self.wake.wait()
                continue
            now = time.monotonic()
            batch: list[_Job] = []
            while self.queue and len(batch) < BATCH_MAX:
                job = self.queue.popleft()
                if job.deadline <= now:  # queued past its caller's bound: refuse, unwritten
                    job.settle(error=StorageUnavailable("busy: the write queue did not drain in time"))
                else:
                    batch.append(job)
            if self.queue:
                self.wake.set()  # another writer may take the rest meanwhile
            if batch:
                try:
                    await self._commit_batch(batch)
                except BaseException as exc:  # a writer must survive anything
                    for job in batch:
                        job.settle(error=exc)
                    if isinstance(exc, asyncio.CancelledError) and self.closed:
                        raise

    async def _commit_batch(self, batch: list[_Job]) -> None:
        """One transaction for the batch. Optimistic first: no savepoints (two round trips a
        unit saved); when a job refuses (stale write, unique violation, a bug of its own) the
        transaction rolls back, that job gets its error, and the rest is run again with each
        job in its own SAVEPOINT, so one refused write doesn't sink its neighbours. Connection
        trouble or a timeout fails the whole batch, which then changed nothing."""
        savepoints = False
        # A refused job is answered only once the rest is committed: its refusal may be a
        # neighbour's row (two starts with one business key), which must be visible by then.
        refused_jobs: list[tuple[_Job, BaseException]] = []
        while batch:
            try:
                results = await self._try_batch(batch, savepoints)
            except _Refused as refused:
                if refused.job is not None:  # else the units' set was refused: find out who
                    refused_jobs.append((refused.job, refused.error))
                    batch = [job for job in batch if job is not refused.job]
                savepoints = True
                continue
            except _LeaseRanOut as ran_out:
                late = [job for job in batch if any(f.partition in ran_out.partitions for f in job.fences)]
                refused_jobs += [(job, _fenced(job)) for job in late]
                batch = [job for job in batch if job not in late]
                continue
            except BaseException as exc:
                self._trouble(exc)
                error: BaseException = (
                    StorageUnavailable("the database did not answer in time")
                    if isinstance(exc, TimeoutError)
                    else exc
                )
                for job in batch:
                    job.settle(error=error)
                for job, _ in refused_jobs:  # what refused them was not committed either
                    job.settle(error=error)
                if isinstance(exc, asyncio.CancelledError) and self.closed:
                    raise
                return
            self.batches += 1
            self.units += sum(1 for _, _, err in results if err is None)
            for job, value, err in results:
                job.settle(value, err)
            break
        for job, err in refused_jobs:
            job.settle(error=err)

    async def _try_batch(
        self, batch: list[_Job], savepoints: bool
    ) -> list[tuple[_Job, Any, BaseException | None]]:
        assert self.pool is not None
        deadline = max(job.deadline for job in batch)
        results: list[tuple[_Job, Any, BaseException | None]] = []
        units = [job.unit for job in batch if job.unit is not None] if not savepoints else []
        rows = batch_rows(units) if units else None
        fences = _fences_of(batch)
        conn = await self._acquire(deadline)
        try:
            if rows is not None and len(units) == len(batch) and _only_new_runs(rows):
                # Starts only: one statement in one round trip, atomic on its own (no BEGIN,
                # no COMMIT); refused as a set, they are written one by one in savepoints.
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    try:
                        if not fences:
                            await conn.execute(_INSERT_NEW_RUNS, *_new_run_columns(rows))
                        elif not await conn.fetchval(
                            _FENCED_NEW_RUNS, *_new_run_columns(rows), *_fence_columns(fences)
                        ):
                            raise Fenced("a lease of this batch moved on: nothing was written")
                    except Exception as exc:
                        if _batch_fatal(exc) or conn.is_closed():
                            raise
                        raise _Refused(None, exc) from exc
                self.units_together += len(units)
                return [(job, None, None) for job in batch]
            if rows is not None and len(units) == len(batch) and _only_updates(rows):
                # Runs moving on (signals, task answers, timers): one statement as well. A unit
                # whose run moved underneath its seq writes nothing (every row it would add is
                # joined to the runs the UPDATE matched) and gets its StaleWrite; the rest commit.
                return await self._update_batch(conn, batch, rows, fences, deadline)
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())), conn.transaction():
                results += await self._fenced_transaction(conn, batch, fences, units, rows, savepoints)
        finally:
            await self.pool.release(conn)
        return results

    async def _fenced_transaction(
        self,
        conn: asyncpg.Connection,
        batch: list[_Job],
        fences: list[Fence],
        units: list[Any],
        rows: Any,
        savepoints: bool,
    ) -> list[tuple[_Job, Any, BaseException | None]]:
        """The batch's writes inside its transaction: the jobs' results."""
        results: list[tuple[_Job, Any, BaseException | None]] = []
        if fences:
            # The leases, read FOR SHARE: an acquisition by another node waits for this
            # commit, or has committed and this sees its new epoch. A job under a lease
            # that moved on is refused (`Fenced`) and nothing of it is written.
            held = await _held_fences(conn, fences)
            fenced = [job for job in batch if any(f not in held for f in job.fences)]
            if fenced:
                results += [(job, None, _fenced(job)) for job in fenced]
                batch = [job for job in batch if job not in fenced]
                units = [job.unit for job in batch if job.unit is not None] if units else []
                rows = batch_rows(units) if units else None
        one_by_one = batch
        if units:
            # All units of work in a few statements (a round trip per table, not per
            # unit); refused as a set, they are written one by one in savepoints.
            try:
                await _apply_units(conn, rows)
            except Exception as exc:
                if _batch_fatal(exc) or conn.is_closed():
                    raise
                raise _Refused(None, exc) from exc
            results += [(job, None, None) for job in batch if job.unit is not None]
            one_by_one = [job for job in batch if job.unit is None]
            self.units_together += len(units)
        for job in one_by_one:
            try:
                if savepoints:
                    async with conn.transaction():  # SAVEPOINT
                        value = await job.fn(conn)
                else:
                    value = await job.fn(conn)
            except Exception as exc:
                if _batch_fatal(exc) or conn.is_closed():
                    raise
                if not savepoints:
                    raise _Refused(job, exc) from exc  # roll the transaction back
                results.append((job, None, exc))
            else:
                results.append((job, value, None))
        held_now = sorted({f.partition for job in batch for f in job.fences})
        if held_now and (ran_out := await conn.fetchval(_RAN_OUT, held_now)):
            # A lease ran out while the batch was being written (a node starved of CPU or
            # paused between statements): roll back, so every row a node commits was written
            # before its lease's end; the jobs under other leases are written again.
            raise _LeaseRanOut(set(ran_out))
        return results

    async def _update_batch(
        self,
        conn: asyncpg.Connection,
        batch: list[_Job],
        rows: BatchRows,
        fences: list[Fence],
        deadline: float,
    ) -> list[tuple[_Job, Any, BaseException | None]]:
        """`_UPDATE_RUNS_SET` (or its fenced form) in one round trip, atomic on its own."""
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            try:
                if fences:
                    ok, updated = await conn.fetchrow(
                        _FENCED_UPDATE_RUNS_SET, *_update_set_columns(rows), *_fence_columns(fences)
                    )
                    if not ok:
                        raise Fenced("a lease of this batch moved on: nothing was written")
                else:
                    updated = await conn.fetchval(_UPDATE_RUNS_SET, *_update_set_columns(rows))
            except Exception as exc:
                if _batch_fatal(exc) or conn.is_closed():
                    raise
                raise _Refused(None, exc) from exc
        moved = set(updated)
        self.units_together += len(moved)
        results: list[tuple[_Job, Any, BaseException | None]] = []
        for job in batch:
            unit = job.unit
            assert unit is not None
            if unit.run.run_id in moved:
                results.append((job, None, None))
            else:
                stale = StaleWrite(f"run {unit.run.run_id} changed underneath seq {unit.expected_seq}")
                results.append((job, None, stale))
        return results

    async def close(self) -> None:
        self.closed = True
        for task in self.writers:
            task.cancel()
        await asyncio.gather(*self.writers, return_exceptions=True)
        while self.queue:
            self.queue.popleft().settle(error=StorageUnavailable("the store is closing"))
        if self.pool is not None:
            try:
                await asyncio.wait_for(self.pool.close(), 5)
            except BaseException as exc:
                log.warning("pool did not close cleanly (%r); terminating", exc)
                self.pool.terminate()


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without the reset query (a round trip per release): an open transaction is still
    rolled back by asyncpg, and Foliot keeps no other session state (no SET, no LISTEN; the
    migrator's advisory lock is released explicitly)."""


class _LeaseRanOut(Exception):
    """Leases of the batch expired before its commit: roll it all back."""

    def __init__(self, partitions: set[int]) -> None:
        super().__init__(f"leases ran out: {sorted(partitions)}")
        self.partitions = partitions


class _Refused(Exception):
    """A job's own refusal, carried out of its transaction so that it rolls back."""

    def __init__(self, job: _Job | None, error: Exception) -> None:
        super().__init__(str(error))
        self.job = job
        self.error = error


def _batch_fatal(exc: BaseException) -> bool:
    """Errors after which the transaction (or its connection) can't go on for anyone."""
    return _is_connection_trouble(exc) or isinstance(exc, TimeoutError)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


# ---------------------------------------------------------------------------------- the store


def _fences_of(batch: list[_Job]) -> list[Fence]:
    """The distinct leases a batch's jobs are written under, in partition order (so lease rows
    are always locked in one order, as the keeper's renewals and acquisitions lock them)."""
    return sorted({f for job in batch for f in job.fences}, key=lambda f: (f.partition, f.epoch, f.node_id))


def _fence_columns(fences: list[Fence]) -> list[Any]:
    partitions = [f.partition for f in fences]
    epochs = [f.epoch for f in fences]
    return [partitions, epochs, [f.node_id for f in fences], len(fences)]


def _fenced(job: _Job) -> Fenced:
    where = ", ".join(f"partition {f.partition} epoch {f.epoch}" for f in job.fences)
    return Fenced(f"the lease ({where}) is no longer held by this node: nothing was written")


# The leases still held as the batch's fences say, locked FOR SHARE in partition order.
def _held_leases(first: int, columns: str = "l.partition") -> str:
    """The batch's leases still held unexpired as its fences say (parameters `$first` to
    `$first + 2`: partitions, epochs, node ids), locked FOR SHARE in partition order."""
    return (
        f"SELECT {columns} FROM cluster_leases l"
        f" JOIN unnest(${first}::int[], ${first + 1}::bigint[], ${first + 2}::text[])"
        " AS f(partition, epoch, node_id)"
        " ON l.partition = f.partition AND l.epoch = f.epoch AND l.node_id = f.node_id"
        f" WHERE l.expires_at > {NOW_MS} ORDER BY l.partition FOR SHARE OF l"
    )


def _fence_head(first: int) -> str:
    """The CTEs a one-statement write starts with to be fenced: `fenced.ok` is whether all
    `$first + 3` leases hold (`_held_leases`)."""
    ok = f"fenced AS (SELECT count(*) = ${first + 3} AS ok FROM fence)"
    return f"WITH fence AS ({_held_leases(first)}), {ok}, "


_HELD_FENCES = _held_leases(1, "l.partition, l.epoch, l.node_id")


# Which of these partitions' leases expired by now (their rows are this batch's, FOR SHARE).
_EXPIRED = f"expires_at <= {NOW_MS}"
_RAN_OUT = f"SELECT array_agg(partition) FROM cluster_leases WHERE partition = ANY($1::int[]) AND {_EXPIRED}"


async def _held_fences(conn: asyncpg.Connection, fences: list[Fence]) -> set[Fence]:
    rows = await conn.fetch(_HELD_FENCES, *_fence_columns(fences)[:3])
    return {Fence(r["node_id"], r["partition"], r["epoch"]) for r in rows}


class PostgresStore(
    SwfPostgres, ClusterPostgres, KeyCheckPostgres, NotifyPostgres, ProbePostgres, SessionsPostgres
):
    """`Store` on PostgreSQL. Create with `open_postgres`."""

    def __init__(
        self,
        url: str,
        bridge: _Bridge,
        *,
        pool_size: int = POOL_SIZE,
        writers: int = WRITERS,
        limit_s: float = LIMIT_S,
        session: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self._bridge = bridge
        self._limit_s = limit_s
        self._driver = _Driver(url, pool_size, writers, limit_s, session)

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
            raise _translate(exc) from exc

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
        await self._call(lambda c: _apply_unit(c, unit), write=True, unit=unit, fences=unit.fences)

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


_INSERT_RUN = (
    "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at, seq, doc,"
    " closed_at, current_step, step_since, workflow_version, error_class)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
)
_UPDATE_RUN = (
    "UPDATE runs SET status = $2, is_open = $3, seq = $4, doc = $5, closed_at = $7,"
    " current_step = $8, step_since = $9, workflow_version = $10, error_class = $11"
    " WHERE run_id = $1 AND seq = $6"
)
_INSERT_EVENT = (
    "INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
)
_UPSERT_TASK = (
    "INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status,"
    " close_reason, deadline, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
    " ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
    " close_reason = excluded.close_reason, deadline = excluded.deadline"
)
_INSERT_TIMER = "INSERT INTO timers (run_id, slot, kind, key, due_at) VALUES ($1, $2, $3, $4, $5)"
_INSERT_SIGNAL_ID = "INSERT INTO signal_ids (run_id, signal_id, at) VALUES ($1, $2, $3)"
_INSERT_IDEMPOTENCY = (
    "INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at)"
    " VALUES ($1, $2, $3, $4, $5, $6)"
)
# An expired record not pruned yet is replaced; a live one is left alone (the unit is refused).
_REPLACE_EXPIRED_IDEMPOTENCY = (
    "INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at)"
    " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (app, key) DO UPDATE SET"
    " request_hash = excluded.request_hash, run_id = excluded.run_id,"
    " response = excluded.response, created_at = excluded.created_at"
    " WHERE idempotency.created_at < $7"
)


async def _apply_unit(conn: asyncpg.Connection, unit: UnitOfWork) -> None:
    run = unit.run
    row = run_row(run)
    step, since = step_columns(run)
    version, error_class = search_columns(run)
    if unit.expected_seq is None:
        await conn.execute(_INSERT_RUN, *row, step, since, version, error_class)
    else:
        status = await conn.execute(
            _UPDATE_RUN,
            run.run_id,
            run.status,
            run.is_open,
            run.seq,
            row[8],
            unit.expected_seq,
            row[9],
            step,
            since,
            version,
            error_class,
        )
        if status != "UPDATE 1":
            raise StaleWrite(f"run {run.run_id} changed underneath seq {unit.expected_seq}")
    if unit.events:
        await conn.executemany(_INSERT_EVENT, event_rows(unit))
    if unit.tasks:
        await conn.executemany(_UPSERT_TASK, task_rows(unit))
    if unit.expected_seq is not None:  # a new run has no timers yet
        await conn.execute("DELETE FROM timers WHERE run_id = $1", run.run_id)
    timers = timer_rows(run)
    if timers:
        await conn.executemany(_INSERT_TIMER, timers)
    if unit.signal_ids:
        await conn.executemany(_INSERT_SIGNAL_ID, signal_id_rows(unit))
    if unit.idempotency is not None:
        if unit.idempotency_expired_before is None:
            await conn.execute(_INSERT_IDEMPOTENCY, *idempotency_row(unit.idempotency))
        else:
            status = await conn.execute(
                _REPLACE_EXPIRED_IDEMPOTENCY,
                *idempotency_row(unit.idempotency),
                unit.idempotency_expired_before,
            )
            if status != "INSERT 0 1":
                raise UniqueViolation("idempotency", "a live record holds this Idempotency-Key")


_UPDATE_RUNS = (
    "UPDATE runs AS r SET status = u.status, is_open = u.is_open, seq = u.seq, doc = u.doc,"
    " closed_at = u.closed_at, current_step = u.current_step, step_since = u.step_since,"
    " workflow_version = u.workflow_version, error_class = u.error_class"
    " FROM unnest($1::text[], $2::text[], $3::boolean[], $4::bigint[], $5::text[], $6::bigint[],"
    " $7::bigint[], $8::text[], $9::bigint[], $10::bigint[], $11::text[])"
    " AS u(run_id, status, is_open, seq, doc, closed_at, expected, current_step, step_since,"
    " workflow_version, error_class)"
    " WHERE r.run_id = u.run_id AND r.seq = u.expected RETURNING r.run_id"
)
_IDEMPOTENCY_HELD = (
    "SELECT count(*) FROM idempotency AS i JOIN unnest($1::text[], $2::text[], $3::text[])"
    " AS u(app, key, run_id) ON i.app = u.app AND i.key = u.key AND i.run_id = u.run_id"
)


async def _apply_units(conn: asyncpg.Connection, rows: BatchRows | None) -> None:
    """Write several units (their `batch_rows`) with a round trip per table (`executemany`
    pipelines its rows). Raises when any unit would be refused; the caller then rolls back and
    writes them one by one with `_apply_unit`, each in its own savepoint."""
    if rows is None:
        raise StorageError("these units cannot be written as one set")
    if rows.inserts:
        await conn.executemany(_INSERT_RUN, rows.inserts)
    if len(rows.updates) == 1:
        run_id, status, is_open, seq, doc, _, closed, expected, step, since, version, cls = rows.updates[0]
        done = await conn.execute(
            _UPDATE_RUN, run_id, status, is_open, seq, doc, expected, closed, step, since, version, cls
        )
        if done != "UPDATE 1":
            raise StaleWrite(f"run {run_id} changed underneath seq {expected}")
    elif rows.updates:
        columns = list(zip(*rows.updates, strict=True))
        updated = await conn.fetch(_UPDATE_RUNS, *(columns[i] for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11)))
        if len(updated) != len(rows.updates):
            raise StaleWrite("a run changed underneath its expected seq")
    if rows.events:
        await conn.executemany(_INSERT_EVENT, rows.events)
    if rows.tasks:
        await conn.executemany(_UPSERT_TASK, rows.tasks)
    if rows.replaced_timers:
        await conn.execute("DELETE FROM timers WHERE run_id = ANY($1::text[])", rows.replaced_timers)
    if rows.timers:
        await conn.executemany(_INSERT_TIMER, rows.timers)
    if rows.signal_ids:
        await conn.executemany(_INSERT_SIGNAL_ID, rows.signal_ids)
    if rows.idempotency:
        await conn.executemany(_INSERT_IDEMPOTENCY, rows.idempotency)
    if rows.idempotency_replacing:
        await conn.executemany(_REPLACE_EXPIRED_IDEMPOTENCY, rows.idempotency_replacing)
        # Each must now hold its own run id: a live record it met was left alone (refused).
        apps, keys, run_ids = zip(*[(r[0], r[1], r[3]) for r in rows.idempotency_replacing], strict=True)
        held = await conn.fetchval(_IDEMPOTENCY_HELD, list(apps), list(keys), list(run_ids))
        if held != len(rows.idempotency_replacing):
            raise UniqueViolation("idempotency", "a live record holds this Idempotency-Key")


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def _only_new_runs(rows: BatchRows) -> bool:
    """Whether `_INSERT_NEW_RUNS` can write these rows: new runs only, no idempotency record to
    take over, and no task written twice (one INSERT cannot upsert a row twice)."""
    return (
        not rows.updates
        and not rows.idempotency_replacing
        and len({task[0] for task in rows.tasks}) == len(rows.tasks)
    )


def _only_updates(rows: BatchRows) -> bool:
    """Whether `_UPDATE_RUNS_SET` can write these rows: runs already stored moving on, no
    idempotency record, no task written twice (one INSERT cannot upsert a row twice)."""
    return (
        bool(rows.updates)
        and not rows.inserts
        and not rows.idempotency
        and not rows.idempotency_replacing
        and len({task[0] for task in rows.tasks}) == len(rows.tasks)
    )


def _update_set_columns(rows: BatchRows) -> list[list[Any]]:
    updates = _columns(rows.updates, 12)
    return [
        *(updates[i] for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11)),
        *_columns(rows.events, 8),
        *_columns(rows.tasks, 11),
        *_columns(rows.timers, 5),
        *_columns(rows.signal_ids, 3),
    ]


def _new_run_columns(rows: BatchRows) -> list[list[Any]]:
    return [
        *_columns(rows.inserts, 14),
        *_columns(rows.events, 8),
        *_columns(rows.tasks, 11),
        *_columns(rows.timers, 5),
        *_columns(rows.signal_ids, 3),
        *_columns(rows.idempotency, 6),
    ]


# Every table a start writes, in one statement (array parameters, one per column).
_INSERT_NEW_RUNS = (
    "WITH new_runs AS (INSERT INTO runs (run_id, app, workflow, status, business_key, is_open,"
    " created_at, seq, doc, closed_at, current_step, step_since, workflow_version, error_class)"
    " SELECT * FROM unnest($1::text[], $2::text[], $3::text[],"
    " $4::text[], $5::text[], $6::boolean[], $7::bigint[], $8::bigint[], $9::text[], $10::bigint[],"
    " $11::text[], $12::bigint[], $13::bigint[], $14::text[])),"
    " new_events AS (INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
    " SELECT * FROM unnest($15::text[], $16::bigint[], $17::bigint[], $18::bigint[], $19::text[],"
    " $20::text[], $21::bigint[], $22::text[])),"
    " new_tasks AS (INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status,"
    " close_reason, deadline, created_at) SELECT * FROM unnest($23::text[], $24::text[], $25::text[],"
    " $26::bigint[], $27::text[], $28::bigint[], $29::text[], $30::text[], $31::text[], $32::bigint[],"
    " $33::bigint[]) ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
    " close_reason = excluded.close_reason, deadline = excluded.deadline),"
    " new_timers AS (INSERT INTO timers (run_id, slot, kind, key, due_at)"
    " SELECT * FROM unnest($34::text[], $35::text[], $36::text[], $37::text[], $38::bigint[])),"
    " new_signal_ids AS (INSERT INTO signal_ids (run_id, signal_id, at)"
    " SELECT * FROM unnest($39::text[], $40::text[], $41::bigint[]))"
    " INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at)"
    " SELECT * FROM unnest($42::text[], $43::text[], $44::text[], $45::text[], $46::text[], $47::bigint[])"
)


# Every table a batch of runs moving on writes, in one statement (array parameters, one per
# column). Each row is joined to the runs the UPDATE matched (`moved`), so a unit whose run is no
# longer at its expected seq writes nothing; the statement returns the runs it moved. A run's
# timers are made equal to its new set: the ones it no longer holds deleted, the others upserted
# (one statement cannot delete a row and insert its key again).
_UPDATE_RUNS_SET = (
    "WITH moved AS (UPDATE runs AS r SET status = u.status, is_open = u.is_open, seq = u.seq,"
    " doc = u.doc, closed_at = u.closed_at, current_step = u.current_step, step_since = u.step_since,"
    " workflow_version = u.workflow_version, error_class = u.error_class"
    " FROM unnest($1::text[], $2::text[], $3::boolean[], $4::bigint[], $5::text[], $6::bigint[],"
    " $7::bigint[], $8::text[], $9::bigint[], $10::bigint[], $11::text[])"
    " AS u(run_id, status, is_open, seq, doc, closed_at, expected, current_step, step_since,"
    " workflow_version, error_class)"
    " WHERE r.run_id = u.run_id AND r.seq = u.expected RETURNING r.run_id),"
    " new_events AS (INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
    " SELECT e.* FROM unnest($12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::text[],"
    " $17::text[], $18::bigint[], $19::text[]) AS e(run_id, seq, at, generation, type, step, attempt, data)"
    " WHERE e.run_id IN (SELECT run_id FROM moved)),"
    " new_tasks AS (INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status,"
    " close_reason, deadline, created_at) SELECT t.* FROM unnest($20::text[], $21::text[], $22::text[],"
    " $23::bigint[], $24::text[], $25::bigint[], $26::text[], $27::text[], $28::text[], $29::bigint[],"
    " $30::bigint[]) AS t(token, run_id, app, generation, step, attempt, queue, status, close_reason,"
    " deadline, created_at) WHERE t.run_id IN (SELECT run_id FROM moved)"
    " ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
    " close_reason = excluded.close_reason, deadline = excluded.deadline),"
    " gone_timers AS (DELETE FROM timers AS x WHERE x.run_id IN (SELECT run_id FROM moved)"
    " AND NOT EXISTS (SELECT 1 FROM unnest($31::text[], $32::text[]) AS k(run_id, slot)"
    " WHERE k.run_id = x.run_id AND k.slot = x.slot)),"
    " new_timers AS (INSERT INTO timers (run_id, slot, kind, key, due_at)"
    " SELECT m.* FROM unnest($31::text[], $32::text[], $33::text[], $34::text[], $35::bigint[])"
    " AS m(run_id, slot, kind, key, due_at) WHERE m.run_id IN (SELECT run_id FROM moved)"
    " ON CONFLICT (run_id, slot) DO UPDATE SET kind = excluded.kind, key = excluded.key,"
    " due_at = excluded.due_at),"
    " new_signal_ids AS (INSERT INTO signal_ids (run_id, signal_id, at)"
    " SELECT s.* FROM unnest($36::text[], $37::text[], $38::bigint[]) AS s(run_id, signal_id, at)"
    " WHERE s.run_id IN (SELECT run_id FROM moved))"
    " SELECT ARRAY(SELECT run_id FROM moved)"
)
# The same, moving nothing unless every lease of the batch holds: returns (held, runs moved).
_FENCED_UPDATE_RUNS_SET = _fence_head(39) + _UPDATE_RUNS_SET.removeprefix("WITH ").replace(
    " FROM unnest($1::text[]", " FROM fenced, unnest($1::text[]", 1
).replace(" WHERE r.run_id = u.run_id", " WHERE fenced.ok AND r.run_id = u.run_id", 1).replace(
    " SELECT ARRAY(SELECT run_id FROM moved)", " SELECT ok, ARRAY(SELECT run_id FROM moved) FROM fenced"
)


def _fenced_new_runs(sql: str) -> str:
    """`_INSERT_NEW_RUNS` writing nothing unless every lease of the batch holds (read FOR SHARE
    in partition order, as `_HELD_FENCES`): returns whether they did."""
    guarded = re.sub(
        r"SELECT \* FROM unnest\(([^()]*)\)", r"SELECT u.* FROM fenced, unnest(\1) AS u WHERE fenced.ok", sql
    )
    head, last = guarded.rsplit(" INSERT INTO idempotency", 1)
    return (
        _fence_head(48)
        + head.removeprefix("WITH ")
        + ", new_idempotency AS (INSERT INTO idempotency"
        + last
        + ") SELECT ok FROM fenced"
    )


_FENCED_NEW_RUNS = _fenced_new_runs(_INSERT_NEW_RUNS)


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
        loop_thread = _LoopThread()
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
            loop.set_exception_handler(_log_loop_error)
            async with _serve(url, _TrioAsyncio(loop), pool_size, writers, limit_s, session) as store:
                yield store
    else:
        raise ValueError(f"unknown bridge {bridge!r}")


@asynccontextmanager
async def _serve(
    url: str,
    bridge: _Bridge,
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
