"""Health, readiness, metrics, and the live-actor views operators use."""

from __future__ import annotations

import trio

from ..conftest import Api


async def test_health_and_readiness_need_no_key(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    assert (await api.client.get("/readyz")).json() == {"status": "ready"}


async def test_admin_views_need_the_admin_token(api: Api) -> None:
    for path in ("/metrics", "/admin/actors", "/admin/timers", "/admin/actors/run_x"):
        assert (await api.client.get(path)).status_code == 401
        r = await api.client.get(path, headers=api.auth())
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


async def test_live_actors_and_timers(api: Api) -> None:
    release = trio.Event()

    async def held(body: object, headers: object) -> tuple[int, dict[str, str], bytes]:
        await release.wait()
        return 200, {}, b"{}"

    api.handler.route("t", held)
    await api.register(
        {
            "name": "mix",
            "steps": [
                {"name": "t", "type": "task", "timeout": "1m"},
                {"name": "w", "type": "wait", "signal": "go", "timeout": "1h"},
            ],
        }
    )
    run = await api.start("mix")
    await api.handler.wait_for(1)
    r = await api.client.get("/admin/actors", params={"status": "running"}, headers=api.admin())
    assert r.status_code == 200
    (actor,) = [a for a in r.json()["actors"] if a["runId"] == run["runId"]]
    assert actor["currentStep"] == "t" and actor["mailboxDepth"] == 0 and actor["liveSince"].endswith("Z")
    assert actor["inflight"]["step"] == "t" and actor["inflight"]["pushing"] is True
    one = (await api.client.get(f"/admin/actors/{run['runId']}", headers=api.admin())).json()
    (timer,) = one["timers"]
    assert timer["kind"] == "task_deadline" and timer["slot"] == "step" and timer["due"].endswith("Z")
    assert timer["inMemory"] is False  # due in 60 s: at the edge of the wheel's 60 s window
    release.set()
    await api.until(run["runId"], "waiting")
    timers = (await api.client.get("/admin/timers", headers=api.admin())).json()
    assert timers["count"] == 0  # a 1 h wait timeout is beyond the in-memory window
    assert set(timers) >= {"count", "nextDue", "lagMs", "maxLagMs", "fired"}
    none = await api.client.get("/admin/actors", params={"status": "nope"}, headers=api.admin())
    assert none.status_code == 400
    missing = await api.client.get("/admin/actors/run_missing", headers=api.admin())
    assert missing.status_code == 404


async def test_metrics_are_prometheus_text(api: Api) -> None:
    await api.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run = await api.start("w")
    await api.until(run["runId"], "waiting")
    r = await api.client.get("/metrics", headers=api.admin())
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    lines = r.text.splitlines()
    assert 'foliot_open_runs{status="waiting"} 1' in lines
    assert any(line.startswith("foliot_live_actors ") for line in lines)
    assert all(line.startswith("#") or " " in line for line in lines)
