"""Restart with many parked runs: `kill -9`, restart -> /readyz, then signal -> task latency.

    python bench/restart.py [--runs 100000] [--backend sqlite|postgres] [--sequential 200]
    python bench/restart.py --quick               # 10,000 runs, 50 sequential signals

Seeds N runs parked on `wait "go"` (14-day timeout; then a task pushed to a local handler
process) in bulk through the store, starts `foliot serve`, kills it with SIGKILL, restarts it
and measures spawn -> /readyz; then the first signal -> task push, and `--sequential` more
signals one after the other (each waits for its push), p50/p99. Target (issue 9): restart ->
ready <= 5 s (1.14 s with 100,000 parked when filed); first signal -> task 41 ms, then p50
9.6 ms sequentially on SQLite.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c


def signal_to_task(
    client: c.httpx.Client, handler: c.Handler, run_id: str, limit_s: float, codes: Counter[str] | None = None
) -> tuple[float, float]:
    """(answer seconds, push seconds) for one signal; NaN push when none arrived in time.

    Counts the answer's status in `codes` (with the error code of a refusal), so a signal that
    was not accepted shows why instead of reading as a missing push."""
    t0 = time.time()
    r = client.post("/apps/bench/signals", json={"runId": run_id, "name": "go"})
    answered = time.time() - t0
    if r.status_code != 202:
        try:
            why = str(r.json().get("error", {}).get("code", ""))
        except ValueError:
            why = r.text[:80]
        if codes is not None:
            codes[f"{r.status_code} {why}".strip()] += 1
        return answered, float("nan")
    if codes is not None:
        codes["202"] += 1
    while time.time() - t0 < limit_s:
        arrivals = handler.stats(arrivals=True)["arrivals"].get(run_id)
        if arrivals:
            return answered, arrivals[0][0] - t0
        time.sleep(0.002)
    return answered, float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--sequential", type=int, default=200, help="signals sent one after another")
    parser.add_argument("--quick", action="store_true", help="10,000 runs, 50 sequential signals")
    args = c.parse_args(parser, runs=10_000, sequential=50)
    c.header(f"restart with {args.runs:,} parked runs ({args.backend})", args)
    node = c.parked_node(args.backend, "restart", args.runs)
    handler, server = node.handler, node.server
    ready_empty, key, run_ids, took = node.ready_empty, node.key, node.run_ids, node.took
    ready0 = server.start(ready_limit_s=600)
    time.sleep(1)
    server.kill9()
    ready = server.start(ready_limit_s=600)
    rss = server.rss()
    targets = c.random_targets(run_ids, args.sequential + 1, 5)
    with c.httpx.Client(base_url=server.url, headers=c.bearer(key), timeout=30) as client:
        codes: Counter[str] = Counter()
        first_answer, first_task = signal_to_task(client, handler, targets[0], 30, codes)
        answers, tasks = [], []
        t_end = time.time() + max(60.0, args.sequential * 2.0)
        for run_id in targets[1:]:
            if time.time() > t_end:
                break
            a, t = signal_to_task(client, handler, run_id, 10, codes)
            answers.append(a)
            tasks.append(t)
    server.stop()
    handler.child.stop()
    pushed = [t for t in tasks if t == t]
    rows: list[list[Any]] = [
        ["seeded in bulk through the store", f"{len(run_ids):,} in {took:.0f}s", ""],
        ["spawn -> /readyz, empty database (floor)", f"{ready_empty:.2f} s", ""],
        ["spawn -> /readyz (first start)", f"{ready0:.2f} s", ""],
        ["kill -9, restart -> /readyz", f"{ready:.2f} s", "<= 5 s"],
        ["RSS after restart", f"{rss:.0f} MB", ""],
        ["first signal: answer / -> task push", f"{c.ms(first_answer)} / {c.ms(first_task)} ms", ""],
        [
            f"sequential signals ({len(answers)}): answer p50 / p99",
            f"{c.ms(c.pct(answers, 50))} / {c.ms(c.pct(answers, 99))} ms",
            "",
        ],
        [
            "sequential signal -> task push p50 / p99",
            f"{c.ms(c.pct(pushed, 50))} / {c.ms(c.pct(pushed, 99))} ms"
            f" ({len(tasks) - len(pushed)} without push)",
            "",
        ],
        ["signal answers by status", " ".join(f"{k}:{v}" for k, v in sorted(codes.items())), "202"],
    ]
    print(
        c.table(f"restart with {args.runs:,} parked ({args.backend})", ["measure", "value", "target"], rows)
    )


if __name__ == "__main__":
    main()
