"""`queueTimeout` on queued task steps, in the pure machine."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.workflow import machine
from foliot.core.workflow.definition import parse_definition
from foliot.core.workflow.jsonconv import ValidationError
from foliot.core.workflow.machine import Pause, Unpause

from .machine_kit import T0, Kit

QUEUED = {"name": "t", "type": "task", "queue": "warehouse", "timeout": "1m", "queueTimeout": "10m"}
AFTER = {"name": "after", "type": "task", "next": "$end"}
RESCUE = {"name": "rescue", "type": "task", "next": "$end"}


@pytest.mark.parametrize(
    ("step", "field"),
    [
        ({"name": "t", "type": "task", "queueTimeout": "10m"}, "steps[0].queueTimeout"),
        ({**QUEUED, "queueTimeout": "10 minutes"}, "steps[0].queueTimeout"),
        ({**QUEUED, "queueTimeout": "0s"}, "steps[0].queueTimeout"),
        ({**QUEUED, "queueTimeout": 600}, "steps[0].queueTimeout"),
        ({"name": "w", "type": "wait", "signal": "x", "queueTimeout": "1m"}, "steps[0].queueTimeout"),
    ],
)
def test_validation(step: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_definition({"name": "wf", "steps": [step]})
    assert caught.value.field == field


def test_an_unclaimed_attempt_fails_with_queue_timeout_and_is_retried() -> None:
    k = Kit([{**QUEUED, "retry": {"maxAttempts": 2, "initialInterval": "1s"}}, AFTER])
    k.start()
    first = k.token
    assert k.run.timer is not None and k.run.timer.kind == "queue_timeout"
    assert k.run.timer.due == T0 + 600_000 and k.run.task is not None and k.run.task.deadline is None
    tr = k.fire()
    assert [e.type for e in tr.events] == ["task_timed_out", "retry_scheduled"]
    assert tr.events[0].data == {"class": "queue_timeout"}
    assert machine.Abort(first) in tr.effects  # withdrawn from its queue
    assert [t.close_reason for t in tr.tasks] == ["timed_out"]
    stale = k.send(machine.Claim(first, "w1"))
    assert isinstance(stale.reply, machine.Rejected) and stale.reply.code == "task_closed"
    k.fire()  # the backoff: attempt 2, with a fresh queue timeout
    assert k.run.attempt == 2 and k.run.timer is not None and k.run.timer.kind == "queue_timeout"
    k.fire()
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.cls == "queue_timeout" and k.run.error.step == "t"


def test_a_claim_in_time_replaces_the_queue_timeout_with_the_deadline() -> None:
    k = Kit([QUEUED, AFTER])
    k.start()
    stale = k.run.timer
    assert stale is not None
    k.send(machine.Claim(k.token, "w1"), after_ms=60_000)
    assert k.run.timer is not None and k.run.timer.kind == "task_deadline"
    tr = k.send(machine.TimerFired("step", stale.kind, stale.key))
    assert not tr.changed  # the queue timeout's firing is stale now
    k.ok()
    assert k.run.current_step == "after"


def test_retry_on_without_queue_timeout_fails_for_good_to_on_failure() -> None:
    k = Kit(
        [
            {**QUEUED, "retry": {"maxAttempts": 5, "retryOn": ["http_503"]}, "onFailure": "rescue"},
            AFTER,
            RESCUE,
        ]
    )
    k.start()
    k.fire()
    assert k.run.current_step == "rescue" and k.run.carried_error is not None
    assert k.run.carried_error.cls == "queue_timeout"


def test_retry_on_naming_queue_timeout_retries() -> None:
    k = Kit([{**QUEUED, "retry": {"maxAttempts": 2, "retryOn": ["queue_timeout"]}}])
    k.start()
    k.fire()
    assert k.run.status == "running" and k.run.timer is not None and k.run.timer.kind == "retry"


def test_a_queue_timeout_due_during_a_pause_fails_the_attempt_at_unpause() -> None:
    k = Kit([{**QUEUED, "retry": {"maxAttempts": 1}}])
    k.start()
    k.send(Pause())
    assert k.run.timers() == []
    k.now += 3_600_000
    k.send(Unpause())
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "queue_timeout"


def test_a_queue_timeout_not_due_at_unpause_offers_the_task_again() -> None:
    k = Kit([QUEUED])
    k.start()
    timer = k.run.timer
    k.send(Pause())
    tr = k.send(Unpause(), after_ms=60_000)
    assert isinstance(tr.effects[0], machine.Dispatch) and k.run.timer == timer


def test_a_push_step_has_no_queue_timeout() -> None:
    k = Kit([{"name": "t", "type": "task"}])
    k.start()
    assert k.run.timer is None
