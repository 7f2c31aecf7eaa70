"""A dry-run against many open runs and recorded histories: answer time, CPU, memory, plans.

    python bench/dry_run.py [--open 100000] [--recorded 1000] [--backend sqlite|postgres]
                            [--noise N] [--repeat 3] [--db URL]
    python bench/dry_run.py --quick               # 10,000 open runs, 200 recorded

Seeds the store directly: M closed runs whose histories were made by the machine (signal `go`,
then `done`) committed one transition at a time, then N open runs parked at `a` (a `wait`)
through `common.seed_bulk`; `--noise N` adds N closed runs of another workflow of the same app
(rows the dry-run's queries must not walk: the plans of a table that holds more than this
workflow). `--db URL` reuses a database seeded before (nothing is seeded).

Then times the dry-run's work (`http.deploys.build_report`, what `POST …/workflows/{name}/dry-run`
runs after validating: open runs counted by group in SQL with 20 example runIds each, the runs
lacking each key the candidate reads counted in SQL, the last M closed runs replayed) in this
process, against four candidates:
- `renames a`: renames the open runs' step (stranded) and adds a choice reading `state.a2.ok`,
  a key written ahead of the runs: no key is checked, every replay diverges at its first step;
- `+ reads input.customer`: the same reading `input.customer` too, which no open run has;
- `+ reads input.i`: reading `input.i`, which every open run has (every document is parsed);
- `v1 itself`: every recorded history replayed to its end (`same`), the replay's worst case.
Each is timed `--repeat` times (median; the wall time, this process's CPU time, and on
PostgreSQL the server's CPU time), then run once more under tracemalloc for the Python heap's
peak. Prints the load average (the machine is shared: the CPU figures carry, the wall times
only with it) and EXPLAIN of the queries. Target (issue 24): under 2 s and 100 MB.
This one runs in-process (no server): what is measured is the dry-run, not HTTP.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sqlite3
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from bench import common as c

V1 = {
    "name": "order",
    "steps": [{"name": "a", "type": "wait", "signal": "go"}, {"name": "b", "type": "wait", "signal": "done"}],
}
CANDIDATE = {
    "name": "order",
    "steps": [
        {"name": "a2", "type": "wait", "signal": "go"},
        {"name": "b", "type": "wait", "signal": "done", "next": "check"},
        {
            "name": "check",
            "type": "choice",
            "choices": [{"when": {"path": "state.a2.ok", "op": "eq", "value": True}, "next": "$end"}],
            "default": "$end",
        },
    ],
}


def reading(path: str, value: Any) -> dict[str, Any]:
    """CANDIDATE whose choice also reads `path`."""
    check = CANDIDATE["steps"][2]
    return {
        **CANDIDATE,
        "steps": [
            *CANDIDATE["steps"][:2],
            {
                **check,
                "choices": [
                    *check["choices"],
                    {"when": {"path": path, "op": "eq", "value": value}, "next": "$end"},
                ],
            },
        ],
    }


CANDIDATE_READS = reading("input.customer", "vip")
CANDIDATES = [
    ("renames a (no key checked)", CANDIDATE),
    ("+ reads input.customer (no run has it)", CANDIDATE_READS),
    ("+ reads input.i (every run has it)", reading("input.i", -1)),
    ("v1 itself (every replay to its end)", V1),
]


async def prepare(db_url: str) -> None:
    from foliot.storage.factory import open_store

    async with open_store(db_url) as store:
        await store.migrate()
        await store.add_workflow_version("bench", "order", json.dumps(V1), int(time.time() * 1000))


async def seed_recorded(db_url: str, count: int) -> list[str]:
    from foliot.core.workflow import machine
    from foliot.core.workflow.definition import parse_definition
    from foliot.storage.base import UnitOfWork
    from foliot.storage.factory import open_store

    definition = parse_definition(V1)
    ids: list[str] = []
    async with open_store(db_url) as store:
        for i in range(count):
            now = int(time.time() * 1000)
            ctx = machine.Context(now=now, new_token=lambda: "tt_" + secrets.token_urlsafe(12))
            tr = machine.start(
                run_id="run_" + secrets.token_hex(12),
                app="bench",
                definition=definition,
                version=1,
                input={"i": i},
                business_key=None,
                run_timeout_ms=None,
                trace_id=secrets.token_hex(16),
                ctx=ctx,
            )
            await store.commit(UnitOfWork(tr.run, None, tr.events, tr.tasks))
            for signal in (machine.SignalIn("go", {"ok": i % 2 == 0}), machine.SignalIn("done")):
                seq = tr.run.seq
                tr = machine.transition(tr.run, definition, signal, ctx)
                await store.commit(UnitOfWork(tr.run, seq, tr.events, tr.tasks))
            ids.append(tr.run.run_id)
    return ids


def postmaster(db_url: str) -> int | None:
    """The PostgreSQL server's pid (its data directory's postmaster.pid), to count its CPU."""
    if db_url.startswith("sqlite"):
        return None
    from tests.pg import _bin

    out = subprocess.run(
        [_bin("psql"), db_url, "-XAtc", "SHOW data_directory"], capture_output=True, text=True, timeout=60
    )
    try:
        return int((Path(out.stdout.strip()) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def server_cpu(pid: int | None) -> float:
    """CPU seconds of the server and its backends so far (0 on SQLite: it runs in-process)."""
    if pid is None:
        return 0.0
    total = c.cpu_seconds(pid)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError):
                continue
            if ppid == pid:
                total += c.cpu_seconds(int(entry))
    return total


async def measure(
    db_url: str, recorded: int, raw: dict[str, Any], repeat: int, server: int | None
) -> dict[str, Any]:
    """`repeat` timed dry-runs (median wall, process CPU and server CPU), then one under
    tracemalloc (the heap's peak: tracemalloc slows allocation, so it is not timed)."""
    from foliot.core.workflow.definition import parse_definition
    from foliot.http.deploys import build_report
    from foliot.storage.factory import open_store

    v1 = parse_definition(V1)
    candidate = parse_definition(raw)

    async def lookup(version: int) -> Any:
        return v1 if version == 1 else None

    walls, cpus, servers = [], [], []
    async with open_store(db_url) as store:
        await build_report(store, lookup, "bench", "order", candidate, 10)  # warm the connection
        for _ in range(repeat):
            t0, cpu0, srv0 = time.perf_counter(), time.process_time(), server_cpu(server)
            report = await build_report(store, lookup, "bench", "order", candidate, recorded)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - cpu0)
            servers.append(server_cpu(server) - srv0)
        tracemalloc.start()
        await build_report(store, lookup, "bench", "order", candidate, recorded)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {
        "wall": statistics.median(walls),
        "walls": walls,
        "cpu": statistics.median(cpus),
        "server": statistics.median(servers),
        "peak_mb": peak / 1e6,
        "report": report,
    }


def queries(postgres: bool, ids: list[str]) -> list[tuple[str, str, list[Any]]]:
    """The dry-run's statements (from `storage/deploy_sql.py`) with the bench's arguments."""
    from foliot.storage import deploy_sql as d

    group = ["bench", "order", 1, "a", "waiting"]
    has, lacks = ("input", "i"), ("input", "customer")
    count_lacks, lacks_args = d.lacking_sql(postgres, True, [lacks])
    count_has, has_args = d.lacking_sql(postgres, True, [has])
    newest, newest_args = d.lacking_newest_sql(postgres, True, lacks)
    quoted = ", ".join(f"'{i}'" for i in ids[:100])
    return [
        ("open groups", d.open_groups_sql(postgres), ["bench", "order", 1]),
        ("group examples", d.open_group_sql(postgres, False, True, False), [*group, 20]),
        ("runs lacking input.customer", count_lacks, [*lacks_args, *group]),
        ("runs lacking input.i", count_has, [*has_args, *group]),
        ("newest lacking input.customer", newest, [*group, *newest_args, 20]),
        (
            "group states page (fallback)",
            d.open_group_sql(postgres, True, True, True),
            [*group, 1 << 62, "run_z", 2000],
        ),
        ("recent closed runs", d.recent_closed_sql(postgres), ["bench", "order", 1000]),
        ("events of 100 runs", d.EVENTS_OF.format(ids=f"IN ({quoted})"), [10_000]),
    ]


def _inline(sql: str, args: list[Any]) -> str:
    """`?` placeholders replaced by the arguments as SQL literals (for psql and the printout)."""
    values = iter(args)

    def literal(_: re.Match[str]) -> str:
        value = next(values)
        return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"

    return re.sub(r"\?", literal, sql)


def _short(sql: str) -> str:
    """A statement printed without its 100 quoted run ids."""
    return re.sub(r"IN \('[^)]*\)", "IN ('run_…', … 100 ids)", sql)


def explain(db_url: str, ids: list[str]) -> list[list[Any]]:
    rows = []
    if db_url.startswith("sqlite"):
        from foliot.storage.factory import sqlite_path

        conn = sqlite3.connect(sqlite_path(db_url))
        for name, sql, args in queries(False, ids):
            plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            print(f"-- {name}\nEXPLAIN QUERY PLAN {_short(_inline(sql, args))}\n   {plan}")
            t0 = time.perf_counter()
            conn.execute(sql, args).fetchall()
            scan = re.search(r"\bSCAN runs\b(?! USING)", plan)
            rows.append([name, c.ms(time.perf_counter() - t0), "FULL SCAN" if scan else "index", plan[:160]])
        conn.close()
        return rows
    from tests.pg import _bin

    for name, sql, args in queries(True, ids):
        text = _inline(sql, args)
        out = subprocess.run(
            [_bin("psql"), db_url, "-XAt", "-c", f"EXPLAIN (ANALYZE, COSTS OFF) {text}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [
            re.sub(r"'\{run_[^}]*\}'", "'{run_…}'", ln.strip())
            for ln in out.stdout.splitlines()
            if ln.strip()
        ]
        timed = next((ln.split(":")[1].strip() for ln in lines if ln.startswith("Execution Time")), "")
        plan = " | ".join(ln for ln in lines if not ln.startswith(("Planning", "Execution")))
        print(f"-- {name}\nEXPLAIN (ANALYZE, COSTS OFF) {_short(text)}\n   " + "\n   ".join(lines))
        scan = re.search(r"Seq Scan on (runs|events)", plan)
        rows.append([name, timed, "FULL SCAN" if scan else "index", (plan or out.stderr)[:160]])
    return rows


def add_noise(db_url: str, count: int) -> None:
    """`count` closed runs of another workflow of the app, written by one SQL statement."""
    sql = (
        "INSERT INTO runs (run_id, app, workflow, status, is_open, created_at, seq, doc, closed_at,"
        " current_step, workflow_version) SELECT 'noise_' || n, 'bench', 'other', 'completed', {closed},"
        " {now} + n, 3, '{{\"input\":{{}},\"state\":{{}}}}', {now} + n, 'x', 1 FROM {series}"
    )
    now = int(time.time() * 1000)
    if db_url.startswith("sqlite"):
        from foliot.storage.factory import sqlite_path

        conn = sqlite3.connect(sqlite_path(db_url))
        series = (
            f"(WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {count})"
            " SELECT n FROM g)"
        )
        conn.execute(sql.format(closed=0, now=now, series=series))
        conn.commit()
        conn.execute("ANALYZE")
        conn.close()
        return
    from tests.pg import _bin

    series = f"generate_series(1, {count}) AS n"
    subprocess.run(
        [_bin("psql"), db_url, "-XAtc", sql.format(closed="false", now=now, series=series)], check=True
    )


async def recorded_ids(db_url: str) -> list[str]:
    from foliot.storage.factory import open_store

    async with open_store(db_url) as store:
        return [r.run_id for r in await store.recent_closed_runs("bench", "order", 100)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--open", type=int, default=100_000)
    parser.add_argument("--recorded", type=int, default=1000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--noise", type=int, default=0, help="closed runs of another workflow")
    parser.add_argument("--repeat", type=int, default=3, help="timed dry-runs per candidate")
    parser.add_argument("--db", help="a database seeded before (by this bench): seed nothing")
    parser.add_argument("--quick", action="store_true", help="10,000 open runs, 200 recorded")
    args = parser.parse_args()
    if args.quick:
        args.open, args.recorded = 10_000, 200
    if args.db:
        db_url = args.db
        args.backend = "sqlite" if db_url.startswith("sqlite") else "postgres"
    else:
        workdir = c.tmpdir("dry-run")
        cluster = c.pg_cluster() if args.backend == "postgres" else None
        db_url = c.database_url(args.backend, workdir, cluster)
        trio.run(prepare, db_url)
        t0 = time.perf_counter()
        trio.run(seed_recorded, db_url, args.recorded)
        c.seed_bulk(db_url, "bench", V1, args.open, progress=False)
        if args.noise:
            add_noise(db_url, args.noise)
        print(
            f"seeded {args.open:,} open, {args.recorded:,} recorded and {args.noise:,} other runs"
            f" in {time.perf_counter() - t0:.0f}s"
        )
        if args.backend == "postgres":
            subprocess.run(
                [__import__("tests.pg", fromlist=["_bin"])._bin("psql"), db_url, "-XAtc", "VACUUM ANALYZE"],
                check=False,
            )
    ids = trio.run(recorded_ids, db_url)
    server = postmaster(db_url)
    rows = []
    load0 = os.getloadavg()[0]
    for label, raw in CANDIDATES:
        m = trio.run(measure, db_url, args.recorded, raw, args.repeat, server)
        report = m["report"]
        rows.append(
            [
                label,
                c.ms(m["wall"]) + " (" + "/".join(f"{w:.2f}" for w in m["walls"]) + " s)",
                c.ms(m["cpu"]),
                c.ms(m["server"]) if server is not None else "-",
                f"{m['peak_mb']:.1f} MB",
                report["openRuns"]["total"],
                len(report["openRuns"]["groups"]),
                report["recorded"]["sampled"],
                report["recorded"]["same"],
                len(report["recorded"]["diverged"]),
                ", ".join(f"{m['path']}: {m['runs']}" for m in report["missingStateKeys"]) or "-",
            ]
        )
    load1 = os.getloadavg()[0]
    print(
        c.table(
            f"dry-run ({args.backend}): {args.open:,} open runs, {args.recorded:,} recorded;"
            f" load average {load0:.1f} -> {load1:.1f} on {os.cpu_count()} cores",
            [
                "candidate",
                "answer ms (each run)",
                "CPU ms",
                "server CPU ms",
                "heap peak",
                "open runs",
                "groups",
                "replayed",
                "same",
                "diverged",
                "missing keys",
            ],
            rows,
        )
    )
    print(c.table("query plans", ["query", "time", "plan kind", "plan"], explain(db_url, ids)))


if __name__ == "__main__":
    main()
