"""A failure's compensation (`onFailure`) in the pure machine: a run whose compensation reached
`$fail` keeps the failure it compensated as its error, a redrive of it is refused (it would run
the compensation again, never the failed step), and a step's `failError` names the run's error."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.workflow import machine
from foliot.core.workflow.definition import parse_definition
from foliot.core.workflow.jsonconv import ValidationError

from .machine_kit import Kit

ONCE = {"maxAttempts": 1}
SAGA = [
    {"name": "charge", "type": "task", "retry": ONCE, "onFailure": "refund"},
    {"name": "ship", "type": "task", "next": "$end"},
    {"name": "refund", "type": "task", "retry": ONCE, "next": "$fail"},
]


def _compensated(steps: list[dict[str, Any]] | None = None) -> Kit:
    """A run whose `charge` failed (card_declined) and whose `refund` completed."""
    k = Kit(steps or SAGA)
    k.start()
    k.fail("card_declined", retryable=False, message="no funds")
    assert k.run.current_step == "refund"
    k.ok({"refunded": True})
    assert k.run.status == "failed"
    return k


def test_the_run_fails_with_the_failure_its_compensation_handled() -> None:
    k = _compensated()
    assert k.run.error is not None and k.run.error.to_json() == {
        "step": "charge",
        "class": "card_declined",
        "message": "no funds",
        "compensatedBy": "refund",
    }
    failed = [e for tr in k.history for e in tr.events if e.type == "run_failed"]
    assert [(e.step, e.data) for e in failed] == [
        ("refund", {"class": "card_declined", "message": "no funds", "compensatedBy": "refund"})
    ]


def test_a_redrive_after_compensation_is_refused_and_changes_nothing() -> None:
    k = _compensated()
    before = k.run
    tr = k.send(machine.Redrive("try again"))
    assert not tr.changed and k.run == before
    assert isinstance(tr.reply, machine.Rejected)
    assert (tr.reply.status, tr.reply.code) == (409, "compensated")
    assert "'charge'" in tr.reply.message and "rewind" in tr.reply.message
    assert "'refund'" in tr.reply.message
    assert k.events().count("task_dispatched") == 2  # charge and refund, once each


def test_rewind_to_the_failed_step_retries_it() -> None:
    k = _compensated()
    tr = k.send(machine.Rewind("charge", reason="card updated"))
    assert isinstance(tr.reply, machine.Ok)
    assert k.run.status == "running" and k.run.current_step == "charge" and k.run.generation == 2
    assert k.run.error is None and k.run.compensating is None
    k.ok({"charged": 5})
    k.ok()
    assert k.run.status == "completed" and k.run.error is None


def test_a_compensation_that_itself_failed_can_be_redriven_and_keeps_the_root_cause() -> None:
    k = Kit(SAGA)
    k.start()
    k.fail("card_declined", retryable=False, message="no funds")
    k.fail("refund_api_down", message="503")
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.to_json() == {"step": "refund", "class": "refund_api_down", "message": "503"}
    tr = k.send(machine.Redrive("refund API back"))
    assert isinstance(tr.reply, machine.Ok) and k.run.current_step == "refund"
    assert k.run.task is not None and k.run.task.step == "refund"
    k.ok({"refunded": True})
    assert k.run.error is not None and (k.run.error.step, k.run.error.cls) == ("charge", "card_declined")
    assert k.run.error.compensated_by == "refund"
    assert isinstance(k.send(machine.Redrive()).reply, machine.Rejected)


def test_a_redrive_of_a_plain_fail_is_still_allowed() -> None:
    k = Kit([{"name": "t", "type": "task", "next": "$fail"}])
    k.start()
    k.ok(1)
    assert k.run.error is not None and k.run.error.cls == "failed_by_definition"
    assert isinstance(k.send(machine.Redrive()).reply, machine.Ok)


def test_on_failure_fail_keeps_the_step_s_own_failure_and_may_be_redriven() -> None:
    k = Kit([{"name": "t", "type": "task", "retry": ONCE, "onFailure": "$fail"}])
    k.start()
    k.fail("card_declined", message="no funds")
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.to_json() == {"step": "t", "class": "card_declined", "message": "no funds"}
    tr = k.send(machine.Redrive())
    assert isinstance(tr.reply, machine.Ok) and k.run.task is not None and k.run.task.step == "t"


def test_a_compensation_that_recovers_completes_and_forgets_the_failure() -> None:
    steps = [
        {"name": "charge", "type": "task", "retry": ONCE, "onFailure": "invoice"},
        {"name": "invoice", "type": "task", "next": "$end"},
    ]
    k = Kit(steps)
    k.start()
    k.fail("card_declined")
    assert k.run.compensating is not None and k.run.compensating.compensated_by == "invoice"
    k.ok()
    assert k.run.status == "completed" and k.run.error is None and k.run.compensating is None


def test_reentering_the_failed_step_ends_its_compensation() -> None:
    """A retry loop through `onFailure`: once the failed step runs again, a later `$fail` is
    the definition's, not the old failure's (and may be redriven)."""
    steps = [
        {"name": "charge", "type": "task", "retry": ONCE, "onFailure": "nap", "next": "$fail"},
        {"name": "nap", "type": "sleep", "duration": "1m", "next": "charge"},
    ]
    k = Kit(steps)
    k.start()
    k.fail("card_declined")
    assert k.run.current_step == "nap"
    k.fire()
    assert k.run.current_step == "charge" and k.run.compensating is None
    k.ok()
    assert k.run.error is not None and k.run.error.cls == "failed_by_definition"
    assert isinstance(k.send(machine.Redrive()).reply, machine.Ok)


def test_fail_error_names_the_run_s_error_and_keeps_the_cause() -> None:
    steps = [*SAGA[:2], {**SAGA[2], "failError": {"class": "payment_refunded", "message": "charge undone"}}]
    k = _compensated(steps)
    assert k.run.error is not None and k.run.error.to_json() == {
        "step": "refund",
        "class": "payment_refunded",
        "message": "charge undone",
        "cause": {
            "step": "charge",
            "class": "card_declined",
            "message": "no funds",
            "compensatedBy": "refund",
        },
    }
    tr = k.send(machine.Redrive())
    assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "compensated"
    assert "'charge'" in tr.reply.message


def test_fail_error_without_a_compensation() -> None:
    steps = [
        {
            "name": "check",
            "type": "choice",
            "choices": [{"when": {"path": "input.ok", "op": "eq", "value": True}, "next": "$end"}],
            "default": "$fail",
            "failError": {"class": "order_rejected"},
        }
    ]
    k = Kit(steps)
    k.start({"ok": False})
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.to_json() == {"step": "check", "class": "order_rejected", "message": ""}


def test_fail_error_on_on_failure_fail_keeps_the_step_s_failure_as_cause() -> None:
    k = Kit([{"name": "t", "type": "task", "retry": ONCE, "onFailure": "$fail", "failError": {"class": "x"}}])
    k.start()
    k.fail("boom", message="m")
    assert k.run.error is not None and k.run.error.to_json() == {
        "step": "t",
        "class": "x",
        "message": "",
        "cause": {"step": "t", "class": "boom", "message": "m"},
    }
    assert isinstance(k.send(machine.Redrive()).reply, machine.Ok)


@pytest.mark.parametrize(
    ("fail_error", "field"),
    [
        ("oops", "steps[0].failError"),
        ({}, "steps[0].failError.class"),
        ({"class": ""}, "steps[0].failError.class"),
        ({"class": 7}, "steps[0].failError.class"),
        ({"class": "x" * 129}, "steps[0].failError.class"),
        ({"class": "x", "message": 5}, "steps[0].failError.message"),
        ({"class": "x", "message": "m" * 2049}, "steps[0].failError.message"),
        ({"class": "x", "cause": "y"}, "steps[0].failError.cause"),
        ({"class": "x", "error": "y"}, "steps[0].failError.error"),
    ],
)
def test_a_bad_fail_error_is_refused_naming_the_field(fail_error: Any, field: str) -> None:
    doc = {"name": "wf", "steps": [{"name": "t", "type": "task", "next": "$fail", "failError": fail_error}]}
    with pytest.raises(ValidationError) as info:
        parse_definition(doc)
    assert info.value.field == field


def test_fail_error_on_a_step_that_never_goes_to_fail_is_refused() -> None:
    doc = {
        "name": "wf",
        "steps": [{"name": "s", "type": "sleep", "duration": "1s", "failError": {"class": "x"}}],
    }
    with pytest.raises(ValidationError) as info:
        parse_definition(doc)
    assert info.value.field == "steps[0].failError" and "$fail" in info.value.message
    # A task may: its handler can name $fail as its next step.
    parse_definition({"name": "wf", "steps": [{"name": "t", "type": "task", "failError": {"class": "x"}}]})
    doc["steps"][0]["next"] = "$fail"
    assert parse_definition(doc).step("s").fail_error is not None
