"""Supervision, passivation and rehydration, aborting in-flight pushes, pull queues."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from foliot.actors.messages import Envelope, ReplySlot
from foliot.core.errors import Refused
from foliot.core.workflow import machine
from foliot.core.workflow.model import Run, TaskRef
from foliot.http.errors import status_of

from .conftest import Env, advance, ok


async def test_parked_runs_passivate_and_rehydrate(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}]}
    )
    ids = [await env.start("w") for _ in range(5)]
    for run_id in ids:
        await env.until(run_id, "waiting")
    assert len(env.engine.supervisor.actors) == 5
    await advance(61)  # past FOLIOT_PASSIVATE_AFTER_MS
    assert env.engine.supervisor.actors == {}
    reply, _run = await env.engine.runs.ask(ids[0], machine.SignalIn("go", {"n": 1}))
    assert reply == machine.Ok("delivered")
    done = await env.until(ids[0], "completed")
    assert done.state == {"w": {"n": 1}, "t": None}


@pytest.mark.parametrize("settings_overrides", [{"max_live_actors": 3}])
async def test_live_actor_cap_passivates_parked_runs(env: Env, autojump_clock: MockClock) -> None:
    await env.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    for _ in range(10):
        run_id = await env.start("w")
        await env.until(run_id, "waiting")
    await trio.testing.wait_all_tasks_blocked()
    assert len(env.engine.supervisor.actors) <= 4


async def test_a_crashing_actor_is_restarted_then_parked_as_stuck(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    real = machine.transition

    def buggy(run: Any, definition: Any, message: Any, ctx: Any) -> Any:
        if isinstance(message, machine.SignalIn):
            raise RuntimeError("a bug in one run")
        return real(run, definition, message, ctx)

    monkeypatch.setattr(machine, "transition", buggy)
    for _ in range(3):
        with pytest.raises(Refused) as info:
            await env.engine.runs.ask(run_id, machine.SignalIn("go"))
        assert status_of(info.value) == 500
    run = await env.until(run_id, "stuck")
    assert run.error is not None and run.error.cls == "internal_error"
    assert env.engine.supervisor.restarts == 3
    monkeypatch.setattr(machine, "transition", real)
    # The server and other runs are unaffected.
    other = await env.start("w")
    assert (await env.engine.runs.ask(other, machine.SignalIn("go")))[0] == machine.Ok("delivered")


async def test_cancel_aborts_an_in_flight_push_and_ignores_its_answer(
    env: Env, autojump_clock: MockClock
) -> None:
    release = trio.Event()

    async def slow(body: dict[str, Any]) -> httpx.Response:
        await release.wait()
        return ok({"late": True})

    env.answer("t", slow)
    await env.register({"name": "one", "steps": [{"name": "t", "type": "task", "timeout": "1h"}]})
    run_id = await env.start("one")
    await env.until_pushes(1)
    assert env.engine.dispatcher.inflight == 1
    reply, run = await env.engine.runs.ask(run_id, machine.Cancel("stop"))
    assert isinstance(reply, machine.Ok) and run is not None and run.status == "cancelled"
    assert env.engine.dispatcher.inflight == 0
    release.set()
    await trio.testing.wait_all_tasks_blocked()
    after = await env.engine.store.get_run(run_id)
    assert after is not None and after.status == "cancelled" and after.state == {}


@pytest.mark.parametrize("settings_overrides", [{"signal_buffer_max": 1000}])
async def test_messages_to_a_full_mailbox_wait(env: Env, autojump_clock: MockClock) -> None:
    await env.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    slots = [ReplySlot() for _ in range(env.engine.settings.mailbox_size * 2)]
    async with trio.open_nursery() as nursery:
        for i, slot in enumerate(slots):
            nursery.start_soon(
                env.engine.supervisor.ask,
                env.engine.runs.kind,
                run_id,
                Envelope(machine.SignalIn("other", i), slot),
            )
    for slot in slots:
        assert await slot.wait() == machine.Ok("buffered")
    run = await env.engine.store.get_run(run_id)
    assert run is not None and sorted(s.payload for s in run.buffer) == list(range(len(slots)))


QUEUED = {
    "name": "q",
    "steps": [
        {
            "name": "t",
            "type": "task",
            "queue": "warehouse",
            "timeout": "1m",
            "retry": {"maxAttempts": 2, "initialInterval": "1s"},
        }
    ],
}


async def test_a_parked_poller_gets_the_task_the_moment_it_is_offered(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(QUEUED)
    got: list[tuple[float, list[tuple[Run, TaskRef]]]] = []

    async def poller() -> None:
        offers = await env.engine.runs.claim_queued("app", "warehouse", 1, trio.current_time() + 60, "w")
        got.append((trio.current_time(), offers))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poller)
        await advance(20)
        t_offer = trio.current_time()
        run_id = await env.start("q")
    ((at, offers),) = got
    assert at == t_offer and [r.run_id for r, _ in offers] == [run_id]


async def test_two_pollers_never_share_a_task(env: Env, autojump_clock: MockClock) -> None:
    await env.register(QUEUED)
    got: list[list[tuple[Run, TaskRef]]] = []

    async def poller() -> None:
        got.append(await env.engine.runs.claim_queued("app", "warehouse", 5, trio.current_time() + 60, "w"))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(poller)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(3):
            await env.start("q")
    tokens = [t.token for batch in got for _, t in batch]
    assert len(tokens) == 3 and len(set(tokens)) == 3


async def test_a_claimed_task_not_completed_by_its_deadline_is_retried(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(QUEUED)
    run_id = await env.start("q")
    ((_, task),) = await env.engine.runs.claim_queued("app", "warehouse", 10, trio.current_time(), "w1")
    token = task.token
    assert task.deadline is not None
    t0 = trio.current_time()
    await env.engine.runs.wait_for(run_id, lambda r: r.attempt == 2, 120)
    assert 61 <= trio.current_time() - t0 <= 62  # 1m deadline + 1s backoff
    ((_, task2),) = await env.engine.runs.claim_queued("app", "warehouse", 10, trio.current_time(), "w1")
    assert task2.token != token
    run = await env.engine.store.get_run(run_id)
    assert run is not None and run.attempt == 2


async def test_rehydrating_while_storage_is_down_answers_503_and_recovers(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foliot.core.errors import StorageUnavailable

    await env.register({"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]})
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    await advance(61)  # passivated
    assert env.engine.supervisor.actors == {}
    real = env.engine.store.get_run

    async def down(run_id: str) -> Any:
        raise StorageUnavailable("database is down")

    monkeypatch.setattr(env.engine.store, "get_run", down)
    for _ in range(5):  # more than the crash limit: an outage is not a crash
        with pytest.raises(Refused) as info:
            await env.engine.runs.ask(run_id, machine.SignalIn("go"))
        assert status_of(info.value) == 503
    assert env.engine.supervisor.restarts == 0
    monkeypatch.setattr(env.engine.store, "get_run", real)
    reply, _ = await env.engine.runs.ask(run_id, machine.SignalIn("go"))
    assert reply == machine.Ok("delivered")
