"""Every way a run is created goes through one path (`Runs.begin`), on both stores: a child run
or a signal-with-start of a workflow with `concurrency` waits in its key's queue and is admitted
like any start (issue 38: they stayed `queued` forever, their key free); a fan-out that would
create more runs than `FOLIOT_MAX_TREE_RUNS` fails with `too_many_runs` before any is created
(issue 37: one start had created 168,421 runs)."""

from __future__ import annotations

from typing import Any

import pytest

from ..conftest import Api
from ..helpers import answer_json

KEYED = {
    "name": "keyed",
    "concurrency": {"limit": 1, "key": "input.k"},
    "output": "state.work",
    "steps": [{"name": "work", "type": "task"}],
}


def echo(body: dict[str, Any], headers: dict[str, str]) -> Any:
    return answer_json({"did": body["input"]})


async def _children(api: Api, run_id: str) -> list[dict[str, Any]]:
    r = await api.call("GET", f"/apps/{api.app}/runs?parentRunId={run_id}&limit=100")
    assert r.status_code == 200, r.text
    return r.json()["runs"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["map", "parallel", "run"])
async def test_children_with_a_concurrency_key_are_admitted(api: Api, kind: str) -> None:
    api.handler.route("work", echo)
    await api.register(KEYED)
    if kind == "map":
        step: dict[str, Any] = {
            "name": "fan",
            "type": "map",
            "itemsPath": "input.items",
            "workflow": "keyed",
            "maxConcurrency": 4,
        }
        items: Any = {"items": [{"k": "a", "i": i} for i in range(4)]}
    elif kind == "parallel":
        step = {
            "name": "fan",
            "type": "parallel",
            "branches": [
                {"name": f"b{i}", "workflow": "keyed", "inputPath": f"input.b{i}"} for i in range(3)
            ],
        }
        items = {f"b{i}": {"k": "a", "i": i} for i in range(3)}
    else:
        step = {"name": "fan", "type": "run", "workflow": "keyed", "inputPath": "input.one"}
        items = {"one": {"k": "a", "i": 0}}
    await api.register({"name": "parent", "steps": [step]})
    run = await api.start("parent", items)
    done = await api.until(run["runId"], "completed", "failed")
    assert done["status"] == "completed", done
    children = await _children(api, run["runId"])
    assert children and all(c["status"] == "completed" for c in children)
    # One at a time under the key (limit 1): each child was queued then admitted, in order.
    if len(children) > 1:
        for child in children:
            types = [e["type"] for e in await api.events(child["runId"])]
            assert types[:2] == ["run_started", "run_queued"], types
            assert "run_admitted" in types


async def test_a_queued_child_is_not_overtaken_by_a_later_start(api: Api) -> None:
    """The key is held by a plain start; the map's children queue behind it in start order, and a
    start made after them waits behind them."""
    api.handler.route("work", echo)
    await api.register(KEYED)
    await api.register(
        {
            "name": "parent",
            "steps": [{"name": "fan", "type": "map", "itemsPath": "input.items", "workflow": "keyed"}],
        }
    )
    waiter = {
        "name": "keyed",
        "concurrency": {"limit": 1, "key": "input.k"},
        "steps": [{"name": "hold", "type": "wait", "signal": "go"}, {"name": "work", "type": "task"}],
    }
    await api.register(waiter)  # v2: the first run of the key holds its slot until signalled
    holder = await api.start("keyed", {"k": "a", "i": -1})
    await api.until(holder["runId"], "waiting")
    parent = await api.start("parent", {"items": [{"k": "a", "i": 0}]})
    children = await _children(api, parent["runId"])
    assert [c["status"] for c in children] == ["queued"]
    later = await api.start("keyed", {"k": "a", "i": 1})
    assert later["status"] == "queued"
    r = await api.call("POST", f"/apps/{api.app}/signals", {"runId": holder["runId"], "name": "go"})
    assert r.status_code in (200, 202), r.text
    child = await api.until(children[0]["runId"], "waiting", "completed")
    assert child["status"] in ("waiting", "completed")
    assert (await api.run(later["runId"]))["status"] == "queued"  # still behind the child


async def test_signal_with_start_of_a_keyed_workflow_is_admitted(api: Api) -> None:
    api.handler.route("work", echo)
    await api.register(
        {
            "name": "keyed-wait",
            "concurrency": {"limit": 2, "key": "input.k"},
            "steps": [{"name": "hold", "type": "wait", "signal": "go"}, {"name": "work", "type": "task"}],
        }
    )
    r = await api.call(
        "POST",
        f"/apps/{api.app}/signals",
        {
            "workflow": "keyed-wait",
            "businessKey": "order-1",
            "name": "go",
            "startIfMissing": {"input": {"k": "a"}},
        },
    )
    assert r.status_code in (200, 201, 202), r.text
    run_id = r.json()["runId"]
    done = await api.until(run_id, "completed", "failed")
    assert done["status"] == "completed", done


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"max_tree_runs": 50}


async def test_a_fan_out_past_the_tree_budget_fails_before_creating_any_run(api: Api) -> None:
    """A start's tree may create FOLIOT_MAX_TREE_RUNS runs (50 here): a map of 60 items fails with
    `too_many_runs` at once and not one child exists."""
    await api.register({"name": "leaf", "steps": [{"name": "hold", "type": "wait", "signal": "go"}]})
    await api.register(
        {
            "name": "wide",
            "steps": [{"name": "fan", "type": "map", "itemsPath": "input.items", "workflow": "leaf"}],
        }
    )
    run = await api.start("wide", {"items": list(range(60))})
    assert run["status"] == "failed", run
    assert run["error"]["class"] == "too_many_runs"
    assert "FOLIOT_MAX_TREE_RUNS" in run["error"]["message"]
    assert await _children(api, run["runId"]) == []
    ok = await api.start("wide", {"items": list(range(40))})
    assert ok["status"] == "waiting" and len(await _children(api, ok["runId"])) == 10  # maxConcurrency


async def test_a_starts_whole_tree_is_bounded_by_its_budget(api: Api) -> None:
    """Three levels of `parallel` x 5 (155 runs) under a budget of 50 shared down the tree: each
    child gets a share, the level that would pass it fails with `too_many_runs`, and the start
    creates no more than 50 runs below it (issue 37: one start had created 168,421)."""
    await api.register({"name": "leaf", "steps": [{"name": "hold", "type": "wait", "signal": "go"}]})
    below = "leaf"
    for level in range(3):
        name = f"level{level}"
        await api.register(
            {
                "name": name,
                "steps": [
                    {
                        "name": "fan",
                        "type": "parallel",
                        "branches": [{"name": f"b{i}", "workflow": below} for i in range(5)],
                    }
                ],
            }
        )
        below = name
    run = await api.start(below)
    done = await api.until(run["runId"], "failed")
    assert done["status"] == "failed"
    r = await api.call("GET", f"/apps/{api.app}/runs?limit=200")
    runs = r.json()["runs"]
    assert 1 < len(runs) <= 51, len(runs)
    classes = {x["error"]["class"] for x in runs if x.get("error")}
    assert "too_many_runs" in classes, classes


async def test_cancelling_a_run_closes_its_push_in_flight(api: Api) -> None:
    """Issue 38, item 10: the handler sees the client go when the run it works for is cancelled
    (the push's connection is closed), and a heartbeat of the task answers `cancelRequested`."""
    import trio

    api.handler.held_open.add("slow")
    await api.register({"name": "slow-one", "steps": [{"name": "slow", "type": "task", "timeout": "20s"}]})
    run = await api.start("slow-one")
    await api.handler.wait_for(1)
    token = api.handler.received[0].body["taskToken"]
    r = await api.call("POST", f"/apps/{api.app}/runs/{run['runId']}/cancel", {"reason": "no more"})
    assert r.status_code == 200, r.text
    with trio.fail_after(5):
        await api.handler.gone.wait()
    assert api.handler.disconnected == [token]
    beat = await api.call("POST", f"/apps/{api.app}/tasks/{token}/heartbeat", {})
    assert beat.status_code == 200 and beat.json() == {"cancelRequested": True}, beat.text
