"""PostgreSQL `LISTEN/NOTIFY` as the nodes' broadcast channel (`foliot.actors.pull.Bus`).

`notify` is one `pg_notify` through the read pool (each statement commits by itself, so the
message leaves at once). `listen` holds one dedicated connection of its own (never a pool's: a
pooled connection is reset when released, and would stop listening), opened on the store's
asyncio loop; each notification is handed to the Trio thread through its token. A lost
connection is noticed by asyncpg's termination callback and reopened after a short backoff;
`on_connected` runs after every (re)connection, since notifications sent while disconnected
are lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
import trio

from .pg_calls import PgCalls

T = TypeVar("T")
log = logging.getLogger("foliot.storage.notify")

CONNECT_TIMEOUT_S = 5.0
BACKOFF_S = (0.2, 0.5, 1.0, 2.0)


class NotifyPostgres(PgCalls):
    if TYPE_CHECKING:  # provided by PostgresStore
        url: str

        async def _on_loop(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T:
            raise NotImplementedError

    async def notify(self, channel: str, payload: str) -> None:
        await self._call(lambda c: c.execute("SELECT pg_notify($1, $2)", channel, payload), limit_s=3.0)

    async def listen(
        self,
        channel: str,
        on_message: Callable[[str], None],
        on_connected: Callable[[], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        failures = 0
        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        while True:
            try:
                await self._listen_once(channel, on_message, on_connected, ready)
                failures = 0
                log.warning("cluster: the LISTEN connection was lost; reconnecting")
            except Exception as exc:  # could not connect: the node serves; hints come once connected
                delay = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
                failures += 1
                log.warning("cluster: LISTEN %s failed (%s); again in %.1f s", channel, exc, delay)
                ready()
                await trio.sleep(delay)

    async def _listen_once(
        self,
        channel: str,
        on_message: Callable[[str], None],
        on_connected: Callable[[], None],
        ready: Callable[[], None],
    ) -> None:
        """One connection's life: listen until it is lost."""
        token = trio.lowlevel.current_trio_token()
        lost = trio.Event()

        def heard(_conn: Any, _pid: int, _channel: str, payload: str) -> None:  # loop thread
            with suppress(trio.RunFinishedError):
                token.run_sync_soon(on_message, payload)

        def closed(_conn: Any) -> None:  # loop thread
            with suppress(trio.RunFinishedError):
                token.run_sync_soon(lost.set)

        async def connect() -> asyncpg.Connection:
            conn = await asyncpg.connect(self.url, timeout=CONNECT_TIMEOUT_S)
            try:
                conn.add_termination_listener(closed)
                await conn.add_listener(channel, heard)
            except BaseException:
                await conn.close(timeout=2)
                raise
            return conn

        conn = await self._on_loop(connect, CONNECT_TIMEOUT_S + 2)
        try:
            on_connected()
            ready()
            await lost.wait()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(3), suppress(Exception):
                await self._on_loop(lambda: _close(conn), 2)


async def _close(conn: asyncpg.Connection) -> None:
    if not conn.is_closed():
        await conn.close(timeout=2)
