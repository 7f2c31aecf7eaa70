"""`BurstListener`: every connection waiting in the kernel is taken when the first one is, and
handed out without going back to the scheduler (`foliot/http/listen.py`)."""

from __future__ import annotations

import socket

import trio
import trio.testing

from foliot.http.listen import BurstListener


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
