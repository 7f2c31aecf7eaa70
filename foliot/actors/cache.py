"""Short-lived read caches for the request path: API keys, apps, latest workflow versions.

Each request used to read its key, its app and the latest workflow version from storage (on
PostgreSQL, one crossing into the driver each). These rarely change, so they are cached for
`ttl_ms` (one second by default) and dropped at once by this node when it changes them: a
revoked key is refused immediately here and within `ttl_ms` on any other node sharing the
database. Bounded in entries; the oldest go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """`get(key, load)`: the cached value while fresh, else `await load()` (None is cached too)."""

    def __init__(self, now: Callable[[], int], *, ttl_ms: int = 1_000, max_entries: int = 10_000) -> None:
        self._now = now
        self._ttl_ms = ttl_ms
        self._max = max_entries
        self._entries: OrderedDict[K, tuple[int, V]] = OrderedDict()
        self._invalidations = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: K, load: Callable[[], Awaitable[V]]) -> V:
        found = self._entries.get(key)
        now = self._now()
        if found is not None and now < found[0]:
            self.hits += 1
            return found[1]
        self.misses += 1
        before = self._invalidations
        value = await load()
        # An invalidation while loading wins: what was loaded may predate the change.
        if self._invalidations == before:
            self._entries[key] = (now + self._ttl_ms, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return value

    def invalidate(self, key: K) -> None:
        self._invalidations += 1
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._invalidations += 1
        self._entries.clear()
