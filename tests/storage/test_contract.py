"""One contract, both backends: what the engine relies on from a Store."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio

from foliot.core.errors import StaleWrite, UniqueViolation
from foliot.core.workflow.model import Event, ParentRef, Run, TaskRow, Timer, run_to_dict
from foliot.storage.base import (
    SIGNAL_ID_UNIQUE,
    ApiKeyRecord,
    AppRecord,
    IdempotencyRecord,
    RunFilter,
    SecretRecord,
    Store,
    UnitOfWork,
    json_dumps,
)
from foliot.storage.factory import open_store

T0 = 1_800_000_000_000


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


def make_run(
    run_id: str, *, status: str = "waiting", bk: str | None = None, created: int = T0, **kw: object
) -> Run:
    return Run(
        run_id=run_id,
        app="app",
        workflow="wf",
        version=1,
        status=status,
        input={"i": 1},
        state={},
        generation=1,
        created_at=created,
        updated_at=created,
        trace_id="t",
        business_key=bk,
        **kw,  # type: ignore[arg-type]
    )


async def seed_app(store: Store) -> None:
    await store.create_app(
        AppRecord("app", "http://h", None, T0, T0),
        ApiKeyRecord("k1", "app", "hash", T0),
        SecretRecord("s1", "app", "enc", T0, None),
    )


async def test_migrations_are_idempotent(store: Store) -> None:
    await store.migrate()
    await store.migrate()
    await store.ping()


async def test_apps_keys_and_secrets(store: Store) -> None:
    await seed_app(store)
    assert not await store.create_app(
        AppRecord("app", "http://other", None, T0, T0),
        ApiKeyRecord("k2", "app", "h", T0),
        SecretRecord("s2", "app", "e", T0, None),
    )
    assert await store.get_api_key("k2") is None  # the refused create stored nothing
    record, created = await store.put_app("app", "http://new", "d", T0 + 1)
    assert not created and record.handler_base_url == "http://new" and record.created_at == T0
    assert (await store.get_app("app")) == record
    await store.add_api_key(ApiKeyRecord("k3", "app", "h3", T0 + 2))
    assert [k.key_id for k in await store.list_api_keys("app")] == ["k1", "k3"]
    assert await store.revoke_api_key("app", "k1", T0 + 3)
    assert not await store.revoke_api_key("app", "k1", T0 + 4)
    assert (await store.get_api_key("k1")).revoked_at == T0 + 3  # type: ignore[union-attr]
    assert [k.key_id for k in await store.list_api_keys("app")] == ["k3"]
    await store.rotate_signing_secret(SecretRecord("s2", "app", "enc2", T0 + 5, None), grace_until=T0 + 100)
    secrets = await store.list_signing_secrets("app")
    assert [(s.secret_id, s.expires_at) for s in secrets] == [("s1", T0 + 100), ("s2", None)]
    await store.rotate_signing_secret(SecretRecord("s3", "app", "enc3", T0 + 6, None), grace_until=T0 + 50)
    secrets = await store.list_signing_secrets("app")
    assert [(s.secret_id, s.expires_at) for s in secrets] == [("s1", T0 + 50), ("s2", T0 + 50), ("s3", None)]


async def test_workflow_versions(store: Store) -> None:
    a, created = await store.add_workflow_version("app", "wf", '{"v":1}', T0)
    assert (a.version, created) == (1, True)
    same, created = await store.add_workflow_version("app", "wf", '{"v":1}', T0 + 1)
    assert (same.version, created) == (1, False)
    b, created = await store.add_workflow_version("app", "wf", '{"v":2}', T0 + 2)
    assert (b.version, created) == (2, True)
    back, created = await store.add_workflow_version("app", "wf", '{"v":1}', T0 + 3)
    assert (back.version, created) == (3, True)  # identical to an older one is still new
    await store.add_workflow_version("app", "other", "{}", T0)
    assert (await store.get_workflow("app", "wf", None)).version == 3  # type: ignore[union-attr]
    assert (await store.get_workflow("app", "wf", 2)).document == '{"v":2}'  # type: ignore[union-attr]
    assert await store.get_workflow("app", "wf", 9) is None
    assert [(w.name, w.version) for w in await store.list_workflows("app", 10)] == [("other", 1), ("wf", 3)]
    assert [w.name for w in await store.list_workflows("app", 1)] == ["other"]
    assert [(w.name, w.version) for w in await store.list_workflows("app", 10, "other")] == [("wf", 3)]


async def test_concurrent_registrations_get_distinct_versions(store: Store) -> None:
    versions: list[int] = []

    async def register(i: int) -> None:
        record, _ = await store.add_workflow_version("app", "race", f'{{"i":{i}}}', T0)
        versions.append(record.version)

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(register, i)
    assert sorted(versions) == list(range(1, 9))


async def test_commit_is_atomic_and_guarded(store: Store) -> None:
    timer = Timer("sleep", T0 + 10, "1:s")
    run = make_run("r1", status="sleeping", seq=2, timer=timer, deadline=T0 + 99)
    events = (
        Event(1, T0, 1, "run_started"),
        Event(2, T0, 1, "sleep_started", "s", None, {"wakeAt": T0 + 10}),
    )
    task = TaskRow("tok", "r1", "app", 1, "t", 1, None, "open", None, T0 + 5, T0)
    await store.commit(UnitOfWork(run, None, events, (task,)))
    assert await store.get_run("r1") == run
    assert [e.type for e in await store.list_events("r1", 0, 10)] == ["run_started", "sleep_started"]
    assert (await store.list_events("r1", 1, 10))[0].data == {"wakeAt": T0 + 10}
    due = await store.timers_due_before(T0 + 1000, 10)
    assert [(t.actor_kind, t.slot, t.kind, t.due_at) for t in due] == [
        ("run", "step", "sleep", T0 + 10),
        ("run", "run", "run_timeout", T0 + 99),
    ]
    assert [t.token for t in await store.open_tasks()] == ["tok"]

    # A stale writer (expected seq 1) is refused and changes nothing.
    stale = attrs.evolve(run, status="completed", seq=3)
    with pytest.raises(StaleWrite):
        await store.commit(UnitOfWork(stale, 1, (Event(3, T0, 1, "x"),)))
    assert (await store.get_run("r1")) == run
    assert len(await store.list_events("r1", 0, 10)) == 2

    # A failing unit (duplicate event seq) leaves no partial change.
    bad = attrs.evolve(run, status="completed", seq=3)
    with pytest.raises(UniqueViolation):
        await store.commit(UnitOfWork(bad, 2, (Event(2, T0, 1, "dup"),)))
    assert (await store.get_run("r1")) == run

    closed = attrs.evolve(run, status="completed", seq=3, timer=None, closed_at=T0 + 10)
    done = attrs.evolve(task, status="closed", close_reason="answered")
    await store.commit(UnitOfWork(closed, 2, (Event(3, T0, 1, "run_completed"),), (done,)))
    assert await store.timers_due_before(T0 + 1000, 10) == []  # a closed run needs no timers
    assert await store.open_tasks() == []
    assert (await store.get_task("tok")).close_reason == "answered"  # type: ignore[union-attr]


async def test_business_keys_are_unique_among_open_runs(store: Store) -> None:
    await store.commit(UnitOfWork(make_run("a", bk="k"), None))
    with pytest.raises(UniqueViolation) as info:
        await store.commit(UnitOfWork(make_run("b", bk="k"), None))
    assert info.value.constraint == "business_key"
    assert await store.get_run("b") is None
    assert (await store.find_open_run("app", "wf", "k")).run_id == "a"  # type: ignore[union-attr]
    await store.commit(UnitOfWork(make_run("a", bk="k", status="completed", seq=1), 0))
    assert await store.find_open_run("app", "wf", "k") is None
    await store.commit(UnitOfWork(make_run("b", bk="k"), None))
    # Reopening the first (a rewind) now collides with the second.
    with pytest.raises(UniqueViolation):
        await store.commit(UnitOfWork(make_run("a", bk="k", status="running", seq=2), 1))


async def test_idempotency_records(store: Store) -> None:
    record = IdempotencyRecord("app", "key-1", "h", "r1", '{"runId":"r1"}', T0)
    await store.commit(UnitOfWork(make_run("r1"), None, idempotency=record))
    assert await store.get_idempotency("app", "key-1") == record
    with pytest.raises(UniqueViolation) as info:
        await store.commit(UnitOfWork(make_run("r2"), None, idempotency=attrs.evolve(record, run_id="r2")))
    assert info.value.constraint == "idempotency"
    assert await store.get_run("r2") is None


async def test_list_runs_filters_and_pages(store: Store) -> None:
    for i in range(7):
        status = "waiting" if i % 2 else "completed"
        await store.commit(UnitOfWork(make_run(f"r{i}", status=status, created=T0 + i // 2), None))
    pages, after = [], None
    while True:
        page = await store.list_runs(RunFilter("app"), 3, after)
        pages.append([r.run_id for r in page])
        if len(page) < 3:
            break
        after = (page[-1].created_at, page[-1].run_id)
    flat = [r for p in pages for r in p]
    assert flat == ["r6", "r5", "r4", "r3", "r2", "r1", "r0"]
    waiting = await store.list_runs(RunFilter("app", status="waiting"), 10, None)
    assert [r.run_id for r in waiting] == ["r5", "r3", "r1"]
    assert await store.list_runs(RunFilter("other"), 10, None) == []
    assert await store.count_open_runs() == {"waiting": 3}


async def test_children_are_paged_by_keyset(store: Store) -> None:
    """A fan-out's outputs are read a page at a time (`children_of` with a cursor), oldest first,
    only the parent's children."""
    await store.commit(UnitOfWork(make_run("p"), None))
    await store.commit(UnitOfWork(make_run("other"), None))
    for i in range(7):
        ref = ParentRef("p" if i != 3 else "other", "fan", 1, 1, i, "cancel")
        await store.commit(UnitOfWork(make_run(f"c{i}", created=T0 + i // 2, parent=ref), None))
    pages, after = [], None
    while True:
        page = await store.children_of("p", after, 2)
        pages.append([r.run_id for r in page])
        if len(page) < 2:
            break
        after = (page[-1].created_at, page[-1].run_id)
    assert pages == [["c0", "c1"], ["c2", "c4"], ["c5", "c6"], []]
    assert [r.run_id for r in await store.children_of("p")] == ["c0", "c1", "c2", "c4", "c5", "c6"]


async def test_recovery_reads_child_links_in_pages_without_documents(store: Store) -> None:
    """Recovery's child links (issue 37): open children, and closed children of open parents
    parked on children, a page at a time by keyset (parent, created_at, run_id), ties on
    created_at included; a parent's fan-out read out of its document by the database."""
    from foliot.core.workflow.model import ChildSlot, FanOut

    fan = FanOut("m", "map", 1, 1, 6, 6, (ChildSlot(0, "a0"), ChildSlot(2, "a2")), 1, 1)
    big = {"items": ["x" * 100] * 50}  # the parent's input: not read by `parent_fans`
    parent = attrs.evolve(make_run("pa", current_step="m", fan=fan), input=big)
    await store.commit(UnitOfWork(parent, None))
    await store.commit(UnitOfWork(make_run("pb", status="completed", closed_at=T0), None))
    await store.commit(UnitOfWork(make_run("pc", status="running"), None))
    expected = []
    for parent, open_children, closed_children in (("pa", 3, 3), ("pb", 2, 2), ("pc", 1, 1)):
        for i in range(open_children + closed_children):
            run_id = f"{parent[1]}{i}"
            ref = ParentRef(parent, "m", 1, 1, i, "cancel")
            is_open = i % 2 == 0  # open and closed children interleaved, one created_at
            status = "waiting" if is_open else "completed"
            closed = None if is_open else T0 + 1
            await store.commit(
                UnitOfWork(make_run(run_id, status=status, parent=ref, closed_at=closed), None)
            )
            if is_open or parent == "pa":  # closed children only of a parent waiting on children
                expected.append((parent, run_id, is_open))
    await store.commit(UnitOfWork(make_run("lone"), None))  # no parent: not a link
    pages, after = [], None
    while True:
        page = await store.child_links(after, 2)
        assert len(page) <= 2
        pages.append(page)
        if len(page) < 2:
            break
        after = page[-1].cursor
    found = [(link.parent_run_id, link.run_id, link.is_open) for page in pages for link in page]
    assert found == sorted(expected)
    assert len(pages) == len(expected) // 2 + 1
    assert [link.created_at for page in pages for link in page] == [T0] * len(expected)

    fans = await store.parent_fans(["pa", "pb", "gone"])
    assert fans.keys() == {"pa", "pb"}
    assert (fans["pa"].is_open, fans["pa"].fan) == (True, fan)
    assert (fans["pb"].is_open, fans["pb"].fan) == (False, None)
    assert await store.parent_fans([]) == {}
    runs = await store.get_runs(["a1", "b0", "gone"])
    assert {r: (run.status, run.parent.run_id) for r, run in runs.items()} == {  # type: ignore[union-attr]
        "a1": ("completed", "pa"),
        "b0": ("waiting", "pb"),
    }


async def test_open_tasks_are_paged_by_keyset(store: Store) -> None:
    """Recovery reads the open tasks a page at a time, oldest first (ties by token)."""
    tasks = []
    for i in range(5):
        run = make_run(f"r{i}", status="running")
        task = TaskRow(f"t{4 - i}", f"r{i}", "app", 1, "s", 1, None, "open", None, None, T0 + i // 2)
        await store.commit(UnitOfWork(run, None, (), (task,)))
        tasks.append(task)
    done = TaskRow("t9", "r0", "app", 1, "s", 0, None, "closed", "answered", None, T0)
    await store.commit(
        UnitOfWork(make_run("r9", status="running"), None, (), (attrs.evolve(done, run_id="r9"),))
    )
    pages, after = [], None
    while True:
        page = await store.open_tasks(after, 2)
        pages.append([t.token for t in page])
        if len(page) < 2:
            break
        after = (page[-1].created_at, page[-1].token)
    assert pages == [["t3", "t4"], ["t1", "t2"], ["t0"]]
    assert [t.token for t in await store.open_tasks()] == ["t3", "t4", "t1", "t2", "t0"]


async def test_timer_paging_is_keyset(store: Store) -> None:
    for i in range(12):
        run = make_run(f"r{i:02d}", status="sleeping", timer=Timer("sleep", T0 + i // 3, "k"))
        await store.commit(UnitOfWork(run, None))
    seen, after = [], None
    while True:
        page = await store.timers_due_before(T0 + 100, 5, after)
        seen += [t.run_id for t in page]
        if len(page) < 5:
            break
        after = (page[-1].due_at, page[-1].run_id, page[-1].slot)
    assert seen == [f"r{i:02d}" for i in range(12)]


async def test_sqlite_commits_concurrent_units_together(tmp_path: object) -> None:
    """Group commit: units queued while a batch is being written share the next transaction."""
    from pathlib import Path

    from foliot.storage.sqlite import open_sqlite

    assert isinstance(tmp_path, Path)
    async with open_sqlite(str(tmp_path / "group.db")) as store:
        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(store.commit, UnitOfWork(make_run(f"g{i}"), None))
        assert store.committed >= 200
        assert store.batches < store.committed / 4  # far fewer transactions than units
        assert len(await store.list_runs(RunFilter("app"), 1000, None)) == 200


# --------------------------------------------------------------------------- signal ids and retention


async def raw(store: Store, *statements: str) -> None:
    """Run SQL behind the protocol's back (to put rows in the state an older version left)."""
    from foliot.storage.sqlite import SqliteStore

    if isinstance(store, SqliteStore):

        def fn(conn: Any) -> None:
            for sql in statements:
                conn.execute(sql)

        await store._write(fn)
    else:

        async def afn(conn: Any) -> None:
            for sql in statements:
                await conn.execute(sql)

        await store._call(afn, write=True)  # type: ignore[attr-defined]


async def test_signal_ids_are_unique_per_run_and_outlive_closing(store: Store) -> None:
    run = make_run("r1", seq=1)
    await store.commit(UnitOfWork(run, None, (Event(1, T0, 1, "run_started"),)))
    took = attrs.evolve(run, seq=2)
    await store.commit(UnitOfWork(took, 1, (Event(2, T0, 1, "signal_received"),), signal_ids=("s1", "s2")))
    assert await store.signal_taken("r1", "s1") and await store.signal_taken("r1", "s2")
    assert not await store.signal_taken("r1", "s3") and not await store.signal_taken("r2", "s1")

    # Taking s1 again fails the whole unit: no run change, no event, no other id.
    again = attrs.evolve(took, seq=3, status="running")
    with pytest.raises(UniqueViolation) as info:
        await store.commit(UnitOfWork(again, 2, (Event(3, T0, 1, "x"),), signal_ids=("s3", "s1")))
    assert info.value.constraint == SIGNAL_ID_UNIQUE
    assert await store.get_run("r1") == took
    assert len(await store.list_events("r1", 0, 10)) == 2
    assert not await store.signal_taken("r1", "s3")

    # Another run may use the same id; a closed run still remembers its ids.
    await store.commit(UnitOfWork(make_run("r2"), None, signal_ids=("s1",)))
    closed = attrs.evolve(took, seq=3, status="completed", closed_at=T0 + 5)
    await store.commit(UnitOfWork(closed, 2, (Event(3, T0 + 5, 1, "run_completed"),)))
    assert await store.signal_taken("r1", "s1")


async def seed_history(store: Store, run_id: str, *, closed_at: int | None, events: int = 3) -> None:
    """A run with `events` events, a task, signal ids, and (while open) timers."""
    status = "waiting" if closed_at is None else "completed"
    timer = Timer("wait_timeout", T0 + 10**9, "k") if closed_at is None else None
    run = make_run(run_id, status=status, seq=events, closed_at=closed_at, timer=timer)
    history = tuple(Event(i, T0, 1, "e") for i in range(1, events + 1))
    task = TaskRow(f"tok-{run_id}", run_id, "app", 1, "t", 1, None, "closed", "answered", None, T0)
    await store.commit(UnitOfWork(run, None, history, (task,), signal_ids=(f"sig-{run_id}",)))


async def test_pruning_closed_runs_is_batched_and_spares_open_and_recent_ones(store: Store) -> None:
    for i in range(5):
        await seed_history(store, f"old{i}", closed_at=T0 + i)
    await seed_history(store, "recent", closed_at=T0 + 1000)
    await seed_history(store, "open", closed_at=None)  # created long ago, never closed
    cutoff = T0 + 100

    assert await store.prune_closed_runs(cutoff, 2) == 2  # bounded per call, oldest first
    assert await store.get_run("old0") is None and await store.get_run("old1") is None
    assert await store.get_run("old2") is not None
    assert await store.prune_closed_runs(cutoff, 2) == 2
    assert await store.prune_closed_runs(cutoff, 2) == 1
    assert await store.prune_closed_runs(cutoff, 2) == 0

    for i in range(5):
        run_id = f"old{i}"
        assert await store.get_run(run_id) is None
        assert await store.list_events(run_id, 0, 10) == []
        assert await store.get_task(f"tok-{run_id}") is None
        assert not await store.signal_taken(run_id, f"sig-{run_id}")
    for kept in ("recent", "open"):
        assert await store.get_run(kept) is not None
        assert len(await store.list_events(kept, 0, 10)) == 3
        assert await store.get_task(f"tok-{kept}") is not None
        assert await store.signal_taken(kept, f"sig-{kept}")
    assert [t.run_id for t in await store.timers_due_before(T0 + 10**10, 10)] == ["open"]
    assert [r.run_id for r in await store.list_runs(RunFilter("app"), 10, None)] == ["recent", "open"]

    # Reopened (a rewind) before the cutoff passed: no longer closed, never pruned.
    reopened = await store.get_run("recent")
    assert reopened is not None
    await store.commit(UnitOfWork(attrs.evolve(reopened, status="running", closed_at=None, seq=4), 3))
    assert await store.prune_closed_runs(T0 + 10**9, 10) == 0
    assert await store.get_run("recent") is not None


async def test_pruning_takes_few_long_histories_per_call(store: Store) -> None:
    await seed_history(store, "long1", closed_at=T0, events=60)
    await seed_history(store, "long2", closed_at=T0 + 1, events=60)
    await seed_history(store, "short", closed_at=T0 + 2, events=2)
    # A budget of 2 * PRUNE_EVENTS_PER_RUN = 40 events: a longer run still goes, alone.
    assert await store.prune_closed_runs(T0 + 100, 2) == 1
    assert await store.get_run("long1") is None and await store.list_events("long1", 0, 100) == []
    assert await store.get_run("long2") is not None
    assert await store.prune_closed_runs(T0 + 100, 2) == 1
    assert await store.prune_closed_runs(T0 + 100, 2) == 1
    assert await store.prune_closed_runs(T0 + 100, 2) == 0


async def test_idempotency_records_expire(store: Store) -> None:
    for i in range(5):
        record = IdempotencyRecord("app", f"key-{i}", "h", f"r{i}", "{}", T0 + i)
        await store.commit(UnitOfWork(make_run(f"r{i}"), None, idempotency=record))
    assert await store.prune_idempotency(T0 + 3, 2) == 2
    assert await store.prune_idempotency(T0 + 3, 2) == 1
    assert await store.prune_idempotency(T0 + 3, 2) == 0
    assert [await store.get_idempotency("app", f"key-{i}") is None for i in range(5)] == [
        True,
        True,
        True,
        False,
        False,
    ]

    # An expired record not pruned yet is replaced by a new start with the same key ...
    fresh = IdempotencyRecord("app", "key-3", "h2", "n3", '{"runId":"n3"}', T0 + 50)
    await store.commit(UnitOfWork(make_run("n3"), None, idempotency=fresh, idempotency_expired_before=T0 + 4))
    assert await store.get_idempotency("app", "key-3") == fresh
    # ... a live one still refuses it, and nothing of the unit is stored.
    other = IdempotencyRecord("app", "key-4", "h2", "n4", "{}", T0 + 50)
    with pytest.raises(UniqueViolation) as info:
        await store.commit(
            UnitOfWork(make_run("n4"), None, idempotency=other, idempotency_expired_before=T0 + 4)
        )
    assert info.value.constraint == "idempotency"
    assert await store.get_run("n4") is None
    assert (await store.get_idempotency("app", "key-4")).run_id == "r4"  # type: ignore[union-attr]


async def test_migration_moves_signal_ids_out_of_old_documents(store: Store) -> None:
    """Documents written before 0002 carry `signal_ids` and no `closed_at` column: the migration
    moves the ids into the table (dedupe keeps working) and fills `closed_at` (pruning works)."""
    old_open = run_to_dict(make_run("legacy-open", seq=0))
    old_open["signal_ids"] = ["a", "b"]
    old_closed = run_to_dict(make_run("legacy-closed", status="completed", closed_at=T0 + 7))
    old_closed["signal_ids"] = ["c"]
    # Roll the schema back to 0001 (closed_at, signal_ids table and indexes gone).
    await raw(
        store,
        "DROP INDEX runs_closed",
        "DROP INDEX idempotency_created",
        "ALTER TABLE runs DROP COLUMN closed_at",
        "DROP TABLE signal_ids",
        "DELETE FROM schema_migrations WHERE version = 2",
    )
    rows = []
    for doc in (old_open, old_closed):
        text = json_dumps(doc).replace("'", "''")
        is_open = "TRUE" if doc["status"] == "waiting" else "FALSE"
        rows.append(
            "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at, seq, doc)"
            f" VALUES ('{doc['run_id']}', 'app', 'wf', '{doc['status']}', NULL, {is_open}, {T0}, 0, '{text}')"
        )
    await raw(store, *rows)
    await store.migrate()

    assert await store.signal_taken("legacy-open", "a") and await store.signal_taken("legacy-open", "b")
    assert await store.signal_taken("legacy-closed", "c")
    assert (await store.get_run("legacy-open")) == make_run("legacy-open", seq=0)  # the old key is ignored
    assert await store.prune_closed_runs(T0 + 8, 10) == 1
    assert await store.get_run("legacy-closed") is None and await store.get_run("legacy-open") is not None


async def test_sqlite_database_file_is_private(tmp_path: object) -> None:
    """The database and its -wal/-shm files are created mode 0600, in a 0700 directory."""
    import stat
    from pathlib import Path

    from foliot.storage.sqlite import open_sqlite

    assert isinstance(tmp_path, Path)
    path = tmp_path / "data" / "foliot.db"
    async with open_sqlite(str(path)) as store:
        await store.commit(UnitOfWork(make_run("p1"), None))
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        for f in files:
            assert f.exists(), f
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, (f, oct(f.stat().st_mode))
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0


async def query_plan(store: Store, sql: str, *params: Any) -> str:
    """The backend's plan for `sql` (PostgreSQL told to avoid sequential scans, as it would on
    tables of millions of rows rather than this test's handful)."""
    from foliot.storage.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        sqlite_sql = re.sub(r"\$\d+", "?", sql).replace("NOT is_open", "is_open = 0")
        rows = store._reader.execute(f"EXPLAIN QUERY PLAN {sqlite_sql}", params).fetchall()
        return "\n".join(str(r["detail"]) for r in rows)

    async def explain(conn: Any) -> str:
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch(f"EXPLAIN {sql}", *params)
        return "\n".join(r[0] for r in rows)

    result: str = await store._call(explain, write=True)  # type: ignore[attr-defined]
    return result


async def test_pruning_queries_walk_indexes(store: Store) -> None:
    closed = await query_plan(
        store,
        "SELECT run_id, seq FROM runs WHERE NOT is_open AND closed_at < $1"
        " ORDER BY closed_at, run_id LIMIT $2",
        T0,
        10,
    )
    assert "runs_closed" in closed and "TEMP B-TREE" not in closed and "Sort" not in closed, closed
    expired = await query_plan(
        store, "SELECT * FROM idempotency WHERE created_at < $1 ORDER BY created_at LIMIT $2", T0, 10
    )
    assert "idempotency_created" in expired and "TEMP B-TREE" not in expired, expired
    for table in ("events", "tasks", "timers", "signal_ids"):
        plan = await query_plan(store, f"SELECT * FROM {table} WHERE run_id = $1", "r1")
        assert "Seq Scan" not in plan and not plan.startswith("SCAN"), (table, plan)


async def test_dry_run_reads_open_groups_and_recent_closed_runs(store: Store) -> None:
    """What a dry-run reads (issue 24): open runs counted by (version, step, status), each
    group paged newest first (with input and state when asked), the last closed runs, events."""
    for i, created in enumerate((T0, T0 + 1, T0 + 2, T0 + 2, T0 + 3)):  # a2 and a3 together
        run = make_run(f"a{i}", current_step="a", created=created)
        await store.commit(UnitOfWork(attrs.evolve(run, state={"x": {"ok": True}} if i == 0 else {}), None))
    await store.commit(UnitOfWork(make_run("b0", status="running", current_step="b"), None))
    await store.commit(UnitOfWork(make_run("n0", status="queued"), None))  # no step yet
    await store.commit(UnitOfWork(attrs.evolve(make_run("v2", current_step="a"), version=2), None))
    await store.commit(UnitOfWork(attrs.evolve(make_run("o0", current_step="a"), workflow="other"), None))
    for i in range(4):
        closed = make_run(f"c{i}", status="completed", created=T0 + 10 + i, current_step="a")
        await store.commit(UnitOfWork(closed, None, (Event(1, T0, 1, "run_started"), Event(2, T0, 1, "x"))))

    groups = await store.open_run_groups("app", "wf", 1)
    counted = {(g.version, g.step, g.status): g.count for g in groups}
    assert counted == {(1, "a", "waiting"): 5, (1, "b", "running"): 1, (1, None, "queued"): 1}
    assert {(g.version, g.step) for g in await store.open_run_groups("app", "wf", 2)} >= {(2, "a")}
    assert await store.open_run_groups("app", "nope", 9) == []

    (at, pending) = sorted((g for g in groups if g.step != "b"), key=lambda g: g.step is None)
    pages, after = [], None
    while True:
        page = await store.open_group_page("app", "wf", at, 2, after, with_state=False)
        pages.append([r.run_id for r in page])
        assert all(r.state is None and r.input is None and r.step == "a" for r in page)
        if len(page) < 2:
            break
        after = (page[-1].created_at, page[-1].run_id)
    assert [r for p in pages for r in p] == ["a4", "a3", "a2", "a1", "a0"]
    (oldest,) = await store.open_group_page("app", "wf", at, 1, (T0 + 1, "a1"), with_state=True)
    assert oldest.run_id == "a0" and json.loads(oldest.state or "") == {"x": {"ok": True}}
    assert json.loads(oldest.input or "") == {"i": 1}
    (none,) = await store.open_group_page("app", "wf", pending, 20, None, with_state=True)
    assert none.run_id == "n0" and none.step is None and none.status == "queued"

    recent = await store.recent_closed_runs("app", "wf", 3)
    assert [r.run_id for r in recent] == ["c3", "c2", "c1"]
    older = await store.recent_closed_runs("app", "wf", 3, (recent[1].created_at, recent[1].run_id))
    assert [r.run_id for r in older] == ["c1", "c0"]
    histories = await store.events_of(["c3", "c0", "a0"], 1)
    assert [[e.type for e in histories[r]] for r in ("c3", "c0", "a0")] == [["run_started"]] * 2 + [[]]


# Inputs and states that follow, or fail, a path in every way `predicate.resolve` can: a key
# of an object, a digit key of an object against an array index, JSON null at the end and on
# the way, a scalar on the way, an index past the end, the key only as a string value,
# characters SQL must quote.
LACKING_DOCS: list[tuple[Any, Any]] = [
    ({"customer": "vip"}, {}),
    ({"customer": None}, {"a": None}),
    ({}, {"a": {"0": {"x": 1}}}),
    ({"items": [{"x": 1}]}, {"a": [{"x": None}]}),
    ({"items": []}, {"a": [[], {"x": 2}]}),
    ({"items": {"0": {"x": 1}}}, {"a": 5}),
    ({"note": "customer"}, {"a": {"x": 1}}),
    ("customer", {"a-b.c": 1, "$[x]'": {"10": True}}),
    ([{"x": 1}, 2], {"a": {"b": None}}),
    (None, {"a": {"0": []}}),
]
LACKING_PATHS = [
    ("input", "customer"),
    ("input", "items", "0", "x"),
    ("input", "0", "x"),
    ("input", "1"),
    ("state", "a"),
    ("state", "a", "0", "x"),
    ("state", "a", "1", "x"),
    ("state", "a", "b"),
    ("state", "$[x]'", "10"),
    ("state", "a", "99999999999"),
]


async def test_dry_run_counts_the_runs_lacking_a_path_as_lookup_does(store: Store) -> None:
    """The missing-state-keys check in SQL (`deploy_sql.expressible` paths) says of each run
    what `predicate.lookup` says of its input and state; the newest lacking runs come newest
    first (created_at, then run_id)."""
    from foliot.core.workflow.predicate import lookup
    from foliot.storage import deploy_sql

    docs = [(f"l{i:02d}", T0 + i // 2, given, state) for i, (given, state) in enumerate(LACKING_DOCS * 2)]
    for run_id, created, given, state in docs:
        run = attrs.evolve(make_run(run_id, current_step="a", created=created), input=given, state=state)
        await store.commit(UnitOfWork(run, None))
    await store.commit(UnitOfWork(make_run("other", current_step="b"), None))  # another group
    (group,) = [g for g in await store.open_run_groups("app", "wf", 1) if g.step == "a"]
    assert all(deploy_sql.expressible(p) for p in LACKING_PATHS)
    counts = await store.open_group_lacking("app", "wf", group, LACKING_PATHS)
    for path, count in zip(LACKING_PATHS, counts, strict=True):
        lacking = [(c, r) for r, c, g, s in docs if not lookup(path, {"input": g, "state": s})[0]]
        assert count == len(lacking), path
        newest = await store.open_group_lacking_newest("app", "wf", group, path, 3)
        assert newest == sorted(lacking, reverse=True)[:3], path
    assert await store.open_group_lacking("app", "wf", group, []) == []


async def test_dry_run_sums_the_fan_outs_of_a_group(store: Store) -> None:
    """What migrate keeps of runs mid-map: the database sums the fan-outs of a group's runs
    (runs without one, and other groups, left out) as `Fans.of` each and `plus` do."""
    from foliot.core.workflow.compat import Fans
    from foliot.core.workflow.model import ChildSlot, FanOut

    fans = [
        FanOut("m", "map", 1, 1, 20, 14, (ChildSlot(12, "c12"), ChildSlot(13, "c13")), 12),
        FanOut("m", "map", 2, 1, 5, 5, (ChildSlot(4, "c4"),), 2, 1, 1),
        None,  # between attempts, or held by a pause: no fan-out
    ]
    for n, fan in enumerate(fans):
        await store.commit(UnitOfWork(make_run(f"f{n}", current_step="m", fan=fan), None))
    await store.commit(UnitOfWork(make_run("other", current_step="m", status="running", fan=fans[0]), None))
    (group,) = [
        g for g in await store.open_run_groups("app", "wf", 1) if (g.step, g.status) == ("m", "waiting")
    ]
    expected = Fans.of(fans[0]).plus(Fans.of(fans[1]))  # type: ignore[arg-type]
    assert await store.open_group_fans("app", "wf", group) == expected
    assert expected == Fans(2, 25, 19, 14, 1, 1, 3) and expected.not_started == 6


def test_paths_sql_cannot_say_exactly_are_left_to_python() -> None:
    from foliot.storage.deploy_sql import expressible

    assert expressible(("input", "a-b", "0", "$x", "[1]"))
    assert not expressible(("input", 'say"hi'))  # a quote: SQLite cannot name it
    assert not expressible(("state", "back\\slash"))
    assert not expressible(("input", "café"))  # written otherwise by some JSON writers
    assert not expressible(("input", "٣"))  # a digit to str.isdigit, no index to SQL
    assert not expressible(("input", "1", "2", "3", "4"))  # 16 ways to follow it
    assert not expressible(("run_id",))  # no input or state


async def test_rate_buckets_are_taken_in_turn_and_idle_ones_pruned_oldest_first(store: Store) -> None:
    """`take_rate_tokens` takes tokens only from a free bucket (a slot starting within now's
    millisecond) and moves its TAT on by what it took; one refused stores nothing (a send that
    waits reserves no slot), and a send needing two buckets takes both or neither.
    `prune_rate_buckets` deletes the buckets whose TAT is before the bound, the oldest first,
    at most `limit`."""
    now = T0 * 1000
    assert await store.take_rate_tokens([("a", 10_000)], 1, now) == (1, None)
    assert await store.rate_bucket("a") == now + 10_000
    for _ in range(3):  # waiting sends asking again: refused, the bucket as it was
        assert await store.take_rate_tokens([("a", 10_000)], 5, now + 9_000) == (0, ("a", now + 10_000))
    assert await store.rate_bucket("a") == now + 10_000
    assert await store.take_rate_tokens([("a", 10_000)], 5, now + 10_000) == (1, None)  # one per slot
    assert await store.rate_bucket("a") == now + 20_000
    # A slot is free within its millisecond: 1.5 ms apart, the second goes in millisecond 1.
    assert await store.take_rate_tokens([("h", 1_500)], 1, now) == (1, None)
    assert await store.take_rate_tokens([("h", 1_500)], 1, now + 1_000) == (1, None)
    assert await store.take_rate_tokens([("h", 1_500)], 1, now + 2_000) == (0, ("h", now + 3_000))
    # Faster than one a millisecond: the slots of this millisecond, in one take.
    assert await store.take_rate_tokens([("f", 100)], 50, now) == (10, None)
    assert await store.take_rate_tokens([("f", 100)], 5, now) == (0, ("f", now + 1_000))
    assert await store.take_rate_tokens([("f", 100)], 3, now + 1_000) == (3, None)
    assert await store.rate_bucket("f") == now + 1_300
    # Two buckets: "a" is not free, so "b" (free) is not taken either.
    assert await store.take_rate_tokens([("b", 1_000), ("a", 10_000)], 1, now + 15_000) == (
        0,
        ("a", now + 20_000),
    )
    assert await store.rate_bucket("b") in (None, 0)  # free still (a row may hold it, free)
    # A fast and a slow bucket: as many as the slower gives.
    assert await store.take_rate_tokens([("f", 100), ("b", 1_000)], 10, now + 2_000) == (1, None)
    assert [await store.rate_bucket(b) for b in ("f", "b")] == [now + 2_100, now + 3_000]
    assert await store.prune_rate_buckets(now + 2_100, 10) == 0  # f's TAT is not before it
    assert await store.prune_rate_buckets(now + 30_000, 2) == 2  # f, then h or b: the oldest
    assert await store.rate_bucket("f") is None
    assert await store.rate_bucket("a") == now + 20_000
    assert await store.prune_rate_buckets(now + 30_000, 10) == 2
    assert await store.prune_rate_buckets(now + 30_000, 10) == 0
    assert [await store.rate_bucket(b) for b in ("a", "b", "h")] == [None, None, None]
    assert await store.take_rate_tokens([("a", 10_000)], 1, now + 40_000) == (1, None)  # as new
    assert await store.rate_bucket("a") == now + 50_000
