"""Metrics observed at their source, under MockClock: timer lag, push latency, commits."""

from __future__ import annotations

import gc
import subprocess
import sys

import trio
from prometheus_client.parser import text_string_to_metric_families
from trio.testing import MockClock

from foliot.observe import gcwatch

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


async def test_garbage_collections_and_their_pauses_are_exposed(env: Env, autojump_clock: MockClock) -> None:
    watch = gcwatch.watch()

    def gen2() -> tuple[float, float, float]:
        text = env.engine.metrics.exposition({}).decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        (count,) = [
            s.value for s in families["foliot_gc_collections"].samples if s.labels == {"generation": "2"}
        ]
        (total,) = [
            s.value for s in families["foliot_gc_pause_seconds"].samples if s.labels == {"generation": "2"}
        ]
        (longest,) = [
            s.value
            for s in families["foliot_gc_pause_max_seconds"].samples
            if s.labels == {"generation": "2"}
        ]
        return count, total, longest

    count, total, _ = gen2()
    gc.collect()
    after, total_after, longest = gen2()
    assert after == count + 1 and watch.collections[2] == after
    assert total_after > total and 0 < longest <= total_after


def test_start_up_objects_are_frozen_out_of_the_collector_walks() -> None:
    # In a process of its own: a freeze lasts for the life of the process.
    code = (
        "import gc, foliot.server\n"
        "from foliot.observe.gcwatch import freeze_startup\n"
        "before = len(gc.get_objects())\n"
        "frozen = freeze_startup()\n"
        "print(before, frozen, len(gc.get_objects()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    before, frozen, walked = map(int, out.split())
    assert frozen > 10_000 and frozen >= before // 2  # the imports' objects, at least
    assert walked < before // 10  # what a collection walks afterwards
