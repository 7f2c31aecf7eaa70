"""A connection of its own for the lease keeper's statements, outside the pool.

Renewals must get through whatever else the node is doing: with the pool's connections all held
by reads (the recovery of a large backlog, a burst of actors loading their runs), a renewal that
waited in the pool's line would miss its lease's end and the node would lose its partitions,
which another node would recover and lose the same way. So the keeper's statements go one at a
time (the keeper is one task) on one dedicated connection, opened on first use with the node's
session settings and opened again after any failure; nothing else ever waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import asyncpg

from ...core.errors import StorageUnavailable

T = TypeVar("T")
log = logging.getLogger("foliot.storage.postgres")


class Lane:
    """One asyncpg connection, one statement (or callable) at a time, each bounded."""

    def __init__(self, url: str, session: Mapping[str, str], connect_timeout_s: float) -> None:
        self.url = url
        self.session = dict(session)
        self.connect_timeout_s = connect_timeout_s
        self.conn: asyncpg.Connection | None = None
        self.closed = False
        self.connects = 0  # connections opened (the tests read it)
        self._lock: asyncio.Lock | None = None

    async def call(self, fn: Callable[[asyncpg.Connection], Awaitable[T]], limit_s: float) -> T:
        """`fn(conn)` on the lane's connection within `limit_s`, waiting for the lane included.
        Any failure but a refused statement closes the connection (the next call reconnects)."""
        if self.closed:
            raise StorageUnavailable("the store is closed")
        if self._lock is None:
            self._lock = asyncio.Lock()
        deadline = time.monotonic() + limit_s
        async with asyncio.timeout(limit_s):
            async with self._lock:
                conn = self.conn
                if conn is None or conn.is_closed():
                    conn = self.conn = await asyncpg.connect(
                        self.url,
                        timeout=max(0.001, min(self.connect_timeout_s, deadline - time.monotonic())),
                        server_settings=self.session or None,
                    )
                    self.connects += 1
                try:
                    return await fn(conn)
                except asyncpg.PostgresError as exc:
                    if isinstance(exc, asyncpg.PostgresConnectionError) or conn.is_in_transaction():
                        self._drop()
                    raise
                except BaseException:
                    self._drop()  # cut short (a timeout) or broken: its state is unknown
                    raise

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def close(self) -> None:
        self.closed = True
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 2)
            except BaseException as exc:
                log.debug("closing the lease connection: %r", exc)
                conn.terminate()
