"""The harness names the node that sent a push by the connection's both ends, not its local port.

Linux hands one local port to several connections at once when their destinations differ, so
another node can hold a socket from the very port a push came from (to PostgreSQL, to a peer).
Matching the port alone named that node when the real sender's socket was gone by the look-up
(a 3-node `kill` run, seed 23200: a push "by n1" while n0 held the partition's lease). Here two
sockets share one local port: ours to the "handler", a child process's to somewhere else, and
the child comes first in the map of node processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from .harness import _process_of_port

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads /proc/net/tcp")


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def from_port(port: int, to: socket.socket) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.connect(to.getsockname())
    return s


@pytest.fixture
def shared_port() -> Iterator[tuple[int, int, int]]:
    """(local port, the handler's port, the child's pid): this process pushes from the port to
    the handler; a child holds a connection from the same port to another listener."""
    handler, elsewhere = listener(), listener()
    probe = from_port(0, elsewhere)
    port = probe.getsockname()[1]
    push = from_port(port, handler)
    accepted = [handler.accept()[0], elsewhere.accept()[0]]
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        pass_fds=[probe.fileno()],
    )
    probe.close()  # the child holds it now
    try:
        yield port, handler.getsockname()[1], child.pid
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(5)
        for s in (push, handler, elsewhere, *accepted):
            s.close()


def test_the_sender_is_the_process_holding_the_connection_to_the_handler(
    shared_port: tuple[int, int, int],
) -> None:
    port, handler_port, child = shared_port
    pids = {child: "n1", os.getpid(): "n0"}
    assert _process_of_port(port, pids, handler_port) == "n0"
    assert _process_of_port(port, {child: "n1"}, handler_port) is None  # the sender is gone
    assert _process_of_port(port, pids) == "n1"  # the port alone: the wrong node
