"""`queueTimeout` over HTTP on both stores: validation, and the durable timer it arms."""

from __future__ import annotations

from ..conftest import Api

PULL = {
    "name": "pull",
    "steps": [{"name": "t", "type": "task", "queue": "warehouse", "queueTimeout": "15m"}],
}


async def test_a_queued_attempt_arms_a_durable_queue_timeout(api: Api) -> None:
    await api.register(PULL)
    run = await api.start("pull")
    timers = await api.engine.store.timers_due_before(2**62, 100)
    mine = [t for t in timers if t.run_id == run["runId"]]
    assert [(t.slot, t.kind) for t in mine] == [("step", "queue_timeout")]
    created = api.engine.clock.now()
    assert 0 < mine[0].due_at - created <= 15 * 60_000
    r = await api.call("POST", "/apps/orders/tasks/poll", {"queue": "warehouse", "waitSeconds": 0})
    assert [t["runId"] for t in r.json()["tasks"]] == [run["runId"]]
    timers = await api.engine.store.timers_due_before(2**62, 100)
    assert [t.kind for t in timers if t.run_id == run["runId"]] == ["task_deadline"]


async def test_queue_timeout_needs_a_queue(api: Api) -> None:
    bad = {"name": "push", "steps": [{"name": "t", "type": "task", "queueTimeout": "15m"}]}
    r = await api.call("POST", "/apps/orders/workflows", bad)
    assert r.status_code == 400 and "steps[0].queueTimeout" in r.json()["error"]["message"]
    r = await api.call(
        "POST", "/apps/orders/workflows", {**PULL, "steps": [{**PULL["steps"][0], "queueTimeout": "soon"}]}
    )
    assert r.status_code == 400 and "steps[0].queueTimeout" in r.json()["error"]["message"]
    assert (await api.call("GET", "/apps/orders/workflows")).json()["workflows"] == []
