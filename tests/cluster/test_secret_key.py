"""A node whose secret key is not the database's refuses to start (both stores)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from cryptography.fernet import Fernet

from foliot.core.config import Settings
from foliot.core.credentials import Vault
from foliot.server import KeyMismatch, Running, check_secret_key, serve
from foliot.storage.factory import open_store

from ..conftest import make_settings


def test_the_check_value_depends_on_the_key_only() -> None:
    one, other = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    assert Vault(one).key_check() == Vault(one).key_check()
    assert Vault(one).key_check() != Vault(other).key_check()
    assert one not in Vault(one).key_check()


async def test_the_first_key_is_kept_and_another_is_refused(database_url: str) -> None:
    first, second = Vault(Fernet.generate_key().decode()), Vault(Fernet.generate_key().decode())
    async with open_store(database_url) as store:
        await check_secret_key(store, first)  # a fresh database takes the first key's value
        await check_secret_key(store, first)  # the same key again: fine
        with pytest.raises(KeyMismatch, match="same FOLIOT_SECRET_KEY"):
            await check_secret_key(store, second)
        assert await store.secret_key_check(second.key_check()) == first.key_check()  # unchanged


async def _start_and_stop(settings: Settings) -> None:
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(serve, settings)
        async with httpx.AsyncClient(base_url=running.url) as client:
            assert (await client.get("/healthz")).status_code == 200
        nursery.cancel_scope.cancel()


async def test_a_node_with_another_key_does_not_start(tmp_path: Path, database_url: str) -> None:
    key = Fernet.generate_key().decode()
    with trio.fail_after(30):
        await _start_and_stop(make_settings(tmp_path / "a", database_url=database_url, secret_key=key))
        # Restarted (from another data directory) with the same key: it starts.
        await _start_and_stop(make_settings(tmp_path / "b", database_url=database_url, secret_key=key))
        # With no FOLIOT_SECRET_KEY (so a key file of its own in its data directory): refused.
        with pytest.raises(KeyMismatch, match="refusing to start"):
            await serve(make_settings(tmp_path / "c", database_url=database_url))
