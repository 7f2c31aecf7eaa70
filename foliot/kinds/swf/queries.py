"""The SWF read actions: DescribeWorkflowExecution, GetWorkflowExecutionHistory, List/Count
Open/Closed WorkflowExecutions, CountPendingDecisionTasks/ActivityTasks.

Each is `async def action(ctx, body) -> dict` over a body that passed `shapes.validate`, like
the registry's. What the model cannot say is checked here: the filters AWS makes mutually
exclusive, exactly one time filter on closed listings, page tokens. Every listing is a keyset
page of one index range in the store (`SwfQuery`), so its cost is the page, not the table;
counts stop at `COUNT_CAP` and say `truncated`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Final, NoReturn

from ...core.swf import history
from ...core.swf.errors import UnknownResourceFault, ValidationException
from ...core.swf.faults import Fault
from ...storage.swf import (
    ACTIVITY_TASK,
    DECISION,
    SwfCursor,
    SwfQuery,
    SwfStored,
    facet_close_status,
    facet_tag,
    facet_type,
    facet_workflow_id,
)
from .registry import Action, Ctx, domain_of, page_size

COUNT_CAP: Final = 100_000  # counts stop here and answer `truncated: true`

_OPEN_FILTERS: Final = ("executionFilter", "typeFilter", "tagFilter")
_CLOSED_FILTERS: Final = ("executionFilter", "closeStatusFilter", "typeFilter", "tagFilter")


# ---------------------------------------------------------------------- pure


def ms(seconds: float) -> int:
    """A JSON-protocol timestamp (epoch seconds) as epoch milliseconds."""
    return round(seconds * 1000)


def _facet(body: dict[str, Any]) -> str:
    if "executionFilter" in body:
        return facet_workflow_id(body["executionFilter"]["workflowId"])
    if "typeFilter" in body:
        return facet_type(body["typeFilter"]["name"], body["typeFilter"].get("version"))
    if "tagFilter" in body:
        return facet_tag(body["tagFilter"]["tag"])
    if "closeStatusFilter" in body:
        return facet_close_status(body["closeStatusFilter"]["status"])
    return ""


def execution_query(region: str, body: dict[str, Any], open_: bool) -> SwfQuery:
    """The store query a List/Count{Open,Closed}WorkflowExecutions body asks for, or
    `ValidationException` when it combines filters AWS makes mutually exclusive."""
    body = {k: v for k, v in body.items() if v is not None}
    exclusive = _OPEN_FILTERS if open_ else _CLOSED_FILTERS
    given = [name for name in exclusive if name in body]
    if len(given) > 1:
        names = ", ".join(exclusive[:-1]) + " and " + exclusive[-1]
        raise ValidationException(
            f"{names} are mutually exclusive. You can specify at most one of these in a request."
        )
    if open_:
        window, by_close = body["startTimeFilter"], False
    else:
        if ("startTimeFilter" in body) == ("closeTimeFilter" in body):
            raise ValidationException(
                "startTimeFilter and closeTimeFilter are mutually exclusive. You must specify one of "
                "these in a request but not both."
            )
        by_close = "closeTimeFilter" in body
        window = body["closeTimeFilter" if by_close else "startTimeFilter"]
    latest = window.get("latestDate")
    return SwfQuery(
        region=region,
        domain=body["domain"],
        open=open_,
        oldest=ms(window["oldestDate"]),
        latest=None if latest is None else ms(latest),
        by_close=by_close,
        facet=_facet(body),
        reverse=bool(body.get("reverseOrder")),
    )


def digest(*parts: Any) -> str:
    """A short stand-in for what a page token is bound to: tokens stay far under the 2,048
    characters of SWF's `PageToken`, whatever the names and ids in the request hold."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()[:18]).decode()


def listing_scope(action: str, region: str, body: dict[str, Any]) -> str:
    """What a listing's page token is bound to: the action, region and every argument but
    the page size and the token itself."""
    args = {k: v for k, v in body.items() if k not in ("nextPageToken", "maximumPageSize") and v is not None}
    return digest(action, region, args)


def listing_token(scope: str, stored: SwfStored, by_close: bool) -> str:
    """The token of the page after `stored` (the last execution returned)."""
    ex = stored.execution
    time = ex.closed_at if by_close else ex.started_at
    raw = json.dumps([scope, time, ex.workflow_id, ex.run_id], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def read_listing_token(token: str, scope: str) -> SwfCursor:
    """The position a listing token continues from; `ValidationException` when it is not a
    token of this listing with these arguments."""
    try:
        parts = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, TypeError):
        parts = None
    if (
        not isinstance(parts, list)
        or len(parts) != 4
        or parts[0] != scope
        or type(parts[1]) is not int
        or not all(isinstance(p, str) for p in parts[2:])
    ):
        raise ValidationException(
            "Invalid nextPageToken: it was not returned by this action with these arguments"
        )
    return parts[1], parts[2], parts[3]


def history_scope(region: str, body: dict[str, Any]) -> str:
    execution = body["execution"]
    return digest(region, body["domain"], execution["workflowId"], execution["runId"])


def _fail(fault: Fault) -> NoReturn:
    raise ValidationException(fault.message)


# ---------------------------------------------------------------------- actions


async def _execution(ctx: Ctx, body: dict[str, Any]) -> SwfStored:
    ref = body["execution"]
    found = await ctx.store.swf_find(ctx.region, body["domain"], ref["workflowId"], ref["runId"])
    if found is None:
        await domain_of(ctx, body["domain"])
        raise UnknownResourceFault(
            f"Unknown execution: WorkflowExecution=[workflowId={ref['workflowId']}, runId={ref['runId']}]"
        )
    return found


async def describe_workflow_execution(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    return history.describe((await _execution(ctx, body)).execution)


async def get_workflow_execution_history(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
    reverse = bool(body.get("reverseOrder"))
    scope = history_scope(ctx.region, body)
    size = history.page_size(body.get("maximumPageSize"))
    if isinstance(size, Fault):
        _fail(size)
    after: int | None = None
    token = body.get("nextPageToken")
    if token is not None:
        next_id = history.decode_token(token, reverse, scope)
        if isinstance(next_id, Fault):
            _fail(next_id)
        after = next_id + 1 if reverse else next_id - 1
    run_id = (await _execution(ctx, body)).execution.run_id
    events = await ctx.store.swf_events(ctx.region, run_id, after, reverse, size + 1)
    out: dict[str, Any] = {"events": [e.to_aws() for e in events[:size]]}
    if len(events) > size:
        out["nextPageToken"] = history.encode_token(events[size].event_id, reverse, scope)
    return out


def list_executions(open_: bool) -> Action:
    action_name = "ListOpenWorkflowExecutions" if open_ else "ListClosedWorkflowExecutions"

    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        query = execution_query(ctx.region, body, open_)
        scope = listing_scope(action_name, ctx.region, body)
        token = body.get("nextPageToken")
        cursor = None if token is None else read_listing_token(token, scope)
        await domain_of(ctx, query.domain)
        size = page_size(body)
        rows = await ctx.store.swf_list_executions(query, cursor, size + 1)
        out: dict[str, Any] = {"executionInfos": [history.execution_info(s.execution) for s in rows[:size]]}
        if len(rows) > size:
            out["nextPageToken"] = listing_token(scope, rows[size - 1], query.by_close)
        return out

    return action


def count_executions(open_: bool) -> Action:
    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        query = execution_query(ctx.region, body, open_)
        await domain_of(ctx, query.domain)
        count = await ctx.store.swf_count_executions(query, COUNT_CAP + 1)
        return {"count": min(count, COUNT_CAP), "truncated": count > COUNT_CAP}

    return action


def count_pending(kind: str) -> Action:
    async def action(ctx: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        await domain_of(ctx, body["domain"])
        count = await ctx.store.swf_count_pending(
            ctx.region, body["domain"], kind, body["taskList"]["name"], COUNT_CAP + 1
        )
        return {"count": min(count, COUNT_CAP), "truncated": count > COUNT_CAP}

    return action


ACTIONS: dict[str, Action] = {
    "DescribeWorkflowExecution": describe_workflow_execution,
    "GetWorkflowExecutionHistory": get_workflow_execution_history,
    "ListOpenWorkflowExecutions": list_executions(True),
    "ListClosedWorkflowExecutions": list_executions(False),
    "CountOpenWorkflowExecutions": count_executions(True),
    "CountClosedWorkflowExecutions": count_executions(False),
    "CountPendingDecisionTasks": count_pending(DECISION),
    "CountPendingActivityTasks": count_pending(ACTIVITY_TASK),
}
"""The read actions over executions, by SWF action name."""
