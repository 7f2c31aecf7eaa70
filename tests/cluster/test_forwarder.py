"""The forwarding client alone, on httpx's MockTransport: what is sent, what comes back, and
the refusals (owner unreachable 503, no answer 504, too many in flight 503, the loop guard)."""

from __future__ import annotations

import httpx
import pytest
import trio

from foliot.actors.placement import Elsewhere, NotOwner, Remote
from foliot.cluster import hop
from foliot.core.errors import Unavailable
from foliot.http.errors import GatewayTimeout, headers_of, status_of
from foliot.http.forward import Forwarder, Incoming, relay

KEY = b"k" * 32
NOW = 1_800_000_000_000
OWNER = Remote("a", "http://10.0.0.1:8080")


def forwarder(handler: httpx.MockTransport, **kw: int) -> Forwarder:
    return Forwarder("b", KEY, lambda: NOW, transport=handler, **kw)


def incoming(*headers: tuple[bytes, bytes]) -> Incoming:
    base = [(b"host", b"b.example:8080"), (b"authorization", b"Bearer fk_x.y"), (b"content-length", b"13")]
    return Incoming("POST", "/apps/orders/signals?x=1", [*base, *headers], b'{"name":"go"}')


async def test_the_request_goes_as_it_came_with_a_hop_header_and_the_answer_comes_back() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            409,
            stream=httpx.ByteStream(b'{"error":{"code":"invalid_status"}}'),
            headers=[("content-type", "application/json"), ("retry-after", "3"), ("date", "x"), ("x-a", "1")],
        )

    fwd = forwarder(httpx.MockTransport(answer))
    out = await relay(
        fwd, Elsewhere(OWNER), incoming((b"connection", b"keep-alive"), (b"foliot-hop", b"forged"))
    )
    assert out.status == 409 and out.body == b'{"error":{"code":"invalid_status"}}'
    assert (b"content-type", b"application/json") in out.headers and (b"retry-after", b"3") in out.headers
    assert (b"x-a", b"1") in out.headers
    assert all(k.lower() not in (b"date", b"connection", b"content-length") for k, _ in out.headers)
    [sent] = seen
    assert str(sent.url) == "http://10.0.0.1:8080/apps/orders/signals?x=1"
    assert sent.headers["host"] == "b.example:8080"  # as signed by an SWF client
    assert sent.headers["authorization"] == "Bearer fk_x.y"
    assert "user-agent" not in sent.headers and "accept-encoding" not in sent.headers  # none added
    assert sent.content == b'{"name":"go"}'
    assert len(sent.headers.get_list("foliot-hop")) == 1  # the forged one replaced by ours
    assert (
        hop.verify(KEY, sent.headers["foliot-hop"], NOW, "POST", "/apps/orders/signals?x=1", sent.content)
        == "b"
    )
    assert fwd.forwarded == 1 and fwd.in_flight == 0
    await fwd.aclose()


async def test_a_request_forwarded_once_is_never_forwarded_again() -> None:
    def never(request: httpx.Request) -> httpx.Response:
        raise AssertionError("forwarded a second time")

    fwd = forwarder(httpx.MockTransport(never))
    signed = hop.sign(KEY, "c", NOW, "POST", "/apps/orders/signals?x=1", b'{"name":"go"}')
    with pytest.raises(NotOwner) as refused:
        await relay(fwd, Elsewhere(OWNER), incoming((b"foliot-hop", signed.encode())))
    assert status_of(refused.value) == 503 and headers_of(refused.value) == {"Retry-After": "1"}
    with pytest.raises(Unavailable):
        await relay(None, Elsewhere(OWNER), incoming())  # a node that cannot forward at all
    await fwd.aclose()


async def test_an_owner_that_refuses_the_connection_is_503_and_one_that_does_not_answer_504() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    def silent(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=request)

    with pytest.raises(Unavailable) as down:
        await relay(forwarder(httpx.MockTransport(refuse)), Elsewhere(OWNER), incoming())
    assert status_of(down.value) == 503 and "nothing was changed" in down.value.message
    with pytest.raises(GatewayTimeout) as late:
        await relay(forwarder(httpx.MockTransport(silent)), Elsewhere(OWNER), incoming())
    assert status_of(late.value) == 504 and late.value.code == "owner_timeout"


async def test_requests_beyond_the_bound_are_refused_at_once(nursery: trio.Nursery) -> None:
    release = trio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200, stream=httpx.ByteStream(b"{}"))

    fwd = forwarder(httpx.MockTransport(slow), connections=1, waiting=1)
    for _ in range(2):
        nursery.start_soon(relay, fwd, Elsewhere(OWNER), incoming())
    await trio.testing.wait_all_tasks_blocked()
    assert fwd.in_flight == 2
    with pytest.raises(Unavailable, match="too many"):
        await relay(fwd, Elsewhere(OWNER), incoming())
    release.set()
