"""What an execution is still owed after a crash, rebuilt from its document and history.

Effects run after their commit, so a process killed in between leaves them undone. Everything
they need is durable: the document says what is pending (tasks without a poller, requests to
other executions without an answer, children not yet started, Lambda calls not yet started,
a close not yet acted on) and the history events those were recorded with carry their members.
`owed_effects` rebuilds exactly the effects the original transitions returned, so a recovering
runtime performs them again; each receiver refuses a second delivery of what it already
handled (an answer finds nothing pending, a terminated child is closed), so performing one
twice is harmless.

Deadlines are not here: `timeouts.deadlines(execution)` is the whole set at any time. A Lambda
call that had started is invoked again (`InvokeLambda.started_at`: at-least-once; its answer
died with the process) within what is left of its start-to-close timeout. Nor is
`ContinuedAsNew`: the next run must be committed in the same unit of work as the close.
"""

from __future__ import annotations

from collections.abc import Callable

from . import messages as m
from .events import HistoryEvent
from .history import pending_offers
from .model import CLOSED, Execution, TypeRef

EventAt = Callable[[int], HistoryEvent]  # a history event by id, read from storage


def owed_effects(ex: Execution, event_at: EventAt) -> tuple[m.Effect, ...]:
    """The effects an open or closed execution may still be owed, in the order the machine
    first returned them (tasks first)."""
    if ex.status == CLOSED:
        return _closing_effects(ex, event_at)
    out: list[m.Effect] = list(pending_offers(ex))
    for pending in ex.externals:
        if pending.kind == "signal":
            a = event_at(pending.initiated_event_id).attributes
            out.append(
                m.DeliverSignal(
                    pending.initiated_event_id,
                    pending.workflow_id,
                    pending.run_id,
                    a["signalName"],
                    a.get("input"),
                )
            )
        else:
            out.append(
                m.RequestCancelExternal(pending.initiated_event_id, pending.workflow_id, pending.run_id)
            )
    for child in ex.children:
        if child.started_event_id is None:
            out.append(
                m.StartChild(child.initiated_event_id, _child_request(ex, event_at(child.initiated_event_id)))
            )
    for fn in ex.lambdas:
        a = event_at(fn.scheduled_event_id).attributes
        out.append(
            m.InvokeLambda(
                fn.scheduled_event_id,
                fn.id,
                fn.name,
                a.get("input", "{}"),
                fn.start_to_close_timeout,
                fn.started_at,
            )
        )
    return tuple(out)


def _child_request(ex: Execution, initiated: HistoryEvent) -> m.StartRequest:
    a = initiated.attributes
    return m.StartRequest(
        domain=ex.domain,
        workflow_id=a["workflowId"],
        workflow_type=TypeRef(a["workflowType"]["name"], a["workflowType"]["version"]),
        task_list=a["taskList"]["name"],
        task_priority=a.get("taskPriority"),
        input=a.get("input"),
        execution_start_to_close_timeout=a["executionStartToCloseTimeout"],
        tag_list=tuple(a.get("tagList", ())),
        task_start_to_close_timeout=a["taskStartToCloseTimeout"],
        child_policy=a["childPolicy"],
        lambda_role=a.get("lambdaRole"),
        parent=ex.ref,
        parent_initiated_event_id=initiated.event_id,
    )


def owes(effects: tuple[m.Effect, ...]) -> bool:
    """The transition closed owing something to other executions: a child policy to apply or
    a parent to tell (what start-up performs again until it is acknowledged)."""
    return any(_owed_to_other(e) for e in effects)


def _owed_to_other(effect: m.Effect) -> bool:
    return isinstance(effect, m.ApplyChildPolicy) or (
        isinstance(effect, m.Closed) and effect.parent is not None and effect.notify_parent is not None
    )


def _closing_effects(ex: Execution, event_at: EventAt) -> tuple[m.Effect, ...]:
    """The child policy (when the close applies one) and the parent's notice. The closing
    event is always the last one of a closed execution's history."""
    closing = event_at(ex.last_event_id)
    a = closing.attributes
    out: list[m.Effect] = []
    if closing.event_type in ("WorkflowExecutionTerminated", "WorkflowExecutionTimedOut"):
        policy = a["childPolicy"]
        if policy != "ABANDON":
            out += [m.ApplyChildPolicy(c.workflow_id, c.run_id, policy) for c in ex.children]
    notice = None
    if (
        ex.parent is not None
        and ex.parent_initiated_event_id is not None
        and ex.close_status != "CONTINUED_AS_NEW"
    ):
        assert ex.close_status is not None
        notice = m.ChildClosed(
            initiated_event_id=ex.parent_initiated_event_id,
            execution=ex.ref,
            close_status=ex.close_status,
            result=a.get("result") if ex.close_status == "COMPLETED" else None,
            reason=a.get("reason"),
            details=a.get("details"),
            timeout_type=a.get("timeoutType"),
        )
    out.append(m.Closed(ex.close_status or "", ex.parent, notice))
    return tuple(out)
