"""History and description queries, pure: pages of events, the decision-task view, open counts.

Page tokens are opaque to clients: base64url of `{"n": <next event id>, "r": <reverse>,
"s": <scope>}`. The caller names the scope (e.g. the region, domain and run id of the history
being paged), so a token only continues the listing, in the direction, it was made for;
anything else is refused with `ValidationException`, as is a `maximumPageSize` above 1000 (0 or
absent means 1000).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any, Final

import attrs

from .events import HistoryEvent
from .faults import Fault, validation
from .messages import ActivityTaskClaimed, DecisionTaskClaimed, OfferActivityTask, OfferDecisionTask
from .model import Execution

MAX_PAGE_SIZE: Final = 1000


@attrs.frozen
class Page:
    events: tuple[HistoryEvent, ...]
    next_page_token: str | None


def encode_token(next_event_id: int, reverse: bool, scope: str = "") -> str:
    raw = json.dumps({"n": next_event_id, "r": reverse, "s": scope}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, reverse: bool, scope: str = "") -> int | Fault:
    """The event id a page token continues from, or why it is refused."""
    bad = validation(f"Invalid nextPageToken: {token[:64]!r}")
    if not token or len(token) > 2048 or not token.isascii():
        return bad
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        return bad
    if not isinstance(data, dict) or data.get("r") is not reverse or data.get("s") != scope:
        return bad
    next_id = data.get("n")
    if type(next_id) is not int or next_id < 1:
        return bad
    return next_id


def page_size(maximum_page_size: int | None) -> int | Fault:
    if maximum_page_size is None or maximum_page_size == 0:
        return MAX_PAGE_SIZE
    if maximum_page_size < 0 or maximum_page_size > MAX_PAGE_SIZE:
        return validation(
            f"1 validation error detected: Value '{maximum_page_size}' at 'maximumPageSize' failed to "
            f"satisfy constraint: Member must have value less than or equal to {MAX_PAGE_SIZE}"
        )
    return maximum_page_size


def paginate(
    events: Sequence[HistoryEvent],
    *,
    maximum_page_size: int | None = None,
    reverse_order: bool = False,
    next_page_token: str | None = None,
    scope: str = "",
) -> Page | Fault:
    """One page of `events` (ascending by id, e.g. a whole history or a decision task's
    window): oldest first, or newest first with `reverse_order`."""
    size = page_size(maximum_page_size)
    if isinstance(size, Fault):
        return size
    ordered = list(reversed(events)) if reverse_order else list(events)
    start = 0
    if next_page_token is not None:
        next_id = decode_token(next_page_token, reverse_order, scope)
        if isinstance(next_id, Fault):
            return next_id
        if reverse_order:
            start = next((i for i, e in enumerate(ordered) if e.event_id <= next_id), len(ordered))
        else:
            start = next((i for i, e in enumerate(ordered) if e.event_id >= next_id), len(ordered))
    chunk = ordered[start : start + size]
    more = start + size < len(ordered)
    token = encode_token(ordered[start + size].event_id, reverse_order, scope) if more else None
    return Page(tuple(chunk), token)


def decision_task_events(
    events: Sequence[HistoryEvent],
    started_event_id: int,
    previous_started_event_id: int,
    *,
    start_at_previous_started_event: bool = False,
) -> tuple[HistoryEvent, ...]:
    """The history a decider gets with its task: every event up to the task's
    DecisionTaskStarted, or from the previous decision's DecisionTaskStarted onward (inclusive)
    with `startAtPreviousStartedEvent`."""
    first = previous_started_event_id if start_at_previous_started_event and previous_started_event_id else 1
    return tuple(e for e in events if first <= e.event_id <= started_event_id)


def open_counts(ex: Execution) -> dict[str, int]:
    """DescribeWorkflowExecution's `openCounts`."""
    if not ex.is_open:
        return {
            "openActivityTasks": 0,
            "openDecisionTasks": 0,
            "openTimers": 0,
            "openChildWorkflowExecutions": 0,
            "openLambdaFunctions": 0,
        }
    return {
        "openActivityTasks": len(ex.activities),
        "openDecisionTasks": 1 if ex.decision is not None else 0,
        "openTimers": len(ex.timers),
        "openChildWorkflowExecutions": len(ex.children),
        "openLambdaFunctions": len(ex.lambdas),
    }


def pending_offers(ex: Execution) -> tuple[OfferDecisionTask | OfferActivityTask, ...]:
    """The tasks waiting for a poller (scheduled, not started): what a restarted node offers
    again on the task lists, the same offers the transitions that scheduled them made."""
    if not ex.is_open:
        return ()
    out: list[OfferDecisionTask | OfferActivityTask] = []
    task = ex.decision
    if task is not None and task.started_event_id is None:
        out.append(OfferDecisionTask(task.task_list, task.scheduled_event_id, ex.config.task_priority))
    for act in ex.activities:
        if act.started_event_id is None:
            out.append(
                OfferActivityTask(act.task_list, act.scheduled_event_id, act.activity_id, act.task_priority)
            )
    return tuple(out)


def _seconds(ms: int) -> float:
    return ms / 1000


def execution_info(ex: Execution) -> dict[str, Any]:
    """`WorkflowExecutionInfo`, as listed and described."""
    out: dict[str, Any] = {
        "execution": ex.ref.to_aws(),
        "workflowType": ex.workflow_type.to_aws(),
        "startTimestamp": _seconds(ex.started_at),
        "executionStatus": ex.status,
        "cancelRequested": ex.cancel_requested,
    }
    if ex.closed_at is not None:
        out["closeTimestamp"] = _seconds(ex.closed_at)
    if ex.close_status is not None:
        out["closeStatus"] = ex.close_status
    if ex.parent is not None:
        out["parent"] = ex.parent.to_aws()
    if ex.tags:
        out["tagList"] = list(ex.tags)
    return out


def describe(ex: Execution) -> dict[str, Any]:
    """DescribeWorkflowExecution's answer (`WorkflowExecutionDetail`)."""
    out: dict[str, Any] = {
        "executionInfo": execution_info(ex),
        "executionConfiguration": ex.config.to_aws(),
        "openCounts": open_counts(ex),
    }
    if ex.latest_activity_task_at is not None:
        out["latestActivityTaskTimestamp"] = _seconds(ex.latest_activity_task_at)
    if ex.latest_execution_context is not None:
        out["latestExecutionContext"] = ex.latest_execution_context
    return out


def decision_task(ex: Execution, claimed: DecisionTaskClaimed, page: Page, task_token: str) -> dict[str, Any]:
    """PollForDecisionTask's answer for a claimed task and one page of its events."""
    out: dict[str, Any] = {
        "taskToken": task_token,
        "startedEventId": claimed.started_event_id,
        "workflowExecution": ex.ref.to_aws(),
        "workflowType": ex.workflow_type.to_aws(),
        "events": [e.to_aws() for e in page.events],
        "previousStartedEventId": claimed.previous_started_event_id,
    }
    if page.next_page_token is not None:
        out["nextPageToken"] = page.next_page_token
    return out


def activity_task(ex: Execution, claimed: ActivityTaskClaimed, task_token: str) -> dict[str, Any]:
    """PollForActivityTask's answer for a claimed task."""
    out: dict[str, Any] = {
        "taskToken": task_token,
        "activityId": claimed.activity_id,
        "startedEventId": claimed.started_event_id,
        "workflowExecution": ex.ref.to_aws(),
        "activityType": claimed.activity_type.to_aws(),
    }
    if claimed.input is not None:
        out["input"] = claimed.input
    return out
