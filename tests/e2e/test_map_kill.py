"""A real `foliot serve` killed with SIGKILL while a 1,000-item `map` runs (issue 22): after the
restarts every item has exactly one child run, every child completed, and the parent's list is
complete and in item order. Wall clock, bounded by `fail_after`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest
import trio

from ..helpers import HandlerServer, answer_json, start_handler
from .test_crash_recovery import Server, retrying, server, setup_app

__all__ = ["server"]  # the fixture: a `foliot serve` process, restartable on its database

pytestmark = pytest.mark.e2e

ITEMS = 1000
KILL_AT = (300, 700)  # children completed when each kill -9 lands
CHILD = {
    "name": "pick-item",
    "output": "state.pick",
    "steps": [
        {
            "name": "pick",
            "type": "task",
            "retry": {"maxAttempts": 10, "initialInterval": "100ms", "maxInterval": "1s"},
        }
    ],
}
PARENT = {
    "name": "fan",
    "steps": [
        {
            "name": "all",
            "type": "map",
            "itemsPath": "input.items",
            "workflow": "pick-item",
            "maxConcurrency": 50,
        }
    ],
}


def item(i: int) -> dict[str, Any]:
    return {"n": i, "sku": f"sku-{i}"}


def picked(value: dict[str, Any]) -> dict[str, Any]:
    """The child's output for an item: derived from it, so a slot holding another item's shows."""
    return {"sku": value["sku"], "double": value["n"] * 2}


async def test_kill_9_during_a_map_leaves_one_child_per_item(server: Server, nursery: trio.Nursery) -> None:
    handler = HandlerServer()
    handler.route("pick", lambda body, headers: answer_json(picked(body["input"])))
    await start_handler(nursery, handler)
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        key = await setup_app(client, handler, CHILD)
        r = await retrying(client, "POST", "/apps/orders/workflows", json=PARENT, headers=key)
        assert r.status_code == 201, r.text
        r = await retrying(
            client,
            "POST",
            "/apps/orders/runs",
            json={"workflow": "fan", "input": {"items": [item(i) for i in range(ITEMS)]}},
            headers=key,
        )
        assert r.status_code == 201, r.text
        parent_id = r.json()["runId"]

        async def parent() -> dict[str, Any]:
            got = await retrying(client, "GET", f"/apps/orders/runs/{parent_id}", headers=key)
            assert got.status_code == 200, got.text
            return got.json()  # type: ignore[no-any-return]

        seen_at_kill = []
        with trio.fail_after(300):
            for threshold in KILL_AT:
                while True:
                    run = await parent()
                    assert run["status"] == "waiting", run["status"]  # still mapping: not done early
                    if run["children"]["completed"] >= threshold:
                        break
                    await trio.sleep(0.02)
                await server.kill()
                seen_at_kill.append(run["children"]["completed"])
                await server.start()
            while (run := await parent())["status"] not in ("completed", "failed", "stuck"):
                await trio.sleep(0.1)

        assert run["status"] == "completed", run
        assert run["state"]["all"] == [picked(item(i)) for i in range(ITEMS)]
        assert run["output"] == run["state"]
        assert run["children"] is None  # the fan-out is over

        children: list[dict[str, Any]] = []
        cursor = None
        with trio.fail_after(60):
            while True:
                params: dict[str, Any] = {"parentRunId": parent_id, "limit": 1000}
                if cursor:
                    params["cursor"] = cursor
                page = (await retrying(client, "GET", "/apps/orders/runs", params=params, headers=key)).json()
                children.extend(page["runs"])
                cursor = page["nextCursor"]
                if not cursor:
                    break

    assert len(children) == ITEMS
    assert len({c["runId"] for c in children}) == ITEMS
    by_index = {c["parent"]["index"]: c for c in children}
    assert sorted(by_index) == list(range(ITEMS))  # one child per item, none twice
    for i, child in by_index.items():
        assert child["parent"]["runId"] == parent_id and child["parent"]["step"] == "all"
        assert (child["parent"]["generation"], child["parent"]["attempt"]) == (1, 1)
        assert child["workflow"] == "pick-item"
        assert child["input"] == item(i)
        assert child["status"] == "completed", child
        assert child["output"] == picked(item(i))

    # Every item's task reached the handler under its child's key; a kill may repeat a push
    # (at-least-once), only ever with the same key and input.
    keys = Counter(r.body["idempotencyKey"] for r in handler.received)
    inputs: dict[str, Any] = {}
    for r in handler.received:
        assert r.body["idempotencyKey"] == f"{r.body['runId']}:1:pick:{r.body['attempt']}"
        assert inputs.setdefault(r.body["runId"], r.body["input"]) == r.body["input"]
    for i, child in by_index.items():
        assert f"{child['runId']}:1:pick:1" in keys, i
        assert inputs[child["runId"]] == item(i)
    assert set(inputs) == {c["runId"] for c in children}  # no push for a child that is not listed
    assert handler.bad_signatures == 0
    print(
        f"\nkills at {seen_at_kill} children completed; pushes={len(handler.received)} "
        f"duplicate deliveries={sum(n - 1 for n in keys.values())} "
        f"restart-to-ready={[round(t, 2) for t in server.ready_times]}"
    )
