"""Partition leases, pure: which partition a run belongs to, and what a node should acquire or
release given the cluster as the database last showed it.

Every run (and SWF execution) belongs to one of `PARTITIONS` partitions by a stable hash of its
id. A node may own a partition's actors only while it holds that partition's lease: a row with
the holder, an **epoch** bumped at every acquisition, and an expiry on the **database's clock**
(so nodes never compare their own clocks). A write carries the epoch it was made under and the
database refuses it once the lease moved on or expired: that is the fencing.

The planner is deterministic and takes no time but the database's: every live node (heartbeat
within the TTL) is owed an equal share of the partitions — `PARTITIONS // n`, the first
`PARTITIONS % n` node ids in sorted order one more. A node below its share takes free or expired
partitions (starting at an offset derived from its id, so two nodes joining together rarely
race for the same rows; a lost race only costs a retry at the next tick). A node above its
share releases only as many partitions as the others still lack after the free ones, so a
partition is never dropped with nobody to take it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import attrs

PARTITIONS = 256
# A node trusts a lease this much less than the database keeps it (its renewal's answer may
# have taken that long): past `sent + ttl - MARGIN_MS` with no newer renewal, it stops acting.
MARGIN_MS = 1_000


def partition_of(key: str, partitions: int = PARTITIONS) -> int:
    """The partition of a run or execution id: stable across processes and releases."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


@attrs.frozen
class Lease:
    partition: int
    node_id: str | None  # None: never held, or released
    epoch: int  # bumped at every acquisition; writes carry it
    expires_at: int  # ms on the database's clock


@attrs.frozen
class Node:
    node_id: str
    address: str
    heartbeat_at: int  # ms on the database's clock
    live_actors: int = 0


@attrs.frozen
class View:
    """The cluster as one read of the database saw it."""

    now: int  # the database's clock at that read, ms
    nodes: tuple[Node, ...]
    leases: tuple[Lease, ...]

    def held_by(self, node_id: str) -> dict[int, int]:
        """The partitions `node_id` holds unexpired, with their epochs."""
        return {
            lease.partition: lease.epoch
            for lease in self.leases
            if lease.node_id == node_id and lease.expires_at > self.now
        }

    def free(self) -> list[int]:
        """Partitions nobody holds: never held, released, or expired."""
        return [
            lease.partition for lease in self.leases if lease.node_id is None or lease.expires_at <= self.now
        ]


@attrs.frozen
class Plan:
    acquire: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


def live_nodes(view: View, ttl_ms: int, me: str | None = None) -> list[str]:
    """Node ids whose heartbeat is younger than the TTL (and `me`, who is planning), sorted."""
    live = {node.node_id for node in view.nodes if node.heartbeat_at > view.now - ttl_ms}
    if me is not None:
        live.add(me)
    return sorted(live)


def shares(nodes: Sequence[str], partitions: int = PARTITIONS) -> dict[str, int]:
    """Each node's fair share; `nodes` sorted; the shares add up to `partitions`."""
    if not nodes:
        return {}
    base, extra = divmod(partitions, len(nodes))
    return {node: base + (1 if i < extra else 0) for i, node in enumerate(nodes)}


def _rotated(candidates: Iterable[int], start: int, partitions: int) -> list[int]:
    return sorted(candidates, key=lambda p: (p - start) % partitions)


def plan(view: View, me: str, ttl_ms: int, partitions: int = PARTITIONS) -> Plan:
    """What `me` should acquire or release now."""
    live = live_nodes(view, ttl_ms, me)
    owed = shares(live, partitions)
    mine = view.held_by(me)
    target = owed[me]
    start = partition_of(me, partitions)
    if len(mine) < target:
        return Plan(acquire=tuple(_rotated(view.free(), start, partitions)[: target - len(mine)]))
    if len(mine) > target:
        lacking = sum(max(0, owed[node] - len(view.held_by(node))) for node in live if node != me)
        spare = min(len(mine) - target, max(0, lacking - len(view.free())))
        # Give back the partitions farthest from where this node starts taking.
        return Plan(release=tuple(_rotated(mine, start, partitions)[::-1][:spare]))
    return Plan()
