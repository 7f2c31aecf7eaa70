"""Concurrency keys over HTTP, on both stores: at most `limit` active runs per key value, the
rest `queued` in a durable FIFO that starts them in order as slots free."""

from __future__ import annotations

from typing import Any

from ..conftest import Api

LIMITED = {
    "name": "per-customer",
    "concurrency": {"limit": 2, "key": "input.customer"},
    "steps": [{"name": "hold", "type": "wait", "signal": "go"}],
}


async def go(api: Api, run_id: str) -> None:
    r = await api.call("POST", "/apps/orders/signals", {"runId": run_id, "name": "go"})
    assert r.status_code == 202, r.text


async def statuses(api: Api, ids: list[str]) -> list[str]:
    return [(await api.run(i))["status"] for i in ids]


async def test_at_most_limit_runs_per_key_and_the_rest_start_in_order(api: Api) -> None:
    await api.register(LIMITED)
    ids = [(await api.start("per-customer", {"customer": "a", "n": n}))["runId"] for n in range(5)]
    other = (await api.start("per-customer", {"customer": "b"}))["runId"]
    assert await statuses(api, ids) == ["waiting", "waiting", "queued", "queued", "queued"]
    assert (await api.run(other))["status"] == "waiting"  # another key has its own slots
    listed = (await api.call("GET", "/apps/orders/runs", params={"status": "queued"})).json()["runs"]
    assert sorted(r["runId"] for r in listed) == sorted(ids[2:])
    why = (await api.call("GET", f"/apps/orders/runs/{ids[4]}/diagnosis")).json()
    assert why["summary"].startswith("waiting for a concurrency slot on customer=a (2 ahead of it"), why
    await go(api, ids[0])
    await api.until(ids[2], "waiting")  # the oldest queued one took the freed slot
    assert await statuses(api, ids) == ["completed", "waiting", "waiting", "queued", "queued"]
    # A queued run can be cancelled (it holds no slot) and paused (it keeps no place).
    r = await api.call("POST", f"/apps/orders/runs/{ids[3]}/cancel", {"reason": "not needed"})
    assert r.status_code == 200, r.text
    r = await api.call("POST", f"/apps/orders/runs/{ids[4]}/pause", {"reason": "hold"})
    assert r.status_code == 200 and r.json()["status"] == "paused", r.text
    await go(api, ids[1])
    await api.until(ids[1], "completed")
    assert (await api.run(ids[4]))["status"] == "paused"  # a paused queued run is not admitted
    r = await api.call("POST", f"/apps/orders/runs/{ids[4]}/unpause", {})
    assert r.status_code == 200, r.text
    await api.until(ids[4], "waiting")
    events = [e["type"] for e in await api.events(ids[4])]
    assert events[:2] == ["run_started", "run_queued"] and "run_admitted" in events


async def test_a_restart_keeps_the_queue(api: Api) -> None:
    await api.register(LIMITED)
    ids = [(await api.start("per-customer", {"customer": "a"}))["runId"] for _ in range(3)]
    assert await statuses(api, ids) == ["waiting", "waiting", "queued"]
    # What storage says: two slots held, one run waiting.
    store = api.engine.store
    assert await store.queue_heads("orders", "per-customer/a", 10) == [ids[2]]
    [queued] = await store.queued_keys(None, 10)
    assert (queued.app, queued.key, queued.head, queued.held) == ("orders", "per-customer/a", ids[2], 2)
    assert await store.queued_keys(("orders", "per-customer/a"), 10) == []  # the page after it
    run = await api.engine.runs.document(ids[2])
    assert await store.queue_ahead(run) == (0, 2)


async def test_the_waiting_keys_are_read_page_by_page_with_their_heads(api: Api) -> None:
    """The pump's sweep reads the keys runs wait for a page at a time (issue 37.5), resuming
    after the last key it saw, each with its oldest waiting run and the slots held."""
    await api.register({**LIMITED, "concurrency": {"limit": 1, "key": "input.customer"}})
    heads = {}
    for customer in "dcba":  # created out of key order
        ids = [(await api.start("per-customer", {"customer": customer, "n": n}))["runId"] for n in range(3)]
        heads[f"per-customer/{customer}"] = ids[1]  # ids[0] holds the slot, ids[2] waits behind
    store = api.engine.store
    first = await store.queued_keys(None, 2)
    assert [(q.app, q.key, q.head, q.held) for q in first] == [
        ("orders", key, heads[key], 1) for key in ("per-customer/a", "per-customer/b")
    ]
    rest = await store.queued_keys(("orders", "per-customer/b"), 2)
    assert [q.key for q in rest] == ["per-customer/c", "per-customer/d"]
    assert [q.head for q in rest] == [heads["per-customer/c"], heads["per-customer/d"]]
    assert await store.queued_keys(("orders", "per-customer/d"), 2) == []


async def test_concurrency_is_validated_and_nothing_is_stored(api: Api) -> None:
    bad: list[tuple[Any, str]] = [
        ({"limit": 0}, "concurrency.limit"),
        ({"limit": "2"}, "concurrency.limit"),
        ({"limit": 2, "key": "customer"}, "concurrency.key"),
        ({"limit": 2, "extra": 1}, "concurrency"),
        ({}, "concurrency"),
    ]
    for concurrency, field in bad:
        r = await api.call("POST", "/apps/orders/workflows", {**LIMITED, "concurrency": concurrency})
        assert r.status_code == 400, (concurrency, r.text)
        assert r.json()["error"]["message"].startswith(field), (concurrency, r.text)
    assert (await api.call("GET", "/apps/orders/workflows")).json()["workflows"] == []


STEP_LIMITED = {
    "name": "charges",
    "steps": [
        {"name": "prepare", "type": "task"},
        {
            "name": "charge",
            "type": "task",
            "queue": "payments",
            "concurrency": {"limit": 1, "key": "input.tenant"},
        },
        {"name": "after", "type": "wait", "signal": "done"},
    ],
}


async def test_a_task_step_with_concurrency_runs_one_attempt_per_key_at_a_time(api: Api) -> None:
    await api.register(STEP_LIMITED)
    ids: list[str] = []
    for _ in range(3):  # one after the other: each reaches `charge` before the next starts
        ids.append((await api.start("charges", {"tenant": "acme"}))["runId"])
        await api.engine.runs.wait_for(ids[-1], lambda r: r.current_step == "charge")
    other = (await api.start("charges", {"tenant": "globex"}))["runId"]
    for run_id in (ids[0], other):  # admitted: their first attempt is out
        await api.engine.runs.wait_for(run_id, lambda r: r.current_step == "charge" and r.task is not None)
    assert await statuses(api, [*ids, other]) == ["running", "queued", "queued", "running"]
    why = (await api.call("GET", f"/apps/orders/runs/{ids[2]}/diagnosis")).json()
    assert why["summary"].startswith(
        "waiting at `charge` for a concurrency slot on tenant=acme (1 ahead of it"
    ), why
    polled = await api.call(
        "POST", "/apps/orders/tasks/poll", {"queue": "payments", "maxTasks": 10, "waitSeconds": 1}
    )
    tasks = polled.json()["tasks"]
    assert sorted(t["runId"] for t in tasks) == sorted([ids[0], other])  # one per tenant
    first = next(t for t in tasks if t["runId"] == ids[0])
    r = await api.call("POST", f"/apps/orders/tasks/{first['taskToken']}/complete", {"output": 1})
    assert r.status_code == 200, r.text
    await api.until(ids[0], "waiting")  # it left the step: its slot went to the next run
    await api.engine.runs.wait_for(ids[1], lambda r: r.status == "running" and r.task is not None)
    assert (await api.run(ids[2]))["status"] == "queued"
    types = [e["type"] for e in await api.events(ids[1])]
    assert "step_queued" in types and "step_admitted" in types


async def test_both_workflow_and_step_concurrency_is_refused(api: Api) -> None:
    both = {**STEP_LIMITED, "concurrency": {"limit": 2}}
    r = await api.call("POST", "/apps/orders/workflows", both)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("steps[1].concurrency"), r.text
