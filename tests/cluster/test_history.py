"""The three-node tests' invariant checks (tests/cluster/history.py) catch what they claim to."""

from __future__ import annotations

from typing import Any

from .history import LeaseChange, LeaseHistory, Write, fencing_problems, history_problems

RUN = "run_1"


def ev(
    seq: int, type_: str, step: str | None = None, attempt: int | None = None, **data: Any
) -> dict[str, Any]:
    return {
        "seq": seq,
        "at": 1000 + seq,
        "generation": 1,
        "type": type_,
        "step": step,
        "attempt": attempt,
        "data": data,
    }


def good() -> list[dict[str, Any]]:
    """The history of the e2e workflow: a push retried once, a sleep, a signal, a pulled task."""
    rows = [
        ("run_started", None, None, {"version": 1}),
        ("step_started", "a", None, {"kind": "task"}),
        ("task_dispatched", "a", 1, {"idempotencyKey": f"{RUN}:1:a:1"}),
        ("task_failed", "a", 1, {"class": "http_503"}),
        ("retry_scheduled", "a", 1, {"nextAttempt": 2, "delayMs": 100}),
        ("task_dispatched", "a", 2, {"idempotencyKey": f"{RUN}:1:a:2"}),
        ("task_completed", "a", 2, {}),
        ("step_completed", "a", 2, {}),
        ("step_started", "go", None, {"kind": "wait"}),
        ("signal_received", "go", None, {"name": "go", "signalId": "sig-1", "buffered": False}),
        ("signal_consumed", "go", None, {"name": "go", "signalId": "sig-1"}),
        ("step_completed", "go", None, {}),
        ("step_started", "nap", None, {"kind": "sleep"}),
        ("sleep_started", "nap", None, {"wakeAt": 5000}),
        ("sleep_finished", "nap", None, {}),
        ("step_completed", "nap", None, {}),
        ("step_started", "pick", None, {"kind": "task"}),
        ("task_dispatched", "pick", 1, {"queue": "q"}),
        ("task_claimed", "pick", 1, {"workerId": "w1"}),
        ("task_completed", "pick", 1, {}),
        ("step_completed", "pick", 1, {}),
        ("run_completed", None, None, {}),
    ]
    return [ev(i, t, s, a, **d) for i, (t, s, a, d) in enumerate(rows, start=1)]


def renumber(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**e, "seq": i} for i, e in enumerate(events, start=1)]


def repeat(events: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """The history with event `index` written a second time right after it (seq renumbered)."""
    return renumber([*events[: index + 1], *events[index:]])


def test_a_single_linear_history_passes() -> None:
    assert history_problems(RUN, good()) == []


def test_a_gap_or_a_repeat_in_seq_is_caught() -> None:
    events = good()
    assert any("seq is not" in p for p in history_problems(RUN, events[:5] + events[6:]))
    assert any("seq is not" in p for p in history_problems(RUN, [*events[:6], events[5], *events[6:]]))


def test_a_timer_fired_twice_is_caught() -> None:
    events = good()
    at = next(i for i, e in enumerate(events) if e["type"] == "sleep_finished")
    twice = repeat(events, at)
    assert any("fired twice" in p for p in history_problems(RUN, twice))


def test_a_retry_timer_fired_twice_or_an_attempt_ended_twice_is_caught() -> None:
    events = good()
    again = repeat(events, 5)  # attempt 2 dispatched twice
    assert any("dispatched twice" in p for p in history_problems(RUN, again))
    ended = repeat(events, 6)  # attempt 2 completed twice
    assert any("ended twice" in p for p in history_problems(RUN, ended))
    unarmed = renumber(events[:4] + events[5:])  # attempt 2 without retry_scheduled
    assert any("without its retry timer" in p for p in history_problems(RUN, unarmed))


def test_a_signal_taken_twice_or_two_endings_are_caught() -> None:
    events = good()
    twice = repeat(events, 9)
    assert any("received 2 times" in p for p in history_problems(RUN, twice))
    ended = renumber([*events, events[-1]])
    assert any("terminal events" in p for p in history_problems(RUN, ended))
    assert history_problems(RUN, renumber(events[1:])) != []  # no run_started


LEASES = LeaseHistory(
    [
        LeaseChange(7, None, 0, 0, 0),
        LeaseChange(7, "n1", 1, 3_000, 1_000_000),  # n1 acquires at 1 s until 3 s (ms)
        LeaseChange(7, "n1", 1, 4_000, 2_000_000),  # renewed at 2 s until 4 s
        LeaseChange(7, "n2", 2, 9_000, 6_000_000),  # n2 takes it over at 6 s
    ]
)
NODES = {"foliot-n1": "n1", "foliot-n2": "n2"}


def check(*writes: Write) -> list[str]:
    return fencing_problems(writes, LEASES, lambda run_id: 7, NODES)


def test_writes_under_the_holders_unexpired_lease_pass() -> None:
    assert check(Write(RUN, 1, "foliot-n1", 1_500_000), Write(RUN, 2, "foliot-n1", 3_500_000)) == []
    assert check(Write(RUN, 3, "foliot-n2", 6_000_001)) == []


def test_a_write_by_a_node_whose_lease_expired_or_moved_is_caught() -> None:
    expired = check(Write(RUN, 2, "foliot-n1", 4_500_000))  # after 4 s, before n2 took it
    assert len(expired) == 1 and "expired" in expired[0]
    moved = check(Write(RUN, 3, "foliot-n1", 6_500_000))  # the paused n1 woke after the takeover
    assert len(moved) == 1 and "held by ('n2', 2)" in moved[0]
    early = check(Write(RUN, 1, "foliot-n2", 1_500_000))  # n2 before it held the partition
    assert len(early) == 1 and "not n2" in early[0]
    assert len(check(Write(RUN, 1, "psql", 1_500_000))) == 1  # not a node at all
    assert len(check(Write(RUN, 1, "foliot-n1", 500_000))) == 1  # before anyone held it


def test_the_lease_history_answers_the_lease_at_a_moment() -> None:
    assert LEASES.at(7, 999_999) == LeaseChange(7, None, 0, 0, 0)
    assert LEASES.at(7, 2_000_000) == LeaseChange(7, "n1", 1, 4_000, 2_000_000)
    assert LEASES.at(7, 7_000_000) is not None and LEASES.at(7, 7_000_000).epoch == 2  # type: ignore[union-attr]
    assert LEASES.at(8, 7_000_000) is None
