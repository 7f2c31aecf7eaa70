"""The fault proxy on loopback, in front of an echo server: latency, a partition that holds
the bytes until it heals (one direction or both), resets, refusals, and faults aimed at one
sender's connections only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio

from .proxy import Proxy, hop_from

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


async def echo(stream: trio.SocketStream) -> None:
    try:
        async for data in stream:
            await stream.send_all(data)
    except trio.BrokenResourceError:
        pass


@pytest.fixture
async def proxy(nursery: trio.Nursery) -> AsyncIterator[Proxy]:
    listeners = await nursery.start(partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    yield await nursery.start(Proxy("127.0.0.1", port).run)


async def connect(proxy: Proxy) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", proxy.port)


async def roundtrip(stream: trio.SocketStream, data: bytes) -> bytes:
    await stream.send_all(data)
    got = b""
    while len(got) < len(data):
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        got += chunk
    return got


async def test_it_relays_and_adds_latency(proxy: Proxy) -> None:
    with trio.fail_after(10):
        stream = await connect(proxy)
        assert await roundtrip(stream, b"hello") == b"hello"
        proxy.latency(0.2)
        t0 = trio.current_time()
        assert await roundtrip(stream, b"slow") == b"slow"
        assert trio.current_time() - t0 >= 0.4  # held each way
        proxy.heal()
        t0 = trio.current_time()
        assert await roundtrip(stream, b"fast") == b"fast"
        assert trio.current_time() - t0 < 0.2


@pytest.mark.parametrize("direction", ["up", "down", "both"])
async def test_a_partition_holds_the_bytes_until_it_heals(proxy: Proxy, direction: str) -> None:
    with trio.fail_after(10):
        stream = await connect(proxy)
        assert await roundtrip(stream, b"before") == b"before"
        proxy.block(direction)
        await stream.send_all(b"during")
        with trio.move_on_after(0.5) as quiet:
            await stream.receive_some(100)
        assert quiet.cancelled_caught  # nothing came back while cut
        late = await connect(proxy)  # a new connection is accepted but stays silent too
        await late.send_all(b"new")
        with trio.move_on_after(0.3) as silent:
            await late.receive_some(100)
        assert silent.cancelled_caught
        proxy.heal()
        got = b""
        while len(got) < len(b"during"):
            got += await stream.receive_some(100)
        assert got == b"during"  # held, not lost: TCP outlived the partition
        assert await late.receive_some(100) == b"new"


async def test_reset_aborts_every_connection_and_refuse_turns_new_ones_away(proxy: Proxy) -> None:
    with trio.fail_after(10):
        stream = await connect(proxy)
        assert await roundtrip(stream, b"x") == b"x"
        assert proxy.reset() == 1
        with pytest.raises((trio.BrokenResourceError, trio.ClosedResourceError)):
            for _ in range(50):  # the RST arrives: a send or a receive breaks
                await stream.send_all(b"y")
                if not await stream.receive_some(10):
                    raise trio.BrokenResourceError
                await trio.sleep(0.01)
        proxy.refuse()
        with pytest.raises((OSError, trio.BrokenResourceError)):  # reset at connect or after
            refused = await connect(proxy)
            await refused.send_all(b"z")
            if not await refused.receive_some(10):
                raise trio.BrokenResourceError
        proxy.heal()
        assert await roundtrip(await connect(proxy), b"ok") == b"ok"


async def test_a_fault_can_pick_one_senders_connections_by_their_hop_header(proxy: Proxy) -> None:
    with trio.fail_after(10):
        mine = await connect(proxy)
        theirs = await connect(proxy)
        assert await roundtrip(mine, b"GET / HTTP/1.1\r\nFoliot-Hop: n1;1;ab;cd\r\n\r\n")
        assert await roundtrip(theirs, b"GET / HTTP/1.1\r\nFoliot-Hop: n2;1;ab;cd\r\n\r\n")
        proxy.block("both", only=hop_from("n1"))
        assert await roundtrip(theirs, b"still") == b"still"
        await mine.send_all(b"held")
        with trio.move_on_after(0.3) as held:
            await mine.receive_some(100)
        assert held.cancelled_caught
        proxy.heal()
        assert await mine.receive_some(100) == b"held"
        assert proxy.reset(only=hop_from("n2")) == 1
        assert await roundtrip(mine, b"alive") == b"alive"
