"""The latency gate alone (pure: time is passed in): CoDel detection of a standing queue,
Little's-law limit while shedding, and the way back to admitting everything."""

from __future__ import annotations

import pytest

from foliot.actors.gate import LatencyGate

TARGET, INTERVAL = 0.1, 0.2


def gate(**kw: int) -> LatencyGate:
    return LatencyGate(TARGET, INTERVAL, **kw)


def answer_every(g: LatencyGate, start: float, end: float, step: float, latency: float) -> float:
    t = start
    while t < end:
        assert g.admit(t, 0)
        g.answered(t, latency)
        t += step
    return t


def test_a_burst_with_some_fast_answers_never_sheds() -> None:
    g = gate()
    t = 0.0
    for _ in range(20):  # each interval: one slow answer (a burst queued), the others fast
        g.answered(t, 0.5)
        t = answer_every(g, t + 0.001, t + INTERVAL, 0.02, 0.01)
    assert not g.shedding and g.episodes == 0
    assert g.admit(t, 10_000)  # no limit while not shedding (the hard caps are elsewhere)


def test_a_whole_interval_of_slow_answers_starts_shedding_at_the_littles_law_limit() -> None:
    g = gate(floor=2)
    # 100 answers/s for a second, each after 0.3 s: a standing queue.
    t = answer_every(g, 0.0, 1.0, 0.01, 0.3)
    assert g.admit(t, 0)  # rolls into the next interval
    assert g.shedding and g.episodes >= 1
    assert g.throughput == pytest.approx(100, rel=0.05)
    assert g.limit == 10  # 100/s x 0.1 s
    assert g.admit(t, 9)
    assert not g.admit(t, 10) and not g.admit(t, 50)
    assert g.last_min_s == pytest.approx(0.3)


def test_the_floor_bounds_the_limit_from_below() -> None:
    g = gate(floor=8)
    t = answer_every(g, 0.0, 1.0, 0.05, 0.5)  # 20 answers/s, all slow
    g.admit(t, 0)
    assert g.shedding and g.limit == 8
    assert g.admit(t, 7) and not g.admit(t, 8)


def test_shedding_ends_after_an_interval_with_nothing_refused() -> None:
    g = gate(floor=2)
    t = answer_every(g, 0.0, 1.0, 0.01, 0.3)
    assert not g.admit(t, 100)  # refused in this interval: the next roll keeps shedding
    t += INTERVAL
    assert g.admit(t, 0) and g.shedding
    # A whole interval in which the load fits under the limit: nothing refused.
    t = answer_every(g, t + 0.001, t + INTERVAL, 0.02, 0.02)
    assert g.admit(t, 100)
    assert not g.shedding and g.limit is None


def test_an_idle_spell_ends_shedding() -> None:
    g = gate(floor=2)
    t = answer_every(g, 0.0, 1.0, 0.01, 0.3)
    assert not g.admit(t, 100)
    assert g.admit(t + 5 * INTERVAL, 100)
    assert not g.shedding
    assert g.throughput < 30  # the idle intervals count as empty


def test_a_target_of_zero_turns_the_gate_off() -> None:
    g = LatencyGate(0, INTERVAL)
    for i in range(200):
        g.answered(i * 0.01, 5.0)
    assert g.admit(10.0, 10_000) and not g.shedding


def test_an_interval_ending_where_float_division_falls_short_still_moves_on() -> None:
    # (0.7 + 0.2 - 0.7) / 0.2 < 1 in floating point: the interval must still be counted as passed.
    start = 0.7
    g = gate(floor=2)
    assert (start + INTERVAL - start) / INTERVAL < 1
    for i in range(50):
        g.answered(start + i * 0.004, 0.5)
    assert g.admit(start + INTERVAL, 0) and g.shedding
    assert not g.admit(start + INTERVAL + 0.001, 100)  # still the same (shedding) interval
    assert g.shedding


def test_answers_queued_behind_their_own_run_count_as_throughput_but_never_shed() -> None:
    g = gate(floor=2)
    t = 0.0
    while t < 1.0:  # a burst to one run: every answer waited behind that run's other messages
        assert g.admit(t, 50)
        g.answered(t, None)
        t += 0.01
    assert g.admit(t, 50)
    assert not g.shedding and g.episodes == 0 and g.last_min_s is None
    assert g.throughput == pytest.approx(100, rel=0.05)
    # Slow timed answers among them still reveal a standing queue.
    end = t + 1.0
    while t < end:
        g.answered(t, None)
        g.answered(t, 0.3)
        t += 0.01
    assert g.admit(t, 0) and g.shedding
    assert g.limit == 20  # 200 answers/s (timed or not) x 0.1 s


def test_one_or_two_slow_answers_in_an_interval_are_not_evidence_of_a_standing_queue() -> None:
    g = gate(floor=2)
    for k in range(10):  # each interval: two slow answers and nothing else
        g.answered(k * INTERVAL, 0.5)
        g.answered(k * INTERVAL + 0.1, 0.5)
    assert g.admit(10 * INTERVAL, 100) and not g.shedding
    g.answered(10 * INTERVAL, 0.5)  # three in one interval: a standing queue
    g.answered(10 * INTERVAL + 0.05, 0.5)
    g.answered(10 * INTERVAL + 0.1, 0.5)
    assert not g.admit(11 * INTERVAL, 100) and g.shedding


def probe(g: LatencyGate, start: float, end: float, lag: float) -> float:
    """The lag probe: a sleeper due every INTERVAL / 4 that wakes `lag` late."""
    t = start
    while t < end:
        due = t + INTERVAL / 4
        g.expect(due)
        t = due + lag
        g.lagged(t, lag)
    return t


def test_a_late_loop_is_measured_but_sheds_nothing_without_a_lag_bound() -> None:
    g = gate(floor=8)
    t = probe(g, 0.0, 2.0, 0.5)
    assert g.admit(t, 10_000) and not g.shedding and g.scale == 1.0
    assert g.last_lag_s == pytest.approx(0.5)


def test_a_loop_late_past_the_lag_bound_sheds_and_halves_the_limit() -> None:
    g = LatencyGate(TARGET, INTERVAL, floor=8, lag_s=0.1)
    t = probe(g, 0.0, 0.25, 0.0)  # on time: nothing changes
    assert not g.shedding and g.scale == 1.0
    t = probe(g, t, t + 1.0, 0.15)  # every wake-up 150 ms late, for a second
    assert g.admit(t, 0) and g.shedding and g.episodes == 1
    assert g.scale < 0.5 and g.limit is not None and g.limit < 4
    assert not g.admit(t, g.limit)
    # On time again: the limit doubles back interval by interval, then shedding ends.
    t = probe(g, t, t + 2.0, 0.0)
    assert g.scale == 1.0 and not g.shedding


def test_one_late_wake_up_is_no_evidence() -> None:
    g = LatencyGate(TARGET, INTERVAL, floor=8, lag_s=0.1)
    t = probe(g, 0.0, 0.5, 0.0)
    t = probe(g, t, t + 0.01, 0.12)  # one wake-up 120 ms late (a collection, a page fault)
    t = probe(g, t, t + 1.0, 0.0)
    assert not g.shedding and g.episodes == 0 and g.scale == 1.0


def test_a_stalled_loop_sheds_before_its_sleeper_reports() -> None:
    g = LatencyGate(TARGET, INTERVAL, floor=8, lag_s=0.1)
    t = probe(g, 0.0, 0.5, 0.0)
    g.expect(t + 0.05)  # the sleeper is due, and the loop does not come back to it...
    t += 0.6
    g.answered(t, 0.01)  # ...while requests are still read and answered, quickly
    assert g.admit(t, 0)
    assert g.shedding and g.scale == 0.5 and g.last_lag_s == pytest.approx(0.55)


def test_before_any_answer_a_burst_is_let_in_and_what_is_past_it_refused() -> None:
    g = LatencyGate(TARGET, INTERVAL, burst=16, queue_s=0.5)
    assert all(g.admit_queued(0.0, queued) for queued in range(16))  # a cold node takes a burst
    assert not g.admit_queued(0.0, 16) and not g.admit_queued(0.01, 100)
    assert not g.shedding  # a full queue is refused, but is no evidence of a standing queue


def test_the_queue_bound_follows_the_measured_throughput() -> None:
    g = LatencyGate(TARGET, INTERVAL, burst=4, queue_s=0.5)
    t = answer_every(g, 0.0, 1.0, 0.01, 0.01)  # 100 fast answers/s: not shedding
    assert not g.shedding and g.throughput == pytest.approx(100, rel=0.05)
    assert g.admit_queued(t, 49)  # half a second of work at 100/s
    assert not g.admit_queued(t, 50)


def test_while_shedding_the_queue_bound_is_the_littles_law_limit() -> None:
    g = LatencyGate(TARGET, INTERVAL, floor=2, burst=1000)
    t = answer_every(g, 0.0, 1.0, 0.01, 0.3)  # a standing queue
    assert g.admit(t, 0) and g.shedding and g.limit == 10
    assert g.admit_queued(t, 9) and not g.admit_queued(t, 10)  # not the burst of 1000


def test_the_queue_bound_is_off_with_the_gate() -> None:
    g = LatencyGate(0, INTERVAL, burst=1)
    assert g.admit_queued(0.0, 10_000)
