"""The signal names a definition can wait for (issue 26, point 10), pure."""

from __future__ import annotations

from foliot.core.workflow.definition import parse_definition
from foliot.core.workflow.signals import awaited_signals, closest, listed, unknown_signal_message


def test_every_wait_steps_signals() -> None:
    d = parse_definition(
        {
            "name": "w",
            "steps": [
                {"name": "t", "type": "task"},
                {"name": "a", "type": "wait", "signal": "payment-confirmed"},
                {"name": "b", "type": "wait", "signals": ["paid", "cancelled"], "onSignal": {"paid": "t"}},
                {"name": "s", "type": "sleep", "duration": "1s"},
            ],
        }
    )
    assert awaited_signals(d) == {"payment-confirmed", "paid", "cancelled"}
    no_waits = parse_definition({"name": "w", "steps": [{"name": "t", "type": "task"}]})
    assert awaited_signals(no_waits) == frozenset()


def test_the_closest_name_and_the_message() -> None:
    known = frozenset({"payment-confirmed", "paid"})
    assert closest("payment-confrimed", known) == "payment-confirmed"
    assert closest("zzz", known) is None
    assert listed(f"s{i:03}" for i in range(80)) == [f"s{i:03}" for i in range(50)]
    assert unknown_signal_message("payment-confrimed", known, "'w' version 1") == (
        "no step of 'w' version 1 waits for signal 'payment-confrimed'; did you mean "
        "'payment-confirmed'? (it waits for 'paid', 'payment-confirmed')"
    )
    assert unknown_signal_message("x", frozenset(), "'w' version 2") == (
        "no step of 'w' version 2 waits for any signal, so 'x' would never be consumed"
    )
