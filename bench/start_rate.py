"""Start rate: `POST /apps/{app}/runs` (the run parks on a `wait`) against the bare floor.

    python bench/start_rate.py [--backend sqlite|postgres|both] [--seconds 15] [--connections 32]
    python bench/start_rate.py --quick

For each store: a `foliot serve` subprocess (SQLite in a temp dir, or a throwaway PostgreSQL
cluster) and the bare quart-trio floor (bench/floor_app.py) in another, both loaded by `wrk`
with the same Lua script and JSON body (a multi-process Python client when `wrk` is
missing). The floor is measured before and after Foliot; the ratio uses their mean.
Prints requests/s, p50/p99, non-2xx and the ratio, and the serving process's CPU per request
(user + system, all threads, from /proc) with the CPU ratio (floor CPU per request / Foliot
CPU per request): on a shared machine the throughput ratio moves with the scheduler, the CPU
figures much less. Targets (issue 9): SQLite >= 0.7x, PostgreSQL >= 0.5x of the floor.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c

BODY = {"workflow": "parked", "input": {"orderId": 7, "customer": "c-42", "lines": [1, 2, 3]}}
TARGET = {"sqlite": 0.7, "postgres": 0.5}


def load(url: str, token: str, seconds: float, connections: int, use_wrk: bool) -> dict[str, Any]:
    if use_wrk:
        return c.wrk_post(f"{url}/apps/bench/runs", BODY, token, seconds=seconds, connections=connections)
    requests = [["POST", "/apps/bench/runs", BODY, None]]
    results, wall = c.run_clients(
        url,
        c.bearer(token),
        requests,
        mode="closed",
        procs=2,
        concurrency=max(1, connections // 2),
        cycle_s=seconds,
        timeout=10,
        limit_s=seconds + 30,
    )
    s = c.summarize(results, wall)
    return {
        "client": "python",
        "requests": len(results),
        "rps": s["rps"],
        "p50": s["p50"],
        "p99": s["p99"],
        "non2xx": len(results) - s["ok"],
        "statuses": s["codes"],
        "socket_errors": s["timeouts"] + s["conn_errors"],
    }


def measured(pid: int, run: Any) -> dict[str, Any]:
    """`run()`'s figures plus the CPU ms the process `pid` spent per request meanwhile."""
    cpu0 = c.cpu_seconds(pid)
    r: dict[str, Any] = run()
    r["cpu_ms"] = 1000 * (c.cpu_seconds(pid) - cpu0) / max(1, r["requests"])
    return r


def one_backend(backend: str, args: argparse.Namespace, use_wrk: bool) -> list[list[Any]]:
    work = c.tmpdir(f"start-{backend}")
    cluster = c.pg_cluster() if backend == "postgres" else None
    # The latency gate off: a closed loop of N connections is a standing queue by design, and
    # this measures what the start path can do; refusals above capacity are signal_latency's.
    server = c.Foliot(c.database_url(backend, work, cluster), work, FOLIOT_ADMISSION_TARGET_MS=0)
    server.start()
    key = server.setup_app([c.PARKED])
    floor = c.Floor(work, key)
    rss0 = server.rss()
    rows = []
    # Warm both up (connections, caches) before measuring.
    load(floor.url, key, 1, args.connections, use_wrk)
    load(server.url, key, 1, args.connections, use_wrk)
    f1 = measured(floor.pid, lambda: load(floor.url, key, args.seconds, args.connections, use_wrk))
    fo = measured(server.pid, lambda: load(server.url, key, args.seconds, args.connections, use_wrk))
    f2 = measured(floor.pid, lambda: load(floor.url, key, args.seconds, args.connections, use_wrk))
    rss1 = server.rss()
    floor_rps = (f1["rps"] + f2["rps"]) / 2
    floor_cpu = (f1["cpu_ms"] + f2["cpu_ms"]) / 2
    for name, r in (("floor (before)", f1), (f"foliot {backend}", fo), ("floor (after)", f2)):
        is_foliot = name.startswith("foliot")
        rows.append(
            [
                backend,
                name,
                r["client"],
                r["requests"],
                f"{r['rps']:.0f}",
                c.ms(r["p50"]),
                c.ms(r["p99"]),
                r["non2xx"],
                r["socket_errors"],
                c.ratio(r["rps"], floor_rps) if is_foliot else "",
                f"{r['cpu_ms']:.2f}",
                c.ratio(floor_cpu, r["cpu_ms"]) if is_foliot else "",
                f">= {TARGET[backend]}x" if is_foliot else "",
                " ".join(f"{k}:{v}" for k, v in sorted(r["statuses"].items()) if not 200 <= k < 300),
            ]
        )
    created = c.metric_sum(server.metrics(), "foliot_open_runs")
    print(
        f"  {backend}: server RSS {rss0:.0f} -> {rss1:.0f} MB over {fo['requests']} starts; "
        f"open runs now {created:.0f}; server alive: {server.alive()}",
        flush=True,
    )
    server.stop()
    floor.child.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each measured load")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections")
    parser.add_argument("--python-client", action="store_true", help="use the Python client even with wrk")
    parser.add_argument("--quick", action="store_true", help="3 s per load, 16 connections")
    args = c.parse_args(parser, seconds=3.0, connections=16)
    c.header("start rate: POST /runs vs the bare quart-trio floor", args)
    use_wrk = c.have_wrk() and not args.python_client
    if not use_wrk:
        print("# wrk not found (or --python-client): using the multi-process Python client")
    rows: list[list[Any]] = []
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        try:
            rows += one_backend(backend, args, use_wrk)
        except Exception as exc:  # a store that dies is a figure, not a crash of the benchmark
            rows.append([backend, "FAILED", *[""] * 11, f"{type(exc).__name__}: {exc}"[:200]])
    print(
        c.table(
            "start rate (closed loop; p50/p99 ms; ratio = foliot / mean floor; cpu = serving process, "
            "all threads, per request; cpu ratio = floor cpu / foliot cpu)",
            [
                "store",
                "target",
                "client",
                "requests",
                "ok/s",
                "p50",
                "p99",
                "non2xx",
                "sockerr",
                "ratio",
                "cpu ms/req",
                "cpu ratio",
                "goal",
                "codes",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
