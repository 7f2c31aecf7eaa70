"""Waiting for a run's result and following its events as they come: `wait_for_run` and
`follow_events`, sync and async, against a live Foliot (both stores); and *when* they read,
back off and give up, under `MockClock(autojump_threshold=0)` with an in-memory server."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from foliot_client import AsyncClient, Client, Event, Polling, RetryPolicy, errors

from ..conftest import Api
from ..helpers import advance

FAST = RetryPolicy(max_attempts=2, initial_interval=0.001, max_interval=0.001)
QUICK = Polling(interval=0.001, max_interval=0.01)
NAP = {
    "name": "nap",
    "steps": [
        {"name": "w", "type": "wait", "signal": "go"},
        {"name": "doze", "type": "sleep", "duration": "1ms"},
    ],
}


async def test_wait_for_the_result_while_following_the_events(api: Api) -> None:
    async with AsyncClient(api.running.url, api.key, app=api.app, retry=FAST) as c:
        await c.register_workflow(NAP)
        run = await c.start_run("nap")
        seen: list[Event] = []
        first = trio.Event()
        result: dict[str, Any] = {}

        async def follow() -> None:
            async for event in c.follow_events(run.run_id, polling=QUICK):
                seen.append(event)
                first.set()

        async def wait() -> None:
            result["run"] = await c.wait_for_run(run.run_id, polling=QUICK)

        with trio.fail_after(30):
            async with trio.open_nursery() as n:
                n.start_soon(follow)
                n.start_soon(wait)
                await first.wait()
                waiting = await c.wait_for_run(run.run_id, statuses={"waiting"}, polling=QUICK)
                assert waiting.status == "waiting" and "run" not in result
                await c.send_signal("go", run_id=run.run_id)
            # Both ended on their own: the run closed.
        assert result["run"].status == "completed" and result["run"].run_id == run.run_id
        history = await api.events(run.run_id)
        assert [(e.seq, e.type) for e in seen] == [(e["seq"], e["type"]) for e in history]
        assert seen[0].type == "run_started" and seen[-1].type == "run_completed"
        # Resuming after a seq gives the rest, then ends at once (the run is closed).
        rest = [e.seq async for e in c.follow_events(run.run_id, after=seen[2].seq, polling=QUICK)]
        assert rest == [e.seq for e in seen[3:]]
        with pytest.raises(errors.NotFound):
            await c.wait_for_run("run_nope")


async def test_blocking_client_waits_and_follows_in_a_thread(api: Api) -> None:
    async with AsyncClient(api.running.url, api.key, app=api.app, retry=FAST) as c:
        await c.register_workflow(NAP)
        run = await c.start_run("nap")
    first = threading.Event()
    seen: list[Event] = []
    result: dict[str, Any] = {}

    with Client(api.running.url, api.key, app=api.app, retry=FAST) as blocking:

        def follow() -> None:
            for event in blocking.follow_events(run.run_id, polling=QUICK):
                seen.append(event)
                first.set()

        def wait() -> None:
            result["run"] = blocking.wait_for_run(run.run_id, timeout=60, polling=QUICK)

        with trio.fail_after(30):
            async with trio.open_nursery() as n:
                n.start_soon(trio.to_thread.run_sync, follow)
                n.start_soon(trio.to_thread.run_sync, wait)
                await trio.to_thread.run_sync(first.wait)
                await api.until(run.run_id, "waiting")
                assert "run" not in result
                r = await api.call("POST", f"/apps/{api.app}/signals", {"name": "go", "runId": run.run_id})
                assert r.status_code == 202
    assert result["run"].status == "completed"
    assert [e.seq for e in seen] == [e["seq"] for e in await api.events(run.run_id)]
    assert seen[-1].type == "run_completed"


# --- timing, with an in-memory server ---------------------------------------------------------

RUN = {"runId": "run_1", "app": "orders", "workflow": "w", "version": 1, "status": "waiting"}


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class Script:
    """Answers `GET …/runs/run_1` with the run (closed from `close_at` on, trio time) and
    `GET …/events` with the events appended so far; records (time, kind) of each read."""

    def __init__(self, now: Any, close_at: float | None = None) -> None:
        self.now = now
        self.close_at = close_at
        self.events: list[dict[str, Any]] = []
        self.reads: list[tuple[float, str]] = []

    def closed(self) -> bool:
        return self.close_at is not None and self.now() >= self.close_at

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            self.reads.append((self.now(), "events"))
            after = int(request.url.params.get("after", 0))
            limit = int(request.url.params.get("limit", 100))
            rows = [e for e in self.events if e["seq"] > after]
            page = rows[:limit]
            cursor = str(page[-1]["seq"]) if len(rows) > limit else None
            return httpx.Response(200, json={"events": page, "nextCursor": cursor})
        self.reads.append((self.now(), "run"))
        return httpx.Response(200, json={**RUN, "status": "completed" if self.closed() else "waiting"})

    def add(self, kind: str) -> None:
        self.events.append({"seq": len(self.events) + 1, "type": kind, "generation": 1})


def fake(script: Script) -> AsyncClient:
    return AsyncClient("http://foliot", "key", app="orders", transport=httpx.MockTransport(script))


async def test_wait_backs_off_and_gives_up_at_the_timeout(mock_clock: trio.testing.MockClock) -> None:
    script = Script(trio.current_time)
    start = trio.current_time()
    async with fake(script) as c:
        with pytest.raises(errors.WaitTimeout) as late:
            await c.wait_for_run("run_1", timeout=10, polling=Polling(interval=1, max_interval=4))
    assert isinstance(late.value, TimeoutError) and late.value.run.status == "waiting"
    assert [t - start for t, _ in script.reads] == [0, 1, 3, 7, 10]  # 1, 2, 4, then cut to the timeout


async def test_wait_returns_at_the_first_read_that_sees_it_closed(mock_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    script = Script(trio.current_time, close_at=start + 5)
    async with fake(script) as c:
        run = await c.wait_for_run("run_1", polling=Polling(interval=1, max_interval=2))
    assert run.status == "completed" and trio.current_time() - start == 5
    assert [t - start for t, _ in script.reads] == [0, 1, 3, 5]


async def test_follow_reads_new_events_resets_its_backoff_and_drains_after_the_close(
    mock_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    script = Script(trio.current_time, close_at=start + 20)
    for _ in range(1500):  # more than one page: the cursor is followed without waiting
        script.add("filler")
    seen: list[tuple[float, int]] = []
    async with fake(script) as c, trio.open_nursery() as n:

        async def later() -> None:
            await advance(6)
            script.add("signal_received")
            await advance(14)  # t = 20: the run closes with its last event
            script.add("run_completed")

        n.start_soon(later)
        async for event in c.follow_events("run_1", polling=Polling(interval=1, max_interval=4)):
            seen.append((trio.current_time() - start, event.seq))
    assert [s for _, s in seen] == list(range(1, 1503))
    reads = [(t - start, kind) for t, kind in script.reads]
    assert reads[:3] == [(0, "events"), (0, "events"), (0, "run")]  # two pages, then the run
    # Idle reads back off 1, 2, 4, 4 s; the event at t=6 is read at t=7, and the backoff restarts.
    assert [t for t, kind in reads if kind == "events"] == [0, 0, 1, 3, 7, 8, 10, 14, 18, 22, 22]
    assert seen[1500] == (7, 1501) and seen[-1] == (22, 1502)
    # The run was seen closed at t=22; one more read of the events drained its last one.
    assert reads[-2:] == [(22, "run"), (22, "events")]


async def test_follow_gives_up_at_its_timeout(mock_clock: trio.testing.MockClock) -> None:
    script = Script(trio.current_time)
    script.add("run_started")
    got: list[int] = []
    async with fake(script) as c:
        with pytest.raises(errors.WaitTimeout) as late:
            async for event in c.follow_events("run_1", timeout=5, polling=Polling(1, 1)):
                got.append(event.seq)
    assert got == [1] and late.value.run.status == "waiting"
    assert script.reads[-1][0] - script.reads[0][0] == 5


def test_the_blocking_client_sleeps_the_same_way() -> None:
    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    script = Script(lambda: clock[0], close_at=12)
    with Client(
        "http://foliot", "key", app="orders", transport=httpx.MockTransport(script), sleep=sleep,
        clock=lambda: clock[0],
    ) as c:  # fmt: skip
        with pytest.raises(errors.WaitTimeout):
            c.wait_for_run("run_1", timeout=10, polling=Polling(interval=1, max_interval=4))
        assert slept == [1, 2, 4, 3]
        slept.clear()
        assert c.wait_for_run("run_1", polling=Polling(interval=1, max_interval=4)).status == "completed"
        assert slept == [1, 2]  # read at t = 10, 11, then 13: closed since 12
        slept.clear()
        script.add("run_completed")
        assert [e.type for e in c.follow_events("run_1")] == ["run_completed"] and slept == []


def test_polling_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Polling(interval=0)
    with pytest.raises(ValueError):
        Polling(interval=3, max_interval=2)
