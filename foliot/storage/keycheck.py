"""The secret key's check value, stored once per database (issue 10).

Every node of a cluster must encrypt and sign with the same FOLIOT_SECRET_KEY. At its first
start a database is given the key's check value (`credentials.key_check`: an HMAC of a
constant under a key derived from the secret key, which tells nothing about the key); a node
whose key gives another value refuses to start (`foliot.server.check_secret_key`) instead of
failing to decrypt apps' signing secrets later, or signing task tokens the others reject.
"""

from __future__ import annotations

from typing import Protocol


class KeyCheckStore(Protocol):
    async def secret_key_check(self, value: str) -> str:
        """Store `value` as the database's key check value unless one is stored already; the
        stored value (`value` itself on a fresh database). Both stores: `run_sql.key_check_tx`."""
        ...
