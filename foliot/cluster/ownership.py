"""Which actors this node owns: every actor while it runs alone, else those of the partitions
whose leases its `LeaseKeeper` holds (`foliot.cluster`).

`Ownership` is the engine's half of the keeper's contract (`keeper.Ownership`): `gained`
recovers the new partitions' open actors (open attempts re-delivered, SWF effects owed, timers
paged in), `releasing` passivates theirs before the lease is given back, `lost` drops theirs at
once without writing. It also answers, for any actor id:

- `accepts(id)`: may an actor of this id be spawned here now (owned and not being released);
- `fences(id)`: the `(node, partition, epoch)` a write of that actor carries, so PostgreSQL
  refuses it once the lease moved on (`Fenced` at once when the partition is no longer held);
- `where(id)`: `Local`, `Remote(node_id, address)` (the holder as the keeper's last read of the
  cluster showed it, with the address it announced) or `Unowned` (nobody holds it now, or it is
  being handed over: retry shortly). The HTTP layer forwards on it.
- `new_id(make)`: a fresh id in a partition this node owns (`make` is called until one fits),
  so a start is never forwarded.

A node without a keeper (SQLite, or an engine built without one) owns everything: `fences` is
empty and nothing is ever forwarded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Final, Protocol

import trio

from ..actors.placement import LOCAL, Remote, Unowned, Where
from ..core.errors import Fenced, StorageError, Unavailable
from ..core.leases import PARTITIONS, View, partition_of
from ..storage.fence import Fence

if TYPE_CHECKING:
    from .keeper import LeaseKeeper

log = logging.getLogger("foliot.ownership")

_RECOVERY_RETRY_S: Final = 0.2
_NEW_ID_TRIES: Final = 100_000  # with n nodes an id fits in ~n tries; this bounds a bug


def holder(view: View | None, partition: int, me: str) -> Remote | Unowned:
    """Who holds `partition` in `view` (never `me`: the caller knows its own leases)."""
    if view is not None:
        for lease in view.leases:
            if lease.partition != partition:
                continue
            if lease.node_id is None or lease.node_id == me or lease.expires_at <= view.now:
                break
            node = next((n for n in view.nodes if n.node_id == lease.node_id), None)
            if node is not None:
                return Remote(node.node_id, node.address)
            break
    return Unowned(partition)


class Owner(Protocol):
    """What `Ownership` asks of its node when partitions come and go (`foliot.node.Node`)."""

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> bool: ...

    async def recover(self, partitions: frozenset[int] | None = None) -> None: ...

    async def passivate(self, partitions: frozenset[int]) -> None: ...

    def drop(self, partitions: frozenset[int]) -> None: ...


class Ownership:
    """The engine's ownership: of everything (no keeper), or of the leased partitions."""

    def __init__(self, node: Owner, partitions: int = PARTITIONS) -> None:
        self.node = node
        self.partitions = partitions
        self.keeper: LeaseKeeper | None = None
        self.node_id: str | None = None
        self.held: dict[int, int] = {}  # partition -> epoch (clustered only)
        self.leaving: set[int] = set()  # being released: no new actors, writes still fenced in
        self._recovering = 0  # gained partitions whose recovery is under way
        self._recovery_done: trio.Event | None = None  # made by `recovered`, set at zero
        self.gains = 0
        self.releases = 0
        self.losses = 0

    # ------------------------------------------------------------------ questions

    @property
    def clustered(self) -> bool:
        return self.keeper is not None

    @property
    def ready(self) -> bool:
        """Holding its leases (or none to hold) and done recovering the partitions gained."""
        return self.keeper is None or (self.keeper.ready and self._recovering == 0)

    def partition(self, actor_id: str) -> int:
        return partition_of(actor_id, self.partitions)

    def accepts(self, actor_id: str) -> bool:
        """May this node run the actor now."""
        if self.keeper is None:
            return True
        return self.owns_partition(partition_of(actor_id, self.partitions))

    def owns_partition(self, partition: int) -> bool:
        """Held, not being released, and its lease still trusted: past the keeper's
        `valid_until` the lease may have ended in the database before the keeper's own task has
        run to drop it (a node resumed from SIGSTOP, or a loop running late), and nothing may be
        started or sent on it in that gap."""
        keeper = self.keeper
        return keeper is None or (
            partition in self.held and partition not in self.leaving and keeper.trusted()
        )

    def fences(self, *actor_ids: str) -> tuple[Fence, ...]:
        """What a write of these actors carries; `Fenced` when one's partition is not held."""
        if self.keeper is None:
            return ()
        node = self.keeper.node_id
        out: list[Fence] = []
        for actor_id in actor_ids:
            p = partition_of(actor_id, self.partitions)
            epoch = self.held.get(p)
            if epoch is None:
                raise Fenced(f"partition {p} of {actor_id} is not held by node {node}")
            fence = Fence(node, p, epoch)
            if fence not in out:
                out.append(fence)
        return tuple(out)

    def where(self, actor_id: str) -> Where:
        """Where a request for this actor is served (see the module's docstring)."""
        keeper = self.keeper
        if keeper is None:
            return LOCAL
        p = partition_of(actor_id, self.partitions)
        if p in self.held:
            return LOCAL if p not in self.leaving else Unowned(p)
        return holder(keeper.view, p, keeper.node_id)

    def new_id(self, make: Callable[[], str], key: Callable[[str], str] = lambda i: i) -> str:
        """`make()` until `key(id)` (the actor id) falls in a partition this node owns."""
        if self.keeper is None:
            return make()
        if len(self.held) <= len(self.leaving):  # `leaving` is a subset of `held`
            raise Unavailable("this node holds no partition right now; retry (or call another node)")
        for _ in range(_NEW_ID_TRIES):
            candidate = make()
            if self.accepts(key(candidate)):
                return candidate
        raise Unavailable("no id fell in a partition of this node; retry")

    # ------------------------------------------------------------------ the keeper's calls

    async def gained(self, leases: Mapping[int, int]) -> None:
        self.held.update(leases)
        self.leaving.difference_update(leases)
        self.gains += 1
        parts = frozenset(leases)
        log.info("ownership: gained %d partitions; recovering their actors", len(parts))
        self._recovering += 1
        if not self.node.spawn(partial(self._recover, parts)):
            self._recovering -= 1  # shutting down: the next owner recovers them

    async def _recover(self, partitions: frozenset[int]) -> None:
        """Recover gained partitions in the background (the keeper must go on renewing),
        retrying while storage fails; `/readyz` says not ready until it is done."""
        try:
            delay = _RECOVERY_RETRY_S
            while True:
                try:
                    await self.node.recover(partitions)
                    return
                except StorageError as exc:
                    log.warning("ownership: recovering gained partitions failed (%s); retrying", exc)
                    await trio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            self._recovering -= 1
            done = self._recovery_done
            if self._recovering == 0 and done is not None:
                self._recovery_done = None
                done.set()

    async def recovered(self) -> None:
        """Until no recovery of gained partitions is under way."""
        while self._recovering:
            if self._recovery_done is None:
                self._recovery_done = trio.Event()
            await self._recovery_done.wait()

    async def releasing(self, partitions: frozenset[int]) -> None:
        self.leaving |= partitions
        self.releases += 1
        await self.node.passivate(partitions)
        for p in partitions:
            self.held.pop(p, None)
        self.leaving -= partitions

    def lost(self, partitions: frozenset[int]) -> None:
        for p in partitions:
            self.held.pop(p, None)
        self.leaving -= partitions
        self.losses += 1
        self.node.drop(partitions)

    def describe(self) -> dict[str, object]:
        return {
            "nodeId": self.node_id,
            "clustered": self.clustered,
            "partitions": len(self.held) if self.clustered else self.partitions,
            "releasing": len(self.leaving),
        }
