"""Signal latency, open loop: signals on a fixed timetable to random parked runs.

    python bench/signal_latency.py [--runs 15000] [--rates 25,50,100,200] [--seconds 20]
    python bench/signal_latency.py --find-capacity [--modes live,passivated] [--backend postgres]
    python bench/signal_latency.py --quick

Parks N runs (started through the API) on a workflow of `wait "go"` -> task -> `wait "go"`
-> task ... whose tasks are pushed to a local handler process that answers at once and records
arrival times. A multi-process client then sends `POST /signals` to random runs at fixed rates
whatever the answers (open loop; latency counts from the scheduled send time). Per rate it
prints: signal answer p50/p99, signal -> task arrival p99, timeouts, 429/503 counts and how
many carried Retry-After. `--find-capacity` doubles the rate until p99 passes
`--p99-limit-ms` (or answers fall behind, or anything times out or is refused; when the first
rate already fails it halves down to `--min-rate`), then measures at 50 % of the last good rate.
Modes: `live` (actors kept in memory) and `passivated`
(FOLIOT_PASSIVATE_AFTER_MS small, runs passivated before the signals). The floor is the bare
quart-trio signal endpoint's closed-loop rate measured with the same client in the same run.
Target (issue 9): p99 <= 50 ms at 50 % of capacity; above capacity fast 429/503 + Retry-After.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c
from bench import rawclient

ROUNDS = 8
WORKFLOW = {
    "name": "signalled",
    "steps": [
        step
        for k in range(ROUNDS)
        for step in (
            {"name": f"w{k}", "type": "wait", "signal": "go", "timeout": "14d"},
            {"name": f"t{k}", "type": "task", "timeout": "30s"},
        )
    ],
}
PASSIVATE = {"live": 3_600_000, "passivated": 300}


def seed(server: c.Foliot, key: str, count: int) -> tuple[list[str], float]:
    requests = [
        ["POST", "/apps/bench/runs", {"workflow": "signalled", "input": {"i": i}}, i] for i in range(count)
    ]
    t0 = time.perf_counter()
    started: set[Any] = set()
    refused = 0
    for _ in range(30):  # starts refused as overloaded (429/503) are sent again after a pause
        todo = [r for r in requests if r[3] not in started]
        if not todo:
            break
        results, _ = c.run_clients(
            server.url, c.bearer(key), todo, mode="closed", procs=2, concurrency=16, timeout=60, limit_s=1800
        )
        started |= {r[5] for r in results if r[3] == 201}
        refused += sum(1 for r in results if r[3] in (429, 503))
        if len(started) < count:
            time.sleep(1.0)
    elapsed = time.perf_counter() - t0
    if refused:
        print(f"  seeding: {refused} starts refused as overloaded were sent again")
    if len(started) < count:
        print(f"  seeding: {len(started)} of {count} starts answered 201")
    with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=60) as client:
        ids: list[str] = []
        cursor = None
        for _ in range(count // 500 + 2):
            params: dict[str, Any] = {"limit": 500, "workflow": "signalled"}
            if cursor:
                params["cursor"] = cursor
            page = client.get("/apps/bench/runs", params=params).json()
            ids += [r["runId"] for r in page["runs"]]
            cursor = page.get("nextCursor") or page.get("cursor")
            if not cursor:
                break
    return ids, elapsed


def drain(handler: c.Handler, limit_s: float) -> None:
    """Wait (bounded) until the handler stops receiving pushes: the previous phase's backlog."""
    last, t0 = -1, time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        now = handler.stats()["received"]
        if now == last:
            return
        last = now
        time.sleep(1.0)


def phase(
    server: c.Foliot,
    handler: c.Handler,
    key: str,
    run_ids: list[str],
    rate: float,
    args: argparse.Namespace,
    seed: int,
) -> dict[str, Any]:
    count = max(1, int(rate * args.seconds))
    targets = c.random_targets(run_ids, count, seed)
    requests = [["POST", "/apps/bench/signals", {"runId": r, "name": "go"}, r] for r in targets]
    cpu0 = c.cpu_seconds(server.pid)
    main0 = c.thread_cpu_seconds(server.pid).get(server.pid, 0.0)
    gc0 = gc_full(server)
    results, wall, accept_q = send_open(server, key, requests, rate, args)
    s = c.summarize(results, wall)
    time.sleep(min(5.0, args.timeout))  # let pushes of the last signals arrive
    cpu = c.cpu_seconds(server.pid) - cpu0  # the signals, their pushes and the answers to them
    main = c.thread_cpu_seconds(server.pid).get(server.pid, 0.0) - main0  # the event loop's share
    to_task, missing = c.to_task(results, handler.stats(arrivals=True)["arrivals"])
    gc1 = gc_full(server)
    s.update(
        gc_full=f"{gc1[0] - gc0[0]:.0f}/{1000 * (gc1[1] - gc0[1]):.0f}",
        cpu_ms=1000 * cpu / max(1, s["ok"]),
        loop_ms=1000 * main / max(1, s["ok"]),
        rate=rate,
        to_task_p50=c.pct(to_task, 50),
        to_task_p99=c.pct(to_task, 99),
        no_task=missing,
        accept_q=accept_q,
    )
    return s


def gc_full(server: c.Foliot) -> tuple[float, float]:
    """Full garbage collections of the server so far, and the seconds it stood still for them."""
    m = server.metrics()
    return (
        c.metric_sum(m, "foliot_gc_collections_total", generation="2"),
        c.metric_sum(m, "foliot_gc_pause_seconds_total", generation="2"),
    )


def send_open(
    server: c.Foliot, key: str, requests: list[list[Any]], rate: float, args: argparse.Namespace
) -> tuple[list[list[Any]], float, float]:
    """`requests` open loop at `rate` from `args.procs` processes (`args.client`: raw sockets
    or httpx); (results, wall, deepest accept queue seen meanwhile)."""
    with c.AcceptQueueSampler(server.port) as backlog:
        if getattr(args, "client", "raw") == "raw":
            results, wall = rawclient.run_open(
                server.url,
                c.bearer(key),
                requests,
                rate=rate,
                procs=args.procs,
                timeout=args.timeout,
                limit_s=args.seconds + args.timeout + 10,
            )
        else:
            results, wall = c.run_clients(
                server.url,
                c.bearer(key),
                requests,
                mode="open",
                rate=rate,
                procs=args.procs,
                timeout=args.timeout,
                limit_s=args.seconds + args.timeout + 10,
            )
    return results, wall, backlog.peak


def good(s: dict[str, Any], limit_s: float) -> bool:
    return (
        s["p99"] <= limit_s
        and s["timeouts"] + s["conn_errors"] + s["429"] + s["503"] + s["client_overrun"] == 0
        and s["ok"] >= 0.9 * s["rate"] * _SECONDS[0]
    )


_SECONDS = [1.0]


def row(mode: str, label: str, s: dict[str, Any]) -> list[Any]:
    return [
        mode,
        label,
        f"{s['rate']:.0f}",
        s["sent"],
        s["ok"],
        c.ms(s["p50"]),
        c.ms(s["p99"]),
        c.ms(s["to_task_p50"]),
        c.ms(s["to_task_p99"]),
        s["no_task"],
        s["timeouts"],
        s["conn_errors"],
        s["429"],
        s["503"],
        f"{s['retry_after']}/{s['429'] + s['503']}",
        c.ms(s["refused_p99"]),
        f"{s['cpu_ms']:.1f}",
        f"{s['loop_ms']:.1f}",
        s["other"],
        s["client_overrun"],
        f"{s['accept_q']:.0f}",
        s["gc_full"],
    ]


def one_mode(mode: str, args: argparse.Namespace) -> tuple[list[list[Any]], list[str]]:
    work = c.tmpdir(f"signal-{mode}")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    handler = c.Handler(work)
    server = c.Foliot(
        c.database_url(args.backend, work, cluster),
        work,
        FOLIOT_PASSIVATE_AFTER_MS=PASSIVATE[mode],
        FOLIOT_ADMISSION_LAG_MS=args.lag_ms,
    )
    server.start()
    key = server.setup_app([WORKFLOW], handler_url=handler.url)
    notes = []
    run_ids, took = seed(server, key, args.runs)
    notes.append(
        f"{mode}: {len(run_ids)} runs parked through the API in {took:.1f}s ({len(run_ids) / took:.0f}/s)"
    )
    if mode == "passivated":
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 60:
            if c.metric_sum(server.metrics(), "foliot_live_actors") <= len(run_ids) * 0.01:
                break
            time.sleep(0.5)
    live = c.metric_sum(server.metrics(), "foliot_live_actors")
    notes.append(f"{mode}: live actors before the signals: {live:.0f}; server RSS {server.rss():.0f} MB")
    floor = c.Floor(work, key)
    body = {"runId": run_ids[0], "name": "go"}
    floor_cpu0 = c.cpu_seconds(floor.pid)
    f = (
        c.wrk_post(f"{floor.url}/apps/bench/signals", body, key, seconds=args.seconds, connections=16)
        if (c.have_wrk())
        else None
    )
    floor_rps = f["rps"] if f else float("nan")
    if f:
        floor_cpu_ms = 1000 * (c.cpu_seconds(floor.pid) - floor_cpu0) / max(1, f["requests"])
        notes.append(f"{mode}: floor CPU per request {floor_cpu_ms:.2f} ms (serving process, all threads)")
    floor.child.stop()
    rows = []
    profile = c.Profile(server.pid, Path(args.profile) / f"signal-{mode}.txt") if args.profile else None
    if profile is not None:
        profile.__enter__()
    if args.find_capacity:
        # Double while good; if the first rate is already bad, halve down to --min-rate.
        rate, capacity, going = args.start_rate, 0.0, ""
        for seed_n in range(1, 16):
            s = phase(server, handler, key, run_ids, rate, args, seed_n)
            rows.append(row(mode, "ramp", s))
            drain(handler, 30)
            if not server.alive():
                break
            if good(s, args.p99_limit_ms / 1000):
                capacity = rate
                if going == "down" or rate * 2 > args.max_rate:
                    break
                going, rate = "up", rate * 2
            else:
                if going == "up" or rate / 2 < args.min_rate:
                    break
                going, rate = "down", rate / 2
        notes.append(
            f"{mode}: capacity (last rate with p99 <= {args.p99_limit_ms} ms, nothing refused) "
            f"{capacity:.0f}/s; floor (closed loop, wrk) {floor_rps:.0f}/s = {c.ratio(capacity, floor_rps)}"
        )
        if capacity and server.alive():
            s = phase(server, handler, key, run_ids, capacity / 2, args, 999)
            rows.append(row(mode, "50% cap", s))
    else:
        for i, rate in enumerate(args.rates):
            if not server.alive():
                break
            s = phase(server, handler, key, run_ids, rate, args, i + 1)
            rows.append(row(mode, "fixed", s))
            drain(handler, 30)
        notes.append(f"{mode}: floor signal endpoint (closed loop, wrk) {floor_rps:.0f}/s")
    if profile is not None:
        profile.__exit__(None, None, None)
        notes.append(f"{mode}: py-spy profile of the server during the phases ({profile.out}):")
        notes.append(profile.summary())
    if not server.alive():
        notes.append(f"{mode}: {server.death()}")
    m = server.metrics()
    notes.append(
        f"{mode}: server alive {server.alive()}, RSS {server.rss():.0f} MB, handler duplicates "
        f"{handler.stats()['duplicates']}, push outcomes "
        + ", ".join(
            f"{k.split('=')[1].strip(chr(34) + '}')}:{v:.0f}"
            for k, v in m.items()
            if k.startswith("foliot_push_outcomes_total{")
        )
    )
    server.stop()
    handler.child.stop()
    return rows, notes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=15_000, help="parked runs (started through the API)")
    parser.add_argument(
        "--rates", default="25,50,100,200", help="fixed rates, signals/s (without --find-capacity)"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each rate's timetable")
    parser.add_argument("--find-capacity", action="store_true", help="ramp x2 from --start-rate, then 50%%")
    parser.add_argument("--start-rate", type=float, default=25.0)
    parser.add_argument("--max-rate", type=float, default=1600.0)
    parser.add_argument("--min-rate", type=float, default=5.0, help="lowest rate tried when halving")
    parser.add_argument("--p99-limit-ms", type=float, default=200.0, help="p99 above this ends the ramp")
    parser.add_argument("--modes", default="live,passivated")
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout per signal, s")
    parser.add_argument(
        "--lag-ms", type=int, default=0, help="FOLIOT_ADMISSION_LAG_MS for the server (0: measured only)"
    )
    parser.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="raw: plain sockets, tens of us per request (bench/rawclient.py); httpx: 2-3 ms per request",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="directory: py-spy record the server during the phases, print top frames",
    )
    parser.add_argument(
        "--quick", action="store_true", help="300 runs, 3 s per rate, ramp from 20/s to 160/s"
    )
    args = c.parse_args(
        parser, runs=300, seconds=3.0, timeout=10.0, start_rate=20.0, max_rate=160.0, find_capacity=True
    )
    args.rates = [float(r) for r in str(args.rates).split(",")]
    _SECONDS[0] = args.seconds
    c.header(f"signal latency, open loop ({args.backend})", args)
    rows, notes = [], []
    for mode in args.modes.split(","):
        try:
            r, n = one_mode(mode, args)
        except Exception as exc:
            r, n = [], [f"{mode}: FAILED {type(exc).__name__}: {str(exc)[:300]}"]
        rows += r
        notes += n
    print(
        c.table(
            f"signals ({args.backend}; ms from the scheduled send; task = signal -> push at the handler; "
            "cpu = server CPU, all threads, per 2xx, its push and answer included; loop = the "
            "event loop thread's share (the rest: SQLite's writer and reader, or asyncpg's loop); "
            "accept q = most connections waiting in the kernel's accept queue; gc2 = full garbage "
            "collections during the phase / ms the process stood still for them)",
            [
                "mode",
                "phase",
                "rate/s",
                "sent",
                "2xx",
                "p50",
                "p99",
                "task p50",
                "task p99",
                "no task",
                "timeout",
                "connerr",
                "429",
                "503",
                "retry-after",
                "refused p99",
                "cpu ms/2xx",
                "loop ms",
                "other",
                "unsent",
                "accept q",
                "gc2 n/ms",
            ],
            rows,
        )
    )
    for n in notes:
        print(" ", n)
    print("  target: p99 <= 50 ms at 50% of capacity; above capacity fast 429/503 with Retry-After")


if __name__ == "__main__":
    main()
