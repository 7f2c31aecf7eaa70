"""Fairness between apps (issue 23): app `quiet`'s push latency alone, then while app `noisy` has
a big push backlog.

    python bench/fairness.py [--backend sqlite|postgres] [--backlog 50000] [--quiet 500]
        [--noisy-delay-ms 200] [--seeded] [--quick]

Starts Foliot in-process (SQLite in a temp dir, or a database of a throwaway PostgreSQL cluster
from tests/pg.py) and a local handler, as push_storm.py does, with
the default senders (64, at most 48 per app: `--per-app`). The weighted round-robin puts a
quiet push ahead of the noisy backlog; the per-app cap keeps senders free for it. With
`--per-app 64` every sender can be held by slow noisy pushes, and a quiet push then waits for
one to finish (the noisy handler's time), whatever the queue order.
Phase 1: `quiet` alone, one start every 20 ms; its push latency (start request sent -> push at
the handler). Phase 2: `noisy` starts `--backlog` runs as fast as 32 clients can (its handler
takes `--noisy-delay-ms`, so pushes queue), then `quiet` does phase 1 again while the backlog
lasts. `--seeded` makes phase 2's backlog without HTTP (starting 50,000 runs takes longer
than this machine allows): the server is stopped, the noisy runs are written straight into its
store (`common.seed_bulk`, each with its task's first attempt open), and the server started
again, whose recovery queues every push at once; `quiet` starts when 90 % of them are queued.
Prints both p50/p99, the difference (target: p99 <= 100 ms above the unloaded p99) and
the noisy backlog seen. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from foliot.core.config import Settings
from foliot.server import Running, serve
from tests.helpers import HandlerServer, answer_json, start_handler

ADMIN = "bench-admin"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else float("nan")


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="foliot-fair-"))
    if args.backend == "postgres":
        from bench import common

        database_url = common.database_url("postgres", tmp, common.pg_cluster())
    else:
        database_url = f"sqlite:///{tmp / 'bench.db'}"
    settings = Settings(
        port=0,
        database_url=database_url,
        data_dir=str(tmp / "data"),
        admin_token=ADMIN,
        push_concurrency=args.push_concurrency,
        push_concurrency_per_app=args.per_app,
    )
    seen: dict[str, float] = {}

    async def noisy(body: dict[str, Any], headers: dict[str, str]) -> Any:
        await trio.sleep(args.noisy_delay_ms / 1000)
        return answer_json({"ok": True})

    def quiet(body: dict[str, Any], headers: dict[str, str]) -> Any:
        seen[body["runId"]] = time.perf_counter()
        return answer_json({"ok": True})

    wf = {"name": "w", "steps": [{"name": "n", "type": "task", "retry": {"maxAttempts": 1}}]}

    async def quiet_phase(
        client: httpx.AsyncClient, engine: Any, key: dict[str, str]
    ) -> tuple[list[float], int]:
        sent: dict[str, float] = {}
        backlog = 0

        async def one() -> None:
            t = time.perf_counter()
            r = await client.post("/apps/quiet/runs", json={"workflow": "w"}, headers=key)
            if r.status_code == 201:
                sent[r.json()["runId"]] = t

        async with trio.open_nursery() as starts:
            for _ in range(args.quiet):
                backlog = max(backlog, engine.dispatcher.app_backlog("noisy"))
                starts.start_soon(one)
                await trio.sleep(0.02)
        with trio.move_on_after(30):
            while any(run_id not in seen for run_id in sent):  # noqa: ASYNC110
                await trio.sleep(0.01)
        return [seen[r] - t for r, t in sent.items() if r in seen], backlog

    async with trio.open_nursery() as nursery:
        handler = await start_handler(nursery, HandlerServer())
        handler.route("n", noisy)
        handler.route("q", quiet)
        keys: dict[str, dict[str, str]] = {}
        async with trio.open_nursery() as first:
            running: Running = await first.start(serve, settings)
            engine = running.engine
            async with httpx.AsyncClient(base_url=running.url, timeout=120) as client:
                admin = {"Authorization": f"Bearer {ADMIN}"}
                for app, step in (("noisy", "n"), ("quiet", "q")):
                    r = await client.put(f"/apps/{app}", json={"handlerBaseUrl": handler.url}, headers=admin)
                    handler.secrets.append(r.json()["signingSecret"])
                    keys[app] = {"Authorization": f"Bearer {r.json()['apiKey']}"}
                    steps = [{"name": step, "type": "task", "retry": {"maxAttempts": 1}}]
                    await client.post(
                        f"/apps/{app}/workflows", json={**wf, "steps": steps}, headers=keys[app]
                    )
                alone, _ = await quiet_phase(client, engine, keys["quiet"])
                if not args.seeded:
                    start_s = await start_noisy(client, keys["noisy"], args.backlog)
                    at_start = engine.dispatcher.app_backlog("noisy")
                    loaded, peak = await quiet_phase(client, engine, keys["quiet"])
                    left = engine.dispatcher.app_backlog("noisy")
            first.cancel_scope.cancel()
        if args.seeded:  # the backlog written into the stopped server's store; recovery queues it
            from bench import common

            t0 = time.perf_counter()
            await trio.to_thread.run_sync(
                lambda: common.seed_bulk(database_url, "noisy", wf, args.backlog, progress=False)
            )
            async with trio.open_nursery() as second:
                running = await second.start(serve, settings)
                engine = running.engine
                with trio.move_on_after(150):
                    while engine.dispatcher.app_backlog("noisy") < args.backlog * 0.9:  # noqa: ASYNC110
                        await trio.sleep(0.1)
                start_s = time.perf_counter() - t0
                at_start = engine.dispatcher.app_backlog("noisy")
                async with httpx.AsyncClient(base_url=running.url, timeout=120) as client:
                    loaded, peak = await quiet_phase(client, engine, keys["quiet"])
                left = engine.dispatcher.app_backlog("noisy")
                second.cancel_scope.cancel()
        how = "seeded and recovered" if args.seeded else "started"
        print(f"noisy backlog          {args.backlog} runs {how} in {start_s:.1f}s; queued pushes when")
        print(f"                       quiet began {at_start}, most seen {peak}, at its end {left}")
        print(
            f"senders                {args.push_concurrency} (per app: {args.per_app}),"
            f" noisy handler {args.noisy_delay_ms} ms, store {args.backend}"
        )
        for label, values in (("quiet alone", alone), ("quiet, noisy backlog", loaded)):
            print(
                f"{label:22} n={len(values)} p50 {pct(values, 0.5) * 1000:.1f} ms"
                f"  p99 {pct(values, 0.99) * 1000:.1f} ms"
            )
        diff = (pct(loaded, 0.99) - pct(alone, 0.99)) * 1000
        print(f"p99 above unloaded     {diff:.1f} ms (target <= 100 ms)", flush=True)
        nursery.cancel_scope.cancel()


async def start_noisy(client: httpx.AsyncClient, key: dict[str, str], count: int) -> float:
    """`count` runs of app `noisy` started by 32 clients; the seconds it took."""
    send, receive = trio.open_memory_channel[int](count)
    for i in range(count):
        send.send_nowait(i)
    send.close()

    async def starter() -> None:
        async for _ in receive:
            while True:
                r = await client.post("/apps/noisy/runs", json={"workflow": "w"}, headers=key)
                if r.status_code == 201:
                    break
                await trio.sleep(float(r.headers.get("Retry-After", "0.1")))

    t0 = time.perf_counter()
    async with trio.open_nursery() as starters:
        for _ in range(32):
            starters.start_soon(starter)
    return time.perf_counter() - t0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--quiet", type=int, default=500, help="quiet app's starts per phase")
    parser.add_argument("--noisy-delay-ms", type=int, default=200)
    parser.add_argument("--push-concurrency", type=int, default=64)
    parser.add_argument("--per-app", type=int, default=48, help="FOLIOT_PUSH_CONCURRENCY_PER_APP")
    parser.add_argument(
        "--seeded",
        action="store_true",
        help="write the noisy runs straight into the stopped server's store and restart it "
        "(recovery queues every push at once) instead of starting them over HTTP",
    )
    parser.add_argument(
        "--quick", action="store_true", help="--backlog 3000 --quiet 200 --noisy-delay-ms 5000"
    )
    parsed = parser.parse_args()
    if parsed.quick:  # a slower noisy handler, so a backlog builds from fewer starts
        parsed.backlog, parsed.quiet, parsed.noisy_delay_ms = 3000, 200, 5000
    trio.run(main, parsed)
