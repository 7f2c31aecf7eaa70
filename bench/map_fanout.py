"""Fan-out: a 10,000-item `map` step against plain starts of the same child workflow (issue 22).

    python bench/map_fanout.py [--backend sqlite|postgres|both] [--items 10000]
        [--children task,choice] [--max-concurrency 100] [--plain-seconds 10] [--profile DIR]
    python bench/map_fanout.py --quick

Per store (a `foliot serve` subprocess on SQLite in a temp dir, or on a throwaway PostgreSQL
cluster from tests/pg.py) and per child workflow:

- `task`: one task step, answered at once by bench/handler_app.py (its own process);
- `choice`: one `choice` step whose default is `$end`, so the child completes in the unit of
  work that starts it and no handler is involved.

First the **plain start rate**: `POST /apps/bench/runs` of the child workflow from
`common.run_clients` (2 processes, closed loop, `--plain-seconds`), and for `task` children
the time until every run so started has completed (runs completed per second). The bare
quart-trio floor (bench/floor_app.py) is loaded the same way in the same run, for context.
Then the **map**: one parent run whose `map` step has `--items` items (`maxConcurrency`
`--max-concurrency`). From the server's own timestamps (the children listed by
`parentRunId`): children started per second (parent created → last child created), children
closed per second, and the parent's completion after the last child closed; the server's RSS
(before, peak sampled every 0.2 s, after) and CPU per child. The target of issue 22 is
children started/s >= 0.7x the plain start rate measured in the same run.

`--profile DIR` records the server during the map with `py-spy --gil` and prints the top frames.
Nothing is asserted; every wait is bounded; every process is killed at exit.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c
from foliot.core.workflow.duration import parse_timestamp

TARGET = 0.7
CHILDREN = {
    "task": {"name": "child-task", "output": "state.pick", "steps": [{"name": "pick", "type": "task"}]},
    "choice": {
        "name": "child-choice",
        "steps": [
            {
                "name": "route",
                "type": "choice",
                "choices": [{"when": {"path": "input.n", "op": "eq", "value": -1}, "next": "$end"}],
                "default": "$end",
            }
        ],
    },
}


def parent_workflow(kind: str, concurrency: int) -> dict[str, Any]:
    return {
        "name": f"fan-{kind}",
        "steps": [
            {
                "name": "all",
                "type": "map",
                "itemsPath": "input.items",
                "workflow": CHILDREN[kind]["name"],
                "maxConcurrency": concurrency,
            }
        ],
    }


def item(i: int) -> dict[str, Any]:
    # Small: the parent's input holds all of them, under FOLIOT_PAYLOAD_MAX_BYTES (256 KiB).
    return {"n": i}


def closed_loop(url: str, key: str, workflow: str, seconds: float) -> dict[str, Any]:
    requests = [
        ["POST", "/apps/bench/runs", {"workflow": workflow, "input": item(i)}, None] for i in range(500)
    ]
    results, wall = c.run_clients(
        url,
        c.bearer(key),
        requests,
        mode="closed",
        procs=2,
        concurrency=16,
        cycle_s=seconds,
        timeout=15,
        limit_s=seconds + 30,
    )
    return c.summarize(results, wall)


def open_runs(server: c.Foliot) -> float:
    """Open runs not parked as stuck (NaN when /metrics did not answer)."""
    m = server.metrics()
    if not m:
        return float("nan")
    return c.metric_sum(m, "foliot_open_runs") - c.metric_sum(m, "foliot_open_runs", status="stuck")


def wait_drained(server: c.Foliot, limit_s: float) -> float:
    """Seconds until no run is open (bounded; NaN if it did not happen)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        if open_runs(server) == 0:
            return time.perf_counter() - t0
        time.sleep(0.1)
    return float("nan")


def list_children(client: httpx.Client, parent_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    for _ in range(200):
        params: dict[str, Any] = {"parentRunId": parent_id, "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/apps/bench/runs", params=params).json()
        out += page["runs"]
        cursor = page["nextCursor"]
        if not cursor:
            break
    return out


def run_map(
    server: c.Foliot, key: str, kind: str, args: argparse.Namespace, profile_dir: Path | None
) -> dict[str, Any]:
    items = [item(i) for i in range(args.items)]
    limit_s = args.map_limit
    progress: list[tuple[float, int, int]] = []
    cpu0 = c.cpu_seconds(server.pid)
    rss0 = server.rss()
    prof = c.Profile(server.pid, profile_dir / f"map-{kind}.txt") if profile_dir else None
    with httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=60) as client:
        with c.RssSampler(server.pid) as rss, prof or _Null():
            t0 = time.perf_counter()
            r = client.post("/apps/bench/runs", json={"workflow": f"fan-{kind}", "input": {"items": items}})
            if r.status_code != 201:
                raise RuntimeError(f"parent start: {r.status_code} {r.text[:300]}")
            parent = r.json()
            parent_id = parent["runId"]
            post_s = time.perf_counter() - t0
            while time.perf_counter() - t0 < limit_s:
                parent = client.get(f"/apps/bench/runs/{parent_id}").json()
                if parent["status"] not in ("running", "waiting"):
                    break
                fan = parent.get("children") or {}
                progress.append((time.perf_counter() - t0, fan.get("started", 0), fan.get("completed", 0)))
                # Not faster: the parent's document holds every item, and reading it costs the
                # server a serialisation of them all (10 % of its CPU at 5 reads/s, 10,000 items).
                time.sleep(1.0)
            wall = time.perf_counter() - t0
        cpu = c.cpu_seconds(server.pid) - cpu0
        children = list_children(client, parent_id)
    created = parse_timestamp(parent["createdAt"])
    child_created = [parse_timestamp(ch["createdAt"]) for ch in children]
    child_closed = [parse_timestamp(ch["closedAt"]) for ch in children if ch["closedAt"]]
    last_created = max(child_created, default=created)
    last_closed = max(child_closed, default=created)
    parent_closed = parse_timestamp(parent["closedAt"]) if parent.get("closedAt") else None
    statuses: dict[str, int] = {}
    for ch in children:
        statuses[ch["status"]] = statuses.get(ch["status"], 0) + 1
    outputs = parent.get("state", {}).get("all")
    in_order = isinstance(outputs, list) and len(outputs) == args.items
    if in_order and kind == "task":
        in_order = all(o == {"ok": True} for o in outputs)
    n = len(children)
    return {
        "status": parent["status"],
        "children": n,
        "statuses": statuses,
        "indices_ok": sorted(ch["parent"]["index"] for ch in children) == list(range(args.items)),
        "list_ok": in_order,
        "post_ms": post_s * 1000,
        "started_s": (last_created - created) / 1000,
        "started_per_s": n / max(0.001, (last_created - created) / 1000),
        "closed_per_s": len(child_closed) / max(0.001, (last_closed - created) / 1000),
        "after_last_ms": (parent_closed - last_closed) if parent_closed is not None else float("nan"),
        "wall": wall,
        "cpu_ms": 1000 * cpu / max(1, n),
        "rss": (rss0, rss.peak, server.rss()),
        "progress": progress,
        "profile": prof.summary(30) if prof else "",
    }


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def one_backend(backend: str, args: argparse.Namespace) -> list[list[Any]]:
    work = c.tmpdir(f"map-{backend}")
    cluster = c.pg_cluster() if backend == "postgres" else None
    handler = c.Handler(work)
    # The latency gate off: a closed loop is a standing queue by design (as in start_rate.py).
    server = c.Foliot(c.database_url(backend, work, cluster), work, FOLIOT_ADMISSION_TARGET_MS=0)
    server.start()
    kinds = args.children.split(",")
    workflows = [CHILDREN[k] for k in kinds] + [parent_workflow(k, args.max_concurrency) for k in kinds]
    key = server.setup_app(workflows, handler_url=handler.url)
    floor = c.Floor(work, key)
    profile_dir = Path(args.profile) / backend if args.profile else None
    rows: list[list[Any]] = []
    closed_loop(floor.url, key, "x", 1)  # warm up
    cpu0 = c.cpu_seconds(floor.pid)
    fl = closed_loop(floor.url, key, "x", args.plain_seconds)
    floor_cpu = 1000 * (c.cpu_seconds(floor.pid) - cpu0) / max(1, fl["ok"])
    floor.child.stop()
    for kind in kinds:
        workflow = CHILDREN[kind]["name"]
        closed_loop(server.url, key, workflow, 1)  # warm up
        wait_drained(server, 120)
        cpu0 = c.cpu_seconds(server.pid)
        t0 = time.perf_counter()
        plain = closed_loop(server.url, key, workflow, args.plain_seconds)
        drained = wait_drained(server, 300)
        plain_done_s = time.perf_counter() - t0 - 0.2  # run_clients starts its timetable 0.2 s in
        plain_cpu = 1000 * (c.cpu_seconds(server.pid) - cpu0) / max(1, plain["ok"])
        plain_done_rate = plain["ok"] / plain_done_s if drained == drained else float("nan")
        try:
            m = run_map(server, key, kind, args, profile_dir)
        except Exception as exc:  # a figure, not a crash of the benchmark
            rows.append([backend, kind, "FAILED", f"{type(exc).__name__}: {exc}"[:200], server.death()])
            print(f"  {backend}/{kind}: FAILED {type(exc).__name__}: {exc}"[:400], flush=True)
            continue
        rss0, peak, rss1 = m["rss"]
        rows.append(
            [
                backend,
                kind,
                f"{fl['rps']:.0f}",
                f"{plain['rps']:.0f} ({c.ratio(plain['rps'], fl['rps'])})",
                f"{plain_done_rate:.0f}" if kind == "task" else "-",
                f"{plain_cpu:.2f} / {floor_cpu:.2f}",
                f"{m['children']} {m['status']}",
                f"{m['started_per_s']:.0f}",
                c.ratio(m["started_per_s"], plain["rps"]),
                f"{m['closed_per_s']:.0f}",
                f"{m['after_last_ms']:.0f}",
                f"{m['cpu_ms']:.2f}",
                f"{rss0:.0f}/{peak:.0f}/{rss1:.0f}",
                f"{m['wall']:.1f}",
                "yes" if m["indices_ok"] and m["list_ok"] else "NO",
                " ".join(f"{k}:{v}" for k, v in sorted(plain["codes"].items()) if not 200 <= k < 300),
            ]
        )
        stamps = m["progress"][:: max(1, len(m["progress"]) // 10)]
        print(
            f"  {backend}/{kind}: parent POST {m['post_ms']:.0f} ms; children {m['statuses']}; "
            f"started over {m['started_s']:.1f} s; progress (s, started, completed): "
            + ", ".join(f"({t:.1f}, {s}, {d})" for t, s, d in stamps),
            flush=True,
        )
        if m["profile"]:
            print(f"  profile of the map ({backend}/{kind}):\n" + m["profile"], flush=True)
    stats = handler.stats()
    print(
        f"  {backend}: handler pushes {stats['received']} (unique {stats['unique']}, "
        f"duplicates {stats['duplicates']}); server alive: {server.alive()} {server.death()}",
        flush=True,
    )
    server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--items", type=int, default=10_000, help="items of the map (at most 10,000)")
    parser.add_argument("--children", default="task,choice", help="child workflows: task, choice or both")
    parser.add_argument("--max-concurrency", type=int, default=100, help="the map's maxConcurrency")
    parser.add_argument("--plain-seconds", type=float, default=10.0, help="length of the plain-start load")
    parser.add_argument("--map-limit", type=float, default=900.0, help="seconds allowed for one map")
    parser.add_argument("--profile", default="", help="record the server during the map (py-spy)")
    parser.add_argument("--quick", action="store_true", help="1,000 items, 3 s of plain starts")
    args = c.parse_args(parser, items=1000, plain_seconds=3.0, map_limit=300.0)
    c.header("map fan-out: children started/s vs plain POST /runs of the same workflow", args)
    rows: list[list[Any]] = []
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        try:
            rows += one_backend(backend, args)
        except Exception as exc:
            rows.append([backend, "FAILED", f"{type(exc).__name__}: {exc}"[:200]])
    header = [
        "store",
        "child",
        "floor ok/s",
        "plain starts/s (÷floor)",
        "plain done/s",
        "cpu ms/start (floor)",
        "map children",
        "children started/s",
        "÷plain",
        "closed/s",
        "parent after last ms",
        "cpu ms/child",
        "RSS MB before/peak/after",
        "map wall s",
        "1 per item, list ok",
        "plain codes",
    ]
    rows = [r + [""] * (len(header) - len(r)) for r in rows]
    print(
        c.table(
            f"map of {args.items} items, maxConcurrency {args.max_concurrency} (target: children "
            f"started/s >= {TARGET}x plain starts/s)",
            header,
            rows,
        )
    )


if __name__ == "__main__":
    main()
