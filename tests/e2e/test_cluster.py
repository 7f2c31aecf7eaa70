"""Three real `foliot serve` nodes on one throwaway PostgreSQL: `kill -9` three times, a node
paused past its lease (SIGSTOP, SIGCONT), and nothing lost, doubled or written by a fenced node.

Each node is its own process with its own `FOLIOT_PORT`, `FOLIOT_ADVERTISE_URL` and
`FOLIOT_NODE_ID`, and the shared database URL, admin token and secret key. The lease TTL is
`FOLIOT_LEASE_TTL_MS=3000` (10 s by default) so that takeovers take seconds, not tens of them.
Each node's database URL carries `application_name=foliot-<node>` (asyncpg passes it to the
server), which lets the audit triggers of tests/cluster/history.py record which node wrote
every `events` row and check it against the lease history: no row may have been written by a
node that did not hold its run's partition, unexpired, at that moment.

Every wait polls state (the database, `/readyz`, run documents) under a bounded deadline; the
only clock-driven parts are the workflows' own short sleeps, retries and task timeouts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from cryptography.fernet import Fernet

from foliot.core.leases import PARTITIONS, partition_of
from foliot.node import Node

from ..cluster.history import AUDIT_SQL, LeaseChange, LeaseHistory, Write, fencing_problems, history_problems
from ..helpers import HandlerServer, answer_json, start_handler
from ..pg import Cluster, _bin, free_port
from .test_crash_recovery import ADMIN, Server, setup_app

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]
if not hasattr(Node, "join_cluster"):  # until the engine owns partitions (issue 10, branch own)
    pytestmark.append(pytest.mark.skip(reason="the nodes do not lease partitions yet"))

TTL_MS = 3_000
NODES = 3
RETRYABLE = (429, 502, 503, 504)


@attrs.define
class Nodes:
    """The three nodes, their database, and a client that goes to another node when one is
    down, overloaded or not answering (as a load balancer in front of them would)."""

    db_url: str
    servers: list[Server]
    ids: list[str]
    clients: list[httpx.AsyncClient]  # one per node, as a load balancer keeps per backend
    stopped: set[int] = attrs.Factory(set)  # SIGSTOPped: skipped by `call`

    def url(self, i: int) -> str:
        return self.servers[i].url

    async def sql(self, query: str) -> Any:
        """One query's single JSON value, through psql (the test's own connection)."""
        done = await trio.run_process(
            [_bin("psql"), self.db_url, "-XAtqv", "ON_ERROR_STOP=1", "-c", query],
            capture_stdout=True,
            capture_stderr=True,
        )
        text = done.stdout.decode().strip()
        return json.loads(text) if text else None

    async def activity(self) -> Any:
        """The database's sessions that are not idle: who waits on what."""
        return await self.sql(
            "SELECT json_agg(json_build_array(application_name, state, wait_event_type,"
            " now() - xact_start, left(query, 100))) FROM pg_stat_activity"
            " WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()"
        )

    async def clock_us(self) -> int:
        """The database's clock (as the audit triggers stamp rows)."""
        return int(await self.sql("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"))

    async def leases(self) -> tuple[int, dict[int, tuple[str | None, int, int]]]:
        """(the database's clock in ms, partition -> (holder, epoch, expires_at))."""
        found = await self.sql(
            "SELECT json_build_array((extract(epoch FROM clock_timestamp()) * 1000)::bigint,"
            " json_agg(json_build_array(partition, node_id, epoch, expires_at))) FROM cluster_leases"
        )
        now, rows = found
        return int(now), {int(p): (n, int(e), int(x)) for p, n, e, x in rows}

    async def held(self) -> dict[str, set[int]]:
        """Node id -> the partitions it holds unexpired now."""
        now, leases = await self.leases()
        out: dict[str, set[int]] = {node: set() for node in self.ids}
        for partition, (node, _, expires) in leases.items():
            if node is not None and expires > now:
                out.setdefault(node, set()).add(partition)
        return out

    async def until(
        self,
        what: str,
        ok: Callable[[], Awaitable[bool]],
        limit_s: float = 60,
        seen: Callable[[], str] = lambda: "",
        every_s: float = 0.1,
    ) -> float:
        """Poll `ok` until true (bounded); returns the seconds it took."""
        t0 = trio.current_time()
        try:
            with trio.fail_after(limit_s):
                while not await ok():
                    await trio.sleep(every_s)
        except trio.TooSlowError:
            raise AssertionError(f"{what}: not within {limit_s} s {seen()}") from None
        return trio.current_time() - t0

    async def all_ready(self) -> bool:
        """Every node is started and answered /readyz 200 since its last kill."""
        return all(len(s.ready_times) == s.kills + 1 for s in self.servers)

    async def taken_over(self, gone: int) -> bool:
        """Every partition is held, unexpired, and none by node `gone`."""
        held = await self.held()
        return not held[self.ids[gone]] and sum(len(p) for p in held.values()) == PARTITIONS

    async def balanced(self) -> bool:
        """Every partition held, every node holding at least a fair share less one."""
        held = await self.held()
        fair = PARTITIONS // NODES
        return sum(len(p) for p in held.values()) == PARTITIONS and all(
            len(held[n]) >= fair - 1 for n in self.ids
        )

    async def call(self, method: str, path: str, *, start: int = 0, **kw: Any) -> httpx.Response:
        """The request to node `start`, then to the next ones while the answer is a connection
        error, a timeout or a 429/502/503/504 (bounded)."""
        tried: list[tuple[float, int, Any]] = []  # (when, node, answer): named on failure
        t0 = trio.current_time()
        try:
            with trio.fail_after(120):
                attempt = 0
                while True:
                    i = (start + attempt) % NODES
                    attempt += 1
                    if i in self.stopped:
                        continue
                    tried.append((round(trio.current_time() - t0, 1), i, "sent"))
                    try:
                        r = await self.clients[i].request(method, self.url(i) + path, **kw)
                        if r.status_code not in RETRYABLE:
                            return r
                        tried[-1] = (*tried[-1][:2], f"{r.status_code} {r.text[:120]}")
                    except httpx.TransportError as exc:
                        tried[-1] = (*tried[-1][:2], repr(exc)[:120])
                    # Backing off as a client should: a retry storm would only load the machine.
                    await trio.sleep(min(1.0, 0.02 * 2 ** min(attempt, 6)) * random.random())
        except trio.TooSlowError:
            raise AssertionError(f"{method} {path}: no final answer in 120 s; tried {tried[-12:]}") from None


@pytest.fixture
async def nodes(tmp_path: Path, pg_cluster: Cluster | None) -> AsyncIterator[Nodes]:
    if pg_cluster is None:
        pytest.skip("needs a fresh database of a throwaway cluster (FOLIOT_TEST_DATABASE_URL is set)")
    db_url = await trio.to_thread.run_sync(pg_cluster.migrated_database)
    secret = Fernet.generate_key().decode()
    ids = [f"n{i}" for i in range(NODES)]
    servers = []
    for node in ids:
        port = free_port()
        env = {
            **os.environ,
            "FOLIOT_PORT": str(port),
            "FOLIOT_ADVERTISE_URL": f"http://127.0.0.1:{port}",
            "FOLIOT_NODE_ID": node,
            "FOLIOT_DATABASE_URL": f"{db_url}?application_name=foliot-{node}",
            "FOLIOT_DATA_DIR": str(tmp_path / node),
            "FOLIOT_ADMIN_TOKEN": ADMIN,
            "FOLIOT_SECRET_KEY": secret,
            "FOLIOT_LEASE_TTL_MS": str(TTL_MS),
            "FOLIOT_LOG_LEVEL": "WARNING",
            # Durability across nodes, not admission (tests/actors covers the gate).
            "FOLIOT_ADMISSION_TARGET_MS": "0",
        }
        servers.append(Server(env, tmp_path / f"{node}.log", port))
    cluster = Nodes(db_url, servers, ids, [client_of() for _ in ids])
    try:
        await cluster.sql(AUDIT_SQL)  # on the migrated schema, before any node starts
        async with trio.open_nursery() as starting:
            for server in servers:
                starting.start_soon(server.start)
        yield cluster
    finally:
        for client in cluster.clients:
            await client.aclose()
        for server in servers:
            await server.stop()
        for server in servers:
            if server.log.exists():
                tail = server.log.read_text(errors="replace")[-1500:]
                print(f"\n--- {server.log.name} (tail)\n{tail}")
        pg_cluster.finished(db_url)


async def audit(nodes: Nodes) -> tuple[list[Write], LeaseHistory]:
    writes = await nodes.sql(
        "SELECT coalesce(json_agg(json_build_array(run_id, seq, writer, at_us)), '[]') FROM audit_events"
    )
    leases = await nodes.sql(
        "SELECT coalesce(json_agg(json_build_array(partition, node_id, epoch, expires_at, at_us)), '[]')"
        " FROM audit_leases"
    )
    return [Write(r, int(s), w, int(t)) for r, s, w, t in writes], LeaseHistory(
        LeaseChange(int(p), n, int(e), int(x), int(t)) for p, n, e, x, t in leases
    )


async def check_fencing(nodes: Nodes) -> tuple[list[Write], LeaseHistory]:
    """No event row written by a node without its run's partition's lease; returns the audit."""
    writes, leases = await audit(nodes)
    node_of = {f"foliot-{n}": n for n in nodes.ids}
    problems = fencing_problems(writes, leases, partition_of, node_of)
    assert problems == [], "\n".join(problems[:20])
    return writes, leases


async def events_of(nodes: Nodes, key: dict[str, str], run_id: str) -> list[Any]:
    out: list[Any] = []
    after = 0
    while True:
        r = await nodes.call(
            "GET",
            f"/apps/orders/runs/{run_id}/events",
            start=len(out) % NODES,
            params={"after": after, "limit": 1000},
            headers=key,
        )
        assert r.status_code == 200, r.text
        page = r.json()
        out += page["events"]
        if not page.get("nextCursor") or not page["events"]:
            return out
        after = out[-1]["seq"]


async def read_all(
    nodes: Nodes, key: dict[str, str], ids: list[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """Every run's document and history, read through all the nodes, 24 at a time."""
    runs: dict[str, dict[str, Any]] = {}
    histories: dict[str, list[Any]] = {}
    limit = trio.CapacityLimiter(24)

    async def one(i: int, run_id: str) -> None:
        async with limit:
            r = await nodes.call("GET", f"/apps/orders/runs/{run_id}", start=i, headers=key)
            assert r.status_code == 200, r.text
            runs[run_id] = r.json()
            histories[run_id] = await events_of(nodes, key, run_id)

    async with trio.open_nursery() as readers:
        for i, run_id in enumerate(ids):
            readers.start_soon(one, i, run_id)
    return runs, histories


async def statuses(nodes: Nodes, key: dict[str, str]) -> dict[str, str]:
    """runId -> status of every run, through whichever node answers."""
    out: dict[str, str] = {}
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 500}
        if cursor:
            params["cursor"] = cursor
        r = await nodes.call("GET", "/apps/orders/runs", params=params, headers=key)
        assert r.status_code == 200, r.text
        page = r.json()
        out.update({run["runId"]: run["status"] for run in page["runs"]})
        cursor = page.get("nextCursor")
        if not cursor:
            return out


def check_deliveries(handler: HandlerServer, run_ids: list[str], steps: tuple[str, ...]) -> int:
    """Every push carried its attempt's key; a key repeated is the same attempt re-delivered;
    attempts of a step are 1..n. Returns how many deliveries repeated a key."""
    counts = Counter(r.body["idempotencyKey"] for r in handler.received)
    for r in handler.received:
        body = r.body
        assert (
            body["idempotencyKey"] == f"{body['runId']}:{body['generation']}:{body['step']}:{body['attempt']}"
        )
    by_run: dict[tuple[str, str], list[int]] = {}
    for k in counts:
        run_id, _, step, attempt = k.split(":")
        by_run.setdefault((run_id, step), []).append(int(attempt))
    for run_id in run_ids:
        for step in steps:
            attempts = sorted(by_run.get((run_id, step), []))
            assert attempts == list(range(1, len(attempts) + 1)) and attempts, (run_id, step, attempts)
    assert handler.bad_signatures == 0
    return sum(n - 1 for n in counts.values())


def pushed(body: dict[str, Any], headers: dict[str, str]) -> Any:
    return answer_json({"step": body["step"], "key": body["idempotencyKey"]})


RETRY = {"maxAttempts": 20, "initialInterval": "200ms", "maxInterval": "1s"}
FLOW = {
    "name": "flow",
    "steps": [
        {"name": "a", "type": "task", "timeout": "30s", "retry": RETRY},
        {"name": "go", "type": "wait", "signal": "go"},
        {"name": "nap", "type": "sleep", "duration": "1s"},
        # Pulled by the test's workers; a claim lost with a killed node times out in 3 s and is
        # offered again as the next attempt.
        {"name": "pick", "type": "task", "queue": "picking", "timeout": "3s", "retry": RETRY},
        {"name": "b", "type": "task", "timeout": "30s", "retry": RETRY},
    ],
}
RUNS = 300
COHORTS = 4  # cohort 0's signals go at once, cohort k's right after the k-th kill


async def test_three_nodes_kill_9_thrice_nothing_lost_or_doubled(nodes: Nodes, nursery: trio.Nursery) -> None:
    rng = random.Random(10)
    handler = HandlerServer()

    def flaky(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if rng.random() < 0.1:  # retry timers in flight across the kills too
            return answer_json({"error": {"class": "busy"}}, 503)
        return pushed(body, headers)

    handler.route("a", flaky)
    handler.route("b", pushed)
    await start_handler(nursery, handler)
    run_ids: dict[int, str] = {}
    acked: dict[int, str] = {}
    picked: list[str] = []
    gates = [trio.Event() for _ in range(COHORTS)]
    gates[0].set()
    failovers: list[float] = []
    open_on_victim: list[int] = []
    key = await app_through(nodes, handler, FLOW)
    await nodes.until("leases shared", nodes.balanced, 90)

    # As many client calls at once as a modest fleet of callers would make: more only queue in
    # the nodes (or in this process, which shares the machine with them).
    calls = trio.CapacityLimiter(24)

    async def drive(i: int) -> None:
        async with calls:
            r = await nodes.call(
                "POST",
                "/apps/orders/runs",
                start=i,
                json={"workflow": "flow", "input": {"i": i}, "businessKey": f"order-{i}"},
                headers={**key, "Idempotency-Key": f"start-{i}"},
            )
        assert r.status_code in (200, 201), r.text
        run_ids[i] = r.json()["runId"]
        await gates[i % COHORTS].wait()
        async with calls:
            r = await nodes.call(
                "POST",
                "/apps/orders/signals",
                start=i + 1,
                json={"runId": run_ids[i], "name": "go", "payload": {"paid": i}, "signalId": f"sig-{i}"},
                headers=key,
            )
        assert r.status_code == 202, r.text
        acked[i] = r.json()["status"]

    async def worker(w: int, done: trio.Event) -> None:
        turn = w
        while not done.is_set():
            turn += 1
            try:
                r = await nodes.clients[turn % NODES].post(
                    nodes.url(turn % NODES) + "/apps/orders/tasks/poll",
                    json={"queue": "picking", "waitSeconds": 1, "maxTasks": 5, "workerId": f"w{w}"},
                    headers=key,
                )
            except httpx.TransportError:
                continue
            if r.status_code != 200:
                await trio.sleep(0.1)
                continue
            for task in r.json()["tasks"]:
                picked.append(task["idempotencyKey"])
                r = await nodes.call(
                    "POST",
                    f"/apps/orders/tasks/{task['taskToken']}/complete",
                    start=turn,
                    json={"output": {"picked": task["idempotencyKey"]}},
                    headers=key,
                )
                # 409: the attempt timed out meanwhile (its claim was slow), or the complete
                # went through on a node killed before it answered.
                assert r.status_code in (200, 409), r.text

    async def killer(restarts: trio.Nursery) -> None:
        for k, victim in enumerate((1, 2, 0), start=1):
            await nodes.until("runs started", _at_least(run_ids, RUNS * k // COHORTS), 120)
            # The node killed before is back (ready) before the next one goes: on a loaded
            # machine a restart takes tens of seconds, and two nodes down at once would leave
            # one to carry everything.
            await nodes.until("the last victim ready again", nodes.all_ready, 90)
            now, leases = await nodes.leases()
            mine = {p for p, (n, _, x) in leases.items() if n == nodes.ids[victim] and x > now}
            opened = await nodes.sql("SELECT coalesce(json_agg(run_id), '[]') FROM runs WHERE is_open")
            open_on_victim.append(sum(1 for r in opened if partition_of(r) in mine))
            await nodes.servers[victim].kill()
            gates[k].set()  # signals to runs some of which the dead node owned
            if k < 3:  # the survivors take its partitions over, then it comes back
                failovers.append(
                    await nodes.until(f"takeover after kill {k}", lambda v=victim: nodes.taken_over(v), 60)
                )
            # The last time it is restarted at once, under the same node id, while the
            # database still shows its old leases unexpired.
            restarts.start_soon(nodes.servers[victim].start)

    done = trio.Event()
    with trio.fail_after(150):
        async with trio.open_nursery() as workers:
            for w in range(4):
                workers.start_soon(worker, w, done)
            async with trio.open_nursery() as inner:
                inner.start_soon(killer, inner)
                for i in range(RUNS):
                    inner.start_soon(drive, i)

            seen: Counter[str] = Counter()

            async def all_completed() -> bool:
                found = await statuses(nodes, key)
                assert not set(found.values()) - {"running", "waiting", "sleeping", "completed"}, found
                seen.clear()
                seen.update(found.values())
                return len(found) == RUNS and set(found.values()) == {"completed"}

            await nodes.until("every run completed", all_completed, 90, lambda: str(seen), every_s=0.5)
            await nodes.until("every node back", nodes.balanced, 60)
            if importlib.util.find_spec("foliot.cluster.report") is not None:  # /admin/cluster is built
                for i in range(NODES):  # every node tells the same cluster, as the database holds it
                    view = await nodes.clients[i].get(
                        nodes.url(i) + "/admin/cluster", headers={"Authorization": f"Bearer {ADMIN}"}
                    )
                    assert view.status_code == 200, view.text
                    shown = {n["nodeId"]: n["partitions"] for n in view.json()["nodes"]}
                    assert set(shown) == set(nodes.ids) and sum(shown.values()) == PARTITIONS, shown
            done.set()

    assert len(acked) == RUNS and set(acked.values()) <= {"delivered", "buffered", "duplicate"}
    assert min(open_on_victim) > 0, open_on_victim  # each kill hit a node owning open runs
    ids = [run_ids[i] for i in range(RUNS)]
    runs, histories = await read_all(nodes, key, ids)
    for i, run_id in enumerate(ids):
        run = runs[run_id]
        assert run["state"]["go"] == {"paid": i}, run  # the acknowledged signal, once
        assert run["state"]["b"]["key"].startswith(f"{run_id}:1:b:"), run
        assert run["state"]["pick"]["picked"] in picked
        problems = history_problems(run_id, histories[run_id])
        assert problems == [], problems
    duplicates = check_deliveries(handler, ids, ("a", "b"))
    writes, _ = await check_fencing(nodes)
    by_node = Counter(w.writer for w in writes)
    print(
        f"\n{RUNS} runs on {NODES} nodes, 3 kills (open runs on the victim: {open_on_victim}); "
        f"takeover after each kill {[f'{t:.1f}s' for t in failovers]} (FOLIOT_LEASE_TTL_MS={TTL_MS}); "
        f"pushes {len(handler.received)}, repeated keys {duplicates}; pulled {len(picked)}; "
        f"event rows by node {dict(by_node)}"
    )


def _at_least(found: dict[int, str], count: int) -> Callable[[], Awaitable[bool]]:
    async def ok() -> bool:
        return len(found) >= count

    return ok


def client_of() -> httpx.AsyncClient:
    """A client of one node, failing fast as a load balancer does when a backend is down or
    swamped (no connection in 2 s, no free slot in its pool within 1 s: `Nodes.call` goes on to
    the next node); an answer may take 10 s on a loaded machine."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(10, connect=2, pool=1),
        limits=httpx.Limits(max_connections=48, max_keepalive_connections=48),
    )


async def app_through(nodes: Nodes, handler: HandlerServer, workflow: dict[str, Any]) -> dict[str, str]:
    """The app and its workflow, made through node 0; returns the API key's header."""
    async with httpx.AsyncClient(base_url=nodes.url(0), timeout=10) as client:
        return await setup_app(client, handler, workflow)


PAUSE_FLOW = {
    "name": "flow",
    "steps": [
        {"name": "go", "type": "wait", "signal": "go"},
        {"name": "nap", "type": "sleep", "duration": "1s"},  # due while the node is paused
        {"name": "b", "type": "task", "timeout": "30s", "retry": RETRY},
    ],
}
PAUSE_RUNS = 90
PAUSED = 2


async def test_a_paused_node_commits_nothing_once_it_wakes(nodes: Nodes, nursery: trio.Nursery) -> None:
    handler = HandlerServer()
    handler.route("b", pushed)
    await start_handler(nursery, handler)
    paused = nodes.servers[PAUSED]
    acked: dict[str, str] = {}
    key = await app_through(nodes, handler, PAUSE_FLOW)
    await nodes.until("leases balanced", nodes.balanced, 90)
    ids: list[str] = []
    for i in range(PAUSE_RUNS):
        r = await nodes.call("POST", "/apps/orders/runs", start=i, json={"workflow": "flow"}, headers=key)
        assert r.status_code == 201, r.text
        ids.append(r.json()["runId"])

    async def all_waiting() -> bool:
        return set((await statuses(nodes, key)).values()) == {"waiting"}

    await nodes.until("runs waiting", all_waiting, every_s=0.5)
    now, leases = await nodes.leases()
    theirs = {p: e for p, (n, e, x) in leases.items() if n == nodes.ids[PAUSED] and x > now}
    mine = [r for r in ids if partition_of(r) in theirs]
    assert len(mine) >= 9, (len(mine), len(theirs))
    before, during, around = mine[0::3], mine[1::3], mine[2::3]
    others = [r for r in ids if r not in mine]

    async def signal_to(run_id: str, node: int | None) -> None:
        """Straight to `node` (waiting as long as it takes), else to any node."""
        body = {"runId": run_id, "name": "go", "signalId": f"sig-{run_id}"}
        r: httpx.Response | None = None
        if node is not None:
            try:
                r = await nodes.clients[node].post(
                    nodes.url(node) + "/apps/orders/signals", json=body, headers=key, timeout=60
                )
            except httpx.TransportError:
                r = None
        if r is None or r.status_code in RETRYABLE:
            r = await nodes.call("POST", "/apps/orders/signals", start=PAUSED + 1, json=body, headers=key)
        assert r.status_code == 202, r.text
        acked[run_id] = r.json()["status"]

    async with trio.open_nursery() as senders:
        # In flight at the pause: signals to the node's runs through the node itself (their
        # sleeps then come due while it is stopped), and more queued on its socket.
        for run_id in before:
            senders.start_soon(signal_to, run_id, PAUSED)
        await nodes.until("the first signals in", _at_least_one(acked), 30)
        assert paused.process is not None
        paused.process.send_signal(signal.SIGSTOP)
        nodes.stopped.add(PAUSED)
        for run_id in during:
            senders.start_soon(signal_to, run_id, PAUSED)
        for run_id in [*around, *others]:
            senders.start_soon(signal_to, run_id, None)
        try:
            took = await nodes.until(
                "takeover of the paused node's partitions", lambda: nodes.taken_over(PAUSED)
            )
        except AssertionError as exc:  # say what holds the database up
            raise AssertionError(f"{exc}; sessions not idle: {await nodes.activity()}") from None

        async def survivors_finished() -> bool:
            found = await statuses(nodes, key)
            return all(found[r] == "completed" for r in [*around, *others])

        # The survivors carried the paused node's runs on: their writes, under new epochs.
        await nodes.until(
            "the survivors completed the runs they were asked to", survivors_finished, 60, every_s=0.5
        )
        woke = await nodes.clock_us()
        paused.process.send_signal(signal.SIGCONT)
        nodes.stopped.discard(PAUSED)

    async def all_completed() -> bool:
        return set((await statuses(nodes, key)).values()) == {"completed"}

    await nodes.until("every run completed", all_completed, 60, every_s=0.5)
    await nodes.until("the woken node rejoined", nodes.balanced, 90)
    assert set(acked.values()) <= {"delivered", "buffered", "duplicate"} and len(acked) == PAUSE_RUNS
    _, histories = await read_all(nodes, key, ids)
    for run_id in ids:
        problems = history_problems(run_id, histories[run_id])
        assert problems == [], problems
    check_deliveries(handler, ids, ("b",))
    writes, leases = await check_fencing(nodes)
    # Explicitly: whatever the woken node wrote in its old partitions after SIGCONT, it wrote
    # under a lease it acquired again after it rejoined (a later epoch), never the one it held
    # when it was stopped.
    late = [
        w
        for w in writes
        if w.writer == f"foliot-{nodes.ids[PAUSED]}" and partition_of(w.run_id) in theirs and w.at_us >= woke
    ]
    for w in late:
        lease = leases.at(partition_of(w.run_id), w.at_us)
        assert lease is not None and lease.epoch > theirs[partition_of(w.run_id)], (w, lease)
    print(
        f"\npaused node held {len(theirs)} partitions, {len(mine)} of {PAUSE_RUNS} runs; takeover "
        f"{took:.1f}s (FOLIOT_LEASE_TTL_MS={TTL_MS}); rows there after it woke: {len(late)}, all re-acquired"
    )


def _at_least_one(found: dict[str, str]) -> Callable[[], Awaitable[bool]]:
    async def ok() -> bool:
        return len(found) > 0

    return ok
