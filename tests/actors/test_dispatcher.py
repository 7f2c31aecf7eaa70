"""The dispatcher alone, on httpx's MockTransport under MockClock: bounded senders, per-app
fairness, aborts of queued and in-flight pushes, deadlines counted from the send."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import httpx
import pytest
import trio
from trio.testing import MockClock

from foliot.actors.clock import Clock
from foliot.actors.dispatcher import Dispatcher, Target
from foliot.core.workflow.duration import parse_timestamp
from foliot.core.workflow.machine import Accepted, Completed, Failed, TaskAnswer
from foliot.core.workflow.model import Run, TaskRef
from foliot.observe.metrics import Metrics

from .conftest import advance

T0 = 1_800_000_000_000

Handler = Callable[[dict[str, Any]], Awaitable[httpx.Response]]


def make_run(app: str, n: int, timeout_ms: int = 10_000) -> tuple[Run, TaskRef]:
    task = TaskRef(f"tok-{app}-{n}", "t", 1, 1, None, None)
    run = Run(
        run_id=f"run-{app}-{n}",
        app=app,
        workflow="wf",
        version=1,
        status="running",
        input={"n": n},
        state={},
        generation=1,
        created_at=T0,
        updated_at=T0,
        trace_id="0" * 32,
        current_step="t",
        attempt=1,
        task=task,
    )
    return run, task


@attrs.define
class Sent:
    at_ms: int  # the clock when the handler saw it
    body: dict[str, Any]
    headers: dict[str, str]


@attrs.define
class Rig:
    dispatcher: Dispatcher
    clock: Clock
    sent: list[Sent]
    answers: list[tuple[str, TaskAnswer]]
    in_flight: list[int]  # [now, max]
    handler: list[Handler]
    answered: list[trio.Event]
    gone: set[str]  # runs whose partition left this node: `may_send` says no

    def push(self, app: str, n: int, timeout_ms: int = 10_000) -> TaskRef:
        run, task = make_run(app, n)
        self.dispatcher.push(run, task, "/foliot/wf/t", timeout_ms)
        return task

    def hold(self) -> trio.Event:
        """The handler answers 200 only once the returned event is set."""
        release = trio.Event()

        async def hold(body: dict[str, Any]) -> httpx.Response:
            await release.wait()
            return reply()

        self.handler[0] = hold
        return release

    async def until_answers(self, count: int) -> None:
        while len(self.answers) < count:
            self.answered[0] = trio.Event()
            await self.answered[0].wait()


def reply(status: int = 200, value: Any = None) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(value).encode())


@pytest.fixture
def limits() -> dict[str, int]:
    return {"concurrency": 4, "per_app": 3}


@pytest.fixture
async def rig(autojump_clock: MockClock, limits: dict[str, int]) -> AsyncIterator[Rig]:
    clock = Clock(T0)
    sent: list[Sent] = []
    answers: list[tuple[str, TaskAnswer]] = []
    in_flight = [0, 0]

    async def default(body: dict[str, Any]) -> httpx.Response:
        return reply(200, {"n": body["input"]["n"]})

    handler: list[Handler] = [default]
    answered = [trio.Event()]
    gone: set[str] = set()

    def answer(run_id: str, outcome: TaskAnswer) -> None:
        answers.append((run_id, outcome))
        answered[0].set()

    async def transport(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(Sent(clock.now(), body, dict(request.headers)))
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            return await handler[0](body)
        finally:
            in_flight[0] -= 1

    async def target(app: str) -> Target:
        return Target("http://handler.test", ("whsec_test",))

    async with httpx.AsyncClient(transport=httpx.MockTransport(transport)) as client:
        dispatcher = Dispatcher(
            client,
            now=clock.now,
            target=target,
            answer=answer,
            sync_cap_ms=30_000,
            max_body=1 << 20,
            metrics=Metrics(),
            may_send=lambda owner: owner not in gone,
            **limits,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(dispatcher.serve)
            yield Rig(dispatcher, clock, sent, answers, in_flight, handler, answered, gone)
            nursery.cancel_scope.cancel()


async def test_a_burst_far_over_the_concurrency_all_succeeds(rig: Rig, autojump_clock: MockClock) -> None:
    async def near_timeout(body: dict[str, Any]) -> httpx.Response:
        await advance(9.5)  # the step timeout is 10 s
        return reply(200, "done")

    rig.handler[0] = near_timeout
    for n in range(500):
        rig.push("a", n)
    await trio.testing.wait_all_tasks_blocked()
    assert rig.dispatcher.backlog == 500 - 3 and rig.dispatcher.inflight == 3
    await rig.until_answers(500)
    assert all(a.outcome == Completed("done") for _, a in rig.answers)  # 0 timeouts
    assert rig.in_flight[1] == 3 and rig.dispatcher.max_inflight == 3  # the per-app cap
    assert rig.dispatcher.metrics.outcome_counts() == {"ok": 500}
    # Each was given the whole timeout from its own send, however long it queued.
    for s in rig.sent:
        assert parse_timestamp(s.body["deadline"]) == s.at_ms + 10_000
        assert s.headers["foliot-deadline"] == s.body["deadline"]
    assert rig.sent[-1].at_ms - rig.sent[0].at_ms > 100 * 9_500


@pytest.mark.parametrize("limits", [{"concurrency": 4, "per_app": 4}])
async def test_never_more_than_the_concurrency_in_flight(rig: Rig, autojump_clock: MockClock) -> None:
    async def slow(body: dict[str, Any]) -> httpx.Response:
        await advance(1)
        return reply()

    rig.handler[0] = slow
    for n in range(40):
        rig.push(f"app{n % 5}", n)
    await rig.until_answers(40)
    assert rig.in_flight[1] == 4 and rig.dispatcher.max_inflight == 4
    assert rig.dispatcher.inflight == 0 and rig.dispatcher.backlog == 0


@pytest.mark.parametrize(
    "limits", [{"concurrency": 4, "per_app": 3}, {"concurrency": 4, "per_app": 4}], ids=["spare", "full"]
)
async def test_one_apps_burst_does_not_starve_another(rig: Rig, autojump_clock: MockClock) -> None:
    async def slow(body: dict[str, Any]) -> httpx.Response:
        await advance(1)
        return reply()

    rig.handler[0] = slow
    for n in range(1000):
        rig.push("a", n)
    await advance(2.5)  # a's backlog is draining
    rig.push("b", 0)
    await trio.testing.wait_all_tasks_blocked()
    await advance(0.6)
    (b_sent,) = [s for s in rig.sent if s.body["app"] == "b"]
    # With a spare sender (a is capped at 3 of 4) b goes out at once; with none, b takes the
    # very next sender that frees up, ahead of a's 990 queued pushes.
    assert b_sent.at_ms - T0 == (2_500 if rig.dispatcher.per_app < 4 else 3_000)
    assert rig.dispatcher.app_backlog("a") > 980
    await advance(1.1)
    assert [r for r, _ in rig.answers if r.startswith("run-b")] == ["run-b-0"]


@pytest.mark.parametrize("limits", [{"concurrency": 2, "per_app": 2}])
async def test_round_robin_across_apps(rig: Rig, autojump_clock: MockClock) -> None:
    async def slow(body: dict[str, Any]) -> httpx.Response:
        await advance(1)
        return reply()

    rig.handler[0] = slow
    for n in range(10):
        rig.push("a", n)
    for n in range(3):
        rig.push("b", n)
    for n in range(3):
        rig.push("c", n)
    await rig.until_answers(16)
    order = "".join(s.body["app"] for s in rig.sent)
    assert order.startswith("ab") and order[2:8].count("a") <= 2
    assert order.endswith("aaaa")


async def test_abort_drops_a_queued_push_and_cancels_one_in_flight(
    rig: Rig, autojump_clock: MockClock
) -> None:
    release = rig.hold()
    tasks = [rig.push("a", n) for n in range(6)]
    await trio.testing.wait_all_tasks_blocked()
    assert rig.dispatcher.inflight == 3 and rig.dispatcher.backlog == 3
    assert rig.dispatcher.is_queued(tasks[4].token)
    rig.dispatcher.abort(tasks[4].token)  # queued: dropped
    rig.dispatcher.abort(tasks[0].token)  # in flight: cancelled
    assert rig.dispatcher.backlog == 2 and rig.dispatcher.app_backlog("a") == 2
    assert rig.dispatcher.inflight == 2 and not rig.dispatcher.is_inflight(tasks[0].token)
    await trio.testing.wait_all_tasks_blocked()
    release.set()
    await rig.until_answers(4)
    await trio.testing.wait_all_tasks_blocked()
    answered = sorted(run_id for run_id, _ in rig.answers)
    assert answered == ["run-a-1", "run-a-2", "run-a-3", "run-a-5"]
    assert "tok-a-4" not in [s.body["taskToken"] for s in rig.sent]


async def test_a_push_whose_run_left_this_node_while_queued_is_never_sent(
    rig: Rig, autojump_clock: MockClock
) -> None:
    # Checked at the send, not only when queued: a node resumed after its lease ended (SIGSTOP,
    # a late loop) may run a sender before its lease keeper has dropped the partition.
    release = rig.hold()
    for n in range(5):
        rig.push("a", n)
    await trio.testing.wait_all_tasks_blocked()
    assert rig.dispatcher.inflight == 3 and rig.dispatcher.backlog == 2
    rig.gone.add("run-a-3")
    release.set()
    await rig.until_answers(4)
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(r for r, _ in rig.answers) == ["run-a-0", "run-a-1", "run-a-2", "run-a-4"]
    assert "tok-a-3" not in [s.body["taskToken"] for s in rig.sent]
    assert rig.dispatcher.inflight == 0 and rig.dispatcher.backlog == 0


async def test_a_202_carries_the_send_time_deadline(rig: Rig, autojump_clock: MockClock) -> None:
    async def first_slow(body: dict[str, Any]) -> httpx.Response:
        if body["input"]["n"] < 3:
            await advance(7)
            return reply()
        return reply(202)

    rig.handler[0] = first_slow
    for n in range(4):
        rig.push("a", n, timeout_ms=60_000)
    await rig.until_answers(4)
    (last,) = [s for s in rig.sent if s.body["input"]["n"] == 3]
    assert last.at_ms == T0 + 7_000  # it waited for a sender
    ((_, accepted),) = [(r, a) for r, a in rig.answers if r == "run-a-3"]
    assert accepted.outcome == Accepted(T0 + 7_000 + 60_000)


async def test_the_http_call_is_bounded_by_the_timeout_from_the_send(
    rig: Rig, autojump_clock: MockClock
) -> None:
    async def hang(body: dict[str, Any]) -> httpx.Response:
        await advance(3600)
        return reply()

    rig.handler[0] = hang
    for n in range(4):
        rig.push("a", n, timeout_ms=5_000)
    await rig.until_answers(4)
    timed_out = Failed("timeout", "the attempt passed its deadline", True)
    assert all(a.outcome == timed_out for _, a in rig.answers)
    assert [s.at_ms - T0 for s in rig.sent] == [0, 0, 0, 5_000]  # the 4th had its full 5 s too


async def test_a_queued_push_costs_little_memory(rig: Rig, autojump_clock: MockClock) -> None:
    import tracemalloc

    runs = [make_run("a", n) for n in range(2000)]
    release = rig.hold()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for run, task in runs:
            rig.dispatcher.push(run, task, "/foliot/wf/t", 10_000)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    per_push = grown / len(runs)
    assert per_push < 300, per_push  # the Push record, a dict slot, a deque slot
    release.set()
