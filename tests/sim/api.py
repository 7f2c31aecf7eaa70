"""What the HTTP routes do with a request, on a node, minus HTTP: the simulation's clients call
these (foliot/http/runs.py, signals.py, tasks.py make the same calls in the same order)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import trio

from foliot.core.errors import Conflict, NotFound
from foliot.core.views import run_view
from foliot.core.workflow import machine
from foliot.core.workflow.model import Run, TaskRef
from foliot.http.runs import rejected_error
from foliot.kinds.run.signal_start import SignalStart, signal_with_start
from foliot.node import Node

from .store import APP


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


async def start(
    node: Node,
    workflow: str,
    input: Any,
    business_key: str | None,
    idempotency_key: str | None,
    priority: int | None = None,
) -> dict[str, Any]:
    """`POST /apps/{app}/runs`: the body, with `created` (False: a replay of the first answer)."""
    digest = request_hash({"workflow": workflow, "input": input, "businessKey": business_key})
    body, created = await node.runs.start(
        app=APP,
        workflow=workflow,
        version=None,
        input=input,
        business_key=business_key,
        run_timeout_ms=None,
        idempotency_key=idempotency_key,
        request_hash=digest,
        render=run_view,
        **({"priority": priority} if priority is not None else {}),
    )
    return {**body, "created": created}


async def signal_start(
    node: Node,
    workflow: str,
    business_key: str,
    signal: machine.SignalIn,
    input: Any,
    idempotency_key: str | None,
) -> dict[str, Any]:
    """`POST /apps/{app}/signals` with `startIfMissing`: `{runId, status, started}`."""
    digest = request_hash(
        {"workflow": workflow, "businessKey": business_key, "name": signal.name, "input": input}
    )
    request = SignalStart(APP, workflow, business_key, signal, input, None, idempotency_key, digest)
    return await signal_with_start(node.runs, request)


async def _owned(node: Node, run_id: str) -> Run:
    run = await node.runs.document(run_id)
    if run is None or run.app != APP:
        raise NotFound(f"run {run_id!r} not found")
    return run


async def signal(
    node: Node,
    run_id: str | None,
    name: str,
    signal_id: str | None,
    by_key: tuple[str, str] | None = None,
    known: Run | None = None,
) -> dict[str, Any]:
    """`POST /apps/{app}/signals` by runId (or workflow + businessKey); `known`: the run as a
    caller read it earlier (a stale seed the actor must catch), else read now as the route does."""
    if by_key is not None:
        run = await node.store.find_open_run(APP, *by_key)
        if run is None:
            raise NotFound(f"no open run of {by_key[0]!r} with businessKey {by_key[1]!r}")
    else:
        assert run_id is not None
        run = await _owned(node, run_id)
    if known is not None and known.run_id == run.run_id:
        run = known
    reply, _ = await node.runs.ask(run.run_id, machine.SignalIn(name, {"from": signal_id}, signal_id), run)
    if isinstance(reply, machine.Rejected):
        raise rejected_error(reply)
    return {"runId": run.run_id, "status": reply.value}


async def intervene(node: Node, run_id: str, message: machine.Message) -> dict[str, Any]:
    """`POST /apps/{app}/runs/{id}/cancel` (or `redrive`)."""
    known = await _owned(node, run_id)
    reply, run = await node.runs.ask(run_id, message, known)
    if isinstance(reply, machine.Rejected):
        raise rejected_error(reply)
    assert run is not None
    return {"runId": run_id, "status": run.status, "generation": run.generation}


async def complete(node: Node, token: str, output: Any, error: str | None = None) -> dict[str, Any]:
    """`POST /apps/{app}/tasks/{token}/complete` with `output` (or a retryable `error` class)."""
    row = await node.store.get_task(token)
    if row is None or row.app != APP:
        raise NotFound("unknown task token")
    if row.status != "open":
        raise Conflict(f"the task is closed ({row.close_reason})", code="task_closed")
    outcome: machine.Outcome = machine.Completed(output)
    if error is not None:
        outcome = machine.Failed(error, "the worker failed", True)
    answer = machine.TaskAnswer(token, outcome, via_api=True)
    reply, run = await node.runs.ask(row.run_id, answer)
    if isinstance(reply, machine.Rejected):
        raise rejected_error(reply)
    assert run is not None
    return {"runId": run.run_id, "status": run.status}


async def heartbeat(node: Node, token: str) -> dict[str, Any]:
    """`POST /apps/{app}/tasks/{token}/heartbeat`."""
    row = await node.store.get_task(token)
    if row is None or row.app != APP:
        raise NotFound("unknown task token")
    if row.status == "open":
        reply, _ = await node.runs.ask(row.run_id, machine.Heartbeat(token))
        if isinstance(reply, machine.Ok):
            return {"cancelRequested": False}
        if reply.code != "task_closed":
            raise rejected_error(reply)
        row = await node.store.get_task(token)
        assert row is not None
    if row.close_reason in ("cancelled", "superseded"):
        return {"cancelRequested": True}
    raise Conflict(f"the task is closed ({row.close_reason})", code="task_closed")


async def poll(
    node: Node, queue: str, count: int, wait_s: float, worker_id: str
) -> list[tuple[Run, TaskRef]]:
    """`POST /apps/{app}/tasks/poll` on one node: the tasks claimed (a long poll)."""
    return await node.runs.claim_queued(APP, queue, count, trio.current_time() + wait_s, worker_id)
