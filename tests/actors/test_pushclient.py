"""The push client against a scripted TCP server on 127.0.0.1: exact bytes out, answers in,
keep-alive reuse, connections the server closed, oversize and broken answers, cancellation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import h11
import pytest
import trio

from foliot.actors.pushclient import PushClient, PushError, split_url

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'

# A script answers one request: given the parsed request, return the bytes to send back and
# whether to close the connection afterwards.
Script = Callable[[h11.Request, bytes], tuple[bytes, bool]]


class Server:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[tuple[h11.Request, bytes]] = []
        self.connections = 0
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        body = b""
        async with stream:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                elif isinstance(event, h11.Request):
                    request, body = event, b""
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    self.requests.append((request, body))
                    answer, close = self.script(request, body)
                    await stream.send_all(answer)
                    if close:
                        return
                    conn = h11.Connection(h11.SERVER)  # the next request on the same socket
                else:
                    return


Serve = Callable[[Script], Awaitable[Server]]


@pytest.fixture
def serve(nursery: trio.Nursery) -> Serve:
    async def start(script: Script) -> Server:
        server = Server(script)
        listeners = await nursery.start(partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
        server.port = listeners[0].socket.getsockname()[1]
        return server

    return start


def ok(request: h11.Request, body: bytes) -> tuple[bytes, bool]:
    return OK, False


async def test_one_post_sends_the_exact_request_and_reads_the_answer(serve: Serve) -> None:
    def answer(request: h11.Request, body: bytes) -> tuple[bytes, bool]:
        return (b"HTTP/1.1 201 Created\r\nfoliot-next: ship\r\ncontent-length: 2\r\n\r\n{}", False)

    server = await serve(answer)
    client = PushClient()
    got = await client.post(
        f"http://127.0.0.1:{server.port}/foliot/wf/step?x=1", b'{"a":1}', {"foliot-app": "orders"}, 1000
    )
    assert (got.status, got.body, got.next_step) == (201, b"{}", "ship")
    request, body = server.requests[0]
    assert request.method == b"POST" and request.target == b"/foliot/wf/step?x=1"
    headers = dict(request.headers)
    assert headers[b"host"] == f"127.0.0.1:{server.port}".encode()
    assert headers[b"content-length"] == b"7" and headers[b"foliot-app"] == b"orders"
    assert body == b'{"a":1}'
    await client.aclose()


async def test_a_repeated_foliot_next_is_read_as_one_combined_value(serve: Serve) -> None:
    """Two `foliot-next` lines are one field, `a, b` (RFC 9110 5.3), as httpx reads them: no
    step has that name, so the step fails `invalid_next` instead of the last line winning."""

    def answer(request: h11.Request, body: bytes) -> tuple[bytes, bool]:
        return (
            b"HTTP/1.1 200 OK\r\nfoliot-next: $end\r\nfoliot-next: ship\r\ncontent-length: 1\r\n\r\n1",
            False,
        )

    server = await serve(answer)
    client = PushClient()
    got = await client.post(f"http://127.0.0.1:{server.port}/h", b"{}", {}, 1000)
    assert got.next_step == "$end, ship"
    await client.aclose()


async def test_connections_are_kept_alive_and_reused(serve: Serve) -> None:
    server = await serve(ok)
    client = PushClient()
    for _ in range(5):
        got = await client.post(f"http://127.0.0.1:{server.port}/h", b"{}", {}, 1000)
        assert (got.status, got.body) == (200, b'{"ok":true}')
    assert server.connections == 1 and client.connections_opened == 1 and len(server.requests) == 5
    await client.aclose()


async def test_a_chunked_answer_is_read_whole(serve: Serve) -> None:
    def chunked(request: h11.Request, body: bytes) -> tuple[bytes, bool]:
        return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n[1,\r\n2\r\n2]\r\n0\r\n\r\n", False

    server = await serve(chunked)
    client = PushClient()
    assert (await client.post(f"http://127.0.0.1:{server.port}/", b"", {}, 1000)).body == b"[1,2]"
    assert (await client.post(f"http://127.0.0.1:{server.port}/", b"", {}, 1000)).body == b"[1,2]"
    assert server.connections == 1
    await client.aclose()


async def test_a_connection_the_server_closed_is_replaced_without_an_error(serve: Serve) -> None:
    def close_after(request: h11.Request, body: bytes) -> tuple[bytes, bool]:
        return OK, True  # answers, then closes without saying so: the client finds out later

    server = await serve(close_after)
    client = PushClient()
    for _ in range(3):
        got = await client.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 1000)
        assert got.status == 200
    assert len(server.requests) == 3 and server.connections == 3
    await client.aclose()


async def test_connection_close_from_the_server_is_honoured(serve: Serve) -> None:
    def closing(request: h11.Request, body: bytes) -> tuple[bytes, bool]:
        return b"HTTP/1.1 500 Oops\r\nconnection: close\r\ncontent-length: 0\r\n\r\n", True

    server = await serve(closing)
    client = PushClient()
    for _ in range(2):
        assert (await client.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 1000)).status == 500
    assert client.connections_opened == 2
    await client.aclose()


async def test_an_answer_over_the_limit_is_cut_off_and_its_connection_dropped(serve: Serve) -> None:
    def big(request: h11.Request, body: bytes) -> tuple[bytes, bool]:
        return b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000, False

    server = await serve(big)
    client = PushClient()
    got = await client.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 100)
    assert got.status == 200 and got.body is None
    assert (await client.post(f"http://127.0.0.1:{server.port}/", b"{}", {}, 10_000)).body == b"x" * 5000
    assert client.connections_opened == 2
    await client.aclose()


async def test_garbage_and_early_close_are_connection_errors(serve: Serve) -> None:
    garbage = await serve(lambda request, body: (b"NOT HTTP AT ALL\r\n\r\n", True))
    silent = await serve(lambda request, body: (b"", True))
    client = PushClient()
    with pytest.raises(PushError, match="RemoteProtocolError"):
        await client.post(f"http://127.0.0.1:{garbage.port}/", b"{}", {}, 1000)
    with pytest.raises(PushError, match="closed"):
        await client.post(f"http://127.0.0.1:{silent.port}/", b"{}", {}, 1000)
    await client.aclose()


async def test_a_refused_connection_is_a_connect_error() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with pytest.raises(PushError, match="ConnectError"):
        await PushClient().post(f"http://127.0.0.1:{port}/", b"{}", {}, 1000)


async def test_a_cancelled_exchange_drops_its_connection(serve: Serve) -> None:
    server = await serve(ok)
    client = PushClient()
    url = f"http://127.0.0.1:{server.port}/"
    assert (await client.post(url, b"{}", {}, 1000)).status == 200
    with trio.CancelScope() as scope:
        scope.cancel()  # cancelled before the answer could be read
        await client.post(url, b"{}", {}, 1000)
    assert scope.cancelled_caught
    # The connection cut mid-exchange is not reused: the next post opens a fresh one.
    assert (await client.post(url, b"{}", {}, 1000)).status == 200
    assert client.connections_opened == 2
    await client.aclose()


@pytest.mark.parametrize(
    ("url", "origin", "target"),
    [
        ("http://h.test/foliot/a/b", ("http", "h.test", 80), "/foliot/a/b"),
        ("https://h.test:8443/x?y=1", ("https", "h.test", 8443), "/x?y=1"),
        ("HTTP://[::1]:9000", ("http", "::1", 9000), "/"),
    ],
)
def test_split_url(url: str, origin: tuple[str, str, int], target: str) -> None:
    assert split_url(url) == (origin, target)


@pytest.mark.parametrize("url", ["ftp://h.test/", "http:///nohost", "http://h.test:99999/"])
def test_split_url_refuses_what_is_not_an_http_url(url: str) -> None:
    with pytest.raises(PushError):
        split_url(url)
