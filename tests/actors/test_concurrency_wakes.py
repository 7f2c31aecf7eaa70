"""Concurrency keys' wake-ups (issue 23), under MockClock: a wake tells `Admit` to as many of a
key's oldest queued runs as its free slots leave room for, and to none when the key is full (an
`Admit` the guard refuses costs an actor and a transaction under the key's lock); the pump,
the fallback for a lost wake-up, still admits a run nobody woke, and an idle node's pump does
one bounded page of work per period however many keys wait (issue 37.5)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from foliot.core.workflow import machine
from foliot.kinds.run import service

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
    await advance(service._SWEEP_S + 0.5)
    await env.until(ids[2], "waiting")  # the pump's sweep found a slot free (the limit: 2)
    assert told[1:2] == [ids[2]]
    assert (await env.engine.runs.document(ids[3])).status == "queued"


ONE = {
    "name": "one",
    "concurrency": {"limit": 1, "key": "input.customer"},
    "steps": [{"name": "hold", "type": "wait", "signal": "go"}],
}
PAGE = 5  # the sweep's page in these tests (`_SWEEP_KEYS`)


async def waiting_keys(env: Env, count: int) -> dict[str, list[str]]:
    """`count` keys of `one` (limit 1), each with a run holding its slot and one queued."""
    await env.register(ONE)
    ids = {}
    for n in range(count):
        ids[f"one/{n:02}"] = [await env.start("one", {"customer": f"{n:02}", "i": i}) for i in range(2)]
    await trio.testing.wait_all_tasks_blocked()
    return ids


def count_calls(env: Env, monkeypatch: pytest.MonkeyPatch, *names: str) -> dict[str, list[Any]]:
    """What the store's methods `names` answered, call by call, from now on."""
    store = env.engine.store
    calls: dict[str, list[Any]] = {name: [] for name in names}
    for name in names:
        real = getattr(store, name)

        async def call(*args: Any, _real: Any = real, _name: str = name) -> Any:
            found = await _real(*args)
            calls[_name].append(found)
            return found

        monkeypatch.setattr(store, name, call)
    return calls


async def test_an_idle_pump_reads_one_bounded_page_per_period_however_many_keys_wait(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "_SWEEP_KEYS", PAGE)
    keys = await waiting_keys(env, 4 * PAGE)
    await advance(service._PUMP_START_S + 1)  # the start's sweep of every key is behind
    calls = count_calls(env, monkeypatch, "queued_keys", "queue_room")
    told = admits(env, monkeypatch)
    periods = 12
    await advance(periods * service._SWEEP_S)
    await trio.testing.wait_all_tasks_blocked()
    # One read of at most a page per period, no read per key (every key is full), nobody told:
    # the work of a period does not grow with the 20 keys waiting.
    assert len(calls["queued_keys"]) == periods
    assert all(len(page) <= PAGE + 1 for page in calls["queued_keys"])  # one more: is there?
    assert calls["queue_room"] == [] and told == []
    # Page after page, every key is looked at within keys / page periods.
    seen = [queued.key for page in calls["queued_keys"][:4] for queued in page[:PAGE]]
    assert seen == sorted(keys)


async def test_a_lost_wake_up_is_repaired_by_the_sweep_within_keys_per_page_periods(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "_SWEEP_KEYS", PAGE)
    keys = await waiting_keys(env, 3 * PAGE)
    await advance(service._PUMP_START_S + service._SWEEP_S)  # the heads have waited a period
    last = max(keys)  # on the sweep's last page
    told = admits(env, monkeypatch, drop=1)
    await env.engine.runs.ask(keys[last][0], machine.SignalIn("go"))
    await trio.testing.wait_all_tasks_blocked()
    assert told == [keys[last][1]]  # the close's wake-up, lost on the way
    with trio.fail_after(3 * service._SWEEP_S + 1):  # three pages: every key once
        await env.until(keys[last][1], "waiting")
    assert told[1:] == [keys[last][1]]  # the sweep told it, and no run of a full key


async def test_a_lost_wake_up_of_a_run_created_by_a_node_whose_clock_was_ahead_is_repaired(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep tells only heads that waited a period, judged by their creation time; a run
    created by a node whose wall clock was ahead (a restart after a clock step) looked younger
    than it was for as long as the difference: its lost wake-up waited that long, not one
    period (tests/sim seed 55: over 2 minutes). A head the sweep saw a period ago has waited."""
    ids = await five(env)
    await advance(service._PUMP_START_S + 1)
    env.engine.clock._anchor_ms -= 600_000  # this node's clock is 10 minutes behind theirs
    told = admits(env, monkeypatch, drop=1)
    await env.engine.runs.ask(ids[0], machine.SignalIn("go"))
    await trio.testing.wait_all_tasks_blocked()
    assert told == [ids[2]]  # the close's wake-up, lost on the way
    with trio.fail_after(2 * service._SWEEP_S + 1):
        await env.until(ids[2], "waiting")
