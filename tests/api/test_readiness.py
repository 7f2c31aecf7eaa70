"""`/readyz` tells the truth about writes (issue 20, item 6), over real HTTP on both stores:
while the store refuses every write it answers 503 (a load balancer stops sending traffic),
and it comes back by itself once a write lands again, with no client sending work meanwhile.

The faults are the databases' own: SQLite's writer connection made read-only (`PRAGMA
query_only`), PostgreSQL's tables given a trigger that fails every write with SQLSTATE 53100
(`disk_full`)."""

from __future__ import annotations

import asyncpg
import pytest

from foliot.storage.health import DiskSpace
from foliot.storage.sqlite import SqliteStore

from ..conftest import Api

FLOW = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}
FULL = """
CREATE FUNCTION foliot_test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '53100'; END $$;
CREATE TRIGGER foliot_test_full BEFORE INSERT OR UPDATE ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION foliot_test_disk_full();
CREATE TRIGGER foliot_test_full BEFORE INSERT OR UPDATE ON secret_key_check
    FOR EACH STATEMENT EXECUTE FUNCTION foliot_test_disk_full();
"""
ROOM = """
DROP TRIGGER foliot_test_full ON runs;
DROP TRIGGER foliot_test_full ON secret_key_check;
DROP FUNCTION foliot_test_disk_full();
"""


async def full(api: Api, on: bool) -> None:
    store = api.engine.store
    if isinstance(store, SqliteStore):
        store._writer.execute(f"PRAGMA query_only={int(on)}")
        return

    async def ddl(c: asyncpg.Connection) -> None:
        await c.execute(FULL if on else ROOM)

    await store._call(ddl, write=True)


async def test_readyz_is_503_while_writes_fail_and_recovers_by_itself(api: Api) -> None:
    await api.register(FLOW)
    assert (await api.client.get("/readyz")).status_code == 200
    await full(api, True)
    try:
        r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "w"})
        assert r.status_code == 503 and "nothing was changed" in r.json()["error"]["message"]
        for _ in range(2):  # each /readyz tries a write of its own, which fails too
            ready = await api.client.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["error"]["code"] == "unavailable"
            assert "refuses writes" in ready.json()["error"]["message"]
    finally:
        await full(api, False)
    assert (await api.client.get("/readyz")).status_code == 200  # its probe write landed
    await api.start("w")


class FreeSpace:
    """An injected free-space reading for the database's file system."""

    def __init__(self, free: int) -> None:
        self.free = free

    async def __call__(self) -> int:
        return self.free


def watch(api: Api, free: int, margin: int = 1_000_000) -> FreeSpace:
    reading = FreeSpace(free)
    api.engine.write_health.space = DiskSpace("/data", margin, reading)
    return reading


def sqlite_only(api: Api) -> SqliteStore:
    store = api.engine.store
    if not isinstance(store, SqliteStore):
        pytest.skip("the free-space watch and SQLite's page cap are SQLite's")
    return store


def cap_pages(store: SqliteStore, on: bool) -> None:
    """SQLite refuses a write that needs a page past `max_page_count` with `database or disk is
    full` (SQLITE_FULL), as on a full disk, while an update that fits in the pages it already
    has (the readiness probe) lands."""
    pages = store._writer.execute("PRAGMA page_count").fetchone()[0]
    store._writer.execute(f"PRAGMA max_page_count={pages if on else 4_294_967_294}")


async def test_readyz_is_503_while_free_space_is_under_the_margin(api: Api) -> None:
    sqlite_only(api)
    reading = watch(api, 999_999)
    ready = await api.client.get("/readyz")
    assert ready.status_code == 503 and "FOLIOT_MIN_FREE_BYTES" in ready.json()["error"]["message"]
    reading.free = 1_000_000
    assert (await api.client.get("/readyz")).status_code == 200


async def test_a_write_refused_for_space_is_not_cleared_by_the_no_op_probe(api: Api) -> None:
    store = sqlite_only(api)
    await api.register(FLOW)
    reading = watch(api, 10**12)
    big = {"blob": "x" * 200_000}
    cap_pages(store, True)
    try:
        r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "w", "input": big})
        assert r.status_code == 503, r.text
        for _ in range(2):  # the probe lands (it needs no new page), and proves nothing
            ready = await api.client.get("/readyz")
            assert ready.status_code == 503 and "refuses writes" in ready.json()["error"]["message"]
    finally:
        cap_pages(store, False)
    assert (await api.client.get("/readyz")).status_code == 503  # no ordinary write landed yet
    await api.start("w", big)  # one does
    assert (await api.client.get("/readyz")).status_code == 200

    # The disk filled and was freed (the watch saw it short, then back): the probe may clear it.
    cap_pages(store, True)
    try:
        r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "w", "input": big})
        assert r.status_code == 503, r.text
        reading.free = 10
        assert "FOLIOT_MIN_FREE_BYTES" in (await api.client.get("/readyz")).json()["error"]["message"]
    finally:
        cap_pages(store, False)
    reading.free = 10**12
    assert (await api.client.get("/readyz")).status_code == 200
