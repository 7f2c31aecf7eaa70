"""Per-app limits (issue 37), on both stores: `PUT /admin/apps/{app}/limits` overrides one app's
limits (bad input: 400 naming the member, nothing stored), `GET` shows each effective limit and
where it comes from, and an override changes that app's behaviour only. The open-runs limit
(`FOLIOT_APP_MAX_OPEN_RUNS`, override `maxOpenRuns`) refuses an API start and a
signal-with-start with 429 `quota_exceeded`, a schedule's fire as refused, and fails a fan-out
step with `quota_exceeded` before any child is created."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ..conftest import Api

LIMITS = "/admin/apps/orders/limits"
HOLD = {"name": "hold", "steps": [{"name": "hold", "type": "wait", "signal": "go"}]}
FAN = {
    "name": "fan",
    "steps": [
        {
            "name": "fan",
            "type": "parallel",
            "branches": [{"name": f"b{i}", "workflow": "hold"} for i in range(5)],
        }
    ],
}


async def other_app(api: Api, name: str = "shop") -> Api:
    r = await api.client.put(f"/apps/{name}", json={"handlerBaseUrl": api.handler.url}, headers=api.admin())
    assert r.status_code == 201, r.text
    return attrs.evolve(api, app=name, key=r.json()["apiKey"])


async def limits(api: Api, app: str = "orders") -> dict[str, Any]:
    r = await api.client.get(f"/admin/apps/{app}/limits", headers=api.admin())
    assert r.status_code == 200, r.text
    assert r.json()["app"] == app
    return r.json()["limits"]  # type: ignore[no-any-return]


async def override(api: Api, body: Any, app: str = "orders") -> Any:
    return await api.client.put(f"/admin/apps/{app}/limits", json=body, headers=api.admin())


async def test_the_effective_limits_are_the_settings_until_overridden(api: Api) -> None:
    shown = await limits(api)
    assert shown["maxOpenRuns"] == {
        "value": 1_000_000,
        "source": "default",
        "setting": "FOLIOT_APP_MAX_OPEN_RUNS",
    }
    assert shown["maxTreeRuns"] == {"value": 10_000, "source": "default", "setting": "FOLIOT_MAX_TREE_RUNS"}
    assert shown["scheduleFireRate"]["value"] == 10.0
    assert set(shown) == {
        "maxOpenRuns",
        "maxTreeRuns",
        "internalRate",
        "internalBurst",
        "schedules",
        "scheduleFireRate",
        "dryRunConcurrency",
    }
    r = await override(api, {"maxTreeRuns": 7, "scheduleFireRate": 2.5, "dryRunConcurrency": 1})
    assert r.status_code == 200, r.text
    assert r.json()["limits"]["maxTreeRuns"] == {
        "value": 7,
        "source": "override",
        "setting": "FOLIOT_MAX_TREE_RUNS",
    }
    shown = await limits(api)
    assert shown["maxTreeRuns"]["value"] == 7 and shown["maxTreeRuns"]["source"] == "override"
    assert shown["scheduleFireRate"] == {
        "value": 2.5,
        "source": "override",
        "setting": "FOLIOT_SCHEDULE_FIRE_RATE_PER_APP",
    }
    assert shown["maxOpenRuns"]["source"] == "default"
    # A member not given is unchanged; null puts the default back.
    r = await override(api, {"maxTreeRuns": None, "internalRate": 3})
    assert r.status_code == 200, r.text
    shown = await limits(api)
    assert shown["maxTreeRuns"] == {"value": 10_000, "source": "default", "setting": "FOLIOT_MAX_TREE_RUNS"}
    assert shown["internalRate"]["value"] == 3 and shown["scheduleFireRate"]["value"] == 2.5
    # Another app keeps its defaults.
    await other_app(api)
    assert {v["source"] for v in (await limits(api, "shop")).values()} == {"default"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"maxTreeRuns": 5, "maxOpenRun": 3}, "maxOpenRun"),
        ({"maxTreeRuns": 5, "maxOpenRuns": "3"}, "maxOpenRuns"),
        ({"maxTreeRuns": 5, "maxOpenRuns": True}, "maxOpenRuns"),
        ({"maxTreeRuns": 5, "schedules": 1.5}, "schedules"),
        ({"maxTreeRuns": 5, "internalBurst": 0}, "internalBurst"),
        ({"maxTreeRuns": 5, "dryRunConcurrency": -1}, "dryRunConcurrency"),
        ({"maxTreeRuns": 5, "scheduleFireRate": 0}, "scheduleFireRate"),
        ({"maxTreeRuns": 5, "internalRate": 10**12}, "internalRate"),
        ({"maxTreeRuns": 5, "scheduleFireRate": [1]}, "scheduleFireRate"),
    ],
)
async def test_bad_input_is_refused_naming_the_member_and_nothing_is_stored(
    api: Api, body: dict[str, Any], field: str
) -> None:
    before = await limits(api)
    r = await override(api, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == field, error
    assert await limits(api) == before  # the valid member was not stored either


async def test_the_endpoint_is_the_admins_and_of_an_existing_app(api: Api) -> None:
    r = await api.call("GET", LIMITS)  # the app's own key
    assert r.status_code in (401, 403), r.text
    r = await api.call("PUT", LIMITS, {"maxTreeRuns": 3})
    assert r.status_code in (401, 403), r.text
    assert (await override(api, {"maxTreeRuns": 3}, app="nope")).status_code == 404
    assert (await api.client.get("/admin/apps/nope/limits", headers=api.admin())).status_code == 404
    r = await override(api, [1])
    assert r.status_code == 400, r.text
    assert (await limits(api))["maxTreeRuns"]["source"] == "default"


async def test_a_lower_tree_limit_for_one_app_refuses_a_fan_out_the_other_may_start(api: Api) -> None:
    shop = await other_app(api)
    for each in (api, shop):
        await each.register(HOLD)
        await each.register(FAN)
    assert (await override(api, {"maxTreeRuns": 3})).status_code == 200
    refused = await api.start("fan")
    assert refused["status"] == "failed", refused
    assert refused["error"]["class"] == "too_many_runs"
    assert "maxTreeRuns" in refused["error"]["message"]
    r = await api.call("GET", f"/apps/{api.app}/runs", params={"parentRunId": refused["runId"]})
    assert r.json()["runs"] == []
    started = await shop.start("fan")
    assert started["status"] == "waiting", started
    r = await shop.call("GET", f"/apps/{shop.app}/runs", params={"parentRunId": started["runId"]})
    assert len(r.json()["runs"]) == 5


async def test_open_runs_past_the_apps_limit_refuse_api_starts_with_429(api: Api) -> None:
    shop = await other_app(api)
    for each in (api, shop):
        await each.register(HOLD)
    assert (await override(api, {"maxOpenRuns": 2})).status_code == 200
    await api.start("hold")
    await api.start("hold")
    r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "hold"})
    assert r.status_code == 429, r.text
    assert r.headers["Retry-After"] == "1"
    error = r.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["limit"] == "override maxOpenRuns" and error["max"] == 2
    signal = {"workflow": "hold", "businessKey": "k", "name": "go", "startIfMissing": {"input": {}}}
    r = await api.call("POST", f"/apps/{api.app}/signals", signal)
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "quota_exceeded"
    listed = await api.call("GET", f"/apps/{api.app}/runs")
    assert len(listed.json()["runs"]) == 2  # nothing stored for the refused ones
    for _ in range(3):  # the other app is not bound by it
        await shop.start("hold")


@pytest.mark.parametrize("settings_overrides", [{"app_max_open_runs": 3}])
async def test_the_setting_bounds_every_app_and_a_fan_out_fails_with_quota_exceeded(api: Api) -> None:
    """FOLIOT_APP_MAX_OPEN_RUNS 3: the parent (1) and its 5 children would make 6; the step fails
    with `quota_exceeded` and no child is created; a schedule's fire is refused."""
    await api.register(HOLD)
    await api.register(FAN)
    parent = await api.start("fan")
    assert parent["status"] == "failed", parent
    assert parent["error"]["class"] == "quota_exceeded"
    assert "FOLIOT_APP_MAX_OPEN_RUNS" in parent["error"]["message"]
    r = await api.call("GET", f"/apps/{api.app}/runs", params={"parentRunId": parent["runId"]})
    assert r.json()["runs"] == []
    # The closed parent may still be counted for up to a second (the count is read at most
    # once a second per app): the limit is never passed, and refused starts say why.
    for _ in range(4):
        r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "hold"})
        if r.status_code != 201:
            break
    assert r.status_code == 429 and r.json()["error"]["limit"] == "FOLIOT_APP_MAX_OPEN_RUNS", r.text
    assert r.json()["error"]["max"] == 3
    listed = await api.call("GET", f"/apps/{api.app}/runs", params={"status": "waiting"})
    assert 2 <= len(listed.json()["runs"]) <= 3
    put = await api.call("PUT", f"/apps/{api.app}/schedules/s", {"workflow": "hold", "every": "1h"})
    assert put.status_code == 201, put.text
    fired = await api.call("POST", f"/apps/{api.app}/schedules/s/trigger", {})
    assert fired.status_code == 200, fired.text
    assert fired.json()["outcome"] == "refused" and "FOLIOT_APP_MAX_OPEN_RUNS" in fired.json()["error"]
    # An override raises it for this app.
    assert (await override(api, {"maxOpenRuns": 5})).status_code == 200
    await api.start("hold")


async def test_a_lower_schedule_count_for_one_app(api: Api) -> None:
    await api.register(HOLD)
    assert (await override(api, {"schedules": 1})).status_code == 200
    ok = await api.call("PUT", f"/apps/{api.app}/schedules/a", {"workflow": "hold", "every": "1h"})
    assert ok.status_code == 201, ok.text
    r = await api.call("PUT", f"/apps/{api.app}/schedules/b", {"workflow": "hold", "every": "1h"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "quota_exceeded" and error["limit"] == "override schedules" and error["max"] == 1
