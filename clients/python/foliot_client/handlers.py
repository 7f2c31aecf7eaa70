"""Push handlers: verify, parse, deduplicate, run, answer, shared by the ASGI and WSGI glue.

    router = TaskRouter(secrets=[SIGNING_SECRET])

    @router.task("order-fulfilment", "reserve")
    async def reserve(task: Task) -> dict:
        return {"reservationId": f"R-{task.input['orderId']}"}

    app.add_middleware(FoliotMiddleware, router=router)        # FastAPI / Starlette
    flask_app.wsgi_app = FoliotWSGIMiddleware(flask_app.wsgi_app, router)   # Flask / WSGI

Each push is checked against `foliot-signature` over the **raw** body, parsed into a `Task`,
routed on its body (`workflowName`, `step`), and answered as `foliot_client.outcomes` says:
2xx with the output (`foliot-next` for `Next`), 202 for `ACCEPTED`, an error status with
`{"error": {"class", "message", "retryable"}}` for exceptions (500 when retryable, 422 when
not, so the status alone already tells Foliot). Delivery is at-least-once: a final answer
(2xx, 202, non-retryable error) is kept in the `IdempotencyStore` under the task's
`idempotencyKey`, and a redelivery gets it again without running the handler twice.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .models import Task
from .outcomes import Accepted, Next, TaskFailure, failure_of
from .signing import DEFAULT_TOLERANCE, HEADER, SignatureError, verify_signature

F = TypeVar("F", bound=Callable[..., Any])

#: Largest push body read (2 x Foliot's default payload limit + 64 KiB, as the server allows).
MAX_BODY = 2 * 262_144 + 65_536


@dataclass(frozen=True)
class HttpAnswer:
    """An HTTP answer to a push, independent of any web framework."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def final(self) -> bool:
        """Worth replaying to a redelivery: success, 202, or an error that won't be retried."""
        if self.status < 300:
            return True
        try:
            return json.loads(self.body)["error"]["retryable"] is False
        except (ValueError, KeyError, TypeError):
            return False


class IdempotencyStore(Protocol):
    """Where final answers are kept by `idempotencyKey`. Methods may also be coroutines (ASGI
    only). Use a shared store (Redis, your database) when several processes serve pushes."""

    def get(self, key: str) -> HttpAnswer | Awaitable[HttpAnswer | None] | None: ...

    def put(self, key: str, answer: HttpAnswer) -> Awaitable[None] | None: ...


class MemoryIdempotencyStore:
    """A bounded in-process store (least recently used entries leave first), thread-safe."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._answers: OrderedDict[str, HttpAnswer] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> HttpAnswer | None:
        with self._lock:
            answer = self._answers.get(key)
            if answer is not None:
                self._answers.move_to_end(key)
            return answer

    def put(self, key: str, answer: HttpAnswer) -> None:
        with self._lock:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            while len(self._answers) > self.max_entries:
                self._answers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._answers)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


JSON_HEADERS = (("content-type", "application/json"),)


def error_answer(status: int, error_class: str, message: str, retryable: bool) -> HttpAnswer:
    body = {"error": {"class": error_class, "message": message, "retryable": retryable}}
    return HttpAnswer(status, JSON_HEADERS, _json(body))


def answer_for_value(value: Any) -> HttpAnswer:
    """A handler's return value as the answer Foliot expects (pure)."""
    if isinstance(value, Accepted):
        return HttpAnswer(202, JSON_HEADERS, b"")
    headers: tuple[tuple[str, str], ...] = JSON_HEADERS
    if isinstance(value, Next):
        headers = (*JSON_HEADERS, ("foliot-next", value.step))
        value = value.output
    try:
        body = _json(value)
    except (TypeError, ValueError) as exc:
        return error_answer(500, "invalid_output", f"the handler's result is not JSON: {exc}", False)
    return HttpAnswer(200, headers, body)


def answer_for_exception(exc: BaseException) -> HttpAnswer:
    """A handler's exception as a failure: 500 when retryable, 422 when not (pure)."""
    error = failure_of(exc)["error"]
    return HttpAnswer(500 if error["retryable"] else 422, JSON_HEADERS, _json({"error": error}))


class TaskRouter:
    """Handlers by (workflow, step), the signing secrets, and the idempotency store."""

    def __init__(
        self,
        secrets: Iterable[str] | Callable[[], Iterable[str]],
        *,
        store: IdempotencyStore | None = None,
        tolerance: int = DEFAULT_TOLERANCE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secrets = secrets if callable(secrets) else tuple(secrets)
        self.store: IdempotencyStore = store if store is not None else MemoryIdempotencyStore()
        self.tolerance = tolerance
        self.clock = clock
        self.handlers: dict[tuple[str, str], Callable[..., Any]] = {}

    def secrets(self) -> list[str]:
        return list(self._secrets() if callable(self._secrets) else self._secrets)

    def task(self, workflow: str, step: str) -> Callable[[F], F]:
        """Decorator: the handler for `step` of `workflow` (`"*"` matches any workflow)."""

        def register(fn: F) -> F:
            self.handlers[(workflow, step)] = fn
            return fn

        return register

    def handler_for(self, task: Task) -> Callable[..., Any] | None:
        return self.handlers.get((task.workflow_name, task.step)) or self.handlers.get(("*", task.step))

    def accept(self, raw: bytes, headers: Mapping[str, str]) -> Task | HttpAnswer:
        """Verify and parse a push (pure given the clock): the `Task`, or the answer refusing it."""
        try:
            verify_signature(
                raw, headers.get(HEADER), self.secrets(), tolerance=self.tolerance, now=self.clock()
            )
        except SignatureError as exc:
            return error_answer(401, "bad_signature", str(exc), False)
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise TypeError("the body is not a JSON object")
            task = Task.from_json(data)
        except (ValueError, KeyError, TypeError) as exc:
            return error_answer(400, "invalid_task", f"not a Foliot task: {exc}", False)
        if self.handler_for(task) is None:
            return error_answer(
                404, "unknown_step", f"no handler for {task.workflow_name}/{task.step}", False
            )
        return task

    def handle_sync(self, raw: bytes, headers: Mapping[str, str]) -> HttpAnswer:
        """The whole exchange for WSGI: sync store; async handlers run on a fresh event loop."""
        task = self.accept(raw, headers)
        if isinstance(task, HttpAnswer):
            return task
        kept = self.store.get(task.idempotency_key)
        if inspect.isawaitable(kept):
            raise TypeError("a WSGI app needs an IdempotencyStore with plain (not async) methods")
        if kept is not None:
            return kept
        handler = self.handler_for(task)
        assert handler is not None
        try:
            if inspect.iscoroutinefunction(handler):
                import anyio

                answer = answer_for_value(anyio.run(handler, task))
            else:
                answer = answer_for_value(handler(task))
        except Exception as exc:
            answer = answer_for_exception(exc)
        if answer.final:
            self.store.put(task.idempotency_key, answer)
        return answer

    async def handle_async(self, raw: bytes, headers: Mapping[str, str]) -> HttpAnswer:
        """The whole exchange for ASGI: sync handlers run in a worker thread."""
        import anyio.to_thread

        task = self.accept(raw, headers)
        if isinstance(task, HttpAnswer):
            return task
        kept = self.store.get(task.idempotency_key)
        if inspect.isawaitable(kept):
            kept = await kept
        if kept is not None:
            return kept
        handler = self.handler_for(task)
        assert handler is not None
        try:
            if inspect.iscoroutinefunction(handler):
                value = await handler(task)
            else:
                value = await anyio.to_thread.run_sync(handler, task)
            answer = answer_for_value(value)
        except Exception as exc:
            answer = answer_for_exception(exc)
        if answer.final:
            stored = self.store.put(task.idempotency_key, answer)
            if inspect.isawaitable(stored):
                await stored
        return answer


__all__ = [
    "MAX_BODY",
    "HttpAnswer",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "TaskFailure",
    "TaskRouter",
    "answer_for_exception",
    "answer_for_value",
    "error_answer",
]
