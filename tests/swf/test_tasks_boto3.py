"""Decision and activity tasks through a real boto3 client against a live Foliot, on both
stores: a decider and a worker complete an execution; a waiting poll is woken at once by a new
task; a decision task's events come in pages; heartbeats learn of a cancel request; tokens that
are not ours, or of another kind, are refused and change nothing."""

from __future__ import annotations

from typing import Any

import trio

from .conftest import Swf, call, raises
from .test_write_boto3 import WF, history, setup


async def register_activity(c: Any, task_timeout: str = "300") -> None:
    await call(
        c.register_activity_type,
        domain="d",
        name="Charge",
        version="1",
        defaultTaskStartToCloseTimeout=task_timeout,
        defaultTaskHeartbeatTimeout="NONE",
        defaultTaskList={"name": "workers"},
        defaultTaskScheduleToStartTimeout=task_timeout,
        defaultTaskScheduleToCloseTimeout="NONE",
    )


def schedule(activity_id: str) -> dict[str, Any]:
    return {
        "decisionType": "ScheduleActivityTask",
        "scheduleActivityTaskDecisionAttributes": {
            "activityType": {"name": "Charge", "version": "1"},
            "activityId": activity_id,
            "input": "amount=5",
        },
    }


async def test_a_decider_and_a_worker_complete_an_execution(swf: Swf) -> None:
    c = await setup(swf)
    await register_activity(c)
    run_id = (
        await call(c.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF, input="in")
    )["runId"]

    task = await call(
        c.poll_for_decision_task, domain="d", taskList={"name": "deciders"}, identity="decider-1"
    )
    assert task["workflowExecution"] == {"workflowId": "o-1", "runId": run_id}
    assert [e["eventType"] for e in task["events"]] == [
        "WorkflowExecutionStarted",
        "DecisionTaskScheduled",
        "DecisionTaskStarted",
    ]
    assert task["startedEventId"] == 3 and task["previousStartedEventId"] == 0
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[schedule("a1")])
    # A token is good for one answer: the task is closed now.
    await raises("UnknownResourceFault", c.respond_decision_task_completed, taskToken=task["taskToken"])

    work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"}, identity="worker-1")
    assert work["activityId"] == "a1" and work["input"] == "amount=5"
    assert work["activityType"] == {"name": "Charge", "version": "1"}
    beat = await call(c.record_activity_task_heartbeat, taskToken=work["taskToken"], details="half")
    assert beat["cancelRequested"] is False
    await raises("ValidationException", c.respond_decision_task_completed, taskToken=work["taskToken"])
    await call(c.respond_activity_task_completed, taskToken=work["taskToken"], result="charged")

    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    assert task["previousStartedEventId"] == 3
    complete = {
        "decisionType": "CompleteWorkflowExecution",
        "completeWorkflowExecutionDecisionAttributes": {"result": "done"},
    }
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[complete])

    out = await call(
        c.get_workflow_execution_history, domain="d", execution={"workflowId": "o-1", "runId": run_id}
    )
    events = out["events"]
    assert [e["eventType"] for e in events] == [
        "WorkflowExecutionStarted",
        "DecisionTaskScheduled",
        "DecisionTaskStarted",
        "DecisionTaskCompleted",
        "ActivityTaskScheduled",
        "ActivityTaskStarted",
        "ActivityTaskCompleted",
        "DecisionTaskScheduled",
        "DecisionTaskStarted",
        "DecisionTaskCompleted",
        "WorkflowExecutionCompleted",
    ]
    assert [e["eventId"] for e in events] == list(range(1, 12))
    assert events[3]["decisionTaskCompletedEventAttributes"] == {"scheduledEventId": 2, "startedEventId": 3}
    assert events[4]["activityTaskScheduledEventAttributes"]["decisionTaskCompletedEventId"] == 4
    assert events[5]["activityTaskStartedEventAttributes"] == {"scheduledEventId": 5, "identity": "worker-1"}
    completed = events[6]["activityTaskCompletedEventAttributes"]
    assert completed == {"scheduledEventId": 5, "startedEventId": 6, "result": "charged"}
    assert events[10]["workflowExecutionCompletedEventAttributes"] == {
        "result": "done",
        "decisionTaskCompletedEventId": 10,
    }
    described = await call(
        c.describe_workflow_execution, domain="d", execution={"workflowId": "o-1", "runId": run_id}
    )
    assert described["executionInfo"]["closeStatus"] == "COMPLETED"


async def test_the_next_decision_task_is_recorded_at_once_and_handed_out_after_the_started_one(
    swf: Swf,
) -> None:
    """Issue 26, point 14: as AWS records it, `DecisionTaskStarted, ActivityTaskCompleted,
    DecisionTaskScheduled, DecisionTaskCompleted`; the task is pending only after the
    completion."""
    c = await setup(swf)
    await register_activity(c)
    execution = {"workflowId": "o-14", "runId": ""}
    execution["runId"] = (
        await call(c.start_workflow_execution, domain="d", workflowId="o-14", workflowType=WF)
    )["runId"]
    deciders = {"domain": "d", "taskList": {"name": "deciders"}}
    task = await call(c.poll_for_decision_task, **deciders)
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[schedule("a1")])
    work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"})
    await call(c.signal_workflow_execution, domain="d", workflowId="o-14", signalName="go")
    task = await call(c.poll_for_decision_task, **deciders)
    await call(c.respond_activity_task_completed, taskToken=work["taskToken"], result="ok")
    assert (await history(c, "o-14", execution["runId"]))[-3:] == [
        "DecisionTaskStarted",
        "ActivityTaskCompleted",
        "DecisionTaskScheduled",
    ]
    assert (await call(c.count_pending_decision_tasks, **deciders))["count"] == 0  # held back
    described = await call(c.describe_workflow_execution, domain="d", execution=execution)
    assert described["openCounts"]["openDecisionTasks"] == 1
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[])
    events = await history(c, "o-14", execution["runId"])
    assert events[-4:] == [
        "DecisionTaskStarted",
        "ActivityTaskCompleted",
        "DecisionTaskScheduled",
        "DecisionTaskCompleted",
    ]
    assert (await call(c.count_pending_decision_tasks, **deciders))["count"] == 1
    task = await call(c.poll_for_decision_task, **deciders)
    assert task["previousStartedEventId"] == 9  # the started task's DecisionTaskStarted
    started = task["events"][-1]
    assert started["eventType"] == "DecisionTaskStarted"
    assert started["decisionTaskStartedEventAttributes"]["scheduledEventId"] == 11  # the held one


async def test_a_waiting_poll_is_woken_at_once_by_a_new_task(swf: Swf) -> None:
    c = await setup(swf)
    got: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:

        async def poll() -> None:
            got.append(await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"}))

        nursery.start_soon(poll)
        await trio.sleep(0.5)  # the poll is parked on the task list by now (nothing to wait on)
        assert got == []
        started = trio.current_time()
        await call(c.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF)
    assert got[0]["workflowExecution"]["workflowId"] == "o-1"
    assert trio.current_time() - started < 20  # woken by the offer, not by the 60 s poll's end


async def test_a_decision_task_comes_in_pages_in_either_order(swf: Swf) -> None:
    c = await setup(swf)
    run_id = (await call(c.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF))["runId"]
    for n in range(3):
        await call(c.signal_workflow_execution, domain="d", workflowId="o-1", signalName=f"s{n}")
    token = ""
    for reverse in (False, True):
        if reverse:  # the first round's task is answered, so a signal schedules the next one
            await call(c.respond_decision_task_completed, taskToken=token, decisions=[])
            await call(c.signal_workflow_execution, domain="d", workflowId="o-1", signalName="again")
        pages = [
            await call(
                c.poll_for_decision_task,
                domain="d",
                taskList={"name": "deciders"},
                maximumPageSize=2,
                reverseOrder=reverse,
            )
        ]
        token = pages[0]["taskToken"]
        while "nextPageToken" in pages[-1]:
            pages.append(
                await call(
                    c.poll_for_decision_task,
                    domain="d",
                    taskList={"name": "deciders"},
                    maximumPageSize=2,
                    reverseOrder=reverse,
                    nextPageToken=pages[-1]["nextPageToken"],
                )
            )
        assert all(p["taskToken"] == token for p in pages) and all(len(p["events"]) <= 2 for p in pages)
        ids = [e["eventId"] for p in pages for e in p["events"]]
        started = pages[0]["startedEventId"]
        assert ids == (list(range(started, 0, -1)) if reverse else list(range(1, started + 1)))
    assert (await history(c, "o-1", run_id)).count("WorkflowExecutionSignaled") == 4


async def test_a_heartbeat_learns_of_a_cancel_request(swf: Swf) -> None:
    c = await setup(swf)
    await register_activity(c)
    await call(c.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF)
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[schedule("a1")])
    work = await call(c.poll_for_activity_task, domain="d", taskList={"name": "workers"})
    cancel = {
        "decisionType": "RequestCancelActivityTask",
        "requestCancelActivityTaskDecisionAttributes": {"activityId": "a1"},
    }
    # The activity's start scheduled no decision task; a signal gives the decider one.
    await call(c.signal_workflow_execution, domain="d", workflowId="o-1", signalName="stop")
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    await call(c.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[cancel])
    beat = await call(c.record_activity_task_heartbeat, taskToken=work["taskToken"])
    assert beat["cancelRequested"] is True
    await call(c.respond_activity_task_canceled, taskToken=work["taskToken"], details="stopped")
    events = await history(c, "o-1", task["workflowExecution"]["runId"])
    assert events[-2:] == ["ActivityTaskCanceled", "DecisionTaskScheduled"]


async def test_tokens_not_ours_are_refused(swf: Swf) -> None:
    c = await setup(swf)
    await register_activity(c)
    run_id = (await call(c.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF))["runId"]
    for fn in (
        c.respond_decision_task_completed,
        c.respond_activity_task_completed,
        c.record_activity_task_heartbeat,
        c.respond_activity_task_failed,
        c.respond_activity_task_canceled,
    ):
        await raises("ValidationException", fn, taskToken="not-a-token")
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    other = swf.client("eu-west-1")
    await raises("ValidationException", other.respond_decision_task_completed, taskToken=task["taskToken"])
    assert await history(c, "o-1", run_id) == [
        "WorkflowExecutionStarted",
        "DecisionTaskScheduled",
        "DecisionTaskStarted",
    ]


async def test_a_poll_knows_the_domain_in_its_own_region_only(swf: Swf) -> None:
    """A poll checks its domain once per region and domain (domains are never deleted): an
    unknown domain is refused every time, and knowing `d` in one region says nothing of another."""
    c = await setup(swf)
    other = swf.client("eu-west-1")
    for _ in range(2):
        await raises("UnknownResourceFault", c.poll_for_activity_task, domain="nope", taskList={"name": "w"})
    await call(c.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF)
    task = await call(c.poll_for_decision_task, domain="d", taskList={"name": "deciders"})
    assert task["workflowExecution"]["workflowId"] == "o-1"
    deciders = {"name": "deciders"}
    await raises("UnknownResourceFault", other.poll_for_decision_task, domain="d", taskList=deciders)
    await raises("UnknownResourceFault", other.poll_for_decision_task, domain="d", taskList=deciders)
