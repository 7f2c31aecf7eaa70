"""The concurrency keys' pump under MockClock: it heals a lost wake-up within two periods, and
leaves alone a key whose queue moves on by itself."""

from __future__ import annotations

from typing import Any

import trio
from trio.testing import MockClock

from foliot.core.errors import StorageUnavailable
from foliot.kinds.run.service import _PUMP_S

from .conftest import Env, advance

ONE_AT_A_TIME = {
    "name": "solo",
    "concurrency": {"limit": 1, "key": "input.k"},
    "steps": [{"name": "hold", "type": "wait", "signal": "go"}],
}


def count_heads(env: Env, fail: list[int]) -> list[float]:
    """Record when the store's queue heads are read; the first `fail[0]` reads fail."""
    store = env.engine.store
    real = store.queue_heads
    reads: list[float] = []

    async def queue_heads(app: str, key: str, limit: int) -> Any:
        reads.append(trio.current_time())
        if fail[0]:
            fail[0] -= 1
            raise StorageUnavailable("down for a moment")
        return await real(app, key, limit)

    store.queue_heads = queue_heads  # type: ignore[method-assign]
    return reads


async def signal(env: Env, run_id: str) -> None:
    from foliot.core.workflow import machine

    reply, _ = await env.engine.runs.ask(run_id, machine.SignalIn("go", None))
    assert isinstance(reply, machine.Ok), reply


async def test_a_lost_wake_up_is_healed_by_the_pump(env: Env, autojump_clock: MockClock) -> None:
    await env.register(ONE_AT_A_TIME)
    first = await env.start("solo", {"k": "a"})
    second = await env.start("solo", {"k": "a"})
    assert (await env.engine.store.get_run(second)).status == "queued"  # type: ignore[union-attr]
    fail = [1]
    count_heads(env, fail)  # the wake-up of the slot first frees is lost
    await signal(env, first)
    freed = trio.current_time()
    await env.until(second, "waiting")
    assert fail == [0]
    assert trio.current_time() - freed <= 2 * _PUMP_S + 0.1


async def test_the_pump_leaves_alone_a_key_woken_in_its_last_period(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(ONE_AT_A_TIME)
    runs = [await env.start("solo", {"k": "a"}) for _ in range(3)]  # one holds, two wait
    reads = count_heads(env, [0])
    start = trio.current_time()
    await advance(10.25 * _PUMP_S)  # (then between two of the pump's passes)
    quiet = [t - start for t in reads]
    assert 8 <= len(quiet) <= 11  # a standing queue nobody moves: tried once a period
    reads.clear()
    await signal(env, runs[0])  # a slot freed: the key's wake-up admits the next run
    await env.until(runs[1], "waiting")
    woken = len(reads)
    await advance(_PUMP_S * 0.9)  # the pump's next pass falls within the period: left alone
    assert len(reads) == woken
    await advance(_PUMP_S * 1.1)  # the one after: tried again (one run still waits)
    assert len(reads) == woken + 1
