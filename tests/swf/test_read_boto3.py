"""The SWF read actions through a real boto3 client against a live Foliot, on both stores.

Executions are made by the pure machine and committed through the server's own store
(`store_kit`), as the runtime will commit them; then boto3 reads them back: describe, history
pages, open and closed listings with every filter, counts, pending task counts, and every
refusal (unknown domain or execution, bad page tokens, filters AWS makes exclusive), which
changes nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from foliot.core.swf import messages as m
from foliot.kinds.swf import queries
from foliot.storage.base import Store

from ..unit.swf_kit import shape_errors
from .conftest import Swf, call, raises
from .store_kit import REFUND, WF2, Live, decision, schedule, start

# Executions start an hour ago (whole seconds), well inside their domain's 30-day retention,
# so the server's pruner never takes them during a test.
S = int(time.time()) - 3600  # epoch seconds, as boto3 sends them
T = S * 1000  # epoch ms, as the store keeps them


def store_of(swf: Swf) -> Store:
    store: Store = swf.running.engine.store
    return store


async def domain(swf: Swf, name: str = "d", region: str = "us-east-1") -> Any:
    c = swf.client(region)
    await call(c.register_domain, name=name, workflowExecutionRetentionPeriodInDays="30")
    return c


async def all_pages(fn: Any, **kw: Any) -> list[dict[str, Any]]:
    """Every page of a paginated call, following `nextPageToken` to the end."""
    pages = [await call(fn, **kw)]
    while "nextPageToken" in pages[-1]:
        pages.append(await call(fn, **kw, nextPageToken=pages[-1]["nextPageToken"]))
    return pages


def run_ids(answer: dict[str, Any]) -> list[str]:
    return [i["execution"]["runId"] for i in answer["executionInfos"]]


async def test_describe_with_open_counts(swf: Swf) -> None:
    c = await domain(swf)
    live = await start(store_of(swf), "wf-1", "r1", T, tag_list=("blue",), input="in", task_priority="3")
    await live.decide(
        T + 1000,
        schedule("a1"),
        schedule("a2"),
        decision("StartTimer", timerId="t1", startToFireTimeout="60"),
    )
    await live.send(m.Signal("poke"), T + 2000)
    ex = {"workflowId": "wf-1", "runId": "r1"}
    out = await call(c.describe_workflow_execution, domain="d", execution=ex)
    raw = {k: v for k, v in out.items() if k != "ResponseMetadata"}
    info = raw["executionInfo"]
    assert info["execution"] == ex
    assert info["workflowType"] == {"name": "Order", "version": "1"}
    assert info["startTimestamp"].timestamp() == S
    assert info["executionStatus"] == "OPEN" and info["cancelRequested"] is False
    assert info["tagList"] == ["blue"] and "closeStatus" not in info
    assert raw["openCounts"] == {
        "openActivityTasks": 2,
        "openDecisionTasks": 1,
        "openTimers": 1,
        "openChildWorkflowExecutions": 0,
        "openLambdaFunctions": 0,
    }
    assert raw["executionConfiguration"] == {
        "taskStartToCloseTimeout": "60",
        "executionStartToCloseTimeout": "3600",
        "taskList": {"name": "deciders"},
        "childPolicy": "TERMINATE",
        "taskPriority": "3",
    }
    assert raw["latestActivityTaskTimestamp"].timestamp() == S + 1
    await live.send(m.Terminate(reason="stop"), T + 3000)
    closed = await call(c.describe_workflow_execution, domain="d", execution=ex)
    assert closed["executionInfo"]["closeStatus"] == "TERMINATED"
    assert closed["executionInfo"]["closeTimestamp"].timestamp() == S + 3
    assert set(closed["openCounts"].values()) == {0}


async def test_unknown_domain_and_execution(swf: Swf) -> None:
    c = await domain(swf)
    await start(store_of(swf), "wf-1", "r1", T)
    ex = {"workflowId": "wf-1", "runId": "r1"}
    e = await raises("UnknownResourceFault", c.describe_workflow_execution, domain="nope", execution=ex)
    assert "Unknown domain" in e.response["Error"]["Message"]
    for wrong in ({"workflowId": "wf-2", "runId": "r1"}, {"workflowId": "wf-1", "runId": "r2"}):
        e = await raises("UnknownResourceFault", c.describe_workflow_execution, domain="d", execution=wrong)
        assert "Unknown execution" in e.response["Error"]["Message"]
        await raises("UnknownResourceFault", c.get_workflow_execution_history, domain="d", execution=wrong)
    # Another region holds nothing of this one's.
    eu = await domain(swf, region="eu-west-1")
    await raises("UnknownResourceFault", eu.describe_workflow_execution, domain="d", execution=ex)
    window = {"oldestDate": 0}
    assert run_ids(await call(eu.list_open_workflow_executions, domain="d", startTimeFilter=window)) == []
    for fn, kw in [
        (c.list_open_workflow_executions, {"startTimeFilter": window}),
        (c.list_closed_workflow_executions, {"startTimeFilter": window}),
        (c.count_open_workflow_executions, {"startTimeFilter": window}),
        (c.count_closed_workflow_executions, {"closeTimeFilter": window}),
        (c.count_pending_decision_tasks, {"taskList": {"name": "deciders"}}),
        (c.count_pending_activity_tasks, {"taskList": {"name": "workers"}}),
    ]:
        await raises("UnknownResourceFault", fn, domain="nope", **kw)


async def test_history_pages_forward_and_reverse(swf: Swf) -> None:
    c = await domain(swf)
    live = await start(store_of(swf), "wf-1", "r1", T)
    await live.decide(T + 1, *[decision("RecordMarker", markerName=f"m{i}") for i in range(5)])
    total = live.ex.last_event_id
    ex = {"workflowId": "wf-1", "runId": "r1"}
    whole = await call(c.get_workflow_execution_history, domain="d", execution=ex)
    assert [e["eventId"] for e in whole["events"]] == list(range(1, total + 1))
    assert "nextPageToken" not in whole
    raw = await call(swf.client(validate=False).get_workflow_execution_history, domain="d", execution=ex)
    for event in raw["events"]:
        event = dict(event)
        event["eventTimestamp"] = event["eventTimestamp"].timestamp()
        assert shape_errors(event, "HistoryEvent") == []
    assert whole["events"][0]["eventType"] == "WorkflowExecutionStarted"
    assert whole["events"][4]["markerRecordedEventAttributes"]["markerName"] == "m0"
    for reverse in (False, True):
        pages = await all_pages(
            c.get_workflow_execution_history,
            domain="d",
            execution=ex,
            maximumPageSize=3,
            reverseOrder=reverse,
        )
        assert all(len(page["events"]) <= 3 for page in pages)
        seen = [e["eventId"] for page in pages for e in page["events"]]
        ids = list(range(1, total + 1))
        assert seen == (ids[::-1] if reverse else ids)
    first = await call(c.get_workflow_execution_history, domain="d", execution=ex, maximumPageSize=2)
    token = first["nextPageToken"]
    # A token continues only its own history, in its own direction.
    await raises(
        "ValidationException",
        c.get_workflow_execution_history,
        domain="d",
        execution=ex,
        nextPageToken=token,
        reverseOrder=True,
    )
    other = await start(store_of(swf), "wf-2", "r2", T)
    await raises(
        "ValidationException",
        c.get_workflow_execution_history,
        domain="d",
        execution={"workflowId": "wf-2", "runId": other.run_id},
        nextPageToken=token,
    )
    for bad in ("garbage!", "eyJuIjoiYSJ9", token[:-3]):
        await raises(
            "ValidationException",
            c.get_workflow_execution_history,
            domain="d",
            execution=ex,
            nextPageToken=bad,
        )
    await raises(
        "ValidationException",
        swf.client(validate=False).get_workflow_execution_history,
        domain="d",
        execution=ex,
        maximumPageSize=1001,
    )


async def seed(swf: Swf) -> dict[str, Live]:
    """Four executions: a (Order 1, tags blue+red) completed, b (Order 2, blue) open,
    c (Refund) terminated, d (Order 1) open; started one second apart."""
    store = store_of(swf)
    lives = {
        "a": await start(store, "wf-a", "ra", T + 1000, tag_list=("blue", "red")),
        "b": await start(store, "wf-b", "rb", T + 2000, workflow_type=WF2, tag_list=("blue",)),
        "c": await start(store, "wf-c", "rc", T + 3000, workflow_type=REFUND),
        "d": await start(store, "wf-d", "rd", T + 4000),
    }
    await lives["a"].complete(T + 9000)
    await lives["c"].send(m.Terminate(), T + 8000)
    return lives


async def test_list_open_and_closed_with_each_filter(swf: Swf) -> None:
    c = await domain(swf)
    await seed(swf)
    window = {"oldestDate": S}
    lo = c.list_open_workflow_executions
    lc = c.list_closed_workflow_executions
    assert run_ids(await call(lo, domain="d", startTimeFilter=window)) == ["rd", "rb"]
    assert run_ids(await call(lo, domain="d", startTimeFilter=window, reverseOrder=True)) == ["rb", "rd"]
    assert run_ids(await call(lo, domain="d", startTimeFilter={"oldestDate": S, "latestDate": S + 3})) == [
        "rb"
    ]
    assert run_ids(await call(lo, domain="d", startTimeFilter=window, typeFilter={"name": "Order"})) == [
        "rd",
        "rb",
    ]
    order1 = {"name": "Order", "version": "1"}
    assert run_ids(await call(lo, domain="d", startTimeFilter=window, typeFilter=order1)) == ["rd"]
    assert run_ids(await call(lo, domain="d", startTimeFilter=window, tagFilter={"tag": "blue"})) == ["rb"]
    assert run_ids(
        await call(lo, domain="d", startTimeFilter=window, executionFilter={"workflowId": "wf-d"})
    ) == ["rd"]
    assert run_ids(await call(lc, domain="d", startTimeFilter=window)) == ["rc", "ra"]
    assert run_ids(await call(lc, domain="d", closeTimeFilter=window)) == ["ra", "rc"]
    assert run_ids(await call(lc, domain="d", closeTimeFilter={"oldestDate": S + 8.5})) == ["ra"]
    assert run_ids(
        await call(lc, domain="d", startTimeFilter=window, closeStatusFilter={"status": "TERMINATED"})
    ) == ["rc"]
    assert run_ids(await call(lc, domain="d", closeTimeFilter=window, tagFilter={"tag": "red"})) == ["ra"]
    assert run_ids(await call(lc, domain="d", closeTimeFilter=window, typeFilter={"name": "Refund"})) == [
        "rc"
    ]
    closed = await call(lc, domain="d", closeTimeFilter=window)
    infos = {i["execution"]["runId"]: i for i in closed["executionInfos"]}
    assert infos["ra"]["closeStatus"] == "COMPLETED" and infos["ra"]["tagList"] == ["blue", "red"]
    assert infos["ra"]["closeTimestamp"].timestamp() == S + 9
    assert infos["rc"]["workflowType"] == {"name": "Refund", "version": "1"}
    assert infos["rc"]["executionStatus"] == "CLOSED"


async def test_counts(swf: Swf, monkeypatch: pytest.MonkeyPatch) -> None:
    c = await domain(swf)
    await seed(swf)
    window = {"oldestDate": S}
    answer = await call(c.count_open_workflow_executions, domain="d", startTimeFilter=window)
    assert (answer["count"], answer["truncated"]) == (2, False)
    answer = await call(
        c.count_open_workflow_executions, domain="d", startTimeFilter=window, typeFilter={"name": "Order"}
    )
    assert answer["count"] == 2
    answer = await call(c.count_closed_workflow_executions, domain="d", closeTimeFilter=window)
    assert (answer["count"], answer["truncated"]) == (2, False)
    answer = await call(
        c.count_closed_workflow_executions,
        domain="d",
        startTimeFilter=window,
        closeStatusFilter={"status": "COMPLETED"},
    )
    assert answer["count"] == 1
    monkeypatch.setattr(queries, "COUNT_CAP", 1)
    answer = await call(c.count_closed_workflow_executions, domain="d", closeTimeFilter=window)
    assert (answer["count"], answer["truncated"]) == (1, True)
    answer = await call(c.count_pending_decision_tasks, domain="d", taskList={"name": "deciders"})
    assert (answer["count"], answer["truncated"]) == (1, True)


async def test_pending_task_counts(swf: Swf) -> None:
    c = await domain(swf)
    store = store_of(swf)
    one = await start(store, "wf-1", "r1", T)
    await start(store, "wf-2", "r2", T)
    await one.decide(T + 1, schedule("a1"), schedule("a2"), schedule("a3", taskList={"name": "slow"}))
    pending = c.count_pending_decision_tasks
    assert (await call(pending, domain="d", taskList={"name": "deciders"}))["count"] == 1
    assert (await call(pending, domain="d", taskList={"name": "nobody"}))["count"] == 0
    acts = c.count_pending_activity_tasks
    assert (await call(acts, domain="d", taskList={"name": "workers"}))["count"] == 2
    assert (await call(acts, domain="d", taskList={"name": "slow"}))["count"] == 1
    a1 = one.ex.activity("a1")
    assert a1 is not None
    await one.send(m.PollActivity(a1.scheduled_event_id, "w"), T + 2)
    assert (await call(acts, domain="d", taskList={"name": "workers"}))["count"] == 1


async def test_listing_pages_and_refusals_change_nothing(swf: Swf) -> None:
    c = await domain(swf)
    store = store_of(swf)
    for i in range(7):
        await start(store, f"wf-{i}", f"r{i}", T + 1000 * (i // 2))  # start times tie in pairs
    window = {"oldestDate": S}
    for reverse in (False, True):
        pages = await all_pages(
            c.list_open_workflow_executions,
            domain="d",
            startTimeFilter=window,
            maximumPageSize=2,
            reverseOrder=reverse,
        )
        assert [len(run_ids(page)) for page in pages] == [2, 2, 2, 1]
        seen = [run_id for page in pages for run_id in run_ids(page)]
        ordered = [f"r{i}" for i in range(7)]  # ties: by workflow id, then run id
        assert seen == (ordered if reverse else ordered[::-1])
    first = await call(c.list_open_workflow_executions, domain="d", startTimeFilter=window, maximumPageSize=2)
    token = first["nextPageToken"]
    before = [(s.execution.run_id, s.version) for s in await store.swf_open_executions(None, 100)]
    refusals: list[tuple[Any, dict[str, Any]]] = [
        # A token answers only the listing and arguments that made it.
        (c.list_open_workflow_executions, {"startTimeFilter": {"oldestDate": S + 1}, "nextPageToken": token}),
        (
            c.list_open_workflow_executions,
            {"startTimeFilter": window, "nextPageToken": token, "reverseOrder": True},
        ),
        (c.list_closed_workflow_executions, {"startTimeFilter": window, "nextPageToken": token}),
        (c.list_open_workflow_executions, {"startTimeFilter": window, "nextPageToken": "not-a-token"}),
        # Filters AWS makes mutually exclusive.
        (
            c.list_open_workflow_executions,
            {"startTimeFilter": window, "typeFilter": {"name": "Order"}, "tagFilter": {"tag": "x"}},
        ),
        (
            c.list_closed_workflow_executions,
            {
                "startTimeFilter": window,
                "executionFilter": {"workflowId": "wf-1"},
                "closeStatusFilter": {"status": "FAILED"},
            },
        ),
        (c.list_closed_workflow_executions, {"startTimeFilter": window, "closeTimeFilter": window}),
        (c.list_closed_workflow_executions, {}),
        (
            c.count_open_workflow_executions,
            {"startTimeFilter": window, "executionFilter": {"workflowId": "w"}, "tagFilter": {"tag": "x"}},
        ),
        (c.count_closed_workflow_executions, {}),
        (c.count_closed_workflow_executions, {"startTimeFilter": window, "closeTimeFilter": window}),
    ]
    for fn, kw in refusals:
        e = await raises("ValidationException", fn, domain="d", **kw)
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    e = await raises(
        "ValidationException",
        c.list_closed_workflow_executions,
        domain="d",
        startTimeFilter=window,
        typeFilter={"name": "Order"},
        tagFilter={"tag": "x"},
    )
    assert "mutually exclusive" in e.response["Error"]["Message"]
    loose = swf.client(validate=False)
    await raises(
        "ValidationException",
        loose.list_open_workflow_executions,
        domain="d",
        startTimeFilter=window,
        maximumPageSize=1001,
    )
    await raises("ValidationException", loose.list_open_workflow_executions, domain="d")  # startTimeFilter
    await raises(
        "ValidationException",
        loose.list_closed_workflow_executions,
        domain="d",
        closeStatusFilter={"status": "DONE"},
        closeTimeFilter=window,
    )
    after = [(s.execution.run_id, s.version) for s in await store.swf_open_executions(None, 100)]
    assert after == before
