"""Timer storm then a push each: N sleeps due in the same second, each followed by a task.

    python bench/push_storm.py --runs 3000 [--timeout 5s] [--handler-delay-ms 0]

Starts Foliot in-process (SQLite in a temp dir) and a local handler, starts N runs that sleep
until one shared instant, then push one task each (retry off: any attempt that fails fails its
run). Prints how many runs completed and failed, the drain rate, and the most pushes in flight
at once (bounded by FOLIOT_PUSH_CONCURRENCY). Issue 9's figure before the bounded dispatcher:
423 of 3,000 delivered, 94 of 200 sampled runs failed. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from foliot.core.config import Settings
from foliot.server import Running, serve
from tests.helpers import HandlerServer, answer_json, start_handler

ADMIN = "bench-admin"


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="foliot-storm-"))
    settings = Settings(
        port=0,
        database_url=f"sqlite:///{tmp / 'bench.db'}",
        data_dir=str(tmp / "data"),
        admin_token=ADMIN,
        push_concurrency=args.push_concurrency,
        push_concurrency_per_app=args.push_concurrency,
    )
    workflow = {
        "name": "storm",
        "steps": [
            {"name": "nap", "type": "sleep", "untilPath": "input.at"},
            {"name": "t", "type": "task", "timeout": args.timeout, "retry": {"maxAttempts": 1}},
        ],
    }

    async def handle(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if args.handler_delay_ms:
            await trio.sleep(args.handler_delay_ms / 1000)
        return answer_json({"ok": True})

    async with trio.open_nursery() as nursery:
        handler = await start_handler(nursery, HandlerServer())
        handler.route("t", handle)
        running: Running = await nursery.start(serve, settings)
        async with httpx.AsyncClient(base_url=running.url, timeout=60) as client:
            admin = {"Authorization": f"Bearer {ADMIN}"}
            r = await client.put("/apps/storm", json={"handlerBaseUrl": handler.url}, headers=admin)
            handler.secrets.append(r.json()["signingSecret"])
            key = {"Authorization": f"Bearer {r.json()['apiKey']}"}
            await client.post("/apps/storm/workflows", json=workflow, headers=key)
            due = time.time() + args.lead
            at = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            run_ids: list[str] = []
            send, receive = trio.open_memory_channel[int](args.runs)
            for i in range(args.runs):
                send.send_nowait(i)
            send.close()

            async def starter() -> None:
                async for _ in receive:
                    while True:
                        resp = await client.post(
                            "/apps/storm/runs", json={"workflow": "storm", "input": {"at": at}}, headers=key
                        )
                        if resp.status_code == 201:
                            run_ids.append(resp.json()["runId"])
                            break
                        await trio.sleep(float(resp.headers.get("Retry-After", "1")))

            async with trio.open_nursery() as starters:
                for _ in range(32):
                    starters.start_soon(starter)
            if time.time() > due:
                print(f"warning: starting took longer than the {args.lead}s lead; raise --lead")
            await trio.sleep(max(0.0, due - time.time()))
            t0 = time.perf_counter()
            engine = running.engine
            statuses: dict[str, int] = {}
            for run_id in run_ids:
                run = await engine.runs.wait_for(run_id, lambda r: r.status in ("completed", "failed"), 600)
                statuses[run.status] = statuses.get(run.status, 0) + 1
            drain = time.perf_counter() - t0
            print(f"runs                   {args.runs} sleeping until one instant, then a push each")
            print(f"outcome                {statuses}")
            print(f"delivered to handler   {len(handler.received)}")
            print(f"drain                  {drain:.2f}s = {args.runs / drain:.0f} pushes/s")
            d = engine.dispatcher
            print(f"pushes in flight       max {d.max_inflight} (cap {d.concurrency}, paced to {d.limit})")
            print(f"push outcomes          {engine.dispatcher.metrics.outcome_counts()}")
            print(f"timers fired           {engine.timers.stats()['fired']}")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--timeout", default="5s", help="the task step's timeout")
    parser.add_argument("--handler-delay-ms", type=int, default=0)
    parser.add_argument("--push-concurrency", type=int, default=64)
    parser.add_argument(
        "--lead", type=float, default=30.0, help="seconds from the first start to the due time"
    )
    trio.run(main, parser.parse_args())
