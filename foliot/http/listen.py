"""Serving HTTP: hypercorn's Trio worker, accepting new connections in bursts.

Trio's `SocketListener.accept` takes one connection per pass of the scheduler (each accept is
a checkpoint), and `trio.serve_listeners` calls it in a loop. Above capacity each pass runs
every ready task, so a pass takes tens of milliseconds and new connections are taken at a few
tens per second: callers whose pools open connections when answers slow down wait in the
kernel's accept queue (and, once its backlog is full, in SYN retries of one, then three
seconds), where no admission can refuse them. Measured from outside with an open-loop client
at twice the capacity: the accept queue stayed at its backlog of 100 and refusals took 20 s.

`BurstListener` takes every connection waiting in the kernel (up to `burst`) when the first
one is accepted, and hands the rest out without going back to the scheduler. `serve` is
hypercorn's `worker_serve` (hypercorn 0.18, plain HTTP sockets: Foliot serves no TLS itself;
terminate it in front) with that listener; the connection handling (`TCPServer`), lifespan
and shutdown are hypercorn's own.

With an admission (`foliot serve`, unless `FOLIOT_FRONT_DOOR=0`), connections are accepted
and read by the front door's thread instead (`foliot/http/door.py`), which refuses shed starts
and signals without waiting for the event loop; hypercorn serves the rest as before.
"""

from __future__ import annotations

import socket
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ASGIFramework, ConnectionState, LifespanState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr

from ..actors.admission import Admission
from .door import Answered, Door

BURST = 64  # connections taken from the kernel at once
SWITCH_INTERVAL_S = 0.001  # the interpreter's thread switch interval while a front door runs


class BurstListener(trio.abc.Listener[trio.SocketStream]):
    """A listening socket whose `accept` takes all waiting connections at once (up to
    `burst`); the ones not returned yet are handed out by the next calls without a checkpoint."""

    def __init__(self, sock: socket.socket, burst: int = BURST) -> None:
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


def front_door(sock: socket.socket, admission: Admission) -> Door:
    """A started front door on `sock` whose thread asks `admission` (on the loop's clock)."""
    clock = trio.lowlevel.current_clock()
    door = Door(
        sock,
        lambda: admission.door_refusal(clock.current_time()),
        on_forward=admission.door_forward,
        on_answer=admission.door_answer,
    )
    # The door's thread gives up the GIL at every socket call, and the event loop, busy above
    # capacity, takes it back until the interpreter forces a switch: each of the door's calls
    # then waits a whole switch interval (5 ms by default; seconds of queueing at hundreds of
    # requests per second). 1 ms bounds that wait; the loop's own work is unchanged.
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
    door.start()
    return door


async def serve(
    app: ASGIFramework,
    config: Config,
    *,
    shutdown_trigger: Callable[..., Awaitable[None]],
    admission: Admission | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """`hypercorn.trio.serve(app, config, shutdown_trigger=...)` for plain HTTP binds, with
    connections accepted by `BurstListener`, or by a front door (`door.Door`) asking
    `admission` when one is given."""
    config.set_statsd_logger_class(StatsdLogger)
    doors: list[Door] = []
    if admission is not None:
        app = Answered(app, doors)
    wrapped: AppWrapper = ASGIWrapper(app)
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    context = WorkerContext(None)

    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()

        switch = sys.getswitchinterval()
        try:
            await _serve(
                wrapped, config, context, lifespan_state, shutdown_trigger, doors, admission, task_status
            )
        finally:
            for door in doors:  # every connection is closed by now
                door.stop()
            sys.setswitchinterval(switch)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


async def _serve(
    wrapped: AppWrapper,
    config: Config,
    context: WorkerContext,
    lifespan_state: LifespanState,
    shutdown_trigger: Callable[..., Awaitable[None]],
    doors: list[Door],
    admission: Admission | None,
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
            if admission is not None:
                door = front_door(sock, admission)
                doors.append(door)
                listeners.append(door.listener)
            else:
                listeners.append(BurstListener(sock))
            bind = repr_socket_addr(sock.family, sock.getsockname())
            binds.append(f"http://{bind}")
            await config.log.info(f"Running on http://{bind} (CTRL + C to quit)")

        task_status.started(binds)
        try:
            async with trio.open_nursery(strict_exception_groups=True) as nursery:
                nursery.start_soon(raise_shutdown, shutdown_trigger)
                nursery.start_soon(raise_shutdown, context.terminate.wait)
                handler = partial(TCPServer, wrapped, config, context, ConnectionState(lifespan_state.copy()))
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
