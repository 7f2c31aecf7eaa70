"""A real worker process and a real `foliot serve`, each killed with SIGKILL mid-stream: every
run completes, and a task is executed twice only under the same idempotency key unless Foliot
itself retried it after a timeout. Wall clock, bounded by `fail_after`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import trio
from foliot_client import AsyncClient
from foliot_client.models import AppCreated

from ..e2e.test_crash_recovery import ADMIN, Server
from ..pg import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
RUNS = 30
FLOW = {
    "name": "k",
    "steps": [
        {"name": "work", "type": "task", "queue": "q", "timeout": "3s",
         "retry": {"maxAttempts": 20, "initialInterval": "10ms", "maxInterval": "100ms"}},
    ],
}  # fmt: skip


class WorkerProcess:
    def __init__(self, url: str, key: str, log: Path, out: Path) -> None:
        self.args = [
            sys.executable,
            str(Path(__file__).with_name("worker_proc.py")),
            url,
            key,
            "orders",
            str(log),
        ]
        self.out = out
        self.process: trio.Process | None = None

    async def start(self) -> None:
        path = os.pathsep.join(filter(None, [str(ROOT / "clients" / "python"), os.environ.get("PYTHONPATH")]))
        with open(self.out, "ab") as out:
            self.process = await trio.lowlevel.open_process(
                self.args, env={**os.environ, "PYTHONPATH": path}, stdout=out, stderr=subprocess.STDOUT
            )

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()


def executed(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines() if " " in line]  # type: ignore[misc]


async def until_executed(log: Path, count: int) -> None:
    with trio.fail_after(60):
        while len(executed(log)) < count:
            await trio.sleep(0.02)


async def test_worker_and_server_killed_with_sigkill_lose_no_task(tmp_path: Path, database_url: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "FOLIOT_PORT": str(port),
        "FOLIOT_DATABASE_URL": database_url,
        "FOLIOT_DATA_DIR": str(tmp_path / "data"),
        "FOLIOT_ADMIN_TOKEN": ADMIN,
        "FOLIOT_LOG_LEVEL": "WARNING",
    }
    server = Server(env, tmp_path / "server.log", port)
    await server.start()
    log = tmp_path / "executions.log"
    workers: list[WorkerProcess] = []
    try:
        async with AsyncClient(server.url, ADMIN) as admin:
            created = await admin.put_app("orders", "http://127.0.0.1:1")
        assert isinstance(created, AppCreated)
        async with AsyncClient(server.url, created.api_key, app="orders") as c:
            await c.register_workflow(FLOW)
            runs = [(await c.start_run("k", i)).run_id for i in range(RUNS)]

        workers.append(WorkerProcess(server.url, created.api_key, log, tmp_path / "worker1.out"))
        await workers[0].start()
        await until_executed(log, 5)
        await server.kill()  # the worker holds tasks it cannot answer yet
        await server.start()
        await until_executed(log, 12)
        await workers[0].kill()  # tasks it held are retried by Foliot after their timeout
        workers.append(WorkerProcess(server.url, created.api_key, log, tmp_path / "worker2.out"))
        await workers[1].start()

        async with AsyncClient(server.url, created.api_key, app="orders") as c:
            with trio.fail_after(120):
                for run_id in runs:
                    while (run := await c.get_run(run_id)).status not in ("completed", "failed"):
                        await trio.sleep(0.05)
                    assert run.status == "completed"
            final = {run_id: await c.get_run(run_id) for run_id in runs}
            history = {run_id: [e async for e in c.iter_events(run_id)] for run_id in runs}
    finally:
        for worker in workers:
            if worker.process is not None and worker.process.returncode is None:
                await worker.kill()
        await server.stop()

    assert server.kills == 1
    by_run: dict[str, list[str]] = defaultdict(list)
    for key, _ in executed(log):
        by_run[key.split(":")[0]].append(key)
    for i, run_id in enumerate(runs):
        assert final[run_id].state["work"] == {"n": i}
        events = history[run_id]
        dispatched = {e.data["idempotencyKey"] for e in events if e.type == "task_dispatched"}
        keys = by_run[run_id]
        assert keys and set(keys) <= dispatched  # nothing executed that Foliot did not hand out
        # A second execution under a new key only after Foliot closed the earlier attempt.
        closed = {e.attempt for e in events if e.type in ("task_timed_out", "task_failed")}
        completed = [e.attempt for e in events if e.type == "task_completed"]
        assert len(completed) == 1
        for key in set(keys):
            attempt = int(key.rsplit(":", 1)[1])
            assert attempt == completed[0] or attempt in closed, (run_id, key, [e.type for e in events])
