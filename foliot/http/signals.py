"""Signals: events from the world, delivered to a waiting run or buffered (never dropped)."""

from __future__ import annotations

from typing import Any

import attrs
from quart import Blueprint, Response

from ..errors import InvalidRequest, NotFound
from ..workflow import machine
from .app import body, check_name, engine, json_response, require_app
from .runs import admitted, check_payload, rejected_error

blueprint = Blueprint("signals", __name__)

MAX_SIGNAL_ID = 255


@attrs.frozen
class SignalBody:
    name: str
    payload: Any = None
    run_id: str | None = None
    workflow: str | None = None
    business_key: str | None = None
    signal_id: str | None = None


@blueprint.post("/apps/<app_name>/signals")
@admitted
async def signal(app_name: str) -> Response:
    await require_app(app_name)
    spec = await body(SignalBody)
    check_name(spec.name, "name")
    if spec.signal_id is not None and not 1 <= len(spec.signal_id) <= MAX_SIGNAL_ID:
        raise InvalidRequest(f"must be 1..{MAX_SIGNAL_ID} characters", field="signalId")
    by_key = spec.workflow is not None or spec.business_key is not None
    if spec.run_id is not None and by_key:
        raise InvalidRequest("name the run by runId or by workflow+businessKey, not both", field="runId")
    if spec.run_id is None and (spec.workflow is None or spec.business_key is None):
        raise InvalidRequest("name the run by runId or by workflow+businessKey", field="runId")
    check_payload(spec.payload, "payload")
    eng = engine()
    if spec.run_id is not None:
        run = await eng.run_document(spec.run_id) if len(spec.run_id) <= 64 else None
        if run is None or run.app != app_name:
            raise NotFound(f"run {spec.run_id!r} not found")
    else:
        assert spec.workflow is not None and spec.business_key is not None
        check_name(spec.workflow, "workflow")
        run = await eng.store.find_open_run(app_name, spec.workflow, spec.business_key)
        if run is None:
            raise NotFound(f"no open run of {spec.workflow!r} with businessKey {spec.business_key!r}")
    run_id = run.run_id
    reply, _ = await eng.ask(run_id, machine.SignalIn(spec.name, spec.payload, spec.signal_id), run)
    if isinstance(reply, machine.Rejected):
        raise rejected_error(reply)
    return json_response({"runId": run_id, "status": reply.value}, 202)
