"""Flow control over HTTP on both stores (issue 23): `priority` on a start and a task step,
`rateLimit` on a task step and an app, `weight` on an app; field-naming 400s that store
nothing; a rate-limited push held in the dispatcher, its bucket in the database, `why` naming it."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

from ..conftest import Api

LIMITED = {
    "name": "limited",
    "steps": [
        {
            "name": "charge",
            "type": "task",
            "priority": 1,
            "rateLimit": {"limit": 1, "period": "1h", "key": "input.tenant"},
        }
    ],
}


async def test_a_start_carries_its_priority_and_a_bad_one_stores_nothing(api: Api) -> None:
    await api.register({"name": "w", "steps": [{"name": "t", "type": "task"}]})
    run = await api.start("w", {}, priority=1)
    assert run["priority"] == 1
    assert (await api.start("w", {}))["priority"] == 3
    for bad in (0, 6, "1", True, 2.5):
        r = await api.call("POST", "/apps/orders/runs", {"workflow": "w", "priority": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["field"] == "priority"
    listed = (await api.call("GET", "/apps/orders/runs")).json()["runs"]
    assert len(listed) == 2


@pytest.mark.parametrize(
    ("step", "field"),
    [
        ({"priority": 9}, "steps[0].priority"),
        ({"rateLimit": {"limit": 0, "period": "1m"}}, "steps[0].rateLimit.limit"),
        ({"rateLimit": {"limit": 5}}, "steps[0].rateLimit.period"),
        ({"rateLimit": {"limit": 5, "period": "1m", "key": "tenant"}}, "steps[0].rateLimit.key"),
        ({"rateLimit": {"limit": 5, "period": "1m", "burst": 2}}, "steps[0].rateLimit.burst"),
    ],
)
async def test_bad_flow_fields_on_a_step_are_refused(api: Api, step: dict[str, object], field: str) -> None:
    r = await api.call(
        "POST", "/apps/orders/workflows", {"name": "w", "steps": [{"name": "t", "type": "task", **step}]}
    )
    assert r.status_code == 400 and field in r.json()["error"]["message"], r.text
    assert (await api.call("GET", "/apps/orders/workflows")).json()["workflows"] == []


async def test_an_apps_weight_and_rate_limit(api: Api) -> None:
    url = api.handler.url
    for body, field in [
        ({"weight": 0}, "weight"),
        ({"weight": 101}, "weight"),
        ({"rateLimit": {"limit": 10}}, "rateLimit.period"),
        ({"rateLimit": {"limit": 10, "period": "1m", "key": "input.x"}}, "rateLimit.key"),
    ]:
        r = await api.client.put("/apps/orders", json={"handlerBaseUrl": url, **body}, headers=api.admin())
        assert r.status_code == 400 and r.json()["error"]["field"] == field, r.text
    assert await api.engine.store.get_app_flow("orders") is None  # nothing stored
    r = await api.client.put(
        "/apps/orders",
        json={"handlerBaseUrl": url, "weight": 5, "rateLimit": {"limit": 100, "period": "1m"}},
        headers=api.admin(),
    )
    assert r.status_code == 200 and r.json()["weight"] == 5
    assert r.json()["rateLimit"] == {"limit": 100, "periodMs": 60_000}
    r = await api.client.put("/apps/orders", json={"handlerBaseUrl": url}, headers=api.admin())
    assert r.json()["weight"] == 5 and r.json()["rateLimit"] is not None  # omitted: unchanged
    r = await api.client.put(
        "/apps/orders", json={"handlerBaseUrl": url, "rateLimit": None}, headers=api.admin()
    )
    assert r.json()["weight"] == 5 and r.json()["rateLimit"] is None  # null: cleared
    target = await api.engine.directory.target("orders")
    assert target.weight == 5 and target.rate is None


async def test_a_rate_limited_step_holds_the_second_push_of_a_key(api: Api) -> None:
    await api.register(LIMITED)
    first = await api.start("limited", {"tenant": "acme"})
    await api.handler.wait_for(1)
    second = await api.start("limited", {"tenant": "acme"})
    other = await api.start("limited", {"tenant": "globex"})  # its own bucket: not held
    await api.handler.wait_for(2)
    # The second push of acme is held an hour for its token: the dispatcher says so at once.
    await api.engine.runs.wait_for(second["runId"], lambda r: r.task is not None)
    with trio.fail_after(5):
        while api.engine.dispatcher.delayed < 1:
            await trio.lowlevel.checkpoint()
    sent = {r.body["runId"] for r in api.handler.received}
    assert first["runId"] in sent and other["runId"] in sent and second["runId"] not in sent
    bucket = "s/orders/limited/charge/input.tenant=acme"
    tat = await api.engine.store.rate_bucket(bucket)
    now_us = api.engine.clock.now() * 1000
    # One token taken, an hour: the held second push took none (it is taken when it is sent).
    assert tat is not None and now_us + 3_500_000_000 < tat <= now_us + 3_600_000_000
    r = await api.call("GET", f"/apps/orders/runs/{second['runId']}/diagnosis")
    assert "rate-limit token on tenant=acme (next in" in r.text, r.text
    metrics = (await api.client.get("/metrics", headers=api.admin())).text
    assert "foliot_rate_limited_pushes 1.0" in metrics
    assert "foliot_rate_limit_delay_seconds_count 2.0" in metrics  # the sends that took a token
    r = await api.call("POST", f"/apps/orders/runs/{second['runId']}/cancel", {"reason": "test"})
    assert r.status_code == 200
    assert api.engine.dispatcher.delayed == 0  # the held push was aborted with the attempt


async def test_runs_cancelled_while_waiting_for_a_token_leave_the_bucket_as_it_was(api: Api) -> None:
    """Issue 38: five runs of a 1/h key, four cancelled while they wait for their token: the
    stored bucket is moved on by the one send only (what a restart reads back), and the next
    run's send waits for that send's hour only, not for four hours of slots nobody uses."""
    await api.register(LIMITED)
    runs = [(await api.start("limited", {"tenant": "acme"}))["runId"] for _ in range(5)]
    await api.handler.wait_for(1)
    with trio.fail_after(5):
        while api.engine.dispatcher.delayed < 4:
            await trio.lowlevel.checkpoint()
    bucket = "s/orders/limited/charge/input.tenant=acme"
    tat = await api.engine.store.rate_bucket(bucket)
    # The first send's hour: the four waiting took nothing (they are not four more hours).
    assert tat is not None and tat <= api.engine.clock.now() * 1000 + 3_600_000_000
    first = api.handler.received[0].body["runId"]
    for run_id in [r for r in runs if r != first]:
        r = await api.call("POST", f"/apps/orders/runs/{run_id}/cancel", {"reason": "test"})
        assert r.status_code == 200, r.text
    assert api.engine.dispatcher.delayed == 0
    assert await api.engine.store.rate_bucket(bucket) == tat  # nothing to give back: none taken
    late = await api.start("limited", {"tenant": "acme"})
    run = await api.engine.runs.wait_for(late["runId"], lambda r: r.task is not None)
    with trio.fail_after(5):
        while api.engine.dispatcher.delayed < 1:
            await trio.lowlevel.checkpoint()
    assert run.task is not None
    token = run.task.token
    label, due = api.engine.dispatcher.delayed_until(token) or ("", 0)
    assert label == "tenant=acme" and due == -(-tat // 1000)  # the first send's hour, no later
    assert len(api.handler.received) == 1


async def test_recovery_offers_a_queued_task_with_its_priority_and_its_bucket(api: Api) -> None:
    """What `recover` reads back from storage after a restart (migration 0078): the urgent
    queued task is claimed first, and a rate-limited one waits for a token of its bucket."""
    for name, step in (
        ("low", {"priority": 5}),
        ("high", {"priority": 1}),
        ("metered", {"rateLimit": {"limit": 1, "period": "1h", "key": "input.tenant"}}),
    ):
        body = {"name": "t", "type": "task", "queue": "work", **step}
        await api.register({"name": name, "steps": [body]})
    low = await api.start("low", {})
    high = await api.start("high", {})
    metered = [await api.start("metered", {"tenant": "acme"}) for _ in range(2)]
    engine = api.engine
    await engine.runs.wait_for(metered[1]["runId"], lambda r: r.task is not None)
    with trio.fail_after(5):
        while engine.queues.depth("orders", "work") < 3 or engine.dispatcher.delayed < 1:
            await trio.lowlevel.checkpoint()
    # What a restart leaves: nothing in memory; the tasks and the bucket in the database.
    everything = lambda _: True  # noqa: E731
    engine.queues.withdraw_where(everything)
    engine.dispatcher.abort_where(everything)
    assert engine.queues.depth("orders", "work") == 0 and engine.dispatcher.delayed == 0
    await engine.recover()
    with trio.fail_after(5):
        while engine.queues.depth("orders", "work") < 2 or engine.dispatcher.delayed < 2:
            await trio.lowlevel.checkpoint()
    assert engine.queues.depth("orders", "work") == 2  # low and high; both metered ones wait
    polled = await api.call(
        "POST", "/apps/orders/tasks/poll", {"queue": "work", "maxTasks": 1, "waitSeconds": 0}
    )
    assert [t["runId"] for t in polled.json()["tasks"]] == [high["runId"]]
    polled = await api.call(
        "POST", "/apps/orders/tasks/poll", {"queue": "work", "maxTasks": 5, "waitSeconds": 0}
    )
    assert [t["runId"] for t in polled.json()["tasks"]] == [low["runId"]]
    for run in metered:
        r = await api.call("GET", f"/apps/orders/runs/{run['runId']}/diagnosis")
        assert "rate-limit token on tenant=acme (next in" in r.text, r.text
