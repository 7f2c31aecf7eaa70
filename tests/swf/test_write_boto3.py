"""The SWF write actions served so far (start, signal, request-cancel, terminate) through a real
boto3 client against a live Foliot, on both stores: each goes through the execution's actor,
and every refusal changes nothing."""

from __future__ import annotations

from typing import Any

from .conftest import Swf, call, raises

WF = {"name": "Order", "version": "1"}


async def register(c: Any, task_timeout: str = "60") -> None:
    """Domain `d`, workflow type Order 1 with every default, Bare 1 with none."""
    await call(c.register_domain, name="d", workflowExecutionRetentionPeriodInDays="30")
    await call(
        c.register_workflow_type,
        domain="d",
        name="Order",
        version="1",
        defaultTaskStartToCloseTimeout=task_timeout,
        defaultExecutionStartToCloseTimeout="3600",
        defaultTaskList={"name": "deciders"},
        defaultChildPolicy="TERMINATE",
    )
    await call(c.register_workflow_type, domain="d", name="Bare", version="1")


async def setup(swf: Swf) -> Any:
    c = swf.client()
    await register(c)
    return c


async def history(c: Any, workflow_id: str, run_id: str) -> list[str]:
    out = await call(
        c.get_workflow_execution_history, domain="d", execution={"workflowId": workflow_id, "runId": run_id}
    )
    return [e["eventType"] for e in out["events"]]


async def open_count(c: Any) -> int:
    out = await call(c.count_open_workflow_executions, domain="d", startTimeFilter={"oldestDate": 0})
    return int(out["count"])


async def test_start_resolves_defaults_and_refuses_what_it_must(swf: Swf) -> None:
    c = await setup(swf)
    started = await call(
        c.start_workflow_execution, domain="d", workflowId="order-1", workflowType=WF, input="x"
    )
    run_id = started["runId"]
    assert len(run_id) == 44
    assert await history(c, "order-1", run_id) == ["WorkflowExecutionStarted", "DecisionTaskScheduled"]
    described = await call(
        c.describe_workflow_execution, domain="d", execution={"workflowId": "order-1", "runId": run_id}
    )
    assert described["executionConfiguration"]["taskList"] == {"name": "deciders"}
    assert described["executionConfiguration"]["executionStartToCloseTimeout"] == "3600"
    pending = await call(c.count_pending_decision_tasks, domain="d", taskList={"name": "deciders"})
    assert pending["count"] == 1

    await raises(
        "WorkflowExecutionAlreadyStartedFault",
        c.start_workflow_execution,
        domain="d",
        workflowId="order-1",
        workflowType=WF,
    )
    await raises(
        "DefaultUndefinedFault",
        c.start_workflow_execution,
        domain="d",
        workflowId="order-2",
        workflowType={"name": "Bare", "version": "1"},
    )
    await raises(
        "UnknownResourceFault",
        c.start_workflow_execution,
        domain="d",
        workflowId="order-3",
        workflowType={"name": "Nope", "version": "1"},
    )
    await raises(
        "UnknownResourceFault", c.start_workflow_execution, domain="nope", workflowId="o", workflowType=WF
    )
    assert await open_count(c) == 1  # nothing else was stored


async def test_signal_request_cancel_and_terminate(swf: Swf) -> None:
    c = await setup(swf)
    run_id = (await call(c.start_workflow_execution, domain="d", workflowId="order-1", workflowType=WF))[
        "runId"
    ]
    await call(c.signal_workflow_execution, domain="d", workflowId="order-1", signalName="go", input="in")
    await call(c.request_cancel_workflow_execution, domain="d", workflowId="order-1", runId=run_id)
    await call(c.terminate_workflow_execution, domain="d", workflowId="order-1", reason="enough", details="d")
    events = await history(c, "order-1", run_id)
    assert events == [
        "WorkflowExecutionStarted",
        "DecisionTaskScheduled",
        "WorkflowExecutionSignaled",
        "WorkflowExecutionCancelRequested",
        "WorkflowExecutionTerminated",
    ]
    out = await call(
        c.get_workflow_execution_history, domain="d", execution={"workflowId": "order-1", "runId": run_id}
    )
    signaled = out["events"][2]["workflowExecutionSignaledEventAttributes"]
    assert signaled["signalName"] == "go" and signaled["input"] == "in"
    terminated = out["events"][4]["workflowExecutionTerminatedEventAttributes"]
    assert terminated["reason"] == "enough" and terminated["cause"] == "OPERATOR_INITIATED"
    assert await open_count(c) == 0

    for fn, extra in (
        (c.signal_workflow_execution, {"signalName": "late"}),
        (c.request_cancel_workflow_execution, {}),
        (c.terminate_workflow_execution, {}),
    ):
        await raises("UnknownResourceFault", fn, domain="d", workflowId="order-1", **extra)
    await raises(
        "UnknownResourceFault", c.signal_workflow_execution, domain="d", workflowId="x", signalName="s"
    )
    assert len(await history(c, "order-1", run_id)) == 5  # nothing appended by the refusals


async def test_zero_ids_are_sent_as_aws_sends_them(swf: Swf) -> None:
    """Issue 26, point 16: `parentInitiatedEventId: 0` in a top-level run's
    `WorkflowExecutionStarted`; `externalInitiatedEventId: 0` in a signal and a cancel request
    sent through the API."""
    c = await setup(swf)
    run_id = (await call(c.start_workflow_execution, domain="d", workflowId="z-1", workflowType=WF))["runId"]
    await call(c.signal_workflow_execution, domain="d", workflowId="z-1", signalName="go")
    await call(c.request_cancel_workflow_execution, domain="d", workflowId="z-1")
    out = await call(
        c.get_workflow_execution_history, domain="d", execution={"workflowId": "z-1", "runId": run_id}
    )
    by_type = {e["eventType"]: e for e in out["events"]}
    started = by_type["WorkflowExecutionStarted"]["workflowExecutionStartedEventAttributes"]
    assert started["parentInitiatedEventId"] == 0 and "parentWorkflowExecution" not in started
    signaled = by_type["WorkflowExecutionSignaled"]["workflowExecutionSignaledEventAttributes"]
    assert signaled == {"signalName": "go", "externalInitiatedEventId": 0}
    cancel = by_type["WorkflowExecutionCancelRequested"]["workflowExecutionCancelRequestedEventAttributes"]
    assert cancel == {"externalInitiatedEventId": 0}
