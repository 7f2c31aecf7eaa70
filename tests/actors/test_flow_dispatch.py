"""Flow control in the dispatcher (issue 23), on httpx's MockTransport under MockClock: aged
priorities within an app, weighted round-robin across apps (a big backlog cannot hold another
app's push back), rate-limit tokens (spacing per key, app limits, held pushes aborted, a bucket
that survives a restart of the dispatcher)."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import pytest
import trio
from trio.testing import MockClock

from foliot.actors.clock import Clock
from foliot.actors.dispatcher import Dispatcher, Target
from foliot.actors.ratelimit import MemoryBuckets, RateLimiter
from foliot.core.workflow.flow import Bucket, RateLimit, app_bucket, step_bucket
from foliot.core.workflow.machine import TaskAnswer
from foliot.core.workflow.model import Run, TaskRef
from foliot.observe.metrics import Metrics

from ..helpers import advance

T0 = 1_800_000_000_000


def make_run(app: str, n: int, input: Any = None) -> tuple[Run, TaskRef]:
    task = TaskRef(f"tok-{app}-{n}", "t", 1, 1, None, None)
    run = Run(
        f"run-{app}-{n}", app, "wf", 1, "running", input if input is not None else {"n": n}, {}, 1, T0, T0,
        "0" * 32, current_step="t", attempt=1, task=task,
    )  # fmt: skip
    return run, task


@attrs.define
class Rig:
    dispatcher: Dispatcher
    clock: Clock
    sent: list[tuple[int, str]]  # (ms, token) as the handler saw them
    answers: list[tuple[str, TaskAnswer]]
    targets: dict[str, Target]
    buckets: MemoryBuckets
    delays: list[float]
    handler_s: list[float]  # how long the handler takes

    def push(self, app: str, n: int, priority: int = 3, buckets: tuple[Bucket, ...] = ()) -> TaskRef:
        run, task = make_run(app, n)
        self.dispatcher.push(run, task, "/foliot/wf/t", 60_000, priority, buckets)
        return task

    async def until(self, count: int) -> None:
        while len(self.sent) < count:
            await advance(0.01)


@pytest.fixture
def limits() -> dict[str, int]:
    return {"concurrency": 1, "per_app": 1}


@asynccontextmanager
async def open_rig(
    limits: dict[str, int], buckets: MemoryBuckets | None = None, clock: Clock | None = None
) -> AsyncIterator[Rig]:
    clock = clock or Clock(T0)
    buckets = buckets or MemoryBuckets()
    sent: list[tuple[int, str]] = []
    answers: list[tuple[str, TaskAnswer]] = []
    targets: dict[str, Target] = {}
    delays: list[float] = []
    handler_s = [0.01]

    async def transport(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append((clock.now(), body["taskToken"]))
        await advance(handler_s[0])
        return httpx.Response(200, content=b"{}")

    async def target(app: str) -> Target:
        return targets.get(app, Target("http://handler.test", ("whsec_test",)))

    async with httpx.AsyncClient(transport=httpx.MockTransport(transport)) as client:
        dispatcher = Dispatcher(
            client,
            now=clock.now,
            target=target,
            answer=lambda run_id, answer: answers.append((run_id, answer)),
            sync_cap_ms=30_000,
            max_body=1 << 20,
            metrics=Metrics(),
            limiter=RateLimiter(buckets, clock.now),
            aging=10.0,
            rate_delay=delays.append,
            **limits,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(dispatcher.serve)
            yield Rig(dispatcher, clock, sent, answers, targets, buckets, delays, handler_s)
            nursery.cancel_scope.cancel()


@pytest.fixture
async def rig(limits: dict[str, int]) -> AsyncIterator[Rig]:
    async with open_rig(limits) as r:
        yield r


async def test_within_an_app_higher_priority_goes_first(rig: Rig, autojump_clock: MockClock) -> None:
    rig.push("a", 0)  # taken at once by the one sender
    await rig.until(1)
    for n, priority in [(1, 5), (2, 3), (3, 1), (4, 3), (5, 1)]:
        rig.push("a", n, priority)
    await rig.until(6)
    assert [t for _, t in rig.sent] == ["tok-a-0", "tok-a-3", "tok-a-5", "tok-a-2", "tok-a-4", "tok-a-1"]


async def test_aging_bounds_how_long_a_low_priority_push_waits(rig: Rig, autojump_clock: MockClock) -> None:
    """Level-1 pushes arrive faster than they are sent: the level-5 one (aging 10 s) is overtaken
    only by those that arrived less than 40 s after it, and goes before every later one."""
    rig.handler_s[0] = 0.5
    rig.push("a", 0, 1)
    await rig.until(1)
    rig.push("a", 999, 5)
    arrived = {"tok-a-999": trio.current_time()}
    for n in range(1, 121):
        await advance(0.4)
        arrived[rig.push("a", n, 1).token] = trio.current_time()
    await rig.until(122)
    order = [t for _, t in rig.sent[1:]]
    low = order.index("tok-a-999")
    assert low > 50  # it did wait behind urgent pushes
    assert all(arrived[t] - arrived["tok-a-999"] < 40 for t in order[:low])
    assert all(arrived[t] - arrived["tok-a-999"] > 40 for t in order[low + 1 :])


async def test_weighted_round_robin_an_apps_backlog_cannot_hold_back_another(
    rig: Rig, autojump_clock: MockClock
) -> None:
    """App a has 100,000 queued pushes; app b's one push is the next but one sent."""
    for n in range(100_000):
        rig.push("a", n)
    await rig.until(1)
    rig.push("b", 0)
    await rig.until(3)
    # a-0 was in flight: b's push is the next one or the one after (a's turn of weight 1)
    assert "tok-b-0" in [t for _, t in rig.sent][1:3]
    assert rig.dispatcher.backlog > 99_990


@pytest.mark.parametrize("limits", [{"concurrency": 64, "per_app": 48}])
async def test_the_per_app_cap_keeps_a_sender_free_while_the_pacer_holds_the_limit_low(
    rig: Rig, autojump_clock: MockClock
) -> None:
    """At the pacer's slow start (4 senders allowed, as after a lagging loop) an app with slow
    pushes gets 3 of them, and another app's push goes out at once, not after a slow one."""
    rig.handler_s[0] = 5.0
    assert (rig.dispatcher.limit, rig.dispatcher.app_cap()) == (4, 3)
    for n in range(1000):
        rig.push("a", n)
    await rig.until(3)
    rig.push("b", 0)
    await rig.until(4)
    at, token = rig.sent[3]
    assert token == "tok-b-0" and at < T0 + 100  # before any of a's ended, before the limit grew
    await advance(7.0)  # the loop keeps up: the limit grows to 64, the cap with it
    assert (rig.dispatcher.limit, rig.dispatcher.app_cap()) == (64, 48)
    assert rig.dispatcher.inflight == 48


async def test_weights_share_the_senders_turns(rig: Rig, autojump_clock: MockClock) -> None:
    rig.targets["a"] = Target("http://handler.test", ("whsec_test",), weight=3)
    rig.dispatcher.set_weight("a", 3)
    for n in range(9):
        rig.push("a", n)
        rig.push("b", n)
    await rig.until(12)
    apps = "".join(t.split("-")[1] for _, t in rig.sent[:12])
    assert apps.count("a") == 9 and apps.count("b") == 3  # three of a for each one of b


@pytest.mark.parametrize("limits", [{"concurrency": 8, "per_app": 8}])
async def test_a_rate_limited_step_is_spaced_per_key(rig: Rig, autojump_clock: MockClock) -> None:
    limit = RateLimit(10, 1000, ("input", "tenant"), "input.tenant")  # one per 100 ms per tenant
    for n in range(5):
        for tenant in ("acme", "globex"):
            run, task = make_run("a", n * 10 + len(tenant), {"tenant": tenant})
            bucket = step_bucket("a", "wf", "t", limit, {"input": run.input, "state": {}})
            rig.dispatcher.push(run, task, "/foliot/wf/t", 60_000, 3, (bucket,))
    await rig.until(10)
    by_key: dict[str, list[int]] = {}
    for ms, token in rig.sent:
        by_key.setdefault(token.split("-")[-1][-1], []).append(ms)
    for times in by_key.values():  # the i-th send of a key never before its slot, i * 100 ms
        assert all(ms - T0 >= 100 * i for i, ms in enumerate(sorted(times))), times
    assert max(ms for ms, _ in rig.sent) - T0 < 500  # 5 per key: the last at ~400 ms
    assert len([d for d in rig.delays if d > 0]) == 8  # all but the first of each key waited


@pytest.mark.parametrize("limits", [{"concurrency": 8, "per_app": 8}])
async def test_an_apps_rate_limit_spaces_all_its_pushes_and_a_held_push_can_be_aborted(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.targets["a"] = Target(
        "http://handler.test", ("whsec_test",), rate=app_bucket("a", RateLimit(2, 1000))
    )
    tasks = [rig.push("a", n) for n in range(4)]
    rig.push("b", 0)  # another app is not held back by a's limit
    await advance(0.1)
    assert rig.dispatcher.delayed == 3
    label, due = rig.dispatcher.delayed_until(tasks[1].token) or ("", 0)
    # Its slot: 500 ms after a's first token was taken, which may trail the start by the
    # handler call another sender had under way (Trio's scheduling order decides).
    assert label == "app a" and T0 + 500 <= due <= T0 + 525
    assert (rig.dispatcher.delayed_until(tasks[3].token) or ("", 0))[1] == due + 1000  # two ahead
    rig.dispatcher.abort(tasks[2].token)
    assert rig.dispatcher.delayed == 2
    assert (rig.dispatcher.delayed_until(tasks[3].token) or ("", 0))[1] == due + 500  # one ahead now
    await advance(2)
    sent = {t: ms - T0 for ms, t in rig.sent}
    assert sent["tok-b-0"] < 50 and sent["tok-a-0"] < 50
    # Never before its slot; late by at most one handler call (a sender finishing the push it had
    # when the slot came: Trio's scheduling order decides), the precision docs/api.md gives. The
    # aborted push held no token: the one after it goes in its turn, 500 ms after a-1.
    assert 500 <= sent["tok-a-1"] <= 525 and "tok-a-2" not in sent and 1000 <= sent["tok-a-3"] <= 1025
    assert rig.dispatcher.delayed == 0


async def test_a_bucket_survives_a_restart(autojump_clock: MockClock) -> None:
    """The bucket's state is stored: a restarted dispatcher does not get a fresh burst; but the
    pushes that only waited took no token, so they do not push the next one later."""
    store = MemoryBuckets()
    bucket = Bucket("s/a/wf/t", 1_000_000, "step t")  # one a second
    clock = Clock(T0)
    async with open_rig({"concurrency": 4, "per_app": 4}, store, clock) as first:
        for n in range(3):
            first.push("a", n, buckets=(bucket,))
        await first.until(1)
        await advance(0.1)  # the node stops with two pushes held
    async with open_rig({"concurrency": 4, "per_app": 4}, store, clock) as second:
        second.push("a", 10, buckets=(bucket,))  # the re-delivered attempt after the restart
        await second.until(1)
        assert 1000 <= second.sent[0][0] - T0 <= 1050  # after the one token taken before it


async def test_an_idle_bucket_is_forgotten_and_a_busy_one_kept(autojump_clock: MockClock) -> None:
    """In memory: a bucket whose TAT is past the bound goes (it is full again: a send after it
    goes at once, as after a bucket never used); one moved on since stays; a pass deletes at
    most `limit`, whatever the number of buckets kept."""
    store = MemoryBuckets()
    bucket = Bucket("s/a/wf/t", 1_000_000, "step t")
    clock = Clock(T0)
    async with open_rig({"concurrency": 4, "per_app": 4}, store, clock) as rig:
        rig.push("a", 0, buckets=(bucket,))
        rig.push("a", 1, buckets=(bucket,))
        await rig.until(2)  # the second went a second after the first: the TAT is T0 + 2 s
        assert store.tat == {"s/a/wf/t": (T0 + 2000) * 1000}
        now_us = clock.now() * 1000
        assert await store.prune_rate_buckets(now_us, 10) == 0  # its last slot has not ended yet
        await advance(5)
        for n in range(5):  # five more buckets, each used once now
            await store.take_rate_tokens([(f"other-{n}", 1_000_000)], 1, clock.now() * 1000)
        assert await store.prune_rate_buckets(clock.now() * 1000, 10) == 1  # only the first is idle
        assert "s/a/wf/t" not in store.tat
        rig.push("a", 2, buckets=(bucket,))
        await rig.until(3)
        assert rig.sent[2][0] - clock.now() > -50  # it went at once: a full bucket
        await advance(10)
        assert await store.prune_rate_buckets(clock.now() * 1000, 2) == 2  # bounded
        assert await store.prune_rate_buckets(clock.now() * 1000, 10) == 4
        assert store.tat == {}


class CountingBuckets(MemoryBuckets):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def take_rate_tokens(
        self, buckets: Any, count: int, now_us: int
    ) -> tuple[int, tuple[str, int] | None]:
        self.asked += 1
        return await super().take_rate_tokens(buckets, count, now_us)


async def test_sends_waiting_for_a_bucket_go_in_turn_and_ask_storage_about_once_each(
    autojump_clock: MockClock,
) -> None:
    """Sends waiting for one bucket wait in a line: only its first is woken for the bucket's
    next free instant, so storage is asked about once per send, not once per send per slot."""
    store = CountingBuckets()
    bucket = Bucket("s/a/wf/t", 100_000, "step t")  # ten a second
    async with open_rig({"concurrency": 8, "per_app": 8}, store) as rig:
        for n in range(50):
            rig.push("a", n, buckets=(bucket,))
        await rig.until(50)
        times = [ms for ms, _ in rig.sent]
        assert all(b - a >= 100 for a, b in itertools.pairwise(times)), times
        assert times[-1] - T0 <= 4900 + 50
        assert [t for _, t in rig.sent] == [f"tok-a-{n}" for n in range(50)]  # in the order they came
        assert store.asked <= 52, store.asked
        assert rig.dispatcher.delayed == 0 and rig.dispatcher._lines == {}


async def test_a_bucket_faster_than_one_a_millisecond_keeps_its_rate(autojump_clock: MockClock) -> None:
    """Ten thousand a second: each millisecond's ten tokens are taken in one statement and
    given to the next ten sends of the line, so 2,000 sends take 200 ms, never more than ten in
    a millisecond, and storage is asked about once a millisecond."""
    store = CountingBuckets()
    bucket = Bucket("s/a/wf/t", 100, "step t")
    async with open_rig({"concurrency": 64, "per_app": 64}, store) as rig:
        rig.handler_s[0] = 0.0
        for n in range(2000):
            rig.push("a", n, buckets=(bucket,))
        await rig.until(2000)
        per_ms: dict[int, int] = {}
        for ms, _ in rig.sent:
            per_ms[ms] = per_ms.get(ms, 0) + 1
        assert max(per_ms.values()) <= 10 and 195 <= rig.sent[-1][0] - T0 <= 205, per_ms
        assert store.asked <= 220, store.asked
