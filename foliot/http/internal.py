"""Node-to-node calls (several nodes on one PostgreSQL): only for requests carrying an authentic
hop header (`foliot.cluster.hop`), i.e. sent by another node of the cluster; anyone else gets 401.

`POST /internal/intervene`: one run of a bulk intervention (pause, unpause, cancel, redrive)
made on another node, whose page held a run owned here.

`POST /internal/migrate`: one run of a migrate page (`POST …/workflows/{name}/migrate`) made on
another node, whose page held a run owned here: `{"outcome": "migrated" | "already"}` or
`{"refused": {"code", "message"}}`, what the page reports for it.

`POST /internal/tell`: a message from an actor on another node to one that lives here
(`foliot.cluster.tell`).

`POST /internal/claim`: claim from this node's pull queue without waiting, for a long poll on
another node (`foliot.actors.pull`). The body names the poll: `{"kind": "tasks", "app",
"queue", "maxTasks", "workerId"}` (a Foliot queue) or `{"kind": "swf", "region", "task":
"decision" | "activity", "body": <the SWF poll's request>}`; the answer is `{"answer": ...}`,
what the poll would answer (the tasks, or the SWF task), or null when nothing was offered here.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio
from quart import Blueprint, Response

from ..actors.messages import Envelope
from ..actors.placement import Elsewhere, Local, NotOwner
from ..cluster import tell as remote
from ..core.errors import InvalidRequest, NotFound, Unauthorized
from ..core.swf import shapes
from ..core.swf.errors import SwfFault
from ..core.workflow import machine
from ..kinds.swf import writes
from ..kinds.swf.registry import Ctx
from . import bulk
from .app import check_name, decode_json, engine, json_response, parse
from .forward import quart_incoming
from .tasks import MAX_TASKS, claim_here

blueprint = Blueprint("internal", __name__)


@attrs.frozen
class ClaimBody:
    kind: str
    app: str | None = None
    queue: str | None = None
    max_tasks: int = 1
    worker_id: str | None = None
    region: str | None = None
    task: str | None = None
    body: dict[str, Any] | None = None


@attrs.frozen
class InterveneBody:
    app: str
    run_id: str
    verb: str
    reason: str | None = None


async def from_a_node() -> bytes:
    """The body of a request another node sent (401 without an authentic hop header)."""
    eng = engine()
    incoming = await quart_incoming()
    if eng.forwarder is None or eng.forwarder.hop_from(incoming) is None:
        raise Unauthorized("node-to-node calls only: no authentic Foliot-Hop header")
    return incoming.body


@blueprint.post("/internal/intervene")
async def intervene() -> Response:
    """One run of a bulk intervention made on another node: `{"done": true}` when applied,
    false when the run's status did not allow it (as a bulk page counts it: skipped), with
    `refused: {code, message}` when it was refused for another reason (`bulk.outcome_of`)."""
    spec = parse(decode_json(await from_a_node()), InterveneBody)
    check_name(spec.app, "app")
    if spec.verb not in bulk.VERBS:
        raise InvalidRequest(f"must be one of {sorted(bulk.VERBS)}", field="verb")
    if len(spec.run_id) > 64:
        raise InvalidRequest("is longer than 64 characters", field="runId")
    eng = engine()
    run = await eng.runs.document(spec.run_id)
    if run is None or run.app != spec.app:
        raise NotFound(f"run {spec.run_id!r} not found")
    try:
        reply, _ = await eng.runs.ask(spec.run_id, bulk.VERBS[spec.verb][0](spec.reason), run)
    except Elsewhere as elsewhere:
        raise NotOwner(
            f"this node does not own run {spec.run_id} (node {elsewhere.owner.node_id} does)"
        ) from None
    done, refusal = bulk.outcome_of(reply)
    return json_response({"done": done, "refused": refusal} if refusal is not None else {"done": done})


@attrs.frozen
class MigrateOneBody:
    app: str
    workflow: str
    run_id: str
    to_version: int
    step_map: dict[str, str] | None = None
    reason: str | None = None


@blueprint.post("/internal/migrate")
async def migrate_one() -> Response:
    """One run of a migrate page made on another node (that node checked the request; the
    target version is read here from the same database)."""
    spec = parse(decode_json(await from_a_node()), MigrateOneBody)
    check_name(spec.app, "app")
    check_name(spec.workflow, "workflow")
    if len(spec.run_id) > 64:
        raise InvalidRequest("is longer than 64 characters", field="runId")
    eng = engine()
    target = await eng.directory.maybe_definition(spec.app, spec.workflow, spec.to_version)
    if target is None:
        raise InvalidRequest(
            f"workflow {spec.workflow!r} has no version {spec.to_version}", field="toVersion"
        )
    run = await eng.runs.document(spec.run_id)
    if run is None or run.app != spec.app or run.workflow != spec.workflow:
        raise NotFound(f"run {spec.run_id!r} not found")
    pairs = tuple(sorted((spec.step_map or {}).items()))
    message = machine.Migrate(target, spec.to_version, pairs, spec.reason)
    try:
        reply, _ = await eng.runs.ask(spec.run_id, message, run)
    except Elsewhere as elsewhere:
        raise NotOwner(
            f"this node does not own run {spec.run_id} (node {elsewhere.owner.node_id} does)"
        ) from None
    if isinstance(reply, machine.Rejected):
        return json_response({"refused": {"code": reply.code, "message": reply.message}})
    return json_response({"outcome": "already" if reply.value == "already" else "migrated"})


@attrs.frozen
class TellBody:
    kind: str
    actor_id: str
    message: dict[str, Any]


@blueprint.post("/internal/tell")
async def tell() -> Response:
    """A message from an actor on another node to one that lives here (`foliot.cluster.tell`),
    put in its mailbox as a local tell would; 503 `not_owner` when it does not live here."""
    spec = parse(decode_json(await from_a_node()), TellBody)
    eng = engine()
    kind = eng.kinds.get(spec.kind)
    if kind is None:
        raise InvalidRequest(f"must be one of {sorted(eng.kinds)}", field="kind")
    try:
        message = remote.decode(spec.message)
    except remote.Undecodable as exc:
        raise InvalidRequest(str(exc), field="message") from None
    if not isinstance(eng.placement.where(spec.actor_id), Local):
        raise NotOwner(f"{spec.kind} {spec.actor_id} does not live on this node")
    eng.tell_or_retry(kind, spec.actor_id, Envelope(message))
    return json_response({"told": True})


@blueprint.post("/internal/claim")
async def claim() -> Response:
    eng = engine()
    spec = parse(decode_json(await from_a_node()), ClaimBody)
    now = trio.current_time()
    answer: Any
    if spec.kind == "tasks":
        if spec.app is None or spec.queue is None:
            raise InvalidRequest("a tasks claim names app and queue", field="queue")
        check_name(spec.app, "app")
        check_name(spec.queue, "queue")
        if not 1 <= spec.max_tasks <= MAX_TASKS:
            raise InvalidRequest(f"must be 1..{MAX_TASKS}", field="maxTasks")
        answer = await claim_here(eng, spec.app, spec.queue, spec.max_tasks, spec.worker_id, now)
    elif spec.kind == "swf":
        if spec.region is None or spec.task not in ("decision", "activity") or spec.body is None:
            raise InvalidRequest("an SWF claim names region, task (decision|activity) and body", field="task")
        try:
            shapes.validate(
                "PollForDecisionTask" if spec.task == "decision" else "PollForActivityTask", spec.body
            )
        except SwfFault as fault:
            raise InvalidRequest(fault.message, field="body") from None
        ctx = Ctx(eng.store, eng.clock.now(), spec.region, eng.swf)
        answer = await writes.poll_here(ctx, spec.body, spec.task, now)
    else:
        raise InvalidRequest("must be tasks or swf", field="kind")
    return json_response({"answer": answer})
