"""An engine on an inline in-memory SQLite store with a mock HTTP transport, under MockClock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from cryptography.fernet import Fernet

from foliot.actors.clock import Clock
from foliot.core.config import Settings
from foliot.core.credentials import Vault
from foliot.core.views import run_view
from foliot.core.workflow.definition import canonical_json
from foliot.core.workflow.model import Run
from foliot.node import Node
from foliot.storage.base import ApiKeyRecord, AppRecord, SecretRecord
from foliot.storage.sqlite import open_sqlite

from ..helpers import advance as advance  # re-exported for the actor tests

T0 = 1_800_000_000_000
DAY = 86_400.0

Reply = httpx.Response | Callable[[dict[str, Any]], Awaitable[httpx.Response]]


@attrs.define
class Pushed:
    at: float  # trio time
    body: dict[str, Any]
    headers: dict[str, str]


@attrs.define
class Env:
    engine: Node
    make_engine: Callable[[], Node]
    nursery: trio.Nursery
    pushes: list[Pushed] = attrs.Factory(list)
    answers: dict[str, list[Any]] = attrs.Factory(dict)
    pushed: trio.Event = attrs.Factory(trio.Event)
    # SWF Lambda functions at http://lambda.test/<path>: the requests made, and a reply per path
    # (an httpx.Response or an async fn(request) -> Response; 200 "null" when none).
    lambda_calls: list[httpx.Request] = attrs.Factory(list)
    lambda_replies: dict[str, Any] = attrs.Factory(dict)

    def answer(self, step: str, *replies: Any) -> None:
        """Queue replies for a step: an httpx.Response, or an async fn(body) -> Response."""
        self.answers.setdefault(step, []).extend(replies)

    scope: trio.CancelScope | None = None

    async def _serve(
        self, engine: Node, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.CancelScope() as scope:
            self.scope = scope
            await engine.serve(task_status=task_status)

    async def boot(self) -> None:
        await self.nursery.start(self._serve, self.engine)

    async def crash_and_restart(self, down_for: float = 0) -> None:
        """Stop the engine where it stands (in-flight pushes cut off), let time pass, start a
        fresh engine on the same store: what a kill -9 and a restart leave behind."""
        assert self.scope is not None
        self.scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        await advance(down_for)
        self.engine = self.make_engine()
        await self.boot()

    async def register(self, definition: dict[str, Any]) -> None:
        await self.engine.store.add_workflow_version(
            "app", definition["name"], canonical_json(definition), self.engine.clock.now()
        )

    async def start(self, workflow: str, input: Any = None, **kw: Any) -> str:
        body, _ = await self.engine.runs.start(
            app="app",
            workflow=workflow,
            version=None,
            input=input,
            business_key=kw.get("business_key"),
            run_timeout_ms=kw.get("run_timeout_ms"),
            idempotency_key=None,
            request_hash="",
            render=run_view,
        )
        return str(body["runId"])

    async def until(self, run_id: str, *statuses: str, days: float = 60) -> Run:
        run: Run = await self.engine.runs.wait_for(run_id, lambda r: r.status in statuses, days * DAY)
        return run

    async def until_pushes(self, count: int, days: float = 60) -> None:
        with trio.fail_after(days * DAY):
            while len(self.pushes) < count:
                self.pushed = trio.Event()
                await self.pushed.wait()


def ok(value: Any = None, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(value).encode(), headers=headers)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {}


@pytest.fixture
async def env(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, settings_overrides: dict[str, Any]
) -> AsyncIterator[Env]:
    settings = Settings(
        **{
            "data_dir": str(tmp_path),
            "timer_window_ms": 86_400_000,
            "passivate_after_ms": 60_000,
            # No trend sampling (a wake-up every 10 s of the days these tests skip); on in test_trends.
            "trend_interval_ms": 0,
            **settings_overrides,
        }
    )
    holder: list[Env] = []

    async def transport(request: httpx.Request) -> httpx.Response:
        e = holder[0]
        if request.url.host == "lambda.test":
            e.lambda_calls.append(request)
            reply = e.lambda_replies.get(request.url.path, ok(None))
            return await reply(request) if callable(reply) else reply
        body = json.loads(request.content)
        e.pushes.append(Pushed(trio.current_time(), body, dict(request.headers)))
        e.pushed.set()
        queue = e.answers.get(body["step"], [])
        reply = queue.pop(0) if queue else ok(None)
        if callable(reply):
            return await reply(body)
        return reply

    vault = Vault(Fernet.generate_key().decode())
    async with (
        open_sqlite(":memory:", inline=True) as store,
        httpx.AsyncClient(transport=httpx.MockTransport(transport)) as client,
    ):
        now = T0
        await store.create_app(
            AppRecord("app", "http://handler.test", None, now, now),
            ApiKeyRecord("k1", "app", "x", now),
            SecretRecord("s1", "app", vault.encrypt("whsec_test"), now, None),
        )
        clock = Clock(T0)

        def make_engine() -> Node:
            return Node(settings, store, clock=clock, vault=vault, http_client=client)

        async with trio.open_nursery() as nursery:
            holder.append(Env(make_engine(), make_engine, nursery))
            await holder[0].boot()
            yield holder[0]
            nursery.cancel_scope.cancel()
