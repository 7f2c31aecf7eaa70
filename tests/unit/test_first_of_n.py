"""A wait for the first of several signals (`signals`, `onSignal`): validation and the machine."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.views import run_view
from foliot.core.workflow import machine
from foliot.core.workflow.definition import parse_definition
from foliot.core.workflow.jsonconv import ValidationError
from foliot.core.workflow.machine import Pause, SignalIn, Unpause

from .machine_kit import Kit

PICK = {
    "name": "pick",
    "type": "wait",
    "signals": ["paid", "cancelled", "expired"],
    "onSignal": {"paid": "ship", "cancelled": "refund"},
}
SHIP = {"name": "ship", "type": "task", "next": "$end"}
REFUND = {"name": "refund", "type": "task", "next": "$end"}
NEXT = {"name": "next", "type": "task", "next": "$end"}
STEPS = [PICK, NEXT, SHIP, REFUND]


def _doc(wait: dict[str, Any]) -> dict[str, Any]:
    return {"name": "wf", "steps": [{"name": "first", "type": "task"}, wait, SHIP, REFUND]}


@pytest.mark.parametrize(
    ("wait", "field", "message"),
    [
        (
            {**PICK, "onSignal": {"paid": "ship", "cancelled": "refnd"}},
            "steps[1].onSignal.cancelled",
            "refnd",
        ),
        ({**PICK, "onSignal": {"refunded": "refund"}}, "steps[1].onSignal.refunded", "not one of"),
        ({**PICK, "signal": "paid"}, "steps[1].signals", "not both"),
        ({"name": "pick", "type": "wait"}, "steps[1].signal", "required"),
        ({**PICK, "signals": ["paid"]}, "steps[1].signals", "2..20"),
        ({**PICK, "signals": [f"s{i}" for i in range(21)], "onSignal": {}}, "steps[1].signals", "2..20"),
        ({**PICK, "signals": ["paid", "paid"], "onSignal": {}}, "steps[1].signals[1]", "duplicate"),
        ({**PICK, "signals": ["paid", "bad name"], "onSignal": {}}, "steps[1].signals[1]", "must match"),
        ({**PICK, "signals": "paid"}, "steps[1].signals", ""),
        ({**PICK, "onSignal": {"paid": 7}}, "steps[1].onSignal.paid", "step name"),
        ({**PICK, "onSignal": ["paid"]}, "steps[1].onSignal", ""),
        (
            {"name": "pick", "type": "wait", "signal": "paid", "onSignal": {"paid": "ship"}},
            "steps[1].onSignal",
            "needs",
        ),
        ({**PICK, "type": "task"}, "steps[1].signals", "not allowed"),
    ],
)
def test_validation_names_the_field(wait: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_definition(_doc(wait))
    assert caught.value.field == field, caught.value
    assert message in str(caught.value)


def test_a_valid_first_of_n_wait_compiles() -> None:
    step = parse_definition(_doc(PICK)).step("pick")
    assert step.awaited == ("paid", "cancelled", "expired")
    assert step.after_signal("paid") == "ship" and step.after_signal("cancelled") == "refund"
    assert step.after_signal("expired") == "ship"  # no entry: `next`, the following step
    parse_definition(_doc({**PICK, "onSignal": {"paid": "$end", "cancelled": "$fail"}}))
    parse_definition(_doc({"name": "pick", "type": "wait", "signals": ["a", "b"]}))


@pytest.mark.parametrize(
    ("signal", "goes_to"), [("paid", "ship"), ("cancelled", "refund"), ("expired", "next")]
)
def test_the_first_signal_wins_and_picks_the_next_step(signal: str, goes_to: str) -> None:
    k = Kit(STEPS)
    k.start()
    assert k.run.status == "waiting" and k.run.wait_signals == ("paid", "cancelled", "expired")
    assert run_view(k.run)["waitSignals"] == ["paid", "cancelled", "expired"]
    assert run_view(k.run)["waitSignal"] is None
    tr = k.send(SignalIn(signal, {"amount": 5}, "id-1"))
    assert tr.reply == machine.Ok("delivered")
    assert k.run.state["pick"] == {"signal": signal, "payload": {"amount": 5}}
    assert k.run.current_step == goes_to and k.run.wait_signals == ()
    # The others, arriving later, are buffered (never dropped).
    other = "cancelled" if signal != "cancelled" else "paid"
    assert k.send(SignalIn(other, None)).reply == machine.Ok("buffered")
    assert [b.name for b in k.run.buffer] == [other]


def test_buffered_signals_decide_in_arrival_order_and_the_others_stay_buffered() -> None:
    k = Kit([{"name": "first", "type": "task"}, *STEPS])
    k.start()
    k.send(SignalIn("unrelated", 1))
    k.send(SignalIn("cancelled", 2))
    k.send(SignalIn("paid", 3))
    k.ok()
    assert k.run.state["pick"] == {"signal": "cancelled", "payload": 2}
    assert k.run.current_step == "refund"
    assert [b.name for b in k.run.buffer] == ["unrelated", "paid"]


def test_a_signal_of_no_listed_name_is_buffered() -> None:
    k = Kit(STEPS)
    k.start()
    assert k.send(SignalIn("shipped", None)).reply == machine.Ok("buffered")
    assert k.run.status == "waiting"


def test_timeout_of_a_first_of_n_wait() -> None:
    k = Kit([{**PICK, "timeout": "1h"}, NEXT, SHIP, REFUND])
    k.start()
    k.fire()
    assert k.run.status == "failed" and k.run.error is not None
    assert k.run.error.cls == "wait_timeout" and "paid" in k.run.error.message


def test_a_single_signal_wait_keeps_its_payload_shape() -> None:
    k = Kit([{"name": "w", "type": "wait", "signal": "go"}, NEXT])
    k.start()
    k.send(SignalIn("go", {"x": 1}))
    assert k.run.state["w"] == {"x": 1}


def test_first_of_n_while_paused_resolves_at_unpause() -> None:
    k = Kit(STEPS)
    k.start()
    k.send(Pause())
    assert k.send(SignalIn("cancelled", "c")).reply == machine.Ok("buffered")
    k.send(SignalIn("paid", "p"))
    k.send(Unpause())
    assert k.run.current_step == "refund" and [b.name for b in k.run.buffer] == ["paid"]


@pytest.mark.parametrize("status", ["running", "sleeping", "stuck", "paused", "completed", "cancelled"])
def test_signals_named_by_a_first_of_n_step_in_other_statuses(status: str) -> None:
    steps: list[dict[str, Any]]
    if status == "sleeping":
        steps = [{"name": "s", "type": "sleep", "duration": "1h"}, *STEPS]
    elif status == "stuck":
        steps = [{"name": "s", "type": "task", "next": "$stuck"}, *STEPS]
    else:
        steps = [{"name": "s", "type": "task"}, *STEPS]
    k = Kit(steps)
    k.start()
    if status == "stuck":
        k.ok()
    elif status == "paused":
        k.send(Pause())
    elif status == "completed":
        k.ok(None, next="$end")
    elif status == "cancelled":
        k.send(machine.Cancel())
    assert k.run.status == status
    tr = k.send(SignalIn("paid", 1))
    if status in ("completed", "cancelled"):
        assert isinstance(tr.reply, machine.Rejected) and tr.reply.code == "run_closed"
    else:
        assert tr.reply == machine.Ok("buffered") and k.run.status == status
