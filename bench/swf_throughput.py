"""SWF throughput through boto3: Foliot vs moto's SWF server vs the bare quart-trio floor.

N executions, each start → decision (schedule an activity) → activity → decision (complete),
driven by 8 decider and 8 worker processes (one boto3 client each, long polls) and 4 starter
threads, against:

- Foliot (`foliot serve` on SQLite, or PostgreSQL with `--backend postgres`), durable;
- moto's SWF server (`moto[server]`, in memory), as the peer, in the same run;
- the floor: the bare quart-trio app's requests/s (`floor_app.py`, `wrk`) ÷ the 7 requests one
  execution needs (start, 3 polls, 3 answers).

Prints executions/s, the ratio to moto and to the floor, the serving process's CPU ms per
execution (the figure that survives a shared machine: 17 boto3 client processes compete with the
server for the cores), and p50/p99 per call (a poll's time includes its wait for a task).
moto answers an empty poll at once, so a poller that got nothing sleeps 10 ms before asking
again (Foliot holds a poll up to 60 s and never answers one empty during a run).
Figures only: nothing asserted. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import common as c

REGION = "us-east-1"
KEY, SECRET = "FKIABENCHSWF00000001", "bench/swf+secret0000000000000000000000"
DOMAIN = "bench"
WF = {"name": "Order", "version": "1"}
ACT = {"name": "Charge", "version": "1"}
CALLS_PER_EXECUTION = 7


def client(url: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "swf",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        config=Config(
            retries={"max_attempts": 3, "mode": "standard"},
            read_timeout=75,
            connect_timeout=10,
            max_pool_connections=8,
        ),
    )


def register(url: str) -> None:
    swf = client(url)
    swf.register_domain(name=DOMAIN, workflowExecutionRetentionPeriodInDays="1")
    swf.register_workflow_type(
        domain=DOMAIN,
        **WF,
        defaultTaskStartToCloseTimeout="60",
        defaultExecutionStartToCloseTimeout="3600",
        defaultTaskList={"name": "deciders"},
        defaultChildPolicy="TERMINATE",
    )
    swf.register_activity_type(
        domain=DOMAIN,
        **ACT,
        defaultTaskStartToCloseTimeout="60",
        defaultTaskHeartbeatTimeout="NONE",
        defaultTaskList={"name": "workers"},
        defaultTaskScheduleToStartTimeout="600",
        defaultTaskScheduleToCloseTimeout="NONE",
    )


class Samples:
    """(call, seconds) lines appended to a file as they happen (a poller may be killed)."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 - closed at exit or by the kill

    def timed(self, op: str, fn: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            out = fn(**kwargs)
        except Exception as exc:
            self.file.write(f"error:{op}:{type(exc).__name__} {time.perf_counter() - t0}\n")
            return None
        self.file.write(f"{op} {time.perf_counter() - t0}\n")
        return out


def poll(samples: Samples, op: str, fn: Any, task_list: str) -> Any:
    """One poll; None when it got no task (then wait 10 ms: moto answers empty polls at once)."""
    task = samples.timed(
        op, fn, domain=DOMAIN, taskList={"name": task_list}, identity=f"{task_list}-{os.getpid()}"
    )
    if not task or not task.get("taskToken"):
        time.sleep(0.01)
        return None
    return task


def decider(url: str, path: str, done: Any, total: int) -> None:
    swf, samples = client(url), Samples(path)
    while done.value < total:
        task = poll(samples, "PollForDecisionTask", swf.poll_for_decision_task, "deciders")
        if task is None:
            continue
        kinds = [e["eventType"] for e in task["events"]]
        if "ActivityTaskCompleted" in kinds:
            decision = {"decisionType": "CompleteWorkflowExecution",
                        "completeWorkflowExecutionDecisionAttributes": {"result": "ok"}}  # fmt: skip
        else:
            wid = task["workflowExecution"]["workflowId"]
            decision = {"decisionType": "ScheduleActivityTask", "scheduleActivityTaskDecisionAttributes": {
                "activityType": ACT, "activityId": f"charge-{wid}", "input": "5"}}  # fmt: skip
        answered = samples.timed("RespondDecisionTaskCompleted", swf.respond_decision_task_completed,
                                 taskToken=task["taskToken"], decisions=[decision])  # fmt: skip
        if answered is not None and decision["decisionType"] == "CompleteWorkflowExecution":
            with done.get_lock():
                done.value += 1


def worker(url: str, path: str, done: Any, total: int) -> None:
    swf, samples = client(url), Samples(path)
    while done.value < total:
        task = poll(samples, "PollForActivityTask", swf.poll_for_activity_task, "workers")
        if task is None:
            continue
        samples.timed("RespondActivityTaskCompleted", swf.respond_activity_task_completed,
                      taskToken=task["taskToken"], result="charged")  # fmt: skip


def starter(url: str, path: str, count: int, threads: int) -> None:
    samples = Samples(path)
    lock = threading.Lock()
    next_id = [0]

    def run() -> None:
        swf = client(url)
        while True:
            with lock:
                i = next_id[0]
                next_id[0] += 1
            if i >= count:
                return
            samples.timed("StartWorkflowExecution", swf.start_workflow_execution, domain=DOMAIN,
                          workflowId=f"order-{i}", workflowType=WF, input=str(i))  # fmt: skip

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def drive(name: str, url: str, args: argparse.Namespace, workdir: Path, pid: int) -> dict[str, Any]:
    """Run N executions against one endpoint (served by process `pid`); returns executions/s,
    the server's CPU seconds per execution and per-call latencies."""
    register(url)
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Value("i", 0)
    files = workdir / name
    files.mkdir()
    procs = [
        ctx.Process(target=decider, args=(url, str(files / f"d{i}"), done, args.executions))
        for i in range(args.deciders)
    ] + [
        ctx.Process(target=worker, args=(url, str(files / f"w{i}"), done, args.executions))
        for i in range(args.workers)
    ]
    for p in procs:
        p.start()
    c.on_exit(lambda: [p.kill() for p in procs if p.is_alive()])  # type: ignore[func-returns-value]
    time.sleep(args.warmup)  # clients imported boto3 and are polling
    t0 = time.perf_counter()
    cpu0 = c.cpu_seconds(pid)
    start = ctx.Process(target=starter, args=(url, str(files / "s"), args.executions, args.starters))
    start.start()
    deadline = t0 + args.limit
    while done.value < args.executions and time.perf_counter() < deadline:
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    cpu = c.cpu_seconds(pid) - cpu0
    completed = done.value
    start.join(timeout=30)
    time.sleep(0.5)
    for p in [*procs, start]:
        if p.is_alive():
            p.kill()
        p.join(timeout=10)
    calls: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    for path in files.iterdir():
        for line in path.read_text().splitlines():
            op, _, seconds = line.partition(" ")
            if op.startswith("error:"):
                errors[op[6:]] = errors.get(op[6:], 0) + 1
            else:
                calls.setdefault(op, []).append(float(seconds))
    return {"completed": completed, "wall": wall, "rate": completed / wall if wall else 0.0, "calls": calls,
            "errors": errors, "cpu_ms": 1000 * cpu / completed if completed else 0.0}  # fmt: skip


def moto_server(workdir: Path) -> tuple[c.Child, str]:
    port = c.free_port()
    child = c.Child(
        [sys.executable, "-m", "moto.server", "-H", c.HOST, "-p", str(port)],
        env={**os.environ},
        log=workdir / "moto.log",
    )
    url = f"http://{c.HOST}:{port}"
    c.wait_http(url, 60, child, path="/moto-api/")
    return child, url


def floor_rate(workdir: Path, seconds: float) -> tuple[float, float]:
    """The floor's requests/s and its CPU ms per request."""
    floor = c.Floor(workdir, "floor-token")
    try:
        body = {"workflow": "w", "input": {"orderId": 1}}
        cpu0 = c.cpu_seconds(floor.pid)
        url = f"{floor.url}/apps/bench/runs"
        result = c.wrk_post(url, body, "floor-token", seconds=seconds, connections=16)
        cpu = c.cpu_seconds(floor.pid) - cpu0
        return float(result["rps"]), 1000 * cpu / max(1, result["requests"])
    finally:
        floor.child.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small run (seconds)")
    parser.add_argument("--executions", type=int, default=2000)
    parser.add_argument("--deciders", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--starters", type=int, default=4, help="threads starting executions")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--floor-seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=5, help="seconds for the clients to start polling")
    parser.add_argument("--limit", type=float, default=900, help="seconds allowed per endpoint")
    parser.add_argument("--skip-moto", action="store_true")
    args = c.parse_args(parser, executions=200, floor_seconds=4, limit=300)
    c.header("SWF throughput: Foliot vs moto vs the quart-trio floor", args)
    workdir = c.tmpdir("swf")

    floor, floor_cpu = floor_rate(workdir, args.floor_seconds) if c.have_wrk() else (0.0, 0.0)
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    server = c.Foliot(
        c.database_url(args.backend, workdir, cluster),
        workdir,
        FOLIOT_SWF_CREDENTIALS=f"{KEY}:{SECRET}",
        FOLIOT_MAX_INFLIGHT_REQUESTS=10_000,
    )
    server.start()
    c.on_exit(server.stop)
    results = {f"foliot ({args.backend})": drive("foliot", server.url, args, workdir, server.pid)}
    cpu_note = ""
    if not server.alive():
        cpu_note = server.death()
    server.stop()
    if not args.skip_moto:
        moto, moto_url = moto_server(workdir)
        c.on_exit(moto.stop)
        results["moto (in memory)"] = drive("moto", moto_url, args, workdir, moto.pid)
        moto.stop()

    floor_exec = floor / CALLS_PER_EXECUTION
    moto_rate = results.get("moto (in memory)", {}).get("rate", 0.0)
    rows = []
    for name, r in results.items():
        vs_moto = c.ratio(r["rate"], moto_rate) if moto_rate else "-"
        vs_floor = c.ratio(r["rate"], floor_exec) if floor else "-"
        rows.append([name, f"{r['completed']}/{args.executions}", f"{r['wall']:.1f}", f"{r['rate']:.1f}",
                     vs_moto, vs_floor, f"{r['cpu_ms']:.1f}", sum(r["errors"].values())])  # fmt: skip
    rows.append(["floor (quart-trio)", "-", "-", f"{floor_exec:.1f}", "-", "1.00",
                 f"{floor_cpu * CALLS_PER_EXECUTION:.1f}", "-"])  # fmt: skip
    print(c.table(
        f"executions/s (floor: {floor:.0f} requests/s ÷ {CALLS_PER_EXECUTION} calls per execution)",
        ["endpoint", "completed", "seconds", "executions/s", "vs moto", "vs floor", "server CPU ms/execution",
         "errors"], rows,
    ))  # fmt: skip
    ops = ["StartWorkflowExecution", "PollForDecisionTask", "RespondDecisionTaskCompleted",
           "PollForActivityTask", "RespondActivityTaskCompleted"]  # fmt: skip
    lat_rows = []
    for name, r in results.items():
        for op in ops:
            values = r["calls"].get(op, [])
            if values:
                lat_rows.append([name, op, len(values), c.ms(c.pct(values, 50)), c.ms(c.pct(values, 99))])
    print(
        c.table(
            "per call (a poll includes its wait for a task)",
            ["endpoint", "call", "n", "p50", "p99"],
            lat_rows,
        )
    )
    for name, r in results.items():
        if r["errors"]:
            print(f"{name} errors: {json.dumps(r['errors'])}")
    if cpu_note:
        print(cpu_note)


if __name__ == "__main__":
    main()
