"""What goes in and out of the SWF machine: messages, effects, replies, the transition result.

Every input the runtime hands an execution is one frozen message below; `machine.transition`
answers with a `Transition` (the new document, the history events to append, the effects to
perform after committing, and a reply for the caller) or a `Fault` (nothing changed).

Effects (performed by the runtime after the commit, in order):

- `OfferDecisionTask` / `OfferActivityTask`: a task is now pending on its task list; hand it
  to one poller, who calls back with `PollDecision` / `PollActivity` naming its
  `scheduled_event_id`. `RetireTask`: that task closed (completed, timed out, canceled, the
  execution closed); forget any token or queue entry for it.
- `ArmDeadline(key, at)` / `CancelDeadline(key)`: keep the timer wheel equal to
  `timeouts.deadlines(execution)`; when one is due, send `Fire(key)`.
- `DeliverSignal` / `RequestCancelExternal`: act on another execution of the same domain, then
  answer this one with `ExternalSignaled`/`ExternalSignalFailed` or
  `ExternalCancelRequested`/`ExternalCancelFailed` (cause
  `UNKNOWN_EXTERNAL_WORKFLOW_EXECUTION` when no open execution matches).
- `StartChild`: call `machine.start` with `request` (already resolved, parent set); answer this
  execution with `ChildStarted(run_id)` or `ChildStartFailed(cause)`
  (`WORKFLOW_ALREADY_RUNNING` when the workflow id is open, or the cause the child's start
  returned, see `machine.start_failure_cause`).
- `InvokeLambda`: send `LambdaStarted`, invoke the function once that committed, then
  `LambdaCompleted` or `LambdaFailed` (reason `ResourceNotFoundException` for an unknown
  function; see `lambdas.outcome`). With `started_at` (a call started before a crash) the
  function is invoked again without a second `LambdaStarted`.
- `ApplyChildPolicy`: the parent closed; `Terminate` (cause `CHILD_POLICY_APPLIED`) or
  `RequestCancel` (cause `CHILD_POLICY_APPLIED`) the child, by run id when known.
- `ContinuedAsNew(start)`: commit `start` (the new run's first transition) with this one.
- `Closed`: the execution closed; deliver `notify_parent` (a `ChildClosed`) to `parent`.

An answer that reaches an execution closed in the meantime is refused with a `Fault` like any
other message; the runtime drops it. After a crash between a commit and its effects, the
runtime rebuilds what the document implies (`history.pending_offers`, `timeouts.deadlines`);
an answer delivered twice finds nothing pending the second time and is refused the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from .events import HistoryEvent
from .model import ActivityTypeInfo, Execution, ExecutionRef, TypeRef, WorkflowTypeInfo

# --------------------------------------------------------------------------- context


class Catalog(Protocol):
    """The type registry as the machine sees it (a snapshot the runtime looked up)."""

    def workflow_type(self, type: TypeRef) -> WorkflowTypeInfo | None: ...

    def activity_type(self, type: TypeRef) -> ActivityTypeInfo | None: ...


class StaticCatalog:
    """A `Catalog` over given type records."""

    def __init__(
        self,
        workflow_types: Sequence[WorkflowTypeInfo] = (),
        activity_types: Sequence[ActivityTypeInfo] = (),
    ) -> None:
        self._workflows = {t.type: t for t in workflow_types}
        self._activities = {t.type: t for t in activity_types}

    def workflow_type(self, type: TypeRef) -> WorkflowTypeInfo | None:
        return self._workflows.get(type)

    def activity_type(self, type: TypeRef) -> ActivityTypeInfo | None:
        return self._activities.get(type)


EMPTY_CATALOG = StaticCatalog()


@attrs.frozen
class Context:
    """Everything a transition may depend on besides the document and the message."""

    now: int  # epoch ms
    catalog: Catalog = EMPTY_CATALOG
    new_run_id: str = ""  # the run id ContinueAsNewWorkflowExecution gives the next run


@attrs.frozen
class StartRequest:
    """StartWorkflowExecution's members (also a child's start and a continued run's)."""

    domain: str
    workflow_id: str
    workflow_type: TypeRef
    task_list: str | None = None
    task_priority: str | None = None
    input: str | None = None
    execution_start_to_close_timeout: str | None = None
    tag_list: tuple[str, ...] = ()
    task_start_to_close_timeout: str | None = None
    child_policy: str | None = None
    lambda_role: str | None = None
    parent: ExecutionRef | None = None
    parent_initiated_event_id: int | None = None
    continued_execution_run_id: str | None = None


# --------------------------------------------------------------------------- messages


@attrs.frozen
class PollDecision:
    """A decider claimed the pending decision task (PollForDecisionTask)."""

    scheduled_event_id: int
    identity: str | None = None


@attrs.frozen
class CompleteDecision:
    """RespondDecisionTaskCompleted; `decisions` is the raw JSON list, validated here."""

    scheduled_event_id: int
    decisions: Sequence[Any] | None = None
    execution_context: str | None = None
    task_list: str | None = None
    task_list_schedule_to_start_timeout: str | None = None


@attrs.frozen
class PollActivity:
    scheduled_event_id: int
    identity: str | None = None


@attrs.frozen
class CompleteActivity:
    scheduled_event_id: int
    result: str | None = None


@attrs.frozen
class FailActivity:
    scheduled_event_id: int
    reason: str | None = None
    details: str | None = None


@attrs.frozen
class CancelActivity:
    """RespondActivityTaskCanceled."""

    scheduled_event_id: int
    details: str | None = None


@attrs.frozen
class Heartbeat:
    scheduled_event_id: int
    details: str | None = None


@attrs.frozen
class Signal:
    signal_name: str
    input: str | None = None
    external: ExecutionRef | None = None
    external_initiated_event_id: int | None = None


@attrs.frozen
class RequestCancel:
    external: ExecutionRef | None = None
    external_initiated_event_id: int | None = None
    cause: str | None = None  # CHILD_POLICY_APPLIED when a parent's policy asks


@attrs.frozen
class Terminate:
    reason: str | None = None
    details: str | None = None
    child_policy: str | None = None
    cause: str | None = "OPERATOR_INITIATED"


@attrs.frozen
class Fire:
    """A deadline or timer the runtime armed is due (`timeouts.deadlines` keys)."""

    key: str


@attrs.frozen
class ChildStarted:
    initiated_event_id: int
    run_id: str


@attrs.frozen
class ChildStartFailed:
    initiated_event_id: int
    cause: str


@attrs.frozen
class ChildClosed:
    """A child execution closed (sent by the runtime from the child's `Closed` effect)."""

    initiated_event_id: int
    execution: ExecutionRef
    close_status: str
    result: str | None = None
    reason: str | None = None
    details: str | None = None
    timeout_type: str | None = None


@attrs.frozen
class ExternalSignaled:
    initiated_event_id: int
    execution: ExecutionRef


@attrs.frozen
class ExternalSignalFailed:
    initiated_event_id: int
    cause: str = "UNKNOWN_EXTERNAL_WORKFLOW_EXECUTION"


@attrs.frozen
class ExternalCancelRequested:
    initiated_event_id: int
    execution: ExecutionRef


@attrs.frozen
class ExternalCancelFailed:
    initiated_event_id: int
    cause: str = "UNKNOWN_EXTERNAL_WORKFLOW_EXECUTION"


@attrs.frozen
class LambdaStarted:
    scheduled_event_id: int


@attrs.frozen
class LambdaCompleted:
    scheduled_event_id: int
    result: str | None = None


@attrs.frozen
class LambdaFailed:
    scheduled_event_id: int
    reason: str | None = None
    details: str | None = None


Message = (
    PollDecision
    | CompleteDecision
    | PollActivity
    | CompleteActivity
    | FailActivity
    | CancelActivity
    | Heartbeat
    | Signal
    | RequestCancel
    | Terminate
    | Fire
    | ChildStarted
    | ChildStartFailed
    | ChildClosed
    | ExternalSignaled
    | ExternalSignalFailed
    | ExternalCancelRequested
    | ExternalCancelFailed
    | LambdaStarted
    | LambdaCompleted
    | LambdaFailed
)

# --------------------------------------------------------------------------- replies


@attrs.frozen
class DecisionTaskClaimed:
    """Reply to `PollDecision`: the ids PollForDecisionTask returns (events come from
    `history.decision_task_events`)."""

    scheduled_event_id: int
    started_event_id: int
    previous_started_event_id: int


@attrs.frozen
class ActivityTaskClaimed:
    """Reply to `PollActivity`: PollForActivityTask's members besides the token."""

    scheduled_event_id: int
    started_event_id: int
    activity_id: str
    activity_type: TypeRef
    input: str | None


@attrs.frozen
class HeartbeatAnswer:
    cancel_requested: bool


Reply = DecisionTaskClaimed | ActivityTaskClaimed | HeartbeatAnswer

# --------------------------------------------------------------------------- effects


@attrs.frozen
class OfferDecisionTask:
    task_list: str
    scheduled_event_id: int
    task_priority: str | None = None


@attrs.frozen
class OfferActivityTask:
    task_list: str
    scheduled_event_id: int
    activity_id: str
    task_priority: str | None = None


@attrs.frozen
class RetireTask:
    kind: str  # decision | activity
    task_list: str
    scheduled_event_id: int


@attrs.frozen
class ArmDeadline:
    key: str
    at: int


@attrs.frozen
class CancelDeadline:
    key: str


@attrs.frozen
class DeliverSignal:
    initiated_event_id: int
    workflow_id: str
    run_id: str | None
    signal_name: str
    input: str | None


@attrs.frozen
class RequestCancelExternal:
    initiated_event_id: int
    workflow_id: str
    run_id: str | None


@attrs.frozen
class StartChild:
    initiated_event_id: int
    request: StartRequest


@attrs.frozen
class InvokeLambda:
    scheduled_event_id: int
    id: str
    name: str
    input: str  # `{}` when the decision gave none
    start_to_close_timeout: str
    started_at: int | None = None  # set after a crash: `LambdaStarted` is recorded, call again


@attrs.frozen
class ApplyChildPolicy:
    workflow_id: str
    run_id: str | None
    policy: str  # TERMINATE | REQUEST_CANCEL


@attrs.frozen
class ContinuedAsNew:
    start: Transition


@attrs.frozen
class Closed:
    close_status: str
    parent: ExecutionRef | None = None
    notify_parent: ChildClosed | None = None


Effect = (
    OfferDecisionTask
    | OfferActivityTask
    | RetireTask
    | ArmDeadline
    | CancelDeadline
    | DeliverSignal
    | RequestCancelExternal
    | StartChild
    | InvokeLambda
    | ApplyChildPolicy
    | ContinuedAsNew
    | Closed
)


@attrs.frozen
class Transition:
    """The outcome of one message: commit `execution` and `events` together, then perform
    `effects` in order, then answer the caller with `reply`."""

    execution: Execution
    events: tuple[HistoryEvent, ...] = ()
    effects: tuple[Effect, ...] = ()
    reply: Reply | None = None
