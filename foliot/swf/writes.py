"""The SWF write actions that go through an execution's actor: start, signal, request-cancel,
terminate. Each turns the request into one machine message (or a start request), sends it to
the execution's actor, and answers what the committed transition (or the machine's fault) says.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..errors import UniqueViolation
from ..storage.swf import SWF_OPEN_WORKFLOW_UNIQUE
from . import errors
from . import messages as m
from .errors import SwfFault, UnknownResourceFault, WorkflowExecutionAlreadyStartedFault
from .faults import Fault
from .model import TypeRef
from .registry import Action, Ctx, SwfRuntime, domain_of


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
        tr = await _runtime(ctx).swf_start(ctx.region, start_request(body))
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
    tr, _ = await _runtime(ctx).swf_ask(ctx.region, found.execution.run_id, message)
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
