"""Fairness between apps (issue 23): app `quiet`'s push latency alone, then while app `noisy` has
a big push backlog.

    python bench/fairness.py [--backlog 50000] [--quiet 500] [--noisy-delay-ms 200] [--quick]

Starts Foliot in-process (SQLite in a temp dir) and a local handler, as push_storm.py does, with
the default senders (64, at most 48 per app: `--per-app`). The weighted round-robin puts a
quiet push ahead of the noisy backlog; the per-app cap keeps senders free for it. With
`--per-app 64` every sender can be held by slow noisy pushes, and a quiet push then waits for
one to finish (the noisy handler's time), whatever the queue order.
Phase 1: `quiet` alone, one start every 20 ms; its push latency (start request sent -> push at
the handler). Phase 2: `noisy` starts `--backlog` runs as fast as 32 clients can (its handler
takes `--noisy-delay-ms`, so pushes queue), then `quiet` does phase 1 again while the backlog
lasts. Prints both p50/p99, the difference (target: p99 <= 100 ms above the unloaded p99) and
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
    settings = Settings(
        port=0,
        database_url=f"sqlite:///{tmp / 'bench.db'}",
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

    async with trio.open_nursery() as nursery:
        handler = await start_handler(nursery, HandlerServer())
        handler.route("n", noisy)
        handler.route("q", quiet)
        running: Running = await nursery.start(serve, settings)
        engine = running.engine
        async with httpx.AsyncClient(base_url=running.url, timeout=120) as client:
            admin = {"Authorization": f"Bearer {ADMIN}"}
            keys = {}
            for app, step in (("noisy", "n"), ("quiet", "q")):
                r = await client.put(f"/apps/{app}", json={"handlerBaseUrl": handler.url}, headers=admin)
                handler.secrets.append(r.json()["signingSecret"])
                keys[app] = {"Authorization": f"Bearer {r.json()['apiKey']}"}
                wf = {"name": "w", "steps": [{"name": step, "type": "task", "retry": {"maxAttempts": 1}}]}
                await client.post(f"/apps/{app}/workflows", json=wf, headers=keys[app])

            async def quiet_phase(label: str) -> tuple[list[float], int]:
                sent: dict[str, float] = {}
                backlog = 0

                async def one() -> None:
                    t = time.perf_counter()
                    r = await client.post("/apps/quiet/runs", json={"workflow": "w"}, headers=keys["quiet"])
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

            alone, _ = await quiet_phase("alone")
            send, receive = trio.open_memory_channel[int](args.backlog)
            for i in range(args.backlog):
                send.send_nowait(i)
            send.close()

            async def starter() -> None:
                async for _ in receive:
                    while True:
                        r = await client.post(
                            "/apps/noisy/runs", json={"workflow": "w"}, headers=keys["noisy"]
                        )
                        if r.status_code == 201:
                            break
                        await trio.sleep(float(r.headers.get("Retry-After", "0.1")))

            t0 = time.perf_counter()
            async with trio.open_nursery() as starters:
                for _ in range(32):
                    starters.start_soon(starter)
            start_s = time.perf_counter() - t0
            at_start = engine.dispatcher.app_backlog("noisy")
            loaded, peak = await quiet_phase("loaded")
            left = engine.dispatcher.app_backlog("noisy")
        print(f"noisy backlog          {args.backlog} runs started in {start_s:.1f}s; queued pushes when")
        print(f"                       quiet began {at_start}, most seen {peak}, at its end {left}")
        print(
            f"senders                {args.push_concurrency} (per app: {args.per_app}),"
            f" noisy handler {args.noisy_delay_ms} ms"
        )
        for label, values in (("quiet alone", alone), ("quiet, noisy backlog", loaded)):
            print(
                f"{label:22} n={len(values)} p50 {pct(values, 0.5) * 1000:.1f} ms"
                f"  p99 {pct(values, 0.99) * 1000:.1f} ms"
            )
        diff = (pct(loaded, 0.99) - pct(alone, 0.99)) * 1000
        print(f"p99 above unloaded     {diff:.1f} ms (target <= 100 ms)")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--quiet", type=int, default=500, help="quiet app's starts per phase")
    parser.add_argument("--noisy-delay-ms", type=int, default=200)
    parser.add_argument("--push-concurrency", type=int, default=64)
    parser.add_argument("--per-app", type=int, default=48, help="FOLIOT_PUSH_CONCURRENCY_PER_APP")
    parser.add_argument(
        "--quick", action="store_true", help="--backlog 3000 --quiet 200 --noisy-delay-ms 5000"
    )
    parsed = parser.parse_args()
    if parsed.quick:  # a slower noisy handler, so a backlog builds from fewer starts
        parsed.backlog, parsed.quiet, parsed.noisy_delay_ms = 3000, 200, 5000
    trio.run(main, parsed)
