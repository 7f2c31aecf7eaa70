"""Fixtures: a live Foliot (hypercorn on an ephemeral port) with a real handler server."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from foliot.core.config import Settings
from foliot.core.views import run_view
from foliot.core.workflow.model import Run
from foliot.server import Running, serve

from .helpers import HandlerServer, start_handler
from .pg import Cluster

ADMIN = "test-admin-token"


@attrs.define
class Api:
    """A Foliot server, its engine, an HTTP client, and one app with a handler."""

    running: Running
    client: httpx.AsyncClient
    handler: HandlerServer
    app: str = "orders"
    key: str = ""

    @property
    def engine(self) -> Any:
        return self.running.engine

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN}"}

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def call(self, method: str, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        headers = kw.pop("headers", None) or self.auth()
        return await self.client.request(method, path, json=json, headers=headers, **kw)

    async def register(self, definition: dict[str, Any]) -> int:
        r = await self.call("POST", f"/apps/{self.app}/workflows", definition)
        assert r.status_code in (200, 201), r.text
        return int(r.json()["version"])

    async def start(self, workflow: str, input: Any = None, **extra: Any) -> dict[str, Any]:
        r = await self.call("POST", f"/apps/{self.app}/runs", {"workflow": workflow, "input": input, **extra})
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    async def run(self, run_id: str) -> dict[str, Any]:
        r = await self.call("GET", f"/apps/{self.app}/runs/{run_id}")
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    async def until(self, run_id: str, *statuses: str) -> dict[str, Any]:
        """Wait (on the engine's commit notifications, not the wall clock) for a status."""
        run: Run = await self.engine.runs.wait_for(run_id, lambda r: r.status in statuses)
        return run_view(run)

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        r = await self.call("GET", f"/apps/{self.app}/runs/{run_id}/events", params={"limit": 1000})
        assert r.status_code == 200, r.text
        return r.json()["events"]  # type: ignore[no-any-return]


def make_settings(tmp: Path, **overrides: Any) -> Settings:
    base = {
        "host": "127.0.0.1",
        "port": 0,
        "database_url": f"sqlite:///{tmp / 'foliot.db'}",
        "data_dir": str(tmp / "data"),
        "admin_token": ADMIN,
    }
    base.update(overrides)
    return Settings(**base)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {}


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster | None]:
    """One throwaway PostgreSQL cluster per test session (None when a URL is configured)."""
    if os.environ.get("FOLIOT_TEST_DATABASE_URL"):
        yield None
        return
    cluster = Cluster().start()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Every test that stores through this runs once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'foliot.db'}"
        return
    configured = os.environ.get("FOLIOT_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    url = cluster.migrated_database()
    yield url
    cluster.finished(url)


@pytest.fixture
async def api(
    tmp_path: Path, nursery: trio.Nursery, settings_overrides: dict[str, Any], database_url: str
) -> AsyncIterator[Api]:
    handler = await start_handler(nursery, HandlerServer())
    settings = make_settings(tmp_path, **{"database_url": database_url, **settings_overrides})
    running: Running = await nursery.start(serve, settings)
    async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
        api = Api(running, client, handler)
        r = await client.put(f"/apps/{api.app}", json={"handlerBaseUrl": handler.url}, headers=api.admin())
        assert r.status_code == 201, r.text
        api.key = r.json()["apiKey"]
        handler.secrets.append(r.json()["signingSecret"])
        yield api
