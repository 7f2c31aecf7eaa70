"""Pause and unpause in the pure machine: every status, and what a pause holds back."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.workflow import machine
from foliot.core.workflow.machine import Completed, Failed, Pause, Unpause

from .machine_kit import Kit

TASK = {"name": "t", "type": "task"}
QUEUED = {"name": "t", "type": "task", "queue": "warehouse", "timeout": "1m"}
NAP = {"name": "nap", "type": "sleep", "duration": "1h"}
WAIT = {"name": "w", "type": "wait", "signal": "go", "timeout": "1h", "onTimeout": "late"}
LATE = {"name": "late", "type": "task", "next": "$end"}
AFTER = {"name": "after", "type": "task"}


def _kit_in(status: str) -> Kit:
    """A run in `status` (open ones parked at a step, closed ones closed)."""
    if status == "running":
        k = Kit([TASK])
        k.start()
    elif status == "waiting":
        k = Kit([WAIT, AFTER, LATE])
        k.start()
    elif status == "sleeping":
        k = Kit([NAP, AFTER])
        k.start()
    elif status == "stuck":
        k = Kit([TASK, {"name": "s", "type": "task", "next": "$stuck"}])
        k.start()
        k.ok()
        k.ok()
    elif status == "paused":
        k = _kit_in("running")
        k.send(Pause())
    elif status == "completed":
        k = Kit([TASK])
        k.start()
        k.ok()
    elif status == "failed":
        k = Kit([{**TASK, "retry": {"maxAttempts": 1}}])
        k.start()
        k.fail()
    elif status == "cancelled":
        k = _kit_in("running")
        k.send(machine.Cancel())
    else:
        assert status == "timed_out"
        k = Kit([WAIT, AFTER, LATE])
        k.start(run_timeout_ms=60_000)
        k.fire_run_timeout()
    assert k.run.status == status
    return k


@pytest.mark.parametrize(
    ("status", "allowed"),
    [
        ("running", True),
        ("waiting", True),
        ("sleeping", True),
        ("stuck", True),
        ("paused", False),
        ("completed", False),
        ("failed", False),
        ("cancelled", False),
        ("timed_out", False),
    ],
)
def test_pause_in_every_status(status: str, allowed: bool) -> None:
    k = _kit_in(status)
    before = k.run
    tr = k.send(Pause("downstream broken"))
    if not allowed:
        assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "invalid_status"
        assert not tr.changed and k.run == before
        return
    assert isinstance(tr.reply, machine.Ok) and tr.reply.value == k.run
    assert k.run.status == "paused" and k.run.paused_from == status
    assert [e.type for e in tr.events] == ["run_paused"]
    assert tr.events[0].data == {"reason": "downstream broken", "fromStatus": status}
    # The step timer stays in the document but leaves the durable timers; the run timeout stays.
    assert k.run.timer == before.timer
    assert [slot for slot, _ in k.run.timers()] == [slot for slot, _ in before.timers() if slot == "run"]
    # Unpause returns it to where it was, with nothing else changed.
    tr = k.send(Unpause())
    assert k.run.status == status and k.run.paused_from is None
    assert [e.type for e in tr.events] == ["run_unpaused"]
    assert k.run.timers() == before.timers() and k.run.task == before.task


@pytest.mark.parametrize(
    "status", ["running", "waiting", "sleeping", "stuck", "completed", "failed", "cancelled", "timed_out"]
)
def test_unpause_of_a_run_that_is_not_paused(status: str) -> None:
    k = _kit_in(status)
    tr = k.send(Unpause())
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "invalid_status"
    assert not tr.changed


def test_an_answer_while_paused_is_recorded_and_applied_at_unpause() -> None:
    k = Kit([TASK, AFTER])
    k.start()
    k.send(Pause())
    tr = k.ok({"n": 1})
    assert k.run.status == "paused" and k.run.state == {"t": {"n": 1}} and k.run.task is None
    assert [e.type for e in tr.events] == ["task_completed"]
    assert [t.close_reason for t in tr.tasks] == ["answered"] and tr.effects == ()
    again = k.send(machine.TaskAnswer("tok1", Completed({"n": 2})))
    assert isinstance(again.reply, machine.Rejected) and again.reply.code == "task_closed"
    k.now += 5_000
    tr = k.send(Unpause())
    assert [e.type for e in tr.events] == [
        "run_unpaused",
        "step_completed",
        "step_started",
        "task_dispatched",
    ]
    assert k.run.status == "running" and k.run.current_step == "after"
    assert isinstance(tr.effects[0], machine.Dispatch)


def test_a_foliot_next_answer_while_paused_goes_there_at_unpause() -> None:
    k = Kit([TASK, AFTER, LATE])
    k.start()
    k.send(Pause())
    k.ok(None, next="late")
    k.send(Unpause())
    assert k.run.current_step == "late"


def test_a_failure_while_paused_is_retried_after_unpause() -> None:
    k = Kit([TASK])
    k.start()
    k.send(Pause())
    tr = k.fail("http_503")
    assert [e.type for e in tr.events] == ["task_failed"] and k.run.timer is None
    assert k.run.status == "paused"
    k.now += 3_600_000
    tr = k.send(Unpause())
    assert [e.type for e in tr.events] == ["run_unpaused", "retry_scheduled"]
    # The backoff counts from the unpause, not from the failure.
    assert k.run.timer is not None and k.run.timer.due == k.now + 1_000


def test_a_final_failure_while_paused_fails_the_run_at_unpause() -> None:
    k = Kit([{**TASK, "retry": {"maxAttempts": 1}}])
    k.start()
    k.send(Pause())
    k.fail()
    assert k.run.status == "paused"
    k.send(Unpause())
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "boom"


def test_oversize_output_through_complete_while_paused_answers_400_and_fails_at_unpause() -> None:
    k = Kit([TASK], payload_max=10)
    k.start()
    k.send(Pause())
    tr = k.answer(Completed("x" * 50), via_api=True)
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "output_too_large"
    assert k.run.status == "paused"
    k.send(Unpause())
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.cls == "output_too_large"


def test_a_sleep_that_comes_due_while_paused_ends_at_unpause() -> None:
    k = Kit([NAP, AFTER])
    k.start()
    timer = k.run.timer
    assert timer is not None
    k.send(Pause())
    k.now = timer.due + 10_000
    tr = k.send(machine.TimerFired("step", timer.kind, timer.key))  # a firing already in flight
    assert not tr.changed and k.run.status == "paused" and k.run.timer == timer
    tr = k.send(Unpause())
    assert [e.type for e in tr.events][:3] == ["run_unpaused", "sleep_finished", "step_completed"]
    assert k.run.current_step == "after" and k.run.status == "running"


def test_a_sleep_not_yet_due_at_unpause_keeps_its_timer() -> None:
    k = Kit([NAP, AFTER])
    k.start()
    timer = k.run.timer
    k.send(Pause())
    k.now += 60_000
    k.send(Unpause())
    assert k.run.status == "sleeping" and k.run.timer == timer
    assert k.run.timers() == [("step", timer)]


def test_signals_while_paused_are_buffered_and_consumed_at_unpause() -> None:
    k = Kit([WAIT, AFTER, LATE])
    k.start()
    k.send(Pause())
    tr = k.send(machine.SignalIn("go", {"paid": True}, "s1"))
    assert tr.reply == machine.Ok("buffered") and k.run.status == "paused"
    assert [b.name for b in k.run.buffer] == ["go"]
    tr = k.send(Unpause())
    assert k.run.state["w"] == {"paid": True} and k.run.current_step == "after"
    assert "signal_consumed" in [e.type for e in tr.events] and k.run.buffer == ()


@pytest.mark.parametrize(("signal_after_ms", "winner"), [(30 * 60_000, "after"), (90 * 60_000, "late")])
def test_signal_and_wait_timeout_during_a_pause_apply_in_due_order(signal_after_ms: int, winner: str) -> None:
    k = Kit([WAIT, AFTER, LATE])
    k.start()
    k.send(Pause())
    k.send(machine.SignalIn("go", "x"), after_ms=signal_after_ms)
    k.now += 2 * 3_600_000  # the one-hour wait timeout is long overdue
    k.send(Unpause())
    assert k.run.current_step == winner
    if winner == "late":  # the signal stays buffered, never dropped
        assert [b.name for b in k.run.buffer] == ["go"]


def test_the_run_timeout_keeps_running_while_paused() -> None:
    k = Kit([WAIT, AFTER, LATE])
    k.start(run_timeout_ms=60_000)
    k.send(Pause())
    assert [slot for slot, _ in k.run.timers()] == ["run"]
    k.fire_run_timeout()
    assert k.run.status == "timed_out" and k.run.paused_from is None
    assert k.run.error is not None and k.run.error.cls == "run_timeout"


def test_a_queued_task_leaves_its_queue_while_paused_and_returns_at_unpause() -> None:
    k = Kit([QUEUED])
    k.start()
    token = k.token
    tr = k.send(Pause())
    assert tr.effects == (machine.Withdraw(token),)
    tr = k.send(machine.Claim(token, "w1"))
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "run_paused" and not tr.changed
    tr = k.send(Unpause())
    assert len(tr.effects) == 1 and isinstance(tr.effects[0], machine.Dispatch)
    assert tr.effects[0].task.token == token
    assert isinstance(k.send(machine.Claim(token, "w1")).reply, machine.Ok)


def test_a_claimed_task_keeps_running_while_paused() -> None:
    k = Kit([QUEUED, AFTER])
    k.start()
    k.send(machine.Claim(k.token, "w1"))
    tr = k.send(Pause())
    assert tr.effects == ()
    hb = k.send(machine.Heartbeat(k.token))
    assert isinstance(hb.reply, machine.Ok)
    k.ok("done")
    k.send(Unpause())
    assert k.run.current_step == "after"


def test_an_answer_after_the_deadline_passed_during_a_pause_is_refused() -> None:
    k = Kit([QUEUED])
    k.start()
    k.send(machine.Claim(k.token, "w1"))
    k.send(Pause())
    k.now += 2 * 60_000  # past the one-minute deadline
    tr = k.ok("late")
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "task_closed"
    tr = k.send(Unpause())
    types = [e.type for e in tr.events]
    assert types[:3] == ["run_unpaused", "task_timed_out", "retry_scheduled"]


def test_a_paused_run_accepts_202_and_arms_a_deadline_that_waits_for_unpause() -> None:
    k = Kit([TASK])
    k.start()
    k.send(Pause())
    k.answer(machine.Accepted(k.now + 30_000))
    assert k.run.task is not None and k.run.task.accepted and k.run.status == "paused"
    assert [slot for slot, _ in k.run.timers()] == []


@pytest.mark.parametrize(
    ("message", "ok"),
    [
        (machine.Cancel("stop"), True),
        (machine.EditState({"k": 1}, (), "fix"), True),
        (machine.Skip(), False),
        (machine.Redrive(), False),
        (machine.Rewind("t"), False),
    ],
)
def test_other_interventions_on_a_paused_run(message: Any, ok: bool) -> None:
    k = _kit_in("paused")
    tr = k.send(message)
    if ok:
        assert isinstance(tr.reply, machine.Ok)
        if isinstance(message, machine.Cancel):
            assert k.run.status == "cancelled" and k.run.paused_from is None
            assert tr.effects == (machine.Abort("tok1"),)
        else:
            assert k.run.status == "paused" and k.run.state == {"k": 1}
    else:
        assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "invalid_status"


def test_mark_stuck_ends_a_pause() -> None:
    k = _kit_in("paused")
    k.send(machine.MarkStuck("internal_error", "crashed"))
    assert k.run.status == "stuck" and k.run.paused_from is None


def test_failed_outcome_keeps_class_and_retryability() -> None:
    k = Kit([{**TASK, "retry": {"maxAttempts": 3, "retryOn": ["busy"]}}])
    k.start()
    k.send(Pause())
    k.answer(Failed("other", "no", True))
    k.send(Unpause())
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "other"


def test_the_diagnosis_of_a_paused_run_says_so() -> None:
    from foliot.observe.diagnosis import Observation, diagnose

    k = _kit_in("paused")
    k.now += 41 * 60_000
    found = diagnose(Observation(k.run, k.now))
    assert found.summary.startswith("paused at `t` for 41 min") and "(it was running)" in found.summary
    assert found.attention
