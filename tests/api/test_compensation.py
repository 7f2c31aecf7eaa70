"""A compensated run over HTTP (both stores): its error names the root cause with
`compensatedBy`, a redrive is refused (409 `compensated`, single and bulk) and leaves the
compensation alone, `why` says to rewind, a rewind retries the failed step, and a step's
`failError` names the run's error (checked at registration)."""

from __future__ import annotations

from typing import Any

from ..conftest import Api
from ..helpers import answer_json
from .test_console import browser, login, operator_token

SAGA = {
    "name": "saga",
    "steps": [
        {"name": "charge", "type": "task", "retry": {"maxAttempts": 1}, "onFailure": "refund"},
        {"name": "ship", "type": "task", "next": "$end"},
        {"name": "refund", "type": "task", "next": "$fail"},
    ],
}
ROOT = {"step": "charge", "class": "card_declined", "message": "no funds", "compensatedBy": "refund"}


async def call(api: Api, method: str, path: str, body: Any = None) -> Any:
    return await api.call(method, f"/apps/orders/{path}", body)


async def test_a_compensated_run_keeps_its_cause_and_refuses_a_redrive(api: Api) -> None:
    declined = [True]

    def charge(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if declined[0]:
            return answer_json({"error": {"class": "card_declined", "message": "no funds"}}, 400)
        return answer_json({"charged": 5})

    api.handler.route("charge", charge)
    await api.register(SAGA)
    run_id = (await api.start("saga"))["runId"]
    failed = await api.until(run_id, "failed")
    assert failed["error"] == ROOT
    assert (await call(api, "GET", f"runs/{run_id}")).json()["error"] == ROOT
    assert len(api.handler.keys("refund")) == 1

    r = await call(api, "POST", f"runs/{run_id}/redrive", {"reason": "try again"})
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "compensated"
    assert "'charge'" in error["message"] and "'refund'" in error["message"] and "rewind" in error["message"]
    bulk = await call(api, "POST", "runs/redrive", {"workflow": "saga", "status": "failed"})
    assert bulk.status_code == 200, bulk.text
    assert bulk.json() == {
        "matched": 1,
        "redriven": 0,
        "skipped": 0,
        "refused": [{"runId": run_id, "step": "refund", "code": "compensated", "message": error["message"]}],
        "cursor": None,
    }
    after = (await call(api, "GET", f"runs/{run_id}")).json()
    assert after["generation"] == 1 and after["status"] == "failed" and after["error"] == ROOT
    assert len(api.handler.keys("refund")) == 1  # the compensation did not run again
    why = (await call(api, "GET", f"runs/{run_id}/diagnosis")).json()
    assert why["attention"] is True and "rewind to `charge`" in why["summary"]
    assert "redrive is refused" in why["summary"]

    declined[0] = False
    r = await call(api, "POST", f"runs/{run_id}/rewind", {"toStep": "charge", "reason": "card updated"})
    assert r.status_code == 200, r.text
    done = await api.until(run_id, "completed")
    assert done["error"] is None and done["generation"] == 2
    assert api.handler.keys("charge") == [f"{run_id}:1:charge:1", f"{run_id}:2:charge:1"]
    assert len(api.handler.keys("refund")) == 1


async def test_fail_error_names_the_run_s_error_and_keeps_the_cause(api: Api) -> None:
    bad = {
        "name": "saga",
        "steps": [*SAGA["steps"][:2], {**SAGA["steps"][2], "failError": {"class": "", "message": "x"}}],
    }
    r = await call(api, "POST", "workflows", bad)
    assert r.status_code == 400 and r.json()["error"]["field"] == "steps[2].failError.class", r.text
    assert (await call(api, "GET", "workflows/saga")).status_code == 404  # nothing stored
    good = {
        "name": "saga",
        "steps": [
            *SAGA["steps"][:2],
            {**SAGA["steps"][2], "failError": {"class": "payment_refunded", "message": "charge undone"}},
        ],
    }
    api.handler.route(
        "charge", lambda b, h: answer_json({"error": {"class": "card_declined", "message": "no funds"}}, 400)
    )
    await api.register(good)
    run_id = (await api.start("saga"))["runId"]
    failed = await api.until(run_id, "failed")
    assert failed["error"] == {
        "step": "refund",
        "class": "payment_refunded",
        "message": "charge undone",
        "cause": ROOT,
    }
    r = await call(api, "POST", f"runs/{run_id}/redrive")
    assert r.status_code == 409 and r.json()["error"]["code"] == "compensated"
    events = (await call(api, "GET", f"runs/{run_id}/events")).json()["events"]
    closing = [e for e in events if e["type"] == "run_failed"]
    assert closing[0]["data"]["class"] == "payment_refunded" and closing[0]["data"]["cause"] == ROOT


async def test_the_console_does_not_offer_a_redrive_of_a_compensated_run(api: Api) -> None:
    api.handler.route("charge", lambda b, h: answer_json({"error": {"class": "card_declined"}}, 400))
    await api.register(SAGA)
    run_id = (await api.start("saga"))["runId"]
    await api.until(run_id, "failed")
    async with browser(api) as c:
        await login(api, await operator_token(api, "operator"), c)
        page = (await c.get(f"/console/apps/orders/runs/{run_id}")).text
    form = page[page.index("<legend>Redrive</legend>") : page.index("Redrive</button>")]
    assert "rewind to <code>charge</code>" in form and "disabled" in form
    assert "<code>card_declined</code>" in page and "(compensated by <code>refund</code>)" in page
