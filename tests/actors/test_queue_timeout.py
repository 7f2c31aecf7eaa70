"""`queueTimeout` end to end under MockClock: a durable timer, withdrawn offers, restarts."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from .conftest import Env, advance

MINUTE = 60.0
DEF = {
    "name": "pull",
    "steps": [
        {
            "name": "t",
            "type": "task",
            "queue": "warehouse",
            "timeout": "1m",
            "queueTimeout": "10m",
            "retry": {"maxAttempts": 2, "initialInterval": "1s"},
        }
    ],
}


async def _events(env: Env, run_id: str) -> list[tuple[str, int | None, dict[str, object]]]:
    return [(e.type, e.attempt, e.data) for e in await env.engine.store.list_events(run_id, 0, 1000)]


async def test_nobody_claims_in_time_then_a_retry_is_claimed(env: Env, autojump_clock: MockClock) -> None:
    await env.register(DEF)
    run_id = await env.start("pull")
    await env.until(run_id, "running")
    assert env.engine.queues.depth("app", "warehouse") == 1
    await advance(10 * MINUTE - 1)
    assert ("task_timed_out", 1, {"class": "queue_timeout"}) not in await _events(env, run_id)
    await advance(2)
    events = await _events(env, run_id)
    assert ("task_timed_out", 1, {"class": "queue_timeout"}) in events
    await advance(2)  # the 1 s backoff: attempt 2 is offered, attempt 1 was withdrawn
    assert env.engine.queues.depth("app", "warehouse") == 1
    claimed = await env.engine.runs.claim_queued("app", "warehouse", 5, trio.current_time() + 1, "w1")
    assert [task.attempt for _, task in claimed] == [2]
    await advance(20 * MINUTE)  # claimed: the queue timeout no longer applies, the deadline does
    run = await env.engine.runs.document(run_id)
    assert run is not None and run.status == "failed" and run.error is not None
    assert run.error.cls == "timeout"


async def test_the_queue_timeout_survives_a_restart(env: Env, autojump_clock: MockClock) -> None:
    step = {**DEF["steps"][0], "retry": {"maxAttempts": 1}}  # type: ignore[index]
    await env.register({"name": "pull", "steps": [step]})
    run_id = await env.start("pull")
    await env.until(run_id, "running")
    await advance(5 * MINUTE)
    await env.crash_and_restart(down_for=2 * MINUTE)
    assert env.engine.queues.depth("app", "warehouse") == 1  # re-offered at recovery
    run = await env.until(run_id, "failed", days=1)
    assert run.error is not None and run.error.cls == "queue_timeout"
    assert run.closed_at is not None and 600_000 <= run.closed_at - run.created_at < 601_000
    assert env.engine.queues.depth("app", "warehouse") == 0
