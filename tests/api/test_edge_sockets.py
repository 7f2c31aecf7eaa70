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


async def _open(address: tuple[str, int], source: str = "127.0.0.1") -> trio.SocketStream:
    """A connection from `source` (another loopback address is another peer)."""
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect(address)
    return trio.SocketStream(sock)


async def _answer(stream: trio.SocketStream) -> bytes:
    """One whole answer (head and Content-Length body)."""
    data = b""
    with trio.fail_after(10):
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += await stream.receive_some(65536)
    return head + b"\r\n\r\n" + body


async def _closed_by_server(stream: trio.SocketStream, within_s: float = 5) -> bool:
    with trio.move_on_after(within_s):
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


def _signal_head(app: str, key: str | None, length: int) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST /apps/{app}/signals HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


@pytest.mark.parametrize("with_key", [False, True])
async def test_stalled_bodies_take_no_admission_capacity(api: Api, with_key: bool) -> None:
    """64 starts and signals that send their head and never their body (with or without
    credentials) counted as admitted work from the head on (the front door), filled the
    latency gate's burst, and every app's starts and signals got 429 `latency`."""
    await api.register(WAIT)
    address = _address(api)
    stalled = []
    for i in range(64):
        stream = await _open(address, "127.0.0.2")
        path_app = api.app if i % 2 else "nobody"
        await stream.send_all(_signal_head(path_app, api.key if with_key else None, 100))
        stalled.append(stream)
    await trio.sleep(0.3)  # the server reads the heads
    for _ in range(10):
        r = await api.call("POST", f"/apps/{api.app}/runs", {"workflow": "w"})
        assert r.status_code == 201, r.text
        s = await api.call("POST", f"/apps/{api.app}/signals", {"runId": r.json()["runId"], "name": "go"})
        assert s.status_code == 202, s.text
    assert api.engine.admission.refused["latency"] == 0
    assert api.engine.admission.inflight == 0  # the stalled ones are not work yet
    for stream in stalled:
        await stream.aclose()


async def test_a_connection_the_client_closed_is_closed_at_once(api: Api) -> None:
    """A kept-alive connection whose client closed its side stayed open until the keep-alive
    timer ran out (75 s), so clients that open and close connections ran the server out."""
    stream = await _open(_address(api))
    await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
    await stream.send_eof()
    assert await _closed_by_server(stream)
    await stream.aclose()
    idle = await _open(_address(api))  # never sent a byte
    await idle.send_eof()
    assert await _closed_by_server(idle)
    await idle.aclose()


@pytest.mark.parametrize("settings_overrides", [{"peer_max_connections": 4}])
async def test_past_the_peer_bound_the_oldest_idle_connection_makes_room(api: Api) -> None:
    address = _address(api)
    idle = [await _open(address, "127.0.0.2") for _ in range(4)]
    for stream in idle:  # each used once, then idle, oldest first
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
    newest = await _open(address, "127.0.0.2")
    assert await _closed_by_server(idle[0])  # the oldest idle one made room
    await newest.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await _answer(newest)).startswith(b"HTTP/1.1 200")
    for stream in idle[1:]:  # the others are still served
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await _answer(stream)).startswith(b"HTTP/1.1 200")
    # Another peer is not bound by this one's connections.
    other = await _open(address, "127.0.0.3")
    await other.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await _answer(other)).startswith(b"HTTP/1.1 200")
    # With every connection of the peer busy (a body under way), a new one is closed at once.
    for stream in [newest, *idle[1:]]:
        await stream.send_all(_signal_head(api.app, api.key, 50))
    await trio.sleep(0.2)
    refused = await _open(address, "127.0.0.2")
    assert await _closed_by_server(refused)
    for stream in [newest, *idle, other, refused]:
        await stream.aclose()


@pytest.mark.parametrize("settings_overrides", [{"peer_max_requests": 2}])
async def test_past_the_peer_bound_of_requests_under_way_a_request_gets_429(api: Api) -> None:
    address = _address(api)
    held = [await _open(address, "127.0.0.2") for _ in range(2)]
    for stream in held:
        await stream.send_all(_signal_head(api.app, api.key, 50))
    await trio.sleep(0.2)
    third = await _open(address, "127.0.0.2")
    await third.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await _answer(third)
    assert answer.startswith(b"HTTP/1.1 429"), answer
    assert b'"reason":"peer"' in answer and b"retry-after: 1" in answer.lower()
    assert (await api.client.get("/healthz")).status_code == 200  # another peer (127.0.0.1)
    for stream in [*held, third]:
        await stream.aclose()


@pytest.mark.parametrize("settings_overrides", [{"head_timeout_ms": 300}])
async def test_a_head_trickled_past_the_head_timeout_is_cut_off(api: Api) -> None:
    stream = await _open(_address(api))
    await stream.send_all(b"GET /healthz HTTP/1.1\r\n")
    assert await _closed_by_server(stream, within_s=5)  # not the 75 s keep-alive timeout
    await stream.aclose()
    quiet = await _open(_address(api))  # an idle connection waits for the keep-alive timeout
    assert not await _closed_by_server(quiet, within_s=0.6)
    await quiet.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await _answer(quiet)).startswith(b"HTTP/1.1 200")
    await quiet.aclose()
