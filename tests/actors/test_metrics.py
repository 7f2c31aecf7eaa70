"""Metrics observed at their source, under MockClock: timer lag, push latency, commits."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
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

    gc.disable()  # only the collection below: none started by the scrapes' own allocations
    try:
        count, total, _ = gen2()
        gc.collect()
        after, total_after, longest = gen2()
    finally:
        gc.enable()
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


async def test_runs_started_and_closed_are_counted_by_app_and_workflow(
    env: Env, autojump_clock: MockClock
) -> None:
    """Each close status counts under the run's app and workflow, from the committed events;
    a step that fails for good counts under its step too."""
    from foliot.core.workflow import machine

    env.answer("f", ok({"error": {"class": "boom", "retryable": False}}, 422))
    await env.register({"name": "good", "steps": [{"name": "t", "type": "task"}]})
    await env.register({"name": "bad", "steps": [{"name": "f", "type": "task"}]})
    await env.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    await env.until(await env.start("good"), "completed")
    await env.until(await env.start("bad"), "failed")
    cancelled = await env.start("w")
    await env.until(cancelled, "waiting")
    reply, _ = await env.engine.runs.ask(cancelled, machine.Cancel("no longer needed"))
    assert isinstance(reply, machine.Ok)
    await env.until(await env.start("w", run_timeout_ms=60_000), "timed_out")
    await env.until(await env.start("w"), "waiting")

    def started(workflow: str) -> float:
        return sample(env, "foliot_runs_started_total", app="app", workflow=workflow)

    def closed(workflow: str, status: str) -> float:
        return sample(env, "foliot_runs_closed_total", app="app", workflow=workflow, status=status)

    assert (started("good"), started("bad"), started("w")) == (1, 1, 3)
    assert closed("good", "completed") == 1 and closed("good", "failed") == 0
    assert closed("bad", "failed") == 1
    assert closed("w", "cancelled") == 1 and closed("w", "timed_out") == 1
    assert sample(env, "foliot_step_failures_total", app="app", workflow="bad", step="f") == 1
    text = env.engine.metrics.exposition({}).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"foliot_runs_started", "foliot_runs_closed", "foliot_step_failures"} <= names


@pytest.mark.parametrize("settings_overrides", [{"metrics_max_label_values": 2}])
async def test_workflow_names_past_the_cap_are_counted_as_other(env: Env, autojump_clock: MockClock) -> None:
    for i in range(5):
        await env.register({"name": f"w{i}", "steps": [{"name": "t", "type": "task"}]})
        await env.until(await env.start(f"w{i}"), "completed")
    samples = {
        s.labels["workflow"]: s.value
        for s in env.engine.metrics.registry.collect()
        if s.name == "foliot_runs_started"
        for s in s.samples
        if s.name == "foliot_runs_started_total"
    }
    assert samples == {"w0": 1, "w1": 1, "_other": 3}
    assert sample(env, "foliot_runs_closed_total", app="app", workflow="_other", status="completed") == 3


def test_label_cap_bounds_each_level() -> None:
    from foliot.observe.metrics import OTHER, LabelCap

    cap = LabelCap(2)
    assert cap.labels(("a", "x")) == ("a", "x")
    assert cap.labels(("b", "y")) == ("b", "y")
    assert cap.labels(("a", "z")) == ("a", OTHER)  # a third pair: its app kept, the workflow not
    assert cap.labels(("c", "x")) == (OTHER, OTHER)  # a third app
    assert cap.labels(("a", "x", "s")) == ("a", "x", "s")
    assert cap.labels(("a", "z", "s")) == ("a", OTHER, OTHER)
    assert cap.labels(("a", "x")) == ("a", "x")  # admitted names stay admitted
    names = {cap.labels((f"app{i}", f"wf{j}")) for i in range(50) for j in range(50)}
    assert len(names) <= 2 * 2 + 1
    assert LabelCap(0).labels(("a", "b")) == (OTHER, OTHER)
