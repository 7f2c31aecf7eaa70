"""The console's pages and forms (`/console`): plain HTML, no JavaScript needed.

Reads go straight to the engine and the store (keyset-paginated, indexed: see
docs/console.md); every intervention goes through the run's actor exactly as the HTTP API's
does. Sign-in sets an `HttpOnly`, `SameSite=Strict` session cookie; every form carries a CSRF
token bound to that cookie; a `viewer` may read, an `operator` (or the admin) may intervene.
"""

from __future__ import annotations

import difflib
import heapq
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any, Final, TypeVar
from urllib.parse import urlencode

import attrs
from markupsafe import Markup
from quart import Blueprint, Response, g, render_template, request
from werkzeug.datastructures import MultiDict

from ..actors.placement import check_local
from ..core import credentials
from ..core.errors import Forbidden, InvalidRequest, NotFound, Refused, StorageError, Unauthorized
from ..core.views import event_view, run_view
from ..core.workflow import machine
from ..core.workflow.duration import format_timestamp as ts
from ..core.workflow.jsonconv import is_name
from ..core.workflow.model import OPEN_STATUSES, STATUSES, Run
from ..core.workflow.payload import MAX_DEPTH, DepthError, loads
from ..http import bulk as bulk_api
from ..http import deploys as deploys_api
from ..http.app import check_query, engine, operator_caller, reads_query
from ..http.attention import Judge
from ..http.diagnosis import observe
from ..http.errors import status_of
from ..http.runs import MAX_REASON, check_payload, rejected_error
from ..http.sessions import (
    LOGIN_MS,
    TOUCH_MS,
    csrf_ok,
    csrf_token,
    make_cookie,
    new_session,
    read_cookie,
    session_key,
    session_live,
    split_session_cookie,
)
from ..observe import trends
from ..observe.diagnosis import diagnose, human
from ..storage.base import RunFilter, decode_cursor, encode_cursor
from ..storage.console import ROLES, OperatorTokenRecord, RunQuery
from . import graph

blueprint = Blueprint("console", __name__, url_prefix="/console", template_folder="templates")

COOKIE: Final = "foliot_console"
LOGIN_COOKIE: Final = "foliot_login"
PAGE: Final = 50
EVENTS_PAGE: Final = 200
FAR_FUTURE_MS: Final = 2**62  # "every timer": the bound of the earliest-timer read
CHILDREN_SHOWN: Final = 50  # child runs listed on a run page (newest first; the API pages them all)
KEYS_SHOWN: Final = 50  # concurrency keys listed on a workflow page (waiting ones first)
TIMER_COUNT_CAP: Final = 100_000
STATUS_ORDER: Final = (
    "queued",
    "running",
    "waiting",
    "sleeping",
    "stuck",
    "paused",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
)
ROLE_RANK: Final = {"viewer": 0, "operator": 1, "admin": 2}

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
log = logging.getLogger("foliot.console")


@attrs.frozen
class Session:
    subject: str  # "admin" or an operator token id
    role: str
    name: str | None
    cookie: str
    session_id: str = ""

    @property
    def can_intervene(self) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK["operator"]


def _key() -> bytes:
    admin_token: str = g.admin_token
    return session_key(admin_token)


async def _session() -> Session | None:
    """The request's live session (`foliot.http.sessions`), its activity recorded."""
    cookie = request.cookies.get(COOKIE)
    parts = split_session_cookie(cookie)
    if parts is None or cookie is None:
        return None
    eng = engine()
    now = eng.clock.now()
    found = await eng.store.get_console_session(parts[0])
    if found is None or not session_live(found, parts[1], _key(), now, eng.settings.console_idle_ms):
        return None
    if now - found.last_seen >= TOUCH_MS:
        try:
            await eng.store.touch_console_session(found.session_id, now, now - TOUCH_MS)
        except StorageError as exc:  # the page can still be read; idle time is not extended
            log.warning("could not record console activity: %s", exc)
    subject = found.subject
    if subject == "admin":
        return Session("admin", "admin", "admin token", cookie, found.session_id)
    record = await eng.store.get_operator_token(subject)
    if record is None or record.revoked_at is not None:
        return None
    return Session(subject, record.role, record.name, cookie, found.session_id)


def page(role: str = "viewer") -> Callable[[F], F]:
    """A console route: signed in (else to the sign-in page), CSRF-checked when it posts, and
    held to `role` (403 page otherwise, before anything is read or changed)."""

    def wrap(fn: F) -> F:
        @wraps(fn)
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            session = await _session()
            if session is None:
                if request.method == "GET":
                    target = request.full_path.rstrip("?")
                    return see_other(f"/console/login?{urlencode({'next': target})}", 303)
                raise Unauthorized("sign in first")
            g.console_session = session
            if request.method == "POST":
                form = await request.form
                if not csrf_ok(_key(), session.cookie, form.get("csrf")):
                    raise Forbidden("the form's CSRF token is missing or wrong; reload the page")
            if ROLE_RANK[session.role] < ROLE_RANK[role]:
                raise Forbidden(f"a {session.role} token cannot do this (it needs {role})")
            return await fn(*args, **kwargs)

        return guarded  # type: ignore[return-value]

    return wrap


async def render(template: str, status: int = 200, **context: Any) -> Response:
    session: Session | None = g.get("console_session")
    text = await render_template(
        template,
        session=session,
        csrf=csrf_token(_key(), session.cookie) if session is not None else "",
        ts=ts,
        human=human,
        now=engine().clock.now(),
        **context,
    )
    response = Response(text, status=status, content_type="text/html; charset=utf-8")
    _harden(response)
    return response


def see_other(location: str, status: int = 303) -> Response:
    response = Response("", status=status, headers={"Location": location})
    _harden(response)
    return response


def _harden(response: Response) -> None:
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"


@blueprint.errorhandler(Refused)
async def _error(error: Refused) -> Response:
    status = status_of(error)
    return await render("error.html", status, error=error, error_status=status)


def _form_fields(form: MultiDict[str, str], allowed: set[str]) -> None:
    for key in form:
        if key not in allowed | {"csrf"}:
            raise InvalidRequest("unknown form field", field=key)


# ---------------------------------------------------------------------- sign-in


@blueprint.get("/login")
@reads_query
async def login_page() -> Response:
    check_query({"next"})
    nonce = secrets.token_urlsafe(18)
    cookie = make_cookie(_key(), nonce, engine().clock.now() + LOGIN_MS, purpose="login")
    response = await render(
        "login.html", next=_safe_next(request.args.get("next")), login_csrf=csrf_token(_key(), cookie)
    )
    _set_cookie(response, LOGIN_COOKIE, cookie, LOGIN_MS)
    return response


@blueprint.post("/login")
async def login() -> Response:
    form = await request.form
    _form_fields(form, {"token", "next"})
    cookie = request.cookies.get(LOGIN_COOKIE)
    now = engine().clock.now()
    if read_cookie(_key(), cookie, now, purpose="login") is None or not csrf_ok(
        _key(), cookie, form.get("csrf")
    ):
        raise Forbidden("the sign-in form expired or its CSRF token is wrong; reload it")
    token = (form.get("token") or "").strip()
    subject = None
    admin_token: str = g.admin_token
    if token and secrets.compare_digest(token.encode(), admin_token.encode()):
        subject = "admin"
    elif token:
        caller = await operator_caller(token)
        if caller is not None and caller.key_id is not None:
            subject = caller.key_id
    if subject is None:
        # The form again (its sign-in cookie and CSRF token still hold), saying why.
        return await render(
            "login.html",
            401,
            next=_safe_next(form.get("next")),
            login_csrf=form.get("csrf"),
            login_error="that token is not an admin or operator token (or it was revoked)",
        )
    lifetime = engine().settings.console_session_ms
    record, value = new_session(_key(), subject, now, lifetime)
    await engine().store.add_console_session(record)
    response = see_other(_safe_next(form.get("next")), 303)
    _set_cookie(response, COOKIE, value, lifetime)
    response.delete_cookie(LOGIN_COOKIE, path="/console")
    _harden(response)
    return response


@blueprint.post("/logout")
@page()
async def logout() -> Response:
    """Ends the session in the database (every copy of the cookie, on every node), not only in
    this browser."""
    session: Session = g.console_session
    await engine().store.end_console_session(session.session_id, engine().clock.now())
    response = see_other("/console/login", 303)
    response.delete_cookie(COOKIE, path="/console")
    return response


def _safe_next(target: str | None) -> str:
    """Only a console path: never an open redirect."""
    if target and target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console/"


def _set_cookie(response: Response, name: str, value: str, max_age_ms: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age_ms // 1000,
        path="/console",
        httponly=True,
        samesite="Strict",
        secure=request.scheme == "https",
    )


# ---------------------------------------------------------------------- overview


# The overview's attention card: the newest this many running and waiting runs of each of the
# apps with the most of them (at most ATTENTION_CARD_APPS): a bounded read however many runs
# are open (4 apps x 2 statuses x 200 runs at most), by index (`runs_by_status`).
ATTENTION_CARD_SCAN: Final = 200
ATTENTION_CARD_APPS: Final = 4


async def attention_card(eng: Any, counts: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    """Per app: how many of its newest running and waiting runs need a look, by reason."""
    busiest = sorted(
        {app for app, status in counts if status in ("running", "waiting") and counts[(app, status)]},
        key=lambda app: -(counts.get((app, "running"), 0) + counts.get((app, "waiting"), 0)),
    )[:ATTENTION_CARD_APPS]
    judge = Judge(eng)
    out = []
    for app in busiest:
        reasons: dict[str, int] = {}
        for status in ("running", "waiting"):
            if not counts.get((app, status)):
                continue
            for run in await eng.store.query_runs(RunQuery(app, status=status), ATTENTION_CARD_SCAN, None):
                for reason in await judge.reasons(run):
                    reasons[reason] = reasons.get(reason, 0) + 1
        out.append({"app": app, "reasons": reasons})
    return out


@blueprint.get("/")
@page()
async def overview() -> Response:
    check_query(set())
    eng = engine()
    counts = await eng.store.run_counts()
    apps = sorted({app for app, _ in counts})
    table = {app: {s: counts.get((app, s), 0) for s in STATUS_ORDER} for app in apps}
    totals = {s: sum(counts.get((app, s), 0) for app in apps) for s in STATUS_ORDER}
    open_runs = sum(totals[s] for s in OPEN_STATUSES)
    live = len(eng.supervisor.actors)
    stored_timers = await eng.store.count_timers(TIMER_COUNT_CAP)
    earliest = await eng.store.timers_due_before(FAR_FUTURE_MS, 1)
    push_count, push_sum, buckets = trends.histogram(eng.metrics.registry, trends.PUSH_HISTOGRAM)
    push_buckets = sorted(buckets.items())
    queues = []
    for app, queue in eng.queues.known_queues()[:50]:
        last, _ = eng.queues.last_polled(app, queue)
        queues.append(
            {
                "app": app,
                "queue": queue,
                "backlog": eng.queues.depth(app, queue),
                "waiting": eng.queues.waiting_on(app, queue),
                "last": last,
            }
        )
    return await render(
        "overview.html",
        attention=await attention_card(eng, counts),
        attention_scan=ATTENTION_CARD_SCAN,
        attention_apps=ATTENTION_CARD_APPS,
        statuses=STATUS_ORDER,
        table=table,
        totals=totals,
        biggest=max([1, *totals.values()]),
        open_runs=open_runs,
        live=live,
        passivated=max(open_runs - live, 0),
        timers=eng.timers.stats(),
        stored_timers=stored_timers,
        stored_next_due=earliest[0].due_at if earliest else None,
        timer_cap=TIMER_COUNT_CAP,
        pushes={
            "count": push_count,
            "mean_ms": round(push_sum / push_count * 1000, 1) if push_count else None,
            "p50": trends.quantile(push_buckets, push_count, 0.5),
            "p95": trends.quantile(push_buckets, push_count, 0.95),
            "outcomes": eng.metrics.outcome_counts(),
            "backlog": eng.dispatcher.backlog,
            "inflight": eng.dispatcher.inflight,
        },
        queues=queues,
        spark=Markups(trends.sparklines(eng.trends)),
        app_spark=keyed_markups(trends.keyed_sparklines(eng.trends, eng.trends.apps)),
        queue_spark=keyed_markups(trends.keyed_sparklines(eng.trends, eng.trends.queues)),
        queue_key=trends.queue_key,
        other=trends.OTHER,
        trend_interval_s=eng.trends.interval_ms // 1000,
        trend_span=human(eng.trends.interval_ms * eng.trends.capacity),
    )


class Markups(dict[str, Markup]):
    """Sparklines by series name, marked safe: `trends.sparkline` escapes every text itself."""

    def __init__(self, svgs: dict[str, str]) -> None:
        super().__init__({name: Markup(svg) for name, svg in svgs.items()})


def keyed_markups(svgs: dict[str, dict[str, str]]) -> dict[str, Markups]:
    return {key: Markups(by_name) for key, by_name in svgs.items()}


@blueprint.get("/trends.json")
@page()
async def trends_json() -> Response:
    """The sampled series as JSON (same sign-in as every console page)."""
    check_query(set())
    response = Response(
        json.dumps(engine().trends.as_json(), separators=(",", ":")),
        content_type="application/json",
    )
    _harden(response)
    return response


# ---------------------------------------------------------------------- runs


def _timestamp_arg(args: MultiDict[str, str], name: str) -> int | None:
    raw = args.get(name)
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest("expected a date and time like 2026-11-30T08:00", field=name) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run_query_from_args() -> RunQuery:
    """The runs filter from the query string; 400 naming the field on anything malformed."""
    return run_query_from(request.args)


def run_query_from(args: MultiDict[str, str]) -> RunQuery:
    """The runs filter from a query string or a form."""
    app = (args.get("app") or "").strip()
    if not is_name(app):
        raise InvalidRequest("choose an app", field="app")
    workflow = args.get("workflow") or None
    if workflow is not None and not is_name(workflow):
        raise InvalidRequest("not a workflow name", field="workflow")
    status = args.get("status") or None
    if status is not None and status not in STATUSES:
        raise InvalidRequest("unknown status", field="status")
    version = None
    if args.get("version"):
        raw = args["version"]
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 2**31:
            raise InvalidRequest("must be a whole number 1 or more", field="version")
        version = int(raw)
    business_key = args.get("businessKey") or None
    if business_key is not None and len(business_key) > 256:
        raise InvalidRequest("is longer than 256 characters", field="businessKey")
    error_class = args.get("errorClass") or None
    if error_class is not None and len(error_class) > 128:
        raise InvalidRequest("is longer than 128 characters", field="errorClass")
    return RunQuery(
        app=app,
        workflow=workflow,
        version=version,
        status=status,
        business_key=business_key,
        error_class=error_class,
        created_from=_timestamp_arg(args, "from"),
        created_to=_timestamp_arg(args, "to"),
    )


def _cursor(raw: str | None) -> tuple[int, str] | None:
    if not raw:
        return None
    parts = decode_cursor(raw, 2) if len(raw) <= 512 else None
    if parts is None or type(parts[0]) is not int or not isinstance(parts[1], str) or len(parts[1]) > 64:
        raise InvalidRequest("not a cursor this page made", field="cursor")
    return parts[0], parts[1]


RUN_ARGS: Final = {
    "app",
    "workflow",
    "version",
    "status",
    "businessKey",
    "errorClass",
    "from",
    "to",
    "cursor",
}


@blueprint.get("/runs")
@reads_query
@page()
async def runs() -> Response:
    check_query(RUN_ARGS)
    eng = engine()
    counts = await eng.store.run_counts()
    apps = sorted({app for app, _ in counts})
    if not request.args.get("app"):
        # Every app at once, from the run counters (never a scan of the runs): pick one to list.
        by_app: dict[str, dict[str, int]] = {app: {} for app in apps}
        for (app, status), n in counts.items():
            if n:
                by_app[app][status] = n
        return await render(
            "runs.html",
            query=None,
            apps=apps,
            runs=[],
            next_url=None,
            filters={},
            statuses=STATUS_ORDER,
            by_app=by_app,
        )
    query = run_query_from_args()
    found = await eng.store.query_runs(query, PAGE + 1, _cursor(request.args.get("cursor")))
    page_runs = found[:PAGE]
    judge = Judge(eng)
    attention = {r.run_id: await judge.reasons(r) for r in page_runs}
    filters = {k: v for k, v in request.args.items() if k != "cursor" and v}
    next_url = None
    if len(found) > PAGE:
        cursor = encode_cursor(page_runs[-1].created_at, page_runs[-1].run_id)
        next_url = "/console/runs?" + urlencode({**filters, "cursor": cursor})
    return await render(
        "runs.html",
        query=query,
        apps=apps,
        runs=page_runs,
        attention=attention,
        next_url=next_url,
        filters=filters,
        statuses=STATUS_ORDER,
        bulk=await bulk_offer(query, filters),
    )


# ---------------------------------------------------------------------- one run


async def _owned(app: str, run_id: str) -> Run:
    run = await engine().runs.document(run_id) if len(run_id) <= 64 and is_name(app) else None
    if run is None or run.app != app:
        raise NotFound(f"run {run_id!r} not found in app {app!r}")
    return run


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


async def _definition(run_or_app: str, name: str, version: int) -> dict[str, Any] | None:
    record = await engine().store.get_workflow(run_or_app, name, version)
    if record is None:
        return None
    document: dict[str, Any] = json.loads(record.document)
    return document


async def _run_page(
    app: str,
    run_id: str,
    status: int = 200,
    message: str | None = None,
    error: str | None = None,
    after: int = 0,
) -> Response:
    eng = engine()
    run = await _owned(app, run_id)
    events = await eng.store.list_events(run.run_id, after, EVENTS_PAGE + 1)
    more = len(events) > EVENTS_PAGE
    events = events[:EVENTS_PAGE]
    obs = await observe(eng, run)
    diagnosis = diagnose(obs)
    document = await _definition(run.app, run.workflow, run.version)
    visited = set(run.state) | {
        e.step for e in events if e.step and e.type in ("step_completed", "step_started")
    }
    failed = {e.step for e in events if e.step and e.type == "step_failed"}
    if (
        run.current_step
        and run.is_open
        and any(
            e.type in ("task_failed", "child_failed", "child_not_started")
            and e.step == run.current_step
            and e.generation == run.generation
            for e in events
        )
    ):
        failed.add(run.current_step)  # its attempts keep failing: red, not green
    if run.error is not None and run.error.step:
        failed.add(run.error.step)
    if run.status == "completed":
        visited.add("$end")
    elif run.error is not None and run.error.cls in ("failed_by_definition", "stuck_by_definition"):
        visited.add("$fail" if run.error.cls == "failed_by_definition" else "$stuck")
    elif run.status == "failed" and run.error is not None and run.error.compensated is not None:
        visited.add("$fail")  # its compensation reached $fail
    svg = (
        graph.render(document, graph.Marks(run.current_step, frozenset(visited), frozenset(failed)))
        if document
        else ""
    )
    steps = [s["name"] for s in (document or {}).get("steps", [])]
    definition = await eng.directory.maybe_definition(run.app, run.workflow, run.version)
    offers = (
        {action for action in machine.INTERVENTIONS if machine.accepts(run, action, definition)}
        if definition is not None
        else set()
    )
    children = await eng.store.list_runs(
        RunFilter(run.app, parent_run_id=run.run_id), CHILDREN_SHOWN + 1, None
    )
    return await render(
        "run.html",
        status,
        children=children[:CHILDREN_SHOWN],
        more_children=len(children) > CHILDREN_SHOWN,
        run=run,
        view=run_view(run),
        events=[event_view(e) for e in events],
        next_events=f"?after={events[-1].seq}" if more else None,
        obs=obs,
        diagnosis=diagnosis,
        svg=svg,
        steps=steps,
        pretty=_pretty,
        message=message,
        error=error,
        offers=offers,  # the interventions the API would accept now (`machine.accepts`)
    )


@blueprint.get("/apps/<app>/runs/<run_id>")
@reads_query
@page()
async def run_detail(app: str, run_id: str) -> Response:
    check_query({"after", "done"})
    done = request.args.get("done")
    message = f"{done}: done" if done in ACTIONS else None
    after = 0
    raw_after = request.args.get("after")
    if raw_after:
        if not raw_after.isascii() or not raw_after.isdigit() or len(raw_after) > 18:
            raise InvalidRequest("must be a whole number", field="after")
        after = int(raw_after)
    return await _run_page(app, run_id, message=message, after=after)


ACTIONS: Final = {
    "cancel": {"reason", "confirm"},
    "redrive": {"reason", "confirm"},
    "rewind": {"reason", "confirm", "toStep", "version"},
    "skip": {"reason", "confirm", "output"},
    "state": {"reason", "confirm", "set", "unset"},
    "pause": {"reason", "confirm"},
    "unpause": {"reason", "confirm"},
}


def _json_field(form: MultiDict[str, str], name: str, default: Any) -> Any:
    raw = (form.get(name) or "").strip()
    if not raw:
        return default
    try:
        return loads(raw, MAX_DEPTH + 1)
    except DepthError:
        raise InvalidRequest(f"nests deeper than {MAX_DEPTH} levels", field=name) from None
    except ValueError as exc:
        raise InvalidRequest(f"is not valid JSON: {exc}", field=name) from None


def intervention(action: str, form: MultiDict[str, str]) -> machine.Message:
    """The machine message a console form asks for, validated as the HTTP API validates it."""
    _form_fields(form, ACTIONS[action])
    if form.get("confirm") != "yes":
        raise InvalidRequest("tick the confirmation box", field="confirm")
    reason = (form.get("reason") or "").strip() or None
    if reason is not None and len(reason) > MAX_REASON:
        raise InvalidRequest(f"is longer than {MAX_REASON} characters", field="reason")
    if action == "cancel":
        return machine.Cancel(reason)
    if action == "redrive":
        return machine.Redrive(reason)
    if action == "pause":
        return machine.Pause(reason)
    if action == "unpause":
        return machine.Unpause(reason)
    if action == "rewind":
        to_step = form.get("toStep") or ""
        if not is_name(to_step):
            raise InvalidRequest("choose a step", field="toStep")
        version = None
        raw = (form.get("version") or "").strip()
        if raw:
            if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 2**31:
                raise InvalidRequest("must be a whole number 1 or more", field="version")
            version = int(raw)
        return machine.Rewind(to_step, version=version, reason=reason)
    if action == "skip":
        output = _json_field(form, "output", None)
        check_payload(output, "output")
        return machine.Skip(output, reason)
    changes = _json_field(form, "set", {})
    if not isinstance(changes, dict):
        raise InvalidRequest("must be a JSON object of state keys", field="set")
    removals = tuple(k.strip() for k in (form.get("unset") or "").split(",") if k.strip())
    if reason is None:
        raise InvalidRequest("a reason is required", field="reason")
    if not changes and not removals:
        raise InvalidRequest("give keys to set or unset", field="set")
    for key in (*changes, *removals):
        if not is_name(key):
            raise InvalidRequest(f"{key!r} is not a step name", field="set" if key in changes else "unset")
    if set(changes) & set(removals):
        raise InvalidRequest("a key cannot be both set and unset", field="unset")
    for key, value in changes.items():
        check_payload(value, f"set.{key}")
    return machine.EditState(changes, removals, reason)


@blueprint.post("/apps/<app>/runs/<run_id>/<action>")
@page(role="operator")
async def intervene(app: str, run_id: str, action: str) -> Response:
    if action not in ACTIONS:
        raise NotFound(f"no intervention {action!r}")
    known = await _owned(app, run_id)
    check_local(engine().placement, run_id)  # owned elsewhere: forwarded before the form is read
    form = await request.form
    try:
        message = intervention(action, form)
    except Refused as exc:
        return await _run_page(app, run_id, status_of(exc), error=f"{action}: {exc}")
    reply, _ = await engine().runs.ask(run_id, message, known)
    if isinstance(reply, machine.Rejected):
        refused = rejected_error(reply)
        return await _run_page(app, run_id, status_of(refused), error=f"{action}: {refused}")
    return see_other(f"/console/apps/{app}/runs/{run_id}?done={action}", 303)


# ---------------------------------------------------------------------- actors, timers, queues


@blueprint.get("/actors")
@reads_query
@page()
async def actors() -> Response:
    check_query({"sort"})
    sort = request.args.get("sort", "mailbox")
    if sort not in ("mailbox", "age"):
        raise InvalidRequest("sort by mailbox or age", field="sort")
    live = list(engine().supervisor.actors.values())
    if sort == "mailbox":
        shown = heapq.nlargest(PAGE * 4, live, key=lambda a: (a.mailbox_depth, -a.live_since))
    else:
        shown = heapq.nsmallest(PAGE * 4, live, key=lambda a: a.live_since)
    return await render("actors.html", actors=[a.describe() for a in shown], total=len(live), sort=sort)


@blueprint.get("/timers")
@reads_query
@page()
async def timers() -> Response:
    check_query({"cursor"})
    eng = engine()
    after = None
    raw = request.args.get("cursor")
    if raw:
        parts = decode_cursor(raw, 3) if len(raw) <= 512 else None
        if parts is None or type(parts[0]) is not int or not all(isinstance(p, str) for p in parts[1:]):
            raise InvalidRequest("not a cursor this page made", field="cursor")
        after = (parts[0], parts[1], parts[2])
    rows = await eng.store.timers_due_before(2**62, PAGE + 1, after)
    shown = rows[:PAGE]
    next_url = None
    if len(rows) > PAGE:
        last = shown[-1]
        next_url = "/console/timers?" + urlencode(
            {"cursor": encode_cursor(last.due_at, last.run_id, last.slot)}
        )
    runs = {}
    for row in shown:
        doc = await eng.runs.document(row.run_id)
        if doc is not None:
            runs[row.run_id] = doc.app
    return await render(
        "timers.html",
        stats=eng.timers.stats(),
        rows=shown,
        apps=runs,
        next_url=next_url,
        stored=await eng.store.count_timers(TIMER_COUNT_CAP),
        timer_cap=TIMER_COUNT_CAP,
    )


@blueprint.get("/queues")
@page()
async def queues() -> Response:
    check_query(set())
    eng = engine()
    out = []
    for app, queue in eng.queues.known_queues()[:200]:
        last, pollers = eng.queues.last_polled(app, queue)
        oldest = eng.queues.oldest_offer(app, queue)
        row = await eng.store.get_task(oldest) if oldest is not None else None
        out.append(
            {
                "app": app,
                "queue": queue,
                "backlog": eng.queues.depth(app, queue),
                "waiting": eng.queues.waiting_on(app, queue),
                "oldest": row.created_at if row is not None else None,
                "oldest_run": row.run_id if row is not None else None,
                "last": last,
                "pollers": pollers,
            }
        )
    return await render(
        "queues.html",
        queues=out,
        since=eng.started_at,
        queue_spark=keyed_markups(trends.keyed_sparklines(eng.trends, eng.trends.queues)),
        queue_key=trends.queue_key,
        other=trends.OTHER,
        trend_span=human(eng.trends.interval_ms * eng.trends.capacity),
    )


# ---------------------------------------------------------------------- workflows


async def _app_page() -> tuple[list[str], str, str | None]:
    """(every app, the chosen one (the first by default), the name cursor) of a per-app list."""
    apps = sorted({app for app, _ in await engine().store.run_counts()})
    app = request.args.get("app") or (apps[0] if apps else "")
    if app and not is_name(app):
        raise InvalidRequest("not an app name", field="app")
    after = request.args.get("cursor") or None
    if after is not None and not is_name(after):
        raise InvalidRequest("not a cursor this page made", field="cursor")
    return apps, app, after


@blueprint.get("/workflows")
@reads_query
@page()
async def workflows() -> Response:
    check_query({"app", "cursor"})
    eng = engine()
    apps, app, after = await _app_page()
    records = await eng.store.list_workflows(app, PAGE + 1, after) if app else []
    shown = records[:PAGE]
    next_url = None
    if len(records) > PAGE:
        next_url = "/console/workflows?" + urlencode({"app": app, "cursor": shown[-1].name})
    return await render("workflows.html", app=app, apps=apps, workflows=shown, next_url=next_url)


# ---------------------------------------------------------------------- schedules


@blueprint.get("/schedules")
@reads_query
@page()
async def schedules() -> Response:
    """An app's schedules: definition, pause, next fire, counters and the last fires' runs."""
    check_query({"app", "cursor"})
    eng = engine()
    apps, app, after = await _app_page()
    found = await eng.store.list_schedules(app, PAGE + 1, after) if app else []
    shown = found[:PAGE]
    upcoming = await eng.schedules.next_fires(shown, 1)  # cron's off the event loop
    rows = [
        (s, await eng.store.last_schedule_fires(app, s.name, 3), nxt)
        for s, nxt in zip(shown, upcoming, strict=True)
    ]
    next_url = None
    if len(found) > PAGE:
        next_url = "/console/schedules?" + urlencode({"app": app, "cursor": shown[-1].name})
    return await render("schedules.html", app=app, apps=apps, rows=rows, next_url=next_url)


def diff_lines(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, line) of a unified diff of two definitions' pretty JSON; kind is + - @ or ' '."""
    out = []
    lines = difflib.unified_diff(_pretty(old).splitlines(), _pretty(new).splitlines(), lineterm="", n=3)
    for line in list(lines)[2:]:
        out.append((line[:1] or " ", line))
    return out


@blueprint.get("/apps/<app>/workflows/<name>")
@reads_query
@page()
async def workflow(app: str, name: str) -> Response:
    check_query({"version", "against"})
    if not is_name(app) or not is_name(name):
        raise NotFound("no such workflow")
    eng = engine()
    latest = await eng.store.get_workflow(app, name, None)
    if latest is None:
        raise NotFound(f"workflow {name!r} not found in app {app!r}")

    def version_arg(field: str, default: int) -> int:
        raw = request.args.get(field)
        if not raw:
            return default
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= latest.version:
            raise InvalidRequest(f"must be a version 1..{latest.version}", field=field)
        return int(raw)

    version = version_arg("version", latest.version)
    against = version_arg("against", version - 1) if version > 1 or request.args.get("against") else None
    document = await _definition(app, name, version)
    assert document is not None
    diff = None
    if against is not None and against != version:
        older = await _definition(app, name, against)
        diff = diff_lines(older or {}, document)
    first = max(1, latest.version - 99)
    concurrency = document.get("concurrency") if isinstance(document.get("concurrency"), dict) else None
    keys: list[dict[str, Any]] = []
    if concurrency is not None:
        found = await eng.store.key_counts(app, name, KEYS_SHOWN + 1)
        keys = [{"value": v, "active": a, "waiting": w} for v, a, w in found]
    return await render(
        "workflow.html",
        concurrency=concurrency,
        keys=keys[:KEYS_SHOWN],
        more_keys=len(keys) > KEYS_SHOWN,
        app=app,
        name=name,
        version=version,
        against=against,
        versions=list(range(latest.version, first - 1, -1)),
        document=_pretty(document),
        svg=graph.render(document),
        diff=diff,
    )


# ---------------------------------------------------------------------- tokens (admin)


@blueprint.get("/tokens")
@page(role="admin")
async def tokens() -> Response:
    check_query(set())
    return await render("tokens.html", tokens=await engine().store.list_operator_tokens(), created=None)


@blueprint.post("/tokens")
@page(role="admin")
async def create_token() -> Response:
    form = await request.form
    _form_fields(form, {"role", "name"})
    role = form.get("role") or ""
    if role not in ROLES:
        raise InvalidRequest(f"must be one of {list(ROLES)}", field="role")
    name = (form.get("name") or "").strip() or None
    if name is not None and not is_name(name):
        raise InvalidRequest("must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", field="name")
    token_id, token, secret_hash = credentials.new_operator_token()
    record = OperatorTokenRecord(token_id, name, role, secret_hash, engine().clock.now())
    await engine().store.add_operator_token(record)
    return await render(
        "tokens.html", 201, tokens=await engine().store.list_operator_tokens(), created=(record, token)
    )


@blueprint.post("/tokens/<token_id>/revoke")
@page(role="admin")
async def revoke_token(token_id: str) -> Response:
    form = await request.form
    _form_fields(form, set())
    if len(token_id) > 64 or not await engine().store.revoke_operator_token(token_id, engine().clock.now()):
        raise NotFound(f"operator token {token_id!r} not found (or already revoked)")
    return see_other("/console/tokens", 303)


# ---------------------------------------------------------------------- bulk (foliot/http/bulk.py)

BULK_COUNT_CAP: Final = 10_000
BULK_PAGE: Final = 1000  # runs examined per bulk call
BULK_CALLS_PER_POST: Final = 10  # then the page offers "Continue" with the cursor
BULK_FIELDS: Final = ("app", "workflow", "status", "version", "businessKey")


async def bulk_offer(query: RunQuery, filters: dict[str, str]) -> dict[str, Any]:
    """What the runs page offers for bulk cancel and redrive under this filter."""
    unsupported = [name for name in ("errorClass", "from", "to") if filters.get(name)]
    if query.workflow is None:
        return {"ok": False, "why": "Bulk cancel and redrive act on one workflow: filter by workflow first."}
    if unsupported:
        return {
            "ok": False,
            "why": "Bulk interventions select by workflow, status, version and businessKey; "
            f"clear {', '.join(unsupported)} first.",
        }
    count = await engine().store.count_runs(query, BULK_COUNT_CAP + 1)
    fields = {k: filters[k] for k in BULK_FIELDS if filters.get(k)}
    return {"ok": True, "count": count, "cap": BULK_COUNT_CAP, "fields": fields}


@blueprint.post("/runs/bulk/<verb>")
@page(role="operator")
async def bulk_action(verb: str) -> Response:
    if verb not in bulk_api.VERBS:
        raise NotFound(f"no bulk {verb!r}")
    form = await request.form
    _form_fields(form, {*BULK_FIELDS, "reason", "confirm", "cursor"})
    query = run_query_from(form)
    if query.workflow is None:
        raise InvalidRequest("bulk interventions act on one workflow", field="workflow")
    if await engine().directory.app_record(query.app) is None:
        raise NotFound(f"app {query.app!r} not found")
    fields = {k: form[k] for k in BULK_FIELDS if form.get(k)}
    back = "/console/runs?" + urlencode(fields)
    context: dict[str, Any] = {
        "verb": verb,
        "fields": fields,
        "back": back,
        "page_cap": BULK_PAGE * BULK_CALLS_PER_POST,
    }
    if form.get("confirm") != "yes":
        count = await engine().store.count_runs(query, BULK_COUNT_CAP + 1)
        return await render("bulk_confirm.html", count=count, cap=BULK_COUNT_CAP, result=None, **context)
    reason = (form.get("reason") or "").strip() or None
    spec = bulk_api.BulkBody(
        workflow=query.workflow,
        status=query.status,
        version=query.version,
        business_key=query.business_key,
        reason=reason,
        limit=BULK_PAGE,
        cursor=form.get("cursor") or None,
    )
    done_word = bulk_api.VERBS[verb][1]
    totals: dict[str, Any] = {"examined": 0, "done": 0, "skipped": 0, "refused": [], "cursor": None}
    for _ in range(BULK_CALLS_PER_POST):
        answer = await bulk_api.apply_bulk(query.app, verb, spec)
        totals["examined"] += answer["matched"]
        totals["done"] += answer[done_word]
        totals["skipped"] += answer["skipped"]
        totals["refused"] += answer["refused"]
        totals["cursor"] = answer["cursor"]
        if answer["cursor"] is None:
            break
        spec = attrs.evolve(spec, cursor=answer["cursor"])
    return await render(
        "bulk_confirm.html", count=0, cap=BULK_COUNT_CAP, result=totals, done_word=done_word, **context
    )


# ---------------------------------------------------------------------- safe deploys


@blueprint.get("/apps/<app>/workflows/<name>/deploy")
@reads_query
@page(role="operator")
async def deploy_report(app: str, name: str) -> Response:
    """The dry-run of a registered version against the runs in flight and recorded, with the
    form that migrates the open runs to it. The API's dry-run needs an operator token (a
    viewer's is refused), so does this page: a viewer is refused before anything is computed."""
    check_query({"version"})
    if not is_name(app) or not is_name(name):
        raise NotFound("no such workflow")
    latest = await engine().store.get_workflow(app, name, None)
    if latest is None:
        raise NotFound(f"workflow {name!r} not found in app {app!r}")
    raw = request.args.get("version") or str(latest.version)
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= latest.version:
        raise InvalidRequest(f"must be a version 1..{latest.version}", field="version")
    version = int(raw)
    document = await _definition(app, name, version)
    assert document is not None
    report = await deploys_api.dry_run_report(app, name, document, deploys_api.DEFAULT_REPLAY)
    return await render("deploy.html", app=app, name=name, version=version, report=report, result=None)


@blueprint.post("/apps/<app>/workflows/<name>/migrate")
@page(role="operator")
async def deploy_migrate(app: str, name: str) -> Response:
    form = await request.form
    _form_fields(form, {"toVersion", "stepMap", "reason", "confirm", "cursor"})
    if not is_name(app) or not is_name(name):
        raise NotFound("no such workflow")
    if form.get("confirm") != "yes":
        raise InvalidRequest("tick the box to confirm", field="confirm")
    raw = form.get("toVersion") or ""
    if not raw.isascii() or not raw.isdigit():
        raise InvalidRequest("must be a version number", field="toVersion")
    step_map: dict[str, str] = {}
    for line in (form.get("stepMap") or "").splitlines():
        if not line.strip():
            continue
        old, sep, new = line.partition("=")
        if not sep:
            raise InvalidRequest("one OLD=NEW per line", field="stepMap")
        step_map[old.strip()] = new.strip()
    spec = deploys_api.MigrateBody(
        to_version=int(raw),
        step_map=step_map or None,
        reason=(form.get("reason") or "").strip() or None,
        limit=BULK_PAGE,
        cursor=form.get("cursor") or None,
    )
    totals: dict[str, Any] = {"matched": 0, "migrated": 0, "skipped": 0, "refused": [], "cursor": None}
    for _ in range(BULK_CALLS_PER_POST):
        answer = await deploys_api.apply_migrate(app, name, spec)
        for key in ("matched", "migrated", "skipped"):
            totals[key] += answer[key]
        totals["refused"].extend(answer["refused"][: 100 - len(totals["refused"])])
        totals["cursor"] = answer["cursor"]
        if answer["cursor"] is None:
            break
        spec = attrs.evolve(spec, cursor=answer["cursor"])
    return await render(
        "deploy.html",
        app=app,
        name=name,
        version=spec.to_version,
        report=None,
        result=totals,
        step_map=form.get("stepMap") or "",
        reason=spec.reason or "",
    )
