"""The pull `Worker` against a live Foliot (both stores): concurrency, sync and async handlers,
`Next` and error classes, heartbeats, cancellation mid-task, graceful stop and release, and a
server that refuses connections for a while."""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

import anyio
import httpx
import pytest
import trio
from foliot_client import AsyncClient, Next, RetryPolicy, Task, TaskContext, TaskFailure, Worker

from ..conftest import Api

FAST = RetryPolicy(max_attempts=2, initial_interval=0.001, max_interval=0.001)


def queued(
    name: str, *, timeout: str = "30s", attempts: int = 1, more: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "steps": [
            {"name": "work", "type": "task", "queue": "q", "timeout": "30s",
             "retry": {"maxAttempts": attempts, "initialInterval": "1ms"}},
            *(more or []),
        ],
    }  # fmt: skip


def client(api: Api, **kw: Any) -> AsyncClient:
    return AsyncClient(api.running.url, api.key, app=api.app, retry=FAST, **kw)


async def until(predicate: Any, limit: float = 20) -> None:
    """Wait for a condition the worker reaches on its own (bounded, no timing assumption)."""
    with trio.fail_after(limit):
        while not predicate():
            await trio.sleep(0.005)


async def test_async_handlers_run_concurrently_and_complete(api: Api) -> None:
    running = 0
    peak = 0
    gate = trio.Event()

    async def handler(task: Task) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if peak == 4:
            gate.set()
        await gate.wait()  # only released once four handlers are in at once
        running -= 1
        return {"double": task.input["n"] * 2}

    async with client(api) as c:
        await c.register_workflow(queued("w"))
        runs = [(await c.start_run("w", {"n": i})).run_id for i in range(8)]
        worker = Worker(c, "q", handler, concurrency=4, wait_seconds=1)
        async with trio.open_nursery() as n:
            await n.start(worker.run)
            for i, run_id in enumerate(runs):
                assert (await api.until(run_id, "completed"))["state"]["work"] == {"double": i * 2}
            worker.stop()
    assert peak == 4 and worker.stats.completed == 8 and worker.stats.received == 8


async def test_sync_handlers_run_in_threads_with_next_and_error_classes(api: Api) -> None:
    loop_thread = threading.get_ident()
    threads: set[int] = set()

    def handler(task: Task) -> Any:
        threads.add(threading.get_ident())
        if task.input == "branch":
            return Next("special", {"went": "special"})
        if task.input == "decline":
            raise TaskFailure("card_declined", "no funds", retryable=False)
        if task.input == "crash":
            raise LookupError("sku 9 unknown")
        return "plain"

    more = [{"name": "normal", "type": "sleep", "duration": "1ms", "next": "$end"},
            {"name": "special", "type": "sleep", "duration": "1ms", "next": "$end"}]  # fmt: skip
    async with client(api) as c:
        await c.register_workflow(queued("s", more=more))
        branch = (await c.start_run("s", "branch")).run_id
        decline = (await c.start_run("s", "decline")).run_id
        crash = (await c.start_run("s", "crash")).run_id
        plain = (await c.start_run("s", "plain")).run_id
        worker = Worker(c, "q", handler, concurrency=2, wait_seconds=1)
        async with trio.open_nursery() as n:
            await n.start(worker.run)
            assert (await api.until(branch, "completed"))["state"]["work"] == {"went": "special"}
            assert (await api.until(plain, "completed"))["state"]["work"] == "plain"
            declined = await api.until(decline, "failed")
            assert (
                declined["error"]["class"] == "card_declined" and declined["error"]["message"] == "no funds"
            )
            crashed = await api.until(crash, "failed")
            assert crashed["error"]["class"] == "LookupError"
            worker.stop()
    assert loop_thread not in threads and threads
    steps = {e["step"] for e in await api.events(branch) if e["type"] == "step_started"}
    assert "special" in steps and "normal" not in steps


async def test_long_tasks_are_heartbeaten(api: Api) -> None:
    contexts: list[TaskContext] = []

    async def handler(task: Task, ctx: TaskContext) -> str:
        contexts.append(ctx)
        await until(lambda: ctx.heartbeats >= 3)
        return "done"

    async with client(api) as c:
        await c.register_workflow(queued("hb"))
        run = await c.start_run("hb")
        worker = Worker(c, "q", handler, wait_seconds=1, heartbeat_interval=0.01)
        async with trio.open_nursery() as n:
            await n.start(worker.run)
            assert (await api.until(run.run_id, "completed"))["state"]["work"] == "done"
            worker.stop()
    assert contexts[0].heartbeats >= 3 and worker.stats.heartbeats >= 3


async def test_cancel_mid_task_stops_the_handler_and_drops_its_result(api: Api) -> None:
    started = trio.Event()
    cancelled = trio.Event()

    async def handler(task: Task) -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    seen: list[bool] = []
    entered = threading.Event()

    def sync_handler(task: Task, ctx: TaskContext) -> str:
        entered.set()
        while not ctx.cancelled:  # a blocking handler polls its context
            threading.Event().wait(0.005)
        seen.append(ctx.cancelled)
        return "dropped"

    async with client(api) as c:
        await c.register_workflow(queued("cx"))
        for fn, inside in ((handler, started.is_set), (sync_handler, entered.is_set)):
            run = await c.start_run("cx")
            worker = Worker(c, "q", fn, wait_seconds=1, heartbeat_interval=0.01)
            async with trio.open_nursery() as n:
                await n.start(worker.run)
                await until(inside)
                await c.cancel_run(run.run_id)
                await until(lambda w=worker: w.stats.dropped == 1)  # type: ignore[misc]
                worker.stop()
            assert worker.stats.completed == worker.stats.failed == worker.stats.released == 0
            types = [e["type"] for e in await api.events(run.run_id)]
            assert "task_completed" not in types and "task_failed" not in types
    # The blocking handler's thread sees the cancel on its own next poll (it may trail the drop).
    await until(lambda: bool(seen))
    assert cancelled.is_set() and seen == [True]


async def test_stop_lets_held_tasks_finish(api: Api) -> None:
    started = trio.Event()
    release = trio.Event()

    async def handler(task: Task) -> str:
        started.set()
        await release.wait()
        return "finished"

    async with client(api) as c:
        await c.register_workflow(queued("g"))
        run = await c.start_run("g")
        worker = Worker(c, "q", handler, wait_seconds=30, shutdown_grace=60)
        async with trio.open_nursery() as n:
            await n.start(worker.run)
            with trio.fail_after(20):
                await started.wait()
            worker.stop()  # stops polling at once; the held task goes on
            await trio.testing.wait_all_tasks_blocked()
            assert worker.stats.completed == 0
            release.set()
        assert worker.stats.completed == 1
        assert (await api.until(run.run_id, "completed"))["state"]["work"] == "finished"


async def test_tasks_still_held_after_the_grace_are_released_for_a_retry(api: Api) -> None:
    started = trio.Event()

    async def handler(task: Task) -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    async with client(api) as c:
        await c.register_workflow(queued("r", attempts=2))
        run = await c.start_run("r")
        worker = Worker(c, "q", handler, wait_seconds=30, shutdown_grace=0)
        async with trio.open_nursery() as n:
            await n.start(worker.run)
            with trio.fail_after(20):
                await started.wait()
            worker.stop()
        assert worker.stats.released == 1
        events = await api.events(run.run_id)
        failed = [e for e in events if e["type"] == "task_failed"]
        assert failed and failed[0]["data"]["class"] == "worker_shutdown"
        assert any(e["type"] == "retry_scheduled" for e in events)

        # The next worker takes the retry.
        second = Worker(c, "q", lambda task: "second", wait_seconds=1)
        async with trio.open_nursery() as n:
            await n.start(second.run)
            done = await api.until(run.run_id, "completed")
            second.stop()
        assert done["state"]["work"] == "second" and done["attempt"] in (None, 2)


class RefuseFor(httpx.AsyncBaseTransport):
    """A real transport that refuses the first `n` connections to paths ending in `suffix`:
    the server is briefly unreachable for those calls."""

    def __init__(self, suffix: str, n: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.suffix = suffix
        self.left = n

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.left > 0 and request.url.path.endswith(self.suffix):
            self.left -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("suffix", ["/complete", "/poll"])
async def test_a_briefly_unreachable_server_loses_no_task(api: Api, suffix: str) -> None:
    transport = RefuseFor(suffix, 6)  # more than the client's own retries
    async with client(api) as c:
        await c.register_workflow(queued("u"))
        runs = [(await c.start_run("u", i)).run_id for i in range(3)]
    async with client(api, transport=transport) as c:
        worker = Worker(c, "q", lambda task: task.input, concurrency=3, wait_seconds=1, rand=lambda: 0.0)
        async with trio.open_nursery() as n:
            await n.start(worker.run)
            for i, run_id in enumerate(runs):
                assert (await api.until(run_id, "completed"))["state"]["work"] == i
            worker.stop()
    assert transport.left == 0 and worker.stats.outage_retries >= 1 and worker.stats.completed == 3


SAGA = {
    "name": "saga",
    "steps": [
        {"name": "reserve", "type": "task", "queue": "q"},
        {"name": "charge", "type": "task", "queue": "q", "retry": {"maxAttempts": 1}, "onFailure": "release"},
        {"name": "ship", "type": "task", "queue": "q", "next": "$end"},
        {"name": "release", "type": "task", "queue": "q", "next": "$fail"},
    ],
}


async def test_tasks_are_routed_by_step_and_compensation_runs_its_own_function(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[tuple[str, str]] = []

    def reserve(task: Task) -> Any:
        ran.append(("reserve", task.step))
        return {"held": task.input["sku"]}

    async def charge(task: Task) -> Any:
        ran.append(("charge", task.step))
        if task.input["card"] == "bad":
            raise TaskFailure("card_declined", retryable=False)
        return {"charged": True}

    def release(task: Task, ctx: TaskContext) -> Any:  # a sync compensation taking the context
        ran.append(("release", task.step))
        return {"released": task.state["reserve"]["held"]}

    handlers: dict[Any, Any] = {
        "reserve": reserve,
        ("saga", "charge"): charge,
        ("*", "release"): release,
        ("other", "ship"): reserve,  # another workflow's step: never this one's
    }
    caplog.set_level(logging.INFO, logger="foliot_client.worker")
    async with client(api) as c:
        await c.register_workflow(SAGA)
        bad = (await c.start_run("saga", {"sku": 7, "card": "bad"})).run_id
        good = (await c.start_run("saga", {"sku": 8, "card": "ok"})).run_id
        worker = Worker(c, "q", handlers, concurrency=2, wait_seconds=1)
        async with trio.open_nursery() as n:
            await n.start(worker.run)
            failed = await api.until(bad, "failed")
            shipless = await api.until(good, "failed")
            worker.stop()
    assert (
        failed["state"]["release"] == {"released": 7} and failed["error"]["class"] == "card_declined"
    )
    assert all(name == step for name, step in ran) and ("release", "release") in ran
    # No handler for `ship` of `saga`: failed at once, not retried, as a push handler's 404 is.
    assert shipless["state"]["charge"] == {"charged": True}
    assert (shipless["error"]["step"], shipless["error"]["class"]) == ("ship", "unknown_step")
    messages = [r.getMessage() for r in caplog.records if r.name == "foliot_client.worker"]
    assert messages[0].startswith(f"worker {worker.worker_id}: polling queue 'q' of app '{api.app}'")
    assert "reserve, saga/charge, */release, other/ship" in messages[0]
    assert any(m.startswith(f"claimed {bad}:1:charge:1: step 'charge' of saga v1") for m in messages)
    assert any("no handler for saga/ship on queue q" in m for m in messages)
    # The last answers (one per run, two workers) may still be on their way back when stop() is
    # called: they are finished, not cut.
    assert re.fullmatch(
        rf"worker {worker.worker_id}: stopping; [0-2] task\(s\) under way get 30s to finish", messages[-2]
    )
    assert messages[-1].endswith("stopped after 6 task(s): 4 completed, 2 failed, 0 released, 0 dropped")


def test_handlers_must_be_functions_keyed_by_step() -> None:
    c = AsyncClient("http://foliot", "key", app="a")
    with pytest.raises(TypeError):
        Worker(c, "q", {("a", "b", "c"): lambda t: 1})
    with pytest.raises(TypeError):
        Worker(c, "q", {"step": "not a function"})
    with pytest.raises(TypeError):
        Worker(c, "q", 42)  # type: ignore[arg-type]
