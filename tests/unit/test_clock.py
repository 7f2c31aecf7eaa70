"""The engine's clock: wall time and Trio time sampled together; MockClock still drives it."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from foliot.actors import clock as clock_module
from foliot.actors.clock import Clock


async def advance(seconds: float) -> None:
    """Let virtual time pass (these tests run under MockClock; nothing waits on the wall)."""
    await trio.sleep_until(trio.current_time() + seconds)


def test_wall_time_is_sampled_with_the_trio_anchor(monkeypatch: pytest.MonkeyPatch) -> None:
    wall = [1_800_000_000.000]
    monkeypatch.setattr(clock_module.time, "time", lambda: wall[0])
    clock = Clock()  # built here; start-up work then takes 75 ms of wall time before a reading
    wall[0] += 0.075
    readings: list[int] = []

    async def main() -> None:
        readings.append(clock.now())
        await advance(2.5)
        readings.append(clock.now())

    trio.run(main, clock=MockClock(autojump_threshold=0))
    assert readings == [1_800_000_000_075, 1_800_000_002_575]  # not 75 ms behind the wall


def test_a_pinned_anchor_follows_mock_time_exactly() -> None:
    clock = Clock(1_800_000_000_000)
    seen: list[tuple[int, float]] = []

    async def main() -> None:
        await advance(100)  # Trio time before the first reading does not count
        seen.append((clock.now(), trio.current_time()))
        await advance(14 * 86_400)
        seen.append((clock.now(), trio.current_time()))
        deadline = clock.trio_deadline(clock.now() + 1_500)
        await clock.sleep_until(clock.now() + 1_500)
        seen.append((clock.now(), deadline))

    trio.run(main, clock=MockClock(autojump_threshold=0))
    (first, t1), (second, t2), (third, deadline) = seen
    assert first == 1_800_000_000_000
    assert second == first + 14 * 86_400_000 and t2 - t1 == 14 * 86_400
    assert third == second + 1_500 and deadline == pytest.approx(t2 + 1.5)


def test_a_past_instant_is_due_now() -> None:
    clock = Clock(1_800_000_000_000)

    async def main() -> None:
        assert clock.trio_deadline(clock.now() - 10_000) == trio.current_time()

    trio.run(main, clock=MockClock(autojump_threshold=0))
