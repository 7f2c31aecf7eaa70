"""A commit whose answer was lost on PostgreSQL is only read back once the backend that ran it
has left `pg_stat_activity` (foliot/storage/postgres/writer.py `Driver._backend_gone`): until
then the database may still be finishing it, and a read-back could see the old document."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from foliot.storage.postgres import open_postgres

pytestmark = pytest.mark.postgres


async def test_a_backend_is_gone_once_its_connection_has_closed(database_url: str) -> None:
    if not database_url.startswith("postgres"):
        pytest.skip("PostgreSQL only: SQLite commits in this process")
    async with open_postgres(database_url) as pg:
        driver = pg._driver

        async def closing_soon() -> bool:
            conn = await asyncpg.connect(database_url)
            pid = conn.get_server_pid()
            busy = asyncio.ensure_future(conn.execute("SELECT pg_sleep(0.3)"))
            await asyncio.sleep(0.05)  # the statement is running: the backend is there
            waited = asyncio.ensure_future(driver._backend_gone(pid, bound_s=5.0))
            await busy
            await conn.close()
            return await waited

        async def never_closing() -> bool:
            conn = await asyncpg.connect(database_url)
            try:
                return await driver._backend_gone(conn.get_server_pid(), bound_s=0.3)
            finally:
                await conn.close()

        assert await pg._on_loop(closing_soon, 10.0) is True
        assert await pg._on_loop(never_closing, 10.0) is False
