"""SWF access keys: minted by the admin (stored, secret encrypted with FOLIOT_SECRET_KEY) or
preset with `FOLIOT_SWF_CREDENTIALS=id:secret[,id:secret]` (kept in memory, never stored).

SigV4 needs the secret itself (the signature is an HMAC keyed by it), so a stored secret is
encrypted, not hashed, exactly as app signing secrets are. Lookups are cached for a second; a
revocation on this node drops the entry at once, on other nodes within the cache bound.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping

import attrs

from ...actors.cache import TtlCache
from ...core.credentials import Vault
from ...core.swf import sigv4
from ...core.swf.sigv4 import Authorization
from ...storage.swf import SwfCredential, SwfRegistryStore

KEY_PREFIX = "FKIA"
MAX_SIGNING_KEYS = 4096  # derived keys kept (one per key, day and region in use); cleared when full
_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def new_access_key() -> tuple[str, str]:
    """(accessKeyId, secretAccessKey), shaped like AWS's: 20 upper-case characters, 40 of secret."""
    key_id = KEY_PREFIX + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))
    return key_id, secrets.token_urlsafe(30)


@attrs.define
class SwfKeys:
    store: SwfRegistryStore
    vault: Vault
    now: Callable[[], int]
    presets: Mapping[str, str] = attrs.Factory(dict)
    cache: TtlCache[str, SwfCredential | None] = attrs.field(init=False)
    signing_keys: dict[tuple[str, str, str, str], bytes] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        self.cache = TtlCache(self.now)

    async def secret(self, access_key_id: str) -> str | None:
        """The secret of a live key, or None when the key is unknown or revoked."""
        preset = self.presets.get(access_key_id)
        if preset is not None:
            return preset
        found = await self.cache.get(access_key_id, lambda: self.store.get_swf_credential(access_key_id))
        if found is None or found.revoked_at is not None:
            return None
        return self.vault.decrypt(found.secret_enc)

    def signing_key(self, secret: str, auth: Authorization) -> bytes:
        """SigV4's derived key for `secret` and `auth`'s scope (four HMACs), kept: it changes
        with the day, region or service only. Keyed by the secret itself, so a revoked key
        (refused before this is asked) or a changed secret never reuses an entry."""
        scope = (secret, auth.date, auth.region, auth.service)
        key = self.signing_keys.get(scope)
        if key is None:
            if len(self.signing_keys) >= MAX_SIGNING_KEYS:
                self.signing_keys.clear()
            key = self.signing_keys[scope] = sigv4.signing_key(secret, auth.date, auth.region, auth.service)
        return key

    async def mint(self) -> tuple[SwfCredential, str]:
        key_id, secret = new_access_key()
        record = SwfCredential(key_id, self.vault.encrypt(secret), self.now())
        await self.store.add_swf_credential(record)
        self.cache.invalidate(key_id)
        return record, secret

    async def revoke(self, access_key_id: str) -> bool:
        done = await self.store.revoke_swf_credential(access_key_id, self.now())
        self.cache.invalidate(access_key_id)
        return done
