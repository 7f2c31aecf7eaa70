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
"""

from __future__ import annotations

import trio
from hypercorn.typing import ASGISendCallable, ASGISendEvent
from quart.wrappers import Request
from quart_trio.asgi import TrioASGIHTTPConnection


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
