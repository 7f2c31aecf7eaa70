"""The lease store's contract, on PostgreSQL and on the in-memory fake the keeper tests use."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator

import pytest
import trio

from foliot.storage.cluster import ClusterStore, node_session
from foliot.storage.factory import open_store

from ..pg import Cluster, _bin
from .fake import FakeCluster, FakeClusterStore

ALL = range(256)
TTL = 60_000


def psql() -> str:
    return _bin("psql")


@pytest.fixture(params=["fake", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ClusterStore]:
    if request.param == "fake":
        clock = [1_000_000]

        def now() -> int:
            clock[0] += 1  # the database's clock moves on between statements
            return clock[0]

        yield FakeClusterStore(FakeCluster(now))
        return
    url = request.getfixturevalue("pg_cluster").new_database()
    async with open_store(url) as pg:
        yield pg  # type: ignore[misc]


async def test_a_free_partition_is_taken_once_and_its_epoch_moves_on(store: ClusterStore) -> None:
    assert await store.cluster_acquire("a", range(10), TTL) == {p: 1 for p in range(10)}
    assert await store.cluster_acquire("b", range(5, 15), TTL) == {p: 1 for p in range(10, 15)}
    assert await store.cluster_acquire("a", [3], TTL) == {}  # already held, even by the asker
    await store.cluster_release("a", {3: 1})
    assert await store.cluster_acquire("b", [3], TTL) == {3: 2}


async def test_renewal_needs_the_holder_the_epoch_and_an_unexpired_lease(store: ClusterStore) -> None:
    await store.cluster_acquire("a", [0, 1, 2], TTL)
    assert await store.cluster_renew("a", {0: 1, 1: 1, 2: 7}, TTL) == {0, 1}  # 2: a stale epoch
    assert await store.cluster_renew("b", {0: 1}, TTL) == set()
    # A lease with no time left is expired at once: anyone may take it, its old holder cannot renew it.
    assert await store.cluster_acquire("a", [9], 0) == {9: 1}
    assert await store.cluster_acquire("b", [9], TTL) == {9: 2}
    assert await store.cluster_renew("a", {9: 1}, TTL) == set()
    assert await store.cluster_renew("b", {9: 2}, TTL) == {9}


async def test_a_stale_release_does_nothing(store: ClusterStore) -> None:
    await store.cluster_acquire("a", [4], 0)
    await store.cluster_acquire("b", [4], TTL)  # epoch 2
    await store.cluster_release("a", {4: 1})
    assert await store.cluster_renew("b", {4: 2}, TTL) == {4}


async def test_heartbeat_shows_nodes_and_leases_on_the_databases_clock(store: ClusterStore) -> None:
    first = await store.cluster_heartbeat("a", "http://10.0.0.1:8080", 3)
    await store.cluster_acquire("a", [0, 1], TTL)
    second = await store.cluster_heartbeat("b", "http://10.0.0.2:8080", 0)
    assert second.now >= first.now
    assert [(n.node_id, n.address, n.live_actors) for n in second.nodes] == [
        ("a", "http://10.0.0.1:8080", 3),
        ("b", "http://10.0.0.2:8080", 0),
    ]
    assert len(second.leases) == 256
    assert second.held_by("a") == {0: 1, 1: 1} and second.held_by("b") == {}
    assert len(second.free()) == 254


async def test_leaving_releases_everything_and_forgets_the_node(store: ClusterStore) -> None:
    await store.cluster_heartbeat("a", "http://a", 0)
    await store.cluster_acquire("a", range(20), TTL)
    await store.cluster_leave("a")
    view = await store.cluster_heartbeat("b", "http://b", 0)
    assert [n.node_id for n in view.nodes] == ["b"] and len(view.free()) == 256
    assert await store.cluster_acquire("b", [0], TTL) == {0: 2}


async def test_nodes_racing_for_every_partition_never_share_one(store: ClusterStore) -> None:
    won: dict[str, dict[int, int]] = {}

    async def grab(node: str) -> None:
        won[node] = await store.cluster_acquire(node, ALL, TTL)

    async with trio.open_nursery() as nursery:
        for node in ("a", "b", "c", "d"):
            nursery.start_soon(grab, node)
    taken = [p for got in won.values() for p in got]
    assert sorted(taken) == list(ALL)  # every partition won once, by one node


async def test_a_node_adopts_only_its_own_unexpired_leases_with_a_new_epoch(store: ClusterStore) -> None:
    await store.cluster_acquire("a", [1, 2], TTL)
    await store.cluster_acquire("a", [3], 0)  # expired: acquired again the ordinary way
    await store.cluster_acquire("b", [4], TTL)
    assert await store.cluster_adopt("a", [1, 2, 3, 4, 5], TTL) == {1: 2, 2: 2}
    assert await store.cluster_renew("a", {1: 1}, TTL) == set()  # the old epoch is fenced
    assert await store.cluster_renew("a", {1: 2, 2: 2}, TTL) == {1, 2}
    assert await store.cluster_renew("b", {4: 1}, TTL) == {4}


@pytest.mark.postgres
async def test_an_acquisition_skips_a_lease_row_a_stuck_transaction_holds(pg_cluster: Cluster) -> None:
    """A node paused inside a fenced write holds its lease rows FOR SHARE: the others' keepers
    take what is free at once and that row only once the transaction is gone."""
    url = pg_cluster.migrated_database()
    async with open_store(url) as pg:
        store: ClusterStore = pg  # type: ignore[assignment]
        assert await store.cluster_acquire("a", [7], 0) == {7: 1}  # expired at once
        holder = await trio.lowlevel.open_process(
            [psql(), url, "-Xq"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert holder.stdin is not None and holder.stdout is not None
        await holder.stdin.send_all(
            b"BEGIN;\nSELECT partition FROM cluster_leases WHERE partition = 7 FOR SHARE;\n\\echo locked\n"
        )
        seen = b""
        with trio.fail_after(30):
            while b"locked" not in seen:
                seen += await holder.stdout.receive_some()
        with trio.fail_after(10):  # not blocked behind the stuck transaction
            assert await store.cluster_acquire("b", [7, 8], TTL) == {8: 1}
        await holder.stdin.send_all(b"COMMIT;\n\\q\n")
        await holder.wait()
        assert await store.cluster_acquire("b", [7], TTL) == {7: 2}


async def _hold_lease_row(url: str, partition: int, app: str) -> trio.Process:
    """A psql session named `app` inside a transaction holding `partition`'s lease row FOR SHARE."""
    holder = await trio.lowlevel.open_process(
        [psql(), url, "-Xq"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PGAPPNAME": app},
    )
    assert holder.stdin is not None and holder.stdout is not None
    await holder.stdin.send_all(
        f"BEGIN;\nSELECT partition FROM cluster_leases WHERE partition = {partition} FOR SHARE;\n"
        "\\echo locked\n".encode()
    )
    seen = b""
    with trio.fail_after(30):
        while b"locked" not in seen:
            seen += await holder.stdout.receive_some()
    return holder


@pytest.mark.postgres
async def test_an_acquisition_ends_the_transactions_of_a_node_whose_leases_all_expired(
    pg_cluster: Cluster,
) -> None:
    """A node stopped halfway through sending a statement is not idle in its transaction, so no
    server timeout frees its lease rows: once all its leases expired, the others end its
    sessions (named `foliot-<node>`) that hold a transaction open, and take the rows at once."""
    url = pg_cluster.migrated_database()
    async with open_store(url) as pg:
        store: ClusterStore = pg  # type: ignore[assignment]
        assert await store.cluster_acquire("a", [7], 0) == {7: 1}  # expired at once
        assert await store.cluster_acquire("a", [9], TTL) == {9: 1}  # a is alive: holds 9
        holder = await _hold_lease_row(url, 7, "foliot-a")
        bystander = await _hold_lease_row(url, 8, "psql")  # not a node's session: left alone
        # TTL 2 ms: a transaction older than 1 ms counts as stuck.
        assert await store.cluster_acquire("b", [7, 8], 2) == {}  # a still holds 9
        await store.cluster_release("a", {9: 1})  # now every lease of a is gone
        with trio.fail_after(10):
            assert await store.cluster_acquire("b", [7, 8], 2) == {7: 2}
        sessions = "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
        names = {r[0] for r in await pg._call(lambda c: c.fetch(sessions))}  # type: ignore[attr-defined]
        assert "psql" in names and "foliot-a" not in names
        assert holder.stdin is not None and bystander.stdin is not None
        await holder.stdin.send_all(b"\\q\n")
        await holder.wait()
        await bystander.stdin.send_all(b"COMMIT;\n\\q\n")
        assert await bystander.wait() == 0
        assert await store.cluster_acquire("b", [8], TTL) == {8: 1}


@pytest.mark.postgres
async def test_a_nodes_sessions_are_named_after_it_and_end_when_idle_in_a_transaction(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.migrated_database()
    async with open_store(url, pg_session=node_session("n1", 3_000)) as pg:
        timeout = await pg._call(lambda c: c.fetchval("SHOW idle_in_transaction_session_timeout"))  # type: ignore[attr-defined]
        name = await pg._call(lambda c: c.fetchval("SHOW application_name"))  # type: ignore[attr-defined]
    assert (timeout, name) == ("1500ms", "foliot-n1")
