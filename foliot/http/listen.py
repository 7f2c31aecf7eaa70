"""Serving HTTP: hypercorn's Trio worker, with Foliot's own accept loop and connections.

Hypercorn (0.18, its Trio worker) parses HTTP/1.1 and runs the ASGI app; this module owns the
rest of the socket's life, wired explicitly (no hypercorn class is replaced process-wide):

- `BurstListener` takes every connection waiting in the kernel (up to `burst`) when the first
  one is accepted. Trio's `SocketListener.accept` takes one per pass of the scheduler, and
  above capacity a pass takes tens of milliseconds: callers whose pools open connections when
  answers slow down waited in the kernel's accept queue (then in SYN retries of one, then
  three seconds), where no admission can refuse them.
- `EdgeTCPServer` is hypercorn's `TCPServer` for one plain (non-TLS) connection with:
  the protocol `conn.JsonErrorH11Protocol` (HTTP-level refusals in the API's error shape,
  written in one send); every write and `send_eof` serialised by one lock, and a write that
  fails or stalls past `SEND_TIMEOUT_S` treated as a closed connection (hypercorn let a
  second writer collide with `send_eof`: `trio.BusyResourceError` ended the process); the
  connection closed as soon as the client has closed its side and nothing is being answered
  (hypercorn waited for the keep-alive timer: 75 s per closed socket); a head timeout (from
  the first byte of a request head to its end, `Limits.head_timeout_s`) besides the
  keep-alive timeout; and its place in `Connections`.
- `Connections` bounds open connections per peer address and in all: a new connection past a
  bound closes the oldest idle connection (no request under way) of that peer, or in all of
  the peer holding the most; only when none is idle is the new one closed at once.

`serve` is hypercorn's `worker_serve` with these (plain HTTP sockets: Foliot serves no TLS
itself; terminate it in front); lifespan and shutdown are hypercorn's own.
`tests/unit/test_listen.py` pins the hypercorn internals this relies on.
"""

from __future__ import annotations

import contextlib
import resource
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from math import inf
from typing import Any

import attrs
import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ASGIFramework, ConnectionState, LifespanState
from hypercorn.utils import ShutdownError, parse_socket_addr, raise_shutdown, repr_socket_addr

from .conn import JsonErrorH11Protocol

BURST = 64  # connections taken from the kernel at once
SEND_TIMEOUT_S = 30.0  # one write of an answer; a client that reads nothing is cut off after it
_RESERVED_FDS = 256  # descriptors left to the store, the push client and the logs (`auto_max`)


class BurstListener(trio.abc.Listener[trio.SocketStream]):
    """A listening socket whose `accept` takes all waiting connections at once (up to
    `burst`); the ones not returned yet are handed out by the next calls without a checkpoint."""

    def __init__(self, sock: Any, burst: int = BURST) -> None:
        self._sock = sock
        self._listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        self._ready: deque[trio.SocketStream] = deque()
        self._burst = burst

    async def accept(self) -> trio.SocketStream:
        if self._ready:
            return self._ready.popleft()
        stream = await self._listener.accept()
        for _ in range(self._burst - 1):
            try:
                conn, _addr = self._sock.accept()  # non-blocking: trio set the socket so
            except OSError:  # none left (EAGAIN), or an error the next `accept` reports
                break
            self._ready.append(trio.SocketStream(trio.socket.from_stdlib_socket(conn)))
        return stream

    async def aclose(self) -> None:
        while self._ready:
            await self._ready.popleft().aclose()
        await self._listener.aclose()


def auto_max() -> int:
    """Open connections in all when `FOLIOT_MAX_CONNECTIONS` is 0: the process's descriptor
    limit (soft `RLIMIT_NOFILE`) less a reserve, at least 64."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(64, soft - _RESERVED_FDS)


@attrs.frozen
class Limits:
    """The connection bounds (`FOLIOT_MAX_CONNECTIONS`, `FOLIOT_PEER_MAX_CONNECTIONS`,
    `FOLIOT_HEAD_TIMEOUT_MS`); 0 connections: no bound."""

    max_connections: int = 0
    peer_max_connections: int = 0
    head_timeout_s: float = 10.0


class Connections:
    """The open connections, by peer address; each is idle (no request under way: waiting for
    its next request, or for the rest of a head) or busy. Idle ones are kept in the order they
    became idle, so the oldest is the first to close when a bound is reached."""

    def __init__(self, max_total: int, per_peer: int) -> None:
        self.max_total = max_total or inf
        self.per_peer = per_peer or inf
        self.total = 0
        self.evicted = 0  # idle connections closed to make room
        self.refused = 0  # new connections closed at once (every one of theirs busy)
        self._count: dict[str, int] = {}
        self._idle: dict[str, dict[EdgeTCPServer, None]] = {}
        self._open: set[EdgeTCPServer] = set()

    def open(self, conn: EdgeTCPServer) -> bool:
        """Count a new connection in (and idle); False: it is over a bound and must close."""
        peer = conn.peer
        if self._count.get(peer, 0) >= self.per_peer and not self._evict(peer):
            self.refused += 1
            return False
        if self.total >= self.max_total and not self._evict(self._busiest()):
            self.refused += 1
            return False
        self._open.add(conn)
        self.total += 1
        self._count[peer] = self._count.get(peer, 0) + 1
        self._idle.setdefault(peer, {})[conn] = None
        return True

    def idle(self, conn: EdgeTCPServer) -> None:
        if conn in self._open:
            self._idle.setdefault(conn.peer, {})[conn] = None

    def busy(self, conn: EdgeTCPServer) -> None:
        idle = self._idle.get(conn.peer)
        if idle is not None:
            idle.pop(conn, None)

    def close(self, conn: EdgeTCPServer) -> None:
        if conn not in self._open:
            return
        self._open.discard(conn)
        self.total -= 1
        peer = conn.peer
        self._count[peer] -= 1
        self.busy(conn)
        if not self._count[peer]:
            del self._count[peer]
            self._idle.pop(peer, None)

    def count(self, peer: str) -> int:
        return self._count.get(peer, 0)

    def _busiest(self) -> str:
        """The peer holding the most connections, among those with one idle."""
        idle = [peer for peer, conns in self._idle.items() if conns]
        return max(idle, key=lambda peer: self._count[peer], default="")

    def _evict(self, peer: str) -> bool:
        idle = self._idle.get(peer)
        if not idle:
            return False
        oldest = next(iter(idle))
        self.close(oldest)
        self.evicted += 1
        oldest.evict()
        return True


class EdgeProtocolWrapper(ProtocolWrapper):
    """Hypercorn's protocol switch, speaking HTTP/1 with `JsonErrorH11Protocol` (h2c and
    prior-knowledge HTTP/2 switch to hypercorn's `H2Protocol` as before)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if not isinstance(self.protocol, JsonErrorH11Protocol) and args[-1] != "h2":
            app, config, context, task_group, state, ssl, client, server, send = args[:9]
            self.protocol = JsonErrorH11Protocol(
                app, config, context, task_group, state, ssl, client, server, send
            )


class EdgeTCPServer(TCPServer):
    """One connection (see the module's words)."""

    def __init__(
        self,
        app: AppWrapper,
        config: Config,
        context: WorkerContext,
        state: LifespanState,
        connections: Connections,
        limits: Limits,
        stream: trio.SocketStream,
    ) -> None:
        super().__init__(app, config, context, state, stream)  # type: ignore[arg-type]
        self.socket_stream = stream
        self.connections = connections
        self.head_timeout_s = limits.head_timeout_s
        self.peer = ""
        self._out_closed = False  # `send_eof` done (or the stream closed): nothing more goes out
        self._in_request = False
        self._read_done = False  # the client closed its side (or reading failed)
        self._evicted = False
        self._head_due = False  # the head timer is armed for the request being received
        self._idle_scope: trio.CancelScope | None = None  # the idle timer's deadline
        self._idle_handle: trio.CancelScope | None = None  # the idle task's own scope (to stop it)

    async def run(self) -> None:
        sock = self.socket_stream.socket
        try:
            client = parse_socket_addr(sock.family, sock.getpeername())
            server = parse_socket_addr(sock.family, sock.getsockname())
        except OSError:
            await self._close()
            return
        self.peer = str(client[0]) if client else ""
        if not self.connections.open(self):
            await self._close()
            return
        try:
            async with TaskGroup() as task_group:
                self._task_group = task_group
                self.protocol = EdgeProtocolWrapper(
                    self.app,
                    self.config,
                    self.context,
                    task_group,
                    ConnectionState(self.state),
                    False,
                    client,
                    server,
                    self.protocol_send,
                    "http/1.1",
                )
                await self.protocol.initiate()
                self._restart_idle()
                await self._read_data()
                # The client closed its side: no request can come; close once the one under
                # way (if any) is answered, not when the keep-alive timer runs out.
                self._read_done = True
                if not self._in_request:
                    self._stop_idle()
        except OSError:
            pass
        finally:
            self.connections.close(self)
            await self._close()

    def evict(self) -> None:
        """Close this idle connection (to make room for a new one)."""
        self._evicted = True
        if self._idle_scope is not None:
            self._idle_scope.cancel()

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            if not event.data and not self._out_closed:
                # Nothing to write (h11's end of a Content-Length body, once per response): no
                # lock, scopes or checkpoint; a closed stream is found by the next write or read.
                return
            failed = False
            async with self.send_lock:
                if self._out_closed:
                    failed = True
                else:
                    with trio.CancelScope(shield=True), trio.move_on_after(SEND_TIMEOUT_S) as timer:
                        try:
                            await self.stream.send_all(event.data)
                        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                            failed = True
                    failed = failed or timer.cancelled_caught
            if failed:  # the client is gone (or reads nothing): the connection is over
                await self._close()
                await self.protocol.handle(Closed())
        elif isinstance(event, Closed):
            await self._close()
            await self.protocol.handle(Closed())
        elif isinstance(event, Updated):
            if event.idle:
                self._in_request = False
                self.connections.idle(self)
                if self._read_done or self._evicted:
                    await self._close()
                    await self.protocol.handle(Closed())
                    return
                self._restart_idle()
                if self._trailing():  # part of a pipelined head arrived with the last request
                    self._arm_head()
            else:
                self._in_request = True
                self.connections.busy(self)
                self._stop_idle()

    def _trailing(self) -> bool:
        connection = getattr(self.protocol.protocol, "connection", None)
        trailing = getattr(connection, "trailing_data", (b"", False))
        return bool(trailing[0])

    def _arm_head(self) -> None:
        """Bytes of a request head came in: the rest must come within the head timeout."""
        if self._head_due or self._idle_scope is None:
            return
        self._head_due = True
        self._idle_scope.deadline = min(self._idle_scope.deadline, trio.current_time() + self.head_timeout_s)

    async def _read_data(self) -> None:
        while True:
            try:
                with trio.fail_after(self.config.read_timeout or inf):
                    data = await self.stream.receive_some(MAX_RECV)
            except (trio.ClosedResourceError, trio.BrokenResourceError, trio.TooSlowError):
                break
            if data and not self._in_request:
                self._arm_head()
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
        await self.protocol.handle(Closed())

    async def _close(self) -> None:
        with trio.CancelScope(shield=True):
            async with self.send_lock:  # never while a write is under way (no BusyResourceError)
                if not self._out_closed:
                    self._out_closed = True
                    gone = (
                        trio.BrokenResourceError,
                        trio.BusyResourceError,
                        trio.ClosedResourceError,
                        OSError,
                    )
                    with contextlib.suppress(*gone):  # they are gone already
                        await self.stream.send_eof()
            await self.stream.aclose()

    def _restart_idle(self) -> None:
        """Arm the idle timer (the keep-alive timeout) for the wait for the next request, in
        place of hypercorn's `idle_task.restart`: the task is spawned with its scopes made here,
        at once, where `TrioSingleTask` took a lock and waited in `nursery.start` for the task
        to begin (two scheduler passes and a lock per request, ~7 % of a signal's CPU)."""
        self._stop_idle()
        handle = trio.CancelScope()
        timer = trio.CancelScope(deadline=trio.current_time() + self.config.keep_alive_timeout)
        self._idle_handle, self._idle_scope, self._head_due = handle, timer, False
        if self._evicted:
            timer.cancel()
        nursery = self._task_group._nursery
        assert nursery is not None  # inside `run`'s task group
        nursery.start_soon(self._idle_wait, handle, timer)

    def _stop_idle(self) -> None:
        """A request began (or no request can come): the idle timer is off."""
        if self._idle_handle is not None:
            self._idle_handle.cancel()
        self._idle_handle = self._idle_scope = None

    async def _idle_wait(self, handle: trio.CancelScope, timer: trio.CancelScope) -> None:
        """Waiting for a request: close after the keep-alive timeout, the head timeout once a
        head has begun, or at once when evicted (`timer` ends); `handle` cancelled: stopped."""
        with handle:
            with timer:
                await self.context.terminated.wait()
            if self._idle_scope is timer:
                self._idle_scope = None
            with trio.CancelScope(shield=True):
                await self._initiate_server_close()

    async def _initiate_server_close(self) -> None:
        await self._close()
        await self.protocol.handle(Closed())


async def serve(
    app: ASGIFramework,
    config: Config,
    *,
    shutdown_trigger: Callable[..., Awaitable[None]],
    limits: Limits = Limits(),
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`hypercorn.trio.serve(app, config, shutdown_trigger=...)` for plain HTTP binds, with
    connections accepted by `BurstListener` and served by `EdgeTCPServer` within `limits`."""
    config.set_statsd_logger_class(StatsdLogger)
    wrapped: AppWrapper = ASGIWrapper(app)
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)
    connections = Connections(limits.max_connections or auto_max(), limits.peer_max_connections)

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        await _serve(
            wrapped, config, context, lifespan_state, shutdown_trigger, connections, limits, task_status
        )
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


async def _serve(
    wrapped: AppWrapper,
    config: Config,
    context: WorkerContext,
    lifespan_state: LifespanState,
    shutdown_trigger: Callable[..., Awaitable[None]],
    connections: Connections,
    limits: Limits,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    async with trio.open_nursery() as server_nursery:
        sockets = config.create_sockets()
        if sockets.secure_sockets or sockets.quic_sockets:
            raise ValueError("Foliot serves plain HTTP; terminate TLS in front of it")
        listeners: list[trio.abc.Listener[Any]] = []
        binds = []
        for sock in sockets.insecure_sockets:
            sock.listen(config.backlog)
            listeners.append(BurstListener(sock))
            bind = repr_socket_addr(sock.family, sock.getsockname())
            binds.append(f"http://{bind}")
            await config.log.info(f"Running on http://{bind} (CTRL + C to quit)")

        task_status.started(binds)
        try:
            async with trio.open_nursery(strict_exception_groups=True) as nursery:
                nursery.start_soon(raise_shutdown, shutdown_trigger)
                nursery.start_soon(raise_shutdown, context.terminate.wait)
                handler = partial(
                    EdgeTCPServer,
                    wrapped,
                    config,
                    context,
                    ConnectionState(lifespan_state.copy()),
                    connections,
                    limits,
                )
                nursery.start_soon(
                    partial(trio.serve_listeners, handler, listeners, handler_nursery=server_nursery)
                )
                await trio.sleep_forever()
        except BaseExceptionGroup as error:
            _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
            if other_errors is not None:
                raise other_errors from None
        finally:
            await context.terminated.set()
            server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
