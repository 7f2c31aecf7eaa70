"""Console sessions and CSRF tokens: pure functions over an HMAC key, no storage.

A session cookie is `<payload>.<mac>` where the payload names the subject (`admin`, or an
operator token's id) and the expiry; the key is derived from the admin token, so changing the
admin token ends every session. An operator token's session is checked against storage on each
request, so revoking the token ends its sessions at once. The CSRF token of a form is a MAC of
the session cookie: a page from another origin can neither read it nor forge it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Final

SESSION_MS: Final = 12 * 3600 * 1000
LOGIN_MS: Final = 15 * 60 * 1000


def session_key(admin_token: str) -> bytes:
    return hmac.new(admin_token.encode(), b"foliot-console-session-v1", hashlib.sha256).digest()


def _mac(key: bytes, purpose: str, value: str) -> str:
    return hmac.new(key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def make_cookie(key: bytes, subject: str, expires: int, purpose: str = "session") -> str:
    payload = base64.urlsafe_b64encode(json.dumps([subject, expires]).encode()).decode().rstrip("=")
    return f"{payload}.{_mac(key, purpose, payload)}"


def read_cookie(key: bytes, value: str | None, now: int, purpose: str = "session") -> str | None:
    """The subject of a cookie this key made for `purpose` and that has not expired, else None."""
    if not value or len(value) > 512:
        return None
    payload, _, mac = value.partition(".")
    if not hmac.compare_digest(mac.encode(), _mac(key, purpose, payload).encode()):
        return None
    try:
        subject, expires = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, TypeError):
        return None
    if not isinstance(subject, str) or type(expires) is not int or expires <= now:
        return None
    return subject


def csrf_token(key: bytes, cookie: str) -> str:
    return _mac(key, "csrf", cookie)


def csrf_ok(key: bytes, cookie: str | None, sent: str | None) -> bool:
    if not cookie or not sent:
        return False
    return hmac.compare_digest(sent.encode(), csrf_token(key, cookie).encode())
