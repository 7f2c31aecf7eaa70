"""Starting an execution: StartWorkflowExecution, a child's start, a continued run's start."""

from __future__ import annotations

from typing import Final

from . import messages as m
from .builder import Builder, config_attributes, resolve_config
from .faults import Fault, unknown
from .model import DEPRECATED, Execution, WorkflowTypeInfo

_DEFAULT_MEMBERS: Final = {
    "DEFAULT_EXECUTION_START_TO_CLOSE_TIMEOUT_UNDEFINED": "executionStartToCloseTimeout",
    "DEFAULT_TASK_START_TO_CLOSE_TIMEOUT_UNDEFINED": "taskStartToCloseTimeout",
    "DEFAULT_TASK_LIST_UNDEFINED": "taskList",
    "DEFAULT_CHILD_POLICY_UNDEFINED": "childPolicy",
}


def start(
    request: m.StartRequest, info: WorkflowTypeInfo | None, run_id: str, now: int
) -> m.Transition | Fault:
    """The new execution with `WorkflowExecutionStarted` and its first `DecisionTaskScheduled`,
    or the fault StartWorkflowExecution answers: `UnknownResourceFault` (no such type),
    `TypeDeprecatedFault`, `DefaultUndefinedFault` naming the member neither the request nor
    the type's defaults give. The members' formats are the edge's to validate."""
    t = request.workflow_type
    if info is None:
        return unknown(f"Unknown type: WorkflowType=[name={t.name}, version={t.version}]")
    if info.status == DEPRECATED:
        return Fault("TypeDeprecatedFault", f"WorkflowType=[name={t.name}, version={t.version}]")
    config = resolve_config(
        info,
        task_list=request.task_list,
        execution_start_to_close_timeout=request.execution_start_to_close_timeout,
        task_start_to_close_timeout=request.task_start_to_close_timeout,
        child_policy=request.child_policy,
        task_priority=request.task_priority,
        lambda_role=request.lambda_role,
    )
    if isinstance(config, str):
        member = _DEFAULT_MEMBERS[config]
        return Fault(
            "DefaultUndefinedFault",
            f"{member} is not set in the request and WorkflowType=[name={t.name}, version={t.version}] "
            "has no default for it",
        )
    ex = Execution(
        domain=request.domain,
        workflow_id=request.workflow_id,
        run_id=run_id,
        workflow_type=t,
        config=config,
        started_at=now,
        input=request.input,
        tags=tuple(request.tag_list),
        parent=request.parent,
        parent_initiated_event_id=request.parent_initiated_event_id,
    )
    b = Builder(None, ex, now)
    b.add(
        "WorkflowExecutionStarted",
        input=request.input,
        workflowType=t.to_aws(),
        continuedExecutionRunId=request.continued_execution_run_id,
        parentWorkflowExecution=request.parent.to_aws() if request.parent is not None else None,
        # AWS sends 0 for an execution without a parent (a top-level start, or its next run).
        parentInitiatedEventId=request.parent_initiated_event_id or 0,
        **config_attributes(config, tuple(request.tag_list)),
    )
    return b.finish()


def start_failure_cause(fault: Fault) -> str:
    """The StartChildWorkflowExecutionFailed cause for a child's refused start."""
    if fault.code == "TypeDeprecatedFault":
        return "WORKFLOW_TYPE_DEPRECATED"
    if fault.code == "UnknownResourceFault":
        return "WORKFLOW_TYPE_DOES_NOT_EXIST"
    if fault.code == "WorkflowExecutionAlreadyStartedFault":
        return "WORKFLOW_ALREADY_RUNNING"
    if fault.code == "DefaultUndefinedFault":
        for cause, member in _DEFAULT_MEMBERS.items():
            if fault.message.startswith(member + " "):
                return cause
    return "OPERATION_NOT_PERMITTED"
