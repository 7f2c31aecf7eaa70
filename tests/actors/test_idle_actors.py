"""Idle run actors are data, not tasks (issue 9, "small parked actors"): a drain task runs only
while messages wait, one sweeper passivates, the mailbox bound is back-pressure, and a crash
restarts from the checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from foliot.actors import supervisor as supervisor_module
from foliot.actors.messages import Envelope, ReplySlot
from foliot.core.errors import Refused
from foliot.core.workflow import machine
from foliot.http.errors import status_of

from .conftest import Env, advance

WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


def _tasks() -> int:
    """Every task in this trio run."""
    count, stack = 0, [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


async def _parked(env: Env, count: int) -> list[str]:
    await env.register(WAIT)
    ids = [await env.start("w") for _ in range(count)]
    for run_id in ids:
        await env.until(run_id, "waiting")
    await trio.testing.wait_all_tasks_blocked()
    return ids


def _slow_commits(env: Env, monkeypatch: pytest.MonkeyPatch, seconds: float) -> trio.Event:
    real = env.engine.store.commit
    entered = trio.Event()

    async def slow(unit: Any) -> Any:
        entered.set()
        await trio.sleep(seconds)
        return await real(unit)

    monkeypatch.setattr(env.engine.store, "commit", slow)
    return entered


async def test_an_idle_parked_actor_has_no_task(env: Env, autojump_clock: MockClock) -> None:
    await _parked(env, 1)
    one = _tasks()
    ids = await _parked(env, 20)
    sup = env.engine.supervisor
    assert len(sup.actors) == 21
    assert sup.draining == 0 and _tasks() == one  # 20 more live actors, not one more task
    assert all(not a.draining and a.mailbox is None for a in sup.actors.values())
    # A message starts a drain task, which ends once the mailbox is empty.
    reply, _ = await env.engine.runs.ask(ids[0], machine.SignalIn("other", 1))
    assert reply == machine.Ok("buffered")
    await trio.testing.wait_all_tasks_blocked()
    assert sup.draining == 0 and _tasks() == one
    assert sup.actors[ids[0]].processed == 1 and sup.actors[ids[0]].describe()["mailboxDepth"] == 0


async def test_the_sweeper_passivates_idle_parked_actors_after_the_idle_period(
    env: Env, autojump_clock: MockClock
) -> None:
    ids = await _parked(env, 3)
    sup = env.engine.supervisor
    await advance(30)
    await env.engine.runs.ask(ids[1], machine.SignalIn("other"))  # active again: its period restarts
    await advance(29.5)
    assert list(sup.actors) == [ids[0], ids[2], ids[1]]  # least recently active first
    await advance(1)
    assert list(sup.actors) == [ids[1]]
    await advance(30)
    assert sup.actors == {}
    assert sup.passivated == 3 and sup.spawned == 3


async def test_the_sweeper_never_drops_an_actor_with_messages(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run_id,) = await _parked(env, 1)
    sup = env.engine.supervisor
    entered = _slow_commits(env, monkeypatch, 300)
    env.engine.runs.tell(run_id, machine.SignalIn("other", 1))
    env.engine.runs.tell(run_id, machine.SignalIn("other", 2))
    await entered.wait()
    await advance(200)  # far past the idle period, the first commit still under way
    actor = sup.actors[run_id]
    assert actor.draining and actor.mailbox_depth == 1
    await advance(420)  # both commits done (at 300 s and 600 s), idle for 20 s
    assert sup.actors[run_id] is actor and not actor.draining
    await advance(61)
    assert sup.actors == {}
    run = await env.engine.store.get_run(run_id)
    assert run is not None and [s.payload for s in run.buffer] == [1, 2]


async def test_messages_sent_while_the_sweeper_runs_are_delivered(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor_module, "_SWEEP_BATCH", 2)  # the sweep checkpoints mid-way
    ids = await _parked(env, 6)
    sup = env.engine.supervisor
    first_drop = trio.Event()
    real_remove = sup._remove

    def remove(actor: Any) -> None:
        first_drop.set()
        real_remove(actor)

    monkeypatch.setattr(sup, "_remove", remove)
    replies: list[machine.Reply] = []

    async def signal(run_id: str) -> None:
        replies.append((await env.engine.runs.ask(run_id, machine.SignalIn("go")))[0])

    async with trio.open_nursery() as nursery:
        await first_drop.wait()  # resumed at the sweeper's checkpoint, the pass half done
        assert 0 < len(sup.actors) < 6
        for run_id in ids:
            nursery.start_soon(signal, run_id)
    assert replies == [machine.Ok("delivered")] * 6
    for run_id in ids:
        await env.until(run_id, "completed", days=1)


@pytest.mark.parametrize("settings_overrides", [{"mailbox_size": 4, "mailbox_wait_ms": 60_000}])
async def test_a_full_mailbox_is_back_pressure(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run_id,) = await _parked(env, 1)
    sup = env.engine.supervisor
    entered = _slow_commits(env, monkeypatch, 10)
    told = [sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("other", i))) for i in range(5)]
    assert told == [True] * 4 + [False]
    await entered.wait()  # the first is being handled: room for one more
    assert sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("other", 4)))
    assert not sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("other", 5)))
    slot = ReplySlot()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            sup.ask, env.engine.runs.kind, run_id, Envelope(machine.SignalIn("other", 6), slot)
        )
        await trio.testing.wait_all_tasks_blocked()
        assert sup.actors[run_id].mailbox_depth == 4 and not slot.event.is_set()  # the asker waits
    assert await slot.wait() == machine.Ok("buffered")
    run = await env.engine.store.get_run(run_id)
    assert run is not None and [s.payload for s in run.buffer] == [0, 1, 2, 3, 4, 6]


async def test_a_crash_restarts_from_the_checkpoint_and_the_next_message_is_handled(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run_id,) = await _parked(env, 1)
    real = machine.transition

    def buggy(run: Any, definition: Any, message: Any, ctx: Any) -> Any:
        if isinstance(message, machine.SignalIn) and message.name == "boom":
            raise RuntimeError("a bug in one message")
        return real(run, definition, message, ctx)

    monkeypatch.setattr(machine, "transition", buggy)
    sup = env.engine.supervisor
    actor = sup.actors[run_id]
    slots = [ReplySlot(), ReplySlot()]
    assert sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("boom"), slots[0]))
    assert sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("go", {"n": 1}), slots[1]))
    with pytest.raises(Refused) as info:
        await slots[0].wait()
    assert status_of(info.value) == 500
    assert await slots[1].wait() == machine.Ok("delivered")  # same drain, reloaded document
    assert sup.restarts == 1 and actor.processed == 1
    run = await env.until(run_id, "completed", days=1)
    assert run.state == {"w": {"n": 1}}
    await trio.testing.wait_all_tasks_blocked()
    assert sup.draining == 0


async def test_crashes_within_the_window_in_one_drain_park_the_run_as_stuck(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run_id,) = await _parked(env, 1)
    real = machine.transition

    def buggy(run: Any, definition: Any, message: Any, ctx: Any) -> Any:
        if isinstance(message, machine.SignalIn):
            raise RuntimeError("a bug in one run")
        return real(run, definition, message, ctx)

    monkeypatch.setattr(machine, "transition", buggy)
    sup = env.engine.supervisor
    slots = [ReplySlot() for _ in range(3)]
    for slot in slots:
        assert sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("go"), slot))
    for slot in slots:
        with pytest.raises(Refused):
            await slot.wait()
    run = await env.until(run_id, "stuck", days=1)
    assert run.error is not None and run.error.cls == "internal_error"
    assert sup.restarts == 3
    await trio.testing.wait_all_tasks_blocked()
    assert sup.draining == 0


@pytest.mark.parametrize("settings_overrides", [{"shutdown_grace_ms": 10_000}])
async def test_at_shutdown_the_commit_under_way_finishes_and_queued_callers_get_503(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run_id,) = await _parked(env, 1)
    sup = env.engine.supervisor
    entered = _slow_commits(env, monkeypatch, 2)
    first, second = ReplySlot(), ReplySlot()
    assert sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("go", {"n": 1}), first))
    assert sup.tell(env.engine.runs.kind, run_id, Envelope(machine.SignalIn("other"), second))
    await entered.wait()
    assert env.scope is not None
    env.scope.cancel()
    await advance(3)
    assert await first.wait() == machine.Ok("delivered")
    with pytest.raises(Refused) as info:
        await second.wait()
    assert status_of(info.value) == 503
    run = await env.engine.store.get_run(run_id)
    assert run is not None and run.state.get("w") == {"n": 1} and run.buffer == ()


@pytest.mark.parametrize("settings_overrides", [{"max_live_actors": 3}])
async def test_past_the_live_cap_the_least_recently_active_idle_actors_go_at_once(
    env: Env, autojump_clock: MockClock
) -> None:
    ids = await _parked(env, 10)
    sup = env.engine.supervisor
    assert list(sup.actors) == ids[-3:]
    assert sup.passivated == 7
    reply, _ = await env.engine.runs.ask(ids[0], machine.SignalIn("go"))  # rehydrated, one more goes
    assert reply == machine.Ok("delivered")
    await trio.testing.wait_all_tasks_blocked()
    assert len(sup.actors) <= 3 and sup.draining == 0
