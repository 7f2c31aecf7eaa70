"""The run diagnosis as data: every stuck case, without I/O."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from foliot.core.workflow.model import BufferedSignal, ErrorInfo, Run, TaskRef, TaskRow, Timer
from foliot.observe.diagnosis import (
    POLL_QUIET_MS,
    Observation,
    QueueSeen,
    StoredTimer,
    diagnose,
    human,
)

MIN = 60_000
NOW = 1_000 * 24 * 3600 * 1000  # some day in 1972; only differences matter


def run(**kw: Any) -> Run:
    base: dict[str, Any] = {
        "run_id": "run_1",
        "app": "orders",
        "workflow": "wf",
        "version": 1,
        "status": "running",
        "input": None,
        "state": {},
        "generation": 1,
        "created_at": NOW - 60 * MIN,
        "updated_at": NOW - 41 * MIN,
        "trace_id": "t",
        "current_step": "ship",
    }
    base.update(kw)
    return Run(**base)


def task(**kw: Any) -> TaskRef:
    base: dict[str, Any] = {"token": "tt_1", "step": "ship", "attempt": 1, "generation": 1, "queue": None}
    base.update({"deadline": None, **kw})
    return TaskRef(**base)


def row(created_at: int) -> TaskRow:
    return TaskRow("tt_1", "run_1", "orders", 1, "ship", 1, "warehouse", "open", None, None, created_at)


def stored(r: Run) -> tuple[StoredTimer, ...]:
    return tuple(StoredTimer(slot, t.kind, t.key, t.due) for slot, t in r.timers())


def codes(obs: Observation) -> list[str]:
    return [f.code for f in diagnose(obs).facts]


def test_human_durations() -> None:
    assert human(-5) == "0 ms"
    assert human(850) == "850 ms"
    assert human(12_000) == "12 s"
    assert human(41 * MIN) == "41 min"
    assert human(185 * MIN) == "3 h 5 min"
    assert human(120 * MIN) == "2 h"
    assert human(14 * 24 * 60 * MIN) == "14 d"
    assert human((14 * 24 + 2) * 60 * MIN) == "14 d 2 h"


def test_queued_on_a_queue_nobody_polls_for_41_minutes() -> None:
    r = run(task=task(queue="warehouse"))
    seen = QueueSeen("warehouse", 1, 0, NOW - 41 * MIN, NOW - 5 * 60 * MIN, (("w-1", NOW - 41 * MIN),))
    d = diagnose(Observation(r, NOW, task_row=row(NOW - 41 * MIN), queue=seen))
    assert d.summary == "queued on `warehouse` for 41 min; no poller has asked for `warehouse` in 41 min"
    assert d.attention
    facts = {f.code: f.text for f in d.facts}
    assert facts["pollers_seen"] == "pollers seen on `warehouse`: `w-1` 41 min ago"
    assert facts["queue_backlog"] == "1 task(s) wait on `warehouse`"


def test_queued_on_a_queue_never_polled_since_start() -> None:
    r = run(task=task(queue="warehouse"))
    seen = QueueSeen("warehouse", 3, 0, None, NOW - 2 * 60 * MIN)
    d = diagnose(Observation(r, NOW, task_row=row(NOW - 7 * MIN), queue=seen))
    assert d.summary == (
        "queued on `warehouse` for 7 min; "
        "no poller has asked for `warehouse` since this server started 2 h ago"
    )
    assert d.attention


def test_queued_with_pollers_waiting_or_recently_seen_is_fine() -> None:
    r = run(task=task(queue="q"))
    waiting = QueueSeen("q", 1, 2, NOW - 5 * MIN, NOW - 60 * MIN)
    d = diagnose(Observation(r, NOW, task_row=row(NOW - 1000), queue=waiting))
    assert d.summary.endswith("2 poller(s) are waiting on `q` right now") and not d.attention
    recent = QueueSeen("q", 40, 0, NOW - 3000, NOW - 60 * MIN)
    d = diagnose(Observation(r, NOW, task_row=row(NOW - 2 * MIN), queue=recent))
    assert d.summary == "queued on `q` for 2 min; a poller asked 3 s ago (40 task(s) in the backlog)"
    assert not d.attention
    quiet_edge = QueueSeen("q", 1, 0, NOW - POLL_QUIET_MS, NOW - 60 * MIN)
    assert not diagnose(Observation(r, NOW, task_row=row(NOW), queue=quiet_edge)).attention
    past_edge = QueueSeen("q", 1, 0, NOW - POLL_QUIET_MS - 1, NOW - 60 * MIN)
    assert diagnose(Observation(r, NOW, task_row=row(NOW), queue=past_edge)).attention


def test_claimed_task_before_and_after_its_deadline() -> None:
    r = run(task=task(queue="q", claimed_by="w-7", deadline=NOW + 30_000))
    d = diagnose(Observation(r, NOW))
    assert (
        d.summary == "attempt 1 of `ship` is claimed by worker `w-7`; it must complete or heartbeat in 30 s"
    )
    assert not d.attention
    late = run(task=task(queue="q", claimed_by="", deadline=NOW - 9000))
    d = diagnose(Observation(late, NOW))
    assert d.summary == (
        "attempt 1 of `ship` is claimed by a worker; its deadline passed 9 s ago and the timeout is due"
    )
    assert d.attention


def test_push_states() -> None:
    r = run(task=task(attempt=2))
    failure = {"class": "http_503", "message": "busy", "retryable": True}
    sending = diagnose(Observation(r, NOW, task_row=row(NOW - 4000), push="sending", last_failure=failure))
    assert sending.summary == "pushing attempt 2 of `ship` to the handler for 4 s"
    assert {f.code: f.text for f in sending.facts}["previous_failure"] == (
        "the previous attempt failed: http_503: busy"
    )
    queued = diagnose(Observation(r, NOW, task_row=row(NOW - 2 * MIN), push="queued", push_backlog=900))
    assert (
        queued.summary == "attempt 2 of `ship` waits 2 min for a sender (900 push(es) of app `orders` queued)"
    )
    assert queued.attention
    lost = diagnose(Observation(r, NOW, task_row=row(NOW - 3 * MIN)))
    assert lost.summary.startswith("attempt 2 of `ship` was recorded 3 min ago but is neither queued")
    assert lost.attention
    applying = diagnose(Observation(r, NOW, live=True, mailbox=1))
    assert applying.summary == "attempt 2 of `ship`: its answer is being applied"


def test_accepted_202_waits_for_an_out_of_band_answer() -> None:
    r = run(
        task=task(accepted=True, deadline=NOW + 10 * MIN), timer=Timer("task_deadline", NOW + 10 * MIN, "k")
    )
    d = diagnose(Observation(r, NOW, task_row=row(NOW - MIN), timers=stored(r)))
    assert d.summary == (
        "the handler accepted attempt 1 of `ship` (202) 1 min ago; "
        "waiting for it to complete out of band in 10 min at the latest"
    )
    assert "timer_stored" in codes(Observation(r, NOW, timers=stored(r)))


def test_retry_backoff() -> None:
    r = run(attempt=2, timer=Timer("retry", NOW + 8000, "k#3"))
    failure = {"class": "connection_error", "message": "refused"}
    d = diagnose(Observation(r, NOW, timers=stored(r), last_failure=failure))
    assert d.summary == "attempt 2 of `ship` failed (connection_error: refused); attempt 3 in 8 s"
    assert not d.attention
    bare = diagnose(Observation(r, NOW, timers=stored(r)))
    assert bare.summary == "attempt 2 of `ship` failed (an error); attempt 3 in 8 s"


def test_waiting_for_a_signal_with_and_without_timeout() -> None:
    r = run(status="waiting", current_step="pay", wait_signal="paid", wake_at=NOW + 2 * 24 * 60 * MIN)
    r = attrs.evolve(r, timer=Timer("wait_timeout", r.wake_at, "k#1"))
    d = diagnose(Observation(r, NOW, timers=stored(r)))
    assert d.summary == "waiting at `pay` for signal `paid` for 41 min; it times out in 2 d"
    assert not d.attention
    forever = run(status="waiting", current_step="pay", wait_signal="paid")
    d = diagnose(Observation(forever, NOW))
    assert d.summary.endswith("no timeout: only that signal (or an operator) moves it")


def test_buffered_signals_are_listed() -> None:
    buffer = (BufferedSignal("a", None, None), BufferedSignal("a", 1, "s2"), BufferedSignal("b", None, None))
    r = run(status="waiting", current_step="pay", wait_signal="paid", buffer=buffer)
    facts = {f.code: f.text for f in diagnose(Observation(r, NOW)).facts}
    assert facts["signals_buffered"] == "3 buffered signal(s): `a` x2, `b`"


def test_a_buffered_signal_nobody_waits_for_is_flagged() -> None:
    """Issue 26, point 10: `payment-confrimed` buffered (sent with allowUnknown) while the
    workflow waits only for `payment-confirmed`."""
    buffer = (BufferedSignal("payment-confrimed", None, None), BufferedSignal("paid", None, None))
    r = run(status="waiting", current_step="pay", wait_signal="payment-confirmed", buffer=buffer)
    known = frozenset({"payment-confirmed", "paid"})
    d = diagnose(Observation(r, NOW, awaitable_signals=known))
    facts = {f.code: f.text for f in d.facts}
    assert facts["signal_unawaited"] == (
        "no step waits for buffered signal(s) `payment-confrimed` (did you mean `payment-confirmed`?): "
        "they will never be consumed (the workflow waits for `paid`, `payment-confirmed`)"
    )
    assert d.attention is True
    # Every buffered name awaited, or the names not read: no such fact.
    fine = diagnose(Observation(attrs.evolve(r, buffer=buffer[1:]), NOW, awaitable_signals=known))
    assert "signal_unawaited" not in codes(Observation(r, NOW)) and fine.attention is False
    assert "signal_unawaited" not in [f.code for f in fine.facts]


def test_passivated_sleep_of_14_days_reads_its_timer_from_storage() -> None:
    due = NOW + 14 * 24 * 60 * MIN
    r = run(status="sleeping", current_step="nap", wake_at=due, timer=Timer("sleep", due, "1:nap#1"))
    d = diagnose(Observation(r, NOW, timers=stored(r)))
    assert d.summary == "sleeping at `nap` until 1972-10-11T00:00:00.000Z (in 14 d)"
    facts = {f.code: f.text for f in d.facts}
    assert facts["timer_stored"] == "sleep timer in storage, due in 14 d"
    assert facts["actor_passivated"].startswith("passivated")
    assert not d.attention


def test_a_missing_or_late_timer_needs_attention() -> None:
    due = NOW + MIN
    r = run(status="sleeping", current_step="nap", wake_at=due, timer=Timer("sleep", due, "1:nap#1"))
    missing = diagnose(Observation(r, NOW))
    assert missing.attention and "timer_missing" in [f.code for f in missing.facts]
    other_arming = (StoredTimer("step", "sleep", "1:nap#0", due),)
    assert "timer_missing" in codes(Observation(r, NOW, timers=other_arming))
    late = diagnose(Observation(r, due + 6000, timers=stored(r)))
    assert late.attention
    assert [f.text for f in late.facts if f.code == "timer_late"] == [
        "the sleep timer was due 6 s ago and has not fired: the timer wheel is behind (see /admin/timers lag)"
    ]
    on_time = diagnose(Observation(r, due + 4000, timers=stored(r)))
    assert not on_time.attention


def test_run_deadline_and_live_actor_facts() -> None:
    r = run(status="waiting", current_step="pay", wait_signal="paid", deadline=NOW + 3 * 60 * MIN)
    d = diagnose(Observation(r, NOW, timers=stored(r), live=True, mailbox=2))
    facts = {f.code: f.text for f in d.facts}
    assert facts["run_deadline"].startswith("the run times out in 3 h (")
    assert facts["actor_live"] == "in memory (a live actor); 2 message(s) waiting in its mailbox"
    assert facts["timer_stored"] == "run timeout timer in storage, due in 3 h"


@pytest.mark.parametrize(
    ("status", "error", "expected", "attention"),
    [
        ("completed", None, "completed 5 min ago; nothing to do", False),
        ("cancelled", None, "cancelled 5 min ago; a cancelled run never moves again", False),
        (
            "failed",
            ErrorInfo("charge", "card_declined", "no funds"),
            "failed at `charge` 5 min ago (card_declined: no funds); redrive or rewind it to continue",
            True,
        ),
        (
            "failed",
            ErrorInfo("charge", "card_declined", "no funds", compensated_by="refund"),
            "failed at `charge` 5 min ago (card_declined: no funds); the onFailure path (`refund`) of "
            "`charge`'s failure ran and reached $fail, so a redrive is refused (it would run the "
            "compensation again): rewind to `charge` to retry it",
            True,
        ),
        (
            "failed",
            ErrorInfo("refund", "refunded", "", cause=ErrorInfo("charge", "declined", "", "refund")),
            "failed at `refund` 5 min ago (refunded); the onFailure path (`refund`) of `charge`'s "
            "failure ran and reached $fail, so a redrive is refused (it would run the compensation "
            "again): rewind to `charge` to retry it",
            True,
        ),
        (
            "timed_out",
            ErrorInfo("ship", "run_timeout", ""),
            "timed out at `ship` 5 min ago (its runTimeout passed); "
            "redrive it for a fresh deadline, or rewind it",
            True,
        ),
    ],
)
def test_closed_runs(status: str, error: ErrorInfo | None, expected: str, attention: bool) -> None:
    r = run(status=status, error=error, closed_at=NOW - 5 * MIN, deadline=NOW + MIN)
    d = diagnose(Observation(r, NOW))
    assert d.summary == expected and d.attention is attention
    assert [f.code for f in d.facts] == []  # a closed run has no timers, deadline or actor facts


def test_stuck_run_waits_for_an_operator() -> None:
    r = run(status="stuck", error=ErrorInfo("route", "no_choice_matched", "no choice matched"))
    d = diagnose(Observation(r, NOW))
    assert d.summary == (
        "stuck at `ship` for 41 min (no_choice_matched: no choice matched); "
        "it waits for an operator: redrive, rewind, skip or cancel"
    )
    assert d.attention
    j = d.to_json(r)
    assert j["runId"] == "run_1" and j["status"] == "stuck" and j["attention"] is True
    assert all(set(f) == {"code", "text"} for f in j["facts"])


def test_running_without_task_or_timer() -> None:
    assert diagnose(Observation(run(), NOW)).summary == "running `ship`"
    assert diagnose(Observation(run(), NOW, live=True, mailbox=3)).summary == (
        "running `ship`: 3 message(s) are being applied"
    )
    assert (
        diagnose(Observation(run(status="sleeping"), NOW)).summary
        == "sleeping at `ship` with no wake-up time"
    )


def test_a_paused_run_waits_for_its_unpause() -> None:
    r = run(status="paused", paused_from="waiting", current_step="pay")
    d = diagnose(Observation(r, NOW))
    assert d.summary == (
        "paused at `pay` for 41 min (it was waiting); an operator paused it: unpause it to continue"
    )
    assert d.attention


# ---------------------------------------------------------------------- attention (lists)


def _queue(**kw: Any) -> QueueSeen:
    base: dict[str, Any] = {
        "name": "jobs",
        "backlog": 1,
        "waiting_pollers": 0,
        "last_poll_at": NOW - 5 * MIN,
        "tracked_since": NOW - 60 * MIN,
    }
    base.update(kw)
    return QueueSeen(**base)


def _task(**kw: Any) -> TaskRef:
    base: dict[str, Any] = {
        "token": "tok",
        "step": "ship",
        "attempt": 1,
        "generation": 1,
        "queue": None,
        "deadline": NOW + MIN,
    }
    base.update(kw)
    return TaskRef(**base)


@pytest.mark.parametrize(
    ("doc", "queue", "awaited", "reasons"),
    [
        # healthy-looking and healthy
        (run(task=_task(), attempt=1, step_since=NOW - MIN), None, None, ()),
        (run(status="waiting", wait_signal="go", step_since=NOW - 600 * MIN), None, None, ()),
        # attempt 6 of a retried step, and a retry waiting for its backoff
        (run(task=_task(attempt=6), attempt=6, step_since=NOW - MIN), None, None, ("retrying",)),
        (
            run(attempt=2, timer=Timer("retry", NOW + MIN, "k#1"), step_since=NOW - MIN),
            None,
            None,
            ("retrying",),
        ),
        # queued with nobody polling for minutes; a poller waiting now is fine
        (
            run(task=_task(queue="jobs", deadline=None), attempt=1, step_since=NOW - 3 * MIN),
            _queue(),
            None,
            ("no_poller",),
        ),
        (
            run(task=_task(queue="jobs", deadline=None), attempt=1, step_since=NOW - 3 * MIN),
            _queue(waiting_pollers=1),
            None,
            (),
        ),
        (
            run(task=_task(queue="jobs", deadline=None), attempt=1, step_since=NOW - 3 * MIN),
            _queue(last_poll_at=None, tracked_since=NOW - 10 * MIN),
            None,
            ("no_poller",),
        ),
        # running at one step over an hour; a wake-up long past
        (run(task=_task(), attempt=1, step_since=NOW - 61 * MIN), None, None, ("overdue",)),
        (run(status="sleeping", wake_at=NOW - MIN, step_since=NOW - 2 * MIN), None, None, ("overdue",)),
        # a buffered signal no step of the version waits for (a typo'd name)
        (
            run(
                status="waiting",
                wait_signal="payment-confirmed",
                buffer=(BufferedSignal("payment-confrimed", 1, None),),
            ),
            None,
            frozenset({"payment-confirmed"}),
            ("unconsumed_signal",),
        ),
        (
            run(status="waiting", wait_signal="a", buffer=(BufferedSignal("b", 1, None),)),
            None,
            frozenset({"a", "b"}),
            (),
        ),
        # statuses that say so themselves
        (run(status="stuck", error=ErrorInfo("ship", "x", "y")), None, None, ()),
        (run(status="paused", task=_task(attempt=4), attempt=4), None, None, ()),
        (run(status="failed", closed_at=NOW), None, None, ()),
    ],
)
def test_attention_reasons(
    doc: Run, queue: QueueSeen | None, awaited: frozenset[str] | None, reasons: tuple[str, ...]
) -> None:
    from foliot.observe.diagnosis import attention

    assert attention(doc, NOW, queue, awaited) == reasons


def test_a_pending_debounced_run_waits_for_its_window_and_says_until_when() -> None:
    due = NOW + 8_000
    r = run(
        status="sleeping",
        current_step=None,
        wake_at=due,
        debounce_key="wf/order-7",
        timer=Timer("debounce", due, "wf/order-7"),
    )
    d = diagnose(Observation(r, NOW, timers=stored(r)))
    assert d.summary.startswith("pending: a debounced start waiting for its debounce window (key `order-7`)")
    assert "1972-09-27T00:00:08.000Z (in 8 s)" in d.summary and "its step" not in d.summary
    assert not d.attention


def test_a_push_step_with_a_timeout_over_the_sync_cap_is_named() -> None:
    r = run(task=task(deadline=NOW + 50 * MIN))
    obs = Observation(r, NOW, push="sending", over_sync_cap=(3_600_000, 30_000))
    (fact,) = [f for f in diagnose(obs).facts if f.code == "timeout_over_sync_cap"]
    assert "1 h" in fact.text and "FOLIOT_SYNC_TASK_MAX_MS (30 s)" in fact.text and "`ship`" in fact.text
    accepted = Observation(
        run(task=task(deadline=NOW + 50 * MIN, accepted=True)), NOW, over_sync_cap=(3_600_000, 30_000)
    )
    assert "timeout_over_sync_cap" not in codes(accepted)
    assert "timeout_over_sync_cap" not in codes(Observation(r, NOW, push="sending"))


def test_a_map_paced_by_its_apps_lane_says_so() -> None:
    from foliot.core.workflow.model import ChildSlot, FanOut

    fan = FanOut(
        "ship", "map", 1, 1, 10, 3, open=(ChildSlot(0, "c0"), ChildSlot(1, "c1"), ChildSlot(2, "c2"))
    )
    r = run(status="waiting", fan=fan, timer=Timer("top_up", NOW + 2_000, "1:ship:1#4"), wake_at=NOW + 2_000)
    d = diagnose(Observation(r, NOW, timers=stored(r)))
    assert "7 not started yet" in d.summary and "FOLIOT_APP_CHILD_RATE" in d.summary
    assert d.summary.endswith("the next start in 2 s")
