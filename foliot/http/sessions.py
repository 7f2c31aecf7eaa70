"""Console sessions and CSRF tokens: pure functions over an HMAC key and session records.

A session lives in the database (`foliot.storage.sessions`); its cookie is
`<sessionId>.<secret>`, the secret 256 random bits of which only the SHA-256 is stored. A
session is live while it has not been ended (signed out, or ended by an operator), it was
seen within the idle limit (FOLIOT_CONSOLE_IDLE, 30 min) and its absolute limit has not passed
(FOLIOT_CONSOLE_SESSION_MAX, 12 h), and it was made under the admin token in use: each row
holds that token's check value (`key_check`), so a new admin token ends every session (and the
server ends them in the table at start-up). An operator token's session is also checked
against the token on each request, so revoking the token ends its sessions at once. Activity
is written at most once a minute (`TOUCH_MS`): the idle limit is kept to within that.

The sign-in form's cookie is still a stateless `<payload>.<mac>` (`make_cookie`, purpose
`login`), and the CSRF token of a form is a MAC of the session cookie: a page from another
origin can neither read it nor forge it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from typing import Final

from ..core.credentials import hash_secret
from ..storage.sessions import ConsoleSessionRecord

LOGIN_MS: Final = 15 * 60 * 1000
TOUCH_MS: Final = 60_000  # activity is recorded at most this often
SESSION_PREFIX: Final = "ses_"
_COOKIE: Final = re.compile(r"(ses_[0-9a-f]{24})\.([A-Za-z0-9_-]{43})")


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


def key_check(key: bytes) -> str:
    """The check value of a session key (of the admin token): equal keys, equal values."""
    return _mac(key, "session-key-check", "")


def new_session(key: bytes, subject: str, now: int, lifetime_ms: int) -> tuple[ConsoleSessionRecord, str]:
    """A new session for `subject` and the cookie value that names it (shown once)."""
    session_id = SESSION_PREFIX + secrets.token_hex(12)
    secret = secrets.token_urlsafe(32)
    record = ConsoleSessionRecord(
        session_id, hash_secret(secret), subject, key_check(key), now, now, now + lifetime_ms
    )
    return record, f"{session_id}.{secret}"


def split_session_cookie(value: str | None) -> tuple[str, str] | None:
    """`(session id, secret)` of a well-formed session cookie, else None."""
    found = _COOKIE.fullmatch(value) if value and len(value) < 128 else None
    return None if found is None else (found.group(1), found.group(2))


def idle_ends(record: ConsoleSessionRecord, idle_ms: int) -> int:
    """When the session ends if nothing more is seen of it."""
    return min(record.last_seen + idle_ms, record.expires_at)


def session_live(
    record: ConsoleSessionRecord | None, secret: str, key: bytes, now: int, idle_ms: int
) -> bool:
    """Whether `record` is a session the cookie's `secret` opens, live at `now`."""
    if record is None or record.revoked_at is not None or now >= idle_ends(record, idle_ms):
        return False
    same_key = hmac.compare_digest(record.key_check, key_check(key))
    return same_key and hmac.compare_digest(record.secret_hash, hash_secret(secret))
