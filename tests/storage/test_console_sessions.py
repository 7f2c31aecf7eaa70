"""Console sessions in the store, both backends (issue 20, item 4): live until ended, idle past
the limit, past the absolute limit, or made under another admin token. Times are passed in."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from foliot.http.sessions import (
    TOUCH_MS,
    key_check,
    new_session,
    session_key,
    session_live,
    split_session_cookie,
)
from foliot.storage.base import Store
from foliot.storage.factory import open_store

from .test_contract import T0

KEY = session_key("adm_one")
IDLE = 30 * 60_000
MAX = 12 * 3_600_000


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


async def signed_in(store: Store, subject: str = "admin", at: int = T0, key: bytes = KEY) -> tuple[str, str]:
    record, cookie = new_session(key, subject, at, MAX)
    await store.add_console_session(record)
    parts = split_session_cookie(cookie)
    assert parts is not None and parts[0] == record.session_id
    return parts


async def live(store: Store, parts: tuple[str, str], now: int, key: bytes = KEY) -> bool:
    return session_live(await store.get_console_session(parts[0]), parts[1], key, now, IDLE)


async def test_a_session_ends_when_idle_and_activity_keeps_it(store: Store) -> None:
    parts = await signed_in(store)
    assert await live(store, parts, T0 + IDLE - 1)
    assert not await live(store, parts, T0 + IDLE)  # idle for the whole limit
    await store.touch_console_session(parts[0], T0 + IDLE - 1, T0 + IDLE - 1 - TOUCH_MS)
    assert await live(store, parts, T0 + 2 * IDLE - 2)
    # A touch within a minute of the last one writes nothing.
    await store.touch_console_session(parts[0], T0 + IDLE + 5, T0 + IDLE + 5 - TOUCH_MS)
    found = await store.get_console_session(parts[0])
    assert found is not None and found.last_seen == T0 + IDLE - 1
    # However active, the absolute limit ends it.
    for at in range(T0, T0 + MAX, IDLE // 2):
        await store.touch_console_session(parts[0], at, at - TOUCH_MS)
    assert await live(store, parts, T0 + MAX - 1)
    assert not await live(store, parts, T0 + MAX)


async def test_a_session_ended_stays_ended_and_a_wrong_secret_opens_nothing(store: Store) -> None:
    parts = await signed_in(store)
    other = await signed_in(store)
    assert not await live(store, (parts[0], other[1]), T0)  # another session's secret
    assert await store.end_console_session(parts[0], T0 + 1)
    assert not await store.end_console_session(parts[0], T0 + 2)  # once
    assert not await store.end_console_session("ses_none", T0 + 2)
    assert not await live(store, parts, T0 + 3)
    assert await live(store, other, T0 + 3)
    listed = await store.live_console_sessions(T0 + 3, T0 + 3 - IDLE, key_check(KEY), 100)
    assert [s.session_id for s in listed] == [other[0]]


async def test_a_new_admin_token_ends_every_session(store: Store) -> None:
    a, b = await signed_in(store), await signed_in(store, "op_1")
    new = session_key("adm_two")
    assert not await live(store, a, T0 + 1, key=new)  # refused under the new token at once
    assert await store.end_console_sessions(T0 + 1, other_key=key_check(new)) == 2
    assert not await live(store, a, T0 + 2) and not await live(store, b, T0 + 2)
    c = await signed_in(store, key=new, at=T0 + 3)
    assert await store.end_console_sessions(T0 + 4, other_key=key_check(new)) == 0
    assert await live(store, c, T0 + 5, key=new)
    # An operator token revoked: its sessions end with it.
    d = await signed_in(store, "op_2", at=T0 + 6, key=new)
    assert await store.end_console_sessions(T0 + 7, subject="op_2") == 1
    assert not await live(store, d, T0 + 8, key=new) and await live(store, c, T0 + 8, key=new)


async def test_sessions_past_their_limit_are_deleted_at_the_next_sign_in(store: Store) -> None:
    old = await signed_in(store)
    await signed_in(store, at=T0 + MAX)
    assert await store.get_console_session(old[0]) is None


def test_a_malformed_cookie_names_no_session() -> None:
    _, cookie = new_session(KEY, "admin", T0, MAX)
    assert split_session_cookie(cookie) is not None
    for bad in (
        None,
        "",
        "ses_x.y",
        cookie + "x",
        cookie.replace(".", ":"),
        "a" * 500,
        "ses_" + "0" * 24 + ".é" * 43,
    ):
        assert split_session_cookie(bad) is None, bad
