"""The error hierarchy shared by every layer.

FoliotError
├── ApiError            an answer for an API caller: HTTP status + SPEC error code
│   ├── InvalidRequest      400 invalid_request (names the offending field path)
│   ├── Unauthorized        401
│   ├── Forbidden           403
│   ├── NotFound            404
│   ├── Conflict            409 (code may be more specific: invalid_status, task_closed, ...)
│   ├── PayloadTooLarge     413
│   ├── Overloaded          429 overloaded (503 when storage is the bottleneck), with Retry-After
│   └── Unavailable         503 storage or engine not reachable
└── StorageError        raised by a Store; translated to ApiError at the HTTP boundary
    ├── StorageUnavailable  the database cannot be reached (retry later)
    ├── UniqueViolation     a uniqueness constraint refused the write
    └── StaleWrite          a guarded write found the row changed underneath it
"""

from __future__ import annotations

from typing import Any


class FoliotError(Exception):
    """Base of every error Foliot raises on purpose."""


class ApiError(FoliotError):
    status: int = 500
    code: str = "internal"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra

    @classmethod
    def answer(cls, status: int, code: str, message: str, field: str | None = None) -> ApiError:
        """An error with any status and code (a run's machine refusing a message)."""
        error = cls(message, code=code, **({"field": field} if field is not None else {}))
        error.status = status
        return error

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}

    def headers(self) -> dict[str, str] | None:
        """Response headers that go with the error (Retry-After for back-pressure)."""
        return None


class InvalidRequest(ApiError):
    status = 400
    code = "invalid_request"

    def __init__(self, message: str, *, field: str | None = None, **extra: Any) -> None:
        if field is not None:
            extra["field"] = field
            if not message.startswith(field):
                message = f"{field}: {message}"
        super().__init__(message, **extra)


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class Overloaded(ApiError):
    """The engine is saturated: refused at once, nothing stored; retry after `retry_after` s.

    `reason` says which bound was reached: `inflight`, `latency`, `mailbox`, `push_backlog` (429) or
    `storage` (503)."""

    status = 429
    code = "overloaded"

    def __init__(self, message: str, *, reason: str, retry_after: int = 1) -> None:
        super().__init__(message, reason=reason, retryAfter=retry_after)
        self.reason = reason
        self.retry_after = retry_after
        if reason == "storage":
            self.status = 503

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(self.retry_after)}


class Unavailable(ApiError):
    status = 503
    code = "unavailable"

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": "1"}


class Internal(ApiError):
    status = 500
    code = "internal"


class StorageError(FoliotError):
    """A storage backend failed."""


class StorageUnavailable(StorageError):
    """The database cannot be reached right now."""


class UniqueViolation(StorageError):
    """A uniqueness constraint refused the write."""

    def __init__(self, constraint: str, message: str = "") -> None:
        super().__init__(message or constraint)
        self.constraint = constraint


class StaleWrite(StorageError):
    """A guarded write matched no row: someone else changed it first."""


class Fenced(StaleWrite):
    """The write was made under a partition lease this node no longer holds (another node owns
    the actor now, or the lease expired): refused, nothing of it was written."""
