"""Many concurrent parked runs: start throughput, memory, signal latency, restart-to-ready.

    python bench/parked_runs.py --runs 10000 [--backend sqlite|postgres] [--concurrency 64]

Starts Foliot in-process on an ephemeral port (SQLite in a temp dir, or a throwaway
PostgreSQL cluster), parks N runs on a `wait` step, measures, restarts on the same database
and measures the time to `/readyz`, then signals every run and measures delivery. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from foliot.config import Settings
from foliot.server import Running, serve

ADMIN = "bench-admin"
WORKFLOW = {
    "name": "parked",
    "steps": [
        {"name": "wait", "type": "wait", "signal": "go", "timeout": "14d"},
        {"name": "nap", "type": "sleep", "duration": "1ms"},
    ],
}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def pool(count: int, concurrency: int, fn: Any) -> list[float]:
    latencies: list[float] = []
    send, receive = trio.open_memory_channel[int](count)
    for i in range(count):
        send.send_nowait(i)
    send.close()

    async def worker() -> None:
        async for i in receive:
            t = time.perf_counter()
            await fn(i)
            latencies.append(time.perf_counter() - t)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return latencies


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="foliot-bench-"))
    cluster = None
    if args.backend == "postgres":
        from tests.pg import Cluster

        cluster = Cluster().start()
        url = cluster.new_database()
    else:
        url = f"sqlite:///{tmp / 'bench.db'}"
    settings = Settings(
        port=0, database_url=url, data_dir=str(tmp / "data"), admin_token=ADMIN, passivate_after_ms=2_000
    )
    try:
        async with trio.open_nursery() as nursery:
            running: Running = await nursery.start(serve, settings)
            async with httpx.AsyncClient(base_url=running.url, timeout=60) as client:
                admin = {"Authorization": f"Bearer {ADMIN}"}
                r = await client.put(
                    "/apps/bench", json={"handlerBaseUrl": "http://127.0.0.1:9"}, headers=admin
                )
                key = {"Authorization": f"Bearer {r.json()['apiKey']}"}
                await client.post("/apps/bench/workflows", json=WORKFLOW, headers=key)
                rss0 = rss_mb()
                run_ids: list[str] = [""] * args.runs

                async def start(i: int) -> None:
                    resp = await client.post(
                        "/apps/bench/runs", json={"workflow": "parked", "businessKey": f"b{i}"}, headers=key
                    )
                    run_ids[i] = resp.json()["runId"]

                t0 = time.perf_counter()
                lat = await pool(args.runs, args.concurrency, start)
                elapsed = time.perf_counter() - t0
                print(f"backend                {args.backend}")
                print(
                    f"runs started           {args.runs} in {elapsed:.2f}s = {args.runs / elapsed:.0f} runs/s"
                )
                print(f"start latency          p50 {pct(lat, 0.5):.1f} ms  p99 {pct(lat, 0.99):.1f} ms")
                live = len(running.engine.supervisor.actors)
                print(f"live actors (parked)   {live}  RSS +{rss_mb() - rss0:.0f} MB")
                await trio.sleep(settings.passivate_after_ms / 1000 + 1)  # idle actors passivate
                print(
                    f"after passivation      {len(running.engine.supervisor.actors)} live actors, "
                    f"RSS {rss_mb():.0f} MB, timers in memory {running.engine.timers.stats()['inMemory']}"
                )
            nursery.cancel_scope.cancel()

        # Restart on the same database with N open parked runs.
        async with trio.open_nursery() as nursery:
            t0 = time.perf_counter()
            running = await nursery.start(serve, settings)
            ready = time.perf_counter() - t0
            print(f"restart to ready       {ready * 1000:.0f} ms with {args.runs} open runs")
            async with httpx.AsyncClient(base_url=running.url, timeout=60) as client:
                r = await client.get("/readyz")
                assert r.status_code == 200

                async def signal(i: int) -> None:
                    resp = await client.post(
                        "/apps/bench/signals", json={"runId": run_ids[i], "name": "go"}, headers=key
                    )
                    assert resp.json()["status"] == "delivered", resp.text

                t0 = time.perf_counter()
                lat = await pool(args.runs, args.concurrency, signal)
                elapsed = time.perf_counter() - t0
                print(
                    f"signals delivered      {args.runs} in {elapsed:.2f}s = {args.runs / elapsed:.0f}/s "
                    f"(each rehydrates a passivated run)"
                )
                print(f"signal latency         p50 {pct(lat, 0.5):.1f} ms  p99 {pct(lat, 0.99):.1f} ms")
                engine = running.engine
                t0 = time.perf_counter()
                for run_id in run_ids:
                    await engine.wait_for(run_id, lambda r: r.status == "completed", 120)
                print(
                    f"all completed          +{time.perf_counter() - t0:.2f}s after the last signal; "
                    f"timer lag max {engine.timers.max_lag_ms} ms; mean {statistics.mean(lat) * 1000:.1f} ms"
                )
            nursery.cancel_scope.cancel()
    finally:
        if cluster is not None:
            cluster.destroy()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--concurrency", type=int, default=64)
    trio.run(main, parser.parse_args())
