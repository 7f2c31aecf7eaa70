"""Pull queues: tasks offered to long-polling workers.

Offers are kept per (app, queue) in arrival order; a poller parks on the queue's
`ParkingLot` and is unparked the moment a task is offered, so an idle poller costs nothing.
Popping is synchronous, so two pollers can never take the same token.
"""

from __future__ import annotations

from collections import OrderedDict

import trio
from trio.lowlevel import ParkingLot

QueueKey = tuple[str, str]


class Queues:
    def __init__(self) -> None:
        self._pending: dict[QueueKey, OrderedDict[str, str]] = {}
        self._lots: dict[QueueKey, ParkingLot] = {}
        self._where: dict[str, QueueKey] = {}

    def offer(self, app: str, queue: str, token: str, run_id: str) -> None:
        key = (app, queue)
        self._pending.setdefault(key, OrderedDict())[token] = run_id
        self._where[token] = key
        lot = self._lots.get(key)
        if lot is not None:
            lot.unpark()

    def withdraw(self, token: str) -> None:
        key = self._where.pop(token, None)
        if key is not None:
            self._pending.get(key, OrderedDict()).pop(token, None)

    def depth(self, app: str, queue: str) -> int:
        return len(self._pending.get((app, queue), ()))

    def waiting_pollers(self) -> int:
        return sum(len(lot) for lot in self._lots.values())

    def pop(self, app: str, queue: str, count: int) -> list[tuple[str, str]]:
        pending = self._pending.get((app, queue))
        out: list[tuple[str, str]] = []
        while pending and len(out) < count:
            token, run_id = pending.popitem(last=False)
            self._where.pop(token, None)
            out.append((token, run_id))
        return out

    async def take(self, app: str, queue: str, count: int, wait_until: float) -> list[tuple[str, str]]:
        """Up to `count` offers, parking until one arrives or `wait_until` (Trio time) passes."""
        key = (app, queue)
        while True:
            got = self.pop(app, queue, count)
            if got or trio.current_time() >= wait_until:
                return got
            lot = self._lots.setdefault(key, ParkingLot())
            with trio.move_on_at(wait_until):
                await lot.park()
            if not lot:
                self._lots.pop(key, None)
