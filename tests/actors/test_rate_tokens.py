"""Rate-limit tokens are taken at send time (issue 38, item 5), under MockClock: sends that wait
for a token hold none, so runs closed while they wait (cancelled, timed out) leave the bucket as
it was, in memory and in storage, across a restart too."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from foliot.core.workflow import machine

from .conftest import Env, advance

METERED = {
    "name": "metered",
    "steps": [{"name": "t", "type": "task", "rateLimit": {"limit": 1, "period": "1m"}}],
}
BUCKET = "s/app/metered/t"


async def start_five_and_close_the_four_waiting(env: Env) -> tuple[str, float]:
    """Five runs of a 1/min step: the first is sent, the other four wait for a token; three are
    cancelled and one times out (its run timeout) while they wait. (the first, when it was sent)"""
    await env.register(METERED)
    runs = [await env.start("metered")]
    runs += [await env.start("metered") for _ in range(3)]
    runs.append(await env.start("metered", run_timeout_ms=5_000))
    await env.until_pushes(1)
    sent_at = env.pushes[0].at
    await trio.testing.wait_all_tasks_blocked()
    assert env.engine.dispatcher.delayed == 4
    first = env.pushes[0].body["runId"]
    waiting = [r for r in runs if r != first]
    for run_id in waiting[:3]:
        reply, _ = await env.engine.runs.ask(run_id, machine.Cancel("no longer needed"))
        assert isinstance(reply, machine.Ok)
    timed_out = await env.until(waiting[3], "timed_out")
    assert timed_out.status == "timed_out"
    assert env.engine.dispatcher.delayed == 0
    assert len(env.pushes) == 1
    return first, sent_at


async def pushed_within(env: Env, run_id: str, seconds: float) -> float:
    """How long after now the run's push went (at most `seconds`)."""
    start = trio.current_time()
    with trio.fail_after(seconds):
        while not any(p.body["runId"] == run_id for p in env.pushes):
            await advance(0.05)
    return trio.current_time() - start


async def test_runs_closed_while_waiting_for_a_token_do_not_delay_the_next(
    env: Env, autojump_clock: MockClock
) -> None:
    _, sent_at = await start_five_and_close_the_four_waiting(env)
    await advance(sent_at + 61 - trio.current_time())  # the first send's minute is over
    late = await env.start("metered")
    assert await pushed_within(env, late, 5) < 1  # at once: not four minutes of dead slots later
    # While it is the only one, a next one still waits its minute: the limit holds.
    later = await env.start("metered")
    await advance(30)
    assert not any(p.body["runId"] == later for p in env.pushes)
    assert 25 <= await pushed_within(env, later, 60) <= 31


async def test_a_restart_keeps_only_the_tokens_of_sends_that_went(
    env: Env, autojump_clock: MockClock
) -> None:
    """The stored bucket moved on by the one send only (the closed runs reserved nothing), so a
    restarted node lets the next send go when that send's minute is over."""
    _, sent_at = await start_five_and_close_the_four_waiting(env)
    tat = await env.engine.store.rate_bucket(BUCKET)
    clock_at_send = env.engine.clock.now() - int((trio.current_time() - sent_at) * 1000)
    assert tat is not None and abs(tat - (clock_at_send + 60_000) * 1000) < 100_000, tat
    await env.crash_and_restart(down_for=sent_at + 61 - trio.current_time())
    assert await env.engine.store.rate_bucket(BUCKET) == tat
    late = await env.start("metered")
    assert await pushed_within(env, late, 5) < 1


async def test_a_paused_runs_offer_waiting_for_a_token_takes_none_until_the_unpause(
    env: Env, autojump_clock: MockClock
) -> None:
    """A pull offer waiting for its token is withdrawn by a pause like an offer on its queue: it
    is not offered (nor takes a token) while the run is paused, and waits its turn again after
    the unpause."""
    step = {"name": "t", "type": "task", "queue": "slow", "rateLimit": {"limit": 1, "period": "10s"}}
    await env.register({"name": "rl", "steps": [step]})
    await env.start("rl")
    second = await env.start("rl")
    await trio.testing.wait_all_tasks_blocked()
    assert env.engine.queues.depth("app", "slow") == 1 and env.engine.dispatcher.delayed == 1
    reply, _ = await env.engine.runs.ask(second, machine.Pause("hold on"))
    assert isinstance(reply, machine.Ok)
    assert env.engine.dispatcher.delayed == 0
    await advance(15)
    assert env.engine.queues.depth("app", "slow") == 1  # not offered while paused
    third = await env.start("rl")  # the bucket is free: the paused run took no token
    await trio.testing.wait_all_tasks_blocked()
    assert env.engine.queues.depth("app", "slow") == 2
    reply, _ = await env.engine.runs.ask(second, machine.Unpause("go"))
    assert isinstance(reply, machine.Ok)
    await trio.testing.wait_all_tasks_blocked()
    assert env.engine.queues.depth("app", "slow") == 2 and env.engine.dispatcher.delayed == 1
    await advance(10.5)  # after the third's slot
    assert env.engine.queues.depth("app", "slow") == 3
    assert third != second
