"""The secret key's check value, stored once per database (issue 10).

Every node of a cluster must encrypt and sign with the same FOLIOT_SECRET_KEY. At its first
start a database is given the key's check value (`credentials.key_check`: an HMAC of a
constant under a key derived from the secret key, which tells nothing about the key); a node
whose key gives another value refuses to start (`foliot.server.check_secret_key`) instead of
failing to decrypt apps' signing secrets later, or signing task tokens the others reject.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import asyncpg

from .pg_calls import PgCalls

T = TypeVar("T")


class KeyCheckStore(Protocol):
    async def secret_key_check(self, value: str) -> str:
        """Store `value` as the database's key check value unless one is stored already; the
        stored value (`value` itself on a fresh database)."""
        ...


class KeyCheckPostgres(PgCalls):
    async def secret_key_check(self, value: str) -> str:
        async def put(c: asyncpg.Connection) -> str:
            await c.execute(
                "INSERT INTO secret_key_check (id, value) VALUES (1, $1) ON CONFLICT (id) DO NOTHING", value
            )
            # A statement of its own: it sees the row another node's start may have just written.
            stored: str = await c.fetchval("SELECT value FROM secret_key_check WHERE id = 1")
            return stored

        return await self._call(put, write=True)


class KeyCheckSqlite:
    if TYPE_CHECKING:  # provided by SqliteStore

        async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
            raise NotImplementedError

    async def secret_key_check(self, value: str) -> str:
        def put(c: sqlite3.Connection) -> str:
            c.execute("INSERT OR IGNORE INTO secret_key_check (id, value) VALUES (1, ?)", (value,))
            row = c.execute("SELECT value FROM secret_key_check WHERE id = 1").fetchone()
            return str(row[0])

        return await self._write(put)
