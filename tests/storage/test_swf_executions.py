"""The SWF execution store's contract (`SwfExecutionStore`), on SQLite and PostgreSQL alike:
guarded units of work, contiguous history, one open run per workflow id, pending task rows
derived from the document and claimed once, keyset listings, retention."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio

from foliot.core.errors import StaleWrite, UniqueViolation
from foliot.core.swf import messages as m
from foliot.core.swf.events import HistoryEvent
from foliot.storage import swf_postgres, swf_sql, swf_sqlite
from foliot.storage.base import PRUNE_EVENTS_PER_RUN, Store
from foliot.storage.factory import open_store
from foliot.storage.sqlite import SqliteStore
from foliot.storage.swf import (
    ACTIVITY_TASK,
    DECISION,
    REGISTERED,
    SWF_OPEN_WORKFLOW_UNIQUE,
    SwfDomain,
    SwfQuery,
    SwfUnit,
    facet_close_status,
    facet_tag,
    facet_type,
    facet_workflow_id,
)

from ..swf.store_kit import REFUND, T0, WF2, decision, schedule, start

R = "us-east-1"
DAY = 86_400_000


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


def q(**kw: object) -> SwfQuery:
    base: dict[str, object] = {"region": R, "domain": "d", "open": True, "oldest": 0}
    return SwfQuery(**{**base, **kw})  # type: ignore[arg-type]


async def runs(store: Store, query: SwfQuery, limit: int = 100) -> list[str]:
    return [s.execution.run_id for s in await store.swf_list_executions(query, None, limit)]


async def test_start_then_load_find_and_history(store: Store) -> None:
    live = await start(store, "wf-1", "r1", tag_list=("blue",), input="in")
    stored = await store.swf_load(R, "r1")
    assert stored is not None and stored.execution == live.ex and stored.version == 1
    assert await store.swf_find(R, "d", "wf-1") == stored
    assert await store.swf_find(R, "d", "wf-1", "r1") == stored
    assert await store.swf_find(R, "d", "wf-2", "r1") is None  # the run id belongs to another id
    assert await store.swf_find(R, "other", "wf-1") is None
    assert await store.swf_load("eu-west-1", "r1") is None  # regions are apart
    events = await store.swf_events(R, "r1", None, False, 100)
    assert [e.event_type for e in events] == ["WorkflowExecutionStarted", "DecisionTaskScheduled"]
    assert events[0].attributes["input"] == "in" and events[0].timestamp == T0


async def test_version_guard_refuses_a_lost_race_and_keeps_nothing(store: Store) -> None:
    live = await start(store, "wf-1", "r1")
    scheduled = live.ex.decision.scheduled_event_id  # type: ignore[union-attr]
    await live.send(m.PollDecision(scheduled, "a"), T0 + 1)
    assert live.version == 2
    # A second writer that loaded version 1 commits its own (now stale) transition.
    late = SwfUnit(
        R,
        attrs.evolve(live.ex, last_event_id=4, cancel_requested=True),
        1,
        (HistoryEvent(4, T0 + 2, "WorkflowExecutionCancelRequested", {}),),
    )
    with pytest.raises(StaleWrite):
        await store.swf_commit(late)
    after = await store.swf_load(R, "r1")
    assert after is not None and after.version == 2 and not after.execution.cancel_requested
    assert len(await store.swf_events(R, "r1", None, False, 100)) == 3


async def test_events_must_be_contiguous(store: Store) -> None:
    live = await start(store, "wf-1", "r1")
    with pytest.raises(ValueError, match="contiguous"):
        SwfUnit(R, attrs.evolve(live.ex, last_event_id=5), 1, (HistoryEvent(4, T0, "MarkerRecorded", {}),))
    # An id written twice is refused by the store's key, and the whole unit with it.
    again = SwfUnit(
        R,
        attrs.evolve(live.ex, last_event_id=2, cancel_requested=True),
        1,
        (HistoryEvent(2, T0, "WorkflowExecutionCancelRequested", {}),),
    )
    with pytest.raises(UniqueViolation):
        await store.swf_commit(again)
    after = await store.swf_load(R, "r1")
    assert after is not None and after.version == 1 and not after.execution.cancel_requested


async def test_one_open_execution_per_workflow_id(store: Store) -> None:
    live = await start(store, "wf-1", "r1")
    with pytest.raises(UniqueViolation) as info:
        await start(store, "wf-1", "r2")
    assert info.value.constraint == SWF_OPEN_WORKFLOW_UNIQUE
    assert await store.swf_load(R, "r2") is None
    assert await store.swf_events(R, "r2", None, False, 10) == []
    assert await store.swf_count_pending(R, "d", DECISION, "deciders", 100) == 1
    await start(store, "wf-1", "r3", domain="d2")  # another domain
    await start(store, "wf-1", "r4", region="eu-west-1")  # another region
    await live.complete(T0 + 5)
    await start(store, "wf-1", "r5")  # closed: the id is free again
    found = await store.swf_find(R, "d", "wf-1")
    assert found is not None and found.execution.run_id == "r5"


async def test_concurrent_starts_of_one_workflow_id_exactly_one_wins(store: Store) -> None:
    won: list[str] = []
    refused: list[str] = []

    async def one(i: int) -> None:
        try:
            await start(store, "wf-race", f"r{i:02}")
            won.append(f"r{i:02}")
        except UniqueViolation as exc:
            assert exc.constraint == SWF_OPEN_WORKFLOW_UNIQUE
            refused.append(f"r{i:02}")

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(one, i)
    assert len(won) == 1 and len(refused) == 49
    found = await store.swf_find(R, "d", "wf-race")
    assert found is not None and found.execution.run_id == won[0]
    assert await store.swf_count_executions(q(facet=facet_workflow_id("wf-race")), 100) == 1
    assert await store.swf_count_pending(R, "d", DECISION, "deciders", 100) == 1


async def test_task_rows_follow_the_document(store: Store) -> None:
    live = await start(store, "wf-1", "r1")
    assert await store.swf_count_pending(R, "d", DECISION, "deciders", 100) == 1
    await live.decide(T0 + 1, schedule("a1"), schedule("a2", taskList={"name": "other"}))
    assert await store.swf_count_pending(R, "d", DECISION, "deciders", 100) == 0
    assert await store.swf_count_pending(R, "d", ACTIVITY_TASK, "workers", 100) == 1
    assert await store.swf_count_pending(R, "d", ACTIVITY_TASK, "other", 100) == 1
    assert await store.swf_count_pending(R, "d", ACTIVITY_TASK, "workers", 0) == 0  # the cap
    a1 = live.ex.activity("a1")
    assert a1 is not None
    await live.send(m.PollActivity(a1.scheduled_event_id, "w"), T0 + 2)  # started: not pending
    assert await store.swf_count_pending(R, "d", ACTIVITY_TASK, "workers", 100) == 0
    await live.send(m.Terminate(reason="stop"), T0 + 3)  # closed: nothing pending
    assert await store.swf_count_pending(R, "d", ACTIVITY_TASK, "other", 100) == 0
    assert await store.swf_claim_task(R, "d", ACTIVITY_TASK, "other", T0 + 4, 1000) is None


async def test_claim_order_lease_and_release(store: Store) -> None:
    low = await start(store, "wf-low", "r1", T0)
    high = await start(store, "wf-high", "r2", T0 + 10, task_priority="5")
    later = await start(store, "wf-later", "r3", T0 + 20)
    claim = store.swf_claim_task
    first = await claim(R, "d", DECISION, "deciders", T0 + 100, 1000)
    assert first is not None and (first.run_id, first.priority, first.claimed_until) == ("r2", 5, T0 + 1100)
    assert first.scheduled_event_id == high.ex.decision.scheduled_event_id  # type: ignore[union-attr]
    second = await claim(R, "d", DECISION, "deciders", T0 + 100, 1000)
    assert second is not None and second.run_id == "r1" and second.workflow_id == "wf-low"
    third = await claim(R, "d", DECISION, "deciders", T0 + 100, 1000)
    assert third is not None and third.run_id == "r3"
    assert await claim(R, "d", DECISION, "deciders", T0 + 100, 1000) is None
    assert await claim(R, "d", DECISION, "elsewhere", T0 + 100, 1000) is None
    assert await store.swf_count_pending(R, "d", DECISION, "deciders", 100) == 3  # claimed, not started
    await store.swf_release_task(R, "r3", third.scheduled_event_id)
    again = await claim(R, "d", DECISION, "deciders", T0 + 200, 1000)
    assert again is not None and again.run_id == "r3"
    # The lease of r2's claim runs out: it can be claimed again.
    expired = await claim(R, "d", DECISION, "deciders", T0 + 1100, 1000)
    assert expired is not None and expired.run_id == "r2"
    # Starting the task (the execution's own unit) removes its row for good.
    await low.send(m.PollDecision(second.scheduled_event_id, "x"), T0 + 1200)
    assert await claim(R, "d", DECISION, "deciders", T0 + 5000, 1000) is not None  # r2 or r3
    assert await claim(R, "d", DECISION, "deciders", T0 + 5000, 1000) is not None
    assert await claim(R, "d", DECISION, "deciders", T0 + 5000, 1000) is None
    del later


async def test_concurrent_claims_hand_each_task_out_once(store: Store) -> None:
    for i in range(10):
        await start(store, f"wf-{i}", f"r{i}", T0 + i)
    got: list[tuple[str, int]] = []
    empty = 0

    async def poller() -> None:
        nonlocal empty
        task = await store.swf_claim_task(R, "d", DECISION, "deciders", T0 + 100, 60_000)
        if task is None:
            empty += 1
        else:
            got.append((task.run_id, task.scheduled_event_id))

    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(poller)
    assert sorted(got) == sorted((f"r{i}", 2) for i in range(10))
    assert empty == 40


async def test_listing_filters_windows_order_and_pages(store: Store) -> None:
    a = await start(store, "wf-a", "ra", T0 + 1000, tag_list=("blue", "red"))
    b = await start(store, "wf-b", "rb", T0 + 2000, workflow_type=WF2, tag_list=("blue",))
    c = await start(store, "wf-c", "rc", T0 + 3000, workflow_type=REFUND)
    await start(store, "wf-x", "rx", T0 + 4000, domain="d2")
    assert await runs(store, q()) == ["rc", "rb", "ra"]  # newest first
    assert await runs(store, q(reverse=True)) == ["ra", "rb", "rc"]
    assert await runs(store, q(oldest=T0 + 1500, latest=T0 + 2500)) == ["rb"]
    assert await runs(store, q(facet=facet_type("Order"))) == ["rb", "ra"]
    assert await runs(store, q(facet=facet_type("Order", "2"))) == ["rb"]
    assert await runs(store, q(facet=facet_tag("blue"))) == ["rb", "ra"]
    assert await runs(store, q(facet=facet_tag("red"))) == ["ra"]
    assert await runs(store, q(facet=facet_workflow_id("wf-c"))) == ["rc"]
    assert await runs(store, q(open=False)) == []
    assert await store.swf_count_executions(q(), 100) == 3
    assert await store.swf_count_executions(q(), 2) == 2
    # Close two: a completes, c is terminated.
    await a.complete(T0 + 9000)
    await c.send(m.Terminate(), T0 + 8000)
    assert await runs(store, q()) == ["rb"]
    assert await runs(store, q(open=False)) == ["rc", "ra"]  # by start time
    assert await runs(store, q(open=False, by_close=True)) == ["ra", "rc"]  # by close time
    assert await runs(store, q(open=False, by_close=True, oldest=T0 + 8500)) == ["ra"]
    assert await runs(store, q(open=False, facet=facet_close_status("TERMINATED"))) == ["rc"]
    assert await runs(store, q(open=False, facet=facet_tag("red"))) == ["ra"]
    assert await store.swf_count_executions(q(open=False, by_close=True, latest=T0 + 8000), 100) == 1
    closed = [s.execution for s in await store.swf_list_executions(q(open=False), None, 10)]
    assert [e.close_status for e in closed] == ["TERMINATED", "COMPLETED"]
    del b
    # Keyset pages: one at a time, in both directions; same start time tie-broken by ids.
    for i in range(5):
        await start(store, f"wf-p{i}", f"rp{i}", T0 + 50_000)
    for reverse in (False, True):
        seen: list[str] = []
        after = None
        while True:
            page = await store.swf_list_executions(q(oldest=T0 + 50_000, reverse=reverse), after, 2)
            seen += [s.execution.run_id for s in page]
            if len(page) < 2:
                break
            last = page[-1].execution
            after = (last.started_at, last.workflow_id, last.run_id)
        expected = [f"rp{i}" for i in range(5)]
        assert seen == (expected if reverse else expected[::-1])


async def test_continue_as_new_commits_both_runs_together(store: Store) -> None:
    live = await start(store, "wf-1", "r1", tag_list=("t",))
    await live.decide(T0 + 10, decision("ContinueAsNewWorkflowExecution", input="next"), new_run_id="r2")
    assert live.successor is not None
    old, new = await store.swf_load(R, "r1"), await store.swf_find(R, "d", "wf-1")
    assert old is not None and old.execution.close_status == "CONTINUED_AS_NEW"
    assert new is not None and new.execution.run_id == "r2" and new.version == 1
    assert new.execution == live.successor.ex
    assert await store.swf_count_pending(R, "d", DECISION, "deciders", 100) == 1
    assert await runs(store, q(facet=facet_workflow_id("wf-1"))) == ["r2"]
    assert await runs(store, q(open=False, facet=facet_close_status("CONTINUED_AS_NEW"))) == ["r1"]


async def test_open_executions_page_for_rehydration(store: Store) -> None:
    done = await start(store, "wf-0", "r0")
    await done.complete(T0 + 1)
    for i in range(1, 6):
        await start(store, f"wf-{i}", f"r{i}")
    await start(store, "wf-e", "r9", region="eu-west-1")
    seen: list[tuple[str, str]] = []
    after = None
    while page := await store.swf_open_executions(after, 2):
        seen += [(s.region, s.execution.run_id) for s in page]
        after = seen[-1]
    assert seen == [("eu-west-1", "r9")] + [(R, f"r{i}") for i in range(1, 6)]


async def test_history_pages_by_event_id_both_ways(store: Store) -> None:
    live = await start(store, "wf-1", "r1")
    await live.decide(
        T0 + 1, decision("RecordMarker", markerName="m1"), decision("RecordMarker", markerName="m2")
    )
    ids = list(range(1, live.ex.last_event_id + 1))
    assert [e.event_id for e in await store.swf_events(R, "r1", None, False, 100)] == ids
    assert [e.event_id for e in await store.swf_events(R, "r1", 2, False, 2)] == [3, 4]
    assert [e.event_id for e in await store.swf_events(R, "r1", None, True, 2)] == ids[::-1][:2]
    assert [e.event_id for e in await store.swf_events(R, "r1", 3, True, 10)] == [2, 1]
    marker = (await store.swf_events(R, "r1", 4, False, 1))[0]
    assert marker.event_type == "MarkerRecorded" and marker.attributes["markerName"] == "m1"


async def test_retention_prunes_closed_executions_per_domain(store: Store) -> None:
    await store.swf_insert_domain(SwfDomain(R, "d", REGISTERED, None, "1", "[]", 0), 100)
    await store.swf_insert_domain(SwfDomain(R, "now", REGISTERED, None, "NONE", "[]", 0), 100)
    old = await start(store, "wf-old", "r-old")
    await old.complete(T0 + 1000)
    young = await start(store, "wf-young", "r-young")
    await young.complete(T0 + DAY)
    still_open = await start(store, "wf-open", "r-open")
    gone = await start(store, "wf-none", "r-none", domain="now")
    await gone.send(m.Terminate(), T0 + DAY)
    assert await store.swf_prune_closed(T0 + DAY, 100) == 1  # NONE: at once
    assert await store.swf_load(R, "r-none") is None
    assert await store.swf_prune_closed(T0 + DAY + 999, 100) == 0  # d keeps a day
    assert await store.swf_prune_closed(T0 + DAY + 1000, 100) == 1
    assert await store.swf_load(R, "r-old") is None
    assert await store.swf_events(R, "r-old", None, False, 10) == []
    assert await runs(store, q(open=False)) == ["r-young"]
    assert await store.swf_load(R, "r-young") is not None
    assert await store.swf_load(R, "r-open") is not None
    assert await store.swf_prune_closed(T0 + 100 * DAY, 100) == 1
    assert await store.swf_prune_closed(T0 + 100 * DAY, 100) == 0
    assert await store.swf_count_pending(R, "d", DECISION, "deciders", 100) == 1  # the open one's
    del still_open


async def test_pruning_is_bounded_by_history_length(store: Store) -> None:
    await store.swf_insert_domain(SwfDomain(R, "d", REGISTERED, None, "0", "[]", 0), 100)
    long = await start(store, "wf-long", "r-long")
    markers = [decision("RecordMarker", markerName=f"m{i}") for i in range(40)]
    await long.decide(T0 + 1, *markers, decision("CompleteWorkflowExecution"))
    assert long.ex.last_event_id > 2 * PRUNE_EVENTS_PER_RUN
    for i in range(3):
        live = await start(store, f"wf-{i}", f"r{i}")
        await live.complete(T0 + 10)
    # Two executions a call at most, and no more events than two short histories' budget:
    # the long history goes on its own, then the short ones two by two.
    assert await store.swf_prune_closed(T0 + 10, 2) == 1
    assert await store.swf_load(R, "r-long") is None
    assert await store.swf_prune_closed(T0 + 10, 2) == 2
    assert await store.swf_prune_closed(T0 + 10, 2) == 1
    assert await store.swf_prune_closed(T0 + 10, 2) == 0


async def test_every_listing_claim_and_expiry_query_is_an_index_range(store: Store) -> None:
    """No query of the read path or the claim scans a table or sorts: each reads one index
    range in the order it returns, so its cost is the page, not the table."""
    queries = [
        q(),
        q(reverse=True, latest=5),
        q(open=False),
        q(open=False, by_close=True, latest=5, facet=facet_tag("t")),
        q(facet=facet_type("Order", "1"), reverse=True),
    ]
    shared = [
        *(swf_sql.list_sql(one, after, 10) for one in queries for after in (None, (1, "w", "r"))),
        *(swf_sql.count_sql(one, 10) for one in queries),
        (swf_sql.EXPIRED_SQL, ["r", "d", 0, 10]),
    ]
    if isinstance(store, SqliteStore):
        conn = sqlite3.connect(store.path)
        for sql, args in [*shared, (swf_sqlite.NEXT_TASK_SQL, ["r", "d", DECISION, "tl", 0])]:
            steps = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args)]
            # Reading a count's own bounded subquery back is the only scan allowed.
            tables = [s for s in steps if s.startswith("SCAN") and s != "SCAN t"]
            assert not tables and not any("TEMP B-TREE" in s for s in steps), (sql, steps)
        conn.close()
        return
    explain = [(swf_sql.numbered(sql), args) for sql, args in shared]
    for sql, args in [*explain, (swf_postgres.CLAIM_SQL, ["r", "d", DECISION, "tl", 0, 1])]:

        async def fn(conn: Any, sql: str = sql, args: list[Any] = args) -> str:
            async with conn.transaction():
                await conn.execute("SET LOCAL enable_seqscan = off")
                await conn.execute("SET LOCAL enable_bitmapscan = off")
                rows = await conn.fetch("EXPLAIN " + sql, *args)
            return " / ".join(r[0] for r in rows)

        plan = await store._call(fn)  # type: ignore[attr-defined]
        assert "Seq Scan" not in plan and "Sort" not in plan and "Index" in plan, (sql, plan)


def test_numbered_placeholders() -> None:
    assert swf_sql.numbered("a = ? AND (b, c) > (?, ?) LIMIT ?") == "a = $1 AND (b, c) > ($2, $3) LIMIT $4"
    assert swf_sql.numbered("SELECT 1") == "SELECT 1"


async def test_timer_rows_follow_the_deadlines(store: Store) -> None:
    """Each commit replaces the execution's rows in `timers` (kind "swf") with its deadlines,
    so the shared timer wheel pages them in like a run's; a closed execution has none."""
    from foliot.core.swf.timeouts import deadlines
    from foliot.storage.swf import swf_actor_id

    async def rows() -> dict[str, tuple[str, str, int]]:
        found = await store.timers_due_before(2**62, 100)
        return {t.slot: (t.actor_kind, t.run_id, t.due_at) for t in found}

    live = await start(store, "wf-1", "r1")
    owner = swf_actor_id(R, "r1")
    assert await rows() == {key: ("swf", owner, due) for key, due in deadlines(live.ex).items()}
    assert "workflow" in await rows()
    await live.decide(T0 + 1, schedule("a1"))
    assert await rows() == {key: ("swf", owner, due) for key, due in deadlines(live.ex).items()}
    assert any(key.startswith("activity:") for key in await rows())
    await live.send(m.Terminate(reason="stop"), T0 + 2)
    assert await rows() == {}
