"""Push answers, out-of-band completion, limits, branching, idempotent starts, secret rotation."""

from __future__ import annotations

from typing import Any

import trio

from foliot import signing

from ..conftest import Api
from ..helpers import answer_json

LIMIT = 262_144


def sized(n: int) -> str:
    """A JSON string value whose compact encoding is exactly n bytes (with '<' and U+2028)."""
    core = "<&\u2028"  # 1 + 1 + 3 bytes
    return core + "x" * (n - 2 - 5)


TWO = {
    "name": "two",
    "steps": [
        {
            "name": "a",
            "type": "task",
            "onFailure": "comp",
            "retry": {"maxAttempts": 3, "initialInterval": "1ms"},
        },
        {"name": "b", "type": "task", "next": "$end"},
        {"name": "c", "type": "task", "next": "$end"},
        {"name": "comp", "type": "task", "next": "$fail"},
    ],
}
NO_COMP = {"name": "nocomp", "steps": [{"name": "a", "type": "task", "retry": {"maxAttempts": 3}}]}


async def test_foliot_next_branches(api: Api) -> None:
    api.handler.route("a", lambda b, h: answer_json({"go": "c"}, headers={"foliot-next": "c"}))
    await api.register(TWO)
    run = await api.start("two")
    done = await api.until(run["runId"], "completed", "failed")
    assert done["status"] == "completed"
    assert [r.body["step"] for r in api.handler.received] == ["a", "c"]


async def test_foliot_next_naming_no_step_fails_without_retry(api: Api) -> None:
    api.handler.route("a", lambda b, h: answer_json({}, headers={"foliot-next": "zzz"}))
    await api.register(NO_COMP)
    run = await api.start("nocomp")
    done = await api.until(run["runId"], "failed")
    assert done["error"]["class"] == "invalid_next"
    assert len(api.handler.received) == 1


async def test_output_at_the_limit_is_kept(api: Api) -> None:
    value = sized(LIMIT)
    api.handler.route("a", lambda b, h: answer_json(value))
    await api.register(NO_COMP)
    run = await api.start("nocomp")
    done = await api.until(run["runId"], "completed", "failed")
    assert done["status"] == "completed" and done["state"]["a"] == value


async def test_output_over_the_limit_without_on_failure(api: Api) -> None:
    api.handler.route("a", lambda b, h: answer_json(sized(LIMIT + 1)))
    await api.register(NO_COMP)
    run = await api.start("nocomp")
    done = await api.until(run["runId"], "failed")
    assert done["error"]["class"] == "output_too_large" and "'a'" in done["error"]["message"]
    assert len(api.handler.received) == 1  # not retried


async def test_output_over_the_limit_goes_to_on_failure(api: Api) -> None:
    api.handler.route("a", lambda b, h: answer_json(sized(LIMIT + 1)))
    await api.register(TWO)
    run = await api.start("two")
    done = await api.until(run["runId"], "failed")
    comp = api.handler.received[-1]
    assert comp.body["step"] == "comp"
    assert comp.body["error"]["class"] == "output_too_large" and comp.body["error"]["step"] == "a"
    assert (done["error"]["step"], done["error"]["class"]) == ("a", "output_too_large")
    assert done["error"]["compensatedBy"] == "comp"


async def test_a_failure_answer_too_large_to_read_fails_by_its_status(api: Api) -> None:
    """A 503 whose body is past what Foliot reads (a framework's HTML debug page) is a 503:
    retried, class `http_503`, not an `output_too_large` that would stop the retries."""
    page = b"<html>" + b"x" * (api.engine.settings.body_max_bytes + 1) + b"</html>"
    api.handler.route("a", lambda b, h: (503, {"content-type": "text/html"}, page))
    await api.register(
        {
            "name": "big503",
            "steps": [{"name": "a", "type": "task", "retry": {"maxAttempts": 2, "initialInterval": "1ms"}}],
        }
    )
    run = await api.start("big503")
    done = await api.until(run["runId"], "failed")
    assert done["error"]["class"] == "http_503", done["error"]
    assert len(api.handler.received) == 2  # retried


async def test_a_202_with_a_body_too_large_to_read_is_accepted(api: Api) -> None:
    big = b"x" * (api.engine.settings.body_max_bytes + 1)
    api.handler.route("a", lambda b, h: (202, {}, big))
    await api.register(NO_COMP)
    run = await api.start("nocomp")
    await api.engine.runs.wait_for(run["runId"], lambda r: r.task is not None and r.task.accepted)
    assert (await api.run(run["runId"]))["status"] == "running"


async def accepted_task(api: Api, workflow: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Start a run whose first task the handler answers with 202; return it and the task token."""
    api.handler.route("a", lambda b, h: (202, {}, b""))
    await api.register(workflow)
    run = await api.start(workflow["name"])
    await api.handler.wait_for(1)
    token = api.handler.received[0].body["taskToken"]
    await api.engine.runs.wait_for(run["runId"], lambda r: r.task is not None and r.task.accepted)
    return run, str(token)


async def test_accepted_then_completed_out_of_band(api: Api) -> None:
    run, token = await accepted_task(api, TWO)
    r = await api.call("POST", f"/apps/orders/tasks/{token}/heartbeat", {})
    assert r.status_code == 200 and r.json() == {"cancelRequested": False}
    r = await api.call("POST", f"/apps/orders/tasks/{token}/complete", {"output": {"late": 1}, "next": "c"})
    assert r.status_code == 200, r.text
    done = await api.until(run["runId"], "completed")
    assert done["state"]["a"] == {"late": 1} and "c" in done["state"]
    again = await api.call("POST", f"/apps/orders/tasks/{token}/complete", {"output": 2})
    assert again.status_code == 409 and again.json()["error"]["code"] == "task_closed"
    hb = await api.call("POST", f"/apps/orders/tasks/{token}/heartbeat", {})
    assert hb.status_code == 409 and hb.json()["error"]["code"] == "task_closed"


async def test_complete_over_the_limit_answers_400_and_fails_the_step(api: Api) -> None:
    _run, token = await accepted_task(api, TWO)
    r = await api.call("POST", f"/apps/orders/tasks/{token}/complete", {"output": sized(LIMIT + 1)})
    assert r.status_code == 400 and r.json()["error"]["code"] == "output_too_large"
    await api.handler.wait_for(2)
    assert api.handler.received[1].body["step"] == "comp"


async def test_complete_with_unknown_next_answers_400(api: Api) -> None:
    run, token = await accepted_task(api, NO_COMP)
    r = await api.call("POST", f"/apps/orders/tasks/{token}/complete", {"output": 1, "next": "zzz"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_next"
    done = await api.until(run["runId"], "failed")
    assert done["error"]["class"] == "invalid_next"


async def test_complete_with_an_error_retries(api: Api) -> None:
    _run, token = await accepted_task(api, NO_COMP)
    r = await api.call(
        "POST",
        f"/apps/orders/tasks/{token}/complete",
        {"error": {"class": "busy", "message": "later", "retryable": True}},
    )
    assert r.status_code == 200
    await api.handler.wait_for(2)
    assert api.handler.received[1].body["attempt"] == 2


async def test_idempotent_start(api: Api) -> None:
    await api.register(NO_COMP)
    headers = {**api.auth(), "Idempotency-Key": "req-1"}
    first = await api.client.post(
        "/apps/orders/runs", json={"workflow": "nocomp", "input": 1}, headers=headers
    )
    again = await api.client.post(
        "/apps/orders/runs", json={"workflow": "nocomp", "input": 1}, headers=headers
    )
    assert first.status_code == 201 and again.status_code == 200
    assert again.json() == first.json()
    other = await api.client.post(
        "/apps/orders/runs", json={"workflow": "nocomp", "input": 2}, headers=headers
    )
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    runs = await api.call("GET", "/apps/orders/runs")
    assert len(runs.json()["runs"]) == 1


async def test_run_listing_pages_and_filters(api: Api) -> None:
    await api.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    ids = {(await api.start("w", businessKey=f"k{i}"))["runId"] for i in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, "workflow": "w"}
        if cursor:
            params["cursor"] = cursor
        page = (await api.call("GET", "/apps/orders/runs", params=params)).json()
        seen += [r["runId"] for r in page["runs"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert set(seen) == ids and len(seen) == 5
    by_key = (await api.call("GET", "/apps/orders/runs", params={"businessKey": "k3"})).json()["runs"]
    assert len(by_key) == 1 and by_key[0]["businessKey"] == "k3"


async def test_signing_secret_rotation(api: Api) -> None:
    await api.register({"name": "t", "steps": [{"name": "a", "type": "task"}]})
    run = await api.start("t")
    await api.until(run["runId"], "completed")
    assert api.handler.received[-1].headers["foliot-signature"].count("v1=") == 1
    old = api.handler.secrets[0]
    r = await api.client.post(
        "/apps/orders/signing-secrets", json={"graceSeconds": 3600}, headers=api.admin()
    )
    assert r.status_code == 201
    new = r.json()["signingSecret"]
    api.handler.secrets[:] = [new]  # the handler picked up only the new one...
    run = await api.start("t")
    await api.until(run["runId"], "completed")
    push = api.handler.received[-1]
    assert push.headers["foliot-signature"].count("v1=") == 2
    signing.verify_signature(push.raw, push.headers["foliot-signature"], [old])  # ...old ones still verify
    view = (await api.client.get("/apps/orders", headers=api.admin())).json()
    assert [s["expiresAt"] is None for s in view["signingSecrets"]] == [False, True]
    # With no grace, the outgoing secret stops at once.
    r = await api.client.post("/apps/orders/signing-secrets", json={"graceSeconds": 0}, headers=api.admin())
    api.handler.secrets[:] = [r.json()["signingSecret"]]
    run = await api.start("t")
    await api.until(run["runId"], "completed")
    assert api.handler.received[-1].headers["foliot-signature"].count("v1=") == 1
    assert api.handler.bad_signatures == 0


async def test_poll_complete_over_http(api: Api) -> None:
    await api.register(
        {"name": "q", "steps": [{"name": "pick", "type": "task", "queue": "warehouse", "timeout": "1m"}]}
    )
    result: dict[str, Any] = {}

    async def worker() -> None:
        r = await api.call(
            "POST", "/apps/orders/tasks/poll", {"queue": "warehouse", "waitSeconds": 30, "workerId": "w1"}
        )
        result["poll"] = r

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await trio.testing.wait_all_tasks_blocked(0.01)
        run = await api.start("q", {"sku": "X"})
    r = result["poll"]
    assert r.status_code == 200, r.text
    (task,) = r.json()["tasks"]
    assert task["runId"] == run["runId"] and task["input"] == {"sku": "X"} and task["deadline"] is not None
    done = await api.call(
        "POST", f"/apps/orders/tasks/{task['taskToken']}/complete", {"output": {"picked": True}}
    )
    assert done.status_code == 200
    final = await api.until(run["runId"], "completed")
    assert final["state"] == {"pick": {"picked": True}}
    empty = await api.call("POST", "/apps/orders/tasks/poll", {"queue": "warehouse", "waitSeconds": 0})
    assert empty.json() == {"tasks": []}


async def test_workflow_listing_pages(api: Api) -> None:
    for name in ("c", "a", "b"):
        await api.register({"name": name, "steps": [{"name": "t", "type": "task"}]})
    await api.register({"name": "a", "steps": [{"name": "t2", "type": "task"}]})
    first = (await api.call("GET", "/apps/orders/workflows", params={"limit": 2})).json()
    assert [(w["name"], w["version"]) for w in first["workflows"]] == [("a", 2), ("b", 1)]
    rest = (
        await api.call("GET", "/apps/orders/workflows", params={"limit": 2, "cursor": first["nextCursor"]})
    ).json()
    assert [w["name"] for w in rest["workflows"]] == ["c"] and rest["nextCursor"] is None
    bad = await api.call("GET", "/apps/orders/workflows", params={"limit": 0})
    assert bad.status_code == 400
