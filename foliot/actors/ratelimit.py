"""Rate-limit tokens (issues 23, 38): a send of a rate-limited step or app takes a token first.

A bucket (`flow.Bucket`) is one number in storage, its "theoretical arrival time" (TAT, epoch
microseconds): the earliest instant its next send may go. Tokens are taken only when sends go,
and only from a free bucket (`flow.take_tokens`: a slot is free within its millisecond), so
sends are spaced `period / limit` apart (a bucket holds no stored burst) and a restarted node
reads the TAT the last send left. No later slot is ever reserved: a send that waits holds
nothing, so one dropped while it waits (its run cancelled, timed out, rewound, moved to another
node) has nothing to give back, and the next send is not pushed later by it.

The limiter remembers the last TAT it saw of each bucket (a lower bound of the stored one: only
sends move it on), so a send it knows must wait does not ask storage, and callers of one node
asking for the same bucket at once ask storage one at a time.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import trio

from ..core.errors import StorageError
from ..core.workflow.flow import Bucket, take_tokens

log = logging.getLogger("foliot.ratelimit")


class BucketStore(Protocol):
    async def take_rate_tokens(
        self, buckets: Sequence[tuple[str, int]], count: int, now_us: int
    ) -> tuple[int, tuple[str, int] | None]:
        """Take up to `count` tokens of each `(bucket, interval_us)` free at `now_us`
        (`flow.take_tokens`): (how many, None); else none: (0, (a bucket not free, its TAT))."""
        ...

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        """Forget up to `limit` buckets whose TAT is before `idle_before_us` (full again: as
        if never used), the oldest first; how many."""
        ...


class MemoryBuckets:
    """Buckets in memory (tests, and a store without the table). `prune_rate_buckets` walks a
    heap of (TAT, bucket) as each take left it, so a pass costs what it deletes (and the stale
    entries it passes), never the number of buckets kept."""

    def __init__(self) -> None:
        self.tat: dict[str, int] = {}
        self._by_tat: list[tuple[int, str]] = []

    async def take_rate_tokens(
        self, buckets: Sequence[tuple[str, int]], count: int, now_us: int
    ) -> tuple[int, tuple[str, int] | None]:
        ordered = sorted(buckets)
        granted, moved, busy = take_tokens(ordered, [self.tat.get(n, 0) for n, _ in ordered], count, now_us)
        for name, tat in moved:
            self.tat[name] = tat
            heapq.heappush(self._by_tat, (tat, name))
        return granted, busy

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        heap, deleted = self._by_tat, 0
        while heap and heap[0][0] < idle_before_us and deleted < limit:
            tat, bucket = heapq.heappop(heap)
            if self.tat.get(bucket) == tat:  # else a later take moved it on
                del self.tat[bucket]
                deleted += 1
        return deleted


class RateLimiter:
    """Takes tokens from a `BucketStore` at send time (see the module's docstring)."""

    def __init__(self, store: BucketStore, now: Callable[[], int], *, retry_s: float = 0.2) -> None:
        self._store = store
        self._now = now  # epoch ms
        self._retry_s = retry_s
        self._known: dict[str, int] = {}  # bucket -> the latest TAT (µs) seen by this node
        self._swept = 0  # len(_known) after its last sweep
        self._asking: dict[str, trio.Event] = {}  # bucket -> a take of it under way
        self.taken = 0  # tokens taken so far (for tests)

    def free_at(self, bucket: str) -> int:
        """The epoch ms from which `bucket` may be free, as far as this node knows: the
        millisecond of its TAT (a slot is free within its millisecond, `flow.take_tokens`)."""
        return self._known.get(bucket, 0) // 1000

    async def take(self, buckets: Sequence[Bucket], count: int = 1) -> tuple[int, int, Bucket | None]:
        """Take up to `count` tokens of each bucket, those free now: (how many, now, None), the
        sends go. Else nothing is taken: (0, epoch ms when to try again, the bucket that is not
        free). While storage is down, waits and retries (the sends have not happened; an abort
        cancels the wait)."""
        buckets = list({b.name: b for b in buckets}.values())  # a bucket named twice: one token
        delay = self._retry_s
        while True:
            asking = next((self._asking[b.name] for b in buckets if b.name in self._asking), None)
            if asking is not None:
                await asking.wait()  # then what it learnt decides
                continue
            now_ms = self._now()
            busy = max(buckets, key=lambda b: self._known.get(b.name, 0))
            if self.free_at(busy.name) > now_ms:
                return 0, self.free_at(busy.name), busy
            done = trio.Event()
            for b in buckets:
                self._asking[b.name] = done
            try:
                pairs = [(b.name, b.interval_us) for b in buckets]
                granted, refused = await self._store.take_rate_tokens(pairs, max(1, count), now_ms * 1000)
            except StorageError:
                log.warning("rate buckets %s: storage unavailable, retrying", [b.name for b in buckets])
            else:
                if refused is None:
                    self.taken += granted
                    for b in buckets:  # at least this far (a lower bound is all `_known` holds)
                        self._learn(b.name, now_ms * 1000 + granted * b.interval_us)
                    return granted, now_ms, None
                self._learn(*refused)
                continue  # known now: answered above
            finally:
                for b in buckets:
                    del self._asking[b.name]
                done.set()
            await trio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _learn(self, bucket: str, tat: int) -> None:
        if tat > self._known.get(bucket, 0):
            self._known[bucket] = tat
        if len(self._known) > max(1024, 2 * self._swept):  # forget what is past (amortized)
            now_us = self._now() * 1000
            self._known = {b: t for b, t in self._known.items() if t > now_us}
            self._swept = len(self._known)
