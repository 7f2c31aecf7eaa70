"""Timers and a pause, under MockClock: what comes due while paused fires at unpause, in order."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from foliot.core.workflow import machine

from .conftest import DAY, Env, advance

HOUR = 3600.0


async def _ask(env: Env, run_id: str, message: machine.Message) -> machine.Reply:
    reply, _ = await env.engine.runs.ask(run_id, message)
    return reply


async def test_sleeps_due_during_a_pause_end_at_unpause_in_due_order(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(
        {
            "name": "nap",
            "steps": [{"name": "s", "type": "sleep", "duration": "1h"}, {"name": "t", "type": "task"}],
        }
    )
    await env.register(
        {
            "name": "long",
            "steps": [{"name": "s", "type": "sleep", "duration": "3h"}, {"name": "t", "type": "task"}],
        }
    )
    short = await env.start("nap")
    long = await env.start("long")
    await env.until(short, "sleeping")
    await env.until(long, "sleeping")
    assert isinstance(await _ask(env, short, machine.Pause()), machine.Ok)
    assert isinstance(await _ask(env, long, machine.Pause()), machine.Ok)
    await advance(2 * HOUR)
    # The 1 h sleep came due an hour ago; the paused run did not move and nothing was pushed.
    assert (await env.engine.runs.document(short)).status == "paused"  # type: ignore[union-attr]
    assert env.pushes == []
    stored = await env.engine.store.timers_due_before(2**62, 100)
    assert {(t.run_id, t.slot) for t in stored} == set()  # no step timers while paused
    unpaused_at = trio.current_time()
    assert isinstance(await _ask(env, short, machine.Unpause()), machine.Ok)
    await env.until_pushes(1)
    assert env.pushes[0].body["runId"] == short and env.pushes[0].at == unpaused_at
    await env.until(short, "completed")
    # The 3 h sleep was not due at its unpause: it keeps its wake time and fires then.
    assert isinstance(await _ask(env, long, machine.Unpause()), machine.Ok)
    run = await env.until(long, "sleeping")
    assert run.timer is not None
    started = trio.current_time()
    await env.until(long, "completed")
    assert env.pushes[1].body["runId"] == long
    assert 0 < env.pushes[1].at - started <= HOUR  # at its original wake time, 3 h after the start


async def test_a_pause_survives_a_restart(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {
            "name": "w",
            "steps": [
                {"name": "w", "type": "wait", "signal": "go", "timeout": "1h", "onTimeout": "late"},
                {"name": "t", "type": "task", "next": "$end"},
                {"name": "late", "type": "task"},
            ],
        }
    )
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    await _ask(env, run_id, machine.Pause("incident"))
    await advance(10 * 60)
    await _ask(env, run_id, machine.SignalIn("go", {"n": 1}))  # before the timeout came due
    await env.crash_and_restart(down_for=2 * HOUR)
    await advance(DAY)
    assert (await env.engine.runs.document(run_id)).status == "paused"  # type: ignore[union-attr]
    assert env.pushes == []
    await _ask(env, run_id, machine.Unpause())
    done = await env.until(run_id, "completed")
    assert done.state["w"] == {"n": 1} and env.pushes[0].body["step"] == "t"
