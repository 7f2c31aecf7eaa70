"""The runs list's attention column and filter (issue 26 point 9), through the API."""

from __future__ import annotations

from ..conftest import Api
from ..helpers import answer_json


async def test_blocked_runs_that_look_healthy_are_flagged_and_filtered(api: Api) -> None:
    api.handler.route(
        "flaky", lambda body, headers: answer_json({"error": {"class": "connection_error"}}, 503)
    )
    await api.register(
        {
            "name": "flaky",
            "steps": [
                {"name": "flaky", "type": "task", "retry": {"maxAttempts": 100, "initialInterval": "1h"}}
            ],
        }
    )
    await api.register(
        {"name": "pay", "steps": [{"name": "w", "type": "wait", "signal": "payment-confirmed"}]}
    )
    retrying = await api.start("flaky")
    await api.engine.runs.wait_for(
        retrying["runId"], lambda r: r.timer is not None and r.timer.kind == "retry"
    )
    typo = await api.start("pay")
    await api.until(typo["runId"], "waiting")
    r = await api.call(
        "POST",
        f"/apps/{api.app}/signals",
        {"name": "payment-confrimed", "runId": typo["runId"], "allowUnknown": True},  # past the 422
    )
    assert r.status_code == 202, r.text
    healthy = await api.start("pay")
    await api.until(healthy["runId"], "waiting")

    listed = (await api.call("GET", f"/apps/{api.app}/runs")).json()["runs"]
    reasons = {run["runId"]: run["attention"] for run in listed}
    assert reasons == {
        retrying["runId"]: ["retrying"],
        typo["runId"]: ["unconsumed_signal"],
        healthy["runId"]: [],
    }
    flagged = (await api.call("GET", f"/apps/{api.app}/runs", params={"attention": "true"})).json()
    assert {run["runId"] for run in flagged["runs"]} == {retrying["runId"], typo["runId"]}
    assert flagged["nextCursor"] is None
    one = (await api.call("GET", f"/apps/{api.app}/runs", params={"attention": "retrying"})).json()
    assert [run["runId"] for run in one["runs"]] == [retrying["runId"]]
    # a page of one match: the cursor goes on from it, and the next page holds the other
    first = (await api.call("GET", f"/apps/{api.app}/runs", params={"attention": "true", "limit": 1})).json()
    assert len(first["runs"]) == 1 and first["nextCursor"] is not None
    rest = await api.call(
        "GET",
        f"/apps/{api.app}/runs",
        params={"attention": "true", "limit": 1, "cursor": first["nextCursor"]},
    )
    assert {run["runId"] for run in first["runs"] + rest.json()["runs"]} == {retrying["runId"], typo["runId"]}
    bad = await api.call("GET", f"/apps/{api.app}/runs", params={"attention": "maybe"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "attention"
