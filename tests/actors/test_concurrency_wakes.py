"""Concurrency keys' wake-ups (issue 23), under MockClock: a wake tells `Admit` to as many of a
key's oldest queued runs as its free slots leave room for, and to none when the key is full (an
`Admit` the guard refuses costs an actor and a transaction under the key's lock); the pump,
the fallback for a lost wake-up, still admits a run nobody woke."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from foliot.core.workflow import machine

from .conftest import Env, advance

LIMITED = {
    "name": "limited",
    "concurrency": {"limit": 2, "key": "input.customer"},
    "steps": [{"name": "hold", "type": "wait", "signal": "go"}],
}
KEY = "limited/a"


def admits(env: Env, monkeypatch: pytest.MonkeyPatch, *, drop: int = 0) -> list[str]:
    """The runs told `Admit` from now on, in order; the first `drop` are lost on the way."""
    runs = env.engine.runs
    real = runs.tell
    told: list[str] = []

    def tell(run_id: str, message: Any) -> None:
        if type(message) is machine.Admit:
            told.append(run_id)
            if len(told) <= drop:
                return
        real(run_id, message)

    monkeypatch.setattr(runs, "tell", tell)
    return told


async def five(env: Env) -> list[str]:
    """Two runs of key `a` holding its slots, then the three queued behind them in queue order
    (started in the same millisecond: by run id)."""
    await env.register(LIMITED)
    ids = [await env.start("limited", {"customer": "a", "n": n}) for n in range(5)]
    await trio.testing.wait_all_tasks_blocked()
    assert [(await env.engine.runs.document(i)).status for i in ids] == ["waiting"] * 2 + ["queued"] * 3
    queue = await env.engine.store.queue_heads("app", KEY, 5)
    assert sorted(queue) == sorted(ids[2:])
    return ids[:2] + queue


async def test_an_admission_that_fills_its_key_tells_no_further_run(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await five(env)
    told = admits(env, monkeypatch)
    await env.engine.runs.ask(ids[0], machine.SignalIn("go"))
    await env.until(ids[2], "waiting")
    await trio.testing.wait_all_tasks_blocked()
    # The close's wake-up admitted the oldest; that admission filled the key, so its own
    # wake-up ("the next one may fit too") read the key full and told nobody.
    assert told == [ids[2]]
    assert (await env.engine.runs.document(ids[3])).status == "queued"


async def test_one_wake_admits_as_many_heads_as_slots_are_free(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await five(env)
    runs = env.engine.runs
    real_wake = runs.wake_queued
    wakes: list[tuple[Any, ...]] = []
    monkeypatch.setattr(runs, "wake_queued", lambda *args, **kw: wakes.append(args))
    for run_id in ids[:2]:  # both slots freed, their wake-ups held back
        await runs.ask(run_id, machine.Cancel("done"))
    assert wakes == [("app", KEY, 2)] * 2  # a close's wake-up carries its key's limit
    monkeypatch.setattr(runs, "wake_queued", real_wake)
    told = admits(env, monkeypatch)
    runs.wake_queued("app", KEY, 2)
    await trio.testing.wait_all_tasks_blocked()
    assert told[:2] == [ids[2], ids[3]]  # one read told both, oldest first
    statuses = [(await runs.document(i)).status for i in ids[2:]]
    assert statuses == ["waiting", "waiting", "queued"]


async def test_the_pump_leaves_a_full_key_alone_and_admits_a_run_nobody_woke(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await five(env)
    told = admits(env, monkeypatch, drop=1)
    await advance(3 * 2.0 + 0.5)  # three of the pump's periods
    assert told == []  # the key is full: its oldest run is not told to try
    await env.engine.runs.ask(ids[0], machine.SignalIn("go"))
    await trio.testing.wait_all_tasks_blocked()
    assert told == [ids[2]]  # the close's wake-up, lost on the way
    assert (await env.engine.runs.document(ids[2])).status == "queued"
    await advance(2.5)
    await env.until(ids[2], "waiting")  # the pump found a slot free (the workflow's limit: 2)
    assert told[1:2] == [ids[2]]
    assert (await env.engine.runs.document(ids[3])).status == "queued"
