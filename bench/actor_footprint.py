"""Memory per live parked run actor: tracemalloc snapshot diff and RSS delta.

    python bench/actor_footprint.py [--runs 10000] [--top 15] [--max-live N]

Runs the engine in-process (no HTTP) on a temp-file SQLite store, with passivation disabled
(`passivate_after_ms` of a day), and parks runs on a `wait` step (14-day timeout, outside the
timer wheel's window). Two phases, so tracemalloc's own bookkeeping does not inflate the RSS
figure: first N runs are parked and the RSS delta is taken; then tracemalloc starts, N more
runs are parked, and the snapshot diff is printed (total and the top allocation sites).

`--max-live 1` is the control: the same runs with their actors passivated as soon as they
park, so what remains is the cost of everything but the actors (store, caches). Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import trio
import trio.testing
from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from foliot.core.config import Settings
from foliot.core.credentials import Vault
from foliot.core.views import run_view
from foliot.core.workflow.definition import canonical_json
from foliot.node import Node
from foliot.storage.base import ApiKeyRecord, AppRecord, SecretRecord
from foliot.storage.sqlite import open_sqlite

WORKFLOW = {
    "name": "parked",
    "steps": [
        {"name": "wait", "type": "wait", "signal": "go", "timeout": "14d"},
        {"name": "nap", "type": "sleep", "duration": "1ms"},
    ],
}


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def park(engine: Node, count: int, concurrency: int = 32) -> list[str]:
    ids: list[str] = []
    send, receive = trio.open_memory_channel[int](count)
    for i in range(count):
        send.send_nowait(i)
    send.close()

    async def worker() -> None:
        async for _ in receive:
            body, _created = await engine.runs.start(
                app="app",
                workflow="parked",
                version=None,
                input={"n": len(ids)},
                business_key=None,
                run_timeout_ms=None,
                idempotency_key=None,
                request_hash="",
                render=run_view,
            )
            ids.append(str(body["runId"]))

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return ids


async def settle() -> None:
    """Let every actor reach its parked, idle state, then collect garbage."""
    for _ in range(3):
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        await trio.sleep(0.2)
    gc.collect()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=tmp,
            passivate_after_ms=86_400_000,
            max_live_actors=args.max_live,
            timer_window_ms=60_000,
        )
        vault = Vault(Fernet.generate_key().decode())
        async with open_sqlite(str(Path(tmp) / "foliot.db")) as store:
            now = int(time.time() * 1000)
            await store.create_app(
                AppRecord("app", "http://127.0.0.1:9", None, now, now),
                ApiKeyRecord("k1", "app", "x", now),
                SecretRecord("s1", "app", vault.encrypt("whsec_bench"), now, None),
            )
            await store.add_workflow_version("app", "parked", canonical_json(WORKFLOW), now)
            engine = Node(settings, store, vault=vault)
            async with trio.open_nursery() as nursery:
                await nursery.start(engine.serve)
                await park(engine, 200)  # warm up: caches, definitions, allocator arenas
                await settle()
                n = args.runs
                live0 = len(engine.supervisor.actors)

                rss0 = rss_bytes()
                t0 = time.perf_counter()
                await park(engine, n)
                took = time.perf_counter() - t0
                await settle()
                rss1 = rss_bytes()
                live1 = len(engine.supervisor.actors)

                tracemalloc.start(8)
                await settle()
                before = tracemalloc.take_snapshot()
                await park(engine, n)
                await settle()
                after = tracemalloc.take_snapshot()
                live2 = len(engine.supervisor.actors)
                tracemalloc.stop()

                print(f"runs parked per phase   {n} ({n / took:.0f} starts/s)")
                print(f"live actors             {live0} -> {live1} -> {live2}")
                print(f"tasks in the run        {_task_count()}")
                rss = rss1 - rss0
                print(f"RSS delta               {rss / 1e6:.1f} MB = {rss / n:,.0f} B per parked run")
                _print_diff(before, after, n, args.top)
                nursery.cancel_scope.cancel()


def _task_count() -> int:
    root = trio.lowlevel.current_root_task()
    count = 0
    stack = [root]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


def _print_diff(before: Any, after: Any, n: int, top: int) -> None:
    filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(filters), after.filter_traces(filters)
    by_line = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in by_line)
    blocks = sum(s.count_diff for s in by_line)
    print(
        f"tracemalloc delta       {total / 1e6:.2f} MB = {total / n:,.0f} B per parked run "
        f"({blocks / n:.1f} blocks)"
    )
    print(f"top {top} allocation sites (bytes per run, blocks per run):")
    for stat in by_line[:top]:
        frame = stat.traceback[0]
        where = f"{_short(frame.filename)}:{frame.lineno}"
        print(f"  {stat.size_diff / n:8,.0f} B  {stat.count_diff / n:5.2f}  {where}")


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.replace(str(Path(__file__).resolve().parent.parent) + "/", "")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--max-live", type=int, default=1_000_000)
    trio.run(main, parser.parse_args())
