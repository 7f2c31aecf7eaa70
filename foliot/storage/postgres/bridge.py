"""The bridge from Trio to asyncpg's asyncio loop: one crossing each way per call.

asyncpg runs on a plain asyncio loop in a dedicated daemon thread (`LoopThread`); a Trio task
hands it one coroutine per unit of work and sleeps until the result is handed back through the
Trio token, so nothing the asyncio side raises (in any of its tasks) can reach Trio except as
the result of the one call concerned. trio-asyncio (the user's named bridge) remains selectable
(`TrioAsyncio`, `bridge="trio-asyncio"`) and is what `bench/pg_commit.py` compares against.
A Trio cancellation only stops the caller waiting: the asyncio side bounds its own work.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable, Coroutine
from contextlib import suppress
from functools import partial
from typing import Any, Protocol, TypeVar

import outcome
import trio

from ...core.errors import StorageUnavailable

T = TypeVar("T")
log = logging.getLogger("foliot.storage.postgres")


class Bridge(Protocol):
    loop: asyncio.AbstractEventLoop

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T: ...


class LoopThread:
    """A plain asyncio loop in a daemon thread; Trio tasks submit coroutines to it.

    `run` crosses once each way, and crossings travel together: calls submitted while the loop
    thread has not yet taken the previous ones share one wake-up of it, and answers ready
    together share one `TrioToken.run_sync_soon` (a wake-up is a system call and a GIL
    hand-over on each side; one per call made the threads wait on each other under load).
    A Trio cancellation abandons the wait only (the coroutine finishes on its own bounded
    terms), so asyncpg is never cancelled mid-query or mid-release from outside.
    """

    def __init__(self) -> None:
        # Constructed directly: once trio_asyncio is imported, asyncio.new_event_loop() is patched.
        self.loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop()
        self.loop.set_exception_handler(log_loop_error)
        # Calls waiting for the loop thread, answers waiting for Trio; each flag says a wake-up
        # to take them is already on its way (set by the sender, cleared by the taker first).
        self._calls: collections.deque[tuple[Callable[[], Coroutine[Any, Any, Any]], _Deliver]] = (
            collections.deque()
        )
        self._calls_woken = False
        self._answers: collections.deque[tuple[_Deliver, outcome.Outcome[Any]]] = collections.deque()
        self._answers_woken = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._running: set[asyncio.Task[Any]] = set()  # the loop holds its tasks weakly
        self.wakeups = 0  # loop-thread wake-ups for calls (fewer than calls under load)
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="foliot-postgres", daemon=True)
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(
                        asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 5)
                    )
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            except BaseException as exc:  # the thread must end quietly
                log.warning("asyncio loop shut down untidily: %r", exc)
            finally:
                self.loop.close()

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T:
        task = trio.lowlevel.current_task()
        waiting = True

        def deliver(result: outcome.Outcome[Any]) -> None:  # on the Trio thread
            nonlocal waiting
            if waiting:
                waiting = False
                trio.lowlevel.reschedule(task, result)

        def abort(_: Any) -> trio.lowlevel.Abort:
            nonlocal waiting
            waiting = False
            return trio.lowlevel.Abort.SUCCEEDED

        self._token = trio.lowlevel.current_trio_token()
        self._submit(make, deliver)
        # Safety net only: the asyncio side bounds itself; this bounds a wedged loop thread.
        with trio.move_on_after(limit_s + 5):
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
            return result
        raise StorageUnavailable(f"the database did not answer within {limit_s + 5:.0f}s")

    def _submit(self, make: Callable[[], Coroutine[Any, Any, Any]], deliver: _Deliver) -> None:
        """On the Trio thread: queue the call; wake the loop thread unless a wake-up is pending."""
        if self.loop.is_closed():
            raise StorageUnavailable("the store is closed")
        self._calls.append((make, deliver))
        if not self._calls_woken:
            self._calls_woken = True
            try:
                self.loop.call_soon_threadsafe(self._take_calls)
            except RuntimeError as exc:  # the loop closed meanwhile
                self._calls_woken = False
                self._calls.pop()
                raise StorageUnavailable(f"the store is closed ({exc})") from None

    def _take_calls(self) -> None:
        """On the loop thread: start every queued call (the flag is cleared before taking, so a
        call queued meanwhile is taken now or brings a wake-up of its own)."""
        self._calls_woken = False
        self.wakeups += 1
        while self._calls:
            make, deliver = self._calls.popleft()
            try:
                task = self.loop.create_task(make())
            except BaseException as exc:
                self._answer(deliver, outcome.Error(exc))
                continue
            self._running.add(task)
            task.add_done_callback(partial(self._finished, deliver))

    def _finished(self, deliver: _Deliver, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        self._answer(deliver, outcome.capture(task.result))

    def _answer(self, deliver: _Deliver, result: outcome.Outcome[Any]) -> None:
        """On the loop thread: queue an answer; wake Trio unless a wake-up is pending."""
        self._answers.append((deliver, result))
        if not self._answers_woken and self._token is not None:
            self._answers_woken = True
            with suppress(trio.RunFinishedError):  # Trio is gone: nobody to tell
                self._token.run_sync_soon(self._take_answers)

    def _take_answers(self) -> None:
        """On the Trio thread: hand every queued answer to its caller."""
        self._answers_woken = False
        while self._answers:
            deliver, result = self._answers.popleft()
            deliver(result)

    async def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        with trio.move_on_after(10):
            await trio.to_thread.run_sync(self._thread.join, abandon_on_cancel=True)


_Deliver = Callable[[outcome.Outcome[Any]], None]


class TrioAsyncio:
    """The former bridge: trio-asyncio's loop inside Trio's (kept for comparison)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]], limit_s: float) -> T:
        import trio_asyncio

        # Shielded (asyncpg is never cancelled from Trio); the asyncio side bounds itself.
        with trio.CancelScope(shield=True):
            with trio.move_on_after(limit_s + 5):
                result: T = await trio_asyncio.aio_as_trio(make, loop=self.loop)()
                return result
        raise StorageUnavailable(f"the database did not answer within {limit_s + 5:.0f}s")


def log_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An error in a background asyncio task (a connection lost while idle, a close that
    failed): asyncpg has already dropped the connection; log it, never propagate it."""
    exc = context.get("exception")
    log.warning("postgres driver: %s%s", context.get("message", ""), f" ({exc!r})" if exc else "")
