"""The group-commit writer: everything on the asyncio side (the pool, the write queue, the writers).

Writes are group-committed: `Driver.write(fn)` queues `fn`; a writer drains what queued while
the previous batch committed and runs the lot in one transaction (or one statement: `units.py`),
each `fn` in its own SAVEPOINT once one was refused, so one refused write doesn't sink its
neighbours. Nobody is answered before the shared COMMIT returns ("durable before effect" holds).
Writes made under leases (several nodes) are fenced (`fencing.py`).

Timeouts are enforced here (`asyncio.timeout`, asyncpg `command_timeout`), never by cancelling
asyncpg from Trio. Every driver error becomes a `StorageError` for the one caller concerned
(`translate`): connection trouble, timeouts and a full pool are `StorageUnavailable`. The pool
is never torn down while in use: broken connections are dropped by asyncpg at release and
`pool.expire_connections()` makes the idle ones reconnect after an outage.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import asyncpg

from ...core.errors import (
    CommitUnknown,
    Fenced,
    StaleWrite,
    StorageError,
    StorageUnavailable,
    UniqueViolation,
)
from ..base import UnitOfWork
from ..batch import BatchPlan, BatchRows, plan_batch
from ..fence import Fence
from .fencing import FENCED_NEW_RUNS, FENCED_UPDATE_RUNS_SET, RAN_OUT, fence_columns, held_fences
from .lane import Lane
from .units import (
    INSERT_NEW_RUNS,
    UPDATE_RUNS_SET,
    apply_plan,
    new_run_columns,
    only_new_runs,
    only_updates,
    update_set_columns,
)

T = TypeVar("T")
log = logging.getLogger("foliot.storage.postgres")

POOL_SIZE = 10  # connections: WRITERS for group commits, the rest for reads
WRITERS = 2  # batches in flight at once (one commits while the next is written)
BATCH_MAX = 256  # units of work in one transaction
CONNECT_TIMEOUT_S = 5.0
LIMIT_S = 10.0  # default bound on one call, queueing for a connection included
_SETTLE_S = 5.0  # a commit whose answer was lost: how long its backend may take to leave
_SETTLE_POLL_S = 0.05
_BACKEND_ALIVE = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)"

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


def translate(exc: BaseException) -> StorageError:
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
            self.future.set_exception(translate(error))


class Driver:
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
        self.lane = Lane(url, self.session, CONNECT_TIMEOUT_S)  # the lease keeper's, outside the pool

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
            raise translate(exc) from exc

    async def on_lane(self, fn: Callable[[asyncpg.Connection], Awaitable[T]], limit_s: float) -> T:
        """`fn(conn)` on the lease keeper's own connection (`lane.py`), never a pool's."""
        if self.closed:
            raise StorageUnavailable("the store is closed")
        try:
            return await self.lane.call(fn, limit_s)
        except StorageError:
            raise
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and _cancelling():
                raise  # the loop is shutting down
            if isinstance(exc, TimeoutError):
                raise StorageUnavailable(f"the database did not answer within {limit_s:.1f}s") from None
            raise translate(exc) from exc

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
        trouble or a timeout fails the whole batch: it changed nothing when it came before the
        commit was sent, and may have been applied when it came after (`CommitUnknown`: the
        single statements, and the transaction's COMMIT, whose answer was lost)."""
        savepoints = False
        # A refused job is answered only once the rest is committed: its refusal may be a
        # neighbour's row (two starts with one business key), which must be visible by then.
        refused_jobs: list[tuple[_Job, BaseException]] = []
        while batch:
            sent: list[int] = []  # the connection's backend pid, once the batch's commit is on its way
            try:
                results = await self._try_batch(batch, savepoints, sent)
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
                if sent and not isinstance(exc, asyncpg.PostgresError | asyncio.CancelledError):
                    # No answer to the commit: the database may have applied it, and may still
                    # be applying it (a COMMIT it has read is finished before its backend sees
                    # the connection gone): a read-back is only an answer once that backend
                    # has left.
                    settled = await self._backend_gone(sent[0])
                    error = CommitUnknown(
                        f"the commit's answer was lost ({type(exc).__name__}: {exc})", settled=settled
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

    async def _backend_gone(self, pid: int, bound_s: float = _SETTLE_S) -> bool:
        """Whether the backend that ran a commit whose answer was lost has left
        `pg_stat_activity` (so the commit is either durable or gone, and reading back tells
        which), waiting for it at most `bound_s`. False when it is still there, or when no
        other connection could ask: the read-back would not be an answer."""
        assert self.pool is not None
        deadline = time.monotonic() + bound_s
        try:
            async with asyncio.timeout(bound_s):
                async with self.pool.acquire() as conn:
                    while await conn.fetchval(_BACKEND_ALIVE, pid):
                        if time.monotonic() + _SETTLE_POLL_S > deadline:
                            return False
                        await asyncio.sleep(_SETTLE_POLL_S)
        except Exception:  # the database unreachable, the bound passed: it cannot say
            return False
        return True

    async def _try_batch(
        self, batch: list[_Job], savepoints: bool, sent: list[int]
    ) -> list[tuple[_Job, Any, BaseException | None]]:
        assert self.pool is not None
        deadline = max(job.deadline for job in batch)
        results: list[tuple[_Job, Any, BaseException | None]] = []
        units = [job.unit for job in batch if job.unit is not None] if not savepoints else []
        plan = plan_batch(units) if units else None
        if units and plan is None:
            # Not writable as sets (a run twice in the batch, ...): one by one, in savepoints.
            savepoints, units = True, []
        fences = _fences_of(batch)
        # The one-statement paths: units only, none with a guard to read or a slot to write.
        rows = plan.first if plan is not None and len(plan.together) == len(batch) else None
        conn = await self._acquire(deadline)
        try:
            if rows is not None and only_new_runs(rows):
                # Starts only: one statement in one round trip, atomic on its own (no BEGIN,
                # no COMMIT); refused as a set, they are written one by one in savepoints.
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    try:
                        sent.append(conn.get_server_pid())  # one statement: it commits on its own
                        if not fences:
                            await conn.execute(INSERT_NEW_RUNS, *new_run_columns(rows))
                        elif not await conn.fetchval(
                            FENCED_NEW_RUNS, *new_run_columns(rows), *fence_columns(fences)
                        ):
                            raise Fenced("a lease of this batch moved on: nothing was written")
                    except Exception as exc:
                        if _batch_fatal(exc) or conn.is_closed():
                            raise
                        raise _Refused(None, exc) from exc
                self.units_together += len(units)
                return [(job, None, None) for job in batch]
            if rows is not None and only_updates(rows):
                # Runs moving on (signals, task answers, timers): one statement as well. A unit
                # whose run moved underneath its seq writes nothing (every row it would add is
                # joined to the runs the UPDATE matched) and gets its StaleWrite; the rest commit.
                sent.append(conn.get_server_pid())  # one statement: it commits on its own
                return await self._update_batch(conn, batch, rows, fences, deadline)
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())), conn.transaction():
                results += await self._fenced_transaction(conn, batch, fences, units, plan, savepoints)
                sent.append(conn.get_server_pid())  # leaving the block sends COMMIT
        finally:
            await self.pool.release(conn)
        return results

    async def _fenced_transaction(
        self,
        conn: asyncpg.Connection,
        batch: list[_Job],
        fences: list[Fence],
        units: list[Any],
        plan: BatchPlan | None,
        savepoints: bool,
    ) -> list[tuple[_Job, Any, BaseException | None]]:
        """The batch's writes inside its transaction: the jobs' results."""
        results: list[tuple[_Job, Any, BaseException | None]] = []
        if fences:
            # The leases, read FOR SHARE: an acquisition by another node waits for this
            # commit, or has committed and this sees its new epoch. A job under a lease
            # that moved on is refused (`Fenced`) and nothing of it is written.
            held = await held_fences(conn, fences)
            fenced = [job for job in batch if any(f not in held for f in job.fences)]
            if fenced:
                results += [(job, None, _fenced(job)) for job in fenced]
                batch = [job for job in batch if job not in fenced]
                units = [job.unit for job in batch if job.unit is not None] if units else []
                plan = plan_batch(units) if units else None
        one_by_one = batch
        if units and plan is not None:
            # All units of work in a few statements (a round trip per table, not per unit),
            # a guarded one refused alone (it wrote nothing); refused as a set, they are
            # written one by one in savepoints.
            try:
                refused = await apply_plan(conn, plan)
            except Exception as exc:
                if _batch_fatal(exc) or conn.is_closed():
                    raise
                raise _Refused(None, exc) from exc
            unit_jobs = [job for job in batch if job.unit is not None]
            alone, instead = set(plan.alone), plan.instead(refused)
            for i, job in enumerate(unit_jobs):
                if i in instead:
                    results.append((job, False, None))  # its `otherwise` was written
                elif i not in alone:
                    results.append((job, None, refused.get(i)))
            one_by_one = [job for job in batch if job.unit is None] + [unit_jobs[i] for i in plan.alone]
            self.units_together += len(unit_jobs) - len(refused) + len(instead) - len(alone)
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
        if held_now and (ran_out := await conn.fetchval(RAN_OUT, held_now)):
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
        """`UPDATE_RUNS_SET` (or its fenced form) in one round trip, atomic on its own."""
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            try:
                if fences:
                    ok, updated = await conn.fetchrow(
                        FENCED_UPDATE_RUNS_SET, *update_set_columns(rows), *fence_columns(fences)
                    )
                    if not ok:
                        raise Fenced("a lease of this batch moved on: nothing was written")
                else:
                    updated = await conn.fetchval(UPDATE_RUNS_SET, *update_set_columns(rows))
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
        await self.lane.close()
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


def _fences_of(batch: list[_Job]) -> list[Fence]:
    """The distinct leases a batch's jobs are written under, in partition order (so lease rows
    are always locked in one order, as the keeper's renewals and acquisitions lock them)."""
    return sorted({f for job in batch for f in job.fences}, key=lambda f: (f.partition, f.epoch, f.node_id))


def _fenced(job: _Job) -> Fenced:
    where = ", ".join(f"partition {f.partition} epoch {f.epoch}" for f in job.fences)
    return Fenced(f"the lease ({where}) is no longer held by this node: nothing was written")
