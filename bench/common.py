"""Shared plumbing for the benchmarks in `bench/`: processes, clients, seeding, figures.

Every process a benchmark starts is registered here and killed at exit (normal end, an
exception, Ctrl-C or SIGTERM). Every wait is bounded in time. Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import math
import multiprocessing
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ADMIN = "bench-admin-token"
HOST = "127.0.0.1"

# ---------------------------------------------------------------------------- cleanup

_cleanups: list[Callable[[], None]] = []


def on_exit(fn: Callable[[], None]) -> None:
    """Run `fn` when the benchmark ends, however it ends (last registered runs first)."""
    _cleanups.append(fn)


def cleanup_all() -> None:
    while _cleanups:
        fn = _cleanups.pop()
        with suppress(Exception):
            fn()


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


atexit.register(cleanup_all)
if multiprocessing.parent_process() is None:
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def tmpdir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"foliot-bench-{prefix}-"))
    on_exit(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


class Child:
    """A subprocess in its own process group, killed (whole group) at exit."""

    def __init__(
        self,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        cwd: Path | str = ROOT,
    ):
        self.log = log
        out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd
        )
        if log is not None:
            out.close()  # type: ignore[union-attr]
        on_exit(self.kill)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, a bounded wait, then SIGKILL."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, chars: int = 3000) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return self.log.read_text(errors="replace")[-chars:]


def wait_http(url: str, limit_s: float, child: Child | None = None, path: str = "/readyz") -> float:
    """Poll `url + path` until it answers 200; returns the seconds it took."""
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=2) as client:
        while time.perf_counter() - t0 < limit_s:
            if child is not None and not child.alive():
                raise RuntimeError(f"{url} exited with {child.proc.returncode}:\n{child.tail()}")
            with suppress(httpx.HTTPError):
                if client.get(path).status_code == 200:
                    return time.perf_counter() - t0
            time.sleep(0.02)
    raise TimeoutError(f"{url}{path} not ready after {limit_s:.0f}s" + (f"\n{child.tail()}" if child else ""))


# ---------------------------------------------------------------------------- memory


def rss_mb(pid: int) -> float:
    """Resident set size of a process, from /proc (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, all threads (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU time per thread of a process so far (thread id -> seconds; the main
    thread's id is the pid). Threads that ended are missing (their time stays in
    `cpu_seconds`)."""
    out: dict[int, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    tick = os.sysconf("SC_CLK_TCK")
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


class RssSampler:
    """Samples a pid's RSS on a thread; keeps the peak."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid, self.interval = pid, interval_s
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> RssSampler:
        self.peak = rss_mb(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def accept_queue(port: int) -> int:
    """Connections waiting in the kernel's accept queue of the 127.0.0.1 listener on `port`
    (/proc/net/tcp: a LISTEN socket's rx_queue is its accept queue); -1 when not found."""
    try:
        with open("/proc/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return -1
    want = f"0100007F:{port:04X}"
    for row in rows:
        fields = row.split()
        if fields[1] == want and fields[3] == "0A":  # 0A: LISTEN
            return int(fields[4].split(":")[1], 16)
    return -1


class AcceptQueueSampler(RssSampler):
    """Samples the accept queue of a listener on a thread; keeps the peak."""

    def __init__(self, port: int, interval_s: float = 0.05) -> None:
        super().__init__(0, interval_s)
        self.port = port

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, accept_queue(self.port))

    def __enter__(self) -> AcceptQueueSampler:
        self.peak = max(0, accept_queue(self.port))
        self._thread.start()
        return self


# ---------------------------------------------------------------------------- figures


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(len(ordered) * p / 100) - 1))]


def ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    """A plain fixed-width table."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [f"\n== {title}", "  ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True)), line]
    for r in cells[1:]:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(out)


def ratio(a: float, b: float) -> str:
    return "-" if not b or math.isnan(a) or math.isnan(b) else f"{a / b:.2f}x"


# ---------------------------------------------------------------------------- PostgreSQL


def pg_cluster() -> Any:
    """A throwaway PostgreSQL cluster (tests/pg.py), destroyed at exit."""
    from tests.pg import Cluster

    cluster = Cluster()
    on_exit(cluster.destroy)
    return cluster.start()


def database_url(backend: str, workdir: Path, cluster: Any = None) -> str:
    if backend == "postgres":
        assert cluster is not None
        return str(cluster.new_database())
    return f"sqlite:///{workdir / 'foliot.db'}"


# ---------------------------------------------------------------------------- Foliot server


class Foliot:
    """`python -m foliot.cli serve` as a subprocess, restartable on the same database and port."""

    def __init__(self, db_url: str, workdir: Path, **env: Any) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.db_url = db_url
        self.workdir = workdir
        self.env = {
            **os.environ,
            # BENCH_SERVER_ROOT: serve another checkout's foliot with this one's bench (A/B runs).
            "PYTHONPATH": os.environ.get("BENCH_SERVER_ROOT", str(ROOT)),
            "FOLIOT_HOST": HOST,
            "FOLIOT_PORT": str(self.port),
            "FOLIOT_DATABASE_URL": db_url,
            "FOLIOT_DATA_DIR": str(workdir / "data"),
            "FOLIOT_ADMIN_TOKEN": ADMIN,
            "FOLIOT_LOG_LEVEL": "WARNING",
            **{k: str(v) for k, v in env.items()},
        }
        if db_url.startswith("postgres") and "FOLIOT_NODE_ID" not in env:
            # A stable node id, as docs/operations.md tells operators: a node restarted under its
            # id takes its leases back at once; under a new (generated) id it waits out the lease
            # TTL, answering 503 `not_owner` meanwhile, which restart.py would measure instead.
            self.env["FOLIOT_NODE_ID"] = f"bench-{self.port}"
        self.child: Child | None = None
        self.log = workdir / "server.log"
        self.metrics_error = ""

    @property
    def pid(self) -> int:
        assert self.child is not None
        return self.child.pid

    def start(self, ready_limit_s: float = 120) -> float:
        """Start and wait for /readyz; returns seconds from spawn to ready."""
        # `-m` puts the working directory first on sys.path: run in the checkout being served.
        self.child = Child(
            [sys.executable, "-m", "foliot.cli", "serve"],
            env=self.env,
            log=self.log,
            cwd=self.env["PYTHONPATH"],
        )
        return wait_http(self.url, ready_limit_s, self.child)

    def kill9(self) -> None:
        if self.child is not None:
            self.child.kill(signal.SIGKILL)

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()

    def rss(self) -> float:
        return rss_mb(self.pid)

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def death(self, lines: int = 6) -> str:
        """Why the server is gone: its exit code and the last lines of its log ('' if alive)."""
        if self.child is None or self.child.alive():
            return ""
        tail = self.child.tail(4000).strip().splitlines()[-lines:]
        return f"server exited with {self.child.proc.returncode}; log tail:\n    " + "\n    ".join(tail)

    def metrics(self, timeout: float = 30) -> dict[str, float]:
        try:
            r = httpx.get(f"{self.url}/metrics", headers=admin_headers(), timeout=timeout)
        except httpx.HTTPError as exc:
            self.metrics_error = f"/metrics: {type(exc).__name__}"
            return {}
        if r.status_code != 200:
            self.metrics_error = f"/metrics: {r.status_code} {r.text[:200]}"
            return {}
        return parse_metrics(r.text)

    def setup_app(
        self, workflows: list[dict[str, Any]], handler_url: str = "http://127.0.0.1:9", app: str = "bench"
    ) -> str:
        """Create (or update) an app and its workflows; returns the app's API key."""
        with httpx.Client(base_url=self.url, timeout=30) as client:
            r = client.put(f"/apps/{app}", json={"handlerBaseUrl": handler_url}, headers=admin_headers())
            r.raise_for_status()
            key = r.json().get("apiKey")
            if key is None:  # the app existed: mint a key
                r = client.post(f"/apps/{app}/api-keys", json={}, headers=admin_headers())
                r.raise_for_status()
                key = r.json()["apiKey"]
            for wf in workflows:
                r = client.post(f"/apps/{app}/workflows", json=wf, headers=bearer(key))
                if r.status_code not in (200, 201):
                    raise RuntimeError(f"workflow {wf['name']}: {r.status_code} {r.text}")
            return str(key)


def admin_headers() -> dict[str, str]:
    return bearer(ADMIN)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


_METRIC = re.compile(r"^([A-Za-z_:][\w:]*(?:\{[^}]*\})?)\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition into {'name{labels}': value}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line)
        if m and not line.startswith("#"):
            with suppress(ValueError):
                out[m.group(1)] = float(m.group(2))
    return out


def metric_sum(metrics: dict[str, float], name: str, **labels: str) -> float:
    """Sum of a metric over its label sets (those matching `labels`)."""
    total = 0.0
    for key, value in metrics.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


# ---------------------------------------------------------------------------- helper processes


class Floor:
    """The bare quart-trio floor (bench/floor_app.py) in its own subprocess."""

    def __init__(self, workdir: Path, token: str) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.token = token
        self.child = Child(
            [sys.executable, str(BENCH / "floor_app.py"), "--port", str(self.port), "--token", token],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            log=workdir / "floor.log",
        )
        wait_http(self.url, 30, self.child, path="/readyz")

    @property
    def pid(self) -> int:
        return self.child.pid


class Handler:
    """A task handler (bench/handler_app.py) in its own subprocess: answers at once, records."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.child = Child(
            [sys.executable, str(BENCH / "handler_app.py"), "--port", str(self.port)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            log=workdir / "handler.log",
        )
        wait_http(self.url, 30, self.child, path="/stats")

    def stats(self, arrivals: bool = False) -> dict[str, Any]:
        r = httpx.get(f"{self.url}/stats", params={"arrivals": "1" if arrivals else "0"}, timeout=60)
        r.raise_for_status()
        result: dict[str, Any] = r.json()
        return result

    def reset(self) -> None:
        httpx.post(f"{self.url}/reset", timeout=10).raise_for_status()


# ---------------------------------------------------------------------------- wrk


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


_LUA = """
wrk.method = "POST"
wrk.body = [[%(body)s]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(token)s"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) statuses = {} end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local agg = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do agg[k] = (agg[k] or 0) + v end
  end
  local parts = {}
  for k, v in pairs(agg) do table.insert(parts, string.format('"%%d": %%d', k, v)) end
  local e = summary.errors
  io.write(string.format(
    'BENCH-JSON {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, "max_us": %%d,'
    .. ' "connect": %%d, "read": %%d, "write": %%d, "timeout": %%d, "status_errors": %%d,'
    .. ' "statuses": {%%s}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.timeout, e.status, table.concat(parts, ", ")))
end
"""


def wrk_post(
    url: str,
    body: dict[str, Any],
    token: str,
    *,
    seconds: float,
    connections: int,
    threads: int = 2,
    lua: str = "",
) -> dict[str, Any]:
    """`wrk` POSTing `body` to `url` (closed loop); returns requests/s, latency and statuses.
    `lua` is appended to the script (e.g. a `request` function varying the body)."""
    workdir = tmpdir("wrk")
    script = workdir / "post.lua"
    script.write_text(_LUA % {"body": json.dumps(body), "token": token} + lua)
    child = Child(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url,
        ],
        log=workdir / "wrk.out",
    )
    try:
        child.proc.wait(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        child.kill()
    text = child.tail(20000)
    line = next((ln for ln in text.splitlines() if ln.startswith("BENCH-JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no figures:\n{text}")
    raw = json.loads(line[len("BENCH-JSON ") :])
    statuses = {int(k): v for k, v in raw["statuses"].items()}
    ok = sum(v for k, v in statuses.items() if 200 <= k < 300)
    duration = raw["duration_us"] / 1e6
    return {
        "client": "wrk",
        "requests": raw["requests"],
        "rps": ok / duration if duration else 0.0,
        "p50": raw["p50_us"] / 1e6,
        "p99": raw["p99_us"] / 1e6,
        "non2xx": raw["requests"] - ok,
        "statuses": statuses,
        "socket_errors": raw["connect"] + raw["read"] + raw["write"] + raw["timeout"],
    }


# ---------------------------------------------------------------------------- multi-process client

# A request is [method, path, json body or None, key]; `key` comes back with its result.
Request = list[Any]
# A result is [scheduled epoch s, latency from schedule s, service time s, status, retry_after, key].
# Status -1: client timeout, -2: not sent (the client's own in-flight cap), -3: connection error.


def _worker(spec: dict[str, Any], out_path: str, barrier: Any) -> None:
    import threading

    import trio

    # The timetable starts when every client process has imported and reached this point.
    with suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=120)
    spec["start_at"] = time.time() + 0.2
    results: list[list[Any]] = []
    trio.run(_worker_main, spec, results)
    Path(out_path).write_text(json.dumps(results))


async def _worker_main(spec: dict[str, Any], results: list[list[Any]]) -> None:
    import trio

    limits = httpx.Limits(
        max_connections=spec["max_inflight"], max_keepalive_connections=spec["max_inflight"]
    )
    timeout = httpx.Timeout(spec["timeout"], connect=min(5.0, spec["timeout"]))
    headers = spec["headers"]
    hard_end = spec["start_at"] + spec["limit_s"]

    async with httpx.AsyncClient(base_url=spec["base_url"], limits=limits, timeout=timeout) as client:

        async def one(req: Request, scheduled: float) -> None:
            method, path, body, key = req
            sent = time.time()
            try:
                r = await client.request(method, path, json=body, headers=headers)
                status, retry = r.status_code, "retry-after" in r.headers
            except httpx.TimeoutException:
                status, retry = -1, False
            except httpx.HTTPError:
                status, retry = -3, False
            done = time.time()
            results.append([scheduled, done - scheduled, done - sent, status, retry, key])

        await trio.sleep(max(0.0, spec["start_at"] - time.time()))
        with trio.move_on_at(trio.current_time() + max(0.0, hard_end - time.time())):
            if spec["mode"] == "open":
                inflight = trio.CapacityLimiter(spec["max_inflight"])

                async def guarded(req: Request, scheduled: float) -> None:
                    async with inflight:
                        await one(req, scheduled)

                async with trio.open_nursery() as nursery:
                    for i, req in enumerate(spec["requests"]):
                        scheduled = spec["start_at"] + spec["offset"] + i / spec["rate"]
                        await trio.sleep(max(0.0, scheduled - time.time()))
                        if inflight.available_tokens == 0:
                            results.append([scheduled, 0.0, 0.0, -2, False, req[3]])
                            continue
                        nursery.start_soon(guarded, req, scheduled)
            else:
                queue = list(reversed(spec["requests"]))
                cycle = spec["cycle_s"]

                async def loop() -> None:
                    i = 0
                    while True:
                        if cycle is not None:
                            if time.time() - spec["start_at"] >= cycle:
                                return
                            req = spec["requests"][i % len(spec["requests"])]
                            i += 1
                        elif queue:
                            req = queue.pop()
                        else:
                            return
                        await one(req, time.time())

                async with trio.open_nursery() as nursery:
                    for _ in range(spec["concurrency"]):
                        nursery.start_soon(loop)


def run_clients(
    base_url: str,
    headers: dict[str, str],
    requests: list[Request],
    *,
    mode: str = "open",
    rate: float = 100.0,
    procs: int = 2,
    concurrency: int = 32,
    cycle_s: float | None = None,
    timeout: float = 30.0,
    max_inflight: int = 256,
    limit_s: float = 600.0,
) -> tuple[list[list[Any]], float]:
    """Send `requests` from `procs` OS processes, each a Trio/httpx client.

    open: on a fixed timetable at `rate` requests/s in total, whatever the answers (the
    timetable is split across processes, interleaved). closed: `concurrency` loops per process,
    each sending its next request when the previous one answered (or cycling the list for
    `cycle_s` seconds). Returns (results, wall seconds)."""
    procs = max(1, min(procs, len(requests))) if cycle_s is None else max(1, procs)
    specs = [
        {
            "base_url": base_url,
            "headers": headers,
            "mode": mode,
            "requests": requests[w::procs] if cycle_s is None else requests,
            "rate": rate / procs,
            "offset": w / rate,
            "limit_s": limit_s,
            "timeout": timeout,
            "max_inflight": max_inflight,
            "concurrency": concurrency,
            "cycle_s": cycle_s,
        }
        for w in range(procs)
    ]
    return spawn_workers(_worker, specs, limit_s)


def spawn_workers(
    target: Callable[..., None], specs: list[dict[str, Any]], limit_s: float
) -> tuple[list[list[Any]], float]:
    """Run `target(spec, out_path, barrier)` in one spawned process per spec (each starts its
    timetable once all reached the barrier), bounded by `limit_s`; (their results, wall s)."""
    ctx = multiprocessing.get_context("spawn")
    workdir = tmpdir("clients")
    t0 = time.time()
    barrier = ctx.Barrier(len(specs))
    children = []
    for w, spec in enumerate(specs):
        p = ctx.Process(target=target, args=(spec, str(workdir / f"out{w}.json"), barrier), daemon=True)
        p.start()
        on_exit(lambda p=p: p.kill() if p.is_alive() else None)
        children.append(p)
    for p in children:
        p.join(timeout=max(1.0, t0 + 150 + limit_s - time.time()))
        if p.is_alive():
            p.kill()
    wall = time.time() - t0
    results: list[list[Any]] = []
    for w in range(len(specs)):
        path = workdir / f"out{w}.json"
        if path.exists():
            results += json.loads(path.read_text())
    return results, wall


def summarize(results: list[list[Any]], wall: float) -> dict[str, Any]:
    """Counts and percentiles over client results (latency measured from the scheduled time)."""
    codes = Counter(r[3] for r in results)
    ok = [r for r in results if 200 <= r[3] < 300]
    if results:  # the span of the traffic itself, without process start and exit
        wall = max(r[0] + r[1] for r in results) - min(r[0] for r in results)
    refused = [r for r in results if r[3] in (429, 503)]
    return {
        "span": wall,
        "sent": len(results) - codes.get(-2, 0),
        "ok": len(ok),
        "rps": len(ok) / wall if wall > 0 else 0.0,
        "p50": pct([r[1] for r in ok], 50),
        "p99": pct([r[1] for r in ok], 99),
        "max": max((r[1] for r in ok), default=math.nan),
        "timeouts": codes.get(-1, 0),
        "conn_errors": codes.get(-3, 0),
        "client_overrun": codes.get(-2, 0),
        "429": codes.get(429, 0),
        "503": codes.get(503, 0),
        "refused_p99": pct([r[2] for r in refused], 99),
        # How late the client itself sent (schedule -> send): past a few ms the client, not the
        # server, is what the latencies measure (an httpx client on a busy 2-core machine).
        "send_lag_p99": pct([r[1] - r[2] for r in results if r[3] != -2], 99),
        "retry_after": sum(1 for r in refused if r[4]),
        "other": sum(v for k, v in codes.items() if k >= 300 and k not in (429, 503)),
        "codes": dict(codes),
    }


def to_task(results: list[list[Any]], arrivals: dict[str, list[Any]]) -> tuple[list[float], int]:
    """Signal -> push latencies: for each answered signal, the run's first push after it was
    scheduled (handler arrival times). Returns (latencies, answered signals with no push)."""
    out, missing = [], 0
    for r in results:
        if not 200 <= r[3] < 300:
            continue
        later = [t for t, _ in arrivals.get(r[5], []) if t >= r[0]]
        if later:
            out.append(min(later) - r[0])
        else:
            missing += 1
    return out, missing


# ---------------------------------------------------------------------------- bulk seeding

PARKED = {
    "name": "parked",
    "steps": [
        {"name": "wait", "type": "wait", "signal": "go", "timeout": "14d"},
        {"name": "work", "type": "task", "timeout": "30s"},
    ],
}


def _transitions(
    app: str, document: dict[str, Any], version: int, count: int, input_fn: Any
) -> Iterator[Any]:
    """`machine.start` transitions exactly as `Node.start_run` builds them."""
    import secrets

    from foliot.core.workflow import machine
    from foliot.core.workflow.definition import parse_definition

    definition = parse_definition(document)
    for i in range(count):
        ctx = machine.Context(
            now=int(time.time() * 1000), new_token=lambda: "tt_" + secrets.token_urlsafe(24)
        )
        yield machine.start(
            run_id="run_" + secrets.token_hex(12),
            app=app,
            definition=definition,
            version=version,
            input=input_fn(i),
            business_key=f"bk-{i}",
            run_timeout_ms=None,
            trace_id=secrets.token_hex(16),
            ctx=ctx,
        )


def seed_bulk(
    db_url: str,
    app: str,
    workflow: dict[str, Any],
    count: int,
    *,
    input_fn: Callable[[int], Any] = lambda i: {"i": i},
    batch: int = 20_000,
    progress: bool = True,
) -> tuple[list[str], float]:
    """Write `count` started runs straight into the store the server uses (it must be stopped).

    The rows are those `Node.start_run` commits: SQLite goes through the store's own batch
    writer (`_apply_units`) inside large transactions; PostgreSQL gets the same row tuples by
    COPY (every column the store writes: the step, version and parent columns too).
    The app and the workflow must exist (create them through the API first). Returns the run
    ids and the seconds it took."""
    from foliot.storage.base import UnitOfWork

    t0 = time.perf_counter()
    run_ids: list[str] = []
    if db_url.startswith("sqlite"):
        import sqlite3

        from foliot.storage import sqlite as sq
        from foliot.storage.factory import sqlite_path

        conn = sqlite3.connect(sqlite_path(db_url), isolation_level=None)
        version = conn.execute(
            "SELECT MAX(version) FROM workflows WHERE app = ? AND name = ?", (app, workflow["name"])
        ).fetchone()[0]
        document = json.loads(
            conn.execute(
                "SELECT document FROM workflows WHERE app = ? AND name = ? AND version = ?",
                (app, workflow["name"], version),
            ).fetchone()[0]
        )
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        units: list[UnitOfWork] = []
        for done, tr in enumerate(_transitions(app, document, version, count, input_fn), 1):
            units.append(UnitOfWork(tr.run, None, tr.events, tr.tasks))
            run_ids.append(tr.run.run_id)
            if len(units) == 500 or done == count:
                sq._apply_units(conn, units)
                units.clear()
            if done % batch == 0:
                conn.execute("COMMIT")
                conn.execute("BEGIN")
                if progress:
                    _progress(done, count, t0)
        conn.execute("COMMIT")
        conn.close()
    else:
        import asyncio

        run_ids = asyncio.run(
            _seed_postgres(db_url, app, workflow["name"], count, input_fn, batch, progress, t0)
        )
    return run_ids, time.perf_counter() - t0


def _progress(done: int, count: int, t0: float) -> None:
    rate = done / (time.perf_counter() - t0)
    print(f"  seeded {done:,}/{count:,} ({rate:,.0f}/s)", flush=True)


async def _seed_postgres(
    url: str, app: str, name: str, count: int, input_fn: Any, batch: int, progress: bool, t0: float
) -> list[str]:
    import asyncpg

    from foliot.storage.base import (
        UnitOfWork,
        event_rows,
        parent_of,
        run_row,
        search_columns,
        step_columns,
        task_rows,
        timer_rows,
    )

    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT version, document FROM workflows WHERE app = $1 AND name = $2"
            " ORDER BY version DESC LIMIT 1",
            app,
            name,
        )
        document = json.loads(row["document"])
        runs, events, tasks, timers, ids = [], [], [], [], []

        async def flush() -> None:
            async with conn.transaction():
                cols = (
                    "run_id",
                    "app",
                    "workflow",
                    "status",
                    "business_key",
                    "is_open",
                    "created_at",
                    "seq",
                    "doc",
                    "closed_at",
                    "current_step",
                    "step_since",
                    "workflow_version",
                    "error_class",
                    "parent_run_id",
                )
                await conn.copy_records_to_table("runs", records=runs, columns=cols)
                await conn.copy_records_to_table(
                    "events",
                    records=events,
                    columns=("run_id", "seq", "at", "generation", "type", "step", "attempt", "data"),
                )
                if tasks:
                    await conn.copy_records_to_table(
                        "tasks",
                        records=tasks,
                        columns=(
                            "token",
                            "run_id",
                            "app",
                            "generation",
                            "step",
                            "attempt",
                            "queue",
                            "status",
                            "close_reason",
                            "deadline",
                            "created_at",
                            "priority",
                            "buckets",
                        ),
                    )
                await conn.copy_records_to_table(
                    "timers", records=timers, columns=("run_id", "slot", "kind", "key", "due_at")
                )
            runs.clear(), events.clear(), tasks.clear(), timers.clear()

        for tr in _transitions(app, document, row["version"], count, input_fn):
            run = tr.run
            unit = UnitOfWork(run, None, tr.events, tr.tasks)
            runs.append((*run_row(run), *step_columns(run), *search_columns(run), parent_of(run)))
            events.extend(event_rows(unit))
            tasks.extend(task_rows(unit))
            timers.extend(timer_rows(run))
            ids.append(run.run_id)
            if len(ids) % batch == 0:
                await flush()
                if progress:
                    _progress(len(ids), count, t0)
        if runs:
            await flush()
        await conn.execute("ANALYZE")
        return ids
    finally:
        await conn.close()


def random_targets(run_ids: list[str], count: int, seed: int = 1) -> list[str]:
    """`count` run ids drawn at random, without repeats while there are enough."""
    rng = random.Random(seed)
    if count <= len(run_ids):
        return rng.sample(run_ids, count)
    return [rng.choice(run_ids) for _ in range(count)]


def parse_args(parser: Any, **quick: Any) -> Any:
    """Parse; with --quick, `quick` replaces the defaults (options given explicitly still win)."""
    known, _ = parser.parse_known_args()
    if known.quick:
        parser.set_defaults(**quick)
    return parser.parse_args()


def header(title: str, args: Any) -> None:
    print(f"# {title}")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S')}  python {sys.version.split()[0]}  cores {os.cpu_count()}  "
        f"wrk {'yes' if have_wrk() else 'no'}"
    )
    print(f"# args: {vars(args)}", flush=True)


@dataclasses.dataclass
class ParkedNode:
    """A server with the PARKED workflow and `runs` runs seeded in bulk (server stopped)."""

    work: Path
    cluster: Any
    db_url: str
    handler: Any
    server: Any
    ready_empty: float
    key: Any
    run_ids: list[str]
    took: float


def parked_node(backend: str, name: str, runs: int) -> ParkedNode:
    """Shared set-up of million.py and restart.py: app and workflow through the API, then bulk."""
    work = tmpdir(name)
    cluster = pg_cluster() if backend == "postgres" else None
    db_url = database_url(backend, work, cluster)
    handler = Handler(work)
    server = Foliot(db_url, work)
    ready_empty = server.start()
    key = server.setup_app([PARKED], handler_url=handler.url)
    server.stop()
    run_ids, took = seed_bulk(db_url, "bench", PARKED, runs)
    return ParkedNode(work, cluster, db_url, handler, server, ready_empty, key, run_ids, took)


# ---------------------------------------------------------------------------- profiling


class Profile:
    """`py-spy record` of a process (collapsed stacks), summarised as the top frames.

    Used as a context manager around the load phases; does nothing when py-spy is missing."""

    def __init__(self, pid: int, out: Path, rate: int = 100, *, gil: bool = True) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.child: Child | None = None
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if Path(spy).exists():
            args = [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate)]
            # `--gil`: only the thread holding the GIL is sampled, so shares are of the Python
            # CPU (threads waiting for the GIL or for I/O would otherwise count as busy).
            self.args = [*args, *(["--gil"] if gil else []), "--nonblocking", "-o", str(out)]
        else:
            self.args = []

    def __enter__(self) -> Profile:
        if self.args:
            self.child = Child(self.args, log=self.out.with_suffix(".log"))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.child is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGINT)
            with suppress(subprocess.TimeoutExpired):
                self.child.proc.wait(timeout=30)
            self.child.kill()

    def summary(self, top: int = 25) -> str:
        """Top frames by inclusive and by self share of the samples."""
        if not self.out.exists():
            return f"no profile ({self.out.with_suffix('.log')})"
        inclusive: Counter[str] = Counter()
        own: Counter[str] = Counter()
        total = 0
        for line in self.out.read_text(errors="replace").splitlines():
            stack, _, count_s = line.rpartition(" ")
            if not stack or not count_s.isdigit():
                continue
            count = int(count_s)
            total += count
            frames = [_short_frame(f) for f in stack.split(";")]
            for frame in set(frames):
                inclusive[frame] += count
            own[frames[-1]] += count
        if not total:
            return "empty profile"
        lines = [f"{total} samples; inclusive:"]
        lines += [f"  {n / total:6.1%}  {f}" for f, n in inclusive.most_common(top)]
        lines.append("self:")
        lines += [f"  {n / total:6.1%}  {f}" for f, n in own.most_common(top)]
        return "\n".join(lines)


def _short_frame(frame: str) -> str:
    """`fn (path/to/module.py:12)` -> `fn (module.py)`: lines merged, paths cut."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rpartition(":")[0] or where.rstrip(")")
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{name} ({short})"
