"""Signals: events from the world, delivered to a waiting run or buffered (never dropped)."""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
from quart import Blueprint, Response

from ..actors.admission import Ticket
from ..core.errors import InvalidRequest, NotFound
from ..core.workflow import machine
from ..core.workflow.definition import canonical_json
from ..kinds.run.signal_start import SignalStart, signal_with_start
from ..kinds.run.signals import refuse_unknown_signal
from .app import Call, check_name, decode_json, json_response, parse, quart_call, require_app_call
from .runs import MAX_BUSINESS_KEY, MAX_IDEMPOTENCY_KEY, check_payload, rejected_error

blueprint = Blueprint("signals", __name__)

MAX_SIGNAL_ID = 255


@attrs.frozen
class StartIfMissing:
    input: Any = None
    version: int | None = None


@attrs.frozen
class SignalBody:
    name: str
    payload: Any = None
    run_id: str | None = None
    workflow: str | None = None
    business_key: str | None = None
    signal_id: str | None = None
    start_if_missing: StartIfMissing | None = None
    allow_unknown: bool = False  # buffer a name no version of the run's workflow waits for


@blueprint.post("/apps/<app_name>/signals")
async def signal(app_name: str) -> Response:
    body, status = await signal_call(quart_call(), app_name)
    return json_response(body, status)


async def signal_call(call: Call, app_name: str) -> tuple[dict[str, Any], int]:
    """`POST /apps/{app}/signals`: (response body, status), served by Quart or by the ASGI edge
    (foliot/http/hot.py); admission control as for starts."""
    eng = call.engine
    with eng.admission.admit(app_name) as ticket:
        await require_app_call(call, app_name)
        data = await call.body()
        ticket.begin()  # authenticated and read: from here it is work the gate counts
        raw = decode_json(data)
        spec = parse(raw, SignalBody)
        check_name(spec.name, "name")
        if spec.signal_id is not None and not 1 <= len(spec.signal_id) <= MAX_SIGNAL_ID:
            raise InvalidRequest(f"must be 1..{MAX_SIGNAL_ID} characters", field="signalId")
        limit = eng.settings.payload_max_bytes
        if spec.start_if_missing is not None:
            return await _signal_with_start(call, app_name, spec, raw, ticket), 202
        by_key = spec.workflow is not None or spec.business_key is not None
        if spec.run_id is not None and by_key:
            raise InvalidRequest("name the run by runId or by workflow+businessKey, not both", field="runId")
        if spec.run_id is None and (spec.workflow is None or spec.business_key is None):
            raise InvalidRequest("name the run by runId or by workflow+businessKey", field="runId")
        check_payload(spec.payload, "payload", limit)
        if spec.run_id is not None:
            run = await eng.runs.document(spec.run_id) if len(spec.run_id) <= 64 else None
            if run is None or run.app != app_name:
                raise NotFound(f"run {spec.run_id!r} not found")
        else:
            assert spec.workflow is not None and spec.business_key is not None
            check_name(spec.workflow, "workflow")
            run = await eng.store.find_open_run(app_name, spec.workflow, spec.business_key)
            if run is None:
                raise NotFound(f"no open run of {spec.workflow!r} with businessKey {spec.business_key!r}")
        if run.is_open and not spec.allow_unknown:
            await refuse_unknown_signal(eng.directory, run, spec.name)  # 422 unknown_signal
        run_id = run.run_id
        if eng.runs.busy(run_id):
            ticket.timed = False  # it waits behind its own run's messages (per-run back-pressure)
        reply, _ = await eng.runs.ask(run_id, machine.SignalIn(spec.name, spec.payload, spec.signal_id), run)
        if isinstance(reply, machine.Rejected):
            raise rejected_error(reply)
        return {"runId": run_id, "status": reply.value}, 202


async def _signal_with_start(
    call: Call, app_name: str, spec: SignalBody, raw: Any, ticket: Ticket
) -> dict[str, Any]:
    """Deliver to the open run with this business key, or start it with the signal in it."""
    start = spec.start_if_missing
    assert start is not None
    limit = call.engine.settings.payload_max_bytes
    if spec.workflow is None or spec.business_key is None or spec.run_id is not None:
        raise InvalidRequest("needs workflow and businessKey (not runId)", field="startIfMissing")
    check_payload(spec.payload, "payload", limit)
    check_name(spec.workflow, "workflow")
    if not 1 <= len(spec.business_key) <= MAX_BUSINESS_KEY:
        raise InvalidRequest(f"must be 1..{MAX_BUSINESS_KEY} characters", field="businessKey")
    if start.version is not None and start.version < 1:
        raise InvalidRequest("must be 1 or more", field="startIfMissing.version")
    check_payload(start.input, "startIfMissing.input", limit)
    key = call.idempotency_key
    if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise InvalidRequest(f"must be 1..{MAX_IDEMPOTENCY_KEY} characters", field="Idempotency-Key")
    return await signal_with_start(
        call.engine.runs,
        SignalStart(
            app=app_name,
            workflow=spec.workflow,
            business_key=spec.business_key,
            signal=machine.SignalIn(spec.name, spec.payload, spec.signal_id),
            input=start.input,
            version=start.version,
            idempotency_key=key,
            request_hash="signal-with-start:" + hashlib.sha256(canonical_json(raw).encode()).hexdigest(),
        ),
        ticket,
    )
