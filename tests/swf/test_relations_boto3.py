"""What the other boto3 suites leave to the actor tests, over the wire with a real boto3 client:
every closing decision, continue-as-new, CancelTimer, signals and cancel requests to other
executions, child workflows under each child policy, the timeouts in bounded real time (1 s
each, all at once), and `LimitExceededFault`. On SQLite only: all of it is the machine's and
the actor's, which do not depend on the store (the store contract runs on both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from .conftest import Swf, call, raises
from .test_tasks_boto3 import register_activity
from .test_write_boto3 import WF, setup


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'foliot.db'}"


def d(kind: str, **attributes: Any) -> dict[str, Any]:
    return {"decisionType": kind, kind[0].lower() + kind[1:] + "DecisionAttributes": attributes}


async def events(c: Any, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    out = await call(
        c.get_workflow_execution_history, domain="d", execution={"workflowId": workflow_id, "runId": run_id}
    )
    return list(out["events"])


async def kinds(c: Any, workflow_id: str, run_id: str) -> list[str]:
    return [e["eventType"] for e in await events(c, workflow_id, run_id)]


async def decide_next(c: Any, *decisions: dict[str, Any], task_list: str = "deciders") -> dict[str, Any]:
    """Take the next decision task (a long poll) and answer it with `decisions`."""
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": task_list})
    assert task.get("taskToken"), "no decision task"
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=list(decisions))
    return dict(task)


async def decide_until(c: Any, task_list: str, wanted: set[str]) -> set[str]:
    """Take decision tasks (answering none) until their events hold every type in `wanted`:
    each answer from another execution asks the decider again, so no wait is timed."""
    seen: set[str] = set()
    with trio.fail_after(20):
        while not wanted <= seen:
            task = await decide_next(c, task_list=task_list)
            seen |= {e["eventType"] for e in task["events"]}
    return seen


async def eventually(check: Any, limit_s: float = 10) -> None:
    """Wait for `check()` (an async predicate) to hold, reading again every 20 ms up to
    `limit_s`: for outcomes that ask no decider (a terminated child, a closed execution)."""
    for _ in range(int(limit_s / 0.02)):
        if await check():
            return
        await trio.sleep(0.02)
    raise AssertionError("the condition never held")


async def start(c: Any, workflow_id: str, **kw: Any) -> str:
    out = await call(c.start_workflow_execution, domain="d", workflowId=workflow_id, workflowType=WF, **kw)
    return str(out["runId"])


async def status(c: Any, workflow_id: str, run_id: str) -> str:
    out = await call(
        c.describe_workflow_execution, domain="d", execution={"workflowId": workflow_id, "runId": run_id}
    )
    info = out["executionInfo"]
    return str(info.get("closeStatus", info["executionStatus"]))


async def test_closing_decisions_timers_and_messages_between_executions(swf: Swf) -> None:
    c = await setup(swf)
    runs = {w: await start(c, w, taskList={"name": w}) for w in ("fails", "cancels", "renews", "talks")}
    await decide_next(c, d("FailWorkflowExecution", reason="r", details="x"), task_list="fails")
    assert await status(c, "fails", runs["fails"]) == "FAILED"
    await call(c.request_cancel_workflow_execution, domain="d", workflowId="cancels")
    task = await decide_next(c, d("CancelWorkflowExecution", details="ok"), task_list="cancels")
    assert "WorkflowExecutionCancelRequested" in [e["eventType"] for e in task["events"]]
    assert await status(c, "cancels", runs["cancels"]) == "CANCELED"

    await decide_next(c, d("ContinueAsNewWorkflowExecution", input="round 2"), task_list="renews")
    assert await status(c, "renews", runs["renews"]) == "CONTINUED_AS_NEW"
    nxt = await call(c.list_open_workflow_executions, domain="d", startTimeFilter={"oldestDate": 0},
                     executionFilter={"workflowId": "renews"})  # fmt: skip
    (info,) = nxt["executionInfos"]
    first = (await events(c, "renews", info["execution"]["runId"]))[0]
    attributes = first["workflowExecutionStartedEventAttributes"]
    assert attributes["continuedExecutionRunId"] == runs["renews"] and attributes["input"] == "round 2"

    # A timer started and canceled; a signal and a cancel request to another execution.
    await decide_next(
        c,
        d("StartTimer", timerId="t1", startToFireTimeout="600"),
        d("CancelTimer", timerId="t1"),
        d("SignalExternalWorkflowExecution", workflowId="renews", signalName="hello", input="hi"),
        d("RequestCancelExternalWorkflowExecution", workflowId="renews"),
        d("CancelTimer", timerId="nope"),
        task_list="talks",
    )
    wanted = {"TimerStarted", "TimerCanceled", "ExternalWorkflowExecutionSignaled",
              "ExternalWorkflowExecutionCancelRequested", "CancelTimerFailed"}  # fmt: skip
    seen = await decide_until(c, "talks", wanted)
    assert wanted <= seen
    target = await kinds(c, "renews", info["execution"]["runId"])
    assert "WorkflowExecutionSignaled" in target and "WorkflowExecutionCancelRequested" in target


@pytest.mark.parametrize("policy", ["TERMINATE", "REQUEST_CANCEL", "ABANDON"])
async def test_children_under_each_child_policy(swf: Swf, policy: str) -> None:
    c = await setup(swf)
    parent = await start(c, "parent", childPolicy=policy, taskList={"name": "parents"})
    await decide_next(
        c, d("StartChildWorkflowExecution", workflowType=WF, workflowId="child", childPolicy="TERMINATE"),
        task_list="parents",
    )  # fmt: skip
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "parents"})
    (started,) = [e for e in task["events"] if e["eventType"] == "ChildWorkflowExecutionStarted"]
    child = started["childWorkflowExecutionStartedEventAttributes"]["workflowExecution"]
    assert child["workflowId"] == "child"
    await call(c.terminate_workflow_execution, domain="d", workflowId="parent", reason="ops")
    assert await status(c, "parent", parent) == "TERMINATED"
    child_kinds = lambda: kinds(c, "child", child["runId"])  # noqa: E731
    if policy == "TERMINATE":
        await eventually(lambda: _is(status(c, "child", child["runId"]), "TERMINATED"))
        last = (await events(c, "child", child["runId"]))[-1]
        assert last["workflowExecutionTerminatedEventAttributes"]["cause"] == "CHILD_POLICY_APPLIED"
    elif policy == "REQUEST_CANCEL":
        await eventually(lambda: _has(child_kinds(), "WorkflowExecutionCancelRequested"))
        assert await status(c, "child", child["runId"]) == "OPEN"
    else:  # ABANDON: the child runs on and closes by its own decider
        await decide_next(c, d("CompleteWorkflowExecution", result="done"))
        assert await status(c, "child", child["runId"]) == "COMPLETED"
        assert "WorkflowExecutionCancelRequested" not in await child_kinds()


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def _has(values: Any, item: Any) -> bool:
    return item in await values


async def test_every_timeout_in_bounded_real_time(swf: Swf) -> None:
    c = await setup(swf)
    await register_activity(c, task_timeout="1")
    workflow = await start(c, "w-timeout", executionStartToCloseTimeout="1", taskList={"name": "quiet"})
    decision = await start(c, "d-timeout", taskStartToCloseTimeout="1", taskList={"name": "slow"})
    acts = await start(c, "a-timeout", taskList={"name": "acts"})
    await call(c.poll_for_decision_task, domain="d", taskList={"name": "slow"})  # never answered
    charge = {"name": "Charge", "version": "1"}
    await decide_next(
        c,
        d("ScheduleActivityTask", activityType=charge, activityId="s2s"),
        d("ScheduleActivityTask", activityType=charge, activityId="beat", taskList={"name": "busy"},
          heartbeatTimeout="1", startToCloseTimeout="30", scheduleToStartTimeout="30"),
        d("ScheduleActivityTask", activityType=charge, activityId="slow", taskList={"name": "busy2"},
          heartbeatTimeout="NONE", startToCloseTimeout="1", scheduleToStartTimeout="30"),
        d("ScheduleActivityTask", activityType=charge, activityId="s2c", taskList={"name": "nobody"},
          scheduleToStartTimeout="30", scheduleToCloseTimeout="1"),
        d("StartTimer", timerId="t", startToFireTimeout="1"),
        task_list="acts",
    )  # fmt: skip
    # "beat" and "slow" carry a 30 s schedule-to-start: under the type's 1 s default a loaded
    # machine's polls can arrive after they timed out, and wait for a task that is gone.
    await call(c.poll_for_activity_task, domain="d", taskList={"name": "busy"})  # never answered
    await call(c.poll_for_activity_task, domain="d", taskList={"name": "busy2"})  # never answered
    # Each timeout schedules a decision task (the workflow's closes the execution instead).
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "slow"})
    assert "DecisionTaskTimedOut" in [e["eventType"] for e in task["events"]]
    seen: dict[str, str] = {}
    fired = False
    with trio.fail_after(20):
        while len(seen) < 4 or not fired:
            task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "acts"})
            for e in task["events"]:
                fired = fired or e["eventType"] == "TimerFired"
                if e["eventType"] == "ActivityTaskTimedOut":
                    a = e["activityTaskTimedOutEventAttributes"]
                    seen[str(a["scheduledEventId"])] = a["timeoutType"]
            await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[])
    assert sorted(seen.values()) == ["HEARTBEAT", "SCHEDULE_TO_CLOSE", "SCHEDULE_TO_START", "START_TO_CLOSE"]
    await eventually(lambda: _is(status(c, "w-timeout", workflow), "TIMED_OUT"))
    assert (await kinds(c, "w-timeout", workflow))[-1] == "WorkflowExecutionTimedOut"
    assert await status(c, "d-timeout", decision) == await status(c, "a-timeout", acts) == "OPEN"


async def test_limit_exceeded_fault(swf: Swf, monkeypatch: pytest.MonkeyPatch) -> None:
    from foliot.kinds.swf import registry

    monkeypatch.setattr(registry, "MAX_DOMAINS", 2)
    c = swf.client("ap-south-1")
    await call(c.register_domain, name="one", workflowExecutionRetentionPeriodInDays="1")
    await call(c.register_domain, name="two", workflowExecutionRetentionPeriodInDays="1")
    err = await raises(
        "LimitExceededFault", c.register_domain, name="three", workflowExecutionRetentionPeriodInDays="1"
    )
    assert isinstance(err, c.exceptions.LimitExceededFault)
    listed = await call(c.list_domains, registrationStatus="REGISTERED")
    assert [x["name"] for x in listed["domainInfos"]] == ["one", "two"]
