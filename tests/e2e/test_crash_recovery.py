"""Real processes: `foliot serve` killed with SIGKILL at random moments, restarted, nothing lost.

These tests use the wall clock (a real server, real sleeps) and are bounded by `fail_after`.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from ..helpers import HandlerServer, answer_json, start_handler
from ..pg import Cluster, free_port

pytestmark = pytest.mark.e2e

ADMIN = "e2e-admin"


async def wait_ready(url: str, limit_s: float = 60) -> None:
    """Poll `/readyz` of a server process until it answers 200."""
    async with httpx.AsyncClient(base_url=url, timeout=2) as client:
        with trio.fail_after(limit_s):
            while True:
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await trio.sleep(0.05)


@attrs.define
class Server:
    """One `foliot serve` subprocess, restartable on the same database and port."""

    env: dict[str, str]
    log: Path
    port: int
    process: trio.Process | None = None
    kills: int = 0
    ready_times: list[float] = attrs.Factory(list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        log = open(self.log, "ab")
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "foliot.cli", "serve"], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        t0 = trio.current_time()
        await wait_ready(self.url)
        self.ready_times.append(trio.current_time() - t0)

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()
        self.kills += 1

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()


@pytest.fixture
async def server(tmp_path: Path, database_url: str) -> AsyncIterator[Server]:
    env = {
        **os.environ,
        "FOLIOT_PORT": str(free_port()),
        "FOLIOT_DATABASE_URL": database_url,
        "FOLIOT_DATA_DIR": str(tmp_path / "data"),
        "FOLIOT_ADMIN_TOKEN": ADMIN,
        "FOLIOT_LOG_LEVEL": "WARNING",
        # Durability under kill -9, not admission: 200 drivers at once would otherwise be shed
        # (429) on a loaded machine and their retries add load (tests/actors covers the gate).
        "FOLIOT_ADMISSION_TARGET_MS": "0",
        # No FOLIOT_NODE_ID: on PostgreSQL the restarted node is the same node by its data
        # directory's kept name (foliot/nodeid.py), so it takes its partition leases back at once.
    }
    srv = Server(env, tmp_path / "server.log", int(env["FOLIOT_PORT"]))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def retrying(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
    """Call until the server answers something other than a connection error, a 503 or a 429
    (overloaded: a client retries those, as the API asks)."""
    with trio.fail_after(120):
        while True:
            try:
                r = await client.request(method, url, **kw)
                if r.status_code not in (429, 503):
                    return r
                if r.status_code == 429:  # overloaded: wait as told, with jitter, like a client
                    await trio.sleep(float(r.headers.get("Retry-After", "1")) * (0.5 + random.random()))
                    continue
            except httpx.TransportError:
                pass
            await trio.sleep(0.05)


async def setup_app(
    client: httpx.AsyncClient, handler: HandlerServer, workflow: dict[str, Any]
) -> dict[str, str]:
    r = await retrying(
        client,
        "PUT",
        "/apps/orders",
        json={"handlerBaseUrl": handler.url},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 201, r.text
    handler.secrets.append(r.json()["signingSecret"])
    key = {"Authorization": f"Bearer {r.json()['apiKey']}"}
    r = await retrying(client, "POST", "/apps/orders/workflows", json=workflow, headers=key)
    assert r.status_code == 201, r.text
    return key


FLOW = {
    "name": "flow",
    "steps": [
        {
            "name": "a",
            "type": "task",
            "retry": {"maxAttempts": 10, "initialInterval": "100ms", "maxInterval": "1s"},
        },
        {"name": "nap", "type": "sleep", "duration": "300ms"},
        {"name": "go", "type": "wait", "signal": "go"},
        {
            "name": "b",
            "type": "task",
            "retry": {"maxAttempts": 10, "initialInterval": "100ms", "maxInterval": "1s"},
        },
    ],
}
RUNS = 200


async def test_kill_9_at_random_moments_loses_nothing(server: Server, nursery: trio.Nursery) -> None:
    rng = random.Random(7)
    handler = HandlerServer()

    def flaky(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if rng.random() < 0.1:
            return answer_json({"error": {"class": "busy"}}, 503)
        return answer_json({"step": body["step"], "run": body["runId"]})

    handler.route("a", flaky)
    handler.route("b", flaky)
    await start_handler(nursery, handler)
    acked: dict[int, str] = {}
    run_ids: dict[int, str] = {}
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        key = await setup_app(client, handler, FLOW)

        async def drive(i: int) -> None:
            r = await retrying(
                client,
                "POST",
                "/apps/orders/runs",
                json={"workflow": "flow", "input": {"i": i}, "businessKey": f"order-{i}"},
                headers={**key, "Idempotency-Key": f"start-{i}"},
            )
            assert r.status_code in (200, 201), r.text
            run_ids[i] = r.json()["runId"]
            await trio.sleep(rng.random() * 2)
            r = await retrying(
                client,
                "POST",
                "/apps/orders/signals",
                json={"runId": run_ids[i], "name": "go", "payload": {"paid": i}, "signalId": f"sig-{i}"},
                headers=key,
            )
            assert r.status_code == 202, r.text
            acked[i] = r.json()["status"]

        async def killer() -> None:
            for _ in range(6):
                await trio.sleep(0.3 + rng.random())
                await server.kill()
                await server.start()

        with trio.fail_after(240):
            async with trio.open_nursery() as inner:
                inner.start_soon(killer)
                for i in range(RUNS):
                    inner.start_soon(drive, i)
            # One more kill after the last acknowledgement: nothing acknowledged may be lost.
            await server.kill()
            await server.start()
            for i in range(RUNS):
                while True:
                    run = (
                        await retrying(client, "GET", f"/apps/orders/runs/{run_ids[i]}", headers=key)
                    ).json()
                    if run["status"] == "completed":
                        break
                    assert run["status"] in ("running", "sleeping", "waiting"), run
                    await trio.sleep(0.1)
                assert run["state"]["go"] == {"paid": i}, run  # the acknowledged signal was not lost
                assert run["state"]["b"] == {"step": "b", "run": run_ids[i]}
                assert run["generation"] == 1

    assert server.kills >= 5 and len(acked) == RUNS
    assert set(acked.values()) <= {"delivered", "buffered", "duplicate"}
    listed = (
        await retrying(
            httpx.AsyncClient(base_url=server.url),
            "GET",
            "/apps/orders/runs",
            params={"limit": 1000},
            headers=key,
        )
    ).json()["runs"]
    assert len(listed) == RUNS  # idempotent starts: no run was created twice
    # The handler saw every attempt's key; a duplicate only ever repeats the same key.
    counts = Counter(r.body["idempotencyKey"] for r in handler.received)
    for i in range(RUNS):
        for step in ("a", "b"):
            keys = [k for k in counts if k.startswith(f"{run_ids[i]}:1:{step}:")]
            attempts = sorted(int(k.rsplit(":", 1)[1]) for k in keys)
            assert attempts == list(range(1, len(attempts) + 1)), (i, step, attempts)
    for r in handler.received:
        body = r.body
        assert (
            r.body["idempotencyKey"]
            == f"{body['runId']}:{body['generation']}:{body['step']}:{body['attempt']}"
        )
    assert handler.bad_signatures == 0
    duplicates = sum(n - 1 for n in counts.values())
    print(
        f"\nkills={server.kills} runs={RUNS} pushes={len(handler.received)} "
        f"duplicate deliveries={duplicates} "
        f"restart-to-ready={[round(t, 2) for t in server.ready_times]}"
    )


async def test_timers_and_deadlines_that_passed_while_down(server: Server, nursery: trio.Nursery) -> None:
    handler = HandlerServer()
    answers: list[int] = []

    def accept_then_answer(body: dict[str, Any], headers: dict[str, str]) -> Any:
        answers.append(body["attempt"])
        return (202, {}, b"") if body["attempt"] == 1 else answer_json({"attempt": body["attempt"]})

    handler.route("slow", accept_then_answer)
    await start_handler(nursery, handler)
    workflow = {
        "name": "down",
        "steps": [
            {"name": "nap", "type": "sleep", "duration": "1s"},
            {
                "name": "slow",
                "type": "task",
                "timeout": "1s",
                "retry": {"maxAttempts": 2, "initialInterval": "100ms"},
            },
        ],
    }
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        key = await setup_app(client, handler, workflow)
        r = await retrying(client, "POST", "/apps/orders/runs", json={"workflow": "down"}, headers=key)
        run_id = r.json()["runId"]
        await server.kill()
        await trio.sleep(1.5)  # the sleep falls due while the server is down
        await server.start()
        with trio.fail_after(30):
            # Until the 202 is committed: before that the attempt has no deadline yet (it counts
            # from the send), and a restart would rightly push it again with the same key.
            while True:
                got = await retrying(client, "GET", f"/apps/orders/runs/{run_id}/events", headers=key)
                if "task_accepted" in [e["type"] for e in got.json()["events"]]:
                    break
                await trio.sleep(0.05)
        await server.kill()  # the 202-accepted attempt's 1 s deadline passes while down
        await trio.sleep(1.5)
        await server.start()
        with trio.fail_after(30):
            while True:
                run = (await retrying(client, "GET", f"/apps/orders/runs/{run_id}", headers=key)).json()
                if run["status"] == "completed":
                    break
                await trio.sleep(0.05)
        assert run["state"]["slow"] == {"attempt": 2}
        events = (await retrying(client, "GET", f"/apps/orders/runs/{run_id}/events", headers=key)).json()[
            "events"
        ]
        types = [e["type"] for e in events]
        assert "sleep_finished" in types and "task_timed_out" in types
        assert answers == [1, 2]


async def test_once_ready_after_kill_9_the_node_serves_at_once(server: Server, nursery: trio.Nursery) -> None:
    """`/readyz` 200 after a restart means served: on PostgreSQL the restarted process is the
    same cluster node (its name is kept in the data directory), so it does not wait a lease
    TTL for its own partitions, answering `503 not_owner` meanwhile."""
    handler = await start_handler(nursery, HandlerServer())
    workflow = {"name": "parked", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        key = await setup_app(client, handler, workflow)
        runs = []
        for _ in range(20):  # spread over partitions
            r = await retrying(client, "POST", "/apps/orders/runs", json={"workflow": "parked"}, headers=key)
            runs.append(r.json()["runId"])
        await server.kill()
        await server.start()  # returns once /readyz answers 200
        for run_id in runs:
            r = await client.post("/apps/orders/signals", json={"runId": run_id, "name": "go"}, headers=key)
            assert r.status_code in (200, 202), r.text
            r = await client.get(f"/apps/orders/runs/{run_id}", headers=key)
            assert r.status_code == 200, r.text


@pytest.mark.postgres
async def test_postgres_outage_answers_503_then_recovers(tmp_path: Path, nursery: trio.Nursery) -> None:
    if os.environ.get("FOLIOT_TEST_DATABASE_URL"):
        pytest.skip("needs a cluster this test may stop")
    cluster = Cluster(durable=True).start()
    try:
        env = {
            **os.environ,
            "FOLIOT_PORT": str(free_port()),
            "FOLIOT_DATABASE_URL": cluster.new_database(),
            "FOLIOT_DATA_DIR": str(tmp_path / "data"),
            "FOLIOT_ADMIN_TOKEN": ADMIN,
            "FOLIOT_LOG_LEVEL": "ERROR",
        }
        srv = Server(env, tmp_path / "server.log", int(env["FOLIOT_PORT"]))
        await srv.start()
        handler = await start_handler(nursery, HandlerServer())
        workflow = {
            "name": "w",
            "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}],
        }
        async with httpx.AsyncClient(base_url=srv.url, timeout=10) as client:
            key = await setup_app(client, handler, workflow)
            first = (await client.post("/apps/orders/runs", json={"workflow": "w"}, headers=key)).json()
            cluster.stop(mode="immediate")
            r = await client.post("/apps/orders/runs", json={"workflow": "w"}, headers=key)
            # A connection found dead once the statement was sent cannot tell whether it was
            # applied, and the read-back fails too: `commit_unknown` (docs/api.md); either way
            # nothing was stored (checked below).
            assert r.status_code == 503 and r.json()["error"]["code"] in ("unavailable", "commit_unknown")
            t0 = trio.current_time()
            try:
                s = await client.post(
                    "/apps/orders/signals",
                    json={"runId": first["runId"], "name": "go"},
                    headers=key,
                    timeout=20,
                )
            except httpx.ReadTimeout:
                assert srv.process is not None
                srv.process.send_signal(signal.SIGUSR2)
                await trio.sleep(1)
                print(srv.log.read_text()[-8000:])
                raise
            assert s.status_code == 503, (s.text, trio.current_time() - t0)
            print(f"\n503 for a signal after {trio.current_time() - t0:.2f}s with the database down")
            assert (await client.get("/readyz")).status_code == 503
            cluster.restart()
            with trio.fail_after(60):
                while (await client.get("/readyz")).status_code != 200:
                    await trio.sleep(0.2)
            s = await retrying(
                client,
                "POST",
                "/apps/orders/signals",
                json={"runId": first["runId"], "name": "go"},
                headers=key,
            )
            assert s.status_code == 202 and s.json()["status"] == "delivered"
            with trio.fail_after(30):
                while (await client.get(f"/apps/orders/runs/{first['runId']}", headers=key)).json()[
                    "status"
                ] != "completed":
                    await trio.sleep(0.1)
            runs = (await client.get("/apps/orders/runs", headers=key)).json()["runs"]
            assert len(runs) == 1  # the refused start left nothing behind
        await srv.stop()
    finally:
        cluster.destroy()
