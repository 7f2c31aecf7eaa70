"""The worker's timing under `MockClock(autojump_threshold=0)`: heartbeat cadence and outage
backoff, with an in-memory transport playing the server (the live-server behaviour is in
test_worker.py; here only *when* things happen is checked, to the millisecond)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from foliot_client import AsyncClient, RetryPolicy, Task, Worker

START = 1_764_460_800.0  # the worker's wall clock, frozen: deadlines are read against it
TASK = {
    "taskToken": "tt_1", "app": "orders", "runId": "run_1", "workflowName": "w", "workflowVersion": 1,
    "step": "s", "attempt": 1, "generation": 1, "idempotencyKey": "run_1:1:s:1",
    "deadline": "2025-11-30T00:00:30.000Z", "businessKey": None, "input": 1, "state": {}, "error": None,
}  # fmt: skip


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class FakeServer:
    """Answers the worker's calls from scripts; records (trio time, path) of each call."""

    def __init__(self, polls: list[Callable[[], httpx.Response]], completes: list[int]) -> None:
        self.polls = polls
        self.completes = completes
        self.calls: list[tuple[float, str]] = []
        self.completed = trio.Event()
        self.bodies: list[Any] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rsplit("/", 1)[-1]
        self.calls.append((trio.current_time(), path))
        if path == "poll":
            if self.polls:
                return self.polls.pop(0)()
            await trio.sleep(float(json.loads(request.content)["waitSeconds"]))
            return httpx.Response(200, json={"tasks": []})
        if path == "heartbeat":
            return httpx.Response(200, json={"cancelRequested": False})
        status = self.completes.pop(0) if self.completes else 200
        if status != 200:
            return httpx.Response(status, json={"error": {"code": "unavailable", "message": "restarting"}})
        self.bodies.append(json.loads(request.content))
        self.completed.set()
        return httpx.Response(200, json={"runId": "run_1", "status": "completed"})


def refused() -> httpx.Response:
    raise httpx.ConnectError("connection refused")


def task() -> httpx.Response:
    return httpx.Response(200, json={"tasks": [TASK]})


def worker(server: FakeServer, handler: Callable[..., Any]) -> Worker:
    client = AsyncClient(
        "http://foliot", "key", app="orders", transport=httpx.MockTransport(server),
        retry=RetryPolicy(max_attempts=1), rand=lambda: 0.0,
    )  # fmt: skip
    return Worker(client, "q", handler, clock=lambda: START, rand=lambda: 0.0, wait_seconds=20)


async def test_heartbeats_every_third_of_the_time_the_task_had(mock_clock: trio.testing.MockClock) -> None:
    async def handler(t: Task) -> str:
        await trio.sleep_until(trio.current_time() + 25)  # 25 s of MockClock time
        return "done"

    server = FakeServer([task], [])
    w = worker(server, handler)
    async with trio.open_nursery() as n:
        t0 = trio.current_time()
        await n.start(w.run)
        await server.completed.wait()
        w.stop()
    beats = [round(at - t0, 3) for at, path in server.calls if path == "heartbeat"]
    assert beats == [10.0, 20.0]  # deadline 30 s away: every 10 s, until the handler returned at 25
    assert server.bodies == [{"output": "done"}]


async def test_outage_backoff_for_polls_and_answers(mock_clock: trio.testing.MockClock) -> None:
    async def handler(t: Task) -> str:  # async: a thread would let the mock clock jump meanwhile
        return "ok"

    server = FakeServer([refused, refused, refused, task], [503, 503])
    w = worker(server, handler)
    async with trio.open_nursery() as n:
        t0 = trio.current_time()
        await n.start(w.run)
        await server.completed.wait()
        w.stop()

    def at(path: str) -> list[float]:
        return [round(when - t0, 3) for when, p in server.calls if p == path]

    # Backoff 0.2 s doubling (the jitter factor pinned at 0.5): 0.1, 0.2, 0.4 between refused
    # polls; the task is answered at once, and again 0.1 and 0.2 later after two 503s.
    assert at("poll")[:4] == [0.0, 0.1, 0.3, 0.7]
    assert at("complete") == [0.7, 0.8, 1.0]
    assert w.stats.outage_retries == 5 and w.stats.completed == 1


async def test_client_backoff_honours_retry_after(mock_clock: trio.testing.MockClock) -> None:
    answers = [
        httpx.Response(429, json={"error": {"code": "overloaded", "message": "", "retryAfter": 2}}),
        httpx.Response(503, json={"error": {"code": "unavailable", "message": ""}}),
        httpx.Response(201, json={**{k: None for k in ("businessKey", "input")}, "runId": "run_1",
                                  "app": "orders", "workflow": "w", "version": 1, "status": "running"}),
    ]  # fmt: skip
    sent: list[tuple[float, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append((trio.current_time(), request.headers.get("Idempotency-Key")))
        return answers.pop(0)

    policy = RetryPolicy(max_attempts=3, initial_interval=1, coefficient=2, max_interval=10)
    async with AsyncClient(
        "http://foliot",
        "k",
        app="orders",
        transport=httpx.MockTransport(handler),
        retry=policy,
        rand=lambda: 1.0,
    ) as c:
        t0 = trio.current_time()
        run = await c.start_run("w")
    assert run.run_id == "run_1"
    assert [round(at - t0, 3) for at, _ in sent] == [0.0, 2.0, 4.0]  # max(1 s, Retry-After 2), then 2 s
    assert len({key for _, key in sent}) == 1 and sent[0][1] is not None  # one key for all tries


def test_blocking_client_sleeps_through_the_injected_sleep() -> None:
    from foliot_client import Client, errors

    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    policy = RetryPolicy(max_attempts=3, initial_interval=0.5, coefficient=3, max_interval=10)
    c = Client("http://foliot", "k", app="o", transport=httpx.MockTransport(handler), retry=policy,
               sleep=slept.append, rand=lambda: 1.0)  # fmt: skip
    with c, pytest.raises(errors.TransportError) as refused_error:
        c.cancel_run("run_1")  # not safe to repeat, but it never left: retried
    assert slept == [0.5, 1.5] and refused_error.value.connected is False
