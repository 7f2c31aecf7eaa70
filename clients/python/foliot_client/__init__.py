"""Foliot's Python client: `Client`/`AsyncClient` for the API, `Worker` for pull queues,
`TaskRouter` with ASGI/WSGI middleware for push handlers, and the `foliot` operator CLI
(`pip install 'foliot-client[cli]'`)."""

from . import errors
from ._base import (
    Actor,
    BulkPage,
    BulkSelection,
    Call,
    Diagnosis,
    OperatorToken,
    Polling,
    RetryPolicy,
    should_retry,
)
from .client import AsyncClient, Client
from .handlers import HttpAnswer, IdempotencyStore, MemoryIdempotencyStore, TaskRouter
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
    RunError,
    SignalResult,
    Task,
    Workflow,
    WorkflowRef,
)
from .outcomes import ACCEPTED, Accepted, Next, TaskFailure
from .signing import SignatureError, verify_signature
from .worker import TaskContext, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "ACCEPTED",
    "Accepted",
    "Actor",
    "App",
    "AppCreated",
    "AsyncClient",
    "BulkPage",
    "BulkSelection",
    "Call",
    "Client",
    "CompleteResult",
    "DebouncedStart",
    "Diagnosis",
    "Event",
    "Heartbeat",
    "HttpAnswer",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "NewApiKey",
    "NewSigningSecret",
    "Next",
    "OperatorToken",
    "Page",
    "Polling",
    "RateLimit",
    "RetryPolicy",
    "Run",
    "RunError",
    "SignalResult",
    "SignatureError",
    "Task",
    "TaskContext",
    "TaskFailure",
    "TaskRouter",
    "Worker",
    "WorkerStats",
    "Workflow",
    "WorkflowRef",
    "errors",
    "should_retry",
    "verify_signature",
]
