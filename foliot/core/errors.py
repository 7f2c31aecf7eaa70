"""The error hierarchy shared by every layer: what went wrong, never which HTTP status.

FoliotError
├── Refused             a request refused, with the SPEC's error code (and the field at fault)
│   ├── InvalidRequest      invalid_request (names the offending field path)
│   ├── Unauthorized
│   ├── Forbidden
│   ├── NotFound
│   ├── Conflict            the code may be more specific: invalid_status, task_closed, ...
│   ├── PayloadTooLarge
│   ├── Overloaded          refused at once for back-pressure, with a retry delay and its reason
│   ├── OverQuota           a start past a per-app limit of work under way (quota_exceeded, 429)
│   ├── Unavailable         storage or the engine not reachable now; retry
│   ├── RejectedMessage     a run machine's refusal of a message, as its reply names it
│   ├── UnknownSignal       a signal no step of the run's workflow can wait for (unknown_signal)
│   └── Internal
└── StorageError        raised by a Store; translated at each layer boundary
    ├── StorageUnavailable  the database cannot be reached (retry later)
    ├── UniqueViolation     a uniqueness constraint refused the write
    └── StaleWrite          a guarded write found the row changed underneath it
        └── Fenced          written under a lease this node no longer holds

The HTTP face maps each class to a status in one table (`foliot.http.errors.STATUS`).
"""

from __future__ import annotations

from typing import Any


class FoliotError(Exception):
    """Base of every error Foliot raises on purpose."""


class Refused(FoliotError):
    """A request refused: the SPEC's error code, a message, and extra members of the error."""

    code: str = "internal"
    retry_after: int | None = None  # seconds a caller should wait before trying again

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


class InvalidRequest(Refused):
    code = "invalid_request"

    def __init__(self, message: str, *, field: str | None = None, **extra: Any) -> None:
        if field is not None:
            extra["field"] = field
            if not message.startswith(field):
                message = f"{field}: {message}"
        super().__init__(message, **extra)


class QuotaExceeded(InvalidRequest):
    """A definition that would put its app over a per-app limit (`limit`: the setting's name,
    `max` its value): nothing stored. Not a 429: nothing changes by retrying (the clients
    retry a 429)."""

    code = "quota_exceeded"


class OverQuota(Refused):
    """A start that would put its app over a per-app limit of work under way (open runs): 429
    `quota_exceeded` naming the limit (`limit`) and its value (`max`), retry after
    `retry_after` s (runs closing make room). Nothing stored."""

    code = "quota_exceeded"

    def __init__(self, message: str, *, limit: str, most: int, retry_after: int = 1) -> None:
        super().__init__(message, limit=limit, max=most, retryAfter=retry_after)
        self.limit = limit
        self.retry_after = retry_after


class Unauthorized(Refused):
    code = "unauthorized"


class Forbidden(Refused):
    code = "forbidden"


class NotFound(Refused):
    code = "not_found"


class Conflict(Refused):
    code = "conflict"


class PayloadTooLarge(Refused):
    code = "payload_too_large"


class Overloaded(Refused):
    """The engine is saturated: refused at once, nothing stored; retry after `retry_after` s.

    `reason` says which bound was reached: `inflight`, `latency`, `mailbox`, `push_backlog`,
    `dry_run_concurrency` (429) or `storage` (503)."""

    code = "overloaded"

    def __init__(self, message: str, *, reason: str, retry_after: int = 1) -> None:
        super().__init__(message, reason=reason, retryAfter=retry_after)
        self.reason = reason
        self.retry_after = retry_after


class Unavailable(Refused):
    code = "unavailable"
    retry_after = 1


class RejectedMessage(Refused):
    """A run machine refused a message (`core.workflow.machine.Rejected`): the reply names the
    SPEC's answer for it (`answer`: 400, 409, 413), its code and the field at fault."""

    def __init__(self, answer: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message, code=code, **({"field": field} if field is not None else {}))
        self.answer = answer


class UnknownSignal(Refused):
    """A signal whose name no version the run can reach waits for: it would be buffered and
    never consumed. `known` lists the names it can wait for."""

    code = "unknown_signal"

    def __init__(self, message: str, *, known: list[str]) -> None:
        super().__init__(message, field="name", known=known)


class Internal(Refused):
    code = "internal"


class StorageError(FoliotError):
    """A storage backend failed."""


class StorageUnavailable(StorageError):
    """The database cannot be reached right now."""


class CommitUnknown(StorageUnavailable):
    """The connection failed (or the answer did not come in time) once the commit had been
    sent: the write may or may not have been applied. The run kind reads the run back before
    answering (`RunKind.applied`): a caller told "nothing was changed" must be able to rely on
    it, and one whose change landed is answered as if the reply had come.

    `settled`: the database has finished with the commit (on PostgreSQL, the backend that ran
    it has left `pg_stat_activity`), so a read-back tells whether it landed. Not settled, a
    read-back could still see the old document of a commit about to land: the caller is told
    the change may have been made (`CommitInDoubt`) and the document is read again later."""

    def __init__(self, message: str = "", *, settled: bool = True) -> None:
        super().__init__(message)
        self.settled = settled


class CommitInDoubt(StorageUnavailable):
    """A commit failed without saying whether it was applied (the connection was lost during
    it: its reply lost), and reading the document back could not tell either: the caller is
    told the change may have been made (`DOUBT`)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or DOUBT)


# What a caller is told of a commit in doubt (503 `commit_unknown`).
DOUBT = (
    "storage failed during the commit: the change may have been made; retry with the same"
    " Idempotency-Key or signalId, or read the run"
)


def storage_refusal(error: StorageError) -> Unavailable:
    """What a caller is told when storage failed under its request (503 `unavailable`)."""
    if isinstance(error, CommitInDoubt):
        return Unavailable(DOUBT, code="commit_unknown")
    return Unavailable("storage is unavailable; nothing was changed, retry")


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
