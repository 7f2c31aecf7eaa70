"""The README's walk-through, pasted top to bottom into bash against a real `foliot serve`."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from ..pg import free_port
from .test_crash_recovery import wait_ready

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def readme_blocks() -> tuple[str, str]:
    """The shell walk-through and the handler listing."""
    text = (ROOT / "README.md").read_text()
    walk = text[text.index("## A first run with curl") :]
    shell = re.search(r"```sh\n(.*?)```", walk, re.S)
    python = re.search(r"```python\n(.*?)```", walk, re.S)
    assert shell is not None and python is not None
    return shell.group(1), python.group(1)


def test_readme_handler_is_the_shipped_example() -> None:
    _, listing = readme_blocks()
    assert listing == (ROOT / "examples" / "handler.py").read_text()


async def test_readme_walkthrough_runs_to_completion(tmp_path: Path) -> None:
    script, _ = readme_blocks()
    api_port, handler_port = free_port(), free_port()
    script = script.replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
    script = script.replace("127.0.0.1:9000", f"127.0.0.1:{handler_port}")
    # The walk-through runs from the repository's folder: give it one with .venv and examples/.
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOLIOT_")}
    env.update(FOLIOT_PORT=str(api_port), FOLIOT_LOG_LEVEL="WARNING", HANDLER_PORT=str(handler_port))
    server = await trio.lowlevel.open_process(
        [sys.executable, "-m", "foliot.cli", "serve"],
        cwd=tmp_path,
        env=env,
        stdout=open(tmp_path / "server.log", "wb"),
        stderr=subprocess.STDOUT,
    )
    shell = None
    try:
        await wait_ready(f"http://127.0.0.1:{api_port}")
        assert (tmp_path / ".foliot" / "foliot.db").exists()
        shell = await trio.lowlevel.open_process(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            stdout=open(tmp_path / "walk.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with trio.fail_after(60):
            code = await shell.wait()
        log = (tmp_path / "walk.log").read_text()
        assert code == 0, log
        admin = (tmp_path / ".foliot" / "admin-token").read_text().strip()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=5) as client:
            headers = {"Authorization": f"Bearer {admin}"}
            with trio.fail_after(30):
                while True:
                    r = await client.get(
                        "/apps/orders/runs", params={"businessKey": "order-7"}, headers=headers
                    )
                    assert r.status_code == 200, r.text
                    runs = r.json()["runs"]
                    if runs and runs[0]["status"] == "completed":
                        break
                    await trio.sleep(0.1)
        assert runs[0]["state"]["reserve"] == {"reservationId": "R-7"}, log
        assert runs[0]["state"]["await-payment"] is None
    finally:
        if shell is not None:  # the walk-through's background handler shares its session
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGKILL)
        server.send_signal(signal.SIGKILL)
        await server.wait()
