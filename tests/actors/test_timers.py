"""Durable timers and deadlines under MockClock(autojump_threshold=0): days take milliseconds."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from foliot.signing import verify_signature

from .conftest import DAY, Env, advance, ok


def _elapsed(start: float) -> float:
    return trio.current_time() - start


async def test_a_14_day_sleep(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {
            "name": "nap",
            "steps": [{"name": "s", "type": "sleep", "duration": "14d"}, {"name": "t", "type": "task"}],
        }
    )
    t0 = trio.current_time()
    run_id = await env.start("nap")
    run = await env.until(run_id, "sleeping")
    assert run.wake_at is not None
    assert abs(run.wake_at - (env.engine.clock.now() + 14 * 86_400_000)) < 1000
    await env.until(run_id, "completed")
    assert len(env.pushes) == 1
    assert 14 * DAY <= env.pushes[0].at - t0 < 14 * DAY + 1


async def test_signature_verifies_over_the_raw_body(env: Env, autojump_clock: MockClock) -> None:
    await env.register({"name": "one", "steps": [{"name": "t", "type": "task"}]})
    await env.start("one", {"html": "<b>&amp;</b>", "ls": "\u2028"})
    await env.until_pushes(1)
    # The transport saw the body as sent; rebuild the exact bytes from the engine's own encoder.
    from foliot.workflow.payload import compact_json

    raw = compact_json(env.pushes[0].body)
    header = env.pushes[0].headers["foliot-signature"]
    now = env.engine.clock.now() / 1000
    assert verify_signature(raw, header, ["whsec_test"], now=now)


async def test_wait_timeout_goes_to_on_timeout(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {
            "name": "pay",
            "steps": [
                {"name": "w", "type": "wait", "signal": "paid", "timeout": "2d", "onTimeout": "release"},
                {"name": "ship", "type": "task", "next": "$end"},
                {"name": "release", "type": "task", "next": "$fail"},
            ],
        }
    )
    t0 = trio.current_time()
    run_id = await env.start("pay")
    run = await env.until(run_id, "failed")
    assert [p.body["step"] for p in env.pushes] == ["release"]
    assert 2 * DAY <= env.pushes[0].at - t0 < 2 * DAY + 1
    assert run.error is not None and run.error.cls == "failed_by_definition"


async def test_backoff_sequence(env: Env, autojump_clock: MockClock) -> None:
    env.answer("t", *(ok({"error": {"class": "busy"}}, 503) for _ in range(4)))
    await env.register(
        {
            "name": "retry",
            "steps": [
                {
                    "name": "t",
                    "type": "task",
                    "retry": {
                        "maxAttempts": 5,
                        "initialInterval": "1s",
                        "backoffCoefficient": 2.0,
                        "maxInterval": "6s",
                    },
                }
            ],
        }
    )
    run_id = await env.start("retry")
    await env.until(run_id, "completed")
    times = [p.at for p in env.pushes]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    assert gaps == [1.0, 2.0, 4.0, 6.0]
    assert [p.body["attempt"] for p in env.pushes] == [1, 2, 3, 4, 5]
    assert len({p.body["idempotencyKey"] for p in env.pushes}) == 5


async def test_accepted_task_times_out_at_its_deadline_then_retries(
    env: Env, autojump_clock: MockClock
) -> None:
    env.answer("t", ok(None, 202))
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
    await env.until(run_id, "completed")
    first, second = env.pushes
    assert round(second.at - first.at, 3) == 300 + 1
    assert first.body["idempotencyKey"].endswith(":1") and second.body["idempotencyKey"].endswith(":2")
    events = await env.engine.store.list_events(run_id, 0, 100)
    assert [e.type for e in events].count("task_timed_out") == 1


@pytest.mark.parametrize("settings_overrides", [{"sync_task_max_ms": 2_000}])
async def test_sync_cap_bounds_a_slow_handler(env: Env, autojump_clock: MockClock) -> None:
    async def hang(body: dict[str, Any]) -> httpx.Response:
        await advance(3600)  # the handler hangs for an hour of virtual time
        return ok(None)

    env.answer("t", hang)
    await env.register(
        {
            "name": "hang",
            "steps": [
                {
                    "name": "t",
                    "type": "task",
                    "timeout": "1h",
                    "retry": {"maxAttempts": 2, "initialInterval": "1s"},
                }
            ],
        }
    )
    run_id = await env.start("hang")
    await env.until(run_id, "completed")
    first, second = env.pushes
    assert round(second.at - first.at, 3) == 2 + 1
    events = await env.engine.store.list_events(run_id, 0, 100)
    failed = [e for e in events if e.type == "task_failed"]
    assert failed[0].data["class"] == "timeout"


async def test_run_timeout(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {"name": "w", "runTimeout": "3d", "steps": [{"name": "w", "type": "wait", "signal": "s"}]}
    )
    t0 = trio.current_time()
    run_id = await env.start("w")
    run = await env.until(run_id, "timed_out")
    assert 3 * DAY <= _elapsed(t0) < 3 * DAY + 1
    assert run.error is not None and run.error.cls == "run_timeout"


async def test_connection_errors_are_retried(env: Env, autojump_clock: MockClock) -> None:
    async def refuse(body: dict[str, Any]) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    env.answer("t", refuse, refuse)
    await env.register(
        {"name": "c", "steps": [{"name": "t", "type": "task", "retry": {"initialInterval": "1s"}}]}
    )
    run_id = await env.start("c")
    await env.until(run_id, "completed")
    assert len(env.pushes) == 3
    events = await env.engine.store.list_events(run_id, 0, 100)
    assert [e.data["class"] for e in events if e.type == "task_failed"] == ["connection_error"] * 2


@pytest.mark.parametrize("settings_overrides", [{"timer_window_ms": 60_000}])
async def test_timers_beyond_the_window_are_paged_in(env: Env, autojump_clock: MockClock) -> None:
    await env.register({"name": "nap", "steps": [{"name": "s", "type": "sleep", "duration": "3d"}]})
    ids = [await env.start("nap") for _ in range(3)]
    assert env.engine.timers.stats()["inMemory"] == 0  # all beyond the 60 s window
    for run_id in ids:
        await env.until(run_id, "completed")
    assert env.engine.timers.max_lag_ms < 60_000


async def test_a_push_waits_for_storage_instead_of_burning_an_attempt(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foliot.errors import StorageUnavailable

    await env.register({"name": "one", "steps": [{"name": "t", "type": "task", "timeout": "1m"}]})
    env.engine.forget_target("app")
    real = env.engine.store.get_app
    calls = 0

    async def flaky(name: str) -> Any:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise StorageUnavailable("down")
        return await real(name)

    monkeypatch.setattr(env.engine.store, "get_app", flaky)
    run_id = await env.start("one")
    run = await env.until(run_id, "completed")
    assert calls == 4 and len(env.pushes) == 1 and env.pushes[0].body["attempt"] == 1
    assert run.state == {"t": None}


# --------------------------------------------------------------------------- timer identity


LOOP = {
    "name": "loop",
    "steps": [
        {"name": "s", "type": "sleep", "duration": "10s"},
        {
            "name": "c",
            "type": "choice",
            "choices": [{"when": {"path": "input.stop", "op": "eq", "value": True}, "next": "$end"}],
            "default": "s",
        },
    ],
}


def _sleeps(events: list[Any]) -> list[int]:
    """Each sleep's length in ms, from its sleep_started to its sleep_finished."""
    out: list[int] = []
    started: int | None = None
    for e in events:
        if e.type == "sleep_started":
            assert started is None, "a sleep started while another was running"
            started = e.at
        elif e.type == "sleep_finished":
            assert started is not None, "a sleep finished twice"
            out.append(e.at - started)
            started = None
    return out


def _fail_commits(env: Env, monkeypatch: pytest.MonkeyPatch, start: float, end: float) -> None:
    """Every commit between trio times `start` and `end` fails as if the database were down."""
    from foliot.errors import StorageUnavailable

    real = env.engine.store.commit

    async def flaky(unit: Any) -> None:
        if start <= trio.current_time() < end:
            raise StorageUnavailable("database is down")
        await real(unit)

    monkeypatch.setattr(env.engine.store, "commit", flaky)


@pytest.mark.parametrize("settings_overrides", [{"timer_window_ms": 60_000}])
async def test_a_looping_sleep_is_never_cut_short_by_a_stale_firing(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foliot.workflow import machine

    await env.register(LOOP)
    t0 = trio.current_time()
    run_id = await env.start("loop", {"stop": False})
    _fail_commits(env, monkeypatch, t0 + 25, t0 + 65)  # writes fail for 40 s
    await advance(200)
    await env.engine.ask(run_id, machine.Cancel())
    events = await env.engine.store.list_events(run_id, 0, 1000)
    lengths = _sleeps(events)
    assert len(lengths) >= 10
    assert all(n >= 10_000 for n in lengths), lengths


async def test_a_heartbeat_whose_commit_straddles_the_deadline_extends_it(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foliot.workflow import machine

    env.answer("t", ok(None, 202))
    await env.register(
        {
            "name": "hb",
            "steps": [{"name": "t", "type": "task", "timeout": "10s", "retry": {"maxAttempts": 1}}],
        }
    )
    t0, c0 = trio.current_time(), env.engine.clock.now()
    run_id = await env.start("hb")
    await env.until_pushes(1)
    token = env.pushes[0].body["taskToken"]
    real = env.engine.store.commit

    async def slow(unit: Any) -> None:
        await advance(0.5)  # the heartbeat's commit is still running when the deadline passes
        await real(unit)

    await advance(9.9 - _elapsed(t0))
    monkeypatch.setattr(env.engine.store, "commit", slow)
    reply, _ = await env.engine.ask(run_id, machine.Heartbeat(token))
    assert isinstance(reply, machine.Ok)
    monkeypatch.setattr(env.engine.store, "commit", real)
    await advance(15 - _elapsed(t0))
    run = await env.engine.store.get_run(run_id)
    assert run is not None and run.status == "running" and run.task is not None
    run = await env.until(run_id, "failed")
    events = await env.engine.store.list_events(run_id, 0, 100)
    timed_out = [e for e in events if e.type == "task_timed_out"]
    assert len(timed_out) == 1
    assert timed_out[0].at - c0 == 19_900  # the heartbeat's deadline: 9.9 s + 10 s
