"""Schedules: create or replace, list, read, pause, unpause, trigger, backfill, delete.

Every write is a message to the schedule's actor (`foliot.kinds.schedule`); on another node's
schedule it is forwarded there, as a signal is. Bad input is a 400 naming the field, and
nothing is stored.
"""

from __future__ import annotations

import attrs
from quart import Blueprint, Response, request

from ..core.errors import InvalidRequest, NotFound
from ..core.schedule.definition import parse_schedule
from ..core.workflow.duration import DurationError, parse_timestamp
from ..core.workflow.jsonconv import ValidationError
from .app import (
    body,
    check_name,
    check_query,
    engine,
    json_response,
    query_int,
    raw_json,
    reads_query,
    require_app,
)
from .runs import MAX_REASON, check_payload

blueprint = Blueprint("schedules", __name__)

MAX_CURSOR = 128


@attrs.frozen
class ReasonBody:
    reason: str | None = None


@attrs.frozen
class BackfillBody:
    """`POST …/backfill` (read by hand below: `from` is a Python keyword; this names the shape
    for the API's description)."""

    from_: str
    to: str


def _reason(spec: ReasonBody) -> str | None:
    if spec.reason is not None and len(spec.reason) > MAX_REASON:
        raise InvalidRequest(f"is longer than {MAX_REASON} characters", field="reason")
    return spec.reason


@blueprint.put("/apps/<app_name>/schedules/<name>")
async def put_schedule(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    raw = await raw_json()
    try:
        schedule, paused = parse_schedule(raw)
    except ValidationError as exc:
        raise InvalidRequest(exc.message, field=exc.field or None) from None
    check_payload(schedule.input, "input")
    eng = engine()
    state, created = await eng.schedules.put(app_name, name, schedule, paused)
    return json_response(await eng.schedules.view(state, []), 201 if created else 200)


@blueprint.get("/apps/<app_name>/schedules")
@reads_query
async def list_schedules(app_name: str) -> Response:
    await require_app(app_name)
    check_query({"limit", "cursor"})
    limit = query_int("limit", 100, 1, 1000)
    cursor = request.args.get("cursor")
    if cursor is not None and (len(cursor) > MAX_CURSOR or not cursor):
        raise InvalidRequest("not a cursor this API returned", field="cursor")
    eng = engine()
    found = await eng.store.list_schedules(app_name, limit + 1, cursor)
    page = found[:limit]
    next_cursor = page[-1].name if len(found) > limit else None
    # Next fires of cron schedules are computed in worker threads: a page of rare expressions
    # costs seconds of CPU and must not hold the event loop (issue 37).
    return json_response({"schedules": await eng.schedules.views(page), "nextCursor": next_cursor})


@blueprint.get("/apps/<app_name>/schedules/<name>")
async def get_schedule(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    schedules = engine().schedules
    state = await schedules.document(app_name, name)
    if state is None:
        raise NotFound(f"schedule {name!r} not found")
    return json_response(await schedules.view(state, await schedules.last_fires(app_name, name)))


@blueprint.post("/apps/<app_name>/schedules/<name>/pause")
async def pause(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    reason = _reason(await body(ReasonBody, empty_ok=True))
    schedules = engine().schedules
    state = await schedules.pause(app_name, name, reason)
    return json_response(await schedules.view(state))


@blueprint.post("/apps/<app_name>/schedules/<name>/unpause")
async def unpause(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    reason = _reason(await body(ReasonBody, empty_ok=True))
    schedules = engine().schedules
    state = await schedules.unpause(app_name, name, reason)
    return json_response(await schedules.view(state))


@blueprint.post("/apps/<app_name>/schedules/<name>/trigger")
async def trigger(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    reason = _reason(await body(ReasonBody, empty_ok=True))
    return json_response(await engine().schedules.trigger(app_name, name, reason))


@blueprint.post("/apps/<app_name>/schedules/<name>/backfill")
async def backfill(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    raw = await raw_json()
    if not isinstance(raw, dict):
        raise InvalidRequest("the request body must be a JSON object")
    for key in raw:
        if key not in ("from", "to"):
            raise InvalidRequest("unknown field", field=str(key)[:200])
    bounds: list[int] = []
    for field in ("from", "to"):
        value = raw.get(field)
        if value is None:
            raise InvalidRequest("required", field=field)
        try:
            bounds.append(parse_timestamp(value))
        except DurationError as exc:
            raise InvalidRequest(str(exc), field=field) from None
    start, end = bounds
    if end <= start:
        raise InvalidRequest("must be later than from", field="to")
    return json_response(await engine().schedules.backfill(app_name, name, start, end))


@blueprint.delete("/apps/<app_name>/schedules/<name>")
async def delete(app_name: str, name: str) -> Response:
    await require_app(app_name)
    check_name(name, "name")
    await body(ReasonBody, empty_ok=True)
    await engine().schedules.delete(app_name, name)
    return json_response({"name": name, "deleted": True})
