"""The request path's read cache: fresh within its TTL, invalidated at once, bounded."""

from __future__ import annotations

import trio
import trio.testing

from foliot.actors.cache import TtlCache


class Source:
    def __init__(self) -> None:
        self.value: str | None = "v1"
        self.reads = 0
        self.gate: trio.Event | None = None

    async def load(self) -> str | None:
        self.reads += 1
        value = self.value  # read now; the answer arrives when the gate opens
        if self.gate is not None:
            await self.gate.wait()
        return value


async def test_served_from_cache_until_the_ttl_passes() -> None:
    now = [0]
    cache = TtlCache[str, str | None](lambda: now[0], ttl_ms=1_000)
    src = Source()
    assert await cache.get("k", src.load) == "v1"
    src.value = "v2"  # changed by another node: seen once the TTL is over
    now[0] = 999
    assert await cache.get("k", src.load) == "v1"
    now[0] = 1_000
    assert await cache.get("k", src.load) == "v2"
    assert src.reads == 2


async def test_none_is_cached_and_invalidation_is_immediate() -> None:
    cache = TtlCache[str, str | None](lambda: 0)
    src = Source()
    src.value = None
    assert await cache.get("k", src.load) is None
    assert await cache.get("k", src.load) is None
    assert src.reads == 1
    src.value = "created"
    cache.invalidate("k")
    assert await cache.get("k", src.load) == "created"


async def test_a_load_racing_an_invalidation_is_not_kept() -> None:
    cache = TtlCache[str, str | None](lambda: 0)
    src = Source()
    src.gate = trio.Event()
    results: list[str | None] = []

    async def reader() -> None:
        results.append(await cache.get("k", src.load))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        cache.invalidate("k")  # e.g. the key was revoked while the read was in flight
        src.value = "revoked"
        src.gate.set()
    src.gate = None
    assert results == ["v1"]
    assert await cache.get("k", src.load) == "revoked"


async def test_bounded_in_entries() -> None:
    cache = TtlCache[int, int](lambda: 0, max_entries=3)

    async def load() -> int:
        return 1

    for i in range(10):
        await cache.get(i, load)
    assert len(cache) == 3
