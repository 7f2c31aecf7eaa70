"""The latency gate end to end, through the HTTP app under MockClock: storage that commits 20
units of work a second, starts and signals offered at 50/s. A standing queue forms; from then
on new starts and signals get 429 `latency` + Retry-After at once and store nothing, the ones
admitted wait about the target instead of seconds, reads are served, and once the load drops
everything is admitted again. With the gate off the same load queues for seconds."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from foliot.http.app import create_app
from foliot.http.edge import Shed
from foliot.storage.base import RunFilter

from .conftest import Env, advance

ADMIN = "admin-token"
TWO_WAITS = {
    "name": "parked",
    "steps": [
        {"name": "first", "type": "wait", "signal": "go"},
        {"name": "second", "type": "wait", "signal": "again"},
    ],
}
COMMIT_S = 0.05  # the store commits one unit of work at a time, 50 ms each
RATE = 50.0  # starts and signals offered per second (the store takes 20)
LOAD_S = 4.0


def slow_store(env: Env) -> None:
    store = env.engine.store
    real = store.commit
    lock = trio.Lock()

    async def commit(unit: Any) -> bool:
        async with lock:
            await trio.sleep(COMMIT_S)
            return await real(unit)

    store.commit = commit  # type: ignore[method-assign]


@pytest.mark.parametrize("settings_overrides", [{"admission_target_ms": 100}, {"admission_target_ms": 0}])
async def test_sustained_overload_is_refused_at_once_and_admitted_again_after(
    env: Env, autojump_clock: MockClock, settings_overrides: dict[str, Any]
) -> None:
    gate_on = settings_overrides["admission_target_ms"] > 0
    await env.register(TWO_WAITS)
    parked = [await env.start("parked") for _ in range(int(RATE * LOAD_S))]
    app = create_app(env.engine, env.engine.settings, ADMIN)
    client = app.test_client()
    auth = {"Authorization": f"Bearer {ADMIN}"}
    slow_store(env)

    results: list[tuple[str, float, int, dict[str, Any], Any]] = []
    reads: list[int] = []

    async def send(kind: str, i: int) -> None:
        started = trio.current_time()
        if kind == "start":
            r = await client.post(
                "/apps/app/runs", json={"workflow": "parked", "input": {"i": i}}, headers=auth
            )
        else:
            r = await client.post(
                "/apps/app/signals", json={"runId": parked[i], "name": "go", "payload": i}, headers=auth
            )
        body = await r.get_json()
        results.append((kind, trio.current_time() - started, r.status_code, body, r.headers))

    async def read(i: int) -> None:
        r = await client.get(f"/apps/app/runs/{parked[i]}", headers=auth)
        reads.append(r.status_code)

    async with trio.open_nursery() as nursery:
        for i in range(int(RATE * LOAD_S)):  # open loop: on a timetable, whatever the answers
            nursery.start_soon(send, "start" if i % 2 == 0 else "signal", i)
            if i % 10 == 5:
                nursery.start_soon(read, i)
            await advance(1 / RATE)

    admitted = [r for r in results if r[2] in (201, 202)]
    refused = [r for r in results if r[2] == 429]
    assert len(admitted) + len(refused) == len(results) == int(RATE * LOAD_S)
    assert reads and set(reads) == {200}  # reads are never refused
    slowest = max(latency for _, latency, *_ in admitted)
    if not gate_on:
        assert not refused and slowest > 3.0  # the queue the gate exists to prevent
        return
    assert refused and {kind for kind, *_ in refused} == {"start", "signal"}
    for _, latency, _, body, headers in refused:
        assert latency == 0  # refused at once: no virtual time passed
        assert headers["Retry-After"] == "1"
        assert (body["error"]["code"], body["error"]["reason"]) == ("overloaded", "latency")
    assert slowest < 1.0
    assert env.engine.admission.refused["latency"] == len(refused)
    # Nothing was stored for a refused request: no run for a refused start, no signal taken.
    store = env.engine.store
    started = [body["runId"] for kind, _, status, body, _ in results if kind == "start" and status == 201]
    listed = await store.list_runs(RunFilter(app="app", workflow="parked"), 1000, None)
    runs = [r for r in listed if r.run_id not in parked]
    assert sorted(r.run_id for r in runs) == sorted(started)
    signalled = {body["runId"] for kind, _, s, body, _ in results if kind == "signal" and s == 202}
    for run_id in parked:
        run = await store.get_run(run_id)
        assert run is not None
        assert (run.status, run.current_step) == (
            ("waiting", "second") if run_id in signalled else ("waiting", "first")
        )
    metrics = await (await client.get("/metrics", headers=auth)).get_data(as_text=True)
    assert f'foliot_admission_refused_total{{reason="latency"}} {len(refused)}' in metrics
    for gauge in ("shedding", "limit", "min_latency_seconds", "throughput"):
        assert f"foliot_admission_{gauge} " in metrics
    # The load is gone: after a quiet spell the gate admits again.
    await advance(1.0)
    r = await client.post("/apps/app/runs", json={"workflow": "parked"}, headers=auth)
    assert r.status_code == 201
    s = await client.post("/apps/app/signals", json={"runId": parked[0], "name": "go"}, headers=auth)
    assert s.status_code == 202


@pytest.mark.parametrize("settings_overrides", [{"admission_target_ms": 100}])
async def test_while_shedding_the_edge_refuses_starts_and_signals_before_the_app(env: Env) -> None:
    admission = env.engine.admission
    gate = admission.gate
    now = trio.current_time()
    for i in range(50):  # a whole interval of slow answers: a standing queue
        gate.answered(now + i * 0.005, 0.5)
    admission.inflight = 100  # past any limit the gate computes from that throughput
    assert gate.admit(now + gate.interval_s, 0) and gate.shedding
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(f"{scope['method']} {scope['path']}")

    shed = Shed(app, admission)

    async def call(method: str, path: str, body: bytes = b"{}") -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return pending.pop(0) if pending else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        headers = [(b"content-length", str(len(body)).encode())]
        await shed({"type": "http", "method": method, "path": path, "headers": headers}, receive, send)
        return sent

    for path in ("/apps/app/runs", "/apps/app/signals", "/apps/app/runs/"):
        start, body = await call("POST", path)
        assert start["status"] == 429
        headers = dict(start["headers"])
        assert headers[b"retry-after"] == b"1" and b"connection" not in headers
        error = json.loads(body["body"])["error"]
        assert (error["code"], error["reason"], error["retryAfter"]) == ("overloaded", "latency", 1)
    assert reached == []
    assert admission.refused["latency"] == 3
    # A large body is not read: its connection is closed instead.
    start, _ = await call("POST", "/apps/app/signals", b"x" * 100_000)
    assert (b"connection", b"close") in start["headers"]
    # Reads, interventions and task answers go through.
    for method, path in (
        ("GET", "/apps/app/runs"),
        ("POST", "/apps/app/runs/run_1/cancel"),
        ("POST", "/apps/app/tasks/tt_1/complete"),
    ):
        await call(method, path)
    assert reached == [
        "GET /apps/app/runs",
        "POST /apps/app/runs/run_1/cancel",
        "POST /apps/app/tasks/tt_1/complete",
    ]
    # Once the gate stops shedding, starts and signals reach the app again.
    admission.inflight = 0
    assert gate.admit(trio.current_time() + 10, 0) and not gate.shedding
    await call("POST", "/apps/app/signals")
    assert reached[-1] == "POST /apps/app/signals"


async def client_metrics(env: Env) -> Any:
    client = create_app(env.engine, env.engine.settings, ADMIN).test_client()
    return await client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"})


async def _burst_to_one_run(env: Env) -> dict[str, Any]:
    """50 signals at once to one run; from 0.425 s on, other runs are signalled one every 100 ms
    (the store commits one unit at a time, 50 ms each: each of those waits for at most one of
    the busy run's commits, then its own, 75 ms in all)."""
    await env.register(TWO_WAITS)
    hot, *others = [await env.start("parked") for _ in range(21)]
    client = create_app(env.engine, env.engine.settings, ADMIN).test_client()
    auth = {"Authorization": f"Bearer {ADMIN}"}
    slow_store(env)
    burst: list[tuple[int, dict[str, Any], Any]] = []
    elsewhere: list[tuple[int, float]] = []

    async def to_hot(i: int) -> None:
        r = await client.post(
            "/apps/app/signals", json={"runId": hot, "name": "go", "payload": i}, headers=auth
        )
        burst.append((r.status_code, await r.get_json(), r.headers))

    async def to_other(run_id: str) -> None:
        started = trio.current_time()
        r = await client.post("/apps/app/signals", json={"runId": run_id, "name": "go"}, headers=auth)
        elsewhere.append((r.status_code, trio.current_time() - started))

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(to_hot, i)
        await advance(0.325)  # the burst alone for a while; then between two of its commits
        for run_id in others:
            await advance(0.1)
            nursery.start_soon(to_other, run_id)
    return {"hot": hot, "burst": burst, "elsewhere": elsewhere}


async def test_a_burst_to_one_run_is_that_runs_back_pressure_not_the_engines(
    env: Env, autojump_clock: MockClock
) -> None:
    seen = await _burst_to_one_run(env)
    admission = env.engine.admission
    # The one run took every signal (one delivered, the rest buffered), however long it took...
    assert sorted(status for status, *_ in seen["burst"]) == [202] * 50
    run = await env.engine.store.get_run(seen["hot"])
    assert run is not None and len(run.buffer) == 49
    # ...and the signals queued behind it never made the gate shed the others' traffic.
    assert env.engine.admission.gate.episodes == 0 and admission.refused["latency"] == 0
    assert admission.behind_own_run >= 45
    metrics = await (await client_metrics(env)).get_data(as_text=True)
    assert f"foliot_admission_behind_own_run_total {admission.behind_own_run}" in metrics
    assert [status for status, _ in seen["elsewhere"]] == [202] * 20
    assert max(latency for _, latency in seen["elsewhere"]) < 0.2


async def test_the_same_burst_timed_as_engine_wide_queueing_would_shed_everyone(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the per-run exclusion prevents: with every signal timed, the burst alone looks like
    a standing queue and the other runs' callers are refused."""
    monkeypatch.setattr(type(env.engine.runs), "busy", lambda self, run_id: False)
    seen = await _burst_to_one_run(env)
    assert env.engine.admission.gate.episodes >= 1
    assert env.engine.admission.refused["latency"] > 0
    refused = [status for status, _ in seen["elsewhere"] if status == 429]
    assert len(refused) >= 10  # most of the other runs' callers, while the burst drains


@pytest.mark.parametrize("settings_overrides", [{"mailbox_size": 8, "mailbox_wait_ms": 200}])
async def test_a_burst_past_one_runs_mailbox_gets_429_mailbox_and_the_others_are_served(
    env: Env, autojump_clock: MockClock
) -> None:
    seen = await _burst_to_one_run(env)
    statuses = [status for status, *_ in seen["burst"]]
    refused = [(body, headers) for status, body, headers in seen["burst"] if status == 429]
    assert statuses.count(202) >= 9 and refused and len(refused) + statuses.count(202) == 50
    for body, headers in refused:
        assert headers["Retry-After"] == "1"
        assert (body["error"]["code"], body["error"]["reason"]) == ("overloaded", "mailbox")
    # Nothing was stored for a refused signal: the run holds exactly the accepted ones.
    run = await env.engine.store.get_run(seen["hot"])
    assert run is not None and len(run.buffer) == statuses.count(202) - 1
    admission = env.engine.admission
    assert admission.refused["mailbox"] == len(refused)
    assert admission.gate.episodes == 0 and admission.refused["latency"] == 0
    assert [status for status, _ in seen["elsewhere"]] == [202] * 20
    assert max(latency for _, latency in seen["elsewhere"]) < 0.2
