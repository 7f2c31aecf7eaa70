"""Peer run on DBOS Transact: the same parked-wait workflow against a throwaway PostgreSQL.

    python bench/dbos_peer.py [--workflows 10000] [--wakes 200]
    python bench/dbos_peer.py --quick             # 1,000 workflows, 50 wakes

Needs `dbos` from PyPI in the venv (`pip install dbos`; not a Foliot dependency). Launches
DBOS in this process on a fresh database of a throwaway cluster (tests/pg.py), starts N async
workflows that each park on `DBOS.recv_async("go", 14 days)` (start throughput, with 64
concurrent starters), holds them (process RSS before / after, per workflow), then wakes some
one at a time with `DBOS.send_async` and measures send -> workflow resumed (p50/p99). Then
the same on `foliot serve` against another database of the same cluster (API starts by a
multi-process client, server RSS per parked run, signal -> task push one at a time).
When dbos cannot be imported or launched here, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c

parked_count = 0
woken: dict[str, float] = {}
events: dict[str, asyncio.Event] = {}


async def run(args: argparse.Namespace, url: str) -> list[list[Any]]:
    from dbos import DBOS

    DBOS(config={"name": "foliot-peer", "system_database_url": url, "log_level": "WARNING"})

    @DBOS.workflow()
    async def parked(i: int) -> Any:
        global parked_count
        parked_count += 1
        message = await DBOS.recv_async("go", timeout_seconds=14 * 86400)
        wid = DBOS.workflow_id
        assert wid is not None
        woken[wid] = time.time()
        if wid in events:
            events[wid].set()
        return message

    DBOS.launch()
    try:
        me = os.getpid()
        gc.collect()
        rss0 = c.rss_mb(me)
        ids: list[str] = []
        sem = asyncio.Semaphore(64)

        async def start(i: int) -> None:
            async with sem:
                handle = await DBOS.start_workflow_async(parked, i)
                ids.append(handle.workflow_id)

        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(start(i) for i in range(args.workflows))), args.limit)
        started = time.perf_counter() - t0
        t1 = time.perf_counter()
        while parked_count < args.workflows and time.perf_counter() - t1 < args.limit:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        all_parked = time.perf_counter() - t0
        await asyncio.sleep(1)
        gc.collect()
        rss1 = c.rss_mb(me)
        lat: list[float] = []
        lost = 0
        for wid in ids[: args.wakes]:
            events[wid] = asyncio.Event()
            s = time.time()
            try:
                await asyncio.wait_for(DBOS.send_async(wid, {"paid": True}, topic="go"), 30)
                await asyncio.wait_for(events[wid].wait(), 30)
                lat.append(woken[wid] - s)
            except TimeoutError:
                lost += 1
        return [
            ["workflows started", f"{len(ids):,} in {started:.1f}s = {len(ids) / started:,.0f}/s", ""],
            ["all parked in recv after", f"{all_parked:.1f}s ({parked_count:,} parked)", ""],
            ["process RSS before / after", f"{rss0:.0f} / {rss1:.0f} MB", ""],
            ["RSS per parked workflow", f"{(rss1 - rss0) * 1024 / max(1, parked_count):.1f} KB", ""],
            [
                f"wake latency, sequential ({len(lat)}): p50 / p99",
                f"{c.ms(c.pct(lat, 50))} / {c.ms(c.pct(lat, 99))} ms ({lost} not woken in 30 s)",
                "",
            ],
        ]
    finally:
        logging.getLogger("dbos").setLevel(logging.ERROR)  # workflows still parked are cancelled
        DBOS.destroy(destroy_registry=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=10_000, help="parked workflows to hold")
    parser.add_argument("--wakes", type=int, default=200, help="workflows woken one at a time")
    parser.add_argument("--limit", type=float, default=1800.0, help="bound on starting/parking, s")
    parser.add_argument("--skip-foliot", action="store_true", help="no Foliot run on the same cluster")
    parser.add_argument("--skip-dbos", action="store_true", help="only the Foliot half")
    parser.add_argument("--quick", action="store_true", help="1,000 workflows, 50 wakes")
    args = c.parse_args(parser, workflows=1_000, wakes=50, limit=300.0)
    c.header(f"DBOS Transact peer: {args.workflows:,} parked workflows (PostgreSQL)", args)
    try:
        import dbos

        version = getattr(dbos, "__version__", None) or _dist_version()
    except Exception as exc:
        print(
            f"dbos is not importable here ({type(exc).__name__}: {exc}); `pip install dbos` to run this peer."
        )
        return
    cluster = c.pg_cluster()
    try:
        rows = [] if args.skip_dbos else asyncio.run(run(args, cluster.new_database()))
    except Exception as exc:
        print(f"dbos {version} could not be run here: {type(exc).__name__}: {str(exc)[:500]}")
        rows = []
    if rows:
        print(c.table(f"DBOS Transact {version} on PostgreSQL", ["measure", "value", ""], rows))
    if not args.skip_foliot:
        print(
            c.table(
                "Foliot on the same cluster (same counts)", ["measure", "value", ""], foliot(args, cluster)
            )
        )


def foliot(args: argparse.Namespace, cluster: Any) -> list[list[Any]]:
    work = c.tmpdir("peer-foliot")
    handler = c.Handler(work)
    server = c.Foliot(cluster.new_database(), work, FOLIOT_PASSIVATE_AFTER_MS=3_600_000)
    try:
        return foliot_rows(args, server, handler)
    except Exception as exc:
        import traceback

        if server.child is not None:  # alive or not, the log says what happened
            print("  Foliot server log tail:\n" + server.child.tail(1500))
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/bench/" in f.filename]
        where = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames][-2:]
        return [
            ["FAILED", f"{type(exc).__name__}: {str(exc)[:200]} at {' < '.join(reversed(where))}", ""],
            ["", (server.death() or "server process still alive").splitlines()[0] + " (log tail above)", ""],
        ]
    finally:
        server.stop()
        handler.child.stop()


def foliot_rows(args: argparse.Namespace, server: c.Foliot, handler: c.Handler) -> list[list[Any]]:
    """The same parked-wait workflow on `foliot serve` against a new database of the same cluster:
    runs started through the API (multi-process client, 64 in flight), server RSS per parked run,
    and signal -> task push one at a time (the handler stands for the resumed workflow)."""
    from bench.restart import signal_to_task

    server.start()
    key = server.setup_app([c.PARKED], handler_url=handler.url)
    rss0 = server.rss()
    body = {"workflow": "parked", "input": {"i": 1}}
    requests = [["POST", "/apps/bench/runs", body, i] for i in range(args.workflows)]
    results, wall = c.run_clients(
        server.url,
        c.bearer(key),
        requests,
        mode="closed",
        procs=2,
        concurrency=32,
        timeout=60,
        limit_s=args.limit,
    )
    s = c.summarize(results, wall)
    time.sleep(1)
    rss1 = server.rss()
    ids = []
    with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=30) as client:
        page = client.get("/apps/bench/runs", params={"limit": min(1000, args.wakes)}).json()
        ids = [r["runId"] for r in page["runs"]]
        pushes = [signal_to_task(client, handler, run_id, 30)[1] for run_id in ids[: args.wakes]]
    woke = [p for p in pushes if p == p]
    return [
        [
            "runs started",
            f"{s['ok']:,} in {s['span']:.1f}s = {s['rps']:,.0f}/s (p99 {c.ms(s['p99'])} ms)",
            "",
        ],
        ["starts not answered 2xx (code: count; -1 timeout)", _codes(s["codes"]), ""],
        ["server RSS before / after", f"{rss0:.0f} / {rss1:.0f} MB", ""],
        ["RSS per parked run (live actors)", f"{(rss1 - rss0) * 1024 / max(1, s['ok']):.1f} KB", ""],
        [
            f"signal -> task push, sequential ({len(woke)}): p50 / p99",
            f"{c.ms(c.pct(woke, 50))} / {c.ms(c.pct(woke, 99))} ms ({len(pushes) - len(woke)} without push)",
            "",
        ],
    ]


def _codes(codes: dict[int, int]) -> str:
    return " ".join(f"{k}: {v}" for k, v in sorted(codes.items()) if not 200 <= k < 300) or "none"


def _dist_version() -> str:
    from importlib.metadata import version

    return version("dbos")


if __name__ == "__main__":
    main()
