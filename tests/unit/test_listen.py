"""`BurstListener`: every connection waiting in the kernel is taken when the first one is, and
handed out without going back to the scheduler (`foliot/http/listen.py`)."""

from __future__ import annotations

import hashlib
import inspect
import json
import socket
from importlib import metadata

import trio
import trio.testing
from hypercorn.events import Closed, RawData
from hypercorn.trio.worker_context import WorkerContext

from foliot.http.listen import BurstListener, Connections


async def test_waiting_connections_are_taken_in_one_go() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    listener = BurstListener(server, burst=8)
    clients = [socket.create_connection(server.getsockname()) for _ in range(10)]
    try:
        for i, client in enumerate(clients):
            client.sendall(bytes([i]))
        streams = [await listener.accept()]  # one pass of the scheduler takes 8
        with trio.testing.assert_no_checkpoints():
            streams += [await listener.accept() for _ in range(7)]
        streams += [await listener.accept() for _ in range(2)]  # the next burst: the 2 left
        got = sorted([(await stream.receive_some(1))[0] for stream in streams])
        assert got == list(range(10))  # each stream is one of the connections, none twice
        for stream in streams:
            await stream.aclose()
    finally:
        for client in clients:
            client.close()
        await listener.aclose()


async def test_closing_closes_the_connections_not_handed_out() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    listener = BurstListener(server)
    clients = [socket.create_connection(server.getsockname()) for _ in range(3)]
    try:
        first = await listener.accept()
        await first.aclose()
        await listener.aclose()  # the two taken but not handed out are closed with it
        for client in clients:
            client.settimeout(5)
            assert client.recv(1) == b""  # the server side is gone
    finally:
        for client in clients:
            client.close()


# --------------------------------------------------------------------------- hypercorn's internals

# `foliot/http/listen.py` and `conn.py` subclass hypercorn's `TCPServer`, `ProtocolWrapper` and
# `H11Protocol` and replace these methods (or rely on what they do: `_handle_events` calls
# `_send_error_response` then sends `Closed`; `ProtocolWrapper` builds the HTTP/1 protocol from
# the arguments listed; `TCPServer.__init__` sets `send_lock`, `idle_task`, `stream`). A new
# hypercorn that changes any of them must be read before these fingerprints are updated.
PINNED = {
    "TCPServer.__init__": "4c1d42457bc197b2",
    "TCPServer.run": "fd34b021d1a86c98",
    "TCPServer.protocol_send": "225856426bff7be0",
    "TCPServer._read_data": "7ca747d922c65cf1",
    "TCPServer._close": "bc73c4ae25a1ceec",
    "TCPServer._idle_timeout": "210ce1014d98e1cb",
    "TCPServer._initiate_server_close": "7c1b548a65adc8b1",
    "H11Protocol._send_error_response": "58c2b47ae295d000",
    "H11Protocol._handle_events": "bd4a76b2837e8722",
    "H11Protocol.handle": "3b56e067447488df",
    "H11Protocol._send_h11_event": "5e40283daa303ec7",
    "ProtocolWrapper.__init__": "df25e181b9e2e64d",
}


def test_the_hypercorn_internals_the_edge_relies_on_are_unchanged() -> None:
    from hypercorn.protocol import ProtocolWrapper
    from hypercorn.protocol.h11 import H11Protocol
    from hypercorn.trio.tcp_server import MAX_RECV, TCPServer

    assert metadata.version("hypercorn") == "0.18.0"
    assert MAX_RECV == 65536
    owners = {"TCPServer": TCPServer, "H11Protocol": H11Protocol, "ProtocolWrapper": ProtocolWrapper}
    found = {}
    for name in PINNED:
        owner, method = name.split(".")
        source = inspect.getsource(getattr(owners[owner], method))
        found[name] = hashlib.sha256(source.encode()).hexdigest()[:16]
    assert found == PINNED, "hypercorn changed under foliot/http/listen.py: read the new code first"


def test_no_hypercorn_class_is_replaced_process_wide() -> None:
    import hypercorn.protocol
    import hypercorn.protocol.h11
    import hypercorn.trio.tcp_server

    import foliot.server  # noqa: F401 (what `foliot serve` imports)

    assert hypercorn.protocol.H11Protocol is hypercorn.protocol.h11.H11Protocol
    assert hypercorn.trio.tcp_server.ProtocolWrapper is hypercorn.protocol.ProtocolWrapper


async def test_the_edge_speaks_http_1_with_the_json_error_protocol() -> None:
    from hypercorn.config import Config

    from foliot.http.conn import JsonErrorH11Protocol
    from foliot.http.listen import EdgeProtocolWrapper

    async def send(_event: object) -> None:
        pass

    wrapper = EdgeProtocolWrapper(
        None,
        Config(),
        WorkerContext(None),
        None,
        {},
        False,
        ("127.0.0.1", 1),
        ("127.0.0.1", 2),
        send,
        "http/1.1",
    )
    assert type(wrapper.protocol) is JsonErrorH11Protocol
    sent: list[object] = []

    async def record(event: object) -> None:
        sent.append(event)

    protocol = JsonErrorH11Protocol(
        None,
        Config(),
        WorkerContext(None),
        None,
        {},
        False,
        None,
        None,
        record,  # type: ignore[arg-type]
    )
    await protocol.handle(RawData(b"NOT HTTP AT ALL\r\n\r\n"))
    writes = [event for event in sent if isinstance(event, RawData)]
    assert len(writes) == 1  # the whole answer in one write
    head, _, body = writes[0].data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"connection: close" in head
    assert json.loads(body)["error"]["code"] == "invalid_request"
    assert isinstance(sent[-1], Closed)


def test_the_connection_bounds_evict_the_oldest_idle_first() -> None:
    class Conn:
        def __init__(self, peer: str) -> None:
            self.peer = peer
            self.evicted = False

        def evict(self) -> None:
            self.evicted = True

    conns = Connections(max_total=5, per_peer=3)
    a = [Conn("a") for _ in range(3)]
    assert all(conns.open(c) for c in a)  # type: ignore[arg-type]
    conns.busy(a[0])  # type: ignore[arg-type]
    conns.busy(a[1])  # type: ignore[arg-type]
    conns.idle(a[1])  # type: ignore[arg-type]  (a[2], then a[1], are idle, in that order)
    a3 = Conn("a")
    assert conns.open(a3)  # type: ignore[arg-type]
    assert a[2].evicted and not a[1].evicted and conns.count("a") == 3
    b = [Conn("b"), Conn("b")]
    assert all(conns.open(c) for c in b)  # type: ignore[arg-type]
    c = Conn("c")
    assert conns.open(c)  # type: ignore[arg-type]  (in all 5: from "a", holding the most)
    assert a[1].evicted and conns.total == 5 and conns.count("a") == 2
    for conn in (a[0], a3, *b, c):
        conns.busy(conn)  # type: ignore[arg-type]
    assert not conns.open(Conn("d"))  # type: ignore[arg-type]  (none idle: refused)
    assert (conns.evicted, conns.refused) == (2, 1)
    conns.close(c)  # type: ignore[arg-type]
    assert conns.open(Conn("d")) and conns.total == 5  # type: ignore[arg-type]
