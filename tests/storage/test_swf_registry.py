"""The SWF registry's storage contract, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from foliot.storage.base import Store
from foliot.storage.factory import open_store
from foliot.storage.swf import (
    ACTIVITY,
    DEPRECATED,
    REGISTERED,
    WORKFLOW,
    Insert,
    SwfCredential,
    SwfDomain,
    SwfType,
)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


def domain(name: str, region: str = "us-east-1") -> SwfDomain:
    return SwfDomain(region, name, REGISTERED, None, "7", "[]", 1_000)


def wf(name: str, version: str, domain: str = "d", kind: str = WORKFLOW) -> SwfType:
    return SwfType("us-east-1", domain, kind, name, version, REGISTERED, None, "{}", 2_000)


async def test_credentials_round_trip_and_revoke(store: Store) -> None:
    await store.add_swf_credential(SwfCredential("FKIA1", "enc1", 10))
    await store.add_swf_credential(SwfCredential("FKIA2", "enc2", 20))
    assert await store.get_swf_credential("FKIA1") == SwfCredential("FKIA1", "enc1", 10)
    assert await store.revoke_swf_credential("FKIA1", 30)
    assert not await store.revoke_swf_credential("FKIA1", 40)  # once only
    assert not await store.revoke_swf_credential("nope", 40)
    assert (await store.get_swf_credential("FKIA1")) == SwfCredential("FKIA1", "enc1", 10, 30)
    assert [c.access_key_id for c in await store.list_swf_credentials()] == ["FKIA2"]


async def test_domains_unique_per_region_and_limited(store: Store) -> None:
    assert await store.swf_insert_domain(domain("a"), 2) is Insert.OK
    assert await store.swf_insert_domain(domain("a"), 2) is Insert.EXISTS
    assert await store.swf_insert_domain(domain("a", "eu-west-1"), 2) is Insert.OK
    assert await store.swf_insert_domain(domain("b"), 2) is Insert.OK
    assert await store.swf_insert_domain(domain("c"), 2) is Insert.LIMIT
    assert await store.swf_get_domain("us-east-1", "c") is None
    assert await store.swf_get_domain("eu-west-1", "b") is None
    assert await store.swf_get_domain("us-east-1", "a") == domain("a")


async def test_concurrent_registrations_respect_the_limit(store: Store) -> None:
    outcomes: list[Insert] = []

    async def one(i: int) -> None:
        outcomes.append(await store.swf_insert_domain(domain(f"d{i:02}"), 5))

    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(one, i)
    assert outcomes.count(Insert.OK) == 5
    assert outcomes.count(Insert.LIMIT) == 7


async def test_domain_status_is_guarded(store: Store) -> None:
    await store.swf_insert_domain(domain("a"), 10)
    assert await store.swf_set_domain_status("us-east-1", "a", DEPRECATED, 5_000)
    assert not await store.swf_set_domain_status("us-east-1", "a", DEPRECATED, 6_000)
    found = await store.swf_get_domain("us-east-1", "a")
    assert found is not None and (found.status, found.deprecated_at) == (DEPRECATED, 5_000)
    assert await store.swf_set_domain_status("us-east-1", "a", REGISTERED, 7_000)
    found = await store.swf_get_domain("us-east-1", "a")
    assert found is not None and (found.status, found.deprecated_at) == (REGISTERED, None)
    assert not await store.swf_set_domain_status("us-east-1", "zz", DEPRECATED, 1)


async def test_tags_compare_and_set(store: Store) -> None:
    await store.swf_insert_domain(domain("a"), 10)
    assert await store.swf_replace_domain_tags("us-east-1", "a", "[]", '[["k","v"]]')
    assert not await store.swf_replace_domain_tags("us-east-1", "a", "[]", '[["x","y"]]')
    found = await store.swf_get_domain("us-east-1", "a")
    assert found is not None and found.tags == '[["k","v"]]'


async def test_domains_list_in_byte_order_both_ways_with_keyset_pages(store: Store) -> None:
    names = ["b", "B", "a", "é", "a-1", "Z", "ab"]
    for name in names:
        await store.swf_insert_domain(domain(name), 100)
    await store.swf_insert_domain(domain("other", "eu-west-1"), 100)
    await store.swf_set_domain_status("us-east-1", "ab", DEPRECATED, 1)
    live = sorted(n for n in names if n != "ab")  # Python's order is code point = UTF-8 byte order
    got = [d.name for d in await store.swf_list_domains("us-east-1", REGISTERED, None, False, 100)]
    assert got == live
    back = [d.name for d in await store.swf_list_domains("us-east-1", REGISTERED, None, True, 100)]
    assert back == live[::-1]
    page = [d.name for d in await store.swf_list_domains("us-east-1", REGISTERED, "a", False, 2)]
    assert page == live[live.index("a") + 1 : live.index("a") + 3]
    page = [d.name for d in await store.swf_list_domains("us-east-1", REGISTERED, "b", True, 10)]
    assert page == live[: live.index("b")][::-1]
    assert [d.name for d in await store.swf_list_domains("us-east-1", DEPRECATED, None, False, 10)] == ["ab"]


async def test_types_need_a_registered_domain_and_respect_limits(store: Store) -> None:
    assert await store.swf_insert_type(wf("w", "1"), 10) is Insert.NO_DOMAIN
    await store.swf_insert_domain(domain("d"), 10)
    assert await store.swf_insert_type(wf("w", "1"), 2) is Insert.OK
    assert await store.swf_insert_type(wf("w", "1"), 2) is Insert.EXISTS
    assert await store.swf_insert_type(wf("w", "1", kind=ACTIVITY), 2) is Insert.OK  # kinds apart
    assert await store.swf_insert_type(wf("w", "2"), 2) is Insert.OK
    assert await store.swf_insert_type(wf("w", "3"), 2) is Insert.LIMIT
    await store.swf_set_domain_status("us-east-1", "d", DEPRECATED, 1)
    assert await store.swf_insert_type(wf("x", "1"), 10) is Insert.DOMAIN_DEPRECATED


async def test_types_status_delete_and_listing(store: Store) -> None:
    await store.swf_insert_domain(domain("d"), 10)
    for name, version in [("b", "1"), ("a", "2"), ("a", "10"), ("c", "1"), ("a", "1")]:
        await store.swf_insert_type(wf(name, version), 100)
    keys = [("a", "1"), ("a", "10"), ("a", "2"), ("b", "1"), ("c", "1")]
    listed = await store.swf_list_types("us-east-1", "d", WORKFLOW, REGISTERED, None, None, False, 100)
    assert [(t.name, t.version) for t in listed] == keys
    listed = await store.swf_list_types("us-east-1", "d", WORKFLOW, REGISTERED, None, ("a", "10"), False, 2)
    assert [(t.name, t.version) for t in listed] == keys[2:4]
    listed = await store.swf_list_types("us-east-1", "d", WORKFLOW, REGISTERED, None, ("b", "1"), True, 10)
    assert [(t.name, t.version) for t in listed] == keys[:3][::-1]
    listed = await store.swf_list_types("us-east-1", "d", WORKFLOW, REGISTERED, "a", None, True, 10)
    assert [(t.name, t.version) for t in listed] == keys[:3][::-1]
    assert await store.swf_list_types("us-east-1", "d", ACTIVITY, REGISTERED, None, None, False, 10) == []

    assert not await store.swf_delete_type("us-east-1", "d", WORKFLOW, "a", "1")  # registered
    assert await store.swf_set_type_status("us-east-1", "d", WORKFLOW, "a", "1", DEPRECATED, 9)
    assert not await store.swf_set_type_status("us-east-1", "d", WORKFLOW, "a", "1", DEPRECATED, 9)
    found = await store.swf_get_type("us-east-1", "d", WORKFLOW, "a", "1")
    assert found is not None and (found.status, found.deprecated_at) == (DEPRECATED, 9)
    deprecated = await store.swf_list_types("us-east-1", "d", WORKFLOW, DEPRECATED, None, None, False, 10)
    assert [(t.name, t.version) for t in deprecated] == [("a", "1")]
    assert await store.swf_delete_type("us-east-1", "d", WORKFLOW, "a", "1")
    assert await store.swf_get_type("us-east-1", "d", WORKFLOW, "a", "1") is None
    assert not await store.swf_delete_type("us-east-1", "d", WORKFLOW, "a", "1")
