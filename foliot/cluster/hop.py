"""The hop header: a request one node forwards to another says so, authenticated, once.

`Foliot-Hop: <nodeId>;<ms>;<nonce>;<mac>`, the MAC an HMAC-SHA256 under a key derived from
FOLIOT_SECRET_KEY (`Vault.derive_key("cluster-hop")`, shared by every node of a cluster) over
the sender, the time, a fresh random nonce, the method, the path with its query and the body's
SHA-256. A header is accepted within `WINDOW_MS` of its time (the nodes' clocks must agree to
within that: run NTP), and only once: the receiving node remembers every nonce it accepted
until the window has passed (`Replays`, in memory: it is the receiver that must know what it
has already taken), so a captured request sent again is refused, and one with another method,
path or body does not verify at all.

A node that receives an authentic hop header never forwards the request again (the loop
guard: a forwarded request that lands on a non-owner answers 503 `not_owner`), and only such
requests reach the internal endpoints (`/internal/...`). A header that does not verify (or is
a replay) is treated as absent on public routes (a client cannot use it to change anything but
that one request's own forwarding) and refused on internal ones. `sign` and `verify` are pure:
the time (and for `sign`, optionally the nonce) is passed in.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets
from typing import Final

HEADER = "Foliot-Hop"
PURPOSE = "cluster-hop"  # the derived key's purpose (`Vault.derive_key`)
WINDOW_MS = 30_000  # a hop header older (or newer) than this is refused
REMEMBERED_MAX: Final = 2_000_000  # nonces held at most (~30 s at 60,000 forwarded requests/s)
_NONCE_CHARS = frozenset("0123456789abcdef")


def _mac(key: bytes, node_id: str, at_ms: int, nonce: str, method: str, target: str, body: bytes) -> str:
    digest = hashlib.sha256(body).hexdigest()
    text = "\n".join((node_id, str(at_ms), nonce, method.upper(), target, digest))
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def sign(
    key: bytes, node_id: str, now_ms: int, method: str, target: str, body: bytes, nonce: str | None = None
) -> str:
    """The header value for a request (`target`: path and `?query`, as sent) forwarded now."""
    nonce = secrets.token_hex(16) if nonce is None else nonce
    return f"{node_id};{now_ms};{nonce};{_mac(key, node_id, now_ms, nonce, method, target, body)}"


def verify_parts(
    key: bytes, value: str | None, now_ms: int, method: str, target: str, body: bytes
) -> tuple[str, int, str] | None:
    """`(node id, time, nonce)` of an authentic hop header within the window; else None."""
    if not value or len(value) > 512:
        return None
    parts = value.split(";")
    if len(parts) != 4 or not parts[1].isascii() or not parts[1].isdigit() or len(parts[1]) > 16:
        return None
    node_id, at_text, nonce, mac = parts
    if not 16 <= len(nonce) <= 64 or not _NONCE_CHARS.issuperset(nonce):
        return None
    at_ms = int(at_text)
    if abs(now_ms - at_ms) > WINDOW_MS:
        return None
    expected = _mac(key, node_id, at_ms, nonce, method, target, body)
    return (node_id, at_ms, nonce) if hmac.compare_digest(expected, mac) else None


def verify(key: bytes, value: str | None, now_ms: int, method: str, target: str, body: bytes) -> str | None:
    """The sending node's id when `value` is an authentic, fresh hop header; else None (no
    replay check: `Replays.accept` is the receiving node's one)."""
    parts = verify_parts(key, value, now_ms, method, target, body)
    return None if parts is None else parts[0]


class Replays:
    """The nonces of the hop headers this node accepted, each held until its header is out of
    the window (older entries are dropped as new ones arrive)."""

    def __init__(self, limit: int = REMEMBERED_MAX) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._order: collections.deque[tuple[int, str]] = collections.deque()
        self.refused = 0

    def __len__(self) -> int:
        return len(self._seen)

    def accept(
        self, key: bytes, value: str | None, now_ms: int, method: str, target: str, body: bytes
    ) -> str | None:
        """The sender's id when `value` is authentic, fresh and not seen before (then it is
        remembered); None otherwise."""
        parts = verify_parts(key, value, now_ms, method, target, body)
        if parts is None:
            return None
        node_id, at_ms, nonce = parts
        order = self._order
        while order and order[0][0] < now_ms - WINDOW_MS:
            self._seen.discard(order.popleft()[1])
        if nonce in self._seen or len(self._seen) >= self.limit:
            # A replay; or, past the limit, a flood no cluster sends: refused, not forgotten.
            self.refused += 1
            return None
        self._seen.add(nonce)
        order.append((at_ms, nonce))
        return node_id
