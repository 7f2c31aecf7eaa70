"""Timer storm: N runs asleep until the same second, then a task each pushed to a local handler.

    python bench/timer_storm.py [--runs 40000] [--backend sqlite|postgres] [--seed bulk|api]
    python bench/timer_storm.py --quick            # 2,000 runs

Each run sleeps `untilPath: input.at` (the same instant, a little after the server is ready)
and then has a task pushed to bench/handler_app.py (its own process; answers at once and counts
pushes by idempotencyKey, so duplicates show). Runs are seeded `bulk` (default: the store's own
rows written straight into the database while the server is down, then the server started, so
the timers are paged in from storage as after a restart) or through the `api` (closed-loop
multi-process client). Reported: pushes delivered (unique keys) and duplicates, time from the
due instant to the last push, drain rate next to the push floor (a bare multi-process httpx
client POSTing the same number of push-sized bodies to the same handler, same run), push
outcomes by class from /metrics, task failures by class in a sample of runs' events, run
statuses in that sample, `foliot_timers_fired_total` vs N, and server RSS before / peak / after.
Target (issue 9): all delivered, 0 attempts failed by Foliot's own queueing, each timer fires
once, drain rate >= 0.5x the push floor, RSS back down after the burst.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c

WORKFLOW = {
    "name": "storm",
    "steps": [
        {"name": "nap", "type": "sleep", "untilPath": "input.at"},
        {"name": "work", "type": "task", "timeout": "30s"},
    ],
}


def iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s)) + f".{int(epoch_s % 1 * 1000):03d}Z"


def push_floor(handler: c.Handler, seconds: float) -> float:
    body = {
        "taskToken": "tt_" + "x" * 32,
        "app": "bench",
        "runId": "run_" + "0" * 24,
        "workflowName": "storm",
        "workflowVersion": 1,
        "step": "work",
        "attempt": 1,
        "generation": 1,
        "idempotencyKey": "run_" + "0" * 24 + ":1:work:1",
        "deadline": iso(time.time()),
        "businessKey": "bk-1",
        "input": {"at": iso(time.time())},
        "state": {"nap": None},
        "error": None,
    }
    requests = [["POST", "/floor/foliot/storm/work", body, None]]
    results, wall = c.run_clients(
        handler.url, {}, requests, mode="closed", procs=2, concurrency=32, cycle_s=seconds, timeout=30
    )
    return float(c.summarize(results, wall)["rps"])


def sample_runs(server: c.Foliot, key: str, run_ids: list[str], n: int) -> tuple[Counter[str], Counter[str]]:
    statuses: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=30) as client:
        for run_id in c.random_targets(run_ids, min(n, len(run_ids)), 7):
            try:
                statuses[client.get(f"/apps/bench/runs/{run_id}").json()["status"]] += 1
                events = client.get(f"/apps/bench/runs/{run_id}/events", params={"limit": 1000}).json()[
                    "events"
                ]
            except (c.httpx.HTTPError, KeyError, ValueError):
                statuses["(unreadable)"] += 1
                continue
            for e in events:
                if e["type"] in ("task_failed", "task_timed_out"):
                    failures[(e.get("data") or {}).get("class") or e["type"]] += 1
    return statuses, failures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=40_000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seed", choices=["bulk", "api"], default="bulk", help="how the runs are created")
    parser.add_argument("--lead", type=float, default=8.0, help="seconds between ready and the due instant")
    parser.add_argument("--limit", type=float, default=300.0, help="give up this many seconds after due")
    parser.add_argument("--sample", type=int, default=200, help="runs whose status and events are read")
    parser.add_argument("--quick", action="store_true", help="2,000 runs, 60 s limit")
    args = c.parse_args(parser, runs=2_000, limit=60.0, sample=100)
    c.header(
        f"timer storm: {args.runs:,} sleeps due in the same second ({args.backend}, seeded {args.seed})", args
    )
    work = c.tmpdir("storm")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    db_url = c.database_url(args.backend, work, cluster)
    handler = c.Handler(work)
    server = c.Foliot(db_url, work)
    server.start()
    key = server.setup_app([WORKFLOW], handler_url=handler.url)
    notes: list[str] = []
    if args.seed == "bulk":
        server.stop()
        # Predict the end of seeding and start-up generously; the report says if it was missed.
        due = time.time() + args.runs / 4000 + 15 + args.lead
        run_ids, took = c.seed_bulk(db_url, "bench", WORKFLOW, args.runs, input_fn=lambda i: {"at": iso(due)})
        notes.append(f"seeded {len(run_ids):,} runs in bulk through the store in {took:.1f}s")
        ready = server.start(ready_limit_s=300)
        notes.append(f"server ready {ready:.2f}s after spawn with {len(run_ids):,} sleeping runs")
    else:
        due = time.time() + args.runs / 40 + 20 + args.lead
        requests = [
            ["POST", "/apps/bench/runs", {"workflow": "storm", "input": {"at": iso(due)}}, i]
            for i in range(args.runs)
        ]
        t0 = time.perf_counter()
        results, _ = c.run_clients(
            server.url,
            c.bearer(key),
            requests,
            mode="closed",
            procs=2,
            concurrency=32,
            timeout=60,
            limit_s=3600,
        )
        notes.append(
            f"started {sum(r[3] == 201 for r in results):,} runs through the API"
            f" in {time.perf_counter() - t0:.1f}s"
        )
        run_ids = []
        with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=60) as client:
            cursor = None
            for _ in range(args.runs // 500 + 2):
                page = client.get(
                    "/apps/bench/runs", params={"limit": 500, **({"cursor": cursor} if cursor else {})}
                )
                run_ids += [r["runId"] for r in page.json()["runs"]]
                cursor = page.json().get("nextCursor")
                if not cursor:
                    break
    slack = due - time.time()
    notes.append(
        f"due instant {slack:+.1f}s from now"
        + ("  (MISSED: timers were overdue at start)" if slack < 0 else "")
    )
    rss_before = server.rss()
    fired0 = c.metric_sum(server.metrics(), "foliot_timers_fired_total")
    progress: list[tuple[float, int]] = []
    with c.RssSampler(server.pid) as sampler:
        end = due + args.limit
        last_print = 0.0
        while time.time() < end and server.alive():
            st = handler.stats()
            progress.append((time.time() - due, st["unique"]))
            if st["unique"] >= args.runs:
                break
            if time.time() - last_print > 10 and time.time() > due:
                last_print = time.time()
                print(
                    f"  t{time.time() - due:+.0f}s delivered {st['unique']:,} dup {st['duplicates']}",
                    flush=True,
                )
            time.sleep(0.5)
        peak = sampler.peak
    stats = handler.stats(arrivals=True)
    times = sorted(t for lst in stats["arrivals"].values() for t, _ in lst)
    alive = server.alive()
    if not alive:
        notes.append(server.death())
    time.sleep(5)
    rss_after = server.rss()
    m = server.metrics(timeout=90)
    fired = c.metric_sum(m, "foliot_timers_fired_total") - fired0
    outcomes = {k.split('"')[1]: int(v) for k, v in m.items() if k.startswith("foliot_push_outcomes_total{")}
    statuses, failures = sample_runs(server, key, run_ids, args.sample) if alive else (Counter(), Counter())
    server.stop()
    floor = push_floor(handler, 5.0 if args.quick else 15.0)
    handler.child.stop()
    delivered = stats["unique"]
    drain = (times[-1] - due) if times else float("nan")
    first = (times[0] - due) if times else float("nan")
    rate = delivered / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else float("nan")
    rows = [
        ["pushes delivered (unique keys)", f"{delivered:,} of {args.runs:,}", f"all {args.runs:,}"],
        ["duplicate pushes (same key again)", stats["duplicates"], "-"],
        ["first push after the due instant", f"{first:.2f} s", "-"],
        ["last push after the due instant (drain)", f"{drain:.2f} s", "-"],
        ["drain rate (first -> last push)", f"{rate:.0f}/s", ""],
        ["push floor (bare httpx, 2 procs x 32)", f"{floor:.0f}/s", ""],
        ["drain rate / push floor", c.ratio(rate, floor), ">= 0.5x"],
        [
            "push outcomes (/metrics)",
            " ".join(f"{k}:{v}" for k, v in sorted(outcomes.items())) or "-",
            "0 timeout",
        ],
        [
            f"task failures in {sum(statuses.values())} sampled runs",
            " ".join(f"{k}:{v}" for k, v in failures.items()) or "0",
            "0",
        ],
        ["statuses of sampled runs", " ".join(f"{k}:{v}" for k, v in sorted(statuses.items())), "completed"],
        [
            "timers fired (/metrics) vs N",
            f"{fired:,.0f} vs {args.runs:,} ({c.ratio(fired, args.runs)})",
            "1.00x",
        ],
        [
            "server RSS before / peak / after (MB)",
            f"{rss_before:.0f} / {peak:.0f} / {rss_after:.0f}",
            "after ~ before",
        ],
        ["server alive at the end", alive, "True"],
    ]
    print(c.table(f"timer storm ({args.backend}, {args.runs:,} runs)", ["measure", "value", "target"], rows))
    if server.metrics_error:
        notes.append(f"metrics unreadable at some point ({server.metrics_error}): those figures show 0 / -")
    for n in notes:
        print(" ", n)
    if progress:
        marks = [p for p in progress if p[0] >= 0][:: max(1, len(progress) // 12)]
        print("  delivered over time: " + ", ".join(f"{t:+.0f}s:{n}" for t, n in marks))


if __name__ == "__main__":
    main()
