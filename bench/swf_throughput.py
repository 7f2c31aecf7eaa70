"""SWF throughput, server-bound: Foliot vs moto's SWF server vs the bare quart-trio floor.

One execution is seven SigV4-signed JSON 1.0 requests, exactly as boto3 sends them:
StartWorkflowExecution → PollForDecisionTask → RespondDecisionTaskCompleted (ScheduleActivityTask)
→ PollForActivityTask → RespondActivityTaskCompleted → PollForDecisionTask →
RespondDecisionTaskCompleted (CompleteWorkflowExecution).

The load generator is cheap so that the server is the bound: a few client processes, each an
asyncio loop of raw HTTP/1.1 keep-alive connections (one per coroutine), signing each request with
a small hmac SigV4 signer (the derived signing key cached per day) that is checked against
botocore's `SigV4Auth` at start-up, so it cannot drift from what boto3 sends. Many executions are
kept in flight (`--inflight`), deciders and workers long-poll (Foliot holds a poll up to 60 s;
moto answers an empty poll after sleeping 1 s).

Endpoints, one after the other in the same run:
- Foliot (`foliot serve`) on SQLite and on PostgreSQL (a throwaway cluster with fsync on: both
  durable), the PostgreSQL server's own CPU counted next to Foliot's;
- moto's SWF server (`moto[server]`, in memory: it scans every execution of the domain on every
  poll, so its cost grows with the executions it holds);
- the floor: `floor_app.py`'s `POST /` (quart-trio on hypercorn: reads the body, parses the JSON,
  answers a JSON document the size of the real answer, no state) driven by the same client with
  the same seven requests per "execution".

Figures: executions/s and the serving process's CPU ms per execution (user + system, all
threads, from /proc: what survives a shared machine), per window of completed executions
(`--windows`, e.g. the first 1,000 and the 4,000th-5,000th) so that the cost of accumulated
executions shows; the ratios to moto and to the floor; p50/p99 per call; the load average.
Figures only: nothing asserted. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import hmac
import itertools
import json
import multiprocessing
import os
import sys
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
CONTENT_TYPE = "application/x-amz-json-1.0"
OPS = [
    "StartWorkflowExecution",
    "PollForDecisionTask",
    "RespondDecisionTaskCompleted",
    "PollForActivityTask",
    "RespondActivityTaskCompleted",
]


# ---------------------------------------------------------------------------- SigV4 signer


class Signer:
    """SigV4 for `POST /` JSON 1.0 requests as botocore signs them (content-type, host,
    x-amz-date, x-amz-target signed; the payload hashed), with the derived key cached per day."""

    def __init__(self, host: str, key: str = KEY, secret: str = SECRET, region: str = REGION) -> None:
        self.host, self.key, self.secret, self.region = host, key, secret, region
        self._day = ""
        self._signing_key = b""

    def _key_for(self, day: str) -> bytes:
        if day != self._day:
            k = hmac.new(f"AWS4{self.secret}".encode(), day.encode(), hashlib.sha256).digest()
            for part in (self.region, "swf", "aws4_request"):
                k = hmac.new(k, part.encode(), hashlib.sha256).digest()
            self._day, self._signing_key = day, k
        return self._signing_key

    def authorization(self, target: str, body: bytes, amz_date: str) -> str:
        day = amz_date[:8]
        canonical = (
            f"POST\n/\n\ncontent-type:{CONTENT_TYPE}\nhost:{self.host}\nx-amz-date:{amz_date}\n"
            f"x-amz-target:{target}\n\ncontent-type;host;x-amz-date;x-amz-target\n"
            + hashlib.sha256(body).hexdigest()
        )
        scope = f"{day}/{self.region}/swf/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n" + hashlib.sha256(canonical.encode()).hexdigest()
        sig = hmac.new(self._key_for(day), to_sign.encode(), hashlib.sha256).hexdigest()
        return (
            f"AWS4-HMAC-SHA256 Credential={self.key}/{scope}, "
            f"SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature={sig}"
        )

    def request(self, action: str, body: bytes) -> bytes:
        target = "SimpleWorkflowService." + action
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        head = (
            f"POST / HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: {CONTENT_TYPE}\r\n"
            f"X-Amz-Target: {target}\r\nX-Amz-Date: {amz_date}\r\n"
            f"Authorization: {self.authorization(target, body, amz_date)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body


def check_signer_against_botocore(host: str) -> None:
    """Sign one request with botocore's SigV4Auth and with `Signer`; they must agree."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    body = json.dumps({"domain": DOMAIN, "taskList": {"name": "deciders"}}).encode()
    target = "SimpleWorkflowService.PollForDecisionTask"
    req = AWSRequest(
        method="POST",
        url=f"http://{host}/",
        data=body,
        headers={"Content-Type": CONTENT_TYPE, "X-Amz-Target": target},
    )
    SigV4Auth(Credentials(KEY, SECRET), "swf", REGION).add_auth(req)
    ours = Signer(host).authorization(target, body, req.headers["X-Amz-Date"])
    if ours != req.headers["Authorization"]:
        theirs = req.headers["Authorization"]
        raise SystemExit(f"bench signer drifted from botocore:\n  ours     {ours}\n  botocore {theirs}")


# ---------------------------------------------------------------------------- HTTP client


class Fault(Exception):
    def __init__(self, status: int, kind: str) -> None:
        super().__init__(f"{status} {kind}")
        self.status, self.kind = status, kind


class Conn:
    """One kept-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, host: str, port: int, signer: Signer) -> None:
        self.host, self.port, self.signer = host, port, signer
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, action: str, payload: dict[str, Any]) -> dict[str, Any]:
        data = self.signer.request(action, json.dumps(payload, separators=(",", ":")).encode())
        for attempt in range(2):  # a kept-alive connection the server closed: once more on a new one
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            try:
                self.writer.write(data)
                head = await self.reader.readuntil(b"\r\n\r\n")
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt:
                    raise
                continue
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            length, close = -1, lines[0].startswith("HTTP/1.0")
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.lower()
                if name == "content-length":
                    length = int(value)
                elif name == "connection":
                    close = value.strip().lower() == "close"
            raw = await (self.reader.readexactly(length) if length >= 0 else self.reader.read())
            if close or length < 0:
                self.close()
            out: dict[str, Any] = json.loads(raw) if raw else {}
            if status != 200:
                raise Fault(status, str(out.get("__type", status)).rpartition("#")[2])
            return out
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


# ---------------------------------------------------------------------------- client process

COMPLETE: dict[str, Any] = {
    "decisionType": "CompleteWorkflowExecution",
    "completeWorkflowExecutionDecisionAttributes": {"result": "ok"},
}


def start_body(i: int) -> dict[str, Any]:
    return {"domain": DOMAIN, "workflowId": f"order-{i}", "workflowType": WF, "input": str(i)}


def schedule(workflow_id: str) -> dict[str, Any]:
    """The first decision: schedule the execution's one activity."""
    return {
        "decisionType": "ScheduleActivityTask",
        "scheduleActivityTaskDecisionAttributes": {
            "activityType": ACT,
            "activityId": f"charge-{workflow_id}",
            "input": "5",
        },
    }


def client_process(spec: dict[str, Any], started: Any, completed: Any, go: Any, out_path: str) -> None:
    asyncio.run(_client_main(spec, started, completed, go, out_path))


async def _client_main(spec: dict[str, Any], started: Any, completed: Any, go: Any, out_path: str) -> None:
    host, port, total, inflight = spec["host"], spec["port"], spec["total"], spec["inflight"]
    signer = Signer(f"{host}:{port}")
    lat: dict[str, list[float]] = {op: [] for op in OPS}
    errors: dict[str, int] = {}
    empty = [0]
    pid = os.getpid()

    async def timed(conn: Conn, op: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        t0 = time.perf_counter()
        try:
            out = await conn.call(op, payload)
        except Fault as fault:
            errors[f"{op}:{fault.kind}"] = errors.get(f"{op}:{fault.kind}", 0) + 1
            if fault.status in (429, 503):
                await asyncio.sleep(0.05)
            return None
        except (OSError, asyncio.IncompleteReadError) as exc:
            errors[f"{op}:{type(exc).__name__}"] = errors.get(f"{op}:{type(exc).__name__}", 0) + 1
            conn.close()
            await asyncio.sleep(0.05)
            return None
        lat[op].append(time.perf_counter() - t0)
        return out

    def finished() -> bool:
        return bool(completed.value >= total)

    async def claim(bounded: bool) -> int | None:
        """The next execution to start, once the run began; None when all are. `bounded`: wait
        while `inflight` executions are open."""
        while not go.value:  # noqa: ASYNC110 - a flag shared between processes
            await asyncio.sleep(0.01)
        while True:
            with started.get_lock():
                i = started.value
                if i >= total:
                    return None
                if not bounded or i - completed.value < inflight:
                    started.value = i + 1
                    return i
            await asyncio.sleep(0.002)

    async def starter() -> None:
        conn = Conn(host, port, signer)
        while (i := await claim(True)) is not None:
            for _ in range(20):  # refused (429/503) or the connection broke: the same id again
                if await timed(conn, "StartWorkflowExecution", start_body(i)) is not None:
                    break

    async def poll_task(conn: Conn, op: str, poll: dict[str, Any]) -> dict[str, Any] | None:
        task = await timed(conn, op, poll)
        if not task or not task.get("taskToken"):
            empty[0] += 1
            return None
        return task

    async def decider(n: int) -> None:
        conn = Conn(host, port, signer)
        poll = {"domain": DOMAIN, "taskList": {"name": "deciders"}, "identity": f"d{pid}-{n}"}
        while not finished():
            task = await poll_task(conn, "PollForDecisionTask", poll)
            if task is None:
                continue
            if any(e["eventType"] == "ActivityTaskCompleted" for e in task["events"]):
                decision = COMPLETE
            else:
                decision = schedule(task["workflowExecution"]["workflowId"])
            answer = {"taskToken": task["taskToken"], "decisions": [decision]}
            done = await timed(conn, "RespondDecisionTaskCompleted", answer)
            if done is not None and decision is COMPLETE:
                with completed.get_lock():
                    completed.value += 1

    async def worker(n: int) -> None:
        conn = Conn(host, port, signer)
        poll = {"domain": DOMAIN, "taskList": {"name": "workers"}, "identity": f"w{pid}-{n}"}
        while not finished():
            task = await poll_task(conn, "PollForActivityTask", poll)
            if task is not None:
                await timed(
                    conn,
                    "RespondActivityTaskCompleted",
                    {"taskToken": task["taskToken"], "result": "charged"},
                )

    async def floor_chain() -> None:
        """The floor has no state: one coroutine sends an execution's seven requests in turn."""
        conn = Conn(host, port, signer)
        poll_d = {"domain": DOMAIN, "taskList": {"name": "deciders"}, "identity": f"d{pid}"}
        poll_w = {"domain": DOMAIN, "taskList": {"name": "workers"}, "identity": f"w{pid}"}
        while (i := await claim(False)) is not None:
            await timed(conn, "StartWorkflowExecution", start_body(i))
            for poll, op, answer in (
                (poll_d, "RespondDecisionTaskCompleted", {"decisions": [schedule(f"order-{i}")]}),
                (poll_w, "RespondActivityTaskCompleted", {"result": "charged"}),
                (poll_d, "RespondDecisionTaskCompleted", {"decisions": [COMPLETE]}),
            ):
                kind = "PollForDecisionTask" if poll is poll_d else "PollForActivityTask"
                task = await timed(conn, kind, poll) or {}
                await timed(conn, op, {"taskToken": task.get("taskToken", "x"), **answer})
            with completed.get_lock():
                completed.value += 1

    if spec["floor"]:
        coros = [floor_chain() for _ in range(spec["chains"])]
    else:
        coros = [decider(n) for n in range(spec["deciders"])] + [worker(n) for n in range(spec["workers"])]
        coros += [starter() for _ in range(spec["starters"])]
    tasks = [asyncio.ensure_future(co) for co in coros]

    while not finished() and time.time() < spec["deadline"]:  # noqa: ASYNC110 - a shared counter
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    with open(out_path, "w") as f:  # noqa: ASYNC230 - once, after the load
        json.dump({"lat": lat, "errors": errors, "empty": empty[0]}, f)


# ---------------------------------------------------------------------------- driving one endpoint


def register(url: str) -> None:
    import boto3
    from botocore.config import Config

    swf = boto3.client(
        "swf",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        config=Config(retries={"max_attempts": 3, "mode": "standard"}),
    )
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


def pg_cpu_seconds(cluster: Any) -> float:
    """CPU of a PostgreSQL cluster: the postmaster and every process it started (and reaped)."""
    try:
        postmaster = int((Path(cluster.data) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        if pid == postmaster:
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
        elif ppid == postmaster:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def drive(
    name: str,
    url: str,
    args: argparse.Namespace,
    workdir: Path,
    cpu: Any,
    *,
    floor: bool = False,
    total: int | None = None,
) -> dict[str, Any]:
    """Run `total` executions (`args.executions` by default) against one endpoint; `cpu()` is
    the server's CPU
    seconds so far. Returns per-window rates and CPU per execution, latencies, errors."""
    total = args.executions if total is None else total
    if not floor:
        register(url)
    host, _, port = url.rpartition("//")[2].partition(":")
    ctx = multiprocessing.get_context("spawn")
    started, completed, go = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Value("i", 0)
    files = workdir / name.split()[0].replace("(", "")
    files.mkdir(exist_ok=True)
    procs = []
    deadline = time.time() + args.limit + args.warmup
    n = args.client_procs
    for i in range(n):
        spec = {
            "host": host,
            "port": int(port),
            "total": total,
            "inflight": args.inflight,
            "deciders": args.deciders // n,
            "workers": args.workers // n,
            "starters": args.starters,
            "floor": floor,
            "chains": args.chains // n,
            "deadline": deadline,
        }
        procs.append(
            ctx.Process(target=client_process, args=(spec, started, completed, go, str(files / f"c{i}.json")))
        )
    for p in procs:
        p.start()
    c.on_exit(lambda: [p.kill() for p in procs if p.is_alive()])  # type: ignore[func-returns-value]
    time.sleep(args.warmup)  # the clients have started (and the pollers are waiting)
    go.value = 1
    t0, cpu0, load0 = time.perf_counter(), cpu(), os.getloadavg()[0]
    marks = sorted({w for w in args.windows if 0 < w < total} | {total})
    points: list[tuple[int, float, float]] = [(0, t0, cpu0)]
    while completed.value < total and time.perf_counter() < t0 + args.limit:
        done = completed.value
        while marks and done >= marks[0]:
            points.append((done, time.perf_counter(), cpu()))
            marks.pop(0)
        time.sleep(0.02)
    points.append((completed.value, time.perf_counter(), cpu()))
    client_cpu = sum(c.cpu_seconds(p.pid) for p in procs if p.pid is not None)  # imports included
    load1 = os.getloadavg()[0]
    for p in procs:
        p.join(timeout=15)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    lat: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    empty = 0
    for path in files.glob("c*.json"):
        got = json.loads(path.read_text())
        for op, values in got["lat"].items():
            lat.setdefault(op, []).extend(values)
        for k, v in got["errors"].items():
            errors[k] = errors.get(k, 0) + v
        empty += got["empty"]
    windows = []
    for (n0, ta, ca), (n1, tb, cb) in itertools.pairwise(points):
        if n1 > n0:
            windows.append(
                {"from": n0, "to": n1, "rate": (n1 - n0) / (tb - ta), "cpu_ms": 1000 * (cb - ca) / (n1 - n0)}
            )
    wall = points[-1][1] - t0
    total_done = points[-1][0]
    return {
        "completed": total_done,
        "wall": wall,
        "rate": total_done / wall if wall else 0.0,
        "cpu_ms": 1000 * (points[-1][2] - cpu0) / total_done if total_done else 0.0,
        "windows": windows,
        "total": total,
        "client_cpu_ms": 1000 * client_cpu / total_done if total_done else 0.0,
        "lat": lat,
        "errors": errors,
        "empty": empty,
        "load": (load0, load1),
    }


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


def foliot(args: argparse.Namespace, workdir: Path, backend: str, results: dict[str, Any]) -> None:
    cluster = None
    if backend == "postgres":
        from tests.pg import Cluster

        cluster = Cluster(durable=True).start()
        c.on_exit(cluster.destroy)
    sub = workdir / backend
    sub.mkdir()
    server = c.Foliot(
        c.database_url(backend, sub, cluster),
        sub,
        FOLIOT_SWF_CREDENTIALS=f"{KEY}:{SECRET}",
        FOLIOT_MAX_INFLIGHT_REQUESTS=10_000,
    )
    server.start()
    c.on_exit(server.stop)
    pid = server.pid

    def cpu() -> float:
        return c.cpu_seconds(pid) + (pg_cpu_seconds(cluster) if cluster is not None else 0.0)

    name = f"foliot ({backend})"
    profile = (
        c.Profile(pid, args.profile / f"profile-{backend}.txt", rate=args.profile_rate)
        if args.profile
        else None
    )
    if profile is not None:
        profile.__enter__()
    try:
        pg0 = pg_cpu_seconds(cluster) if cluster is not None else 0.0
        results[name] = drive(name, server.url, args, sub, cpu)
        if cluster is not None and results[name]["completed"]:
            results[name]["pg_cpu_ms"] = 1000 * (pg_cpu_seconds(cluster) - pg0) / results[name]["completed"]
    finally:
        if profile is not None:
            profile.__exit__(None, None, None)
            print(f"## profile of {name} (py-spy --gil)\n{profile.summary(40)}", flush=True)
    if not server.alive():
        results[name]["note"] = server.death()
    server.stop()
    if cluster is not None:
        cluster.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small run (a minute or two)")
    parser.add_argument("--executions", type=int, default=5000)
    parser.add_argument(
        "--windows",
        type=int,
        nargs="*",
        default=[100, 300, 1000, 4000],
        help="completed counts splitting the run into windows (the first one a warm-up)",
    )
    parser.add_argument(
        "--inflight", type=int, default=64, help="executions started and not completed, at most"
    )
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument(
        "--deciders", type=int, default=16, help="long-polling deciders, over all client processes"
    )
    parser.add_argument(
        "--workers", type=int, default=16, help="long-polling workers, over all client processes"
    )
    parser.add_argument("--starters", type=int, default=2, help="starting coroutines per client process")
    parser.add_argument("--chains", type=int, default=32, help="floor: concurrent seven-request chains")
    parser.add_argument(
        "--endpoints",
        nargs="*",
        default=["floor", "sqlite", "postgres", "moto"],
        choices=["floor", "sqlite", "postgres", "moto"],
    )
    parser.add_argument("--warmup", type=float, default=3, help="seconds for the pollers to connect")
    parser.add_argument("--limit", type=float, default=900, help="seconds allowed per endpoint")
    parser.add_argument(
        "--moto-executions",
        type=int,
        default=600,
        help="executions run through moto at most (its cost per execution grows with those it holds)",
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy the Foliot server into DIR; print its top frames"
    )
    parser.add_argument("--profile-rate", type=int, default=100)
    args = c.parse_args(parser, executions=600, windows=[100, 300], limit=240, moto_executions=300)
    c.header("SWF throughput (server-bound): Foliot vs moto vs the quart-trio floor", args)
    check_signer_against_botocore(f"{c.HOST}:8000")  # before anything: the signer is botocore's
    workdir = c.tmpdir("swf")
    results: dict[str, dict[str, Any]] = {}
    for endpoint in args.endpoints:
        if endpoint == "floor":
            floor = c.Floor(workdir, "floor-token")
            cpu = functools.partial(c.cpu_seconds, floor.pid)
            results["floor (quart-trio)"] = drive("floor", floor.url, args, workdir, cpu, floor=True)
            floor.child.stop()
        elif endpoint == "moto":
            moto, moto_url = moto_server(workdir)
            cpu = functools.partial(c.cpu_seconds, moto.pid)
            total = min(args.executions, args.moto_executions)
            results["moto (in memory)"] = drive("moto", moto_url, args, workdir, cpu, total=total)
            moto.stop()
        else:
            foliot(args, workdir, endpoint, results)
        r = results[list(results)[-1]]
        print(
            f"# {list(results)[-1]}: {r['completed']} in {r['wall']:.1f}s, {r['rate']:.1f}/s, "
            f"{r['cpu_ms']:.1f} ms CPU/execution, load {r['load'][0]:.1f}->{r['load'][1]:.1f}",
            flush=True,
        )
    report(args, results)


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    moto = results.get("moto (in memory)")
    floor = results.get("floor (quart-trio)")
    rows = []
    for name, r in results.items():
        for w in [*r["windows"], None]:
            span = f"{w['from']}-{w['to']}" if w else "all"
            rate = w["rate"] if w else r["rate"]
            cpu = w["cpu_ms"] if w else r["cpu_ms"]

            def same(other: dict[str, Any] | None, w: dict[str, Any] | None = w) -> dict[str, Any] | None:
                if other is None:
                    return None
                if w is None:
                    return other
                return next(
                    (o for o in other["windows"] if o["from"] == w["from"] and o["to"] == w["to"]), None
                )

            m, f = same(moto), (floor if floor is not None else None)
            rows.append(
                [
                    name,
                    span,
                    f"{rate:.1f}",
                    f"{cpu:.1f}",
                    c.ratio(rate, m["rate"]) if m else "-",
                    c.ratio(m["cpu_ms"], cpu) if m else "-",
                    c.ratio(rate, f["rate"]) if f else "-",
                    c.ratio(f["cpu_ms"], cpu) if f else "-",
                ]
            )
    print(
        c.table(
            "executions/s and server CPU per execution, by window of completed executions "
            "(ratios: Foliot's rate / the other's; the other's CPU / Foliot's; floor: whole run)",
            [
                "endpoint",
                "executions",
                "exec/s",
                "CPU ms/exec",
                "rate vs moto",
                "CPU moto/this",
                "rate vs floor",
                "CPU floor/this",
            ],
            rows,
        )
    )
    lat_rows = []
    for name, r in results.items():
        for op in OPS:
            values = r["lat"].get(op, [])
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
        extra = f" errors {json.dumps(r['errors'])}" if r["errors"] else ""
        print(
            f"{name}: completed {r['completed']}/{r['total']}, empty polls {r['empty']}, "
            f"load generator CPU {r['client_cpu_ms']:.1f} ms per execution, "
            f"load average {r['load'][0]:.1f} -> {r['load'][1]:.1f}{extra}"
        )
        if r.get("pg_cpu_ms"):
            print(f"{name}: of which the PostgreSQL server {r['pg_cpu_ms']:.1f} ms CPU per execution")
        if r.get("note"):
            print(r["note"])


if __name__ == "__main__":
    main()
