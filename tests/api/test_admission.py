"""Admission control at the edge: a saturated engine refuses starts and signals at once with
429 (503 when storage is the bottleneck), `Retry-After`, and stores nothing."""

from __future__ import annotations

import time

import pytest

from ..conftest import Api

WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


@pytest.mark.parametrize("settings_overrides", [{"max_inflight_requests": 1}])
async def test_with_the_in_flight_cap_reached_a_start_answers_429_at_once(api: Api) -> None:
    await api.register(WAIT)
    waiting = await api.start("w")
    admission = api.engine.admission
    with admission.admit(api.app) as held:  # one start or signal being served: the cap
        held.begin()
        started = time.monotonic()
        r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "w", "businessKey": "k1"})
        elapsed = time.monotonic() - started
        assert r.status_code == 429, r.text
        assert r.headers["Retry-After"] == "1"
        error = r.json()["error"]
        assert (error["code"], error["reason"], error["retryAfter"]) == ("overloaded", "inflight", 1)
        assert elapsed < 1.0
        s = await api.call("POST", f"/apps/{api.app}/signals", {"name": "go", "runId": waiting["runId"]})
        assert s.status_code == 429 and s.headers["Retry-After"] == "1"
    # Nothing was stored: the refused start left no run, the refused signal reached no actor.
    listed = await api.call("GET", f"/apps/{api.app}/runs", params={"workflow": "w"})
    assert [run["runId"] for run in listed.json()["runs"]] == [waiting["runId"]]
    assert (await api.run(waiting["runId"]))["status"] == "waiting"
    assert admission.refused["inflight"] == 2 and admission.inflight == 0
    metrics = (await api.client.get("/metrics", headers=api.admin())).text
    assert 'foliot_admission_refused_total{reason="inflight"} 2' in metrics
    assert "foliot_requests_in_flight 0" in metrics and "foliot_push_backlog 0" in metrics
    # Once there is room again, the same start goes through.
    r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "w", "businessKey": "k1"})
    assert r.status_code == 201


async def test_a_full_storage_queue_answers_503_with_retry_after(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    await api.register(WAIT)
    monkeypatch.setattr(api.engine.admission, "storage_queue_max", 0)
    r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "w"})
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    assert r.json()["error"]["code"] == "overloaded" and r.json()["error"]["reason"] == "storage"
    listed = await api.call("GET", f"/apps/{api.app}/runs")
    assert listed.json()["runs"] == []
