"""`Client` (blocking) and `AsyncClient` (asyncio or Trio, through httpx/anyio): thin senders
over `BaseClient`, which builds every call and holds the retry rules."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import anyio
import httpx

from . import errors
from ._base import (
    DEFAULT_POLLING,
    DEFAULT_RETRY,
    NO_BODY,
    UNSET,
    Actor,
    BaseClient,
    BulkPage,
    BulkSelection,
    Call,
    Diagnosis,
    OperatorToken,
    Polling,
    RetryPolicy,
    complete_body,
    fail_body,
    read_answer,
    should_retry,
    transport_error,
    wait_time,
)
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
    Run,
    SignalResult,
    Task,
    Workflow,
    WorkflowRef,
)

T = TypeVar("T")


def _request_kwargs(client: BaseClient, call: Call[Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"headers": {**client._headers(), **call.headers}}
    if call.json is not NO_BODY:
        kwargs["json"] = call.json
    if call.params:
        kwargs["params"] = dict(call.params)
    kwargs["timeout"] = call.timeout if call.timeout is not None else client.timeout
    return kwargs


class Client(BaseClient):
    """A blocking client. `Client(url, token, app="orders")`; use it as a context manager or
    call `close()`. Every method raises a `foliot_client.errors.FoliotError` subclass."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        app: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(base_url, token, app=app, retry=retry, timeout=timeout)
        self._http = httpx.Client(base_url=self.base_url, transport=transport, follow_redirects=False)
        self._sleep = sleep
        self._rand = rand
        self._clock = clock

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: tuple[type[BaseException], BaseException, TracebackType] | Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one call, retrying as the call's safety and `self.retry` allow."""
        attempt = 1
        while True:
            try:
                try:
                    response = self._http.request(call.method, call.path, **_request_kwargs(self, call))
                except httpx.TransportError as exc:
                    raise transport_error(exc) from exc
                return read_answer(call, response)
            except errors.FoliotError as exc:
                if attempt >= self.retry.max_attempts or not should_retry(exc, call.safe):
                    raise
                self._sleep(self.retry.delay(attempt, exc, self._rand))
                attempt += 1

    # apps (admin token)
    def put_app(
        self,
        app: str,
        handler_base_url: str,
        *,
        description: str | None = None,
        weight: int | None = None,
        rate_limit: dict[str, Any] | None = UNSET,
    ) -> AppCreated | App:
        """Create (`AppCreated`, with the key and secret shown once) or update (`App`) an app;
        `weight` (1..100) and `rate_limit` (`{"limit": 100, "period": "1m"}`, None clears it)
        are its flow control, left as they are when omitted."""
        return self.send(self.b_put_app(app, handler_base_url, description, weight, rate_limit))

    def get_app(self, *, app: str | None = None) -> App:
        return self.send(self.b_get_app(app))

    def get_app_limits(self, *, app: str | None = None) -> dict[str, Any]:
        """The app's effective limits, each `{value, source, setting}` (admin)."""
        return self.send(self.b_get_app_limits(app))

    def set_app_limits(self, overrides: Mapping[str, Any], *, app: str | None = None) -> dict[str, Any]:
        """Override the app's limits (`{"maxOpenRuns": 5000}`; None: back to the default) (admin)."""
        return self.send(self.b_put_app_limits(overrides, app))

    def create_api_key(self, *, app: str | None = None) -> NewApiKey:
        return self.send(self.b_create_api_key(app))

    def revoke_api_key(self, key_id: str, *, app: str | None = None) -> None:
        self.send(self.b_revoke_api_key(key_id, app))

    def rotate_signing_secret(
        self, *, grace_seconds: int | None = None, app: str | None = None
    ) -> NewSigningSecret:
        return self.send(self.b_rotate_signing_secret(grace_seconds, app))

    # workflows
    def register_workflow(self, definition: Mapping[str, Any], *, app: str | None = None) -> WorkflowRef:
        return self.send(self.b_register_workflow(definition, app))

    def dry_run(
        self, definition: Mapping[str, Any], *, replay: int | None = None, app: str | None = None
    ) -> Any:
        """What registering `definition` would do to the runs in flight and recorded (a report)."""
        return self.send(self.b_dry_run(definition, replay, app))

    def migrate_page(self, name: str, to_version: int, **options: Any) -> Any:
        """One page of a migration (`filter`, `step_map`, `reason`, `limit`, `cursor`, `app`)."""
        return self.send(self.b_migrate(name, to_version, **options))

    def list_workflows(
        self, *, limit: int | None = None, cursor: str | None = None, app: str | None = None
    ) -> Page[Workflow]:
        return self.send(self.b_list_workflows(limit, cursor, app))

    def iter_workflows(self, *, page_size: int | None = None, app: str | None = None) -> Iterator[Workflow]:
        cursor = None
        while True:
            page = self.list_workflows(limit=page_size, cursor=cursor, app=app)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_workflow(self, name: str, *, version: int | None = None, app: str | None = None) -> Workflow:
        return self.send(self.b_get_workflow(name, version, app))

    # runs
    def start_run(
        self,
        workflow: str,
        input: Any = UNSET,
        *,
        version: int | None = None,
        business_key: str | None = None,
        run_timeout: str | None = None,
        idempotency_key: str | None = None,
        app: str | None = None,
        priority: int | None = None,
    ) -> Run:
        """Start a run; an `Idempotency-Key` is generated unless given, so retries are safe.
        `priority`: 1 (highest)..5, the server's default 3 when not given."""
        call = self.b_start_run(
            workflow, input, version, business_key, run_timeout, idempotency_key, app, priority
        )
        return self.send(call)

    def start_debounced(
        self,
        workflow: str,
        input: Any = UNSET,
        *,
        key: str,
        period: str,
        mode: str = "trailing",
        version: int | None = None,
        business_key: str | None = None,
        run_timeout: str | None = None,
        app: str | None = None,
        priority: int | None = None,
    ) -> DebouncedStart:
        """A debounced start: starts with the same `key` less than `period` (e.g. "10s") apart
        make one run, begun `period` after the last with its input (`mode` "trailing"), or at
        once by the first, the rest dropped ("leading"). Takes no idempotency key: a retry is
        folded into the same burst."""
        call = self.b_start_debounced(
            workflow, input, key, period, mode, version, business_key, run_timeout, app, priority
        )
        return self.send(call)

    def get_run(self, run_id: str, *, app: str | None = None) -> Run:
        return self.send(self.b_get_run(run_id, app))

    def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        business_key: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        app: str | None = None,
        parent_run_id: str | None = None,
    ) -> Page[Run]:
        """A page of runs, newest first; `parent_run_id` lists that run's child runs."""
        return self.send(self.b_list_runs(workflow, status, business_key, limit, cursor, app, parent_run_id))

    def iter_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        business_key: str | None = None,
        page_size: int | None = None,
        app: str | None = None,
        parent_run_id: str | None = None,
    ) -> Iterator[Run]:
        """Every matching run, newest first, following `nextCursor` page by page."""
        cursor = None
        while True:
            page = self.send(
                self.b_list_runs(workflow, status, business_key, page_size, cursor, app, parent_run_id)
            )
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def list_events(
        self, run_id: str, *, after: int | None = None, limit: int | None = None, app: str | None = None
    ) -> Page[Event]:
        return self.send(self.b_list_events(run_id, after, limit, app))

    def iter_events(
        self, run_id: str, *, after: int | None = None, page_size: int | None = None, app: str | None = None
    ) -> Iterator[Event]:
        """The run's history, oldest first."""
        while True:
            page = self.send(self.b_list_events(run_id, after, page_size, app))
            yield from page.items
            if page.next_cursor is None or not page.items:
                return
            after = page.items[-1].seq

    def wait_for_run(
        self,
        run_id: str,
        *,
        timeout: float | None = None,
        statuses: Collection[str] | None = None,
        polling: Polling = DEFAULT_POLLING,
        app: str | None = None,
    ) -> Run:
        """The run once it is closed (`completed`, `failed`, `cancelled`, `timed_out`), or in
        one of `statuses` when given: reads it every `polling.interval` s, backing off to
        `polling.max_interval`. After `timeout` s raises `errors.WaitTimeout` (`.run` is the
        run as last read)."""
        deadline = None if timeout is None else self._clock() + timeout
        delay = polling.interval
        while True:
            run = self.get_run(run_id, app=app)
            if run.status in statuses if statuses is not None else run.is_terminal:
                return run
            pause = wait_time(delay, deadline, self._clock())
            if pause is None:
                raise errors.WaitTimeout(f"run {run_id} still {run.status} after {timeout} s", run)
            self._sleep(pause)
            delay = polling.after(delay)

    def follow_events(
        self,
        run_id: str,
        *,
        after: int | None = None,
        until_closed: bool = True,
        timeout: float | None = None,
        polling: Polling = DEFAULT_POLLING,
        app: str | None = None,
    ) -> Iterator[Event]:
        """The run's events as they are recorded: those after seq `after` (all by default),
        then each new one as it comes, following the events' cursor. Ends once the run is
        closed and its last event was yielded (never, with `until_closed=False`); after
        `timeout` s raises `errors.WaitTimeout`. Resume a follow with `after=<last seq>`."""
        deadline = None if timeout is None else self._clock() + timeout
        delay = polling.interval
        closed = False
        run: Run | None = None
        while True:
            page = self.send(self.b_list_events(run_id, after, 1000, app))
            for event in page.items:
                after = event.seq
                yield event
            if page.items:
                delay = polling.interval
            if page.next_cursor is not None:
                continue
            if closed:  # read once more after the run was seen closed: that was its last event
                return
            if until_closed:
                run = self.get_run(run_id, app=app)
                if run.is_terminal:
                    closed = True
                    continue
            pause = wait_time(delay, deadline, self._clock())
            if pause is None:
                raise errors.WaitTimeout(f"run {run_id} not closed after {timeout} s", run)
            self._sleep(pause)
            delay = polling.after(delay)

    def cancel_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        return self.send(self.b_cancel_run(run_id, reason, app))

    def redrive_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        return self.send(self.b_redrive_run(run_id, reason, app))

    def pause_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        """Hold a run: it dispatches nothing and advances on nothing until `unpause_run`."""
        return self.send(self.b_pause_run(run_id, reason, app))

    def unpause_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        return self.send(self.b_unpause_run(run_id, reason, app))

    def bulk_page(
        self, action: str, selection: BulkSelection, *, cursor: str | None = None, app: str | None = None
    ) -> BulkPage:
        """One page of `POST /runs/{pause|unpause|cancel|redrive}`."""
        return self.send(self.b_bulk(action, selection, cursor, app))

    def bulk(self, action: str, selection: BulkSelection, *, app: str | None = None) -> Iterator[BulkPage]:
        """Every page of a bulk intervention, following `cursor` to the end."""
        cursor = None
        while True:
            page = self.bulk_page(action, selection, cursor=cursor, app=app)
            yield page
            if page.cursor is None:
                return
            cursor = page.cursor

    def rewind_run(
        self,
        run_id: str,
        to_step: str,
        *,
        version: int | None = None,
        reason: str | None = None,
        app: str | None = None,
    ) -> Run:
        return self.send(self.b_rewind_run(run_id, to_step, version, reason, app))

    def skip_step(
        self, run_id: str, *, output: Any = UNSET, reason: str | None = None, app: str | None = None
    ) -> Run:
        return self.send(self.b_skip_step(run_id, output, reason, app))

    def edit_state(
        self,
        run_id: str,
        *,
        reason: str,
        set: Mapping[str, Any] | None = None,
        unset: list[str] | None = None,
        app: str | None = None,
    ) -> Run:
        return self.send(self.b_edit_state(run_id, set, unset, reason, app))

    def diagnose_run(self, run_id: str, *, app: str | None = None) -> Diagnosis:
        return self.send(self.b_diagnosis(run_id, app))

    # signals
    def send_signal(
        self,
        name: str,
        payload: Any = UNSET,
        *,
        run_id: str | None = None,
        workflow: str | None = None,
        business_key: str | None = None,
        signal_id: str | None = None,
        app: str | None = None,
        allow_unknown: bool = False,
    ) -> SignalResult:
        """Signal a run named by `run_id` or `workflow` + `business_key`. A `signal_id` is
        generated unless given, so a retried signal is a `duplicate`, never delivered twice. A
        name no step of the run's workflow waits for is refused (422 `unknown_signal`) unless
        `allow_unknown`."""
        return self.send(
            self.b_send_signal(name, payload, run_id, workflow, business_key, signal_id, app, allow_unknown)
        )

    def signal_with_start(
        self,
        name: str,
        payload: Any = UNSET,
        *,
        workflow: str,
        business_key: str,
        input: Any = UNSET,
        version: int | None = None,
        signal_id: str | None = None,
        idempotency_key: str | None = None,
        app: str | None = None,
    ) -> SignalResult:
        """Signal the open run with this business key, or start it (with `input`) with the
        signal in it, atomically; `result.started` says which. Keys are generated unless given."""
        call = self.b_signal_with_start(
            name, workflow, business_key, payload, input, version, signal_id, idempotency_key, app
        )
        return self.send(call)

    # tasks
    def poll_tasks(
        self,
        queue: str,
        *,
        wait_seconds: float = 30,
        max_tasks: int = 1,
        worker_id: str | None = None,
        app: str | None = None,
    ) -> list[Task]:
        return self.send(self.b_poll_tasks(queue, wait_seconds, max_tasks, worker_id, app))

    def complete_task(
        self, token: str, output: Any = None, *, next: str | None = None, app: str | None = None
    ) -> CompleteResult:
        return self.send(self.b_complete_task(token, complete_body(output, next), app))

    def fail_task(
        self,
        token: str,
        error_class: str,
        message: str = "",
        *,
        retryable: bool = True,
        app: str | None = None,
    ) -> CompleteResult:
        return self.send(self.b_complete_task(token, fail_body(error_class, message, retryable), app))

    def heartbeat_task(self, token: str, *, app: str | None = None) -> Heartbeat:
        return self.send(self.b_heartbeat_task(token, app))

    # schedules (the server's JSON objects, as dicts)
    def put_schedule(
        self, name: str, definition: Mapping[str, Any], *, app: str | None = None
    ) -> dict[str, Any]:
        """Create or replace a schedule (`workflow`, `cron` or `every`, `timezone`, ...)."""
        return self.send(self.b_put_schedule(name, definition, app))

    def list_schedules(
        self, *, limit: int | None = None, cursor: str | None = None, app: str | None = None
    ) -> Page[dict[str, Any]]:
        return self.send(self.b_list_schedules(limit, cursor, app))

    def iter_schedules(self, *, app: str | None = None) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            page = self.list_schedules(cursor=cursor, app=app)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_schedule(self, name: str, *, app: str | None = None) -> dict[str, Any]:
        """The schedule with its `nextFires`, `lastFires` (runIds, statuses) and counters."""
        return self.send(self.b_get_schedule(name, app))

    def pause_schedule(
        self, name: str, *, reason: str | None = None, app: str | None = None
    ) -> dict[str, Any]:
        return self.send(self.b_schedule_action(name, "pause", _reason(reason), app, safe=True))

    def unpause_schedule(
        self, name: str, *, reason: str | None = None, app: str | None = None
    ) -> dict[str, Any]:
        return self.send(self.b_schedule_action(name, "unpause", _reason(reason), app, safe=True))

    def trigger_schedule(
        self, name: str, *, reason: str | None = None, app: str | None = None
    ) -> dict[str, Any]:
        """Fire now, as the overlap policy allows: `{scheduledTime, outcome, runId}`; `reason`
        is recorded on the run and the fire."""
        return self.send(self.b_schedule_action(name, "trigger", _reason(reason), app))

    def backfill_schedule(self, name: str, start: str, end: str, *, app: str | None = None) -> dict[str, Any]:
        """A run for every scheduled time in `[start, end)` (RFC 3339); a time already fired
        keeps its run. Safe to repeat."""
        body = {"from": start, "to": end}
        return self.send(self.b_schedule_action(name, "backfill", body, app, safe=True))

    def delete_schedule(self, name: str, *, app: str | None = None) -> dict[str, Any]:
        return self.send(self.b_delete_schedule(name, app))

    # operators (admin token)
    def list_actors(self, *, status: str | None = None, limit: int | None = None) -> list[Actor]:
        return self.send(self.b_list_actors(status, limit))

    def get_actor(self, run_id: str) -> dict[str, Any]:
        return self.send(self.b_get_actor(run_id))

    def timers(self) -> dict[str, Any]:
        return self.send(self.b_timers())

    def queues(self) -> list[dict[str, Any]]:
        return self.send(self.b_queues())

    def create_operator_token(self, role: str, *, name: str | None = None) -> OperatorToken:
        """A `viewer`, `operator` or `admin` token; its `.token` is shown this once."""
        return self.send(self.b_create_operator_token(role, name))

    def list_operator_tokens(self) -> list[OperatorToken]:
        return self.send(self.b_list_operator_tokens())

    def revoke_operator_token(self, token_id: str) -> None:
        self.send(self.b_revoke_operator_token(token_id))


class AsyncClient(BaseClient):
    """The same operations as `Client`, awaitable; runs on asyncio or Trio."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        app: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        super().__init__(base_url, token, app=app, retry=retry, timeout=timeout)
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=transport, follow_redirects=False)
        self._rand = rand

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        attempt = 1
        while True:
            try:
                try:
                    response = await self._http.request(call.method, call.path, **_request_kwargs(self, call))
                except httpx.TransportError as exc:
                    raise transport_error(exc) from exc
                return read_answer(call, response)
            except errors.FoliotError as exc:
                if attempt >= self.retry.max_attempts or not should_retry(exc, call.safe):
                    raise
                await anyio.sleep(self.retry.delay(attempt, exc, self._rand))
                attempt += 1

    async def put_app(
        self,
        app: str,
        handler_base_url: str,
        *,
        description: str | None = None,
        weight: int | None = None,
        rate_limit: dict[str, Any] | None = UNSET,
    ) -> AppCreated | App:
        return await self.send(self.b_put_app(app, handler_base_url, description, weight, rate_limit))

    async def get_app(self, *, app: str | None = None) -> App:
        return await self.send(self.b_get_app(app))

    async def get_app_limits(self, *, app: str | None = None) -> dict[str, Any]:
        """The app's effective limits, each `{value, source, setting}` (admin)."""
        return await self.send(self.b_get_app_limits(app))

    async def set_app_limits(self, overrides: Mapping[str, Any], *, app: str | None = None) -> dict[str, Any]:
        """Override the app's limits (`{"maxOpenRuns": 5000}`; None: back to the default) (admin)."""
        return await self.send(self.b_put_app_limits(overrides, app))

    async def create_api_key(self, *, app: str | None = None) -> NewApiKey:
        return await self.send(self.b_create_api_key(app))

    async def revoke_api_key(self, key_id: str, *, app: str | None = None) -> None:
        await self.send(self.b_revoke_api_key(key_id, app))

    async def rotate_signing_secret(
        self, *, grace_seconds: int | None = None, app: str | None = None
    ) -> NewSigningSecret:
        return await self.send(self.b_rotate_signing_secret(grace_seconds, app))

    async def register_workflow(
        self, definition: Mapping[str, Any], *, app: str | None = None
    ) -> WorkflowRef:
        return await self.send(self.b_register_workflow(definition, app))

    async def dry_run(
        self, definition: Mapping[str, Any], *, replay: int | None = None, app: str | None = None
    ) -> Any:
        return await self.send(self.b_dry_run(definition, replay, app))

    async def migrate_page(self, name: str, to_version: int, **options: Any) -> Any:
        return await self.send(self.b_migrate(name, to_version, **options))

    async def list_workflows(
        self, *, limit: int | None = None, cursor: str | None = None, app: str | None = None
    ) -> Page[Workflow]:
        return await self.send(self.b_list_workflows(limit, cursor, app))

    async def iter_workflows(
        self, *, page_size: int | None = None, app: str | None = None
    ) -> AsyncIterator[Workflow]:
        cursor = None
        while True:
            page = await self.list_workflows(limit=page_size, cursor=cursor, app=app)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def get_workflow(
        self, name: str, *, version: int | None = None, app: str | None = None
    ) -> Workflow:
        return await self.send(self.b_get_workflow(name, version, app))

    async def start_run(
        self,
        workflow: str,
        input: Any = UNSET,
        *,
        version: int | None = None,
        business_key: str | None = None,
        run_timeout: str | None = None,
        idempotency_key: str | None = None,
        app: str | None = None,
        priority: int | None = None,
    ) -> Run:
        call = self.b_start_run(
            workflow, input, version, business_key, run_timeout, idempotency_key, app, priority
        )
        return await self.send(call)

    async def start_debounced(
        self,
        workflow: str,
        input: Any = UNSET,
        *,
        key: str,
        period: str,
        mode: str = "trailing",
        version: int | None = None,
        business_key: str | None = None,
        run_timeout: str | None = None,
        app: str | None = None,
        priority: int | None = None,
    ) -> DebouncedStart:
        """See `Client.start_debounced`."""
        call = self.b_start_debounced(
            workflow, input, key, period, mode, version, business_key, run_timeout, app, priority
        )
        return await self.send(call)

    async def get_run(self, run_id: str, *, app: str | None = None) -> Run:
        return await self.send(self.b_get_run(run_id, app))

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        business_key: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        app: str | None = None,
        parent_run_id: str | None = None,
    ) -> Page[Run]:
        """A page of runs, newest first; `parent_run_id` lists that run's child runs."""
        return await self.send(
            self.b_list_runs(workflow, status, business_key, limit, cursor, app, parent_run_id)
        )

    async def iter_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        business_key: str | None = None,
        page_size: int | None = None,
        app: str | None = None,
        parent_run_id: str | None = None,
    ) -> AsyncIterator[Run]:
        cursor = None
        while True:
            page = await self.send(
                self.b_list_runs(workflow, status, business_key, page_size, cursor, app, parent_run_id)
            )
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def list_events(
        self, run_id: str, *, after: int | None = None, limit: int | None = None, app: str | None = None
    ) -> Page[Event]:
        return await self.send(self.b_list_events(run_id, after, limit, app))

    async def iter_events(
        self, run_id: str, *, after: int | None = None, page_size: int | None = None, app: str | None = None
    ) -> AsyncIterator[Event]:
        while True:
            page = await self.send(self.b_list_events(run_id, after, page_size, app))
            for item in page.items:
                yield item
            if page.next_cursor is None or not page.items:
                return
            after = page.items[-1].seq

    async def wait_for_run(
        self,
        run_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (checked between reads)
        statuses: Collection[str] | None = None,
        polling: Polling = DEFAULT_POLLING,
        app: str | None = None,
    ) -> Run:
        """As `Client.wait_for_run`; the clock is the event loop's (`anyio.current_time`). The
        timeout is checked between reads, never cutting a request off (`anyio.fail_after` around
        the call would, and would lose the run last read)."""
        deadline = None if timeout is None else anyio.current_time() + timeout
        delay = polling.interval
        while True:
            run = await self.get_run(run_id, app=app)
            if run.status in statuses if statuses is not None else run.is_terminal:
                return run
            pause = wait_time(delay, deadline, anyio.current_time())
            if pause is None:
                raise errors.WaitTimeout(f"run {run_id} still {run.status} after {timeout} s", run)
            await anyio.sleep(pause)
            delay = polling.after(delay)

    async def follow_events(
        self,
        run_id: str,
        *,
        after: int | None = None,
        until_closed: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 (checked between reads)
        polling: Polling = DEFAULT_POLLING,
        app: str | None = None,
    ) -> AsyncIterator[Event]:
        """As `Client.follow_events`: `async for event in client.follow_events(run_id)`."""
        deadline = None if timeout is None else anyio.current_time() + timeout
        delay = polling.interval
        closed = False
        run: Run | None = None
        while True:
            page = await self.send(self.b_list_events(run_id, after, 1000, app))
            for event in page.items:
                after = event.seq
                yield event
            if page.items:
                delay = polling.interval
            if page.next_cursor is not None:
                continue
            if closed:
                return
            if until_closed:
                run = await self.get_run(run_id, app=app)
                if run.is_terminal:
                    closed = True
                    continue
            pause = wait_time(delay, deadline, anyio.current_time())
            if pause is None:
                raise errors.WaitTimeout(f"run {run_id} not closed after {timeout} s", run)
            await anyio.sleep(pause)
            delay = polling.after(delay)

    async def cancel_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        return await self.send(self.b_cancel_run(run_id, reason, app))

    async def redrive_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        return await self.send(self.b_redrive_run(run_id, reason, app))

    async def pause_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        return await self.send(self.b_pause_run(run_id, reason, app))

    async def unpause_run(self, run_id: str, *, reason: str | None = None, app: str | None = None) -> Run:
        return await self.send(self.b_unpause_run(run_id, reason, app))

    async def bulk_page(
        self, action: str, selection: BulkSelection, *, cursor: str | None = None, app: str | None = None
    ) -> BulkPage:
        return await self.send(self.b_bulk(action, selection, cursor, app))

    async def bulk(
        self, action: str, selection: BulkSelection, *, app: str | None = None
    ) -> AsyncIterator[BulkPage]:
        cursor = None
        while True:
            page = await self.bulk_page(action, selection, cursor=cursor, app=app)
            yield page
            if page.cursor is None:
                return
            cursor = page.cursor

    async def rewind_run(
        self,
        run_id: str,
        to_step: str,
        *,
        version: int | None = None,
        reason: str | None = None,
        app: str | None = None,
    ) -> Run:
        return await self.send(self.b_rewind_run(run_id, to_step, version, reason, app))

    async def skip_step(
        self, run_id: str, *, output: Any = UNSET, reason: str | None = None, app: str | None = None
    ) -> Run:
        return await self.send(self.b_skip_step(run_id, output, reason, app))

    async def edit_state(
        self,
        run_id: str,
        *,
        reason: str,
        set: Mapping[str, Any] | None = None,
        unset: list[str] | None = None,
        app: str | None = None,
    ) -> Run:
        return await self.send(self.b_edit_state(run_id, set, unset, reason, app))

    async def diagnose_run(self, run_id: str, *, app: str | None = None) -> Diagnosis:
        return await self.send(self.b_diagnosis(run_id, app))

    async def send_signal(
        self,
        name: str,
        payload: Any = UNSET,
        *,
        run_id: str | None = None,
        workflow: str | None = None,
        business_key: str | None = None,
        signal_id: str | None = None,
        app: str | None = None,
        allow_unknown: bool = False,
    ) -> SignalResult:
        return await self.send(
            self.b_send_signal(name, payload, run_id, workflow, business_key, signal_id, app, allow_unknown)
        )

    async def signal_with_start(
        self,
        name: str,
        payload: Any = UNSET,
        *,
        workflow: str,
        business_key: str,
        input: Any = UNSET,
        version: int | None = None,
        signal_id: str | None = None,
        idempotency_key: str | None = None,
        app: str | None = None,
    ) -> SignalResult:
        call = self.b_signal_with_start(
            name, workflow, business_key, payload, input, version, signal_id, idempotency_key, app
        )
        return await self.send(call)

    async def poll_tasks(
        self,
        queue: str,
        *,
        wait_seconds: float = 30,
        max_tasks: int = 1,
        worker_id: str | None = None,
        app: str | None = None,
    ) -> list[Task]:
        return await self.send(self.b_poll_tasks(queue, wait_seconds, max_tasks, worker_id, app))

    async def complete_task(
        self, token: str, output: Any = None, *, next: str | None = None, app: str | None = None
    ) -> CompleteResult:
        return await self.send(self.b_complete_task(token, complete_body(output, next), app))

    async def fail_task(
        self,
        token: str,
        error_class: str,
        message: str = "",
        *,
        retryable: bool = True,
        app: str | None = None,
    ) -> CompleteResult:
        return await self.send(self.b_complete_task(token, fail_body(error_class, message, retryable), app))

    async def heartbeat_task(self, token: str, *, app: str | None = None) -> Heartbeat:
        return await self.send(self.b_heartbeat_task(token, app))

    # schedules (the server's JSON objects, as dicts)
    async def put_schedule(
        self, name: str, definition: Mapping[str, Any], *, app: str | None = None
    ) -> dict[str, Any]:
        return await self.send(self.b_put_schedule(name, definition, app))

    async def list_schedules(
        self, *, limit: int | None = None, cursor: str | None = None, app: str | None = None
    ) -> Page[dict[str, Any]]:
        return await self.send(self.b_list_schedules(limit, cursor, app))

    async def get_schedule(self, name: str, *, app: str | None = None) -> dict[str, Any]:
        return await self.send(self.b_get_schedule(name, app))

    async def pause_schedule(
        self, name: str, *, reason: str | None = None, app: str | None = None
    ) -> dict[str, Any]:
        return await self.send(self.b_schedule_action(name, "pause", _reason(reason), app, safe=True))

    async def unpause_schedule(
        self, name: str, *, reason: str | None = None, app: str | None = None
    ) -> dict[str, Any]:
        return await self.send(self.b_schedule_action(name, "unpause", _reason(reason), app, safe=True))

    async def trigger_schedule(
        self, name: str, *, reason: str | None = None, app: str | None = None
    ) -> dict[str, Any]:
        return await self.send(self.b_schedule_action(name, "trigger", _reason(reason), app))

    async def backfill_schedule(
        self, name: str, start: str, end: str, *, app: str | None = None
    ) -> dict[str, Any]:
        body = {"from": start, "to": end}
        return await self.send(self.b_schedule_action(name, "backfill", body, app, safe=True))

    async def delete_schedule(self, name: str, *, app: str | None = None) -> dict[str, Any]:
        return await self.send(self.b_delete_schedule(name, app))

    async def list_actors(self, *, status: str | None = None, limit: int | None = None) -> list[Actor]:
        return await self.send(self.b_list_actors(status, limit))

    async def get_actor(self, run_id: str) -> dict[str, Any]:
        return await self.send(self.b_get_actor(run_id))

    async def timers(self) -> dict[str, Any]:
        return await self.send(self.b_timers())

    async def queues(self) -> list[dict[str, Any]]:
        return await self.send(self.b_queues())

    async def create_operator_token(self, role: str, *, name: str | None = None) -> OperatorToken:
        return await self.send(self.b_create_operator_token(role, name))

    async def list_operator_tokens(self) -> list[OperatorToken]:
        return await self.send(self.b_list_operator_tokens())

    async def revoke_operator_token(self, token_id: str) -> None:
        await self.send(self.b_revoke_operator_token(token_id))


def _reason(reason: str | None) -> dict[str, Any]:
    return {} if reason is None else {"reason": reason}
