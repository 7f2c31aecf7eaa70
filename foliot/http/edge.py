"""Shedding at the ASGI edge: while the latency gate sheds, a start or signal past its limit is
refused before Quart builds a request for it.

Above capacity every refusal still costs CPU, and that CPU comes out of the requests being
served. Refused here, a 429 costs hypercorn's parsing and two ASGI messages, not Quart's
request context, routing and hooks as well. Only the gate's refusal is taken here (the other
bounds are checked by `Admission.admit` in the route functions, as before); the refusal is the
same answer, and is counted the same way (`foliot_admission_refused_total{reason="latency"}`).

Behind the front door (`door.py`, on unless `FOLIOT_FRONT_DOOR=0`) a start or signal reaches this
wrapper only if the door let it in after asking the gate, and is not asked again
(`DOOR_ADMITTED`); this wrapper refuses the ones that came another way (without the door).
"""

from __future__ import annotations

import json
import re

from hypercorn.typing import ASGIFramework, ASGIReceiveCallable, ASGISendCallable, Scope

from ..actors.admission import DOOR_ADMITTED, Admission

_ADDS_WORK = re.compile(r"^/apps/[^/]+/(?:runs|signals)/?$")
_DRAIN_MAX = 65_536  # a refused body up to this size is read, so its connection can be kept


class Shed:
    def __init__(self, app: ASGIFramework, admission: Admission) -> None:
        self.app = app
        self.admission = admission

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if (
            self.admission.gate.shedding
            and not DOOR_ADMITTED.get()
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and _ADDS_WORK.match(scope["path"])
        ):
            refusal = self.admission.shed()
            if refusal is not None:
                keep = await _drain(scope, receive)
                body = json.dumps(refusal.body(), separators=(",", ":")).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"retry-after", str(refusal.retry_after).encode()),
                    (b"content-length", str(len(body)).encode()),
                ]
                if not keep:
                    headers.append((b"connection", b"close"))
                await send(
                    {
                        "type": "http.response.start",
                        "status": refusal.status,
                        "headers": headers,
                        "trailers": False,
                    }
                )
                await send({"type": "http.response.body", "body": body, "more_body": False})
                return
        await self.app(scope, receive, send)


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
