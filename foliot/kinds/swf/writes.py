"""The SWF write actions, all through an execution's actor: start, signal, request-cancel,
terminate, the decision and activity task polls (60 s long polls on the task list's queue) and
their answers. Each turns the request into one machine message (or a start request), sends it to
the execution's actor, and answers what the committed transition (or the machine's fault) says.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from functools import partial
from typing import Any, Final, NoReturn

import trio

from ...actors.pull import long_poll
from ...core.errors import UniqueViolation
from ...core.swf import errors, history, tokens
from ...core.swf import messages as m
from ...core.swf.errors import SwfFault, UnknownResourceFault, WorkflowExecutionAlreadyStartedFault
from ...core.swf.faults import Fault
from ...core.swf.model import Execution, TypeRef
from ...storage.swf import SWF_OPEN_WORKFLOW_UNIQUE
from .actor import queue_of
from .registry import Action, Ctx, SwfRuntime, domain_exists, domain_of


def raise_fault(fault: Fault) -> NoReturn:
    """The machine's fault as the AWS exception of the same name."""
    cls = getattr(errors, fault.code, None)
    if not (isinstance(cls, type) and issubclass(cls, SwfFault)):
        cls = errors.InternalFailure
    raise cls(fault.message)


def _runtime(ctx: Ctx) -> SwfRuntime:
    assert ctx.runtime is not None, "the write actions need the engine"
    return ctx.runtime


def start_request(body: dict[str, Any]) -> m.StartRequest:
    """StartWorkflowExecution's members (validated against the shapes already)."""
    t = body["workflowType"]
    task_list = body.get("taskList")
    return m.StartRequest(
        domain=body["domain"],
        workflow_id=body["workflowId"],
        workflow_type=TypeRef(t["name"], t["version"]),
        task_list=task_list["name"] if task_list is not None else None,
        task_priority=body.get("taskPriority"),
        input=body.get("input"),
        execution_start_to_close_timeout=body.get("executionStartToCloseTimeout"),
        tag_list=tuple(body.get("tagList") or ()),
        task_start_to_close_timeout=body.get("taskStartToCloseTimeout"),
        child_policy=body.get("childPolicy"),
        lambda_role=body.get("lambdaRole"),
    )


async def start_workflow_execution(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    domain = await domain_of(ctx, body["domain"])
    if domain.status != "REGISTERED":
        raise errors.DomainDeprecatedFault(f"Domain is deprecated: {domain.name}")
    try:
        tr = await _runtime(ctx).start(ctx.region, start_request(body))
    except UniqueViolation as exc:
        if exc.constraint != SWF_OPEN_WORKFLOW_UNIQUE:
            raise
        raise WorkflowExecutionAlreadyStartedFault(
            f"Workflow execution already started: workflowId={body['workflowId']}"
        ) from None
    if isinstance(tr, Fault):
        raise_fault(tr)
    return {"runId": tr.execution.run_id}


async def _to_execution(ctx: Ctx, body: dict[str, Any], message: Any) -> dict[str, Any]:
    """Send `message` to the execution the body names (its open run when no runId)."""
    await domain_of(ctx, body["domain"])
    workflow_id, run_id = body["workflowId"], body.get("runId")
    found = await ctx.store.swf_find(ctx.region, body["domain"], workflow_id, run_id)
    if found is None or not found.execution.is_open:
        run = f", runId={run_id}" if run_id else ""
        raise UnknownResourceFault(f"Unknown execution: WorkflowExecution=[workflowId={workflow_id}{run}]")
    tr, _ = await _runtime(ctx).ask(ctx.region, found.execution.run_id, message)
    if isinstance(tr, Fault):
        raise_fault(tr)
    return {}


async def signal_workflow_execution(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    return await _to_execution(ctx, body, m.Signal(body["signalName"], body.get("input")))


async def request_cancel_workflow_execution(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    return await _to_execution(ctx, body, m.RequestCancel())


async def terminate_workflow_execution(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    message = m.Terminate(body.get("reason"), body.get("details"), body.get("childPolicy"))
    return await _to_execution(ctx, body, message)


ACTIONS: dict[str, Action] = {
    "StartWorkflowExecution": start_workflow_execution,
    "SignalWorkflowExecution": signal_workflow_execution,
    "RequestCancelWorkflowExecution": request_cancel_workflow_execution,
    "TerminateWorkflowExecution": terminate_workflow_execution,
}
"""The write actions served so far, by SWF action name."""


# ---------------------------------------------------------------------- tasks

POLL_SECONDS: Final = 60.0  # SWF's long poll: an empty task after 60 s without work


def _continuation(task_token: str, page_token: str) -> str:
    raw = json.dumps([task_token, page_token], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _read_continuation(text: str) -> tuple[str, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(text.encode("ascii")))
    except (ValueError, UnicodeEncodeError):
        data = None
    if not (isinstance(data, list) and len(data) == 2 and all(isinstance(x, str) for x in data)):
        raise errors.ValidationException("Invalid nextPageToken")
    return data[0], data[1]


def _token(ctx: Ctx, kind: str, ex: Execution, scheduled: int, started: int) -> str:
    task = tokens.TaskToken(kind, ex.run_id, scheduled, started)
    return tokens.encode(_runtime(ctx).token_key(), ctx.region, task)


def _task(ctx: Ctx, text: str, kind: str) -> tokens.TaskToken:
    found = tokens.decode(_runtime(ctx).token_key(), ctx.region, text)
    if isinstance(found, Fault):
        raise_fault(found)
    if found.kind != kind:
        raise_fault(tokens.invalid())
    return found


async def _decision_page(
    ctx: Ctx,
    body: dict[str, Any],
    ex: Execution,
    claimed: m.DecisionTaskClaimed,
    text: str,
    page_token: str | None,
) -> dict[str, Any]:
    """One page of a decision task's events (its whole history up to its DecisionTaskStarted),
    with a `nextPageToken` for the next poll when more follow."""
    started = claimed.started_event_id
    events = await ctx.store.swf_events(ctx.region, ex.run_id, None, False, started + 1)
    window = [e for e in events if e.event_id <= started]
    scope = f"{body['domain']}\x1f{body['taskList']['name']}\x1f{ex.run_id}\x1f{started}"
    page = history.paginate(
        window,
        maximum_page_size=body.get("maximumPageSize"),
        reverse_order=bool(body.get("reverseOrder")),
        next_page_token=page_token,
        scope=scope,
    )
    if isinstance(page, Fault):
        raise_fault(page)
    out = history.decision_task(ex, claimed, page, text)
    if page.next_page_token is not None:
        out["nextPageToken"] = _continuation(text, page.next_page_token)
    return out


async def poll_here(ctx: Ctx, body: dict[str, Any], kind: str, wait_until: float) -> dict[str, Any] | None:
    """A task of `kind` (decision | activity) from this node's queue of the body's task list,
    started and rendered as the poll's answer; None when none came by `wait_until` (Trio time).
    Another node's poll calls this through `/internal/claim` (`foliot.actors.pull`)."""
    got = await _runtime(ctx).poll(
        ctx.region, body["domain"], kind, body["taskList"]["name"], body.get("identity"), wait_until
    )
    if got is None:
        return None
    tr, _ = got
    claimed = tr.reply
    if isinstance(claimed, m.DecisionTaskClaimed):
        text = _token(
            ctx, tokens.DECISION, tr.execution, claimed.scheduled_event_id, claimed.started_event_id
        )
        return await _decision_page(ctx, body, tr.execution, claimed, text, None)
    assert isinstance(claimed, m.ActivityTaskClaimed)
    text = _token(ctx, tokens.ACTIVITY, tr.execution, claimed.scheduled_event_id, claimed.started_event_id)
    return history.activity_task(tr.execution, claimed, text)


async def _poll(ctx: Ctx, body: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """Long-poll the body's task list for a task of `kind`, on every node of a cluster."""
    await domain_exists(ctx, body["domain"])
    runtime = _runtime(ctx)
    key = queue_of(ctx.region, body["domain"], kind, body["taskList"]["name"])
    request = {"kind": "swf", "region": ctx.region, "task": kind, "body": body}
    here = partial(poll_here, ctx, body, kind)
    return await long_poll(runtime.pull, key, trio.current_time() + POLL_SECONDS, here, request)


async def poll_for_decision_task(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    continued = body.get("nextPageToken")
    if continued is not None:
        return await _next_page(ctx, body, continued)
    return await _poll(ctx, body, "decision") or {"startedEventId": 0, "previousStartedEventId": 0}


async def _next_page(ctx: Ctx, body: dict[str, Any], continued: str) -> dict[str, Any]:
    """A poll with `nextPageToken`: the next page of the same decision task's events."""
    await domain_of(ctx, body["domain"])
    text, page_token = _read_continuation(continued)
    task = _task(ctx, text, tokens.DECISION)
    stored = await ctx.store.swf_load(ctx.region, task.run_id)
    if stored is None or stored.execution.domain != body["domain"]:
        raise_fault(tokens.invalid())
    ex = stored.execution
    claimed = m.DecisionTaskClaimed(
        task.scheduled_event_id, task.started_event_id, ex.previous_started_event_id
    )
    return await _decision_page(ctx, body, ex, claimed, text, page_token)


async def poll_for_activity_task(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    return await _poll(ctx, body, "activity") or {"startedEventId": 0}  # AWS's empty task


async def _answer(ctx: Ctx, task: tokens.TaskToken, message: Any) -> m.Transition:
    tr, _ = await _runtime(ctx).ask(ctx.region, task.run_id, message)
    if isinstance(tr, Fault):
        raise_fault(tr)
    return tr


async def respond_decision_task_completed(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    task = _task(ctx, body["taskToken"], tokens.DECISION)
    task_list = body.get("taskList")
    message = m.CompleteDecision(
        task.scheduled_event_id,
        body.get("decisions"),
        body.get("executionContext"),
        task_list["name"] if task_list is not None else None,
        body.get("taskListScheduleToStartTimeout"),
    )
    await _answer(ctx, task, message)
    return {}


def _activity_answer(make: Callable[[int, dict[str, Any]], Any]) -> Action:
    """An activity worker's answer: the task its token names, the message `make` builds."""

    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        task = _task(ctx, body["taskToken"], tokens.ACTIVITY)
        await _answer(ctx, task, make(task.scheduled_event_id, body))
        return {}

    return action


respond_activity_task_completed = _activity_answer(lambda s, b: m.CompleteActivity(s, b.get("result")))
respond_activity_task_failed = _activity_answer(
    lambda s, b: m.FailActivity(s, b.get("reason"), b.get("details"))
)
respond_activity_task_canceled = _activity_answer(lambda s, b: m.CancelActivity(s, b.get("details")))


async def record_activity_task_heartbeat(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    task = _task(ctx, body["taskToken"], tokens.ACTIVITY)
    tr = await _answer(ctx, task, m.Heartbeat(task.scheduled_event_id, body.get("details")))
    assert isinstance(tr.reply, m.HeartbeatAnswer)
    return {"cancelRequested": tr.reply.cancel_requested}


ACTIONS.update(
    {
        "PollForDecisionTask": poll_for_decision_task,
        "RespondDecisionTaskCompleted": respond_decision_task_completed,
        "PollForActivityTask": poll_for_activity_task,
        "RespondActivityTaskCompleted": respond_activity_task_completed,
        "RespondActivityTaskFailed": respond_activity_task_failed,
        "RespondActivityTaskCanceled": respond_activity_task_canceled,
        "RecordActivityTaskHeartbeat": record_activity_task_heartbeat,
    }
)
