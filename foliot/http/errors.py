"""Domain errors to HTTP answers, in one table.

Below the HTTP layer an error says what went wrong (`foliot.core.errors`); here, and only
here, it gets its status and headers. `Answer` is the face's own refusal with an explicit
status (a protocol error, a relayed answer of another node, a request that timed out).
"""

from __future__ import annotations

from typing import Any, Final

from ..core.errors import (
    Conflict,
    Forbidden,
    Internal,
    InvalidRequest,
    NotFound,
    Overloaded,
    OverQuota,
    PayloadTooLarge,
    Refused,
    RejectedMessage,
    Unauthorized,
    Unavailable,
    UnknownSignal,
)


class UnsupportedMediaType(Refused):
    """The request body is not JSON (its `Content-Type` says otherwise)."""

    code = "unsupported_media_type"


class GatewayTimeout(Refused):
    """A forwarded request's owner took it but did not answer in time: its outcome is unknown."""

    code = "owner_timeout"


STATUS: Final[dict[type[Refused], int]] = {
    InvalidRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    PayloadTooLarge: 413,
    UnknownSignal: 422,
    Overloaded: 429,
    OverQuota: 429,
    Unavailable: 503,
    Internal: 500,
    UnsupportedMediaType: 415,
    GatewayTimeout: 504,
}


class Answer(Refused):
    """A refusal the HTTP layer makes itself, with its status."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None, **extra: Any) -> None:
        if field is not None:
            extra["field"] = field
        super().__init__(message, code=code, **extra)
        self.status = status


def status_of(error: Refused) -> int:
    """The HTTP status of a refusal: the table's, by the error's class (its closest listed
    ancestor); an overload caused by storage is a 503, not a 429."""
    if isinstance(error, Answer):
        return error.status
    if isinstance(error, RejectedMessage):
        return error.answer
    if isinstance(error, Overloaded) and error.reason == "storage":
        return 503
    for cls in type(error).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


def headers_of(error: Refused) -> dict[str, str] | None:
    """Response headers that go with the refusal (Retry-After for back-pressure)."""
    if error.retry_after is None:
        return None
    return {"Retry-After": str(error.retry_after)}
