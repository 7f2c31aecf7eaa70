"""Many units of work as one set of rows: what a group commit writes in a few statements.

Both stores commit the units queued together in one transaction. Written one by one, a unit
costs five or six statements (run, events, tasks, timers, ...), and each statement a round trip
to PostgreSQL or a GIL hand-over on SQLite's writer thread. `plan_batch` gathers the rows of
the units so that each table is written once per batch, in the same order as one-by-one
application would write them. It is pure: the stores run the statements, and fall back to one
unit at a time (each in its own savepoint) when the batch as a whole is refused, so that only
the unit at fault gets the error.

A unit with a guard that reads before it writes (a concurrency slot's admission, a debounce
key's claim) does not sink the set: the units without one are written first, as a set (a
slot queued or left, a debounce key released, are plain writes among them); then the guards
of the others are read at once (`BatchPlan.slot_reads`, `claim_reads`, under a lock of each
slot key on PostgreSQL) and decided here in batch order (`BatchPlan.refusals`), as writing them
one by one would decide them, with what the first set wrote before them (a slot left may be
taken, a key released claimed again; a run queued in the batch is written after them); the
admitted ones are written as a second set (`BatchPlan.then`), a refused one writes nothing and
gets its `UniqueViolation`, its neighbours are untouched. A schedule's fire (rare) is written on
its own (`BatchPlan.alone`, `run_sql.unit_tx`) in the same transaction.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs

from ..core.errors import UniqueViolation
from .base import (
    DEBOUNCE_TAKEN,
    SLOT_TAKEN,
    IdempotencyRecord,
    SlotChange,
    UnitOfWork,
    event_rows,
    flatten,
    idempotency_row,
    parent_of,
    run_row,
    search_columns,
    signal_id_rows,
    step_columns,
    task_rows,
    timer_rows,
)


@attrs.frozen
class BatchRows:
    """The rows of several units, table by table.

    `inserts` are `run_row` + `step_columns` + `search_columns`; `updates` are `(run_id, status,
    is_open, seq, doc, workflow, closed_at, expected_seq, current_step, step_since,
    workflow_version, error_class)`; a
    store must refuse the batch unless every one of them matched its row. `replaced_timers` are
    the runs whose timer rows are deleted before `timers` are inserted (a new run has none).
    `idempotency` holds plain inserts; `idempotency_replacing` the inserts that may replace an
    expired record (`(row..., expired_before)`, each must write exactly one row). `slots` are
    `run_sql.SET_SLOT`'s `(slot_key, queue_key, run_id)`, written after the runs;
    `debounce_released` `RELEASE_DEBOUNCE`'s and `debounce_claimed` `INSERT_DEBOUNCE`'s rows
    (a claim only once its guard was read: `BatchPlan.then`).
    """

    inserts: list[tuple[Any, ...]]
    updates: list[tuple[Any, ...]]
    events: list[tuple[Any, ...]]
    tasks: list[tuple[Any, ...]]
    replaced_timers: list[str]
    timers: list[tuple[Any, ...]]
    signal_ids: list[tuple[Any, ...]]
    idempotency: list[tuple[Any, ...]]
    idempotency_replacing: list[tuple[Any, ...]]
    slots: list[tuple[Any, ...]] = attrs.Factory(list)
    debounce_released: list[tuple[Any, ...]] = attrs.Factory(list)
    debounce_claimed: list[tuple[Any, ...]] = attrs.Factory(list)

    @property
    def plain(self) -> bool:
        """No slot or debounce row: what the one-statement paths of PostgreSQL can write."""
        return not (self.slots or self.debounce_released or self.debounce_claimed)


def guarded(unit: UnitOfWork) -> bool:
    """Whether the unit's write depends on what it reads first: a slot's admission (fewer than
    `limit` held and no older run waiting) or a debounce key's claim (no burst under way)."""
    return (unit.slot is not None and unit.slot.kind == "admit") or (
        unit.debounce is not None and unit.debounce.kind == "claim"
    )


@attrs.frozen
class Admission:
    """A guarded unit's slot admission (`SlotChange("admit")`)."""

    index: int  # the unit's place in the batch
    app: str
    key: str
    limit: int
    run_id: str


@attrs.frozen
class Claim:
    """A guarded unit's debounce claim (`DebounceChange("claim")`)."""

    index: int
    app: str
    workflow: str
    key: str


@attrs.frozen
class BatchPlan:
    """How the units of a batch are written (see the module's docstring): `together` (their
    `first` rows) as a set, then the guards of `guarded` read and decided (`refusals`), the
    admitted ones written as a set (`then`); `alone` (a schedule's fire) one by one."""

    units: tuple[UnitOfWork, ...]
    together: tuple[int, ...]
    first: BatchRows
    guarded: tuple[int, ...]
    admissions: tuple[Admission, ...]
    claims: tuple[Claim, ...]
    alone: tuple[int, ...]
    queued: tuple[tuple[Any, ...], ...] = ()  # `together`'s slot rows of runs starting to wait

    def slot_reads(self) -> list[tuple[str, str, int]]:
        """`(app, key, n)` for each slot key admissions ask for, in (app, key) order (the order
        PostgreSQL locks them in): read its held count and its `n` oldest queued runs."""
        wanted: dict[tuple[str, str], int] = {}
        for a in self.admissions:
            wanted[(a.app, a.key)] = wanted.get((a.app, a.key), 0) + 1
        return [(app, key, n) for (app, key), n in sorted(wanted.items())]

    def locks(self) -> list[tuple[str, str]]:
        """`(app, key)` of the slot keys to lock before the guards are read (PostgreSQL), in
        order: those admitted to, and those a run leaves. A leave takes the lock so that an
        admission deciding against it at the same time is ordered with it: either the
        admission sees the slot free, or it commits (queued) before the leave's wake-up reads
        the queue, which then finds it (no wake-up lost)."""
        keys = {(a.app, a.key) for a in self.admissions}
        for i in self.together:
            unit = self.units[i]
            if unit.slot is not None and unit.slot.kind == "leave":
                keys.add((unit.run.app, unit.slot.key))
        return sorted(keys)

    def claim_reads(self) -> list[tuple[str, str, str]]:
        """`(app, workflow, key)` of each debounce key claimed, once each."""
        return sorted({(c.app, c.workflow, c.key) for c in self.claims})

    def refusals(
        self,
        held: Mapping[tuple[str, str], int],
        heads: Mapping[tuple[str, str], Sequence[str]],
        taken: Collection[tuple[str, str, str]],
    ) -> dict[int, UniqueViolation]:
        """The guarded units refused, by place in the batch, decided in batch order as
        `run_sql.slot_tx` and `debounce_tx` would one by one: an admission needs fewer than
        `limit` slots of its key held and no older run waiting (the head of its queue is
        itself, or none), counting the admissions accepted before it in the batch; a claim
        needs its key free of a burst, counting the claims accepted before it. `held` and
        `heads` are `slot_reads`' answers (read after the `first` rows were written), `taken`
        the claimed keys that have a row."""
        count = dict(held)
        queues = {k: deque(v) for k, v in heads.items()}
        claimed = set(taken)
        admission = {a.index: a for a in self.admissions}
        claim = {c.index: c for c in self.claims}
        out: dict[int, UniqueViolation] = {}
        for index in self.guarded:
            a, c = admission.get(index), claim.get(index)
            if a is not None:
                slot = (a.app, a.key)
                queue = queues.get(slot)
                if count.get(slot, 0) >= a.limit:
                    out[index] = UniqueViolation(SLOT_TAKEN, f"all {a.limit} slots of {a.key!r} are taken")
                    continue
                if queue and queue[0] != a.run_id:
                    out[index] = UniqueViolation(SLOT_TAKEN, f"an older run waits for a slot of {a.key!r}")
                    continue
            if c is not None and (c.app, c.workflow, c.key) in claimed:
                out[index] = UniqueViolation(DEBOUNCE_TAKEN, f"debounce key {c.key!r} has a burst under way")
                continue
            if a is not None:
                count[(a.app, a.key)] = count.get((a.app, a.key), 0) + 1
                queue = queues.get((a.app, a.key))
                if queue and queue[0] == a.run_id:
                    queue.popleft()
            if c is not None:
                claimed.add((c.app, c.workflow, c.key))
        return out

    def then(self, refused: Collection[int]) -> BatchRows:
        """The rows of the guarded units not `refused` (their slot taken, their key claimed),
        the `otherwise` of those refused that have one, and the `queued` slot rows of the units
        written first."""
        written = []
        for i in self.guarded:
            unit = self.units[i]
            if i not in refused:
                written.append(unit)
            elif unit.otherwise is not None:
                written.append(unit.otherwise)
        rows = _rows(written)
        if self.queued:
            rows = attrs.evolve(rows, slots=[*rows.slots, *self.queued])
        return rows

    def instead(self, refused: Collection[int]) -> set[int]:
        """The refused units whose `otherwise` `then` writes: they are answered False, not
        refused."""
        return {i for i in refused if self.units[i].otherwise is not None}


def plan_batch(units: Sequence[UnitOfWork]) -> BatchPlan | None:
    """How to write `units` together, or None when they cannot be written as sets: a run
    written twice in the batch (its second unit is guarded by the first one's seq, so order
    matters), one idempotency key taken twice, or a guard or a fire in a child run."""
    runs: set[str] = set()
    keys: set[tuple[str, str]] = set()
    together: list[int] = []
    held_back: list[int] = []
    alone: list[int] = []
    admissions: list[Admission] = []
    claims: list[Claim] = []
    for index, unit in enumerate(units):
        for member in flatten([unit]):
            if member.run.run_id in runs:
                return None
            runs.add(member.run.run_id)
            record = member.idempotency
            if record is not None:
                if (record.app, record.key) in keys:
                    return None
                keys.add((record.app, record.key))
            if member is not unit and (member.fire is not None or guarded(member)):
                return None
        if unit.fire is not None:
            alone.append(index)
            continue
        if not guarded(unit):
            together.append(index)
            continue
        held_back.append(index)
        run = unit.run
        if unit.otherwise is not None and not _alternative(unit, unit.otherwise):
            return None
        if unit.slot is not None and unit.slot.kind == "admit":
            admissions.append(Admission(index, run.app, unit.slot.key, unit.slot.limit, run.run_id))
        if unit.debounce is not None and unit.debounce.kind == "claim":
            claims.append(Claim(index, run.app, unit.debounce.workflow, unit.debounce.key))
    first = _rows([units[i] for i in together])
    queued: list[tuple[Any, ...]] = []
    if admissions:
        # Runs starting to wait are written after the admissions are decided: a run queued in
        # the same batch does not turn an admission away (they are concurrent; either order is
        # one-by-one's). A slot left is written before: an admission may take it.
        queued = [row for row in first.slots if row[0] is None and row[1] is not None]
        first = attrs.evolve(first, slots=[row for row in first.slots if row[1] is None])
    return BatchPlan(
        tuple(units),
        tuple(together),
        first,
        tuple(held_back),
        tuple(admissions),
        tuple(claims),
        tuple(alone),
        tuple(queued),
    )


def _alternative(unit: UnitOfWork, otherwise: UnitOfWork) -> bool:
    """Whether `otherwise` can stand in for `unit` in a set: the same run, no guard, no fire,
    no child of its own, the same idempotency key if any."""
    return (
        otherwise.run.run_id == unit.run.run_id
        and not guarded(otherwise)
        and otherwise.fire is None
        and otherwise.otherwise is None
        and not otherwise.children
        and _key(otherwise.idempotency) in (None, _key(unit.idempotency))
        and unit.slot is not None
        and unit.slot.kind == "admit"
    )


def _key(record: IdempotencyRecord | None) -> tuple[str, str] | None:
    return None if record is None else (record.app, record.key)


def batch_rows(units: list[UnitOfWork]) -> BatchRows | None:
    """The rows of `units` when all of them can be written as one set with no guard to read
    (`plan_batch`), else None."""
    plan = plan_batch(units)
    if plan is None or plan.guarded or plan.alone:
        return None
    return plan.first


def _rows(units: Sequence[UnitOfWork]) -> BatchRows:
    """The rows of `units` (and their child runs), in one-by-one order; a slot or debounce
    change as the row it writes (an admission or a claim: as if its guard let it)."""
    inserts: list[tuple[Any, ...]] = []
    updates: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    tasks: list[tuple[Any, ...]] = []
    replaced: list[str] = []
    timers: list[tuple[Any, ...]] = []
    signal_ids: list[tuple[Any, ...]] = []
    plain: list[tuple[Any, ...]] = []
    replacing: list[tuple[Any, ...]] = []
    slots: list[tuple[Any, ...]] = []
    released: list[tuple[Any, ...]] = []
    claimed: list[tuple[Any, ...]] = []
    for unit in flatten(units):
        run = unit.run
        row = run_row(run)
        step, since = step_columns(run)
        version, error_class = search_columns(run)
        if unit.expected_seq is None:
            inserts.append((*row, step, since, version, error_class, parent_of(run)))
        else:
            updates.append(
                (
                    run.run_id,
                    run.status,
                    run.is_open,
                    run.seq,
                    row[8],
                    run.workflow,
                    row[9],
                    unit.expected_seq,
                    step,
                    since,
                    version,
                    error_class,
                )
            )
            replaced.append(run.run_id)
        events += event_rows(unit)
        tasks += task_rows(unit)
        timers += timer_rows(run)
        signal_ids += signal_id_rows(unit)
        record: IdempotencyRecord | None = unit.idempotency
        if record is not None:
            if unit.idempotency_expired_before is None:
                plain.append(idempotency_row(record))
            else:
                replacing.append((*idempotency_row(record), unit.idempotency_expired_before))
        if unit.slot is not None:
            slots.append(slot_row(run.run_id, unit.slot))
        change = unit.debounce
        if change is not None:
            if change.kind == "release":
                released.append((run.app, change.workflow, change.key, run.run_id))
            else:
                claimed.append((run.app, change.workflow, change.key, run.run_id, change.mode, change.until))
    return BatchRows(
        inserts,
        updates,
        events,
        tasks,
        replaced,
        timers,
        signal_ids,
        plain,
        replacing,
        slots,
        released,
        claimed,
    )


def slot_row(run_id: str, slot: SlotChange) -> tuple[str | None, str | None, str]:
    """`SET_SLOT`'s `(slot_key, queue_key, run_id)` for a slot change (an admission: taken)."""
    if slot.kind == "admit":
        return (slot.key, None, run_id)
    if slot.kind == "queue":
        return (None, slot.key, run_id)
    return (None, None, run_id)


def chunks(rows: list[tuple[Any, ...]], width: int, max_params: int) -> list[list[tuple[Any, ...]]]:
    """`rows` (each `width` values) cut into runs of at most `max_params` values in total."""
    size = max(1, max_params // width)
    return [rows[i : i + size] for i in range(0, len(rows), size)]
