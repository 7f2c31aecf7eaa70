"""Errors raised by the client, one class per error code of the Foliot API.

    FoliotError
    ├── TransportError            the server could not be reached or the connection broke
    ├── WaitTimeout               (also a TimeoutError) a run was not closed in time
    └── ApiError                  the server answered `{"error": {"code", "message", ...}}`
        ├── InvalidRequest        400 invalid_request (`field` names the offending path)
        │   ├── OutputTooLarge    400 output_too_large
        │   ├── InvalidNext       400 invalid_next
        │   └── InvalidOutput     400 invalid_output
        ├── Unauthorized          401
        ├── Forbidden             403
        ├── NotFound              404
        ├── Conflict              409 conflict and the specific codes below
        │   ├── InvalidStatus, TaskClosed, BusinessKeyInUse (`run_id`), RunClosed, RunPaused,
        │   ├── IdempotencyKeyReused, SignalBufferFull, TaskNotClaimed
        ├── PayloadTooLarge       413 payload_too_large, signal_buffer_too_large
        ├── Overloaded            429/503 overloaded (`retry_after`, `reason`): nothing changed
        ├── Unavailable           503 unavailable: nothing changed
        └── InternalError         500 and any other status

`ApiError.retryable_without_effect` says the server promised nothing was changed, so any call
can be sent again (SPEC: a refused request changes nothing).
"""

from __future__ import annotations

from typing import Any


class FoliotError(Exception):
    """Base class of every error the client raises."""


class TransportError(FoliotError):
    """No answer: connection refused or reset, or a timeout. `connected` is False when the
    request certainly never reached the server (so it had no effect)."""

    def __init__(self, message: str, *, connected: bool) -> None:
        super().__init__(message)
        self.connected = connected


class WaitTimeout(FoliotError, TimeoutError):
    """`wait_for_run`/`follow_events` ran out of time; `run` is the run as last read (None when
    it was not read), and nothing was changed on the server."""

    def __init__(self, message: str, run: Any = None) -> None:
        super().__init__(message)
        self.run = run


class ApiError(FoliotError):
    """The server refused the call with a JSON error body."""

    status: int
    code: str
    message: str
    field: str | None
    body: dict[str, Any]
    retryable_without_effect = False

    def __init__(self, status: int, code: str, message: str, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.body = body or {}
        field = self.body.get("field")
        self.field = field if isinstance(field, str) else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """`404 not_found: unknown run 'x'` (with `[field]` when the server named one)."""
        where = f" [{self.field}]" if self.field else ""
        return f"{self.status} {self.code}{where}: {self.message}"


class InvalidRequest(ApiError):
    pass


class OutputTooLarge(InvalidRequest):
    pass


class InvalidNext(InvalidRequest):
    pass


class InvalidOutput(InvalidRequest):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class MethodNotAllowed(ApiError):
    pass


class Conflict(ApiError):
    pass


class InvalidStatus(Conflict):
    pass


class TaskClosed(Conflict):
    pass


class TaskNotClaimed(Conflict):
    pass


class BusinessKeyInUse(Conflict):
    """A start whose `businessKey` an open run holds; `run_id` names that run."""

    @property
    def run_id(self) -> str | None:
        value = self.body.get("runId")
        return value if isinstance(value, str) else None


class RunClosed(Conflict):
    pass


class RunPaused(Conflict):
    pass


class IdempotencyKeyReused(Conflict):
    pass


class SignalBufferFull(Conflict):
    pass


class PayloadTooLarge(ApiError):
    pass


class UnsupportedMediaType(ApiError):
    pass


class Overloaded(ApiError):
    """429/503 `overloaded`: refused at once, nothing changed; retry after `retry_after` s."""

    retryable_without_effect = True

    @property
    def retry_after(self) -> float | None:
        value = self.body.get("retryAfter")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    @property
    def reason(self) -> str | None:
        value = self.body.get("reason")
        return value if isinstance(value, str) else None


class Unavailable(ApiError):
    """503 `unavailable`: storage unreachable or the server starting/stopping; nothing changed."""

    retryable_without_effect = True


class InternalError(ApiError):
    pass


BY_CODE: dict[str, type[ApiError]] = {
    "invalid_request": InvalidRequest,
    "output_too_large": OutputTooLarge,
    "invalid_next": InvalidNext,
    "invalid_output": InvalidOutput,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "conflict": Conflict,
    "invalid_status": InvalidStatus,
    "task_closed": TaskClosed,
    "task_not_claimed": TaskNotClaimed,
    "business_key_in_use": BusinessKeyInUse,
    "run_closed": RunClosed,
    "run_paused": RunPaused,
    "idempotency_key_reused": IdempotencyKeyReused,
    "signal_buffer_full": SignalBufferFull,
    "payload_too_large": PayloadTooLarge,
    "signal_buffer_too_large": PayloadTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "overloaded": Overloaded,
    "unavailable": Unavailable,
    "internal": InternalError,
}

BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    429: Overloaded,
    503: Unavailable,
}


def from_response(status: int, payload: Any) -> ApiError:
    """The typed error for an error answer; unknown codes fall back on the status."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        error = {}
    code = error.get("code")
    message = error.get("message")
    if not isinstance(code, str):
        code = {500: "internal"}.get(status, f"http_{status}")
    if not isinstance(message, str):
        message = f"HTTP {status}"
    cls = BY_CODE.get(code) or BY_STATUS.get(status) or InternalError
    return cls(status, code, message, error)
