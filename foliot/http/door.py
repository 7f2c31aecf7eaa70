"""The front door: a thread that reads every connection and refuses shed starts and signals
itself, so a refusal never waits for the event loop.

Above capacity the event loop is busy with the work it admitted. A refusal made in the loop
(`edge.Shed`) waits for it several times: to read the socket, for hypercorn to parse the request
and start a task for it, and to write the answer. Measured from outside at 2.5x capacity, with
the loop refusing 1,841 of 2,000 signals, refusals took 2.3 s at p99 and cost ~2 ms of CPU
each, so the loop had little left for the work it admitted.

The door is one thread in the server process. It accepts the connections, reads what arrives
on them (a `selectors` loop), finds where each HTTP/1.1 request begins and ends (the request
line and `Content-Length`), and for a start or a signal (`POST /apps/<app>/runs|signals`)
asks the admission (`Admission.door_refusal`, the latency gate's decision, thread-safe) before
anything is handed on. A refused request is answered from the thread (429 + `Retry-After`,
the body `Shed` sends) and its bytes are dropped; the rest are handed to hypercorn in the
loop (`token.run_sync_soon`), which parses and serves them as before through `DoorStream`.
Everything else about the connection (answers, keep-alive, timeouts, closing) stays
hypercorn's; the thread never writes while a request of the connection is being answered in
the loop, so answers stay in order.

The thread only frames requests it understands: a `Transfer-Encoding`, `Expect` or `Upgrade`
header, a bad or repeated `Content-Length`, or a head over 64 KiB turns the connection into a
plain pipe for the rest of its life (hypercorn decides; nothing more is refused by the thread
on it). A refused body over 64 KiB is not drained: such a request goes to the loop.

Bounds: at most `max_connections` connections are open (past it the thread stops accepting
and callers wait in the kernel's accept queue); a connection whose bytes the loop has not read
reaches `_PAUSE_BYTES` stops being read until the loop catches up.
"""

from __future__ import annotations

import errno
import logging
import re
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from email.utils import formatdate
from typing import Any

import trio
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, Scope
from hypercorn.utils import parse_socket_addr

from ..actors.admission import DOOR_ADMITTED

log = logging.getLogger("foliot.http.door")

ADDS_WORK = re.compile(rb"^/apps/[^/?#]+/(?:runs|signals)/?$")
_BLANK_LINE = re.compile(rb"\n\r?\n")  # h11's end of a head
HEAD_MAX = 65_536  # a request head longer than this is left to hypercorn (it refuses it)
DRAIN_MAX = 65_536  # a refused body up to this size is read and dropped by the thread
_PAUSE_BYTES = 1 << 20  # handed to the loop and not read by it yet: stop reading the socket
_RECV = 65_536
MAX_CONNECTIONS = 4_096
# After an accept fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), the
# thread stops accepting this long (the kernel queues callers), as `trio.serve_listeners` does:
# the listening socket stays readable, and accepting again at once would spin.
ACCEPT_BACKOFF_S = 0.1
_GONE_BEFORE_ACCEPTED = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM}  # as trio ignores them
# What a request handed on is: not a start or signal; one the door let in after asking the
# admission; one it did not ask about (its body is too large to drop if refused).
OTHER, LET_IN, UNASKED = 0, 1, 2
_REASONS = {429: b"Too Many Requests", 503: b"Service Unavailable"}

# The thread's decision: (status, Retry-After seconds, JSON body) to refuse, None to hand on.
Decide = Callable[[], "tuple[int, int, bytes] | None"]


class Head:
    """What the thread needs of one request head (`parse_head`)."""

    __slots__ = ("adds_work", "body", "keep_alive", "size")

    def __init__(self, size: int, body: int, adds_work: bool, keep_alive: bool) -> None:
        self.size = size  # bytes of the head, its blank line included
        self.body = body  # Content-Length
        self.adds_work = adds_work  # POST /apps/<app>/runs or /signals
        self.keep_alive = keep_alive


def parse_head(buf: bytes | bytearray) -> Head | bool | None:
    """The request head at the start of `buf`: a `Head`; None if it is not complete yet; False
    if the thread must not frame this connection (anything but a plain request with at most a
    `Content-Length` body, or a head over `HEAD_MAX`)."""
    # Where h11 ends the head: its first blank line, bare LFs allowed (`\n\r?\n`). The thread
    # frames only heads written with CRLF throughout; any other is left to hypercorn.
    blank = _BLANK_LINE.search(buf, 0, HEAD_MAX + 4)
    if blank is None:
        return False if len(buf) > HEAD_MAX else None
    end = blank.start() - 1  # the CR of the last header line's CRLF
    if end < 0 or blank.group() != b"\n\r\n" or buf[end] != 13:
        return False
    lines = bytes(buf[:end]).split(b"\r\n")
    if any(b"\n" in line for line in lines):
        return False
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        return False
    method, target, version = parts
    length: int | None = None
    connection = b""
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            return False
        name = name.lower()
        value = value.strip()
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return False
            length = int(value)
        elif name in (b"transfer-encoding", b"expect", b"upgrade"):
            return False
        elif name == b"connection":
            connection += b"," + value.lower()  # h11 reads every Connection header
    # As h11 decides: HTTP/1.0 connections are never kept (hypercorn closes them after one
    # answer, whatever `Connection` says).
    keep = version == b"HTTP/1.1" and b"close" not in connection
    path = target.split(b"?", 1)[0]
    adds = method == b"POST" and ADDS_WORK.match(path) is not None
    return Head(end + 4, length or 0, adds, keep)


_DATE: list[Any] = [0, b""]  # (second, its Date header): formatting it costs more than the rest


def _date() -> bytes:
    now = int(time.time())
    if _DATE[0] != now:
        _DATE[:] = [now, b"date: " + formatdate(now, usegmt=True).encode()]
    return bytes(_DATE[1])


def refusal_bytes(status: int, retry_after: int, body: bytes, *, keep_alive: bool) -> bytes:
    """The whole HTTP/1.1 answer the thread sends for a refused request."""
    head = [
        b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Refused")),
        b"content-type: application/json",
        b"retry-after: %d" % retry_after,
        b"content-length: %d" % len(body),
        _date(),
        b"server: foliot",
    ]
    if not keep_alive:
        head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class Conn:
    """One connection, as the thread sees it. Fields written by the thread: `forwarded`,
    `requests`, `kinds`; by the loop: `consumed`, `answered`. Each is written by one side only."""

    __slots__ = (
        "answered",
        "body_left",
        "buf",
        "closed",
        "consumed",
        "eof",
        "forwarded",
        "key",
        "kinds",
        "passthrough",
        "paused",
        "reading",
        "requests",
        "skip",
        "sock",
        "stream",
        "waiting",
    )

    def __init__(self, sock: socket.socket, key: Any) -> None:
        self.sock = sock
        self.key = key  # the peer as hypercorn puts it in the ASGI scope's "client"
        self.buf = bytearray()
        self.body_left = 0  # body bytes of the current request still to come
        self.skip = False  # the current request was refused: its body is dropped
        self.passthrough = False
        self.reading = True  # registered with the selector
        self.paused = False
        self.closed = False
        self.eof = False  # the end of the stream was handed to the loop: read no more
        self.waiting = False  # a request is held until the one before it is answered
        self.forwarded = 0  # bytes handed to the loop
        self.consumed = 0  # bytes the loop has read
        self.requests = 0  # requests handed to the loop
        self.answered = 0  # of them, answered (the loop's `Door.answered`)
        self.kinds: deque[int] = deque()  # per request handed on, not answered yet: OTHER...
        self.stream: DoorStream | None = None


class DoorStream(trio.abc.HalfCloseableStream):
    """The loop's side of a connection read by the thread: bytes come from the thread, answers
    go straight to the socket. What hypercorn's `TCPServer` uses of a `trio.SocketStream`."""

    def __init__(self, door: Door, conn: Conn) -> None:
        self._door = door
        self._conn = conn
        self.socket = trio.socket.from_stdlib_socket(conn.sock)
        self._out = trio.SocketStream(self.socket)
        self._chunks: deque[bytes] = deque()
        self._eof = False
        self._closed = False
        self._lot = trio.lowlevel.ParkingLot()
        self._receiving = False

    def _feed(self, data: bytes) -> None:  # run by the loop (run_sync_soon)
        if data:
            self._chunks.append(data)
        else:
            self._eof = True
        self._lot.unpark_all()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        self._receiving = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            while not self._chunks and not self._eof and not self._closed:
                await self._lot.park()
            if self._closed:
                raise trio.ClosedResourceError
            if not self._chunks:
                return b""
            data = self._chunks.popleft()
            if max_bytes is not None and len(data) > max_bytes:
                self._chunks.appendleft(data[max_bytes:])
                data = data[:max_bytes]
            conn = self._conn
            conn.consumed += len(data)
            if conn.paused and conn.forwarded - conn.consumed < _PAUSE_BYTES // 2:
                conn.paused = False
                self._door.command("resume", conn)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        finally:
            self._receiving = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._out.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._out.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._out.send_eof()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._lot.unpark_all()
            trio.lowlevel.notify_closing(self.socket)
            self._door.command("close", self._conn)  # the thread unregisters, then closes
        await trio.lowlevel.checkpoint()


def _deliver(conn: Conn, data: bytes) -> None:  # run by the loop
    if conn.stream is not None:
        conn.stream._feed(data)


class DoorListener(trio.abc.Listener[DoorStream]):
    """`trio.serve_listeners`' listener: the connections the thread accepted."""

    def __init__(self, door: Door) -> None:
        self._door = door
        self._send, self._receive = trio.open_memory_channel[DoorStream](float("inf"))

    def _accepted(self, conn: Conn) -> None:  # run by the loop
        stream = DoorStream(self._door, conn)
        conn.stream = stream
        try:
            self._send.send_nowait(stream)
        except trio.ClosedResourceError:
            self._door.command("close", conn)

    async def accept(self) -> DoorStream:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise trio.ClosedResourceError from None

    async def aclose(self) -> None:
        self._door.command("stop_accepting", None)
        self._send.close()
        while True:
            try:
                stream = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            await stream.aclose()
        self._receive.close()
        await trio.lowlevel.checkpoint()


class Door:
    """The thread, its connections, and what the loop tells it (`command`, `answered`)."""

    def __init__(
        self,
        sock: socket.socket,
        decide: Decide,
        *,
        on_forward: Callable[[], None] = lambda: None,
        on_answer: Callable[[], None] = lambda: None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._listen_sock = sock
        self._decide = decide
        self._on_forward = on_forward  # a start or signal was handed to the loop (thread)
        self._on_answer = on_answer  # ... and is done with: answered (loop), or never served (thread)
        self.max_connections = max_connections
        self.conns: dict[tuple[Any, ...], Conn] = {}  # by the ASGI scope's "client"
        self.refused = 0  # answered by the thread
        self._commands: deque[tuple[str, Conn | None]] = deque()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._accepting = True
        self._listening = False
        self._accept_again: float | None = None  # time.monotonic() after which to accept again
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self.listener = DoorListener(self)

    # ------------------------------------------------------------------ the loop's side

    def start(self) -> None:
        """Start the thread (from the loop)."""
        self._token = trio.lowlevel.current_trio_token()
        self._listen_sock.setblocking(False)
        self._thread = threading.Thread(target=self._main, name="foliot-door", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close what it still holds (from the loop, after the listener
        and every stream are closed)."""
        self.command("stop", None)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def command(self, what: str, conn: Conn | None) -> None:
        self._commands.append((what, conn))
        with suppress(OSError):  # a wake-up is pending already (or the thread is gone)
            self._wake_w.send(b"\0")

    def let_in(self, client: Any) -> bool:
        """Is the request the loop is about to serve for `client` a start or signal the door
        let in after asking the admission? (The loop serves one request of a connection at a
        time, the oldest not answered.)"""
        conn = self.conns.get(client)
        return conn is not None and bool(conn.kinds) and conn.kinds[0] == LET_IN

    def answered(self, client: Any, *, whole: bool = True) -> None:
        """The loop is done with a request of the connection from `client`; `whole`: its
        answer was sent in full (else hypercorn answers it, later: the thread stops framing
        that connection, so that it never answers ahead of hypercorn)."""
        conn = self.conns.get(client)
        if conn is None or not conn.kinds:
            return
        kind = conn.kinds.popleft()
        if not whole:
            conn.passthrough = True
        conn.answered += 1
        if kind != OTHER:
            self._on_answer()
        if conn.waiting:
            self.command("recheck", conn)

    # ------------------------------------------------------------------ the thread

    def _main(self) -> None:
        try:
            self._sel.register(self._wake_r, selectors.EVENT_READ, None)
            self._listen()
            while True:
                wait = None if self._accept_again is None else max(0.0, self._accept_again - time.monotonic())
                for key, _ in self._sel.select(wait):
                    if key.data is None:
                        if not self._commands_done():
                            return
                    elif key.data is self._listen_sock:
                        self._accept()
                    else:
                        self._read(key.data)
                if self._accept_again is not None and time.monotonic() >= self._accept_again:
                    self._accept_again = None
                    self._listen()
        except trio.RunFinishedError:
            pass
        except Exception:
            log.exception("the front door thread failed")
        finally:
            self._shutdown()

    def _listen(self) -> None:
        if (
            self._accepting
            and not self._listening
            and self._accept_again is None
            and len(self.conns) < self.max_connections
        ):
            self._sel.register(self._listen_sock, selectors.EVENT_READ, self._listen_sock)
            self._listening = True

    def _unlisten(self) -> None:
        if self._listening:
            self._sel.unregister(self._listen_sock)
            self._listening = False

    def _commands_done(self) -> bool:
        """Run the loop's commands; False: stop the thread."""
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self._commands:
            what, conn = self._commands.popleft()
            if what == "stop":
                return False
            if what == "stop_accepting":
                self._accepting = False
                self._unlisten()
                self._listen_sock.close()
            elif what == "close" and conn is not None:
                self._close(conn)
            elif what == "resume" and conn is not None and not (conn.closed or conn.reading or conn.eof):
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                conn.reading = True
            elif what == "recheck" and conn is not None and not conn.closed:
                conn.waiting = False
                out = self._frame(conn, b"")
                if out:
                    self._hand(conn, out)
                if not conn.reading and not conn.paused and not conn.eof:
                    self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                    conn.reading = True
        return True

    def _accept(self) -> None:
        for _ in range(64):
            if len(self.conns) >= self.max_connections:
                self._unlisten()
                return
            try:
                sock, peer = self._listen_sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _GONE_BEFORE_ACCEPTED:
                    continue
                # EMFILE and the like: stop for now, the kernel queues
                log.warning("accept failed (accepting again in %.0f ms): %s", ACCEPT_BACKOFF_S * 1000, exc)
                self._unlisten()
                self._accept_again = time.monotonic() + ACCEPT_BACKOFF_S
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(sock, parse_socket_addr(sock.family, peer))
            self.conns[conn.key] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
            assert self._token is not None
            self._token.run_sync_soon(self.listener._accepted, conn)

    def _close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._stop_reading(conn)
        if self.conns.get(conn.key) is conn:
            del self.conns[conn.key]
        # Requests handed on that the loop will never serve (hypercorn closed the connection
        # before reading them): no longer waiting, for the admission's count.
        while conn.kinds:
            if conn.kinds.popleft() != OTHER:
                self._on_answer()
        conn.sock.close()
        self._listen()

    def _stop_reading(self, conn: Conn) -> None:
        if conn.reading:
            self._sel.unregister(conn.sock)
            conn.reading = False

    def _shutdown(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn)
        self._unlisten()
        self._listen_sock.close()
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def _hand(self, conn: Conn, data: bytes) -> None:
        """Hand `data` (b"": end of stream) to the loop's stream of `conn`."""
        conn.forwarded += len(data)
        assert self._token is not None
        # After `_accepted` (run_sync_soon keeps the order): the stream exists by then.
        self._token.run_sync_soon(_deliver, conn, data)

    def _read(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            conn.eof = True
            self._stop_reading(conn)
            self._hand(conn, b"")
            return
        out = self._frame(conn, data)
        if out:
            self._hand(conn, out)
        if conn.forwarded - conn.consumed >= _PAUSE_BYTES and conn.reading:
            conn.paused = True
            self._stop_reading(conn)
            # The loop may have read it all meanwhile, and seen `paused` unset: look again.
            if conn.forwarded - conn.consumed < _PAUSE_BYTES // 2:
                conn.paused = False
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                conn.reading = True

    def _frame(self, conn: Conn, data: bytes) -> bytes:
        """Split what arrived into requests; refuse the ones to refuse; the bytes to hand on.

        A request is looked at only once every request handed on before it on the connection
        has been answered (until then it is held): the thread's answer must not overtake the
        loop's, and hypercorn serves one request of a connection at a time anyway."""
        buf = conn.buf
        buf += data
        if conn.passthrough:
            whole = bytes(buf)
            buf.clear()
            return whole
        out = bytearray()
        while buf:
            if conn.body_left:
                n = min(conn.body_left, len(buf))
                if not conn.skip:
                    out += buf[:n]
                del buf[:n]
                conn.body_left -= n
                continue
            if conn.requests != conn.answered:
                conn.waiting = True  # set before looking again: the loop reads it after counting
                if conn.requests != conn.answered:
                    if len(buf) >= _PAUSE_BYTES:
                        self._stop_reading(conn)  # read again once answered ("recheck")
                    break
                conn.waiting = False
            head = parse_head(buf)
            if head is None:
                break
            if head is False:
                conn.passthrough = True
                out += buf
                buf.clear()
                break
            assert isinstance(head, Head)
            asked = head.adds_work and head.body <= DRAIN_MAX
            refusal = self._decide() if asked else None
            if refusal is not None:
                del buf[: head.size]
                conn.body_left, conn.skip = head.body, True
                if not self._refuse(conn, refusal, keep_alive=head.keep_alive):
                    buf.clear()
                    break
                continue
            conn.requests += 1
            conn.kinds.append(LET_IN if asked else UNASKED if head.adds_work else OTHER)
            if head.adds_work:
                self._on_forward()
            out += buf[: head.size]
            del buf[: head.size]
            conn.body_left, conn.skip = head.body, False
        return bytes(out)

    def _refuse(self, conn: Conn, refusal: tuple[int, int, bytes], *, keep_alive: bool) -> bool:
        """Answer a refused request from the thread; False if the connection ends with it."""
        status, retry_after, body = refusal
        answer = refusal_bytes(status, retry_after, body, keep_alive=keep_alive)
        self.refused += 1
        try:
            sent = conn.sock.send(answer)
        except OSError:
            sent = -1
        if sent == len(answer) and keep_alive:
            return True
        # The caller does not read, or asked to close: the connection ends here; the loop's
        # side sees the end of the stream and closes it.
        with suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)  # the caller sees the end now, not at the loop's close
        conn.eof = True
        self._stop_reading(conn)
        conn.passthrough = True
        self._hand(conn, b"")
        return False


class Answered:
    """ASGI wrapper telling the doors when a request handed on by one has been answered (so
    the thread may answer the connection's next request itself, and the admission knows how
    many of the starts and signals it let in are still being served)."""

    def __init__(self, app: ASGIFramework, doors: list[Door]) -> None:
        self.app = app
        self.doors = doors

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        whole = False

        async def sending(message: Any) -> None:
            nonlocal whole
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                whole = True

        client = scope.get("client")
        token = DOOR_ADMITTED.set(any(door.let_in(client) for door in self.doors))
        try:
            await self.app(scope, receive, sending)
        finally:
            DOOR_ADMITTED.reset(token)
            for door in self.doors:
                door.answered(client, whole=whole)
