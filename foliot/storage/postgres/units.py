"""How PostgreSQL's writer writes a batch of units: as a set with a round trip per table
(`apply_units`), or, for the common batches, in one statement over array parameters
(`INSERT_NEW_RUNS`, `UPDATE_RUNS_SET`). One unit on its own is `run_sql.unit_tx`."""

from __future__ import annotations

from typing import Any

import asyncpg

from ...core.errors import StaleWrite, StorageError, UniqueViolation
from .. import run_sql
from ..batch import BatchPlan, BatchRows
from ..sql import numbered

# The shared statements of `run_sql`, numbered once.
_INSERT_RUN = numbered(run_sql.INSERT_RUN)
_UPDATE_RUN = numbered(run_sql.UPDATE_RUN)
_INSERT_EVENT = numbered(run_sql.INSERT_EVENT)
_UPSERT_TASK = numbered(run_sql.UPSERT_TASK)
_DELETE_TIMERS = "DELETE FROM timers WHERE run_id = ANY($1::text[])"
_INSERT_TIMER = numbered(run_sql.INSERT_TIMER)
_INSERT_SIGNAL_ID = numbered(run_sql.INSERT_SIGNAL_ID)
_INSERT_IDEMPOTENCY = numbered(run_sql.INSERT_IDEMPOTENCY)
_REPLACE_EXPIRED_IDEMPOTENCY = numbered(run_sql.REPLACE_EXPIRED_IDEMPOTENCY)
_RELEASE_DEBOUNCE = numbered(run_sql.RELEASE_DEBOUNCE)
_INSERT_DEBOUNCE = numbered(run_sql.INSERT_DEBOUNCE)
# `BatchRows.slots`: (slot_key, queue_key, run_id) columns.
_SET_SLOTS = (
    "UPDATE runs AS r SET slot_key = u.slot_key, queue_key = u.queue_key"
    " FROM unnest($1::text[], $2::text[], $3::text[]) AS u(slot_key, queue_key, run_id)"
    " WHERE r.run_id = u.run_id"
)
# The slot keys a batch admits to or leaves, locked in the order given (`BatchPlan.locks`, the
# same order for every writer, so two batches never wait for each other's locks in a cycle):
# the transaction-scoped lock `run_sql.slot_tx` takes for one admission or leave.
LOCK_SLOTS = "SELECT count(pg_advisory_xact_lock(hashtext(k))) FROM unnest($1::text[]) AS k"
# (apps, keys, counts): per slot key, the slots held and its `n` oldest queued runs, read in a
# statement after the locks were taken (so it sees every admission committed before them).
READ_SLOTS = (
    "SELECT k.app, k.key,"
    " (SELECT count(*) FROM runs r WHERE r.app = k.app AND r.slot_key = k.key) AS held,"
    " ARRAY(SELECT q.run_id FROM runs q WHERE q.app = k.app AND q.queue_key = k.key"
    " ORDER BY q.created_at, q.run_id LIMIT k.n) AS heads"
    " FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(app, key, n)"
)
# (apps, workflows, keys): the debounce keys claimed that already have a burst.
READ_CLAIMS = (
    "SELECT d.app, d.workflow, d.key FROM debounce_keys d"
    " JOIN unnest($1::text[], $2::text[], $3::text[]) AS c(app, workflow, key)"
    " ON d.app = c.app AND d.workflow = c.workflow AND d.key = c.key"
)


_UPDATE_RUNS = (
    "UPDATE runs AS r SET status = u.status, is_open = u.is_open, seq = u.seq, doc = u.doc,"
    " closed_at = u.closed_at, current_step = u.current_step, step_since = u.step_since,"
    " workflow_version = u.workflow_version, error_class = u.error_class"
    " FROM unnest($1::text[], $2::text[], $3::boolean[], $4::bigint[], $5::text[], $6::bigint[],"
    " $7::bigint[], $8::text[], $9::bigint[], $10::bigint[], $11::text[])"
    " AS u(run_id, status, is_open, seq, doc, closed_at, expected, current_step, step_since,"
    " workflow_version, error_class)"
    " WHERE r.run_id = u.run_id AND r.seq = u.expected RETURNING r.run_id"
)
_IDEMPOTENCY_HELD = (
    "SELECT count(*) FROM idempotency AS i JOIN unnest($1::text[], $2::text[], $3::text[])"
    " AS u(app, key, run_id) ON i.app = u.app AND i.key = u.key AND i.run_id = u.run_id"
)


async def apply_units(conn: asyncpg.Connection, rows: BatchRows | None) -> None:
    """Write several units (their `batch_rows`) with a round trip per table (`executemany`
    pipelines its rows). Raises when any unit would be refused; the caller then rolls back and
    writes them one by one (`run_sql.unit_tx`), each in its own savepoint."""
    if rows is None:
        raise StorageError("these units cannot be written as one set")
    if rows.inserts:
        await conn.executemany(_INSERT_RUN, rows.inserts)
    if len(rows.updates) == 1:
        run_id, status, is_open, seq, doc, _, closed, expected, step, since, version, cls = rows.updates[0]
        done = await conn.execute(
            _UPDATE_RUN, status, is_open, seq, doc, closed, step, since, version, cls, run_id, expected
        )
        if done != "UPDATE 1":
            raise StaleWrite(f"run {run_id} changed underneath seq {expected}")
    elif rows.updates:
        columns = list(zip(*rows.updates, strict=True))
        updated = await conn.fetch(_UPDATE_RUNS, *(columns[i] for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11)))
        if len(updated) != len(rows.updates):
            raise StaleWrite("a run changed underneath its expected seq")
    if rows.events:
        await conn.executemany(_INSERT_EVENT, rows.events)
    if rows.tasks:
        await conn.executemany(_UPSERT_TASK, rows.tasks)
    if rows.replaced_timers:
        await conn.execute(_DELETE_TIMERS, rows.replaced_timers)
    if rows.timers:
        await conn.executemany(_INSERT_TIMER, rows.timers)
    if rows.signal_ids:
        await conn.executemany(_INSERT_SIGNAL_ID, rows.signal_ids)
    if rows.idempotency:
        await conn.executemany(_INSERT_IDEMPOTENCY, rows.idempotency)
    if rows.idempotency_replacing:
        await conn.executemany(_REPLACE_EXPIRED_IDEMPOTENCY, rows.idempotency_replacing)
        # Each must now hold its own run id: a live record it met was left alone (refused).
        apps, keys, run_ids = zip(*[(r[0], r[1], r[3]) for r in rows.idempotency_replacing], strict=True)
        held = await conn.fetchval(_IDEMPOTENCY_HELD, list(apps), list(keys), list(run_ids))
        if held != len(rows.idempotency_replacing):
            raise UniqueViolation("idempotency", "a live record holds this Idempotency-Key")
    if rows.slots:
        await conn.execute(_SET_SLOTS, *_columns(rows.slots, 3))
    if rows.debounce_released:
        await conn.executemany(_RELEASE_DEBOUNCE, rows.debounce_released)
    if rows.debounce_claimed:
        await conn.executemany(_INSERT_DEBOUNCE, rows.debounce_claimed)


async def apply_plan(conn: asyncpg.Connection, plan: BatchPlan) -> dict[int, UniqueViolation]:
    """Write a batch's units as `plan` says (`batch.BatchPlan`): the units without a guard as a
    set, then, under the locks of the slot keys admitted to (writers and nodes run at once),
    the guards read in two statements and the admitted units written as a set. Answers the
    guarded units refused (they wrote nothing). Raises when a set is refused (the caller rolls
    back)."""
    reads = plan.slot_reads()
    locks = plan.locks()
    if locks:
        await conn.fetchval(LOCK_SLOTS, [run_sql.slot_lock(app, key) for app, key in locks])
    await apply_units(conn, plan.first)
    if not plan.guarded:
        return {}
    held: dict[tuple[str, str], int] = {}
    heads: dict[tuple[str, str], list[str]] = {}
    if reads:
        apps, keys, counts = (list(column) for column in zip(*reads, strict=True))
        for row in await conn.fetch(READ_SLOTS, apps, keys, counts):
            held[(row["app"], row["key"])] = row["held"]
            heads[(row["app"], row["key"])] = list(row["heads"])
    taken: list[tuple[str, str, str]] = []
    claims = plan.claim_reads()
    if claims:
        rows = await conn.fetch(READ_CLAIMS, *(list(column) for column in zip(*claims, strict=True)))
        taken = [(r["app"], r["workflow"], r["key"]) for r in rows]
    refused = plan.refusals(held, heads, taken)
    await apply_units(conn, plan.then(refused))
    return refused


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def only_new_runs(rows: BatchRows) -> bool:
    """Whether `INSERT_NEW_RUNS` can write these rows: new runs only, no idempotency record to
    take over, and no task written twice (one INSERT cannot upsert a row twice)."""
    return (
        rows.plain
        and not rows.updates
        and not rows.idempotency_replacing
        and all(row[14] is None for row in rows.inserts)  # child runs: `apply_units`
        and len({task[0] for task in rows.tasks}) == len(rows.tasks)
    )


def only_updates(rows: BatchRows) -> bool:
    """Whether `UPDATE_RUNS_SET` can write these rows: runs already stored moving on, no
    idempotency record, no task written twice (one INSERT cannot upsert a row twice)."""
    return (
        rows.plain
        and bool(rows.updates)
        and not rows.inserts
        and not rows.idempotency
        and not rows.idempotency_replacing
        and len({task[0] for task in rows.tasks}) == len(rows.tasks)
    )


def update_set_columns(rows: BatchRows) -> list[list[Any]]:
    updates = _columns(rows.updates, 12)
    return [
        *(updates[i] for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11)),
        *_columns(rows.events, 8),
        *_columns(rows.tasks, 13),
        *_columns(rows.timers, 5),
        *_columns(rows.signal_ids, 3),
    ]


def new_run_columns(rows: BatchRows) -> list[list[Any]]:
    return [
        *_columns(rows.inserts, 15)[:14],
        *_columns(rows.events, 8),
        *_columns(rows.tasks, 13),
        *_columns(rows.timers, 5),
        *_columns(rows.signal_ids, 3),
        *_columns(rows.idempotency, 6),
    ]


# Every table a start writes, in one statement (array parameters, one per column).
INSERT_NEW_RUNS = (
    "WITH new_runs AS (INSERT INTO runs (run_id, app, workflow, status, business_key, is_open,"
    " created_at, seq, doc, closed_at, current_step, step_since, workflow_version, error_class)"
    " SELECT * FROM unnest($1::text[], $2::text[], $3::text[],"
    " $4::text[], $5::text[], $6::boolean[], $7::bigint[], $8::bigint[], $9::text[], $10::bigint[],"
    " $11::text[], $12::bigint[], $13::bigint[], $14::text[])),"
    " new_events AS (INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
    " SELECT * FROM unnest($15::text[], $16::bigint[], $17::bigint[], $18::bigint[], $19::text[],"
    " $20::text[], $21::bigint[], $22::text[])),"
    " new_tasks AS (INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status,"
    " close_reason, deadline, created_at, priority, buckets) SELECT * FROM unnest($23::text[],"
    " $24::text[], $25::text[], $26::bigint[], $27::text[], $28::bigint[], $29::text[], $30::text[],"
    " $31::text[], $32::bigint[], $33::bigint[], $34::int[], $35::text[])"
    " ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
    " close_reason = excluded.close_reason, deadline = excluded.deadline),"
    " new_timers AS (INSERT INTO timers (run_id, slot, kind, key, due_at)"
    " SELECT * FROM unnest($36::text[], $37::text[], $38::text[], $39::text[], $40::bigint[])),"
    " new_signal_ids AS (INSERT INTO signal_ids (run_id, signal_id, at)"
    " SELECT * FROM unnest($41::text[], $42::text[], $43::bigint[]))"
    " INSERT INTO idempotency (app, key, request_hash, run_id, response, created_at)"
    " SELECT * FROM unnest($44::text[], $45::text[], $46::text[], $47::text[], $48::text[], $49::bigint[])"
)


# Every table a batch of runs moving on writes, in one statement (array parameters, one per
# column). Each row is joined to the runs the UPDATE matched (`moved`), so a unit whose run is no
# longer at its expected seq writes nothing; the statement returns the runs it moved. A run's
# timers are made equal to its new set: the ones it no longer holds deleted, the others upserted
# (one statement cannot delete a row and insert its key again).
UPDATE_RUNS_SET = (
    "WITH moved AS (UPDATE runs AS r SET status = u.status, is_open = u.is_open, seq = u.seq,"
    " doc = u.doc, closed_at = u.closed_at, current_step = u.current_step, step_since = u.step_since,"
    " workflow_version = u.workflow_version, error_class = u.error_class"
    " FROM unnest($1::text[], $2::text[], $3::boolean[], $4::bigint[], $5::text[], $6::bigint[],"
    " $7::bigint[], $8::text[], $9::bigint[], $10::bigint[], $11::text[])"
    " AS u(run_id, status, is_open, seq, doc, closed_at, expected, current_step, step_since,"
    " workflow_version, error_class)"
    " WHERE r.run_id = u.run_id AND r.seq = u.expected RETURNING r.run_id),"
    " new_events AS (INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
    " SELECT e.* FROM unnest($12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::text[],"
    " $17::text[], $18::bigint[], $19::text[]) AS e(run_id, seq, at, generation, type, step, attempt, data)"
    " WHERE e.run_id IN (SELECT run_id FROM moved)),"
    " new_tasks AS (INSERT INTO tasks (token, run_id, app, generation, step, attempt, queue, status,"
    " close_reason, deadline, created_at, priority, buckets) SELECT t.* FROM unnest($20::text[],"
    " $21::text[], $22::text[], $23::bigint[], $24::text[], $25::bigint[], $26::text[], $27::text[],"
    " $28::text[], $29::bigint[], $30::bigint[], $31::int[], $32::text[]) AS t(token, run_id, app,"
    " generation, step, attempt, queue, status, close_reason, deadline, created_at, priority, buckets)"
    " WHERE t.run_id IN (SELECT run_id FROM moved)"
    " ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
    " close_reason = excluded.close_reason, deadline = excluded.deadline),"
    " gone_timers AS (DELETE FROM timers AS x WHERE x.run_id IN (SELECT run_id FROM moved)"
    " AND NOT EXISTS (SELECT 1 FROM unnest($33::text[], $34::text[]) AS k(run_id, slot)"
    " WHERE k.run_id = x.run_id AND k.slot = x.slot)),"
    " new_timers AS (INSERT INTO timers (run_id, slot, kind, key, due_at)"
    " SELECT m.* FROM unnest($33::text[], $34::text[], $35::text[], $36::text[], $37::bigint[])"
    " AS m(run_id, slot, kind, key, due_at) WHERE m.run_id IN (SELECT run_id FROM moved)"
    " ON CONFLICT (run_id, slot) DO UPDATE SET kind = excluded.kind, key = excluded.key,"
    " due_at = excluded.due_at),"
    " new_signal_ids AS (INSERT INTO signal_ids (run_id, signal_id, at)"
    " SELECT s.* FROM unnest($38::text[], $39::text[], $40::bigint[]) AS s(run_id, signal_id, at)"
    " WHERE s.run_id IN (SELECT run_id FROM moved))"
    " SELECT ARRAY(SELECT run_id FROM moved)"
)
