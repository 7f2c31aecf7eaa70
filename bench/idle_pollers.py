"""Long-poll cost: N workers parked on a queue, CPU used while they wait, and wake latency.

    python bench/idle_pollers.py --pollers 500

Runs Foliot in-process (SQLite in a temp dir); N clients long-poll `tasks/poll` with
waitSeconds=60 on an empty queue. Measures process CPU over an idle window, then offers one
task per poller and measures how fast each parked poller receives it. Prints figures.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from foliot.core.config import Settings
from foliot.server import Running, serve


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="foliot-bench-"))
    settings = Settings(port=0, database_url=f"sqlite:///{tmp / 'b.db'}", data_dir=str(tmp), admin_token="a")
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(serve, settings)
        limits = httpx.Limits(max_connections=args.pollers + 10)
        async with httpx.AsyncClient(base_url=running.url, timeout=90, limits=limits) as client:
            r = await client.put(
                "/apps/b",
                json={"handlerBaseUrl": "http://127.0.0.1:9"},
                headers={"Authorization": "Bearer a"},
            )
            key = {"Authorization": f"Bearer {r.json()['apiKey']}"}
            wf = {"name": "q", "steps": [{"name": "t", "type": "task", "queue": "work", "timeout": "1m"}]}
            await client.post("/apps/b/workflows", json=wf, headers=key)
            got: list[float] = []

            async def poller() -> None:
                resp = await client.post(
                    "/apps/b/tasks/poll", json={"queue": "work", "waitSeconds": 60}, headers=key
                )
                if resp.json()["tasks"]:
                    got.append(time.perf_counter())

            async with trio.open_nursery() as pollers:
                for _ in range(args.pollers):
                    pollers.start_soon(poller)
                with trio.fail_after(60):
                    while running.engine.queues.waiting_pollers() < args.pollers:
                        await trio.testing.wait_all_tasks_blocked(0.05)
                c0, t0 = cpu_seconds(), time.perf_counter()
                await trio.sleep(args.idle)
                used, span = cpu_seconds() - c0, time.perf_counter() - t0
                print(f"pollers parked         {running.engine.queues.waiting_pollers()}")
                print(
                    f"CPU while idle         {used:.3f} s over {span:.1f} s "
                    f"({100 * used / span:.2f}% of one core)"
                )
                offered = time.perf_counter()
                for _ in range(args.pollers):
                    await client.post("/apps/b/runs", json={"workflow": "q"}, headers=key)
                started = time.perf_counter() - offered
            print(f"tasks handed out       {len(got)} of {args.pollers}")
            print(f"offering {args.pollers} tasks      {started:.2f} s (run starts over HTTP)")
            if got:
                print(f"last poller answered   {max(got) - offered:.2f} s after the first offer")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--pollers", type=int, default=500)
    parser.add_argument("--idle", type=float, default=10.0)
    trio.run(main, parser.parse_args())
