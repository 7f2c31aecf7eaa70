"""The hottest calls, `POST /apps/{app}/runs`, `POST /apps/{app}/signals` and the task answers
(`POST /apps/{app}/tasks/{token}/complete` and `/heartbeat`), served at the ASGI edge without
Quart's request and response machinery.

Quart builds a request object, a request context, runs routing, hooks and an after-request
pass, then a response object, for every call: on a start that is about a third of the CPU the
whole request costs (bench/README.md). Here a plain request (one `Content-Length`, no query
string, no `Expect`, no NUL in the path) goes straight to the same route functions the Quart
routes call (`runs.start_run_call`, `signals.signal_call`, `tasks.complete_call`,
`tasks.heartbeat_call`): the same admission, authentication,
body limits, validation, idempotency and error shapes, in the same order. Anything else falls
through to Quart unchanged, which answers it as before.

What Quart's hooks do for these routes is done here the same way: the body-size check from
`Content-Length` (413), the media type (415), the body read within `BODY_TIMEOUT` (408), the
error mapping (`Refused`, storage unavailable as 503, anything else 500 and logged), and an
error answered before the body was read leaves the connection in step (a small body is read,
a large one closes the connection).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope
from werkzeug.exceptions import RequestTimeout

from ..actors.placement import Elsewhere
from ..core.errors import Internal, PayloadTooLarge, Refused, StorageUnavailable, storage_refusal
from .app import BODY_TIMEOUT_S, Call, is_json_media_type
from .errors import Answer, UnsupportedMediaType, headers_of, status_of
from .forward import Incoming, relay
from .runs import start_run_call
from .services import Services
from .signals import signal_call
from .tasks import complete_call, heartbeat_call

log = logging.getLogger("foliot.http")

_HOT = re.compile(r"^/apps/([^/]+)/(?:(runs|signals)|tasks/([^/]+)/(complete|heartbeat))/?$")
Route = Callable[..., Awaitable[tuple[dict[str, Any], int]]]


class Disconnected(Exception):
    """The client went away before its body was read."""


class Hot:
    """ASGI wrapper: plain starts, signals and task answers are served here, everything else
    by `app`."""

    def __init__(self, app: ASGIFramework, engine: Services, admin_token: str) -> None:
        self.app = app
        self.engine = engine
        self.admin_token = admin_token
        self.body_max = engine.settings.body_max_bytes
        self.routes: dict[str, Route] = {
            "runs": start_run_call,
            "signals": signal_call,
            "complete": complete_call,
            "heartbeat": heartbeat_call,
        }

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope["query_string"]:
            match = _HOT.match(scope["path"])
            if match is not None and "\x00" not in scope["path"]:
                headers = plain_headers(scope["headers"])
                if headers is not None:
                    # A start or signal names the app; a task answer the app and the token.
                    route = self.routes[match[2] or match[4]]
                    names = (match[1],) if match[2] else (match[1], match[3])
                    await self._serve(scope["path"], names, route, headers, receive, send, scope)
                    return
        await self.app(scope, receive, send)

    async def _serve(
        self,
        path: str,
        names: tuple[str, ...],
        route: Route,
        headers: dict[bytes, bytes],
        receive: ASGIReceiveCallable,
        send: ASGISendCallable,
        scope: HTTPScope,
    ) -> None:
        length = int(headers[b"content-length"])
        body = Body(receive, length)
        status, answer, extra = 500, b"", dict[bytes, bytes]()
        try:
            if length > self.body_max:
                raise PayloadTooLarge(
                    f"request body of {length} bytes is over the {self.body_max}-byte limit"
                )
            content_type = headers.get(b"content-type")
            if length and content_type is not None and not is_json_media_type(content_type.decode("latin-1")):
                raise UnsupportedMediaType("request bodies are JSON: send Content-Type: application/json")
            call = Call(
                self.engine,
                self.admin_token,
                headers.get(b"authorization", b"").decode("latin-1"),
                "POST",
                path,
                _text(headers.get(b"idempotency-key")),
                body.read,
            )
            try:
                view, status = await route(call, *names)
                answer = _dumps(view)
            except Elsewhere as elsewhere:  # the run lives on another node: its answer, as given
                raw_path = (scope.get("raw_path") or path.encode("utf-8")).decode("latin-1")
                incoming = Incoming("POST", raw_path, list(scope["headers"]), await body.read())
                relayed = await relay(self.engine.forwarder, elsewhere, incoming)
                await send_answer(send, relayed.status, relayed.headers, relayed.body)
                return
        except Disconnected:
            return  # nobody to answer
        except Refused as error:
            status, answer, extra = error_answer(error)
        except StorageUnavailable as error:
            log.warning("storage unavailable: %s", error)
            status, answer, extra = error_answer(storage_refusal(error))
        except Exception:
            log.exception("unhandled error on POST %s", path)
            status, answer, extra = error_answer(Internal("internal error; see the server log"))
        out = [(b"content-type", b"application/json"), *extra.items()]
        if status >= 400 and not await body.settle(self.body_max, status):
            out.append((b"connection", b"close"))
        await send_answer(send, status, out, answer)


async def send_answer(
    send: ASGISendCallable, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    out = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": out, "trailers": False})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def plain_headers(raw: Any) -> dict[bytes, bytes] | None:
    """The headers these routes read (lower-case names), or None when the request is not plain:
    no single numeric Content-Length, a Transfer-Encoding, Content-Encoding or Expect, or a header they read
    given twice (Quart would take the first one; such requests go to Quart)."""
    out: dict[bytes, bytes] = {}
    for name, value in raw:
        name = name.lower()
        if name in (b"transfer-encoding", b"expect", b"content-encoding"):
            return None
        if name in (b"content-length", b"content-type", b"authorization", b"idempotency-key"):
            if name in out:
                return None
            out[name] = value
    length = out.get(b"content-length")
    if length is None or not length.isdigit():
        return None
    return out


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def error_answer(error: Refused) -> tuple[int, bytes, dict[bytes, bytes]]:
    headers = {k.lower().encode(): v.encode() for k, v in (headers_of(error) or {}).items()}
    return status_of(error), _dumps(error.body()), headers


class Body:
    """The request body, read on demand (after admission and authentication, as in Quart)."""

    def __init__(self, receive: ASGIReceiveCallable, length: int) -> None:
        self._receive = receive
        self.length = length
        self.done = length == 0
        self.failed = False  # timed out or cut: the connection cannot carry another request
        self._data = b""

    async def read(self) -> bytes:
        if self.done:
            return self._data
        with trio.move_on_after(BODY_TIMEOUT_S) as scope:
            self._data = await self._read_all()
        if scope.cancelled_caught:
            self.failed = True
            raise Answer(408, "invalid_request", RequestTimeout.description or "request timeout")
        return self._data

    async def _read_all(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            message = await self._receive()
            if message["type"] != "http.request":
                self.failed = True
                raise Disconnected
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.done = True
                return b"".join(chunks)

    async def settle(self, body_max: int, status: int) -> bool:
        """After an error: True when the connection can carry the next request (a small body not
        read yet is read first); False when it must close (any 413, as Quart's hook does)."""
        if status == 413 or self.length > body_max or self.failed:
            return False
        if self.done:
            return True
        try:
            await self.read()
        except (Disconnected, Refused):
            return False
        return True
