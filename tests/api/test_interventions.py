"""Operator interventions over HTTP, generations, and late answers that change nothing."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from foliot.http.app import create_app
from foliot.http.openapi import document, routes

from ..conftest import Api
from ..helpers import answer_json
from .test_tasks import accepted_task

ONE = {
    "name": "one",
    "steps": [
        {"name": "a", "type": "task", "retry": {"maxAttempts": 2, "initialInterval": "1ms"}},
        {"name": "b", "type": "task"},
    ],
}


async def intervene(
    api: Api, run_id: str, action: str, body: dict[str, Any] | None = None, method: str = "POST"
) -> Any:
    return await api.call(method, f"/apps/orders/runs/{run_id}/{action}", body or {})


async def test_redrive_after_a_fix(api: Api) -> None:
    broken = [True]

    def handler(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if broken[0]:
            return answer_json({"error": {"class": "bad_config", "message": "no such sku"}}, 400)
        return answer_json({"ok": True})

    api.handler.route("a", handler)
    await api.register(ONE)
    run = await api.start("one")
    failed = await api.until(run["runId"], "failed")
    assert failed["error"] == {"step": "a", "class": "bad_config", "message": "no such sku"}
    assert len(api.handler.received) == 1  # a 400 is not retried
    broken[0] = False
    r = await intervene(api, run["runId"], "redrive", {"reason": "sku table fixed"})
    assert r.status_code == 200 and r.json()["generation"] == 2
    done = await api.until(run["runId"], "completed")
    assert done["generation"] == 2 and done["error"] is None
    assert api.handler.keys() == [f"{run['runId']}:1:a:1", f"{run['runId']}:2:a:1", f"{run['runId']}:2:b:1"]
    events = await api.events(run["runId"])
    redriven = [e for e in events if e["type"] == "run_redriven"]
    assert redriven[0]["data"]["reason"] == "sku table fixed" and redriven[0]["generation"] == 2
    again = await intervene(api, run["runId"], "redrive")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_status"


async def test_rewind_a_completed_run_onto_version_2(api: Api) -> None:
    await api.register(ONE)
    run = await api.start("one")
    await api.until(run["runId"], "completed")
    v2 = {"name": "one", "steps": [{"name": "pre", "type": "task"}, *ONE["steps"]]}
    assert await api.register(v2) == 2
    r = await intervene(api, run["runId"], "rewind", {"toStep": "pre", "version": 2, "reason": "new check"})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 2 and r.json()["generation"] == 2
    done = await api.until(run["runId"], "completed")
    assert set(done["state"]) == {"pre", "a", "b"} and done["version"] == 2
    bad = await intervene(api, run["runId"], "rewind", {"toStep": "zzz"})
    assert bad.status_code == 400
    missing = await intervene(api, run["runId"], "rewind", {"toStep": "a", "version": 9})
    assert missing.status_code == 404


async def test_skip_a_wait(api: Api) -> None:
    await api.register(
        {
            "name": "w",
            "steps": [{"name": "w", "type": "wait", "signal": "never"}, {"name": "t", "type": "task"}],
        }
    )
    run = await api.start("w")
    await api.until(run["runId"], "waiting")
    r = await intervene(
        api, run["runId"], "skip", {"output": {"by": "phone"}, "reason": "confirmed by phone"}
    )
    assert r.status_code == 200
    done = await api.until(run["runId"], "completed")
    assert done["state"]["w"] == {"by": "phone"}
    r = await intervene(api, run["runId"], "skip")
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_status"


async def test_state_edit_records_keys_and_reason_but_no_value(api: Api) -> None:
    await api.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run = await api.start("w")
    await api.until(run["runId"], "waiting")
    r = await intervene(
        api,
        run["runId"],
        "state",
        {
            "set": {"reserve": {"card": "4242-SECRET"}},
            "unset": ["old"],
            "reason": "handler stored the wrong card",
        },
        method="PATCH",
    )
    assert r.status_code == 200 and r.json()["state"] == {"reserve": {"card": "4242-SECRET"}}
    events = await api.events(run["runId"])
    edit = [e for e in events if e["type"] == "state_edited"]
    assert edit[0]["data"] == {
        "set": ["reserve"],
        "unset": ["old"],
        "reason": "handler stored the wrong card",
    }
    assert "4242-SECRET" not in str(events)
    big = await intervene(
        api, run["runId"], "state", {"set": {"x": "y" * 262_143}, "reason": "r"}, method="PATCH"
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"
    no_reason = await intervene(api, run["runId"], "state", {"set": {"x": 1}}, method="PATCH")
    assert no_reason.status_code == 400 and no_reason.json()["error"]["field"] == "reason"
    assert (await api.run(run["runId"]))["state"] == {"reserve": {"card": "4242-SECRET"}}


async def test_cancel_while_a_202_task_is_open(api: Api) -> None:
    run, token = await accepted_task(api, ONE)
    r = await intervene(api, run["runId"], "cancel", {"reason": "customer cancelled"})
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    late = await api.call("POST", f"/apps/orders/tasks/{token}/complete", {"output": 1})
    assert late.status_code == 409 and late.json()["error"]["code"] == "task_closed"
    hb = await api.call("POST", f"/apps/orders/tasks/{token}/heartbeat", {})
    assert hb.status_code == 200 and hb.json() == {"cancelRequested": True}
    assert (await api.run(run["runId"]))["state"] == {}
    for action in ("cancel", "skip", "redrive", "rewind"):
        r = await intervene(api, run["runId"], action, {"toStep": "a"} if action == "rewind" else {})
        assert r.status_code == 409, action
    edit = await intervene(api, run["runId"], "state", {"set": {"x": 1}, "reason": "r"}, method="PATCH")
    assert edit.status_code == 409
    signal = await api.call("POST", "/apps/orders/signals", {"runId": run["runId"], "name": "go"})
    assert signal.status_code == 409 and signal.json()["error"]["code"] == "run_closed"


async def test_a_push_answering_after_a_rewind_changes_nothing(api: Api) -> None:
    release = trio.Event()
    calls: list[int] = []

    async def slow(body: dict[str, Any], headers: dict[str, str]) -> Any:
        calls.append(body["generation"])
        if len(calls) == 1:
            await release.wait()
            return answer_json({"from": "generation 1"})
        return answer_json({"from": f"generation {body['generation']}"})

    api.handler.route("a", slow)
    await api.register(ONE)
    run = await api.start("one")
    await api.handler.wait_for(1)
    r = await intervene(api, run["runId"], "rewind", {"toStep": "a", "reason": "redo"})
    assert r.status_code == 200
    done = await api.until(run["runId"], "completed")
    release.set()
    await trio.testing.wait_all_tasks_blocked(0.05)
    final = await api.run(run["runId"])
    assert final["state"]["a"] == {"from": "generation 2"} and final["generation"] == 2
    assert done["state"] == final["state"]


async def test_openapi_documents_every_route(api: Api) -> None:
    r = await api.client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"] == "3.1.0"
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    app = create_app(api.engine, api.engine.settings, "x")
    assert documented == routes(app)
    assert ("POST", "/apps/{app}/runs") in documented
    assert not any(path.startswith("/internal/") for _, path in documented)

    @app.get("/undocumented")
    async def undocumented() -> str:
        return "x"

    with pytest.raises(KeyError, match="undocumented"):
        document(app)
