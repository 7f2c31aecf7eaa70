"""Typed results. Each keeps the server's document in `raw`, so fields added to the API later
are still reachable before the client names them; unknown fields are ignored, never an error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

T = TypeVar("T")

TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out"})


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp of the API as an aware `datetime` (None stays None)."""
    if value is None:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _str(d: Mapping[str, Any], key: str) -> str:
    return str(d[key])


def _opt_str(d: Mapping[str, Any], key: str) -> str | None:
    value = d.get(key)
    return None if value is None else str(value)


def _opt_int(d: Mapping[str, Any], key: str) -> int | None:
    value = d.get(key)
    return None if value is None else int(value)


@dataclass(frozen=True)
class RunError:
    step: str | None
    error_class: str
    message: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunError:
        return cls(_opt_str(d, "step"), str(d.get("class", "")), str(d.get("message", "")))


@dataclass(frozen=True)
class Run:
    run_id: str
    app: str
    workflow: str
    version: int
    status: str
    business_key: str | None
    input: Any
    state: dict[str, Any]
    generation: int
    current_step: str | None
    attempt: int | None
    wait_signal: str | None
    wait_signals: list[str] | None  # a wait for the first of several signals
    wake_at: datetime | None
    deadline: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    closed_at: datetime | None
    error: RunError | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    output: Any = None  # once completed: the workflow's `output` (or its whole state)
    parent: dict[str, Any] | None = None  # a child run: {runId, step, generation, attempt, index}
    children: dict[str, Any] | None = None  # at a run/map/parallel step: its children's progress
    priority: int = 3  # 1 (highest)..5

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Run:
        error = d.get("error")
        return cls(
            run_id=_str(d, "runId"),
            app=_str(d, "app"),
            workflow=_str(d, "workflow"),
            version=int(d["version"]),
            status=_str(d, "status"),
            business_key=_opt_str(d, "businessKey"),
            input=d.get("input"),
            state=dict(d.get("state") or {}),
            generation=int(d.get("generation", 1)),
            current_step=_opt_str(d, "currentStep"),
            attempt=_opt_int(d, "attempt"),
            wait_signal=_opt_str(d, "waitSignal"),
            wait_signals=list(d["waitSignals"]) if d.get("waitSignals") else None,
            wake_at=parse_time(d.get("wakeAt")),
            deadline=parse_time(d.get("deadline")),
            created_at=parse_time(d.get("createdAt")),
            updated_at=parse_time(d.get("updatedAt")),
            closed_at=parse_time(d.get("closedAt")),
            error=RunError.from_json(error) if isinstance(error, dict) else None,
            raw=d,
            output=d.get("output"),
            parent=d["parent"] if isinstance(d.get("parent"), dict) else None,
            children=d["children"] if isinstance(d.get("children"), dict) else None,
            priority=int(d.get("priority") or 3),
        )


@dataclass(frozen=True)
class DebouncedStart:
    """The answer to a debounced start (`debounce` in `POST /apps/{app}/runs`): 202
    `{runId, debounced, status: "pending", startsAt}` for a trailing burst, 202 `{runId,
    debounced, dropped: true}` for a leading burst's later starts, or, for a leading burst's
    first start, 201 with the run document (`run`)."""

    run_id: str
    pending: bool  # a trailing burst's run, begun at `starts_at`
    dropped: bool  # a leading burst's later start: folded into the run that began it
    starts_at: datetime | None
    run: Run | None  # the run document when this start began it (201)
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, status: int, d: dict[str, Any]) -> DebouncedStart:
        if status == 201 or not d.get("debounced"):
            return cls(_str(d, "runId"), False, False, None, Run.from_json(d), d)
        return cls(
            run_id=_str(d, "runId"),
            pending=d.get("status") == "pending",
            dropped=bool(d.get("dropped")),
            starts_at=parse_time(d.get("startsAt")),
            run=None,
            raw=d,
        )


@dataclass(frozen=True)
class Event:
    seq: int
    at: datetime | None
    generation: int
    type: str
    step: str | None
    attempt: int | None
    data: Any
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Event:
        return cls(
            seq=int(d["seq"]),
            at=parse_time(d.get("at")),
            generation=int(d.get("generation", 1)),
            type=_str(d, "type"),
            step=_opt_str(d, "step"),
            attempt=_opt_int(d, "attempt"),
            data=d.get("data"),
            raw=d,
        )


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list; `next_cursor` is None at the end."""

    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True)
class WorkflowRef:
    """`{name, version, warnings}`: what registering answers; `created` is False for an identical
    document. `warnings`: what is registered but will not work as written, each `{code, step,
    field, message}` (a child workflow not registered yet, a push timeout over the server's cap)."""

    name: str
    version: int
    created: bool
    warnings: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class Workflow:
    name: str
    version: int
    created_at: datetime | None
    definition: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Workflow:
        return cls(
            name=_str(d, "name"),
            version=int(d["version"]),
            created_at=parse_time(d.get("createdAt")),
            definition=dict(d.get("definition") or {}),
            raw=d,
        )


@dataclass(frozen=True)
class SignalResult:
    """`status` is `delivered`, `buffered` or `duplicate`; `started` (signal-with-start only)
    says whether the call started the run."""

    run_id: str
    status: str
    signal_id: str | None
    started: bool | None = None


@dataclass(frozen=True)
class Task:
    """A task as pushed to a handler or handed to a poller."""

    task_token: str
    app: str
    run_id: str
    workflow_name: str
    workflow_version: int
    step: str
    attempt: int
    generation: int
    idempotency_key: str
    deadline: datetime | None
    business_key: str | None
    input: Any
    state: dict[str, Any]
    error: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Task:
        error = d.get("error")
        return cls(
            task_token=_str(d, "taskToken"),
            app=_str(d, "app"),
            run_id=_str(d, "runId"),
            workflow_name=_str(d, "workflowName"),
            workflow_version=int(d["workflowVersion"]),
            step=_str(d, "step"),
            attempt=int(d["attempt"]),
            generation=int(d["generation"]),
            idempotency_key=_str(d, "idempotencyKey"),
            deadline=parse_time(d.get("deadline")),
            business_key=_opt_str(d, "businessKey"),
            input=d.get("input"),
            state=dict(d.get("state") or {}),
            error=error if isinstance(error, dict) else None,
            raw=d,
        )


@dataclass(frozen=True)
class CompleteResult:
    run_id: str
    status: str


@dataclass(frozen=True)
class Heartbeat:
    cancel_requested: bool


@dataclass(frozen=True)
class ApiKeyInfo:
    key_id: str
    created_at: datetime | None


@dataclass(frozen=True)
class SecretInfo:
    secret_id: str
    created_at: datetime | None
    expires_at: datetime | None


@dataclass(frozen=True)
class App:
    app: str
    handler_base_url: str
    description: str | None
    api_keys: list[ApiKeyInfo]
    signing_secrets: list[SecretInfo]
    raw: dict[str, Any] = field(repr=False, compare=False)
    weight: int = 1  # its share of the dispatcher's round-robin between apps (1..100)
    rate_limit: RateLimit | None = None  # spaces all the app's pushes

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> App:
        return cls(
            app=_str(d, "app"),
            handler_base_url=_str(d, "handlerBaseUrl"),
            description=_opt_str(d, "description"),
            api_keys=[
                ApiKeyInfo(_str(k, "keyId"), parse_time(k.get("createdAt"))) for k in d.get("apiKeys", [])
            ],
            signing_secrets=[
                SecretInfo(
                    _str(s, "secretId"), parse_time(s.get("createdAt")), parse_time(s.get("expiresAt"))
                )
                for s in d.get("signingSecrets", [])
            ],
            raw=d,
            weight=int(d.get("weight") or 1),
            rate_limit=RateLimit.from_json(d.get("rateLimit")),
        )


@dataclass(frozen=True)
class RateLimit:
    """An app's rate limit as the server shows it: `limit` sends per `period_ms`."""

    limit: int
    period_ms: int

    @classmethod
    def from_json(cls, d: Any) -> RateLimit | None:
        return None if not d else cls(int(d["limit"]), int(d["periodMs"]))


@dataclass(frozen=True)
class AppCreated:
    """What creating an app answers: the API key and signing secret are shown this once."""

    app: str
    handler_base_url: str
    description: str | None
    api_key: str
    key_id: str
    signing_secret: str
    secret_id: str
    weight: int = 1
    rate_limit: RateLimit | None = None


@dataclass(frozen=True)
class NewApiKey:
    key_id: str
    api_key: str


@dataclass(frozen=True)
class NewSigningSecret:
    secret_id: str
    signing_secret: str
    created_at: datetime | None
