"""Requests for an actor that lives on another node, proxied to its owner.

When `Runs.ask`/`Swf.ask` find the addressed actor on another node they raise
`Elsewhere`; the HTTP layer (the Quart error handler, the ASGI hot path `foliot/http/hot.py`
and the SWF route alike) hands the request as it arrived — method, path and query, headers,
body — to `relay`, which sends it to the owner's FOLIOT_ADVERTISE_URL and returns the owner's
answer (status, headers, body) for the client unchanged. The caller authenticated locally
first; the owner authenticates again (the `Authorization` and, for SWF, the SigV4-signed
`Host` headers travel as they came, so a signature still verifies).

The loop guard: a forwarded request carries the hop header (`foliot.cluster.hop`); one that
arrives at a node which does not own the actor either answers 503 `not_owner` with
`Retry-After: 1`, never a second hop. The client is bounded (`Forwarder`): a fixed number of
connections, a short wait for one (then 503 at once, nothing queued without bound), a
connect timeout (503: the owner was never reached, nothing changed) and a read timeout (504:
the owner may or may not have applied it; retry with the same idempotency key or signal id).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import httpx
from quart import Response, request
from werkzeug.datastructures import Headers as QuartHeaders

from ..actors.placement import Elsewhere, NotOwner, Remote
from ..cluster import hop
from ..core.errors import Unavailable
from .errors import Answer, GatewayTimeout

log = logging.getLogger("foliot.forward")

CONNECTIONS = 64  # to all owners together
WAITING = 64  # requests waiting for one of them at most; more: 503 at once
CONNECT_TIMEOUT_S = 2.0
POOL_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 30.0
ANSWER_MAX = 16 * 1024 * 1024

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones the sending side sets itself.
_NOT_SENT = {
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
    b"upgrade", b"content-length", b"expect", hop.HEADER.lower().encode(),
}  # fmt: skip
_NOT_RETURNED = {
    b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"date", b"server",
}  # fmt: skip

RawHeaders = Sequence[tuple[bytes, bytes]]


@attrs.frozen
class Relayed:
    """The owner's answer, to be sent to the client as it is."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


@attrs.frozen
class Incoming:
    """A request as it arrived, enough to send it again."""

    method: str
    target: str  # raw path and `?query` when there is one
    headers: RawHeaders
    body: bytes

    def header(self, name: bytes) -> str | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value.decode("latin-1")
        return None


class Forwarder:
    """The bounded client one node uses to reach the others."""

    def __init__(
        self,
        node_id: str,
        key: bytes,
        now_ms: Callable[[], int],
        *,
        connections: int = CONNECTIONS,
        waiting: int = WAITING,
        read_timeout_s: float = READ_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.node_id = node_id
        self.key = key
        self.now_ms = now_ms
        self.limit = connections + waiting
        self.in_flight = 0
        self.forwarded = 0
        self.replays = hop.Replays()  # the hop headers this node accepted (each once)
        self.client = httpx.AsyncClient(
            transport=transport,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            timeout=httpx.Timeout(read_timeout_s, connect=CONNECT_TIMEOUT_S, pool=POOL_TIMEOUT_S),
            follow_redirects=False,
            trust_env=False,
        )
        self.client.headers.clear()  # only the client's own headers travel (no gzip asked for)

    async def aclose(self) -> None:
        await self.client.aclose()

    def hop_from(self, request: Incoming) -> str | None:
        """The node that forwarded `request`, when it carries an authentic hop header this node
        has not accepted before (a replayed one is refused: `hop.Replays`)."""
        return self.replays.accept(
            self.key,
            request.header(hop.HEADER.lower().encode()),
            self.now_ms(),
            request.method,
            request.target,
            request.body,
        )

    async def send(self, owner: Remote, request: Incoming) -> Relayed:
        """Send `request` to `owner` with a hop header; its answer, or 503/504."""
        if self.in_flight >= self.limit:
            raise Unavailable(f"too many requests on their way to other nodes ({self.limit}); retry")
        headers = [(k, v) for k, v in request.headers if k.lower() not in _NOT_SENT]
        signed = hop.sign(self.key, self.node_id, self.now_ms(), request.method, request.target, request.body)
        headers.append((hop.HEADER.encode(), signed.encode()))
        url = owner.address.rstrip("/") + request.target
        self.in_flight += 1
        try:
            built = self.client.build_request(request.method, url, headers=headers, content=request.body)
            response = await self.client.send(built, stream=True)
            try:
                body = await _bounded_body(response)
            finally:
                await response.aclose()
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            log.warning("forward to %s (%s) failed: %r", owner.node_id, owner.address, exc)
            raise Unavailable(
                f"the node owning this actor ({owner.node_id}) cannot be reached; nothing was changed, retry"
            ) from None
        except httpx.TransportError as exc:  # read timeout, connection cut after the request left
            log.warning("forward to %s (%s) got no answer: %r", owner.node_id, owner.address, exc)
            raise GatewayTimeout(
                f"the node owning this actor ({owner.node_id}) did not answer in time; the request may"
                " or may not have been applied: retry it with the same idempotency key or signal id"
            ) from None
        finally:
            self.in_flight -= 1
        self.forwarded += 1
        out = [(k, v) for k, v in response.headers.raw if k.lower() not in _NOT_RETURNED]
        return Relayed(response.status_code, out, body)

    async def internal(self, address: str, path: str, request: dict[str, Any]) -> Any:
        """A node-to-node call (`foliot.http.internal`) to the node at `address`: its JSON
        answer; an error answer is raised as the API error it says."""
        body = json.dumps(request, separators=(",", ":")).encode()
        incoming = Incoming("POST", path, [(b"content-type", b"application/json")], body)
        relayed = await self.send(Remote("", address), incoming)
        try:
            answer = json.loads(relayed.body)
        except ValueError:
            answer = None
        if relayed.status != 200 or not isinstance(answer, dict):
            error = answer.get("error") if isinstance(answer, dict) else None
            error = error if isinstance(error, dict) else {}
            raise Answer(
                relayed.status if relayed.status >= 400 else 502,
                str(error.get("code") or "unavailable"),
                str(error.get("message") or f"{path} answered {relayed.status}"),
            )
        return answer

    async def claim(self, address: str, request: dict[str, Any]) -> Any:
        """Ask the node at `address` to claim from its pull queue (`/internal/claim`); its
        answer (None: it had nothing)."""
        return (await self.internal(address, "/internal/claim", request))["answer"]


async def _bounded_body(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > ANSWER_MAX:
            raise httpx.ReadError(f"the owner's answer is over {ANSWER_MAX} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def relay(forwarder: Forwarder | None, elsewhere: Elsewhere, request: Incoming) -> Relayed:
    """Proxy `request` to the actor's owner, unless it was forwarded here already (then 503
    `not_owner`: the ownership moved while it travelled; the client retries)."""
    if forwarder is None:
        raise Unavailable("this node cannot reach the actor's owner (no cluster forwarding); retry")
    sender = forwarder.hop_from(request)
    if sender is not None:
        raise NotOwner(
            f"forwarded by node {sender}, but this node does not own the actor either"
            f" (node {elsewhere.owner.node_id} does now); retry"
        )
    return await forwarder.send(elsewhere.owner, request)


async def quart_incoming() -> Incoming:
    """The Quart request being served, as it arrived (its body read already, or now)."""
    scope = request.scope
    path = (scope.get("raw_path") or scope["path"].encode("utf-8")).decode("latin-1")
    query = scope.get("query_string", b"").decode("latin-1")
    data = await request.get_data(cache=True, as_text=False)
    assert isinstance(data, bytes)
    return Incoming(request.method, path + (f"?{query}" if query else ""), list(scope["headers"]), data)


def quart_response(relayed: Relayed) -> Response:
    """The owner's answer as a Quart response."""
    headers = QuartHeaders([(k.decode("latin-1"), v.decode("latin-1")) for k, v in relayed.headers])
    return Response(relayed.body, status=relayed.status, headers=headers)
