"""A TCP proxy of our own, on Trio, between a node and PostgreSQL (or between nodes), that the
test steers while traffic flows through it.

`Proxy(target)` listens on a free loopback port and relays every connection to `target`.
Faults, each undone by `heal()`:

- `latency(s)`: every chunk is held `s` seconds before it is passed on (in order);
- `block(direction)`: stop forwarding `"up"` (client to server), `"down"` (server to client)
  or `"both"`: the bytes wait (the proxy stops reading, so TCP's own buffers fill and the
  sender blocks) and flow again on `heal()`, as a network partition that TCP outlives does;
  new connections are accepted but stay silent too;
- `reset()`: every open connection is aborted with a RST (SO_LINGER 0), both sides;
- `refuse(True)`: new connections are reset as soon as they are accepted.

A `Proxy` may also be told which connections a fault applies to, by the first bytes the
client sent (`only=lambda head: ...`): a node's forwarded requests name it in their hop header
(`Foliot-Hop: <nodeId>;…`), so one peer's traffic can be cut while another's flows.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable

import attrs
import trio

CHUNK = 65536
HEAD_MAX = 16384  # bytes of a connection's start kept for `only` to judge

Direction = str  # "up" | "down"


@attrs.define(eq=False)
class Link:
    """One relayed connection."""

    client: trio.SocketStream
    server: trio.SocketStream | None = None
    head: bytes = b""  # the first bytes the client sent (up to HEAD_MAX)
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


def _abort(stream: trio.SocketStream | None) -> None:
    """Close with a RST rather than a FIN (SO_LINGER on, zero)."""
    if stream is None:
        return
    with contextlib.suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


@attrs.define(eq=False)
class Proxy:
    target_host: str
    target_port: int
    port: int = 0
    delay_s: float = 0.0
    blocked: set[Direction] = attrs.Factory(set)
    refusing: bool = False
    only: Callable[[bytes], bool] | None = None  # which connections blocks/resets apply to
    links: set[Link] = attrs.Factory(set)
    accepted: int = 0
    resets: int = 0
    _changed: trio.Event = attrs.Factory(trio.Event)
    _listener: trio.SocketListener | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def run(self, *, task_status: trio.TaskStatus[Proxy] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self._listener = listeners[0]
        self.port = self._listener.socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            while True:
                stream = await self._listener.accept()
                self.accepted += 1
                if self.refusing:
                    _abort(stream)
                    self.resets += 1
                    continue
                link = Link(stream)
                self.links.add(link)
                nursery.start_soon(self._serve, link)

    # ------------------------------------------------------------------ steering

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def latency(self, seconds: float) -> None:
        self.delay_s = seconds
        self._poke()

    def block(self, direction: str = "both", only: Callable[[bytes], bool] | None = None) -> None:
        self.blocked |= {"up", "down"} if direction == "both" else {direction}
        self.only = only
        self._poke()

    def refuse(self, on: bool = True) -> None:
        self.refusing = on

    def reset(self, only: Callable[[bytes], bool] | None = None) -> int:
        """Abort the open connections (those `only` picks, else all); returns how many."""
        hit = [link for link in self.links if only is None or only(link.head)]
        for link in hit:
            _abort(link.client)
            _abort(link.server)
            link.scope.cancel()
            self.links.discard(link)
        self.resets += len(hit)
        return len(hit)

    def heal(self) -> None:
        self.delay_s = 0.0
        self.blocked.clear()
        self.refusing = False
        self.only = None
        self._poke()

    # ------------------------------------------------------------------ relaying

    def _held(self, link: Link, direction: Direction) -> bool:
        return direction in self.blocked and (self.only is None or self.only(link.head))

    async def _gate(self, link: Link, direction: Direction) -> None:
        while self._held(link, direction):
            await self._changed.wait()

    async def _serve(self, link: Link) -> None:
        try:
            with link.scope:
                # The first bytes decide `only`; the upstream connection is opened after them
                # (a client that speaks first, as HTTP and PostgreSQL's startup do), or at once
                # when nothing is filtered.
                if self.only is not None or self.blocked:
                    await self._gate(link, "up")
                try:
                    link.server = await trio.open_tcp_stream(self.target_host, self.target_port)
                except OSError:
                    _abort(link.client)
                    return
                async with trio.open_nursery() as pipes:
                    pipes.start_soon(self._pipe, link, link.client, link.server, "up")
                    pipes.start_soon(self._pipe, link, link.server, link.client, "down")
        finally:
            self.links.discard(link)
            for stream in (link.client, link.server):
                if stream is not None:
                    stream.socket.close()

    async def _pipe(
        self, link: Link, source: trio.SocketStream, sink: trio.SocketStream, direction: Direction
    ) -> None:
        try:
            while True:
                await self._gate(link, direction)
                data = await source.receive_some(CHUNK)
                if direction == "up" and len(link.head) < HEAD_MAX:
                    link.head += data[: HEAD_MAX - len(link.head)]
                if not data:
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        await sink.send_eof()
                    return
                if self.delay_s:
                    await trio.sleep(self.delay_s)
                await self._gate(link, direction)  # a partition that began while it was read
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            link.scope.cancel()


def hop_from(node_id: str) -> Callable[[bytes], bool]:
    """`only` for the connections a node opened to forward requests (its hop header names it)."""
    marker = f"foliot-hop: {node_id};".encode()

    def picks(head: bytes) -> bool:
        return marker in head.lower()

    return picks
