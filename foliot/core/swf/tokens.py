"""Task tokens: self-describing and signed, so no table holds them and a token handed out
before a restart still answers its task after it.

A token names one started task: `(kind, runId, scheduledEventId, startedEventId)`, the run id
being unique in its region. It is `<payload>.<mac>`, both base64url without padding: the
payload is the compact JSON `[1, kind, runId, scheduledEventId, startedEventId]` (1 is the
format), the MAC the first 144 bits of HMAC-SHA256 under a key derived from the engine's secret
key over a purpose label, the region and the payload. So a token is bound to its region (the
request's credential scope) and cannot be forged or altered without the key.

Decoding is pure. A token that is not one of ours (malformed, truncated, altered, another
region's or another key's) is a `ValidationException` ("Invalid token"), as AWS answers a token
it cannot read; a well-formed token whose task is no longer open is the machine's business (it
answers `UnknownResourceFault`). A token stays under SWF's 1024-character limit: run ids are at
most 64 characters.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Final

import attrs

from .faults import Fault, validation

DECISION: Final = "decision"
ACTIVITY: Final = "activity"
FORMAT: Final = 1
MAX_LENGTH: Final = 1024  # SWF's taskToken shape
_MAC_BYTES: Final = 18
_PURPOSE: Final = b"foliot/swf/task-token"


@attrs.frozen
class TaskToken:
    """What a task token says: which task of which run, started by which event."""

    kind: str  # DECISION or ACTIVITY
    run_id: str
    scheduled_event_id: int
    started_event_id: int


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, region: str, payload: bytes) -> bytes:
    message = _PURPOSE + b"\x00" + region.encode() + b"\x00" + payload
    return hmac.new(key, message, hashlib.sha256).digest()[:_MAC_BYTES]


def encode(key: bytes, region: str, token: TaskToken) -> str:
    payload = json.dumps(
        [FORMAT, token.kind, token.run_id, token.scheduled_event_id, token.started_event_id],
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    return f"{_b64(payload)}.{_b64(_mac(key, region, payload))}"


def invalid() -> Fault:
    return validation("Invalid token")


def decode(key: bytes, region: str, text: str) -> TaskToken | Fault:
    """The task a token names, or `ValidationException` when the token is not one this engine
    made for this region."""
    if not text or len(text) > MAX_LENGTH or not text.isascii() or text.count(".") != 1:
        return invalid()
    body, mac = text.split(".")
    try:
        payload, given = _unb64(body), _unb64(mac)
    except (binascii.Error, ValueError):
        return invalid()
    if not hmac.compare_digest(given, _mac(key, region, payload)):
        return invalid()
    try:
        data = json.loads(payload)
    except ValueError:
        return invalid()
    if not (isinstance(data, list) and len(data) == 5 and data[0] == FORMAT):
        return invalid()
    _, kind, run_id, scheduled, started = data
    if kind not in (DECISION, ACTIVITY) or not isinstance(run_id, str) or not run_id:
        return invalid()
    if type(scheduled) is not int or type(started) is not int or not 0 < scheduled < started:
        return invalid()
    return TaskToken(kind, run_id, scheduled, started)
