"""Schedules over HTTP on both stores: create/replace, read (next and last fires, counters),
list, pause/unpause, trigger, backfill, delete; bad input refused naming the field with nothing
stored; a scheduled time starts one run, ever (also after its run closed); the run carries its
schedule and business key. The clock-driven fires are in tests/actors/test_schedules.py."""

from __future__ import annotations

from typing import Any

import pytest

from ..conftest import ADMIN, Api
from .test_console import browser, login

WAIT = {"name": "nightly", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}
BASE = "/apps/orders/schedules"


async def put(api: Api, name: str, body: dict[str, Any]) -> Any:
    return await api.call("PUT", f"{BASE}/{name}", body)


async def post(api: Api, path: str, body: Any = None) -> Any:
    return await api.call("POST", f"{BASE}/{path}", body if body is not None else {})


async def test_create_read_replace_list_delete(api: Api) -> None:
    await api.register(WAIT)
    body = {"workflow": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "input": {"n": 1}}
    r = await put(api, "nightly", body)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["name"] == "nightly" and created["cron"] == "0 3 * * *"
    assert created["overlap"] == "skip" and created["catchupWindow"] == "1m" and created["paused"] is False
    assert len(created["nextFires"]) == 5 and created["lastFires"] == []
    assert (created["skipped"], created["missed"], created["fired"]) == (0, 0, 0)
    again = await put(api, "nightly", body)
    assert again.status_code == 200 and again.json()["nextFires"] == created["nextFires"]
    with_zone = await put(api, "nightly", {**body, "cron": None, "every": "1h"})
    assert with_zone.status_code == 400 and with_zone.json()["error"]["field"] == "timezone"
    plain = {**body, "cron": None, "timezone": None, "every": "1h", "overlap": "allow"}
    replaced = await put(api, "nightly", plain)
    assert replaced.status_code == 200 and replaced.json()["every"] == "1h"
    assert replaced.json()["timezone"] == "UTC"
    assert replaced.json()["cron"] is None and replaced.json()["overlap"] == "allow"
    for name in ("b", "c"):
        assert (await put(api, name, {"workflow": "nightly", "every": "1d"})).status_code == 201
    page = await api.call("GET", BASE, params={"limit": 2})
    assert page.status_code == 200
    assert [s["name"] for s in page.json()["schedules"]] == ["b", "c"]
    rest = await api.call("GET", BASE, params={"cursor": page.json()["nextCursor"]})
    assert [s["name"] for s in rest.json()["schedules"]] == ["nightly"] and rest.json()["nextCursor"] is None
    gone = await api.call("DELETE", f"{BASE}/b")
    assert gone.status_code == 200, gone.text
    assert (await api.call("GET", f"{BASE}/b")).status_code == 404
    assert (await api.call("DELETE", f"{BASE}/b")).status_code == 404
    assert (await post(api, "b/trigger")).status_code == 404
    # The schedule's timers left with it; the others' are there.
    timers = {t.run_id for t in await api.engine.store.timers_due_before(2**62, 100)}
    assert "sched:orders:b" not in timers and "sched:orders:c" in timers


async def test_trigger_starts_a_run_with_its_schedule_and_honours_overlap(api: Api) -> None:
    await api.register(WAIT)
    assert (await put(api, "s", {"workflow": "nightly", "every": "1h"})).status_code == 201
    first = await post(api, "s/trigger")
    assert first.status_code == 200, first.text
    fired = first.json()
    assert fired["outcome"] == "started" and fired["runId"].startswith("run_")
    run = await api.run(fired["runId"])
    assert run["schedule"] == {"name": "s", "scheduledTime": fired["scheduledTime"], "reason": None}
    assert run["businessKey"] == f"schedule:s:{fired['scheduledTime']}"
    assert run["status"] == "waiting"
    # skip (the default): the previous run is open.
    second = await post(api, "s/trigger")
    assert second.json()["outcome"] == "skipped" and second.json()["runId"] is None
    shown = (await api.call("GET", f"{BASE}/s")).json()
    assert shown["skipped"] == 1 and shown["fired"] == 1
    assert shown["lastFires"] == [
        {
            "scheduledTime": fired["scheduledTime"],
            "runId": fired["runId"],
            "firedAt": shown["lastFires"][0]["firedAt"],
            "source": "trigger",
            "reason": None,
            "status": "waiting",
        }
    ]
    # buffer_one: held while the run is open.
    await put(api, "s", {"workflow": "nightly", "every": "1h", "overlap": "buffer_one"})
    held = await post(api, "s/trigger")
    assert held.json()["outcome"] == "buffered"
    assert (await api.call("GET", f"{BASE}/s")).json()["buffered"] == held.json()["scheduledTime"]
    # allow: another run at once.
    await put(api, "s", {"workflow": "nightly", "every": "1h", "overlap": "allow"})
    allowed = await post(api, "s/trigger")
    assert allowed.json()["outcome"] == "started"
    metrics = await api.client.get("/metrics", headers=api.admin())
    assert 'foliot_schedule_fires_total{outcome="fired"} 2.0' in metrics.text
    assert 'foliot_schedule_fires_total{outcome="skipped"} 1.0' in metrics.text


async def test_a_triggers_reason_is_recorded_on_its_run_and_its_fire(api: Api) -> None:
    await api.register(WAIT)
    await put(api, "s", {"workflow": "nightly", "every": "1h", "overlap": "allow"})
    fired = (await post(api, "s/trigger", {"reason": "rerun after the outage"})).json()
    run = await api.run(fired["runId"])
    assert run["schedule"]["reason"] == "rerun after the outage"
    last = (await api.call("GET", f"{BASE}/s")).json()["lastFires"]
    assert [(f["runId"], f["source"], f["reason"]) for f in last] == [
        (fired["runId"], "trigger", "rerun after the outage")
    ]
    refused = await post(api, "s/trigger", {"reason": "x" * 10_000})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "reason"
    unknown = await post(api, "s/trigger", {"why": "?"})
    assert unknown.status_code == 400 and unknown.json()["error"]["field"] == "why"


async def test_cancel_previous(api: Api) -> None:
    await api.register(WAIT)
    await put(api, "s", {"workflow": "nightly", "every": "1h", "overlap": "cancel_previous"})
    first = (await post(api, "s/trigger")).json()
    second = (await post(api, "s/trigger")).json()
    assert second["outcome"] == "started" and second["runId"] != first["runId"]
    assert (await api.until(first["runId"], "cancelled"))["status"] == "cancelled"
    assert (await api.run(second["runId"]))["status"] == "waiting"


async def test_pause_and_unpause(api: Api) -> None:
    await api.register(WAIT)
    await put(api, "s", {"workflow": "nightly", "cron": "@hourly"})
    paused = await post(api, "s/pause", {"reason": "maintenance"})
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True and paused.json()["pauseReason"] == "maintenance"
    assert paused.json()["nextFires"] == []
    assert "sched:orders:s" not in {t.run_id for t in await api.engine.store.timers_due_before(2**62, 100)}
    # A PUT that leaves `paused` out keeps the pause.
    assert (await put(api, "s", {"workflow": "nightly", "cron": "@daily"})).json()["paused"] is True
    long = await post(api, "s/pause", {"reason": "x" * 2000})
    assert long.status_code == 400 and long.json()["error"]["field"] == "reason"
    unpaused = await post(api, "s/unpause", {})
    assert unpaused.json()["paused"] is False and len(unpaused.json()["nextFires"]) == 5
    assert (await put(api, "p", {"workflow": "nightly", "every": "1m", "paused": True})).json()[
        "paused"
    ] is True


async def test_backfill_and_a_time_starts_one_run_ever(api: Api) -> None:
    await api.register(WAIT)
    await put(api, "s", {"workflow": "nightly", "cron": "0 * * * *", "overlap": "skip"})
    r = await post(api, "s/backfill", {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T03:00:00Z"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert [f["scheduledTime"] for f in out["fires"]] == [
        "2026-01-01T00:00:00.000Z",
        "2026-01-01T01:00:00.000Z",
        "2026-01-01T02:00:00.000Z",
    ]
    assert out["started"] == 3 and out["alreadyFired"] == 0
    first = out["fires"][0]["runId"]
    # Close the first run: its scheduled time still never starts another.
    s = await api.call("POST", "/apps/orders/signals", {"runId": first, "name": "go"})
    assert s.status_code == 202, s.text
    await api.until(first, "completed")
    again = await post(api, "s/backfill", {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T04:00:00Z"})
    assert again.status_code == 200
    assert again.json()["started"] == 1 and again.json()["alreadyFired"] == 3
    assert [f["runId"] for f in again.json()["fires"][:3]] == [f["runId"] for f in out["fires"]]
    listed = await api.call("GET", "/apps/orders/runs", params={"workflow": "nightly", "limit": 100})
    assert len(listed.json()["runs"]) == 4
    shown = (await api.call("GET", f"{BASE}/s")).json()
    assert [f["scheduledTime"] for f in shown["lastFires"]][:2] == [
        "2026-01-01T03:00:00.000Z",
        "2026-01-01T02:00:00.000Z",
    ]
    assert shown["lastFires"][-1]["status"] == "completed" and shown["fired"] == 4
    # Too large a range, and bad bounds: 400 naming the field.
    big = await post(api, "s/backfill", {"from": "2020-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"})
    assert big.status_code == 400 and big.json()["error"]["field"] == "to"
    for bad, field in (
        ({"from": "2026-01-01T00:00:00Z"}, "to"),
        ({"from": "yesterday", "to": "2026-01-01T00:00:00Z"}, "from"),
        ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "to"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "overlap": "allow"}, "overlap"),
    ):
        refused = await post(api, "s/backfill", bad)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == field, refused.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workflow": "nightly", "cron": "not a cron"}, "cron"),
        ({"workflow": "nightly", "cron": "* * * * * *"}, "cron"),
        ({"workflow": "nightly", "every": "1m", "timezone": "Atlantis/Capital"}, "timezone"),
        ({"workflow": "nightly", "every": "1m", "timezone": "Europe/Berlin"}, "timezone"),
        ({"workflow": "nightly", "cron": "@daily", "timezone": "Atlantis/Capital"}, "timezone"),
        ({"workflow": "nightly", "every": "1m", "cron": "@daily"}, "every"),
        ({"workflow": "nightly"}, "cron"),
        ({"workflow": "nightly", "every": "999ms"}, "every"),
        ({"workflow": "nope", "every": "1m"}, "workflow"),
        ({"workflow": "nightly", "version": 9, "every": "1m"}, "version"),
        ({"workflow": "nightly", "every": "1m", "extra": 1}, "extra"),
        ({"workflow": "nightly", "every": 60}, "every"),
        ({"workflow": "nightly", "every": "1m", "overlap": "queue"}, "overlap"),
        ({"workflow": "nightly", "every": "1m", "input": "x" * 300_000}, "input"),
    ],
)
async def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
    api: Api, body: dict[str, Any], field: str
) -> None:
    await api.register(WAIT)
    r = await put(api, "bad", body)
    assert r.status_code in (400, 413), r.text
    assert r.json()["error"]["field"] == field
    assert (await api.call("GET", f"{BASE}/bad")).status_code == 404
    assert await api.engine.store.get_schedule("orders", "bad") is None
    listed = await api.call("GET", BASE)
    assert listed.json()["schedules"] == []


async def test_bad_names_auth_and_queries(api: Api) -> None:
    await api.register(WAIT)
    assert (await put(api, "bad name", {"workflow": "nightly", "every": "1m"})).status_code in (400, 404)
    r = await api.client.put(f"{BASE}/s", json={"workflow": "nightly", "every": "1m"})
    assert r.status_code == 401
    q = await api.call("GET", BASE, params={"color": "x"})
    assert q.status_code == 400 and q.json()["error"]["field"] == "color"
    assert (await api.call("PUT", f"{BASE}/s", None, content=b"[1]")).status_code == 400


async def test_the_console_lists_schedules_with_next_and_last_fires(api: Api) -> None:
    await api.register(WAIT)
    await put(api, "n<i>ght", {"workflow": "nightly", "cron": "0 3 * * *"})  # refused: a bad name
    await put(api, "nightly", {"workflow": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin"})
    await post(api, "nightly/pause", {"reason": "<b>upgrade</b>"})
    fired = (
        await post(api, "nightly/backfill", {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"})
    ).json()
    run_id = fired["fires"][0]["runId"]
    async with browser(api) as c:
        await login(api, ADMIN, c)
        page = await c.get("/console/schedules", params={"app": "orders"})
        assert page.status_code == 200, page.text
        text = page.text
        assert "nightly" in text and "0 3 * * *" in text and "Europe/Berlin" in text
        assert "&lt;b&gt;upgrade&lt;/b&gt;" in text and "<b>upgrade" not in text
        assert f"/console/apps/orders/runs/{run_id}" in text and "waiting" in text
        assert (await c.get("/console/schedules", params={"app": "bad app"})).status_code == 400


@pytest.mark.parametrize("settings_overrides", [{"schedules_per_app": 3, "schedule_fire_rate_per_app": 2.5}])
async def test_an_apps_schedules_are_bounded_in_number_and_fire_rate(api: Api) -> None:
    """Nothing bounded an app's schedules: 1,500 `every: 1s` starved every other app. Now a
    create or replace past FOLIOT_SCHEDULES_PER_APP or FOLIOT_SCHEDULE_FIRE_RATE_PER_APP is
    refused naming the limit, and nothing is stored."""
    await api.register(WAIT)
    for name in ("a", "b"):
        assert (await put(api, name, {"workflow": "nightly", "every": "1s"})).status_code == 201
    too_fast = await put(api, "c", {"workflow": "nightly", "every": "1s"})  # 3/s > 2.5/s
    assert too_fast.status_code == 400, too_fast.text
    error = too_fast.json()["error"]
    assert error["code"] == "quota_exceeded" and error["field"] == "every"
    assert error["limit"] == "FOLIOT_SCHEDULE_FIRE_RATE_PER_APP" and error["max"] == 2.5
    assert (await api.call("GET", f"{BASE}/c")).status_code == 404
    assert await api.engine.store.get_schedule("orders", "c") is None
    every_minute = await put(api, "c", {"workflow": "nightly", "cron": "* * * * *"})  # 1/60 s
    assert every_minute.status_code == 201, every_minute.text
    fourth = await put(api, "d", {"workflow": "nightly", "every": "1h"})
    assert fourth.status_code == 400, fourth.text
    error = fourth.json()["error"]
    assert error["code"] == "quota_exceeded" and error["field"] == "name"
    assert error["limit"] == "FOLIOT_SCHEDULES_PER_APP" and error["max"] == 3
    assert await api.engine.store.get_schedule("orders", "d") is None
    # Replaces: within the rate (1 + 0.5 + 1 = 2.5/s), or not raising it, are taken.
    assert (await put(api, "a", {"workflow": "nightly", "every": "2s"})).status_code == 200
    assert (await put(api, "c", {"workflow": "nightly", "every": "1s"})).status_code == 200
    assert (
        await put(api, "b", {"workflow": "nightly", "every": "1s", "overlap": "allow"})
    ).status_code == 200
    slower = await put(api, "a", {"workflow": "nightly", "cron": "*/1 * * * *", "every": None})
    assert slower.status_code == 200  # 1/60 s: lower
    assert (await api.call("DELETE", f"{BASE}/a")).status_code == 200
    assert (await put(api, "d", {"workflow": "nightly", "every": "1h"})).status_code == 201
