"""Leases and node announcements for several nodes on one PostgreSQL (`foliot.cluster`).

PostgreSQL only: SQLite is single-node (`foliot.storage.node_lock`). Every time comparison
uses the database's clock (`clock_timestamp()`, ms), so nodes never compare their own clocks;
an update that takes a lease re-checks under the row lock that it is still free, so two nodes
racing for one partition cannot both win. Acquisitions skip a row another transaction has locked
(a write in flight under the current holder's fence, read FOR SHARE): they take it at a later
tick, and one stuck transaction never holds up the keeper's other work. Lease rows are always
locked in partition order (here and by the fencing of writes in `postgres.py`), so these updates
and a batch's fence check cannot deadlock. These calls go through the read pool (each statement
commits by itself), never through the group-commit writers: a renewal must not wait behind a
burst of runs' writes.

A node stopped in the middle of a write (SIGSTOP, a frozen VM) can hold a lease row it read FOR
SHARE for as long as it stays stopped: idle inside a transaction PostgreSQL ends its session
after half a lease (`node_session`), but stopped halfway through sending a statement it is not
idle, and no server timeout applies. So an acquisition first ends the sessions of every node
whose leases have all expired and whose transaction is older than half a lease (each node's
sessions are named `foliot-<node id>`): that node is cut off, its writes would be fenced anyway,
and ending its transaction frees the row for this acquisition.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

import asyncpg

from ..core.leases import MARGIN_MS, Lease, Node, View
from .pg_calls import PgCalls

NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
log = logging.getLogger(__name__)


def node_session(node_id: str, ttl_ms: int) -> dict[str, str]:
    """The settings a node's PostgreSQL sessions start with: named after the node (so another
    node's keeper can end them once the node is cut off), and ended by the server when idle
    inside a transaction for half a lease (before the node's leases could be taken over)."""
    return {"application_name": f"foliot-{node_id}", "idle_in_transaction_session_timeout": str(ttl_ms // 2)}


# $1: the acquiring node; $2: its lease TTL (ms). Waits up to a second for each session to end.
_END_CUT_OFF = (
    "SELECT a.application_name, pg_terminate_backend(a.pid, 1000) AS ended FROM pg_stat_activity a"
    " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"
    " AND a.xact_start < clock_timestamp() - make_interval(secs => $2 / 2000.0)"
    " AND a.application_name IN (SELECT 'foliot-' || node_id FROM cluster_leases"
    f" WHERE node_id IS NOT NULL AND node_id <> $1 GROUP BY node_id HAVING max(expires_at) <= {NOW_MS})"
)


def _take(set_holder: str, which: str) -> str:
    """Lease rows of `$2` matching `which` get a new epoch and `$3` ms more (holder `$1`)."""
    return (
        f"UPDATE cluster_leases AS l SET {set_holder}epoch = l.epoch + 1, expires_at = {NOW_MS} + $3"
        f" FROM (SELECT partition FROM cluster_leases WHERE partition = ANY($2::int[]) AND {which}"
        " ORDER BY partition FOR UPDATE SKIP LOCKED) AS k"
        " WHERE l.partition = k.partition RETURNING l.partition, l.epoch"
    )


# Free or expired rows become $1's; $1's own unexpired rows (a restart under its id) move on.
_ACQUIRE = _take("node_id = $1, ", f"(node_id IS NULL OR expires_at <= {NOW_MS})")
_ADOPT = _take("", f"node_id = $1 AND expires_at > {NOW_MS}")


def _answer_within(ttl_ms: int) -> float:
    """How long a lease statement may hold the keeper's connection: no longer than its answer
    could still be used (the keeper trusts a renewal for the TTL less `MARGIN_MS`), so one
    stuck behind a row lock or a lost network does not hold up the next ticks' statements."""
    return max(1.0, (ttl_ms - MARGIN_MS) / 1000)


class ClusterStore(Protocol):
    async def cluster_heartbeat(self, node_id: str, address: str, live_actors: int) -> View:
        """Announce `node_id` (at the database's now) and read the cluster: nodes and leases."""
        ...

    async def cluster_acquire(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        """Take those of `partitions` nobody holds (or whose lease expired): partition → new epoch."""
        ...

    async def cluster_renew(self, node_id: str, held: Mapping[int, int], ttl_ms: int) -> set[int]:
        """Extend the leases `node_id` still holds at these epochs, unexpired; the ones renewed."""
        ...

    async def cluster_adopt(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        """Take over, with a new epoch, leases the database shows `node_id` holding unexpired
        but whose epochs this process does not know (a restart under the same node id, or
        leases it gave up on its own clock): partition → new epoch. Whatever the earlier
        holder of these epochs writes from now on is fenced."""
        ...

    async def cluster_release(self, node_id: str, held: Mapping[int, int]) -> None:
        """Give back leases (only those still held at these epochs)."""
        ...

    async def cluster_leave(self, node_id: str) -> None:
        """A clean shutdown: release every lease of `node_id` and forget the node."""
        ...

    async def cluster_view(self) -> View:
        """The cluster as the database shows it now (nodes and leases), changing nothing."""
        ...


class ClusterPostgres(PgCalls):
    """`ClusterStore` on PostgreSQL, mixed into `PostgresStore`."""

    async def cluster_view(self) -> View:
        async def fn(conn: asyncpg.Connection) -> View:
            return await _view(conn, await conn.fetchval(f"SELECT {NOW_MS}"))

        return await self._call(fn)

    async def cluster_heartbeat(self, node_id: str, address: str, live_actors: int) -> View:
        async def fn(conn: asyncpg.Connection) -> View:
            now = await conn.fetchval(
                f"INSERT INTO cluster_nodes (node_id, address, heartbeat_at, live_actors)"
                f" VALUES ($1, $2, {NOW_MS}, $3)"
                " ON CONFLICT (node_id) DO UPDATE SET address = EXCLUDED.address,"
                " heartbeat_at = EXCLUDED.heartbeat_at, live_actors = EXCLUDED.live_actors"
                " RETURNING heartbeat_at",
                node_id,
                address,
                live_actors,
            )
            return await _view(conn, now)

        return await self._call(fn, lane=True)

    async def cluster_acquire(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        try:
            ended = await self._call(lambda c: c.fetch(_END_CUT_OFF, node_id, ttl_ms), lane=True)
        except asyncpg.InsufficientPrivilegeError as exc:  # another database role: leave them
            log.warning("cannot end a cut-off node's sessions: %s", exc)
        else:
            for row in ended:
                log.warning(
                    "ended a session of %s (its leases expired with a transaction open): %s",
                    row["application_name"],
                    "gone" if row["ended"] else "still ending",
                )
        return await self._new_epochs(_ACQUIRE, node_id, partitions, ttl_ms)

    async def cluster_renew(self, node_id: str, held: Mapping[int, int], ttl_ms: int) -> set[int]:
        if not held:
            return set()
        rows = await self._call(
            lambda c: c.fetch(
                f"UPDATE cluster_leases AS l SET expires_at = {NOW_MS} + $4"
                " FROM (SELECT c.partition FROM cluster_leases c"
                " JOIN unnest($2::int[], $3::bigint[]) AS h(partition, epoch)"
                " ON c.partition = h.partition AND c.epoch = h.epoch"
                f" WHERE c.node_id = $1 AND c.expires_at > {NOW_MS}"
                " ORDER BY c.partition FOR UPDATE OF c) AS k"
                " WHERE l.partition = k.partition RETURNING l.partition",
                node_id,
                list(held),
                list(held.values()),
                ttl_ms,
            ),
            lane=True,
            limit_s=_answer_within(ttl_ms),
        )
        return {r["partition"] for r in rows}

    async def cluster_adopt(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        return await self._new_epochs(_ADOPT, node_id, partitions, ttl_ms)

    async def _new_epochs(
        self, sql: str, node_id: str, partitions: Sequence[int], ttl_ms: int
    ) -> dict[int, int]:
        rows = await self._call(
            lambda c: c.fetch(sql, node_id, list(partitions), ttl_ms),
            lane=True,
            limit_s=_answer_within(ttl_ms),
        )
        return {r["partition"]: r["epoch"] for r in rows}

    async def cluster_release(self, node_id: str, held: Mapping[int, int]) -> None:
        if not held:
            return
        await self._call(
            lambda c: c.execute(
                "UPDATE cluster_leases AS l SET node_id = NULL, expires_at = 0"
                " FROM unnest($2::int[], $3::bigint[]) AS h(partition, epoch)"
                " WHERE l.partition = h.partition AND l.epoch = h.epoch AND l.node_id = $1",
                node_id,
                list(held),
                list(held.values()),
            ),
            lane=True,
        )

    async def cluster_leave(self, node_id: str) -> None:
        async def fn(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                await conn.execute(
                    "UPDATE cluster_leases SET node_id = NULL, expires_at = 0 WHERE node_id = $1", node_id
                )
                await conn.execute("DELETE FROM cluster_nodes WHERE node_id = $1", node_id)

        await self._call(fn, lane=True)


async def _view(conn: asyncpg.Connection, now: int) -> View:
    nodes = await conn.fetch("SELECT * FROM cluster_nodes ORDER BY node_id")
    leases = await conn.fetch("SELECT * FROM cluster_leases ORDER BY partition")
    return View(
        now=now,
        nodes=tuple(Node(**dict(r)) for r in nodes),
        leases=tuple(Lease(**dict(r)) for r in leases),
    )
