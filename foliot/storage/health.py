"""Whether the store takes writes: what `/readyz` says (issue 20, item 6).

A store can answer reads and still refuse every write: a full disk, a file system remounted
read-only, a PostgreSQL that went read-only or away. Each commit of a unit of work
(`Engine.shielded`) reports here: a commit that fails for the store's sake (anything but a
refusal of the unit itself: a stale write, a taken key) marks the store failing, the next one
that succeeds clears it. While it is failing, `/readyz` answers 503 so a load balancer stops
sending traffic; each `/readyz` then tries one write of its own (`probe_write`: the secret key
check row rewritten with itself, so nothing changes), and the first that succeeds clears the
mark: readiness comes back by itself once the store takes writes again, whether or not any
client is still sending work.

Two things that probe cannot see on SQLite (issue 38, item 9), whose no-op update fits in
pages it already holds while a 20 KB input does not. Free space on the database's file system
under `FOLIOT_MIN_FREE_BYTES` (`DiskSpace`, `statvfs` in a worker thread) counts as not ready
before any write fails. And a write refused for want of space or by an I/O error
(`space_failure`) is not cleared by a probe that lands: only by an ordinary commit that lands,
or by a probe once `/readyz` saw the free space short and back over the margin since (the disk
filled and was freed). PostgreSQL's probe writes a new row version and its WAL record: it
clears any failure, as before.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import attrs
import trio

from ..core.errors import StaleWrite, StorageError, UniqueViolation
from .pg_calls import PgCalls

T = TypeVar("T")

PROBE_SQL = "UPDATE secret_key_check SET value = value WHERE id = 1"
PROBE_LIMIT_S = 3.0


class ProbeStore(Protocol):
    async def probe_write(self) -> None:
        """One small write that changes nothing; raises what a failed commit raises."""
        ...


def refuses_writes(exc: BaseException) -> bool:
    """Whether a failed write says the store refuses writes (not that the unit was refused)."""
    return isinstance(exc, StorageError) and not isinstance(exc, (StaleWrite, UniqueViolation))


# What SQLite (SQLITE_FULL, SQLITE_IOERR) and PostgreSQL (53100 disk_full, 58030 io_error: "could
# not extend file", "No space left on device") say when a write finds no room or a bad disk.
_SPACE_FAILURES: Final = (
    "disk is full",
    "disk i/o error",
    "no space left",
    "could not extend file",
    "disk full",
    "input/output error",
)


def space_failure(exc: BaseException) -> bool:
    """Whether a refused write says the disk is full or failing (a no-op probe proves nothing)."""
    text = str(exc).lower()
    return any(marker in text for marker in _SPACE_FAILURES)


def statvfs_free(path: str) -> Callable[[], Awaitable[int]]:
    """Bytes an unprivileged writer may still use on the file system holding `path`, read with
    `statvfs` in a worker thread (a stalled mount never blocks the event loop)."""

    def read() -> int:
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    async def free() -> int:
        return await trio.to_thread.run_sync(read, abandon_on_cancel=True)

    return free


@attrs.frozen
class DiskSpace:
    """The SQLite database's file system and the free space under which it counts as full."""

    path: str
    min_free_bytes: int
    free_bytes: Callable[[], Awaitable[int]]

    async def shortfall(self) -> str | None:
        """Why the store cannot take ordinary writes for want of space, or None."""
        if self.min_free_bytes <= 0:
            return None
        with trio.move_on_after(PROBE_LIMIT_S) as scope:
            free = await self.free_bytes()
        if scope.cancelled_caught:
            return "the database's file system did not answer statvfs in time"
        if free < self.min_free_bytes:
            # No figures: /readyz is unauthenticated.
            return (
                "free space on the database's file system is under FOLIOT_MIN_FREE_BYTES; writes may not land"
            )
        return None


@attrs.define
class WriteHealth:
    """The store's write health as the last commit (or probe) found it."""

    failing_since: int | None = None  # ms, the first failure of the current run of failures
    reason: str | None = None
    failures: int = 0  # writes failed for the store's sake, ever
    probing: bool = False
    space: DiskSpace | None = None  # None: no local file system to watch (PostgreSQL, :memory:)
    # The current failure is a write refused for want of space or an I/O error. On a watched file
    # system a probe landing does not clear it (SQLite's no-op update fits in pages it holds),
    # unless the watch saw the space short and then back over the margin since (`space_freed`):
    # else only an ordinary commit that lands does (`succeeded`).
    space_failure: bool = False
    space_was_short: bool = False

    @property
    def healthy(self) -> bool:
        return self.failing_since is None

    def succeeded(self) -> None:
        """An ordinary commit landed: whatever failed before, writes land now."""
        self.failing_since = self.reason = None
        self.space_failure = self.space_was_short = False

    def failed(self, exc: BaseException, now_ms: int) -> None:
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = now_ms
        self.reason = f"{type(exc).__name__}: {exc}"[:300]
        if space_failure(exc):
            self.space_failure = True

    async def shortfall(self) -> str | None:
        """Free space under the margin on the store's file system (None: enough, or not watched)."""
        if self.space is None:
            return None
        short = await self.space.shortfall()
        if short is not None and self.space_failure:
            self.space_was_short = True
        return short

    @property
    def probe_may_clear(self) -> bool:
        """Whether a probe that lands proves ordinary writes land too (see `space_failure`)."""
        return not self.space_failure or self.space is None or self.space_was_short

    async def recheck(self, store: ProbeStore, now_ms: int) -> bool:
        """While failing: try one write (one at a time; concurrent callers do not wait for it)
        and clear the mark if it lands — unless the probe proves nothing (`probe_may_clear`). True
        when healthy afterwards."""
        if self.healthy:
            return True
        if self.probing or not self.probe_may_clear:
            return False
        self.probing = True
        try:
            with trio.move_on_after(PROBE_LIMIT_S):
                await store.probe_write()
                self.succeeded()
        except StorageError as exc:
            self.failed(exc, now_ms)
        finally:
            self.probing = False
        return self.healthy


class ProbeSqlite:
    if TYPE_CHECKING:  # provided by SqliteStore

        async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
            raise NotImplementedError

    async def probe_write(self) -> None:
        await self._write(lambda c: c.execute(PROBE_SQL))


class ProbePostgres(PgCalls):
    async def probe_write(self) -> None:
        await self._call(lambda c: c.execute(PROBE_SQL), write=True, limit_s=PROBE_LIMIT_S)
