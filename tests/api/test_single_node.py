"""SQLite is single-node: a second `foliot serve` on the same database file is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from foliot.core.config import Settings
from foliot.server import Running, serve
from foliot.storage.node_lock import sqlite_node_lock


def test_the_lock_is_exclusive_names_its_holder_and_is_released(tmp_path: Path) -> None:
    db = str(tmp_path / "sub" / "foliot.db")
    with sqlite_node_lock(db):
        with pytest.raises(SystemExit) as refused, sqlite_node_lock(db):
            pass  # pragma: no cover - never entered
        message = str(refused.value)
        assert f"process {os.getpid()} is already serving the SQLite database {db}" in message
        assert "PostgreSQL" in message
    with sqlite_node_lock(db):  # released when the holder leaves
        pass


def test_memory_databases_take_no_lock(tmp_path: Path) -> None:
    with sqlite_node_lock(":memory:"), sqlite_node_lock(":memory:"):
        pass


def test_a_lock_held_by_a_killed_process_does_not_outlive_it(tmp_path: Path) -> None:
    db = str(tmp_path / "foliot.db")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from foliot.storage.node_lock import sqlite_node_lock\n"
            f"with sqlite_node_lock({db!r}):\n    print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with (
            pytest.raises(SystemExit, match=f"process {holder.pid} is already serving"),
            sqlite_node_lock(db),
        ):
            pass  # pragma: no cover - never entered
    finally:
        holder.kill()  # SIGKILL: no clean-up code runs in the holder
        holder.wait(timeout=10)
    with sqlite_node_lock(db):
        pass


async def test_a_second_node_on_the_same_sqlite_database_is_refused(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    settings = Settings.from_env({"FOLIOT_DATA_DIR": str(tmp_path / "data"), "FOLIOT_PORT": "0"})
    running: Running = await nursery.start(serve, settings)
    with pytest.raises(SystemExit, match="single-node"):
        await serve(settings)
    async with httpx.AsyncClient(base_url=running.url) as client:
        assert (await client.get("/readyz")).status_code == 200  # the first node is unharmed
