"""The HTTP edge against hostile clients, over real sockets to an in-process server (issue 20).

Each test drives `foliot.server.serve` on a real loopback port with plain sockets, the way an
attacker would, and then checks that the server is still there and answers a good client.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from ..conftest import Api


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The edge does not depend on the store: SQLite only."""
    return f"sqlite:///{tmp_path / 'foliot.db'}"


def _address(api: Api) -> tuple[str, int]:
    host, port = api.running.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def _vanish(address: tuple[str, int], data: bytes) -> None:
    """Connect, send `data`, close at once (no reading)."""
    sock = trio.socket.socket()
    await sock.connect(address)
    await sock.send(data)
    sock.close()


async def test_a_client_that_vanishes_before_its_body_cannot_crash_the_server(api: Api) -> None:
    """`POST /apps/nobody/signals` with `Content-Length: 10`, no body, no credentials, then
    close: h11 reports the incomplete body and the JSON error answer was written in three sends;
    once the client had gone, the third collided with `send_eof` (`BusyResourceError`), which
    reached the server's nursery and ended the process."""
    head = b"POST /apps/nobody/signals HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
    address = _address(api)
    for _ in range(50):
        await _vanish(address, head)
        await trio.sleep(0.005)  # the server's side runs between attempts
    for _ in range(50):  # and all at once
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(_vanish, address, head)
    await trio.sleep(0.2)
    r = await api.client.get("/healthz")
    assert r.status_code == 200
