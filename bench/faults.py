"""The long fault runs: tests/faults' harness for as long as asked, one fault class at a time,
on SQLite, PostgreSQL and three nodes on PostgreSQL, checked by the same history checker.

    python bench/faults.py --minutes 10 --seed 1                 # every configuration
    python bench/faults.py --store cluster --minutes 20 --seed 7
    python bench/faults.py --quick                               # a minute per configuration

Each configuration's time is split evenly between its fault classes; each class gets its own
processes (a fresh database), a workload of clients (starts with idempotency and business
keys, signals some before the wait and some twice, cancels, redrives, workers pulling tasks)
and the seeded schedule of that one fault. PostgreSQL outages last tens of seconds here
(`pg_down`, 10-30 s), pauses 1.5 leases. The table (markdown) is printed and written with
every run's figures to `--out` (JSON); a violation prints the seed and the shortest histories
that show it, and the run's history is saved beside the JSON to replay the checker on.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.faults.harness import (
    FAULTS_CLUSTER,
    FAULTS_POSTGRES,
    FAULTS_SQLITE,
    Result,
    Scenario,
    playable,
    run_scenario,
)
from tests.pg import Cluster

CLASSES = {"sqlite": FAULTS_SQLITE, "postgres": FAULTS_POSTGRES, "cluster": FAULTS_CLUSTER}
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "cluster": "3 nodes (PostgreSQL)"}


def row(store: str, result: Result, wall_s: float) -> dict[str, Any]:
    c = result.report.counts
    fault = result.config.faults[0]
    injected = result.injected[fault]
    if fault == "handler":  # the misbehaving answers themselves, not the windows they came in
        injected = sum(result.handler_faults.values())
    return {
        "store": store,
        "fault": fault,
        "seed": result.config.seed,
        "seconds": round(wall_s),
        "operations": len(result.history.ops),
        "acknowledged": c.acknowledged,
        "faults": injected,
        "lost": c.lost,
        "dup_same_key": c.duplicated_same_key,
        "dup_other_key": c.duplicated_other_key,
        "violations": c.violations,
        "notes": result.notes,
        "measures": result.measures,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| configuration | fault class | ops acknowledged | faults injected | lost "
        "| duplicated, same key | duplicated, other key | invariant violations |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {NAMES[r['store']]} | {r['fault']} | {r['acknowledged']} | {r['faults']} | {r['lost']} "
            f"| {r['dup_same_key']} | {r['dup_other_key']} | {r['violations']} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    """The run, stopped cleanly by SIGTERM or SIGINT: the scenario in hand is cancelled, so its
    nodes, proxies and PostgreSQL are torn down rather than left running."""
    code = 130
    async with trio.open_nursery() as nursery:

        async def stop_on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    print(f"signal {signum}: stopping", flush=True)
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(stop_on_signal)
        code = await run(args)
        nursery.cancel_scope.cancel()
    return code


async def run(args: argparse.Namespace) -> int:
    stores = ["sqlite", "postgres", "cluster"] if args.store == "all" else [args.store]
    out = Path(args.out)
    rows: list[dict[str, Any]] = []
    failed = 0
    pg: Cluster | None = None
    try:
        for store in stores:
            classes = list(playable(CLASSES[store]))
            if args.faults:
                classes = [c for c in classes if c in args.faults.split(",")]
            segment = args.minutes * 60 / len(classes)
            for k, fault in enumerate(classes):
                seed = args.seed * 1000 + k + {"sqlite": 0, "postgres": 100, "cluster": 200}[store]
                work = Path(tempfile.mkdtemp(prefix=f"foliot-faults-{store}-{fault}-"))
                if store != "sqlite" and pg is None:
                    pg = await trio.to_thread.run_sync(lambda: Cluster(durable=True).start())
                items = max(10, round(args.runs_per_minute * segment / 60))
                scenario = Scenario(
                    store=store, seed=seed, faults=(fault,), duration_s=segment, items=items,
                    fault_gap_s=(2.0, 5.0), pg_down_s=(10.0, 30.0), settle_s=180, workdir=work,
                    pg=pg if fault not in ("pg_restart", "pg_down") else None, verbose=args.verbose,
                )  # fmt: skip
                t0 = time.monotonic()
                label = f"{NAMES[store]} / {fault}"
                print(f"{label}: {segment:.0f}s of faults, {items} runs, seed {seed}", flush=True)
                result = await run_scenario(scenario)
                r = row(store, result, time.monotonic() - t0)
                rows.append(r)
                print(f"  {r}", flush=True)
                if not result.report.ok:
                    failed += 1
                    print(result.render(), flush=True)
                    history = out.with_name(f"{out.stem}-{store}-{fault}-{seed}-history.json")
                    history.write_text(json.dumps(result.history.ops))
                    print(f"  history saved to {history}")
                out.write_text(json.dumps(rows, indent=1))
    finally:
        if pg is not None:
            with trio.CancelScope(shield=True):  # stopped by a signal too
                await trio.to_thread.run_sync(pg.destroy)
    print("\n" + table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["sqlite", "postgres", "cluster", "all"], default="all")
    parser.add_argument("--minutes", type=float, default=10.0, help="of faults per configuration")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", default="", help="only these classes (comma-separated)")
    parser.add_argument("--runs-per-minute", type=float, default=90.0)
    parser.add_argument("--out", default="bench/faults.json")
    parser.add_argument("--quick", action="store_true", help="a minute per configuration")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.minutes = 1.0
    sys.exit(trio.run(main, args))
