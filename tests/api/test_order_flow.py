"""The order walk-through from the concepts document, end to end over real HTTP."""

from __future__ import annotations

from typing import Any

import trio

from ..conftest import Api
from ..helpers import answer_json

ORDER = {
    "name": "order-fulfilment",
    "runTimeout": "14d",
    "defaults": {"timeout": "30s", "retry": {"maxAttempts": 3}},
    "steps": [
        {
            "name": "reserve",
            "type": "task",
            "onFailure": "release",
            "retry": {
                "maxAttempts": 5,
                "initialInterval": "1ms",
                "backoffCoefficient": 2.0,
                "maxInterval": "5ms",
                "retryOn": ["http_503", "reservation_busy"],
            },
        },
        {
            "name": "await-payment",
            "type": "wait",
            "signal": "payment-confirmed",
            "timeout": "2d",
            "onTimeout": "release",
        },
        {
            "name": "route",
            "type": "choice",
            "choices": [
                {"when": {"path": "state.reserve.express", "op": "eq", "value": True}, "next": "ship-express"}
            ],
            "default": "ship",
        },
        {"name": "ship-express", "type": "task", "next": "$end"},
        {"name": "ship", "type": "task", "handler": "/hooks/ship", "next": "$end"},
        {"name": "release", "type": "task", "next": "$fail"},
    ],
}


async def test_order_walkthrough(api: Api) -> None:
    api.handler.route("reserve", lambda body, h: answer_json({"reservationId": "R-1"}))
    api.handler.route("ship", lambda body, h: answer_json({"shipped": True}))
    assert await api.register(ORDER) == 1
    run = await api.start("order-fulfilment", {"orderId": 7}, businessKey="order-7")
    assert run["version"] == 1 and run["generation"] == 1
    waiting = await api.until(run["runId"], "waiting")
    assert waiting["waitSignal"] == "payment-confirmed"
    assert waiting["state"] == {"reserve": {"reservationId": "R-1"}}
    assert waiting["wakeAt"] is not None

    r = await api.call(
        "POST",
        "/apps/orders/signals",
        {
            "workflow": "order-fulfilment",
            "businessKey": "order-7",
            "name": "payment-confirmed",
            "payload": {"paid": 42},
        },
    )
    assert r.status_code == 202, r.text
    assert r.json() == {"runId": run["runId"], "status": "delivered"}

    done = await api.until(run["runId"], "completed")
    assert done["state"] == {
        "reserve": {"reservationId": "R-1"},
        "await-payment": {"paid": 42},
        "ship": {"shipped": True},
    }
    assert done["closedAt"] is not None and done["error"] is None
    paths = [r.path for r in api.handler.received]
    assert paths == ["/foliot/order-fulfilment/reserve", "/hooks/ship"]
    assert api.handler.bad_signatures == 0
    first = api.handler.received[0]
    assert first.body["idempotencyKey"] == f"{run['runId']}:1:reserve:1"
    assert first.body["input"] == {"orderId": 7}
    assert first.headers["foliot-app"] == "orders"
    assert first.headers["foliot-task-token"] == first.body["taskToken"]
    assert first.headers["traceparent"].startswith("00-")
    types = [e["type"] for e in await api.events(run["runId"])]
    assert types[0] == "run_started" and types[-1] == "run_completed"
    assert "signal_received" in types and "choice_evaluated" in types


async def test_handler_fails_twice_then_succeeds(api: Api) -> None:
    calls: list[int] = []

    def flaky(body: dict[str, Any], headers: dict[str, str]) -> Any:
        calls.append(body["attempt"])
        if len(calls) <= 2:
            return answer_json({"error": {"class": "reservation_busy", "message": "busy"}}, 503)
        return answer_json({"reservationId": "R-2", "express": True})

    api.handler.route("reserve", flaky)
    await api.register(ORDER)
    run = await api.start("order-fulfilment", {"orderId": 8}, businessKey="order-8")
    await api.until(run["runId"], "waiting")
    r = await api.call("POST", "/apps/orders/signals", {"runId": run["runId"], "name": "payment-confirmed"})
    assert r.json()["status"] == "delivered"
    done = await api.until(run["runId"], "completed")
    assert done["state"]["await-payment"] is None
    # reserve x3 (two failures, one success) + ship-express: four pushes; with release none.
    keys = api.handler.keys()
    assert keys == [
        f"{run['runId']}:1:reserve:1",
        f"{run['runId']}:1:reserve:2",
        f"{run['runId']}:1:reserve:3",
        f"{run['runId']}:1:ship-express:1",
    ]
    events = await api.events(run["runId"])
    assert [e["type"] for e in events].count("retry_scheduled") == 2


async def test_signal_beats_the_wait(api: Api) -> None:
    gate = trio.Event()

    async def held(body: dict[str, Any], headers: dict[str, str]) -> Any:
        await gate.wait()  # the run sits at `reserve` until the signal has been sent
        return answer_json({"reservationId": "R-3"})

    api.handler.route("reserve", held)
    await api.register(ORDER)
    run = await api.start("order-fulfilment", {"orderId": 9}, businessKey="order-9")
    await api.handler.wait_for(1)
    for n in (1, 2):
        r = await api.call(
            "POST",
            "/apps/orders/signals",
            {"runId": run["runId"], "name": "payment-confirmed", "payload": {"early": n}},
        )
        assert r.status_code == 202
        assert r.json()["status"] == "buffered"
    gate.set()
    done = await api.until(run["runId"], "completed", "failed")
    assert done["status"] == "completed"
    assert done["state"]["await-payment"] == {"early": 1}  # FIFO: the first one is consumed
    types = [e["type"] for e in await api.events(run["runId"])]
    assert types.index("signal_received") < types.index("signal_consumed")


async def test_business_key_in_use(api: Api) -> None:
    await api.register({"name": "w", "steps": [{"name": "w1", "type": "wait", "signal": "go"}]})
    first = await api.start("w", businessKey="k1")
    r = await api.call("POST", "/apps/orders/runs", {"workflow": "w", "businessKey": "k1"})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "business_key_in_use"
    assert r.json()["error"]["runId"] == first["runId"]


async def test_a_new_version_is_started_at_once_and_unknown_becomes_known(api: Api) -> None:
    """Starts read the latest version through a cache; registering drops it on this node."""
    parked = {"name": "cached", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}
    r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "cached"})
    assert r.status_code == 404  # remembered as unknown for a moment...
    assert await api.register(parked) == 1
    assert (await api.start("cached"))["version"] == 1  # ...but registering forgets that
    second = {**parked, "steps": [{"name": "w2", "type": "wait", "signal": "go"}]}
    assert await api.register(second) == 2
    run = await api.start("cached")
    assert run["version"] == 2 and run["currentStep"] == "w2"
