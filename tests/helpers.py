"""Test helpers: a real handler server on an ephemeral port, and an API client."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from foliot import signing
from foliot.http import hot

Answer = tuple[int, dict[str, str], bytes]
Handler = Callable[[dict[str, Any], dict[str, str]], Awaitable[Answer] | Answer]


@contextlib.contextmanager
def quart_only() -> Iterator[None]:
    """For a while the ASGI edge (foliot/http/hot.py) matches no route: every request,
    starts, signals and task answers included, is served by Quart."""
    real = hot._HOT
    hot._HOT = re.compile(r"(?!)")
    try:
        yield
    finally:
        hot._HOT = real


def answer_json(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return status, headers or {}, json.dumps(value).encode()


@attrs.define
class Received:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    raw: bytes


@attrs.define
class HandlerServer:
    """An app's task handler: verifies every push with `foliot.signing`, records it, answers."""

    secrets: list[str] = attrs.Factory(list)
    routes: dict[str, Handler] = attrs.Factory(dict)
    received: list[Received] = attrs.Factory(list)
    bad_signatures: int = 0
    url: str = ""
    arrived: trio.Event = attrs.Factory(trio.Event)
    # Steps whose pushes are never answered: the handler waits until Foliot closes the
    # connection, and records the task token in `disconnected` then.
    held_open: set[str] = attrs.Factory(set)
    disconnected: list[str] = attrs.Factory(list)
    gone: trio.Event = attrs.Factory(trio.Event)

    def route(self, step: str, handler: Handler) -> None:
        self.routes[step] = handler

    def keys(self, step: str | None = None) -> list[str]:
        return [r.body["idempotencyKey"] for r in self.received if step is None or r.body["step"] == step]

    async def wait_for(self, count: int) -> None:
        with trio.fail_after(10):
            while len(self.received) < count:
                self.arrived = trio.Event()
                await self.arrived.wait()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        raw = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the sender went away mid-body (a killed server): nothing was delivered
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            signing.verify_signature(raw, headers.get("foliot-signature"), self.secrets)
        except signing.SignatureError:
            self.bad_signatures += 1
            await _respond(send, 401, {}, b'{"error":{"class":"bad_signature","retryable":false}}')
            return
        body = json.loads(raw)
        self.received.append(Received(scope["path"], body, headers, raw))
        self.arrived.set()
        if body["step"] in self.held_open:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.disconnected.append(body["taskToken"])
            self.gone.set()
            return
        handler = self.routes.get(body["step"])
        if handler is None:
            status, extra, out = 200, {}, b"null"
        else:
            result = handler(body, headers)
            if not isinstance(result, tuple):
                result = await result
            status, extra, out = result
        await _respond(send, status, extra, out)


async def _respond(send: Any, status: int, headers: dict[str, str], body: bytes) -> None:
    hdrs = [(b"content-type", b"application/json")] + [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


async def start_handler(nursery: trio.Nursery, handler: HandlerServer) -> HandlerServer:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    binds = await nursery.start(serve, handler, config)
    handler.url = binds[0]
    return handler


async def advance(seconds: float) -> None:
    """Let virtual time pass: the caller runs under `trio.testing.MockClock`, so nothing waits
    on the wall clock."""
    await trio.sleep_until(trio.current_time() + seconds)
