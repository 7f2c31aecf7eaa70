"""Runs: start (business keys, idempotency), read, list, history, and operator interventions."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import attrs
from quart import Blueprint, Response, request

from ..core.digits import INT64_MAX
from ..core.errors import InvalidRequest, NotFound, PayloadTooLarge, Refused, RejectedMessage
from ..core.views import RunListEntry, event_view, run_view
from ..core.workflow import machine
from ..core.workflow.definition import canonical_json
from ..core.workflow.duration import DurationError, parse_duration
from ..core.workflow.flow import DEFAULT_PRIORITY, check_priority
from ..core.workflow.jsonconv import ValidationError, is_name
from ..core.workflow.model import STATUSES, Run
from ..core.workflow.payload import PayloadError, payload_size
from ..kinds.run.debounce import DebouncedStart
from ..observe.diagnosis import ATTENTION_REASONS
from ..storage.base import RunFilter, decode_cursor, encode_cursor
from .app import (
    Call,
    body,
    check_name,
    check_query,
    decode_json,
    engine,
    json_response,
    number,
    parse,
    quart_call,
    query_int,
    reads_query,
    require_app,
    require_app_call,
    settings,
)

blueprint = Blueprint("runs", __name__)

MAX_BUSINESS_KEY = 256
MAX_IDEMPOTENCY_KEY = 255
MAX_REASON = 1024
MAX_CURSOR = 512  # far above any cursor this API returns


@attrs.frozen
class DebounceBody:
    key: str
    period: str
    mode: str = "trailing"


@attrs.frozen
class StartBody:
    workflow: str
    version: int | None = None
    input: Any = None
    business_key: str | None = None
    run_timeout: str | None = None
    debounce: DebounceBody | None = None
    priority: Any = None  # 1 (highest)..5, default 3 (issue 23)


@attrs.frozen
class ReasonBody:
    reason: str | None = None


@attrs.frozen
class RewindBody:
    to_step: str
    version: int | None = None
    reason: str | None = None


@attrs.frozen
class SkipBody:
    output: Any = None
    reason: str | None = None


@attrs.frozen
class StateBody:
    reason: str
    set: dict[str, Any] | None = None
    unset: tuple[str, ...] | None = None


def check_payload(value: Any, field: str, limit: int | None = None) -> None:
    """Hold a value to FOLIOT_PAYLOAD_MAX_BYTES (`limit`), measured as compact JSON (413 when
    over)."""
    if limit is None:
        limit = settings().payload_max_bytes
    try:
        size = payload_size(value)
    except PayloadError as exc:
        raise InvalidRequest(str(exc), field=field) from None
    if size > limit:
        raise PayloadTooLarge(f"{field} is {size} bytes, over the {limit}-byte limit", field=field)


def _check_reason(reason: str | None) -> None:
    if reason is not None and len(reason) > MAX_REASON:
        raise InvalidRequest(f"is longer than {MAX_REASON} characters", field="reason")


def reply_response(reply: machine.Reply, run: Run | None) -> Response:
    """A machine reply as HTTP: `Rejected` becomes its error, `Ok` the run document."""
    if isinstance(reply, machine.Rejected):
        raise rejected_error(reply)
    current = reply.value if isinstance(reply.value, Run) else run
    assert current is not None
    return json_response(run_view(current))


def rejected_error(reply: machine.Rejected) -> Refused:
    return RejectedMessage(reply.status, reply.code, reply.message, reply.field)


async def owned_run(app_name: str, run_id: str) -> Run:
    run = await engine().runs.document(run_id) if len(run_id) <= 64 else None
    if run is None or run.app != app_name:
        raise NotFound(f"run {run_id!r} not found")
    return run


@blueprint.post("/apps/<app_name>/runs")
async def start_run(app_name: str) -> Response:
    body_, status = await start_run_call(quart_call(), app_name)
    return json_response(body_, status)


async def start_run_call(call: Call, app_name: str) -> tuple[dict[str, Any], int]:
    """`POST /apps/{app}/runs`: (response body, status). Served by Quart or by the ASGI edge
    (foliot/http/hot.py), the same checks in the same order; refused at once with 429/503
    `overloaded` and Retry-After when the engine is saturated (foliot/actors/admission.py)."""
    eng = call.engine
    with eng.admission.admit(app_name) as ticket:
        await require_app_call(call, app_name)
        data = await call.body()
        ticket.begin()  # authenticated and read: from here it is work the gate counts
        raw = decode_json(data)
        spec = parse(raw, StartBody)
        check_name(spec.workflow, "workflow")
        if spec.version is not None and spec.version < 1:
            raise InvalidRequest("must be 1 or more", field="version")
        if spec.business_key is not None and not 1 <= len(spec.business_key) <= MAX_BUSINESS_KEY:
            raise InvalidRequest(f"must be 1..{MAX_BUSINESS_KEY} characters", field="businessKey")
        run_timeout_ms = None
        if spec.run_timeout is not None:
            try:
                run_timeout_ms = parse_duration(spec.run_timeout)
            except DurationError as exc:
                raise InvalidRequest(str(exc), field="runTimeout") from None
            if run_timeout_ms <= 0:
                raise InvalidRequest("must be longer than zero", field="runTimeout")
        priority = DEFAULT_PRIORITY
        if spec.priority is not None:
            try:
                priority = check_priority(spec.priority, "priority")
            except ValidationError as exc:
                raise InvalidRequest(exc.message, field="priority") from None
        check_payload(spec.input, "input", eng.settings.payload_max_bytes)
        key = call.idempotency_key
        if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
            raise InvalidRequest(f"must be 1..{MAX_IDEMPOTENCY_KEY} characters", field="Idempotency-Key")
        if spec.debounce is not None:
            if key is not None:
                raise InvalidRequest(
                    "a debounced start is folded into its burst and takes no Idempotency-Key",
                    field="Idempotency-Key",
                )
            request = _debounced(app_name, spec, run_timeout_ms, priority)
            return await eng.runs.debounced_start(request, run_view)
        # Only a start with a key is ever compared with an earlier one.
        request_hash = "" if key is None else hashlib.sha256(canonical_json(raw).encode()).hexdigest()
        view, created = await eng.runs.start(
            app=app_name,
            workflow=spec.workflow,
            version=spec.version,
            input=spec.input,
            business_key=spec.business_key,
            run_timeout_ms=run_timeout_ms,
            idempotency_key=key,
            request_hash=request_hash,
            render=run_view,
            priority=priority,
        )
    return view, 201 if created else 200


MAX_DEBOUNCE_KEY: Final = 256
MAX_DEBOUNCE_PERIOD_MS: Final = 7 * 24 * 3600 * 1000


def _debounced(app_name: str, spec: StartBody, run_timeout_ms: int | None, priority: int) -> DebouncedStart:
    debounce = spec.debounce
    assert debounce is not None
    if not 1 <= len(debounce.key) <= MAX_DEBOUNCE_KEY:
        raise InvalidRequest(f"must be 1..{MAX_DEBOUNCE_KEY} characters", field="debounce.key")
    if debounce.mode not in ("trailing", "leading"):
        raise InvalidRequest("must be trailing or leading", field="debounce.mode")
    try:
        period = parse_duration(debounce.period)
    except DurationError as exc:
        raise InvalidRequest(str(exc), field="debounce.period") from None
    if not 0 < period <= MAX_DEBOUNCE_PERIOD_MS:
        raise InvalidRequest("must be longer than zero and at most 7d", field="debounce.period")
    return DebouncedStart(
        app_name,
        spec.workflow,
        spec.version,
        spec.input,
        spec.business_key,
        run_timeout_ms,
        debounce.key,
        period,
        debounce.mode,
        priority,
    )


@blueprint.get("/apps/<app_name>/runs")
@reads_query
async def list_runs(app_name: str) -> Response:
    """Newest first; each run with its `attention` reasons. `attention=true` (any reason) or
    `attention=<reason>` keeps the runs that need a look among at most `ATTENTION_SCAN` runs
    examined: a page may then hold fewer than `limit` runs, even none, and still a cursor."""
    from .attention import ATTENTION_SCAN, Judge

    await require_app(app_name)
    check_query({"workflow", "status", "businessKey", "parentRunId", "limit", "cursor", "attention"})
    args = request.args
    workflow, status, bkey = args.get("workflow"), args.get("status"), args.get("businessKey")
    parent = args.get("parentRunId")
    if parent is not None and not 1 <= len(parent) <= 64:
        raise InvalidRequest("must be a run id", field="parentRunId")
    if workflow is not None:
        check_name(workflow, "workflow")
    if status is not None and status not in STATUSES:
        raise InvalidRequest(f"unknown status; expected one of {sorted(STATUSES)}", field="status")
    wanted: frozenset[str] | None = None
    raw_attention = args.get("attention")
    if raw_attention == "true":
        wanted = frozenset(ATTENTION_REASONS)
    elif raw_attention in ATTENTION_REASONS:
        wanted = frozenset({raw_attention})
    elif raw_attention not in (None, "false"):
        raise InvalidRequest(f"must be true, false or one of {list(ATTENTION_REASONS)}", field="attention")
    limit = query_int("limit", 100, 1, 1000)
    after = None
    cursor = args.get("cursor")
    if cursor:
        after = _runs_cursor(cursor)
    flt = RunFilter(app_name, workflow, status, bkey, parent)
    eng = engine()
    judge = Judge(eng)
    if wanted is None:
        page, entries, more = await _page_in_budget(eng, judge, flt, limit, after)
    else:
        # One bounded read: the next ATTENTION_SCAN runs of the list; the cursor goes on
        # after the last one examined.
        runs = await eng.store.list_runs(flt, ATTENTION_SCAN, after)
        page, entries = [], []
        for examined in runs:
            page.append(examined)
            reasons = await judge.reasons(examined)
            if wanted.intersection(reasons):
                entries.append(_entry(examined, reasons))
                if len(entries) == limit:
                    break
        more = len(runs) == ATTENTION_SCAN or len(page) < len(runs)
    next_cursor = encode_cursor(page[-1].created_at, page[-1].run_id) if more and page else None
    return json_response({"runs": entries, "nextCursor": next_cursor})


# A page of runs is read this many at a time, and stops once its entries pass the byte budget.
_LIST_CHUNK: Final = 20


async def _page_in_budget(
    eng: Any, judge: Any, flt: RunFilter, limit: int, after: tuple[int, str] | None
) -> tuple[list[Run], list[RunListEntry], bool]:
    """At most `limit` runs after `after`, and about `4 x FOLIOT_PAYLOAD_MAX_BYTES` of them
    (each run carries its whole input and state: a page of 1,000 runs of 250 KB inputs had been
    a 250 MB answer, and one app's listings held every other app's reads); at least one run.
    Read `_LIST_CHUNK` runs at a time, so what is not answered is not read either. (page,
    entries, whether more follow)."""
    budget = 4 * eng.settings.payload_max_bytes
    page: list[Run] = []
    entries: list[RunListEntry] = []
    size = 0
    while True:
        want = min(_LIST_CHUNK, limit - len(page))
        runs = await eng.store.list_runs(flt, want + 1, after)
        for index, run in enumerate(runs[:want]):
            entry = _entry(run, await judge.reasons(run))
            page.append(run)
            entries.append(entry)
            size += payload_size(entry)
            if size >= budget:
                return page, entries, index + 1 < len(runs)
        if len(runs) <= want:
            return page, entries, False
        if len(page) >= limit:
            return page, entries, True
        after = (page[-1].created_at, page[-1].run_id)


def _entry(run: Run, reasons: tuple[str, ...]) -> RunListEntry:
    return {**run_view(run), "attention": list(reasons)}


def _runs_cursor(cursor: str) -> tuple[int, str]:
    """`(createdAt, runId)` from a runs cursor; 400 unless it could be one this API returned."""
    parts = decode_cursor(cursor, 2) if len(cursor) <= MAX_CURSOR else None
    if parts is None or not run_key(parts):
        raise InvalidRequest("not a cursor this API returned", field="cursor")
    return parts[0], parts[1]


def run_key(parts: list[Any]) -> bool:
    """Whether a decoded cursor begins with a run's `(createdAt, runId)` as the API writes them."""
    return (
        type(parts[0]) is int
        and -INT64_MAX <= parts[0] <= INT64_MAX
        and isinstance(parts[1], str)
        and 1 <= len(parts[1]) <= 64
    )


@blueprint.get("/apps/<app_name>/runs/<run_id>")
async def get_run(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    return json_response(run_view(await owned_run(app_name, run_id)))


@blueprint.get("/apps/<app_name>/runs/<run_id>/events")
@reads_query
async def events(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    check_query({"after", "limit", "cursor"})
    await owned_run(app_name, run_id)
    after = query_int("after", 0, 0, 2**62)
    cursor = request.args.get("cursor")
    if cursor:
        after = number(cursor, "cursor")
    limit = query_int("limit", 100, 1, 1000)
    rows = await engine().store.list_events(run_id, after, limit + 1)
    page = rows[:limit]
    next_cursor = str(page[-1].seq) if len(rows) > limit else None
    return json_response({"events": [event_view(e) for e in page], "nextCursor": next_cursor})


async def _intervene(app_name: str, run_id: str, message: machine.Message) -> Response:
    known = await owned_run(app_name, run_id)
    reply, run = await engine().runs.ask(run_id, message, known)
    return reply_response(reply, run)


@blueprint.post("/apps/<app_name>/runs/<run_id>/cancel")
async def cancel(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    spec = await body(ReasonBody, empty_ok=True)
    _check_reason(spec.reason)
    return await _intervene(app_name, run_id, machine.Cancel(spec.reason))


@blueprint.post("/apps/<app_name>/runs/<run_id>/redrive")
async def redrive(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    spec = await body(ReasonBody, empty_ok=True)
    _check_reason(spec.reason)
    return await _intervene(app_name, run_id, machine.Redrive(spec.reason))


@blueprint.post("/apps/<app_name>/runs/<run_id>/pause")
async def pause(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    spec = await body(ReasonBody, empty_ok=True)
    _check_reason(spec.reason)
    return await _intervene(app_name, run_id, machine.Pause(spec.reason))


@blueprint.post("/apps/<app_name>/runs/<run_id>/unpause")
async def unpause(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    spec = await body(ReasonBody, empty_ok=True)
    _check_reason(spec.reason)
    return await _intervene(app_name, run_id, machine.Unpause(spec.reason))


@blueprint.post("/apps/<app_name>/runs/<run_id>/rewind")
async def rewind(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    spec = await body(RewindBody)
    _check_reason(spec.reason)
    check_name(spec.to_step, "toStep")
    if spec.version is not None and spec.version < 1:
        raise InvalidRequest("must be 1 or more", field="version")
    message = machine.Rewind(spec.to_step, version=spec.version, reason=spec.reason)
    return await _intervene(app_name, run_id, message)


@blueprint.post("/apps/<app_name>/runs/<run_id>/skip")
async def skip(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    spec = await body(SkipBody, empty_ok=True)
    _check_reason(spec.reason)
    check_payload(spec.output, "output")
    return await _intervene(app_name, run_id, machine.Skip(spec.output, spec.reason))


@blueprint.patch("/apps/<app_name>/runs/<run_id>/state")
async def edit_state(app_name: str, run_id: str) -> Response:
    await require_app(app_name)
    spec = await body(StateBody)
    _check_reason(spec.reason)
    if not spec.reason.strip():
        raise InvalidRequest("a reason is required", field="reason")
    changes = spec.set or {}
    removals = spec.unset or ()
    if not changes and not removals:
        raise InvalidRequest("give set or unset", field="set")
    for key in changes:
        if not is_name(key):
            raise InvalidRequest("state keys are step names", field=f"set.{key[:200]}")
    for index, key in enumerate(removals):
        if not is_name(key):
            raise InvalidRequest("state keys are step names", field=f"unset[{index}]")
    overlap = set(changes) & set(removals)
    if overlap:
        raise InvalidRequest(f"{sorted(overlap)[0]!r} is both set and unset", field="unset")
    for key, value in changes.items():
        check_payload(value, f"set.{key}")
    return await _intervene(app_name, run_id, machine.EditState(changes, tuple(removals), spec.reason))
