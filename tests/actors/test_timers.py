"""Durable timers and deadlines under MockClock(autojump_threshold=0): days take milliseconds."""

from __future__ import annotations

import bisect
import itertools
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.lowlevel
from trio.testing import MockClock

from foliot.actors.clock import Clock
from foliot.actors.timer_wheel import TimerWheel
from foliot.signing import verify_signature
from foliot.storage.base import TimerRecord

from .conftest import DAY, T0, Env, advance, ok


def _elapsed(start: float) -> float:
    return trio.current_time() - start


async def test_a_14_day_sleep(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {
            "name": "nap",
            "steps": [{"name": "s", "type": "sleep", "duration": "14d"}, {"name": "t", "type": "task"}],
        }
    )
    t0 = trio.current_time()
    run_id = await env.start("nap")
    run = await env.until(run_id, "sleeping")
    assert run.wake_at is not None
    assert abs(run.wake_at - (env.engine.clock.now() + 14 * 86_400_000)) < 1000
    await env.until(run_id, "completed")
    assert len(env.pushes) == 1
    assert 14 * DAY <= env.pushes[0].at - t0 < 14 * DAY + 1


async def test_signature_verifies_over_the_raw_body(env: Env, autojump_clock: MockClock) -> None:
    await env.register({"name": "one", "steps": [{"name": "t", "type": "task"}]})
    await env.start("one", {"html": "<b>&amp;</b>", "ls": "\u2028"})
    await env.until_pushes(1)
    # The transport saw the body as sent; rebuild the exact bytes from the engine's own encoder.
    from foliot.core.workflow.payload import compact_json

    raw = compact_json(env.pushes[0].body)
    header = env.pushes[0].headers["foliot-signature"]
    now = env.engine.clock.now() / 1000
    assert verify_signature(raw, header, ["whsec_test"], now=now)


async def test_wait_timeout_goes_to_on_timeout(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {
            "name": "pay",
            "steps": [
                {"name": "w", "type": "wait", "signal": "paid", "timeout": "2d", "onTimeout": "release"},
                {"name": "ship", "type": "task", "next": "$end"},
                {"name": "release", "type": "task", "next": "$fail"},
            ],
        }
    )
    t0 = trio.current_time()
    run_id = await env.start("pay")
    run = await env.until(run_id, "failed")
    assert [p.body["step"] for p in env.pushes] == ["release"]
    assert 2 * DAY <= env.pushes[0].at - t0 < 2 * DAY + 1
    assert run.error is not None and run.error.cls == "failed_by_definition"


async def test_backoff_sequence(env: Env, autojump_clock: MockClock) -> None:
    env.answer("t", *(ok({"error": {"class": "busy"}}, 503) for _ in range(4)))
    await env.register(
        {
            "name": "retry",
            "steps": [
                {
                    "name": "t",
                    "type": "task",
                    "retry": {
                        "maxAttempts": 5,
                        "initialInterval": "1s",
                        "backoffCoefficient": 2.0,
                        "maxInterval": "6s",
                    },
                }
            ],
        }
    )
    run_id = await env.start("retry")
    await env.until(run_id, "completed")
    times = [p.at for p in env.pushes]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    assert gaps == [1.0, 2.0, 4.0, 6.0]
    assert [p.body["attempt"] for p in env.pushes] == [1, 2, 3, 4, 5]
    assert len({p.body["idempotencyKey"] for p in env.pushes}) == 5


async def test_accepted_task_times_out_at_its_deadline_then_retries(
    env: Env, autojump_clock: MockClock
) -> None:
    env.answer("t", ok(None, 202))
    await env.register(
        {
            "name": "slow",
            "steps": [
                {
                    "name": "t",
                    "type": "task",
                    "timeout": "5m",
                    "retry": {"maxAttempts": 2, "initialInterval": "1s"},
                }
            ],
        }
    )
    run_id = await env.start("slow")
    await env.until(run_id, "completed")
    first, second = env.pushes
    assert round(second.at - first.at, 3) == 300 + 1
    assert first.body["idempotencyKey"].endswith(":1") and second.body["idempotencyKey"].endswith(":2")
    events = await env.engine.store.list_events(run_id, 0, 100)
    assert [e.type for e in events].count("task_timed_out") == 1


@pytest.mark.parametrize("settings_overrides", [{"sync_task_max_ms": 2_000}])
async def test_sync_cap_bounds_a_slow_handler(env: Env, autojump_clock: MockClock) -> None:
    async def hang(body: dict[str, Any]) -> httpx.Response:
        await advance(3600)  # the handler hangs for an hour of virtual time
        return ok(None)

    env.answer("t", hang)
    await env.register(
        {
            "name": "hang",
            "steps": [
                {
                    "name": "t",
                    "type": "task",
                    "timeout": "1h",
                    "retry": {"maxAttempts": 2, "initialInterval": "1s"},
                }
            ],
        }
    )
    run_id = await env.start("hang")
    await env.until(run_id, "completed")
    first, second = env.pushes
    assert round(second.at - first.at, 3) == 2 + 1
    events = await env.engine.store.list_events(run_id, 0, 100)
    failed = [e for e in events if e.type == "task_failed"]
    assert failed[0].data["class"] == "timeout"


async def test_run_timeout(env: Env, autojump_clock: MockClock) -> None:
    await env.register(
        {"name": "w", "runTimeout": "3d", "steps": [{"name": "w", "type": "wait", "signal": "s"}]}
    )
    t0 = trio.current_time()
    run_id = await env.start("w")
    run = await env.until(run_id, "timed_out")
    assert 3 * DAY <= _elapsed(t0) < 3 * DAY + 1
    assert run.error is not None and run.error.cls == "run_timeout"


async def test_connection_errors_are_retried(env: Env, autojump_clock: MockClock) -> None:
    async def refuse(body: dict[str, Any]) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    env.answer("t", refuse, refuse)
    await env.register(
        {"name": "c", "steps": [{"name": "t", "type": "task", "retry": {"initialInterval": "1s"}}]}
    )
    run_id = await env.start("c")
    await env.until(run_id, "completed")
    assert len(env.pushes) == 3
    events = await env.engine.store.list_events(run_id, 0, 100)
    assert [e.data["class"] for e in events if e.type == "task_failed"] == ["connection_error"] * 2


@pytest.mark.parametrize("settings_overrides", [{"timer_window_ms": 60_000}])
async def test_timers_beyond_the_window_are_paged_in(env: Env, autojump_clock: MockClock) -> None:
    await env.register({"name": "nap", "steps": [{"name": "s", "type": "sleep", "duration": "3d"}]})
    ids = [await env.start("nap") for _ in range(3)]
    assert env.engine.timers.stats()["inMemory"] == 0  # all beyond the 60 s window
    for run_id in ids:
        await env.until(run_id, "completed")
    assert env.engine.timers.max_lag_ms < 60_000


async def test_a_push_waits_for_storage_instead_of_burning_an_attempt(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foliot.core.errors import StorageUnavailable

    await env.register({"name": "one", "steps": [{"name": "t", "type": "task", "timeout": "1m"}]})
    env.engine.directory.forget_app("app")
    real = env.engine.store.get_app
    calls = 0

    async def flaky(name: str) -> Any:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise StorageUnavailable("down")
        return await real(name)

    monkeypatch.setattr(env.engine.store, "get_app", flaky)
    run_id = await env.start("one")
    run = await env.until(run_id, "completed")
    assert calls == 4 and len(env.pushes) == 1 and env.pushes[0].body["attempt"] == 1
    assert run.state == {"t": None}


# --------------------------------------------------------------------------- timer identity


LOOP = {
    "name": "loop",
    "steps": [
        {"name": "s", "type": "sleep", "duration": "10s"},
        {
            "name": "c",
            "type": "choice",
            "choices": [{"when": {"path": "input.stop", "op": "eq", "value": True}, "next": "$end"}],
            "default": "s",
        },
    ],
}


def _sleeps(events: list[Any]) -> list[int]:
    """Each sleep's length in ms, from its sleep_started to its sleep_finished."""
    out: list[int] = []
    started: int | None = None
    for e in events:
        if e.type == "sleep_started":
            assert started is None, "a sleep started while another was running"
            started = e.at
        elif e.type == "sleep_finished":
            assert started is not None, "a sleep finished twice"
            out.append(e.at - started)
            started = None
    return out


def _fail_commits(env: Env, monkeypatch: pytest.MonkeyPatch, start: float, end: float) -> None:
    """Every commit between trio times `start` and `end` fails as if the database were down."""
    from foliot.core.errors import StorageUnavailable

    real = env.engine.store.commit

    async def flaky(unit: Any) -> bool:
        if start <= trio.current_time() < end:
            raise StorageUnavailable("database is down")
        return await real(unit)

    monkeypatch.setattr(env.engine.store, "commit", flaky)


@pytest.mark.parametrize("settings_overrides", [{"timer_window_ms": 60_000}])
async def test_a_looping_sleep_is_never_cut_short_by_a_stale_firing(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foliot.core.workflow import machine

    await env.register(LOOP)
    t0 = trio.current_time()
    run_id = await env.start("loop", {"stop": False})
    _fail_commits(env, monkeypatch, t0 + 25, t0 + 65)  # writes fail for 40 s
    await advance(200)
    await env.engine.runs.ask(run_id, machine.Cancel())
    events = await env.engine.store.list_events(run_id, 0, 1000)
    lengths = _sleeps(events)
    assert len(lengths) >= 10
    assert all(n >= 10_000 for n in lengths), lengths


async def test_a_heartbeat_whose_commit_straddles_the_deadline_extends_it(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foliot.core.workflow import machine

    env.answer("t", ok(None, 202))
    await env.register(
        {
            "name": "hb",
            "steps": [{"name": "t", "type": "task", "timeout": "10s", "retry": {"maxAttempts": 1}}],
        }
    )
    t0, c0 = trio.current_time(), env.engine.clock.now()
    run_id = await env.start("hb")
    await env.until_pushes(1)
    token = env.pushes[0].body["taskToken"]
    real = env.engine.store.commit

    async def slow(unit: Any) -> bool:
        await advance(0.5)  # the heartbeat's commit is still running when the deadline passes
        return await real(unit)

    await advance(9.9 - _elapsed(t0))
    monkeypatch.setattr(env.engine.store, "commit", slow)
    reply, _ = await env.engine.runs.ask(run_id, machine.Heartbeat(token))
    assert isinstance(reply, machine.Ok)
    monkeypatch.setattr(env.engine.store, "commit", real)
    await advance(15 - _elapsed(t0))
    run = await env.engine.store.get_run(run_id)
    assert run is not None and run.status == "running" and run.task is not None
    run = await env.until(run_id, "failed")
    events = await env.engine.store.list_events(run_id, 0, 100)
    timed_out = [e for e in events if e.type == "task_timed_out"]
    assert len(timed_out) == 1
    assert timed_out[0].at - c0 == 19_900  # the heartbeat's deadline: 9.9 s + 10 s


# --------------------------------------------------------------------------- the wheel alone


class _Rows:
    """A timers table in memory, read the way the stores read it (storage order, a cursor)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], TimerRecord] = {}
        self.limits: list[int] = []
        self.gate: trio.Event | None = None  # when set, reads wait for it (a slow database)

    def arm(self, run_id: str, due: int, key: str = "k#1", slot: str = "step") -> None:
        self.rows[(run_id, slot)] = TimerRecord(run_id, slot, "sleep", key, due)

    async def timers_due_before(
        self, before: int, limit: int, after: tuple[int, str, str] | None = None
    ) -> list[TimerRecord]:
        self.limits.append(limit)
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()
        order = sorted((r.due_at, r.run_id, r.slot) for r in self.rows.values())
        start = 0 if after is None else bisect.bisect_right(order, after)
        found = [self.rows[pos[1], pos[2]] for pos in order[start : start + limit]]
        return [r for r in found if r.due_at < before]


class _Actors:
    """Stands in for the run actors: takes each firing, 'commits' it after `hold` seconds
    (deletes the row, as the run's next document would) and settles it."""

    def __init__(self, rows: _Rows, nursery: trio.Nursery, hold: float = 0.01) -> None:
        self.rows = rows
        self.nursery = nursery
        self.hold = hold
        self.wheel: TimerWheel
        self.delivered: list[tuple[str, str]] = []
        self.refuse: dict[str, int] = {}  # run_id -> full mailboxes to answer first
        self.fail: dict[str, int] = {}  # run_id -> failed commits to answer first
        self.max_waiting = 0

    def deliver(self, actor: str, run_id: str, slot: str, kind: str, key: str) -> bool:
        assert actor == "run"
        if self.refuse.get(run_id, 0) > 0:
            self.refuse[run_id] -= 1
            return False
        self.delivered.append((run_id, key))
        self.max_waiting = max(self.max_waiting, self.wheel.stats()["waiting"])
        self.nursery.start_soon(self._commit, run_id, slot, key)
        return True

    async def _commit(self, run_id: str, slot: str, key: str) -> None:
        await trio.sleep(self.hold)
        if self.fail.get(run_id, 0) > 0:
            self.fail[run_id] -= 1
            self.wheel.settle(run_id, slot, key, applied=False)
            return
        row = self.rows.rows.get((run_id, slot))
        if row is not None and row.key == key:
            del self.rows.rows[(run_id, slot)]
        self.wheel.settle(run_id, slot, key, applied=True)


async def _wheel(
    nursery: trio.Nursery, rows: _Rows, *, hold: float = 0.01, **kw: Any
) -> tuple[TimerWheel, _Actors]:
    actors = _Actors(rows, nursery, hold)
    wheel = TimerWheel(rows, Clock(T0), actors.deliver, **kw)
    actors.wheel = wheel
    await nursery.start(wheel.serve)
    return wheel, actors


async def test_a_storm_fires_each_timer_once_in_order_with_bounded_inflight(
    autojump_clock: MockClock,
) -> None:
    rows = _Rows()
    ids = [f"run_{i:05d}" for i in range(5_000)]
    for run_id in ids:
        rows.arm(run_id, T0 + 1_000)
    async with trio.open_nursery() as nursery:
        wheel, actors = await _wheel(nursery, rows, max_inflight=8, window_ms=60_000)
        await advance(60)
        nursery.cancel_scope.cancel()
    assert actors.delivered == [(run_id, "k#1") for run_id in ids]  # once each, in storage order
    assert wheel.max_inflight_seen == 8
    assert max(rows.limits) <= 32 and actors.max_waiting <= 32  # page-in bounded in count
    assert wheel.fired == 5_000 and wheel.stats()["inMemory"] == 0


async def test_timers_fire_in_due_order_across_pages(autojump_clock: MockClock) -> None:
    import random

    rows = _Rows()
    rng = random.Random(7)
    due_of = {f"run_{i:03d}": T0 + 2_000 + rng.randrange(1_000) for i in range(500)}
    for run_id, due in due_of.items():
        rows.arm(run_id, due)
    async with trio.open_nursery() as nursery:
        _, actors = await _wheel(nursery, rows, max_inflight=4, window_ms=60_000)
        await advance(10)
        nursery.cancel_scope.cancel()
    dues = [due_of[run_id] for run_id, _ in actors.delivered]
    assert len(dues) == 500 and dues == sorted(dues)


async def test_a_firing_in_flight_is_not_paged_in_again(autojump_clock: MockClock) -> None:
    rows = _Rows()
    for i in range(50):
        rows.arm(f"run_{i:02d}", T0 + 100)
    async with trio.open_nursery() as nursery:
        # Each commit takes 30 s while the wheel pages in every 0.5 s: the rows are still stored.
        _, actors = await _wheel(nursery, rows, hold=30, max_inflight=100, window_ms=1_000)
        await advance(100)
        nursery.cancel_scope.cancel()
    assert sorted(actors.delivered) == [(f"run_{i:02d}", "k#1") for i in range(50)]
    assert len(rows.limits) > 50  # it did page in, many times


async def test_a_full_mailbox_delays_a_firing_but_never_duplicates_it(autojump_clock: MockClock) -> None:
    rows = _Rows()
    for i in range(20):
        rows.arm(f"run_{i:02d}", T0 + 100)
    async with trio.open_nursery() as nursery:
        actors = _Actors(rows, nursery, 0.01)
        actors.refuse = {f"run_{i:02d}": 5 for i in range(20)}
        wheel = TimerWheel(rows, Clock(T0), actors.deliver, max_inflight=4, window_ms=200)
        actors.wheel = wheel
        await nursery.start(wheel.serve)
        await advance(30)
        nursery.cancel_scope.cancel()
    assert sorted(actors.delivered) == [(f"run_{i:02d}", "k#1") for i in range(20)]
    assert all(n == 0 for n in actors.refuse.values())


async def test_a_firing_not_applied_is_handed_out_again_after_a_backoff(autojump_clock: MockClock) -> None:
    rows = _Rows()
    rows.arm("run_a", T0 + 1_000)
    async with trio.open_nursery() as nursery:
        wheel, actors = await _wheel(nursery, rows, hold=0, window_ms=1_000)
        actors.fail = {"run_a": 3}  # three commits fail (storage down), the fourth succeeds
        times: list[float] = []
        real = actors.deliver

        def deliver(actor: str, run_id: str, slot: str, kind: str, key: str) -> bool:
            times.append(trio.current_time())
            return real(actor, run_id, slot, kind, key)

        wheel._deliver = deliver
        await advance(60)
        nursery.cancel_scope.cancel()
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times)]
    assert gaps == [0.2, 1.0, 5.0] and len(actors.delivered) == 4
    assert wheel.retried == 3 and "run_a" not in {r for r, _ in rows.rows}


async def test_a_firing_never_settled_is_handed_out_again_after_its_lease(
    autojump_clock: MockClock,
) -> None:
    from foliot.actors.timer_wheel import LEASE_MS

    rows = _Rows()
    rows.arm("run_a", T0 + 1_000)
    lost: list[float] = []
    async with trio.open_nursery() as nursery:

        def deliver(actor: str, run_id: str, slot: str, kind: str, key: str) -> bool:
            lost.append(trio.current_time())
            if len(lost) > 1:
                wheel.settle(run_id, slot, key, applied=True)
            return True  # the first message is lost on the way: nobody settles it

        wheel = TimerWheel(rows, Clock(T0), deliver, window_ms=1_000)
        await nursery.start(wheel.serve)
        await advance(LEASE_MS / 1000 + 60)
        nursery.cancel_scope.cancel()
    assert len(lost) == 2
    assert LEASE_MS / 1000 <= lost[1] - lost[0] <= LEASE_MS / 1000 + 1


async def test_an_arming_committed_while_a_page_is_read_wins_over_the_row(
    autojump_clock: MockClock,
) -> None:
    from foliot.core.workflow.model import Run, Timer

    rows = _Rows()
    rows.arm("run_a", T0 + 5_000, key="old#1")
    async with trio.open_nursery() as nursery:
        wheel, actors = await _wheel(nursery, rows, window_ms=4_000)
        assert wheel.stats()["waiting"] == 0  # beyond the window
        rows.gate = trio.Event()
        await advance(2.5)  # the next page-in starts and waits on the database
        assert len(rows.limits) == 2
        # Meanwhile the run commits a new arming; the read under way still returns the old row.
        run = Run("run_a", "app", "wf", 1, "sleeping", None, {}, 1, T0, T0, "0" * 32)
        new = attrs.evolve(run, timer=Timer("sleep", T0 + 5_500, "new#2"), armings=2)
        wheel.sync("run", "run_a", run.timers(), new.timers())
        rows.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        rows.arm("run_a", T0 + 5_500, key="new#2")  # what storage holds from now on
        await advance(10)
        nursery.cancel_scope.cancel()
    assert actors.delivered == [("run_a", "new#2")]


@pytest.mark.parametrize("settings_overrides", [{"timer_max_inflight": 64}])
async def test_5000_sleeps_due_in_the_same_ms_each_finish_once(env: Env, autojump_clock: MockClock) -> None:
    """5,000 parked runs (written straight to the store, then a restart: nothing is live) whose
    sleeps end in the same millisecond: each sleep finishes once, in storage order, and never
    more than FOLIOT_TIMER_MAX_INFLIGHT firings (hence rehydrations) are out at a time."""
    from foliot.core.workflow import machine
    from foliot.core.workflow.duration import format_timestamp
    from foliot.storage.base import UnitOfWork

    due = env.engine.clock.now() + 3_600_000
    definition = {
        "name": "storm",
        "steps": [
            {"name": "s", "type": "sleep", "until": format_timestamp(due)},
            {"name": "w", "type": "wait", "signal": "never"},
        ],
    }
    await env.register(definition)
    parsed = await env.engine.directory.definition("app", "storm", 1)
    ids = [f"run_{i:05d}" for i in range(5_000)]
    for run_id in ids:
        tr = machine.start(
            run_id=run_id,
            app="app",
            definition=parsed,
            version=1,
            input=None,
            business_key=None,
            run_timeout_ms=None,
            trace_id="0" * 32,
            ctx=env.engine.runs.context(),
        )
        await env.engine.store.commit(UnitOfWork(tr.run, None, tr.events, tr.tasks))
    await env.crash_and_restart()
    wheel = env.engine.timers
    assert wheel.stats()["inMemory"] <= 256  # page-in bounded in count: 4 x max in flight
    order: list[str] = []
    real = wheel._deliver

    def deliver(actor: str, run_id: str, slot: str, kind: str, key: str) -> bool:
        order.append(run_id)
        if len(order) % 97 == 0:
            loading = [a for a in env.engine.supervisor.actors.values() if a.state is None]
            assert len(loading) < 64  # rehydrated no faster than firings settle
        return real(actor, run_id, slot, kind, key)

    wheel._deliver = deliver
    await advance(3_660)
    assert wheel.max_inflight_seen == 64
    assert order == ids  # once each, in storage order
    for run_id in ids:
        events = await env.engine.store.list_events(run_id, 0, 100)
        assert [e.type for e in events].count("sleep_finished") == 1
        assert next(e.at for e in events if e.type == "sleep_finished") == due
