"""Metrics observed at their source, under MockClock: timer lag, push latency, commits."""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families
from trio.testing import MockClock

from .conftest import Env, ok


def sample(env: Env, name: str, **labels: str) -> float:
    value = env.engine.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


async def test_timer_lag_push_latency_and_commits_are_observed(env: Env, autojump_clock: MockClock) -> None:
    slow = 3.0

    async def answer_late(body: object) -> object:
        await trio.sleep(slow)
        return ok({"done": True})

    env.answer("t", answer_late)
    await env.register(
        {
            "name": "nap",
            "steps": [{"name": "s", "type": "sleep", "duration": "1h"}, {"name": "t", "type": "task"}],
        }
    )
    run_id = await env.start("nap")
    await env.until(run_id, "completed")

    assert sample(env, "foliot_timer_lag_seconds_count") == 1
    assert sample(env, "foliot_timer_lag_seconds_bucket", le="0.1") == 1  # fired on time
    assert sample(env, "foliot_timers_fired_total") == 1
    assert sample(env, "foliot_push_latency_seconds_count", outcome="ok") == 1
    assert sample(env, "foliot_push_latency_seconds_bucket", outcome="ok", le="2.5") == 0
    assert sample(env, "foliot_push_latency_seconds_bucket", outcome="ok", le="5.0") == 1
    assert sample(env, "foliot_push_outcomes_total", outcome="ok") == 1
    assert sample(env, "foliot_tasks_pushed_total") == 1
    # start, sleep, wake + dispatch, completion: each its own commit, all timed.
    assert sample(env, "foliot_commit_latency_seconds_count", backend="sqlite") >= 3
    assert sample(env, "foliot_commits_in_progress") == 0


async def test_a_restarted_engine_on_the_same_store_times_each_commit_once(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    await env.crash_and_restart()
    before = sample(env, "foliot_commit_latency_seconds_count", backend="sqlite")
    await env.until(await env.start("w"), "waiting")
    assert sample(env, "foliot_commit_latency_seconds_count", backend="sqlite") == before + 1


async def test_the_exposition_parses(env: Env, autojump_clock: MockClock) -> None:
    text = env.engine.metrics.exposition({"waiting": 3}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (waiting,) = families["foliot_open_runs"].samples
    assert waiting.labels == {"status": "waiting"} and waiting.value == 3
    assert families["foliot_live_actors"].samples[0].value == 0
