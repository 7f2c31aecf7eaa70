"""The lease keeper: the one task of a node that holds its partitions' leases.

Every tick (`ttl / 5`, 2 s by default) it renews what it holds, announces the node, reads the
cluster and follows `leases.plan`: partitions above its share are first handed to
`Ownership.releasing` (the node passivates their actors, so nothing of theirs is in flight) and
then released; partitions below its share are acquired and handed to `Ownership.gained`
(rehydrate their open runs). A lease that fails to renew is given up at once
(`Ownership.lost`: drop the actors without writing).

The node also stops trusting its leases on its own clock: a renewal sent at `t` extended them to
at least `t + ttl` on the database's clock, so past `t + ttl - margin` locally, with no newer
renewal, every lease is treated as lost even if the database cannot be reached to say so (a
node cut off from PostgreSQL, or paused, stops acting before anyone else may take over). The
database's fencing refuses the writes of a node that missed this all the same.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Protocol

import trio

from ..core.errors import StorageError
from ..core.leases import MARGIN_MS, PARTITIONS, View, plan
from ..storage.cluster import ClusterStore

log = logging.getLogger("foliot.cluster")

DEFAULT_TTL_MS = 10_000


class Ownership(Protocol):
    """What a node does as its leases come and go."""

    async def gained(self, leases: Mapping[int, int]) -> None:
        """New partitions (with their epochs) are this node's: rehydrate their open runs."""
        ...

    async def releasing(self, partitions: frozenset[int]) -> None:
        """These partitions are about to be released: passivate their actors first."""
        ...

    def lost(self, partitions: frozenset[int]) -> None:
        """These leases are gone: drop the partitions' actors at once, writing nothing."""
        ...


class LeaseKeeper:
    def __init__(
        self,
        store: ClusterStore,
        node_id: str,
        address: str,
        ownership: Ownership,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        interval_ms: int | None = None,
        live_actors: Callable[[], int] = lambda: 0,
        partitions: int = PARTITIONS,
    ) -> None:
        if ttl_ms <= 2 * MARGIN_MS:
            raise ValueError(f"the lease TTL must exceed {2 * MARGIN_MS} ms")
        self.store = store
        self.node_id = node_id
        self.address = address
        self.ownership = ownership
        self.ttl_ms = ttl_ms
        self.interval_s = (interval_ms if interval_ms is not None else ttl_ms // 5) / 1000
        self.live_actors = live_actors
        self.partitions = partitions
        self.held: dict[int, int] = {}  # partition -> epoch
        self.valid_until = -math.inf  # Trio time past which no held lease is trusted
        self.ticked = trio.Event()  # the first exchange with the database succeeded
        self.view: View | None = None  # the cluster as the last exchange read it

    @property
    def ready(self) -> bool:
        """In touch with the database within the leases' life, so holding what it holds (its
        share, or none when the cluster has more nodes than partitions): what `/readyz` reports."""
        return self.ticked.is_set() and self.trusted()

    def trusted(self) -> bool:
        """Are the held leases still trusted now (the keeper drops them at `valid_until`, but
        other tasks may run first once that time has passed)."""
        return trio.current_time() < self.valid_until

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        while True:
            await self.tick()
            if not started and self.ticked.is_set():
                task_status.started()
                started = True
            next_tick = trio.current_time() + self.interval_s
            if self.held and self.valid_until < next_tick:
                await trio.sleep_until(self.valid_until)  # no renewal came through in time
                self._expire()
            await trio.sleep_until(next_tick)

    async def tick(self) -> None:
        """One exchange with the database, bounded by how long the held leases are trusted."""
        bound = self.valid_until if self.held else trio.current_time() + self.ttl_ms / 1000
        with trio.move_on_at(bound) as scope:
            try:
                await self._exchange()
            except StorageError as exc:
                log.warning("cluster: lease exchange failed: %s", exc)
        if scope.cancelled_caught:
            log.warning("cluster: the database did not answer before the leases' end")
        self._expire()

    def _expire(self) -> None:
        if self.held and not self.trusted():
            self._lose(frozenset(self.held))

    async def _exchange(self) -> None:
        sent = trio.current_time()
        trusted_until = sent + (self.ttl_ms - MARGIN_MS) / 1000
        if self.held:
            renewed = await self.store.cluster_renew(self.node_id, self.held, self.ttl_ms)
            self._lose(frozenset(self.held.keys() - renewed))
            self.valid_until = trusted_until
        view = await self.store.cluster_heartbeat(self.node_id, self.address, self.live_actors())
        self.view = view
        self.valid_until = trusted_until  # in touch with the database, holding leases or not
        self.ticked.set()
        # Leases the database shows this node holding but this process does not know (it
        # restarted under the same id, or gave them up on its own clock while the database
        # still had them): taken over with a new epoch at once, rather than waiting them out.
        orphans = [p for p in view.held_by(self.node_id) if p not in self.held]
        if orphans:
            adopted = await self.store.cluster_adopt(self.node_id, orphans, self.ttl_ms)
            if adopted:
                self.held.update(adopted)
                log.info("cluster: took back %d partitions this node id held", len(adopted))
                await self.ownership.gained(adopted)
        wanted = plan(view, self.node_id, self.ttl_ms, self.partitions)
        if wanted.release:
            giving = {p: self.held[p] for p in wanted.release if p in self.held}
            await self.ownership.releasing(frozenset(giving))
            await self.store.cluster_release(self.node_id, giving)
            for p in giving:
                del self.held[p]
            log.info("cluster: released %d partitions", len(giving))
        if wanted.acquire:
            # Acquired after `sent`, so they end after `valid_until` too.
            got = await self.store.cluster_acquire(self.node_id, wanted.acquire, self.ttl_ms)
            if got:
                self.held.update(got)
                log.info("cluster: acquired %d partitions", len(got))
                await self.ownership.gained(got)

    def _lose(self, partitions: frozenset[int]) -> None:
        if not partitions:
            return
        for p in partitions:
            self.held.pop(p, None)
        log.warning("cluster: lost %d partition leases", len(partitions))
        self.ownership.lost(partitions)

    async def leave(self) -> None:
        """A clean shutdown: passivate, then release everything and forget this node."""
        if self.held:
            await self.ownership.releasing(frozenset(self.held))
        await self.store.cluster_leave(self.node_id)
        self.held.clear()
