"""Timer identity in the pure machine: a firing applies only to the arming it was made for."""

from __future__ import annotations

from typing import Any

from foliot.core.workflow import machine
from foliot.core.workflow.machine import Completed, Failed
from foliot.core.workflow.model import Timer, run_from_dict, run_to_dict
from foliot.storage.base import timer_rows

from .machine_kit import T0, Kit

LOOP: list[dict[str, Any]] = [
    {"name": "s", "type": "sleep", "duration": "10s"},
    {
        "name": "c",
        "type": "choice",
        "choices": [{"when": {"path": "state.stop", "op": "exists", "value": True}, "next": "$end"}],
        "default": "s",
    },
]


def _firing(timer: Timer) -> machine.TimerFired:
    return machine.TimerFired("step", timer.kind, timer.key)


def test_a_loop_re_arms_the_same_sleep_with_a_new_key() -> None:
    k = Kit(LOOP)
    k.start()
    first = k.run.timer
    assert first is not None and first.key.endswith("#1")
    k.fire()
    second = k.run.timer
    assert k.run.status == "sleeping" and k.run.current_step == "s"
    assert second is not None and second.key != first.key and second.due == T0 + 20_000
    # The first arming fires again (a retried or duplicated firing): nothing happens.
    tr = k.send(_firing(first), after_ms=18)
    assert not tr.changed and k.run.timer == second
    assert k.events().count("sleep_finished") == 1
    k.fire()
    assert k.events().count("sleep_finished") == 2


def test_a_firing_replayed_after_its_own_commit_is_stale() -> None:
    k = Kit(LOOP)
    k.start()
    timer = k.run.timer
    assert timer is not None
    k.fire()
    for _ in range(3):
        assert not k.send(_firing(timer), after_ms=1).changed


def test_a_heartbeat_re_arms_the_deadline_and_the_old_firing_is_stale() -> None:
    k = Kit([{"name": "t", "type": "task", "timeout": "10s", "retry": {"maxAttempts": 1}}])
    k.start()
    k.answer(machine.Accepted())
    old = k.run.timer
    assert old is not None and old.kind == "task_deadline" and old.due == T0 + 10_000
    k.send(machine.Heartbeat(k.token), after_ms=9_900)
    new = k.run.timer
    assert new is not None and new.key != old.key and new.due == T0 + 19_900
    # The old deadline fired while the heartbeat was being committed: it is stale.
    tr = k.send(_firing(old), after_ms=100)
    assert not tr.changed and k.run.status == "running" and k.run.task is not None
    k.fire()
    assert k.run.status == "failed" and k.events().count("task_timed_out") == 1


def test_a_claim_and_heartbeats_of_a_queued_task_each_get_their_own_arming() -> None:
    k = Kit([{"name": "t", "type": "task", "queue": "q", "timeout": "1m"}])
    k.start()
    k.send(machine.Claim(k.token, "w1"))
    claimed = k.run.timer
    k.send(machine.Heartbeat(k.token))  # same ms, same deadline: still a new arming
    beat = k.run.timer
    assert claimed is not None and beat is not None
    assert claimed.due == beat.due and claimed.key != beat.key
    assert not k.send(_firing(claimed)).changed
    k.ok()
    assert k.run.status == "completed"


def test_retry_backoffs_and_attempt_deadlines_never_share_a_key() -> None:
    k = Kit([{"name": "t", "type": "task", "retry": {"maxAttempts": 4, "initialInterval": "1s"}}])
    k.start()
    keys: list[str] = []
    for _ in range(3):
        assert k.run.timer is None  # a push's deadline is armed from its send, on a 202
        k.answer(machine.Accepted(k.now + 30_000))
        assert k.run.timer is not None
        keys.append(k.run.timer.key)  # the attempt's deadline
        k.answer(Failed("busy", "later", True))
        assert k.run.timer is not None and k.run.timer.kind == "retry"
        keys.append(k.run.timer.key)
        k.fire()
    assert len(set(keys)) == len(keys) == 6
    assert k.run.armings == 6
    k.answer(Completed(None))
    assert k.run.status == "completed"


def test_a_stale_firing_of_an_earlier_generation_is_ignored() -> None:
    k = Kit([{"name": "s", "type": "sleep", "duration": "1m"}, {"name": "t", "type": "task"}])
    k.start()
    old = k.run.timer
    assert old is not None
    k.send(machine.Rewind("s"), after_ms=5)
    assert k.run.timer is not None and k.run.timer.key != old.key
    assert not k.send(_firing(old), after_ms=60_000).changed
    assert k.run.status == "sleeping"


def test_documents_stored_before_the_arming_counter_still_load_and_fire() -> None:
    k = Kit(LOOP)
    k.start()
    legacy = run_to_dict(k.run)
    del legacy["armings"]
    legacy["timer"] = {"kind": "sleep", "due": T0 + 10_000, "key": "1:s"}  # the old key shape
    run = run_from_dict(legacy)
    assert run.armings == 0 and run.timer is not None
    k.run = run
    k.fire()  # the old firing still matches its own arming
    assert k.run.timer is not None and k.run.timer.key == "1:s#1"
    assert not k.send(machine.TimerFired("step", "sleep", "1:s"), after_ms=1).changed


def test_the_stored_timer_row_carries_the_arming() -> None:
    k = Kit(LOOP)
    k.start()
    k.fire()
    rows = timer_rows(k.run)
    assert rows == [("run1", "step", "sleep", "1:s#2", T0 + 20_000)]
