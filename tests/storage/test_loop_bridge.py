"""The PostgreSQL store's bridge to its asyncio thread (no database needed): calls made while
the loop thread is busy share one wake-up of it; answers, errors and abandoned waits each reach
(or skip) their own caller."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest
import trio

from foliot.storage.postgres.bridge import LoopThread


@pytest.fixture
async def bridge() -> AsyncIterator[LoopThread]:
    loop_thread = LoopThread()
    try:
        yield loop_thread
    finally:
        await loop_thread.stop()


async def until_set(event: threading.Event) -> None:
    with trio.fail_after(10):
        while not event.is_set():  # noqa: ASYNC110 (set by the loop thread: no trio.Event)
            await trio.sleep(0.001)


async def test_calls_queued_while_the_loop_is_busy_share_one_wake_up(bridge: LoopThread) -> None:
    gate, busy = threading.Event(), threading.Event()

    async def block() -> str:
        busy.set()
        gate.wait(10)  # holds the whole loop thread, as a long callback would
        return "blocker"

    async def echo(i: int) -> int:
        await asyncio.sleep(0)
        return i

    answers: dict[int, int] = {}

    async def call(i: int) -> None:
        answers[i] = await bridge.run(lambda: echo(i), 5)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.run, block, 5)
        await until_set(busy)
        assert bridge.wakeups == 1
        for i in range(50):
            nursery.start_soon(call, i)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert answers == {i: i for i in range(50)}
    assert bridge.wakeups == 2  # the 50 calls were taken together


async def test_errors_reach_their_own_caller_and_an_abandoned_wait_is_skipped(
    bridge: LoopThread,
) -> None:
    gate, started = threading.Event(), threading.Event()

    async def fail() -> None:
        raise ValueError("this caller's")

    async def slow() -> str:
        started.set()
        await asyncio.get_running_loop().run_in_executor(None, gate.wait, 10)
        return "late"

    async def fine() -> str:
        return "fine"

    with pytest.raises(ValueError, match="this caller's"):
        await bridge.run(fail, 5)
    with trio.move_on_after(0.05) as scope:  # the caller gives up; the call finishes anyway
        await bridge.run(slow, 5)
    assert scope.cancelled_caught
    await until_set(started)
    gate.set()
    assert await bridge.run(fine, 5) == "fine"


async def test_a_stopped_loop_refuses_new_calls(bridge: LoopThread) -> None:
    async def fine() -> str:
        return "fine"

    await bridge.stop()
    from foliot.core.errors import StorageUnavailable

    with pytest.raises(StorageUnavailable):
        await bridge.run(fine, 5)
