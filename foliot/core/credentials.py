"""Credentials at rest: API keys stored as SHA-256 hashes, signing secrets encrypted (Fernet).

The encryption key comes from `FOLIOT_SECRET_KEY` or a key file generated (0600) in the data
directory on first start. Every node sharing a database must share that key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

KEY_PREFIX = "fk_"
OPERATOR_PREFIX = "fo_"
SECRET_PREFIX = "whsec_"


def new_id(prefix: str, nbytes: int = 8) -> str:
    return f"{prefix}{secrets.token_hex(nbytes)}"


def new_api_key() -> tuple[str, str, str]:
    """(key_id, full key to show once, hash to store). The key is `fk_<keyId>.<secret>`."""
    key_id = new_id("key_")
    secret = secrets.token_urlsafe(32)
    return key_id, f"{KEY_PREFIX}{key_id}.{secret}", hash_secret(secret)


def split_api_key(key: str) -> tuple[str, str] | None:
    if not key.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = key[len(KEY_PREFIX) :].partition(".")
    if not sep or not key_id or not secret:
        return None
    return key_id, secret


def new_operator_token() -> tuple[str, str, str]:
    """(token_id, full token to show once, hash to store). The token is `fo_<tokenId>.<secret>`."""
    token_id = new_id("op_")
    secret = secrets.token_urlsafe(32)
    return token_id, f"{OPERATOR_PREFIX}{token_id}.{secret}", hash_secret(secret)


def split_operator_token(token: str) -> tuple[str, str] | None:
    if not token.startswith(OPERATOR_PREFIX):
        return None
    token_id, sep, secret = token[len(OPERATOR_PREFIX) :].partition(".")
    if not sep or not token_id or not secret or len(token_id) > 64:
        return None
    return token_id, secret


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def new_signing_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def file_secret(path: Path, make: Callable[[], str]) -> str:
    """Read a secret file, creating it with mode 0600 when missing."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value: str = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


class Vault:
    """Encrypts signing secrets for storage."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode())
        self._key = key.encode()

    def derive_key(self, purpose: str) -> bytes:
        """A key for one purpose (e.g. signing SWF task tokens), derived from the secret key
        with HMAC-SHA256, so no purpose ever uses the secret key itself."""
        return hmac.new(self._key, b"foliot/derive/" + purpose.encode(), hashlib.sha256).digest()

    def key_check(self) -> str:
        """A value that tells whether two nodes hold the same secret key, and nothing about it
        (stored by the database at its first start: `foliot.storage.keycheck`)."""
        return hmac.new(self.derive_key("key-check"), b"foliot secret key check", hashlib.sha256).hexdigest()

    @classmethod
    def from_data_dir(cls, data_dir: str, explicit: str | None) -> Vault:
        """The vault of FOLIOT_SECRET_KEY, or of the data directory's key file; an invalid key
        is a configuration error (`SystemExit` with the fix: `foliot.startup`)."""
        path = Path(data_dir) / "secret.key"
        key = explicit or file_secret(path, lambda: Fernet.generate_key().decode())
        try:
            return cls(key)
        except ValueError:
            where = "FOLIOT_SECRET_KEY" if explicit else f"the key file {path}"
            raise SystemExit(
                f"{where} is not a valid secret key (it must be 32 url-safe base64-encoded bytes);"
                " generate one with: python -c 'from cryptography.fernet import Fernet;"
                " print(Fernet.generate_key().decode())' (every node sharing a database needs the same)"
            ) from None

    def encrypt(self, value: str) -> str:
        return self._fernet.encrypt(value.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken as exc:
            raise ValueError("signing secret cannot be decrypted with this FOLIOT_SECRET_KEY") from exc
