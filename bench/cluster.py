"""Several nodes on one PostgreSQL: start and signal throughput with 1, 2 and 3 nodes, the time a
`kill -9` takes to fail over, and what that PostgreSQL commits on its own (pgbench).

    python bench/cluster.py [--nodes 1,2,3] [--seconds 10] [--connections 48] [--ttl-ms 10000]
    python bench/cluster.py --quick

For each node count: a fresh database on one throwaway PostgreSQL cluster (tests/pg.py; fsync
off unless `--durable`), that many `foliot serve` processes (own port, `FOLIOT_NODE_ID`,
`FOLIOT_ADVERTISE_URL`; shared database URL, admin token and secret key), waited on until the
256 partitions are leased and shared; a task handler process (bench/handler_app.py). `wrk`
loads every node at once with `--connections` split over them (closed loop, as clients behind
a load balancer would: a request may land on a node that does not own its run and is
forwarded):

- **starts**: `POST /apps/bench/runs`; each run parks on its first `wait`;
- **signals**: `POST /apps/bench/signals` to runs drawn at random (a Lua `request` function)
  among those the start phase made; each signal moves a run to a task pushed to the handler,
  then to its next wait. Twice: **to the owner** (each node's `wrk` signals only runs of the
  partitions it holds, as a client routing by run id would) and **to any node** (forwarded to
  the owner when it is another node).

Figures per phase: answers/s summed over the nodes, the worst node's p50/p99, non-2xx, the
database's commits/s meanwhile (`pg_stat_database.xact_commit`, flushed by PostgreSQL about
once a second, so ±1 s of commits) and commits per answer, and the server processes' CPU ms
per answer. The floor is as many bare quart-trio processes (bench/floor_app.py) loaded the
same way in the same run: everything shares one machine, so only ratios carry.

Then, with the most nodes: **failover**. The last node is killed with SIGKILL while sampled
runs it owns wait for a signal; signals to them are sent through the survivors every 100 ms
until answered. Printed: the takeover (the database shows all of the dead node's partitions
held by survivors), the first signal to one of its runs accepted, the first of them resumed
(its task push reached the handler), and all sampled runs resumed, each from the kill; the
lease TTL is the production default (10 s) unless `--ttl-ms`.

Last, **pgbench** against a database of the same cluster: the built-in TPC-B-like script and a
one-row-insert-per-transaction script, `--connections` clients: the commits/s this PostgreSQL
gives on this machine, the bound a cluster of nodes shares (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c
from bench.signal_latency import WORKFLOW  # wait go -> task, eight times
from foliot.core.leases import PARTITIONS, partition_of

START = {"workflow": "signalled", "input": {"orderId": 7, "customer": "c-42", "lines": [1, 2, 3]}}
SIGNAL_LUA = """
local ids = {%(ids)s}
local seed = 0
function setup(thread)
  table.insert(threads, thread)
  seed = seed + 1
  thread:set("seed", seed)
end
function init(args)
  statuses = {}
  math.randomseed(os.time() * 100 + (seed or 0))
end
function request()
  local id = ids[math.random(#ids)]
  return wrk.format(nil, nil, nil, '{"runId":"' .. id .. '","name":"go"}')
end
"""


def signals(ids: list[str]) -> str:
    """The Lua that makes every request a signal to one of `ids` drawn at random."""
    return SIGNAL_LUA % {"ids": ",".join(f'"{i}"' for i in ids or ["none"])}


def psql(url: str, query: str) -> str:
    from tests.pg import _bin

    done = subprocess.run(
        [_bin("psql"), url, "-XAtqc", query], check=True, capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip()


def held(url: str) -> Counter[str]:
    """Node id -> how many partitions it holds unexpired now (the database's clock)."""
    rows = psql(
        url,
        "SELECT node_id, count(*) FROM cluster_leases WHERE node_id IS NOT NULL"
        " AND expires_at > (extract(epoch FROM clock_timestamp()) * 1000)::bigint GROUP BY node_id",
    )
    return Counter({node: int(n) for node, n in (line.split("|") for line in rows.splitlines() if line)})


def owned_by(url: str, node_id: str) -> set[int]:
    rows = psql(url, f"SELECT partition FROM cluster_leases WHERE node_id = '{node_id}'")
    return {int(p) for p in rows.split()}


def commits(url: str) -> int:
    return int(psql(url, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))


class Node(c.Foliot):
    """One node of the cluster: its own port, id and advertised address."""

    def __init__(self, db_url: str, workdir: Path, node_id: str, secret: str, ttl_ms: int | None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        extra: dict[str, Any] = {"FOLIOT_NODE_ID": node_id, "FOLIOT_SECRET_KEY": secret}
        if ttl_ms is not None:
            extra["FOLIOT_LEASE_TTL_MS"] = ttl_ms
        # The latency gate off: a closed loop is a standing queue by design (as start_rate.py).
        super().__init__(db_url, workdir, FOLIOT_ADMISSION_TARGET_MS=0, **extra)
        self.node_id = node_id
        self.env["FOLIOT_ADVERTISE_URL"] = self.url


def start_nodes(cluster: Any, count: int, work: Path, ttl_ms: int | None) -> tuple[str, list[Node]]:
    from cryptography.fernet import Fernet

    db_url = cluster.new_database()
    secret = Fernet.generate_key().decode()
    nodes = [Node(db_url, work / f"n{i}", f"n{i}", secret, ttl_ms) for i in range(count)]
    nodes[0].start()  # migrates
    starting = [threading.Thread(target=n.start) for n in nodes[1:]]
    for t in starting:
        t.start()
    for t in starting:
        t.join(timeout=180)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 120:  # every partition leased, every node with its share
        shares = held(db_url)
        if sum(shares.values()) == PARTITIONS and all(
            shares[n.node_id] >= PARTITIONS // count - 1 for n in nodes
        ):
            return db_url, nodes
        time.sleep(0.2)
    raise RuntimeError(f"leases not shared after 120 s: {dict(held(db_url))}")


def wrk_all(
    urls: list[str],
    path: str,
    body: dict[str, Any],
    token: str,
    args: argparse.Namespace,
    lua: str | list[str] = "",
) -> dict[str, Any]:
    """`wrk` on every url at once (with `lua[i]` for url i when a list), `--connections` split
    over them; figures summed (rates) or the worst (latencies)."""
    results: list[dict[str, Any]] = [{} for _ in urls]
    per = max(2, args.connections // len(urls))

    def one(i: int) -> None:
        try:
            results[i] = c.wrk_post(
                urls[i] + path,
                body,
                token,
                seconds=args.seconds,
                connections=per,
                threads=1,
                lua=lua[i] if isinstance(lua, list) else lua,
            )
        except Exception as exc:  # a node that fails is a figure
            results[i] = {"error": f"{type(exc).__name__}: {exc}"[:200]}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=args.seconds + 120)
    ok = [r for r in results if "rps" in r]
    statuses: Counter[int] = Counter()
    for r in ok:
        statuses.update(r["statuses"])
    return {
        "rps": sum(r["rps"] for r in ok),
        "requests": sum(r["requests"] for r in ok),
        "p50": max((r["p50"] for r in ok), default=float("nan")),
        "p99": max((r["p99"] for r in ok), default=float("nan")),
        "non2xx": sum(r["non2xx"] for r in ok),
        "socket_errors": sum(r["socket_errors"] for r in ok),
        "statuses": statuses,
        "errors": [r["error"] for r in results if "error" in r],
    }


def measured(pids: list[int], db_url: str | None, run: Any) -> dict[str, Any]:
    """`run()`'s figures, the CPU the processes `pids` spent per answer and the database's
    commits meanwhile."""
    cpu0 = sum(c.cpu_seconds(p) for p in pids)
    commits0 = commits(db_url) if db_url else 0
    t0 = time.perf_counter()
    r: dict[str, Any] = run()
    wall = time.perf_counter() - t0
    ok = max(1, r.get("requests", 0) - r.get("non2xx", 0))
    r["cpu_ms"] = 1000 * (sum(c.cpu_seconds(p) for p in pids) - cpu0) / ok
    if db_url:
        time.sleep(1.2)  # PostgreSQL flushes backends' counters about once a second
        r["commits"] = commits(db_url) - commits0
        r["commits_s"] = r["commits"] / wall
        r["commits_per"] = r["commits"] / ok
    return r


def row(n: int, phase: str, what: str, r: dict[str, Any], floor: dict[str, Any] | None) -> list[Any]:
    if "rps" not in r:
        return [n, phase, what, "FAILED", *[""] * 9, str(r.get("errors"))[:120]]
    return [
        n,
        phase,
        what,
        r["requests"],
        f"{r['rps']:.0f}",
        c.ms(r["p50"]),
        c.ms(r["p99"]),
        r["non2xx"] + r["socket_errors"],
        c.ratio(r["rps"], floor["rps"]) if floor else "",
        f"{r['cpu_ms']:.2f}",
        f"{r['commits_s']:.0f}" if "commits_s" in r else "",
        f"{r['commits_per']:.2f}" if "commits_per" in r else "",
        " ".join(f"{k}:{v}" for k, v in sorted(r["statuses"].items()) if not 200 <= k < 300),
        "; ".join(r["errors"])[:120],
    ]


def one_count(
    cluster: Any, n: int, args: argparse.Namespace, failover: bool
) -> tuple[list[list[Any]], list[str]]:
    work = c.tmpdir(f"cluster{n}")
    db_url, nodes = start_nodes(cluster, n, work, args.ttl_ms)
    handler = c.Handler(work)
    key = nodes[0].setup_app([WORKFLOW], handler_url=handler.url)
    floors = [c.Floor(work / f"n{i}", key) for i in range(n)]
    urls = [node.url for node in nodes]
    pids = [node.pid for node in nodes]
    floor_urls = [f.url for f in floors]
    floor_pids = [f.pid for f in floors]
    rows: list[list[Any]] = []
    wrk_all(urls, "/apps/bench/runs", START, key, _short(args))  # warm up
    fs = measured(floor_pids, None, lambda: wrk_all(floor_urls, "/apps/bench/runs", START, key, args))
    st = measured(pids, db_url, lambda: wrk_all(urls, "/apps/bench/runs", START, key, args))
    rows += [row(n, "start", f"floor x{n}", fs, None), row(n, "start", f"foliot x{n}", st, fs)]
    ids = psql(db_url, f"SELECT run_id FROM runs WHERE is_open ORDER BY random() LIMIT {args.runs}").split()
    go = {"runId": ids[0] if ids else "none", "name": "go"}
    fg = measured(
        floor_pids, None, lambda: wrk_all(floor_urls, "/apps/bench/signals", go, key, args, signals(ids))
    )
    rows.append(row(n, "signal", f"floor x{n}", fg, None))
    # To the owner: each node's wrk signals only runs of the partitions it holds (a client that
    # routes by run id); to any node: every wrk signals any run (forwarded when not the owner).
    holders = dict(
        line.split("|") for line in psql(db_url, "SELECT partition, node_id FROM cluster_leases").split()
    )
    mine = [[r for r in ids if holders.get(str(partition_of(r))) == node.node_id] for node in nodes]
    so = measured(
        pids, db_url, lambda: wrk_all(urls, "/apps/bench/signals", go, key, args, [signals(m) for m in mine])
    )
    rows.append(row(n, "signal", f"to owner x{n}", so, fg))
    if n > 1:
        sa = measured(pids, db_url, lambda: wrk_all(urls, "/apps/bench/signals", go, key, args, signals(ids)))
        rows.append(row(n, "signal", f"to any x{n}", sa, fg))
    notes = [f"{n} node(s): {len(ids)} runs signalled at random; alive: {[node.alive() for node in nodes]}"]
    notes += [node.death() for node in nodes if not node.alive()]
    if failover and n > 1:
        notes += fail_over(db_url, nodes, handler, key, ids, args)
    for f in floors:
        f.child.stop()
    for node in nodes:
        node.stop()
    handler.child.stop()
    return rows, notes


def _short(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "seconds": 1.0})


def fail_over(
    db_url: str, nodes: list[Node], handler: c.Handler, key: str, ids: list[str], args: argparse.Namespace
) -> list[str]:
    victim, survivors = nodes[-1], nodes[:-1]
    theirs = owned_by(db_url, victim.node_id)
    waiting = set(psql(db_url, "SELECT run_id FROM runs WHERE status = 'waiting'").split())
    sample = [r for r in ids if partition_of(r) in theirs and r in waiting][: args.failover_runs]
    if not sample:
        return ["failover: the victim owned no waiting run; not measured"]
    accepted: dict[str, float] = {}
    resumed: dict[str, float] = {}
    takeover = float("nan")
    limit = (args.ttl_ms or 10_000) / 1000 + 60
    with c.httpx.Client(timeout=2, headers=c.bearer(key)) as client:
        t0 = time.time()
        victim.kill9()
        turn = 0
        while time.time() - t0 < limit and len(resumed) < len(sample):
            if takeover != takeover:  # NaN: not yet
                shares = held(db_url)
                if shares[victim.node_id] == 0 and sum(shares.values()) == PARTITIONS:
                    takeover = time.time() - t0
            for run_id in sample:
                if run_id in accepted:
                    continue
                turn += 1
                try:
                    r = client.post(
                        survivors[turn % len(survivors)].url + "/apps/bench/signals",
                        json={"runId": run_id, "name": "go", "signalId": f"failover-{run_id}"},
                    )
                    if r.status_code == 202:
                        accepted[run_id] = time.time() - t0
                except c.httpx.HTTPError:
                    pass
            arrivals = handler.stats(arrivals=True)["arrivals"]
            for run_id in accepted:
                later = [t for t, _ in arrivals.get(run_id, []) if t >= t0]
                if later and run_id not in resumed:
                    resumed[run_id] = min(later) - t0
            time.sleep(0.1)
    first_signal = min(accepted.values(), default=float("nan"))
    first_resumed = min(resumed.values(), default=float("nan"))
    all_resumed = max(resumed.values()) if len(resumed) == len(sample) else float("nan")
    ttl = (args.ttl_ms or 10_000) / 1000
    return [
        f"failover after kill -9 of {victim.node_id} ({len(theirs)} partitions, TTL {ttl:.0f} s), "
        f"{len(sample)} of its waiting runs signalled through the survivors every 100 ms:",
        f"  takeover (all its partitions held by survivors): {takeover:.2f} s",
        f"  first signal accepted: {first_signal:.2f} s; first run resumed (task pushed): "
        f"{first_resumed:.2f} s; all {len(sample)} resumed: {all_resumed:.2f} s ({len(resumed)} resumed)",
    ]


def pgbench(cluster: Any, args: argparse.Namespace) -> list[list[Any]]:
    from tests.pg import _bin

    url = cluster.new_database()
    subprocess.run(
        [_bin("pgbench"), "-i", "-q", "-s", "4", url], check=True, capture_output=True, timeout=300
    )
    script = c.tmpdir("pgbench") / "insert.sql"
    psql(url, "CREATE TABLE probe (id BIGSERIAL PRIMARY KEY, at TIMESTAMPTZ DEFAULT now(), doc TEXT)")
    script.write_text("INSERT INTO probe (doc) VALUES (repeat('x', 400));\n")
    rows = []
    clients = str(max(2, args.connections // 2))
    for name, extra in (
        ("simple-update (TPC-B-like, 3 writes)", ["-b", "simple-update"]),
        ("one insert", ["-f", str(script)]),
    ):
        done = subprocess.run(
            [
                _bin("pgbench"),
                "-n",
                "-c",
                clients,
                "-j",
                "2",
                "-T",
                str(max(1, round(args.seconds))),
                *extra,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=args.seconds + 120,
        )
        found = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
        lat = re.search(r"latency average = ([\d.]+) ms", done.stdout)
        rows.append(
            [
                name,
                clients,
                found.group(1) if found else f"FAILED {done.stderr[-200:]}",
                lat.group(1) if lat else "",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="1,2,3", help="node counts to measure")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured load")
    parser.add_argument(
        "--connections", type=int, default=48, help="concurrent connections, split over the nodes"
    )
    parser.add_argument(
        "--runs", type=int, default=3000, help="runs signalled at random (at most those started)"
    )
    parser.add_argument("--ttl-ms", type=int, default=None, help="lease TTL (default: the server's, 10 s)")
    parser.add_argument("--failover-runs", type=int, default=20, help="sampled runs of the killed node")
    parser.add_argument("--durable", action="store_true", help="PostgreSQL with fsync on")
    parser.add_argument("--quick", action="store_true", help="3 s per load, 24 connections, 1000 runs")
    args = c.parse_args(parser, seconds=3.0, connections=24, runs=1000)
    c.header("cluster: throughput by node count on one PostgreSQL, failover, pgbench", args)
    if not c.have_wrk():
        print("# wrk is needed (apt-get install wrk)")
        return
    from tests.pg import Cluster

    cluster = Cluster(durable=args.durable)
    c.on_exit(cluster.destroy)
    cluster.start()
    counts = [int(x) for x in args.nodes.split(",")]
    rows: list[list[Any]] = []
    notes: list[str] = []
    for n in counts:
        try:
            r, extra = one_count(cluster, n, args, failover=n == max(counts))
            rows += r
            notes += extra
        except Exception as exc:  # a count that fails is a figure, not a crash of the benchmark
            rows.append([n, "FAILED", *[""] * 11, f"{type(exc).__name__}: {exc}"[:200]])
    print(
        c.table(
            "throughput by node count (closed loop, wrk on every node at once; p50/p99 ms of the worst node; "
            "ratio = foliot / floor of as many processes; cpu = serving processes per answer; "
            "commits = PostgreSQL's, ±1 s)",
            [
                "nodes",
                "phase",
                "target",
                "requests",
                "ok/s",
                "p50",
                "p99",
                "errors",
                "ratio",
                "cpu ms",
                "commits/s",
                "commits/answer",
                "codes",
                "notes",
            ],
            rows,
        )
    )
    for line in notes:
        print(line)
    print(
        c.table(
            f"pgbench on the same PostgreSQL ({'fsync on' if args.durable else 'fsync off'})",
            ["script", "clients", "commits/s", "latency avg ms"],
            pgbench(cluster, args),
        )
    )


if __name__ == "__main__":
    main()
