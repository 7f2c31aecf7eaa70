"""A store in memory with the real stores' constraints: what the run kind reads and writes.

The run row is guarded by `seq`, one open run per (app, workflow, business key), one live
record per Idempotency-Key, a signalId taken once per run, a concurrency slot taken only while
one is free and no older run waits for it; a unit of work and the child runs it starts are
checked as a whole, then applied as a whole. Documents cross the boundary as the real
stores' do, through their JSON text (`run_json`, `run_from_dict`), so a field that does not
survive storage shows. The events, tasks and idempotency records are kept for the checkers
(tests/sim/checker.py); timers are derived from the stored runs, as the real stores derive
their rows.

Used by tests/unit/test_run_kind_fake_store.py (the run kind on a fake host) and by the
simulation (tests/sim/world.py), which puts a faulty connection in front of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import trio

from foliot.actors.timer_wheel import Position
from foliot.core.errors import StaleWrite, StorageUnavailable, UniqueViolation
from foliot.core.workflow.definition import canonical_json
from foliot.core.workflow.model import Event, Run, TaskRow, run_from_dict
from foliot.storage.base import (
    SIGNAL_ID_UNIQUE,
    SLOT_TAKEN,
    AppRecord,
    ChildLink,
    CommitObserver,
    IdempotencyRecord,
    ParentFan,
    QueuedKey,
    SecretRecord,
    TimerRecord,
    UnitOfWork,
    WorkflowRecord,
    flatten,
    run_json,
)

T0 = 1_800_000_000_000
APP = "shop"


def stored(run: Run) -> Run:
    """The run as a read of it gives it back: through its JSON text."""
    return run_from_dict(json.loads(run_json(run)))


class FakeStore:
    """What the run kind and the node read and write, in memory, with the real constraints."""

    def __init__(self, commit_delay: float = 0.005) -> None:
        self.commit_delay = commit_delay  # a commit takes time: anything racing it would show
        self.runs: dict[str, Run] = {}
        self.events: dict[str, list[Event]] = {}
        self.tasks: dict[str, TaskRow] = {}
        self.workflows: dict[tuple[str, str], list[WorkflowRecord]] = {}
        self.apps: dict[str, AppRecord] = {}
        self.secrets: dict[str, list[SecretRecord]] = {}
        self.idempotency: dict[tuple[str, str], IdempotencyRecord] = {}
        self.signal_ids: set[tuple[str, str]] = set()
        # Concurrency keys (the `runs.slot_key` and `runs.queue_key` columns): run id -> key.
        self.slot_key: dict[str, tuple[str, str]] = {}
        self.queue_key: dict[str, tuple[str, str]] = {}
        self.commits: list[UnitOfWork] = []  # committed, in order
        self.refused: list[UnitOfWork] = []
        self.fail_commits = 0  # the next commits fail, nothing written
        self.lose_replies = 0  # the next commits are written, then fail (their reply lost)
        self.fail_reads = 0  # the next reads of a run fail
        self.get_run_calls = 0
        self._observer: CommitObserver | None = None

    # ------------------------------------------------------------------ set-up

    def add_workflow(self, definition: dict[str, Any], app: str = APP) -> None:
        versions = self.workflows.setdefault((app, definition["name"]), [])
        versions.append(
            WorkflowRecord(app, definition["name"], len(versions) + 1, canonical_json(definition), T0)
        )

    def add_app(self, app: str, handler_base_url: str, secret_enc: str) -> None:
        self.apps[app] = AppRecord(app, handler_base_url, None, T0, T0)
        self.secrets[app] = [SecretRecord(f"sec_{app}", app, secret_enc, T0, None)]

    # ------------------------------------------------------------------ commits

    def observe_commits(self, observer: CommitObserver | None) -> None:
        self._observer = observer

    async def commit(self, unit: UnitOfWork) -> bool:
        observer = self._observer
        started = observer.commit_started() if observer is not None else 0.0
        committed = False
        try:
            if self.commit_delay:
                await trio.sleep(self.commit_delay)
            else:
                await trio.lowlevel.checkpoint()
            written = self.apply(unit)
            committed = True
            return written
        finally:
            if observer is not None:
                observer.commit_ended(unit, started, committed)

    def apply(self, unit: UnitOfWork) -> bool:
        """Check the unit (and the child runs it starts) as a whole, then write it: atomic.
        False: its slot admission was refused and its `otherwise` (the run queued) written."""
        try:
            self._apply(unit)
        except UniqueViolation as exc:
            if exc.constraint != SLOT_TAKEN or unit.otherwise is None:
                raise
            self._apply(unit.otherwise)
            return False
        return True

    def _apply(self, unit: UnitOfWork) -> None:
        units = flatten([unit])
        try:
            if self.fail_commits:
                self.fail_commits -= 1
                raise StorageUnavailable("the database is down")
            for one in units:
                self._check(one, units)
        except Exception:
            self.refused.append(unit)
            raise
        for one in units:
            self._write(one)
        self.commits.append(unit)
        if self.lose_replies:
            self.lose_replies -= 1
            raise StorageUnavailable("the connection was lost during the commit (it was written)")

    def _check(self, unit: UnitOfWork, together: list[UnitOfWork]) -> None:
        run = unit.run
        held = self.runs.get(run.run_id)
        if unit.expected_seq is None:
            assert held is None, "a new run's id was taken"
        elif held is None or held.seq != unit.expected_seq:
            raise StaleWrite(f"run {run.run_id} changed underneath seq {unit.expected_seq}")
        if run.business_key is not None and run.is_open:
            written = {u.run.run_id: u.run for u in together}
            for other in (*self.runs.values(), *written.values()):
                other = written.get(other.run_id, other)
                if (
                    other.run_id != run.run_id
                    and other.is_open
                    and (other.app, other.workflow, other.business_key)
                    == (run.app, run.workflow, run.business_key)
                ):
                    raise UniqueViolation("business_key")
        if len(set(unit.signal_ids)) != len(unit.signal_ids) or any(
            (run.run_id, s) in self.signal_ids for s in unit.signal_ids
        ):
            raise UniqueViolation(SIGNAL_ID_UNIQUE)
        record = unit.idempotency
        if record is not None:
            taken = self.idempotency.get((record.app, record.key))
            expired = unit.idempotency_expired_before
            if taken is not None and (expired is None or taken.created_at >= expired):
                raise UniqueViolation("idempotency")
        slot = unit.slot
        if slot is not None and slot.kind == "admit":  # `run_sql.slot_tx`
            key = (run.app, slot.key)
            if sum(1 for k in self.slot_key.values() if k == key) >= slot.limit:
                raise UniqueViolation(SLOT_TAKEN, f"all {slot.limit} slots of {slot.key!r} are taken")
            head = self._heads(key, 1)
            if head and head[0] != run.run_id:
                raise UniqueViolation(SLOT_TAKEN, f"an older run waits for a slot of {slot.key!r}")
        assert unit.debounce is None and unit.fire is None, "not simulated"

    def _heads(self, key: tuple[str, str], limit: int) -> list[str]:
        waiting = [run_id for run_id, k in self.queue_key.items() if k == key]
        return sorted(waiting, key=lambda run_id: (self.runs[run_id].created_at, run_id))[:limit]

    def _write(self, unit: UnitOfWork) -> None:
        run = unit.run
        self.runs[run.run_id] = stored(run)
        self.events.setdefault(run.run_id, []).extend(unit.events)
        self.tasks.update((row.token, row) for row in unit.tasks)
        self.signal_ids.update((run.run_id, s) for s in unit.signal_ids)
        if unit.idempotency is not None:
            record = unit.idempotency
            self.idempotency[(record.app, record.key)] = record
        slot = unit.slot
        if slot is not None:
            self.slot_key.pop(run.run_id, None)
            self.queue_key.pop(run.run_id, None)
            if slot.kind == "admit":
                self.slot_key[run.run_id] = (run.app, slot.key)
            elif slot.kind == "queue":
                self.queue_key[run.run_id] = (run.app, slot.key)

    # ------------------------------------------------------------------ reads

    async def get_run(self, run_id: str) -> Run | None:
        await trio.lowlevel.checkpoint()
        self.get_run_calls += 1
        if self.fail_reads:
            self.fail_reads -= 1
            raise StorageUnavailable("the database is down")
        return self.runs.get(run_id)

    async def get_workflow(self, app: str, name: str, version: int | None) -> WorkflowRecord | None:
        await trio.lowlevel.checkpoint()
        versions = self.workflows.get((app, name), [])
        if version is None:
            return versions[-1] if versions else None
        return versions[version - 1] if 0 < version <= len(versions) else None

    async def get_idempotency(self, app: str, key: str) -> IdempotencyRecord | None:
        await trio.lowlevel.checkpoint()
        return self.idempotency.get((app, key))

    async def find_open_run(self, app: str, workflow: str, business_key: str) -> Run | None:
        await trio.lowlevel.checkpoint()
        return next(
            (
                r
                for r in self.runs.values()
                if r.is_open and (r.app, r.workflow, r.business_key) == (app, workflow, business_key)
            ),
            None,
        )

    async def signal_taken(self, run_id: str, signal_id: str) -> bool:
        await trio.lowlevel.checkpoint()
        return (run_id, signal_id) in self.signal_ids

    async def timers_due_before(
        self, before: int, limit: int, after: Position | None = None
    ) -> list[TimerRecord]:
        """The timer rows, derived from the stored runs as the real stores derive them."""
        await trio.lowlevel.checkpoint()
        rows = sorted(
            (t.due, run_id, slot, t.kind, t.key)
            for run_id, run in self.runs.items()
            for slot, t in run.timers()
            if t.due < before
        )
        picked = [r for r in rows if after is None or r[:3] > after][:limit]
        return [TimerRecord(run_id, slot, kind, key, due) for due, run_id, slot, kind, key in picked]

    async def get_task(self, token: str) -> TaskRow | None:
        await trio.lowlevel.checkpoint()
        return self.tasks.get(token)

    async def open_tasks(
        self, after: tuple[int, str] | None = None, limit: int | None = None
    ) -> list[TaskRow]:
        await trio.lowlevel.checkpoint()
        found = sorted(
            (t for t in self.tasks.values() if t.status == "open"), key=lambda t: (t.created_at, t.token)
        )
        if after is not None:
            found = [t for t in found if (t.created_at, t.token) > after]
        return found if limit is None else found[:limit]

    async def children_of(
        self, parent_run_id: str, after: tuple[int, str] | None = None, limit: int | None = None
    ) -> list[Run]:
        await trio.lowlevel.checkpoint()
        found = [r for r in self.runs.values() if r.parent is not None and r.parent.run_id == parent_run_id]
        found.sort(key=lambda r: (r.created_at, r.run_id))
        if after is not None:
            found = [r for r in found if (r.created_at, r.run_id) > after]
        return found if limit is None else found[:limit]

    async def child_links(self, after: tuple[str, int, str] | None, limit: int) -> list[ChildLink]:
        await trio.lowlevel.checkpoint()
        links = []
        for child in self.runs.values():
            parent = self.runs.get(child.parent.run_id) if child.parent is not None else None
            if parent is None:
                continue
            if child.is_open or (parent.is_open and parent.status in ("waiting", "paused")):
                link = ChildLink(child.run_id, parent.run_id, child.created_at, child.is_open)
                if after is None or link.cursor > after:
                    links.append(link)
        links.sort(key=lambda link: link.cursor)
        return links[:limit]

    async def parent_fans(self, run_ids: Sequence[str]) -> dict[str, ParentFan]:
        await trio.lowlevel.checkpoint()
        found = (self.runs.get(run_id) for run_id in run_ids)
        return {run.run_id: ParentFan(run.run_id, run.is_open, run.fan) for run in found if run is not None}

    async def get_runs(self, run_ids: Sequence[str]) -> dict[str, Run]:
        await trio.lowlevel.checkpoint()
        return {run_id: self.runs[run_id] for run_id in run_ids if run_id in self.runs}

    async def queued_keys(self, after: tuple[str, str] | None, limit: int) -> list[QueuedKey]:
        await trio.lowlevel.checkpoint()
        keys = sorted(k for k in set(self.queue_key.values()) if after is None or k > after)[:limit]
        page = []
        for app, key in keys:
            head = self.runs[self._heads((app, key), 1)[0]]
            held = sum(1 for k in self.slot_key.values() if k == (app, key))
            page.append(QueuedKey(app, key, head.run_id, head.version, head.created_at, held))
        return page

    async def queue_heads(self, app: str, key: str, limit: int) -> list[str]:
        await trio.lowlevel.checkpoint()
        return self._heads((app, key), limit)

    async def queue_room(self, app: str, key: str, limit: int) -> tuple[int, list[tuple[str, int]]]:
        await trio.lowlevel.checkpoint()
        heads = [(run_id, self.runs[run_id].version) for run_id in self._heads((app, key), limit)]
        held = sum(1 for k in self.slot_key.values() if k == (app, key))
        return (held if heads else 0), heads

    async def get_app(self, name: str) -> AppRecord | None:
        await trio.lowlevel.checkpoint()
        return self.apps.get(name)

    async def list_signing_secrets(self, app: str) -> list[SecretRecord]:
        await trio.lowlevel.checkpoint()
        return list(self.secrets.get(app, []))

    async def get_app_flow(self, app: str) -> None:
        await trio.lowlevel.checkpoint()
        return None

    def app_limits(self, app: str) -> dict[str, int | float]:
        return {}  # no overrides: every app has the settings' limits

    def open_runs(self, app: str) -> int:
        return sum(1 for run in self.runs.values() if run.app == app and run.is_open)

    async def get_app_limits(self, app: str) -> dict[str, int | float]:
        await trio.lowlevel.checkpoint()
        return self.app_limits(app)

    async def open_runs_of(self, app: str) -> int:
        await trio.lowlevel.checkpoint()
        return self.open_runs(app)

    async def count_open_runs(self) -> dict[str, int]:
        await trio.lowlevel.checkpoint()
        counts: dict[str, int] = {}
        for run in self.runs.values():
            if run.is_open:
                counts[run.status] = counts.get(run.status, 0) + 1
        return counts

    # ------------------------------------------------------------------ retention, SWF (none)

    async def prune_idempotency(self, created_before: int, limit: int) -> int:
        await trio.lowlevel.checkpoint()
        old = [k for k, r in self.idempotency.items() if r.created_at < created_before][:limit]
        for key in old:
            del self.idempotency[key]
        return len(old)

    async def prune_closed_runs(self, closed_before: int, limit: int) -> int:
        await trio.lowlevel.checkpoint()
        return 0  # the retention (30 days) outlasts a simulation

    async def prune_debounce_keys(self, now: int, limit: int) -> int:
        await trio.lowlevel.checkpoint()
        return 0  # no debounce in the simulated workload

    async def prune_orphan_fires(self, after: Any, limit: int) -> tuple[int, Any]:
        await trio.lowlevel.checkpoint()
        return 0, None  # no schedules in the simulated workload

    async def swf_prune_closed(self, now: int, limit: int) -> int:
        await trio.lowlevel.checkpoint()
        return 0

    async def swf_open_executions(self, after: Any, limit: int) -> list[Any]:
        await trio.lowlevel.checkpoint()
        return []

    async def swf_owed_executions(self, after: Any, limit: int) -> list[Any]:
        await trio.lowlevel.checkpoint()
        return []

    # ------------------------------------------------------------------ for assertions

    def holds(self, run_id: str, token: str) -> bool:
        """The store has the run with this task open: what an effect may rely on."""
        run = self.runs.get(run_id)
        return run is not None and run.task is not None and run.task.token == token and token in self.tasks
