"""The engine as the lease keeper's `Ownership`, under MockClock: several engines on one store,
their keepers on the in-memory cluster (`fake.py`). The store here enforces the fences as
PostgreSQL does (`test_fencing.py` proves PostgreSQL itself), so a node that lost a partition
cannot write to it even when it has not noticed yet."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing
from cryptography.fernet import Fernet

from foliot.actors.clock import Clock
from foliot.actors.placement import Elsewhere, Local, Remote, Unowned
from foliot.core.config import Settings
from foliot.core.credentials import Vault
from foliot.core.errors import Fenced, Unavailable
from foliot.core.leases import PARTITIONS, Lease, partition_of
from foliot.core.views import run_view
from foliot.core.workflow.definition import canonical_json
from foliot.core.workflow.machine import SignalIn
from foliot.node import Node as Engine
from foliot.storage.base import ApiKeyRecord, AppRecord, RunFilter, SecretRecord, UnitOfWork
from foliot.storage.fence import Fence
from foliot.storage.sqlite import SqliteStore, open_sqlite
from foliot.storage.swf import SwfUnit

from .fake import FakeCluster, FakeClusterStore, advance

T0 = 1_800_000_000_000
TTL = 10_000


@attrs.define
class Push:
    node: str
    key: str
    step: str


@attrs.define
class Node:
    name: str
    engine: Engine
    scope: trio.CancelScope


@attrs.define
class Cluster:
    store: SqliteStore
    fake: FakeCluster
    nursery: trio.Nursery
    make: Callable[[str], Engine]
    pushes: list[Push] = attrs.Factory(list)
    writes: list[tuple[float, str, str]] = attrs.Factory(list)  # (time, node, actor id)
    hang: set[str] = attrs.Factory(set)  # nodes whose pushes hang for an hour
    nodes: dict[str, Node] = attrs.Factory(dict)

    async def boot(self, name: str) -> Engine:
        engine = self.make(name)

        async def serve(task_status: trio.TaskStatus[None]) -> None:
            with trio.CancelScope() as scope:
                self.nodes[name] = Node(name, engine, scope)
                await engine.serve(task_status=task_status)

        await self.nursery.start(serve)
        return engine

    def held(self) -> dict[str, set[int]]:
        return {n: set(node.engine.ownership.held) for n, node in self.nodes.items()}

    def check_disjoint(self) -> None:
        """No partition is owned by two nodes at once, as they see it."""
        seen: dict[int, str] = {}
        for name, parts in self.held().items():
            for p in parts:
                assert p not in seen, f"partition {p} held by {seen[p]} and {name}"
                seen[p] = name

    async def settle(self, *names: str) -> None:
        """Let the keepers run until the named nodes hold fair shares of every partition."""
        share = PARTITIONS // len(names)
        with trio.fail_after(300):
            while sorted(len(self.held()[n]) for n in names) != [share] * len(names) or any(
                n.engine.ownership._recovering for n in self.nodes.values()
            ):
                self.check_disjoint()
                await advance(0.5)
        self.check_disjoint()

    async def register(self, definition: dict[str, Any]) -> None:
        await self.store.add_workflow_version("app", definition["name"], canonical_json(definition), T0)

    async def start(self, engine: Engine, workflow: str) -> str:
        body, _ = await engine.runs.start(
            app="app",
            workflow=workflow,
            version=None,
            input=None,
            business_key=None,
            run_timeout_ms=None,
            idempotency_key=None,
            request_hash="",
            render=run_view,
        )
        return str(body["runId"])

    async def events(self, run_id: str) -> list[str]:
        return [e.type for e in await self.store.list_events(run_id, 0, 1000)]


def run_ids_in(partitions: list[int]) -> Iterator[str]:
    """Run ids, one in each of `partitions` in turn."""
    for p in partitions:
        i = 0
        while partition_of(f"run_p{p}x{i}") != p:
            i += 1
        yield f"run_p{p}x{i}"


async def spread(cluster: Cluster, workflow: dict[str, Any], every: int) -> tuple[Engine, list[str]]:
    """Node a alone, with one run of `workflow` in every `every`-th partition: whichever
    contiguous half of the partitions a later hands over holds some of them."""
    a = await cluster.boot("a")
    await cluster.register(workflow)
    ids = run_ids_in(list(range(0, PARTITIONS, every)))
    a.runs.new_run_id = lambda: next(ids)
    return a, [await cluster.start(a, workflow["name"]) for _ in range(PARTITIONS // every)]


@pytest.fixture
async def cluster(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    settings = Settings(data_dir=str(tmp_path), timer_window_ms=86_400_000, trend_interval_ms=0)
    vault = Vault(Fernet.generate_key().decode())
    clock = Clock(T0)
    fake = FakeCluster(lambda: round(trio.current_time() * 1000))
    async with open_sqlite(":memory:", inline=True) as store:
        await store.create_app(
            AppRecord("app", "http://handler.test", None, T0, T0),
            ApiKeyRecord("k1", "app", "x", T0),
            SecretRecord("s1", "app", vault.encrypt("whsec_test"), T0, None),
        )
        holder: list[Cluster] = []

        def enforce(fences: tuple[Fence, ...], actor: str) -> None:
            """What PostgreSQL's fencing does (tested there): only the current, unexpired lease."""
            now = fake.now()
            for f in fences:
                lease = fake.leases[f.partition]
                if (lease.node_id, lease.epoch) != (f.node_id, f.epoch) or lease.expires_at <= now:
                    raise Fenced(f"stale lease {f}")
            if fences:
                holder[0].writes.append((trio.current_time(), fences[0].node_id, actor))

        commit, swf_commit = store.commit, store.swf_commit

        async def fenced_commit(unit: UnitOfWork) -> bool:
            enforce(unit.fences, unit.run.run_id)
            return await commit(unit)

        async def fenced_swf_commit(unit: SwfUnit) -> None:
            enforce(unit.fences, unit.execution.run_id)
            await swf_commit(unit)

        monkeypatch.setattr(store, "commit", fenced_commit)
        monkeypatch.setattr(store, "swf_commit", fenced_swf_commit)

        def make(name: str) -> Engine:
            async def transport(request: httpx.Request) -> httpx.Response:
                body = json.loads(request.content)
                holder[0].pushes.append(Push(name, body["idempotencyKey"], body["step"]))
                if name in holder[0].hang:
                    await advance(3600)
                return httpx.Response(200, content=b'{"ok": true}')

            client = httpx.AsyncClient(transport=httpx.MockTransport(transport))
            engine = Engine(settings, store, clock=clock, vault=vault, http_client=client)
            engine.join_cluster(FakeClusterStore(fake), name, f"http://{name}.test", ttl_ms=TTL)
            return engine

        async with trio.open_nursery() as nursery:
            holder.append(Cluster(store, fake, nursery, make))
            yield holder[0]
            nursery.cancel_scope.cancel()


NAP = {"name": "nap", "steps": [{"name": "s", "type": "sleep", "duration": "10m"}]}
TASK = {"name": "job", "steps": [{"name": "t", "type": "task", "timeout": "2h"}]}
WAIT = {
    "name": "wait",
    "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}],
}


async def test_one_node_holds_every_partition_and_runs_as_alone(
    cluster: Cluster, autojump_clock: trio.testing.MockClock
) -> None:
    a = await cluster.boot("a")
    assert len(a.ownership.held) == PARTITIONS and a.serving
    await cluster.register(NAP)
    run_id = await cluster.start(a, "nap")
    assert a.ownership.where(run_id) == Local()
    await a.runs.wait_for(run_id, lambda r: r.status == "completed", 3600)
    assert (await cluster.events(run_id)).count("sleep_finished") == 1
    assert {w[1] for w in cluster.writes} == {"a"}  # every write carried a's fence


async def test_a_joining_node_takes_its_share_and_the_moved_timers_fire_once_there(
    cluster: Cluster, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, runs = await spread(cluster, NAP, every=8)

    b = await cluster.boot("b")
    await cluster.settle("a", "b")
    moved = [r for r in runs if partition_of(r) in b.ownership.held]
    assert 0 < len(moved) < len(runs)
    await advance(2.5)  # a's next read of the cluster shows b holding them
    assert [a.pruner.active(), b.pruner.active()].count(True) == 1  # one node prunes
    # Each node answers for its own runs and names the other for the rest.
    assert b.ownership.where(moved[0]) == Local()
    assert a.ownership.where(moved[0]) == Remote("b", "http://b.test")
    assert not any(r in a.supervisor.actors for r in moved)
    with pytest.raises(Elsewhere):  # the HTTP layer forwards it to b
        await a.runs.ask(moved[0], SignalIn("x"))

    await advance(11 * 60)
    for run_id in runs:
        run = await cluster.store.get_run(run_id)
        assert run is not None and run.status == "completed", run_id
        assert (await cluster.events(run_id)).count("sleep_finished") == 1, run_id
    assert a.timers.fired + b.timers.fired == len(runs)  # each timer fired once, cluster-wide
    assert b.timers.fired == len(moved)
    fired_on = {actor: node for _, node, actor in cluster.writes}
    assert {fired_on[r] for r in moved} == {"b"}


async def test_a_push_in_flight_at_the_hand_over_is_sent_again_by_the_new_owner_with_its_key(
    cluster: Cluster, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.hang.add("a")  # a's pushes never come back before the hand-over
    a, runs = await spread(cluster, TASK, every=16)
    with trio.fail_after(60):
        while len(cluster.pushes) < len(runs):
            await advance(0.1)

    tokens = {}
    for run_id in runs:
        run = await cluster.store.get_run(run_id)
        assert run is not None and run.task is not None and a.dispatcher.is_inflight(run.task.token)
        tokens[run_id] = run.task.token

    b = await cluster.boot("b")
    await cluster.settle("a", "b")
    moved = [r for r in runs if partition_of(r) in b.ownership.held]
    assert moved
    for run_id in moved:  # a stopped waiting for the answers of the attempts it handed over
        assert not a.dispatcher.is_inflight(tokens[run_id]) and run_id not in a.supervisor.actors
    for run_id in moved:
        await b.runs.wait_for(run_id, lambda r: r.status == "completed", 600)
        keys = [(p.node, p.key) for p in cluster.pushes if p.key.startswith(run_id)]
        assert keys == [("a", f"{run_id}:1:t:1"), ("b", f"{run_id}:1:t:1")]  # the same attempt
        assert (await cluster.events(run_id)).count("task_completed") == 1


async def test_a_node_cut_off_drops_its_actors_and_writes_nothing_more(
    cluster: Cluster, autojump_clock: trio.testing.MockClock
) -> None:
    a = await cluster.boot("a")
    await cluster.register(NAP)
    run_id = await cluster.start(a, "nap")
    assert run_id in a.supervisor.actors
    cluster.fake.down.add("a")  # a can no longer reach the database
    await advance(TTL / 1000)
    assert a.ownership.held == {} and not a.supervisor.actors and not a.serving
    assert a.ownership.where(run_id) == Unowned(partition_of(run_id))
    with pytest.raises(Fenced):  # refused before it reaches storage
        run = await cluster.store.get_run(run_id)
        assert run is not None
        await a.runs.commit(UnitOfWork(attrs.evolve(run, seq=run.seq + 1), run.seq))
    cut_at = trio.current_time()

    b = await cluster.boot("b")  # takes everything over once a's leases expired
    with trio.fail_after(60):
        while len(b.ownership.held) < PARTITIONS:
            await advance(0.5)
    await b.runs.wait_for(run_id, lambda r: r.status == "completed", 3600)
    assert (await cluster.events(run_id)).count("sleep_finished") == 1
    assert [w for w in cluster.writes if w[1] == "a" and w[0] >= cut_at] == []


async def test_a_paused_node_that_missed_its_lease_end_is_fenced_and_acts_on_nothing(
    cluster: Cluster, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = await cluster.boot("a")
    await cluster.register(WAIT)
    ids = run_ids_in([5, 5])
    a.runs.new_run_id = lambda: next(ids)
    run_id = await cluster.start(a, "wait")
    events = await cluster.events(run_id)
    p = partition_of(run_id)
    # Another node took the partition while a was paused: a has not noticed yet.
    lease = cluster.fake.leases[p]
    cluster.fake.leases[p] = Lease(p, "b", lease.epoch + 1, lease.expires_at + 60_000)
    with pytest.raises(Unavailable):
        await a.runs.ask(run_id, SignalIn("go"))
    assert run_id not in a.supervisor.actors  # dropped without performing anything
    assert await cluster.events(run_id) == events
    assert cluster.pushes == []
    run = await cluster.store.get_run(run_id)
    assert run is not None and run.status == "waiting"
    # A start a makes in that partition before it notices is refused (retryable), unstored.
    with pytest.raises(Unavailable):
        await cluster.start(a, "wait")
    assert [r.run_id for r in await cluster.store.list_runs(RunFilter("app"), 10, None)] == [run_id]


async def test_a_start_whose_partition_leaves_during_its_commit_pushes_nothing_from_here(
    cluster: Cluster, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the fault harness (tests/faults, cluster, seed 2: `push_unleased`): a start
    committed under its lease, the keeper handed the partition over while the commit was under
    way (PostgreSQL lets the release wait for the commit's lock on the lease row), and the node
    then adopted the run and pushed its first task from a partition it no longer held; the new
    owner pushed it too. The commit stands; its effects are the next owner's to perform."""
    a = await cluster.boot("a")
    await cluster.register(TASK)
    ids = run_ids_in([7])
    a.runs.new_run_id = lambda: next(ids)
    p = 7
    committing, release = trio.Event(), trio.Event()
    commit = cluster.store.commit

    async def slow_commit(unit: UnitOfWork) -> bool:
        committing.set()
        await release.wait()
        return await commit(unit)

    monkeypatch.setattr(cluster.store, "commit", slow_commit)
    started: list[str] = []

    async def start() -> None:
        started.append(await cluster.start(a, "job"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start)
        await committing.wait()
        await a.ownership.releasing(frozenset({p}))  # the keeper hands partition 7 over
        release.set()
    monkeypatch.setattr(cluster.store, "commit", commit)
    (run_id,) = started
    await advance(5)
    assert cluster.pushes == []  # nothing left this node for a partition it gave up
    assert run_id not in a.supervisor.actors
    run = await cluster.store.get_run(run_id)
    assert run is not None and run.status == "running" and run.task is not None  # stored, open
    # Its next owner (here a again, gaining it back) recovers it and pushes the attempt once.
    await a.ownership.gained({p: cluster.fake.leases[p].epoch})
    await a.runs.wait_for(run_id, lambda r: r.status == "completed", 600)
    assert [(x.node, x.key) for x in cluster.pushes] == [("a", f"{run_id}:1:t:1")]


async def test_a_signal_whose_lease_is_lost_during_its_commit_is_answered_as_committed(
    cluster: Cluster, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the fault harness (bench/faults.py, PostgreSQL, `pg_restart`, seed 1103:
    `failed_signal_applied`): the node's leases ran out on its own clock while a signal's
    commit was under way (PostgreSQL, slow after a restart, still held the lease), so the node
    dropped the run's actor and told the caller 503 `unavailable` ("nothing was changed"),
    and the commit then landed: the signal was received although every send of it had been
    refused. The message in hand keeps its own answer: the commit's."""
    a = await cluster.boot("a")
    await cluster.register(WAIT)
    ids = run_ids_in([9])
    a.runs.new_run_id = lambda: next(ids)
    run_id = await cluster.start(a, "wait")
    await a.runs.wait_for(run_id, lambda r: r.status == "waiting", 60)
    committing, release = trio.Event(), trio.Event()
    commit = cluster.store.commit

    async def slow_commit(unit: UnitOfWork) -> None:
        committing.set()
        await release.wait()
        await commit(unit)

    monkeypatch.setattr(cluster.store, "commit", slow_commit)
    answers: list[Any] = []

    async def signal() -> None:
        try:
            answers.append(await a.runs.ask(run_id, SignalIn("go", signal_id="s-1")))
        except Unavailable as exc:
            answers.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(signal)
        await committing.wait()
        a.ownership.lost(frozenset({9}))  # the keeper gave the leases up on its own clock
        await advance(0.1)
        release.set()
    monkeypatch.setattr(cluster.store, "commit", commit)
    assert "signal_received" in await cluster.events(run_id)  # the commit landed
    (answer,) = answers
    assert not isinstance(answer, Unavailable), answer  # so "nothing was changed" is no answer
    reply, _ = answer
    assert getattr(reply, "value", None) == "delivered", reply
    assert run_id not in a.supervisor.actors and cluster.pushes == []  # it acts on nothing more


async def test_an_attempt_redelivered_after_its_partition_left_is_not_pushed_from_here(
    cluster: Cluster, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the fault harness (bench/faults.py, 3 nodes, `handler`, seed 2200:
    `push_unleased`): a node re-sent an open attempt (a `Redeliver` its recovery had queued,
    handled across an await while the partition moved on) after another node held the lease;
    every path to a push or an offer now asks whether the run is still this node's."""
    cluster.hang.add("a")
    a = await cluster.boot("a")
    await cluster.register(TASK)
    ids = run_ids_in([11])
    a.runs.new_run_id = lambda: next(ids)
    run_id = await cluster.start(a, "job")
    with trio.fail_after(60):
        while not cluster.pushes:
            await advance(0.1)
    run = await cluster.store.get_run(run_id)
    assert run is not None and run.task is not None
    definition = await a.directory.definition(run.app, run.workflow, run.version)
    a.ownership.lost(frozenset({11}))
    a.runs.kind.redeliver(run, definition, run.task.token)
    await advance(5)
    assert [p.key for p in cluster.pushes] == [f"{run_id}:1:t:1"]  # the first send only
