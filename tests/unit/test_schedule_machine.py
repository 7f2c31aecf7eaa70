"""The schedule machine (pure): ticks, catch-up after an outage, the overlap policies, trigger,
backfill, pause and replace; and the document's stored form."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from foliot.core.schedule import machine as m
from foliot.core.schedule.definition import parse_schedule
from foliot.core.workflow.duration import parse_timestamp

MIN = 60_000


def ms(text: str) -> int:
    return parse_timestamp(text)


T0 = ms("2026-01-01T00:00:00Z")


def state(now: int = T0 + 1, paused: bool | None = None, **fields: Any) -> m.ScheduleState:
    schedule, _ = parse_schedule({"workflow": "wf", "every": "1m", **fields})
    return m.create("app", "sched", schedule, paused, now)


def settle(
    s: m.ScheduleState, now: int, previous_open: bool = False, run: str = "run_x"
) -> tuple[m.ScheduleState, list[m.Action]]:
    """Tick until nothing is due at `now` (what the actor does, one fire per timer)."""
    actions: list[m.Action] = []
    while True:
        s, at = m.tick(s, now)
        if at is None:
            return s, actions
        action = m.decide(s, at, previous_open)
        actions.append(action)
        s = m.apply(s, action, now, run if action.kind == "start" else None)


def test_a_new_schedule_fires_from_now_on() -> None:
    s = state()
    assert s.next_time == T0 + MIN
    assert s.timers() == [("fire", m.Timer("fire", T0 + MIN, str(T0 + MIN)))]
    assert m.tick(s, T0 + 30_000) == (s, None)  # early: nothing to do
    s2, at = m.tick(s, T0 + MIN)
    assert at == T0 + MIN and s2 == s
    action = m.decide(s2, at, previous_open=False)
    assert action == m.Action("start", T0 + MIN, T0 + MIN)
    s3 = m.apply(s2, action, T0 + MIN, "run_1")
    assert (s3.cursor, s3.next_time, s3.fired, s3.last_run_id, s3.last_time) == (
        T0 + MIN,
        T0 + 2 * MIN,
        1,
        "run_1",
        T0 + MIN,
    )
    assert s3.next_fires(3) == [T0 + 2 * MIN, T0 + 3 * MIN, T0 + 4 * MIN]


def test_catch_up_within_the_window_once_each_in_order_older_counted_missed() -> None:
    s = state(catchupWindow="3m")
    # Down from just after creation until 10m: fires at 1..10m were owed.
    s, actions = settle(s, T0 + 10 * MIN + 5)
    started = [a.scheduled for a in actions if a.kind == "start"]
    # Within 3m of due: 8m, 9m, 10m (7m is 3m + 5ms late: missed).
    assert started == [T0 + 8 * MIN, T0 + 9 * MIN, T0 + 10 * MIN]
    assert s.missed == 7 and s.fired == 3
    assert s.cursor == T0 + 10 * MIN and s.next_time == T0 + 11 * MIN
    # Nothing is made twice: ticking again at the same time does nothing.
    assert settle(s, T0 + 10 * MIN + 5) == (s, [])


def test_a_long_outage_counts_in_bulk() -> None:
    s = state(every="1s")
    s, actions = settle(s, T0 + 86_400_000)  # a day of one-second fires
    assert len(actions) == 61  # the last minute is within the default window (both ends)
    assert s.missed == 86_400 - 61


def test_cron_outage_beyond_the_count_cap_still_ends() -> None:
    schedule, _ = parse_schedule({"workflow": "wf", "cron": "* * * * *"})
    s = m.create("app", "sched", schedule, None, T0)
    far = T0 + (m.MISSED_COUNT_CAP + 500) * MIN
    s2, at = m.tick(s, far)
    assert at == far - MIN  # exactly the window late: still made
    assert s2.missed == m.MISSED_COUNT_CAP  # counted up to the cap, then jumped


def test_skip() -> None:
    s = state(overlap="skip")
    s, at = m.tick(s, T0 + MIN)
    assert at is not None
    s = m.apply(s, m.decide(s, at, False), T0 + MIN, "run_1")
    s, at = m.tick(s, T0 + 2 * MIN)
    assert at is not None
    action = m.decide(s, at, previous_open=True)
    assert action.kind == "skip"
    s = m.apply(s, action, T0 + 2 * MIN)
    assert (s.skipped, s.fired, s.cursor, s.last_run_id) == (1, 1, T0 + 2 * MIN, "run_1")


def test_allow_never_asks() -> None:
    s = state(overlap="allow")
    s = attrs.evolve(s, last_run_id="run_1")
    assert m.previous_run(s) is None
    assert m.decide(s, T0 + MIN, previous_open=True).kind == "start"


def test_cancel_previous() -> None:
    s = attrs.evolve(state(overlap="cancel_previous"), last_run_id="run_1")
    assert m.previous_run(s) == "run_1"
    assert m.decide(s, T0 + MIN, previous_open=True) == m.Action("start", T0 + MIN, T0 + MIN, cancel="run_1")
    assert m.decide(s, T0 + MIN, previous_open=False).cancel is None


def test_buffer_one_holds_one_and_skips_the_rest() -> None:
    s = attrs.evolve(state(overlap="buffer_one"), last_run_id="run_1")
    s, at = m.tick(s, T0 + MIN)
    assert at is not None
    hold = m.decide(s, at, previous_open=True)
    assert hold.kind == "hold"
    s = m.apply(s, hold, T0 + MIN)
    assert s.buffered == T0 + MIN and s.recheck_at == T0 + MIN + m.RECHECK_MIN_MS
    assert ("buffer", m.Timer("recheck", s.recheck_at, f"{T0 + MIN}#1")) in s.timers()
    # The next fire while run_1 is still open: skipped, the held one stays.
    s, at = m.tick(s, T0 + 2 * MIN)
    assert at is not None
    skip = m.decide(s, at, previous_open=True)
    assert skip.kind == "skip"
    s = m.apply(s, skip, T0 + 2 * MIN)
    assert s.buffered == T0 + MIN and s.skipped == 1
    # Rechecks back off while the run stays open, never beyond the bound.
    s2, none = m.recheck(s, previous_open=True, now=T0 + 10 * MIN)
    assert none is None and s2.recheck_at == T0 + 10 * MIN + m.RECHECK_MAX_MS and s2.armings == s.armings + 1
    # run_1 closed: the held fire starts (with its own scheduled time).
    s3, start = m.recheck(s2, previous_open=False, now=T0 + 11 * MIN)
    assert start == m.Action("start", T0 + MIN)
    s3 = m.apply(s3, start, T0 + 11 * MIN, "run_2")
    assert (s3.buffered, s3.recheck_at, s3.last_run_id, s3.last_time) == (None, None, "run_2", T0 + MIN)
    assert [slot for slot, _ in s3.timers()] == ["fire"]


def test_buffer_one_at_a_tick_after_the_run_closed_starts_the_held_fire_first() -> None:
    s = attrs.evolve(
        state(overlap="buffer_one"), last_run_id="run_1", buffered=T0 + 30_000, recheck_at=T0 + 99 * MIN
    )
    action = m.decide(s, T0 + MIN, previous_open=False)
    assert action == m.Action("start", T0 + 30_000, T0 + MIN, buffer=T0 + MIN)
    s = m.apply(s, action, T0 + MIN, "run_2")
    assert s.buffered == T0 + MIN and s.last_time == T0 + 30_000


def test_trigger_does_not_move_the_cursor() -> None:
    s = state()
    action = m.decide(s, T0 + 5, previous_open=False, advance=False)
    assert action == m.Action("start", T0 + 5)
    s2 = m.apply(s, action, T0 + 5, "run_t")
    assert s2.cursor == s.cursor and s2.next_time == s.next_time and s2.fired == 1


def test_a_refused_start_counts_as_skipped() -> None:
    s = state()
    s2 = m.apply(s, m.Action("start", T0 + MIN, T0 + MIN), T0 + MIN, None, error="workflow gone")
    assert (s2.skipped, s2.fired, s2.last_error, s2.cursor) == (1, 0, "workflow gone", T0 + MIN)


def test_pause_and_unpause() -> None:
    s = m.pause(state(), "maintenance", T0 + 2)
    assert s.paused and s.pause_reason == "maintenance"
    assert s.timers() == [] and s.next_fires(5) == []
    assert m.tick(s, T0 + 10 * MIN) == (s, None)
    s = m.unpause(s, T0 + 10 * MIN + 1)
    # What fell in the pause is neither made nor missed.
    assert (s.paused, s.missed, s.next_time) == (False, 0, T0 + 11 * MIN)


def test_start_at_and_end_at() -> None:
    s = state(startAt="2026-01-01T01:00:00Z", endAt="2026-01-01T01:02:00Z")
    assert s.next_fires(5) == [T0 + 60 * MIN, T0 + 61 * MIN, T0 + 62 * MIN]
    s, actions = settle(s, T0 + 62 * MIN)
    # 60m is more than the 1m window late; 61m is exactly 1m late: still made.
    assert [a.scheduled for a in actions] == [T0 + 61 * MIN, T0 + 62 * MIN] and s.missed == 1
    assert s.next_time is None and s.timers() == []


def test_replace() -> None:
    s = state()
    same, _ = parse_schedule({"workflow": "wf", "every": "1m"})
    assert m.replace(s, same, None, T0 + 5 * MIN).cursor == s.cursor  # the same: nothing moves
    other, _ = parse_schedule({"workflow": "wf", "every": "2m"})
    r = m.replace(m.pause(s, "why", T0), other, None, T0 + 5 * MIN)
    assert r.cursor == T0 + 5 * MIN and r.next_time == T0 + 6 * MIN
    assert r.paused and r.pause_reason == "why"  # left out: the pause stays
    assert not m.replace(r, other, False, T0 + 6 * MIN).paused


def test_jitter_delays_the_due_time_only() -> None:
    s = state(jitter="30s")
    at = s.next_time
    assert at is not None
    assert at <= s.due(at) < at + 30_000
    assert s.timers()[0][1].key == str(at)  # the key (and the business key) is the scheduled time
    assert m.tick(s, at)[1] in (None, at)
    assert m.tick(s, s.due(at))[1] == at


def test_backfill_times() -> None:
    s = state(endAt="2026-01-01T00:02:00Z")
    times = m.backfill_times(s, T0 - 3 * MIN, T0 + 5 * MIN)
    # Every time in [from, to), outside endAt too.
    assert times == [T0 + i * MIN for i in range(-3, 5)]
    assert m.backfill_times(s, T0, T0 + (m.BACKFILL_MAX + 1) * MIN) is None
    assert m.backfill_times(s, T0, T0) == []


@pytest.mark.parametrize("fields", [{}, {"buffered": 5, "buffered_since": 4, "recheck_at": 9, "armings": 2}])
def test_stored_form_round_trips(fields: dict[str, Any]) -> None:
    s = attrs.evolve(m.pause(state(), "r", T0), fired=3, skipped=2, missed=1, last_run_id="run_1", **fields)
    back = m.state_from_parts(
        s.app,
        s.name,
        json.loads(json.dumps(s.schedule.document)),
        json.loads(json.dumps(m.state_to_dict(s))),
        s.created_at,
        s.updated_at,
        s.version,
    )
    assert back == s
