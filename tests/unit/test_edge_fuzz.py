"""Differential fuzzing of the HTTP edge: whatever bytes a client sends on a connection, the
server (`foliot/http/listen.py`'s `serve`: the accept loop, `EdgeTCPServer`, the JSON-error
protocol) answers exactly the requests h11 frames from them, in order; after a protocol error
it sends one JSON error answer (never a 500) and closes; it never crashes.

h11 is the judge: each example's bytes are fed to an `h11.Connection(SERVER)` (the model), which
is answered the way the test's app answers; the same bytes go to the server over a real
loopback connection, then the client's end of the stream. Bounded: a fixed number of examples
and no deadline per example (`settings` below), a few seconds in all.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import h11
import pytest
import trio
from hypercorn.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foliot.http.listen import Limits, serve

MAX_HEAD = 16 * 1024  # hypercorn's h11_max_incomplete_size, the server's too


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The app: reads the whole body, answers `METHOD target length`."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
    body = b"%s %s %d" % (scope["method"].encode(), target, size)
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """One server for every example, in a thread with its own Trio loop."""
    ready = threading.Event()
    found: list[int] = []
    stop: list[trio.Event] = []
    token: list[trio.lowlevel.TrioToken] = []
    errors: list[BaseException] = []

    async def main() -> None:
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        stop.append(trio.Event())
        token.append(trio.lowlevel.current_trio_token())
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(
                    echo,  # type: ignore[arg-type]
                    config,
                    shutdown_trigger=stop[0].wait,
                    limits=Limits(head_timeout_s=5),
                    task_status=task_status,
                )
            )
            found.append(int(binds[0].rsplit(":", 1)[1]))
            ready.set()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as error:
            errors.append(error)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    assert not errors, errors
    yield found[0]
    trio.from_thread.run_sync(stop[0].set, trio_token=token[0])
    thread.join(10)
    assert not errors, errors  # the server never crashed


def expected(data: bytes) -> tuple[list[tuple[int, bytes]], bool]:
    """What h11 frames from `data` then the end of the stream: the answers the server must
    send ((200, echo) per request, then (status, b"") for a protocol error)."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    answers: list[tuple[int, bytes]] = []
    conn.receive_data(data)
    eof_sent = False
    request: h11.Request | None = None
    size = 0
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as error:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                answers.append((error.error_status_hint, b""))
            return answers, True
        if event is h11.NEED_DATA:
            if eof_sent:
                return answers, False
            conn.receive_data(b"")
            eof_sent = True
        elif isinstance(event, h11.Request):
            request, size = event, 0
        elif isinstance(event, h11.Data):
            size += len(event.data)
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            body = b"%s %s %d" % (request.method.upper(), request.target, size)
            conn.send(h11.Response(status_code=200, headers=[(b"content-length", str(len(body)).encode())]))
            conn.send(h11.Data(data=body))
            conn.send(h11.EndOfMessage())
            answers.append((200, body))
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return answers, False
            conn.start_next_cycle()
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return answers, False


def answers_of(raw: bytes) -> list[tuple[int, bytes]]:
    """The answers in what the server sent (each with a Content-Length)."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        length = next(
            int(v)
            for n, _, v in (line.partition(b":") for line in lines[1:])
            if n.lower() == b"content-length"
        )
        body, raw = rest[:length], rest[length:]
        if status >= 400:
            assert b"connection: close" in head.lower()
            error = json.loads(body)["error"]  # the API's error shape
            assert error["code"] and error["message"]
        out.append((status, body))
    return out


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):  # the server closes (a timeout fails the test)
            received += chunk
    return received


# --------------------------------------------------------------------------- what clients send

METHODS = st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"get", b"P OST", b""])
TARGETS = st.sampled_from([b"/", b"/apps/a/signals", b"/apps/a/runs?x=1", b"*", b"", b"/a b", b"/%00"])
VERSIONS = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.1", b"HTTP/2.0", b"HTTP/1.x", b"http/1.1"])
EOLS = st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n"])  # mostly CRLF, sometimes a bare LF


@st.composite
def header(draw: st.DrawFn, body_len: int) -> bytes:
    kind = draw(
        st.sampled_from(
            ["host", "length", "bad_length", "te", "connection", "fold", "plain", "space_name", "garbage"]
        )
    )
    if kind == "host":
        return b"Host: x"
    if kind == "length":
        return b"Content-Length: %d" % draw(st.sampled_from([body_len, body_len, 0, body_len + 1, 3]))
    if kind == "bad_length":
        return draw(
            st.sampled_from(
                [b"Content-Length: -1", b"Content-Length: 1,2", b"Content-Length: x", b"Content-Length: 5, 5"]
            )
        )
    if kind == "te":
        return b"Transfer-Encoding: " + draw(
            st.sampled_from([b"chunked", b"gzip", b"gzip, chunked", b"identity", b"chunked, chunked"])
        )
    if kind == "connection":
        return b"Connection: " + draw(st.sampled_from([b"close", b"keep-alive", b"Close"]))
    if kind == "fold":
        return b"X-A: 1\r\n folded"
    if kind == "space_name":
        return b"X-B : 1"
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=12))
    return b"X-C: " + draw(st.sampled_from([b"1", b"", b"\x7f", b"a\tb"]))


@st.composite
def request(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=20))
    eol = draw(EOLS)
    line = draw(METHODS) + b" " + draw(TARGETS) + b" " + draw(VERSIONS)
    headers = [b"Host: x", *draw(st.lists(header(len(body)), max_size=4))]
    if draw(st.booleans()):
        headers = headers[1:]  # sometimes no Host
    chunked = draw(st.booleans()) and any(b"chunked" in h for h in headers)
    payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if chunked and body else body
    return eol.join([line, *headers]) + eol + eol + payload


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """Requests (some pipelined), garbage, and often a stream cut short (a partial head or body)."""
    parts = draw(
        st.lists(
            st.one_of(request(), request(), request(), st.binary(min_size=1, max_size=30)),
            min_size=1,
            max_size=5,
        )
    )
    data = b"".join(parts)
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data


@settings(
    max_examples=int(os.environ.get("FOLIOT_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=streams())
def test_the_server_answers_exactly_what_h11_frames(port: int, data: bytes) -> None:
    want, error = expected(data)
    got = answers_of(exchange(port, data))
    assert [status for status, _ in got] == [status for status, _ in want], (data, got)
    for (status, body), (_, want_body) in zip(got, want, strict=True):
        assert status != 500
        if status == 200:
            assert body == want_body
    if error and want and want[-1][0] >= 400:
        assert got[-1][0] in (400, 431, 501, 505)  # the error h11 names, in the API's shape


def test_requests_pipelined_whole_are_answered_in_order(port: int) -> None:
    data = (
        b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
        b"GET /3 HTTP/1.1\r\n\r\n"
    )
    got = answers_of(exchange(port, data))
    assert got == [(200, b"GET /1 0"), (200, b"POST /2 2"), (400, got[2][1])]  # /3 has no Host
    assert expected(data) == ([(200, b"GET /1 0"), (200, b"POST /2 2"), (400, b"")], True)
