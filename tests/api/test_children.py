"""Child runs over HTTP, on both stores: `run`, `map` and `parallel` steps, run output."""

from __future__ import annotations

from typing import Any

from ..conftest import Api
from ..helpers import answer_json

CHILD = {
    "name": "pick-item",
    "output": "state.pick",
    "steps": [{"name": "pick", "type": "task"}],
}
WAITING_CHILD = {"name": "waiter", "steps": [{"name": "hold", "type": "wait", "signal": "go"}]}


def echo(body: dict[str, Any], headers: dict[str, str]) -> Any:
    return answer_json({"picked": body["input"]})


async def test_a_run_step_takes_the_childs_output(api: Api) -> None:
    api.handler.route("pick", echo)
    await api.register(CHILD)
    await api.register(
        {
            "name": "parent",
            "steps": [
                {"name": "one", "type": "run", "workflow": "pick-item", "inputPath": "input.item"},
                {"name": "after", "type": "task"},
            ],
        }
    )
    run = await api.start("parent", {"item": 7})
    done = await api.until(run["runId"], "completed")
    assert done["state"]["one"] == {"picked": 7}
    assert done["output"] == done["state"]
    children = (await api.call("GET", f"/apps/orders/runs?parentRunId={run['runId']}")).json()["runs"]
    assert len(children) == 1
    child = children[0]
    assert child["status"] == "completed" and child["output"] == {"picked": 7}
    assert child["parent"] == {
        "runId": run["runId"],
        "step": "one",
        "generation": 1,
        "attempt": 1,
        "index": 0,
    }
    types = [e["type"] for e in await api.events(run["runId"])]
    assert "child_started" in types and "child_completed" in types


async def test_a_map_step_lists_outputs_in_item_order(api: Api) -> None:
    api.handler.route("pick", echo)
    await api.register(CHILD)
    await api.register(
        {
            "name": "fan",
            "steps": [
                {
                    "name": "all",
                    "type": "map",
                    "itemsPath": "input.items",
                    "workflow": "pick-item",
                    "maxConcurrency": 3,
                }
            ],
        }
    )
    run = await api.start("fan", {"items": list(range(10))})
    done = await api.until(run["runId"], "completed")
    assert done["state"]["all"] == [{"picked": i} for i in range(10)]
    children = (await api.call("GET", f"/apps/orders/runs?parentRunId={run['runId']}&limit=100")).json()[
        "runs"
    ]
    assert len(children) == 10
    metrics = (await api.client.get("/metrics", headers=api.admin())).text
    assert 'foliot_child_runs_started_total{app="orders",workflow="fan"} 10.0' in metrics
    assert 'foliot_runs_started_total{app="orders",workflow="pick-item"} 10.0' in metrics


async def test_an_empty_map_and_bad_items(api: Api) -> None:
    await api.register(CHILD)
    await api.register(
        {
            "name": "fan",
            "steps": [{"name": "all", "type": "map", "itemsPath": "input.items", "workflow": "pick-item"}],
        }
    )
    run = await api.start("fan", {"items": []})
    assert run["status"] == "completed" and run["state"]["all"] == []
    bad = await api.start("fan", {"items": 3})
    assert bad["status"] == "failed" and bad["error"]["class"] == "invalid_items"


async def test_a_map_fails_past_its_tolerance_and_cancels_the_rest(api: Api) -> None:
    def fail_odd(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if body["input"] % 2:
            return answer_json({"error": {"class": "odd", "retryable": False}}, 422)
        return answer_json(body["input"])

    api.handler.route("pick", fail_odd)
    await api.register({**CHILD, "steps": [{"name": "pick", "type": "task", "retry": {"maxAttempts": 1}}]})
    await api.register(
        {
            "name": "fan",
            "steps": [
                {
                    "name": "all",
                    "type": "map",
                    "itemsPath": "input.items",
                    "workflow": "pick-item",
                    "toleratedFailures": 2,
                    "maxConcurrency": 1,
                }
            ],
        }
    )
    tolerated = await api.start("fan", {"items": [0, 1, 2, 3]})
    done = await api.until(tolerated["runId"], "completed", "failed")
    assert done["status"] == "completed" and done["state"]["all"] == [0, None, 2, None]
    failing = await api.start("fan", {"items": [1, 3, 5, 7]})
    failed = await api.until(failing["runId"], "failed")
    assert failed["error"]["class"] == "map_failed"
    children = (await api.call("GET", f"/apps/orders/runs?parentRunId={failing['runId']}")).json()["runs"]
    assert len(children) == 3  # the fourth item never started


async def test_parallel_branches_and_a_failing_branch(api: Api) -> None:
    api.handler.route("pick", echo)
    await api.register(CHILD)
    await api.register(WAITING_CHILD)
    await api.register(
        {
            "name": "both",
            "steps": [
                {
                    "name": "notify",
                    "type": "parallel",
                    "branches": [
                        {"name": "a", "workflow": "pick-item"},
                        {"name": "b", "workflow": "pick-item", "inputPath": "input.b"},
                    ],
                }
            ],
        }
    )
    run = await api.start("both", {"b": 2})
    done = await api.until(run["runId"], "completed")
    assert done["state"]["notify"] == {"a": {"picked": {"b": 2}}, "b": {"picked": 2}}
    await api.register(
        {
            "name": "racing",
            "steps": [
                {
                    "name": "notify",
                    "type": "parallel",
                    "branches": [
                        {"name": "slow", "workflow": "waiter"},
                        {"name": "gone", "workflow": "nope"},
                    ],
                }
            ],
        }
    )
    racing = await api.start("racing")
    failed = await api.until(racing["runId"], "failed")
    assert failed["error"]["class"] == "branch_failed" and "'gone'" in failed["error"]["message"]
    children = (await api.call("GET", f"/apps/orders/runs?parentRunId={racing['runId']}")).json()["runs"]
    # The failure was known before the commit: the other branch was never started at all.
    assert children == []


async def test_cancelling_a_parent_cancels_its_children(api: Api) -> None:
    await api.register(WAITING_CHILD)
    await api.register({"name": "p", "steps": [{"name": "c", "type": "run", "workflow": "waiter"}]})
    await api.register({"name": "gp", "steps": [{"name": "p", "type": "run", "workflow": "p"}]})
    top = await api.start("gp")
    assert top["status"] == "waiting" and top["children"]["open"] == 1
    child = top["children"]["openRunIds"][0]
    grandchild = (await api.run(child))["children"]["openRunIds"][0]
    r = await api.call("POST", f"/apps/orders/runs/{top['runId']}/cancel", {"reason": "test"})
    assert r.status_code == 200, r.text
    assert (await api.until(child, "cancelled"))["status"] == "cancelled"
    assert (await api.until(grandchild, "cancelled"))["status"] == "cancelled"


async def test_a_child_failure_fails_the_step_and_retry_starts_a_new_child(api: Api) -> None:
    await api.register(WAITING_CHILD)
    await api.register(
        {
            "name": "p",
            "steps": [
                {
                    "name": "c",
                    "type": "run",
                    "workflow": "waiter",
                    "retry": {"maxAttempts": 2, "initialInterval": "1ms"},
                }
            ],
        }
    )
    run = await api.start("p")
    first = run["children"]["openRunIds"][0]
    await api.call("POST", f"/apps/orders/runs/{first}/cancel", {})
    second = None
    for _ in range(100):
        view = await api.run(run["runId"])
        if view["children"] and view["children"]["openRunIds"] and view["children"]["openRunIds"][0] != first:
            second = view["children"]["openRunIds"][0]
            break
        await api.engine.runs.wait_for(run["runId"], lambda r: r.fan is not None and r.fan.attempt == 2)
    assert second is not None
    await api.call("POST", f"/apps/orders/runs/{second}/cancel", {})
    failed = await api.until(run["runId"], "failed")
    assert failed["error"]["class"] == "child_cancelled" and second in failed["error"]["message"]


async def test_child_step_fields_are_validated_and_nothing_is_stored(api: Api) -> None:
    bad_steps: list[tuple[dict[str, Any], str]] = [
        ({"name": "x", "type": "run"}, "steps[0].workflow"),
        ({"name": "x", "type": "run", "workflow": "a", "onParentClose": "keep"}, "steps[0].onParentClose"),
        ({"name": "x", "type": "map", "workflow": "a"}, "steps[0].itemsPath"),
        (
            {"name": "x", "type": "map", "workflow": "a", "itemsPath": "input", "maxConcurrency": 0},
            "steps[0].maxConcurrency",
        ),
        (
            {"name": "x", "type": "parallel", "branches": [{"name": "a", "workflow": "w"}]},
            "steps[0].branches",
        ),
        ({"name": "x", "type": "run", "workflow": "a", "itemsPath": "input"}, "steps[0].itemsPath"),
        ({"name": "x", "type": "task", "workflow": "a"}, "steps[0].workflow"),
    ]
    for step, field in bad_steps:
        r = await api.call("POST", "/apps/orders/workflows", {"name": "bad", "steps": [step]})
        assert r.status_code == 400, (step, r.text)
        assert r.json()["error"]["message"].startswith(field), (step, r.text)
    r = await api.call(
        "POST",
        "/apps/orders/workflows",
        {"name": "bad", "output": "nope", "steps": [{"name": "a", "type": "task"}]},
    )
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("output")
    assert (await api.call("GET", "/apps/orders/workflows")).json()["workflows"] == []


async def test_why_and_the_console_show_a_maps_progress_and_links(api: Api) -> None:
    from ..conftest import ADMIN
    from .test_console import browser, login

    await api.register(WAITING_CHILD)
    await api.register(
        {
            "name": "fan",
            "steps": [
                {
                    "name": "all",
                    "type": "map",
                    "itemsPath": "input",
                    "workflow": "waiter",
                    "maxConcurrency": 2,
                }
            ],
        }
    )
    run = await api.start("fan", [1, 2, 3])
    assert run["children"]["total"] == 3 and run["children"]["open"] == 2
    first = run["children"]["openRunIds"][0]
    r = await api.call("POST", "/apps/orders/signals", {"runId": first, "name": "go"})
    assert r.status_code == 202, r.text
    await api.engine.runs.wait_for(run["runId"], lambda x: x.fan is not None and x.fan.completed == 1)
    why = (await api.call("GET", f"/apps/orders/runs/{run['runId']}/diagnosis")).json()
    assert why["summary"].startswith("waiting for 2 of 3 children of `all`; 1 completed"), why
    async with browser(api) as c:
        await login(api, ADMIN, c)
        page = await c.get(f"/console/apps/orders/runs/{run['runId']}")
        assert page.status_code == 200
        assert "1 of 3 done" in page.text and f"/console/apps/orders/runs/{first}" in page.text
        child = await c.get(f"/console/apps/orders/runs/{first}")
        assert f"/console/apps/orders/runs/{run['runId']}" in child.text and "child run of" in child.text


INSTANT = {
    "name": "instant",
    "output": "input",
    "steps": [
        {
            "name": "c",
            "type": "choice",
            "choices": [{"when": {"path": "input", "op": "exists", "value": True}, "next": "$end"}],
            "default": "$end",
        }
    ],
}


async def test_children_that_close_at_once_are_applied_in_bursts(api: Api) -> None:
    """Children completing in their own start transition queue their closes in the parent's
    mailbox together; the parent applies a burst in one commit and loses none."""
    await api.register(INSTANT)
    await api.register(
        {
            "name": "fan",
            "steps": [
                {
                    "name": "all",
                    "type": "map",
                    "itemsPath": "input",
                    "workflow": "instant",
                    "maxConcurrency": 40,
                }
            ],
        }
    )
    run = await api.start("fan", list(range(200)))
    done = await api.until(run["runId"], "completed")
    assert done["state"]["all"] == list(range(200))
    events = await api.call("GET", f"/apps/orders/runs/{run['runId']}/events", params={"limit": 1000})
    types = [e["type"] for e in events.json()["events"]]
    assert types.count("child_started") == 200 and types.count("child_completed") == 200
    seen: set[int] = set()
    cursor = None
    while True:
        params: dict[str, Any] = {"parentRunId": run["runId"], "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = (await api.call("GET", "/apps/orders/runs", params=params)).json()
        seen.update(c["parent"]["index"] for c in page["runs"])
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert seen == set(range(200))


async def test_a_step_whose_workflow_is_missing_warns_at_registration_and_leaves_no_phantom_child(
    api: Api,
) -> None:
    parent = {
        "name": "parent",
        "steps": [
            {"name": "ship", "type": "run", "workflow": "shipping"},
            {
                "name": "notify",
                "type": "parallel",
                "branches": [
                    {"name": "email", "workflow": "parent"},  # itself: registered by this very call
                    {"name": "sms", "workflow": "send-sms", "version": 2},
                ],
            },
        ],
    }
    r = await api.call("POST", "/apps/orders/workflows", parent)
    assert r.status_code == 201, r.text
    assert r.json()["warnings"] == [
        {
            "code": "child_workflow_missing",
            "step": "ship",
            "field": "steps[0].workflow",
            "message": "step 'ship' starts workflow 'shipping', which is not registered: register it"
            " before a run reaches the step, or the step fails with workflow_not_found",
        },
        {
            "code": "child_workflow_missing",
            "step": "notify",
            "field": "steps[1].branches[1].workflow",
            "message": "step 'notify' starts version 2 of workflow 'send-sms', which is not registered:"
            " register it before a run reaches the step, or the step fails with workflow_not_found",
        },
    ]
    assert (await api.call("GET", "/apps/orders/workflows/parent")).status_code == 200  # registered
    r = await api.call("POST", "/apps/orders/workflows", CHILD)
    assert r.status_code == 201 and r.json()["warnings"] == []

    run = await api.start("parent")
    failed = await api.until(run["runId"], "failed")
    assert failed["error"]["class"] == "workflow_not_found" and failed["error"]["step"] == "ship"
    assert "workflow 'shipping' not found" in failed["error"]["message"]
    events = await api.events(run["runId"])
    assert not [e for e in events if "runId" in e["data"]]
    (not_started,) = [e for e in events if e["type"].startswith("child_")]
    assert not_started["type"] == "child_not_started" and not_started["step"] == "ship"
    assert not_started["data"]["workflow"] == "shipping"
    assert not_started["data"]["class"] == "workflow_not_found"
    children = (await api.call("GET", f"/apps/orders/runs?parentRunId={run['runId']}")).json()["runs"]
    assert children == []
