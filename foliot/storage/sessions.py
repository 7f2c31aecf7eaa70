"""Console sessions in the database, one statement set for both backends (issue 20, item 4).

A row per sign-in: the session's id (shown to operators, `ses_<hex>`), the SHA-256 of the
cookie's secret, the subject (`admin` or an operator token's id), the check value of the admin
token it was made under (`key_check`), when it was made, last seen and ends at the latest, and
when it was ended (signed out, or ended by an operator). Kept in the database, so every node
of a cluster sees a sign-out at once. Statements use `?`; PostgreSQL runs them `numbered`.
Rows are deleted once past their absolute expiry, at the next sign-in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import asyncpg
import attrs

from .pg_calls import PgCalls
from .swf_sql import numbered

T = TypeVar("T")

COLUMNS: Final = "session_id, secret_hash, subject, key_check, created_at, last_seen, expires_at, revoked_at"
INSERT: Final = f"INSERT INTO console_sessions ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
DELETE_EXPIRED: Final = "DELETE FROM console_sessions WHERE expires_at <= ?"
GET: Final = f"SELECT {COLUMNS} FROM console_sessions WHERE session_id = ?"
TOUCH: Final = (
    "UPDATE console_sessions SET last_seen = ? WHERE session_id = ? AND revoked_at IS NULL AND last_seen < ?"
)
END_ONE: Final = "UPDATE console_sessions SET revoked_at = ? WHERE session_id = ? AND revoked_at IS NULL"
END_OTHER_KEYS: Final = (
    "UPDATE console_sessions SET revoked_at = ? WHERE revoked_at IS NULL AND key_check <> ?"
)
END_SUBJECT: Final = "UPDATE console_sessions SET revoked_at = ? WHERE revoked_at IS NULL AND subject = ?"
# Live sessions: not ended, not past either expiry, made under this admin token; newest first.
LIVE: Final = (
    f"SELECT {COLUMNS} FROM console_sessions WHERE revoked_at IS NULL AND expires_at > ? AND last_seen > ?"
    " AND key_check = ? ORDER BY created_at DESC, session_id DESC LIMIT ?"
)


@attrs.frozen
class ConsoleSessionRecord:
    session_id: str
    secret_hash: str
    subject: str  # "admin" or an operator token id
    key_check: str
    created_at: int
    last_seen: int
    expires_at: int
    revoked_at: int | None = None


class SessionStore(Protocol):
    async def add_console_session(self, session: ConsoleSessionRecord) -> None:
        """Store a new session (and delete those past their absolute expiry)."""
        ...

    async def get_console_session(self, session_id: str) -> ConsoleSessionRecord | None: ...

    async def touch_console_session(self, session_id: str, now: int, older_than: int) -> None:
        """Record activity at `now` when the last one recorded is before `older_than`."""
        ...

    async def end_console_session(self, session_id: str, now: int) -> bool:
        """End one session; False when there is none, or it has ended already."""
        ...

    async def end_console_sessions(
        self, now: int, *, other_key: str | None = None, subject: str | None = None
    ) -> int:
        """End the sessions made under another admin token than `other_key`, or those of
        `subject`; how many."""
        ...

    async def live_console_sessions(
        self, now: int, idle_since: int, key_check: str, limit: int
    ) -> list[ConsoleSessionRecord]: ...


def _end_many(other_key: str | None, subject: str | None) -> tuple[str, str]:
    if (other_key is None) == (subject is None):
        raise ValueError("end the sessions of another key or of a subject, one of the two")
    return (END_OTHER_KEYS, other_key) if other_key is not None else (END_SUBJECT, subject)  # type: ignore[return-value]


class SessionsSqlite:
    if TYPE_CHECKING:  # provided by SqliteStore

        async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
            raise NotImplementedError

        async def _read(self, fn: Callable[[sqlite3.Connection], T], *, scan: bool = False) -> T:
            raise NotImplementedError

    async def add_console_session(self, session: ConsoleSessionRecord) -> None:
        def put(c: sqlite3.Connection) -> None:
            c.execute(DELETE_EXPIRED, (session.created_at,))
            c.execute(INSERT, attrs.astuple(session))

        await self._write(put)

    async def get_console_session(self, session_id: str) -> ConsoleSessionRecord | None:
        row = await self._read(lambda c: c.execute(GET, (session_id,)).fetchone())
        return None if row is None else ConsoleSessionRecord(*row)

    async def touch_console_session(self, session_id: str, now: int, older_than: int) -> None:
        await self._write(lambda c: c.execute(TOUCH, (now, session_id, older_than)))

    async def end_console_session(self, session_id: str, now: int) -> bool:
        return bool(await self._write(lambda c: c.execute(END_ONE, (now, session_id)).rowcount == 1))

    async def end_console_sessions(
        self, now: int, *, other_key: str | None = None, subject: str | None = None
    ) -> int:
        sql, arg = _end_many(other_key, subject)
        return int(await self._write(lambda c: c.execute(sql, (now, arg)).rowcount))

    async def live_console_sessions(
        self, now: int, idle_since: int, key_check: str, limit: int
    ) -> list[ConsoleSessionRecord]:
        args = (now, idle_since, key_check, limit)
        rows = await self._read(lambda c: c.execute(LIVE, args).fetchall(), scan=True)
        return [ConsoleSessionRecord(*r) for r in rows]


class SessionsPostgres(PgCalls):
    async def add_console_session(self, session: ConsoleSessionRecord) -> None:
        async def put(c: asyncpg.Connection) -> None:
            await c.execute(numbered(DELETE_EXPIRED), session.created_at)
            await c.execute(numbered(INSERT), *attrs.astuple(session))

        await self._call(put, write=True)

    async def get_console_session(self, session_id: str) -> ConsoleSessionRecord | None:
        row = await self._call(lambda c: c.fetchrow(numbered(GET), session_id))
        return None if row is None else ConsoleSessionRecord(*row)

    async def touch_console_session(self, session_id: str, now: int, older_than: int) -> None:
        await self._call(lambda c: c.execute(numbered(TOUCH), now, session_id, older_than), write=True)

    async def end_console_session(self, session_id: str, now: int) -> bool:
        return (
            _count(await self._call(lambda c: c.execute(numbered(END_ONE), now, session_id), write=True)) == 1
        )

    async def end_console_sessions(
        self, now: int, *, other_key: str | None = None, subject: str | None = None
    ) -> int:
        sql, arg = _end_many(other_key, subject)
        return _count(await self._call(lambda c: c.execute(numbered(sql), now, arg), write=True))

    async def live_console_sessions(
        self, now: int, idle_since: int, key_check: str, limit: int
    ) -> list[ConsoleSessionRecord]:
        rows = await self._call(lambda c: c.fetch(numbered(LIVE), now, idle_since, key_check, limit))
        return [ConsoleSessionRecord(*r) for r in rows]


def _count(status: Any) -> int:
    """The row count of an asyncpg command status (`UPDATE 3`)."""
    return int(str(status).rsplit(" ", 1)[-1])
