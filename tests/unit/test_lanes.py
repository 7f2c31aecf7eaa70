"""Per-app lanes for work without a caller (actors/lanes.py): a token bucket per app, time passed
in; one app's empty bucket never delays another's."""

from __future__ import annotations

from foliot.actors.lanes import Lanes


def test_an_app_gets_its_burst_then_its_rate() -> None:
    lanes = Lanes(rate=2, burst=3)
    assert [lanes.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert lanes.take("a", 0.0) == 0.5  # the next token is half a second away
    assert lanes.take("a", 0.5) == 0.0
    assert lanes.take("a", 0.5) == 0.5
    assert lanes.take("b", 0.5) == 0.0  # another app's lane is untouched
    assert (lanes.taken, lanes.deferred) == (5, 2)


def test_a_lane_refills_to_its_burst_and_no_more() -> None:
    lanes = Lanes(rate=1, burst=2)
    assert lanes.take("a", 0.0) == 0.0
    assert lanes.take("a", 100.0) == 0.0
    assert lanes.take("a", 100.0) == 0.0
    assert lanes.take("a", 100.0) == 1.0


def test_full_lanes_are_forgotten() -> None:
    lanes = Lanes(rate=1, burst=1)
    for i in range(600):
        lanes.take(f"app{i}", float(i))
    assert len(lanes._lanes) < 300  # refilled lanes are dropped every 256 takes


def test_an_app_with_its_own_rate_and_burst() -> None:
    """An app's overrides (`internalRate`, `internalBurst`) are passed to `take`: its lane
    follows them, the other apps' the node's."""
    lanes = Lanes(rate=2, burst=3)
    assert [lanes.take("slow", 0.0, 1, 1) for _ in range(2)] == [0.0, 1.0]
    assert lanes.take("slow", 1.0, 1, 1) == 0.0
    assert [lanes.take("fast", 0.0, 10, 5) for _ in range(6)] == [0.0] * 5 + [0.1]
    assert [lanes.take("a", 0.0) for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]


def test_work_that_comes_back_reserves_its_turn_spread_out() -> None:
    """Waiting fires get turns 1/rate apart, each comes back once and takes its own turn."""
    lanes = Lanes(rate=2, burst=1)
    assert lanes.take("a", 0.0, who="f0") == 0.0
    waits = [lanes.take("a", 0.0, who=f"f{i}") for i in range(1, 5)]
    assert waits == [0.5, 1.0, 1.5, 2.0]
    assert lanes.take("a", 0.5, who="f1") == 0.0  # its turn: taken, nothing more owed
    assert lanes.take("a", 0.5, who="f2") == 0.5  # early: told to come back at its turn
    assert lanes.take("a", 1.0, who="f2") == 0.0
    assert lanes.take("a", 1.0, who="new") == 2.5 - 1.0  # behind every reservation
