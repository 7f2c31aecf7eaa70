"""Signal-with-start on both stores: atomic, one run per business key under concurrency, deduped."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from ..conftest import Api

CART = {
    "name": "cart",
    "steps": [
        {"name": "collect", "type": "wait", "signal": "checkout"},
        {"name": "charge", "type": "task"},
    ],
}


def sws(name: str = "item", key: str = "cart-1", **extra: Any) -> dict[str, Any]:
    return {"workflow": "cart", "businessKey": key, "name": name, "startIfMissing": {}, **extra}


async def signal(api: Api, body: Any, **kw: Any) -> Any:
    return await api.call("POST", "/apps/orders/signals", body, **kw)


async def test_starts_the_run_with_the_signal_then_delivers_to_it(api: Api) -> None:
    await api.register(CART)
    r = await signal(api, sws(payload={"sku": 1}, startIfMissing={"input": {"user": 7}}))
    assert r.status_code == 202, r.text
    first = r.json()
    assert first["started"] is True and first["status"] == "buffered"
    run = await api.run(first["runId"])
    assert run["input"] == {"user": 7} and run["businessKey"] == "cart-1" and run["status"] == "waiting"
    types = [e["type"] for e in await api.events(first["runId"])]
    assert types == ["run_started", "step_started", "signal_received"]  # one commit, in this order
    r = await signal(api, sws("checkout", payload={"total": 5}))
    assert r.json() == {"runId": first["runId"], "status": "delivered", "started": False}
    done = await api.until(first["runId"], "completed")
    assert done["state"]["collect"] == {"total": 5}
    # The run closed: the next call starts a fresh one.
    r = await signal(api, sws())
    assert r.json()["started"] is True and r.json()["runId"] != first["runId"]


async def test_a_start_whose_first_wait_is_for_this_signal_is_delivered(api: Api) -> None:
    await api.register(CART)
    r = await signal(api, sws("checkout", payload={"total": 1}))
    assert r.json()["started"] is True and r.json()["status"] == "delivered"
    done = await api.until(r.json()["runId"], "completed")
    assert done["state"]["collect"] == {"total": 1}


async def test_fifty_concurrent_calls_make_one_run(api: Api) -> None:
    await api.register(CART)
    answers: list[dict[str, Any]] = []

    async def one(i: int) -> None:
        r = await signal(api, sws(payload={"n": i}, signalId=f"s-{i % 25}"))
        assert r.status_code == 202, r.text
        answers.append(r.json())

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(one, i)
    assert len({a["runId"] for a in answers}) == 1
    assert sum(a["started"] for a in answers) == 1
    statuses = sorted(a["status"] for a in answers)
    assert statuses.count("buffered") == 25 and statuses.count("duplicate") == 25
    listed = await api.call("GET", "/apps/orders/runs", params={"workflow": "cart"})
    assert len(listed.json()["runs"]) == 1
    received = [e for e in await api.events(answers[0]["runId"]) if e["type"] == "signal_received"]
    assert sorted(e["data"]["signalId"] for e in received) == sorted(f"s-{i}" for i in range(25))


async def test_idempotency_key_replays_the_first_answer(api: Api) -> None:
    await api.register(CART)
    headers = {**api.auth(), "Idempotency-Key": "req-1"}
    first = await signal(api, sws(payload=1), headers=headers)
    again = await signal(api, sws(payload=1), headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json() and first.json()["started"] is True
    # On the deliver path too: the second signal is not buffered twice.
    headers2 = {**api.auth(), "Idempotency-Key": "req-2"}
    second = await signal(api, sws(payload=2), headers=headers2)
    replay = await signal(api, sws(payload=2), headers=headers2)
    assert (
        second.json()
        == replay.json()
        == {"runId": first.json()["runId"], "status": "buffered", "started": False}
    )
    run = await api.engine.runs.document(first.json()["runId"])
    assert [b.payload for b in run.buffer] == [1, 2]
    reused = await signal(api, sws(payload=3), headers=headers2)
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"name": "x", "runId": "run_1", "startIfMissing": {}}, 400, "startIfMissing"),
        ({"name": "x", "workflow": "cart", "startIfMissing": {}}, 400, "startIfMissing"),
        (sws(startIfMissing={"version": 0}), 400, "startIfMissing.version"),
        (sws(startIfMissing={"input": 1, "extra": 2}), 400, "startIfMissing.extra"),
        (sws(startIfMissing={"version": "1"}), 400, "startIfMissing.version"),
        (sws(startIfMissing=[]), 400, "startIfMissing"),
        (sws(key=""), 400, "businessKey"),
        (sws(name="bad name"), 400, "name"),
        (sws(startIfMissing={"version": 9}), 404, None),
        ({**sws(), "workflow": "nope"}, 404, None),
        (sws(startIfMissing={"input": "x" * 300_000}), 413, None),
    ],
)
async def test_bad_requests_store_nothing(api: Api, body: Any, status: int, field: str | None) -> None:
    await api.register(CART)
    r = await signal(api, body)
    assert r.status_code == status, r.text
    if field is not None:
        error = r.json()["error"]
        assert field in error["message"] or error.get("field") == field, error
    wrong = await signal(api, sws(), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    listed = await api.call("GET", "/apps/orders/runs")
    assert listed.json()["runs"] == []
