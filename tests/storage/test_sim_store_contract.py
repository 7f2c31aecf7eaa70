"""The simulation's store (tests/sim/store.py `FakeStore`) keeps the storage contract, so that
the simulation cannot drift from the real stores (issue 38).

- The contract tests of `test_contract.py` whose methods the simulation uses run against it
  too, unchanged (`test_the_sim_store_keeps_the_contract`). Left out: what it does not hold
  (apps, keys, workflow registration, the console's listings, dry-run groups, migrations) and
  retention of closed runs (it keeps them all: a simulation is shorter than the retention).
- The methods the simulation relies on that those tests do not reach (concurrency slots and
  their queues, debounce keys, the open-run count, open tasks, the open run of a business key)
  are checked here once, over the sim's store and both real backends alike.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from foliot.core.errors import UniqueViolation
from foliot.core.workflow.model import Event, TaskRow
from foliot.storage.base import (
    DEBOUNCE_TAKEN,
    SLOT_TAKEN,
    DebounceChange,
    DebounceRow,
    QueuedKey,
    SlotChange,
    UnitOfWork,
)
from foliot.storage.factory import open_store
from tests.sim.store import FakeStore

from . import test_contract as contract
from .test_contract import T0, make_run

SHARED: list[Callable[[Any], Awaitable[None]]] = [
    contract.test_commit_is_atomic_and_guarded,
    contract.test_business_keys_are_unique_among_open_runs,
    contract.test_idempotency_records,
    contract.test_idempotency_records_expire,
    contract.test_children_are_paged_by_keyset,
    contract.test_timer_paging_is_keyset,
    contract.test_signal_ids_are_unique_per_run_and_outlive_closing,
    contract.test_rate_buckets_are_taken_in_turn_and_idle_ones_pruned_oldest_first,
]


@pytest.mark.parametrize("test", SHARED, ids=[t.__name__.removeprefix("test_") for t in SHARED])
async def test_the_sim_store_keeps_the_contract(test: Callable[[Any], Awaitable[None]]) -> None:
    await test(FakeStore(commit_delay=0))


@pytest.fixture(params=["sim", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """The sim's store and the real ones, for the methods the simulation relies on."""
    if request.param == "sim":
        yield FakeStore(commit_delay=0)
        return
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'foliot.db'}"
    else:
        url = (
            os.environ.get("FOLIOT_TEST_DATABASE_URL")
            or request.getfixturevalue("pg_cluster").migrated_database()
        )
    async with open_store(url) as store:
        yield store


def keyed(run_id: str, status: str, key: str = "wf/a", created: int = T0, **kw: Any) -> Any:
    return make_run(run_id, status=status, created=created, concurrency_key=key, **kw)


async def test_slots_are_taken_in_turn_and_queued_runs_wait_in_order(any_store: Any) -> None:
    """An admission takes a slot only while fewer than its limit are held and no older run waits
    (else `UniqueViolation(SLOT_TAKEN)`, or its `otherwise` written and `commit` False); the
    queue is read oldest first (`queue_heads`, `queue_room`, `queued_keys`); leaving frees the
    slot and the place."""
    store = any_store
    admit = SlotChange("admit", "wf/a", 1)
    assert await store.commit(UnitOfWork(keyed("r1", "waiting"), None, slot=admit)) is not False
    queued = UnitOfWork(keyed("r2", "queued", created=T0 + 1), None, slot=SlotChange("queue", "wf/a"))
    second = UnitOfWork(keyed("r2", "waiting", created=T0 + 1), None, slot=admit, otherwise=queued)
    assert await store.commit(second) is False  # the slot is held: queued instead
    assert (await store.get_run("r2")).status == "queued"  # type: ignore[union-attr]
    await store.commit(
        UnitOfWork(keyed("r3", "queued", created=T0 + 2), None, slot=SlotChange("queue", "wf/a"))
    )
    assert await store.queue_heads("app", "wf/a", 5) == ["r2", "r3"]
    assert await store.queue_room("app", "wf/a", 5) == (1, [("r2", 1), ("r3", 1)])
    assert await store.queued_keys(None, 10) == [QueuedKey("app", "wf/a", "r2", 1, T0 + 1, 1)]
    assert await store.queue_room("app", "wf/none", 5) == (0, [])
    # r3 may not overtake r2, even with a slot free.
    left = keyed("r1", "completed", seq=1, closed_at=T0 + 5)
    await store.commit(UnitOfWork(left, 0, slot=SlotChange("leave", "wf/a")))
    assert await store.queue_room("app", "wf/a", 5) == (0, [("r2", 1), ("r3", 1)])
    with pytest.raises(UniqueViolation) as info:
        await store.commit(UnitOfWork(keyed("r3", "waiting", created=T0 + 2, seq=1), 0, slot=admit))
    assert info.value.constraint == SLOT_TAKEN
    await store.commit(UnitOfWork(keyed("r2", "waiting", created=T0 + 1, seq=1), 0, slot=admit))
    assert await store.queue_heads("app", "wf/a", 5) == ["r3"]
    assert await store.queue_room("app", "wf/a", 5) == (1, [("r3", 1)])
    with pytest.raises(UniqueViolation):  # the one slot is r2's
        await store.commit(UnitOfWork(keyed("r3", "waiting", created=T0 + 2, seq=1), 0, slot=admit))
    assert await store.count_open_runs() == {"waiting": 1, "queued": 1}


async def test_debounce_keys_are_claimed_once_extended_and_released(any_store: Any) -> None:
    store = any_store
    claim = DebounceChange("claim", "wf", "k", "leading", T0 + 100)
    await store.commit(UnitOfWork(make_run("r1", status="running"), None, debounce=claim))
    assert await store.get_debounce("app", "wf", "k") == DebounceRow("r1", "leading", T0 + 100)
    with pytest.raises(UniqueViolation) as info:
        await store.commit(UnitOfWork(make_run("r2", status="running"), None, debounce=claim))
    assert info.value.constraint == DEBOUNCE_TAKEN
    assert await store.get_run("r2") is None
    assert await store.extend_debounce("app", "wf", "k", "r1", T0 + 200)
    assert not await store.extend_debounce("app", "wf", "k", "other", T0 + 300)
    assert (await store.get_debounce("app", "wf", "k")).until == T0 + 200  # type: ignore[union-attr]
    assert not await store.drop_debounce("app", "wf", "k", "r1", T0 + 150)  # its window is on
    assert await store.drop_debounce("app", "wf", "k", "r1", T0 + 200)
    assert await store.get_debounce("app", "wf", "k") is None
    trailing = DebounceChange("claim", "wf", "t", "trailing", T0 + 50)
    await store.commit(UnitOfWork(make_run("r3", status="running"), None, debounce=trailing))
    assert not await store.drop_debounce("app", "wf", "t", "r3", T0 + 999)  # only a leading one
    begun = make_run("r3", status="waiting", seq=1)
    await store.commit(UnitOfWork(begun, 0, debounce=DebounceChange("release", "wf", "t")))
    assert await store.get_debounce("app", "wf", "t") is None


async def test_open_tasks_and_the_open_run_of_a_business_key(any_store: Any) -> None:
    store = any_store
    task = TaskRow("tok", "r1", "app", 1, "t", 1, "q", "open", None, None, T0)
    first = make_run("r1", bk="b", seq=1)
    await store.commit(UnitOfWork(first, None, (Event(1, T0, 1, "run_started"),), (task,)))
    assert [t.token for t in await store.open_tasks()] == ["tok"]
    assert await store.get_task("tok") == task
    assert (await store.find_open_run("app", "wf", "b")).run_id == "r1"  # type: ignore[union-attr]
    closed = make_run("r1", bk="b", status="failed", seq=2, closed_at=T0 + 1)
    done = attrs.evolve(task, status="closed", close_reason="cancelled")
    await store.commit(UnitOfWork(closed, 1, (Event(2, T0, 1, "run_failed"),), (done,)))
    assert await store.open_tasks() == []
    assert await store.find_open_run("app", "wf", "b") is None
    assert await store.count_open_runs() == {}
