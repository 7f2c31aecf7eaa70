"""A million parked runs on one node: memory, restart, signals at 100/s, and query plans.

    python bench/million.py [--runs 1000000] [--backend sqlite|postgres] [--rate 100] [--seconds 30]
    python bench/million.py --quick               # 20,000 runs, 10 s of signals

Creates the app and the workflow (`wait "go"` with a 14-day timeout, then a task pushed to a
local handler process) through the API, stops the server, and writes N started runs straight
into the store in bulk (the rows `Node.start_run` commits; see `common.seed_bulk`). Then:
`foliot serve` on it (spawn -> /readyz, RSS), signals to random runs open-loop at `--rate`
for `--seconds` from the lean client (`rawclient.py`): answer p50/p99, the client's own
schedule -> send lag (a client that fell behind measures itself), signal -> task push p99,
timeouts, 429/503. Then `kill -9` and a restart (-> /readyz), and EXPLAIN (QUERY PLAN) with
timings of the hot queries at that size.
Targets (issue 9): RSS <= 1 GB, p99 <= 100 ms at 100/s, restart -> ready <= 5 s, plans
index-backed (no full scan of runs/timers/tasks).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c
from bench import rawclient

# The store's hot queries (foliot/storage/{sqlite,postgres}.py), with literal parameters.
QUERIES = [
    ("get run by id", "SELECT doc FROM runs WHERE run_id = '{run}'"),
    (
        "find open run by business key",
        "SELECT doc FROM runs WHERE app = 'bench' AND workflow = 'parked' AND business_key = 'bk-7'"
        " AND is_open = {true}",
    ),
    (
        "list runs by app",
        "SELECT doc FROM runs WHERE app = 'bench' ORDER BY created_at DESC, run_id DESC LIMIT 101",
    ),
    (
        "list runs by app and status",
        "SELECT doc FROM runs WHERE app = 'bench' AND status = 'completed'"
        " ORDER BY created_at DESC, run_id DESC LIMIT 101",
    ),
    (
        "timers due before (page-in)",
        "SELECT * FROM timers WHERE due_at < {soon} ORDER BY due_at, run_id, slot LIMIT 1000",
    ),
    ("open tasks (recovery)", "SELECT * FROM tasks WHERE status = 'open' ORDER BY created_at"),
    ("events of a run", "SELECT * FROM events WHERE run_id = '{run}' AND seq > 0 ORDER BY seq LIMIT 100"),
    (
        "open runs by status (/metrics)",
        "SELECT status, COUNT(*) AS n FROM runs WHERE is_open = {true} GROUP BY status",
    ),
    ("timers of a run (commit)", "DELETE FROM timers WHERE run_id = '{run}'"),
]


def prune_queries() -> list[tuple[str, str]]:
    """Pruning statements, if the store has any (none when this was written)."""
    found = []
    for path in (c.ROOT / "foliot" / "storage").glob("*.py"):
        for m in re.finditer(r'"(DELETE FROM (?:runs|events|idempotency)[^"]*)"', path.read_text()):
            found.append((f"pruning ({path.name})", m.group(1)))
    return found


def explain(db_url: str, run_id: str, cluster: Any) -> list[list[Any]]:
    soon = int(time.time() * 1000) + 60_000
    rows = []
    queries = QUERIES + prune_queries()
    if db_url.startswith("sqlite"):
        import sqlite3

        from foliot.storage.factory import sqlite_path

        conn = sqlite3.connect(sqlite_path(db_url))
        for name, sql in queries:
            if "postgres.py" in name:
                continue  # PostgreSQL's own statements ($n, arrays) are explained on that backend
            try:
                sql = sql.format(run=run_id, soon=soon, true=1).replace("?", "NULL")
                plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            except (sqlite3.Error, KeyError, IndexError, ValueError) as exc:  # built at run time
                rows.append([name, "", "not explained", f"{type(exc).__name__}: {exc}"[:150]])
                continue
            timed = ""
            if not sql.startswith("DELETE"):
                t0 = time.perf_counter()
                conn.execute(sql).fetchall()
                timed = c.ms(time.perf_counter() - t0)
            scan = re.search(r"\bSCAN (runs|timers|tasks|events)\b(?! USING)", plan)
            rows.append([name, timed, "FULL SCAN" if scan else "index", plan[:150]])
        conn.close()
    else:
        from tests.pg import _bin

        for name, sql in queries:
            sql = sql.format(run=run_id, soon=soon, true="true")
            analyze = "" if sql.startswith("DELETE") else "ANALYZE, "
            out = subprocess.run(
                [_bin("psql"), db_url, "-XAt", "-c", f"EXPLAIN ({analyze}COSTS OFF) {sql}"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
            timed = next((ln.split(":")[1].strip() for ln in lines if ln.startswith("Execution Time")), "")
            plan = " | ".join(ln for ln in lines if not ln.startswith(("Planning", "Execution")))
            scan = re.search(r"Seq Scan on (runs|timers|tasks|events)", plan)
            rows.append([name, timed, "FULL SCAN" if scan else "index", (plan or out.stderr)[:150]])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rate", type=float, default=100.0, help="signals/s, open loop")
    parser.add_argument(
        "--floor-ratio",
        type=float,
        default=0.0,
        help="signal at this fraction of the bare floor's signal rate (wrk, same run) instead of --rate",
    )
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="20,000 runs, 10 s of signals")
    parser.add_argument("--profile", default="", help="py-spy the server here")
    args = c.parse_args(parser, runs=20_000, seconds=10.0)
    c.header(f"{args.runs:,} parked runs on one node ({args.backend})", args)
    node = c.parked_node(args.backend, "million", args.runs)
    cluster, db_url, handler, server = node.cluster, node.db_url, node.handler, node.server
    ready_empty, key, run_ids, took = node.ready_empty, node.key, node.run_ids, node.took
    notes = [
        f"seeded {len(run_ids):,} runs in bulk through the store in {took:.0f}s"
        f" ({len(run_ids) / took:,.0f}/s)"
    ]
    rows: list[list[Any]] = []
    ready1 = server.start(ready_limit_s=600)
    rss_ready = server.rss()
    time.sleep(3)
    rss_idle = server.rss()
    rows.append(["spawn -> /readyz, empty database (floor)", f"{ready_empty:.2f} s", ""])
    rows.append(["spawn -> /readyz (fresh start)", f"{ready1:.2f} s", "<= 5 s"])
    rows.append(["RSS at ready / 3 s later", f"{rss_ready:.0f} / {rss_idle:.0f} MB", "<= 1024 MB"])
    if args.floor_ratio > 0:
        # The bare quart-trio floor's signal endpoint under wrk, now, on this machine: the rate
        # is a fraction of it (issue 25: 0.25x), as the other figures are ratios to it.
        floor = c.Floor(node.work, key)
        f = c.wrk_post(
            f"{floor.url}/apps/bench/signals",
            {"runId": run_ids[0], "name": "go"},
            key,
            seconds=10,
            connections=16,
        )
        floor.child.stop()
        args.rate = args.floor_ratio * f["rps"]
        rows.append(["floor signal endpoint (closed loop, wrk)", f"{f['rps']:.0f}/s", ""])
        notes.append(f"signals at {args.floor_ratio}x the floor's {f['rps']:.0f}/s = {args.rate:.0f}/s")
    targets = c.random_targets(run_ids, int(args.rate * args.seconds), 3)
    requests = [["POST", "/apps/bench/signals", {"runId": r, "name": "go"}, r] for r in targets]
    # Every thread, waiting or not (not only the GIL holder): where a signal waits shows too.
    profile = (
        c.Profile(server.pid, Path(args.profile) / "million-signals.txt", gil=False) if args.profile else None
    )
    with (
        c.RssSampler(server.pid) as sampler,
        c.AcceptQueueSampler(server.port) as backlog,
        profile or contextlib.nullcontext(),
    ):
        # Not httpx: at 2-3 ms of CPU a request it falls behind its own timetable beside a busy
        # server on 2 cores (bench/README.md, "the million-parked waits were the client's").
        results, wall = rawclient.run_open(
            server.url,
            c.bearer(key),
            requests,
            rate=args.rate,
            timeout=30,
            limit_s=args.seconds + 60,
        )
        time.sleep(3)
    s = c.summarize(results, wall)
    lat, missing = c.to_task(results, handler.stats(arrivals=True)["arrivals"])
    rows.append(
        [
            f"signals at {args.rate:.0f}/s for {args.seconds:.0f}s: answer p50 / p99",
            f"{c.ms(s['p50'])} / {c.ms(s['p99'])} ms ({s['ok']} of {len(results)} 2xx)",
            "p99 <= 100 ms",
        ]
    )
    rows.append(
        [
            "client: schedule -> send p99 / deepest accept queue",
            f"{c.ms(s['send_lag_p99'])} ms / {backlog.peak}",
            "a few ms (else the client measured itself)",
        ]
    )
    rows.append(["signal -> task push p50 / p99", f"{c.ms(c.pct(lat, 50))} / {c.ms(c.pct(lat, 99))} ms", ""])
    rows.append(
        [
            "timeouts / connerr / 429 / 503 (Retry-After) / other / unsent / no push",
            f"{s['timeouts']} / {s['conn_errors']} / {s['429']} / {s['503']} ({s['retry_after']})"
            f" / {s['other']} / {s['client_overrun']} / {missing}",
            "0",
        ]
    )
    rows.append(["RSS peak during signals", f"{sampler.peak:.0f} MB", "<= 1024 MB"])
    # What a slow answer may have waited for: the commits, and the collector's pauses.
    m = server.metrics()
    commits = c.metric_sum(m, "foliot_commit_latency_seconds_count")
    slow = commits - c.metric_sum(m, "foliot_commit_latency_seconds_bucket", le="0.05")
    rows.append(
        [
            "commits (all since start): count / slower than 50 ms",
            f"{commits:.0f} / {slow:.0f}",
            "",
        ]
    )
    rows.append(
        [
            "full garbage collections: count / longest pause",
            f"{c.metric_sum(m, 'foliot_gc_collections_total', generation='2'):.0f} / "
            f"{1000 * c.metric_sum(m, 'foliot_gc_pause_max_seconds', generation='2'):.0f} ms",
            "",
        ]
    )
    if not server.alive():
        notes.append(server.death())
    server.kill9()
    ready2 = server.start(ready_limit_s=600)
    rows.append(["kill -9, restart -> /readyz", f"{ready2:.2f} s", "<= 5 s"])
    rows.append(["RSS after restart", f"{server.rss():.0f} MB", "<= 1024 MB"])
    server.stop()
    print(c.table(f"{args.runs:,} parked ({args.backend})", ["measure", "value", "target"], rows))
    print(
        c.table(
            f"query plans at {args.runs:,} runs ({args.backend}; ms = one execution)",
            ["query", "ms", "access", "plan"],
            explain(db_url, run_ids[len(run_ids) // 2], cluster),
        )
    )
    notes.append(
        "'index' = no full table scan; a query that reads every open row through an index"
        " (open runs by status, list by status) still grows with N: see its ms"
    )
    if not prune_queries():
        notes.append("no pruning statement in foliot/storage (nothing to explain)")
    if profile is not None:
        notes.append(f"py-spy profile of the server during the signals ({profile.out}):")
        notes.append(profile.summary())
    for n in notes:
        print(" ", n)
    handler.child.stop()


if __name__ == "__main__":
    main()
