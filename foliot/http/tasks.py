"""Pull workers and out-of-band answers: long-poll, complete, heartbeat."""

from __future__ import annotations

from functools import partial
from typing import Any

import attrs
import trio
from quart import Blueprint, Response

from ..actors.dispatcher import task_body
from ..actors.pull import long_poll
from ..core.errors import Conflict, InvalidRequest, NotFound
from ..core.workflow import machine
from ..core.workflow.model import TaskRow
from .app import (
    Call,
    EmptyBody,
    body,
    check_name,
    decode_json,
    engine,
    json_response,
    parse,
    quart_call,
    require_app,
    require_app_call,
)
from .runs import rejected_error
from .services import Services

blueprint = Blueprint("tasks", __name__)

MAX_WAIT_SECONDS = 60
MAX_TASKS = 100


@attrs.frozen
class PollBody:
    queue: str
    wait_seconds: float = 30
    max_tasks: int = 1
    worker_id: str | None = None


@attrs.frozen
class CompleteBody:
    output: Any = None
    next: str | None = None
    error: dict[str, Any] | None = None


def _failure(raw: dict[str, Any]) -> machine.Failed:
    unknown = set(raw) - {"class", "message", "retryable"}
    if unknown:
        raise InvalidRequest("unknown field", field=f"error.{sorted(unknown)[0]}")
    cls = raw.get("class")
    if not isinstance(cls, str) or not 1 <= len(cls) <= 128:
        raise InvalidRequest("expected an error class name (1..128 characters)", field="error.class")
    message = raw.get("message", "")
    if not isinstance(message, str):
        raise InvalidRequest("expected a string", field="error.message")
    retryable = raw.get("retryable", True)
    if not isinstance(retryable, bool):
        raise InvalidRequest("expected true or false", field="error.retryable")
    return machine.Failed(cls, message[:2048], retryable)


@blueprint.post("/apps/<app_name>/tasks/poll")
async def poll(app_name: str) -> Response:
    await require_app(app_name)
    spec = await body(PollBody)
    check_name(spec.queue, "queue")
    if not 0 <= spec.wait_seconds <= MAX_WAIT_SECONDS:
        raise InvalidRequest(f"must be 0..{MAX_WAIT_SECONDS}", field="waitSeconds")
    if not 1 <= spec.max_tasks <= MAX_TASKS:
        raise InvalidRequest(f"must be 1..{MAX_TASKS}", field="maxTasks")
    if spec.worker_id is not None and len(spec.worker_id) > 256:
        raise InvalidRequest("is longer than 256 characters", field="workerId")
    eng = engine()
    until = trio.current_time() + spec.wait_seconds
    eng.queues.polled(app_name, spec.queue, spec.worker_id, eng.clock.now())
    here = partial(claim_here, eng, app_name, spec.queue, spec.max_tasks, spec.worker_id)
    request = {
        "kind": "tasks", "app": app_name, "queue": spec.queue, "maxTasks": spec.max_tasks,
        "workerId": spec.worker_id,
    }  # fmt: skip
    tasks = await long_poll(eng.pull, (app_name, spec.queue), until, here, request)
    return json_response({"tasks": tasks or []})


async def claim_here(
    eng: Services, app_name: str, queue: str, count: int, worker_id: str | None, wait_until: float
) -> list[dict[str, Any]] | None:
    """Up to `count` tasks claimed from this node's queue by `wait_until` (Trio time), as the
    poll answers them; None when none came. Another node's poll calls this through
    `/internal/claim` (`foliot.actors.pull`)."""
    claimed = await eng.runs.claim_queued(app_name, queue, count, wait_until, worker_id)
    return [task_body(run, task) for run, task in claimed] or None


async def _task(eng: Services, app_name: str, token: str) -> TaskRow:
    row = await eng.store.get_task(token) if len(token) <= 128 else None
    if row is None or row.app != app_name:
        raise NotFound("unknown task token")
    return row


def _closed(row: TaskRow) -> Conflict:
    return Conflict(f"the task is closed ({row.close_reason})", code="task_closed")


@blueprint.post("/apps/<app_name>/tasks/<token>/complete")
async def complete(app_name: str, token: str) -> Response:
    answer, status = await complete_call(quart_call(), app_name, token)
    return json_response(answer, status)


async def complete_call(call: Call, app_name: str, token: str) -> tuple[dict[str, Any], int]:
    """`POST /apps/{app}/tasks/{token}/complete`, served by Quart or by the ASGI edge
    (foliot/http/hot.py)."""
    eng = call.engine
    await require_app_call(call, app_name)
    spec = parse(decode_json(await call.body(), empty_ok=True), CompleteBody)
    outcome: machine.Outcome
    if spec.error is not None:
        if spec.output is not None or spec.next is not None:
            raise InvalidRequest("give either output (and next) or error", field="error")
        outcome = _failure(spec.error)
    else:
        if spec.next is not None and not isinstance(spec.next, str):
            raise InvalidRequest("expected a step name", field="next")
        outcome = machine.Completed(spec.output, spec.next)
    row = await _task(eng, app_name, token)
    if row.status != "open":
        raise _closed(row)
    reply, run = await eng.runs.ask(row.run_id, machine.TaskAnswer(token, outcome, via_api=True))
    if isinstance(reply, machine.Rejected):
        raise rejected_error(reply)
    assert run is not None
    return {"runId": run.run_id, "status": run.status}, 200


@blueprint.post("/apps/<app_name>/tasks/<token>/heartbeat")
async def heartbeat(app_name: str, token: str) -> Response:
    answer, status = await heartbeat_call(quart_call(), app_name, token)
    return json_response(answer, status)


async def heartbeat_call(call: Call, app_name: str, token: str) -> tuple[dict[str, Any], int]:
    """`POST /apps/{app}/tasks/{token}/heartbeat`, served by Quart or by the ASGI edge."""
    eng = call.engine
    await require_app_call(call, app_name)
    parse(decode_json(await call.body(), empty_ok=True), EmptyBody)
    row = await _task(eng, app_name, token)
    if row.status == "open":
        reply, _ = await eng.runs.ask(row.run_id, machine.Heartbeat(token))
        if isinstance(reply, machine.Ok):
            return {"cancelRequested": False}, 200
        if reply.code != "task_closed":
            raise rejected_error(reply)
        row = await _task(eng, app_name, token)
    if row.close_reason in ("cancelled", "superseded"):
        return {"cancelRequested": True}, 200
    raise _closed(row)
