"""JSON views of stored records: the API's response shapes, in one place."""

from __future__ import annotations

from typing import Any

from .workflow.duration import format_timestamp as ts
from .workflow.model import Event, Run


def run_view(run: Run) -> dict[str, Any]:
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
        "createdAt": ts(run.created_at),
        "updatedAt": ts(run.updated_at),
        "closedAt": ts(run.closed_at),
        "error": run.error.to_json() if run.error is not None else None,
        "output": run.output if run.status == "completed" else None,
        "parent": run.parent.to_json() if run.parent is not None else None,
        "children": run.fan.to_json() if run.fan is not None else None,
    }


_TIME_FIELDS = frozenset({"wakeAt", "deadline", "at"})


def event_view(event: Event) -> dict[str, Any]:
    data = {k: (ts(v) if k in _TIME_FIELDS and isinstance(v, int) else v) for k, v in event.data.items()}
    return {
        "seq": event.seq,
        "at": ts(event.at),
        "generation": event.generation,
        "type": event.type,
        "step": event.step,
        "attempt": event.attempt,
        "data": data,
    }
