"""A lean open-loop HTTP/1.1 client: plain sockets and `selectors`, no HTTP library.

Above a server's capacity an httpx client costs 2-3 ms of CPU per request, so on a small
machine the client itself falls behind and its own lag shows up as the server's latency. This
one sends pre-built request bytes on kept-alive connections and reads only the status line and
the headers it needs (`Content-Length`, `Retry-After`, `Connection: close`): tens of
microseconds per request. Requests leave on a fixed timetable whatever the answers (open loop);
a request finding no idle connection opens a new one, up to `max_conns` per process (past it
the request is counted as not sent, status -2, as `common.run_clients` does).

Results use `common.run_clients`' shape: [scheduled epoch s, latency from the schedule s,
latency from the send s, status, retry_after present, key]; status -1 is a timeout, -3 a
connection error.
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.common import spawn_workers

Request = list[Any]


def request_bytes(host: str, method: str, path: str, body: Any, headers: dict[str, str]) -> bytes:
    data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class _Conn:
    __slots__ = ("buf", "job", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.job: list[Any] | None = None  # [scheduled, sent, key]


def _parse(buf: bytes) -> tuple[int, bool, bool, int] | None:
    """(status, retry_after present, close, total length) once the whole answer is in `buf`."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    length, retry, close = 0, False, False
    for line in head[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "retry-after":
            retry = True
        elif name == "connection" and value.strip().lower() == "close":
            close = True
    total = end + 4 + length
    return (status, retry, close, total) if len(buf) >= total else None


def _loop(spec: dict[str, Any], results: list[list[Any]]) -> None:
    host, port = spec["host"], spec["port"]
    payloads = [request_bytes(f"{host}:{port}", m, p, b, spec["headers"]) for m, p, b, _ in spec["requests"]]
    keys = [r[3] for r in spec["requests"]]
    sel = selectors.DefaultSelector()
    idle: list[_Conn] = []
    busy: dict[socket.socket, _Conn] = {}
    timeout, max_conns = spec["timeout"], spec["max_conns"]
    start, rate, offset = spec["start_at"], spec["rate"], spec["offset"]
    hard_end = start + spec["limit_s"]

    def finish(conn: _Conn, status: int, retry: bool, keep: bool) -> None:
        assert conn.job is not None
        scheduled, sent, key = conn.job
        done = time.time()
        results.append([scheduled, done - scheduled, done - sent, status, retry, key])
        conn.job, conn.buf = None, b""
        with suppress(KeyError, ValueError):
            sel.unregister(conn.sock)
        busy.pop(conn.sock, None)
        if keep:
            idle.append(conn)
        else:
            conn.sock.close()

    i, n = 0, len(payloads)
    while (i < n or busy) and time.time() < hard_end:
        now = time.time()
        while i < n and start + offset + i / rate <= now:
            scheduled = start + offset + i / rate
            conn = idle.pop() if idle else None
            if conn is None and len(busy) < max_conns:
                try:
                    sock = socket.create_connection((host, port), timeout=5)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sock.setblocking(False)
                    conn = _Conn(sock)
                except OSError:
                    results.append([scheduled, 0.0, 0.0, -3, False, keys[i]])
                    i += 1
                    continue
            if conn is None:
                results.append([scheduled, 0.0, 0.0, -2, False, keys[i]])
                i += 1
                continue
            conn.job = [scheduled, time.time(), keys[i]]
            try:
                conn.sock.sendall(payloads[i])  # small: fits the socket buffer at once
            except OSError:
                conn.sock.close()
                results.append([scheduled, 0.0, 0.0, -3, False, keys[i]])
                i += 1
                continue
            busy[conn.sock] = conn
            sel.register(conn.sock, selectors.EVENT_READ, conn)
            i += 1
        wait = (start + offset + i / rate - time.time()) if i < n else 0.05
        for key, _ in sel.select(max(0.0, min(wait, 0.05))):
            conn = key.data
            try:
                data = conn.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                finish(conn, -3, False, False)
                continue
            if not data:
                finish(conn, -3, False, False)
                continue
            conn.buf += data
            parsed = _parse(conn.buf)
            if parsed is not None:
                status, retry, close, _total = parsed
                finish(conn, status, retry, not close)
        now = time.time()
        for conn in [c for c in busy.values() if c.job is not None and now - c.job[1] > timeout]:
            finish(conn, -1, False, False)
    for conn in list(busy.values()):
        finish(conn, -1, False, False)
    for conn in idle:
        conn.sock.close()


def _worker(spec: dict[str, Any], out_path: str, barrier: Any) -> None:
    with suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=120)
    spec["start_at"] = time.time() + 0.2
    results: list[list[Any]] = []
    _loop(spec, results)
    Path(out_path).write_text(json.dumps(results))


def run_open(
    base_url: str,
    headers: dict[str, str],
    requests: list[Request],
    *,
    rate: float,
    procs: int = 2,
    timeout: float = 30.0,
    max_conns: int = 512,
    limit_s: float = 600.0,
) -> tuple[list[list[Any]], float]:
    """Send `requests` open loop at `rate`/s in total from `procs` processes; (results, wall)."""
    url = urlsplit(base_url)
    procs = max(1, min(procs, len(requests)))
    specs = [
        {
            "host": url.hostname,
            "port": url.port,
            "headers": headers,
            "requests": requests[w::procs],
            "rate": rate / procs,
            "offset": w / rate,
            "timeout": timeout,
            "max_conns": max_conns,
            "limit_s": limit_s,
        }
        for w in range(procs)
    ]
    return spawn_workers(_worker, specs, limit_s)


def run_timetables(
    base_url: str,
    headers: dict[str, str],
    timetables: list[tuple[list[Request], float, float]],
    *,
    timeout: float = 30.0,
    max_conns: int = 512,
    limit_s: float = 600.0,
) -> tuple[list[list[Any]], float]:
    """One process per `(requests, rate, offset)`: each sends its requests open loop at `rate`/s,
    the first `offset` seconds after a start the processes share (e.g. starts at 10/s and, in
    another process, a signal to each of those runs at 10/s 1.5 s later); (results, wall)."""
    url = urlsplit(base_url)
    specs = [
        {
            "host": url.hostname,
            "port": url.port,
            "headers": headers,
            "requests": requests,
            "rate": rate,
            "offset": offset,
            "timeout": timeout,
            "max_conns": max_conns,
            "limit_s": limit_s,
        }
        for requests, rate, offset in timetables
    ]
    return spawn_workers(_worker, specs, limit_s)
