"""Bulk interventions: pause, unpause, cancel or redrive the runs a filter selects, a page at a time.

`POST /apps/{app}/runs/{pause|unpause|cancel|redrive}` reads one keyset page of the app's runs
(newest first, like the listing), and sends each run that matches the filter the single-run
intervention through its actor, so the same status rules apply. A run whose status does not
allow the intervention is counted as `skipped`, never an error; one the intervention refuses for
another reason (a redrive of a run whose compensation reached `$fail`) is listed in `refused`
with the refusal's code and message. The answer carries a `cursor`
to resume with (null after the last page). Retrying a page is safe: runs already handled are
then skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs
import trio
from quart import Blueprint, Response

from ..actors.placement import Elsewhere
from ..core.errors import InvalidRequest, Refused, Unavailable
from ..core.workflow import machine
from ..core.workflow.model import STATUSES, Run
from ..storage.base import RunFilter, encode_cursor
from .app import body, check_name, engine, json_response, require_app
from .forward import Forwarder
from .runs import MAX_BUSINESS_KEY, _check_reason, _runs_cursor

blueprint = Blueprint("bulk", __name__)

DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 1000
CONCURRENCY: Final = 16  # runs handled at once within one page

# verb -> (the single-run message, the answer's count field)
VERBS: Final[dict[str, tuple[Callable[[str | None], machine.Message], str]]] = {
    "pause": (machine.Pause, "paused"),
    "unpause": (machine.Unpause, "unpaused"),
    "cancel": (machine.Cancel, "cancelled"),
    "redrive": (machine.Redrive, "redriven"),
}


@attrs.frozen
class BulkBody:
    workflow: str
    step: str | None = None
    status: str | None = None
    version: int | None = None
    business_key: str | None = None
    reason: str | None = None
    limit: int | None = None
    cursor: str | None = None


@attrs.frozen
class Selection:
    """A validated bulk filter."""

    filter: RunFilter
    step: str | None
    version: int | None
    limit: int
    after: tuple[int, str] | None

    def matches(self, run: Run) -> bool:
        """The filters the store does not index (the current step, the pinned version)."""
        if self.step is not None and run.current_step != self.step:
            return False
        return self.version is None or run.version == self.version


def selection(app: str, spec: BulkBody) -> Selection:
    check_name(spec.workflow, "workflow")
    if spec.step is not None:
        check_name(spec.step, "step")
    if spec.status is not None and spec.status not in STATUSES:
        raise InvalidRequest(f"unknown status; expected one of {sorted(STATUSES)}", field="status")
    if spec.version is not None and spec.version < 1:
        raise InvalidRequest("must be 1 or more", field="version")
    if spec.business_key is not None and not 1 <= len(spec.business_key) <= MAX_BUSINESS_KEY:
        raise InvalidRequest(f"must be 1..{MAX_BUSINESS_KEY} characters", field="businessKey")
    _check_reason(spec.reason)
    limit = DEFAULT_LIMIT if spec.limit is None else spec.limit
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"must be 1..{MAX_LIMIT}", field="limit")
    after = _runs_cursor(spec.cursor) if spec.cursor else None
    flt = RunFilter(app, spec.workflow, spec.status, spec.business_key)
    return Selection(flt, spec.step, spec.version, limit, after)


async def bulk(app_name: str, verb: str) -> Response:
    await require_app(app_name)
    spec = await body(BulkBody)
    return json_response(await apply_bulk(app_name, verb, spec))


async def apply_bulk(app_name: str, verb: str, spec: BulkBody) -> dict[str, Any]:
    """One page of a bulk intervention (the caller checked who may do it); the answer's body.
    The console's bulk forms call this too (foliot/console/views.py)."""
    chosen = selection(app_name, spec)
    make, done_field = VERBS[verb]
    eng = engine()
    rows = await eng.store.list_runs(chosen.filter, chosen.limit + 1, chosen.after)
    page = rows[: chosen.limit]
    cursor = encode_cursor(page[-1].created_at, page[-1].run_id) if len(rows) > chosen.limit else None
    targets = [run for run in page if chosen.matches(run)]
    counts = {"done": 0, "skipped": 0}
    refused: list[dict[str, Any]] = []
    limiter = trio.CapacityLimiter(CONCURRENCY)

    async def one(run: Run) -> None:
        async with limiter:
            try:
                reply, _ = await eng.runs.ask(run.run_id, make(spec.reason), run)
                done, refusal = outcome_of(reply)
            except Elsewhere as elsewhere:  # owned by another node: it intervenes there
                done, refusal = await intervene_there(
                    eng.forwarder, elsewhere, app_name, run.run_id, verb, spec.reason
                )
        if refusal is not None:
            refused.append({"runId": run.run_id, "step": run.current_step, **refusal})
        else:
            counts["done" if done else "skipped"] += 1

    try:
        async with trio.open_nursery() as nursery:
            for run in targets:
                nursery.start_soon(one, run)
    except BaseExceptionGroup as group:
        # One refusal (storage down, a full mailbox) answers for the page; retrying it is safe.
        raise _first(group) from None
    refused.sort(key=lambda r: str(r["runId"]))
    answer: dict[str, Any] = {
        "matched": len(targets),
        done_field: counts["done"],
        "skipped": counts["skipped"],
        "refused": refused,
        "cursor": cursor,
    }
    return answer


def outcome_of(reply: machine.Reply) -> tuple[bool, dict[str, str] | None]:
    """(done, refusal) of one run's intervention: a refusal other than its status not allowing
    it (`invalid_status`: skipped) is reported with its code and message."""
    if isinstance(reply, machine.Rejected) and reply.code != "invalid_status":
        return False, {"code": reply.code, "message": reply.message}
    return isinstance(reply, machine.Ok), None


async def intervene_there(
    forwarder: Forwarder | None, elsewhere: Elsewhere, app: str, run_id: str, verb: str, reason: str | None
) -> tuple[bool, dict[str, str] | None]:
    """One run of a bulk page, owned by another node: intervene through it
    (`/internal/intervene`); (done, refusal) as `outcome_of` says."""
    if forwarder is None:
        raise Unavailable("this node cannot reach the run's owner; retry")
    request = {"app": app, "runId": run_id, "verb": verb, "reason": reason}
    answer = await forwarder.internal(elsewhere.owner.address, "/internal/intervene", request)
    there = answer.get("refused")
    if isinstance(there, dict):
        return False, {"code": str(there.get("code")), "message": str(there.get("message"))}
    return bool(answer["done"]), None


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first API error in a group (else its first leaf): what the caller is told."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            stack[:0] = exc.exceptions
        else:
            leaves.append(exc)
    return next((e for e in leaves if isinstance(e, Refused)), leaves[0])


@blueprint.post("/apps/<app_name>/runs/pause")
async def bulk_pause(app_name: str) -> Response:
    return await bulk(app_name, "pause")


@blueprint.post("/apps/<app_name>/runs/unpause")
async def bulk_unpause(app_name: str) -> Response:
    return await bulk(app_name, "unpause")


@blueprint.post("/apps/<app_name>/runs/cancel")
async def bulk_cancel(app_name: str) -> Response:
    return await bulk(app_name, "cancel")


@blueprint.post("/apps/<app_name>/runs/redrive")
async def bulk_redrive(app_name: str) -> Response:
    return await bulk(app_name, "redrive")
