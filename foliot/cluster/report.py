"""`GET /admin/cluster`, pure: the cluster as one read of the database shows it, for operators."""

from __future__ import annotations

from typing import Any

from ..core.leases import PARTITIONS, Lease, Node, View
from ..core.workflow.duration import format_timestamp


def report(view: View, partitions: int = PARTITIONS) -> dict[str, Any]:
    """`{nodes: [{nodeId, address, lastHeartbeat, partitions, liveActors}], partitions, map}`:
    every announced node (a stopped one is gone; one that died stays, its heartbeat ageing)
    with how many partitions it holds unexpired; `map` is one entry per partition, in order:
    `{partition, nodeId, epoch}`, `nodeId` null when nobody holds it (free, or expired)."""
    held = {lease.partition: lease for lease in view.leases if _live(lease, view.now)}
    counts: dict[str, int] = {}
    for lease in held.values():
        assert lease.node_id is not None
        counts[lease.node_id] = counts.get(lease.node_id, 0) + 1
    epochs = {lease.partition: lease.epoch for lease in view.leases}
    return {
        "nodes": [
            {
                "nodeId": node.node_id,
                "address": node.address,
                "lastHeartbeat": format_timestamp(node.heartbeat_at),
                "partitions": counts.get(node.node_id, 0),
                "liveActors": node.live_actors,
            }
            for node in view.nodes
        ],
        "partitions": partitions,
        "map": [
            {
                "partition": p,
                "nodeId": held[p].node_id if p in held else None,
                "epoch": epochs.get(p, 0),
            }
            for p in range(partitions)
        ],
    }


def _live(lease: Lease, now: int) -> bool:
    return lease.node_id is not None and lease.expires_at > now


def single_node(node_id: str, address: str, now: int, live_actors: int, partitions: int = PARTITIONS) -> View:
    """The view of a node that runs alone (SQLite): it holds every partition."""
    return View(
        now=now,
        nodes=(Node(node_id, address, now, live_actors),),
        leases=tuple(Lease(p, node_id, 0, now + 1) for p in range(partitions)),
    )
