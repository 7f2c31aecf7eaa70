"""Debounced starts under MockClock: a trailing burst makes one run with the last input,
begun `period` after the last start, also across a crash; a leading burst starts at once and
drops the rest; a new burst begins once the window passed."""

from __future__ import annotations

from typing import Any

import pytest
from trio.testing import MockClock

from foliot.core.views import run_view
from foliot.kinds.run.debounce import DebouncedStart

from .conftest import Env, advance

WF = {"name": "sync", "steps": [{"name": "t", "type": "task"}]}


async def start(
    env: Env, input: Any, mode: str = "trailing", key: str = "order-7"
) -> tuple[dict[str, Any], int]:
    req = DebouncedStart("app", "sync", None, input, None, None, key, 10_000, mode)
    return await env.engine.runs.debounced_start(req, run_view)


async def test_a_trailing_burst_is_one_run_with_the_last_input(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WF)
    first, status = await start(env, {"n": 1})
    assert status == 202 and first["debounced"] is True and first["status"] == "pending"
    run_id = first["runId"]
    for n in (2, 3):
        await advance(6)  # each within 10 s of the one before: the burst goes on
        body, status = await start(env, {"n": n})
        assert status == 202 and body["runId"] == run_id
    await advance(9)
    assert env.pushes == []  # not 10 s since the last start yet
    await env.until_pushes(1)
    assert env.pushes[0].body["runId"] == run_id and env.pushes[0].body["input"] == {"n": 3}
    await env.until(run_id, "completed")
    # The burst is over: the next start begins another one.
    body, _ = await start(env, {"n": 4})
    assert body["runId"] != run_id
    run = await env.engine.runs.document(run_id)
    assert run is not None and run.debounce_key is None


async def test_a_pending_burst_survives_a_crash(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WF)
    body, _ = await start(env, {"n": 1})
    await advance(3)
    await start(env, {"n": 2})
    await env.crash_and_restart(down_for=60)
    await env.until_pushes(1)  # its timer, overdue after the restart, fired once
    await env.until(body["runId"], "completed")
    assert [p.body["input"] for p in env.pushes] == [{"n": 2}]
    again, _ = await start(env, {"n": 3})  # and the key is free again
    assert again["runId"] != body["runId"]


async def test_a_leading_burst_starts_at_once_and_drops_the_rest(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WF)
    first, status = await start(env, {"n": 1}, "leading")
    assert status == 201 and first["status"] == "running"
    for _ in range(3):
        await advance(5)
        body, status = await start(env, {"n": 9}, "leading")
        assert status == 202 and body == {"runId": first["runId"], "debounced": True, "dropped": True}
    await advance(11)  # the window passed: a new burst
    nxt, status = await start(env, {"n": 2}, "leading")
    assert status == 201 and nxt["runId"] != first["runId"]
    await env.until_pushes(2)
    assert sorted(p.body["input"]["n"] for p in env.pushes) == [1, 2]


async def test_cancelling_a_pending_run_frees_its_key(env: Env, autojump_clock: MockClock) -> None:
    from foliot.core.workflow import machine

    await env.register(WF)
    body, _ = await start(env, {"n": 1})
    reply, _ = await env.engine.runs.ask(body["runId"], machine.Cancel("no"))
    assert isinstance(reply, machine.Ok)
    again, status = await start(env, {"n": 2})
    assert status == 202 and again["runId"] != body["runId"]


@pytest.mark.parametrize("settings_overrides", [{"prune_interval_ms": 60_000}])
async def test_leading_keys_are_pruned_once_their_burst_is_over(env: Env, autojump_clock: MockClock) -> None:
    """Leading keys were kept for ever (300 keys, 300 rows pointing at pruned runs): now a key
    goes once its window is over and its run closed; an open run's key stays."""
    await env.register(WF)
    await env.register({"name": "hold", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    done = [(await start(env, {"n": i}, "leading", key=f"k{i}"))[0]["runId"] for i in range(3)]
    held = DebouncedStart("app", "hold", None, None, None, None, "h", 10_000, "leading")
    waiting, _ = await env.engine.runs.debounced_start(held, run_view)
    for run_id in done:
        await env.until(run_id, "completed")
    store = env.engine.store
    assert await store.get_debounce("app", "sync", "k0") is not None
    await advance(11 + 60)  # the windows passed, and a pruning pass since
    assert [await store.get_debounce("app", "sync", f"k{i}") for i in range(3)] == [None] * 3
    assert await store.get_debounce("app", "hold", "h") is not None  # its run is still open
    assert env.engine.pruner.pruned_debounce_keys == 3
    await env.until(waiting["runId"], "waiting")
