"""Pushes tasks to handlers over HTTP: signed, bounded by deadline and sync cap, classified.

The only outbound call Foliot makes. Each push runs in its own task under the dispatcher's
nursery, can be aborted by token (cancel, skip, rewind), and ends by telling the run's actor
the outcome. Redirects are never followed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx
import trio

from .. import signing
from ..errors import StorageError
from ..logs import log_push
from ..metrics import Metrics
from ..workflow.definition import HandlerPathError, push_url
from ..workflow.duration import format_timestamp
from ..workflow.machine import (
    Failed,
    Outcome,
    TaskAnswer,
    classify_response,
    connection_failure,
    timeout_failure,
)
from ..workflow.model import Run, TaskRef
from ..workflow.payload import compact_json

log = logging.getLogger("foliot.dispatcher")


@attrs.frozen
class Target:
    """Where and how an app's tasks are pushed."""

    handler_base_url: str
    secrets: tuple[str, ...]  # live signing secrets, newest first


def task_body(run: Run, task: TaskRef) -> dict[str, Any]:
    """The push body (also what a poller receives)."""
    return {
        "taskToken": task.token,
        "app": run.app,
        "runId": run.run_id,
        "workflowName": run.workflow,
        "workflowVersion": run.version,
        "step": task.step,
        "attempt": task.attempt,
        "generation": task.generation,
        "idempotencyKey": task.idempotency_key(run.run_id),
        "deadline": format_timestamp(task.deadline),
        "businessKey": run.business_key,
        "input": run.input,
        "state": run.state,
        "error": run.carried_error.to_json() if run.carried_error is not None else None,
    }


def traceparent(run: Run, task: TaskRef) -> str:
    span = hashlib.sha256(task.idempotency_key(run.run_id).encode()).hexdigest()[:16]
    return f"00-{run.trace_id}-{span}-01"


class Dispatcher:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        now: Callable[[], int],
        target: Callable[[str], Awaitable[Target]],
        answer: Callable[[str, TaskAnswer], None],
        sync_cap_ms: int,
        max_body: int,
        metrics: Metrics | None = None,
    ) -> None:
        self._client = client
        self._now = now
        self._target = target
        self._answer = answer
        self._sync_cap_ms = sync_cap_ms
        self._max_body = max_body
        self._inflight: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self.metrics = metrics or Metrics()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def is_inflight(self, token: str) -> bool:
        return token in self._inflight

    def push(self, run: Run, task: TaskRef, path: str) -> None:
        assert self._nursery is not None, "dispatcher not started"
        if task.token in self._inflight:
            return
        scope = trio.CancelScope()
        self._inflight[task.token] = scope
        self._nursery.start_soon(self._push, run, task, path, scope)

    def abort(self, token: str) -> None:
        scope = self._inflight.pop(token, None)
        if scope is not None:
            scope.cancel()

    async def _push(self, run: Run, task: TaskRef, path: str, scope: trio.CancelScope) -> None:
        outcome: Outcome | None = None
        started = trio.current_time()
        with scope:
            try:
                outcome = await self._attempt(run, task, path)
            except Exception as exc:  # never let one push take the dispatcher down
                log.exception("push of %s failed unexpectedly", task.idempotency_key(run.run_id))
                outcome = connection_failure(f"dispatch error: {type(exc).__name__}")
        if self._inflight.get(task.token) is scope:
            del self._inflight[task.token]
        if scope.cancelled_caught or outcome is None:
            return  # aborted: the task was closed by an intervention
        seconds = trio.current_time() - started
        log_push(run, task, outcome, seconds, self.metrics.push_done(outcome, seconds))
        self._answer(run.run_id, TaskAnswer(task.token, outcome))

    async def _resolve(self, run: Run, task: TaskRef) -> Target | None:
        """The app's URL and secrets; while storage is down, wait (the push has not happened)."""
        delay = 0.2
        while True:
            try:
                return await self._target(run.app)
            except StorageError:
                if task.deadline is None or self._now() + delay * 1000 >= task.deadline:
                    return None
                await trio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _attempt(self, run: Run, task: TaskRef, path: str) -> Outcome:
        target = await self._resolve(run, task)
        if target is None:
            return timeout_failure("storage was unavailable until the attempt's deadline")
        try:
            url = push_url(target.handler_base_url, path)
        except HandlerPathError as exc:
            return Failed("invalid_handler", f"handler path {path[:200]!r} {exc}", False)
        body = compact_json(task_body(run, task))
        headers = {
            "content-type": "application/json",
            "foliot-signature": signing.sign(body, target.secrets, self._now() // 1000),
            "foliot-deadline": format_timestamp(task.deadline) or "",
            "foliot-task-token": task.token,
            "foliot-app": run.app,
            "traceparent": traceparent(run, task),
            "user-agent": "foliot",
        }
        assert task.deadline is not None
        budget_ms = min(task.deadline - self._now(), self._sync_cap_ms)
        if budget_ms <= 0:
            return timeout_failure()
        self.metrics.pushes.inc()
        with trio.move_on_after(budget_ms / 1000) as limit:
            try:
                async with self._client.stream(
                    "POST", url, content=body, headers=headers, timeout=None
                ) as response:
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > self._max_body:
                            return Failed(
                                "output_too_large",
                                f"the output of step {task.step!r} is over {self._max_body} bytes",
                                False,
                            )
                        chunks.append(chunk)
                    raw = b"".join(chunks)
                    return classify_response(response.status_code, raw, response.headers.get("foliot-next"))
            except httpx.TransportError as exc:
                return connection_failure(f"{type(exc).__name__}: {exc}"[:500])
        assert limit.cancelled_caught
        if budget_ms == self._sync_cap_ms:
            return timeout_failure("the synchronous attempt passed FOLIOT_SYNC_TASK_MAX_MS")
        return timeout_failure()
