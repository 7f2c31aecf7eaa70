"""The keeper's statements get through while every pooled connection is held (PostgreSQL).

A fault run found the lease-loss loop: a node that gained partitions recovered their 50,000
open pushes, the reads held every connection of the pool and queued past the store's bound,
the keeper's renewals queued behind them, the node lost its leases, and the next owner did the
same. The keeper's statements now have a connection of their own (`postgres/lane.py`).

Real time, bounded: the held reads are `pg_sleep`s on the database, which no MockClock moves.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import trio

from foliot.core.errors import StorageUnavailable
from foliot.storage.postgres import open_postgres

from .test_cluster_store import psql

pytestmark = pytest.mark.postgres

TTL = 10_000
HOLD_S = 4.0  # how long each slow read holds its pooled connection
LOCK_7 = b"BEGIN;\nSELECT partition FROM cluster_leases WHERE partition = 7 FOR SHARE;\n\\echo locked\n"
SLEEPING = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%'"


async def test_renewals_get_through_while_slow_reads_hold_every_pooled_connection(pg_cluster: Any) -> None:
    url = pg_cluster.new_database()
    async with open_postgres(url, pool_size=2, writers=1) as store:
        assert await store.cluster_acquire("n0", range(8), TTL) == {p: 1 for p in range(8)}

        async def slow_read() -> None:
            await store._call(lambda c: c.fetchval("SELECT pg_sleep($1)", HOLD_S), limit_s=HOLD_S + 5)

        async def sleeping() -> int:  # asked through psql: neither the pool nor the lane
            done = await trio.run_process(
                [psql(), url, "-tAc", SLEEPING], capture_stdout=True, capture_stderr=True
            )
            return int(done.stdout.strip())

        with trio.fail_after(3 * HOLD_S):
            async with trio.open_nursery() as nursery:
                for _ in range(3):  # both pooled connections, and one more read in line
                    nursery.start_soon(slow_read)
                for _ in range(100):
                    if await sleeping() == 2:
                        break
                    await trio.sleep(0.05)
                begun = trio.current_time()
                with trio.move_on_after(HOLD_S / 2) as waited:
                    renewed = await store.cluster_renew("n0", {p: 1 for p in range(8)}, TTL)
                    view = await store.cluster_heartbeat("n0", "http://n0", 0)
                    got = await store.cluster_acquire("n0", [9], TTL)
                took = trio.current_time() - begun
                assert not waited.cancelled_caught, "the keeper's statements waited behind the pool"
                assert await sleeping() == 2, "the reads must still hold the pool"
        assert renewed == set(range(8)) and got == {9: 1}
        assert view.held_by("n0") == {p: 1 for p in range(8)}
        assert took < 1.0, f"the keeper's statements took {took:.1f}s"
        assert store._driver.lane.connects == 1


async def test_a_renewal_stuck_on_a_row_lock_frees_the_lane_when_its_answer_is_late(pg_cluster: Any) -> None:
    """A renewal waiting on a lease row another session locked (a stuck fenced write) gives up
    once its answer could no longer be used, so the keeper's next statements get through
    instead of queueing on the lane for the store's 10 s bound."""
    ttl = 2_000  # the renewal's bound: 1 s (its TTL less the keeper's 1 s margin)
    url = pg_cluster.new_database()
    async with open_postgres(url) as store:
        assert await store.cluster_acquire("n0", [7], 60_000) == {7: 1}
        holder = await trio.lowlevel.open_process(
            [psql(), url, "-Xq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert holder.stdin is not None and holder.stdout is not None
        try:
            await holder.stdin.send_all(LOCK_7)
            seen = b""
            with trio.fail_after(30):
                while b"locked" not in seen:
                    seen += await holder.stdout.receive_some()
            begun = trio.current_time()
            with trio.fail_after(4), pytest.raises(StorageUnavailable):
                await store.cluster_renew("n0", {7: 1}, ttl)
            with trio.fail_after(2):
                view = await store.cluster_heartbeat("n0", "http://n0", 0)
            assert trio.current_time() - begun < 3.0
            assert view.held_by("n0") == {7: 1}
        finally:
            await holder.stdin.send_all(b"COMMIT;\n\\q\n")
            await holder.wait()
        assert await store.cluster_renew("n0", {7: 1}, ttl) == {7}
