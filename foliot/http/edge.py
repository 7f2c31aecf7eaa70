"""Refusals at the ASGI edge, before Quart builds a request: requests past the per-peer bound,
and, while the latency gate sheds, starts and signals past its limit.

Above capacity every refusal still costs CPU, and that CPU comes out of the requests being
served. Refused here, a 429 costs hypercorn's parsing and two ASGI messages, not Quart's
request context, routing and hooks as well.

- **Per peer:** at most `peer_max` requests of one peer address are under way at once
  (`FOLIOT_PEER_MAX_REQUESTS`; 0: no bound). Past it a request gets 429 `overloaded` (reason
  `peer`, counted in `foliot_admission_refused_total{reason="peer"}`) at once: one client
  holding requests open (a stalled body, long polls) cannot take the process's capacity
  from the others. Behind a proxy every client is one peer: raise it there.
- **Shed:** only the gate's refusal is taken here (the other bounds are checked by
  `Admission.admit` in the route functions); the refusal is the same answer, and is counted
  the same way (`foliot_admission_refused_total{reason="latency"}`).

A refused request's small body is read (within `DRAIN_TIMEOUT_S`) so the connection can carry
the next request; otherwise the answer says `Connection: close`.
"""

from __future__ import annotations

import json
import re

import trio
from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, Scope

from ..actors.admission import Admission
from ..core.errors import Overloaded
from .errors import headers_of, status_of
from .hot import send_answer

_ADDS_WORK = re.compile(r"^/apps/[^/]+/(?:runs|signals)/?$")
_DRAIN_MAX = 65_536  # a refused body up to this size is read, so its connection can be kept
DRAIN_TIMEOUT_S = 1.0  # ... if it comes within this; a refusal never waits for a stalled body


class Shed:
    def __init__(self, app: ASGIFramework, admission: Admission, peer_max: int = 0) -> None:
        self.app = app
        self.admission = admission
        self.peer_max = peer_max
        self.under_way: dict[str, int] = {}  # requests being served, by peer address

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        peer = str(client[0]) if client else ""
        under_way = self.under_way.get(peer, 0)
        if self.peer_max and under_way >= self.peer_max:
            refusal = self.admission.refuse(
                "peer", f"{under_way} requests from this address are being served; retry shortly"
            )
            await _refuse(scope, receive, send, refusal)
            return
        if (
            self.admission.gate.shedding
            and scope["method"] == "POST"
            and _ADDS_WORK.match(scope["path"])
            and (shed := self.admission.shed()) is not None
        ):
            await _refuse(scope, receive, send, shed)
            return
        self.under_way[peer] = under_way + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self.under_way[peer] - 1
            if left:
                self.under_way[peer] = left
            else:
                del self.under_way[peer]


async def _refuse(
    scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable, refusal: Overloaded
) -> None:
    keep = False
    with trio.move_on_after(DRAIN_TIMEOUT_S):
        keep = await _drain(scope, receive)
    body = json.dumps(refusal.body(), separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode(), v.encode()) for k, v in (headers_of(refusal) or {}).items()]
    if not keep:
        headers.append((b"connection", b"close"))
    await send_answer(send, status_of(refusal), headers, body)


async def _drain(scope: Scope, receive: ASGIReceiveCallable) -> bool:
    """Read a small request body (True: the connection can carry the next request)."""
    assert scope["type"] == "http"
    for name, value in scope["headers"]:
        if name.lower() == b"content-length" and (not value.isdigit() or int(value) > _DRAIN_MAX):
            return False
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return False
        size += len(message.get("body", b""))
        if size > _DRAIN_MAX:
            return False
        if not message.get("more_body", False):
            return True
