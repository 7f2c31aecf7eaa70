"""The examples run as documented against a live Foliot: `examples/worker.py` as a real process
stopped with SIGTERM, `examples/fastapi_handler.py` serving the README's order workflow. And
the client distribution needs none of the engine's dependencies."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from foliot_client import AsyncClient
from foliot_client.models import AppCreated
from hypercorn.config import Config
from hypercorn.trio import serve

from ..conftest import ADMIN, Api

ROOT = Path(__file__).parents[2]
CLIENT_SRC = ROOT / "clients" / "python"

ORDER = {
    "name": "order-fulfilment",
    "steps": [
        {"name": "reserve", "type": "task"},
        {"name": "pick", "type": "task", "queue": "warehouse"},
        {"name": "ship", "type": "task"},
    ],
}
# Picking alone, with its compensation on the same queue (the worker routes both by step).
PICKING = {
    "name": "picking",
    "steps": [
        {"name": "pick", "type": "task", "queue": "warehouse", "onFailure": "restock"},
        {"name": "restock", "type": "task", "queue": "warehouse", "next": "$fail"},
    ],
}


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(CLIENT_SRC), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_examples_run_the_order_workflow(
    api: Api, nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncClient(api.running.url, ADMIN) as admin:
        created = await admin.put_app("shop", "http://127.0.0.1:1")
    assert isinstance(created, AppCreated)
    monkeypatch.setenv("SIGNING_SECRET", created.signing_secret)
    handler = _load("fastapi_handler_example", ROOT / "examples" / "fastapi_handler.py")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    binds = await nursery.start(serve, handler.app, config)
    async with AsyncClient(api.running.url, ADMIN) as admin:
        await admin.put_app("shop", binds[0])

    log = open(tmp_path / "worker.log", "wb")
    env = _env(FOLIOT_URL=api.running.url, FOLIOT_TOKEN=created.api_key, FOLIOT_APP="shop")
    worker = await trio.lowlevel.open_process(
        [sys.executable, str(ROOT / "examples" / "worker.py")], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        async with AsyncClient(api.running.url, created.api_key, app="shop") as c:
            await c.register_workflow(ORDER)
            await c.register_workflow(PICKING)
            good = await c.start_run("order-fulfilment", {"orderId": 7, "items": ["a", "b"]})
            empty = await c.start_run("order-fulfilment", {"orderId": 8, "items": []})
            no_input = await c.start_run("picking")
            done = await api.until(good.run_id, "completed", "failed")
            failed = await api.until(empty.run_id, "completed", "failed")
            undone = await api.until(no_input.run_id, "completed", "failed")
            history = [(e.type, e.step) async for e in c.iter_events(no_input.run_id)]
        assert done["status"] == "completed", (tmp_path / "worker.log").read_text()
        assert done["state"]["reserve"] == {"reservationId": "R-7"}
        assert done["state"]["pick"] == {"picked": 2, "attempt": 1}
        assert done["state"]["ship"] == {"shipped": "R-7"}
        assert failed["status"] == "failed" and failed["error"]["class"] == "nothing_to_pick"
        # A run started without input: `pick` refuses it (no crash), `restock` compensates.
        assert ("task_failed", "pick") in history and undone["state"]["restock"] == {"restocked": 0}
        assert undone["error"]["class"] == "nothing_to_pick" and undone["error"]["compensatedBy"] == "restock"
        worker.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await worker.wait() == 0, (tmp_path / "worker.log").read_text()
        logged = (tmp_path / "worker.log").read_text()
        assert "polling queue 'warehouse' of app 'shop', 8 at a time, handlers for pick, restock" in logged
        assert f"claimed {no_input.run_id}:1:restock:1: step 'restock' of picking v1" in logged
        assert "SIGTERM: stopping gracefully" in logged
        assert "stopped after 4 task(s): 2 completed, 2 failed, 0 released, 0 dropped" in logged
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        log.close()


def test_the_readme_shows_the_shipped_examples() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("worker.py", "fastapi_handler.py"):
        assert f"```python\n{(ROOT / 'examples' / name).read_text()}```" in readme, name


BLOCKER = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"foliot", "trio", "quart", "quart_trio", "asyncpg", "hypercorn",
                                  "cryptography", "prometheus_client", "attrs", "cattrs"}:
            raise ImportError(f"the client imported the engine's dependency {name}")
        return None

sys.meta_path.insert(0, Block())
import foliot_client, foliot_client.worker, foliot_client.asgi, foliot_client.wsgi
import foliot_client.handlers, foliot_client.signing, foliot_client.cli
print("ok")
"""


def test_the_client_imports_none_of_the_engines_dependencies() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCKER], env=_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
