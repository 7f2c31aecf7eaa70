"""The pull queues' order: highest priority first, then arrival; a released reservation goes back
to its own place; bookkeeping leaves nothing behind."""

from __future__ import annotations

import trio
import trio.testing

from foliot.actors.queues import Queues


async def take(q: Queues, count: int) -> list[str]:
    async with q.reserve("a", "q", count, 0) as held:
        tokens = [token for token, _ in held.offers]
        for token in tokens:
            held.settle(token, claimed=True)
    return tokens


async def test_priority_then_arrival_and_a_release_keeps_its_place() -> None:
    q = Queues()
    for token, priority in [("p0-a", 0), ("low", -3), ("p5-a", 5), ("p0-b", 0), ("p5-b", 5)]:
        q.offer("a", "q", token, "run", priority)
    assert q.depth("a", "q") == 5 and q.total() == 5
    assert q.oldest_offer("a", "q") == "p0-a"  # waited longest, whatever its priority
    lane = q._pending[("a", "q")]
    assert [t for t, _ in lane.items()] == list(lane) == ["p5-a", "p5-b", "p0-a", "p0-b", "low"]
    async with q.reserve("a", "q", 2, 0) as held:
        assert [t for t, _ in held.offers] == ["p5-a", "p5-b"]
        held.settle("p5-b", claimed=True)
    # p5-a was released: back at the head of its band, ahead of everything below it.
    assert await take(q, 10) == ["p5-a", "p0-a", "p0-b", "low"]
    assert q.sizes() == {"pending": 0, "lots": 0, "where": 0, "reserved": 0}


async def test_withdraw_and_a_waiting_poller_get_the_best_offer() -> None:
    q = Queues()
    q.offer("a", "q", "x", "run", 1)
    q.offer("a", "q", "y", "run", 2)
    q.withdraw("y")
    assert q.depth("a", "q") == 1
    got: list[str] = []

    async def poll() -> None:
        async with q.reserve("a", "q", 1, trio.current_time() + 10) as held:
            got.extend(t for t, _ in held.offers)
            for token in got:
                held.settle(token, claimed=True)

    assert await take(q, 1) == ["x"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await trio.testing.wait_all_tasks_blocked()
        q.offer("a", "q", "z", "run", 9)
    assert got == ["z"]
