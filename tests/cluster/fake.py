"""An in-memory `ClusterStore` with the PostgreSQL store's semantics, on an injected clock.

`tests/cluster/test_cluster_store.py` runs the same contract against it and against
PostgreSQL, so the keeper's tests under MockClock exercise the real rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from foliot.core.errors import StorageUnavailable
from foliot.core.leases import PARTITIONS, Lease, Node, View

from ..helpers import advance as advance  # re-exported for the cluster tests


class FakeCluster:
    def __init__(self, now: Callable[[], int], partitions: int = PARTITIONS) -> None:
        self.now = now
        self.nodes: dict[str, Node] = {}
        self.leases = {p: Lease(p, None, 0, 0) for p in range(partitions)}
        self.down: set[str] = set()  # nodes whose calls fail as if the database were unreachable
        self.acquisitions: list[tuple[int, str, int, int]] = []  # (partition, node, epoch, at)

    def _check(self, node_id: str) -> None:
        if node_id in self.down:
            raise StorageUnavailable("the database is unreachable from this node")

    def heartbeat(self, node_id: str, address: str, live_actors: int) -> View:
        self._check(node_id)
        now = self.now()
        self.nodes[node_id] = Node(node_id, address, now, live_actors)
        return View(now, tuple(self.nodes[n] for n in sorted(self.nodes)), tuple(self.leases.values()))

    def acquire(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        self._check(node_id)
        now, got = self.now(), {}
        for p in partitions:
            lease = self.leases.get(p)
            if lease is not None and (lease.node_id is None or lease.expires_at <= now):
                self.leases[p] = Lease(p, node_id, lease.epoch + 1, now + ttl_ms)
                got[p] = lease.epoch + 1
                self.acquisitions.append((p, node_id, lease.epoch + 1, now))
        return got

    def renew(self, node_id: str, held: Mapping[int, int], ttl_ms: int) -> set[int]:
        self._check(node_id)
        now, renewed = self.now(), set()
        for p, epoch in held.items():
            lease = self.leases.get(p)
            if (
                lease is not None
                and (lease.node_id, lease.epoch) == (node_id, epoch)
                and lease.expires_at > now
            ):
                self.leases[p] = attrs.evolve(lease, expires_at=now + ttl_ms)
                renewed.add(p)
        return renewed

    def adopt(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        self._check(node_id)
        now, got = self.now(), {}
        for p in partitions:
            lease = self.leases.get(p)
            if lease is not None and lease.node_id == node_id and lease.expires_at > now:
                self.leases[p] = Lease(p, node_id, lease.epoch + 1, now + ttl_ms)
                got[p] = lease.epoch + 1
                self.acquisitions.append((p, node_id, lease.epoch + 1, now))
        return got

    def release(self, node_id: str, held: Mapping[int, int]) -> None:
        self._check(node_id)
        for p, epoch in held.items():
            lease = self.leases.get(p)
            if lease is not None and (lease.node_id, lease.epoch) == (node_id, epoch):
                self.leases[p] = attrs.evolve(lease, node_id=None, expires_at=0)

    def leave(self, node_id: str) -> None:
        self._check(node_id)
        for p, lease in self.leases.items():
            if lease.node_id == node_id:
                self.leases[p] = attrs.evolve(lease, node_id=None, expires_at=0)
        self.nodes.pop(node_id, None)

    def holders(self) -> dict[int, str]:
        now = self.now()
        return {
            p: lease.node_id
            for p, lease in self.leases.items()
            if lease.node_id is not None and lease.expires_at > now
        }


class FakeClusterStore:
    """The `ClusterStore` face of a `FakeCluster` (async, as the real one)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    async def cluster_heartbeat(self, node_id: str, address: str, live_actors: int) -> View:
        return self.cluster.heartbeat(node_id, address, live_actors)

    async def cluster_acquire(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        return self.cluster.acquire(node_id, partitions, ttl_ms)

    async def cluster_renew(self, node_id: str, held: Mapping[int, int], ttl_ms: int) -> set[int]:
        return self.cluster.renew(node_id, held, ttl_ms)

    async def cluster_adopt(self, node_id: str, partitions: Sequence[int], ttl_ms: int) -> dict[int, int]:
        return self.cluster.adopt(node_id, partitions, ttl_ms)

    async def cluster_release(self, node_id: str, held: Mapping[int, int]) -> None:
        self.cluster.release(node_id, held)

    async def cluster_leave(self, node_id: str) -> None:
        self.cluster.leave(node_id)
