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
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

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


@attrs.define
class WriteHealth:
    """The store's write health as the last commit (or probe) found it."""

    failing_since: int | None = None  # ms, the first failure of the current run of failures
    reason: str | None = None
    failures: int = 0  # writes failed for the store's sake, ever
    probing: bool = False

    @property
    def healthy(self) -> bool:
        return self.failing_since is None

    def succeeded(self) -> None:
        self.failing_since = self.reason = None

    def failed(self, exc: BaseException, now_ms: int) -> None:
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = now_ms
        self.reason = f"{type(exc).__name__}: {exc}"[:300]

    async def recheck(self, store: ProbeStore, now_ms: int) -> bool:
        """While failing: try one write (one at a time; concurrent callers do not wait for it)
        and clear the mark if it lands. True when healthy afterwards."""
        if self.healthy:
            return True
        if self.probing:
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
