"""Verify (and, for tests, make) the `foliot-signature` header of pushed tasks.

The same algorithm as the engine's `foliot.signing`; `tests/client/vectors.json`, generated
with the engine's module, is checked by both test suites so the two cannot drift apart.

Foliot signs `"{t}.{rawBody}"` with every live signing secret of the app and sends
`foliot-signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]`. A handler verifies with::

    from foliot_client.signing import verify_signature, SignatureError

    try:
        verify_signature(raw_body, request.headers["foliot-signature"], [MY_SECRET])
    except SignatureError:
        return 401

Verify over the raw bytes (re-serialised JSON changes them), accept any matching `v1=`,
and reject timestamps more than `tolerance` seconds from now (replay protection).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Iterable

HEADER = "foliot-signature"
DEFAULT_TOLERANCE = 300


class SignatureError(ValueError):
    """The signature header is missing, malformed, stale, or matches no secret."""


def compute(secret: str, timestamp: int, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(body: bytes, secrets: Iterable[str], timestamp: int | None = None) -> str:
    """The `foliot-signature` header value: one `v1=` per secret, newest first."""
    t = int(time.time()) if timestamp is None else timestamp
    parts = [f"t={t}"] + [f"v1={compute(s, t, body)}" for s in secrets]
    if len(parts) == 1:
        raise ValueError("at least one signing secret is needed")
    return ",".join(parts)


_MAX_HEADER = 4096
_MAX_TIMESTAMP_DIGITS = 12  # unix seconds until the year 33658
_V1 = re.compile(r"[0-9a-f]{64}")


def parse_header(header: str) -> tuple[int, list[str]]:
    """`(t, [v1, ...])` from a `foliot-signature` value; `SignatureError` for any malformed one."""
    if not isinstance(header, str) or len(header) > _MAX_HEADER or not header.isascii():
        raise SignatureError("malformed foliot-signature header")
    timestamp: int | None = None
    signatures: list[str] = []
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise SignatureError("malformed foliot-signature header")
        if key == "t":
            # ASCII digits only: `str.isdigit` takes "²", which `int()` refuses.
            if timestamp is not None or not 1 <= len(value) <= _MAX_TIMESTAMP_DIGITS or not value.isdigit():
                raise SignatureError("malformed timestamp in foliot-signature")
            timestamp = int(value)
        elif key == "v1":
            if _V1.fullmatch(value) is None:
                raise SignatureError("malformed v1 signature in foliot-signature")
            signatures.append(value)
    if timestamp is None or not signatures:
        raise SignatureError("foliot-signature needs t= and at least one v1=")
    return timestamp, signatures


def verify_signature(
    body: bytes,
    header: str | None,
    secrets: Iterable[str],
    *,
    tolerance: int = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> int:
    """Check a push's signature; returns its timestamp or raises `SignatureError`."""
    if not header:
        raise SignatureError("missing foliot-signature header")
    timestamp, signatures = parse_header(header)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureError("foliot-signature timestamp is outside the tolerance window")
    for secret in secrets:
        expected = compute(secret, timestamp, body)
        # Compare against every candidate: no early exit that would leak which one matched.
        matched = False
        for candidate in signatures:
            matched |= hmac.compare_digest(expected, candidate)
        if matched:
            return timestamp
    raise SignatureError("no signature matches")
