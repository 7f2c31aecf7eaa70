"""A real `foliot serve` under a connection flood (issue 20, "Done when"): one attacker holds
4,096 idle connections, 64 stalled heads (whole start and signal heads whose body never comes)
and 16 partial heads open while a well-behaved client's starts (each on a new connection) and
signals (on a kept-alive one) all succeed, and the attacker's connections stay open: the
server holds them, cheaply. On the old main the front door stopped accepting at 4,096
connections, and the 64 stalled heads counted as admitted work and shed every start.

The attacker connects from 127.0.0.2, the good client from 127.0.0.1 (per-peer bounds apply
to each address). `FOLIOT_PEER_MAX_CONNECTIONS` is raised so the server really holds all the
attacker's sockets (with the default 1,024 its oldest idle ones would be closed to make room,
tests/api/test_edge_sockets.py), and the head timeout outlasts the test.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trio

from ..pg import free_port
from .test_crash_recovery import ADMIN, wait_ready

pytestmark = pytest.mark.e2e

IDLE = 4_096
STALLED = 64
PARTIAL = 16
WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


@pytest.fixture
def descriptors() -> Iterator[None]:
    """Room for the attacker's sockets in this process and in the server (which inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * (IDLE + STALLED + PARTIAL) + 1_024
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
async def url(tmp_path: Path, descriptors: None) -> AsyncIterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "FOLIOT_PORT": str(port),
        "FOLIOT_DATABASE_URL": f"sqlite:///{tmp_path / 'foliot.db'}",
        "FOLIOT_DATA_DIR": str(tmp_path / "data"),
        "FOLIOT_ADMIN_TOKEN": ADMIN,
        "FOLIOT_LOG_LEVEL": "WARNING",
        "FOLIOT_PEER_MAX_CONNECTIONS": str(2 * IDLE),
        "FOLIOT_HEAD_TIMEOUT_MS": "120000",
    }
    with open(tmp_path / "server.log", "ab") as log:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "foliot.cli", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        await wait_ready(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
        assert process.returncode is None, (tmp_path / "server.log").read_text()[-3000:]
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


def _attacker(port: int, count: int) -> list[socket.socket]:
    out = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        out.append(sock)
    return out


def _still_open(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) != b""  # data would be unexpected: counted as not held
    except BlockingIOError:
        return True
    except OSError:
        return False


async def test_a_flood_of_idle_connections_and_stalled_heads_leaves_good_clients_served(url: str) -> None:
    port = int(url.rsplit(":", 1)[1])
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.put(
            "/apps/orders",
            json={"handlerBaseUrl": "http://127.0.0.1:9"},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert r.status_code == 201, r.text
        key = {"Authorization": f"Bearer {r.json()['apiKey']}"}
        assert (await client.post("/apps/orders/workflows", json=WAIT, headers=key)).status_code == 201

        idle = await trio.to_thread.run_sync(_attacker, port, IDLE)
        stalled = await trio.to_thread.run_sync(_attacker, port, STALLED + PARTIAL)
        token = key["Authorization"]
        for i, sock in enumerate(stalled):
            what = "signals" if i % 2 else "runs"
            if i < STALLED:  # the whole head, with credentials; the body never comes
                head = f"POST /apps/orders/{what} HTTP/1.1\r\nHost: x\r\nAuthorization: {token}\r\n"
                head += "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            else:  # part of a head
                head = f"POST /apps/orders/{what} HTTP/1.1\r\nHost: x\r\nContent-Le"
            sock.send(head.encode())
        await trio.sleep(0.5)  # the server reads all of it

        statuses = []
        with trio.fail_after(120):
            for _ in range(50):
                async with httpx.AsyncClient(base_url=url, timeout=30) as fresh:  # a new connection
                    r = await fresh.post("/apps/orders/runs", json={"workflow": "w"}, headers=key)
                statuses.append(r.status_code)
                if r.status_code == 201:
                    s = await client.post(
                        "/apps/orders/signals", json={"runId": r.json()["runId"], "name": "go"}, headers=key
                    )
                    statuses.append(s.status_code)
        assert statuses == [201, 202] * 50, statuses

        held = sum(_still_open(sock) for sock in idle)
        stalled_held = sum(_still_open(sock) for sock in stalled)
        assert (held, stalled_held) == (IDLE, STALLED + PARTIAL)
        for sock in idle + stalled:
            sock.close()
        assert (await client.get("/healthz")).status_code == 200
