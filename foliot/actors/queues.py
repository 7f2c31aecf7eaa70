"""Pull queues: tasks offered to long-polling workers.

Offers are kept per (app, queue) by priority level, 1 (most urgent) to 5 (a run's or step's
`priority`; SWF's `taskPriority` mapped by `flow.swf_level`), aged so that a waiting offer gains
one level per `aging` seconds (`flow.rank`: nothing arriving more than `4 * aging` seconds after
an offer goes ahead of it), equal ranks in arrival order; a poller parks on the queue's
`ParkingLot` and is unparked the moment a task is offered, so an idle poller costs nothing.

A poller never pops an offer outright: it takes a `Reservation`. A reserved token leaves the
queue for good only when its claim is committed (or the run says the token is no longer
claimable); on anything else (the poller cancelled, storage down, the actor crashed) it goes
back in its original place. Reserving is synchronous, so two pollers never hold one token.
Maps hold an entry only while it is in use: an empty queue or an empty parking lot is removed.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import attrs
import trio
from trio.lowlevel import ParkingLot

from ..core.workflow.flow import AGING_SECONDS, DEFAULT_PRIORITY, rank

QueueKey = tuple[str, str]

SEEN_QUEUES = 10_000
SEEN_WORKERS = 32


@attrs.frozen
class _Offer:
    seq: int  # arrival order, so a released token goes back where it was
    run_id: str
    priority: int = DEFAULT_PRIORITY  # a level, 1 (most urgent)..5
    at: float = 0.0  # Trio time it was first offered (its aging counts from there)


class _Lane:
    """One queue's waiting offers: a band per priority level, each in arrival order; the next
    offer is the band head of the smallest aged rank (`flow.rank`). Almost every queue has one
    band, so taking and offering stay O(1) (O(levels) with several)."""

    __slots__ = ("aging", "bands", "size")

    def __init__(self, aging: float = AGING_SECONDS) -> None:
        self.aging = aging
        self.bands: dict[int, OrderedDict[str, _Offer]] = {}
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[str]:
        for token, _ in self.items():
            yield token

    def _key(self, item: tuple[str, _Offer]) -> tuple[float, int]:
        offer = item[1]
        return rank(offer.priority, offer.at, self.aging), offer.seq

    def items(self) -> Iterator[tuple[str, _Offer]]:
        """(token, offer) in the order pollers take them (if nothing new arrives)."""
        yield from heapq.merge(*(band.items() for band in self.bands.values()), key=self._key)

    def add(self, token: str, offer: _Offer) -> None:
        """Append, or put back in its arrival place (a released reservation)."""
        band = self.bands.setdefault(offer.priority, OrderedDict())
        if not band or next(reversed(band.values())).seq < offer.seq:
            band[token] = offer
        else:
            merged = heapq.merge(band.items(), [(token, offer)], key=lambda item: item[1].seq)
            self.bands[offer.priority] = OrderedDict(merged)
        self.size += 1

    def pop(self) -> tuple[str, _Offer]:
        if len(self.bands) == 1:
            priority = next(iter(self.bands))
        else:
            priority = min(self.bands, key=lambda p: self._key(next(iter(self.bands[p].items()))))
        band = self.bands[priority]
        item = band.popitem(last=False)
        if not band:
            del self.bands[priority]
        self.size -= 1
        return item

    def remove(self, token: str) -> None:
        for priority, band in self.bands.items():
            if band.pop(token, None) is not None:
                if not band:
                    del self.bands[priority]
                self.size -= 1
                return

    def oldest(self) -> str | None:
        heads = [next(iter(band.items())) for band in self.bands.values()]
        return min(heads, key=lambda item: item[1].seq)[0] if heads else None


@attrs.define
class Reservation:
    """Offers held by one poller; each is confirmed (claimed), dropped, or released (put back).

    `hand_over(token)` marks a token whose claim was delivered to the run's actor: from then on
    the actor's answer settles it (see `settle`), not the poller, whose cancellation can no
    longer separate a committed claim from the queue's bookkeeping. At exit, every token still
    held and not handed over is released."""

    queues: Queues
    key: QueueKey
    offers: list[tuple[str, str]]
    _held: set[str] = attrs.Factory(set)

    def hand_over(self, token: str) -> None:
        self._held.discard(token)

    def settle(self, token: str, *, claimed: bool, gone: bool = False) -> None:
        """The claim's outcome: committed (`claimed`), refused because the token is closed
        (`gone`), or failed (released back to the queue)."""
        self._held.discard(token)
        if claimed or gone:
            self.queues._confirm(token)
        else:
            self.queues._release(token)

    def release_held(self) -> None:
        for token in list(self._held):
            self.settle(token, claimed=False)


class Queues:
    def __init__(self, aging: float = AGING_SECONDS) -> None:
        self.aging = aging
        self._pending: dict[QueueKey, _Lane] = {}
        self._lots: dict[QueueKey, ParkingLot] = {}
        self._where: dict[str, QueueKey] = {}  # pending and reserved tokens
        self._reserved: dict[str, _Offer] = {}
        self._seq = itertools.count()
        # (app, queue) -> (last poll, workerId -> last seen), least recently polled first.
        self._seen: OrderedDict[QueueKey, tuple[int, OrderedDict[str, int]]] = OrderedDict()
        # Several nodes: told of a queue's offer no poller parked here was woken for, so
        # pollers on other nodes hear of it (`foliot.actors.pull`).
        self.unclaimed: Callable[[QueueKey], None] | None = None

    def offer(self, app: str, queue: str, token: str, run_id: str, priority: int = DEFAULT_PRIORITY) -> None:
        """Offer a token to the queue's pollers: the smallest aged rank first (`priority` a
        level, 1 the most urgent), then oldest first."""
        if token in self._where:
            return  # already offered (or held by a poller): once is enough
        key = (app, queue)
        lane = self._pending.get(key)
        if lane is None:
            lane = self._pending[key] = _Lane(self.aging)
        lane.add(token, _Offer(next(self._seq), run_id, priority, trio.current_time()))
        self._where[token] = key
        self._wake(key)

    def withdraw(self, token: str) -> None:
        key = self._where.pop(token, None)
        self._reserved.pop(token, None)
        if key is not None:
            self._drop_pending(key, token)

    def withdraw_where(self, which: Callable[[str], bool]) -> None:
        """Withdraw every offer (pending or held by a poller) of the actors `which` picks."""
        tokens = [t for pending in self._pending.values() for t, o in pending.items() if which(o.run_id)]
        tokens += [t for t, o in self._reserved.items() if which(o.run_id)]
        for token in tokens:
            self.withdraw(token)

    def polled(self, app: str, queue: str, worker_id: str | None, now: int) -> None:
        """Remember that a poller asked for this queue at `now` (for the run diagnosis and the
        console). Bounded: `SEEN_QUEUES` queues, `SEEN_WORKERS` workers each, oldest dropped."""
        key = (app, queue)
        entry = self._seen.pop(key, None)
        workers = entry[1] if entry is not None else OrderedDict()
        name = worker_id or ""
        workers.pop(name, None)
        workers[name] = now
        while len(workers) > SEEN_WORKERS:
            workers.popitem(last=False)
        self._seen[key] = (now, workers)
        while len(self._seen) > SEEN_QUEUES:
            self._seen.popitem(last=False)

    def last_polled(self, app: str, queue: str) -> tuple[int | None, tuple[tuple[str, int], ...]]:
        """(when a poller last asked, ((workerId, last seen), ...) most recent first)."""
        entry = self._seen.get((app, queue))
        if entry is None:
            return None, ()
        return entry[0], tuple(reversed(entry[1].items()))

    def waiting_on(self, app: str, queue: str) -> int:
        """Pollers parked on this queue right now."""
        return len(self._lots.get((app, queue), ()))

    def known_queues(self) -> list[QueueKey]:
        """Every queue with offers waiting, pollers parked, or a poll remembered."""
        return sorted(set(self._pending) | set(self._lots) | set(self._seen))

    def oldest_offer(self, app: str, queue: str) -> str | None:
        """The token that has waited longest on this queue."""
        pending = self._pending.get((app, queue))
        return pending.oldest() if pending else None

    def depth(self, app: str, queue: str) -> int:
        return len(self._pending.get((app, queue), ()))

    def describe(self) -> list[dict[str, object]]:
        """Each queue with offers waiting or pollers parked: `{app, queue, depth, waitingPollers}`."""
        keys = sorted(set(self._pending) | set(self._lots))
        return [
            {"app": app, "queue": queue, "depth": self.depth(app, queue),
             "waitingPollers": len(self._lots.get((app, queue), ()))}
            for app, queue in keys
        ]  # fmt: skip

    def waiting_pollers(self) -> int:
        return sum(len(lot) for lot in self._lots.values())

    def sizes(self) -> dict[str, int]:
        """How many entries each internal map holds (tests check nothing is kept forever)."""
        return {
            "pending": len(self._pending),
            "lots": len(self._lots),
            "where": len(self._where),
            "reserved": len(self._reserved),
        }

    def _drop_pending(self, key: QueueKey, token: str) -> None:
        pending = self._pending.get(key)
        if pending is not None:
            pending.remove(token)
            if not pending:
                del self._pending[key]

    def _wake(self, key: QueueKey) -> None:
        lot = self._lots.get(key)
        if lot:
            lot.unpark()
        elif self.unclaimed is not None:
            self.unclaimed(key)

    def wake_all(self, key: QueueKey) -> None:
        """Wake every poller parked on the queue (another node has offers for it)."""
        lot = self._lots.get(key)
        if lot is not None:
            lot.unpark_all()

    def offered_queues(self) -> list[QueueKey]:
        """The queues with offers waiting now."""
        return list(self._pending)

    async def park(self, app: str, queue: str, wait_until: float) -> None:
        """Wait on the queue until it is woken (an offer here, or news of one on another node)
        or `wait_until` (Trio time) passes."""
        key = (app, queue)
        lot = self._lots.setdefault(key, ParkingLot())
        try:
            with trio.move_on_at(wait_until):
                await lot.park()
        finally:
            if not lot and self._lots.get(key) is lot:
                del self._lots[key]

    def _reserve(self, key: QueueKey, count: int) -> list[tuple[str, str]]:
        pending = self._pending.get(key)
        out: list[tuple[str, str]] = []
        while pending and len(out) < count:
            token, offer = pending.pop()
            self._reserved[token] = offer
            out.append((token, offer.run_id))
        if pending is not None and not pending:
            del self._pending[key]
        return out

    def _confirm(self, token: str) -> None:
        if self._reserved.pop(token, None) is not None:
            self._where.pop(token, None)

    def _release(self, token: str) -> None:
        offer = self._reserved.pop(token, None)
        key = self._where.get(token)
        if offer is None or key is None:
            return  # withdrawn meanwhile (run cancelled): nothing to put back
        lane = self._pending.get(key)
        if lane is None:
            lane = self._pending[key] = _Lane(self.aging)
        lane.add(token, offer)
        self._wake(key)

    @asynccontextmanager
    async def reserve(
        self, app: str, queue: str, count: int, wait_until: float
    ) -> AsyncIterator[Reservation]:
        """Up to `count` offers, parking until one arrives or `wait_until` (Trio time) passes.

        Whatever is still held when the block exits (normally, by an error, or cancelled) goes
        back to the queue in its original order."""
        key = (app, queue)
        offers = await self._wait_for_offers(key, count, wait_until)
        reservation = Reservation(self, key, offers, {token for token, _ in offers})
        try:
            yield reservation
        finally:
            reservation.release_held()

    async def _wait_for_offers(self, key: QueueKey, count: int, wait_until: float) -> list[tuple[str, str]]:
        while True:
            got = self._reserve(key, count)
            if got or trio.current_time() >= wait_until:
                return got
            await self.park(*key, wait_until)

    def total(self) -> int:
        """Offers waiting in every queue (for /metrics)."""
        return sum(len(pending) for pending in self._pending.values())
