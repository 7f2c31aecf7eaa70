"""`foliot serve` refuses a configuration it cannot serve with one line naming the problem and
its fix, exit status 2, and no traceback unless FOLIOT_DEBUG=1 (issue 20, item 7).

Each test runs `python -m foliot.cli serve` in a subprocess that fails before it serves (no
server is started: the port is taken and the data directory locked by this test itself)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from foliot.storage.node_lock import sqlite_node_lock


def serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        **os.environ,
        "FOLIOT_DATA_DIR": str(tmp_path / "data"),
        "FOLIOT_PORT": "0",
        "FOLIOT_LOG_FORMAT": "text",
        "FOLIOT_ADMIN_TOKEN": "adm_startup_test",
    }
    base.pop("FOLIOT_DEBUG", None)
    base.pop("FOLIOT_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "foliot.cli", "serve"],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused start ends with; asserts the rest of its shape."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("foliot: "), result.stderr
    return last


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    line = refused(serve(tmp_path, FOLIOT_PORT="eighty"))
    assert "FOLIOT_PORT must be an integer" in line
    line = refused(serve(tmp_path, FOLIOT_LOG_FORMAT="xml"))
    assert "FOLIOT_LOG_FORMAT" in line


def test_an_invalid_secret_key_says_how_to_make_one(tmp_path: Path) -> None:
    line = refused(serve(tmp_path, FOLIOT_SECRET_KEY="not-a-key"))
    assert "FOLIOT_SECRET_KEY is not a valid secret key" in line and "Fernet.generate_key()" in line


def test_a_port_in_use_names_foliot_port(tmp_path: Path, taken_port: int) -> None:
    line = refused(serve(tmp_path, FOLIOT_PORT=str(taken_port)))
    assert f"127.0.0.1:{taken_port}" in line and "already in use" in line
    assert "FOLIOT_PORT" in line and "FOLIOT_HOST" in line


def test_a_data_dir_served_by_another_process_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with sqlite_node_lock(str(tmp_path / "data" / "foliot.db")):  # as another `foliot serve` holds it
        line = refused(serve(tmp_path))
    assert f"process {os.getpid()} is already serving the SQLite database" in line
    assert "FOLIOT_DATABASE_URL=postgresql://" in line


def test_foliot_debug_keeps_the_traceback(tmp_path: Path, taken_port: int) -> None:
    result = serve(tmp_path, FOLIOT_PORT=str(taken_port), FOLIOT_DEBUG="1")
    assert result.returncode == 1 and "Traceback" in result.stderr and "Errno 98" in result.stderr
