"""Property-based run of Schemathesis against /openapi.json on a live server: never a 500,
and every answer (success or error) matches the schema its operation declares.

Long-polling (`tasks/poll`, up to 60 s by design) is left out here and tested on its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from ..pg import free_port
from .test_crash_recovery import wait_ready

pytestmark = pytest.mark.e2e


async def test_no_server_errors_for_generated_input(tmp_path: Path) -> None:
    binary = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.fail("schemathesis is a dev dependency; reinstall with .[dev]")
    port = free_port()
    env = {
        **os.environ,
        "FOLIOT_PORT": str(port),
        "FOLIOT_ADMIN_TOKEN": "st-admin",
        "FOLIOT_DATA_DIR": str(tmp_path / "d"),
        "FOLIOT_DATABASE_URL": f"sqlite:///{tmp_path / 'f.db'}",
        "FOLIOT_LOG_LEVEL": "ERROR",
    }
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "foliot.cli", "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(url)
        async with httpx.AsyncClient(base_url=url) as client:
            r = await client.put(
                "/apps/orders",
                json={"handlerBaseUrl": "http://127.0.0.1:9"},
                headers={"Authorization": "Bearer st-admin"},
            )
            assert r.status_code == 201
            key = r.json()["apiKey"]
        for token in ("st-admin", key):
            result = await trio.run_process(
                [
                    binary,
                    "run",
                    f"{url}/openapi.json",
                    "-H",
                    f"Authorization: Bearer {token}",
                    "-c",
                    "not_a_server_error,response_schema_conformance,content_type_conformance",
                    "-n",
                    "40",
                    "--phases",
                    "examples,fuzzing,stateful",
                    "--exclude-path",
                    "/apps/{app}/tasks/poll",
                    "--request-timeout",
                    "15",
                    "--seed",
                    "42",
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            output = result.stdout.decode(errors="replace")
            assert result.returncode == 0, output[-4000:]
        assert "Traceback" not in log.read_text()
    finally:
        server.kill()
        server.wait()
