"""The logic both clients share, with no I/O: each operation is built as a `Call` (request +
how to read its answer + whether it is safe to send twice), and the retry rules are pure
functions. `Client` and `AsyncClient` only send calls.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from . import errors
from .models import (
    App,
    AppCreated,
    CompleteResult,
    DebouncedStart,
    Event,
    Heartbeat,
    NewApiKey,
    NewSigningSecret,
    Page,
    RateLimit,
    Run,
    SignalResult,
    Task,
    Workflow,
    WorkflowRef,
    parse_time,
)

T = TypeVar("T")

NO_BODY: Any = object()
UNSET: Any = object()


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP call. `safe` means sending it twice has the effect of sending it once, so it
    may be retried even when an earlier try may have reached the server."""

    method: str
    path: str
    parse: Callable[[int, Any], T]
    json: Any = NO_BODY
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    safe: bool = False
    timeout: float | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: `min(initial * coefficient^(n-1), max_interval)` scaled
    by a random factor in [0.5, 1], never less than the server's `Retry-After`."""

    max_attempts: int = 4
    initial_interval: float = 0.25
    coefficient: float = 2.0
    max_interval: float = 5.0

    def delay(
        self, attempt: int, error: errors.FoliotError, rand: Callable[[], float] = random.random
    ) -> float:
        base = min(self.initial_interval * self.coefficient ** (attempt - 1), self.max_interval)
        wait = base * (0.5 + rand() / 2)
        if isinstance(error, errors.Overloaded) and error.retry_after is not None:
            wait = max(wait, error.retry_after)
        return wait


@dataclass(frozen=True)
class Polling:
    """How `wait_for_run` and `follow_events` poll: `interval` first, doubling up to
    `max_interval` while nothing changes, back to `interval` when something did."""

    interval: float = 0.1
    max_interval: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.interval <= self.max_interval:
            raise ValueError("need 0 < interval <= max_interval")

    def after(self, delay: float) -> float:
        return min(delay * 2, self.max_interval)


def wait_time(delay: float, deadline: float | None, now: float) -> float | None:
    """How long to sleep before the next read: `delay`, cut to the deadline; None once the
    deadline has passed (then stop)."""
    if deadline is None:
        return delay
    left = deadline - now
    return None if left <= 0 else min(delay, left)


DEFAULT_POLLING = Polling()
NO_RETRY = RetryPolicy(max_attempts=1)
DEFAULT_RETRY = RetryPolicy()


def should_retry(error: errors.FoliotError, safe: bool) -> bool:
    """Retry when the call had no effect for sure (never connected; 429/503 "nothing changed"),
    or when it is safe to repeat and the failure is one a repeat can cure."""
    if isinstance(error, errors.TransportError):
        return safe or not error.connected
    if isinstance(error, errors.ApiError):
        return error.retryable_without_effect or (safe and error.status in (502, 504))
    return False


def transport_error(exc: httpx.TransportError) -> errors.TransportError:
    """`connected=False` only when the request certainly never left (refused, pool full)."""
    never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    return errors.TransportError(f"{type(exc).__name__}: {exc}", connected=not never_sent)


def read_answer(call: Call[T], response: httpx.Response) -> T:
    """The parsed result of a 2xx answer; the typed `ApiError` otherwise."""
    try:
        payload = response.json() if response.content else None
    except ValueError:
        payload = None
    if response.status_code >= 400 or (response.status_code >= 300 and payload is None):
        raise errors.from_response(response.status_code, payload)
    return call.parse(response.status_code, payload)


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _clean(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _page(key: str, make: Callable[[dict[str, Any]], T]) -> Callable[[int, Any], Page[T]]:
    def parse(_: int, d: Any) -> Page[T]:
        return Page([make(item) for item in d[key]], d.get("nextCursor"))

    return parse


def _run(_: int, d: Any) -> Run:
    return Run.from_json(d)


def _raw(_: int, d: Any) -> Any:
    return d


def _none(_: int, __: Any) -> None:
    return None


@dataclass(frozen=True)
class Actor:
    """A live run actor on the node answering (`GET /admin/actors`)."""

    run_id: str
    app: str | None
    workflow: str | None
    status: str | None
    current_step: str | None
    mailbox_depth: int
    inflight: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Actor:
        return cls(
            d["runId"], d.get("app"), d.get("workflow"), d.get("status"), d.get("currentStep"),
            int(d.get("mailboxDepth") or 0), d.get("inflight"), d,
        )  # fmt: skip


@dataclass(frozen=True)
class Diagnosis:
    """Why a run is (not) moving, as the server explains it (`GET …/runs/{id}/diagnosis`)."""

    summary: str
    attention: bool  # the run will not move without someone acting
    facts: list[dict[str, Any]]  # [{code, text}]
    raw: dict[str, Any] = field(repr=False, compare=False)


OPERATOR_ROLES = ("viewer", "operator", "admin")


@dataclass(frozen=True)
class OperatorToken:
    """A scoped token for people (`/admin/operator-tokens`): `token` is set only in the answer
    that created it (shown once)."""

    token_id: str
    name: str | None
    role: str
    created_at: datetime | None
    token: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OperatorToken:
        return cls(d["tokenId"], d.get("name"), d["role"], parse_time(d.get("createdAt")), d.get("token"), d)


BULK_ACTIONS = ("pause", "unpause", "cancel", "redrive")
_BULK_COUNT = {"pause": "paused", "unpause": "unpaused", "cancel": "cancelled", "redrive": "redriven"}


@dataclass(frozen=True)
class BulkSelection:
    """Which runs a bulk intervention examines (`workflow` required) and acts on."""

    workflow: str
    status: str | None = None
    business_key: str | None = None
    step: str | None = None
    version: int | None = None
    reason: str | None = None
    limit: int | None = None  # runs examined per page, 1..1000

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            **_clean({"status": self.status, "businessKey": self.business_key, "step": self.step,
                      "version": self.version, "reason": self.reason, "limit": self.limit}),
        }  # fmt: skip


@dataclass(frozen=True)
class BulkPage:
    """One page of a bulk intervention: `acted` is the verb's count (`paused`, `cancelled`, ...);
    `cursor` is None after the last page."""

    matched: int
    acted: int
    skipped: int
    cursor: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    # runs the intervention refused for another reason than their status: {runId, step, code, message}
    refused: tuple[dict[str, Any], ...] = ()


def _bulk_page(action: str) -> Callable[[int, Any], BulkPage]:
    def parse(_: int, d: Any) -> BulkPage:
        counts = int(d["matched"]), int(d[_BULK_COUNT[action]]), int(d["skipped"])
        return BulkPage(*counts, d.get("cursor"), d, tuple(d.get("refused") or ()))

    return parse


def _app_created_or_view(status: int, d: Any) -> AppCreated | App:
    if status == 201 and "apiKey" in d:
        return AppCreated(
            d["app"], d["handlerBaseUrl"], d.get("description"), d["apiKey"], d["keyId"],
            d["signingSecret"], d["secretId"], int(d.get("weight") or 1),
            RateLimit.from_json(d.get("rateLimit")),
        )  # fmt: skip
    return App.from_json(d)


class BaseClient:
    """Holds the server address, the key and the default app; builds every call."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        app: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.app = app
        self.retry = retry
        self.timeout = timeout

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "User-Agent": "foliot-client-python/0.1"}

    def _app(self, app: str | None) -> str:
        name = app or self.app
        if not name:
            raise ValueError("no app: pass app= to the client or to the call")
        return f"/apps/{_q(name)}"

    # --- apps (admin) -------------------------------------------------------------------------

    def b_put_app(
        self,
        app: str,
        handler_base_url: str,
        description: str | None,
        weight: int | None = None,
        rate_limit: dict[str, Any] | None = UNSET,
    ) -> Call[AppCreated | App]:
        """`weight` and `rate_limit` (`{"limit": 100, "period": "1m"}`, None clears it) are left
        as they are when omitted."""
        body: dict[str, Any] = {"handlerBaseUrl": handler_base_url}
        if description is not None:
            body["description"] = description
        if weight is not None:
            body["weight"] = weight
        if rate_limit is not UNSET:
            body["rateLimit"] = rate_limit
        return Call("PUT", self._app(app), _app_created_or_view, json=body)

    def b_get_app(self, app: str | None) -> Call[App]:
        return Call("GET", self._app(app), lambda _, d: App.from_json(d), safe=True)

    def b_get_app_limits(self, app: str | None) -> Call[dict[str, Any]]:
        """`GET /admin/apps/{app}/limits`: each limit's value, setting and source (admin)."""
        return Call("GET", f"/admin{self._app(app)}/limits", _raw, safe=True)

    def b_put_app_limits(self, overrides: Mapping[str, Any], app: str | None) -> Call[dict[str, Any]]:
        """`PUT /admin/apps/{app}/limits`: override limits (None: back to the default)."""
        return Call("PUT", f"/admin{self._app(app)}/limits", _raw, json=dict(overrides), safe=True)

    def b_create_api_key(self, app: str | None) -> Call[NewApiKey]:
        return Call(
            "POST", f"{self._app(app)}/api-keys", lambda _, d: NewApiKey(d["keyId"], d["apiKey"]), json={}
        )

    def b_revoke_api_key(self, key_id: str, app: str | None) -> Call[None]:
        return Call("DELETE", f"{self._app(app)}/api-keys/{_q(key_id)}", _none)

    def b_rotate_signing_secret(self, grace_seconds: int | None, app: str | None) -> Call[NewSigningSecret]:
        body = {} if grace_seconds is None else {"graceSeconds": grace_seconds}
        return Call(
            "POST",
            f"{self._app(app)}/signing-secrets",
            lambda _, d: NewSigningSecret(d["secretId"], d["signingSecret"], parse_time(d.get("createdAt"))),
            json=body,
        )

    # --- workflows ----------------------------------------------------------------------------

    def b_register_workflow(self, definition: Mapping[str, Any], app: str | None) -> Call[WorkflowRef]:
        # Registering an identical document answers the existing version: safe to repeat.
        return Call(
            "POST",
            f"{self._app(app)}/workflows",
            lambda s, d: WorkflowRef(d["name"], int(d["version"]), s == 201, tuple(d.get("warnings") or ())),
            json=dict(definition),
            safe=True,
        )

    def b_dry_run(self, definition: Mapping[str, Any], replay: int | None, app: str | None) -> Call[Any]:
        """`POST …/workflows/{name}/dry-run`: the report, as JSON (it stores nothing)."""
        name = str(definition.get("name", ""))
        return Call(
            "POST",
            f"{self._app(app)}/workflows/{_q(name)}/dry-run",
            lambda s, d: d,
            json=dict(definition),
            params=_clean({"replay": replay}),
            safe=True,
        )

    def b_migrate(
        self,
        name: str,
        to_version: int,
        *,
        filter: Mapping[str, Any] | None = None,
        step_map: Mapping[str, str] | None = None,
        reason: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        app: str | None = None,
    ) -> Call[Any]:
        """One page of `POST …/workflows/{name}/migrate` (a run already moved is skipped: safe to repeat)."""
        body: dict[str, Any] = {"toVersion": to_version}
        body.update(
            _clean(
                {
                    "filter": dict(filter) if filter else None,
                    "stepMap": dict(step_map) if step_map else None,
                    "reason": reason,
                    "limit": limit,
                    "cursor": cursor,
                }
            )
        )
        return Call(
            "POST", f"{self._app(app)}/workflows/{_q(name)}/migrate", lambda s, d: d, json=body, safe=True
        )

    def b_list_workflows(
        self, limit: int | None, cursor: str | None, app: str | None
    ) -> Call[Page[Workflow]]:
        return Call(
            "GET",
            f"{self._app(app)}/workflows",
            _page("workflows", Workflow.from_json),
            params=_clean({"limit": limit, "cursor": cursor}),
            safe=True,
        )

    def b_get_workflow(self, name: str, version: int | None, app: str | None) -> Call[Workflow]:
        path = f"{self._app(app)}/workflows/{_q(name)}"
        if version is not None:
            path += f"/versions/{int(version)}"
        return Call("GET", path, lambda _, d: Workflow.from_json(d), safe=True)

    # --- runs ---------------------------------------------------------------------------------

    def b_start_run(
        self,
        workflow: str,
        input: Any,
        version: int | None,
        business_key: str | None,
        run_timeout: str | None,
        idempotency_key: str | None,
        app: str | None,
        priority: int | None = None,
    ) -> Call[Run]:
        body: dict[str, Any] = {"workflow": workflow}
        if input is not UNSET:
            body["input"] = input
        body.update(_clean({"version": version, "businessKey": business_key, "runTimeout": run_timeout}))
        if priority is not None:
            body["priority"] = priority
        # Stripe's habit: every start carries a key, so a retried start never makes a second run.
        key = idempotency_key or f"fc-{uuid.uuid4()}"
        return Call(
            "POST", f"{self._app(app)}/runs", _run, json=body, headers={"Idempotency-Key": key}, safe=True
        )

    def b_start_debounced(
        self,
        workflow: str,
        input: Any,
        key: str,
        period: str,
        mode: str,
        version: int | None,
        business_key: str | None,
        run_timeout: str | None,
        app: str | None,
        priority: int | None = None,
    ) -> Call[DebouncedStart]:
        body: dict[str, Any] = {
            "workflow": workflow,
            "debounce": {"key": key, "period": period, "mode": mode},
        }
        if input is not UNSET:
            body["input"] = input
        body.update(_clean({"version": version, "businessKey": business_key, "runTimeout": run_timeout}))
        if priority is not None:
            body["priority"] = priority
        # No Idempotency-Key (the server refuses one): a start is folded into its burst, so a
        # retry joins the same burst and is as harmless as a second start within the period.
        return Call("POST", f"{self._app(app)}/runs", DebouncedStart.from_json, json=body, safe=True)

    def b_get_run(self, run_id: str, app: str | None) -> Call[Run]:
        return Call("GET", f"{self._app(app)}/runs/{_q(run_id)}", _run, safe=True)

    def b_list_runs(
        self,
        workflow: str | None,
        status: str | None,
        business_key: str | None,
        limit: int | None,
        cursor: str | None,
        app: str | None,
        parent_run_id: str | None = None,
        attention: str | None = None,
    ) -> Call[Page[Run]]:
        """`parent_run_id`: only that run's child runs. `attention`: `true` (any reason) or one
        reason (`retrying`, `no_poller`, `overdue`, `unconsumed_signal`): only the runs that need
        a look among the next ones examined."""
        params = {
            "workflow": workflow,
            "status": status,
            "businessKey": business_key,
            "parentRunId": parent_run_id,
            "limit": limit,
        }
        if attention is not None:
            params["attention"] = attention
        return Call(
            "GET",
            f"{self._app(app)}/runs",
            _page("runs", Run.from_json),
            params=_clean({**params, "cursor": cursor}),
            safe=True,
        )

    def b_list_events(
        self, run_id: str, after: int | None, limit: int | None, app: str | None
    ) -> Call[Page[Event]]:
        return Call(
            "GET",
            f"{self._app(app)}/runs/{_q(run_id)}/events",
            _page("events", Event.from_json),
            params=_clean({"after": after, "limit": limit}),
            safe=True,
        )

    def _intervene(self, run_id: str, action: str, body: dict[str, Any], app: str | None) -> Call[Run]:
        return Call("POST", f"{self._app(app)}/runs/{_q(run_id)}/{action}", _run, json=body)

    def b_cancel_run(self, run_id: str, reason: str | None, app: str | None) -> Call[Run]:
        return self._intervene(run_id, "cancel", _clean({"reason": reason}), app)

    def b_pause_run(self, run_id: str, reason: str | None, app: str | None) -> Call[Run]:
        return self._intervene(run_id, "pause", _clean({"reason": reason}), app)

    def b_unpause_run(self, run_id: str, reason: str | None, app: str | None) -> Call[Run]:
        return self._intervene(run_id, "unpause", _clean({"reason": reason}), app)

    def b_bulk(
        self, action: str, selection: BulkSelection, cursor: str | None, app: str | None
    ) -> Call[BulkPage]:
        if action not in BULK_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(BULK_ACTIONS)}")
        body = {**selection.to_json(), **_clean({"cursor": cursor})}
        # The server skips runs a retried page already handled: safe to repeat.
        return Call("POST", f"{self._app(app)}/runs/{action}", _bulk_page(action), json=body, safe=True)

    def b_redrive_run(self, run_id: str, reason: str | None, app: str | None) -> Call[Run]:
        return self._intervene(run_id, "redrive", _clean({"reason": reason}), app)

    def b_rewind_run(
        self, run_id: str, to_step: str, version: int | None, reason: str | None, app: str | None
    ) -> Call[Run]:
        body = {"toStep": to_step, **_clean({"version": version, "reason": reason})}
        return self._intervene(run_id, "rewind", body, app)

    def b_skip_step(self, run_id: str, output: Any, reason: str | None, app: str | None) -> Call[Run]:
        body = _clean({"reason": reason})
        if output is not UNSET:
            body["output"] = output
        return self._intervene(run_id, "skip", body, app)

    def b_edit_state(
        self,
        run_id: str,
        set: Mapping[str, Any] | None,
        unset: list[str] | None,
        reason: str,
        app: str | None,
    ) -> Call[Run]:
        body: dict[str, Any] = {"reason": reason}
        if set is not None:
            body["set"] = dict(set)
        if unset is not None:
            body["unset"] = list(unset)
        return Call("PATCH", f"{self._app(app)}/runs/{_q(run_id)}/state", _run, json=body)

    def b_diagnosis(self, run_id: str, app: str | None) -> Call[Diagnosis]:
        return Call(
            "GET",
            f"{self._app(app)}/runs/{_q(run_id)}/diagnosis",
            lambda _, d: Diagnosis(
                str(d.get("summary", "")), bool(d.get("attention")), list(d.get("facts") or []), d
            ),
            safe=True,
        )

    # --- signals ------------------------------------------------------------------------------

    def b_send_signal(
        self,
        name: str,
        payload: Any,
        run_id: str | None,
        workflow: str | None,
        business_key: str | None,
        signal_id: str | None,
        app: str | None,
        allow_unknown: bool = False,
    ) -> Call[SignalResult]:
        # A generated signalId makes a retried signal a `duplicate`, never a second delivery.
        sid = signal_id or f"fc-{uuid.uuid4()}"
        body: dict[str, Any] = {"name": name, "signalId": sid}
        if allow_unknown:
            body["allowUnknown"] = True
        if payload is not UNSET:
            body["payload"] = payload
        body.update(_clean({"runId": run_id, "workflow": workflow, "businessKey": business_key}))
        return Call(
            "POST",
            f"{self._app(app)}/signals",
            lambda _, d: SignalResult(d["runId"], d["status"], sid),
            json=body,
            safe=True,
        )

    def b_signal_with_start(
        self,
        name: str,
        workflow: str,
        business_key: str,
        payload: Any,
        input: Any,
        version: int | None,
        signal_id: str | None,
        idempotency_key: str | None,
        app: str | None,
    ) -> Call[SignalResult]:
        sid = signal_id or f"fc-{uuid.uuid4()}"
        start: dict[str, Any] = _clean({"version": version})
        if input is not UNSET:
            start["input"] = input
        body: dict[str, Any] = {"name": name, "workflow": workflow, "businessKey": business_key,
                                "signalId": sid, "startIfMissing": start}  # fmt: skip
        if payload is not UNSET:
            body["payload"] = payload
        key = idempotency_key or f"fc-{uuid.uuid4()}"
        return Call(
            "POST",
            f"{self._app(app)}/signals",
            lambda _, d: SignalResult(d["runId"], d["status"], sid, bool(d.get("started"))),
            json=body,
            headers={"Idempotency-Key": key},
            safe=True,
        )

    # --- tasks --------------------------------------------------------------------------------

    def b_poll_tasks(
        self, queue: str, wait_seconds: float, max_tasks: int, worker_id: str | None, app: str | None
    ) -> Call[list[Task]]:
        body = {
            "queue": queue,
            "waitSeconds": wait_seconds,
            "maxTasks": max_tasks,
            **_clean({"workerId": worker_id}),
        }
        # A poll whose answer was lost leaves its tasks claimed until their deadline, then they
        # are offered again: repeating it loses nothing.
        return Call(
            "POST",
            f"{self._app(app)}/tasks/poll",
            lambda _, d: [Task.from_json(t) for t in d["tasks"]],
            json=body,
            safe=True,
            timeout=wait_seconds + self.timeout,
        )

    def b_complete_task(self, token: str, body: dict[str, Any], app: str | None) -> Call[CompleteResult]:
        # A repeated answer to a task is refused (409 task_closed) and changes nothing.
        return Call(
            "POST",
            f"{self._app(app)}/tasks/{_q(token)}/complete",
            lambda _, d: CompleteResult(d["runId"], d["status"]),
            json=body,
            safe=True,
        )

    def b_heartbeat_task(self, token: str, app: str | None) -> Call[Heartbeat]:
        return Call(
            "POST",
            f"{self._app(app)}/tasks/{_q(token)}/heartbeat",
            lambda _, d: Heartbeat(bool(d["cancelRequested"])),
            json={},
            safe=True,
        )

    # --- schedules ----------------------------------------------------------------------------
    # Schedules come back as the server's JSON objects (dicts), every string as the server sent it.

    def _schedule(self, name: str, app: str | None) -> str:
        return f"{self._app(app)}/schedules/{_q(name)}"

    def b_put_schedule(
        self, name: str, definition: Mapping[str, Any], app: str | None
    ) -> Call[dict[str, Any]]:
        # A PUT of the same document leaves the schedule as it is: safe to repeat.
        return Call("PUT", self._schedule(name, app), _raw, json=dict(definition), safe=True)

    def b_list_schedules(
        self, limit: int | None, cursor: str | None, app: str | None
    ) -> Call[Page[dict[str, Any]]]:
        return Call(
            "GET",
            f"{self._app(app)}/schedules",
            _page("schedules", dict),
            params=_clean({"limit": limit, "cursor": cursor}),
            safe=True,
        )

    def b_get_schedule(self, name: str, app: str | None) -> Call[dict[str, Any]]:
        return Call("GET", self._schedule(name, app), _raw, safe=True)

    def b_schedule_action(
        self, name: str, action: str, body: dict[str, Any], app: str | None, *, safe: bool = False
    ) -> Call[dict[str, Any]]:
        return Call("POST", f"{self._schedule(name, app)}/{action}", _raw, json=body, safe=safe)

    def b_delete_schedule(self, name: str, app: str | None) -> Call[dict[str, Any]]:
        return Call("DELETE", self._schedule(name, app), _raw)

    # --- operators (admin) --------------------------------------------------------------------

    def b_list_actors(self, status: str | None, limit: int | None) -> Call[list[Actor]]:
        return Call(
            "GET",
            "/admin/actors",
            lambda _, d: [Actor.from_json(a) for a in d["actors"]],
            params=_clean({"status": status, "limit": limit}),
            safe=True,
        )

    def b_get_actor(self, run_id: str) -> Call[dict[str, Any]]:
        return Call("GET", f"/admin/actors/{_q(run_id)}", _raw, safe=True)

    def b_timers(self) -> Call[dict[str, Any]]:
        return Call("GET", "/admin/timers", _raw, safe=True)

    def b_queues(self) -> Call[list[dict[str, Any]]]:
        return Call("GET", "/admin/queues", lambda _, d: list(d["queues"]), safe=True)

    def b_create_operator_token(self, role: str, name: str | None) -> Call[OperatorToken]:
        body = {"role": role, **_clean({"name": name})}
        return Call("POST", "/admin/operator-tokens", lambda _, d: OperatorToken.from_json(d), json=body)

    def b_list_operator_tokens(self) -> Call[list[OperatorToken]]:
        return Call(
            "GET",
            "/admin/operator-tokens",
            lambda _, d: [OperatorToken.from_json(t) for t in d["tokens"]],
            safe=True,
        )

    def b_revoke_operator_token(self, token_id: str) -> Call[None]:
        return Call("DELETE", f"/admin/operator-tokens/{_q(token_id)}", _none)


def complete_body(output: Any = None, next: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"output": output}
    if next is not None:
        body["next"] = next
    return body


def fail_body(error_class: str, message: str = "", retryable: bool = True) -> dict[str, Any]:
    return {"error": {"class": error_class, "message": message, "retryable": retryable}}
