"""Logging: one JSON object per line, and the run events derived from committed transitions.

Run events are logged in one place, `log_transition`, from the events a transition committed
(plus `log_push` for a push's outcome and latency), so every line about a run carries
`runId`, `step` and `attempt` and no code path can forget one. Values a tenant sent (inputs,
outputs, state, signal payloads) and credentials are never logged: only whitelisted fields.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from .workflow.machine import Failed, Outcome
from .workflow.model import Event, Run, TaskRef

log = logging.getLogger("foliot.run")
push_log = logging.getLogger("foliot.dispatcher")

# Event types worth a line at INFO or above; every other event is logged at DEBUG.
_LEVELS: Mapping[str, int] = {
    "run_started": logging.INFO,
    "run_completed": logging.INFO,
    "retry_scheduled": logging.INFO,
    "task_failed": logging.INFO,
    "task_timed_out": logging.WARNING,
    "wait_timed_out": logging.INFO,
    "step_failed": logging.WARNING,
    "run_failed": logging.WARNING,
    "run_timed_out": logging.WARNING,
    "run_stuck": logging.WARNING,
    # interventions
    "run_cancelled": logging.INFO,
    "run_redriven": logging.INFO,
    "run_rewound": logging.INFO,
    "step_skipped": logging.INFO,
    "state_edited": logging.INFO,
}

# Event data that may be logged (renamed where a name would clash with a log record's own).
# State edits log the keys they touched, never the values.
_FIELDS: Mapping[str, str] = {
    "class": "errorClass",
    "message": "error",
    "compensatedBy": "compensatedBy",
    "retryable": "retryable",
    "delayMs": "delayMs",
    "nextAttempt": "nextAttempt",
    "reason": "reason",
    "fromStatus": "fromStatus",
    "fromStep": "fromStep",
    "fromVersion": "fromVersion",
    "toVersion": "toVersion",
    "version": "version",
    "next": "next",
    "set": "set",
    "unset": "unset",
    "kind": "kind",
}
_TEXT_MAX = 500


def _field(value: Any) -> Any:
    return value[:_TEXT_MAX] if isinstance(value, str) else value


def log_transition(run: Run, events: Iterable[Event]) -> None:
    """Log the run events of a committed transition, one line each."""
    for event in events:
        level = _LEVELS.get(event.type, logging.DEBUG)
        if not log.isEnabledFor(level):
            continue
        extra: dict[str, Any] = {
            "event": event.type,
            "runId": run.run_id,
            "app": run.app,
            "workflow": run.workflow,
            "step": event.step,
            "attempt": event.attempt,
            "status": run.status,
        }
        for key, name in _FIELDS.items():
            if key in event.data:
                extra[name] = _field(event.data[key])
        log.log(level, "%s", event.type.replace("_", " "), extra=extra)


def log_push(run: Run, task: TaskRef, outcome: Outcome, seconds: float, label: str) -> None:
    """A push's outcome and latency: DEBUG when the handler took it, INFO when it failed."""
    level = logging.INFO if isinstance(outcome, Failed) else logging.DEBUG
    if not push_log.isEnabledFor(level):
        return
    extra: dict[str, Any] = {
        "event": "push_outcome",
        "runId": run.run_id,
        "app": run.app,
        "workflow": run.workflow,
        "step": task.step,
        "attempt": task.attempt,
        "outcome": label,
        "latencyMs": round(seconds * 1000, 3),
    }
    if isinstance(outcome, Failed):
        extra["errorClass"] = _field(outcome.cls)
        extra["error"] = _field(outcome.message)
    push_log.log(level, "push %s", label, extra=extra)


# --------------------------------------------------------------------------- formatting


class JsonFormatter(_JsonFormatter):
    """One JSON object per line: time, level, logger, message, then the record's extra fields.

    Access-log records (hypercorn passes its atoms as the record's args) become fields too,
    picked one by one: the atoms also hold every request header, Authorization included.
    """

    def __init__(self) -> None:
        super().__init__(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_data, record, message_dict)
        if record.name == "hypercorn.access" and isinstance(record.args, Mapping):
            atoms = record.args
            log_data["message"] = "request"
            log_data.update(
                method=atoms["m"],
                path=atoms["U"],
                status=_int(atoms["s"]),
                durationMs=(_int(atoms["D"]) or 0) / 1000,
                remote=atoms["h"],
            )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        whole = super().formatTime(record, "%Y-%m-%dT%H:%M:%S")
        return f"{whole}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """For people at a terminal: the usual line, then the run's fields as `key=value`."""

    FIELDS = ("runId", "step", "attempt", "outcome", "latencyMs", "errorClass")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = [f"{k}={record.__dict__[k]}" for k in self.FIELDS if record.__dict__.get(k) is not None]
        return " ".join([line, *extra])


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


ACCESS_LOG_FORMAT = '%(h)s "%(r)s" %(s)s %(b)s %(D)sus'


def configure(fmt: str, level: str, *, access_log: bool = False) -> None:
    """Set up the root logger once, for `foliot serve` and `foliot migrate`.

    `fmt` is `json` (one object per line) or `text`. httpx and httpcore are held at WARNING:
    at INFO they log every push. The access log (`hypercorn.access`) is off unless asked for.
    """
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "text":
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    access = logging.getLogger("hypercorn.access")
    access.setLevel(logging.INFO if access_log else logging.CRITICAL + 1)


def _answered(record: logging.LogRecord) -> bool:
    # hypercorn (pgjones/hypercorn#357) logs a second, status-less line for a request whose
    # client closes while the response is being finished; it would double every such line.
    return not (isinstance(record.args, Mapping) and record.args.get("s") == "-")


def access_logger() -> logging.Logger | None:
    """hypercorn's access logger when `configure` turned it on, else None (hypercorn then
    skips building each request's log atoms)."""
    access = logging.getLogger("hypercorn.access")
    if not logging.NOTSET < access.level <= logging.INFO:
        return None
    if _answered not in access.filters:
        access.addFilter(_answered)
    return access
