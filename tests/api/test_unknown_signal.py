"""A signal no version of the run's workflow can wait for (issue 26, point 10): 422
`unknown_signal` naming the known names, nothing stored; `allowUnknown: true` buffers it
anyway, and `why` then flags it. Both stores (the `api` fixture runs on each)."""

from __future__ import annotations

from typing import Any

from ..conftest import Api
from .test_bad_input import snapshot

PAYMENT = {
    "name": "order",
    "steps": [
        {"name": "await-payment", "type": "wait", "signal": "payment-confirmed"},
        {"name": "await-outcome", "type": "wait", "signals": ["shipped", "lost"]},
    ],
}


async def signal(api: Api, **body: Any) -> Any:
    return await api.call("POST", f"/apps/{api.app}/signals", body)


async def waiting_run(api: Api, **start: Any) -> str:
    await api.register(PAYMENT)
    run_id: str = (await api.start("order", **start))["runId"]
    await api.until(run_id, "waiting")
    return run_id


async def test_a_typo_is_422_naming_the_known_signals_and_nothing_is_stored(api: Api) -> None:
    run_id = await waiting_run(api, businessKey="order-7")
    before = await snapshot(api)
    for target in ({"runId": run_id}, {"workflow": "order", "businessKey": "order-7"}):
        r = await signal(api, name="payment-confrimed", signalId="evt-1", payload={"x": 1}, **target)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "unknown_signal" and error["field"] == "name"
        assert error["known"] == ["lost", "payment-confirmed", "shipped"]
        assert "did you mean 'payment-confirmed'?" in error["message"]
        assert "'order' version 1" in error["message"]
    assert await snapshot(api) == before
    # The signalId was not taken: the corrected signal with the same id is delivered.
    r = await signal(api, runId=run_id, name="payment-confirmed", signalId="evt-1")
    assert (r.status_code, r.json()["status"]) == (202, "delivered")
    # Any name some step waits for is accepted, wherever the run is (the definition is the
    # whole set; a later wait, or a rewind, can consume it): buffered here.
    await api.until(run_id, "waiting")
    r = await signal(api, runId=run_id, name="payment-confirmed")
    assert (r.status_code, r.json()["status"]) == (202, "buffered")


async def test_allow_unknown_buffers_it_and_why_flags_it(api: Api) -> None:
    run_id = await waiting_run(api)
    r = await signal(api, runId=run_id, name="payment-confrimed", allowUnknown=True)
    assert (r.status_code, r.json()["status"]) == (202, "buffered")
    why = (await api.call("GET", f"/apps/{api.app}/runs/{run_id}/diagnosis")).json()
    (fact,) = [f for f in why["facts"] if f["code"] == "signal_unawaited"]
    assert "`payment-confrimed` (did you mean `payment-confirmed`?)" in fact["text"]
    assert why["attention"] is True
    r = await signal(api, runId=run_id, name="x", allowUnknown="yes")
    assert r.status_code == 400 and r.json()["error"]["field"] == "allowUnknown"


async def test_later_versions_count_earlier_ones_do_not(api: Api) -> None:
    run_id = await waiting_run(api)  # pinned to version 1
    v2 = {
        **PAYMENT,
        "steps": [*PAYMENT["steps"], {"name": "await-refund", "type": "wait", "signal": "refunded"}],
    }
    assert await api.register(v2) == 2
    r = await signal(api, runId=run_id, name="refunded")  # a rewind to version 2 could consume it
    assert (r.status_code, r.json()["status"]) == (202, "buffered")
    r = await signal(api, runId=run_id, name="refundd")
    assert r.status_code == 422 and "versions 1..2" in r.json()["error"]["message"]
    assert "refunded" in r.json()["error"]["known"]
    why = (await api.call("GET", f"/apps/{api.app}/runs/{run_id}/diagnosis")).json()
    assert [f for f in why["facts"] if f["code"] == "signal_unawaited"] == []

    # A run pinned to a later version is not offered an earlier version's names:
    v3 = {"name": "order", "steps": [{"name": "w", "type": "wait", "signal": "renamed"}]}
    assert await api.register(v3) == 3
    run3 = (await api.start("order"))["runId"]
    await api.until(run3, "waiting")
    r = await signal(api, runId=run3, name="payment-confirmed")
    assert r.status_code == 422 and r.json()["error"]["known"] == ["renamed"]


async def test_signal_with_start_and_closed_runs_are_unaffected(api: Api) -> None:
    run_id = await waiting_run(api, businessKey="k-1")
    r = await signal(api, workflow="order", businessKey="k-1", name="anything", startIfMissing={})
    assert (r.status_code, r.json()["status"]) == (202, "buffered")
    r = await api.call("POST", f"/apps/{api.app}/runs/{run_id}/cancel", {})
    assert r.status_code == 200, r.text
    r = await signal(api, runId=run_id, name="anything")
    assert r.status_code == 409 and r.json()["error"]["code"] == "run_closed"
