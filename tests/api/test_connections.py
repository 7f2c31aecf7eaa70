"""The server ends connections it said it would end, and idle ones after the keep-alive timeout,
whichever layer answered (the hot-path wrapper or Quart's routes).

Quart-trio cancels its request task as soon as hypercorn reports the disconnect that hypercorn
itself sends while handling the answer's last message: the connection was then never closed,
neither after `Connection: close` / HTTP/1.0 nor when idle (a hostile client kept any number of
sockets open by sending one request on each).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from foliot import server
from foliot.storage.base import RunFilter

from ..conftest import Api


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """Connection handling does not depend on the store: SQLite only."""
    return f"sqlite:///{tmp_path / 'foliot.db'}"


# Paths answered by Quart's routes, the hot path, an error hook and the console.
GETS = ["/healthz", "/apps/orders", "/apps/orders/runs?limit=1", "/nope", "/console/login"]


async def _exchange(api: Api, request: bytes, wait_s: float = 10) -> bytes:
    """Send `request` on a fresh connection; everything the server sends until it closes."""
    host, port = api.running.url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    received = b""
    with trio.fail_after(wait_s):
        await stream.send_all(request)
        while chunk := await stream.receive_some(65536):
            received += chunk
    await stream.aclose()
    return received


def _get(path: str, key: str, *extra: str, version: str = "1.1") -> bytes:
    lines = [f"GET {path} HTTP/{version}", "Host: foliot", f"Authorization: Bearer {key}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("path", GETS)
async def test_connection_close_is_honoured(api: Api, path: str) -> None:
    answer = await _exchange(api, _get(path, api.key, "Connection: close"))
    assert answer.startswith(b"HTTP/1.1 "), answer[:100]
    assert b"\r\nconnection: close\r\n" in answer.lower()


async def test_connection_close_is_honoured_on_the_hot_path(api: Api) -> None:
    body = b'{"runId":"run_nope","name":"go"}'
    head = f"POST /apps/orders/signals HTTP/1.1\r\nHost: foliot\r\nAuthorization: Bearer {api.key}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    answer = await _exchange(api, head.encode() + body)
    assert answer.startswith(b"HTTP/1.1 404 "), answer[:200]


@pytest.mark.parametrize("path", GETS)
async def test_an_http_1_0_request_is_answered_and_closed(api: Api, path: str) -> None:
    answer = await _exchange(api, _get(path, api.key, version="1.0"))
    assert answer.startswith(b"HTTP/1.1 "), answer[:100]


async def test_a_refused_post_that_closes_the_connection_closes_it(api: Api) -> None:
    """An error answered before a large body was read says `Connection: close` (the body is not
    read): the server must then really close."""
    request = (
        b"POST /apps/orders/workflows HTTP/1.1\r\nHost: foliot\r\n"
        + f"Authorization: Bearer {api.key}\r\n".encode()
        + b"Content-Type: text/plain\r\nContent-Length: 900000\r\n\r\n"
    )
    answer = await _exchange(api, request)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"\r\nconnection: close\r\n" in answer.lower()


class TestIdle:
    @pytest.fixture
    def settings_overrides(self, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
        """Runs before the server starts (the `api` fixture needs it): a short keep-alive."""
        monkeypatch.setattr(server, "KEEP_ALIVE_TIMEOUT_S", 0.2)
        return {}

    @pytest.mark.parametrize("path", GETS)
    async def test_an_idle_kept_alive_connection_is_closed(self, api: Api, path: str) -> None:
        """After its answer, the kept-alive connection ends once idle (before the fix: never,
        so `_exchange` timed out). A connection the server ends before reading the request (a
        scheduler slower than the 0.2 s timeout) proves nothing either way and is tried again."""
        answer = b""
        for _ in range(50):
            try:
                answer = await _exchange(api, _get(path, api.key))
            except trio.BrokenResourceError:  # closed (reset) before the request was read
                continue
            if answer:
                break
        assert answer.startswith(b"HTTP/1.1 "), answer[:100]
        assert b"connection: close" not in answer.lower()


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GARBAGE\r\n\r\n", 400, "invalid_request"),
        (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "invalid_request"),  # no Host
        (b"GET /healthz HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n", 400, "invalid_request"),
        (
            b"POST /apps/orders/runs HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            501,
            "not_implemented",
        ),
        (
            b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Long: " + b"a" * 200_000 + b"\r\n\r\n",
            431,
            "headers_too_large",
        ),
    ],
)
async def test_a_request_that_is_not_http_gets_a_json_error(
    api: Api, request_bytes: bytes, status: int, code: str
) -> None:
    """Refused by the HTTP layer before any route: still the API's error shape, then closed."""
    answer = await _exchange(api, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)
    assert set(error) == {"error"} and error["error"]["code"] == code
    assert isinstance(error["error"]["message"], str) and error["error"]["message"]


async def test_content_length_and_transfer_encoding_together_are_refused_and_closed(api: Api) -> None:
    """Both framings at once is how requests are smuggled past a proxy (RFC 9112 6.1): refused,
    the connection closed, nothing started."""
    body = b'{"workflow":"w"}'
    request = (
        b"POST /apps/orders/runs HTTP/1.1\r\nHost: foliot\r\n"
        + f"Authorization: Bearer {api.key}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n"
    )
    answer = await _exchange(api, request)
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(rest)["error"]["code"] == "invalid_request"
    assert await api.engine.store.list_runs(RunFilter(api.app), 10, None) == []
