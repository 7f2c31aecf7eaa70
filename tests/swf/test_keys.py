"""SWF access keys over a real store: encrypted at rest, presets, revocation within the cache
bound on another node (time is a plain variable, never the wall clock)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from cryptography.fernet import Fernet

from foliot.core.config import Settings, swf_credentials
from foliot.core.credentials import Vault
from foliot.kinds.swf.keys import SwfKeys
from foliot.storage.base import Store
from foliot.storage.factory import open_store


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


async def test_revoked_on_one_node_refused_on_another_within_the_cache_bound(store: Store) -> None:
    vault = Vault(Fernet.generate_key().decode())
    clock = {"now": 1_000_000}
    here = SwfKeys(store, vault, lambda: clock["now"])
    there = SwfKeys(store, vault, lambda: clock["now"])  # another node: its own cache, same database
    record, secret = await here.mint()
    assert secret not in record.secret_enc
    assert await there.secret(record.access_key_id) == secret  # now cached over there
    assert await here.revoke(record.access_key_id)
    assert await here.secret(record.access_key_id) is None  # this node: at once
    clock["now"] += 500
    assert await there.secret(record.access_key_id) == secret  # the other: until its entry expires
    clock["now"] += 501
    assert await there.secret(record.access_key_id) is None
    assert not await here.revoke(record.access_key_id)
    assert await here.secret("FKIANEVERMINTED00000") is None


async def test_presets_are_never_stored(store: Store) -> None:
    vault = Vault(Fernet.generate_key().decode())
    keys = SwfKeys(store, vault, lambda: 0, {"FKIAPRESET": "s3cret"})
    assert await keys.secret("FKIAPRESET") == "s3cret"
    assert await store.get_swf_credential("FKIAPRESET") is None
    assert await store.list_swf_credentials() == []


def test_preset_parsing() -> None:
    assert swf_credentials(None) == ()
    assert swf_credentials(" ") == ()
    assert swf_credentials("a:b, c:d:e") == (("a", "b"), ("c", "d:e"))
    for bad in ("a", "a:", ":b", "a:b,,c:d"):
        with pytest.raises(SystemExit, match=r"FOLIOT_SWF_CREDENTIALS entry \d is not id:secret$"):
            swf_credentials(bad)
    settings = Settings.from_env({"FOLIOT_SWF_CREDENTIALS": "id1:secret1"})
    assert settings.swf_credentials == (("id1", "secret1"),)
    assert "secret1" not in repr(settings)
