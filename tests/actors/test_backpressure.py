"""Back-pressure end to end on a whole engine, under MockClock: push bursts far over the
sender count, deadlines from the send, aborts of queued pushes, bounded mailbox waits and the
push-backlog admission check."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from foliot.actors.messages import Envelope, ReplySlot
from foliot.core.errors import Overloaded
from foliot.core.workflow import machine
from foliot.core.workflow.duration import parse_timestamp
from foliot.http.errors import headers_of, status_of

from .conftest import Env, advance, ok

NAP_THEN_TASK = {
    "name": "burst",
    "steps": [
        {"name": "s", "type": "sleep", "duration": "1m"},
        {"name": "t", "type": "task", "timeout": "10s", "retry": {"maxAttempts": 1}},
    ],
}
ONE = {"name": "one", "steps": [{"name": "t", "type": "task", "timeout": "1m", "retry": {"maxAttempts": 1}}]}


@pytest.mark.parametrize("settings_overrides", [{"push_concurrency": 8, "push_concurrency_per_app": 8}])
async def test_a_storm_of_woken_sleeps_pushes_every_task_without_a_timeout(
    env: Env, autojump_clock: MockClock
) -> None:
    """300 sleeps due together, then a push each to a handler that takes 9 of the 10 s timeout:
    with 8 senders the last is sent ~5 minutes after it was recorded, and still succeeds."""
    state = {"now": 0, "max": 0}

    async def near_timeout(body: dict[str, Any]) -> httpx.Response:
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await advance(9)
        state["now"] -= 1
        return ok({"n": body["input"]})

    n = 300
    env.answer("t", *[near_timeout] * n)
    await env.register(NAP_THEN_TASK)
    ids = [await env.start("burst", i) for i in range(n)]
    runs = [await env.until(run_id, "completed", "failed") for run_id in ids]
    assert [r.status for r in runs] == ["completed"] * n  # 0 failed by Foliot's own queueing
    assert state["max"] == 8 and env.engine.dispatcher.max_inflight == 8
    assert env.engine.dispatcher.metrics.outcome_counts() == {"ok": n}
    assert env.pushes[-1].at - env.pushes[0].at >= (n / 8 - 1) * 9


@pytest.mark.parametrize("settings_overrides", [{"push_concurrency": 1}])
async def test_the_push_deadline_counts_from_the_send(env: Env, autojump_clock: MockClock) -> None:
    seen: list[tuple[int, dict[str, Any]]] = []

    async def five_seconds(body: dict[str, Any]) -> httpx.Response:
        seen.append((env.engine.clock.now(), body))
        await advance(5)
        return ok(None)

    env.answer("t", *[five_seconds] * 3)
    await env.register(ONE)
    t0 = env.engine.clock.now()
    ids = [await env.start("one") for _ in range(3)]
    for run_id in ids:
        await env.until(run_id, "completed")
    assert [at - t0 for at, _ in seen] == [0, 5_000, 10_000]  # queued behind one sender
    for at, body in seen:
        assert parse_timestamp(body["deadline"]) == at + 60_000
    events = await env.engine.store.list_events(ids[2], 0, 100)
    dispatched = [e for e in events if e.type == "task_dispatched"]
    assert dispatched[0].data["deadline"] is None and dispatched[0].at == t0


@pytest.mark.parametrize("settings_overrides", [{"push_concurrency": 1}])
async def test_a_202_with_no_completion_times_out_at_send_time_plus_timeout(
    env: Env, autojump_clock: MockClock
) -> None:
    async def twenty_seconds(body: dict[str, Any]) -> httpx.Response:
        await advance(20)
        return ok(None)

    env.answer("t", twenty_seconds, ok(None, 202))
    await env.register(ONE)
    t0 = env.engine.clock.now()
    first = await env.start("one")
    second = await env.start("one")
    run = await env.until(second, "failed")
    assert run.error is not None and run.error.cls == "timeout"
    events = {e.type: e for e in await env.engine.store.list_events(second, 0, 100)}
    sent_at = t0 + 20_000  # it waited 20 s for the only sender
    assert events["task_accepted"].data["deadline"] == sent_at + 60_000
    assert events["task_timed_out"].at == sent_at + 60_000
    assert (await env.until(first, "completed")).status == "completed"


@pytest.mark.parametrize("settings_overrides", [{"push_concurrency": 1}])
async def test_cancel_drops_a_queued_push(env: Env, autojump_clock: MockClock) -> None:
    release = trio.Event()

    async def hold(body: dict[str, Any]) -> httpx.Response:
        await release.wait()
        return ok(None)

    env.answer("t", hold)
    await env.register(ONE)
    first = await env.start("one")
    second = await env.start("one")
    await env.until_pushes(1)
    assert env.engine.dispatcher.backlog == 1
    reply, run = await env.engine.runs.ask(second, machine.Cancel("no longer needed"))
    assert isinstance(reply, machine.Ok) and run is not None and run.status == "cancelled"
    assert env.engine.dispatcher.backlog == 0
    release.set()
    await env.until(first, "completed")
    await advance(120)
    assert [p.body["runId"] for p in env.pushes] == [first]


@pytest.mark.parametrize("settings_overrides", [{"push_concurrency": 1}])
async def test_a_push_still_queued_at_a_crash_is_sent_after_restart_with_its_key(
    env: Env, autojump_clock: MockClock
) -> None:
    async def hang(body: dict[str, Any]) -> httpx.Response:
        await advance(3600)
        return ok("never")

    env.answer("t", hang)
    await env.register(ONE)
    first = await env.start("one")
    second = await env.start("one")
    await env.until_pushes(1)
    await env.crash_and_restart(down_for=3600)  # far past the 1 m timeout: no deadline had begun
    for run_id in (first, second):
        await env.until(run_id, "completed")
    keys = [p.body["idempotencyKey"] for p in env.pushes]
    assert keys[0] == f"{first}:1:t:1"
    assert sorted(keys[1:]) == sorted([f"{first}:1:t:1", f"{second}:1:t:1"])  # the same attempts
    assert env.engine.recovered_tasks == 2


@pytest.mark.parametrize("settings_overrides", [{"push_concurrency": 1, "push_backlog_max": 3}])
async def test_the_push_backlog_refuses_the_app_that_fills_it(env: Env, autojump_clock: MockClock) -> None:
    release = trio.Event()

    async def hold(body: dict[str, Any]) -> httpx.Response:
        await release.wait()
        return ok(None)

    env.answer("t", hold)
    await env.register(ONE)
    for _ in range(4):
        await env.start("one")
    await env.until_pushes(1)
    admission = env.engine.admission
    assert env.engine.dispatcher.backlog == 3
    with pytest.raises(Overloaded) as info:
        admission.check("app")
    assert (status_of(info.value), info.value.reason, headers_of(info.value)) == (
        429,
        "push_backlog",
        {"Retry-After": "2"},
    )
    admission.check("quiet-app")  # an app with nothing queued is still let in
    assert admission.refused["push_backlog"] == 1
    release.set()
    await trio.testing.wait_all_tasks_blocked()
    admission.check("app")


@pytest.mark.parametrize("settings_overrides", [{"mailbox_size": 2}])
async def test_a_mailbox_that_stays_full_answers_429_after_a_second(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    gate = trio.Event()
    real = env.engine.store.commit

    async def stuck_commit(uow: Any) -> Any:
        await gate.wait()
        return await real(uow)

    monkeypatch.setattr(env.engine.store, "commit", stuck_commit)
    slots = [ReplySlot() for _ in range(3)]  # one being handled, two filling the mailbox
    async with trio.open_nursery() as nursery:
        for i, slot in enumerate(slots):
            nursery.start_soon(
                env.engine.supervisor.ask,
                env.engine.runs.kind,
                run_id,
                Envelope(machine.SignalIn("x", i), slot),
            )
        await trio.testing.wait_all_tasks_blocked()
        t0 = trio.current_time()
        with pytest.raises(Overloaded) as info:
            await env.engine.runs.ask(run_id, machine.SignalIn("x", 99))
        assert trio.current_time() - t0 == pytest.approx(1.0)
        assert info.value.reason == "mailbox" and status_of(info.value) == 429
        assert env.engine.admission.refused["mailbox"] == 1
        gate.set()
    for slot in slots:
        assert await slot.wait() == machine.Ok("buffered")
