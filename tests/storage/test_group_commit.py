"""Group commit writes the units of a batch together (a few statements per batch, not per
unit), with exactly the result of writing them one by one; when the set is refused, only the
unit at fault fails. Both stores; the writer is held while the batch queues, so each test's
units really do share one transaction."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from foliot.core.errors import StaleWrite, StorageError, UniqueViolation
from foliot.core.workflow.flow import Bucket
from foliot.core.workflow.model import Event, TaskRow, Timer
from foliot.storage.base import (
    DEBOUNCE_TAKEN,
    SIGNAL_ID_UNIQUE,
    SLOT_TAKEN,
    DebounceChange,
    DebounceRow,
    IdempotencyRecord,
    SlotChange,
    UnitOfWork,
)
from foliot.storage.batch import batch_rows, chunks, plan_batch
from foliot.storage.postgres import PostgresStore, open_postgres
from foliot.storage.schedules import ScheduleFire
from foliot.storage.sqlite import SqliteStore, open_sqlite

from .test_contract import T0, make_run, seed_app

Store = SqliteStore | PostgresStore
Hold = Callable[[], AbstractAsyncContextManager[None]]


@pytest.fixture
async def held(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Store, Hold]]:
    """A store with one writer, and `hold()`: while inside it, nothing is written, so the
    commits started meanwhile queue up and are written as one batch when it ends."""
    if database_url.startswith("sqlite"):
        async with open_sqlite(str(tmp_path / "group.db")) as lite:

            @asynccontextmanager
            async def hold_sqlite() -> AsyncIterator[None]:
                gate, taken = threading.Event(), threading.Event()

                def block(_conn: Any) -> None:
                    taken.set()
                    gate.wait(30)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(lite._write, block)
                    await until(taken.is_set)  # the writer is busy with the blocker
                    try:
                        yield
                    finally:
                        gate.set()

            yield lite, hold_sqlite
        return
    async with open_postgres(database_url, writers=1) as pg:
        yield pg, postgres_hold(pg)


def postgres_hold(pg: PostgresStore) -> Hold:
    """`hold()` for a PostgreSQL store opened with one writer."""

    @asynccontextmanager
    async def hold() -> AsyncIterator[None]:
        gate, taken = threading.Event(), threading.Event()

        async def block(_conn: Any) -> None:
            taken.set()
            await asyncio.get_running_loop().run_in_executor(None, gate.wait, 30)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: pg._call(block, write=True))
            await until(taken.is_set)  # the only writer is busy with the blocker
            try:
                yield
            finally:
                gate.set()

    return hold


async def until(condition: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not condition():  # noqa: ASYNC110 (set by another thread: no trio.Event)
            await trio.sleep(0.001)


def together(store: Store) -> int:
    return store.units_together if isinstance(store, SqliteStore) else store.stats["units_together"]


async def commit_as_one_batch(
    store: Store, hold: Hold, units: list[UnitOfWork]
) -> list[BaseException | None]:
    """Commit `units` concurrently while the writer is held: they are written as one batch."""
    outcomes: list[BaseException | None] = [None] * len(units)

    async def one(i: int) -> None:
        try:
            await store.commit(units[i])
        except Exception as exc:
            outcomes[i] = exc

    async with trio.open_nursery() as nursery, hold():
        for i in range(len(units)):  # queued in this order (Trio may run new tasks in any)
            nursery.start_soon(one, i)
            await until(lambda n=i + 1: store.pending_writes == n)  # type: ignore[misc]
    return outcomes


async def stored(store: Store, unit: UnitOfWork) -> dict[str, Any]:
    """What the store holds for the unit's run, through the protocol."""
    run = unit.run
    timers = [t for t in await store.timers_due_before(2**62, 1000) if t.run_id == run.run_id]
    return {
        "run": await store.get_run(run.run_id),
        "events": await store.list_events(run.run_id, 0, 1000),
        "tasks": [await store.get_task(t.token) for t in unit.tasks],
        "timers": sorted((t.slot, t.kind, t.key, t.due_at) for t in timers),
        "signals": [await store.signal_taken(run.run_id, s) for s in unit.signal_ids],
    }


def expected(unit: UnitOfWork, earlier_events: tuple[Event, ...] = ()) -> dict[str, Any]:
    run = unit.run
    last_rows = {t.token: t for t in unit.tasks}  # a token written twice keeps its last row
    return {
        "run": run,
        "events": [*earlier_events, *unit.events],
        "tasks": [last_rows[t.token] for t in unit.tasks],
        "timers": sorted((slot, t.kind, t.key, t.due) for slot, t in run.timers()),
        "signals": [True] * len(unit.signal_ids),
    }


def task(token: str, run_id: str, status: str = "open", reason: str | None = None) -> TaskRow:
    return TaskRow(token, run_id, "app", 1, "t", 1, None, status, reason, T0 + 50, T0)


async def test_a_batch_of_new_and_updated_runs_lands_as_if_written_one_by_one(
    held: tuple[Store, Hold],
) -> None:
    store, hold = held
    await seed_app(store)
    # Runs already stored, each with a step timer, an open task and one event.
    first = []
    for i in range(4):
        run = make_run(f"old{i}", status="sleeping", seq=1, timer=Timer("sleep", T0 + 100 + i, f"1:s#{i}"))
        unit = UnitOfWork(run, None, (Event(1, T0, 1, "run_started"),), (task(f"tok-old{i}", run.run_id),))
        await store.commit(unit)
        first.append(unit)
    expired = IdempotencyRecord("app", "old-key", "h0", "gone", '{"runId":"gone"}', T0 - 100)
    await store.commit(UnitOfWork(make_run("gone"), None, idempotency=expired))
    base = together(store)

    units: list[UnitOfWork] = []
    for i in range(6):
        run_id = f"new{i}"
        run = make_run(
            run_id,
            status="sleeping" if i % 2 else "waiting",
            seq=2,
            timer=Timer("sleep", T0 + 10 * i, f"1:nap#{i}") if i % 2 else None,
            deadline=T0 + 1000 + i if i % 3 == 0 else None,
            bk=f"bk-{i}" if i < 3 else None,
        )
        run = attrs.evolve(run, input={"i": i, "text": "é\u2028\x00"}, state={"s": [i, 2.5, None]})
        events = (
            Event(1, T0, 1, "run_started", None, None, {"businessKey": run.business_key}),
            Event(2, T0, 1, "step_started", "s", 1, {"kind": "sleep", "nested": [{"a": [1, 2.5]}]}),
        )
        # One token written twice in the same unit (opened, then closed): the last row wins.
        tasks = (task(f"tok-{run_id}", run_id), task(f"tok-{run_id}", run_id, "closed", "superseded"))
        idem = None
        cutoff = None
        if i == 1:
            idem = IdempotencyRecord("app", "k-new", "h1", run_id, '{"runId":"new1"}', T0)
        if i == 2:  # takes over an expired key
            idem, cutoff = IdempotencyRecord("app", "old-key", "h2", run_id, '{"runId":"new2"}', T0), T0
        units.append(
            UnitOfWork(
                run, None, events, tasks, idem, (f"sig-{i}", f"sig-{i}b"), idempotency_expired_before=cutoff
            )
        )
    for i, old in enumerate(first):
        run = old.run
        if i == 3:  # closes: no timers at all afterwards
            moved = attrs.evolve(run, status="completed", seq=2, timer=None, closed_at=T0 + 5)
        else:
            moved = attrs.evolve(
                run, status="sleeping", seq=2, timer=Timer("sleep", T0 + 200 + i, f"1:s#{i + 9}")
            )
        closed = task(f"tok-old{i}", run.run_id, "closed", "answered")
        units.append(
            UnitOfWork(
                moved,
                1,
                (Event(2, T0 + 1, 1, "step_completed", "s", 1, {}),),
                (closed,),
                signal_ids=(f"s{i}",),
            )
        )

    outcomes = await commit_as_one_batch(store, hold, units)

    assert outcomes == [None] * len(units)
    assert together(store) - base == len(units)  # written as one set, not one by one
    for unit in units:
        earlier = (Event(1, T0, 1, "run_started"),) if unit.expected_seq is not None else ()
        assert await stored(store, unit) == expected(unit, earlier)
    assert await store.get_idempotency("app", "k-new") == units[1].idempotency
    assert await store.get_idempotency("app", "old-key") == units[2].idempotency
    assert await store.find_open_run("app", "wf", "bk-0") == units[0].run


async def test_a_refused_unit_fails_alone_and_leaves_nothing(held: tuple[Store, Hold]) -> None:
    store, hold = held
    await seed_app(store)
    await store.commit(UnitOfWork(make_run("taken", bk="bk"), None))
    await store.commit(UnitOfWork(make_run("signalled", seq=1), None, signal_ids=("once",)))
    live = IdempotencyRecord("app", "live", "h", "taken", "{}", T0)
    await store.commit(UnitOfWork(make_run("keyed"), None, idempotency=live))

    def good(i: int) -> UnitOfWork:
        run = make_run(f"ok{i}", status="sleeping", seq=1, timer=Timer("sleep", T0 + i, f"k#{i}"))
        return UnitOfWork(run, None, (Event(1, T0, 1, "run_started"),))

    def bad(run_id: str, **kw: Any) -> UnitOfWork:
        run = make_run(
            run_id,
            status="sleeping",
            seq=kw.pop("seq", 1),
            timer=Timer("sleep", T0, "t#1"),
            bk=kw.pop("bk", None),
        )
        return UnitOfWork(run, kw.pop("expected", None), (Event(kw.pop("event_seq", 1), T0, 1, "x"),), **kw)

    units = [
        good(0),
        bad("taken", seq=5, expected=3, event_seq=5),  # stale: the stored seq is 0
        good(1),
        bad("rival", bk="bk"),  # the business key is held by an open run
        bad("signalled", seq=2, expected=1, event_seq=2, signal_ids=("once",)),  # signalId taken
        bad("late", idempotency=attrs.evolve(live, run_id="late"), idempotency_expired_before=T0 - 1),
        good(2),
    ]
    outcomes = await commit_as_one_batch(store, hold, units)

    assert [type(o) for o in outcomes] == [
        type(None),
        StaleWrite,
        type(None),
        UniqueViolation,
        UniqueViolation,
        UniqueViolation,
        type(None),
    ]
    assert [o.constraint for o in outcomes if isinstance(o, UniqueViolation)] == [
        "business_key",
        SIGNAL_ID_UNIQUE,
        "idempotency",
    ]
    for i in range(3):
        assert await stored(store, good(i)) == expected(good(i))
    assert (await store.get_run("taken")).seq == 0  # type: ignore[union-attr]
    assert await store.get_run("rival") is None
    assert (await store.get_run("signalled")).seq == 1  # type: ignore[union-attr]
    assert await store.get_run("late") is None
    assert await store.get_idempotency("app", "live") == live
    for run_id in ("taken", "rival", "signalled", "late"):
        assert await store.list_events(run_id, 0, 10) == []
    due = {t.run_id for t in await store.timers_due_before(2**62, 1000)}
    assert due == {"ok0", "ok1", "ok2"}


async def test_a_run_written_twice_in_one_batch_is_written_in_order(held: tuple[Store, Hold]) -> None:
    """Not what the engine does (a run's actor commits one unit at a time), but if it happened,
    the second unit is guarded by the first one's seq, so the set cannot be used."""
    store, hold = held
    await seed_app(store)
    first = UnitOfWork(make_run("twice", seq=1), None, (Event(1, T0, 1, "run_started"),))
    second = UnitOfWork(make_run("twice", status="completed", seq=2), 1, (Event(2, T0, 1, "run_completed"),))
    outcomes = await commit_as_one_batch(store, hold, [first, second])
    assert outcomes == [None, None]
    assert (await store.get_run("twice")) == second.run
    assert [e.seq for e in await store.list_events("twice", 0, 10)] == [1, 2]


# --------------------------------------------------------------------------- the pure part


def test_batch_rows_keep_the_one_by_one_order_and_refuse_a_run_or_key_twice() -> None:
    a = UnitOfWork(make_run("a"), None, (Event(1, T0, 1, "x"), Event(2, T0, 1, "y")))
    b = UnitOfWork(make_run("b", seq=3, timer=Timer("sleep", T0, "k#1")), 2, (Event(3, T0, 1, "z"),))
    rows = batch_rows([a, b])
    assert rows is not None
    assert [r[0] for r in rows.inserts] == ["a"]
    assert [(r[0], r[3], r[7]) for r in rows.updates] == [("b", 3, 2)]
    assert [(r[0], r[1]) for r in rows.events] == [("a", 1), ("a", 2), ("b", 3)]
    assert rows.replaced_timers == ["b"] and [r[:2] for r in rows.timers] == [("b", "step")]
    assert batch_rows([a, attrs.evolve(a, expected_seq=0)]) is None
    key = IdempotencyRecord("app", "k", "h", "a", "{}", T0)
    keyed = [attrs.evolve(a, idempotency=key), attrs.evolve(b, idempotency=attrs.evolve(key, run_id="b"))]
    assert batch_rows(keyed) is None


def test_chunks_bound_the_parameters_of_one_statement() -> None:
    rows = [(i, i) for i in range(7)]
    assert chunks(rows, 2, 6) == [rows[0:3], rows[3:6], rows[6:7]]
    assert chunks(rows, 2, 1) == [[r] for r in rows]  # always at least one row a statement
    assert chunks([], 2, 6) == []


def test_the_set_path_refuses_rather_than_guess(tmp_path: Path) -> None:
    """`batch_rows` returning None makes the SQLite set path raise (then one by one)."""
    import sqlite3

    from foliot.storage.sqlite import _apply_units

    a = UnitOfWork(make_run("a"), None)
    with pytest.raises(StorageError):
        _apply_units(sqlite3.connect(":memory:"), [a, a])


async def test_a_batch_of_starts_lands_whole_or_only_its_culprits_fail(held: tuple[Store, Hold]) -> None:
    """New runs only (what a burst of starts queues): PostgreSQL writes them in one statement."""
    store, hold = held
    await seed_app(store)
    await store.commit(UnitOfWork(make_run("holder", bk="taken"), None))
    kept = IdempotencyRecord("app", "kept", "h", "holder", "{}", T0)
    await store.commit(UnitOfWork(make_run("keyed"), None, idempotency=kept))

    def start(i: int, **kw: Any) -> UnitOfWork:
        run = make_run(
            f"s{i}",
            status="running" if i % 2 else "waiting",
            seq=2,
            bk=kw.pop("bk", f"b{i}"),
            timer=Timer("wait_timeout", T0 + 1000, f"1:w#{i}") if i % 2 == 0 else None,
            deadline=T0 + 5000 if i % 3 == 0 else None,
        )
        events = (Event(1, T0, 1, "run_started", None, None, {"businessKey": run.business_key}),)
        tasks = (task(f"tok-s{i}", run.run_id),) if i % 2 else ()
        idem = kw.pop("idempotency", IdempotencyRecord("app", f"key-{i}", "h", run.run_id, "{}", T0))
        return UnitOfWork(run, None, events, tasks, idem, signal_ids=(f"first-{i}",) if i == 1 else ())

    base = together(store)
    clean = [start(i) for i in range(5)]
    assert await commit_as_one_batch(store, hold, clean) == [None] * 5
    assert together(store) - base == 5  # the set was written at the first try
    for unit in clean:
        assert await stored(store, unit) == expected(unit)
        assert unit.idempotency is not None
        assert await store.get_idempotency("app", unit.idempotency.key) == unit.idempotency

    base = together(store)
    mixed = [
        start(5),
        start(6, bk="taken"),  # an open run holds this business key
        start(7),
        start(8, idempotency=attrs.evolve(kept, run_id="s8")),  # a live record holds this key
        start(9),
    ]
    outcomes = await commit_as_one_batch(store, hold, mixed)
    assert [o.constraint if isinstance(o, UniqueViolation) else o for o in outcomes] == [
        None,
        "business_key",
        None,
        "idempotency",
        None,
    ]
    assert together(store) == base  # refused as a set, then written one by one
    for i in (5, 7, 9):
        assert await stored(store, start(i)) == expected(start(i))
    for run_id in ("s6", "s8"):
        assert await store.get_run(run_id) is None
        assert await store.list_events(run_id, 0, 10) == []
    assert await store.get_idempotency("app", "kept") == kept


async def test_a_batch_of_runs_moving_on_lands_whole_and_a_stale_one_writes_nothing(
    held: tuple[Store, Hold],
) -> None:
    """Runs already stored moving on (what signals, task answers and timers queue): PostgreSQL
    writes them in one statement; a unit whose run moved underneath its seq gets its StaleWrite
    and leaves no row, the others land exactly as one by one."""
    store, hold = held
    await seed_app(store)
    before: list[UnitOfWork] = []
    for i in range(5):
        run = make_run(f"m{i}", status="sleeping", seq=1, timer=Timer("sleep", T0 + 100 + i, f"1:s#{i}"))
        unit = UnitOfWork(run, None, (Event(1, T0, 1, "run_started"),), (task(f"tok-m{i}", run.run_id),))
        await store.commit(unit)
        before.append(unit)

    def moving(i: int, *, expected_seq: int = 1) -> UnitOfWork:
        run = before[i].run
        if i == 0:  # the same slot armed again under a new key
            moved = attrs.evolve(run, seq=2, timer=Timer("sleep", T0 + 300, "1:s#again"))
        elif i == 1:  # the timer goes, a deadline comes: the slot changes
            moved = attrs.evolve(run, status="running", seq=2, timer=None, deadline=T0 + 900)
        elif i == 4:  # closes: no timers left
            moved = attrs.evolve(run, status="completed", seq=2, timer=None, closed_at=T0 + 5)
        else:
            moved = attrs.evolve(run, status="waiting", seq=2, timer=Timer("wait_timeout", T0 + 50, f"w#{i}"))
        answered = task(f"tok-m{i}", run.run_id, "closed", "answered")
        events = (
            Event(2, T0 + 1, 1, "step_completed", "s", 1, {"i": i}),
            Event(3, T0 + 1, 1, "step_started"),
        )
        return UnitOfWork(
            moved, expected_seq, events, (answered, task(f"next-m{i}", run.run_id)), signal_ids=(f"g{i}",)
        )

    base = together(store)
    clean = [moving(i) for i in (0, 1, 2)]
    assert await commit_as_one_batch(store, hold, clean) == [None] * 3
    assert together(store) - base == 3
    started = (Event(1, T0, 1, "run_started"),)
    for unit in clean:
        assert await stored(store, unit) == expected(unit, started)

    base = together(store)
    mixed = [moving(3), moving(4, expected_seq=7)]  # m4 is at seq 1, not 7
    outcomes = await commit_as_one_batch(store, hold, mixed)
    assert outcomes[0] is None and isinstance(outcomes[1], StaleWrite)
    assert await stored(store, mixed[0]) == expected(mixed[0], started)
    assert await store.get_run("m4") == before[4].run  # nothing of the stale unit was written
    assert await store.list_events("m4", 0, 10) == list(started)
    assert await store.get_task("next-m4") is None
    assert await store.get_task("tok-m4") == before[4].tasks[0]
    assert not await store.signal_taken("m4", "g4")
    assert [(t.slot, t.key) for t in await store.timers_due_before(2**62, 1000) if t.run_id == "m4"] == [
        ("step", "1:s#4")
    ]
    if isinstance(store, PostgresStore):
        assert together(store) - base == 1  # one statement: m3 written, m4 refused alone


async def test_a_moving_batch_with_a_signal_id_taken_falls_back_to_one_by_one(
    held: tuple[Store, Hold],
) -> None:
    store, hold = held
    await seed_app(store)
    for run_id in ("a", "b"):
        await store.commit(UnitOfWork(make_run(run_id, seq=1), None, signal_ids=(f"first-{run_id}",)))
    a = UnitOfWork(
        make_run("a", status="sleeping", seq=2, timer=Timer("sleep", T0, "k")), 1, signal_ids=("new",)
    )
    b = UnitOfWork(make_run("b", seq=2), 1, (Event(1, T0, 1, "x"),), signal_ids=("first-b",))  # taken
    outcomes = await commit_as_one_batch(store, hold, [a, b])
    assert outcomes[0] is None
    assert isinstance(outcomes[1], UniqueViolation) and outcomes[1].constraint == SIGNAL_ID_UNIQUE
    assert await stored(store, a) == expected(a)
    assert (await store.get_run("b")).seq == 1  # type: ignore[union-attr]
    assert await store.list_events("b", 0, 10) == []


def test_the_fenced_moving_statement_is_the_plain_one_guarded() -> None:
    from foliot.storage.postgres.fencing import FENCED_UPDATE_RUNS_SET

    sql = FENCED_UPDATE_RUNS_SET
    assert "FROM fenced, unnest($1::text[]" in sql
    assert "WHERE fenced.ok AND r.run_id = u.run_id" in sql
    assert sql.endswith("SELECT ok, ARRAY(SELECT run_id FROM moved) FROM fenced")


# --------------------------------------------------------------------------- guarded units


def slot(kind: str, key: str, limit: int = 0) -> SlotChange:
    return SlotChange(kind, f"wf/{key}", limit)


def keyed(
    run_id: str, *, seq: int = 1, expected: int | None = None, created: int = T0, **kw: Any
) -> UnitOfWork:
    run = make_run(run_id, seq=seq, created=created)
    return UnitOfWork(run, expected, (Event(seq, T0, 1, "x"),), **kw)


async def test_guarded_units_do_not_sink_the_set_and_a_refused_one_writes_nothing(
    held: tuple[Store, Hold],
) -> None:
    """Admissions and claims are decided in batch order, as one by one would decide them, after
    the units without a guard were written as a set; only the ones that lose are refused."""
    store, hold = held
    await seed_app(store)
    await store.commit(keyed("h1", slot=slot("admit", "a", 2)))  # holds a slot of a
    await store.commit(keyed("q1", created=T0 + 1, slot=slot("queue", "a")))  # waits for one
    await store.commit(keyed("old", seq=1))
    await store.commit(keyed("dz", debounce=DebounceChange("claim", "wf", "d1", "trailing", T0 + 9)))
    base = together(store)

    units = [
        keyed("p0"),  # plain
        keyed("n1", slot=slot("admit", "a", 2)),  # refused: q1 waits (older)
        keyed("q1", seq=2, expected=1, created=T0 + 1, slot=slot("admit", "a", 2)),  # the head
        keyed("n2", slot=slot("admit", "b", 1)),  # admitted: n4 is queued after the guards
        keyed("n3", slot=slot("admit", "b", 1)),  # refused: n2 took b's only slot
        keyed("h1", seq=2, expected=1, slot=slot("leave", "a")),  # plain: written first
        keyed("m1", debounce=DebounceChange("claim", "wf", "d1", "trailing", T0 + 9)),  # dz let go
        keyed("m2", debounce=DebounceChange("claim", "wf", "d2", "leading", T0 + 9)),  # claimed
        keyed("m3", debounce=DebounceChange("claim", "wf", "d2", "trailing", T0 + 9)),  # refused
        keyed("n4", created=T0 + 2, slot=slot("queue", "b")),  # plain
        keyed("dz", seq=2, expected=1, debounce=DebounceChange("release", "wf", "d1")),  # plain
        keyed("old", seq=2, expected=1),  # plain
    ]
    outcomes = await commit_as_one_batch(store, hold, units)

    refused = {i: o.constraint for i, o in enumerate(outcomes) if isinstance(o, UniqueViolation)}
    assert refused == {1: SLOT_TAKEN, 4: SLOT_TAKEN, 8: DEBOUNCE_TAKEN}
    assert [o for i, o in enumerate(outcomes) if i not in refused] == [None] * 9
    assert together(store) - base == 9  # every unit not refused was written by a set
    for i, unit in enumerate(units):
        if i in refused:
            assert await store.get_run(unit.run.run_id) is None
            assert await store.list_events(unit.run.run_id, 0, 10) == []
        else:
            assert await store.get_run(unit.run.run_id) == unit.run
    assert sorted(await store.key_counts("app", "wf", 10)) == [("a", 1, 0), ("b", 1, 1)]
    assert await store.queue_heads("app", "wf/a", 5) == []
    assert await store.queue_heads("app", "wf/b", 5) == ["n4"]
    # A wake-up's read: the slots held beside the oldest runs waiting (none waits: nothing held
    # is said, nothing is to be told).
    assert await store.queue_room("app", "wf/b", 5) == (1, [("n4", 1)])
    assert await store.queue_room("app", "wf/a", 5) == (0, [])
    assert await store.get_debounce("app", "wf", "d1") == DebounceRow("m1", "trailing", T0 + 9)
    assert await store.get_debounce("app", "wf", "d2") == DebounceRow("m2", "leading", T0 + 9)


async def test_a_fire_and_a_run_both_plain_and_guarded_in_one_batch(held: tuple[Store, Hold]) -> None:
    """A schedule's fire is written alone beside the sets (refused alone when fired before); a
    run written twice (plain, then admitted) is written in order, one by one."""
    store, hold = held
    await seed_app(store)
    fired = ScheduleFire("app", "s", T0, "f0", T0)
    await store.commit(UnitOfWork(make_run("f0"), None, fire=fired))

    twice = [
        keyed("x", seq=1),
        keyed("x", seq=2, expected=1, slot=slot("admit", "x", 1)),
        keyed("y", slot=slot("admit", "x", 1)),  # refused: x took the only slot first
    ]
    outcomes = await commit_as_one_batch(store, hold, twice)
    assert outcomes[:2] == [None, None]
    assert isinstance(outcomes[2], UniqueViolation) and outcomes[2].constraint == SLOT_TAKEN
    assert await store.get_run("x") == twice[1].run
    assert await store.key_counts("app", "wf", 10) == [("x", 1, 0)]

    base = together(store)
    units = [
        keyed("p1"),
        UnitOfWork(make_run("f1"), None, fire=ScheduleFire("app", "s", T0, "f1", T0)),  # fired before
        UnitOfWork(make_run("f2"), None, fire=ScheduleFire("app", "s", T0 + 60, "f2", T0)),
        keyed("p2", slot=slot("admit", "z", 1)),
    ]
    outcomes = await commit_as_one_batch(store, hold, units)
    assert outcomes[0] is None and outcomes[2] is None and outcomes[3] is None
    assert isinstance(outcomes[1], UniqueViolation) and outcomes[1].constraint == "schedule_fire"
    assert await store.get_run("f1") is None
    for run_id in ("p1", "f2", "p2"):
        assert await store.get_run(run_id) is not None
    assert together(store) - base in (0, 2)  # fire refused: the batch is written one by one


async def test_admissions_racing_on_one_key_never_pass_its_limit(database_url: str, tmp_path: Path) -> None:
    """Many admissions to a few keys at once (PostgreSQL: two writers, each batch locking its
    keys): exactly `limit` per key are admitted, every other one refused and absent."""
    if database_url.startswith("sqlite"):
        opened: AbstractAsyncContextManager[Store] = open_sqlite(str(tmp_path / "race.db"))
    else:
        opened = open_postgres(database_url, writers=2)
    async with opened as store:
        await seed_app(store)
        outcomes: dict[str, BaseException | None] = {}

        async def admit(i: int) -> None:
            run_id = f"r{i}"
            try:
                await store.commit(keyed(run_id, slot=slot("admit", f"k{i % 4}", 3)))
                outcomes[run_id] = None
            except UniqueViolation as exc:
                outcomes[run_id] = exc

        async with trio.open_nursery() as nursery:
            for i in range(120):
                nursery.start_soon(admit, i)
        admitted = sorted(r for r, o in outcomes.items() if o is None)
        assert len(admitted) == 12
        assert sorted(await store.key_counts("app", "wf", 10)) == [(f"k{k}", 3, 0) for k in range(4)]
        for run_id, outcome in outcomes.items():
            if outcome is not None:
                assert isinstance(outcome, UniqueViolation) and outcome.constraint == SLOT_TAKEN
                assert await store.get_run(run_id) is None


# --------------------------------------------------------------------------- the plan (pure)


def test_the_plan_writes_plain_units_first_and_decides_guards_in_batch_order() -> None:
    units = [
        keyed("p"),
        keyed("a1", slot=slot("admit", "a", 2)),
        keyed("q", slot=slot("queue", "a")),
        keyed("a2", slot=slot("admit", "a", 2)),
        keyed("a3", slot=slot("admit", "a", 2)),
        keyed("c1", debounce=DebounceChange("claim", "wf", "k")),
        keyed("c2", slot=slot("admit", "b", 1), debounce=DebounceChange("claim", "wf", "k")),
        keyed("c3", slot=slot("admit", "b", 1), debounce=DebounceChange("claim", "wf", "j")),
        UnitOfWork(make_run("f"), None, fire=ScheduleFire("app", "s", T0, "f", T0)),
    ]
    plan = plan_batch(units)
    assert plan is not None
    assert plan.together == (0, 2) and plan.guarded == (1, 3, 4, 5, 6, 7) and plan.alone == (8,)
    assert [r[0] for r in plan.first.inserts] == ["p", "q"]
    assert plan.first.slots == [] and plan.queued == ((None, "wf/a", "q"),)  # after the guards
    assert plan.slot_reads() == [("app", "wf/a", 3), ("app", "wf/b", 2)]
    assert plan.claim_reads() == [("app", "wf", "j"), ("app", "wf", "k")]

    # a: one held, and `q0` queued before the batch: a1, a2 and a3 find it ahead of them.
    refused = plan.refusals({("app", "wf/a"): 1}, {("app", "wf/a"): ["q0"]}, [])
    assert {i: e.constraint for i, e in refused.items()} == {
        1: SLOT_TAKEN,
        3: SLOT_TAKEN,
        4: SLOT_TAKEN,
        6: DEBOUNCE_TAKEN,  # c1 claimed k first; c2's slot of b is then not taken
    }
    then = plan.then(refused)
    assert [r[0] for r in then.inserts] == ["c1", "c3"]
    assert then.slots == [("wf/b", None, "c3"), (None, "wf/a", "q")]  # c2 did not take b's slot
    assert [r[:3] for r in then.debounce_claimed] == [("app", "wf", "k"), ("app", "wf", "j")]

    # Nobody queued: admissions pass up to the limit, counting those before them in the batch.
    refused = plan.refusals({}, {}, [("app", "wf", "j")])
    assert {i: e.constraint for i, e in refused.items()} == {
        4: SLOT_TAKEN,  # a1, a2 took a's two slots
        6: DEBOUNCE_TAKEN,
        7: DEBOUNCE_TAKEN,  # j has a burst already
    }


def test_a_queued_run_is_admitted_only_at_the_head_and_the_next_head_follows() -> None:
    units = [
        keyed("q2", seq=2, expected=1, slot=slot("admit", "a", 5)),
        keyed("q1", seq=2, expected=1, slot=slot("admit", "a", 5)),
        keyed("q2", seq=3, expected=2, slot=slot("admit", "a", 5)),
    ]
    assert plan_batch(units) is None  # q2 twice: one by one, in order
    plan = plan_batch([*units[:2], keyed("new", slot=slot("admit", "a", 5))])
    assert plan is not None
    refused = plan.refusals({("app", "wf/a"): 0}, {("app", "wf/a"): ["q1", "q2", "q3"]}, [])
    # q2 is not the head (q1 is): refused; q1 is admitted; then q2 is the head, not `new`.
    assert sorted(refused) == [0, 2]
    # q2 then q1 at the head in turn: both admitted; `new` then finds the queue empty, or q3.
    assert plan.refusals({}, {("app", "wf/a"): ["q2", "q1"]}, []) == {}
    assert sorted(plan.refusals({}, {("app", "wf/a"): ["q2", "q1", "q3"]}, [])) == [2]


def test_a_guard_in_a_child_run_is_not_guessed() -> None:
    child = keyed("child", slot=slot("admit", "a", 1))
    assert plan_batch([keyed("parent", children=(child,))]) is None
    plain_child = keyed("child2")
    plan = plan_batch([keyed("parent", slot=slot("admit", "a", 1), children=(plain_child,))])
    assert plan is not None and plan.guarded == (0,)
    assert [r[0] for r in plan.then({}).inserts] == ["parent", "child2"]
    assert plan.then({0}).inserts == []


async def test_a_tasks_priority_and_buckets_are_kept_on_every_write_path(held: tuple[Store, Hold]) -> None:
    """An attempt's priority and rate-limit buckets (migration 0078) land with its task row on
    each path (starts only, runs moving on, a mixed set, one by one) and stay as written when
    the attempt opened, whatever later rows of the token say."""
    store, hold = held
    await seed_app(store)
    bucket = Bucket("s/app/wf/t/input.k=a", 600_000, "k=a")

    def opened(token: str, run_id: str, level: int, buckets: tuple[Bucket, ...] = ()) -> TaskRow:
        return attrs.evolve(task(token, run_id), priority=level, buckets=buckets)

    starts = [
        UnitOfWork(make_run(f"s{i}"), None, tasks=(opened(f"t{i}", f"s{i}", 1 + i, (bucket,) * (i % 2)),))
        for i in range(3)
    ]
    assert await commit_as_one_batch(store, hold, starts) == [None] * 3  # PostgreSQL: one statement
    moving = [
        UnitOfWork(
            make_run(f"s{i}", seq=1),
            0,
            tasks=(task(f"t{i}", f"s{i}", "closed", "answered"), opened(f"u{i}", f"s{i}", 2, (bucket,))),
        )
        for i in range(2)
    ]
    assert await commit_as_one_batch(store, hold, moving) == [None] * 2  # one statement too
    mixed = [
        UnitOfWork(make_run("s2", seq=1), 0, tasks=(opened("v2", "s2", 4),)),
        UnitOfWork(make_run("m"), None, tasks=(opened("tm", "m", 5, (bucket, bucket)),)),
    ]
    assert await commit_as_one_batch(store, hold, mixed) == [None] * 2
    twice = [
        UnitOfWork(make_run("w"), None, tasks=(opened("tw", "w", 2, (bucket,)),)),
        UnitOfWork(make_run("w", seq=1), 0, tasks=(task("tw", "w", "closed", "answered"),)),
    ]
    assert await commit_as_one_batch(store, hold, twice) == [None] * 2  # one by one

    flow = {t.token: (t.status, t.priority, t.buckets) for t in await store.open_tasks()}
    assert flow == {
        "t2": ("open", 3, ()),
        "u0": ("open", 2, (bucket,)),
        "u1": ("open", 2, (bucket,)),
        "v2": ("open", 4, ()),
        "tm": ("open", 5, (bucket, bucket)),
    }
    for token, level, buckets in (("t0", 1, ()), ("t1", 2, (bucket,)), ("tw", 2, (bucket,))):
        row = await store.get_task(token)
        assert row is not None and (row.status, row.priority, row.buckets) == ("closed", level, buckets)


async def test_an_admission_refused_writes_its_otherwise_in_the_same_commit(held: tuple[Store, Hold]) -> None:
    """A start admitted if a slot is free, else queued (`UnitOfWork.otherwise`): one commit,
    decided in batch order; `commit` answers False when the queued form was written. The same
    one by one (a batch that cannot be written as sets)."""
    store, hold = held
    await seed_app(store)

    def start(run_id: str, created: int) -> UnitOfWork:
        queued = keyed(run_id, created=created, slot=slot("queue", "k"))
        queued = attrs.evolve(queued, run=attrs.evolve(queued.run, status="queued"))
        return keyed(run_id, created=created, slot=slot("admit", "k", 1), otherwise=queued)

    written: list[bool] = []

    async def commit(unit: UnitOfWork) -> None:
        written.append(await store.commit(unit))

    assert await store.commit(start("a", T0)) is True
    async with trio.open_nursery() as nursery, hold():
        for i, run_id in enumerate(("b", "c")):
            nursery.start_soon(commit, start(run_id, T0 + 1 + i))
            await until(lambda n=i + 1: store.pending_writes == n)  # type: ignore[misc]
    assert written == [False, False]
    assert [(await store.get_run(r)).status for r in "abc"] == ["waiting", "queued", "queued"]  # type: ignore[union-attr]
    assert await store.queue_heads("app", "wf/k", 5) == ["b", "c"]
    assert await store.key_counts("app", "wf", 5) == [("k", 1, 2)]

    # One by one (a run twice in the batch): the same answers.
    written.clear()
    async with trio.open_nursery() as nursery, hold():
        units = [keyed("x"), keyed("x", seq=2, expected=1), start("d", T0 + 5)]
        for i, unit in enumerate(units):
            nursery.start_soon(commit, unit)
            await until(lambda n=i + 1: store.pending_writes == n)  # type: ignore[misc]
    assert sorted(written) == [False, True, True]
    assert (await store.get_run("d")).status == "queued"  # type: ignore[union-attr]
    assert await store.queue_heads("app", "wf/k", 5) == ["b", "c", "d"]


def test_a_refused_admission_with_an_otherwise_is_written_as_it() -> None:
    queued = keyed("q", slot=slot("queue", "a"))
    admitted = keyed("q", slot=slot("admit", "a", 1), otherwise=queued)
    plan = plan_batch([admitted, keyed("n", slot=slot("admit", "a", 1))])
    assert plan is not None and plan.guarded == (0, 1)
    refused = plan.refusals({("app", "wf/a"): 1}, {}, [])
    assert sorted(refused) == [0, 1] and plan.instead(refused) == {0}
    then = plan.then(refused)
    assert [r[0] for r in then.inserts] == ["q"] and then.slots == [(None, "wf/a", "q")]
    assert plan.then({}).slots == [("wf/a", None, "q"), ("wf/a", None, "n")]
    leave = keyed("l", seq=2, expected=1, slot=slot("leave", "z"))
    assert plan.locks() == [("app", "wf/a")]
    both = plan_batch([leave, admitted, keyed("p", slot=slot("queue", "y"))])
    assert both is not None and both.locks() == [("app", "wf/a"), ("app", "wf/z")]  # not a queue's
    # An `otherwise` that is not a plain stand-in for the same run: not guessed, one by one.
    assert plan_batch([attrs.evolve(admitted, otherwise=keyed("other"))]) is None
    guarded_too = keyed("q", slot=slot("admit", "a", 1))
    assert plan_batch([attrs.evolve(admitted, otherwise=guarded_too)]) is None
