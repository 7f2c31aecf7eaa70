"""Debounced starts: `POST /apps/{app}/runs` with `debounce: {key, period, mode}`.

A burst is the starts of one (app, workflow, key) less than `period` apart. `trailing` (the
default) makes one run, begun `period` after the burst's last start with that start's input: the
first start creates the run pending (a durable timer, its key's row in `debounce_keys` claimed in
the same commit) and every later one moves its input and its timer (`machine.Debounce`, through
the run's actor). `leading` starts the run at once and drops the burst's later starts, each of
which pushes the burst's window on. The key's row is the one place a burst is decided: of two
first starts racing, the second's commit is refused and it joins the first's run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from ...core.errors import Conflict, RejectedMessage
from ...core.workflow import machine
from ...core.workflow.duration import format_timestamp
from ...core.workflow.flow import DEFAULT_PRIORITY
from ...storage.base import DebounceChange

if TYPE_CHECKING:
    from .service import Runs

_ROUNDS: Final = 8  # a burst that keeps beginning under us this often: 409, retry


@attrs.frozen
class DebouncedStart:
    app: str
    workflow: str
    version: int | None
    input: Any
    business_key: str | None
    run_timeout_ms: int | None
    key: str
    period_ms: int
    mode: str  # trailing | leading
    priority: int = DEFAULT_PRIORITY  # the burst's first start's, as its business key


async def debounced_start(runs: Runs, req: DebouncedStart, render: Any) -> tuple[dict[str, Any], int]:
    """(response body, status): 202 `{runId, debounced: true, ...}` for a start folded into a
    burst (and for a trailing burst's first start: its run has not begun), 201 with the run
    document for a leading burst's first start."""
    store = runs.host.store
    for _ in range(_ROUNDS):
        now = runs.host.clock.now()
        found = await store.get_debounce(req.app, req.workflow, req.key)
        if found is not None and found.mode == "leading" and found.until <= now:
            await store.drop_debounce(req.app, req.workflow, req.key, found.run_id, now)
            found = None  # that burst is over: this start begins the next one
        if found is None:
            due = now + req.period_ms
            claim = DebounceChange("claim", req.workflow, req.key, req.mode, due)
            try:
                body, _ = await runs.start(
                    app=req.app,
                    workflow=req.workflow,
                    version=req.version,
                    input=req.input,
                    business_key=req.business_key,
                    run_timeout_ms=req.run_timeout_ms,
                    idempotency_key=None,
                    request_hash="",
                    render=render,
                    debounce=claim,
                    priority=req.priority,
                )
            except Conflict as exc:
                if exc.code == "debounce_taken":
                    continue  # another first start won: join its burst
                raise
            if req.mode == "leading":
                return body, 201
            return _pending(body["runId"], due), 202
        if found.mode == "leading":
            until = now + req.period_ms
            if await store.extend_debounce(req.app, req.workflow, req.key, found.run_id, until):
                return {"runId": found.run_id, "debounced": True, "dropped": True}, 202
            continue
        due = now + req.period_ms
        reply, _ = await runs.ask(found.run_id, machine.Debounce(req.input, due))
        if isinstance(reply, machine.Ok):
            return _pending(found.run_id, due), 202
        if reply.code in ("not_pending", "not_found"):
            continue  # it began (or was cancelled) meanwhile: this start begins the next burst
        raise RejectedMessage(reply.status, reply.code, reply.message, reply.field)
    raise Conflict(f"the burst of debounce key {req.key!r} kept beginning under this start; retry")


def _pending(run_id: str, due: int) -> dict[str, Any]:
    return {"runId": run_id, "debounced": True, "status": "pending", "startsAt": format_timestamp(due)}
