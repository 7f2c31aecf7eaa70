"""Debounced starts over HTTP, on both stores: the answers' shapes and bad input (the timing is
proven under MockClock in tests/actors/test_debounce.py)."""

from __future__ import annotations

from typing import Any

from ..conftest import Api

WF = {"name": "sync", "steps": [{"name": "t", "type": "task"}]}


async def test_a_burst_answers_202_with_one_run(api: Api) -> None:
    await api.register(WF)
    body = {"workflow": "sync", "input": {"n": 1}, "debounce": {"key": "order-7", "period": "1h"}}
    first = await api.call("POST", "/apps/orders/runs", body)
    assert first.status_code == 202, first.text
    pending = first.json()
    assert pending["debounced"] is True and pending["status"] == "pending" and pending["startsAt"]
    again = await api.call("POST", "/apps/orders/runs", {**body, "input": {"n": 2}})
    assert again.status_code == 202 and again.json()["runId"] == pending["runId"]
    run = await api.run(pending["runId"])
    assert run["status"] == "sleeping" and run["input"] == {"n": 2} and run["currentStep"] is None
    types = [e["type"] for e in await api.events(pending["runId"])]
    assert types == ["run_started", "start_debounced", "start_debounced"]
    lead = {"workflow": "sync", "debounce": {"key": "k", "period": "1h", "mode": "leading"}}
    started = await api.call("POST", "/apps/orders/runs", lead)
    assert started.status_code == 201 and started.json()["status"] == "running"
    dropped = await api.call("POST", "/apps/orders/runs", lead)
    assert dropped.status_code == 202
    assert dropped.json() == {"runId": started.json()["runId"], "debounced": True, "dropped": True}


async def test_bad_debounce_is_a_400_naming_the_field_and_stores_nothing(api: Api) -> None:
    await api.register(WF)
    bad: list[tuple[Any, str]] = [
        ({"key": "", "period": "1s"}, "debounce.key"),
        ({"key": "k" * 257, "period": "1s"}, "debounce.key"),
        ({"key": "k", "period": "soon"}, "debounce.period"),
        ({"key": "k", "period": "8d"}, "debounce.period"),
        ({"key": "k", "period": "1s", "mode": "middle"}, "debounce.mode"),
        ({"key": "k"}, "debounce.period"),
        ({"key": "k", "period": "1s", "extra": True}, "debounce"),
    ]
    for debounce, field in bad:
        r = await api.call("POST", "/apps/orders/runs", {"workflow": "sync", "debounce": debounce})
        assert r.status_code == 400, (debounce, r.text)
        assert r.json()["error"]["field"] == field or r.json()["error"]["message"].startswith(field), r.text
    r = await api.call(
        "POST",
        "/apps/orders/runs",
        {"workflow": "sync", "debounce": {"key": "k", "period": "1s"}},
        headers={**api.auth(), "Idempotency-Key": "abc"},
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "Idempotency-Key"
    assert (await api.call("GET", "/apps/orders/runs")).json()["runs"] == []
    assert await api.engine.store.get_debounce("orders", "sync", "k") is None
