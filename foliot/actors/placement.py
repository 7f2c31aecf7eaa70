"""Where an actor lives: on this node, on another one, or nowhere right now (a lease in transit).

`Placement.where(actor_id)` is answered from memory (the lease keeper's last view of the
cluster, `foliot.cluster.ownership`), never from the database, so the request path pays nothing
for it. A single node (SQLite) owns everything.

`Runs.ask`/`Swf.ask` (the kinds' entry points) consult it before an actor's mailbox is used: a `Remote` actor
raises `Elsewhere` (the HTTP layer proxies the whole request to the owner, `foliot.http.forward`),
an `Unowned` one answers 503 `partition_unowned` with `Retry-After: 1`.
"""

from __future__ import annotations

from typing import Final, Protocol

import attrs

from ..core.errors import Unavailable

__all__ = [
    "LOCAL",
    "Elsewhere",
    "Local",
    "NotOwner",
    "PartitionUnowned",
    "Placement",
    "Remote",
    "Unowned",
    "Where",
    "check_local",
]


@attrs.frozen
class Local:
    """This node owns the actor."""


@attrs.frozen
class Remote:
    """Another live node holds the actor's partition: send the request to `address`."""

    node_id: str
    address: str


@attrs.frozen
class Unowned:
    """Nobody holds the partition now (failover under way), or it is being handed over."""

    partition: int


Where = Local | Remote | Unowned
LOCAL: Final = Local()


class Placement(Protocol):
    def where(self, actor_id: str) -> Where:
        """Where the actor (a run id, or an SWF execution's actor id) lives right now."""
        ...


class Elsewhere(Exception):
    """The actor a request addresses lives on another node: forward the request there."""

    def __init__(self, owner: Remote) -> None:
        super().__init__(f"owned by node {owner.node_id} at {owner.address}")
        self.owner = owner


class NotOwner(Unavailable):
    """A forwarded request reached a node that does not own its actor either (the ownership
    moved meanwhile): never forwarded a second time; the client retries (503, Retry-After 1)."""

    code = "not_owner"


class PartitionUnowned(Unavailable):
    """Nobody holds the actor's partition right now: retry in a second (503, Retry-After 1)."""

    code = "partition_unowned"


def check_local(placement: Placement, actor_id: str) -> None:
    """Raise unless the actor lives here: `Elsewhere` for a remote owner, 503 when unowned."""
    where = placement.where(actor_id)
    if isinstance(where, Local):
        return
    if isinstance(where, Remote):
        raise Elsewhere(where)
    raise PartitionUnowned(
        f"partition {where.partition} of this actor has no owner right now (lease in transit); retry"
    )
