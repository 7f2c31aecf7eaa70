"""Recovery from the state a crash leaves, under MockClock: a fresh engine on the same store."""

from __future__ import annotations

from typing import Any

import httpx
import trio
from trio.testing import MockClock

from .conftest import Env, advance, ok


async def test_an_open_attempt_is_redelivered_with_its_key(env: Env, autojump_clock: MockClock) -> None:
    async def hang(body: dict[str, Any]) -> httpx.Response:
        await advance(3600)
        return ok("never")

    env.answer("t", hang, ok({"done": True}))
    await env.register({"name": "one", "steps": [{"name": "t", "type": "task", "timeout": "10m"}]})
    run_id = await env.start("one")
    await env.until_pushes(1)
    await env.crash_and_restart(down_for=5)
    run = await env.until(run_id, "completed")
    keys = [p.body["idempotencyKey"] for p in env.pushes]
    assert keys == [f"{run_id}:1:t:1", f"{run_id}:1:t:1"]  # the same attempt, the same key
    assert run.state == {"t": {"done": True}}
    assert env.engine.recovered_tasks == 1


async def test_a_sleep_due_while_down_fires_at_start(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {
            "name": "nap",
            "steps": [{"name": "s", "type": "sleep", "duration": "1h"}, {"name": "t", "type": "task"}],
        }
    )
    run_id = await env.start("nap")
    await env.until(run_id, "sleeping")
    await env.crash_and_restart(down_for=2 * 3600)
    t0 = trio.current_time()
    await env.until(run_id, "completed")
    assert trio.current_time() - t0 < 1  # fired at start-up, not an hour later
    assert env.engine.timers.max_lag_ms >= 3_600_000


async def test_an_accepted_task_whose_deadline_passed_while_down_is_retried(
    env: Env, autojump_clock: MockClock
) -> None:
    env.answer("t", ok(None, 202), ok({"second": True}))
    await env.register(
        {
            "name": "slow",
            "steps": [
                {
                    "name": "t",
                    "type": "task",
                    "timeout": "5m",
                    "retry": {"maxAttempts": 2, "initialInterval": "1s"},
                }
            ],
        }
    )
    run_id = await env.start("slow")
    await env.engine.runs.wait_for(run_id, lambda r: r.task is not None and r.task.accepted, 60)
    await env.crash_and_restart(down_for=600)
    run = await env.until(run_id, "completed")
    assert [p.body["attempt"] for p in env.pushes] == [1, 2]  # the 202 attempt was not pushed again
    events = await env.engine.store.list_events(run_id, 0, 100)
    assert "task_timed_out" in [e.type for e in events]
    assert run.state == {"t": {"second": True}}


async def test_an_unclaimed_queued_task_is_offered_again(env: Env, autojump_clock: MockClock) -> None:
    await env.register({"name": "q", "steps": [{"name": "t", "type": "task", "queue": "work"}]})
    run_id = await env.start("q")
    assert env.engine.queues.depth("app", "work") == 1
    await env.crash_and_restart(down_for=30)
    assert env.engine.queues.depth("app", "work") == 1
    ((offered_run, task),) = await env.engine.runs.claim_queued("app", "work", 5, trio.current_time(), "w")
    assert offered_run.run_id == run_id
    run = await env.engine.store.get_run(run_id)
    assert run is not None and run.task is not None and run.task.token == task.token


async def test_queued_tasks_are_offered_again_with_their_priority(
    env: Env, autojump_clock: MockClock
) -> None:
    """The priority an attempt was opened with is stored with its task (migration 0078): after
    a restart the urgent one is still claimed first, though it was opened last."""
    for name, level in (("low", 5), ("high", 1)):
        step = {"name": "t", "type": "task", "queue": "work", "priority": level}
        await env.register({"name": name, "steps": [step]})
    low = await env.start("low")
    await advance(1)
    high = await env.start("high")
    tasks = {t.run_id: t for t in await env.engine.store.open_tasks()}
    assert (tasks[low].priority, tasks[high].priority) == (5, 1)
    await env.crash_and_restart(down_for=30)
    assert env.engine.queues.depth("app", "work") == 2
    claimed = await env.engine.runs.claim_queued("app", "work", 1, trio.current_time(), "w")
    assert [run.run_id for run, _ in claimed] == [high]


async def test_a_rate_limited_queued_task_takes_a_token_again_after_a_restart(
    env: Env, autojump_clock: MockClock
) -> None:
    """An unclaimed offer of a rate-limited step is offered again only once its bucket (stored
    with the task, and the bucket's state in `rate_buckets`) gives it a slot: no burst after
    the restart; the token taken before it counts, and only that one (the offer that was
    waiting for its token held none)."""
    step = {"name": "t", "type": "task", "queue": "slow", "rateLimit": {"limit": 1, "period": "10s"}}
    await env.register({"name": "rl", "steps": [step]})
    first = await env.start("rl")
    second = await env.start("rl")
    await trio.testing.wait_all_tasks_blocked()
    assert env.engine.queues.depth("app", "slow") == 1  # the second waits for its slot
    tasks = {t.run_id: t for t in await env.engine.store.open_tasks()}
    assert [b.interval_us for b in tasks[first].buckets] == [10_000_000]
    assert tasks[first].buckets == tasks[second].buckets
    await advance(1)
    await env.crash_and_restart(down_for=1)
    restarted = trio.current_time()
    assert env.engine.queues.depth("app", "slow") == 0  # nothing offered before its slot
    assert env.engine.dispatcher.delayed == 2
    delayed = [env.engine.dispatcher.delayed_until(tasks[r].token) for r in (first, second)]
    assert sorted(d[0] for d in delayed if d is not None) == ["step t", "step t"]
    seen: list[float] = []
    while len(seen) < 2:
        await advance(0.5)
        depth = env.engine.queues.depth("app", "slow")
        while len(seen) < depth:
            seen.append(trio.current_time() - restarted)
    # The one token taken before the crash was [0, 10) s after the starts (2 s before the
    # restart; the second offer was waiting, it took none): the recovered offers get the next
    # slots, 10 s apart.
    assert 7.5 <= seen[0] <= 8.5 and 9.5 <= seen[1] - seen[0] <= 10.5, seen
