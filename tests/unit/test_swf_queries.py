"""The read actions' pure parts: a listing body to a store query, tokens' scopes, and the
listing keys and pending tasks an execution is stored under."""

from __future__ import annotations

import attrs
import pytest

from foliot.core.swf import messages as m
from foliot.core.swf.errors import ValidationException
from foliot.core.swf.history import encode_token, pending_offers
from foliot.kinds.swf.queries import (
    execution_query,
    history_scope,
    listing_scope,
    listing_token,
    ms,
    read_listing_token,
)
from foliot.storage.swf import (
    ACTIVITY_TASK,
    DECISION,
    SwfStored,
    facet_close_status,
    facet_tag,
    facet_type,
    facet_workflow_id,
    facets,
    pending_tasks,
    retention_ms,
)

from .swf_kit import Kit, schedule

W = {"oldestDate": 1_700_000_000.25, "latestDate": 1_700_000_100}


def test_open_listing_query() -> None:
    body = {"domain": "d", "startTimeFilter": W, "typeFilter": {"name": "Order"}, "reverseOrder": True}
    q = execution_query("eu-west-1", body, True)
    assert (q.region, q.domain, q.open, q.by_close, q.reverse) == ("eu-west-1", "d", True, False, True)
    assert (q.oldest, q.latest) == (1_700_000_000_250, 1_700_000_100_000)
    assert q.facet == facet_type("Order")
    both = {**body, "typeFilter": {"name": "Order", "version": "2"}}
    assert execution_query("r", both, True).facet == facet_type("Order", "2")
    assert execution_query("r", {"domain": "d", "startTimeFilter": {"oldestDate": 0}}, True).latest is None


@pytest.mark.parametrize(
    ("member", "value", "facet"),
    [
        ("executionFilter", {"workflowId": "w"}, facet_workflow_id("w")),
        ("tagFilter", {"tag": "t"}, facet_tag("t")),
        ("closeStatusFilter", {"status": "FAILED"}, facet_close_status("FAILED")),
    ],
)
def test_closed_listing_query_by_close_time(member: str, value: dict[str, str], facet: str) -> None:
    q = execution_query("r", {"domain": "d", "closeTimeFilter": W, member: value}, False)
    assert (q.open, q.by_close, q.facet, q.reverse) == (False, True, facet, False)


def test_exclusive_filters_and_time_windows() -> None:
    with pytest.raises(ValidationException, match="executionFilter, typeFilter and tagFilter are mutually"):
        execution_query("r", {"domain": "d", "startTimeFilter": W, "typeFilter": {}, "tagFilter": {}}, True)
    with pytest.raises(ValidationException, match="closeStatusFilter, typeFilter and tagFilter"):
        execution_query(
            "r", {"domain": "d", "startTimeFilter": W, "executionFilter": {}, "closeStatusFilter": {}}, False
        )
    for body in ({"domain": "d"}, {"domain": "d", "startTimeFilter": W, "closeTimeFilter": W}):
        with pytest.raises(ValidationException, match="must specify one of these"):
            execution_query("r", body, False)
    # A member sent as null is absent, as AWS reads it.
    q = execution_query("r", {"domain": "d", "startTimeFilter": W, "closeTimeFilter": None}, False)
    assert not q.by_close


def test_a_token_scope_ignores_only_page_size_and_token() -> None:
    body = {"domain": "d", "startTimeFilter": W}
    scope = listing_scope("ListOpenWorkflowExecutions", "r", body)
    assert scope == listing_scope("ListOpenWorkflowExecutions", "r", {**body, "maximumPageSize": 5})
    assert scope == listing_scope("ListOpenWorkflowExecutions", "r", {**body, "nextPageToken": "x"})
    assert scope != listing_scope("ListOpenWorkflowExecutions", "r", {**body, "reverseOrder": True})
    assert scope != listing_scope("ListClosedWorkflowExecutions", "r", body)
    assert scope != listing_scope("ListOpenWorkflowExecutions", "r2", body)


def test_ms_rounds_to_the_millisecond() -> None:
    assert ms(1_700_000_000.123) == 1_700_000_000_123


def test_listing_keys_of_an_execution() -> None:
    kit = Kit(tag_list=("a", "b", "a"))
    assert facets(kit.ex) == [
        "",
        facet_type("Order"),
        facet_type("Order", "1"),
        facet_workflow_id("wf-1"),
        facet_tag("a"),
        facet_tag("b"),
    ]
    kit.send(m.Terminate())
    assert facets(kit.ex)[-1] == facet_close_status("TERMINATED")
    # No key of one kind can equal a key of another, whatever the names hold.
    assert facet_type("a") != facet_tag("a") != facet_workflow_id("a") != facet_close_status("a")


def same_as_offers(kit: Kit) -> None:
    offers = [
        (DECISION if isinstance(o, m.OfferDecisionTask) else ACTIVITY_TASK, o.task_list, o.scheduled_event_id)
        for o in pending_offers(kit.ex)
    ]
    assert [(t.kind, t.task_list, t.scheduled_event_id) for t in pending_tasks("r", kit.ex)] == offers


def test_pending_tasks_follow_the_document() -> None:
    kit = Kit(task_priority="7")
    same_as_offers(kit)
    (task,) = pending_tasks("r", kit.ex)
    assert (task.kind, task.task_list, task.priority, task.scheduled_event_id) == (DECISION, "deciders", 7, 2)
    kit.decide(schedule("a1", taskPriority="-3"), schedule("a2"))
    assert [(t.kind, t.priority) for t in pending_tasks("r", kit.ex)] == [
        (ACTIVITY_TASK, -3),
        (ACTIVITY_TASK, 0),
    ]
    same_as_offers(kit)
    kit.poll_activity("a1")
    same_as_offers(kit)
    assert [t.scheduled_event_id for t in pending_tasks("r", kit.ex)] == [kit.scheduled("a2")]
    kit.send(m.Terminate())
    assert pending_tasks("r", kit.ex) == []


def test_retention_periods() -> None:
    assert retention_ms("NONE") == 0 == retention_ms("0")
    assert retention_ms("90") == 90 * 86_400_000


def test_listing_tokens_round_trip_and_stay_short() -> None:
    body = {"domain": "é" * 256, "startTimeFilter": W, "executionFilter": {"workflowId": "😀" * 256}}
    scope = listing_scope("ListOpenWorkflowExecutions", "r", body)
    kit = Kit()
    ex = attrs.evolve(kit.ex, workflow_id="😀" * 256, run_id="R" * 64, closed_at=5)
    stored = SwfStored("r", ex, 1)
    token = listing_token(scope, stored, False)
    assert len(token) <= 2048  # SWF's PageToken
    assert read_listing_token(token, scope) == (ex.started_at, ex.workflow_id, ex.run_id)
    assert read_listing_token(listing_token(scope, stored, True), scope) == (5, ex.workflow_id, ex.run_id)
    other = listing_scope("ListOpenWorkflowExecutions", "r", {**body, "reverseOrder": True})
    for bad_scope, bad_token in [(other, token), (scope, token[:-4]), (scope, "x"), (scope, "W10")]:
        with pytest.raises(ValidationException, match="nextPageToken"):
            read_listing_token(bad_token, bad_scope)
    history_token = encode_token(
        25_000,
        True,
        history_scope("r", {"domain": "é" * 256, "execution": {"workflowId": "😀" * 256, "runId": "R" * 64}}),
    )
    assert len(history_token) <= 2048
