"""PostgreSQL under a burst: thousands of concurrent commits and reads through a small pool with
short timeouts, connections killed mid-burst (`pg_terminate_backend`), callers cancelled from
Trio mid-call. Every caller sees success or `StorageUnavailable`; nothing escapes
`open_postgres`; the store works afterwards; whatever was acknowledged is stored."""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest
import trio
import trio.testing

from foliot.core.errors import StaleWrite, StorageUnavailable
from foliot.core.workflow.model import Event
from foliot.storage.base import UnitOfWork
from foliot.storage.postgres import PostgresStore, open_postgres

from ..pg import Cluster, terminate_connections
from .test_contract import make_run

pytestmark = pytest.mark.postgres

OPS = 3000


@pytest.fixture
def pg_url(pg_cluster: Cluster | None) -> str:
    configured = os.environ.get("FOLIOT_TEST_DATABASE_URL")
    if configured:
        return configured
    assert pg_cluster is not None
    return pg_cluster.new_database()


async def eventually(store: PostgresStore, limit_s: float = 15) -> None:
    """The store answers again (connections come back by themselves)."""
    with trio.fail_after(limit_s):
        while True:
            try:
                await store.ping()
                return
            except StorageUnavailable:
                await trio.sleep(0.1)


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_burst_with_killed_connections_answers_only_success_or_unavailable(
    pg_url: str, bridge: str
) -> None:
    rng = random.Random(14)
    outcomes: Counter[str] = Counter()
    acknowledged: list[str] = []
    reasons: Counter[str] = Counter()
    with trio.fail_after(60):
        async with open_postgres(pg_url, bridge=bridge, pool_size=4, limit_s=2.0) as store:

            async def one(i: int) -> None:
                run_id = f"b{i:05d}"
                try:
                    if i % 3 == 2:
                        await store.get_run(f"b{i - 1:05d}")
                        outcomes["read"] += 1
                    else:
                        await store.commit(
                            UnitOfWork(make_run(run_id), None, (Event(1, 0, 1, "run_started"),))
                        )
                        acknowledged.append(run_id)
                        outcomes["committed"] += 1
                except StorageUnavailable as exc:
                    outcomes["unavailable"] += 1
                    reasons[str(exc)[:60]] += 1
                # anything else propagates and fails the test

            async def cancelled_midway(i: int) -> None:
                with trio.move_on_after(rng.random() * 0.05):
                    await one(i)

            async def killer() -> None:
                for _ in range(3):
                    await trio.sleep(0.3)
                    outcomes["killed"] += await trio.to_thread.run_sync(terminate_connections, pg_url)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(killer)
                for i in range(OPS):
                    nursery.start_soon(cancelled_midway if i % 10 == 0 else one, i)
                    if i % 100 == 0:
                        await trio.sleep(0.01)  # a burst, spread a little so the kills land mid-way
            print(dict(outcomes), store.stats, reasons.most_common(8))
            assert outcomes["killed"] > 0  # (how many commits got through depends on the machine)

            await eventually(store)
            for attempt in range(50):  # a connection killed while idle may yet be noticed once
                try:
                    await store.commit(UnitOfWork(make_run(f"after{attempt}"), None))
                    break
                except StorageUnavailable:
                    await trio.sleep(0.1)
            assert (await store.get_run(f"after{attempt}")) is not None
            # Durable before effect: every acknowledged commit is there.
            missing = [r for r in acknowledged if await store.get_run(r) is None]
            assert missing == []


async def test_group_commit_one_refused_unit_does_not_sink_its_neighbours(pg_url: str) -> None:
    async with open_postgres(pg_url, pool_size=3) as store:
        await store.commit(UnitOfWork(make_run("stale"), None))
        refused: list[BaseException] = []

        async def stale() -> None:
            try:
                await store.commit(UnitOfWork(make_run("stale"), 41))  # wrong expected seq
            except StaleWrite as exc:
                refused.append(exc)

        before = store.stats
        async with trio.open_nursery() as nursery:
            for i in range(300):
                nursery.start_soon(store.commit, UnitOfWork(make_run(f"g{i}"), None))
                if i == 150:
                    nursery.start_soon(stale)
        units = store.stats["units"] - before["units"]
        batches = store.stats["batches"] - before["batches"]
        assert len(refused) == 1
        assert units == 300 and batches < units / 4  # far fewer transactions than units
        for i in range(300):
            assert await store.get_run(f"g{i}") is not None


async def test_a_queue_for_connections_is_busy_not_an_outage(pg_url: str) -> None:
    """Callers queueing for a tiny pool are answered (or told 'busy'); nothing is reset."""
    async with open_postgres(pg_url, pool_size=1, limit_s=1.0) as store:
        results: Counter[str] = Counter()

        async def slow() -> None:
            try:
                await store._call(lambda c: c.execute("SELECT pg_sleep(0.3)"))
                results["ok"] += 1
            except StorageUnavailable as exc:
                results["busy" if "busy" in str(exc) else "late"] += 1

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(slow)
        assert results["ok"] >= 2 and results["busy"] >= 1, results
        assert store._driver._expired_at == 0  # a queue is not an outage: nothing was reset
        await store.ping()


async def test_a_driver_callbacks_error_on_the_trio_asyncio_loop_is_logged_not_raised(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """asyncpg can fail inside a loop callback (a connection lost while connecting, under
    load): trio-asyncio's default handler would re-raise that into the loop's nursery and out
    of `open_postgres`. Both bridges log it instead, and the store goes on."""
    with trio.fail_after(30):
        async with open_postgres(pg_url, bridge="trio-asyncio", pool_size=2) as store:
            loop = store._bridge.loop  # type: ignore[attr-defined]
            lost = ConnectionError("unexpected connection_lost() call")
            loop.call_exception_handler(
                {"message": "Future exception was never retrieved", "exception": lost}
            )
            await trio.testing.wait_all_tasks_blocked()
            await store.ping()
    assert "unexpected connection_lost() call" in caplog.text
