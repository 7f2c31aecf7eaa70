"""`GET /apps/{app}/runs/{runId}/diagnosis` on both stores: the typical stuck cases, end to end."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from ..conftest import Api
from ..helpers import answer_json


async def diagnosis(api: Api, run_id: str, **kw: Any) -> Any:
    r = await api.call("GET", f"/apps/orders/runs/{run_id}/diagnosis", **kw)
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_queue_nobody_polls_then_one_somebody_polls(api: Api) -> None:
    await api.register({"name": "pick", "steps": [{"name": "ship", "type": "task", "queue": "warehouse"}]})
    run = await api.start("pick")
    d = await diagnosis(api, run["runId"])
    assert d["runId"] == run["runId"] and d["status"] == "running" and d["attention"] is True
    assert d["summary"].startswith("queued on `warehouse` for ")
    assert "no poller has asked for `warehouse` since this server started" in d["summary"]
    # A worker polls another queue: still nobody for `warehouse`.
    r = await api.call(
        "POST", "/apps/orders/tasks/poll", {"queue": "other", "waitSeconds": 0, "workerId": "w-9"}
    )
    assert r.status_code == 200 and r.json() == {"tasks": []}
    assert "since this server started" in (await diagnosis(api, run["runId"]))["summary"]

    # A worker parked on `warehouse`... claims it at once; the diagnosis then names the worker.
    r = await api.call(
        "POST", "/apps/orders/tasks/poll", {"queue": "warehouse", "waitSeconds": 0, "workerId": "w-1"}
    )
    assert len(r.json()["tasks"]) == 1
    d = await diagnosis(api, run["runId"])
    assert d["summary"].startswith(
        "attempt 1 of `ship` is claimed by worker `w-1`; it must complete or heartbeat in "
    )
    assert d["attention"] is False


async def test_pollers_seen_are_listed(api: Api) -> None:
    await api.register({"name": "pick", "steps": [{"name": "ship", "type": "task", "queue": "dock"}]})
    r = await api.call(
        "POST", "/apps/orders/tasks/poll", {"queue": "dock", "waitSeconds": 0, "workerId": "w-2"}
    )
    assert r.json() == {"tasks": []}
    run = await api.start("pick")
    d = await diagnosis(api, run["runId"])
    facts = {f["code"]: f["text"] for f in d["facts"]}
    assert facts["pollers_seen"].startswith("pollers seen on `dock`: `w-2` ")
    assert facts["queue_backlog"] == "1 task(s) wait on `dock`"
    assert "a poller asked" in d["summary"] or "no poller has asked for `dock` in" in d["summary"]


async def test_waiting_failed_and_completed(api: Api) -> None:
    api.handler.route(
        "boom", lambda body, headers: answer_json({"error": {"class": "bad", "message": "<no>"}}, 400)
    )
    await api.register(
        {
            "name": "flow",
            "steps": [
                {"name": "pay", "type": "wait", "signal": "paid", "timeout": "2d"},
                {"name": "boom", "type": "task"},
            ],
        }
    )
    run = await api.start("flow")
    await api.until(run["runId"], "waiting")
    d = await diagnosis(api, run["runId"])
    assert d["summary"].startswith("waiting at `pay` for signal `paid` for ")
    assert d["summary"].endswith("it times out in 1 d 23 h")  # 2 d less the time since
    assert "timer_stored" in {f["code"] for f in d["facts"]}
    r = await api.call("POST", "/apps/orders/signals", {"name": "paid", "runId": run["runId"]})
    assert r.status_code == 202
    await api.until(run["runId"], "failed")
    d = await diagnosis(api, run["runId"])
    assert d["attention"] is True
    assert d["summary"].startswith("failed at `boom` ")
    assert d["summary"].endswith("(bad: <no>); redrive or rewind it to continue")


@pytest.mark.parametrize("settings_overrides", [{"passivate_after_ms": 0}])
async def test_a_passivated_sleep_shows_its_timer_from_storage(api: Api) -> None:
    await api.register({"name": "nap", "steps": [{"name": "nap", "type": "sleep", "duration": "14d"}]})
    run = await api.start("nap")
    await api.until(run["runId"], "sleeping")
    with trio.fail_after(10):
        while run["runId"] in api.engine.supervisor.actors:  # noqa: ASYNC110 (the sweeper runs on its own)
            await trio.sleep(0.01)
    d = await diagnosis(api, run["runId"])
    assert d["summary"].startswith("sleeping at `nap` until ") and d["summary"].endswith("(in 13 d 23 h)")
    facts = {f["code"]: f["text"] for f in d["facts"]}
    assert facts["timer_stored"].startswith("sleep timer in storage, due in 13 d 23 h")
    assert facts["actor_passivated"].startswith("passivated")


async def test_refusals(api: Api) -> None:
    await api.register({"name": "nap", "steps": [{"name": "nap", "type": "sleep", "duration": "1d"}]})
    run = await api.start("nap")
    path = f"/apps/orders/runs/{run['runId']}/diagnosis"
    assert (await api.client.get(path)).status_code == 401
    bad = await api.call("GET", path, headers={"Authorization": "Bearer fk_key_x.nope"})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "unauthorized"
    unknown = await api.call("GET", path, params={"verbose": "1"})
    assert unknown.status_code == 400 and unknown.json()["error"]["field"] == "verbose"
    missing = await api.call("GET", "/apps/orders/runs/run_nope/diagnosis")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    r = await api.client.put("/apps/other", json={"handlerBaseUrl": api.handler.url}, headers=api.admin())
    other = await api.call("GET", f"/apps/other/runs/{run['runId']}/diagnosis")
    assert r.status_code == 201 and other.status_code == 403
    as_other = await api.call(
        "GET",
        f"/apps/other/runs/{run['runId']}/diagnosis",
        headers={"Authorization": f"Bearer {r.json()['apiKey']}"},
    )
    assert as_other.status_code == 404  # another app's run is not found, never shown
    admin = await api.call("GET", path, headers=api.admin())
    assert admin.status_code == 200


async def test_a_push_timeout_over_the_sync_cap_warns_at_registration_and_in_why(api: Api) -> None:
    api.handler.route("slow", lambda body, headers: answer_json({"error": {"class": "busy"}}, 503))
    definition = {
        "name": "slow",
        "steps": [
            {
                "name": "slow",
                "type": "task",
                "timeout": "1h",
                "retry": {"maxAttempts": 3, "initialInterval": "1h"},
            },
            {"name": "queued", "type": "task", "queue": "q", "timeout": "1h"},
            {"name": "fast", "type": "task", "timeout": "10s"},
        ],
    }
    r = await api.call("POST", "/apps/orders/workflows", definition)
    assert r.status_code == 201, r.text
    (warning,) = r.json()["warnings"]
    assert warning["code"] == "timeout_over_sync_cap" and warning["step"] == "slow"
    assert warning["field"] == "steps[0].timeout"
    assert "3600000 ms" in warning["message"] and "FOLIOT_SYNC_TASK_MAX_MS (30000 ms)" in warning["message"]
    again = await api.call("POST", "/apps/orders/workflows", definition)
    assert again.status_code == 200 and again.json()["warnings"] == r.json()["warnings"]

    run = await api.start("slow")
    with trio.fail_after(10):
        await api.engine.runs.wait_for(
            run["runId"], lambda r: r.timer is not None and r.timer.kind == "retry"
        )
    facts = {f["code"]: f["text"] for f in (await diagnosis(api, run["runId"]))["facts"]}
    assert "FOLIOT_SYNC_TASK_MAX_MS (30 s)" in facts["timeout_over_sync_cap"]


async def test_a_pending_debounced_run_says_it_waits_for_its_window(api: Api) -> None:
    await api.register({"name": "sync", "steps": [{"name": "a", "type": "task"}]})
    body = {"workflow": "sync", "debounce": {"key": "order-7", "period": "1h"}}
    r = await api.call("POST", "/apps/orders/runs", body)
    assert r.status_code == 202, r.text
    pending = r.json()
    d = await diagnosis(api, pending["runId"])
    assert d["summary"].startswith(
        "pending: a debounced start waiting for its debounce window (key `order-7`)"
    )
    assert f"it begins at {pending['startsAt']} (in " in d["summary"]
