"""`/readyz` tells the truth about writes (issue 20, item 6), over real HTTP on both stores:
while the store refuses every write it answers 503 (a load balancer stops sending traffic),
and it comes back by itself once a write lands again, with no client sending work meanwhile.

The faults are the databases' own: SQLite's writer connection made read-only (`PRAGMA
query_only`), PostgreSQL's tables given a trigger that fails every write with SQLSTATE 53100
(`disk_full`)."""

from __future__ import annotations

import asyncpg

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
