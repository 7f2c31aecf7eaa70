"""The OpenAPI 3.1 document, built from the app's own routes plus the table below.

A route with no entry in `OPERATIONS` makes `document()` raise, and a test asks for the
document, so a new endpoint cannot ship undocumented.
"""

from __future__ import annotations

import re
from typing import Any

from quart import Quart

from .. import __version__
from ..core.workflow.model import STATUSES
from ..observe.metrics import SWF_CLOSE_STATUSES

NAME = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"}
DURATION = {"type": "string", "pattern": r"^(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$", "examples": ["30s"]}
ANY: dict[str, Any] = {}
REASON = {"type": "string", "maxLength": 1024}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "field": {"type": "string", "description": "the member, parameter or header at fault"},
                },
            }
        },
        ("error",),
    ),
    "AppPut": _obj(
        {"handlerBaseUrl": {"type": "string", "format": "uri"}, "description": {"type": ["string", "null"]}},
        ("handlerBaseUrl",),
    ),
    "LambdaPut": _obj({"url": {"type": "string", "format": "uri", "maxLength": 2048}}, ("url",)),
    "Rotate": _obj({"graceSeconds": {"type": "integer", "minimum": 0, "maximum": 2_592_000}}),
    "Empty": _obj({}),
    "Workflow": {"type": "object", "description": "A workflow definition (see docs/api.md)."},
    "StartRun": _obj(
        {
            "workflow": NAME,
            "version": {"type": ["integer", "null"], "minimum": 1},
            "input": ANY,
            "businessKey": {"type": ["string", "null"], "minLength": 1, "maxLength": 256},
            "runTimeout": {**DURATION, "type": ["string", "null"]},
        },
        ("workflow",),
    ),
    "Reason": _obj({"reason": {**REASON, "type": ["string", "null"]}}),
    "SchedulePut": _obj(
        {
            "workflow": NAME,
            "version": {"type": ["integer", "null"], "minimum": 1},
            "cron": {"type": ["string", "null"], "examples": ["0 9 * * 1-5", "@daily"]},
            "every": {**DURATION, "type": ["string", "null"]},
            "timezone": {"type": ["string", "null"], "examples": ["Europe/Berlin"]},
            "input": ANY,
            "overlap": {
                "type": ["string", "null"],
                "enum": ["skip", "buffer_one", "allow", "cancel_previous", None],
            },
            "catchupWindow": {**DURATION, "type": ["string", "null"]},
            "jitter": {**DURATION, "type": ["string", "null"]},
            "startAt": {"type": ["string", "null"], "format": "date-time"},
            "endAt": {"type": ["string", "null"], "format": "date-time"},
            "paused": {"type": ["boolean", "null"]},
        },
        ("workflow",),
    ),
    "Backfill": _obj(
        {"from": {"type": "string", "format": "date-time"}, "to": {"type": "string", "format": "date-time"}},
        ("from", "to"),
    ),
    "Rewind": _obj(
        {
            "toStep": NAME,
            "version": {"type": ["integer", "null"], "minimum": 1},
            "reason": {**REASON, "type": ["string", "null"]},
        },
        ("toStep",),
    ),
    "Skip": _obj({"output": ANY, "reason": {**REASON, "type": ["string", "null"]}}),
    "EditState": _obj(
        {
            "set": {"type": ["object", "null"]},
            "unset": {"type": ["array", "null"], "items": NAME},
            "reason": {**REASON, "minLength": 1},
        },
        ("reason",),
    ),
    "Bulk": _obj(
        {
            "workflow": NAME,
            "step": {**NAME, "type": ["string", "null"]},
            "status": {"type": ["string", "null"], "enum": [*sorted(STATUSES), None]},
            "version": {"type": ["integer", "null"], "minimum": 1},
            "businessKey": {"type": ["string", "null"], "minLength": 1, "maxLength": 256},
            "reason": {**REASON, "type": ["string", "null"]},
            "limit": {"type": ["integer", "null"], "minimum": 1, "maximum": 1000},
            "cursor": {"type": ["string", "null"]},
        },
        ("workflow",),
    ),
    "Signal": _obj(
        {
            "name": NAME,
            "payload": ANY,
            "runId": {"type": ["string", "null"]},
            "workflow": {**NAME, "type": ["string", "null"]},
            "businessKey": {"type": ["string", "null"]},
            "signalId": {"type": ["string", "null"], "minLength": 1, "maxLength": 255},
            "startIfMissing": {
                "type": ["object", "null"],
                "properties": {"input": ANY, "version": {"type": ["integer", "null"], "minimum": 1}},
                "additionalProperties": False,
            },
        },
        ("name",),
    ),
    "Poll": _obj(
        {
            "queue": NAME,
            "waitSeconds": {"type": "number", "minimum": 0, "maximum": 60},
            "maxTasks": {"type": "integer", "minimum": 1, "maximum": 100},
            "workerId": {"type": ["string", "null"], "maxLength": 256},
        },
        ("queue",),
    ),
    "OperatorToken": _obj(
        {
            "role": {"type": "string", "enum": ["viewer", "operator", "admin"]},
            "name": {**NAME, "type": ["string", "null"]},
        },
        ("role",),
    ),
    "Complete": _obj(
        {
            "output": ANY,
            "next": {"type": ["string", "null"]},
            "error": {
                "type": ["object", "null"],
                "properties": {
                    "class": {"type": "string"},
                    "message": {"type": "string"},
                    "retryable": {"type": "boolean"},
                },
                "required": ["class"],
                "additionalProperties": False,
            },
        }
    ),
}

# (method, path) -> (summary, request schema or None, success status, who)
OPERATIONS: dict[tuple[str, str], tuple[str, str | None, int, str]] = {
    ("PUT", "/apps/{app_name}"): ("Create or update an app", "AppPut", 200, "admin"),
    ("GET", "/apps/{app_name}"): ("Read an app", None, 200, "app"),
    ("POST", "/apps/{app_name}/api-keys"): ("Mint an API key", "Empty", 201, "admin"),
    ("DELETE", "/apps/{app_name}/api-keys/{key_id}"): ("Revoke an API key", None, 200, "admin"),
    ("POST", "/apps/{app_name}/signing-secrets"): ("Rotate the signing secret", "Rotate", 201, "admin"),
    ("POST", "/apps/{app_name}/workflows"): ("Register a workflow version", "Workflow", 201, "app"),
    ("GET", "/apps/{app_name}/workflows"): ("List workflows (latest versions)", None, 200, "app"),
    ("GET", "/apps/{app_name}/workflows/{name}"): ("Latest version of a workflow", None, 200, "app"),
    ("GET", "/apps/{app_name}/workflows/{name}/versions/{version}"): ("One version", None, 200, "app"),
    ("POST", "/apps/{app_name}/runs"): ("Start a run", "StartRun", 201, "app"),
    ("GET", "/apps/{app_name}/runs"): ("List runs", None, 200, "app"),
    ("GET", "/apps/{app_name}/runs/{run_id}"): ("Read a run", None, 200, "app"),
    ("GET", "/apps/{app_name}/runs/{run_id}/events"): ("A run's history", None, 200, "app"),
    ("GET", "/apps/{app_name}/runs/{run_id}/diagnosis"): ("Why the run is not moving", None, 200, "app"),
    ("POST", "/apps/{app_name}/runs/{run_id}/cancel"): ("Cancel a run", "Reason", 200, "app"),
    ("PUT", "/apps/{app_name}/schedules/{name}"): ("Create or replace a schedule", "SchedulePut", 201, "app"),
    ("GET", "/apps/{app_name}/schedules"): ("List schedules", None, 200, "app"),
    ("GET", "/apps/{app_name}/schedules/{name}"): ("A schedule, its next and last fires", None, 200, "app"),
    ("POST", "/apps/{app_name}/schedules/{name}/pause"): ("Pause a schedule", "Reason", 200, "app"),
    ("POST", "/apps/{app_name}/schedules/{name}/unpause"): ("Unpause a schedule", "Reason", 200, "app"),
    ("POST", "/apps/{app_name}/schedules/{name}/trigger"): ("Fire a schedule now", "Reason", 200, "app"),
    ("POST", "/apps/{app_name}/schedules/{name}/backfill"): (
        "Start a run for every scheduled time in a range",
        "Backfill",
        200,
        "app",
    ),
    ("DELETE", "/apps/{app_name}/schedules/{name}"): ("Delete a schedule", "Reason", 200, "app"),
    ("POST", "/apps/{app_name}/runs/{run_id}/redrive"): ("Redrive a failed run", "Reason", 200, "app"),
    ("POST", "/apps/{app_name}/runs/{run_id}/rewind"): ("Rewind a run", "Rewind", 200, "app"),
    ("POST", "/apps/{app_name}/runs/{run_id}/pause"): ("Pause a run", "Reason", 200, "app"),
    ("POST", "/apps/{app_name}/runs/{run_id}/unpause"): ("Unpause a paused run", "Reason", 200, "app"),
    ("POST", "/apps/{app_name}/runs/pause"): (
        "Pause the runs a filter selects (one page)",
        "Bulk",
        200,
        "app",
    ),
    ("POST", "/apps/{app_name}/runs/unpause"): (
        "Unpause the runs a filter selects (one page)",
        "Bulk",
        200,
        "app",
    ),
    ("POST", "/apps/{app_name}/runs/cancel"): (
        "Cancel the runs a filter selects (one page)",
        "Bulk",
        200,
        "app",
    ),
    ("POST", "/apps/{app_name}/runs/redrive"): (
        "Redrive the runs a filter selects (one page)",
        "Bulk",
        200,
        "app",
    ),
    ("POST", "/apps/{app_name}/runs/{run_id}/skip"): ("Skip the current step", "Skip", 200, "app"),
    ("PATCH", "/apps/{app_name}/runs/{run_id}/state"): ("Edit state keys", "EditState", 200, "app"),
    ("POST", "/apps/{app_name}/signals"): ("Signal a run", "Signal", 202, "app"),
    ("POST", "/apps/{app_name}/tasks/poll"): ("Long-poll a queue", "Poll", 200, "app"),
    ("POST", "/apps/{app_name}/tasks/{token}/complete"): ("Answer a task", "Complete", 200, "app"),
    ("POST", "/apps/{app_name}/tasks/{token}/heartbeat"): ("Extend a task", "Empty", 200, "app"),
    ("GET", "/healthz"): ("Liveness", None, 200, "none"),
    ("GET", "/readyz"): (
        "Readiness (storage reachable and taking writes, leases held, recovery done)",
        None,
        200,
        "none",
    ),
    ("GET", "/openapi.json"): ("This document", None, 200, "none"),
    ("GET", "/metrics"): ("Prometheus metrics", None, 200, "admin"),
    ("GET", "/admin/actors"): ("Live actors (runs and SWF executions)", None, 200, "admin"),
    ("GET", "/admin/actors/{run_id}"): ("One live actor with its timers", None, 200, "admin"),
    ("GET", "/admin/timers"): ("Timer wheel status", None, 200, "admin"),
    ("POST", "/"): ("AWS SWF JSON 1.0, SigV4-signed (docs/swf.md); AWS error shapes", None, 200, "none"),
    ("POST", "/admin/swf/credentials"): ("Mint an SWF access key (secret shown once)", None, 201, "admin"),
    ("GET", "/admin/swf/credentials"): ("List live SWF access keys", None, 200, "admin"),
    ("DELETE", "/admin/swf/credentials/{access_key_id}"): ("Revoke an SWF access key", None, 200, "admin"),
    ("GET", "/admin/runs/overdue"): ("Open runs pending at a step too long, grouped", None, 200, "admin"),
    ("POST", "/admin/operator-tokens"): (
        "Create an operator token (shown once)",
        "OperatorToken",
        201,
        "admin",
    ),
    ("GET", "/admin/operator-tokens"): ("List live operator tokens", None, 200, "admin"),
    ("DELETE", "/admin/operator-tokens/{token_id}"): ("Revoke an operator token", None, 200, "admin"),
    ("GET", "/admin/sessions"): ("Live console sessions, newest first", None, 200, "admin"),
    ("DELETE", "/admin/sessions/{session_id}"): ("End a console session everywhere", None, 200, "admin"),
    ("GET", "/admin/queues"): ("Pull queues on this node: tasks waiting, pollers parked", None, 200, "admin"),
    ("PUT", "/admin/lambda/{region}/{name}"): (
        "Register (201) or re-point (200) the Lambda function SWF's ScheduleLambdaFunction invokes",
        "LambdaPut",
        200,
        "admin",
    ),
    ("GET", "/admin/lambda"): ("Registered Lambda functions of every region", None, 200, "admin"),
    ("GET", "/admin/lambda/{region}"): ("Registered Lambda functions of a region", None, 200, "admin"),
    ("GET", "/admin/lambda/{region}/{name}"): ("One registered Lambda function", None, 200, "admin"),
    ("DELETE", "/admin/lambda/{region}/{name}"): ("Remove a Lambda function", None, 200, "admin"),
    ("GET", "/admin/swf/parked"): (
        "SWF executions parked after their actor crashed too often",
        None,
        200,
        "admin",
    ),
    ("POST", "/admin/swf/parked/{region}/{run_id}/resume"): (
        "Resume a parked SWF execution",
        "Empty",
        200,
        "admin",
    ),
    ("GET", "/admin/cluster"): ("Nodes sharing the database; who holds which partition", None, 200, "admin"),
    ("POST", "/internal/claim"): (
        "Node to node (Foliot-Hop header): claim from a pull queue",
        None,
        200,
        "none",
    ),
    ("POST", "/internal/intervene"): ("Node to node (Foliot-Hop header): one bulk run", None, 200, "none"),
    ("POST", "/internal/tell"): (
        "Node to node only (Foliot-Hop header): an actor's message",
        None,
        200,
        "none",
    ),
}

_LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}
_STATUS = {"type": "string", "enum": sorted(STATUSES)}
QUERY: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("GET", "/apps/{app_name}/workflows"): {"limit": _LIMIT, "cursor": {"type": "string"}},
    ("GET", "/apps/{app_name}/schedules"): {"limit": _LIMIT, "cursor": {"type": "string"}},
    ("GET", "/apps/{app_name}/runs"): {
        "workflow": NAME,
        "status": _STATUS,
        "businessKey": {"type": "string"},
        "limit": _LIMIT,
        "cursor": {"type": "string"},
    },
    ("GET", "/apps/{app_name}/runs/{run_id}/events"): {
        "after": {"type": "integer", "minimum": 0},
        "limit": _LIMIT,
        "cursor": {"type": "string"},
    },
    ("GET", "/admin/actors"): {
        "status": {"type": "string", "enum": [*sorted(STATUSES), "OPEN", *SWF_CLOSE_STATUSES]},
        "kind": {"type": "string", "enum": ["run", "swf", "schedule"]},
        "limit": _LIMIT,
    },
    ("GET", "/admin/swf/parked"): {"after": {"type": "string"}, "limit": _LIMIT},
    ("GET", "/admin/runs/overdue"): {"olderThan": DURATION, "limit": _LIMIT},
}

_PARAM = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")


def routes(app: Quart) -> set[tuple[str, str]]:
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.rule.startswith("/console"):
            continue  # the console's HTML pages are documented in docs/console.md
        path = _PARAM.sub(r"{\1}", rule.rule)
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                found.add((method, path))
    return found


def document(app: Quart) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for method, path in sorted(routes(app)):
        if (method, path) not in OPERATIONS:
            raise KeyError(f"{method} {path} is not documented in foliot/http/openapi.py")
        summary, schema, status, who = OPERATIONS[(method, path)]
        params = [
            {
                "name": p,
                "in": "path",
                "required": True,
                "schema": {"type": "integer"} if p == "version" else {"type": "string"},
            }
            for p in re.findall(r"{([a-z_]+)}", path)
        ] + [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in QUERY.get((method, path), {}).items()
        ]
        op: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method.lower()}_{re.sub(r'[^a-z]+', '_', path).strip('_')}",
            "parameters": params,
            "responses": {
                str(status): {"description": "success"},
                "default": {
                    "description": "error",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            },
        }
        if who != "none":
            op["security"] = [{"bearer": []}]
        if schema is not None:
            op["requestBody"] = {
                "required": schema not in ("Empty", "Reason", "Skip", "Rotate", "Complete"),
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
            }
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Foliot", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
