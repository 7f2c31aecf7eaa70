"""The engine stopping (SIGTERM, or a test's cancel) lets a commit under way finish, with its
effects, within the shutdown grace (issue 7, "SIGTERM drains")."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from foliot.core.workflow import machine

from .conftest import Env, advance

WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}]}


async def _slow_commits(env: Env, monkeypatch: pytest.MonkeyPatch, seconds: float) -> trio.Event:
    real = env.engine.store.commit
    entered = trio.Event()

    async def slow(unit: Any) -> Any:
        entered.set()
        await trio.sleep(seconds)
        return await real(unit)

    monkeypatch.setattr(env.engine.store, "commit", slow)
    return entered


@pytest.mark.parametrize("settings_overrides", [{"shutdown_grace_ms": 10_000}])
async def test_a_commit_under_way_when_the_engine_stops_finishes(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.register(WAIT)
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    entered = await _slow_commits(env, monkeypatch, 2)
    env.engine.runs.tell(run_id, machine.SignalIn("go", {"n": 1}))
    await entered.wait()
    assert env.scope is not None
    env.scope.cancel()
    await advance(3)
    run = await env.engine.store.get_run(run_id)
    assert run is not None and run.state.get("w") == {"n": 1}
    assert env.engine.drained_commits == 1


@pytest.mark.parametrize("settings_overrides", [{"shutdown_grace_ms": 10_000}])
async def test_a_commit_that_outlasts_the_grace_is_cut(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.register(WAIT)
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    entered = await _slow_commits(env, monkeypatch, 3600)
    env.engine.runs.tell(run_id, machine.SignalIn("go"))
    await entered.wait()
    assert env.scope is not None
    t0 = trio.current_time()
    env.scope.cancel()
    await trio.testing.wait_all_tasks_blocked()
    while env.engine.commits_in_flight:
        await advance(1)
    assert trio.current_time() - t0 <= 11
