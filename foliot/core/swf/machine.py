"""The SWF execution machine: `start(...)` and `transition(execution, message, ctx)`.

Pure: no I/O, no clock (the time is `ctx.now`), no randomness (ids come in through `ctx` and
the messages). A transition returns a `messages.Transition` — the new document, the history
events to append (ids continue from `Execution.last_event_id`), effects to perform after
committing, and a reply — or a `faults.Fault` when the message cannot apply (an unknown or
closed task, a closed execution, a decision batch that fails validation); the execution is
then unchanged and the runtime answers the fault.

Invariants every transition keeps: event ids are contiguous from 1; at most one decision task
is handed out (scheduled or started), and while it is started at most one more is scheduled and
held back (`Execution.next_decision`); a closed execution accepts nothing (a `Fire` for it is a stale no-op).

The messages, effects and replies are documented in `messages.py`; the deadline keys in
`timeouts.py`; the decision batch validation in `decisions.py`; history queries in
`history.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from . import messages as m
from .apply import Batch, apply_decision
from .builder import Builder
from .decisions import Duration, Invalid, Str, TaskListMember, check_member, parse_decisions
from .faults import Fault, unknown
from .model import Activity, Execution, External
from .start import start, start_failure_cause
from .timeouts import deadlines, parse_key

__all__ = ["start", "start_failure_cause", "transition"]


def transition(ex: Execution, msg: m.Message, ctx: m.Context) -> m.Transition | Fault:
    """Apply one message to an execution."""
    if not ex.is_open:
        if isinstance(msg, m.Fire):
            return m.Transition(ex)
        return unknown(
            f"Unknown execution: WorkflowExecution=[workflowId={ex.workflow_id}, runId={ex.run_id}]"
        )
    handler: Callable[[Execution, Any, m.Context], m.Transition | Fault] = _HANDLERS[type(msg)]
    return handler(ex, msg, ctx)


# --------------------------------------------------------------------------- decision tasks


def _unknown_decision_task(scheduled_event_id: int) -> Fault:
    return unknown(f"Unknown decision task, scheduledEventId = {scheduled_event_id}")


def _poll_decision(ex: Execution, msg: m.PollDecision, ctx: m.Context) -> m.Transition | Fault:
    task = ex.decision
    if task is None or task.scheduled_event_id != msg.scheduled_event_id or task.started_event_id is not None:
        return _unknown_decision_task(msg.scheduled_event_id)
    b = Builder(ex, ex, ctx.now)
    started = b.add("DecisionTaskStarted", identity=msg.identity, scheduledEventId=task.scheduled_event_id)
    b.evolve(decision=attrs.evolve(task, started_event_id=started, started_at=ctx.now))
    return b.finish(m.DecisionTaskClaimed(task.scheduled_event_id, started, ex.previous_started_event_id))


def _complete_decision(ex: Execution, msg: m.CompleteDecision, ctx: m.Context) -> m.Transition | Fault:
    task = ex.decision
    if task is None or task.scheduled_event_id != msg.scheduled_event_id or task.started_event_id is None:
        return _unknown_decision_task(msg.scheduled_event_id)
    decisions = parse_decisions(msg.decisions)
    if isinstance(decisions, Fault):
        return decisions
    try:
        if msg.execution_context is not None:
            check_member("executionContext", Str(0, 32768), msg.execution_context)
        if msg.task_list is not None:
            check_member("taskList.name", TaskListMember(), {"name": msg.task_list})
        if msg.task_list_schedule_to_start_timeout is not None:
            check_member(
                "taskListScheduleToStartTimeout", Duration(), msg.task_list_schedule_to_start_timeout
            )
    except Invalid as exc:
        return exc.fault
    b = Builder(ex, ex, ctx.now)
    unhandled = ex.next_decision is not None or ex.decision_needed
    completed = b.add(
        "DecisionTaskCompleted",
        executionContext=msg.execution_context,
        scheduledEventId=task.scheduled_event_id,
        startedEventId=task.started_event_id,
        taskList={"name": msg.task_list} if msg.task_list is not None else None,
        taskListScheduleToStartTimeout=msg.task_list_schedule_to_start_timeout,
    )
    changes: dict[str, Any] = {
        **b.promote_next_decision(),
        "previous_started_event_id": task.started_event_id,
    }
    if ex.next_decision is not None:
        changes["decision_needed"] = False
    if msg.execution_context is not None:
        changes["latest_execution_context"] = msg.execution_context
    if msg.task_list is not None:
        changes["decision_task_list"] = msg.task_list
        changes["decision_schedule_to_start_timeout"] = msg.task_list_schedule_to_start_timeout
    b.evolve(**changes)
    b.in_batch = True
    batch = Batch(completed, unhandled, ctx)
    for decision in decisions:
        apply_decision(b, decision, batch)
        if not b.ex.is_open:
            break
    b.in_batch = False
    if b.ex.is_open and b.ex.decision is None and b.ex.decision_needed:
        b.schedule_decision()
    return b.finish()


# --------------------------------------------------------------------------- activity tasks


def _started_activity(ex: Execution, scheduled_event_id: int) -> Activity | Fault:
    act = ex.activity_by_scheduled(scheduled_event_id)
    if act is None or act.started_event_id is None:
        return unknown(f"Unknown activity, scheduledEventId = {scheduled_event_id}")
    return act


def _poll_activity(ex: Execution, msg: m.PollActivity, ctx: m.Context) -> m.Transition | Fault:
    act = ex.activity_by_scheduled(msg.scheduled_event_id)
    if act is None or act.started_event_id is not None:
        return unknown(f"Unknown activity, scheduledEventId = {msg.scheduled_event_id}")
    b = Builder(ex, ex, ctx.now)
    started = b.add("ActivityTaskStarted", identity=msg.identity, scheduledEventId=act.scheduled_event_id)
    updated = attrs.evolve(act, started_event_id=started, started_at=ctx.now, identity=msg.identity)
    b.evolve(activities=tuple(updated if a is act else a for a in ex.activities))
    claimed = m.ActivityTaskClaimed(
        act.scheduled_event_id, started, act.activity_id, act.activity_type, act.input
    )
    return b.finish(claimed)


def _close_activity(
    ex: Execution, scheduled_event_id: int, now: int, event_type: str, **attributes: Any
) -> m.Transition | Fault:
    act = _started_activity(ex, scheduled_event_id)
    if isinstance(act, Fault):
        return act
    b = Builder(ex, ex, now)
    b.evolve(activities=tuple(a for a in ex.activities if a is not act))
    b.add(
        event_type, scheduledEventId=act.scheduled_event_id, startedEventId=act.started_event_id, **attributes
    )
    return b.finish()


def _complete_activity(ex: Execution, msg: m.CompleteActivity, ctx: m.Context) -> m.Transition | Fault:
    return _close_activity(ex, msg.scheduled_event_id, ctx.now, "ActivityTaskCompleted", result=msg.result)


def _fail_activity(ex: Execution, msg: m.FailActivity, ctx: m.Context) -> m.Transition | Fault:
    return _close_activity(
        ex, msg.scheduled_event_id, ctx.now, "ActivityTaskFailed", reason=msg.reason, details=msg.details
    )


def _cancel_activity(ex: Execution, msg: m.CancelActivity, ctx: m.Context) -> m.Transition | Fault:
    act = ex.activity_by_scheduled(msg.scheduled_event_id)
    latest = act.cancel_requested_event_id if act is not None else None
    return _close_activity(
        ex,
        msg.scheduled_event_id,
        ctx.now,
        "ActivityTaskCanceled",
        details=msg.details,
        latestCancelRequestedEventId=latest,
    )


def _heartbeat(ex: Execution, msg: m.Heartbeat, ctx: m.Context) -> m.Transition | Fault:
    act = _started_activity(ex, msg.scheduled_event_id)
    if isinstance(act, Fault):
        return act
    b = Builder(ex, ex, ctx.now)
    details = msg.details if msg.details is not None else act.heartbeat_details
    updated = attrs.evolve(act, last_heartbeat_at=ctx.now, heartbeat_details=details)
    b.evolve(activities=tuple(updated if a is act else a for a in ex.activities))
    return b.finish(m.HeartbeatAnswer(act.cancel_requested_event_id is not None))


# --------------------------------------------------------------------------- from outside


def _signal(ex: Execution, msg: m.Signal, ctx: m.Context) -> m.Transition | Fault:
    b = Builder(ex, ex, ctx.now)
    b.add(
        "WorkflowExecutionSignaled",
        signalName=msg.signal_name,
        input=msg.input,
        externalWorkflowExecution=msg.external.to_aws() if msg.external is not None else None,
        # 0 when it came through the API (not from another execution's decision), as AWS sends it.
        externalInitiatedEventId=msg.external_initiated_event_id or 0,
    )
    return b.finish()


def _request_cancel(ex: Execution, msg: m.RequestCancel, ctx: m.Context) -> m.Transition | Fault:
    b = Builder(ex, ex, ctx.now)
    b.evolve(cancel_requested=True)
    b.add(
        "WorkflowExecutionCancelRequested",
        externalWorkflowExecution=msg.external.to_aws() if msg.external is not None else None,
        externalInitiatedEventId=msg.external_initiated_event_id or 0,
        cause=msg.cause,
    )
    return b.finish()


def _terminate(ex: Execution, msg: m.Terminate, ctx: m.Context) -> m.Transition | Fault:
    b = Builder(ex, ex, ctx.now)
    policy = msg.child_policy or ex.config.child_policy
    b.add(
        "WorkflowExecutionTerminated",
        reason=msg.reason,
        details=msg.details,
        childPolicy=policy,
        cause=msg.cause,
    )
    b.close("TERMINATED", policy, reason=msg.reason, details=msg.details)
    return b.finish()


# --------------------------------------------------------------------------- time


def _fire(ex: Execution, msg: m.Fire, ctx: m.Context) -> m.Transition | Fault:
    due = deadlines(ex).get(msg.key)
    parsed = parse_key(msg.key)
    if due is None or due > ctx.now or parsed is None:
        return m.Transition(ex)  # stale: resolved, re-armed later, or never armed
    kind, event_id, timeout_type = parsed
    b = Builder(ex, ex, ctx.now)
    if kind == "workflow":
        b.add("WorkflowExecutionTimedOut", timeoutType=timeout_type, childPolicy=ex.config.child_policy)
        b.close("TIMED_OUT", ex.config.child_policy, timeout_type=timeout_type)
    elif kind == "decision":
        task = ex.decision
        assert task is not None
        changes: dict[str, Any] = b.promote_next_decision()
        if ex.decision_schedule_to_start_timeout is not None:
            # A temporary task-list override whose task timed out is reverted: the next
            # decision task goes to the execution's own task list.
            changes.update(decision_task_list=None, decision_schedule_to_start_timeout=None)
        b.evolve(**changes)
        b.add(
            "DecisionTaskTimedOut",
            timeoutType=timeout_type,
            scheduledEventId=task.scheduled_event_id,
            startedEventId=task.started_event_id or 0,
        )
    elif kind == "activity":
        act = ex.activity_by_scheduled(event_id)
        assert act is not None
        b.evolve(activities=tuple(a for a in ex.activities if a is not act))
        b.add(
            "ActivityTaskTimedOut",
            timeoutType=timeout_type,
            scheduledEventId=act.scheduled_event_id,
            startedEventId=act.started_event_id or 0,
            details=act.heartbeat_details,
        )
    elif kind == "lambda":
        fn = ex.lambda_call(event_id)
        assert fn is not None
        b.evolve(lambdas=tuple(f for f in ex.lambdas if f is not fn))
        b.add(
            "LambdaFunctionTimedOut",
            scheduledEventId=fn.scheduled_event_id,
            startedEventId=fn.started_event_id,
            timeoutType=timeout_type,
        )
    else:
        timer = next(t for t in ex.timers if t.started_event_id == event_id)
        b.evolve(timers=tuple(t for t in ex.timers if t is not timer))
        b.add("TimerFired", timerId=timer.timer_id, startedEventId=timer.started_event_id)
    return b.finish()


# --------------------------------------------------------------------------- answers to effects


def _unknown_child(initiated_event_id: int) -> Fault:
    return unknown(f"Unknown child workflow execution, initiatedEventId = {initiated_event_id}")


def _child_started(ex: Execution, msg: m.ChildStarted, ctx: m.Context) -> m.Transition | Fault:
    child = ex.child(msg.initiated_event_id)
    if child is None or child.started_event_id is not None:
        return _unknown_child(msg.initiated_event_id)
    b = Builder(ex, ex, ctx.now)
    _record_child_started(b, msg.initiated_event_id, msg.run_id)
    return b.finish()


def _record_child_started(b: Builder, initiated_event_id: int, run_id: str) -> None:
    child = b.ex.child(initiated_event_id)
    assert child is not None
    started = b.add(
        "ChildWorkflowExecutionStarted",
        workflowExecution={"workflowId": child.workflow_id, "runId": run_id},
        workflowType=child.workflow_type.to_aws(),
        initiatedEventId=initiated_event_id,
    )
    updated = attrs.evolve(child, run_id=run_id, started_event_id=started)
    b.evolve(children=tuple(updated if c is child else c for c in b.ex.children))


def _child_start_failed(ex: Execution, msg: m.ChildStartFailed, ctx: m.Context) -> m.Transition | Fault:
    child = ex.child(msg.initiated_event_id)
    if child is None or child.started_event_id is not None:
        return _unknown_child(msg.initiated_event_id)
    b = Builder(ex, ex, ctx.now)
    b.evolve(children=tuple(c for c in ex.children if c is not child))
    b.add(
        "StartChildWorkflowExecutionFailed",
        workflowType=child.workflow_type.to_aws(),
        cause=msg.cause,
        workflowId=child.workflow_id,
        initiatedEventId=child.initiated_event_id,
        decisionTaskCompletedEventId=child.decision_task_completed_event_id,
        control=child.control,
    )
    return b.finish()


_CHILD_EVENTS: Final = {
    "COMPLETED": "ChildWorkflowExecutionCompleted",
    "FAILED": "ChildWorkflowExecutionFailed",
    "CANCELED": "ChildWorkflowExecutionCanceled",
    "TERMINATED": "ChildWorkflowExecutionTerminated",
    "TIMED_OUT": "ChildWorkflowExecutionTimedOut",
}


def _child_closed(ex: Execution, msg: m.ChildClosed, ctx: m.Context) -> m.Transition | Fault:
    child = ex.child(msg.initiated_event_id)
    if child is None or msg.close_status not in _CHILD_EVENTS:
        return _unknown_child(msg.initiated_event_id)
    b = Builder(ex, ex, ctx.now)
    if child.started_event_id is None:  # the start's answer was overtaken: record it first
        _record_child_started(b, child.initiated_event_id, msg.execution.run_id)
        child = b.ex.child(msg.initiated_event_id)
        assert child is not None
    b.evolve(children=tuple(c for c in b.ex.children if c is not child))
    extra: dict[str, Any] = {}
    if msg.close_status == "COMPLETED":
        extra = {"result": msg.result}
    elif msg.close_status == "FAILED":
        extra = {"reason": msg.reason, "details": msg.details}
    elif msg.close_status == "CANCELED":
        extra = {"details": msg.details}
    elif msg.close_status == "TIMED_OUT":
        extra = {"timeoutType": msg.timeout_type or "START_TO_CLOSE"}
    b.add(
        _CHILD_EVENTS[msg.close_status],
        workflowExecution=msg.execution.to_aws(),
        workflowType=child.workflow_type.to_aws(),
        initiatedEventId=child.initiated_event_id,
        startedEventId=child.started_event_id,
        **extra,
    )
    return b.finish()


def _external(ex: Execution, initiated_event_id: int, kind: str) -> External | Fault:
    pending = ex.external(initiated_event_id)
    if pending is None or pending.kind != kind:
        return unknown(f"Unknown external request, initiatedEventId = {initiated_event_id}")
    return pending


def _external_done(
    ex: Execution, initiated_event_id: int, kind: str, now: int, event_type: str, **attributes: Any
) -> m.Transition | Fault:
    pending = _external(ex, initiated_event_id, kind)
    if isinstance(pending, Fault):
        return pending
    b = Builder(ex, ex, now)
    b.evolve(externals=tuple(e for e in ex.externals if e is not pending))
    b.add(event_type, initiatedEventId=initiated_event_id, **attributes)
    return b.finish()


def _external_failed(
    ex: Execution, initiated_event_id: int, kind: str, now: int, event_type: str, cause: str
) -> m.Transition | Fault:
    pending = _external(ex, initiated_event_id, kind)
    if isinstance(pending, Fault):
        return pending
    return _external_done(
        ex,
        initiated_event_id,
        kind,
        now,
        event_type,
        workflowId=pending.workflow_id,
        runId=pending.run_id,
        cause=cause,
        decisionTaskCompletedEventId=pending.decision_task_completed_event_id,
        control=pending.control,
    )


def _external_signaled(ex: Execution, msg: m.ExternalSignaled, ctx: m.Context) -> m.Transition | Fault:
    return _external_done(
        ex,
        msg.initiated_event_id,
        "signal",
        ctx.now,
        "ExternalWorkflowExecutionSignaled",
        workflowExecution=msg.execution.to_aws(),
    )


def _external_signal_failed(
    ex: Execution, msg: m.ExternalSignalFailed, ctx: m.Context
) -> m.Transition | Fault:
    return _external_failed(
        ex, msg.initiated_event_id, "signal", ctx.now, "SignalExternalWorkflowExecutionFailed", msg.cause
    )


def _external_cancel_requested(
    ex: Execution, msg: m.ExternalCancelRequested, ctx: m.Context
) -> m.Transition | Fault:
    return _external_done(
        ex,
        msg.initiated_event_id,
        "cancel",
        ctx.now,
        "ExternalWorkflowExecutionCancelRequested",
        workflowExecution=msg.execution.to_aws(),
    )


def _external_cancel_failed(
    ex: Execution, msg: m.ExternalCancelFailed, ctx: m.Context
) -> m.Transition | Fault:
    return _external_failed(
        ex,
        msg.initiated_event_id,
        "cancel",
        ctx.now,
        "RequestCancelExternalWorkflowExecutionFailed",
        msg.cause,
    )


# --------------------------------------------------------------------------- lambda functions


def _unknown_lambda(scheduled_event_id: int) -> Fault:
    return unknown(f"Unknown lambda function, scheduledEventId = {scheduled_event_id}")


def _lambda_started(ex: Execution, msg: m.LambdaStarted, ctx: m.Context) -> m.Transition | Fault:
    fn = ex.lambda_call(msg.scheduled_event_id)
    if fn is None or fn.started_event_id is not None:
        return _unknown_lambda(msg.scheduled_event_id)
    b = Builder(ex, ex, ctx.now)
    started = b.add("LambdaFunctionStarted", scheduledEventId=fn.scheduled_event_id)
    updated = attrs.evolve(fn, started_event_id=started, started_at=ctx.now)
    b.evolve(lambdas=tuple(updated if f is fn else f for f in ex.lambdas))
    return b.finish()


def _lambda_done(
    ex: Execution, scheduled_event_id: int, now: int, event_type: str, **attributes: Any
) -> m.Transition | Fault:
    fn = ex.lambda_call(scheduled_event_id)
    if fn is None or fn.started_event_id is None:
        return _unknown_lambda(scheduled_event_id)
    b = Builder(ex, ex, now)
    b.evolve(lambdas=tuple(f for f in ex.lambdas if f is not fn))
    b.add(
        event_type, scheduledEventId=fn.scheduled_event_id, startedEventId=fn.started_event_id, **attributes
    )
    return b.finish()


def _lambda_completed(ex: Execution, msg: m.LambdaCompleted, ctx: m.Context) -> m.Transition | Fault:
    return _lambda_done(ex, msg.scheduled_event_id, ctx.now, "LambdaFunctionCompleted", result=msg.result)


def _lambda_failed(ex: Execution, msg: m.LambdaFailed, ctx: m.Context) -> m.Transition | Fault:
    return _lambda_done(
        ex, msg.scheduled_event_id, ctx.now, "LambdaFunctionFailed", reason=msg.reason, details=msg.details
    )


_HANDLERS: Final[dict[type, Callable[[Execution, Any, m.Context], m.Transition | Fault]]] = {
    m.PollDecision: _poll_decision,
    m.CompleteDecision: _complete_decision,
    m.PollActivity: _poll_activity,
    m.CompleteActivity: _complete_activity,
    m.FailActivity: _fail_activity,
    m.CancelActivity: _cancel_activity,
    m.Heartbeat: _heartbeat,
    m.Signal: _signal,
    m.RequestCancel: _request_cancel,
    m.Terminate: _terminate,
    m.Fire: _fire,
    m.ChildStarted: _child_started,
    m.ChildStartFailed: _child_start_failed,
    m.ChildClosed: _child_closed,
    m.ExternalSignaled: _external_signaled,
    m.ExternalSignalFailed: _external_signal_failed,
    m.ExternalCancelRequested: _external_cancel_requested,
    m.ExternalCancelFailed: _external_cancel_failed,
    m.LambdaStarted: _lambda_started,
    m.LambdaCompleted: _lambda_completed,
    m.LambdaFailed: _lambda_failed,
}
