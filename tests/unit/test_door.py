"""The front door (`foliot/http/door.py`): its thread frames HTTP/1.1 requests, refuses shed
starts and signals itself, and hands everything else to hypercorn in the loop unchanged."""

from __future__ import annotations

import errno
import json
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from hypercorn.config import Config

from foliot.http.door import ACCEPT_BACKOFF_S, Door, Head, parse_head, refusal_bytes
from foliot.http.listen import SWITCH_INTERVAL_S, serve

SIGNAL = b'{"runId":"r1","name":"go"}'


def post(path: str, body: bytes = SIGNAL, extra: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


# --------------------------------------------------------------------------- pure framing


def test_a_complete_head_is_framed_by_content_length() -> None:
    raw = post("/apps/shop/signals")
    head = parse_head(raw + b"GET / HTTP/1.1\r\n")
    assert isinstance(head, Head)
    assert raw[head.size :] == SIGNAL
    assert (head.body, head.adds_work, head.keep_alive) == (len(SIGNAL), True, True)


def test_which_requests_add_work() -> None:
    def adds(raw: bytes) -> bool:
        head = parse_head(raw)
        assert isinstance(head, Head)
        return head.adds_work

    assert adds(post("/apps/shop/runs"))
    assert adds(post("/apps/shop/signals?x=1"))
    assert adds(post("/apps/shop/runs/"))
    assert not adds(post("/apps/shop/runs/r1/cancel"))
    assert not adds(post("/apps/shop/tasks/t1/complete"))
    assert not adds(get("/apps/shop/runs"))
    assert not adds(post("/admin/apps"))


def test_an_incomplete_head_waits_and_an_odd_one_is_left_to_hypercorn() -> None:
    assert parse_head(b"POST /apps/a/runs HTTP/1.1\r\nHost: x\r\n") is None
    assert parse_head(b"x" * 70_000) is False  # no end of head within 64 KiB
    for odd in (
        post("/apps/a/runs", extra="Transfer-Encoding: chunked\r\n"),
        post("/apps/a/runs", extra="Expect: 100-continue\r\n"),
        post("/apps/a/runs", extra="Content-Length: 3\r\n"),  # two lengths
        b"POST /apps/a/runs HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /apps/a/runs HTTP/2\r\n\r\n",
        b"POST  /apps/a/runs HTTP/1.1\r\n\r\n",
        b"POST /apps/a/runs HTTP/1.1\r\nBad header\r\n\r\n",
        b"POST /apps/a/runs HTTP/1.1\r\nName : v\r\n\r\n",
    ):
        assert parse_head(odd) is False, odd


def test_keep_alive_follows_the_version_and_connection_header() -> None:
    def keep(raw: bytes) -> bool:
        head = parse_head(raw)
        assert isinstance(head, Head)
        return head.keep_alive

    assert keep(b"GET / HTTP/1.1\r\n\r\n")
    assert not keep(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert not keep(b"GET / HTTP/1.0\r\n\r\n")
    assert not keep(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")  # h11 keeps no 1.0 connection


def test_the_refusal_is_a_whole_answer() -> None:
    raw = refusal_bytes(429, 2, b'{"a":1}', keep_alive=False)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 429 Too Many Requests"
    assert b"retry-after: 2" in lines and b"content-length: 7" in lines
    assert b"connection: close" in lines and body == b'{"a":1}'
    assert b"connection: close" not in refusal_bytes(503, 1, b"{}", keep_alive=True)


# --------------------------------------------------------------------------- the thread, real sockets


class FakeAdmission:
    """What the door asks; refuses while `refusing`."""

    def __init__(self) -> None:
        self.refusing = False
        self.asked = 0
        self.forwarded = 0
        self.answered = 0

    def door_refusal(self, now: float) -> tuple[int, int, bytes] | None:
        self.asked += 1
        if not self.refusing:
            return None
        return 429, 1, json.dumps({"error": {"code": "overloaded", "reason": "latency"}}).encode()

    def door_forward(self) -> None:
        self.forwarded += 1

    def door_answer(self) -> None:
        self.answered += 1


class App:
    """Answers 200 with what it read; `/slow` waits for `release`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        self.release = trio.Event()
        self.entered = trio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen.append((scope["method"], scope["path"], body))
        if scope["path"] == "/slow":
            self.entered.set()
            await self.release.wait()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def served(admission: FakeAdmission, app: App) -> AsyncIterator[int]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 1
    stop = trio.Event()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(
                    app,
                    config,
                    shutdown_trigger=stop.wait,
                    admission=admission,
                    task_status=task_status,  # type: ignore[arg-type]
                )
            )
            yield int(binds[0].rsplit(":", 1)[1])
            stop.set()


class Client:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            self.buf += await self.receive()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        size = int(headers.get("content-length", "0"))
        while len(self.buf) < size:
            self.buf += await self.receive()
        body, self.buf = self.buf[:size], self.buf[size:]
        return int(lines[0].split()[1]), headers, body

    async def receive(self) -> bytes:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError
        return data


async def connect(port: int) -> Client:
    return Client(await trio.open_tcp_stream("127.0.0.1", port))


@pytest.mark.parametrize("split", [False, True])
async def test_a_refused_signal_is_answered_by_the_thread_and_the_connection_goes_on(split: bool) -> None:
    admission, app = FakeAdmission(), App()
    async with served(admission, app) as port:
        client = await connect(port)
        await client.stream.send_all(post("/apps/shop/signals"))
        status, _, body = await client.answer()
        assert (status, body) == (200, SIGNAL)  # not shedding: handed on
        admission.refusing = True
        raw = post("/apps/shop/signals", b'{"runId":"r2","name":"go"}')
        if split:  # the head, then the body in pieces (incomplete heads: test_an_incomplete_head_waits)
            await client.stream.send_all(raw[:30])
            await client.stream.send_all(raw[30:-5])
            status, headers, body = await client.answer()
            await client.stream.send_all(raw[-5:])
        else:
            await client.stream.send_all(raw)
            status, headers, body = await client.answer()
        assert status == 429 and headers["retry-after"] == "1"
        assert json.loads(body)["error"]["code"] == "overloaded"
        assert "connection" not in headers
        # The refused body was skipped: the next request on the connection is framed right.
        await client.stream.send_all(get("/healthz"))
        assert (await client.answer())[0] == 200
        await client.stream.aclose()
    assert [(m, p) for m, p, _ in app.seen] == [("POST", "/apps/shop/signals"), ("GET", "/healthz")]
    assert (admission.forwarded, admission.answered) == (1, 1)


async def test_the_thread_switch_interval_is_short_while_the_door_runs_and_restored_after() -> None:
    before = sys.getswitchinterval()
    async with served(FakeAdmission(), App()):
        assert sys.getswitchinterval() == min(before, SWITCH_INTERVAL_S)
    assert sys.getswitchinterval() == before


async def test_only_starts_and_signals_are_refused() -> None:
    admission, app = FakeAdmission(), App()
    admission.refusing = True
    async with served(admission, app) as port:
        client = await connect(port)
        await client.stream.send_all(post("/apps/shop/runs/r1/cancel", b"{}") + get("/apps/shop/runs"))
        assert (await client.answer())[0] == 200
        assert (await client.answer())[0] == 200
        await client.stream.send_all(post("/apps/shop/runs", b'{"workflow":"w"}'))
        assert (await client.answer())[0] == 429
        await client.stream.aclose()
    assert [p for _, p, _ in app.seen] == ["/apps/shop/runs/r1/cancel", "/apps/shop/runs"]
    assert admission.asked == 1


async def test_a_request_is_held_until_the_one_before_it_is_answered() -> None:
    admission, app = FakeAdmission(), App()
    admission.refusing = True
    async with served(admission, app) as port:
        client = await connect(port)
        # Pipelined: the signal arrives while /slow is being answered in the loop; the thread
        # must not answer it first (answers go in order): it holds it, then refuses it.
        await client.stream.send_all(get("/slow") + post("/apps/shop/signals"))
        await app.entered.wait()
        assert admission.asked == 0
        app.release.set()
        assert (await client.answer())[0] == 200
        assert (await client.answer())[0] == 429
        await client.stream.aclose()
    assert admission.asked == 1 and admission.forwarded == 0
    assert [p for _, p, _ in app.seen] == ["/slow"]


async def test_a_connection_that_asks_to_close_is_closed_after_its_refusal() -> None:
    admission, app = FakeAdmission(), App()
    admission.refusing = True
    async with served(admission, app) as port:
        client = await connect(port)
        await client.stream.send_all(post("/apps/shop/signals", extra="Connection: close\r\n"))
        status, headers, _ = await client.answer()
        assert status == 429 and headers["connection"] == "close"
        with pytest.raises(EOFError):
            await client.receive()
        await client.stream.aclose()
    assert app.seen == []


async def test_a_chunked_request_is_left_to_hypercorn() -> None:
    admission, app = FakeAdmission(), App()
    admission.refusing = True
    async with served(admission, app) as port:
        client = await connect(port)
        head = b"POST /apps/shop/signals HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        await client.stream.send_all(head + b"4\r\nabcd\r\n0\r\n\r\n")
        status, _, body = await client.answer()
        assert (status, body) == (200, b"abcd")
        await client.stream.send_all(post("/apps/shop/signals"))  # the connection stays a pipe
        assert (await client.answer())[0] == 200
        await client.stream.aclose()
    assert [b for _, _, b in app.seen] == [b"abcd", SIGNAL]
    assert admission.asked == 0


async def test_many_connections_and_the_bytes_of_each_arrive_whole() -> None:
    admission, app = FakeAdmission(), App()
    big = b"x" * 300_000  # several reads by the thread, several hand-overs to the loop
    async with served(admission, app) as port:
        clients = [await connect(port) for _ in range(20)]
        for i, client in enumerate(clients):
            await client.stream.send_all(post(f"/apps/a{i}/misc", big + b"%d" % i))
        for i, client in enumerate(clients):
            status, _, body = await client.answer()
            assert status == 200 and body == big + b"%d" % i
            await client.stream.aclose()
    assert len(app.seen) == 20


async def test_a_request_handed_on_but_never_served_is_not_counted_as_waiting() -> None:
    admission, app = FakeAdmission(), App()
    async with served(admission, app) as port:
        client = await connect(port)
        # Framed and let in by the door, but h11 refuses it (HTTP/1.1 without Host): hypercorn
        # answers 400 and closes the connection without the app ever serving it.
        body = b'{"runId":"r1","name":"go"}'
        raw = b"POST /apps/shop/signals HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        await client.stream.send_all(raw)
        assert (await client.answer())[0] == 400
        with pytest.raises(EOFError):
            await client.receive()
        await client.stream.aclose()
    assert app.seen == []
    assert admission.forwarded == admission.answered == 1


# --------------------------------------------------------------------------- door vs no door

END = b"GET /end HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"  # ends a connection still open


def _chunked(body: bytes) -> bytes:
    head = b"POST /apps/shop/signals HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


# (name, what the client sends in pieces, how many answers it reads before it sends `END`
# when the connection is still open then, or None when the server closes it after these).
TRANSCRIPTS: list[tuple[str, list[bytes], int | None]] = [
    ("bare LF line ends", [b"GET /a HTTP/1.1\nHost: x\n\n"], 1),
    ("a bare LF ending the last header", [b"GET /a HTTP/1.1\r\nHost: x\n\r\n"], 1),
    ("a bare LF inside the head", [b"GET /a HTTP/1.1\nHost: x\r\n\r\n"], 1),
    ("LF-only signal", [b"POST /apps/shop/signals HTTP/1.1\nHost: x\nContent-Length: 3\n\nabc"], 1),
    ("pipelined", [get("/a") + get("/b") + post("/apps/shop/signals") + get("/c")], 4),
    ("a byte at a time", [bytes([b]) for b in post("/apps/shop/runs", b'{"w":1}') + get("/d")], 2),
    ("HTTP/1.0", [b"GET /a HTTP/1.0\r\n\r\n"], None),
    ("HTTP/1.0 asking to keep alive", [b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"], None),
    ("HTTP/1.0 signal", [b"POST /apps/shop/signals HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi"], None),
    ("asks to close", [b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"], None),
    (
        "two Connection headers",
        [b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: te\r\nConnection: close\r\n\r\n"],
        None,
    ),
    ("chunked", [_chunked(b"abcd"), get("/after")], 2),
    (
        "two lengths",
        [b"POST /apps/shop/signals HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi"],
        None,
    ),
    ("a bad header name", [b"GET /a HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n"], None),
    ("a leading blank line", [b"\r\n" + get("/a")], None),
    ("a folded header", [b"GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"], None),
    ("no Host", [b"POST /apps/shop/runs HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"], None),
    ("a body and a request in one read", [post("/apps/shop/signals", b"x" * 70_000) + get("/e")], 2),
]


async def _transcript(port: int, pieces: list[bytes], first: int | None) -> list[tuple[int, bytes]]:
    """Every answer the server sends until it closes the connection."""
    client = await connect(port)
    for piece in pieces:
        await client.stream.send_all(piece)
    answers = []
    if first is not None:  # these answers come before anything else is sent
        answers = [(status, body) for status, _, body in [await client.answer() for _ in range(first)]]
        await client.stream.send_all(END)
    while True:
        try:
            status, _, body = await client.answer()
        except (EOFError, trio.BrokenResourceError):
            break
        answers.append((status, body))
    await client.stream.aclose()
    return answers


@pytest.mark.parametrize(("pieces", "first"), [t[1:] for t in TRANSCRIPTS], ids=[t[0] for t in TRANSCRIPTS])
async def test_a_connection_is_answered_alike_with_and_without_the_door(
    pieces: list[bytes], first: int | None
) -> None:
    """h11 is the judge of HTTP/1.1: whatever bytes a client sends, the door hands them on so
    that hypercorn answers as it would without the door (or the thread answers a refusal)."""
    answers = {}
    for door in (False, True):
        app = App()
        async with served(FakeAdmission() if door else None, app) as port:  # type: ignore[arg-type]
            answers[door] = await _transcript(port, pieces, first)
    assert answers[True] == answers[False]
    assert answers[False]  # every transcript gets at least one answer
    if first is not None:
        assert len(answers[False]) == first + 1 and answers[False][-1] == (200, b"")  # /end


class RunningOut(socket.socket):
    """A listening socket whose first `failures` accepts fail as if the process had no
    descriptors left."""

    def __init__(self, failures: int) -> None:
        super().__init__(socket.AF_INET, socket.SOCK_STREAM)
        self.failures = failures
        self.failed_at: list[float] = []

    def accept(self) -> tuple[socket.socket, Any]:
        if len(self.failed_at) < self.failures:
            self.failed_at.append(time.monotonic())
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


async def test_an_accept_that_runs_out_of_descriptors_backs_off_then_serves() -> None:
    listening = RunningOut(failures=3)
    listening.bind(("127.0.0.1", 0))
    listening.listen(16)
    door = Door(listening, lambda: None)
    door.start()
    try:
        client = await trio.open_tcp_stream(*listening.getsockname())
        # The thread tried, failed three times, then accepted: it handed the connection on.
        stream = await door.listener.accept()
        assert len(listening.failed_at) == 3
        # Between failures it waited instead of spinning on the still-readable socket.
        gaps = [b - a for a, b in zip(listening.failed_at, listening.failed_at[1:], strict=False)]
        assert all(gap >= ACCEPT_BACKOFF_S * 0.9 for gap in gaps), gaps
        await client.send_all(get("/x"))  # handed on once framed
        assert await stream.receive_some(100) == get("/x")
        await client.aclose()
        await stream.aclose()
    finally:
        await door.listener.aclose()
        door.stop()
