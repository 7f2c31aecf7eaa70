"""A pull worker: long-polls a queue, runs handlers concurrently, heartbeats, answers.

    worker = Worker(client, "warehouse", {"pick": pick, "unpick": unpick}, concurrency=8)
    worker.run_sync()          # blocking; SIGTERM/SIGINT stop it gracefully
    # or, inside asyncio/Trio:  await worker.run()   and   worker.stop()

Tasks are routed by step, as `TaskRouter` routes pushes: `handlers` is one function for every
step of the queue, a mapping whose keys are step names or `(workflow, step)` pairs (`"*"` as
the workflow matches any), or a `TaskRouter` itself. A task no handler takes fails at once,
not retryable, with class `unknown_step` (what a push handler answers with a 404).

A handler takes the `Task` (and, if it has a second parameter, a `TaskContext`). Sync handlers
run in threads, async ones natively. What it returns or raises is answered as
`foliot_client.outcomes` describes.

Guarantees: a task the worker took is answered, or released (failed retryable, class
`worker_shutdown`) at shutdown, or left to its deadline only when the worker dies. Every call
to the server is retried with backoff while the server is unreachable or refuses with "nothing
changed" (429/503), so a brief outage loses nothing. When a heartbeat says `cancelRequested`
(the run was cancelled or moved on), the handler is cancelled (async) or told through
`ctx.cancelled` (sync), and its result is dropped.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import anyio
import anyio.abc

from . import errors
from ._base import RetryPolicy, fail_body
from .client import AsyncClient
from .models import Task
from .outcomes import TaskFailure, answer_of, failure_of

log = logging.getLogger("foliot_client.worker")

Handler = Callable[..., Any]


class Router(Protocol):
    """What routes a task to its handler (`TaskRouter` is one)."""

    def handler_for(self, task: Task) -> Handler | None: ...


Handlers = Handler | Mapping[str, Handler] | Mapping[tuple[str, str], Handler] | Router


def router_of(handlers: Handlers) -> Callable[[Task], Handler | None]:
    """How a worker finds a task's handler: one function takes every step; a mapping is read
    by `(workflow, step)`, then `("*", step)`, then `step`; a router by its `handler_for`."""
    if isinstance(handlers, Mapping):
        table: dict[Any, Handler] = dict(handlers)
        for key, fn in table.items():
            pair = isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)
            if not (isinstance(key, str) or pair) or not callable(fn):
                raise TypeError(f"handlers: {key!r} must map a step or (workflow, step) to a function")

        def from_table(task: Task) -> Handler | None:
            return (
                table.get((task.workflow_name, task.step))
                or table.get(("*", task.step))
                or table.get(task.step)
            )

        return from_table
    handler_for = getattr(handlers, "handler_for", None)
    if callable(handler_for):
        return handler_for  # type: ignore[no-any-return]
    if callable(handlers):
        single = handlers
        return lambda task: single
    raise TypeError("handlers must be a function, a mapping of steps to functions, or a TaskRouter")


#: Backoff between tries while the server cannot be reached (poll, heartbeat, answer).
OUTAGE_BACKOFF = RetryPolicy(max_attempts=1_000_000, initial_interval=0.2, coefficient=2.0, max_interval=5.0)


def heartbeat_period(deadline: datetime | None, now: float, override: float | None) -> float | None:
    """How often to heartbeat a task: `override` when given, else a third of the time the
    task had left when it arrived (a heartbeat extends the deadline by the step's timeout, which
    is that time), at least 0.1 s. None without a deadline."""
    if override is not None:
        return override
    if deadline is None:
        return None
    return max((deadline.timestamp() - now) / 3, 0.1)


class TaskContext:
    """What a handler can learn while it runs (its optional second parameter)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self._cancelled = threading.Event()
        self.heartbeats = 0

    @property
    def cancelled(self) -> bool:
        """True once the server said the task is no longer wanted: stop, the result is dropped."""
        return self._cancelled.is_set()


@dataclass
class WorkerStats:
    polls: int = 0
    received: int = 0
    completed: int = 0
    failed: int = 0
    dropped: int = 0  # cancelRequested or closed: the handler's result was not sent
    released: int = 0  # given back at shutdown
    heartbeats: int = 0
    outage_retries: int = 0


@dataclass
class _Held:
    task: Task
    ctx: TaskContext
    scope: anyio.CancelScope
    done: anyio.Event = field(default_factory=anyio.Event)
    cancel_requested: bool = False  # the server no longer wants the result
    released: bool = False  # shutdown took it away from its handler


class Worker:
    def __init__(
        self,
        client: AsyncClient,
        queue: str,
        handlers: Handlers,
        *,
        concurrency: int = 1,
        app: str | None = None,
        worker_id: str | None = None,
        wait_seconds: float = 30,
        heartbeat_interval: float | None = None,
        shutdown_grace: float = 30.0,
        answer_retry_for: float = 300.0,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.queue = queue
        self.handlers = handlers
        self._route = router_of(handlers)
        self.concurrency = concurrency
        self.app = app
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.wait_seconds = wait_seconds
        self.heartbeat_interval = heartbeat_interval
        self.shutdown_grace = shutdown_grace
        self.answer_retry_for = answer_retry_for
        self.stats = WorkerStats()
        self._clock = clock
        self._rand = rand
        self._held: dict[str, _Held] = {}
        self._slot_freed = anyio.Event()
        self._stopping = False
        self._poll_scope: anyio.CancelScope | None = None
        self._threads = anyio.CapacityLimiter(concurrency)

    # --- control ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop polling; tasks under way finish (or are released after `shutdown_grace`)."""
        self._stopping = True
        if self._poll_scope is not None:
            self._poll_scope.cancel()
        self._slot_freed.set()

    def run_sync(self, *, backend: str = "asyncio", log_to_stderr: bool = True) -> None:
        """Run until SIGTERM or SIGINT (a second one skips the grace period). Unless the program
        configured logging itself (or `log_to_stderr=False`), the worker's own log lines (start,
        claims, shutdown, failures) go to stderr at INFO; other libraries' are left alone."""
        if log_to_stderr:
            _log_to_stderr()
        anyio.run(self._run_with_signals, backend=backend)

    async def _run_with_signals(self) -> None:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        if self._stopping:
                            log.warning("second %s: releasing held tasks now", signal.Signals(signum).name)
                            self.shutdown_grace = 0
                            self._cancel_handlers()
                        else:
                            log.info("%s: stopping gracefully", signal.Signals(signum).name)
                            self.stop()

            tg.start_soon(watch)
            await self.run()
            tg.cancel_scope.cancel()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll and work until `stop()`; then finish or release every held task."""
        log.info(
            "worker %s: polling queue %r of app %r, %d at a time, handlers for %s",
            self.worker_id, self.queue, self.app or self.client.app, self.concurrency,
            _describe(self.handlers),
        )  # fmt: skip
        async with anyio.create_task_group() as tg:
            task_status.started()
            failures = 0
            while not self._stopping:
                free = self.concurrency - len(self._held)
                if free <= 0:
                    self._slot_freed = anyio.Event()
                    await self._slot_freed.wait()
                    continue
                try:
                    tasks = await self._poll(free)
                except (errors.TransportError, errors.Overloaded, errors.Unavailable) as exc:
                    failures += 1
                    self.stats.outage_retries += 1
                    delay = OUTAGE_BACKOFF.delay(failures, exc, self._rand)
                    log.warning("poll failed (%s); retrying in %.1fs", exc, delay)
                    with anyio.CancelScope() as self._poll_scope:
                        await anyio.sleep(delay)
                    continue
                failures = 0
                for task in tasks:
                    self._take(tg, task)
            log.info(
                "worker %s: stopping; %d task(s) under way get %gs to finish",
                self.worker_id, len(self._held), self.shutdown_grace,
            )  # fmt: skip
            await self._drain()
        st = self.stats
        log.info(
            "worker %s: stopped after %d task(s): %d completed, %d failed, %d released, %d dropped",
            self.worker_id, st.received, st.completed, st.failed, st.released, st.dropped,
        )  # fmt: skip

    def _cancel_handlers(self) -> None:
        for held in self._held.values():
            held.released = True
            held.ctx._cancelled.set()
            held.scope.cancel()

    async def _poll(self, free: int) -> list[Task]:
        with anyio.CancelScope() as self._poll_scope:
            self.stats.polls += 1
            return await self.client.poll_tasks(
                self.queue,
                wait_seconds=self.wait_seconds,
                max_tasks=min(free, 100),
                worker_id=self.worker_id,
                app=self.app,
            )
        return []  # stop() cancelled the poll: what it may have claimed is offered again later

    async def _drain(self) -> None:
        """Wait up to `shutdown_grace` for held tasks; release the rest."""
        with anyio.move_on_after(self.shutdown_grace):
            while self._held:
                held = next(iter(self._held.values()))
                await held.done.wait()
        if not self._held:
            return
        leftovers = list(self._held.values())
        self._cancel_handlers()
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.answer_retry_for):
            for held in leftovers:
                await held.done.wait()

    # --- one task -----------------------------------------------------------------------------

    def _take(self, tg: anyio.abc.TaskGroup, task: Task) -> None:
        self.stats.received += 1
        log.info(
            "claimed %s: step %r of %s v%d, attempt %d, run %s",
            task.idempotency_key, task.step, task.workflow_name, task.workflow_version, task.attempt,
            task.run_id,
        )  # fmt: skip
        held = _Held(task, TaskContext(task), anyio.CancelScope())
        self._held[task.task_token] = held
        tg.start_soon(self._execute, held)

    async def _execute(self, held: _Held) -> None:
        task = held.task
        body: dict[str, Any] | None = None
        try:
            async with anyio.create_task_group() as beats:
                beats.start_soon(self._heartbeat, held)
                with held.scope:
                    try:
                        body = answer_of(await self._call(held))
                    except Exception as exc:
                        body = failure_of(exc)
                beats.cancel_scope.cancel()
            if held.cancel_requested:
                self.stats.dropped += 1
                log.info("task %s: cancel requested; result dropped", task.idempotency_key)
            elif held.released or body is None:
                self.stats.released += 1
                await self._answer(task, fail_body("worker_shutdown", "the worker stopped", retryable=True))
            else:
                await self._answer(task, body)
        finally:
            del self._held[task.task_token]
            held.done.set()
            self._slot_freed.set()

    async def _call(self, held: _Held) -> Any:
        task = held.task
        handler = self._route(task)
        if handler is None:
            log.error(
                "task %s: no handler for %s/%s on queue %s", task.idempotency_key, task.workflow_name,
                task.step, self.queue,
            )  # fmt: skip
            raise TaskFailure(
                "unknown_step", f"no handler for {task.workflow_name}/{task.step}", retryable=False
            )
        args: tuple[Any, ...] = (task, held.ctx) if _takes_two(handler) else (task,)
        if inspect.iscoroutinefunction(handler):
            result: Awaitable[Any] = handler(*args)
            return await result
        return await anyio.to_thread.run_sync(
            lambda: handler(*args), abandon_on_cancel=True, limiter=self._threads
        )

    async def _heartbeat(self, held: _Held) -> None:
        period = heartbeat_period(held.task.deadline, self._clock(), self.heartbeat_interval)
        if period is None:
            return
        failures = 0
        while True:
            await anyio.sleep(
                period if failures == 0 else min(period, OUTAGE_BACKOFF.delay(failures, _OUTAGE))
            )
            try:
                beat = await self.client.heartbeat_task(held.task.task_token, app=self.app)
            except (errors.TransportError, errors.Overloaded, errors.Unavailable):
                failures += 1
                self.stats.outage_retries += 1
                continue
            except (errors.TaskClosed, errors.NotFound):
                # Timed out or answered already: nobody wants this result any more.
                held.cancel_requested = True
                held.ctx._cancelled.set()
                held.scope.cancel()
                return
            failures = 0
            held.ctx.heartbeats += 1
            self.stats.heartbeats += 1
            if beat.cancel_requested:
                held.cancel_requested = True
                held.ctx._cancelled.set()
                held.scope.cancel()
                return

    async def _answer(self, task: Task, body: dict[str, Any]) -> None:
        """Send the answer, through outages, until the server takes or refuses it."""
        give_up = self._clock() + self.answer_retry_for
        failures = 0
        call = self.client.b_complete_task(task.task_token, body, self.app)
        with anyio.CancelScope(shield=True):
            while True:
                try:
                    await self.client.send(call)
                except (errors.TransportError, errors.Overloaded, errors.Unavailable) as exc:
                    failures += 1
                    self.stats.outage_retries += 1
                    if self._clock() >= give_up:
                        log.error(
                            "task %s: answer not delivered (%s); it will time out", task.idempotency_key, exc
                        )
                        return
                    await anyio.sleep(OUTAGE_BACKOFF.delay(failures, exc, self._rand))
                    continue
                except errors.TaskClosed:
                    # Closed meanwhile (cancelled, timed out) or by our own earlier try whose
                    # answer was lost: either way nothing more to do.
                    self.stats.dropped += 1
                    return
                except errors.ApiError as exc:
                    # 400 output_too_large / invalid_next / invalid_output: the step failed too.
                    log.error("task %s: answer refused: %s", task.idempotency_key, exc)
                    self.stats.failed += 1
                    return
                if "error" in body:
                    self.stats.failed += 1
                else:
                    self.stats.completed += 1
                return


_OUTAGE = errors.TransportError("outage", connected=False)


def _describe(handlers: Handlers) -> str:
    if isinstance(handlers, Mapping):
        return ", ".join("/".join(k) if isinstance(k, tuple) else str(k) for k in handlers)
    if callable(getattr(handlers, "handler_for", None)):
        return "its router's steps"
    return "every step"


def _log_to_stderr() -> None:
    """The worker's logger to stderr at INFO, unless logging was configured by the program."""
    if logging.getLogger().handlers or log.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


def _takes_two(handler: Handler) -> bool:
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


__all__ = ["Handlers", "Router", "TaskContext", "Worker", "WorkerStats", "heartbeat_period", "router_of"]
