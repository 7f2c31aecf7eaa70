"""Workflow registration (versioned; an identical re-registration returns the existing version)."""

from __future__ import annotations

import json

from quart import Blueprint, Response, request

from ..core.errors import InvalidRequest, NotFound
from ..core.workflow.advice import child_workflows, registration_warnings
from ..core.workflow.definition import canonical_json, parse_definition
from ..core.workflow.duration import format_timestamp as ts
from ..core.workflow.jsonconv import ValidationError, is_name
from ..storage.base import WorkflowRecord
from .app import (
    check_name,
    check_query,
    engine,
    json_response,
    number,
    query_int,
    raw_json,
    reads_query,
    require_app,
)

blueprint = Blueprint("workflows", __name__)


def _view(record: WorkflowRecord, *, full: bool) -> dict[str, object]:
    view: dict[str, object] = {
        "name": record.name,
        "version": record.version,
        "createdAt": ts(record.created_at),
    }
    if full:
        view["definition"] = json.loads(record.document)
    return view


@blueprint.post("/apps/<app_name>/workflows")
async def register(app_name: str) -> Response:
    await require_app(app_name)
    raw = await raw_json()
    if not isinstance(raw, dict):
        raise InvalidRequest("the request body must be a workflow object")
    try:
        definition = parse_definition(raw)
    except ValidationError as exc:
        raise InvalidRequest(exc.message, field=exc.field or None) from None
    eng = engine()
    record, created = await eng.store.add_workflow_version(
        app_name, definition.name, canonical_json(raw), eng.clock.now()
    )
    eng.directory.forget_workflow(app_name, definition.name)
    # Valid, yet it will not do what it says (a child workflow not registered yet, a timeout the
    # synchronous push never reaches): accepted, with what to look at.
    missing = [
        (name, version)
        for name, version in child_workflows(definition)
        if await eng.directory.resolve(app_name, name, version) is None
    ]
    warnings = registration_warnings(
        definition, missing=missing, sync_task_max_ms=eng.settings.sync_task_max_ms
    )
    return json_response(
        {"name": record.name, "version": record.version, "warnings": [w.to_json() for w in warnings]},
        201 if created else 200,
    )


@blueprint.get("/apps/<app_name>/workflows")
@reads_query
async def list_workflows(app_name: str) -> Response:
    await require_app(app_name)
    check_query({"limit", "cursor"})
    limit = query_int("limit", 100, 1, 1000)
    cursor = request.args.get("cursor")
    if cursor is not None and not is_name(cursor):
        raise InvalidRequest("not a cursor this API returned", field="cursor")
    records = await engine().store.list_workflows(app_name, limit + 1, cursor)
    page = records[:limit]
    next_cursor = page[-1].name if len(records) > limit else None
    return json_response({"workflows": [_view(r, full=False) for r in page], "nextCursor": next_cursor})


@blueprint.get("/apps/<app_name>/workflows/<name>")
async def latest(app_name: str, name: str) -> Response:
    return await _one(app_name, name, None)


@blueprint.get("/apps/<app_name>/workflows/<name>/versions/<version>")
async def version(app_name: str, name: str, version: str) -> Response:
    return await _one(app_name, name, version)


async def _one(app_name: str, name: str, version_text: str | None) -> Response:
    """One version of a workflow with its definition (the latest when `version` is None)."""
    await require_app(app_name)
    check_name(name, "name")
    # Not werkzeug's `int:` converter: it takes Unicode digits and hands SQLite any size.
    version = None if version_text is None else number(version_text, "version", low=1)
    record = await engine().store.get_workflow(app_name, name, version)
    if record is None:
        which = "" if version is None else f" version {version}"
        raise NotFound(f"workflow {name!r}{which} not found")
    return json_response(_view(record, full=True))
