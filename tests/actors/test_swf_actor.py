"""SWF executions as actors of kind `swf` on the shared runtime, under MockClock.

The execution is started through the engine, driven by messages to its actor (what the SWF
routes will send), and its timeouts fire through the shared timer wheel.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from trio.testing import MockClock

from foliot.core.swf import messages as m
from foliot.core.swf.faults import Fault
from foliot.core.swf.model import TypeRef
from foliot.kinds.swf.actor import SwfState, actor_id, queue_of, task_token
from foliot.storage.swf import ACTIVITY, REGISTERED, WORKFLOW, SwfDomain, SwfType

from .conftest import Env, advance

REGION = "us-east-1"
WF = TypeRef("Order", "1")


def decision(kind: str, **attributes: Any) -> dict[str, Any]:
    return {"decisionType": kind, kind[0].lower() + kind[1:] + "DecisionAttributes": attributes}


def schedule(activity_id: str, **attributes: Any) -> dict[str, Any]:
    return decision(
        "ScheduleActivityTask",
        activityType={"name": "Charge", "version": "1"},
        activityId=activity_id,
        **attributes,
    )


@pytest.fixture
async def swf(env: Env) -> Env:
    store, now = env.engine.store, env.engine.clock.now()
    await store.swf_insert_domain(SwfDomain(REGION, "d", REGISTERED, None, "7", "[]", now), 100)
    workflow = {
        "defaultTaskStartToCloseTimeout": "60",
        "defaultExecutionStartToCloseTimeout": "3600",
        "defaultTaskList": {"name": "deciders"},
        "defaultChildPolicy": "TERMINATE",
    }
    activity = {
        "defaultTaskStartToCloseTimeout": "300",
        "defaultTaskHeartbeatTimeout": "30",
        "defaultTaskList": {"name": "workers"},
        "defaultTaskScheduleToStartTimeout": "60",
        "defaultTaskScheduleToCloseTimeout": "1000",
    }
    for kind, name, config in ((WORKFLOW, "Order", workflow), (ACTIVITY, "Charge", activity)):
        row = SwfType(REGION, "d", kind, name, "1", REGISTERED, None, json.dumps(config), now)
        await store.swf_insert_type(row, 100)
    return env


async def start(env: Env, workflow_id: str = "order-1", **request: Any) -> str:
    tr = await env.engine.swf.start(REGION, m.StartRequest("d", workflow_id, WF, **request))
    assert isinstance(tr, m.Transition), tr
    return tr.execution.run_id


async def ask(env: Env, run_id: str, msg: Any) -> tuple[m.Transition, SwfState]:
    tr, state = await env.engine.swf.ask(REGION, run_id, msg)
    assert isinstance(tr, m.Transition), tr
    assert state is not None
    return tr, state


async def history(env: Env, run_id: str) -> list[str]:
    events = await env.engine.store.swf_events(REGION, run_id, None, False, 1000)
    return [e.event_type for e in events]


async def decide(env: Env, run_id: str, *decisions: dict[str, Any]) -> SwfState:
    stored = await env.engine.store.swf_load(REGION, run_id)
    assert stored is not None and stored.execution.decision is not None
    scheduled = stored.execution.decision.scheduled_event_id
    await ask(env, run_id, m.PollDecision(scheduled, "decider"))
    _, state = await ask(env, run_id, m.CompleteDecision(scheduled, list(decisions)))
    return state


async def test_a_start_offers_its_decision_task_and_an_unknown_type_is_a_fault(
    swf: Env, autojump_clock: MockClock
) -> None:
    run_id = await start(swf)
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    assert swf.engine.queues.depth(app, queue) == 1
    actor = swf.engine.supervisor.actors[actor_id(REGION, run_id)]
    view = actor.describe()
    assert view["kind"] == "swf" and view["workflowId"] == "order-1" and view["status"] == "OPEN"
    fault = await swf.engine.swf.start(REGION, m.StartRequest("d", "x", TypeRef("Nope", "1")))
    assert isinstance(fault, Fault) and fault.code == "UnknownResourceFault"
    assert await history(swf, run_id) == ["WorkflowExecutionStarted", "DecisionTaskScheduled"]


async def test_the_workflow_timeout_fires_through_the_wheel_once(swf: Env, autojump_clock: MockClock) -> None:
    run_id = await start(swf)
    await advance(600)
    assert actor_id(REGION, run_id) not in swf.engine.supervisor.actors  # passivated meanwhile
    await advance(3_600)
    stored = await swf.engine.store.swf_load(REGION, run_id)
    assert stored is not None and stored.execution.close_status == "TIMED_OUT"
    assert (await history(swf, run_id))[-1] == "WorkflowExecutionTimedOut"
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    assert swf.engine.queues.depth(app, queue) == 0  # the decision task was retired
    assert swf.engine.timers.pending_for(actor_id(REGION, run_id), ["workflow"]) == []


async def test_a_decision_start_to_close_timeout_schedules_a_new_decision_task(
    swf: Env, autojump_clock: MockClock
) -> None:
    run_id = await start(swf)
    await ask(swf, run_id, m.PollDecision(2, "decider"))
    await advance(61)
    events = await history(swf, run_id)
    assert events[-3:] == ["DecisionTaskStarted", "DecisionTaskTimedOut", "DecisionTaskScheduled"]


@pytest.mark.parametrize(
    ("attributes", "started", "heartbeat", "wait", "timeout_type"),
    [
        ({}, False, False, 61, "SCHEDULE_TO_START"),
        ({"scheduleToStartTimeout": "NONE", "heartbeatTimeout": "NONE"}, True, False, 301, "START_TO_CLOSE"),
        ({}, True, False, 31, "HEARTBEAT"),
        (
            {"scheduleToStartTimeout": "NONE", "startToCloseTimeout": "NONE"},
            False,
            False,
            1_001,
            "SCHEDULE_TO_CLOSE",
        ),
        ({"heartbeatTimeout": "30"}, True, True, 31, "HEARTBEAT"),
    ],
)
async def test_activity_timeouts_fire_through_the_wheel(
    swf: Env,
    autojump_clock: MockClock,
    attributes: dict[str, Any],
    started: bool,
    heartbeat: bool,
    wait: float,
    timeout_type: str,
) -> None:
    run_id = await start(swf)
    state = await decide(swf, run_id, schedule("a1", **attributes))
    act = state.execution.activity("a1")
    assert act is not None
    if started:
        await ask(swf, run_id, m.PollActivity(act.scheduled_event_id, "worker"))
    if heartbeat:
        await advance(20)
        tr, _ = await ask(swf, run_id, m.Heartbeat(act.scheduled_event_id))
        assert tr.reply == m.HeartbeatAnswer(False)
        await advance(wait - 5)
        assert "ActivityTaskTimedOut" not in await history(swf, run_id)  # the beat moved it
        await advance(10)
    else:
        await advance(wait)
    events = await swf.engine.store.swf_events(REGION, run_id, None, False, 1000)
    timed_out = [e for e in events if e.event_type == "ActivityTaskTimedOut"]
    assert len(timed_out) == 1
    assert timed_out[0].attributes["timeoutType"] == timeout_type
    assert events[-1].event_type == "DecisionTaskScheduled"


async def test_signal_request_cancel_and_terminate(swf: Env, autojump_clock: MockClock) -> None:
    run_id = await start(swf)
    await ask(swf, run_id, m.Signal("go", "payload"))
    await ask(swf, run_id, m.RequestCancel())
    _, state = await ask(swf, run_id, m.Terminate(reason="enough"))
    assert state.execution.close_status == "TERMINATED"
    assert await history(swf, run_id) == [
        "WorkflowExecutionStarted",
        "DecisionTaskScheduled",
        "WorkflowExecutionSignaled",
        "WorkflowExecutionCancelRequested",
        "WorkflowExecutionTerminated",
    ]
    assert actor_id(REGION, run_id) not in swf.engine.supervisor.actors  # closed: left memory
    fault, _ = await swf.engine.swf.ask(REGION, run_id, m.Signal("late"))
    assert isinstance(fault, Fault)
    assert len(await history(swf, run_id)) == 5


async def test_a_signal_decision_reaches_the_other_execution(swf: Env, autojump_clock: MockClock) -> None:
    sender = await start(swf, "sender")
    receiver = await start(swf, "receiver")
    await decide(
        swf, sender, decision("SignalExternalWorkflowExecution", workflowId="receiver", signalName="hi")
    )
    await advance(1)  # delivered, and the sender told: a new decision task is scheduled
    await decide(
        swf, sender, decision("SignalExternalWorkflowExecution", workflowId="nobody", signalName="hi")
    )
    await advance(1)
    assert "WorkflowExecutionSignaled" in await history(swf, receiver)
    events = await history(swf, sender)
    assert "ExternalWorkflowExecutionSignaled" in events
    assert "SignalExternalWorkflowExecutionFailed" in events


async def test_a_task_list_entry_names_its_task(swf: Env, autojump_clock: MockClock) -> None:
    run_id = await start(swf)
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    async with swf.engine.queues.reserve(app, queue, 1, 0) as held:
        assert held.offers == [(task_token(run_id, 2), actor_id(REGION, run_id))]


@pytest.mark.parametrize("settings_overrides", [{"timer_window_ms": 60_000}])
async def test_deadlines_are_stored_and_fire_after_a_restart(swf: Env, autojump_clock: MockClock) -> None:
    """Deadlines beyond the wheel's window wait in storage (the `timers` rows of kind "swf")
    and are paged in when due, also by a fresh engine after a crash."""
    run_id = await start(swf)
    await ask(swf, run_id, m.PollDecision(2, "decider"))
    assert swf.engine.timers.pending_for(actor_id(REGION, run_id), ["workflow"]) == []  # an hour ahead
    await swf.crash_and_restart()
    await advance(61)
    assert (await history(swf, run_id))[-2:] == ["DecisionTaskTimedOut", "DecisionTaskScheduled"]
    await advance(3_600)
    assert (await history(swf, run_id))[-1] == "WorkflowExecutionTimedOut"
    assert await swf.engine.store.timers_due_before(2**62, 10) == []


async def test_a_long_poll_with_no_task_answers_the_empty_task_after_60_s(
    swf: Env, autojump_clock: MockClock
) -> None:
    import trio

    from foliot.kinds.swf import writes
    from foliot.kinds.swf.registry import Ctx

    ctx = Ctx(swf.engine.store, swf.engine.clock.now(), REGION, swf.engine.swf)
    body = {"domain": "d", "taskList": {"name": "deciders"}, "identity": "decider-1"}
    t0 = trio.current_time()
    assert await writes.poll_for_decision_task(ctx, body) == {
        "startedEventId": 0,
        "previousStartedEventId": 0,
    }
    assert trio.current_time() - t0 == pytest.approx(writes.POLL_SECONDS)
    t1 = trio.current_time()
    activity_body = {"domain": "d", "taskList": {"name": "workers"}}
    assert await writes.poll_for_activity_task(ctx, activity_body) == {"startedEventId": 0}
    assert trio.current_time() - t1 == pytest.approx(writes.POLL_SECONDS)

    # A poll already waiting is handed a task scheduled 10 s later at once, not at the end.
    answered: dict[str, Any] = {}

    async def poll() -> None:
        answered["task"] = await writes.poll_for_decision_task(ctx, body)
        answered["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await advance(10)
        scheduled_at = trio.current_time()
        run_id = await start(swf)
    task = answered["task"]
    assert task["workflowExecution"]["runId"] == run_id and task["taskToken"]
    assert answered["at"] - scheduled_at < 1
    assert (await history(swf, run_id))[-1] == "DecisionTaskStarted"


async def test_continue_as_new_starts_the_next_run_with_its_actor_task_and_deadlines(
    swf: Env, autojump_clock: MockClock
) -> None:
    run_id = await start(swf)
    state = await decide(swf, run_id, decision("ContinueAsNewWorkflowExecution", input="round 2"))
    first = state.execution
    assert first.close_status == "CONTINUED_AS_NEW"
    stored = await swf.engine.store.swf_find(REGION, "d", "order-1")  # the open run of order-1
    assert stored is not None and stored.execution.run_id != run_id
    nxt = stored.execution
    (started,) = await swf.engine.store.swf_events(REGION, nxt.run_id, None, False, 1)
    assert started.attributes["input"] == "round 2"
    assert started.attributes["continuedExecutionRunId"] == run_id
    # The next run is live at once: its actor holds it, its decision task waits for a poller
    # and its workflow deadline is armed (nothing waits for a restart).
    assert actor_id(REGION, nxt.run_id) in swf.engine.supervisor.actors
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    assert swf.engine.queues.depth(app, queue) == 1
    await ask(swf, nxt.run_id, m.PollDecision(2, "decider"))
    assert (await history(swf, nxt.run_id)) == [
        "WorkflowExecutionStarted",
        "DecisionTaskScheduled",
        "DecisionTaskStarted",
    ]
    await advance(3_601)
    timed_out = await swf.engine.store.swf_load(REGION, nxt.run_id)
    assert timed_out is not None and timed_out.execution.close_status == "TIMED_OUT"


async def test_a_child_execution_is_started_and_its_close_reaches_the_parent(
    swf: Env, autojump_clock: MockClock
) -> None:
    parent = await start(swf)
    child_type = {"name": "Order", "version": "1"}
    await decide(
        swf,
        parent,
        decision("StartChildWorkflowExecution", workflowType=child_type, workflowId="child-1", input="c"),
        decision("StartChildWorkflowExecution", workflowType=child_type, workflowId="order-1"),
    )
    await advance(1)  # the child's start runs after the parent's commit
    events = await swf.engine.store.swf_events(REGION, parent, None, False, 1000)
    kinds = [e.event_type for e in events]
    assert kinds.count("StartChildWorkflowExecutionInitiated") == 2
    (failed,) = [e for e in events if e.event_type == "StartChildWorkflowExecutionFailed"]
    assert failed.attributes["cause"] == "WORKFLOW_ALREADY_RUNNING"  # the parent's own id is open
    assert failed.attributes["workflowId"] == "order-1"
    (started,) = [e for e in events if e.event_type == "ChildWorkflowExecutionStarted"]
    child_run = started.attributes["workflowExecution"]["runId"]
    child = await swf.engine.store.swf_find(REGION, "d", "child-1")
    assert child is not None and child.execution.run_id == child_run
    assert child.execution.parent is not None and child.execution.parent.run_id == parent
    assert actor_id(REGION, child_run) in swf.engine.supervisor.actors  # live, its task offered
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    assert swf.engine.queues.depth(app, queue) == 2  # the child's first task and the parent's next

    await decide(swf, child_run, decision("CompleteWorkflowExecution", result="done"))
    await advance(1)
    events = await swf.engine.store.swf_events(REGION, parent, None, False, 1000)
    (completed,) = [e for e in events if e.event_type == "ChildWorkflowExecutionCompleted"]
    assert completed.attributes["result"] == "done"
    assert completed.attributes["workflowExecution"]["runId"] == child_run


async def test_a_child_start_retried_after_it_committed_reports_the_child_not_a_conflict(
    swf: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = await start(swf)
    child_type = {"name": "Order", "version": "1"}
    state = await decide(
        swf, parent, decision("StartChildWorkflowExecution", workflowType=child_type, workflowId="child-1")
    )
    await advance(1)
    child = await swf.engine.store.swf_find(REGION, "d", "child-1")
    assert child is not None
    told: list[Any] = []
    monkeypatch.setattr(
        swf.engine, "tell_or_retry", lambda kind, actor, envelope: told.append(envelope.message)
    )
    (initiated,) = [c for c in state.execution.children if c.workflow_id == "child-1"]
    request = m.StartRequest(
        "d", "child-1", WF, parent=state.execution.ref, parent_initiated_event_id=initiated.initiated_event_id
    )
    swf.engine.swf.kind._start_child(
        REGION, state.execution, m.StartChild(initiated.initiated_event_id, request)
    )
    await advance(1)
    assert told == [m.ChildStarted(initiated.initiated_event_id, child.execution.run_id)]
    # Another parent's start of the same open workflow id is refused.
    other = m.StartRequest("d", "child-1", WF)
    swf.engine.swf.kind._start_child(REGION, state.execution, m.StartChild(99, other))
    await advance(1)
    assert told[1:] == [m.ChildStartFailed(99, "WORKFLOW_ALREADY_RUNNING")]


async def test_a_child_start_cut_off_by_a_crash_is_carried_out_after_the_restart(
    swf: Env, autojump_clock: MockClock
) -> None:
    import trio.testing

    from ..swf.store_kit import Live

    parent = await start(swf)
    store = swf.engine.store
    assert swf.scope is not None
    swf.scope.cancel()  # the process dies ...
    await trio.testing.wait_all_tasks_blocked()
    stored = await store.swf_load(REGION, parent)
    assert stored is not None
    live = Live(store, REGION, stored)  # ... right after committing a decision, before its effects
    child_type = {"name": "Order", "version": "1"}
    await live.decide(
        swf.engine.clock.now(),
        decision("StartChildWorkflowExecution", workflowType=child_type, workflowId="child-1"),
    )
    assert await store.swf_find(REGION, "d", "child-1") is None
    swf.engine = swf.make_engine()
    await swf.boot()
    await advance(1)
    child = await store.swf_find(REGION, "d", "child-1")
    assert child is not None and child.execution.parent is not None
    assert child.execution.parent.run_id == parent
    assert "ChildWorkflowExecutionStarted" in await history(swf, parent)
    app, queue = queue_of(REGION, "d", "decision", "deciders")
    assert swf.engine.queues.depth(app, queue) == 2  # the child's first task and the parent's next
