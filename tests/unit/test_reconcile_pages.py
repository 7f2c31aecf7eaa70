"""Recovery's reconcile of child runs in bounded pages (issue 37): after a restart with
168,000 open children, `/readyz` took 48-54 s at 1.4 GB because every open child was read
with its parent's whole document at once. Now each read is a page of at most
`RECONCILE_PAGE` links, parents are read as their fan-outs once per page, and only the
children acted on are read whole."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from foliot.core.workflow import machine
from foliot.core.workflow.machine import ChildRunClosed
from foliot.core.workflow.model import ChildSlot, FanOut, ParentRef, Run
from foliot.kinds.run import children
from foliot.kinds.run.children import RECONCILE_PAGE

from ..sim.store import FakeStore

T0 = 1_800_000_000_000
WAITED = 1_200  # open children of one map, all waited for: more than two pages


def run(run_id: str, status: str = "waiting", **kw: Any) -> Run:
    return Run(
        run_id=run_id,
        app="app",
        workflow="wf",
        version=1,
        status=status,
        input={"big": "x" * 1000},
        state={},
        generation=1,
        created_at=T0,
        updated_at=T0,
        trace_id="t",
        **kw,
    )


def child(run_id: str, parent: str, index: int, status: str = "waiting", on_close: str = "cancel") -> Run:
    ref = ParentRef(parent, "m", 1, 1, index, on_close)
    closed = None if status == "waiting" else T0 + 1
    return run(run_id, status, parent=ref, closed_at=closed)


class Counting:
    """The fake store, every recovery read recorded with the rows it answered."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.calls: list[tuple[str, int, int]] = []  # (method, limit or ids asked, rows answered)

    async def child_links(self, after: Any, limit: int) -> Any:
        page = await self.store.child_links(after, limit)
        self.calls.append(("child_links", limit, len(page)))
        return page

    async def parent_fans(self, run_ids: Any) -> Any:
        found = await self.store.parent_fans(run_ids)
        self.calls.append(("parent_fans", len(run_ids), len(found)))
        return found

    async def get_runs(self, run_ids: Any) -> Any:
        found = await self.store.get_runs(run_ids)
        self.calls.append(("get_runs", len(run_ids), len(found)))
        return found

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"recovery read {name}: a whole document or every row at once")


@pytest.fixture
def store() -> FakeStore:
    store = FakeStore()
    slots = tuple(ChildSlot(i, f"w{i:04}") for i in range(WAITED))
    fan = FanOut("m", "map", 1, 1, WAITED, WAITED, slots)
    runs = [run("p-map", current_step="m", fan=fan)]
    runs += [child(f"w{i:04}", "p-map", i) for i in range(WAITED)]
    # A closed parent: its open children are cancelled, unless they abandon it.
    runs += [run("p-gone", "cancelled", closed_at=T0 + 1)]
    runs += [child(f"g{i}", "p-gone", i) for i in range(3)]
    runs += [child("g-abandon", "p-gone", 3, on_close="abandon")]
    # A parent waiting on a child that closed before the crash (its close not applied yet),
    # and on one open child not ours to recover.
    fan2 = FanOut("m", "map", 1, 1, 2, 2, (ChildSlot(0, "k-done"), ChildSlot(1, "k-open")))
    runs += [run("p-told", current_step="m", fan=fan2)]
    runs += [child("k-done", "p-told", 0, "completed"), child("k-open", "p-told", 1)]
    runs += [child("k-other", "p-told", 2)]  # not waited for, but another node's to recover
    for r in runs:
        store.runs[r.run_id] = r
    return store


async def test_reconcile_reads_bounded_pages_and_only_the_children_it_acts_on(store: FakeStore) -> None:
    counting = Counting(store)
    sent: list[tuple[str, Any]] = []
    runs = SimpleNamespace(host=SimpleNamespace(store=counting), tell=lambda to, m: sent.append((to, m)))

    told, cancelled = await children.reconcile(runs, lambda actor: actor != "k-other")  # type: ignore[arg-type]

    assert (told, cancelled) == (1, 3)
    cancels = sorted(to for to, m in sent if isinstance(m, machine.Cancel))
    assert cancels == ["g0", "g1", "g2"]
    (tell,) = [(to, m) for to, m in sent if isinstance(m, ChildRunClosed)]
    assert tell[0] == "p-told" and tell[1].run_id == "k-done"
    # Every read is bounded by the page, whatever the number of open children.
    links = [c for c in counting.calls if c[0] == "child_links"]
    assert all(limit == RECONCILE_PAGE and rows <= RECONCILE_PAGE for _, limit, rows in links)
    assert sum(rows for _, _, rows in links) == WAITED + 7  # every link, once
    assert len(links) == -(-(WAITED + 7) // RECONCILE_PAGE)  # ceil: pages, not one read
    fans = [c for c in counting.calls if c[0] == "parent_fans"]
    assert len(fans) == len(links) and max(asked for _, asked, _ in fans) <= 3  # per page, once each
    # Whole documents: only the children acted on or judged (the abandoning one), never the
    # 1,200 waited for, never a parent.
    whole = sum(asked for name, asked, _ in counting.calls if name == "get_runs")
    assert whole == 3 + 1 + 1


async def test_a_parent_is_read_after_its_page_so_a_child_started_since_is_not_cancelled(
    store: FakeStore,
) -> None:
    """A child started while recovery runs (a timer fired, a map's next item started) is waited
    for by its parent's newer document: each page's parents are read after the page, never
    kept from an earlier page (the map's parent spans three pages; its new child is on the last)."""
    sent: list[tuple[str, Any]] = []
    runs = SimpleNamespace(host=SimpleNamespace(store=store), tell=lambda to, m: sent.append((to, m)))
    real = store.child_links

    async def links_then_a_new_child(after: Any, limit: int) -> Any:
        page = await real(after, limit)
        if after is None:  # after the first page: the map starts one more child
            parent = store.runs["p-map"]
            assert parent.fan is not None
            fan = attrs.evolve(parent.fan, open=(*parent.fan.open, ChildSlot(WAITED, "w9999")))
            store.runs["p-map"] = attrs.evolve(parent, fan=fan)
            store.runs["w9999"] = child("w9999", "p-map", WAITED)
        return page

    store.child_links = links_then_a_new_child  # type: ignore[method-assign]
    await children.reconcile(runs, lambda actor: actor != "k-other")  # type: ignore[arg-type]
    cancelled = {to for to, m in sent if isinstance(m, machine.Cancel)}
    assert cancelled == {"g0", "g1", "g2"}  # not w9999
