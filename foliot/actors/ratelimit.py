"""Rate-limit tokens (issue 23): a send of a rate-limited step or app reserves a slot first.

A bucket (`flow.Bucket`) is one number in storage, its "theoretical arrival time" (TAT, epoch
microseconds): the earliest instant its next send may go. Reserving `n` tokens is one
conditional upsert, `tat = max(tat, now) + n * interval` returning the new value, so the slots
`[tat - n * interval, tat)` belong to this reservation whatever other nodes reserve at the same
time (the row's lock orders them) and nothing is lost or doubled across a restart: a restarted
node reads the TAT it left, so a bucket never starts full after a restart (there is no stored
burst to refill; a bucket holds one token, sends are spaced `period / limit` apart).

Reservations made in the same scheduler tick for the same bucket are merged into one statement
(a batch of tokens); each caller gets its own slot of the batch.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs
import trio

from ..core.errors import StorageError
from ..core.workflow.flow import Bucket

log = logging.getLogger("foliot.ratelimit")


class BucketStore(Protocol):
    async def take_rate_tokens(self, bucket: str, interval_us: int, count: int, now_us: int) -> int:
        """Reserve `count` consecutive slots of `bucket`; the bucket's new TAT (µs): the slots
        are `tat - count * interval_us`, … , `tat - interval_us`."""
        ...

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        """Forget up to `limit` buckets whose TAT is before `idle_before_us` (full again: as
        if never used), the oldest first; how many."""
        ...


class MemoryBuckets:
    """Buckets in memory (tests, and a store without the table). `prune_rate_buckets` walks a
    heap of (TAT, bucket) as each reservation left it, so a pass costs what it deletes (and the
    stale entries it passes), never the number of buckets kept."""

    def __init__(self) -> None:
        self.tat: dict[str, int] = {}
        self._by_tat: list[tuple[int, str]] = []

    async def take_rate_tokens(self, bucket: str, interval_us: int, count: int, now_us: int) -> int:
        tat = max(self.tat.get(bucket, now_us), now_us) + count * interval_us
        self.tat[bucket] = tat
        heapq.heappush(self._by_tat, (tat, bucket))
        return tat

    async def prune_rate_buckets(self, idle_before_us: int, limit: int) -> int:
        heap, deleted = self._by_tat, 0
        while heap and heap[0][0] < idle_before_us and deleted < limit:
            tat, bucket = heapq.heappop(heap)
            if self.tat.get(bucket) == tat:  # else a later reservation moved it on
                del self.tat[bucket]
                deleted += 1
        return deleted


@attrs.define(eq=False)
class _Batch:
    bucket: Bucket
    count: int = 0
    done: trio.Event = attrs.Factory(trio.Event)
    tat: int | None = None
    error: BaseException | None = None


class RateLimiter:
    """Reserves tokens in a `BucketStore`, merging what callers ask for in one tick."""

    def __init__(self, store: BucketStore, now: Callable[[], int], *, retry_s: float = 0.2) -> None:
        self._store = store
        self._now = now  # epoch ms
        self._retry_s = retry_s
        self._open: dict[str, _Batch] = {}
        self.reserved = 0  # tokens reserved so far (for tests and /metrics)

    async def reserve(self, buckets: Sequence[Bucket]) -> tuple[int, Bucket | None]:
        """Take one token of each bucket: (epoch ms when the send may go, the bucket that set
        it, None when it may go now). While storage is down, waits and retries (the send has
        not happened; an abort cancels the wait)."""
        now_ms = self._now()
        slot_us, slowest = now_ms * 1000, None
        for bucket in buckets:
            first = await self._take(bucket)
            if first > slot_us:
                slot_us, slowest = first, bucket
        return -(-slot_us // 1000), slowest

    async def _take(self, bucket: Bucket) -> int:
        delay = self._retry_s
        while True:
            batch = self._open.get(bucket.name)
            if batch is None:
                batch = self._open[bucket.name] = _Batch(bucket)
                index = 0
                batch.count = 1
                await trio.lowlevel.cancel_shielded_checkpoint()  # let this tick's callers join
                del self._open[bucket.name]
                try:
                    batch.tat = await self._store.take_rate_tokens(
                        bucket.name, bucket.interval_us, batch.count, self._now() * 1000
                    )
                    self.reserved += batch.count
                except StorageError as exc:
                    batch.error = exc
                except BaseException as exc:  # cancelled (the send was aborted): others retry
                    batch.error = exc
                    raise
                finally:
                    batch.done.set()
            else:
                index = batch.count
                batch.count += 1
                await batch.done.wait()
            if batch.tat is not None:
                return batch.tat - (batch.count - index) * bucket.interval_us
            if not isinstance(batch.error, StorageError):
                continue  # the caller that asked for the batch was cancelled: ask again
            log.warning("rate bucket %s: storage unavailable, retrying", bucket.name)
            await trio.sleep(delay)
            delay = min(delay * 2, 5.0)
