"""Applying validated decisions, in order, to an execution whose decision task just completed.

Each `_apply_*` either records the decision's events (and effects) or its `*Failed` event with
the AWS cause; a failure never stops the batch, and the `*Failed` event asks for a new decision
task (scheduled once the batch is done, see `Builder.in_batch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from . import messages as m
from .builder import Builder, config_attributes, resolve_config
from .decisions import Decision
from .model import (
    DEPRECATED,
    Activity,
    Child,
    Config,
    External,
    LambdaCall,
    Timer,
    TypeRef,
    WorkflowTypeInfo,
)
from .start import start
from .timeouts import LAMBDA_DEFAULT_START_TO_CLOSE, parse_seconds

OPEN_ACTIVITIES_LIMIT: Final = 1000
OPEN_TIMERS_LIMIT: Final = 1000
OPEN_CHILDREN_LIMIT: Final = 1000
OPEN_LAMBDAS_LIMIT: Final = 1000  # as for activities: SWF's open-task quota per execution


@attrs.frozen
class Batch:
    """What every decision of one batch shares."""

    completed_event_id: int  # the DecisionTaskCompleted event
    unhandled: bool  # events arrived while the task was started: closing decisions fail
    ctx: m.Context


def apply_decision(b: Builder, d: Decision, batch: Batch) -> None:
    _APPLIERS[d.type](b, d, batch)


def _type(value: dict[str, str]) -> TypeRef:
    return TypeRef(value["name"], value["version"])


def _schedule_activity(b: Builder, d: Decision, batch: Batch) -> None:
    activity_type = _type(d.get("activityType"))
    activity_id: str = d.get("activityId")

    def fail(cause: str) -> None:
        b.add(
            "ScheduleActivityTaskFailed",
            activityType=activity_type.to_aws(),
            activityId=activity_id,
            cause=cause,
            decisionTaskCompletedEventId=batch.completed_event_id,
        )

    info = batch.ctx.catalog.activity_type(activity_type)
    if info is None:
        return fail("ACTIVITY_TYPE_DOES_NOT_EXIST")
    if info.status == DEPRECATED:
        return fail("ACTIVITY_TYPE_DEPRECATED")
    if b.ex.activity(activity_id) is not None:
        return fail("ACTIVITY_ID_ALREADY_IN_USE")
    if len(b.ex.activities) >= OPEN_ACTIVITIES_LIMIT:
        return fail("OPEN_ACTIVITIES_LIMIT_EXCEEDED")
    task_list = d.get("taskList")["name"] if d.get("taskList") else info.default_task_list
    if task_list is None:
        return fail("DEFAULT_TASK_LIST_UNDEFINED")
    schedule_to_start = d.get("scheduleToStartTimeout") or info.default_task_schedule_to_start_timeout
    if schedule_to_start is None:
        return fail("DEFAULT_SCHEDULE_TO_START_TIMEOUT_UNDEFINED")
    schedule_to_close = d.get("scheduleToCloseTimeout") or info.default_task_schedule_to_close_timeout
    if schedule_to_close is None:
        return fail("DEFAULT_SCHEDULE_TO_CLOSE_TIMEOUT_UNDEFINED")
    start_to_close = d.get("startToCloseTimeout") or info.default_task_start_to_close_timeout
    if start_to_close is None:
        return fail("DEFAULT_START_TO_CLOSE_TIMEOUT_UNDEFINED")
    heartbeat = d.get("heartbeatTimeout") or info.default_task_heartbeat_timeout
    if heartbeat is None:
        return fail("DEFAULT_HEARTBEAT_TIMEOUT_UNDEFINED")
    priority = d.get("taskPriority") if d.get("taskPriority") is not None else info.default_task_priority
    event_id = b.add(
        "ActivityTaskScheduled",
        activityType=activity_type.to_aws(),
        activityId=activity_id,
        input=d.get("input"),
        control=d.get("control"),
        scheduleToStartTimeout=schedule_to_start,
        scheduleToCloseTimeout=schedule_to_close,
        startToCloseTimeout=start_to_close,
        taskList={"name": task_list},
        taskPriority=priority,
        decisionTaskCompletedEventId=batch.completed_event_id,
        heartbeatTimeout=heartbeat,
    )
    activity = Activity(
        activity_id=activity_id,
        activity_type=activity_type,
        scheduled_event_id=event_id,
        task_list=task_list,
        schedule_to_start_timeout=schedule_to_start,
        schedule_to_close_timeout=schedule_to_close,
        start_to_close_timeout=start_to_close,
        heartbeat_timeout=heartbeat,
        scheduled_at=b.now,
        input=d.get("input"),
        control=d.get("control"),
        task_priority=priority,
    )
    b.evolve(activities=(*b.ex.activities, activity), latest_activity_task_at=b.now)


def _request_cancel_activity(b: Builder, d: Decision, batch: Batch) -> None:
    activity_id: str = d.get("activityId")
    act = b.ex.activity(activity_id)
    if act is None:
        b.add(
            "RequestCancelActivityTaskFailed",
            activityId=activity_id,
            cause="ACTIVITY_ID_UNKNOWN",
            decisionTaskCompletedEventId=batch.completed_event_id,
        )
        return
    requested = b.add(
        "ActivityTaskCancelRequested",
        decisionTaskCompletedEventId=batch.completed_event_id,
        activityId=activity_id,
    )
    if act.started_event_id is None:
        # Not handed to a worker yet: canceled at once.
        b.evolve(activities=tuple(a for a in b.ex.activities if a is not act))
        b.add(
            "ActivityTaskCanceled",
            scheduledEventId=act.scheduled_event_id,
            startedEventId=0,
            latestCancelRequestedEventId=requested,
        )
    else:
        updated = attrs.evolve(act, cancel_requested_event_id=requested)
        b.evolve(activities=tuple(updated if a is act else a for a in b.ex.activities))


def _closing_refused(b: Builder, d: Decision, batch: Batch) -> bool:
    if not batch.unhandled:
        return False
    b.add(
        d.type + "Failed", cause="UNHANDLED_DECISION", decisionTaskCompletedEventId=batch.completed_event_id
    )
    return True


# decision -> (event, close status, members the event and the parent's notice carry)
_CLOSES: Final = {
    "CompleteWorkflowExecution": ("WorkflowExecutionCompleted", "COMPLETED", ("result",)),
    "FailWorkflowExecution": ("WorkflowExecutionFailed", "FAILED", ("reason", "details")),
    "CancelWorkflowExecution": ("WorkflowExecutionCanceled", "CANCELED", ("details",)),
}


def _close_execution(b: Builder, d: Decision, batch: Batch) -> None:
    if _closing_refused(b, d, batch):
        return
    event, status, members = _CLOSES[d.type]
    carried = {name: d.get(name) for name in members}
    b.add(event, decisionTaskCompletedEventId=batch.completed_event_id, **carried)
    b.close(status, None, **carried)


def _resolve(info: WorkflowTypeInfo, d: Decision) -> Config | str:
    """A child's or continued run's configuration from the decision and the type's defaults."""
    task_list = d.get("taskList")
    return resolve_config(
        info,
        task_list=task_list["name"] if task_list else None,
        execution_start_to_close_timeout=d.get("executionStartToCloseTimeout"),
        task_start_to_close_timeout=d.get("taskStartToCloseTimeout"),
        child_policy=d.get("childPolicy"),
        task_priority=d.get("taskPriority"),
        lambda_role=d.get("lambdaRole"),
    )


def _request(
    b: Builder, d: Decision, workflow_id: str, workflow_type: TypeRef, config: Config, **lineage: Any
) -> m.StartRequest:
    """The start of a child or continued run, every member resolved."""
    return m.StartRequest(
        domain=b.ex.domain,
        workflow_id=workflow_id,
        workflow_type=workflow_type,
        task_list=config.task_list,
        task_priority=config.task_priority,
        input=d.get("input"),
        execution_start_to_close_timeout=config.execution_start_to_close_timeout,
        tag_list=tuple(d.get("tagList") or ()),
        task_start_to_close_timeout=config.task_start_to_close_timeout,
        child_policy=config.child_policy,
        lambda_role=config.lambda_role,
        **lineage,
    )


def _continue_as_new(b: Builder, d: Decision, batch: Batch) -> None:
    if _closing_refused(b, d, batch):
        return
    ex = b.ex
    version = d.get("workflowTypeVersion") or ex.workflow_type.version
    workflow_type = TypeRef(ex.workflow_type.name, version)

    def fail(cause: str) -> None:
        b.add(
            "ContinueAsNewWorkflowExecutionFailed",
            cause=cause,
            decisionTaskCompletedEventId=batch.completed_event_id,
        )

    info = batch.ctx.catalog.workflow_type(workflow_type)
    if info is None:
        return fail("WORKFLOW_TYPE_DOES_NOT_EXIST")
    if info.status == DEPRECATED:
        return fail("WORKFLOW_TYPE_DEPRECATED")
    config = _resolve(info, d)
    if isinstance(config, str):
        return fail(config)
    if not batch.ctx.new_run_id:
        raise ValueError("ContinueAsNewWorkflowExecution needs Context.new_run_id")
    request = _request(
        b,
        d,
        ex.workflow_id,
        workflow_type,
        config,
        parent=ex.parent,
        parent_initiated_event_id=ex.parent_initiated_event_id,
        continued_execution_run_id=ex.run_id,
    )
    # The next run starts exactly as StartWorkflowExecution would; its type was checked and
    # its configuration resolved above, so it cannot be refused.
    successor = start(request, info, batch.ctx.new_run_id, b.now)
    assert isinstance(successor, m.Transition)
    b.add(
        "WorkflowExecutionContinuedAsNew",
        input=d.get("input"),
        decisionTaskCompletedEventId=batch.completed_event_id,
        newExecutionRunId=batch.ctx.new_run_id,
        workflowType=workflow_type.to_aws(),
        **config_attributes(config, request.tag_list),
    )
    b.close("CONTINUED_AS_NEW", None)
    b.effects.append(m.ContinuedAsNew(successor))


def _record_marker(b: Builder, d: Decision, batch: Batch) -> None:
    b.add(
        "MarkerRecorded",
        markerName=d.get("markerName"),
        details=d.get("details"),
        decisionTaskCompletedEventId=batch.completed_event_id,
    )


def _start_timer(b: Builder, d: Decision, batch: Batch) -> None:
    timer_id: str = d.get("timerId")

    def fail(cause: str) -> None:
        b.add(
            "StartTimerFailed",
            timerId=timer_id,
            cause=cause,
            decisionTaskCompletedEventId=batch.completed_event_id,
        )

    if b.ex.timer(timer_id) is not None:
        return fail("TIMER_ID_ALREADY_IN_USE")
    if len(b.ex.timers) >= OPEN_TIMERS_LIMIT:
        return fail("OPEN_TIMERS_LIMIT_EXCEEDED")
    timeout: str = d.get("startToFireTimeout")
    event_id = b.add(
        "TimerStarted",
        timerId=timer_id,
        control=d.get("control"),
        startToFireTimeout=timeout,
        decisionTaskCompletedEventId=batch.completed_event_id,
    )
    seconds = parse_seconds(timeout, allow_none=False)
    assert seconds is not None
    timer = Timer(timer_id, event_id, b.now + seconds * 1000, d.get("control"))
    b.evolve(timers=(*b.ex.timers, timer))


def _cancel_timer(b: Builder, d: Decision, batch: Batch) -> None:
    timer_id: str = d.get("timerId")
    timer = b.ex.timer(timer_id)
    if timer is None:
        b.add(
            "CancelTimerFailed",
            timerId=timer_id,
            cause="TIMER_ID_UNKNOWN",
            decisionTaskCompletedEventId=batch.completed_event_id,
        )
        return
    b.evolve(timers=tuple(t for t in b.ex.timers if t is not timer))
    b.add(
        "TimerCanceled",
        timerId=timer_id,
        startedEventId=timer.started_event_id,
        decisionTaskCompletedEventId=batch.completed_event_id,
    )


def _signal_external(b: Builder, d: Decision, batch: Batch) -> None:
    run_id = d.get("runId") or None
    event_id = b.add(
        "SignalExternalWorkflowExecutionInitiated",
        workflowId=d.get("workflowId"),
        runId=run_id,
        signalName=d.get("signalName"),
        input=d.get("input"),
        decisionTaskCompletedEventId=batch.completed_event_id,
        control=d.get("control"),
    )
    pending = External(
        event_id, "signal", d.get("workflowId"), batch.completed_event_id, run_id, d.get("control")
    )
    b.evolve(externals=(*b.ex.externals, pending))
    b.effects.append(
        m.DeliverSignal(event_id, d.get("workflowId"), run_id, d.get("signalName"), d.get("input"))
    )


def _request_cancel_external(b: Builder, d: Decision, batch: Batch) -> None:
    run_id = d.get("runId") or None
    event_id = b.add(
        "RequestCancelExternalWorkflowExecutionInitiated",
        workflowId=d.get("workflowId"),
        runId=run_id,
        decisionTaskCompletedEventId=batch.completed_event_id,
        control=d.get("control"),
    )
    pending = External(
        event_id, "cancel", d.get("workflowId"), batch.completed_event_id, run_id, d.get("control")
    )
    b.evolve(externals=(*b.ex.externals, pending))
    b.effects.append(m.RequestCancelExternal(event_id, d.get("workflowId"), run_id))


def _start_child(b: Builder, d: Decision, batch: Batch) -> None:
    workflow_type = _type(d.get("workflowType"))
    workflow_id: str = d.get("workflowId")

    def fail(cause: str) -> None:
        b.add(
            "StartChildWorkflowExecutionFailed",
            workflowType=workflow_type.to_aws(),
            cause=cause,
            workflowId=workflow_id,
            initiatedEventId=0,
            decisionTaskCompletedEventId=batch.completed_event_id,
            control=d.get("control"),
        )

    info = batch.ctx.catalog.workflow_type(workflow_type)
    if info is None:
        return fail("WORKFLOW_TYPE_DOES_NOT_EXIST")
    if info.status == DEPRECATED:
        return fail("WORKFLOW_TYPE_DEPRECATED")
    if len(b.ex.children) >= OPEN_CHILDREN_LIMIT:
        return fail("OPEN_CHILDREN_LIMIT_EXCEEDED")
    config = _resolve(info, d)
    if isinstance(config, str):
        return fail(config)
    request = _request(b, d, workflow_id, workflow_type, config, parent=b.ex.ref)
    event_id = b.add(
        "StartChildWorkflowExecutionInitiated",
        workflowId=workflow_id,
        workflowType=workflow_type.to_aws(),
        control=d.get("control"),
        input=d.get("input"),
        decisionTaskCompletedEventId=batch.completed_event_id,
        **config_attributes(config, request.tag_list),
    )
    child = Child(event_id, workflow_id, workflow_type, batch.completed_event_id, d.get("control"))
    b.evolve(children=(*b.ex.children, child))
    request = attrs.evolve(request, parent_initiated_event_id=event_id)
    b.effects.append(m.StartChild(event_id, request))


def _schedule_lambda(b: Builder, d: Decision, batch: Batch) -> None:
    if len(b.ex.lambdas) >= OPEN_LAMBDAS_LIMIT:
        b.add(
            "ScheduleLambdaFunctionFailed",
            id=d.get("id"),
            name=d.get("name"),
            cause="OPEN_LAMBDA_FUNCTIONS_LIMIT_EXCEEDED",
            decisionTaskCompletedEventId=batch.completed_event_id,
        )
        return
    timeout = d.get("startToCloseTimeout") or LAMBDA_DEFAULT_START_TO_CLOSE
    event_id = b.add(
        "LambdaFunctionScheduled",
        id=d.get("id"),
        name=d.get("name"),
        control=d.get("control"),
        input=d.get("input"),
        startToCloseTimeout=timeout,
        decisionTaskCompletedEventId=batch.completed_event_id,
    )
    if b.ex.config.lambda_role is None:
        b.add(
            "StartLambdaFunctionFailed",
            scheduledEventId=event_id,
            cause="ASSUME_ROLE_FAILED",
            message="The workflow execution has no lambdaRole: SWF cannot invoke Lambda functions for it.",
        )
        return
    call = LambdaCall(event_id, d.get("id"), d.get("name"), timeout, b.now)
    b.evolve(lambdas=(*b.ex.lambdas, call))
    payload = d.get("input")
    b.effects.append(
        m.InvokeLambda(event_id, d.get("id"), d.get("name"), "{}" if payload is None else payload, timeout)
    )


_APPLIERS: Final[dict[str, Callable[[Builder, Decision, Batch], None]]] = {
    "ScheduleActivityTask": _schedule_activity,
    "RequestCancelActivityTask": _request_cancel_activity,
    "CompleteWorkflowExecution": _close_execution,
    "FailWorkflowExecution": _close_execution,
    "CancelWorkflowExecution": _close_execution,
    "ContinueAsNewWorkflowExecution": _continue_as_new,
    "RecordMarker": _record_marker,
    "StartTimer": _start_timer,
    "CancelTimer": _cancel_timer,
    "SignalExternalWorkflowExecution": _signal_external,
    "RequestCancelExternalWorkflowExecution": _request_cancel_external,
    "StartChildWorkflowExecution": _start_child,
    "ScheduleLambdaFunction": _schedule_lambda,
}
