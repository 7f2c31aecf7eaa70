"""Memory per live parked actor: RSS delta of a server subprocess, and a tracemalloc diff.

    python bench/actor_memory.py [--runs 10000] [--skip-inprocess]
    python bench/actor_memory.py --quick          # 1,000 runs

Part 1 (outside): a `foliot serve` subprocess (SQLite) with FOLIOT_PASSIVATE_AFTER_MS large,
so every run stays a live actor; N runs started through the API by a multi-process client park
on a `wait`; RSS of the server before and after, divided by N.
Part 2 (inside): the same server run inside this process under `tracemalloc`; a snapshot
after a warm-up, another after N more starts (gc'd), and the top 15 allocation sites of the
difference, per actor. Target (issue 9): <= 4 KB per live parked actor (18.5 KB when filed).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c

LIVE_MS = 3_600_000


def outside(args: argparse.Namespace) -> list[list[Any]]:
    work = c.tmpdir("memory")
    server = c.Foliot(
        c.database_url("sqlite", work),
        work,
        FOLIOT_PASSIVATE_AFTER_MS=LIVE_MS,
        FOLIOT_MAX_LIVE_ACTORS=args.runs * 2,
    )
    server.start()
    key = server.setup_app([c.PARKED])
    body = {"workflow": "parked", "input": {"orderId": 7}}
    warm = [["POST", "/apps/bench/runs", body, None]] * args.warmup
    c.run_clients(server.url, c.bearer(key), warm, mode="closed", procs=1, concurrency=8, timeout=60)
    time.sleep(1)
    live0, rss0 = c.metric_sum(server.metrics(), "foliot_live_actors"), server.rss()
    requests = [["POST", "/apps/bench/runs", body, None]] * args.runs
    t0 = time.perf_counter()
    results, _ = c.run_clients(
        server.url, c.bearer(key), requests, mode="closed", procs=2, concurrency=16, timeout=60, limit_s=3600
    )
    took = time.perf_counter() - t0
    time.sleep(2)
    live1, rss1 = c.metric_sum(server.metrics(), "foliot_live_actors"), server.rss()
    ok = sum(1 for r in results if r[3] == 201)
    server.stop()
    added = max(1.0, live1 - live0)
    return [
        ["runs started (201)", f"{ok:,} of {args.runs:,} in {took:.0f}s"],
        ["live actors before / after", f"{live0:.0f} / {live1:.0f}"],
        ["server RSS before / after", f"{rss0:.1f} / {rss1:.1f} MB"],
        ["RSS per live parked actor", f"{(rss1 - rss0) * 1024 / added:.2f} KB  (target <= 4 KB)"],
    ]


async def inside(args: argparse.Namespace) -> tuple[list[list[Any]], list[list[Any]]]:
    import httpx
    import trio

    from foliot.core.config import Settings
    from foliot.server import serve

    work = c.tmpdir("memory-in")
    settings = Settings(
        port=0,
        database_url=f"sqlite:///{work / 'foliot.db'}",
        data_dir=str(work / "data"),
        admin_token=c.ADMIN,
        passivate_after_ms=LIVE_MS,
        max_live_actors=args.runs * 2,
        log_level="WARNING",
    )
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve, settings)
        async with httpx.AsyncClient(base_url=running.url, timeout=60) as client:
            r = await client.put(
                "/apps/bench", json={"handlerBaseUrl": "http://127.0.0.1:9"}, headers=c.admin_headers()
            )
            key = c.bearer(r.json()["apiKey"])
            await client.post("/apps/bench/workflows", json=c.PARKED, headers=key)
            body = {"workflow": "parked", "input": {"orderId": 7}}

            async def starts(n: int) -> None:
                remaining = [n]

                async def worker() -> None:
                    while remaining[0] > 0:
                        remaining[0] -= 1
                        await client.post("/apps/bench/runs", json=body, headers=key)

                with trio.fail_after(3600):
                    async with trio.open_nursery() as inner:
                        for _ in range(16):
                            inner.start_soon(worker)

            await starts(args.warmup)
            await trio.sleep(0.5)
            gc.collect()
            before = tracemalloc.take_snapshot()
            tracked0 = len(gc.get_objects())
            live0 = len(running.engine.supervisor.actors)
            await starts(args.runs)
            await trio.sleep(0.5)
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracked = len(gc.get_objects()) - tracked0
            live = len(running.engine.supervisor.actors) - live0
        nursery.cancel_scope.cancel()
    n = max(1, live)
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    summary = [
        ["live actors added (in process)", f"{live:,}"],
        ["traced bytes per actor (all sites)", f"{total / n / 1024:.2f} KB"],
        # What a full garbage collection walks for each live actor (foliot/gcwatch.py).
        ["objects tracked by the garbage collector per actor", f"{tracked / n:.1f}"],
    ]
    rows = []
    for s in sorted(stats, key=lambda s: s.size_diff, reverse=True)[: args.top]:
        frame = s.traceback[0]
        where = f"{_short(frame.filename)}:{frame.lineno}"
        rows.append(
            [where, f"{s.size_diff / n:.0f}", f"{s.count_diff / n:.2f}", f"{100 * s.size_diff / total:.1f}%"]
        )
    return summary, rows


def _short(path: str) -> str:
    for marker in ("/site-packages/", "/lib/python3", str(c.ROOT) + "/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10_000, help="live parked runs to add")
    parser.add_argument("--warmup", type=int, default=200, help="runs started before the first measurement")
    parser.add_argument("--top", type=int, default=15, help="allocation sites to print")
    parser.add_argument("--skip-inprocess", action="store_true", help="only the subprocess RSS part")
    parser.add_argument("--quick", action="store_true", help="1,000 runs")
    args = c.parse_args(parser, runs=1_000, warmup=100)
    c.header(f"memory per live parked actor ({args.runs:,} runs, SQLite)", args)
    print(c.table("outside: foliot serve subprocess", ["measure", "value"], outside(args)))
    if not args.skip_inprocess:
        import trio

        tracemalloc.start(1)
        summary, rows = trio.run(inside, args)
        tracemalloc.stop()
        print(c.table("inside: tracemalloc diff (engine in this process)", ["measure", "value"], summary))
        print(
            c.table(
                f"top {args.top} allocation sites per actor",
                ["site", "bytes/actor", "blocks/actor", "share"],
                rows,
            )
        )


if __name__ == "__main__":
    main()
