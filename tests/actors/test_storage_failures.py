"""Storage failures inside an actor's handling are outages, not crashes (issue 7, defect 11);
per-run maps are emptied when runs come and go (issue 7, "nothing kept forever")."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from foliot.core.errors import Refused, StaleWrite, StorageUnavailable
from foliot.core.workflow import machine
from foliot.http.errors import status_of

from .conftest import Env, advance

WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}]}


async def _parked(env: Env) -> str:
    await env.register(WAIT)
    run_id = await env.start("w")
    await env.until(run_id, "waiting")
    env.engine.directory._definitions.clear()  # the next message loads the definition from storage
    return run_id


async def test_a_definition_load_that_fails_answers_503_not_500(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _parked(env)
    real = env.engine.store.get_workflow

    async def down(*args: Any) -> Any:
        raise StorageUnavailable("database is down")

    monkeypatch.setattr(env.engine.store, "get_workflow", down)
    for _ in range(5):  # more than the crash limit: an outage is not a crash
        with pytest.raises(Refused) as info:
            await env.engine.runs.ask(run_id, machine.SignalIn("go"))
        assert status_of(info.value) == 503
    assert env.engine.supervisor.restarts == 0
    monkeypatch.setattr(env.engine.store, "get_workflow", real)
    assert (await env.engine.runs.ask(run_id, machine.SignalIn("go")))[0] == machine.Ok("delivered")


async def test_a_message_without_a_caller_is_retried_after_a_failed_definition_load(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _parked(env)
    real = env.engine.store.get_workflow

    async def down(*args: Any) -> Any:
        raise StorageUnavailable("database is down")

    monkeypatch.setattr(env.engine.store, "get_workflow", down)
    env.engine.runs.tell(run_id, machine.SignalIn("go", {"n": 1}))
    await advance(3)
    assert env.engine.supervisor.restarts == 0
    monkeypatch.setattr(env.engine.store, "get_workflow", real)
    done = await env.until(run_id, "completed", days=1)
    assert done.state["w"] == {"n": 1}


async def test_a_reload_after_a_stale_write_that_fails_answers_503(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _parked(env)

    async def stale(unit: Any) -> Any:
        raise StaleWrite("moved")

    async def down(run_id: str) -> Any:
        raise StorageUnavailable("database is down")

    monkeypatch.setattr(env.engine.store, "commit", stale)
    monkeypatch.setattr(env.engine.store, "get_run", down)
    with pytest.raises(Refused) as info:
        await env.engine.runs.ask(run_id, machine.SignalIn("go"))
    assert status_of(info.value) == 503
    assert env.engine.supervisor.restarts == 0


async def test_stale_writes_without_end_are_bounded(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _parked(env)
    tries = 0

    async def stale(unit: Any) -> Any:
        nonlocal tries
        tries += 1
        raise StaleWrite("moved")

    monkeypatch.setattr(env.engine.store, "commit", stale)
    with pytest.raises(Refused) as info:
        await env.engine.runs.ask(run_id, machine.SignalIn("go"))
    assert status_of(info.value) == 503
    assert tries <= 5 and env.engine.supervisor.restarts == 0


async def test_a_stale_write_whose_run_is_gone_answers_404(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _parked(env)

    async def stale(unit: Any) -> Any:
        raise StaleWrite("moved")

    async def gone(run_id: str) -> Any:
        return None

    monkeypatch.setattr(env.engine.store, "commit", stale)
    monkeypatch.setattr(env.engine.store, "get_run", gone)
    reply, _ = await env.engine.runs.ask(run_id, machine.SignalIn("go"))
    assert isinstance(reply, machine.Rejected) and reply.status == 404


QUEUED = {"name": "q", "steps": [{"name": "t", "type": "task", "queue": "work", "timeout": "1m"}]}


def _sizes(env: Env) -> dict[str, int]:
    engine = env.engine
    queues = engine.queues
    return {
        "actors": len(engine.supervisor.actors),
        "crashes": len(engine.supervisor._crashes),
        "watchers": len(engine.runs._watchers),
        "pending": len(queues._pending),
        "lots": len(queues._lots),
        "where": len(queues._where),
    }


async def test_per_run_maps_are_empty_once_runs_come_and_go(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.register(WAIT)
    real = machine.transition
    crashed: set[str] = set()

    def crashes_once(run: Any, definition: Any, message: Any, ctx: Any) -> Any:
        if isinstance(message, machine.SignalIn) and run.run_id not in crashed:
            crashed.add(run.run_id)
            raise RuntimeError("a bug, once per run")
        return real(run, definition, message, ctx)

    monkeypatch.setattr(machine, "transition", crashes_once)
    waiting = [await env.start("w") for _ in range(10)]
    for run_id in waiting:
        with pytest.raises(Refused):
            await env.engine.runs.ask(run_id, machine.SignalIn("go"))
        await env.engine.runs.ask(run_id, machine.SignalIn("go"))
        await env.until(run_id, "completed", days=1)
        # Someone watches for what never comes, and gives up.
        with trio.move_on_after(1):
            await env.engine.runs.wait_for(run_id, lambda r: r.status == "failed")
    await advance(120)  # past the crash window and the passivation delay
    await env.until(await env.start("w"), "waiting")  # one more actor comes and goes
    await advance(120)
    await trio.testing.wait_all_tasks_blocked()
    sup = env.engine.supervisor
    assert (len(sup.actors), len(sup._crashes), len(env.engine.runs._watchers)) == (0, 0, 0)


async def test_queue_maps_are_empty_once_tasks_are_claimed_and_pollers_gone(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(QUEUED)
    queued = [await env.start("q") for _ in range(10)]
    async with trio.open_nursery() as nursery:
        for _ in range(3):  # pollers that give up
            nursery.start_soon(env.engine.runs.claim_queued, "app", "other", 1, trio.current_time() + 5, "w")
        await trio.testing.wait_all_tasks_blocked()
        claimed = await env.engine.runs.claim_queued("app", "work", 100, trio.current_time(), "w")
        nursery.cancel_scope.cancel()
    assert sorted(run.run_id for run, _ in claimed) == sorted(queued)
    for run, task in claimed:
        await env.engine.runs.ask(run.run_id, machine.TaskAnswer(task.token, machine.Completed(1)))
        await env.until(run.run_id, "completed", days=1)
    assert env.engine.queues.sizes() == {"pending": 0, "lots": 0, "where": 0, "reserved": 0}
