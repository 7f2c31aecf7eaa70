"""Health, readiness, metrics, and the live-actor views operators use."""

from __future__ import annotations

import trio
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from foliot.observe.metrics import OUTCOMES

from ..conftest import Api
from ..helpers import answer_json


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
    assert actor["kind"] == "run" and actor["id"] == run["runId"]
    assert actor["inflight"]["step"] == "t" and actor["inflight"]["pushing"] is True
    one = (await api.client.get(f"/admin/actors/{run['runId']}", headers=api.admin())).json()
    # A push in flight has no durable timer: its send-time deadline bounds the HTTP call itself.
    assert one["timers"] == [] and one["inflight"]["deadline"] is None
    release.set()
    await api.until(run["runId"], "waiting")
    one = (await api.client.get(f"/admin/actors/{run['runId']}", headers=api.admin())).json()
    (timer,) = one["timers"]
    assert timer["kind"] == "wait_timeout" and timer["slot"] == "step" and timer["due"].endswith("Z")
    assert timer["inMemory"] is False  # due in 1 h: beyond the wheel's 60 s window
    timers = (await api.client.get("/admin/timers", headers=api.admin())).json()
    # Issue 26, point 8: the stored timers (the console's figures), the window apart: a 1 h
    # wait timeout is in storage, beyond the in-memory window.
    assert timers["count"] == 1 and timers["truncated"] is False
    assert timers["nextDue"] == timer["due"]
    assert timers["window"] == {"count": 0, "nextDue": None, "end": timers["windowEnd"]}
    assert set(timers) >= {"count", "nextDue", "window", "lagMs", "maxLagMs", "fired"}
    none = await api.client.get("/admin/actors", params={"status": "nope"}, headers=api.admin())
    assert none.status_code == 400
    missing = await api.client.get("/admin/actors/run_missing", headers=api.admin())
    assert missing.status_code == 404


async def scrape(api: Api) -> dict[str, Metric]:
    """GET /metrics, parsed by prometheus_client's own parser (which refuses a malformed line)."""
    r = await api.client.get("/metrics", headers=api.admin())
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {family.name: family for family in text_string_to_metric_families(r.text)}


def value(families: dict[str, Metric], name: str, suffix: str = "", **labels: str) -> float:
    family = families[name]
    (found,) = [s for s in family.samples if s.name == name + suffix and s.labels == labels]
    return float(found.value)


async def test_metrics_are_prometheus_text(api: Api) -> None:
    await api.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run = await api.start("w")
    await api.until(run["runId"], "waiting")
    families = await scrape(api)
    assert value(families, "foliot_open_runs", status="waiting") == 1
    assert value(families, "foliot_live_actors") >= 1
    assert value(families, "foliot_actor_spawns", "_total") >= 1
    for name in (
        "foliot_actor_exits",
        "foliot_actor_restarts",
        "foliot_timers_fired",
        "foliot_timer_retries",
        "foliot_tasks_pushed",
        "foliot_push_outcomes",
    ):
        assert families[name].type == "counter"
    for name in (
        "foliot_pushes_in_flight",
        "foliot_pollers_waiting",
        "foliot_queued_tasks",
        "foliot_mailbox_messages",
        "foliot_timers_in_memory",
        "foliot_timer_firings_in_flight",
        "foliot_commits_in_progress",
    ):
        assert families[name].type == "gauge"
    if "sqlite" in api.engine.settings.database_url:
        assert value(families, "foliot_storage_writer_queue") == 0
        assert value(families, "foliot_storage_writer_blocked") == 0
    # The start and the park were committed: the commit histogram counted them, by backend.
    (commits,) = [s for s in families["foliot_commit_latency_seconds"].samples if s.name.endswith("_count")]
    assert commits.labels["backend"] in ("sqlite", "postgres") and commits.value >= 1
    assert families["foliot_timer_lag_seconds"].type == "histogram"
    assert families["foliot_push_latency_seconds"].type == "histogram"


FORGED = 'x"} 1\nfoliot_open_runs{status="running"} 999999'


async def test_a_handler_cannot_forge_metrics(api: Api) -> None:
    """Defect 10: error classes chosen by a handler never reach a label; they count as app_error."""
    classes = iter(['db "primary" down\n', FORGED])

    def fail(body: object, headers: object) -> tuple[int, dict[str, str], bytes]:
        error = {"class": next(classes), "message": "nope", "retryable": False}
        return answer_json({"error": error}, status=500)

    api.handler.route("t", fail)
    await api.register({"name": "t", "steps": [{"name": "t", "type": "task"}]})
    runs = [await api.start("t") for _ in range(2)]
    for run in runs:
        assert (await api.until(run["runId"], "failed"))["status"] == "failed"
    families = await scrape(api)
    assert all(s.value != 999999 for f in families.values() for s in f.samples)
    assert "running" not in {s.labels.get("status") for s in families["foliot_open_runs"].samples}
    outcomes = {
        s.labels["outcome"]: s.value
        for s in families["foliot_push_outcomes"].samples
        if s.name.endswith("_total")
    }
    assert outcomes["app_error"] == 2 and outcomes["ok"] == 0
    assert set(outcomes) == set(OUTCOMES)
    assert value(families, "foliot_tasks_pushed", "_total") == 2
    assert value(families, "foliot_push_latency_seconds", "_count", outcome="app_error") == 2


async def test_runs_by_workflow_in_metrics_and_open_runs_from_the_counters(api: Api) -> None:
    """Issue 26 point 6: "is workflow X failing?" answered by `foliot_runs_closed_total`; the
    open-runs gauge reads the trigger-kept `run_counts` counters, never the open rows: a count
    changed behind the store's back shows as it is."""
    from ..storage.test_contract import raw

    refusal = {"error": {"class": "x", "retryable": False}}
    api.handler.route("t", lambda body, headers: answer_json(refusal, 500))
    await api.register({"name": "pay", "steps": [{"name": "t", "type": "task"}]})
    await api.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    failed = await api.start("pay")
    await api.until(failed["runId"], "failed")
    await api.until((await api.start("w"))["runId"], "waiting")
    families = await scrape(api)
    assert value(families, "foliot_runs_started", "_total", app="orders", workflow="pay") == 1
    assert value(families, "foliot_runs_started", "_total", app="orders", workflow="w") == 1
    assert value(families, "foliot_runs_closed", "_total", app="orders", workflow="pay", status="failed") == 1
    assert value(families, "foliot_step_failures", "_total", app="orders", workflow="pay", step="t") == 1
    assert value(families, "foliot_open_runs", status="waiting") == 1
    await raw(api.engine.store, "UPDATE run_counts SET n = n + 1000000 WHERE status = 'waiting'")
    assert value(await scrape(api), "foliot_open_runs", status="waiting") == 1_000_001
