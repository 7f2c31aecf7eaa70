"""The pure machine's child runs, exhaustively: `run`, `map` and `parallel` steps, run output,
and what a parent does with its children when it closes, moves on or pauses."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from foliot.core.workflow import machine
from foliot.core.workflow.definition import MAX_DEPTH
from foliot.core.workflow.machine import CancelChildren, ChildRunClosed, Gathered, NotifyParent
from foliot.core.workflow.model import ErrorInfo, ParentRef

from .machine_kit import Kit

RUN_STEP = {"name": "ship", "type": "run", "workflow": "shipping"}
AFTER = {"name": "after", "type": "task"}


def closed(
    kit: Kit, run_id: str, status: str = "completed", output: Any = None, **ref: Any
) -> ChildRunClosed:
    """The message `run_id` (an open child of the kit's run) sends when it closes."""
    fan = kit.run.fan
    assert fan is not None
    slot = fan.slot(run_id)
    index = slot.index if slot is not None else 0
    parent = ParentRef("run1", fan.step, fan.generation, fan.attempt, index)
    if ref:
        parent = attrs.evolve(parent, **ref)
    error = None if status == "completed" else ErrorInfo("x", "boom", "it broke")
    return ChildRunClosed(run_id, parent, status, output, error)


def open_ids(kit: Kit) -> list[str]:
    assert kit.run.fan is not None
    return [slot.run_id for slot in kit.run.fan.open]


def cancels(kit: Kit) -> list[str]:
    return [i for e in kit.effects() if isinstance(e, CancelChildren) for i in e.run_ids]


# --------------------------------------------------------------------------- run output


def test_output_is_the_state_or_the_value_at_the_output_path() -> None:
    kit = Kit([{"name": "t", "type": "task"}])
    kit.start()
    kit.ok({"a": 1})
    assert kit.run.status == "completed" and kit.run.output == {"t": {"a": 1}}
    kit = Kit([{"name": "t", "type": "task"}], output="state.t.a")
    kit.start()
    kit.ok({"a": 1})
    assert kit.run.output == 1
    kit = Kit([{"name": "t", "type": "task"}], output="state.missing")
    kit.start()
    kit.ok({"a": 1})
    assert kit.run.output is None


def test_a_child_that_closes_tells_its_parent_with_its_output() -> None:
    kit = Kit([{"name": "t", "type": "task"}], output="state.t")
    ref = ParentRef("p1", "ship", 1, 1, 0)
    tr = machine.start(
        run_id="c",
        app="app",
        definition=kit.definition,
        version=1,
        input=None,
        business_key=None,
        run_timeout_ms=None,
        trace_id="0" * 32,
        ctx=kit.ctx(),
        parent=ref,
        depth=1,
    )
    kit.run = tr.run
    done = kit.ok(5)
    notes = [e for e in done.effects if isinstance(e, NotifyParent)]
    assert notes == [NotifyParent("p1", ChildRunClosed("c", ref, "completed", 5, None))]
    kit.start()  # a top-level run tells nobody
    assert not [e for e in kit.ok(5).effects if isinstance(e, NotifyParent)]


@pytest.mark.parametrize("status", ["failed", "cancelled", "timed_out"])
def test_every_close_of_a_child_is_told(status: str) -> None:
    kit = Kit([{"name": "t", "type": "task", "retry": {"maxAttempts": 1}}], runTimeout="1s")
    tr = machine.start(
        run_id="c",
        app="app",
        definition=kit.definition,
        version=1,
        input=None,
        business_key=None,
        run_timeout_ms=None,
        trace_id="0" * 32,
        ctx=kit.ctx(),
        parent=ParentRef("p1", "ship", 1, 1, 0),
        depth=1,
    )
    kit.run = tr.run
    if status == "cancelled":
        out = kit.send(machine.Cancel("x"))
    elif status == "timed_out":
        out = kit.fire_run_timeout()
    else:
        out = kit.fail(retryable=False)
    notes = [e for e in out.effects if isinstance(e, NotifyParent)]
    assert len(notes) == 1 and notes[0].message.status == status and notes[0].message.output is None


# --------------------------------------------------------------------------- run steps


def test_a_run_step_starts_one_child_and_takes_its_output() -> None:
    kit = Kit([{**RUN_STEP, "inputPath": "input.order"}, AFTER])
    tr = kit.start({"order": {"id": 7}})
    assert kit.run.status == "waiting" and open_ids(kit) == ["child1"]
    (request,) = tr.children
    assert request.workflow == "shipping" and request.version is None and request.input == {"id": 7}
    assert request.parent == ParentRef("run1", "ship", 1, 1, 0) and request.depth == 1
    assert "child_started" in kit.events()
    kit.send(closed(kit, "child1", output={"tracking": "T1"}))
    assert kit.run.state["ship"] == {"tracking": "T1"} and kit.run.current_step == "after"
    assert kit.run.fan is None and kit.events()[-3:] == ["step_completed", "step_started", "task_dispatched"]


def test_a_run_step_without_input_path_passes_the_parents_input() -> None:
    kit = Kit([RUN_STEP])
    tr = kit.start({"a": 1})
    assert tr.children[0].input == {"a": 1}
    kit = Kit([{**RUN_STEP, "inputPath": "state.nope"}])
    kit.start()
    assert kit.run.status == "failed" and kit.run.error is not None and kit.run.error.cls == "invalid_input"


@pytest.mark.parametrize(
    ("status", "cls"),
    [("failed", "child_failed"), ("cancelled", "child_cancelled"), ("timed_out", "child_timed_out")],
)
def test_a_failed_child_fails_the_step_naming_the_child(status: str, cls: str) -> None:
    kit = Kit([RUN_STEP])
    kit.start()
    kit.send(closed(kit, "child1", status))
    assert kit.run.status == "failed" and kit.run.error is not None
    assert kit.run.error.cls == cls and "child1" in kit.run.error.message


def test_retry_starts_a_new_child_per_attempt_then_on_failure() -> None:
    kit = Kit(
        [
            {**RUN_STEP, "retry": {"maxAttempts": 2, "initialInterval": "1s"}, "onFailure": "undo"},
            {"name": "undo", "type": "task"},
        ]
    )
    kit.start()
    kit.send(closed(kit, "child1", "failed"))
    assert kit.run.status == "running" and kit.run.timer is not None and kit.run.timer.kind == "retry"
    tr = kit.fire()
    assert [c.parent.attempt for c in tr.children] == [2] and open_ids(kit) == ["child2"]
    assert kit.send(closed(kit, "child1", "completed", attempt=1)).changed is False  # the old attempt
    kit.send(closed(kit, "child2", "failed"))
    assert kit.run.current_step == "undo" and kit.run.carried_error is not None


def test_a_run_step_without_retry_does_not_retry() -> None:
    kit = Kit([RUN_STEP], defaults={"retry": {"maxAttempts": 5}})
    kit.start()
    kit.send(closed(kit, "child1", "failed"))
    assert kit.run.status == "failed"


def test_the_step_timeout_cancels_the_child_and_fails_the_step() -> None:
    kit = Kit([{**RUN_STEP, "timeout": "1h"}])
    kit.start()
    assert kit.run.timer is not None and kit.run.timer.kind == "child_timeout"
    kit.fire()
    assert kit.run.status == "failed" and kit.run.error is not None and kit.run.error.cls == "child_timed_out"
    assert cancels(kit) == ["child1"]
    late = ChildRunClosed("child1", ParentRef("run1", "ship", 1, 1, 0), "completed")
    assert kit.send(late).changed is False


def test_a_childs_output_over_the_payload_limit_fails_the_step() -> None:
    kit = Kit([RUN_STEP], payload_max=100)
    kit.start()
    kit.send(closed(kit, "child1", output="x" * 200))
    assert (
        kit.run.status == "failed" and kit.run.error is not None and kit.run.error.cls == "output_too_large"
    )


def test_nesting_stops_at_the_depth_limit() -> None:
    kit = Kit([RUN_STEP])
    tr = kit.start(depth=MAX_DEPTH - 1)
    assert tr.children[0].depth == MAX_DEPTH
    kit = Kit([RUN_STEP])
    tr = kit.start(depth=MAX_DEPTH)
    assert not tr.children and kit.run.error is not None and kit.run.error.cls == "child_depth_exceeded"


def test_stale_duplicate_and_unknown_child_messages_change_nothing() -> None:
    kit = Kit([RUN_STEP, AFTER])
    kit.start()
    assert kit.send(closed(kit, "stranger")).changed is False
    assert kit.send(closed(kit, "child1", generation=0)).changed is False
    assert kit.send(closed(kit, "child1", step="other")).changed is False
    assert kit.send(closed(kit, "child1", attempt=9)).changed is False
    message = closed(kit, "child1", output=1)
    assert kit.send(message).changed is True
    assert kit.send(message).changed is False  # a duplicate delivery


def test_a_paused_parent_holds_a_childs_completion_until_unpaused() -> None:
    kit = Kit([RUN_STEP, AFTER])
    kit.start()
    kit.send(machine.Pause("look"))
    kit.send(closed(kit, "child1", output=3))
    assert kit.run.status == "paused" and kit.run.current_step == "ship" and kit.run.state["ship"] == 3
    kit.send(machine.Unpause())
    assert kit.run.current_step == "after"
    kit = Kit([{**RUN_STEP, "retry": {"maxAttempts": 2, "initialInterval": "1s"}}])
    kit.start()
    kit.send(machine.Pause())
    kit.send(closed(kit, "child1", "failed"))
    assert kit.run.status == "paused"
    kit.send(machine.Unpause())
    assert kit.run.timer is not None and kit.run.timer.kind == "retry"


# --------------------------------------------------------------------------- parents moving on


@pytest.mark.parametrize("how", ["cancel", "run_timeout"])
def test_a_closing_parent_cancels_its_open_children(how: str) -> None:
    kit = Kit(
        [{"name": "all", "type": "map", "itemsPath": "input", "workflow": "w", "maxConcurrency": 2}],
        runTimeout="1h",
    )
    kit.start([1, 2, 3])
    if how == "cancel":
        kit.send(machine.Cancel("stop"))
    else:
        kit.fire_run_timeout()
    assert cancels(kit) == ["child1", "child2"]


def test_abandoned_children_are_left_running() -> None:
    kit = Kit([{**RUN_STEP, "onParentClose": "abandon"}])
    kit.start()
    kit.send(machine.Cancel())
    assert cancels(kit) == []


def test_redrive_rewind_and_skip_cancel_the_superseded_children() -> None:
    kit = Kit([RUN_STEP, AFTER])
    kit.start()
    kit.send(machine.MarkStuck("internal_error", "crashed"))
    assert kit.send(closed(kit, "child1")).changed is False  # a stuck parent takes nothing
    tr = kit.send(machine.Redrive())
    assert cancels(kit) == ["child1"] and [c.parent.generation for c in tr.children] == [2]
    assert kit.send(closed(kit, "child1", generation=1)).changed is False
    kit.send(machine.Rewind("ship"))
    assert cancels(kit) == ["child1", "child2"] and open_ids(kit) == ["child3"]
    kit.send(machine.Skip({"skipped": True}))
    assert cancels(kit) == ["child1", "child2", "child3"] and kit.run.current_step == "after"


# --------------------------------------------------------------------------- map steps


def map_kit(**fields: Any) -> Kit:
    return Kit([{"name": "all", "type": "map", "itemsPath": "input.items", "workflow": "w", **fields}, AFTER])


def test_a_map_starts_children_in_item_order_up_to_its_concurrency() -> None:
    kit = map_kit(maxConcurrency=2)
    tr = kit.start({"items": ["a", "b", "c", "d", "e"]})
    assert [(c.input, c.parent.index) for c in tr.children] == [("a", 0), ("b", 1)]
    tr = kit.send(closed(kit, "child2", output="B"))
    assert [(c.input, c.parent.index) for c in tr.children] == [("c", 2)] and tr.gather is None
    for child in ("child1", "child3"):
        kit.send(closed(kit, child, output=child))
    tr = kit.send(closed(kit, "child4", output="D"))
    assert not tr.children and kit.run.fan is not None and open_ids(kit) == ["child5"]
    tr = kit.send(closed(kit, "child5", output="E"))
    assert tr.gather == machine.Gather("all", 1, 1, 5)
    kit.send(Gathered("all", 1, 1, ("A", "B", "C", "D", "E")))
    assert kit.run.state["all"] == ["A", "B", "C", "D", "E"] and kit.run.current_step == "after"


def test_a_gather_that_does_not_match_changes_nothing() -> None:
    kit = map_kit()
    kit.start({"items": [1]})
    assert kit.send(Gathered("all", 1, 1, (1,))).changed is False  # its child is still open
    kit.send(closed(kit, "child1"))
    assert kit.send(Gathered("all", 2, 1, (1,))).changed is False
    assert kit.send(Gathered("all", 1, 1, (1,))).changed is True


@pytest.mark.parametrize(
    ("items", "cls"),
    [
        ({"items": 3}, "invalid_items"),
        ({}, "invalid_items"),
        ({"items": list(range(10_001))}, "too_many_items"),
    ],
)
def test_bad_items_fail_the_step(items: Any, cls: str) -> None:
    kit = map_kit()
    kit.start(items)
    assert kit.run.status == "failed" and kit.run.error is not None and kit.run.error.cls == cls


def test_an_empty_map_completes_at_once() -> None:
    kit = map_kit()
    tr = kit.start({"items": []})
    assert not tr.children and kit.run.state["all"] == [] and kit.run.current_step == "after"


@pytest.mark.parametrize(
    ("fields", "failures", "fails"),
    [
        ({}, 1, True),
        ({"toleratedFailures": 2}, 2, False),
        ({"toleratedFailures": 2}, 3, True),
        ({"toleratedFailurePercentage": 50}, 2, False),
        ({"toleratedFailurePercentage": 50}, 3, True),
        ({"toleratedFailurePercentage": 100}, 4, False),
    ],
)
def test_map_tolerance(fields: dict[str, Any], failures: int, fails: bool) -> None:
    kit = map_kit(maxConcurrency=4, **fields)
    kit.start({"items": [0, 1, 2, 3]})
    statuses = ["failed", "cancelled", "timed_out", "failed"]
    for i in range(4):
        if kit.run.fan is None:
            break
        kit.send(closed(kit, f"child{i + 1}", statuses[i] if i < failures else "completed"))
    if fails:
        assert kit.run.status == "failed" and kit.run.error is not None and kit.run.error.cls == "map_failed"
        assert cancels(kit) == [f"child{i}" for i in range(failures + 1, 5)]
    else:
        assert kit.history[-1].gather is not None and kit.run.status == "waiting"


def test_a_paused_map_records_closes_and_starts_more_at_unpause() -> None:
    kit = map_kit(maxConcurrency=1)
    kit.start({"items": [1, 2, 3]})
    kit.send(machine.Pause())
    tr = kit.send(closed(kit, "child1"))
    assert not tr.children and kit.run.fan is not None and kit.run.fan.completed == 1
    tr = kit.send(machine.Unpause())
    assert [c.input for c in tr.children] == [2]


def test_an_operators_edit_reaches_items_not_started_yet() -> None:
    kit = Kit(
        [{"name": "all", "type": "map", "itemsPath": "state.items", "workflow": "w", "maxConcurrency": 1}]
    )
    kit.start()
    assert kit.run.status == "failed"  # no state.items yet
    kit = map_kit(maxConcurrency=1)
    kit = Kit(
        [
            {"name": "t", "type": "task"},
            {"name": "all", "type": "map", "itemsPath": "state.t", "workflow": "w", "maxConcurrency": 1},
        ]
    )
    kit.start()
    kit.ok([1, 2])
    kit.send(machine.EditState(set={"t": [1, 20]}, reason="fix"))
    tr = kit.send(closed(kit, "child1"))
    assert [c.input for c in tr.children] == [20]


# --------------------------------------------------------------------------- parallel steps


def parallel_kit() -> Kit:
    return Kit(
        [
            {
                "name": "notify",
                "type": "parallel",
                "branches": [
                    {"name": "email", "workflow": "send-email"},
                    {"name": "sms", "workflow": "send-sms", "inputPath": "input.phone", "version": 2},
                ],
            },
            AFTER,
        ]
    )


def test_parallel_starts_every_branch_and_keys_outputs_by_branch() -> None:
    kit = parallel_kit()
    tr = kit.start({"phone": "+1"})
    assert [(c.workflow, c.version, c.input) for c in tr.children] == [
        ("send-email", None, {"phone": "+1"}),
        ("send-sms", 2, "+1"),
    ]
    kit.send(closed(kit, "child2", output="s"))
    tr = kit.send(closed(kit, "child1", output="e"))
    assert tr.gather is not None
    kit.send(Gathered("notify", 1, 1, ("e", "s")))
    assert kit.run.state["notify"] == {"email": "e", "sms": "s"}


def test_a_failing_branch_cancels_the_others_and_fails_the_step() -> None:
    kit = parallel_kit()
    kit.start()
    kit.send(closed(kit, "child2", "failed"))
    assert (
        kit.run.error is not None
        and kit.run.error.cls == "branch_failed"
        and "'sms'" in kit.run.error.message
    )
    assert cancels(kit) == ["child1"]


# --------------------------------------------------------------------------- chaining


def test_chain_drops_children_the_second_transition_no_longer_waits_for() -> None:
    kit = parallel_kit()
    first = kit.start()
    second = kit.send(closed(kit, "child2", "failed"))
    both = machine.chain(first, second)
    assert both.children == () and all(not e.run_ids for e in both.effects if isinstance(e, CancelChildren))
    assert [e.seq for e in both.events] == list(range(1, len(both.events) + 1))


# --------------------------------------------------------------------------- children that never start

MISSING = ErrorInfo(None, "workflow_not_found", "workflow 'shipping' not found")


def history_ids(tr: machine.Transition) -> set[str]:
    return {str(e.data["runId"]) for e in tr.events if "runId" in e.data}


def test_a_run_step_whose_workflow_is_missing_records_no_child_id_and_names_the_workflow() -> None:
    kit = Kit([RUN_STEP, AFTER])
    first = kit.start()
    (request,) = first.children
    tr = machine.child_not_started(first, request, MISSING, kit.definition, kit.ctx())
    assert tr.children == () and history_ids(tr) == set()
    (event,) = [e for e in tr.events if e.type.startswith("child_")]
    assert event.type == "child_not_started" and event.step == "ship"
    assert event.data == {
        "workflow": "shipping",
        "index": 0,
        "class": "workflow_not_found",
        "message": "workflow 'shipping' not found",
    }
    assert [e.seq for e in tr.events] == list(range(1, len(tr.events) + 1))
    error = tr.run.error
    assert tr.run.status == "failed" and error is not None
    assert (
        error.cls == "workflow_not_found" and "'shipping'" in error.message and "child1" not in error.message
    )


def test_a_parallel_branch_that_cannot_start_drops_its_siblings_without_ids() -> None:
    kit = parallel_kit()
    first = kit.start({"phone": "1"})
    sms = first.children[1]
    missing = ErrorInfo(None, "workflow_not_found", "version 2 of workflow 'send-sms' not found")
    tr = machine.child_not_started(first, sms, missing, kit.definition, kit.ctx())
    assert tr.children == () and history_ids(tr) == set()
    assert not [i for e in tr.effects if isinstance(e, CancelChildren) for i in e.run_ids]
    kinds = [(e.type, e.data.get("branch")) for e in tr.events if e.type.startswith("child_")]
    assert kinds == [("child_not_started", "email"), ("child_not_started", "sms")]
    assert "reason" in tr.events[[e.data.get("branch") for e in tr.events].index("email")].data
    error = tr.run.error
    assert error is not None and error.cls == "branch_failed"
    assert "'sms' could not start" in error.message and "'send-sms' not found" in error.message


def test_a_map_whose_workflow_is_missing_names_no_child_and_counts_what_it_drops() -> None:
    kit = map_kit(maxConcurrency=3)
    first = kit.start({"items": [1, 2, 3, 4, 5]})
    missing = ErrorInfo(None, "workflow_not_found", "workflow 'w' not found")
    tr = machine.child_not_started(first, first.children[0], missing, kit.definition, kit.ctx())
    assert tr.children == () and history_ids(tr) == set()
    error = tr.run.error
    assert error is not None and error.cls == "map_failed"
    assert "1 failed, 2 cancelled, 2 not started" in error.message
    assert "the last was item 0 (workflow 'w' not found)" in error.message


def test_map_failed_counts_the_open_children_it_cancels() -> None:
    kit = map_kit(maxConcurrency=4)
    kit.start({"items": [1, 2, 3, 4, 5, 6]})
    kit.send(closed(kit, "child1", "failed"))
    error = kit.run.error
    assert error is not None and error.cls == "map_failed"
    assert cancels(kit) == ["child2", "child3", "child4"]
    assert "0 completed, 1 failed, 3 cancelled, 2 not started; the last was child1 (failed)" in error.message


def test_map_failed_says_abandoned_for_children_it_leaves_running() -> None:
    kit = map_kit(maxConcurrency=3, onParentClose="abandon")
    kit.start({"items": [1, 2, 3]})
    kit.send(closed(kit, "child2", "cancelled"))
    error = kit.run.error
    assert error is not None and "0 completed, 0 failed, 1 cancelled, 2 abandoned;" in error.message


# --------------------------------------------------------------------------- paced by the app's lane


MAP_STEP = {"name": "all", "type": "map", "itemsPath": "input.items", "workflow": "item"}


def test_a_map_starts_what_the_lane_grants_and_the_rest_on_its_top_up_timer() -> None:
    kit = Kit([MAP_STEP, AFTER])
    kit.grants = [3, 0, 4]
    kit.start({"items": list(range(8))})
    assert open_ids(kit) == ["child1", "child2", "child3"]
    timer = kit.run.timer
    assert timer is not None and timer.kind == "top_up" and timer.due == kit.now + 500
    assert kit.events().count("children_paced") == 1
    kit.fire()  # the lane grants none: armed again, no second event
    assert len(open_ids(kit)) == 3 and kit.run.timer is not None and kit.run.timer.kind == "top_up"
    assert kit.events().count("children_paced") == 1
    kit.send(closed(kit, "child1"))  # a close tops up too: 4 granted, 7 started, 1 still waiting
    assert kit.run.fan is not None and kit.run.fan.started == 7
    kit.grants = None
    kit.fire()
    assert kit.run.fan is not None and kit.run.fan.started == 8 and kit.run.timer is None
    for child in open_ids(kit):
        kit.send(closed(kit, child, output=child))
    assert kit.run.fan is not None and not kit.run.fan.open
    started = [e for tr in kit.history for e in tr.events if e.type == "child_started"]
    assert [e.data["index"] for e in started] == list(range(8))  # each item once, in order


def test_a_run_step_paced_arms_its_child_timeout_only_when_its_child_starts() -> None:
    kit = Kit([{**RUN_STEP, "timeout": "1h"}, AFTER])
    kit.grants = [0]
    kit.start()
    assert kit.run.fan is not None and not kit.run.fan.open
    assert kit.run.timer is not None and kit.run.timer.kind == "top_up"
    kit.fire()
    assert open_ids(kit) == ["child1"]
    timer = kit.run.timer
    assert timer is not None and timer.kind == "child_timeout" and timer.due == kit.now + 3_600_000


def test_a_stale_top_up_timer_does_nothing() -> None:
    kit = Kit([MAP_STEP, AFTER])
    kit.grants = [1]
    kit.start({"items": [1, 2]})
    timer = kit.run.timer
    assert timer is not None
    kit.grants = None
    kit.send(closed(kit, "child1"))  # the close started the last one and cleared the timer
    assert kit.run.timer is None
    tr = kit.send(machine.TimerFired("step", "top_up", timer.key))
    assert not tr.changed


# --------------------------------------------------------------------------- a start's tree budget


def test_a_fan_out_past_the_runs_tree_budget_fails_before_any_child() -> None:
    kit = Kit([{**MAP_STEP, "maxConcurrency": 2}, AFTER])
    kit.start({"items": list(range(8))}, tree=7)
    assert kit.run.status == "failed" and kit.run.error is not None
    assert kit.run.error.cls == "too_many_runs" and "7 more" in kit.run.error.message
    assert not [tr for tr in kit.history if tr.children]


def test_the_budget_is_shared_down_and_what_a_child_leaves_comes_back() -> None:
    kit = Kit([{**MAP_STEP, "maxConcurrency": 2}, AFTER])
    tr = kit.start({"items": list(range(4))}, tree=100)
    # 4 to start: each costs 1, the other 96 are shared: 24 each, given as each starts.
    assert [c.tree for c in tr.children] == [24, 24]
    assert kit.run.tree == 100 - 2 * 25
    child = open_ids(kit)[0]
    fan = kit.run.fan
    assert fan is not None
    ref = ParentRef("run1", fan.step, fan.generation, fan.attempt, 0)
    tr = kit.send(ChildRunClosed(child, ref, "completed", None, None, 20))  # it spent 4 of 24
    assert kit.run.tree == 50 + 20 - 1 - 34  # refund, then the third child: 1 + (70 - 2) // 2
    assert [c.tree for c in tr.children] == [34]
