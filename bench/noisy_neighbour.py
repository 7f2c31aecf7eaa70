"""Noisy neighbour (issue 37): app `b`'s steady workload alone, then while app `a` runs every
amplifier at once.

    python bench/noisy_neighbour.py [--seconds 60] [--rate 10] [--schedules 2000]
        [--keyed 10000] [--tree-branches 20] [--tree-depth 3] [--map-items 1000]
        [--item-bytes 200000] [--dry-runs 8] [--backend sqlite|postgres] [--profile DIR]
    python bench/noisy_neighbour.py --quick

One `foliot serve` subprocess (SQLite in a temp dir, or a database of a throwaway PostgreSQL
cluster), two handler processes (`handler_app.py`: one for `b`, one for `a`, whose `/big/<n>`
path answers an output of n bytes), the bare quart-trio floor (`floor_app.py`), and the load
generators in their own processes: `b`'s from `rawclient.py` (open loop, latency from the
scheduled send), `a`'s a Trio/httpx process of its own.

App `b` (workflow `steady`: task `work` → sleep 1 s → wait for `go` → task `done`): `--rate`
starts a second (`businessKey` b<phase>-<k>) and, in another client process, each run's signal
`go` (by workflow + business key) `--signal-after` seconds after its start was scheduled, for
`--seconds`. Measured: the start's and the signal's answer p50/p99 from the scheduled send;
from the handler's arrival times, start → `work` push and **resume** (the `done` push after
both the sleep's due time, `work` push + 1 s, and the signal's scheduled time: how late the sleep
and the signal's delivery were); b's refusals (429/503), timeouts and other non-2xx.

Phases, in one run:
1. **floor**: the same two timetables against the bare quart-trio app (its start and signal
   endpoints; no pushes), as other scripts measure the floor.
2. **b alone**: on the fresh server (a's workflows registered, nothing of a's running).
3. **a's set-up** (not measured): `--schedules` schedules `every: 1s` of a one-task workflow
   created paused (FOLIOT_SCHEDULES_PER_APP and FOLIOT_SCHEDULE_FIRE_RATE_PER_APP raised to
   allow them: the point is that the per-app lane FOLIOT_APP_INTERNAL_RATE paces the fires);
   `--keyed` distinct values of a `concurrency: {limit: 1, key: input.k}` workflow, each with a
   holder (parked on `wait release`) and a run queued behind it: `--keyed` runs waiting on keys.
4. **b with a**: a's driver begins everything at once, `--warmup` seconds before b's timetable,
   and keeps on until it ends: the schedules unpaused; deep fan-out (a `parallel` of
   `--tree-branches` branches nested `--tree-depth` deep, leaves one task each: 1 + 20 + 400 +
   8,000 = 8,421 runs from one start at the defaults, under FOLIOT_MAX_TREE_RUNS, every
   `--tree-every` s; and one level deeper, past the limit, every `--refused-every` s, whose
   `too_many_runs` is expected); the holders released (signal `release`) at `--release-rate`,
   so queued runs are admitted as slots free; `--dry-runs` concurrent dry-runs of the keyed
   workflow (a candidate reading `input.missing`, `replay` `--dry-replay`; 429
   `dry_run_concurrency` past the per-app limit is a's and expected); `--maps-at-once` maps of
   `--map-items` items whose children answer `--item-bytes` each (their gather fails
   `output_too_large`, expected), another started as one closes, `--maps` in all.

Printed: the floor, b alone, b with a (p50/p99 of starts, signals, start → push, resume), the
ratios with a / alone (target: p99 <= 2x), the server's peak RSS (target < 500 MB), b's
refusals (target 0), what a got done (per activity: answers by status, latency), the server's
CPU and the most seen in `/metrics` (event-loop lag, storage queue, push backlog, live actors)
per phase, and the load average. `--profile DIR` records the server with py-spy during b with a
(when py-spy is installed). `--amplifiers schedules,trees` runs only those of a's amplifiers
(`schedules`, `keys`, `trees`, `dryruns`, `maps`; their set-up too): one at a time tells which
one costs b what. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c
from bench import rawclient

STEADY = {
    "name": "steady",
    "steps": [
        {"name": "work", "type": "task", "timeout": "30s"},
        {"name": "nap", "type": "sleep", "duration": "1s"},
        {"name": "go", "type": "wait", "signal": "go", "timeout": "10m"},
        {"name": "done", "type": "task", "timeout": "30s"},
    ],
}
AMPLIFIERS = ("schedules", "keys", "trees", "dryruns", "maps")
MAX_TREE_RUNS = 10_000  # FOLIOT_MAX_TREE_RUNS' default, which the bench keeps


def a_workflows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """leaf, tree1..tree<depth+1> (tree<n>: a parallel of `branches` branches of tree<n-1>),
    tick (the schedules'), keyed, bigitem (a task answered with `item_bytes`), bigmap."""
    out: list[dict[str, Any]] = [
        {"name": "leaf", "steps": [{"name": "leaf", "type": "task", "timeout": "60s"}]}
    ]
    for level in range(1, args.tree_depth + 2):
        below = "leaf" if level == 1 else f"tree{level - 1}"
        branches = [{"name": f"b{i}", "workflow": below} for i in range(args.tree_branches)]
        out.append(
            {"name": f"tree{level}", "steps": [{"name": "fan", "type": "parallel", "branches": branches}]}
        )
    out += [
        {"name": "tick", "steps": [{"name": "tick", "type": "task", "timeout": "30s"}]},
        {
            "name": "keyed",
            "concurrency": {"limit": 1, "key": "input.k"},
            "steps": [{"name": "hold", "type": "wait", "signal": "release", "timeout": "1h"}],
        },
        {
            "name": "bigitem",
            "steps": [
                {
                    "name": "make",
                    "type": "task",
                    "handler": f"/big/{args.item_bytes}",
                    "timeout": "60s",
                    "retry": {"maxAttempts": 1},
                }
            ],
        },
        {
            "name": "bigmap",
            "steps": [
                {
                    "name": "all",
                    "type": "map",
                    "itemsPath": "input.items",
                    "workflow": "bigitem",
                    "maxConcurrency": args.map_concurrency,
                }
            ],
        },
    ]
    return out


def tree_runs(branches: int, depth: int) -> int:
    return sum(branches**level for level in range(depth + 1))


def dry_candidate() -> dict[str, Any]:
    """The keyed workflow with a choice after `hold` reading a key no open run has."""
    return {
        "name": "keyed",
        "concurrency": {"limit": 1, "key": "input.k"},
        "steps": [
            {"name": "hold", "type": "wait", "signal": "release", "timeout": "1h"},
            {
                "name": "check",
                "type": "choice",
                "choices": [{"when": {"path": "input.missing", "op": "eq", "value": 1}, "next": "$end"}],
                "default": "$end",
            },
        ],
    }


# ---------------------------------------------------------------------------- app a's driver


def a_driver(spec: dict[str, Any], out_path: str) -> None:
    """App a's load, in its own process, until `spec["end_at"]` (epoch s)."""
    import trio

    result: dict[str, Any] = {}
    trio.run(_a_main, spec, result)
    Path(out_path).write_text(json.dumps(result))


async def _a_main(spec: dict[str, Any], result: dict[str, Any]) -> None:
    import httpx
    import trio

    codes: dict[str, Counter[int]] = defaultdict(Counter)
    took: dict[str, list[float]] = defaultdict(list)
    maps: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    headers = {"Authorization": f"Bearer {spec['key']}"}

    async with httpx.AsyncClient(base_url=spec["url"], headers=headers, limits=limits) as client:

        async def call(kind: str, method: str, path: str, body: Any = None, limit_s: float = 120) -> Any:
            t0 = time.time()
            try:
                r = await client.request(method, path, json=body, timeout=limit_s)
                status = r.status_code
            except httpx.TimeoutException:
                r, status = None, -1
            except httpx.HTTPError:
                r, status = None, -3
            codes[kind][status] += 1
            took[kind].append(time.time() - t0)
            return r

        async def unpause(names: list[str]) -> None:
            for name in names:
                await call("schedule unpause", "POST", f"/apps/a/schedules/{name}/unpause", {})

        async def trees(workflow: str, every: float, kind: str) -> None:
            while True:
                t0 = time.time()
                await call(kind, "POST", "/apps/a/runs", {"workflow": workflow})
                await trio.sleep(max(0.0, every - (time.time() - t0)))

        async def map_loop(claim: Any) -> None:
            items = list(range(spec["map_items"]))
            while claim():
                t0 = time.time()
                r = await call(
                    "map start", "POST", "/apps/a/runs", {"workflow": "bigmap", "input": {"items": items}}
                )
                if r is None or r.status_code != 201:
                    await trio.sleep(1)
                    continue
                run_id = r.json()["runId"]
                record: dict[str, Any] = {"runId": run_id, "status": "open", "seconds": None, "error": None}
                maps.append(record)
                while True:
                    await trio.sleep(2)
                    g = await call("map poll", "GET", f"/apps/a/runs/{run_id}", limit_s=30)
                    if g is None or g.status_code != 200:
                        continue
                    doc = g.json()
                    record["status"] = doc["status"]
                    if doc.get("closedAt"):
                        record["seconds"] = round(time.time() - t0, 1)
                        record["error"] = (doc.get("error") or {}).get("class")
                        break

        async def dry_loop() -> None:
            body = {"definition": dry_candidate(), "replay": spec["dry_replay"]}
            while True:
                r = await call("dry-run", "POST", "/apps/a/workflows/keyed/dry-run", body, limit_s=300)
                if r is None or r.status_code != 200:
                    await trio.sleep(float(r.headers.get("Retry-After", "1")) if r is not None else 1.0)

        async def releases() -> None:
            limiter = trio.CapacityLimiter(16)

            async def one(i: int) -> None:
                async with limiter:
                    body = {"name": "release", "workflow": "keyed", "businessKey": f"h{i}"}
                    await call("holder release", "POST", "/apps/a/signals", body, limit_s=60)

            t0 = time.time()
            async with trio.open_nursery() as n:
                for i in range(spec["keyed"]):
                    await trio.sleep(max(0.0, t0 + i / spec["release_rate"] - time.time()))
                    n.start_soon(one, i)

        started = [0]

        def claim() -> bool:
            if started[0] >= spec["maps"]:
                return False
            started[0] += 1
            return True

        on = spec["amplifiers"]
        with trio.move_on_after(max(0.0, spec["end_at"] - time.time())):
            async with trio.open_nursery() as n:
                names = [f"s{i}" for i in range(spec["schedules"])]
                for w in range(8 if "schedules" in on else 0):
                    n.start_soon(unpause, names[w::8])
                depth = spec["tree_depth"]
                if "trees" in on:
                    n.start_soon(
                        trees, f"tree{depth}", spec["tree_every"], f"tree ({spec['tree_runs']:,} runs)"
                    )
                    n.start_soon(trees, f"tree{depth + 1}", spec["refused_every"], "tree past the limit")
                for _ in range(spec["maps_at_once"] if "maps" in on else 0):
                    n.start_soon(map_loop, claim)
                for _ in range(spec["dry_runs"] if "dryruns" in on else 0):
                    n.start_soon(dry_loop)
                if spec["release_rate"] > 0 and "keys" in on:
                    n.start_soon(releases)
    result["codes"] = {k: dict(v) for k, v in codes.items()}
    result["took"] = {k: [c.pct(v, 50), c.pct(v, 99), max(v)] for k, v in took.items()}
    result["maps"] = maps


# ---------------------------------------------------------------------------- b's workload


def b_timetables(phase: str, args: argparse.Namespace) -> tuple[list[Any], list[str]]:
    count = max(1, int(args.rate * args.seconds))
    keys = [f"b{phase}-{k}" for k in range(count)]
    starts = [["POST", "/apps/b/runs", {"workflow": "steady", "businessKey": k}, f"start {k}"] for k in keys]
    signals = [
        ["POST", "/apps/b/signals", {"name": "go", "workflow": "steady", "businessKey": k}, f"signal {k}"]
        for k in keys
    ]
    return [(starts, args.rate, 0.0), (signals, args.rate, args.signal_after)], keys


def send_b(url: str, key: str, phase: str, args: argparse.Namespace) -> tuple[list[list[Any]], list[str]]:
    timetables, keys = b_timetables(phase, args)
    results, _ = rawclient.run_timetables(
        url,
        c.bearer(key),
        timetables,
        timeout=args.timeout,
        limit_s=args.seconds + args.signal_after + args.timeout + 10,
    )
    return results, keys


def b_runs(server: c.Foliot, key: str, prefix: str) -> dict[str, str]:
    """runId -> businessKey of b's runs of a phase (listed through the API)."""
    out: dict[str, str] = {}
    with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=60) as client:
        cursor = None
        for _ in range(1000):
            params: dict[str, Any] = {"limit": 500, "workflow": "steady"}
            if cursor:
                params["cursor"] = cursor
            r = client.get("/apps/b/runs", params=params)
            if r.status_code != 200:
                break
            page = r.json()
            for run in page["runs"]:
                if (run.get("businessKey") or "").startswith(prefix):
                    out[run["runId"]] = run["businessKey"]
            cursor = page.get("nextCursor")
            if not cursor:
                break
    return out


def wait_b_done(handler: c.Handler, results: list[list[Any]], limit_s: float) -> float:
    """Wait (bounded) until b's handler saw the pushes to expect: one per run started, one more
    per run whose signal was taken too (a run whose signal was refused waits on); the seconds
    waited."""
    started = {str(r[5]).split(" ", 1)[1] for r in results if str(r[5]).startswith("start ") and r[3] == 201}
    taken = {str(r[5]).split(" ", 1)[1] for r in results if str(r[5]).startswith("signal ") and r[3] == 202}
    expected = len(started) + len(started & taken)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        if handler.stats()["received"] >= expected:
            break
        time.sleep(0.5)
    return time.perf_counter() - t0


def b_figures(
    results: list[list[Any]],
    arrivals: dict[str, list[Any]] | None,
    ids: dict[str, str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    starts = [r for r in results if str(r[5]).startswith("start ")]
    signals = [r for r in results if str(r[5]).startswith("signal ")]
    out: dict[str, Any] = {}
    for name, rows in (("start", starts), ("signal", signals)):
        ok = [r[1] for r in rows if 200 <= r[3] < 300]
        out[name] = {
            "sent": sum(1 for r in rows if r[3] != -2),
            "ok": len(ok),
            "p50": c.pct(ok, 50),
            "p99": c.pct(ok, 99),
            "max": max(ok, default=math.nan),
            "refused": sum(1 for r in rows if r[3] in (429, 503)),
            "timeouts": sum(1 for r in rows if r[3] == -1),
            "conn_errors": sum(1 for r in rows if r[3] == -3),
            "unsent": sum(1 for r in rows if r[3] == -2),
            "other": sum(1 for r in rows if r[3] >= 300 and r[3] not in (429, 503)),
            "codes": dict(Counter(r[3] for r in rows)),
        }
    out["refused"] = sum(out[n]["refused"] for n in ("start", "signal"))
    out["failed"] = sum(out[n][k] for n in ("start", "signal") for k in ("timeouts", "conn_errors", "other"))
    if arrivals is None:
        return out
    scheduled = {str(r[5]).split(" ", 1)[1]: r[0] for r in starts}
    signalled = {str(r[5]).split(" ", 1)[1]: r[0] for r in signals}
    to_push, resume, unfinished = [], [], 0
    for run_id, bk in ids.items():
        pushes = {step: t for t, step in reversed(arrivals.get(run_id, []))}  # first arrival per step
        if "work" in pushes and bk in scheduled:
            to_push.append(pushes["work"] - scheduled[bk])
        if "done" in pushes and "work" in pushes and bk in signalled:
            resume.append(pushes["done"] - max(signalled[bk], pushes["work"] + 1.0))
        elif bk in scheduled:
            unfinished += 1
    out["push"] = {"p50": c.pct(to_push, 50), "p99": c.pct(to_push, 99), "n": len(to_push)}
    out["resume"] = {"p50": c.pct(resume, 50), "p99": c.pct(resume, 99), "n": len(resume)}
    out["unfinished"] = unfinished + max(0, len(scheduled) - len(ids))
    return out


# ---------------------------------------------------------------------------- watching the server


def hist_quantile(m0: dict[str, float], m1: dict[str, float], name: str, q: float) -> float:
    """The q-quantile (0..1) of a Prometheus histogram's observations between two scrapes: the
    upper bound of the bucket it falls in (inf past the last finite one; NaN for none)."""
    buckets: dict[float, float] = defaultdict(float)
    for k, v in m1.items():
        if k.startswith(name + "_bucket{") and 'le="' in k:
            le = k.split('le="', 1)[1].split('"', 1)[0]
            buckets[math.inf if le == "+Inf" else float(le)] += v - m0.get(k, 0.0)
    if not buckets or buckets[max(buckets)] <= 0:
        return math.nan
    total = buckets[max(buckets)]
    return next(le for le in sorted(buckets) if buckets[le] >= q * total)


class Watch:
    """Samples the server during a phase: peak RSS (0.2 s), and every `interval` s `/metrics`
    (the most event-loop lag, storage queue, push backlog, live actors seen, and the slowest
    `/metrics` answer); server CPU and load average from start to end."""

    GAUGES = (
        "foliot_event_loop_lag_seconds",
        "foliot_storage_queue",
        "foliot_push_backlog",
        "foliot_live_actors",
        "foliot_requests_in_flight",
    )

    def __init__(self, server: c.Foliot, interval: float = 3.0) -> None:
        self.server, self.interval = server, interval
        self.peaks: dict[str, float] = dict.fromkeys(self.GAUGES, 0.0)
        self.scrape_max = 0.0
        self.rss = c.RssSampler(server.pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            t0 = time.perf_counter()
            m = self.server.metrics(timeout=30)
            self.scrape_max = max(self.scrape_max, time.perf_counter() - t0)
            for g in self.GAUGES:
                self.peaks[g] = max(self.peaks[g], c.metric_sum(m, g))

    def __enter__(self) -> Watch:
        self.m0 = self.server.metrics()
        self.cpu0, self.t0, self.load0 = c.cpu_seconds(self.server.pid), time.time(), os.getloadavg()
        self.rss.__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=40)
        self.rss.__exit__()
        self.cpu = c.cpu_seconds(self.server.pid) - self.cpu0
        self.wall = time.time() - self.t0
        self.load1 = os.getloadavg()
        self.m1 = self.server.metrics() if self.server.alive() else {}

    def row(self, label: str) -> list[Any]:
        p = self.peaks
        return [
            label,
            f"{self.wall:.0f}",
            f"{self.cpu:.1f} ({100 * self.cpu / max(self.wall, 1e-9):.0f}%)",
            f"{self.rss.peak:.0f}",
            c.ms(p["foliot_event_loop_lag_seconds"]),
            f"{p['foliot_storage_queue']:.0f}",
            f"{p['foliot_push_backlog']:.0f}",
            f"{p['foliot_live_actors']:.0f}",
            f"{p['foliot_requests_in_flight']:.0f}",
            c.ms(self.scrape_max),
            c.ms(hist_quantile(self.m0, self.m1, "foliot_commit_latency_seconds", 0.99)),
            c.ms(hist_quantile(self.m0, self.m1, "foliot_timer_lag_seconds", 0.99)),
            f"{self.load0[0]:.1f} -> {self.load1[0]:.1f}",
        ]


# ---------------------------------------------------------------------------- set-up of a


def closed_loop(
    server: c.Foliot, key: str, requests: list[list[Any]], ok: tuple[int, ...]
) -> tuple[int, int]:
    """Send `requests` closed loop (2 processes x 8), again those refused as overloaded (429/503)
    after a pause; (answered with a code in `ok`, refusals seen)."""
    done: set[Any] = set()
    refused = 0
    for _ in range(30):
        todo = [r for r in requests if r[3] not in done]
        if not todo:
            break
        results, _ = c.run_clients(
            server.url, c.bearer(key), todo, mode="closed", procs=2, concurrency=8, timeout=60, limit_s=1800
        )
        done |= {r[5] for r in results if r[3] in ok}
        refused += sum(1 for r in results if r[3] in (429, 503))
        if len(done) < len(requests):
            time.sleep(1.0)
    return len(done), refused


def set_up_a(server: c.Foliot, key: str, args: argparse.Namespace) -> list[str]:
    notes: list[str] = []
    if "schedules" in args.amplifiers:
        notes += set_up_schedules(server, key, args)
    if "keys" in args.amplifiers:
        notes += set_up_keys(server, key, args)
    return notes


def set_up_schedules(server: c.Foliot, key: str, args: argparse.Namespace) -> list[str]:
    t0 = time.perf_counter()
    body = {"workflow": "tick", "every": "1s", "paused": True, "catchupWindow": "1m"}
    puts = [["PUT", f"/apps/a/schedules/s{i}", body, i] for i in range(args.schedules)]
    made, refused = closed_loop(server, key, puts, (200, 201))
    return [
        f"a's set-up: {made:,} of {args.schedules:,} schedules (every 1s, paused) in"
        f" {time.perf_counter() - t0:.1f}s ({refused} refusals sent again)"
    ]


def set_up_keys(server: c.Foliot, key: str, args: argparse.Namespace) -> list[str]:
    t0 = time.perf_counter()
    holders = [
        [
            "POST",
            "/apps/a/runs",
            {"workflow": "keyed", "businessKey": f"h{i}", "input": {"k": f"k{i}"}},
            f"h{i}",
        ]
        for i in range(args.keyed)
    ]
    queued = [
        [
            "POST",
            "/apps/a/runs",
            {"workflow": "keyed", "businessKey": f"q{i}", "input": {"k": f"k{i}"}},
            f"q{i}",
        ]
        for i in range(args.keyed)
    ]
    h, r1 = closed_loop(server, key, holders, (201, 409))
    q, r2 = closed_loop(server, key, queued, (201, 409))
    m = server.metrics()
    return [
        f"a's set-up: {h:,} holders and {q:,} runs queued behind them on {args.keyed:,} keys in"
        f" {time.perf_counter() - t0:.1f}s ({r1 + r2} refusals sent again); queued now"
        f" {c.metric_sum(m, 'foliot_open_runs', status='queued'):.0f}; server RSS {server.rss():.0f} MB"
    ]


# ---------------------------------------------------------------------------- the run


def row_b(label: str, f: dict[str, Any]) -> list[Any]:
    s, g = f["start"], f["signal"]
    push, resume = f.get("push", {}), f.get("resume", {})
    return [
        label,
        f"{s['ok']}/{s['sent']}",
        c.ms(s["p50"]),
        c.ms(s["p99"]),
        f"{g['ok']}/{g['sent']}",
        c.ms(g["p50"]),
        c.ms(g["p99"]),
        c.ms(push.get("p50", math.nan)),
        c.ms(push.get("p99", math.nan)),
        c.ms(resume.get("p50", math.nan)),
        c.ms(resume.get("p99", math.nan)),
        f.get("unfinished", "-"),
        f["refused"],
        f["failed"],
    ]


def ratio_line(name: str, loaded: float, alone: float, target: float | None) -> str:
    r = loaded / alone if alone and not math.isnan(alone) and not math.isnan(loaded) else math.nan
    verdict = "" if target is None or math.isnan(r) else ("  met" if r <= target else "  MISSED")
    goal = f" (target <= {target:.0f}x)" if target else ""
    return f"  {name:28} {c.ms(loaded):>9} / {c.ms(alone):>8} ms = {r:6.2f}x{goal}{verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=60.0, help="b's timetable per phase")
    parser.add_argument("--rate", type=float, default=10.0, help="b's starts (and signals) per second")
    parser.add_argument("--signal-after", type=float, default=1.5, help="s from a start to its signal")
    parser.add_argument("--timeout", type=float, default=30.0, help="b's client timeout per request, s")
    parser.add_argument("--warmup", type=float, default=15.0, help="s of a's load before b's timetable")
    parser.add_argument("--schedules", type=int, default=2000, help="a's schedules, every 1s")
    parser.add_argument("--keyed", type=int, default=10_000, help="a's key values (holder + queued run each)")
    parser.add_argument("--release-rate", type=float, default=20.0, help="a's holders released per s")
    parser.add_argument("--tree-branches", type=int, default=20)
    parser.add_argument("--tree-depth", type=int, default=3, help="nested parallel levels under the limit")
    parser.add_argument("--tree-every", type=float, default=20.0, help="s between a's trees")
    parser.add_argument("--refused-every", type=float, default=5.0, help="s between trees past the limit")
    parser.add_argument("--maps", type=int, default=6, help="a's maps in all")
    parser.add_argument("--maps-at-once", type=int, default=2)
    parser.add_argument("--map-items", type=int, default=1000)
    parser.add_argument("--map-concurrency", type=int, default=100, help="the map's maxConcurrency")
    parser.add_argument("--item-bytes", type=int, default=200_000, help="each map child's output")
    parser.add_argument("--dry-runs", type=int, default=8, help="a's concurrent dry-run loops")
    parser.add_argument("--dry-replay", type=int, default=1000, help="closed runs each dry-run replays")
    parser.add_argument("--floor-seconds", type=float, default=20.0)
    parser.add_argument(
        "--amplifiers",
        default=",".join(AMPLIFIERS),
        help="a's amplifiers to run (comma-separated; all by default): one at a time tells which costs b",
    )
    parser.add_argument("--profile", default="", help="directory: py-spy record the server during b with a")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="10 s timetables, 300 schedules, 1,000 keys, trees of 10^3, one 200-item map",
    )
    args = c.parse_args(
        parser,
        seconds=10.0,
        warmup=5.0,
        schedules=300,
        keyed=1000,
        tree_branches=10,
        tree_every=8.0,
        refused_every=4.0,
        maps=1,
        maps_at_once=1,
        map_items=200,
        map_concurrency=50,
        dry_runs=4,
        dry_replay=100,
        floor_seconds=5.0,
    )
    args.amplifiers = [a for a in str(args.amplifiers).split(",") if a]
    unknown = set(args.amplifiers) - set(AMPLIFIERS)
    if unknown:
        parser.error(f"--amplifiers: unknown {sorted(unknown)} (known: {','.join(AMPLIFIERS)})")
    c.header("noisy neighbour: app b alone, then while app a runs every amplifier (issue 37)", args)
    under = tree_runs(args.tree_branches, args.tree_depth)
    over = tree_runs(args.tree_branches, args.tree_depth + 1)
    print(
        f"# a's trees: {under:,} runs (limit {MAX_TREE_RUNS:,}) and {over:,}"
        " (past it: too_many_runs expected)"
    )
    work = c.tmpdir("noisy")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    for sub in ("a", "b"):
        (work / sub).mkdir()
    handler_b, handler_a = c.Handler(work / "b"), c.Handler(work / "a")
    server = c.Foliot(
        c.database_url(args.backend, work, cluster),
        work,
        FOLIOT_SCHEDULES_PER_APP=args.schedules + 10,
        FOLIOT_SCHEDULE_FIRE_RATE_PER_APP=args.schedules + 10,
    )
    server.start()
    key_b = server.setup_app([STEADY], handler_url=handler_b.url, app="b")
    key_a = server.setup_app(a_workflows(args), handler_url=handler_a.url, app="a")
    notes: list[str] = []

    # 1. the floor, with b's own timetables
    floor = c.Floor(work, key_b)
    fl_args = argparse.Namespace(**{**vars(args), "seconds": args.floor_seconds})
    results, _ = send_b(floor.url, key_b, "floor", fl_args)
    f_floor = b_figures(results, None, {}, fl_args)
    floor.child.stop()

    # 2. b alone
    rows_watch = []
    with Watch(server) as w_alone:
        results, _ = send_b(server.url, key_b, "alone", args)
        waited = wait_b_done(handler_b, results, 30)
    rows_watch.append(w_alone.row("b alone"))
    f_alone = b_figures(
        results, handler_b.stats(arrivals=True)["arrivals"], b_runs(server, key_b, "balone-"), args
    )
    notes.append(f"b alone: last pushes {waited:.1f}s after the timetable")
    handler_b.reset()

    # 3. a's set-up
    with Watch(server) as w_setup:
        notes += set_up_a(server, key_a, args)
    rows_watch.append(w_setup.row("a's set-up"))
    m0 = server.metrics()

    # 4. b with a
    end_at = time.time() + args.warmup + args.seconds + args.signal_after + 3
    spec = {
        "url": server.url,
        "key": key_a,
        "end_at": end_at,
        "schedules": args.schedules,
        "keyed": args.keyed,
        "release_rate": args.release_rate,
        "tree_depth": args.tree_depth,
        "tree_runs": under,
        "tree_every": args.tree_every,
        "refused_every": args.refused_every,
        "maps": args.maps,
        "maps_at_once": args.maps_at_once,
        "map_items": args.map_items,
        "dry_runs": args.dry_runs,
        "dry_replay": args.dry_replay,
        "amplifiers": args.amplifiers,
    }
    a_out = work / "a.json"
    ctx = multiprocessing.get_context("spawn")
    driver = ctx.Process(target=a_driver, args=(spec, str(a_out)), daemon=True)
    profile = c.Profile(server.pid, Path(args.profile) / "noisy.txt") if args.profile else None
    with Watch(server) as w_loaded:
        driver.start()
        c.on_exit(lambda: driver.kill() if driver.is_alive() else None)
        time.sleep(args.warmup)
        if profile is not None:
            profile.__enter__()
        results, _ = send_b(server.url, key_b, "loaded", args)
        if profile is not None:
            profile.__exit__(None, None, None)
        driver.join(timeout=max(1.0, end_at - time.time() + 60))
        if driver.is_alive():
            driver.kill()
        waited = wait_b_done(handler_b, results, 60)
    rows_watch.append(w_loaded.row("b with a"))
    alive = server.alive()
    arrivals = handler_b.stats(arrivals=True)["arrivals"]
    f_loaded = b_figures(results, arrivals, b_runs(server, key_b, "bloaded-") if alive else {}, args)
    notes.append(f"b with a: last pushes {waited:.1f}s after the timetable; server alive: {alive}")
    if not alive:
        notes.append(server.death())
    a_result = json.loads(a_out.read_text()) if a_out.exists() else {}
    m1 = server.metrics() if alive else {}

    # ---------------------------------------------------------------- the report
    print(
        c.table(
            f"app b (workflow steady: task, sleep 1s, wait go, task; {args.rate:g} starts/s and as many"
            f" signals {args.signal_after:g}s after each start, open loop, {args.seconds:g}s; ms from the"
            " scheduled send; push = start -> its task's push at the handler; resume = the next push"
            " after both the sleep's end and the signal were due)",
            [
                "phase",
                "starts ok",
                "start p50",
                "start p99",
                "signals ok",
                "signal p50",
                "signal p99",
                "push p50",
                "push p99",
                "resume p50",
                "resume p99",
                "unfinished",
                "refused",
                "failed",
            ],
            [
                row_b(f"floor (quart-trio, {args.floor_seconds:g}s)", f_floor),
                row_b("b alone", f_alone),
                row_b("b with a", f_loaded),
            ],
        )
    )
    print("\n== b with a / b alone")
    for name, part, q, target in (
        ("start p99", "start", "p99", 2.0),
        ("signal p99", "signal", "p99", 2.0),
        ("start p50", "start", "p50", None),
        ("signal p50", "signal", "p50", None),
        ("start -> push p99", "push", "p99", None),
        ("resume p99", "resume", "p99", None),
    ):
        print(ratio_line(name, f_loaded[part][q], f_alone[part][q], target))
    print(
        f"  b alone / floor: start p99 {c.ratio(f_alone['start']['p99'], f_floor['start']['p99'])},"
        f" signal p99 {c.ratio(f_alone['signal']['p99'], f_floor['signal']['p99'])}"
    )
    peak = max(w_alone.rss.peak, w_setup.rss.peak, w_loaded.rss.peak)
    print(
        f"  server peak RSS             {peak:.0f} MB (target < 500 MB)"
        + ("  met" if peak < 500 else "  MISSED")
    )
    refused = f_loaded["refused"]
    print(
        f"  b's requests refused        {refused} with a, {f_alone['refused']} alone (target 0)"
        f"{'  met' if refused == 0 else '  MISSED'}; other failures {f_loaded['failed']}"
        f" (codes: starts {f_loaded['start']['codes']}, signals {f_loaded['signal']['codes']})"
    )
    print(
        c.table(
            "the server per phase (cpu = the serving process, all threads; peaks from /metrics every 3 s;"
            " scrape = the slowest /metrics answer; commit and timer lag p99: the bucket bound, ms)",
            [
                "phase",
                "wall s",
                "cpu s",
                "peak RSS MB",
                "loop lag",
                "storage q",
                "push backlog",
                "live actors",
                "in flight",
                "scrape ms",
                "commit p99",
                "timer lag p99",
                "load avg",
            ],
            rows_watch,
        )
    )
    rows_a = []
    for kind, codes in sorted(a_result.get("codes", {}).items()):
        p50, p99, worst = a_result["took"].get(kind, [math.nan] * 3)
        rows_a.append(
            [
                kind,
                sum(codes.values()),
                " ".join(f"{k}:{v}" for k, v in sorted(codes.items())),
                c.ms(p50),
                c.ms(p99),
                c.ms(worst),
            ]
        )
    print(
        c.table(
            "app a's driver (answers by status; -1 timeout, -3 connection error)",
            ["what", "sent", "codes", "p50", "p99", "max"],
            rows_a,
        )
    )
    for mp in a_result.get("maps", []):
        notes.append(f"a's map {mp['runId']}: {mp['status']} after {mp['seconds']}s, error {mp['error']}")
    if m1:
        for name, label in (
            ("foliot_runs_started_total", "runs started"),
            ("foliot_schedule_fires_total", "schedule fires"),
            ("foliot_admission_refused_total", "admission refusals"),
            ("foliot_timers_fired_total", "timer firings handed out (deferred fires again each time)"),
            ("foliot_timer_retries_total", "timer firings handed out again (not applied in time)"),
        ):
            deltas = {}
            for k, v in m1.items():
                base = k.partition("{")[0]
                if base == name and v - m0.get(k, 0.0):
                    deltas[k.partition("{")[2].rstrip("}")] = v - m0.get(k, 0.0)
            notes.append(
                f"during b with a, {label}: "
                + (", ".join(f"{k} {v:.0f}" for k, v in sorted(deltas.items())) or "none")
            )
        closed = {
            k.partition("{")[2].rstrip("}"): v - m0.get(k, 0.0)
            for k, v in m1.items()
            if k.startswith("foliot_runs_closed_total{") and 'app="a"' in k and v - m0.get(k, 0.0)
        }
        notes.append(
            "during b with a, a's runs closed: "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(closed.items()))
        )
        notes.append(
            f"open runs at the end: {c.metric_sum(m1, 'foliot_open_runs'):.0f}"
            f" (queued {c.metric_sum(m1, 'foliot_open_runs', status='queued'):.0f})"
        )
        gc2 = c.metric_sum(m1, "foliot_gc_pause_max_seconds", generation="2")
        notes.append(f"longest full garbage collection since start: {gc2 * 1000:.0f} ms")
    if profile is not None:
        notes.append(f"py-spy profile of the server during b with a ({profile.out}):")
        notes.append(profile.summary())
    for n in notes:
        print(" ", n)
    print(f"  cores {os.cpu_count()}, load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    server.stop()


if __name__ == "__main__":
    main()
