"""Operations: health, readiness, Prometheus metrics, OpenAPI, and live actor inspection."""

from __future__ import annotations

import json
from typing import Any

from quart import Blueprint, Response, current_app, g, request

from ..cluster.report import report, single_node
from ..core.errors import InvalidRequest, NotFound, Unavailable
from ..core.workflow.duration import DurationError, parse_duration
from ..core.workflow.duration import format_timestamp as ts
from ..core.workflow.model import STATUSES
from ..core.workflow.schema import workflow_json_schema
from ..observe.metrics import CONTENT_TYPE, SWF_CLOSE_STATUSES
from ..storage.cluster import ClusterPostgres
from .app import (
    EmptyBody,
    body,
    check_query,
    engine,
    json_response,
    query_int,
    reads_query,
    require_admin,
)
from .openapi import document
from .reference import render
from .sessions import idle_ends, key_check, session_key

blueprint = Blueprint("admin", __name__)


@blueprint.get("/healthz")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@blueprint.get("/readyz")
async def readyz() -> Response:
    eng = engine()
    if not eng.ready:
        raise Unavailable("recovery has not finished")
    if not eng.serving:
        raise Unavailable("this node does not hold its partition leases yet, or is recovering them")
    try:
        await eng.store.ping()
    except Exception as exc:
        raise Unavailable(f"storage is not reachable: {type(exc).__name__}") from None
    health = eng.write_health
    short = await health.shortfall()
    if short is not None:
        raise Unavailable(short)
    if not await health.recheck(eng.store, eng.clock.now()):
        # No detail of the store's error here: /readyz is unauthenticated (the log has it).
        raise Unavailable(f"storage refuses writes (since {ts(health.failing_since)}); commits fail")
    return json_response({"status": "ready"})


@blueprint.get("/openapi.json")
async def openapi() -> Response:
    return json_response(document(current_app))


@blueprint.get("/schemas/workflow.json")
async def workflow_schema() -> Response:
    """The JSON Schema of a workflow definition: point an editor's YAML or JSON validation at it."""
    return Response(
        json.dumps(workflow_json_schema(), ensure_ascii=False),
        content_type="application/schema+json",
    )


@blueprint.get("/reference")
async def reference() -> Response:
    """The API reference, rendered from `/openapi.json` (no script, nothing fetched)."""
    return Response(render(document(current_app)), content_type="text/html; charset=utf-8")


def _actor_view(view: dict[str, Any]) -> dict[str, Any]:
    view = dict(view)
    view["liveSince"] = ts(view["liveSince"])
    view["lastMessageAt"] = ts(view["lastMessageAt"])
    if view.get("inflight") is not None:
        view["inflight"] = {**view["inflight"], "deadline": ts(view["inflight"]["deadline"])}
    return view


# An SWF execution actor's `status`: OPEN, or its close status.
SWF_STATUSES = frozenset({"OPEN", *SWF_CLOSE_STATUSES})


@blueprint.get("/admin/actors")
@reads_query
async def actors() -> Response:
    await require_admin()
    check_query({"status", "limit", "kind"})
    status = request.args.get("status")
    kind = request.args.get("kind")
    if kind is not None and kind not in engine().kinds:
        raise InvalidRequest(f"must be one of {', '.join(sorted(engine().kinds))}", field="kind")
    if status is not None and status not in STATUSES and status not in SWF_STATUSES:
        raise InvalidRequest("unknown status", field="status")
    limit = query_int("limit", 100, 1, 1000)
    out = []
    for actor in list(engine().supervisor.actors.values()):
        if kind is not None and actor.kind.name != kind:
            continue
        view = actor.describe()
        if status is None or view.get("status") == status:
            out.append(_actor_view(view))
            if len(out) >= limit:
                break
    return json_response({"actors": out, "live": len(engine().supervisor.actors)})


@blueprint.get("/admin/actors/<run_id>")
async def actor(run_id: str) -> Response:
    await require_admin()
    eng = engine()
    found = eng.supervisor.actors.get(run_id)
    if found is None:
        raise NotFound(f"no live actor for run {run_id!r} (it may be passivated)")
    view = _actor_view(found.describe())
    held = found.kind.timers(found.state) if found.state is not None else ()
    in_wheel = {
        (t["slot"], t["kind"], t["key"]) for t in eng.timers.pending_for(run_id, [s for s, _ in held])
    }
    view["timers"] = [
        {"slot": slot, "kind": t.kind, "due": ts(t.due), "inMemory": (slot, t.kind, t.key) in in_wheel}
        for slot, t in held
    ]
    return json_response(view)


STORED_TIMERS_CAP = 100_000  # the console's cap: a bounded index walk, `truncated` beyond it


@blueprint.get("/admin/timers")
async def timers() -> Response:
    """The timers stored (every node's, the console's figures) and this node's in-memory
    window of them (what the wheel holds: due within its horizon, or firing now)."""
    await require_admin()
    eng = engine()
    stats = eng.timers.stats()
    stored = await eng.store.count_timers(STORED_TIMERS_CAP)
    first = await eng.store.timers_due_before(2**62, 1)
    return json_response(
        {
            "count": stored,
            "truncated": stored >= STORED_TIMERS_CAP,
            "nextDue": ts(first[0].due_at) if first else None,
            "window": {
                "count": stats["inMemory"],
                "nextDue": ts(stats["nextDue"]),
                "end": ts(stats["horizon"]),
            },
            "lagMs": stats["lagMs"],
            "maxLagMs": stats["maxLagMs"],
            "fired": stats["fired"],
            "windowEnd": ts(stats["horizon"]),
        }
    )


@blueprint.get("/admin/queues")
async def queues() -> Response:
    await require_admin()
    check_query(set())
    return json_response({"queues": engine().queues.describe()})


@blueprint.get("/admin/cluster")
async def cluster() -> Response:
    """The nodes sharing this database and who holds which partition (a single node on SQLite)."""
    await require_admin()
    check_query(set())
    eng = engine()
    if isinstance(eng.store, ClusterPostgres):
        view = await eng.store.cluster_view()
    else:
        node_id, address = current_app.config.get("FOLIOT_NODE") or ("local", request.host_url)
        view = single_node(node_id, address.rstrip("/"), eng.clock.now(), len(eng.supervisor.actors))
    return json_response(report(view))


@blueprint.get("/metrics")
async def metrics() -> Response:
    await require_admin()
    eng = engine()
    open_runs = await eng.store.count_open_runs()
    swf = await eng.store.swf_counts()
    queued = await eng.store.queued_by_workflow() if open_runs.get("queued") else {}
    return Response(eng.metrics.exposition(open_runs, swf, queued), content_type=CONTENT_TYPE)


@blueprint.get("/admin/runs/overdue")
@reads_query
async def overdue() -> Response:
    """Open runs pending at their current step longer than `olderThan`, grouped, largest first."""
    await require_admin()
    check_query({"olderThan", "limit"})
    raw = request.args.get("olderThan", "1h")
    try:
        older_than = parse_duration(raw)
    except DurationError as exc:
        raise InvalidRequest(str(exc), field="olderThan") from None
    limit = query_int("limit", 100, 1, 1000)
    eng = engine()
    groups = await eng.store.overdue_runs(eng.clock.now() - older_than, limit)
    return json_response(
        {
            "groups": [
                {
                    "app": g.app,
                    "workflow": g.workflow,
                    "step": g.step,
                    "status": g.status,
                    "count": g.count,
                    "oldestSince": ts(g.oldest_since),
                }
                for g in groups
            ]
        }
    )


@blueprint.get("/admin/sessions")
@reads_query
async def sessions() -> Response:
    """The console's live sessions, newest first (`foliot.http.sessions`)."""
    await require_admin()
    check_query({"limit"})
    limit = query_int("limit", 100, 1, 1000)
    eng = engine()
    now, idle = eng.clock.now(), eng.settings.console_idle_ms
    check = key_check(session_key(g.admin_token))
    out = []
    tokens: dict[str, Any] = {}
    for found in await eng.store.live_console_sessions(now, now - idle, check, limit):
        name: str | None = "admin token"
        role = "admin"
        if found.subject != "admin":
            if found.subject not in tokens:
                tokens[found.subject] = await eng.store.get_operator_token(found.subject)
            token = tokens[found.subject]
            if token is None or token.revoked_at is not None:
                continue  # ended with its token
            name, role = token.name, token.role
        out.append(
            {
                "sessionId": found.session_id,
                "subject": found.subject,
                "name": name,
                "role": role,
                "createdAt": ts(found.created_at),
                "lastSeenAt": ts(found.last_seen),
                "idleExpiresAt": ts(idle_ends(found, idle)),
                "expiresAt": ts(found.expires_at),
            }
        )
    return json_response({"sessions": out})


@blueprint.delete("/admin/sessions/<session_id>")
async def end_session(session_id: str) -> Response:
    """End one console session: its cookie is refused from the next request on, everywhere."""
    await require_admin()
    check_query(set())
    await body(EmptyBody, empty_ok=True)  # an unknown member is a 400 and nothing ends
    eng = engine()
    if len(session_id) > 64 or not await eng.store.end_console_session(session_id, eng.clock.now()):
        raise NotFound(f"console session {session_id!r} not found (or already ended)")
    return json_response({"sessionId": session_id, "ended": True})
