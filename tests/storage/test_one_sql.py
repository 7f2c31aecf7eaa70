"""The run store is written once for both backends (issue 21): its methods live in
`SqlRunStore` and no backend redefines one; commits are observed through the store's hook."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import attrs
import pytest

from foliot.core.errors import StaleWrite
from foliot.storage.base import Store, UnitOfWork
from foliot.storage.factory import open_store
from foliot.storage.postgres import PostgresStore
from foliot.storage.run_sql import POSTGRES, SQLITE
from foliot.storage.run_store import SqlRunStore
from foliot.storage.sql import numbered
from foliot.storage.sqlite import SqliteStore

from .test_contract import make_run


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


def _shared_methods() -> list[str]:
    return [
        name
        for name, member in vars(SqlRunStore).items()
        if not name.startswith("_") and inspect.isfunction(member)
    ]


@pytest.mark.parametrize("backend", [SqliteStore, PostgresStore])
def test_no_backend_redefines_a_run_store_method(backend: type) -> None:
    shared = _shared_methods()
    assert len(shared) >= 36  # apps, keys, workflows, runs, retention, tasks, timers, console
    redefined = [name for name in shared if getattr(backend, name) is not getattr(SqlRunStore, name)]
    assert redefined == []


def test_each_backend_names_its_dialect() -> None:
    assert SqliteStore.dialect is SQLITE and PostgresStore.dialect is POSTGRES
    # PostgreSQL runs the shared statements numbered; a numbered one comes back as it was.
    assert numbered(POSTGRES.prune_idempotency).count("$") == 2
    assert numbered("a = $1 AND b = $2") == "a = $1 AND b = $2"


@attrs.define
class Seen:
    started: int = 0
    ended: list[tuple[str, bool]] = attrs.Factory(list)

    def commit_started(self) -> float:
        self.started += 1
        return 7.0

    def commit_ended(self, unit: UnitOfWork, started: float, committed: bool) -> None:
        assert started == 7.0
        self.ended.append((unit.run.run_id, committed))


async def test_the_commit_observer_is_told_of_each_commit_and_can_be_replaced(store: Store) -> None:
    first, second = Seen(), Seen()
    store.observe_commits(first)
    await store.commit(UnitOfWork(make_run("a"), None))
    with pytest.raises(StaleWrite):
        await store.commit(UnitOfWork(attrs.evolve(make_run("a"), seq=3), 2))
    assert first.started == 2 and first.ended == [("a", True), ("a", False)]
    store.observe_commits(second)  # replaces the first: nothing is counted twice
    await store.commit(UnitOfWork(make_run("b"), None))
    store.observe_commits(None)
    await store.commit(UnitOfWork(make_run("c"), None))
    assert first.started == 2 and second.started == 1 and second.ended == [("b", True)]
    assert (await store.get_run("c")) is not None
