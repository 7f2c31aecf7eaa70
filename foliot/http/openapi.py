"""The OpenAPI 3.1 document, built from the app's own routes, the models the server validates
requests with and the typed views it answers with, plus the table below.

Request bodies are the attrs classes the routes structure them into (`jsonconv`), their
schemas made by `foliot.core.shapes.schema_of` (`REFINE` adds what a type cannot say: a
name's pattern, a range); a workflow definition is `foliot.core.workflow.schema`'s (also at
`GET /schemas/workflow.json`); runs and events are the TypedDicts of `foliot.core.views`.
Every operation names its answer's schema (`RESPONSES`), and tests validate real answers
against them (tests/api/test_openapi.py). Path parameters are named as docs/api.md names
them (`{app}`, `{runId}`, ...). `/internal/*` (node to node) is not published.

A route with no entry in `OPERATIONS` makes `document()` raise, and a test asks for the
document, so a new endpoint cannot ship undocumented.
"""

from __future__ import annotations

import re
from typing import Any, Final

import attrs
from quart import Quart

from .. import __version__
from ..core.limits import LIMITS, MAX_OVERRIDE
from ..core.schedule.definition import ScheduleBody
from ..core.shapes import Refinements, schema_of
from ..core.views import EventView, RunListEntry, RunView
from ..core.workflow.jsonconv import camel
from ..core.workflow.model import STATUSES
from ..core.workflow.schema import DURATION, NAME, workflow_schemas
from ..observe.diagnosis import ATTENTION_REASONS
from ..observe.metrics import SWF_CLOSE_STATUSES
from . import apps, bulk, deploys, operators, runs, schedules, signals, swf, tasks
from .app import EmptyBody

ANY: dict[str, Any] = {}
REASON = {"type": "string", "maxLength": 1024}
TS: Final = {"type": "string", "format": "date-time"}
TS_OR_NULL: Final = {"type": ["string", "null"], "format": "date-time"}
STR_OR_NULL: Final = {"type": ["string", "null"]}
INT: Final = {"type": "integer"}
BOOL: Final = {"type": "boolean"}
STR: Final = {"type": "string"}
TRUE: Final = {"const": True}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def _answer(props: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """An answer's schema: every member always there (but the `optional` ones), no others."""
    return _obj(props, tuple(k for k in props if k not in optional))


def _list(member: str, item: dict[str, Any], cursor: str | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {member: {"type": "array", "items": item}}
    if cursor is not None:
        props[cursor] = STR_OR_NULL
    return _answer(props)


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


# What the request models' types cannot say (checked by the routes, 400 naming the field).
REFINE: Final[Refinements] = {
    (apps.AppBody, "handler_base_url"): {"format": "uri", "maxLength": 2048},
    (apps.AppBody, "description"): {"maxLength": 1024},
    (apps.RotateBody, "grace_seconds"): {"minimum": 0, "maximum": apps.MAX_GRACE_SECONDS},
    (swf.LambdaBody, "url"): {"format": "uri", "maxLength": 2048},
    (runs.StartBody, "workflow"): NAME,
    (runs.StartBody, "version"): {"minimum": 1},
    (runs.StartBody, "business_key"): {"minLength": 1, "maxLength": runs.MAX_BUSINESS_KEY},
    (runs.StartBody, "run_timeout"): DURATION,
    (runs.ReasonBody, "reason"): REASON,
    (runs.RewindBody, "to_step"): NAME,
    (runs.RewindBody, "version"): {"minimum": 1},
    (runs.RewindBody, "reason"): REASON,
    (runs.SkipBody, "reason"): REASON,
    (runs.StateBody, "reason"): {**REASON, "minLength": 1},
    (runs.StateBody, "unset"): {"items": NAME},
    (runs.StateBody, "set"): {"propertyNames": NAME},
    (bulk.BulkBody, "workflow"): NAME,
    (bulk.BulkBody, "step"): NAME,
    (bulk.BulkBody, "status"): {"enum": sorted(STATUSES)},
    (bulk.BulkBody, "version"): {"minimum": 1},
    (bulk.BulkBody, "business_key"): {"minLength": 1, "maxLength": runs.MAX_BUSINESS_KEY},
    (bulk.BulkBody, "reason"): REASON,
    (bulk.BulkBody, "limit"): {"minimum": 1, "maximum": 1000},
    (signals.SignalBody, "name"): NAME,
    (signals.SignalBody, "workflow"): NAME,
    (signals.SignalBody, "signal_id"): {"minLength": 1, "maxLength": signals.MAX_SIGNAL_ID},
    (signals.StartIfMissing, "version"): {"minimum": 1},
    (tasks.PollBody, "queue"): NAME,
    (tasks.PollBody, "wait_seconds"): {"minimum": 0, "maximum": 60},
    (tasks.PollBody, "max_tasks"): {"minimum": 1, "maximum": 100},
    (tasks.PollBody, "worker_id"): {"maxLength": 256},
    (tasks.CompleteBody, "error"): {
        "properties": {
            "class": {"type": "string", "minLength": 1, "maxLength": 128},
            "message": {"type": ["string", "null"]},
            "retryable": {"type": ["boolean", "null"]},
        },
        "required": ["class"],
        "additionalProperties": False,
    },
    (operators.TokenBody, "role"): {"enum": ["viewer", "operator", "admin"]},
    (operators.TokenBody, "name"): NAME,
    # answers
    (RunView, "status"): {"enum": sorted(STATUSES)},
    (RunView, "workflow"): NAME,
    (RunListEntry, "status"): {"enum": sorted(STATUSES)},
    (RunListEntry, "workflow"): NAME,
    (RunListEntry, "attention"): {"items": {"enum": list(ATTENTION_REASONS)}},
}

# Request bodies: the component's name -> the model the route structures the body into.
BODIES: Final[dict[str, type]] = {
    "AppPut": apps.AppBody,
    "LambdaPut": swf.LambdaBody,
    "Rotate": apps.RotateBody,
    "Empty": EmptyBody,
    "StartRun": runs.StartBody,
    "Reason": runs.ReasonBody,
    "Rewind": runs.RewindBody,
    "Skip": runs.SkipBody,
    "EditState": runs.StateBody,
    "Bulk": bulk.BulkBody,
    "Signal": signals.SignalBody,
    "Poll": tasks.PollBody,
    "OperatorToken": operators.TokenBody,
    "Complete": tasks.CompleteBody,
    "SchedulePut": ScheduleBody,
    "Migrate": deploys.MigrateBody,
    "ScheduleReason": schedules.ReasonBody,
    "Backfill": schedules.BackfillBody,
}

_FUNCTION = _answer({"region": STR, "name": STR, "url": STR, "createdAt": TS, "updatedAt": TS})
_TOKEN = {
    "tokenId": STR,
    "name": STR_OR_NULL,
    "role": {"enum": ["viewer", "operator", "admin"]},
    "createdAt": TS,
}
_APP = {
    "app": NAME,
    "handlerBaseUrl": STR,
    "description": STR_OR_NULL,
    "weight": {"type": "integer", "minimum": 1, "maximum": 100},
    "rateLimit": {
        "oneOf": [{"type": "null"}, _answer({"limit": {"type": "integer", "minimum": 1}, "periodMs": INT})]
    },
}
_WORKFLOW = {"name": NAME, "version": {"type": "integer", "minimum": 1}, "createdAt": TS}
_STATUS = {"type": "string", "enum": sorted(STATUSES)}
_SCHEDULE: Final = {
    "name": NAME,
    "app": NAME,
    "workflow": NAME,
    "version": {"type": ["integer", "null"], "minimum": 1},
    "cron": STR_OR_NULL,
    "every": STR_OR_NULL,
    "timezone": STR_OR_NULL,
    "input": ANY,
    "overlap": {"enum": ["skip", "buffer_one", "allow", "cancel_previous", None]},
    "catchupWindow": STR_OR_NULL,
    "jitter": STR_OR_NULL,
    "startAt": STR_OR_NULL,
    "endAt": STR_OR_NULL,
    "paused": BOOL,
    "pauseReason": STR_OR_NULL,
    "nextFires": {"type": "array", "items": TS},
    "fired": INT,
    "skipped": INT,
    "missed": INT,
    "buffered": TS_OR_NULL,
    "lastError": STR_OR_NULL,
    "createdAt": TS,
    "updatedAt": TS,
    "lastFires": {
        "type": "array",
        "items": _answer(
            {
                "scheduledTime": TS,
                "runId": STR,
                "firedAt": TS,
                "source": {"enum": ["clock", "trigger", "backfill"]},
                "reason": STR_OR_NULL,
                "status": STR_OR_NULL,
            }
        ),
    },
}
# Members of a schedule's view only there when its document (or the one-schedule read) has them.
_SCHEDULE_OPTIONAL: Final = (
    "version",
    "cron",
    "every",
    "timezone",
    "input",
    "overlap",
    "catchupWindow",
    "jitter",
    "startAt",
    "endAt",
    "lastFires",
)

# Answers that are not a typed view: written here, held to the real answers by the tests.
ANSWERS: Final[dict[str, dict[str, Any]]] = {
    "Error": _obj(
        {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "field": {"type": "string", "description": "the member, parameter or header at fault"},
                },
                "required": ["code", "message"],
            }
        },
        ("error",),
    ),
    "AppLimitsPut": {
        "type": "object",
        "properties": {
            limit.name: {
                "type": ["integer", "null"] if limit.integer else ["number", "null"],
                "minimum" if limit.integer else "exclusiveMinimum": 1 if limit.integer else 0,
                "maximum": MAX_OVERRIDE,
            }
            for limit in LIMITS
        },
        "additionalProperties": False,
    },
    "AppLimits": _answer(
        {
            "app": NAME,
            "limits": _answer(
                {
                    limit.name: _answer(
                        {
                            "value": {"type": "integer" if limit.integer else "number"},
                            "source": {"enum": ["default", "override"]},
                            "setting": STR,
                        }
                    )
                    for limit in LIMITS
                }
            ),
        }
    ),
    "AppCreated": _answer(
        {**_APP, "apiKey": STR, "keyId": STR, "signingSecret": STR, "secretId": STR},
    ),
    "App": _answer(
        {
            **_APP,
            "createdAt": TS,
            "updatedAt": TS,
            "apiKeys": {"type": "array", "items": _answer({"keyId": STR, "createdAt": TS})},
            "signingSecrets": {
                "type": "array",
                "items": _answer({"secretId": STR, "createdAt": TS, "expiresAt": TS_OR_NULL}),
            },
        }
    ),
    "ApiKey": _answer({"keyId": STR, "apiKey": STR}),
    "KeyRevoked": _answer({"keyId": STR, "revoked": TRUE}),
    "SigningSecret": _answer({"secretId": STR, "signingSecret": STR, "createdAt": TS}),
    "WorkflowRegistered": _answer(
        {
            "name": NAME,
            "version": {"type": "integer", "minimum": 1},
            "warnings": {
                "type": "array",
                "description": "what will not work as written (still registered); empty when none",
                "items": _answer(
                    {
                        "code": {
                            "type": "string",
                            "enum": ["child_workflow_missing", "timeout_over_sync_cap"],
                        },
                        "step": STR,
                        "field": STR,
                        "message": STR,
                    }
                ),
            },
        }
    ),
    "WorkflowList": _list("workflows", _answer(_WORKFLOW), "nextCursor"),
    "WorkflowVersion": _answer({**_WORKFLOW, "definition": _ref("Workflow")}),
    "RunPage": _list("runs", _ref("RunListEntry"), "nextCursor"),
    "Debounced": _answer(
        {
            "runId": STR,
            "debounced": TRUE,
            "status": {"const": "pending"},
            "startsAt": TS,
            "dropped": TRUE,
        },
        ("status", "startsAt", "dropped"),
    ),
    "Schedule": _answer(_SCHEDULE, _SCHEDULE_OPTIONAL),
    "SchedulePage": _list("schedules", _answer(_SCHEDULE, _SCHEDULE_OPTIONAL), "nextCursor"),
    "ScheduleFired": _answer(
        {
            "scheduledTime": TS,
            "outcome": {"enum": ["started", "skipped", "buffered", "refused"]},
            "runId": STR_OR_NULL,
            "error": STR_OR_NULL,
        }
    ),
    "ScheduleBackfilled": _answer(
        {
            "fires": {
                "type": "array",
                "items": _answer({"scheduledTime": TS, "runId": STR, "new": BOOL}),
            },
            "started": INT,
            "alreadyFired": INT,
        }
    ),
    "ScheduleDeleted": _answer({"name": NAME, "deleted": TRUE}),
    "DryRunReport": _answer(
        {
            "valid": BOOL,
            "errors": {
                "type": "array",
                "items": _answer({"field": STR_OR_NULL, "message": STR}),
            },
            "openRuns": _answer({"groups": {"type": "array", "items": {"type": "object"}}, "total": INT}),
            "recorded": _answer(
                {
                    "sampled": INT,
                    "same": INT,
                    "diverged": {"type": "array", "items": {"type": "object"}},
                    "events": INT,
                    "cursor": STR_OR_NULL,
                }
            ),
            "missingStateKeys": {"type": "array", "items": {"type": "object"}},
        },
        ("errors",),
    ),
    "MigratePage": _answer(
        {
            "matched": INT,
            "migrated": INT,
            "skipped": INT,
            "refused": {"type": "array", "items": {"type": "object"}},
            "cursor": STR_OR_NULL,
        }
    ),
    "EventPage": _list("events", _ref("EventView"), "nextCursor"),
    "Diagnosis": _answer(
        {
            "runId": STR,
            "status": _STATUS,
            "summary": STR,
            "attention": BOOL,
            "facts": {"type": "array", "items": _answer({"code": STR, "text": STR})},
        }
    ),
    "BulkResult": {
        "type": "object",
        "properties": {
            "matched": INT,
            "paused": INT,
            "unpaused": INT,
            "cancelled": INT,
            "redriven": INT,
            "skipped": INT,
            "refused": {
                "type": "array",
                "items": _answer({"runId": STR, "step": STR_OR_NULL, "code": STR, "message": STR}),
            },
            "cursor": STR_OR_NULL,
        },
        "required": ["matched", "skipped", "refused", "cursor"],
        "minProperties": 5,
        "maxProperties": 5,
        "additionalProperties": False,
    },
    "SignalAccepted": _answer({"runId": STR, "status": STR, "started": BOOL}, optional=("started",)),
    "Tasks": _list(
        "tasks",
        _answer(
            {
                "taskToken": STR,
                "app": NAME,
                "runId": STR,
                "workflowName": NAME,
                "workflowVersion": INT,
                "step": NAME,
                "attempt": INT,
                "generation": INT,
                "idempotencyKey": STR,
                "deadline": TS_OR_NULL,
                "businessKey": STR_OR_NULL,
                "input": ANY,
                "state": {"type": "object"},
                "error": {
                    "anyOf": [_answer({"step": STR_OR_NULL, "class": STR, "message": STR}), {"type": "null"}]
                },
            }
        ),
    ),
    "TaskAnswered": _answer({"runId": STR, "status": _STATUS}),
    "Heartbeat": _answer({"cancelRequested": BOOL}),
    "Status": _answer({"status": STR}),
    "OpenApi": {"type": "object", "required": ["openapi", "paths", "components"]},
    "Actors": {
        "type": "object",
        "properties": {"actors": {"type": "array", "items": {"type": "object"}}, "live": INT},
        "required": ["actors", "live"],
        "additionalProperties": False,
    },
    "Actor": {"type": "object", "required": ["timers"], "properties": {"timers": {"type": "array"}}},
    "Timers": _answer(
        {
            "count": INT,
            "truncated": BOOL,
            "nextDue": TS_OR_NULL,
            "window": _answer({"count": INT, "nextDue": TS_OR_NULL, "end": TS_OR_NULL}),
            "lagMs": {"type": ["number", "null"]},
            "maxLagMs": {"type": ["number", "null"]},
            "fired": INT,
            "windowEnd": TS_OR_NULL,
        }
    ),
    "Queues": _list("queues", {"type": "object", "required": ["app", "queue", "depth", "waitingPollers"]}),
    "Cluster": {"type": "object", "required": ["nodes", "partitions", "map"]},
    "Overdue": _list(
        "groups",
        _answer(
            {
                "app": NAME,
                "workflow": NAME,
                "step": STR_OR_NULL,
                "status": _STATUS,
                "count": INT,
                "oldestSince": TS_OR_NULL,
            }
        ),
    ),
    "SwfCredential": _answer({"accessKeyId": STR, "secretAccessKey": STR, "createdAt": TS}),
    "SwfCredentials": _list(
        "credentials", _answer({"accessKeyId": STR, "source": STR, "createdAt": TS_OR_NULL})
    ),
    "SwfCredentialRevoked": _answer({"accessKeyId": STR, "revoked": TRUE}),
    "LambdaFunction": _FUNCTION,
    "LambdaFunctions": _list("functions", _FUNCTION),
    "LambdaDeleted": _answer({"region": STR, "name": STR, "deleted": TRUE}),
    "Parked": _answer(
        {
            "parked": {
                "type": "array",
                "items": _answer(
                    {
                        "region": STR,
                        "domain": STR_OR_NULL,
                        "workflowId": STR_OR_NULL,
                        "runId": STR,
                        "reason": STR_OR_NULL,
                        "parkedAt": TS_OR_NULL,
                    }
                ),
            },
            "next": STR_OR_NULL,
        }
    ),
    "ParkedResumed": _answer({"region": STR, "runId": STR, "resumed": TRUE}),
    "OperatorTokenCreated": _answer({**_TOKEN, "token": STR}),
    "OperatorTokens": _list("tokens", _answer(_TOKEN)),
    "OperatorTokenRevoked": _answer({"tokenId": STR, "revoked": TRUE}),
    "Sessions": _list(
        "sessions",
        _answer(
            {
                "sessionId": STR,
                "subject": STR,
                "name": STR_OR_NULL,
                "role": STR,
                "createdAt": TS,
                "lastSeenAt": TS,
                "idleExpiresAt": TS_OR_NULL,
                "expiresAt": TS_OR_NULL,
            }
        ),
    ),
    "SessionEnded": _answer({"sessionId": STR, "ended": TRUE}),
}

# Answers in another media type: the type and its schema.
TEXT_ANSWERS: Final = {
    "SwfAnswer": (
        "application/x-amz-json-1.0",
        {"type": "object", "description": "the AWS SWF operation's output shape (docs/swf.md)"},
    ),
    "SwfFault": (
        "application/x-amz-json-1.0",
        {
            "type": "object",
            "properties": {"__type": {"type": "string"}, "message": {"type": "string"}},
            "required": ["__type"],
            "description": "an AWS error: `__type` names the fault (docs/swf.md)",
        },
    ),
    "JsonSchema": ("application/schema+json", {"type": "object", "required": ["$schema"]}),
    "Metrics": ("text/plain", {"type": "string", "description": "Prometheus text exposition 0.0.4"}),
    "Reference": ("text/html", {"type": "string"}),
}


@attrs.frozen
class Op:
    """One documented operation: who may call it, its body's model and its answer's schema."""

    summary: str
    body: str | None  # a BODIES name, or `Workflow`
    status: int
    who: str  # admin | app | none
    answer: str  # an ANSWERS or TEXT_ANSWERS name, `RunView`, or `Workflow`
    also: tuple[tuple[int, str], ...] = ()  # other success statuses and their answers
    fault: str = "Error"  # the schema of its refusals


A = "/apps/{app}"
R = "/apps/{app}/runs/{runId}"

OPERATIONS: dict[tuple[str, str], Op] = {
    ("PUT", A): Op(
        "Create (201) or update (200) an app", "AppPut", 201, "admin", "AppCreated", ((200, "App"),)
    ),
    ("GET", A): Op("Read an app", None, 200, "app", "App"),
    ("POST", f"{A}/api-keys"): Op("Mint an API key", "Empty", 201, "admin", "ApiKey"),
    ("DELETE", f"{A}/api-keys/{{keyId}}"): Op("Revoke an API key", None, 200, "admin", "KeyRevoked"),
    ("POST", f"{A}/signing-secrets"): Op(
        "Rotate the signing secret", "Rotate", 201, "admin", "SigningSecret"
    ),
    ("POST", f"{A}/workflows"): Op(
        "Register a workflow version (200: the same document again)",
        "Workflow",
        201,
        "app",
        "WorkflowRegistered",
        ((200, "WorkflowRegistered"),),
    ),
    ("GET", f"{A}/workflows"): Op("List workflows (latest versions)", None, 200, "app", "WorkflowList"),
    ("GET", f"{A}/workflows/{{name}}"): Op(
        "Latest version of a workflow", None, 200, "app", "WorkflowVersion"
    ),
    ("GET", f"{A}/workflows/{{name}}/versions/{{version}}"): Op(
        "One version", None, 200, "app", "WorkflowVersion"
    ),
    ("POST", f"{A}/runs"): Op(
        "Start a run (200: an Idempotency-Key seen before; 202: a debounced start)",
        "StartRun",
        201,
        "app",
        "RunView",
        ((200, "RunView"), (202, "Debounced")),
    ),
    ("POST", f"{A}/workflows/{{name}}/dry-run"): Op(
        "What a candidate version would do to the open and the recorded runs (nothing stored)",
        "Workflow",
        200,
        "app",
        "DryRunReport",
    ),
    ("POST", f"{A}/workflows/{{name}}/migrate"): Op(
        "Move a page of open runs to a version", "Migrate", 200, "app", "MigratePage"
    ),
    ("PUT", f"{A}/schedules/{{name}}"): Op(
        "Create (201) or replace (200) a schedule",
        "SchedulePut",
        201,
        "app",
        "Schedule",
        ((200, "Schedule"),),
    ),
    ("GET", f"{A}/schedules"): Op("List schedules", None, 200, "app", "SchedulePage"),
    ("GET", f"{A}/schedules/{{name}}"): Op(
        "A schedule, its next and last fires", None, 200, "app", "Schedule"
    ),
    ("POST", f"{A}/schedules/{{name}}/pause"): Op(
        "Pause a schedule", "ScheduleReason", 200, "app", "Schedule"
    ),
    ("POST", f"{A}/schedules/{{name}}/unpause"): Op(
        "Unpause a schedule", "ScheduleReason", 200, "app", "Schedule"
    ),
    ("POST", f"{A}/schedules/{{name}}/trigger"): Op(
        "Fire a schedule now (honouring its overlap policy)", "ScheduleReason", 200, "app", "ScheduleFired"
    ),
    ("POST", f"{A}/schedules/{{name}}/backfill"): Op(
        "Start a run for every scheduled time in a range", "Backfill", 200, "app", "ScheduleBackfilled"
    ),
    ("DELETE", f"{A}/schedules/{{name}}"): Op(
        "Delete a schedule", "ScheduleReason", 200, "app", "ScheduleDeleted"
    ),
    ("GET", f"{A}/runs"): Op("List runs", None, 200, "app", "RunPage"),
    ("GET", R): Op("Read a run", None, 200, "app", "RunView"),
    ("GET", f"{R}/events"): Op("A run's history", None, 200, "app", "EventPage"),
    ("GET", f"{R}/diagnosis"): Op("Why the run is not moving", None, 200, "app", "Diagnosis"),
    ("POST", f"{R}/cancel"): Op("Cancel a run", "Reason", 200, "app", "RunView"),
    ("POST", f"{R}/redrive"): Op("Redrive a failed run", "Reason", 200, "app", "RunView"),
    ("POST", f"{R}/rewind"): Op("Rewind a run", "Rewind", 200, "app", "RunView"),
    ("POST", f"{R}/pause"): Op("Pause a run", "Reason", 200, "app", "RunView"),
    ("POST", f"{R}/unpause"): Op("Unpause a paused run", "Reason", 200, "app", "RunView"),
    ("POST", f"{A}/runs/pause"): Op(
        "Pause the runs a filter selects (one page)", "Bulk", 200, "app", "BulkResult"
    ),
    ("POST", f"{A}/runs/unpause"): Op(
        "Unpause the runs a filter selects (one page)", "Bulk", 200, "app", "BulkResult"
    ),
    ("POST", f"{A}/runs/cancel"): Op(
        "Cancel the runs a filter selects (one page)", "Bulk", 200, "app", "BulkResult"
    ),
    ("POST", f"{A}/runs/redrive"): Op(
        "Redrive the runs a filter selects (one page)", "Bulk", 200, "app", "BulkResult"
    ),
    ("POST", f"{R}/skip"): Op("Skip the current step", "Skip", 200, "app", "RunView"),
    ("PATCH", f"{R}/state"): Op("Edit state keys", "EditState", 200, "app", "RunView"),
    ("POST", f"{A}/signals"): Op("Signal a run", "Signal", 202, "app", "SignalAccepted"),
    ("POST", f"{A}/tasks/poll"): Op("Long-poll a queue", "Poll", 200, "app", "Tasks"),
    ("POST", f"{A}/tasks/{{token}}/complete"): Op("Answer a task", "Complete", 200, "app", "TaskAnswered"),
    ("POST", f"{A}/tasks/{{token}}/heartbeat"): Op("Extend a task", "Empty", 200, "app", "Heartbeat"),
    ("GET", "/healthz"): Op("Liveness", None, 200, "none", "Status"),
    ("GET", "/readyz"): Op(
        "Readiness (storage reachable and taking writes, leases held, recovery done)",
        None,
        200,
        "none",
        "Status",
    ),
    ("GET", "/openapi.json"): Op("This document", None, 200, "none", "OpenApi"),
    ("GET", "/schemas/workflow.json"): Op(
        "The JSON Schema of a workflow definition (for editors)", None, 200, "none", "JsonSchema"
    ),
    ("GET", "/reference"): Op("This document, rendered as a page", None, 200, "none", "Reference"),
    ("GET", "/metrics"): Op("Prometheus metrics", None, 200, "admin", "Metrics"),
    ("GET", "/admin/actors"): Op("Live actors (runs and SWF executions)", None, 200, "admin", "Actors"),
    ("GET", "/admin/actors/{runId}"): Op("One live actor with its timers", None, 200, "admin", "Actor"),
    ("GET", "/admin/timers"): Op("Timer wheel status", None, 200, "admin", "Timers"),
    ("PUT", "/admin/apps/{app}/limits"): Op(
        "Override an app's limits (null: back to the default)", "AppLimitsPut", 200, "admin", "AppLimits"
    ),
    ("GET", "/admin/apps/{app}/limits"): Op(
        "An app's effective limits, each from its default or an override", None, 200, "admin", "AppLimits"
    ),
    ("POST", "/"): Op(
        "AWS SWF JSON 1.0, SigV4-signed (docs/swf.md); AWS error shapes",
        None,
        200,
        "none",
        "SwfAnswer",
        fault="SwfFault",
    ),
    ("POST", "/admin/swf/credentials"): Op(
        "Mint an SWF access key (secret shown once)", None, 201, "admin", "SwfCredential"
    ),
    ("GET", "/admin/swf/credentials"): Op("List live SWF access keys", None, 200, "admin", "SwfCredentials"),
    ("DELETE", "/admin/swf/credentials/{accessKeyId}"): Op(
        "Revoke an SWF access key", None, 200, "admin", "SwfCredentialRevoked"
    ),
    ("GET", "/admin/runs/overdue"): Op(
        "Open runs pending at a step too long, grouped", None, 200, "admin", "Overdue"
    ),
    ("POST", "/admin/operator-tokens"): Op(
        "Create an operator token (shown once)", "OperatorToken", 201, "admin", "OperatorTokenCreated"
    ),
    ("GET", "/admin/operator-tokens"): Op("List live operator tokens", None, 200, "admin", "OperatorTokens"),
    ("DELETE", "/admin/operator-tokens/{tokenId}"): Op(
        "Revoke an operator token", None, 200, "admin", "OperatorTokenRevoked"
    ),
    ("GET", "/admin/sessions"): Op("Live console sessions, newest first", None, 200, "admin", "Sessions"),
    ("DELETE", "/admin/sessions/{sessionId}"): Op(
        "End a console session everywhere", None, 200, "admin", "SessionEnded"
    ),
    ("GET", "/admin/queues"): Op(
        "Pull queues on this node: tasks waiting, pollers parked", None, 200, "admin", "Queues"
    ),
    ("PUT", "/admin/lambda/{region}/{name}"): Op(
        "Register (201) or re-point (200) the Lambda function SWF's ScheduleLambdaFunction invokes",
        "LambdaPut",
        201,
        "admin",
        "LambdaFunction",
        ((200, "LambdaFunction"),),
    ),
    ("GET", "/admin/lambda"): Op(
        "Registered Lambda functions of every region", None, 200, "admin", "LambdaFunctions"
    ),
    ("GET", "/admin/lambda/{region}"): Op(
        "Registered Lambda functions of a region", None, 200, "admin", "LambdaFunctions"
    ),
    ("GET", "/admin/lambda/{region}/{name}"): Op(
        "One registered Lambda function", None, 200, "admin", "LambdaFunction"
    ),
    ("DELETE", "/admin/lambda/{region}/{name}"): Op(
        "Remove a Lambda function", None, 200, "admin", "LambdaDeleted"
    ),
    ("GET", "/admin/swf/parked"): Op(
        "SWF executions parked after their actor crashed too often", None, 200, "admin", "Parked"
    ),
    ("POST", "/admin/swf/parked/{region}/{runId}/resume"): Op(
        "Resume a parked SWF execution", "Empty", 200, "admin", "ParkedResumed"
    ),
    ("GET", "/admin/cluster"): Op(
        "Nodes sharing the database; who holds which partition", None, 200, "admin", "Cluster"
    ),
}

_LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}
QUERY: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("GET", f"{A}/workflows"): {"limit": _LIMIT, "cursor": {"type": "string"}},
    ("GET", f"{A}/schedules"): {"limit": _LIMIT, "cursor": {"type": "string"}},
    ("GET", f"{A}/runs"): {
        "workflow": NAME,
        "status": _STATUS,
        "businessKey": {"type": "string"},
        "parentRunId": {"type": "string"},
        "attention": {"type": "string", "enum": ["true", "false", *ATTENTION_REASONS]},
        "limit": _LIMIT,
        "cursor": {"type": "string"},
    },
    ("GET", f"{R}/events"): {
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
    ("GET", "/admin/sessions"): {"limit": _LIMIT},
    ("POST", f"{A}/workflows/{{name}}/dry-run"): {
        "replay": {"type": "integer", "minimum": 0, "maximum": deploys.MAX_REPLAY},
        "cursor": {"type": "string"},
    },
}

_PARAM = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")
# A route's parameter as the docs name it: `{app}` for the app, camelCase otherwise.
_PUBLISHED = {"app_name": "app"}
UNPUBLISHED: Final = ("/internal/", "/console")  # node-to-node calls; the console's pages


def published(rule: str) -> str:
    """A route's rule as the document writes it: `/apps/<app_name>/runs/<run_id>` ->
    `/apps/{app}/runs/{runId}`."""
    return _PARAM.sub(lambda m: "{" + _PUBLISHED.get(m.group(1), camel(m.group(1))) + "}", rule)


def routes(app: Quart) -> set[tuple[str, str]]:
    """Every published (method, path): all routes but the console's pages (docs/console.md)
    and the node-to-node `/internal/*` calls."""
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.rule.startswith(UNPUBLISHED):
            continue
        path = published(rule.rule)
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                found.add((method, path))
    return found


def components() -> dict[str, Any]:
    """Every schema the document names: the request models', the definition's, the views'
    (made from their types) and the other answers'."""
    schemas: dict[str, Any] = {}
    for name, model in BODIES.items():
        schemas[name] = schema_of(model, REFINE)
    schemas["Workflow"] = workflow_schemas(schemas)
    schema_of(RunView, REFINE, schemas)
    schema_of(RunListEntry, REFINE, schemas)
    schema_of(EventView, REFINE, schemas)
    schemas.update(ANSWERS)
    return schemas


def _content(answer: str) -> dict[str, Any]:
    if answer in TEXT_ANSWERS:
        media, schema = TEXT_ANSWERS[answer]
        return {media: {"schema": schema}}
    return {"application/json": {"schema": _ref(answer)}}


def document(app: Quart) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for method, path in sorted(routes(app)):
        if (method, path) not in OPERATIONS:
            raise KeyError(f"{method} {path} is not documented in foliot/http/openapi.py")
        op = OPERATIONS[(method, path)]
        params = [
            {
                "name": p,
                "in": "path",
                "required": True,
                "schema": {"type": "integer", "minimum": 1} if p == "version" else {"type": "string"},
            }
            for p in re.findall(r"{([A-Za-z_]+)}", path)
        ] + [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in QUERY.get((method, path), {}).items()
        ]
        responses: dict[str, Any] = {
            str(status): {"description": "success", "content": _content(answer)}
            for status, answer in ((op.status, op.answer), *op.also)
        }
        responses["default"] = {"description": "error", "content": _content(op.fault)}
        entry: dict[str, Any] = {
            "summary": op.summary,
            "operationId": f"{method.lower()}_{re.sub(r'[^A-Za-z]+', '_', path).strip('_')}",
            "parameters": params,
            "responses": responses,
        }
        if op.who != "none":
            entry["security"] = [{"bearer": []}]
        if op.body is not None:
            entry["requestBody"] = {
                "required": op.body
                not in ("Empty", "Reason", "Skip", "Rotate", "Complete", "ScheduleReason"),
                "content": {"application/json": {"schema": _ref(op.body)}},
            }
        paths.setdefault(path, {})[method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": "Foliot", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
