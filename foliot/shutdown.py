"""Graceful shutdown: on SIGTERM/SIGINT stop accepting, let the requests under way finish (and
the commits they wait for), stop the engine (commits under way finish, shielded), log what was
drained, and return, all within FOLIOT_SHUTDOWN_GRACE_MS."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Awaitable, Callable

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, Scope
from trio.lowlevel import ParkingLot

from .http.listen import Limits
from .http.listen import serve as hypercorn_serve
from .node import Node

log = logging.getLogger("foliot")

_REFUSED = json.dumps(
    {"error": {"code": "unavailable", "message": "the server is shutting down; retry shortly"}}
).encode()


class InFlight:
    """ASGI wrapper that counts the HTTP requests being answered. Once draining, a new request
    (on a connection kept alive) is refused at once: 503, `Retry-After`, connection closed."""

    def __init__(self, app: ASGIFramework) -> None:
        self.app = app
        self.count = 0
        self.finished = 0
        self.cut = 0
        self.refused = 0
        self.drain_began: float | None = None  # Trio time
        self._idle = ParkingLot()

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.drain_began is not None:
            self.refused += 1
            headers = [
                (b"content-type", b"application/json"),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ]
            await send({"type": "http.response.start", "status": 503, "headers": headers, "trailers": False})
            await send({"type": "http.response.body", "body": _REFUSED, "more_body": False})
            return
        self.count += 1
        try:
            await self.app(scope, receive, send)
            self.finished += 1
        except trio.Cancelled:
            self.cut += 1
            raise
        finally:
            self.count -= 1
            if self.count == 0:
                self._idle.unpark_all()

    async def wait_idle(self) -> None:
        while self.count:
            await self._idle.park()


async def serve_http(
    app: InFlight,
    config: HypercornConfig,
    engine: Node,
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve HTTP until `stop`, then drain: stop accepting, wait (at most the grace) for the
    requests under way, and return. The caller then stops the engine."""
    grace = config.graceful_timeout

    async def stop_accepting() -> None:
        await stop.wait()  # returning makes hypercorn close its listeners

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: _hypercorn(app, config, engine, stop_accepting, task_status)
        )
        task_status.started(binds)
        await stop.wait()
        began = app.drain_began = trio.current_time()
        finished, cut = app.finished, app.cut
        engine.begin_shutdown(began + grace)
        log.info(
            "shutting down: no new requests; %d requests and %d commits under way; grace %.1f s",
            app.count,
            engine.commits_in_flight,
            grace,
        )
        with trio.move_on_at(began + grace):
            await app.wait_idle()
        nursery.cancel_scope.cancel()  # idle kept-alive connections, and any request left
    log.info(
        "shutdown: HTTP drained in %.0f ms: %d requests finished, %d cut off, %d refused",
        (trio.current_time() - began) * 1000,
        app.finished - finished,
        app.cut - cut,
        app.refused,
    )


async def _hypercorn(
    app: InFlight,
    config: HypercornConfig,
    engine: Node,
    trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]],
) -> None:
    s = engine.settings
    limits = Limits(s.max_connections, s.peer_max_connections, s.head_timeout_ms / 1000)
    await hypercorn_serve(app, config, shutdown_trigger=trigger, limits=limits, task_status=task_status)


async def until_signalled(serve: Callable[[trio.Event], Awaitable[None]]) -> None:
    """Run `serve(stop)`; SIGTERM or SIGINT sets `stop` (drain, then return: exit 0), a second
    one stops at once."""
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def on_signal() -> None:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if stop.is_set():
                        log.warning("%s again: stopping without waiting", name)
                        nursery.cancel_scope.cancel()
                        return
                    log.info("%s received: draining", name)
                    stop.set()

            nursery.start_soon(on_signal)
            await serve(stop)
            nursery.cancel_scope.cancel()
