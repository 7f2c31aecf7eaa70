"""A task handler for the benchmarks: answers every push at once and records its arrival.

    python bench/handler_app.py --port 9001

Any `POST` is a push: it answers 200 `{"ok": true}` and counts the push by its
`idempotencyKey` (duplicates are pushes of a key already seen) and records `(time, step)` per
run id. `GET /stats?arrivals=1` answers the counts (and the arrival times, wall-clock seconds);
`POST /reset` clears them. `POST /floor/...` answers the same without recording: the push
floor that a bare client measures. A push to `/big/<n>/...` (a task step's `handler` path) is
recorded as any other and answered `{"blob": "xx…"}` of about `n` bytes: large step outputs
(`noisy_neighbour.py`'s map items). Plain ASGI on hypercorn's trio worker; signatures are
not checked (the tests do that).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

keys: dict[str, int] = {}
arrivals: dict[str, list[tuple[float, str]]] = defaultdict(list)
totals = {"received": 0, "unparsed": 0}
_blobs: dict[int, bytes] = {}


def _blob(path: str) -> bytes:
    """`{"blob": "xx…"}` of about the size `/big/<n>/...` names (cached per size)."""
    try:
        size = max(0, min(int(path.split("/")[2]), 16 << 20))
    except (IndexError, ValueError):
        size = 0
    if size not in _blobs:
        _blobs[size] = json.dumps({"blob": "x" * max(0, size - 12)}).encode()
    return _blobs[size]


async def _respond(send: Any, status: int, body: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    raw = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        raw += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if scope["method"] == "GET" and path == "/stats":
        query = scope.get("query_string", b"").decode()
        dup = sum(n - 1 for n in keys.values())
        out: dict[str, Any] = {**totals, "unique": len(keys), "duplicates": dup, "runs": len(arrivals)}
        if "arrivals=1" in query:
            out["arrivals"] = arrivals
        await _respond(send, 200, json.dumps(out).encode())
        return
    if path == "/reset":
        keys.clear()
        arrivals.clear()
        totals.update(received=0, unparsed=0)
        await _respond(send, 200, b"{}")
        return
    if path.startswith("/floor/"):
        json.loads(raw or b"null")
        await _respond(send, 200, b'{"ok":true}')
        return
    now = time.time()
    totals["received"] += 1
    try:
        body = json.loads(raw)
        keys[body["idempotencyKey"]] = keys.get(body["idempotencyKey"], 0) + 1
        arrivals[body["runId"]].append((now, body["step"]))
    except (ValueError, KeyError, TypeError):
        totals["unparsed"] += 1
    await _respond(send, 200, _blob(path) if path.startswith("/big/") else b'{"ok":true}')


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.accesslog = None
    config.keep_alive_timeout = 75
    config.backlog = 2048
    trio.run(serve, app, config)


if __name__ == "__main__":
    main()
