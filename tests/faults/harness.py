"""The real-process fault harness: `foliot serve` nodes on SQLite, on PostgreSQL or three on one
PostgreSQL, our TCP proxy between each node and the database (and in front of each node for
its peers), a handler that misbehaves on purpose, a workload of clients that logs every
operation it invokes with its outcome, and a seeded schedule of faults. `run_scenario` plays
one configuration and hands the history and what the engine holds afterwards to the pure
checker (`checker.check`).

Used by the bounded suite (tests/faults/test_faults.py) and the long runs (bench/faults.py).
Every wait is bounded (`trio.fail_after`), the servers' logs are printed when a run fails.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
from cryptography.fernet import Fernet
from hypercorn.config import Config as HyperConfig
from hypercorn.trio import serve

from foliot import signing
from foliot.core.leases import PARTITIONS, partition_of

from ..cluster.history import AUDIT_SQL, LeaseChange, LeaseHistory, Write
from ..pg import Cluster, _bin, free_port
from .checker import Observed, Op, Report, check
from .proxy import Proxy, hop_from

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "faults-admin"
APP = "orders"
TTL_MS = 3_000
TASK_TIMEOUT_S = 2.0
RETRY = {"maxAttempts": 30, "initialInterval": "100ms", "maxInterval": "1s"}
FLOW = {
    "name": "order",
    "steps": [
        {"name": "a", "type": "task", "timeout": "2s", "retry": RETRY},
        {"name": "nap", "type": "sleep", "duration": "300ms"},
        {"name": "go", "type": "wait", "signal": "go", "timeout": "1h"},
        # Pulled by the workers. A claim's deadline counts from the claim's commit, so on an
        # overloaded machine (poll answer and `complete` several seconds each) a short timeout
        # times every attempt out before its `complete` lands: 3 s did, at load average 11.
        {"name": "pick", "type": "task", "queue": "picking", "timeout": "8s", "retry": RETRY},
        {"name": "b", "type": "task", "timeout": "2s", "retry": RETRY},
    ],
}
# Outcomes a client may take as "nothing was changed" (docs/api.md): refused before any work.
DEFINITE_503 = {"unavailable", "overloaded", "not_owner", "partition_unowned"}

FAULTS_SQLITE = ("kill", "pause", "handler", "disk_full", "clock")
FAULTS_POSTGRES = (
    "kill",
    "pause",
    "handler",
    "pg_restart",
    "pg_down",
    "db_latency",
    "db_reset",
    "db_partition",
    "clock",
)
FAULTS_CLUSTER = ("kill", "pause", "handler", "pg_restart", "db_reset", "db_partition", "peer_partition")


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # Debian's `faketime`


def why_no_clock() -> str | None:
    return None if Path(LIBFAKETIME).exists() else f"no {LIBFAKETIME} (apt-get install faketime)"


def playable(faults: tuple[str, ...]) -> tuple[str, ...]:
    """The fault classes this machine can play (a full disk needs a mount namespace, a stepped
    clock libfaketime); the others are named, with why, in the scenario's notes."""
    return tuple(
        f
        for f in faults
        if (f != "disk_full" or SmallDisk.why_not() is None) and (f != "clock" or why_no_clock() is None)
    )


def now() -> float:
    return time.time()


def wall_offset() -> float:
    """The wall clock less the monotonic clock, now. A node's engine reads the wall clock once
    and counts on with the monotonic one (foliot/actors/clock.py), so when the machine's wall
    clock is stepped (a VM's guest time sync: this one is a Firecracker guest), the node's
    readings differ from the database's and this process's by the change of this offset since
    the node started."""
    return time.time() - time.monotonic()


# ---------------------------------------------------------------------------- history


@attrs.define
class History:
    ops: list[Op] = attrs.Factory(list)

    def invoke(self, proc: str, f: str, item: Any, value: dict[str, Any]) -> Op:
        op: Op = {
            "n": len(self.ops),
            "proc": proc,
            "f": f,
            "item": item,
            "value": value,
            "t0": now(),
            "t1": None,
            "type": "unknown",
            "result": {},
        }
        self.ops.append(op)
        return op

    @staticmethod
    def finish(op: Op, kind: str, result: dict[str, Any]) -> None:
        op["t1"] = now()
        op["type"] = kind
        op["result"] = result


def classify(response: httpx.Response | None, error: BaseException | None) -> tuple[str, dict[str, Any]]:
    """ok / fail (definitely not applied) / unknown, with what the answer said."""
    if error is not None:
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return "fail", {"error": type(error).__name__}
        return "unknown", {"error": type(error).__name__}
    assert response is not None
    try:
        body = response.json()
    except ValueError:
        body = {"raw": response.text[:200]}
    status = response.status_code
    if 200 <= status < 300:
        result = {"status_code": status}
        if isinstance(body, dict):
            for name in ("runId", "status", "generation"):
                if name in body:
                    result[name] = body[name]
        return "ok", result
    code = (body.get("error") or {}).get("code") if isinstance(body, dict) else None
    result = {"status_code": status, "code": code}
    if (status == 503 and code in DEFINITE_503) or status == 429 or 400 <= status < 500:
        return "fail", result
    return "unknown", result  # 500, 502, 504, a 503 that says nothing


# ---------------------------------------------------------------------------- processes


@attrs.define
class Node:
    """One `foliot serve` process, restartable on the same database, data dir and port."""

    name: str
    env: dict[str, str]
    log: Path
    port: int
    prefix: list[str] = attrs.Factory(list)  # e.g. nsenter into the small filesystem
    process: trio.Process | None = None
    paused: bool = False
    down: bool = False
    started_offset: float = 0.0  # `wall_offset()` as this incarnation started (its clock's anchor)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None or self.process.returncode is not None else self.process.pid

    async def start(self, limit_s: float = 90) -> None:
        with open(self.log, "ab") as log:
            log.write(f"\n--- start {datetime.now().isoformat()}\n".encode())
            log.flush()
            self.started_offset = wall_offset()
            self.process = await trio.lowlevel.open_process(
                [*self.prefix, sys.executable, "-m", "foliot.cli", "serve"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(ROOT),
            )
        async with httpx.AsyncClient(base_url=self.url, timeout=2) as client:
            with trio.fail_after(limit_s):
                while True:
                    if self.process.returncode is not None:
                        raise RuntimeError(
                            f"{self.name} exited with {self.process.returncode}: {self.tail()}"
                        )
                    try:
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await trio.sleep(0.05)
        self.down = False

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            if self.paused:
                self.process.send_signal(signal.SIGCONT)
                self.paused = False
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()
        self.down = True

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.process is not None and self.paused:
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@attrs.define
class SmallDisk:
    """A small tmpfs holding the SQLite data dir, mounted in a private mount namespace that a
    holder process keeps (no mount is visible outside it; it goes with the holder). The nodes
    enter it with `nsenter`; the test reaches its files through `/proc/<holder>/root`."""

    mount: Path
    size_mb: int = 256
    holder: subprocess.Popen[bytes] | None = None

    @staticmethod
    def why_not() -> str | None:
        if not shutil.which("unshare") or not shutil.which("nsenter"):
            return "no unshare/nsenter (util-linux)"
        probe = subprocess.run(
            [*SmallDisk._unshare(), "true"], capture_output=True, text=True, timeout=30, check=False
        )
        return None if probe.returncode == 0 else f"unshare refused: {probe.stderr.strip()[:200]}"

    @staticmethod
    def _unshare() -> list[str]:
        # Root mounts in a new mount namespace; anyone else in a user namespace of their own.
        return ["unshare", "--mount", "--propagation", "private"] + (
            [] if os.geteuid() == 0 else ["--map-root-user"]
        )

    def start(self) -> None:
        self.mount.mkdir(parents=True, exist_ok=True)
        mount = f"mount -t tmpfs -o size={self.size_mb}m foliot-faults {self.mount}"
        script = f"{mount} && echo up && exec sleep 100000"
        self.holder = subprocess.Popen([*self._unshare(), "sh", "-c", script], stdout=subprocess.PIPE)
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline()
        if line.strip() != b"up":
            raise RuntimeError("could not mount the small filesystem")

    def prefix(self) -> list[str]:
        assert self.holder is not None
        user = [] if os.geteuid() == 0 else ["--user", "--preserve-credentials"]
        return ["nsenter", "--target", str(self.holder.pid), "--mount", *user, "--"]

    def path(self, inside: Path) -> Path:
        """A path inside the namespace, as this process reaches it."""
        assert self.holder is not None
        return Path(f"/proc/{self.holder.pid}/root") / inside.relative_to("/")

    def fill(self) -> int:
        """Write a filler file until the filesystem is full; returns the bytes written."""
        written = 0
        chunk = b"\0" * (1 << 20)
        with open(self.path(self.mount / "filler"), "wb", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk) or 0
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        break
                    raise
        return written

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(self.mount / "filler").unlink()

    def stop(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=10)


# ---------------------------------------------------------------------------- the handler


@attrs.define(eq=False)
class FaultyHandler:
    """The app's push handler. Verifies each push's signature, records the delivery (with the
    node that sent it, found from the connection's source port, on a cluster) and answers, or,
    while `misbehave` is above 0, with that probability does one of: answer slowly (within the
    deadline), answer after the deadline (its work done: a timeout after committing), answer
    202 and `complete` the task twice, drop the connection mid-answer, or answer 503."""

    rng: random.Random
    history: History
    secrets: list[str] = attrs.Factory(list)
    deliveries: list[dict[str, Any]] = attrs.Factory(list)
    misbehave: float = 0.0
    faults: Counter[str] = attrs.Factory(Counter)
    url: str = ""
    api: Callable[[str, str, Any], Awaitable[tuple[str, dict[str, Any]]]] | None = None
    node_pids: Callable[[], dict[int, str]] = dict
    node_offset: Callable[[str], float | None] = lambda name: None  # its `started_offset`
    bad_signatures: int = 0
    nursery: trio.Nursery | None = None

    def sender(self, port: int, server_port: int | None) -> str | None:
        pids = self.node_pids()
        if not pids:
            return None
        return _process_of_port(port, pids, server_port)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        # Who sent it, looked up before the body is read: the sender's socket may be gone later
        # (a node killed, a push aborted), and a connection nobody holds is not judged.
        client = scope.get("client") or ("", 0)
        server = scope.get("server") or ("", None)
        sender = self.sender(int(client[1]), server[1])
        raw = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            signing.verify_signature(raw, headers.get("foliot-signature"), self.secrets)
        except signing.SignatureError:
            self.bad_signatures += 1
            await _respond(send, 401, b'{"error":{"class":"bad_signature","retryable":false}}')
            return
        body = json.loads(raw)
        # When the node sent it: the push's deadline is its send + the timeout, on the node's
        # clock, brought to the wall clock (the database's) by any step of it since the node
        # started (`wall_offset`).
        sent = datetime.fromisoformat(body["deadline"].replace("Z", "+00:00")).timestamp() - TASK_TIMEOUT_S
        started = None if sender is None else self.node_offset(sender)
        lag = 0.0 if started is None else wall_offset() - started
        delivery = {
            "key": body["idempotencyKey"],
            "runId": body["runId"],
            "generation": body["generation"],
            "step": body["step"],
            "attempt": body["attempt"],
            "at": now(),
            "node": sender,
            "sentAt": sent + lag,
            "clockLag": lag,
        }
        self.deliveries.append(delivery)
        out = json.dumps({"step": body["step"], "key": body["idempotencyKey"]}).encode()
        if (body.get("input") or {}).get("fail") and body["step"] == "b" and body["generation"] == 1:
            await _respond(send, 400, b'{"error":{"class":"refused","retryable":false}}')
            return
        if self.misbehave and self.rng.random() < self.misbehave:
            how = self.rng.choice(("slow", "late", "twice", "drop", "busy"))
            self.faults[how] += 1
            if how == "slow":
                await trio.sleep(TASK_TIMEOUT_S * 0.4)
            elif how == "late":  # the work is done (recorded above), the answer comes too late
                await trio.sleep(TASK_TIMEOUT_S + 0.5)
            elif how == "twice":
                await _respond(send, 202, b"")
                if self.nursery is not None:
                    self.nursery.start_soon(self._complete_twice, body)
                return
            elif how == "drop":
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(out)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": out[:5], "more_body": True})
                raise ConnectionAbortedError("the handler drops the connection mid-answer")
            elif how == "busy":
                await _respond(send, 503, b'{"error":{"class":"busy"}}')
                return
        await _respond(send, 200, out)

    async def _complete_twice(self, body: dict[str, Any]) -> None:
        assert self.api is not None
        for _ in range(2):
            value = {"runId": body["runId"], "key": body["idempotencyKey"]}
            op = self.history.invoke("handler", "complete", None, value)
            kind, result = await self.api(
                "POST",
                f"/apps/{APP}/tasks/{body['taskToken']}/complete",
                {"output": {"step": body["step"], "key": body["idempotencyKey"]}},
            )
            History.finish(op, kind, result)


async def _respond(send: Any, status: int, body: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


def _process_of_port(port: int, pids: dict[int, str], server_port: int | None = None) -> str | None:
    """The node whose process holds the local TCP socket of the connection from 127.0.0.1:`port`
    to the handler's `server_port` (the sender of a request the handler received), by
    /proc/net/tcp's inode. Both ends count: Linux gives one local port to several connections at
    once when their destinations differ (a node's connection to PostgreSQL or to a peer may use
    the port another node pushes from), so matching the local port alone named the wrong node
    when that node came first in `pids`, or when the real sender's socket was already gone
    (found by a 3-node `kill` run, seed 23200: a push "by n1" while n0 held the lease)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) != port:
                    continue
                if server_port is None or int(fields[2].rsplit(":", 1)[1], 16) == server_port:
                    inodes.add(fields[9])
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid, name in pids.items():
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                        return name
    return None


# ---------------------------------------------------------------------------- the scenario


@attrs.define
class Scenario:
    store: str  # "sqlite" | "postgres" | "cluster"
    seed: int
    faults: tuple[str, ...]
    duration_s: float = 30.0  # the fault phase
    items: int = 60  # runs started (over the fault phase)
    settle_s: float = 90.0  # after healing: every run finishes within this
    fault_gap_s: tuple[float, float] = (1.0, 3.0)
    pg_down_s: tuple[float, float] = (2.0, 4.0)
    pause_s: float | None = None  # SIGSTOP length (default: 1.5 x the lease on PostgreSQL)
    misbehave: float = 0.25  # the handler's misbehaving share while the "handler" fault is on
    give_up: float = 0.05  # a client gives up after a definite failure, this often
    workdir: Path = Path("/tmp")
    pg: Cluster | None = None  # a cluster this scenario may restart (else its own)
    verbose: bool = False

    @property
    def nodes(self) -> int:
        return 3 if self.store == "cluster" else 1


@attrs.define
class Result:
    config: Scenario
    history: History
    observed: Observed
    report: Report
    injected: Counter[str]
    fault_log: list[dict[str, Any]]
    logs: dict[str, str]
    stalled: list[str]
    notes: list[str] = attrs.Factory(list)
    measures: list[dict[str, Any]] = attrs.Factory(list)
    handler_faults: Counter[str] = attrs.Factory(Counter)  # misbehaving answers, by kind

    def render(self) -> str:
        return self.report.render(self.config.seed)

    def server_logs(self, chars: int = 4000) -> str:
        return "\n".join(f"--- {name} (tail)\n{text[-chars:]}" for name, text in self.logs.items())


class Env:
    """The processes and proxies of one scenario."""

    def __init__(self, config: Scenario, nursery: trio.Nursery) -> None:
        self.config = config
        self.nursery = nursery
        self.rng = random.Random(config.seed)
        self.history = History()
        self.handler = FaultyHandler(random.Random(config.seed + 1), self.history)
        self.nodes: list[Node] = []
        self.db_proxies: list[Proxy] = []  # node i -> PostgreSQL
        self.peer_proxies: list[Proxy] = []  # the others -> node i
        self.pg: Cluster | None = None
        self.own_pg = False
        self.db_url = ""
        self.disk: SmallDisk | None = None
        self.key: dict[str, str] = {}
        self.clients: list[httpx.AsyncClient] = []
        self.injected: Counter[str] = Counter()
        self.fault_log: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.sqlite_path: Path | None = None
        self.claims: list[dict[str, Any]] = []
        self.t0 = now()
        self.injector_done = trio.Event()
        self.measures: list[dict[str, Any]] = []

    def say(self, text: str) -> None:
        if self.config.verbose:
            print(f"  [{now() - self.t0:6.1f}s] {text}", flush=True)

    # ------------------------------------------------------------------ set-up

    async def start(self) -> None:
        cfg = self.config
        work = cfg.workdir
        secret = Fernet.generate_key().decode()
        if cfg.store in ("postgres", "cluster"):
            if cfg.pg is not None:
                self.pg = cfg.pg
            else:
                self.pg = await trio.to_thread.run_sync(lambda: Cluster(durable=True).start())
                self.own_pg = True
            self.db_url = await trio.to_thread.run_sync(self.pg.migrated_database)
            await self.sql(AUDIT_SQL)
        elif "disk_full" in cfg.faults:
            why = SmallDisk.why_not()
            if why is None:
                self.disk = SmallDisk(work / "small")
                await trio.to_thread.run_sync(self.disk.start)
            else:
                self.notes.append(f"disk_full skipped: {why}")
        ids = [f"n{i}" for i in range(cfg.nodes)]
        for node_id in ids:
            port = free_port()
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")]),
                "FOLIOT_HOST": "127.0.0.1",
                "FOLIOT_PORT": str(port),
                "FOLIOT_ADMIN_TOKEN": ADMIN,
                "FOLIOT_SECRET_KEY": secret,
                "FOLIOT_LOG_LEVEL": "WARNING",
                "FOLIOT_ADMISSION_TARGET_MS": "0",
            }
            if self.pg is not None:
                proxy = await self.nursery.start(Proxy("127.0.0.1", self.pg.port).run)
                self.db_proxies.append(proxy)
                database = self.db_url.rsplit("/", 1)[1]
                env["FOLIOT_DATABASE_URL"] = (
                    f"postgresql://postgres@127.0.0.1:{proxy.port}/{database}?application_name=foliot-{node_id}"
                )
                env["FOLIOT_NODE_ID"] = node_id
                env["FOLIOT_LEASE_TTL_MS"] = str(TTL_MS)
                env["FOLIOT_DATA_DIR"] = str(work / node_id)
                peer = await self.nursery.start(Proxy("127.0.0.1", port).run)
                self.peer_proxies.append(peer)
                env["FOLIOT_ADVERTISE_URL"] = f"http://127.0.0.1:{peer.port}"
                prefix: list[str] = []
            elif self.disk is not None:
                data = self.disk.mount / "data"
                self.sqlite_path = self.disk.mount / "foliot.db"
                env["FOLIOT_DATA_DIR"] = str(data)
                env["FOLIOT_DATABASE_URL"] = f"sqlite:///{self.sqlite_path}"
                prefix = self.disk.prefix()
            else:
                self.sqlite_path = work / "foliot.db"
                env["FOLIOT_DATA_DIR"] = str(work / "data")
                env["FOLIOT_DATABASE_URL"] = f"sqlite:///{self.sqlite_path}"
                prefix = []
            if "clock" in cfg.faults and why_no_clock() is None:
                # The node's wall clock (never its monotonic one: Trio's) follows this file's
                # offset, read again every second (libfaketime).
                offset = work / f"{node_id}.faketime"
                offset.write_text("+0\n")
                env.update(
                    LD_PRELOAD=LIBFAKETIME,
                    FAKETIME_TIMESTAMP_FILE=str(offset),
                    FAKETIME_CACHE_DURATION="1",
                    FAKETIME_DONT_FAKE_MONOTONIC="1",
                )
            self.nodes.append(Node(node_id, env, work / f"{node_id}.log", port, prefix))
            self.clients.append(
                httpx.AsyncClient(
                    timeout=httpx.Timeout(10, connect=2, pool=2),
                    limits=httpx.Limits(max_connections=32, max_keepalive_connections=32),
                )
            )
        async with trio.open_nursery() as starting:
            for node in self.nodes:
                starting.start_soon(node.start)
        self.handler.api = self.api
        self.handler.nursery = self.nursery
        if cfg.store == "cluster":
            self.handler.node_pids = lambda: {n.pid: n.name for n in self.nodes if n.pid is not None}
            self.handler.node_offset = lambda name: next(
                (n.started_offset for n in self.nodes if n.name == name), None
            )
        self.nursery.start_soon(self.watch_wall_clock)
        binds = await self.nursery.start(serve, self.handler, _handler_config())
        self.handler.url = binds[0]
        await self.setup_app()

    async def watch_wall_clock(self) -> None:
        """Record every step of the machine's wall clock against its monotonic one (over 20 ms):
        the pushes' send times are corrected by them (`wall_offset`), and a failure shows them."""
        last = wall_offset()
        while True:
            await trio.sleep(0.1)
            offset = wall_offset()
            if abs(offset - last) > 0.02:
                self.measures.append({"what": "wall_clock_step", "at": now(), "ms": (offset - last) * 1000})
            last = offset

    async def setup_app(self) -> None:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        r = await self.raw("PUT", f"/apps/{APP}", {"handlerBaseUrl": self.handler.url}, admin)
        assert r.status_code == 201, r.text
        self.handler.secrets.append(r.json()["signingSecret"])
        self.key = {"Authorization": f"Bearer {r.json()['apiKey']}"}
        r = await self.raw("POST", f"/apps/{APP}/workflows", FLOW, self.key)
        assert r.status_code == 201, r.text
        if self.config.store == "cluster":  # every node knows the app and the flow before work
            with trio.fail_after(60):
                for i in range(len(self.nodes)):
                    while (
                        await self.clients[i].get(
                            self.nodes[i].url + f"/apps/{APP}/workflows/order", headers=self.key
                        )
                    ).status_code != 200:
                        await trio.sleep(0.2)

    async def raw(self, method: str, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
        """A set-up or read call, retried (bounded) until a final answer."""
        with trio.fail_after(120):
            turn = 0
            while True:
                i = turn % len(self.nodes)
                turn += 1
                node = self.nodes[i]
                if node.down or node.paused:
                    await trio.sleep(0.05)
                    continue
                try:
                    r = await self.clients[i].request(method, node.url + path, json=body, headers=headers)
                    if r.status_code not in (429, 502, 503, 504):
                        return r
                except httpx.TransportError:
                    pass
                await trio.sleep(0.1)

    async def api(
        self, method: str, path: str, body: Any, node: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        """One attempt of a client operation, classified (the caller logs it)."""
        i = self.rng.randrange(len(self.nodes)) if node is None else node
        live = [j for j in range(len(self.nodes)) if not self.nodes[j].paused]
        if i not in live and live:
            i = self.rng.choice(live)
        try:
            r = await self.clients[i].request(method, self.nodes[i].url + path, json=body, headers=self.key)
        except httpx.TransportError as exc:
            return classify(None, exc)
        return classify(r, None)

    async def sql(self, query: str) -> Any:
        assert self.pg is not None
        done = await trio.run_process(
            [_bin("psql"), self.db_url, "-XAtqv", "ON_ERROR_STOP=1", "-c", query],
            capture_stdout=True,
            capture_stderr=True,
        )
        text = done.stdout.decode().strip()
        return json.loads(text) if text else None

    async def stop(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                await node.kill()
        for client in self.clients:
            await client.aclose()
        if self.disk is not None:
            self.disk.stop()
        if self.pg is not None:
            if self.own_pg:
                await trio.to_thread.run_sync(self.pg.destroy)
            else:
                self.pg.finished(self.db_url)

    # ------------------------------------------------------------------ faults

    async def injector(self, stop: trio.Event) -> None:
        try:
            await self._inject_until(stop)
        finally:
            self.injector_done.set()

    async def _inject_until(self, stop: trio.Event) -> None:
        cfg = self.config
        classes = [
            f
            for f in cfg.faults
            if (f != "disk_full" or self.disk is not None) and (f != "clock" or why_no_clock() is None)
        ]
        if not classes:
            await stop.wait()
            return
        order = list(classes)
        self.rng.shuffle(order)
        turn = 0
        # Until told to stop, and at least one full round: every class is played once.
        while not stop.is_set() or turn < len(order):
            await trio.sleep(self.rng.uniform(*cfg.fault_gap_s))
            kind = order[turn % len(order)]  # every class in turn, in a seeded order
            turn += 1
            t0 = now()
            detail = await self.inject(kind)
            self.injected[kind] += 1
            self.fault_log.append({"class": kind, "t0": t0, "t1": now(), "detail": detail})
            self.say(f"fault {kind}: {detail} ({now() - t0:.1f}s)")

    async def inject(self, kind: str) -> str:
        cfg = self.config
        rng = self.rng
        victim = rng.randrange(len(self.nodes))
        node = self.nodes[victim]
        lease_s = TTL_MS / 1000
        if kind == "kill":
            await node.kill()
            await trio.sleep(rng.uniform(0, 1))
            await node.start()
            return node.name
        if kind == "pause":
            length = cfg.pause_s if cfg.pause_s is not None else (lease_s * 1.5 if self.pg else 2.5)
            node.pause()
            await trio.sleep(length)
            node.resume()
            return f"{node.name} {length:.1f}s"
        if kind == "handler":
            # A few seconds, and until it misbehaved at least twice (bounded): a window with no
            # push in it would be no fault at all.
            before = sum(self.handler.faults.values())
            self.handler.misbehave = cfg.misbehave
            await trio.sleep(rng.uniform(3, 6))
            with trio.move_on_after(8):
                while sum(self.handler.faults.values()) < before + 2:
                    await trio.sleep(0.2)
            self.handler.misbehave = 0.0
            return f"misbehaved {sum(self.handler.faults.values()) - before} times"
        if kind == "clock":
            # The engine reads the wall clock once, at its first reading, and counts on with the
            # monotonic clock (foliot/actors/clock.py): a step matters to a node started while
            # it holds. So: stepped forward or back and killed, restarted on the stepped clock
            # (the timers stored under the true one fire early or late), then set true again
            # and restarted once more.
            step = rng.choice((-1, 1)) * rng.uniform(5, 30)
            self.step_clock(node, step)
            await node.kill()
            await node.start()
            await trio.sleep(rng.uniform(3, 6))
            self.step_clock(node, 0)
            await node.kill()
            await node.start()
            return f"{node.name} restarted {step:+.0f}s off, then true again"
        if kind == "disk_full":
            assert self.disk is not None
            filled = await trio.to_thread.run_sync(self.disk.fill)
            await trio.sleep(rng.uniform(2, 4))
            self.disk.free()
            return f"{filled >> 20} MiB filler"
        assert self.pg is not None
        pg = self.pg
        if kind == "pg_restart":
            # `pg_ctl restart -m immediate`, in two steps: `restart` takes no `-l`, and the new
            # postmaster would hold this process's pipes open.
            await trio.to_thread.run_sync(lambda: pg.stop("immediate"))
            await trio.to_thread.run_sync(pg.restart)
            return "stop -m immediate, start"
        if kind == "pg_down":
            length = rng.uniform(*cfg.pg_down_s)
            await trio.to_thread.run_sync(lambda: pg.stop("immediate"))
            await trio.sleep(length)
            await trio.to_thread.run_sync(pg.restart)
            return f"stopped {length:.1f}s"
        proxy = self.db_proxies[victim]
        if kind == "db_latency":
            delay = rng.uniform(0.02, 0.2)
            proxy.latency(delay)
            await trio.sleep(rng.uniform(2, 5))
            proxy.heal()
            return f"{node.name} +{delay * 1000:.0f}ms"
        if kind == "db_reset":
            return f"{node.name} {proxy.reset()} connections reset"
        if kind == "db_partition":
            # Longer than a lease on a cluster: the others take the node's partitions over.
            length = lease_s * 1.5 if cfg.nodes > 1 else rng.uniform(1.5, 3.5)
            direction = rng.choice(("both", "up", "down"))
            proxy.block(direction)
            with trio.move_on_after(length):
                if cfg.nodes > 1:  # how long until the node says it is not serving
                    took = await self.until_unready(victim)
                    self.measures.append({"what": "unready_after_cut_s", "node": node.name, "s": took})
                await trio.sleep(length)
            proxy.heal()
            return f"{node.name} cut from PostgreSQL ({direction}) {length:.1f}s"
        if kind == "peer_partition":
            length = lease_s * 1.5
            # The node cut off must hold runs to show it keeps serving them: the seed's pick,
            # else the node holding the most (a node just killed or paused may hold none yet;
            # the leases settle within one).
            victim, mine = await self.holder(victim, within_s=lease_s * 2)
            node = self.nodes[victim]
            self.cut_from_peers(victim)
            with trio.move_on_after(length):
                await trio.sleep(lease_s / 2)
                for run_id in mine[:3]:  # it keeps serving what it owns
                    try:
                        r = await self.clients[victim].get(
                            node.url + f"/apps/{APP}/runs/{run_id}", headers=self.key, timeout=lease_s
                        )
                        answer: Any = r.status_code
                    except httpx.TransportError as exc:
                        answer = type(exc).__name__
                    self.measures.append({"what": "own_run_while_cut", "node": node.name, "answer": answer})
                await trio.sleep(length)
            self.heal_peers()
            return f"{node.name} cut from its peers {length:.1f}s"
        raise ValueError(kind)

    async def until_unready(self, victim: int) -> float:
        """Seconds until node `victim`'s /readyz stops answering 200."""
        t0 = trio.current_time()
        node = self.nodes[victim]
        while True:
            try:
                r = await self.clients[victim].get(node.url + "/readyz", timeout=1)
                if r.status_code != 200:
                    return trio.current_time() - t0
            except httpx.TransportError:
                pass
            await trio.sleep(0.05)

    async def holder(self, victim: int, within_s: float) -> tuple[int, list[str]]:
        """Node `victim` and its runs if it holds any, else the node holding the most; waits
        (bounded) while no node holds an acknowledged run."""
        deadline = trio.current_time() + within_s
        while True:
            by_node = await self.runs_held()
            held = [by_node.get(n.name, []) for n in self.nodes]
            if held[victim]:
                return victim, held[victim]
            best = max(range(len(held)), key=lambda i: len(held[i]))
            if held[best] or trio.current_time() >= deadline:
                return best, held[best]
            await trio.sleep(0.2)

    async def runs_held(self) -> dict[str, list[str]]:
        """The acknowledged runs, by the node holding their partition now."""
        now_ms, rows = await self.sql(
            "SELECT json_build_array((extract(epoch FROM clock_timestamp()) * 1000)::bigint,"
            " json_agg(json_build_array(partition, node_id, expires_at))) FROM cluster_leases"
        )
        owner = {int(p): n for p, n, x in rows or [] if int(x) > now_ms}
        runs = [op["result"]["runId"] for op in self.history.ops if op["f"] == "start" and op["type"] == "ok"]
        held: dict[str, list[str]] = {}
        for run_id in dict.fromkeys(runs):
            if (n := owner.get(partition_of(run_id))) is not None:
                held.setdefault(n, []).append(run_id)
        return held

    def step_clock(self, node: Node, offset_s: float) -> None:
        path = Path(node.env["FAKETIME_TIMESTAMP_FILE"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:+.3f}\n")
        tmp.replace(path)

    def cut_from_peers(self, victim: int) -> None:
        """Nothing flows between node `victim` and the others: not their forwards to it, not its
        forwards to them (its connections are told apart by their hop header)."""
        self.peer_proxies[victim].block("both")
        mine = hop_from(self.nodes[victim].name)
        for i, proxy in enumerate(self.peer_proxies):
            if i != victim:
                proxy.block("both", only=mine)

    def heal_peers(self) -> None:
        for proxy in self.peer_proxies:
            proxy.heal()

    async def heal_all(self) -> None:
        self.handler.misbehave = 0.0
        for proxy in [*self.db_proxies, *self.peer_proxies]:
            proxy.heal()
        if self.disk is not None:
            self.disk.free()
        for node in self.nodes:
            node.resume()
            if "FAKETIME_TIMESTAMP_FILE" in node.env:
                self.step_clock(node, 0)
        for node in self.nodes:
            if node.down:
                await node.start()

    # ------------------------------------------------------------------ workload

    async def attempt(
        self,
        proc: str,
        f: str,
        item: Any,
        value: dict[str, Any],
        method: str,
        path: str,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        op = self.history.invoke(proc, f, item, value)
        i = self.rng.randrange(len(self.nodes))
        live = [j for j, n in enumerate(self.nodes) if not n.paused and not n.down] or [i]
        if i not in live:
            i = self.rng.choice(live)
        try:
            r = await self.clients[i].request(
                method, self.nodes[i].url + path, json=body, headers={**self.key, **(headers or {})}
            )
            kind, result = classify(r, None)
        except httpx.TransportError as exc:
            kind, result = classify(None, exc)
        result["node"] = self.nodes[i].name
        History.finish(op, kind, result)
        return kind, result

    async def until_ok(
        self,
        settle: trio.Event,
        proc: str,
        f: str,
        item: Any,
        value: dict[str, Any],
        method: str,
        path: str,
        body: Any,
        headers: dict[str, str] | None = None,
        done: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any] | None:
        """Attempts until one is ok (or a definite, final refusal; or, while faults run, a
        definite failure the client chooses to give up on). Unknown outcomes are always retried
        with the same key: the point is that a retry is safe."""
        backoff = 0.05
        while True:
            kind, result = await self.attempt(proc, f, item, value, method, path, body, headers)
            if kind == "ok":
                return result
            if kind == "fail":
                code = result.get("status_code")
                if code is not None and 400 <= code < 500 and code != 429:
                    return result if done is not None and done(result) else None
                if not settle.is_set() and self.rng.random() < self.config.give_up:
                    return None
            await trio.sleep(backoff * (0.5 + self.rng.random()))
            backoff = min(1.0, backoff * 2)

    async def run_of(self, run_id: str) -> dict[str, Any] | None:
        r = await self.raw("GET", f"/apps/{APP}/runs/{run_id}", None, self.key)
        return r.json() if r.status_code == 200 else None

    async def driver(self, item: int, settle: trio.Event, limit: trio.CapacityLimiter) -> None:
        """One client's life of one run: start it (idempotency key and business key), signal it
        (sometimes before it waits, sometimes twice under two ids), maybe cancel it, redrive it
        when it failed, and watch it until it closes."""
        rng = random.Random(self.config.seed * 1_000_003 + item)
        proc = f"c{item}"
        closed = lambda r: r.get("code") == "run_closed"  # noqa: E731

        async def op(f: str, value: dict[str, Any], path: str, body: Any, **kw: Any) -> dict[str, Any] | None:
            async with limit:
                return await self.until_ok(settle, proc, f, item, value, "POST", path, body, **kw)

        fail = rng.random() < 0.1  # its step b is refused in generation 1: failed, then redriven
        value = {"businessKey": f"order-{item}", "workflow": "order", "input": {"item": item, "fail": fail}}
        started = await op(
            "start", value, f"/apps/{APP}/runs", value, headers={"Idempotency-Key": f"start-{item}"}
        )
        if started is None or "runId" not in started:
            return
        run_id = started["runId"]
        sig = {"runId": run_id, "name": "go", "signalId": f"sig-{item}", "payload": {"paid": item}}
        if rng.random() >= 0.3:  # else before the wait: buffered
            await trio.sleep(rng.uniform(0.3, 2.0))
        sent = await op("signal", sig, f"/apps/{APP}/signals", sig, done=closed)
        if rng.random() < 0.1:  # a second one no wait will take: stays buffered
            extra = {**sig, "signalId": f"sig-{item}-extra", "payload": {"extra": item}}
            await op("signal", extra, f"/apps/{APP}/signals", extra, done=closed)
        cancelled = False
        if rng.random() < 0.08:
            await trio.sleep(rng.uniform(0, 1.5))
            path = f"/apps/{APP}/runs/{run_id}/cancel"
            cancelled = await op("cancel", {"runId": run_id}, path, {"reason": "faults"}) is not None
        if sent is None and not cancelled:
            return  # the client gave up its signal: the run waits for it
        # Until it closes; a failed run (its refused step b) is redriven once.
        redriven = False
        while True:
            # Real processes on loopback (tests/faults is marked e2e): the client polls its run
            # over HTTP at a client's pace, part of the workload the faults meet; the API has
            # no event to wait on for a run's close from another process.
            await trio.sleep(1.0 + rng.random())
            run = await self.run_of(run_id)
            if run is None:
                return
            if run["status"] == "failed" and not redriven and settle.is_set():
                path = f"/apps/{APP}/runs/{run_id}/redrive"
                redriven = await op("redrive", {"runId": run_id}, path, {"reason": "faults"}) is not None
                continue
            if run["status"] in ("completed", "cancelled") or (run["status"] == "failed" and redriven):
                return

    async def worker(self, w: int, stop: trio.Event, settle: trio.Event) -> None:
        rng = random.Random(self.config.seed * 7919 + w)
        claims = self.claims
        while not stop.is_set():
            i = rng.randrange(len(self.nodes))
            node = self.nodes[i]
            if node.paused or node.down:
                await trio.sleep(0.1)
                continue
            try:
                r = await self.clients[i].post(
                    node.url + f"/apps/{APP}/tasks/poll",
                    json={"queue": "picking", "waitSeconds": 1, "maxTasks": 5, "workerId": f"w{w}"},
                    headers=self.key,
                )
            except httpx.TransportError:
                await trio.sleep(0.1)
                continue
            if r.status_code != 200:
                await trio.sleep(0.2)
                continue
            for task in r.json()["tasks"]:
                claims.append(
                    {
                        "key": task["idempotencyKey"],
                        "runId": task["runId"],
                        "generation": task["generation"],
                        "step": task["step"],
                        "attempt": task["attempt"],
                        "at": now(),
                        "node": None,
                    }
                )
                faulty = not settle.is_set() and rng.random() < 0.15
                if faulty and rng.random() < 0.3:
                    continue  # forgotten: its deadline passes, the next attempt is offered
                value = {"runId": task["runId"], "key": task["idempotencyKey"]}
                body = {"output": {"picked": task["idempotencyKey"]}}
                for _ in range(2 if faulty else 1):  # a faulty worker completes twice
                    await self.until_ok(
                        settle,
                        f"w{w}",
                        "complete",
                        None,
                        value,
                        "POST",
                        f"/apps/{APP}/tasks/{task['taskToken']}/complete",
                        body,
                        done=lambda r: True,
                    )

    # ------------------------------------------------------------------ reading back

    async def observe(self) -> Observed:
        runs: dict[str, dict[str, Any]] = {}
        cursor = None
        while True:
            params = "?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            r = await self.raw("GET", f"/apps/{APP}/runs{params}", None, self.key)
            assert r.status_code == 200, r.text
            page = r.json()
            runs.update({run["runId"]: run for run in page["runs"]})
            cursor = page.get("nextCursor")
            if not cursor:
                break
        events: dict[str, list[dict[str, Any]]] = {}
        limit = trio.CapacityLimiter(16)

        async def read(run_id: str) -> None:
            out: list[dict[str, Any]] = []
            async with limit:
                while True:
                    after = out[-1]["seq"] if out else 0
                    r = await self.raw(
                        "GET", f"/apps/{APP}/runs/{run_id}/events?after={after}&limit=1000", None, self.key
                    )
                    assert r.status_code == 200, r.text
                    page = r.json()
                    out += page["events"]
                    if not page.get("nextCursor") or not page["events"]:
                        break
                run = await self.run_of(run_id)
            for e in out:
                e["atS"] = datetime.fromisoformat(e["at"].replace("Z", "+00:00")).timestamp()
            events[run_id] = out
            if run is not None:
                runs[run_id] = run

        async with trio.open_nursery() as readers:
            for run_id in list(runs):
                readers.start_soon(read, run_id)
        by_key: dict[str, list[str]] = {}
        for run in runs.values():
            if run.get("businessKey"):
                by_key.setdefault(run["businessKey"], []).append(run["runId"])
        seen = Observed(
            runs, events, await self.buffers(), by_key, list(self.handler.deliveries), list(self.claims)
        )
        if self.config.store == "cluster":
            writes = await self.sql(
                "SELECT coalesce(json_agg(json_build_array(run_id, seq, writer, at_us)), '[]')"
                " FROM audit_events"
            )
            leases = await self.sql(
                "SELECT coalesce(json_agg(json_build_array(partition, node_id, epoch, expires_at, at_us)),"
                " '[]')"
                " FROM audit_leases"
            )
            seen.writes = [Write(r, int(s), w, int(t)) for r, s, w, t in writes]
            seen.leases = LeaseHistory(
                LeaseChange(int(p), n, int(e), int(x), int(t)) for p, n, e, x, t in leases
            )
            seen.node_of = {f"foliot-{n.name}": n.name for n in self.nodes}
            seen.partition_of = partition_of
        return seen

    async def buffers(self) -> dict[str, list[str | None]]:
        """runId -> the signalIds its stored document still buffers."""
        if self.pg is not None:
            rows = await self.sql("SELECT coalesce(json_agg(json_build_array(run_id, doc)), '[]') FROM runs")
        else:
            assert self.sqlite_path is not None
            # Read where the node reads it: inside the small filesystem's namespace, if any.
            prefix = self.disk.prefix() if self.disk is not None else []
            script = (
                "import json, sqlite3, sys; db = sqlite3.connect(sys.argv[1], timeout=30);"
                " print(json.dumps(db.execute('SELECT run_id, doc FROM runs').fetchall()))"
            )
            done = await trio.run_process(
                [*prefix, sys.executable, "-c", script, str(self.sqlite_path)], capture_stdout=True
            )
            rows = json.loads(done.stdout)
        out: dict[str, list[str | None]] = {}
        for run_id, doc in rows:
            doc = json.loads(doc) if isinstance(doc, str) else doc
            out[run_id] = [b.get("signal_id") for b in doc.get("buffer") or []]
        return out

    async def one_owner_each(self) -> list[str]:
        """After healing: every partition held, unexpired, by one of the live nodes, and every
        node telling the same owners (`/admin/cluster`) as the database holds them (polled,
        bounded: the nodes' views refresh at each lease tick)."""
        if self.pg is None:
            return []
        names = {n.name for n in self.nodes}
        problems: list[str] = []
        with trio.move_on_after(30):
            while True:
                now_ms, rows = await self.sql(
                    "SELECT json_build_array((extract(epoch FROM clock_timestamp()) * 1000)::bigint,"
                    " json_agg(json_build_array(partition, node_id, epoch, expires_at))) FROM cluster_leases"
                )
                held = {int(p): n for p, n, _, x in rows if n is not None and int(x) > now_ms}
                problems = []
                if len(held) != PARTITIONS:
                    problems.append(f"{PARTITIONS - len(held)} partitions unowned after healing")
                if set(held.values()) - names:
                    problems.append(f"partitions held by unknown nodes {set(held.values()) - names}")
                counts = {n: sum(1 for h in held.values() if h == n) for n in names}
                if len(self.nodes) > 1:
                    for i, node in enumerate(self.nodes):
                        r = await self.clients[i].get(
                            node.url + "/admin/cluster", headers={"Authorization": f"Bearer {ADMIN}"}
                        )
                        shown = (
                            {v["nodeId"]: v["partitions"] for v in r.json()["nodes"]} if r.is_success else {}
                        )
                        if {k: v for k, v in shown.items() if v} != {k: v for k, v in counts.items() if v}:
                            problems.append(f"{node.name} tells {shown}, the database {counts}")
                if not problems:
                    return []
                await trio.sleep(0.5)
        return problems


def _handler_config() -> HyperConfig:
    """hypercorn's configuration for the handler: loopback, an ephemeral port, no logs."""
    config = HyperConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    return config


async def run_scenario(config: Scenario) -> Result:
    """Start, run the workload under the seeded faults, heal, settle, read back, check."""
    config.workdir.mkdir(parents=True, exist_ok=True)
    async with trio.open_nursery() as nursery:
        env = Env(config, nursery)
        try:
            with trio.fail_after(60 + config.nodes * 60):
                await env.start()
            stop_faults = trio.Event()
            settle = trio.Event()
            stop_workers = trio.Event()
            stalled: list[str] = []
            limit = trio.CapacityLimiter(24)
            with trio.fail_after(config.duration_s + config.settle_s + 240):
                async with trio.open_nursery() as work:
                    work.start_soon(env.injector, stop_faults)
                    for w in range(3):
                        work.start_soon(env.worker, w, stop_workers, settle)
                    async with trio.open_nursery() as drivers:
                        t0 = trio.current_time()
                        for item in range(config.items):
                            drivers.start_soon(env.driver, item, settle, limit)
                            await trio.sleep_until(t0 + (item + 1) * config.duration_s * 0.8 / config.items)
                        await trio.sleep_until(t0 + config.duration_s)
                        stop_faults.set()
                        # The injector finishes its fault (bounded), then everything is healed.
                        with trio.fail_after(120):
                            await env.injector_done.wait()
                        settle.set()
                        env.say(f"faults over ({dict(env.injected)}); healing, settling")
                        with trio.move_on_after(config.settle_s) as settling:
                            await env.heal_all()
                            await _drivers_done(drivers)
                        if settling.cancelled_caught:
                            env.notes.append(
                                f"{len(drivers.child_tasks)} drivers unfinished at the settle time"
                            )
                            drivers.cancel_scope.cancel()
                        env.say("settled")
                    stop_workers.set()
            env.say("reading back")
            observed = await env.observe()
            env.say(f"read {len(observed.runs)} runs")
            stalled = [
                r
                for r, run in observed.runs.items()
                if run["status"] not in ("completed", "cancelled", "failed")
            ]
            report = check(env.history.ops, observed)
            problems = await env.one_owner_each()
            for problem in problems:
                report.violations.append(_violation("ownership", "cluster", problem))
            report.counts.violations = len(report.violations)
            env.notes.append(
                f"handler misbehaved {dict(env.handler.faults)}; bad signatures {env.handler.bad_signatures}"
            )
            return Result(
                config,
                env.history,
                observed,
                report,
                env.injected,
                env.fault_log,
                {n.name: n.tail(20000) for n in env.nodes},
                stalled,
                env.notes,
                env.measures,
                env.handler.faults,
            )
        except BaseException:
            for node in env.nodes:
                print(f"\n--- {node.name} log (tail)\n{node.tail(6000)}", flush=True)
            raise
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(60):
                await env.stop()
            nursery.cancel_scope.cancel()


async def _drivers_done(drivers: trio.Nursery) -> None:
    while drivers.child_tasks:
        await trio.sleep(0.2)


def _violation(kind: str, subject: str, message: str) -> Any:
    from .checker import Violation

    return Violation(kind, subject, message)
