"""Concurrency keys in the pure machine: a limited workflow's run starts `queued`, `Admit`
starts its first step, and every close (or a return to the queue) wakes the key's queue; the
slot changes a transition makes (`slot_of`) follow from the run before and after."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.workflow import machine
from foliot.core.workflow.definition import parse_definition
from foliot.core.workflow.machine import Admit, WakeQueued, concurrency_key
from foliot.kinds.run.actor import slot_of
from foliot.storage.base import SlotChange

from .machine_kit import Kit

STEPS = [{"name": "w", "type": "wait", "signal": "go"}]


def wakes(kit: Kit) -> list[str]:
    return [e.key for e in kit.effects() if isinstance(e, WakeQueued)]


@pytest.mark.parametrize(
    ("key", "input", "expected"),
    [
        ("input.c", {"c": "42"}, "wf/42"),
        ("input.c", {"c": 42}, "wf/42"),
        ("input.c", {"c": {"b": 1, "a": [2]}}, 'wf/{"a":[2],"b":1}'),
        ("input.c", {}, "wf/"),
        (None, {"c": 1}, "wf/"),
    ],
)
def test_the_key_is_the_value_as_text(key: str | None, input: Any, expected: str) -> None:
    concurrency: dict[str, Any] = {"limit": 1} if key is None else {"limit": 1, "key": key}
    definition = parse_definition({"name": "wf", "steps": STEPS, "concurrency": concurrency})
    assert concurrency_key(definition, input) == expected


def test_a_limited_run_starts_queued_and_admit_starts_its_first_step() -> None:
    kit = Kit(STEPS, concurrency={"limit": 2, "key": "input.c"})
    kit.start({"c": "a"})
    run = kit.run
    assert run.status == "queued" and run.current_step is None and run.concurrency_key == "wf/a"
    assert run.waits_for_slot and not run.holds_slot
    assert kit.send(machine.SignalIn("go")).reply == machine.Ok("buffered")  # kept for the wait
    kit.send(Admit())  # the buffered signal ends its wait at once: it completes
    assert kit.run.status == "completed" and kit.run.state == {"w": None}
    assert wakes(kit) == ["wf/a", "wf/a"]  # admitted (the next may fit too), then closed
    assert kit.send(Admit()).changed is False
    kit = Kit(STEPS, concurrency={"limit": 2})
    kit.start()
    kit.send(Admit())
    assert kit.run.status == "waiting" and kit.run.holds_slot
    assert kit.send(Admit()).changed is False  # admitted once


def test_every_close_and_a_return_to_the_queue_wakes_the_key() -> None:
    kit = Kit(STEPS, concurrency={"limit": 1})
    kit.start()
    kit.send(machine.Pause("hold"))
    assert kit.run.status == "paused" and not kit.run.waits_for_slot and not kit.run.holds_slot
    kit.send(machine.Unpause())
    assert kit.run.status == "queued" and wakes(kit) == ["wf/"]
    assert isinstance(kit.send(machine.Rewind("w")).reply, machine.Rejected)
    kit.send(machine.Cancel())
    assert kit.run.status == "cancelled" and wakes(kit) == ["wf/", "wf/"]
    unlimited = Kit(STEPS)
    unlimited.start()
    unlimited.send(machine.Cancel())
    assert wakes(unlimited) == []


def test_slot_changes_follow_the_run() -> None:
    kit = Kit(STEPS, concurrency={"limit": 3})
    new = kit.start().run
    assert slot_of(None, new, kit.definition) == SlotChange("queue", "wf/")
    admitted = kit.send(Admit()).run
    assert slot_of(new, admitted, kit.definition) == SlotChange("admit", "wf/", 3)
    assert slot_of(None, admitted, kit.definition) == SlotChange(
        "admit", "wf/", 3
    )  # a start admitted at once
    signalled = kit.send(machine.SignalIn("go")).run
    assert signalled.status == "completed" and slot_of(admitted, signalled, kit.definition) == SlotChange(
        "leave", "wf/"
    )
    kit = Kit(STEPS, concurrency={"limit": 3})
    queued = kit.start().run
    paused = kit.send(machine.Pause()).run
    assert slot_of(queued, paused, kit.definition) == SlotChange("leave", "wf/")
    again = kit.send(machine.Unpause()).run
    assert slot_of(paused, again, kit.definition) == SlotChange("queue", "wf/")
    assert slot_of(None, Kit(STEPS).start().run, kit.definition) is None


def test_a_task_step_with_concurrency_queues_the_run_at_the_step() -> None:
    steps: list[dict[str, Any]] = [
        {"name": "a", "type": "task", "concurrency": {"limit": 1, "key": "input.t"}},
        {"name": "b", "type": "task"},
    ]
    kit = Kit(steps)
    tr = kit.start({"t": "acme"})
    run = kit.run
    assert run.status == "queued" and run.current_step == "a" and run.task is None
    assert run.concurrency_key == "wf#a/acme" and run.waits_for_slot
    assert [e.key for e in tr.effects if isinstance(e, WakeQueued)] == ["wf#a/acme"]
    assert slot_of(None, run, kit.definition) == SlotChange("queue", "wf#a/acme")
    admitted = kit.send(Admit()).run
    assert admitted.status == "running" and admitted.task is not None and admitted.holds_slot
    assert slot_of(run, admitted, kit.definition) == SlotChange("admit", "wf#a/acme", 1)
    kit.fail("busy", retryable=True)  # a retry keeps its slot
    assert kit.run.holds_slot
    kit.fire()
    done = kit.ok({"x": 1}).run
    assert done.current_step == "b" and done.concurrency_key is None and not done.holds_slot
    assert slot_of(admitted, done, kit.definition) == SlotChange("leave", "wf#a/acme")
    assert wakes(kit)[-1] == "wf#a/acme"  # its slot went back
    assert kit.definition.concurrency_for("wf#a/acme") == kit.definition.step("a").concurrency


def test_a_debounced_run_queued_when_its_burst_ends_wakes_its_key() -> None:
    """A trailing burst's run begins when its window ends; a limited workflow's then waits in its
    key's queue, and nothing else would wake the key (a new run's start does, not this): the
    run stayed queued with its key free, forever (tests/sim seed 65)."""
    kit = Kit(STEPS, concurrency={"limit": 1, "key": "input.c"})
    kit.run = machine.start(
        run_id="run1",
        app="app",
        definition=kit.definition,
        version=1,
        input={"c": "a"},
        business_key=None,
        run_timeout_ms=None,
        trace_id="0" * 32,
        ctx=kit.ctx(),
        debounce=("d", kit.now + 5_000),
    ).run
    assert kit.run.status != "queued" and kit.run.timer is not None
    tr = kit.fire()
    assert kit.run.status == "queued" and kit.run.waits_for_slot
    assert [e.key for e in tr.effects if isinstance(e, WakeQueued)] == ["wf/a"]


def test_a_queued_run_migrated_to_another_queue_or_none_follows_its_new_version() -> None:
    """A run queued before its first step waits where its new version says: no `concurrency`:
    it begins at once (leaving its queue); another key: it moves to that key's queue."""
    kit = Kit(STEPS, concurrency={"limit": 1, "key": "input.c"})
    kit.start({"c": "a", "d": "z"})
    before = kit.run
    plain = parse_definition({"name": "wf", "steps": STEPS})
    kit.send(machine.Migrate(plain, 2))
    assert kit.run.status == "waiting" and kit.run.concurrency_key is None and kit.run.current_step == "w"
    assert slot_of(before, kit.run, plain) == SlotChange("leave", "wf/a")
    assert "wf/a" in wakes(kit)  # the runs behind it may move up
    kit = Kit(STEPS, concurrency={"limit": 1, "key": "input.c"})
    kit.start({"c": "a", "d": "z"})
    before = kit.run
    other = parse_definition({"name": "wf", "steps": STEPS, "concurrency": {"limit": 3, "key": "input.d"}})
    kit.send(machine.Migrate(other, 2))
    assert kit.run.status == "queued" and kit.run.concurrency_key == "wf/z"
    assert slot_of(before, kit.run, other) == SlotChange("queue", "wf/z")
    assert wakes(kit)[-1] == "wf/z"
    kit = Kit(STEPS, concurrency={"limit": 1, "key": "input.c"})
    kit.start({"c": "a"})
    wider = parse_definition({"name": "wf", "steps": STEPS, "concurrency": {"limit": 3, "key": "input.c"}})
    kit.send(machine.Migrate(wider, 2))  # the same key: it keeps its place, the key is woken
    assert kit.run.status == "queued" and kit.run.concurrency_key == "wf/a" and wakes(kit) == ["wf/a"]
