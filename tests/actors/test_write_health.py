"""The store's write health (issue 20, item 6): a commit the store refuses (here a real read-only
SQLite connection, `PRAGMA query_only`) marks it failing; a probe write or the next commit that
lands clears the mark. MockClock; the inline `:memory:` store writes on the Trio thread."""

from __future__ import annotations

import pytest
from trio.testing import MockClock

from foliot.core.errors import Refused, StorageUnavailable, UniqueViolation
from foliot.storage.health import WriteHealth, refuses_writes, space_failure

from .conftest import Env, advance

FLOW = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


def read_only(env: Env, on: bool) -> None:
    """Make the store's own writer connection refuse every write, as a read-only file system or
    database does (SQLite answers `attempt to write a readonly database`)."""
    env.engine.store._writer.execute(f"PRAGMA query_only={int(on)}")


async def test_a_refused_commit_marks_the_store_failing_until_a_write_lands(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(FLOW)
    health = env.engine.write_health
    await env.start("w")
    assert health.healthy
    read_only(env, True)
    with pytest.raises((Refused, StorageUnavailable)):
        await env.start("w")
    assert not health.healthy and "readonly" in (health.reason or "")
    since = health.failing_since
    await advance(5)
    assert not await health.recheck(env.engine.store, env.engine.clock.now())  # still refused
    assert health.failing_since == since and health.failures >= 2
    read_only(env, False)
    assert await health.recheck(env.engine.store, env.engine.clock.now())  # the probe landed
    assert health.healthy and health.reason is None
    # And without a probe: the next commit that lands clears it.
    read_only(env, True)
    with pytest.raises((Refused, StorageUnavailable)):
        await env.start("w")
    assert not health.healthy
    read_only(env, False)
    await env.start("w")
    assert health.healthy


def test_a_refused_unit_is_not_a_store_that_refuses_writes() -> None:
    assert refuses_writes(StorageUnavailable("disk full"))
    assert not refuses_writes(UniqueViolation("business_key", "taken"))
    assert not refuses_writes(ValueError("not the store's"))
    health = WriteHealth()
    health.failed(StorageUnavailable("x" * 1000), 5)
    assert health.failing_since == 5 and len(health.reason or "") <= 300


def test_a_write_refused_for_space_or_by_the_disk_is_told_apart() -> None:
    assert space_failure(StorageUnavailable("database or disk is full"))
    assert space_failure(StorageUnavailable("disk I/O error"))
    assert space_failure(StorageUnavailable("could not extend file: No space left on device"))
    assert not space_failure(StorageUnavailable("attempt to write a readonly database"))
    health = WriteHealth()
    health.failed(StorageUnavailable("attempt to write a readonly database"), 5)
    assert health.probe_may_clear
    health.failed(StorageUnavailable("database or disk is full"), 6)
    assert health.space_failure and health.probe_may_clear  # no file system watched (PostgreSQL)
    health.succeeded()
    assert health.healthy and not health.space_failure
