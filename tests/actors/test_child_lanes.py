"""An app's fan-outs start their children at its lane's rate (FOLIOT_APP_CHILD_RATE/BURST): the
rest wait on the parent's durable `top_up` timer, and every item still runs exactly once (issue
37: one start created 168,421 runs in one request)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from foliot.storage.base import RunFilter

from ..helpers import advance
from .conftest import Env

ITEM = {"name": "item", "steps": [{"name": "work", "type": "task"}]}
FAN = {
    "name": "fan",
    "steps": [{"name": "all", "type": "map", "itemsPath": "input.items", "workflow": "item"}],
}


@pytest.mark.parametrize("settings_overrides", [{"app_child_rate": 5, "app_child_burst": 5}])
async def test_a_map_past_the_lanes_burst_is_paced_and_completes(
    env: Env, autojump_clock: MockClock, settings_overrides: dict[str, Any]
) -> None:
    await env.register(ITEM)
    await env.register(FAN)
    began = trio.current_time()
    run_id = await env.start("fan", {"items": list(range(30))})
    run = await env.until(run_id, "completed", "failed")
    assert run.status == "completed"
    assert trio.current_time() - began >= (30 - 5) / 5 - 0.5  # paced, not all at once
    children = await env.engine.store.list_runs(RunFilter("app", "item"), 100, None)
    assert len(children) == 30 and all(c.status == "completed" for c in children)
    events = await env.engine.store.list_events(run_id, 0, 1000)
    started = [e.data["index"] for e in events if e.type == "child_started"]
    assert sorted(started) == list(range(30))  # each item once
    assert any(e.type == "children_paced" for e in events)


@pytest.mark.parametrize("settings_overrides", [{"app_child_rate": 5, "app_child_burst": 5}])
async def test_a_paced_map_survives_a_restart(
    env: Env, autojump_clock: MockClock, settings_overrides: dict[str, Any]
) -> None:
    await env.register(ITEM)
    await env.register(FAN)
    run_id = await env.start("fan", {"items": list(range(20))})
    await advance(1)  # virtual time (MockClock)
    await env.crash_and_restart(down_for=5)
    run = await env.until(run_id, "completed", "failed")
    assert run.status == "completed"
    events = await env.engine.store.list_events(run_id, 0, 1000)
    started = [e.data["index"] for e in events if e.type == "child_started"]
    assert sorted(started) == list(range(20))
