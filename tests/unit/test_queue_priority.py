"""The pull queues' order: the most urgent level first (1..5), then arrival, with aging; a released
reservation goes back to its own place; bookkeeping leaves nothing behind."""

from __future__ import annotations

import trio
import trio.testing

from foliot.actors.queues import Queues

from ..helpers import advance


async def take(q: Queues, count: int) -> list[str]:
    async with q.reserve("a", "q", count, 0) as held:
        tokens = [token for token, _ in held.offers]
        for token in tokens:
            held.settle(token, claimed=True)
    return tokens


async def test_priority_then_arrival_and_a_release_keeps_its_place() -> None:
    q = Queues()
    for token, priority in [("p0-a", 3), ("low", 5), ("p5-a", 1), ("p0-b", 3), ("p5-b", 1)]:
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
    q.offer("a", "q", "x", "run", 4)
    q.offer("a", "q", "y", "run", 3)
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
        q.offer("a", "q", "z", "run", 1)
    assert got == ["z"]


async def test_aging_a_waiting_low_priority_offer_gains_one_level_per_aging_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With aging 10 s: a level-5 offer is overtaken by level-1 offers arriving < 40 s after it,
    never by one arriving later (the bound), and equal ranks go in arrival order."""
    q = Queues(aging=10.0)
    q.offer("a", "q", "old-low", "run", 5)
    await advance(39)
    q.offer("a", "q", "urgent-39s", "run", 1)  # rank 39 < 40: ahead of it
    await advance(2)
    q.offer("a", "q", "urgent-41s", "run", 1)  # rank 41 > 40: behind it
    q.offer("a", "q", "normal-41s", "run", 3)
    assert await take(q, 10) == ["urgent-39s", "old-low", "urgent-41s", "normal-41s"]


async def test_a_stream_of_urgent_offers_never_starves_a_low_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    q = Queues(aging=1.0)
    q.offer("a", "q", "low", "run", 5)
    served: list[str] = []
    for i in range(100):  # one urgent offer a second, one taken a second
        q.offer("a", "q", f"u{i}", "run", 1)
        served += await take(q, 1)
        await advance(1)
        if "low" in served:
            break
    assert "low" in served and len(served) <= 6  # after at most 4 aging periods (+ the one in hand)


async def test_swf_task_priority_maps_onto_levels() -> None:
    from foliot.core.workflow.flow import swf_level

    assert [swf_level(p) for p in ("10", "2", "1", "0", None, "-1", "-2", "-99", "x")] == [
        1,
        1,
        2,
        3,
        3,
        4,
        5,
        5,
        3,
    ]
