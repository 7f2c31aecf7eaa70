"""First-of-N waits over HTTP, on both stores."""

from __future__ import annotations

from ..conftest import Api

ORDER = {
    "name": "order",
    "steps": [
        {
            "name": "pick",
            "type": "wait",
            "signals": ["paid", "cancelled"],
            "onSignal": {"paid": "ship", "cancelled": "refund"},
        },
        {"name": "ship", "type": "task", "next": "$end"},
        {"name": "refund", "type": "task", "next": "$end"},
    ],
}


async def test_the_first_signal_picks_the_branch(api: Api) -> None:
    await api.register(ORDER)
    run = await api.start("order")
    assert run["status"] == "waiting" and run["waitSignals"] == ["paid", "cancelled"]
    r = await api.call(
        "POST", "/apps/orders/signals", {"runId": run["runId"], "name": "cancelled", "payload": 3}
    )
    assert r.status_code == 202 and r.json()["status"] == "delivered"
    done = await api.until(run["runId"], "completed")
    assert done["state"]["pick"] == {"signal": "cancelled", "payload": 3}
    assert [x.body["step"] for x in api.handler.received] == ["refund"]


async def test_registration_names_the_bad_field_and_stores_nothing(api: Api) -> None:
    bad = {**ORDER, "steps": [{**ORDER["steps"][0], "onSignal": {"paid": "shp"}}, *ORDER["steps"][1:]]}
    r = await api.call("POST", "/apps/orders/workflows", bad)
    assert r.status_code == 400
    assert "steps[0].onSignal.paid" in r.json()["error"]["message"]
    both = {**ORDER, "steps": [{**ORDER["steps"][0], "signal": "paid"}, *ORDER["steps"][1:]]}
    r = await api.call("POST", "/apps/orders/workflows", both)
    assert r.status_code == 400 and "steps[0].signals" in r.json()["error"]["message"]
    listed = await api.call("GET", "/apps/orders/workflows")
    assert listed.json()["workflows"] == []
