"""Several in-process nodes (`foliot.server.serve`) on one throwaway PostgreSQL: a request for
a run owned by another node gets the owner's exact answer, on the Quart routes and the ASGI hot
path alike; the loop guard; an unowned partition; a long poll on one node takes a task offered
on another at once, and a task is claimed once.

Who owns what is told to each node by a fake placement (the lease keeper's view, in
production), so each case sets the ownership it needs exactly."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from cryptography.fernet import Fernet

from foliot.actors.messages import Envelope
from foliot.actors.placement import LOCAL, Placement, Remote, Unowned, Where
from foliot.cluster import hop, tell
from foliot.core.swf import messages as m
from foliot.server import Running, serve
from foliot.storage.swf import swf_actor_id

from ..conftest import ADMIN, make_settings
from ..helpers import HandlerServer, answer_json, quart_only, start_handler
from ..swf.conftest import PRESET_KEY, PRESET_SECRET, Swf, call
from ..swf.test_tasks_boto3 import register_activity, schedule
from ..swf.test_write_boto3 import WF, history, register

pytestmark = pytest.mark.postgres

QUEUED = {"name": "q", "steps": [{"name": "t", "type": "task", "queue": "work", "timeout": "1h"}]}
WAITS = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}]}


@attrs.define
class FakePlacement:
    """Where each actor lives: as the test says (`owners[actor_id]`, a node's name, or None for
    nobody), else as the node itself says (`real`)."""

    me: str
    nodes: dict[str, Running]
    real: Placement
    owners: dict[str, str | None] = attrs.Factory(dict)
    addresses: dict[str, str] = attrs.Factory(dict)  # a node's address as this one knows it

    def where(self, actor_id: str) -> Where:
        if actor_id not in self.owners:
            return self.real.where(actor_id)
        owner = self.owners[actor_id]
        if owner is None:
            return Unowned(7)
        if owner == self.me:
            return LOCAL
        return Remote(owner, self.addresses.get(owner) or self.nodes[owner].url)


@attrs.define
class Node:
    name: str
    running: Running
    client: httpx.AsyncClient
    placement: FakePlacement

    @property
    def engine(self) -> Any:
        return self.running.engine


@attrs.define
class Cluster:
    nodes: dict[str, Node]
    handler: HandlerServer
    key: str = ""
    app: str = "orders"

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def own(self, run_id: str, owner: str | None) -> None:
        """Tell every node who owns `run_id` (None: nobody, a lease in transit)."""
        for node in self.nodes.values():
            node.placement.owners[run_id] = owner

    async def call(self, node: str, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        headers = {**self.auth(), **kw.pop("headers", {})}
        return await self.nodes[node].client.request(method, path, json=body, headers=headers, **kw)


async def until(check: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not check():  # noqa: ASYNC110 (reached by the nodes on their own)
            await trio.sleep(0.01)


@pytest.fixture
async def cluster(tmp_path: Path, nursery: trio.Nursery, pg_cluster: Any) -> AsyncIterator[Cluster]:
    url = pg_cluster.migrated_database()
    key = Fernet.generate_key().decode()
    handler = await start_handler(nursery, HandlerServer())
    runnings: dict[str, Running] = {}
    nodes: dict[str, Node] = {}
    async with trio.open_nursery() as servers:
        for name in ("a", "b"):
            settings = make_settings(
                tmp_path / name,
                database_url=url,
                secret_key=key,
                node_id=name,
                swf_credentials=((PRESET_KEY, PRESET_SECRET),),
            )
            runnings[name] = await servers.start(serve, settings)
        async with (
            httpx.AsyncClient(base_url=runnings["a"].url) as ca,
            httpx.AsyncClient(base_url=runnings["b"].url) as cb,
        ):
            for name, client in (("a", ca), ("b", cb)):
                placement = FakePlacement(name, runnings, runnings[name].engine.placement)
                runnings[name].engine.placement = placement
                nodes[name] = Node(name, runnings[name], client, placement)
            cluster = Cluster(nodes, handler)
            admin = {"Authorization": f"Bearer {ADMIN}"}
            r = await ca.put(f"/apps/{cluster.app}", json={"handlerBaseUrl": handler.url}, headers=admin)
            assert r.status_code == 201, r.text
            cluster.key = r.json()["apiKey"]
            handler.secrets.append(r.json()["signingSecret"])
            for workflow in (QUEUED, WAITS):
                r = await ca.post(f"/apps/{cluster.app}/workflows", json=workflow, headers=cluster.auth())
                assert r.status_code in (200, 201), r.text
            # Each node heard the other on the offers channel.
            await until(lambda: all(n.engine.pull.peers for n in nodes.values()))
            # Each holds its half of the partitions, so no run moves during the test.
            await until(lambda: all(len(n.engine.ownership.held) == 128 for n in nodes.values()))
            yield cluster
        servers.cancel_scope.cancel()
    pg_cluster.finished(url)


async def start(c: Cluster, node: str, workflow: str) -> str:
    r = await c.call(node, "POST", f"/apps/{c.app}/runs", {"workflow": workflow})
    assert r.status_code == 201, r.text
    run_id: str = r.json()["runId"]
    c.own(run_id, node)
    return run_id


def answer(r: httpx.Response) -> tuple[int, str | None, str | None, Any]:
    return r.status_code, r.headers.get("content-type"), r.headers.get("retry-after"), r.json()


async def test_a_signal_sent_to_another_node_gets_the_owners_answer(cluster: Cluster) -> None:
    c = cluster
    run_id = await start(c, "a", "w")
    signal = {"name": "go", "runId": run_id, "payload": {"n": 1}, "signalId": "s-1"}
    via_b = await c.call("b", "POST", f"/apps/{c.app}/signals", signal)  # the hot path
    assert via_b.status_code == 202, via_b.text
    assert c.nodes["b"].engine.forwarder.forwarded == 1
    assert run_id in c.nodes["a"].engine.supervisor.actors
    assert run_id not in c.nodes["b"].engine.supervisor.actors  # never woken on the non-owner
    # The same signal again (a duplicate by signalId) to each node: the same answer from both.
    direct = await c.call("a", "POST", f"/apps/{c.app}/signals", signal)
    again = await c.call("b", "POST", f"/apps/{c.app}/signals", signal)
    assert answer(again) == answer(direct)
    # Through Quart (the edge's routes turned off): the same again.
    with quart_only():
        quart = await c.call("b", "POST", f"/apps/{c.app}/signals", signal)
    assert answer(quart) == answer(direct)
    assert c.nodes["b"].engine.forwarder.forwarded == 3
    run = await c.call("b", "GET", f"/apps/{c.app}/runs/{run_id}")  # a read: served by b itself
    assert run.status_code == 200 and run.json()["currentStep"] == "t"
    assert c.nodes["b"].engine.forwarder.forwarded == 3


async def test_interventions_and_task_answers_are_forwarded(cluster: Cluster) -> None:
    c = cluster
    run_id = await start(c, "a", "q")
    paused = await c.call("b", "POST", f"/apps/{c.app}/runs/{run_id}/pause", {"reason": "look"})
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "paused"
    # An error answer is relayed as the owner gave it: status, type and body.
    direct = await c.call("a", "POST", f"/apps/{c.app}/runs/{run_id}/pause", {"reason": "again"})
    relayed = await c.call("b", "POST", f"/apps/{c.app}/runs/{run_id}/pause", {"reason": "again"})
    assert direct.status_code == 409 and answer(relayed) == answer(direct)
    assert (await c.call("b", "POST", f"/apps/{c.app}/runs/{run_id}/unpause", {})).status_code == 200
    # The queued task, claimed on a, answered through b (the hot path) and heartbeated (Quart).
    polled = await c.call("a", "POST", f"/apps/{c.app}/tasks/poll", {"queue": "work", "waitSeconds": 5})
    token = polled.json()["tasks"][0]["taskToken"]
    with quart_only():
        beat = await c.call("b", "POST", f"/apps/{c.app}/tasks/{token}/heartbeat", {})
    assert beat.status_code == 200 and beat.json() == {"cancelRequested": False}
    done = await c.call("b", "POST", f"/apps/{c.app}/tasks/{token}/complete", {"output": {"ok": True}})
    assert done.status_code == 200 and done.json() == {"runId": run_id, "status": "completed"}
    again = await c.call("b", "POST", f"/apps/{c.app}/tasks/{token}/complete", {"output": {"ok": True}})
    assert again.status_code == 409 and again.json()["error"]["code"] == "task_closed"
    assert c.nodes["a"].engine.forwarder.forwarded == 0


async def test_a_forwarded_request_is_never_forwarded_again(cluster: Cluster) -> None:
    c = cluster
    run_id = await start(c, "a", "w")
    c.nodes["a"].placement.owners[run_id] = "b"  # a thinks b owns it, b thinks a does
    r = await c.call("b", "POST", f"/apps/{c.app}/signals", {"name": "go", "runId": run_id})
    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
    assert r.json()["error"]["code"] == "not_owner"
    assert c.nodes["b"].engine.forwarder.forwarded == 1
    assert c.nodes["a"].engine.forwarder.forwarded == 0  # a answered; it did not send it back
    # A client cannot pass a forged hop header off as a node's: it is ignored (b forwards).
    forged = {hop.HEADER: "a;0;" + "0" * 64}
    r = await c.call("b", "POST", f"/apps/{c.app}/signals", {"name": "go", "runId": run_id}, headers=forged)
    assert r.json()["error"]["code"] == "not_owner"
    assert c.nodes["b"].engine.forwarder.forwarded == 2


async def test_an_unowned_partition_answers_503_and_changes_nothing(cluster: Cluster) -> None:
    c = cluster
    run_id = await start(c, "a", "w")
    c.own(run_id, None)
    for node in ("a", "b"):
        r = await c.call(node, "POST", f"/apps/{c.app}/signals", {"name": "go", "runId": run_id})
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        assert r.json()["error"]["code"] == "partition_unowned"
    c.own(run_id, "a")
    events = await c.call("a", "GET", f"/apps/{c.app}/runs/{run_id}/events")
    assert "signal_received" not in [e["type"] for e in events.json()["events"]]


async def test_an_owner_that_cannot_be_reached_answers_503(cluster: Cluster) -> None:
    c = cluster
    run_id = await start(c, "a", "w")
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        c.nodes["b"].placement.addresses["a"] = f"http://127.0.0.1:{port}"
        r = await c.call("b", "POST", f"/apps/{c.app}/signals", {"name": "go", "runId": run_id})
    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
    assert r.json()["error"]["code"] == "unavailable"


async def test_a_long_poll_on_one_node_takes_a_task_offered_on_another(cluster: Cluster) -> None:
    c = cluster
    poll = {"queue": "work", "waitSeconds": 30, "workerId": "w-b"}
    got: list[httpx.Response] = []
    async with trio.open_nursery() as nursery:

        async def poller(node: str) -> None:
            got.append(await c.call(node, "POST", f"/apps/{c.app}/tasks/poll", poll))

        for _ in range(2):
            nursery.start_soon(poller, "b")
        await until(lambda: c.nodes["b"].engine.queues.waiting_on(c.app, "work") == 2)
        began = trio.current_time()
        run_id = await start(c, "a", "q")  # its task is offered on a, where nobody polls
        await until(lambda: len(got) == 1)
        assert trio.current_time() - began < 10  # woken by the offer, far before the poll's 30 s
        nursery.cancel_scope.cancel()  # the second poller would wait out its 30 s
    tasks = got[0].json()["tasks"]
    assert [t["runId"] for t in tasks] == [run_id]
    run = await c.call("a", "GET", f"/apps/{c.app}/runs/{run_id}")
    assert run.json()["status"] == "running"
    events = (await c.call("a", "GET", f"/apps/{c.app}/runs/{run_id}/events")).json()["events"]
    claims = [e for e in events if e["type"] == "task_claimed"]
    assert len(claims) == 1 and claims[0]["data"]["workerId"] == "w-b", claims  # claimed once
    assert c.nodes["b"].engine.pull.remote_claims == 1


async def test_a_poll_finds_the_backlog_another_node_holds(cluster: Cluster) -> None:
    c = cluster
    runs = {await start(c, "a", "q") for _ in range(3)}
    await until(lambda: c.nodes["a"].engine.queues.depth(c.app, "work") == 3)
    await until(lambda: ("orders", "work") in c.nodes["b"].engine.pull.hints)
    poll = {"queue": "work", "waitSeconds": 30, "maxTasks": 10}
    r = await c.call("b", "POST", f"/apps/{c.app}/tasks/poll", poll)
    assert {t["runId"] for t in r.json()["tasks"]} == runs
    assert c.nodes["a"].engine.queues.depth(c.app, "work") == 0


async def test_the_internal_claim_needs_a_nodes_hop_header(cluster: Cluster) -> None:
    c = cluster
    await start(c, "a", "q")
    body = {"kind": "tasks", "app": c.app, "queue": "work", "maxTasks": 1}
    r = await c.call("a", "POST", "/internal/claim", body)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    raw = json.dumps(body).encode()
    b = c.nodes["b"].engine.forwarder
    stale = hop.sign(b.key, "b", 0, "POST", "/internal/claim", raw)  # from 1970
    r = await c.nodes["a"].client.post(
        "/internal/claim", content=raw, headers={hop.HEADER: stale, "content-type": "application/json"}
    )
    assert r.status_code == 401
    assert c.nodes["a"].engine.queues.depth(c.app, "work") == 1  # nothing claimed


async def test_a_captured_node_to_node_request_is_refused_when_sent_again(cluster: Cluster) -> None:
    c = cluster
    await start(c, "a", "q")
    await start(c, "a", "q")
    raw = json.dumps({"kind": "tasks", "app": c.app, "queue": "work", "maxTasks": 1}).encode()
    b = c.nodes["b"].engine.forwarder
    captured = hop.sign(b.key, "b", c.nodes["a"].engine.clock.now(), "POST", "/internal/claim", raw)
    headers = {hop.HEADER: captured, "content-type": "application/json"}
    first = await c.nodes["a"].client.post("/internal/claim", content=raw, headers=headers)
    assert first.status_code == 200, first.text
    assert c.nodes["a"].engine.queues.depth(c.app, "work") == 1
    again = await c.nodes["a"].client.post("/internal/claim", content=raw, headers=headers)
    assert again.status_code == 401 and again.json()["error"]["code"] == "unauthorized"
    other = json.dumps({"kind": "tasks", "app": c.app, "queue": "work", "maxTasks": 2}).encode()
    changed = await c.nodes["a"].client.post("/internal/claim", content=other, headers=headers)
    assert changed.status_code == 401
    moved = await c.nodes["a"].client.post("/internal/intervene", content=raw, headers=headers)
    assert moved.status_code == 401
    assert c.nodes["a"].engine.queues.depth(c.app, "work") == 1  # nothing more claimed


async def test_a_bulk_page_intervenes_on_each_run_where_it_lives(cluster: Cluster) -> None:
    c = cluster
    on_a = {await start(c, "a", "w") for _ in range(2)}
    on_b = await start(c, "b", "w")
    r = await c.call("b", "POST", f"/apps/{c.app}/runs/pause", {"workflow": "w", "reason": "maintenance"})
    assert r.status_code == 200, r.text
    assert r.json() == {"matched": 3, "paused": 3, "skipped": 0, "refused": [], "cursor": None}
    for run_id in on_a:
        assert c.nodes["a"].engine.supervisor.actors[run_id].state.status == "paused"
        assert run_id not in c.nodes["b"].engine.supervisor.actors
    assert c.nodes["b"].engine.supervisor.actors[on_b].state.status == "paused"
    again = await c.call("a", "POST", f"/apps/{c.app}/runs/pause", {"workflow": "w"})
    assert again.json() == {"matched": 3, "paused": 0, "skipped": 3, "refused": [], "cursor": None}
    # The node-to-node call refuses anyone without a node's hop header.
    body = {"app": c.app, "runId": on_b, "verb": "unpause"}
    assert (await c.call("b", "POST", "/internal/intervene", body)).status_code == 401


async def test_admin_cluster_shows_the_nodes_and_the_partition_map(cluster: Cluster) -> None:
    c = cluster
    await start(c, "a", "w")
    r = await c.nodes["b"].client.get("/admin/cluster", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.text
    view = r.json()
    assert [(n["nodeId"], n["address"], n["partitions"]) for n in view["nodes"]] == [
        ("a", c.nodes["a"].running.url, 128),
        ("b", c.nodes["b"].running.url, 128),
    ]
    assert all(n["lastHeartbeat"].endswith("Z") and n["liveActors"] >= 0 for n in view["nodes"])
    assert view["partitions"] == 256 and len(view["map"]) == 256
    for name in ("a", "b"):
        held = c.nodes[name].engine.ownership.held
        assert {m["partition"]: m["epoch"] for m in view["map"] if m["nodeId"] == name} == held
    assert (await c.call("b", "GET", "/admin/cluster")).status_code == 403  # an app key


async def test_swf_polls_and_answers_reach_the_execution_on_another_node(cluster: Cluster) -> None:
    c = cluster
    on_a, on_b = (Swf(c.nodes[n].running, Path()).client() for n in ("a", "b"))
    await register(on_a)
    await register_activity(on_a)
    got: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:

        async def decider() -> None:
            got.append(await call(on_b.poll_for_decision_task, domain="d", taskList={"name": "deciders"}))

        nursery.start_soon(decider)
        await until(lambda: c.nodes["b"].engine.queues.waiting_pollers() == 1)
        began = trio.current_time()
        started = await call(on_a.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF)
        run_id = started["runId"]
        c.own(swf_actor_id("us-east-1", run_id), "a")
    assert trio.current_time() - began < 20  # woken at once, not at the poll's 60 s
    task = got[0]
    assert task["workflowExecution"] == {"workflowId": "o-1", "runId": run_id}
    assert [e["eventType"] for e in task["events"]][-1] == "DecisionTaskStarted"
    # Answers sent to b go to the execution's actor on a (the SigV4 signature still verifies).
    await call(on_b.respond_decision_task_completed, taskToken=task["taskToken"], decisions=[schedule("a1")])
    work = await call(
        on_b.poll_for_activity_task, domain="d", taskList={"name": "workers"}
    )  # the backlog on a
    assert work["activityId"] == "a1"
    beat = await call(on_b.record_activity_task_heartbeat, taskToken=work["taskToken"])
    assert beat == {"cancelRequested": False, "ResponseMetadata": beat["ResponseMetadata"]}
    await call(on_b.signal_workflow_execution, domain="d", workflowId="o-1", signalName="poke")
    await call(on_b.respond_activity_task_completed, taskToken=work["taskToken"], result="ok")
    assert c.nodes["b"].engine.pull.remote_claims == 2
    assert c.nodes["b"].engine.forwarder.forwarded == 2 + 4  # the two claims, the four answers
    actor = swf_actor_id("us-east-1", run_id)
    assert actor in c.nodes["a"].engine.supervisor.actors
    assert actor not in c.nodes["b"].engine.supervisor.actors
    events = await history(on_b, "o-1", run_id)  # a read: b serves it from the database
    kept = ("ActivityTaskStarted", "WorkflowExecutionSignaled", "ActivityTaskCompleted")
    assert [e for e in events if e in kept] == list(kept)


async def test_an_execution_messages_one_that_lives_on_another_node(cluster: Cluster) -> None:
    c = cluster
    on_a = Swf(c.nodes["a"].running, Path()).client()
    await register(on_a)
    run_id = (await call(on_a.start_workflow_execution, domain="d", workflowId="o-1", workflowType=WF))[
        "runId"
    ]
    actor = swf_actor_id("us-east-1", run_id)
    c.own(actor, "a")
    b = c.nodes["b"].engine
    # What b's runtime does with a message for an actor it does not own (a signal from a parent).
    signal = Envelope(m.Signal("from-b", "hello"))
    assert b.remote_tell(b.swf.kind, actor, signal) is True
    await until(lambda: b.remote_tell.sent == 1)
    with trio.fail_after(10):  # a's actor commits it on its own, after a answered b
        while "WorkflowExecutionSignaled" not in await history(on_a, "o-1", run_id):  # noqa: ASYNC110
            await trio.sleep(0.05)
    assert actor not in b.supervisor.actors
    # The owner refuses a message for an actor it does not own (it moved meanwhile).
    c.nodes["a"].placement.owners[actor] = "b"
    raw = json.dumps({"kind": "swf", "actorId": actor, "message": tell.encode(m.Signal("x"))}).encode()
    at = hop.sign(b.forwarder.key, "b", b.clock.now(), "POST", "/internal/tell", raw)
    r = await c.nodes["a"].client.post(
        "/internal/tell", content=raw, headers={hop.HEADER: at, "content-type": "application/json"}
    )
    assert r.status_code == 503 and r.json()["error"]["code"] == "not_owner"
    bad = json.dumps({"kind": "swf", "actorId": actor, "message": {"type": "PollDecision"}}).encode()
    at = hop.sign(b.forwarder.key, "b", b.clock.now(), "POST", "/internal/tell", bad)
    r = await c.nodes["a"].client.post(
        "/internal/tell", content=bad, headers={hop.HEADER: at, "content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "message"
    assert (await c.call("a", "POST", "/internal/tell", json.loads(raw))).status_code == 401


BAD_BODIES = [
    ("/internal/claim", b"{not json", None),
    ("/internal/claim", b'{"kind": "tasks", "app": "orders", "queue": "work", "surprise": 1}', "surprise"),
    ("/internal/claim", b'{"kind": "tasks", "app": "orders", "queue": "work", "maxTasks": "1"}', "maxTasks"),
    ("/internal/claim", b'{"kind": "tasks", "app": "orders", "queue": "w o r k"}', "queue"),
    ("/internal/claim", b'{"kind": "tasks", "app": "orders", "queue": "work", "maxTasks": 101}', "maxTasks"),
    ("/internal/claim", b'{"kind": "mail"}', "kind"),
    ("/internal/claim", b'{"kind": "swf", "region": "us-east-1", "task": "decision", "body": {}}', "body"),
    ("/internal/intervene", b'{"app": "orders", "runId": "r", "verb": "explode"}', "verb"),
    ("/internal/intervene", b'{"app": "orders", "verb": "pause"}', "runId"),
    ("/internal/migrate", b'{"app": "orders", "workflow": "q", "runId": "r"}', "toVersion"),
    ("/internal/migrate", b'{"app": "orders", "workflow": "q", "runId": "r", "toVersion": 9}', "toVersion"),
    ("/internal/migrate", b'{"app": "orders", "workflow": "q q", "runId": "r", "toVersion": 1}', "workflow"),
    ("/internal/tell", b'{"kind": "nope", "actorId": "x", "message": {}}', "kind"),
]


async def test_node_to_node_calls_refuse_bad_bodies_and_change_nothing(cluster: Cluster) -> None:
    c = cluster
    run_id = await start(c, "a", "q")
    b = c.nodes["b"].engine.forwarder
    for path, body, field in BAD_BODIES:
        signed = hop.sign(b.key, "b", c.nodes["b"].engine.clock.now(), "POST", path, body)
        r = await c.nodes["a"].client.post(
            path, content=body, headers={hop.HEADER: signed, "content-type": "application/json"}
        )
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"].get("field") == field
    assert c.nodes["a"].engine.queues.depth(c.app, "work") == 1  # the offer is still there
    run = (await c.call("a", "GET", f"/apps/{c.app}/runs/{run_id}")).json()
    assert run["status"] == "running" and run["currentStep"] == "t"


async def test_a_console_intervention_on_another_node_is_made_by_the_owner(cluster: Cluster) -> None:
    c = cluster
    run_id = await start(c, "a", "w")
    browser = c.nodes[
        "b"
    ].client  # the console session (a cookie made from the admin token) works on any node
    page = await browser.get("/console/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    r = await browser.post(
        "/console/login", data={"token": ADMIN, "csrf": csrf.group(1), "next": "/console/"}
    )
    assert r.status_code == 303, r.text
    page = await browser.get(f"/console/apps/{c.app}/runs/{run_id}")  # a read: b serves it
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    r = await browser.post(
        f"/console/apps/{c.app}/runs/{run_id}/cancel", data={"csrf": csrf.group(1), "confirm": "yes"}
    )
    assert r.status_code == 303, r.text
    assert r.headers["location"] == f"/console/apps/{c.app}/runs/{run_id}?done=cancel"
    assert c.nodes["b"].engine.forwarder.forwarded == 1
    run = (await c.call("b", "GET", f"/apps/{c.app}/runs/{run_id}")).json()
    assert run["status"] == "cancelled"


async def test_a_childs_close_reaches_a_parent_that_lives_on_another_node(cluster: Cluster) -> None:
    """A child's close is a message with no caller: when its parent lives elsewhere (its
    partition moved since the child started) it travels by `/internal/tell`, JSON output and all."""
    from foliot.core.workflow import machine

    c = cluster
    for workflow in (
        {"name": "child", "steps": [{"name": "w", "type": "wait", "signal": "go"}]},
        {"name": "parent", "steps": [{"name": "c", "type": "run", "workflow": "child"}]},
    ):
        r = await c.call("a", "POST", f"/apps/{c.app}/workflows", workflow)
        assert r.status_code in (200, 201), r.text
    parent_id = await start(c, "a", "parent")
    parent = await c.nodes["a"].engine.runs.document(parent_id)
    assert parent.fan is not None
    child_id = parent.fan.open[0].run_id
    child = await c.nodes["a"].engine.runs.document(child_id)
    assert child.parent is not None
    b = c.nodes["b"].engine
    closed = machine.ChildRunClosed(child_id, child.parent, "completed", {"tracking": ["T", 1]}, None)
    assert b.remote_tell(b.runs.kind, parent_id, Envelope(closed)) is True
    await until(lambda: b.remote_tell.sent == 1)
    done = await c.nodes["a"].engine.runs.wait_for(parent_id, lambda r: r.status == "completed")
    assert done.state["c"] == {"tracking": ["T", 1]}
    assert parent_id not in b.supervisor.actors


async def test_two_nodes_never_exceed_a_concurrency_limit_together(cluster: Cluster) -> None:
    c = cluster
    limited = {
        "name": "limited",
        "concurrency": {"limit": 2, "key": "input.k"},
        "steps": [{"name": "hold", "type": "wait", "signal": "go"}],
    }
    r = await c.call("a", "POST", f"/apps/{c.app}/workflows", limited)
    assert r.status_code in (200, 201), r.text
    ids: list[str] = []

    async def one(node: str) -> None:
        r = await c.call(node, "POST", f"/apps/{c.app}/runs", {"workflow": "limited", "input": {"k": "x"}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["runId"])

    async with trio.open_nursery() as starts:  # both nodes at once
        for i in range(8):
            starts.start_soon(one, "ab"[i % 2])

    async def counts() -> dict[str, int]:
        out: dict[str, int] = {}
        for run_id in ids:
            status = (await c.call("a", "GET", f"/apps/{c.app}/runs/{run_id}")).json()["status"]
            out[status] = out.get(status, 0) + 1
        return out

    assert await counts() == {"waiting": 2, "queued": 6}
    for _ in range(3):  # free slots one by one, through either node: still never more than 2
        active = [
            i
            for i in ids
            if (await c.call("b", "GET", f"/apps/{c.app}/runs/{i}")).json()["status"] == "waiting"
        ]
        [head] = await c.nodes["a"].engine.store.queue_heads(c.app, "limited/x", 1)
        r = await c.call("b", "POST", f"/apps/{c.app}/signals", {"runId": active[0], "name": "go"})
        assert r.status_code == 202, r.text
        # The oldest queued run takes the freed slot, on whichever node owns it.
        owner = next(n.engine for n in c.nodes.values() if n.engine.ownership.accepts(head))
        await owner.runs.wait_for(head, lambda run: run.status == "waiting")
        assert (await counts()).get("waiting") == 2
    assert await counts() == {"completed": 3, "waiting": 2, "queued": 3}


async def test_a_schedule_owned_by_another_node_is_reached_through_it(cluster: Cluster) -> None:
    c = cluster
    c.own("sched:orders:nightly", "a")
    base = f"/apps/{c.app}/schedules/nightly"
    made = await c.call("b", "PUT", base, {"workflow": "w", "every": "1h", "overlap": "allow"})
    assert made.status_code == 201, made.text
    assert c.nodes["b"].engine.forwarder.forwarded == 1
    assert "sched:orders:nightly" in c.nodes["a"].engine.supervisor.actors
    assert "sched:orders:nightly" not in c.nodes["b"].engine.supervisor.actors
    fired = await c.call("b", "POST", f"{base}/trigger", {})
    assert fired.status_code == 200 and fired.json()["outcome"] == "started", fired.text
    paused = await c.call("b", "POST", f"{base}/pause", {"reason": "r"})
    assert paused.status_code == 200 and paused.json()["paused"] is True
    shown = await c.call("b", "GET", base)  # a read: served by b itself
    assert shown.json()["lastFires"][0]["runId"] == fired.json()["runId"]
    assert c.nodes["b"].engine.forwarder.forwarded == 3
    c.own("sched:orders:nightly", None)
    unowned = await c.call("b", "POST", f"{base}/unpause", {})
    assert unowned.status_code == 503 and unowned.headers["retry-after"] == "1"


async def test_a_migrate_page_moves_each_run_where_it_lives(cluster: Cluster) -> None:
    c = cluster
    on_a = sorted([await start(c, "a", "w") for _ in range(2)])
    on_b = await start(c, "b", "w")
    renamed = {
        "name": "w",
        "steps": [{"name": "w2", "type": "wait", "signal": "go"}, {"name": "t", "type": "task"}],
    }
    r = await c.call("a", "POST", f"/apps/{c.app}/workflows", renamed)
    assert r.status_code in (200, 201), r.text
    path = f"/apps/{c.app}/workflows/w/migrate"
    # Stranded without a stepMap entry: refused, by the owner for the runs on a.
    r = await c.call("b", "POST", path, {"toVersion": 2})
    assert r.status_code == 200, r.text
    assert r.json()["migrated"] == 0
    assert sorted((x["runId"], x["code"]) for x in r.json()["refused"]) == sorted(
        (run_id, "stranded") for run_id in [*on_a, on_b]
    )
    r = await c.call("b", "POST", path, {"toVersion": 2, "stepMap": {"w": "w2"}, "reason": "rename"})
    assert r.status_code == 200, r.text
    assert r.json() == {"matched": 3, "migrated": 3, "skipped": 0, "refused": [], "cursor": None}
    for run_id in on_a:
        state = c.nodes["a"].engine.supervisor.actors[run_id].state
        assert (state.version, state.current_step) == (2, "w2")
        assert run_id not in c.nodes["b"].engine.supervisor.actors
    assert c.nodes["b"].engine.supervisor.actors[on_b].state.version == 2
    again = await c.call("a", "POST", path, {"toVersion": 2, "stepMap": {"w": "w2"}})
    assert again.json() == {"matched": 3, "migrated": 0, "skipped": 3, "refused": [], "cursor": None}
    # The node-to-node call refuses anyone without a node's hop header.
    body = {"app": c.app, "workflow": "w", "runId": on_b, "toVersion": 1}
    assert (await c.call("b", "POST", "/internal/migrate", body)).status_code == 401


async def test_a_bulk_redrive_reports_a_compensated_run_of_another_node_as_refused(cluster: Cluster) -> None:
    c = cluster
    saga = {
        "name": "saga",
        "steps": [
            {"name": "charge", "type": "task", "retry": {"maxAttempts": 1}, "onFailure": "refund"},
            {"name": "refund", "type": "task", "next": "$fail"},
        ],
    }
    assert (await c.call("a", "POST", f"/apps/{c.app}/workflows", saga)).status_code == 201
    c.handler.route("charge", lambda b, h: answer_json({"error": {"class": "card_declined"}}, 400))
    run_id = await start(c, "a", "saga")
    await c.nodes["a"].engine.runs.wait_for(run_id, lambda r: r.status == "failed")
    r = await c.call("b", "POST", f"/apps/{c.app}/runs/redrive", {"workflow": "saga", "status": "failed"})
    assert r.status_code == 200, r.text
    refused = r.json()["refused"]
    assert (r.json()["redriven"], r.json()["skipped"]) == (0, 0)
    assert [(x["runId"], x["step"], x["code"]) for x in refused] == [(run_id, "refund", "compensated")]
    assert "'charge'" in refused[0]["message"] and "rewind" in refused[0]["message"]
    assert len(c.handler.keys("refund")) == 1
