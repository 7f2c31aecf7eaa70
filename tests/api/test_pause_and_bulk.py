"""Pause/unpause over HTTP, and the bulk interventions (pause, unpause, cancel, redrive), on both stores."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from ..conftest import Api
from ..helpers import answer_json

WAIT = {
    "name": "w",
    "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "after", "type": "task"}],
}
OTHER = {"name": "other", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}
FLAKY = {"name": "flaky", "steps": [{"name": "a", "type": "task", "retry": {"maxAttempts": 1}}]}


async def post(api: Api, path: str, body: Any = None, **kw: Any) -> Any:
    return await api.call("POST", f"/apps/orders/{path}", body if body is not None else {}, **kw)


async def test_pause_buffers_signals_and_unpause_resumes(api: Api) -> None:
    await api.register(WAIT)
    run = await api.start("w")
    rid = run["runId"]
    r = await post(api, f"runs/{rid}/pause", {"reason": "downstream broken"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "paused" and r.json()["waitSignal"] == "go"
    assert (await api.run(rid))["status"] == "paused"
    listed = await api.call("GET", "/apps/orders/runs", params={"status": "paused"})
    assert [x["runId"] for x in listed.json()["runs"]] == [rid]
    again = await post(api, f"runs/{rid}/pause")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_status"
    s = await post(api, "signals", {"runId": rid, "name": "go", "payload": {"ok": 1}})
    assert s.status_code == 202 and s.json()["status"] == "buffered"
    assert (await api.run(rid))["status"] == "paused"
    assert api.handler.received == []
    metrics = await api.client.get("/metrics", headers=api.admin())
    assert 'foliot_open_runs{status="paused"} 1.0' in metrics.text
    u = await post(api, f"runs/{rid}/unpause", {})
    assert u.status_code == 200, u.text
    done = await api.until(rid, "completed")
    assert done["state"]["w"] == {"ok": 1}
    types = [e["type"] for e in await api.events(rid)]
    assert types.index("run_paused") < types.index("signal_received") < types.index("run_unpaused")
    assert types.index("run_unpaused") < types.index("signal_consumed")
    closed = await post(api, f"runs/{rid}/pause")
    assert closed.status_code == 409 and closed.json()["error"]["code"] == "invalid_status"
    not_paused = await post(api, f"runs/{rid}/unpause")
    assert not_paused.status_code == 409 and not_paused.json()["error"]["code"] == "invalid_status"


async def test_an_in_flight_push_finishes_while_paused_and_the_run_waits_for_unpause(api: Api) -> None:
    release = trio.Event()
    arrived = trio.Event()

    async def slow(body: dict[str, Any], headers: dict[str, str]) -> Any:
        arrived.set()
        await release.wait()
        return answer_json({"made": True})

    api.handler.route("a", slow)
    await api.register(
        {"name": "two", "steps": [{"name": "a", "type": "task"}, {"name": "b", "type": "task"}]}
    )
    rid = (await api.start("two"))["runId"]
    await arrived.wait()
    r = await post(api, f"runs/{rid}/pause")
    assert r.status_code == 200 and r.json()["status"] == "paused"
    release.set()
    recorded = await api.engine.runs.wait_for(rid, lambda run: "a" in run.state)
    assert recorded.status == "paused" and recorded.state["a"] == {"made": True}
    assert [x.body["step"] for x in api.handler.received] == ["a"]  # b was not dispatched
    r = await post(api, f"runs/{rid}/unpause")
    assert r.status_code == 200
    await api.until(rid, "completed")
    assert [x.body["step"] for x in api.handler.received] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"reason": 7}, "reason"),
        ({"reason": "x" * 1025}, "reason"),
        ({"why": "x"}, "why"),
    ],
)
async def test_bad_pause_bodies_change_nothing(api: Api, body: Any, field: str) -> None:
    await api.register(WAIT)
    rid = (await api.start("w"))["runId"]
    before = await api.events(rid)
    for action in ("pause", "unpause"):
        r = await post(api, f"runs/{rid}/{action}", body)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", r.text
        assert field in r.json()["error"]["message"] or r.json()["error"].get("field") == field
    bad_json = await api.client.post(
        f"/apps/orders/runs/{rid}/pause",
        content=b"{not json",
        headers={**api.auth(), "content-type": "application/json"},
    )
    assert bad_json.status_code == 400
    wrong = await post(api, f"runs/{rid}/pause", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    missing = await post(api, "runs/run_nope/pause")
    assert missing.status_code == 404
    assert (await api.run(rid))["status"] == "waiting" and await api.events(rid) == before


async def _runs(api: Api, workflow: str, n: int) -> list[str]:
    return [(await api.start(workflow))["runId"] for _ in range(n)]


async def test_bulk_pause_pages_and_resumes_until_done(api: Api) -> None:
    await api.register(WAIT)
    await api.register(OTHER)
    ours = await _runs(api, "w", 5)
    theirs = await _runs(api, "other", 2)
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        r = await post(
            api, "runs/pause", {"workflow": "w", "limit": 2, "cursor": cursor, "reason": "incident"}
        )
        assert r.status_code == 200, r.text
        pages.append(r.json())
        cursor = r.json()["cursor"]
        if cursor is None:
            break
    assert [p["matched"] for p in pages] == [2, 2, 1]
    assert sum(p["paused"] for p in pages) == 5 and all(p["skipped"] == 0 for p in pages)
    for rid in ours:
        assert (await api.run(rid))["status"] == "paused"
    for rid in theirs:
        assert (await api.run(rid))["status"] == "waiting"
    # A page retried is safe: the runs already paused are skipped.
    again = await post(api, "runs/pause", {"workflow": "w"})
    assert again.json() == {"matched": 5, "paused": 0, "skipped": 5, "refused": [], "cursor": None}
    # Unpause only the paused ones, by status filter.
    r = await post(api, "runs/unpause", {"workflow": "w", "status": "paused"})
    assert r.json() == {"matched": 5, "unpaused": 5, "skipped": 0, "refused": [], "cursor": None}
    for rid in ours:
        assert (await api.run(rid))["status"] == "waiting"


async def test_bulk_cancel_filters_by_business_key_step_and_version(api: Api) -> None:
    await api.register(WAIT)
    a = (await api.start("w", businessKey="k-1"))["runId"]
    b = (await api.start("w", businessKey="k-2"))["runId"]
    r = await post(api, "runs/cancel", {"workflow": "w", "businessKey": "k-1"})
    assert r.json() == {"matched": 1, "cancelled": 1, "skipped": 0, "refused": [], "cursor": None}
    assert (await api.run(a))["status"] == "cancelled" and (await api.run(b))["status"] == "waiting"
    none = await post(api, "runs/cancel", {"workflow": "w", "step": "after"})
    assert none.json()["matched"] == 0 and (await api.run(b))["status"] == "waiting"
    wrong_version = await post(api, "runs/cancel", {"workflow": "w", "version": 2})
    assert wrong_version.json()["matched"] == 0
    r = await post(api, "runs/cancel", {"workflow": "w", "step": "w", "version": 1, "reason": "cleanup"})
    assert r.json() == {"matched": 2, "cancelled": 1, "skipped": 1, "refused": [], "cursor": None}
    assert (await api.run(b))["status"] == "cancelled"
    events = await api.events(b)
    assert events[-1]["type"] == "run_cancelled" and events[-1]["data"]["reason"] == "cleanup"


async def test_bulk_redrive_of_failed_runs(api: Api) -> None:
    broken = [True]

    def handler(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if broken[0]:
            return answer_json({"error": {"class": "bad", "retryable": False}}, 400)
        return answer_json({"ok": True})

    api.handler.route("a", handler)
    await api.register(FLAKY)
    ids = await _runs(api, "flaky", 3)
    for rid in ids:
        await api.until(rid, "failed")
    broken[0] = False
    r = await post(api, "runs/redrive", {"workflow": "flaky", "status": "failed"})
    assert r.json() == {"matched": 3, "redriven": 3, "skipped": 0, "refused": [], "cursor": None}
    for rid in ids:
        done = await api.until(rid, "completed")
        assert done["generation"] == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "workflow"),
        ({"workflow": "w", "limit": 0}, "limit"),
        ({"workflow": "w", "limit": 1001}, "limit"),
        ({"workflow": "w", "limit": "5"}, "limit"),
        ({"workflow": "w", "status": "asleep"}, "status"),
        ({"workflow": "w", "cursor": "not-a-cursor"}, "cursor"),
        ({"workflow": "w", "step": "bad name!"}, "step"),
        ({"workflow": "w", "version": 0}, "version"),
        ({"workflow": "w", "businessKey": ""}, "businessKey"),
        ({"workflow": "w", "reason": "x" * 2000}, "reason"),
        ({"workflow": "w", "extra": 1}, "extra"),
        ({"workflow": "../w"}, "workflow"),
        ([], None),
    ],
)
async def test_bad_bulk_bodies_change_nothing(api: Api, body: Any, field: str | None) -> None:
    await api.register(WAIT)
    rid = (await api.start("w"))["runId"]
    before = await api.events(rid)
    for verb in ("pause", "unpause", "cancel", "redrive"):
        r = await post(api, f"runs/{verb}", body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_request"
        if field is not None:
            assert field in error["message"] or error.get("field") == field, error
    for headers in ({"Authorization": "Bearer wrong"}, {}):
        r = await api.client.post("/apps/orders/runs/cancel", json={"workflow": "w"}, headers=headers)
        assert r.status_code == 401
    assert (await api.run(rid))["status"] == "waiting" and await api.events(rid) == before


async def test_another_apps_key_cannot_bulk_cancel(api: Api) -> None:
    await api.register(WAIT)
    rid = (await api.start("w"))["runId"]
    r = await api.client.put("/apps/shop", json={"handlerBaseUrl": api.handler.url}, headers=api.admin())
    other_key = r.json()["apiKey"]
    r = await api.client.post(
        "/apps/orders/runs/cancel", json={"workflow": "w"}, headers={"Authorization": f"Bearer {other_key}"}
    )
    assert r.status_code == 403
    assert (await api.run(rid))["status"] == "waiting"
