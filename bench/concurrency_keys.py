"""Concurrency keys (issue 23): N runs over K keys with `concurrency: {limit: L, key}` against
the same workflow without a limit, in the same run.

    python bench/concurrency_keys.py [--backend sqlite|postgres|both] [--runs 10000] [--keys 100]
        [--limit 2] [--delay-ms 1000] [--rounds 1]
    python bench/concurrency_keys.py --quick

Per store, a `foliot serve` subprocess (SQLite in a temp dir, or a throwaway PostgreSQL
cluster from tests/pg.py) with two workflows of one task step each: `keyed`
(`"concurrency": {"limit": L, "key": "input.customer"}`) and `free` (no limit). The task
handler is this script's own `--serve-handler` mode in its own process: every push is held
`--delay-ms` (1 s: at ~150 starts/s over 100 keys a key's pushes would overlap, and its runs
queue, while the 200 slots still take 200 runs/s, so the limit binds without being the
bottleneck), and it records,
per key (`input.customer`), how many of its pushes are in flight at once, and the most seen.

For each workflow (`free` first, then `keyed`, `--rounds` times): the handler's counts reset,
N starts (`input.customer` = `c<i % K>`) sent from `common.run_clients` (2 processes x 16,
closed loop), then a wait until no run is open (`/metrics`). Throughput = runs completed /
(first start sent -> last run closed). Printed per workflow: starts/s, runs done/s, the ratio
keyed / free (target >= 0.8x), pushes seen (and duplicates), the most in flight per key seen by
the handler (must never exceed L for `keyed`; `free` shows what the limit prevents), the most
queued runs seen in `/metrics`, server CPU per run. The bare quart-trio floor's start rate is
printed for context (same clients, same run). Nothing is asserted by exit code, but a keyed
maximum above L is printed as VIOLATED.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET = 0.8


# ---------------------------------------------------------------------------- the handler


def serve_handler(port: int, delay_ms: int) -> None:
    """Hold every push `delay_ms`, counting its key's pushes in flight; `GET /stats`, `POST /reset`."""
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve

    inflight: dict[str, int] = {}
    most: dict[str, int] = {}
    totals = {"received": 0, "unparsed": 0}
    seen: dict[str, int] = {}

    async def respond(send: Any, status: int, body: bytes) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        raw = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["method"] == "GET" and scope["path"] == "/stats":
            out = {
                **totals,
                "unique": len(seen),
                "duplicates": sum(n - 1 for n in seen.values()),
                "max_per_key": max(most.values(), default=0),
                "keys": len(most),
                "inflight_now": sum(inflight.values()),
            }
            await respond(send, 200, json.dumps(out).encode())
            return
        if scope["path"] == "/reset":
            inflight.clear()
            most.clear()
            seen.clear()
            totals.update(received=0, unparsed=0)
            await respond(send, 200, b"{}")
            return
        try:
            body = json.loads(raw)
            key = str(body["input"]["customer"])
            seen[body["idempotencyKey"]] = seen.get(body["idempotencyKey"], 0) + 1
        except (ValueError, KeyError, TypeError):
            totals["unparsed"] += 1
            await respond(send, 400, b"{}")
            return
        totals["received"] += 1
        inflight[key] = inflight.get(key, 0) + 1
        most[key] = max(most.get(key, 0), inflight[key])
        try:
            await trio.sleep(delay_ms / 1000)
        finally:
            inflight[key] -= 1
        await respond(send, 200, b'{"ok":true}')

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.keep_alive_timeout = 75
    config.backlog = 2048
    trio.run(serve, app, config)


# ---------------------------------------------------------------------------- the load


def workflows(limit: int) -> list[dict[str, Any]]:
    step = [{"name": "call", "type": "task", "timeout": "60s", "retry": {"maxAttempts": 1}}]
    return [
        {"name": "free", "steps": step},
        {"name": "keyed", "concurrency": {"limit": limit, "key": "input.customer"}, "steps": step},
    ]


def starts(workflow: str, runs: int, keys: int) -> list[list[Any]]:
    return [
        ["POST", "/apps/bench/runs", {"workflow": workflow, "input": {"customer": f"c{i % keys}"}}, None]
        for i in range(runs)
    ]


def one_pass(c: Any, server: Any, handler_url: str, key: str, workflow: str, args: Any) -> dict[str, Any]:
    import httpx

    httpx.post(f"{handler_url}/reset", timeout=10).raise_for_status()
    most_queued = [0.0]
    done = threading.Event()

    def watch() -> None:  # queued runs in /metrics, once a second, while the pass lasts
        while not done.wait(1.0):
            m = server.metrics(timeout=10)
            if m:
                most_queued[0] = max(most_queued[0], c.metric_sum(m, "foliot_open_runs", status="queued"))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cpu0 = c.cpu_seconds(server.pid)
    t0 = time.time()
    results, _ = c.run_clients(
        server.url,
        c.bearer(key),
        starts(workflow, args.runs, args.keys),
        mode="closed",
        procs=2,
        concurrency=16,
        timeout=60,
        limit_s=args.pass_limit,
    )
    s = c.summarize(results, 0.0)
    first = min((r[0] for r in results), default=t0)
    started_at = time.time()
    drained = False
    while time.time() - started_at < args.pass_limit:
        m = server.metrics(timeout=10)
        if m and c.metric_sum(m, "foliot_open_runs") == 0:
            drained = True
            break
        time.sleep(0.05)
    end = time.time()
    done.set()
    watcher.join()
    cpu = c.cpu_seconds(server.pid) - cpu0
    stats = httpx.get(f"{handler_url}/stats", timeout=30).json()
    span = end - first
    return {
        "ok": s["ok"],
        "start_rps": s["rps"],
        "done_rps": s["ok"] / span if drained and span > 0 else float("nan"),
        "span": span,
        "drained": drained,
        "stats": stats,
        "queued": most_queued[0],
        "cpu_ms": 1000 * cpu / max(1, s["ok"]),
        "codes": {k: v for k, v in s["codes"].items() if not 200 <= k < 300},
    }


def one_backend(c: Any, backend: str, args: Any) -> list[list[Any]]:
    work = c.tmpdir(f"ckeys-{backend}")
    cluster = c.pg_cluster() if backend == "postgres" else None
    import os

    handler_port = c.free_port()
    handler = c.Child(
        [sys.executable, __file__, "--serve-handler", str(handler_port), "--delay-ms", str(args.delay_ms)],
        env={**os.environ, "PYTHONPATH": str(c.ROOT)},
        log=work / "handler.log",
    )
    handler_url = f"http://127.0.0.1:{handler_port}"
    c.wait_http(handler_url, 30, handler, path="/stats")
    # The latency gate off: a closed loop is a standing queue by design (as in start_rate.py).
    # Senders enough that `free` is not held back by them (`--senders`): the limit is the only
    # difference between the two workflows.
    server = c.Foliot(
        c.database_url(backend, work, cluster),
        work,
        FOLIOT_ADMISSION_TARGET_MS=0,
        FOLIOT_PUSH_CONCURRENCY=args.senders,
        FOLIOT_PUSH_CONCURRENCY_PER_APP=args.senders,
    )
    server.start()
    key = server.setup_app(workflows(args.limit), handler_url=handler_url)
    floor = c.Floor(work, key)
    fl, _ = c.run_clients(
        floor.url, c.bearer(key), starts("x", 3000, args.keys), mode="closed", procs=2, concurrency=16
    )
    floor_rps = c.summarize(fl, 0.0)["rps"]
    floor.child.stop()
    # warm-up: a few of each
    for wf in ("free", "keyed"):
        c.run_clients(
            server.url, c.bearer(key), starts(wf, 200, args.keys), mode="closed", procs=2, concurrency=16
        )
    drained_by = time.time() + 120
    while time.time() < drained_by:  # the warm-up's runs closed (their pushes out of the counts)
        m = server.metrics(timeout=10)
        if m and c.metric_sum(m, "foliot_open_runs") == 0:
            break
        time.sleep(0.2)
    rows: list[list[Any]] = []
    for rnd in range(args.rounds):
        passes = {}
        for wf in ("free", "keyed"):
            time.sleep(1.0)
            p = one_pass(c, server, handler_url, key, wf, args)
            passes[wf] = p
            st = p["stats"]
            verdict = ""
            if wf == "keyed":
                verdict = "ok" if st["max_per_key"] <= args.limit else "VIOLATED"
            print(
                f"  {backend} round {rnd + 1} {wf}: {p['ok']} started at {p['start_rps']:.0f}/s, "
                f"done over {p['span']:.1f}s ({p['done_rps']:.0f}/s, drained {p['drained']}); pushes "
                f"{st['received']} (unique {st['unique']}, dup {st['duplicates']}) over {st['keys']} keys; "
                f"max in flight per key {st['max_per_key']} {verdict}; most queued {p['queued']:.0f}; "
                f"codes {p['codes']}",
                flush=True,
            )
        free, keyed = passes["free"], passes["keyed"]
        # What the limit itself allows: every slot of every key busy all the time, each push held
        # `--delay-ms`; no engine's keyed pass can go faster than this or than its own free pass.
        cap = args.keys * args.limit * 1000.0 / max(1, args.delay_ms)
        rows.append(
            [
                backend,
                rnd + 1,
                f"{floor_rps:.0f}",
                f"{free['start_rps']:.0f} / {keyed['start_rps']:.0f}",
                f"{free['done_rps']:.0f}",
                f"{keyed['done_rps']:.0f}",
                c.ratio(keyed["done_rps"], free["done_rps"]),
                f"{cap:.0f}",
                c.ratio(keyed["done_rps"], min(cap, free["done_rps"])),
                f"{free['stats']['max_per_key']}",
                f"{keyed['stats']['max_per_key']}"
                + ("" if keyed["stats"]["max_per_key"] <= args.limit else " VIOLATED"),
                f"{keyed['queued']:.0f}",
                f"{free['cpu_ms']:.2f} / {keyed['cpu_ms']:.2f}",
                f"{free['stats']['duplicates']} / {keyed['stats']['duplicates']}",
            ]
        )
    print(f"  {backend}: server alive: {server.alive()} {server.death()}", flush=True)
    server.stop()
    handler.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument(
        "--delay-ms",
        type=int,
        default=1000,
        help="how long the handler holds a push (long enough that a key's pushes would overlap)",
    )
    parser.add_argument("--senders", type=int, default=512, help="FOLIOT_PUSH_CONCURRENCY (and per app)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pass-limit", type=float, default=900.0, help="seconds allowed for one pass")
    parser.add_argument("--serve-handler", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="2,000 runs (over 100 keys)")
    known, _ = parser.parse_known_args()
    if known.serve_handler:
        serve_handler(known.serve_handler, known.delay_ms)
        return
    from bench import common as c

    args = c.parse_args(parser, runs=2000, pass_limit=300.0)
    c.header(f"concurrency keys: {args.runs} runs over {args.keys} keys, limit {args.limit}", args)
    rows: list[list[Any]] = []
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        try:
            rows += one_backend(c, backend, args)
        except Exception as exc:
            rows.append([backend, "FAILED", f"{type(exc).__name__}: {exc}"[:200]])
    header = [
        "store",
        "round",
        "floor starts/s",
        "starts/s free / keyed",
        "free done/s",
        "keyed done/s",
        "keyed ÷ free",
        "slot cap/s",
        "keyed ÷ min(cap, free)",
        "free max/key",
        f"keyed max/key (<= {args.limit})",
        "most queued",
        "cpu ms/run free / keyed",
        "dup pushes free / keyed",
    ]
    rows = [r + [""] * (len(header) - len(r)) for r in rows]
    print(
        c.table(
            f"{args.runs} runs over {args.keys} keys, limit {args.limit}, handler holds {args.delay_ms} ms "
            f"(target: keyed >= {TARGET}x free, never more than {args.limit} in flight per key)",
            header,
            rows,
        )
    )


if __name__ == "__main__":
    main()
