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
or header h11 cannot parse, a head over 16 KiB, a Transfer-Encoding other than chunked, a body
cut short) in the API's error shape, where hypercorn sent a bodiless 400/431. The whole answer
is one write: written as three, a client that had gone made the second fail, the connection
start closing (`send_eof`) in another task, and the third collide with it
(`trio.BusyResourceError`, which hypercorn does not catch: it ended the process). It is wired
in by `foliot/http/listen.py` for Foliot's own connections only (no library class replaced).
"""

from __future__ import annotations

import json
from itertools import chain
from typing import Any

import h11
import trio
from hypercorn.events import RawData
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.typing import ASGISendCallable, ASGISendEvent
from quart.wrappers import Request
from quart_trio.asgi import TrioASGIHTTPConnection

from .errors import Answer


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


class ClosingConnection(h11.Connection):
    """h11's server side, not reading past a request that said `Connection: close` (or was
    HTTP/1.0): RFC 9112 9.6, a server must not process anything after it. h11 raises on such
    bytes, and hypercorn then answered the request itself with a 400 (what the fuzz test in
    tests/unit/test_edge_fuzz.py found): the request is answered, the rest is dropped."""

    def receive_data(self, data: bytes) -> None:
        if data and self.their_state is h11.MUST_CLOSE:
            return
        super().receive_data(data)

    def next_event(self) -> Any:
        if self.their_state is h11.MUST_CLOSE and self.trailing_data[0]:
            return h11.NEED_DATA
        return super().next_event()


class JsonErrorH11Protocol(H11Protocol):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.connection = ClosingConnection(
            h11.SERVER, max_incomplete_event_size=self.config.h11_max_incomplete_size
        )

    async def _send_error_response(self, status_code: int) -> None:
        code, message = _PROTOCOL_ERRORS.get(
            status_code, ("invalid_request", "malformed HTTP request (request line or headers)")
        )
        body = json.dumps(Answer(status_code, code, message).body(), separators=(",", ":")).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        response = h11.Response(
            status_code=status_code, headers=list(chain(headers, self.config.response_headers("h11")))
        )
        data = b""
        for event in (response, h11.Data(data=body), h11.EndOfMessage()):
            try:
                data += self.connection.send(event) or b""
            except h11.LocalProtocolError:  # as hypercorn: nothing more to say to a broken peer
                if self.connection.their_state != h11.ERROR:
                    raise
                break
        if data:
            await self.send(RawData(data=data))
