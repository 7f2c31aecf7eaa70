"""Quart-trio's ASGI HTTP connection, finishing its answer before it lets itself be cancelled.

Quart-trio runs a request as two tasks in one nursery: one reads ASGI messages and cancels the
nursery when `http.disconnect` arrives, the other answers. Hypercorn sends that disconnect
*while it handles the answer's last message* (closing the stream reports the disconnect to the
app), so the cancellation lands inside hypercorn's own `send`, between the stream's end and the
connection's next step: the socket was never closed after `Connection: close` or an HTTP/1.0
request, and a kept-alive connection never got its idle timer back, so it stayed open for as
long as the client liked (a client could hold any number of sockets with one request each).

The last body message is therefore sent shielded: hypercorn's handling of it is bounded
(its socket writes are shielded already; then EOF and close, or re-arming the idle timer).

`JsonErrorH11Protocol` answers the requests hypercorn refuses before any route (a request line
or header h11 cannot parse, a head over 16 KiB) in the API's error shape, where hypercorn sent
a bodiless 400/431; `install` makes hypercorn's connections use it.
"""

from __future__ import annotations

import json
from itertools import chain

import h11
import hypercorn.protocol
import trio
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.typing import ASGISendCallable, ASGISendEvent
from quart.wrappers import Request
from quart_trio.asgi import TrioASGIHTTPConnection

from ..core.errors import ApiError


class FinishingHTTPConnection(TrioASGIHTTPConnection):
    async def handle_request(  # type: ignore[override]
        self, nursery: trio.Nursery, request: Request, send: ASGISendCallable
    ) -> None:
        async def finishing_send(message: ASGISendEvent) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                with trio.CancelScope(shield=True):
                    await send(message)
            else:
                await send(message)

        await super().handle_request(nursery, request, finishing_send)


_PROTOCOL_ERRORS = {
    431: ("headers_too_large", "the request line and headers are over 16 KiB"),
    501: ("not_implemented", "this Transfer-Encoding is not supported: send chunked or a Content-Length"),
    505: ("http_version_not_supported", "speak HTTP/1.1 (or 1.0)"),
}


class JsonErrorH11Protocol(H11Protocol):
    async def _send_error_response(self, status_code: int) -> None:
        code, message = _PROTOCOL_ERRORS.get(
            status_code, ("invalid_request", "malformed HTTP request (request line or headers)")
        )
        body = json.dumps(ApiError.answer(status_code, code, message).body(), separators=(",", ":")).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        response = h11.Response(
            status_code=status_code, headers=list(chain(headers, self.config.response_headers("h11")))
        )
        await self._send_h11_event(response)
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())


def install() -> None:
    """Serve HTTP/1 connections with `JsonErrorH11Protocol` (hypercorn's `ProtocolWrapper`
    builds its protocol from this module attribute)."""
    hypercorn.protocol.H11Protocol = JsonErrorH11Protocol  # type: ignore[attr-defined]
