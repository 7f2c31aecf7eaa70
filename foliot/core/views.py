"""JSON views of stored records: the API's response shapes, in one place.

Each view is typed (a TypedDict): mypy holds the view to it, and the published schema is
made from it (`foliot/core/shapes.py`, `/openapi.json`), so a member added here is documented.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from .shapes import Shape
from .workflow.duration import format_timestamp as ts
from .workflow.model import ErrorInfo, Event, Run, ScheduleRef

# An instant as the API writes it: `2026-11-29T18:00:00.000Z` (UTC, milliseconds).
Timestamp = Annotated[str, Shape.of(format="date-time")]


# Why a step or run failed (`class` is a keyword: the functional form). A run that failed after
# its compensation (`onFailure`) reached `$fail` names the compensated failure, `compensatedBy`
# its `onFailure` step; a step's `failError` makes the error its own, the failure kept as `cause`.
ErrorView = TypedDict(
    "ErrorView",
    {
        "step": str | None,
        "class": str,
        "message": str,
        "compensatedBy": NotRequired[str],
        "cause": NotRequired["ErrorView"],
    },
)


class ParentView(TypedDict):
    """A child run's parent step (`index`: its item of a map or branch of a parallel step)."""

    runId: str
    step: str
    generation: int
    attempt: int
    index: int


class ChildrenView(TypedDict):
    """A run, map or parallel step's children while the run waits for them."""

    step: str
    kind: str
    total: int
    started: int
    open: int
    completed: int
    failed: int
    cancelled: int
    openRunIds: list[str]


class ScheduleRefView(TypedDict):
    """The schedule fire that started a run."""

    name: str
    scheduledTime: Timestamp
    reason: str | None  # a trigger's reason


class RunView(TypedDict):
    """A run."""

    runId: str
    app: str
    workflow: str
    version: int
    status: str
    businessKey: str | None
    input: Any
    state: dict[str, Any]
    generation: int
    currentStep: str | None
    attempt: int | None
    waitSignal: str | None
    waitSignals: list[str] | None
    wakeAt: Timestamp | None
    deadline: Timestamp | None
    createdAt: Timestamp
    updatedAt: Timestamp
    closedAt: Timestamp | None
    error: ErrorView | None
    output: Any
    parent: ParentView | None
    children: ChildrenView | None
    schedule: ScheduleRefView | None
    priority: int


class RunListEntry(RunView):
    """A run as the runs list shows it: with the reasons it needs a look although its status
    looks healthy (`retrying`, `no_poller`, `overdue`, `unconsumed_signal`; empty: none)."""

    attention: list[str]


class EventView(TypedDict):
    """One event of a run's history."""

    seq: int
    at: Timestamp
    generation: int
    type: str
    step: str | None
    attempt: int | None
    data: dict[str, Any]


def at(ms: int) -> str:
    """An instant that is always there, as the API writes it."""
    text = ts(ms)
    assert text is not None
    return text


def run_view(run: Run) -> RunView:
    at_task = run.status == "running" and run.attempt is not None
    return {
        "runId": run.run_id,
        "app": run.app,
        "workflow": run.workflow,
        "version": run.version,
        "status": run.status,
        "businessKey": run.business_key,
        "priority": run.priority,
        "input": run.input,
        "state": run.state,
        "generation": run.generation,
        "currentStep": run.current_step,
        "attempt": run.attempt if at_task else None,
        "waitSignal": run.wait_signal,
        "waitSignals": list(run.wait_signals) if run.wait_signals else None,
        "wakeAt": ts(run.wake_at),
        "deadline": ts(run.deadline),
        "createdAt": at(run.created_at),
        "updatedAt": at(run.updated_at),
        "closedAt": ts(run.closed_at),
        "error": error_view(run) if run.error is not None else None,
        "output": run.output if run.status == "completed" else None,
        "parent": _parent_view(run),
        "children": _children_view(run),
        "schedule": _schedule_view(run.schedule),
    }


def _schedule_view(ref: ScheduleRef | None) -> ScheduleRefView | None:
    if ref is None:
        return None
    return {"name": ref.name, "scheduledTime": at(ref.scheduled_time), "reason": ref.reason}


def _parent_view(run: Run) -> ParentView | None:
    p = run.parent
    if p is None:
        return None
    return {
        "runId": p.run_id,
        "step": p.step,
        "generation": p.generation,
        "attempt": p.attempt,
        "index": p.index,
    }


def _children_view(run: Run) -> ChildrenView | None:
    fan = run.fan
    if fan is None:
        return None
    return {
        "step": fan.step,
        "kind": fan.kind,
        "total": fan.total,
        "started": fan.started,
        "open": len(fan.open),
        "completed": fan.completed,
        "failed": fan.failed,
        "cancelled": fan.cancelled,
        "openRunIds": [slot.run_id for slot in fan.open[:20]],
    }


_TIME_FIELDS = frozenset({"wakeAt", "deadline", "at"})


def error_view(run: Run) -> ErrorView:
    assert run.error is not None
    return _error(run.error)


def _error(error: ErrorInfo) -> ErrorView:
    out: ErrorView = {"step": error.step, "class": error.cls, "message": error.message}
    if error.compensated_by is not None:
        out["compensatedBy"] = error.compensated_by
    if error.cause is not None:
        out["cause"] = _error(error.cause)
    return out


def event_view(event: Event) -> EventView:
    data = {k: (ts(v) if k in _TIME_FIELDS and isinstance(v, int) else v) for k, v in event.data.items()}
    return {
        "seq": event.seq,
        "at": at(event.at),
        "generation": event.generation,
        "type": event.type,
        "step": event.step,
        "attempt": event.attempt,
        "data": data,
    }
