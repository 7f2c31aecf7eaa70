"""The hop header: a request one node forwards to another says so, authenticated.

`Foliot-Hop: <nodeId>;<ms>;<mac>`, the MAC an HMAC-SHA256 under a key derived from
FOLIOT_SECRET_KEY (`Vault.derive_key("cluster-hop")`, shared by every node of a cluster) over
the sender, the time, the method, the path with its query and the body's SHA-256. A node that
receives an authentic hop header never forwards the request again (the loop guard: a
forwarded request that lands on a non-owner answers 503 `not_owner`), and only such requests
reach the internal endpoints (`/internal/...`). A header that does not verify is treated as
absent on public routes (a client cannot use it to change anything but that one request's own
forwarding) and refused on internal ones. Pure: no I/O, the time is passed in.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER = "Foliot-Hop"
PURPOSE = "cluster-hop"  # the derived key's purpose (`Vault.derive_key`)
WINDOW_MS = 300_000  # a hop header older (or newer) than this is refused: as SigV4's 5 minutes


def _mac(key: bytes, node_id: str, at_ms: int, method: str, target: str, body: bytes) -> str:
    text = "\n".join((node_id, str(at_ms), method.upper(), target, hashlib.sha256(body).hexdigest()))
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def sign(key: bytes, node_id: str, now_ms: int, method: str, target: str, body: bytes) -> str:
    """The header value for a request (`target`: path and `?query`, as sent) forwarded now."""
    return f"{node_id};{now_ms};{_mac(key, node_id, now_ms, method, target, body)}"


def verify(key: bytes, value: str | None, now_ms: int, method: str, target: str, body: bytes) -> str | None:
    """The sending node's id when `value` is an authentic, fresh hop header; else None."""
    if not value or len(value) > 512:
        return None
    parts = value.split(";")
    if len(parts) != 3 or not parts[1].isascii() or not parts[1].isdigit():
        return None
    node_id, at_text, mac = parts
    at_ms = int(at_text)
    if abs(now_ms - at_ms) > WINDOW_MS:
        return None
    expected = _mac(key, node_id, at_ms, method, target, body)
    return node_id if hmac.compare_digest(expected, mac) else None
