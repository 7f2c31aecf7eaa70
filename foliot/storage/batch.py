"""Many units of work as one set of rows: what a group commit writes in a few statements.

Both stores commit the units queued together in one transaction. Written one by one, a unit
costs five or six statements (run, events, tasks, timers, ...), and each statement a round trip
to PostgreSQL or a GIL hand-over on SQLite's writer thread. `batch_rows` gathers the rows of all
the units so that each table is written once per batch, in the same order as one-by-one
application would write them. It is pure: the stores run the statements, and fall back to one
unit at a time (each in its own savepoint) when the batch as a whole is refused, so that only
the unit at fault gets the error.
"""

from __future__ import annotations

from typing import Any

import attrs

from .base import (
    IdempotencyRecord,
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
    expired record (`(row..., expired_before)`, each must write exactly one row).
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


def batch_rows(units: list[UnitOfWork]) -> BatchRows | None:
    """The rows of `units`, or None when they cannot be written as one set: a run written twice
    in the batch (its second unit is guarded by the first one's seq, so order matters), one
    idempotency key taken twice, or a schedule's fire (rare: written one by one, `unit_tx`)."""
    if any(unit.fire is not None for unit in units):
        return None
    runs: set[str] = set()
    keys: set[tuple[str, str]] = set()
    inserts: list[tuple[Any, ...]] = []
    updates: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    tasks: list[tuple[Any, ...]] = []
    replaced: list[str] = []
    timers: list[tuple[Any, ...]] = []
    signal_ids: list[tuple[Any, ...]] = []
    plain: list[tuple[Any, ...]] = []
    replacing: list[tuple[Any, ...]] = []
    for unit in flatten(units):
        if unit.slot is not None or unit.debounce is not None:
            return None  # its guard reads before it writes: `unit_tx`, one by one
        run = unit.run
        if run.run_id in runs:
            return None
        runs.add(run.run_id)
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
            if (record.app, record.key) in keys:
                return None
            keys.add((record.app, record.key))
            if unit.idempotency_expired_before is None:
                plain.append(idempotency_row(record))
            else:
                replacing.append((*idempotency_row(record), unit.idempotency_expired_before))
    return BatchRows(inserts, updates, events, tasks, replaced, timers, signal_ids, plain, replacing)


def chunks(rows: list[tuple[Any, ...]], width: int, max_params: int) -> list[list[tuple[Any, ...]]]:
    """`rows` (each `width` values) cut into runs of at most `max_params` values in total."""
    size = max(1, max_params // width)
    return [rows[i : i + size] for i in range(0, len(rows), size)]
