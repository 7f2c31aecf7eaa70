"""Restart with many open child runs: `kill -9`, restart -> /readyz, time and peak RSS (issue 37).

    python bench/recovery_children.py [--parents 100] [--items 1000] [--backend sqlite|postgres]
    python bench/recovery_children.py --quick          # 10 parents x 1,000 children
    BENCH_SERVER_ROOT=/path/to/other/checkout python bench/recovery_children.py   # A/B

Creates `--parents` runs of a workflow whose one `map` step starts `--items` children at once
(`maxConcurrency` = items), each child parked on `wait "go"` (no timeout: no timer, no task),
through the API (`POST /apps/bench/runs`; each start commits the parent and its children as
one unit). Then kills the server with SIGKILL and restarts it on the same database, measuring
spawn -> /readyz, spawn -> the log's "recovery done" line, the peak RSS of the restarted
process (`VmHWM`, so nothing between samples is missed) and its RSS once settled. Afterwards
it checks that recovery cancelled no child (their parents all wait for them) and that a
signalled child still completes and is counted by its parent.

When filed (issue 37): /readyz took 48-54 s at 1.4 GB with ~168,000 open children, because
recovery read every open child with its parent's whole document at once. Measured on a shared
2-core machine, SQLite: before the fix (main 3fd06f7) 10 x 1,000 children took 144.7 s to
/readyz at 4.57 GB peak, and 100 x 1,000 passed 9.9 GB, not ready after 90 s (killed); with
recovery in pages, 100 x 1,000 were ready in 11.8 s (4.5 s of it the empty-database floor) at
81 MB peak, no child cancelled.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c

CHILD = {"name": "waiter", "steps": [{"name": "wait", "type": "wait", "signal": "go"}]}


def parent_workflow(items: int) -> dict[str, Any]:
    return {
        "name": "fan",
        "steps": [
            {
                "name": "all",
                "type": "map",
                "itemsPath": "input.items",
                "workflow": "waiter",
                "maxConcurrency": items,
            }
        ],
    }


def high_water_mb(pid: int) -> float:
    """The process's peak resident set size so far (`VmHWM`), in MB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def wait_log(log: Path, pattern: str, since: int, limit_s: float) -> float | None:
    """Seconds until `pattern` appears in the log after byte `since` (None: not in time)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        with open(log, "rb") as f:
            f.seek(since)
            if re.search(pattern.encode(), f.read()):
                return time.perf_counter() - t0
        time.sleep(0.05)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--parents", type=int, default=100)
    parser.add_argument("--items", type=int, default=1000, help="children per parent (<= 1,000)")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="10 parents x 1,000 children")
    args = c.parse_args(parser, parents=10)
    c.header(f"restart with {args.parents * args.items:,} open children ({args.backend})", args)
    work = c.tmpdir("recovery-children")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    db_url = c.database_url(args.backend, work, cluster)
    # INFO: the "recovery done" line is how long recovery itself took (it may end after /readyz).
    server = c.Foliot(db_url, work, FOLIOT_LOG_LEVEL="INFO")
    ready_empty = server.start()
    key = server.setup_app([CHILD, parent_workflow(args.items)])
    t0 = time.perf_counter()
    parents: list[str] = []
    with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=600) as client:
        for p in range(args.parents):
            items = [{"n": i} for i in range(args.items)]
            r = client.post("/apps/bench/runs", json={"workflow": "fan", "input": {"items": items}})
            if r.status_code != 201:
                raise RuntimeError(f"start {p}: {r.status_code} {r.text[:300]}")
            parents.append(r.json()["runId"])
            if (p + 1) % 10 == 0:
                print(
                    f"  started {p + 1}/{args.parents} parents ({time.perf_counter() - t0:.0f}s)", flush=True
                )
    seeded = time.perf_counter() - t0
    rss_before = server.rss()
    server.kill9()
    since = server.log.stat().st_size if server.log.exists() else 0
    ready = server.start(ready_limit_s=900)
    rss_ready = server.rss()
    pid = server.pid
    recovered = wait_log(server.log, r"recovery done", since, 600)
    took_recovery = None if recovered is None else ready + recovered  # spawn -> line, roughly
    time.sleep(2)
    peak = high_water_mb(pid)
    settled = server.rss()
    with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=60) as client:
        cancelled = client.get(
            "/apps/bench/runs", params={"workflow": "waiter", "status": "cancelled", "limit": 5}
        ).json()
        n_cancelled = len(cancelled["runs"])
        children = client.get("/apps/bench/runs", params={"parentRunId": parents[0], "limit": 1}).json()
        listed = children["runs"]
        child_id = listed[0]["runId"] if listed else None
        progress = "no child listed"
        if child_id is not None:
            r = client.post("/apps/bench/signals", json={"runId": child_id, "name": "go"})
            deadline = time.time() + 30
            progress = f"signal {r.status_code}"
            while time.time() < deadline:
                parent = client.get(f"/apps/bench/runs/{parents[0]}").json()
                if (parent.get("children") or {}).get("completed") == 1:
                    progress = f"signal {r.status_code}, parent counted 1 completed child"
                    break
                time.sleep(0.2)
            else:
                progress += ", parent did not count the child within 30 s"
    server.stop()
    rows: list[list[Any]] = [
        [
            "open children created through the API",
            f"{args.parents * args.items:,} ({args.parents} x {args.items}) in {seeded:.0f}s",
            "",
        ],
        ["spawn -> /readyz, empty database (floor)", f"{ready_empty:.2f} s", ""],
        ["RSS before the kill", f"{rss_before:.0f} MB", ""],
        ["kill -9, restart -> /readyz", f"{ready:.2f} s", "bounded"],
        [
            "restart -> 'recovery done' logged",
            "not seen" if took_recovery is None else f"~{took_recovery:.2f} s",
            "",
        ],
        ["RSS at /readyz", f"{rss_ready:.0f} MB", ""],
        ["peak RSS of the restarted server (VmHWM)", f"{peak:.0f} MB", "bounded"],
        ["RSS 2 s after recovery", f"{settled:.0f} MB", ""],
        ["children cancelled by recovery", str(n_cancelled), "0"],
        ["a child signalled after the restart", progress, ""],
    ]
    title = f"restart with {args.parents * args.items:,} open children ({args.backend})"
    print(c.table(title, ["measure", "value", "target"], rows))


if __name__ == "__main__":
    main()
