"""An SWF workflow execution's document: plain frozen data, JSON-able for storage.

The document holds what the machine needs to decide what comes next: configuration, open
decision task, open activities, timers, children, outstanding requests to other executions
and Lambda invocations. The history itself is not in the document: it only grows, so it lives
in rows (`HistoryEvent`, see `events.py`) and the document keeps the last event id.

Times are integers (epoch milliseconds). Durations are kept as SWF writes them: a string of
whole seconds, or `"NONE"` where SWF allows it (`timeouts.py` reads them).
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import cattrs

OPEN: Final = "OPEN"
CLOSED: Final = "CLOSED"

CLOSE_STATUSES: Final = (
    "COMPLETED",
    "FAILED",
    "CANCELED",
    "TERMINATED",
    "CONTINUED_AS_NEW",
    "TIMED_OUT",
)
CHILD_POLICIES: Final = ("TERMINATE", "REQUEST_CANCEL", "ABANDON")
REGISTERED: Final = "REGISTERED"
DEPRECATED: Final = "DEPRECATED"


@attrs.frozen
class TypeRef:
    """A workflow or activity type: `{name, version}`."""

    name: str
    version: str

    def to_aws(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}


@attrs.frozen
class ExecutionRef:
    """`{workflowId, runId}`."""

    workflow_id: str
    run_id: str

    def to_aws(self) -> dict[str, str]:
        return {"workflowId": self.workflow_id, "runId": self.run_id}


@attrs.frozen
class WorkflowTypeInfo:
    """What the registry knows of a workflow type: its status and registered defaults."""

    type: TypeRef
    status: str = REGISTERED
    default_task_start_to_close_timeout: str | None = None
    default_execution_start_to_close_timeout: str | None = None
    default_task_list: str | None = None
    default_task_priority: str | None = None
    default_child_policy: str | None = None
    default_lambda_role: str | None = None


@attrs.frozen
class ActivityTypeInfo:
    """What the registry knows of an activity type: its status and registered defaults."""

    type: TypeRef
    status: str = REGISTERED
    default_task_start_to_close_timeout: str | None = None
    default_task_heartbeat_timeout: str | None = None
    default_task_list: str | None = None
    default_task_priority: str | None = None
    default_task_schedule_to_start_timeout: str | None = None
    default_task_schedule_to_close_timeout: str | None = None


@attrs.frozen
class Config:
    """The execution's configuration, resolved from the request and the type's defaults
    (`executionConfiguration` of DescribeWorkflowExecution)."""

    task_list: str
    execution_start_to_close_timeout: str  # whole seconds; SWF refuses NONE here
    task_start_to_close_timeout: str  # whole seconds or NONE
    child_policy: str
    task_priority: str | None = None
    lambda_role: str | None = None

    def to_aws(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "taskStartToCloseTimeout": self.task_start_to_close_timeout,
            "executionStartToCloseTimeout": self.execution_start_to_close_timeout,
            "taskList": {"name": self.task_list},
            "childPolicy": self.child_policy,
        }
        if self.task_priority is not None:
            out["taskPriority"] = self.task_priority
        if self.lambda_role is not None:
            out["lambdaRole"] = self.lambda_role
        return out


@attrs.frozen
class DecisionTask:
    """The execution's one open decision task: scheduled, then started by a poll."""

    scheduled_event_id: int
    task_list: str
    start_to_close_timeout: str
    scheduled_at: int
    schedule_to_start_timeout: str | None = None  # only with a sticky task-list override
    started_event_id: int | None = None
    started_at: int | None = None


@attrs.frozen
class Activity:
    """One open activity task, keyed in the execution by `activity_id`."""

    activity_id: str
    activity_type: TypeRef
    scheduled_event_id: int
    task_list: str
    schedule_to_start_timeout: str
    schedule_to_close_timeout: str
    start_to_close_timeout: str
    heartbeat_timeout: str
    scheduled_at: int
    input: str | None = None
    control: str | None = None
    task_priority: str | None = None
    started_event_id: int | None = None
    started_at: int | None = None
    identity: str | None = None
    last_heartbeat_at: int | None = None
    heartbeat_details: str | None = None
    cancel_requested_event_id: int | None = None


@attrs.frozen
class Timer:
    timer_id: str
    started_event_id: int
    fire_at: int
    control: str | None = None


@attrs.frozen
class Child:
    """A child execution this one initiated; `run_id` is known once it started."""

    initiated_event_id: int
    workflow_id: str
    workflow_type: TypeRef
    decision_task_completed_event_id: int
    control: str | None = None
    run_id: str | None = None
    started_event_id: int | None = None


@attrs.frozen
class External:
    """A signal or cancel request sent to another execution, awaiting its answer."""

    initiated_event_id: int
    kind: str  # signal | cancel
    workflow_id: str
    decision_task_completed_event_id: int
    run_id: str | None = None
    control: str | None = None


@attrs.frozen
class LambdaCall:
    """One scheduled Lambda function invocation, keyed by its scheduled event id."""

    scheduled_event_id: int
    id: str
    name: str
    start_to_close_timeout: str
    scheduled_at: int
    started_event_id: int | None = None
    started_at: int | None = None


@attrs.frozen
class Execution:
    """One SWF workflow execution (one run of a workflow id)."""

    domain: str
    workflow_id: str
    run_id: str
    workflow_type: TypeRef
    config: Config
    started_at: int
    input: str | None = None
    tags: tuple[str, ...] = ()
    status: str = OPEN
    close_status: str | None = None
    closed_at: int | None = None
    parent: ExecutionRef | None = None
    parent_initiated_event_id: int | None = None
    last_event_id: int = 0
    decision: DecisionTask | None = None
    # The decision task scheduled (its DecisionTaskScheduled recorded at once, as AWS does)
    # because events arrived while `decision` was started: handed to its task list only once
    # the started one completes or times out; a closing decision in the started task's batch
    # fails with UNHANDLED_DECISION.
    next_decision: DecisionTask | None = None
    # Set while a decision batch is applied, when an event of the batch asks the decider
    # something: one decision task is scheduled after the batch. (Documents written before
    # `next_decision` existed may hold it set with a started task: the same meaning.)
    decision_needed: bool = False
    previous_started_event_id: int = 0  # started id of the last *completed* decision task
    # RespondDecisionTaskCompleted's task-list override for later decision tasks.
    decision_task_list: str | None = None
    decision_schedule_to_start_timeout: str | None = None
    activities: tuple[Activity, ...] = ()
    timers: tuple[Timer, ...] = ()
    children: tuple[Child, ...] = ()  # open children; once closed, those open at the close
    externals: tuple[External, ...] = ()
    lambdas: tuple[LambdaCall, ...] = ()
    cancel_requested: bool = False
    latest_activity_task_at: int | None = None
    latest_execution_context: str | None = None

    @property
    def ref(self) -> ExecutionRef:
        return ExecutionRef(self.workflow_id, self.run_id)

    @property
    def is_open(self) -> bool:
        return self.status == OPEN

    def activity(self, activity_id: str) -> Activity | None:
        return next((a for a in self.activities if a.activity_id == activity_id), None)

    def activity_by_scheduled(self, scheduled_event_id: int) -> Activity | None:
        return next((a for a in self.activities if a.scheduled_event_id == scheduled_event_id), None)

    def timer(self, timer_id: str) -> Timer | None:
        return next((t for t in self.timers if t.timer_id == timer_id), None)

    def child(self, initiated_event_id: int) -> Child | None:
        return next((c for c in self.children if c.initiated_event_id == initiated_event_id), None)

    def external(self, initiated_event_id: int) -> External | None:
        return next((e for e in self.externals if e.initiated_event_id == initiated_event_id), None)

    def lambda_call(self, scheduled_event_id: int) -> LambdaCall | None:
        return next((f for f in self.lambdas if f.scheduled_event_id == scheduled_event_id), None)


_codec = cattrs.Converter(omit_if_default=True)


def execution_to_dict(execution: Execution) -> dict[str, Any]:
    """The execution as a JSON-able document (fields left at their default are omitted)."""
    return _codec.unstructure(execution)  # type: ignore[no-any-return]


def execution_from_dict(data: dict[str, Any]) -> Execution:
    return _codec.structure(data, Execution)
