"""A lean HTTP/1.1 client for task pushes: keep-alive connections per origin, h11 framing.

A push is one POST of a body Foliot already serialised, answered by a status, a few headers
and a bounded body. httpx spent 2-4 ms of CPU per push on that (request and response models,
pool bookkeeping that rescans every connection, headers and body written separately): a third
of a signal's cost on the push path (bench/README.md). Here a request is one `send_all`, the
answer is parsed by h11 (the parser hypercorn uses), and a connection goes back to its origin's
idle list when both sides finished the exchange cleanly.

A connection the server closed while idle is noticed before reuse (readable while idle means
EOF or garbage) and dropped; a reused connection that fails before any byte of the answer
arrived is retried once on a fresh one (delivery is at-least-once; the idempotency key is
unchanged). Nothing waits for a connection: each sender holds at most one at a time, and a new
one is opened when none is idle. Redirects are not followed (a 3xx is the answer).
"""

from __future__ import annotations

import ssl
from collections import deque
from typing import Protocol
from urllib.parse import urlsplit

import attrs
import h11
import httpx
import trio

_IDLE_MAX_S = 30.0  # an idle connection older than this is closed rather than reused
_READ = 65_536

Origin = tuple[str, str, int]


class PushError(Exception):
    """The request could not be sent or its answer not read (connection refused, reset, closed
    early, malformed answer): a `connection_error` for the attempt."""


class _Stale(Exception):
    """A reused connection failed before any byte of the answer came back."""


@attrs.frozen
class Answer:
    status: int
    body: bytes | None  # None: the body passed the size limit (the connection is dropped)
    next_step: str | None
    function_error: str | None = None  # `X-Amz-Function-Error` (an SWF Lambda function's answer)


@attrs.define(eq=False)
class _Conn:
    stream: trio.abc.Stream
    socket: trio.socket.SocketType
    h11: h11.Connection
    idle_since: float = 0.0


def split_url(url: str) -> tuple[Origin, str]:
    """`(scheme, host, port)` and the request target (path and query) of an absolute URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise PushError(f"not an http(s) URL: {url[:200]!r}")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise PushError(f"bad port in {url[:200]!r}") from exc
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (scheme, parts.hostname, port), target


class Poster(Protocol):
    """What sends one push: `PushClient`, or a simulated network (tests/sim) standing in for
    the handlers. `post` answers as `PushClient.post` does (`PushError` when nothing came back)."""

    async def post(self, url: str, body: bytes, headers: dict[str, str], max_body: int) -> Answer: ...


class PushClient:
    def __init__(self, *, max_idle_per_origin: int = 64, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[Origin, deque[_Conn]] = {}
        self._max_idle = max(1, max_idle_per_origin)
        self._ssl = ssl_context
        self._open: set[_Conn] = set()
        self.connections_opened = 0

    async def aclose(self) -> None:
        conns, self._open = self._open, set()
        self._idle.clear()
        for conn in conns:
            await trio.aclose_forcefully(conn.stream)

    async def post(self, url: str, body: bytes, headers: dict[str, str], max_body: int) -> Answer:
        origin, target = split_url(url)
        scheme, host, port = origin
        default_port = 443 if scheme == "https" else 80
        host_header = host if port == default_port else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            host_header = f"[{host}]" if port == default_port else f"[{host}]:{port}"
        fields = [("host", host_header), ("content-length", str(len(body))), *headers.items()]
        for _ in range(2):
            conn = self._take(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin)
            try:
                answer, keep = await self._exchange(conn, target, fields, body, max_body, reused)
            except _Stale:
                await self._drop(conn)
                continue  # the server had closed it while idle: once more on a fresh one
            except BaseException:
                await self._drop(conn)
                raise
            if keep:
                self._give_back(origin, conn)
            else:
                await self._drop(conn)
            return answer
        raise PushError("the server closed the connection before answering")

    # ------------------------------------------------------------------ connections

    def _take(self, origin: Origin) -> _Conn | None:
        idle = self._idle.get(origin)
        now = trio.current_time()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have timed out
            # Readable while idle: the server closed it (EOF) or sent something unasked for.
            if now - conn.idle_since > _IDLE_MAX_S or conn.socket.is_readable():
                self._open.discard(conn)
                conn.socket.close()
                continue
            return conn
        return None

    def _give_back(self, origin: Origin, conn: _Conn) -> None:
        conn.h11.start_next_cycle()
        conn.idle_since = trio.current_time()
        idle = self._idle.setdefault(origin, deque())
        idle.append(conn)
        while len(idle) > self._max_idle:
            old = idle.popleft()
            self._open.discard(old)
            old.socket.close()

    async def _connect(self, origin: Origin) -> _Conn:
        scheme, host, port = origin
        try:
            tcp = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise PushError(f"ConnectError: {exc}") from exc
        stream: trio.abc.Stream = tcp
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = trio.SSLStream(tcp, self._ssl, server_hostname=host, https_compatible=True)
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                await trio.aclose_forcefully(tcp)
                raise PushError(f"ConnectError: TLS: {exc}") from exc
            stream = tls
        conn = _Conn(stream, tcp.socket, h11.Connection(h11.CLIENT))
        self._open.add(conn)
        self.connections_opened += 1
        return conn

    async def _drop(self, conn: _Conn) -> None:
        self._open.discard(conn)
        await trio.aclose_forcefully(conn.stream)

    # ------------------------------------------------------------------ one exchange

    async def _exchange(
        self,
        conn: _Conn,
        target: str,
        fields: list[tuple[str, str]],
        body: bytes,
        max_body: int,
        reused: bool,
    ) -> tuple[Answer, bool]:
        """Send the request, read the answer; (answer, whether the connection can be reused)."""
        h = conn.h11
        got_bytes = False
        try:
            request = h.send(h11.Request(method="POST", target=target, headers=fields)) or b""
            request += (h.send(h11.Data(data=body)) or b"") + (h.send(h11.EndOfMessage()) or b"")
            await conn.stream.send_all(request)
            status = 0
            next_step: str | None = None
            function_error: str | None = None
            chunks: list[bytes] = []
            size = 0
            while True:
                event = h.next_event()
                if event is h11.NEED_DATA:
                    data = await conn.stream.receive_some(_READ)
                    if not data and not status:
                        if not got_bytes and reused:
                            raise _Stale
                        raise PushError("the server closed the connection before answering")
                    got_bytes = got_bytes or bool(data)
                    h.receive_data(bytes(data))
                elif isinstance(event, h11.InformationalResponse):
                    continue
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    for name, value in event.headers:
                        if name == b"foliot-next":  # repeated lines combine (RFC 9110 5.3)
                            text = value.decode("latin-1")
                            next_step = text if next_step is None else f"{next_step}, {text}"
                        elif name == b"x-amz-function-error":
                            function_error = value.decode("latin-1")
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > max_body:
                        return Answer(status, None, next_step, function_error), False
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    keep = h.our_state is h11.DONE and h.their_state is h11.DONE
                    return Answer(status, b"".join(chunks), next_step, function_error), keep
                else:  # ConnectionClosed before the answer ended
                    raise PushError("the server closed the connection mid-answer")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            if reused and not got_bytes:
                raise _Stale from exc
            raise PushError(f"{type(exc).__name__}: {exc}") from exc
        except h11.ProtocolError as exc:
            if reused and not got_bytes:
                raise _Stale from exc
            raise PushError(f"RemoteProtocolError: {exc}") from exc


async def post(
    client: Poster | httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], max_body: int
) -> Answer:
    """One POST through Foliot's client (or an httpx client, as tests pass, or any `Poster`): the
    answer, its body read up to `max_body` (None past it). `PushError` when it could not be sent
    or read."""
    if not isinstance(client, httpx.AsyncClient):
        return await client.post(url, body, headers, max_body)
    try:
        async with client.stream("POST", url, content=body, headers=headers, timeout=None) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_body:
                    return Answer(response.status_code, None, response.headers.get("foliot-next"))
                chunks.append(chunk)
            return Answer(
                response.status_code,
                b"".join(chunks),
                response.headers.get("foliot-next"),
                response.headers.get("x-amz-function-error"),
            )
    except httpx.TransportError as exc:
        raise PushError(f"{type(exc).__name__}: {exc}") from exc
