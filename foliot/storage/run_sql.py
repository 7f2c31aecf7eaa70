"""The SQL of the run store (apps, credentials, workflows, runs, tasks, timers, the console's
reads), once for both backends (pure: no connection here).

Statements use `?` placeholders (`sql.numbered` makes them PostgreSQL's); the transactions that
read before they write are generators of statements (`sql.Tx`). What the two databases must be
told differently is a `Dialect`, whose every statement is named and says why. What only the
group-commit writers do (a batch of units in a few statements) stays with them: SQLite's
multi-row VALUES in `sqlite.py`, PostgreSQL's array statements in `postgres/units.py`, both
built on the column lists here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from ..core.errors import StaleWrite, UniqueViolation
from ..core.workflow.model import Run
from .base import (
    DEBOUNCE_TAKEN,
    OVERDUE_SQL,
    PRUNE_EVENTS_PER_RUN,
    SLOT_TAKEN,
    ApiKeyRecord,
    AppRecord,
    DebounceChange,
    RunFilter,
    SecretRecord,
    SlotChange,
    UnitOfWork,
    WorkflowRecord,
    event_rows,
    idempotency_row,
    parent_of,
    prune_pick,
    run_row,
    search_columns,
    signal_id_rows,
    step_columns,
    task_rows,
    timer_rows,
)
from .sql import Tx, change, many, marks, one, rows


def _insert(table: str, columns: str) -> str:
    """`INSERT INTO table (columns) VALUES ` (the rows' marks follow)."""
    return f"INSERT INTO {table} ({columns}) VALUES "


# ---------------------------------------------------------------------------------- units of work

# The columns a unit writes, in the order of `storage.base`'s row tuples (`run_row` +
# `step_columns` + `search_columns`, `event_rows`, `task_rows`, `timer_rows`, ...).
INSERT_RUN_HEAD: Final = _insert(
    "runs",
    "run_id, app, workflow, status, business_key, is_open, created_at, seq, doc, closed_at,"
    " current_step, step_since, workflow_version, error_class, parent_run_id",
)
INSERT_EVENT_HEAD: Final = _insert("events", "run_id, seq, at, generation, type, step, attempt, data")
INSERT_TASK_HEAD: Final = _insert(
    "tasks",
    "token, run_id, app, generation, step, attempt, queue, status, close_reason, deadline, created_at,"
    " priority, buckets",
)
# A task row is written again as it changes (answered, timed out, re-armed).
UPSERT_TASK_TAIL: Final = (
    " ON CONFLICT (token) DO UPDATE SET status = excluded.status,"
    " close_reason = excluded.close_reason, deadline = excluded.deadline"
)
INSERT_TIMER_HEAD: Final = _insert("timers", "run_id, slot, kind, key, due_at")
INSERT_SIGNAL_ID_HEAD: Final = _insert("signal_ids", "run_id, signal_id, at")
INSERT_IDEMPOTENCY_HEAD: Final = _insert(
    "idempotency", "app, key, request_hash, run_id, response, created_at"
)

INSERT_RUN: Final = INSERT_RUN_HEAD + marks(15)
# (status, is_open, seq, doc, closed_at, current_step, step_since, workflow_version,
# error_class, run_id, expected seq): written only where the run is still at the expected seq.
UPDATE_RUN: Final = (
    "UPDATE runs SET status = ?, is_open = ?, seq = ?, doc = ?, closed_at = ?,"
    " current_step = ?, step_since = ?, workflow_version = ?, error_class = ?"
    " WHERE run_id = ? AND seq = ?"
)
INSERT_EVENT: Final = INSERT_EVENT_HEAD + marks(8)
UPSERT_TASK: Final = INSERT_TASK_HEAD + marks(13) + UPSERT_TASK_TAIL
DELETE_TIMERS: Final = "DELETE FROM timers WHERE run_id = ?"
INSERT_TIMER: Final = INSERT_TIMER_HEAD + marks(5)
INSERT_SIGNAL_ID: Final = INSERT_SIGNAL_ID_HEAD + marks(3)
INSERT_IDEMPOTENCY: Final = INSERT_IDEMPOTENCY_HEAD + marks(6)
# An expired record not pruned yet is replaced; a live one is left alone (the unit is refused):
# the idempotency row, then the expiry bound.
REPLACE_EXPIRED_IDEMPOTENCY: Final = (
    INSERT_IDEMPOTENCY + " ON CONFLICT (app, key) DO UPDATE SET"
    " request_hash = excluded.request_hash, run_id = excluded.run_id,"
    " response = excluded.response, created_at = excluded.created_at"
    " WHERE idempotency.created_at < ?"
)


COUNT_SLOTS: Final = "SELECT COUNT(*) AS n FROM runs WHERE app = ? AND slot_key = ?"
QUEUE_HEADS: Final = (
    "SELECT run_id FROM runs WHERE app = ? AND queue_key = ? ORDER BY created_at, run_id LIMIT ?"
)
# (app, key, app, key, limit): the oldest runs waiting for a slot of a key and their versions,
# each with the slots of the key held (no row: none waits), in one read.
QUEUE_ROOM: Final = (
    "SELECT run_id, workflow_version, (SELECT COUNT(*) FROM runs WHERE app = ? AND slot_key = ?) AS n"
    " FROM runs WHERE app = ? AND queue_key = ? ORDER BY created_at, run_id LIMIT ?"
)
QUEUE_AHEAD: Final = (
    "SELECT COUNT(*) AS n FROM runs WHERE app = ? AND queue_key = ? AND (created_at, run_id) < (?, ?)"
)
# (app, key, limit): the keys runs wait for after (app, key), in key order, at most `limit` of
# them, each with its oldest waiting run and the slots of the key held. A skip-scan of the
# queue's index: one seek per key (the first entry of a key is its head), never a read of the
# runs behind a head, so a page costs `limit` seeks however many runs wait.
QUEUED_KEYS: Final = (
    "WITH RECURSIVE k(app, queue_key, run_id, n) AS ("
    " SELECT app, queue_key, run_id, 1 FROM (SELECT app, queue_key, run_id FROM runs"
    " WHERE queue_key IS NOT NULL AND (app, queue_key) > (?, ?)"
    " ORDER BY app, queue_key, created_at, run_id LIMIT 1) AS first"
    " UNION ALL"
    " SELECT r.app, r.queue_key, r.run_id, k.n + 1 FROM k JOIN runs r ON r.run_id = COALESCE("
    "(SELECT q.run_id FROM runs q WHERE q.app = k.app AND q.queue_key > k.queue_key"
    " ORDER BY q.queue_key, q.created_at, q.run_id LIMIT 1),"
    " (SELECT q.run_id FROM runs q WHERE q.app > k.app AND q.queue_key IS NOT NULL"
    " ORDER BY q.app, q.queue_key, q.created_at, q.run_id LIMIT 1))"
    " WHERE k.n < ?)"
    " SELECT k.app, k.queue_key, k.run_id, r.workflow_version, r.created_at,"
    " (SELECT COUNT(*) FROM runs s WHERE s.app = k.app AND s.slot_key = k.queue_key) AS held"
    " FROM k JOIN runs r ON r.run_id = k.run_id ORDER BY k.n"
)
SET_SLOT: Final = "UPDATE runs SET slot_key = ?, queue_key = ? WHERE run_id = ?"
# A workflow's keys (`<workflow>/<value>`), in key order, at most `limit` of them: the scan
# walks the app's partial index in order and stops after that many groups.
SLOT_COUNTS: Final = (
    "SELECT slot_key AS k, COUNT(*) AS n FROM runs WHERE app = ? AND slot_key IS NOT NULL"
    " AND substr(slot_key, 1, ?) = ? GROUP BY slot_key ORDER BY slot_key LIMIT ?"
)
QUEUE_COUNTS: Final = (
    "SELECT queue_key AS k, COUNT(*) AS n FROM runs WHERE app = ? AND queue_key IS NOT NULL"
    " AND substr(queue_key, 1, ?) = ? GROUP BY queue_key ORDER BY queue_key LIMIT ?"
)
# Queued runs per (app, workflow) for /metrics, from the queue's partial index alone (it holds
# only queued runs; the workflow is the key's part before its first `/`).
QUEUED_BY_WORKFLOW_SQLITE: Final = (
    "SELECT app, substr(queue_key, 1, instr(queue_key, '/') - 1) AS workflow, COUNT(*) AS n"
    " FROM runs WHERE queue_key IS NOT NULL GROUP BY 1, 2"
)
QUEUED_BY_WORKFLOW_POSTGRES: Final = (
    "SELECT app, split_part(queue_key, '/', 1) AS workflow, COUNT(*) AS n"
    " FROM runs WHERE queue_key IS NOT NULL GROUP BY 1, 2"
)


# (app, key, app, key): the slots of a key held, and its oldest queued run (None: none waits),
# in one read.
SLOT_GUARD: Final = (
    "SELECT (SELECT COUNT(*) FROM runs WHERE app = ? AND slot_key = ?) AS n,"
    " (SELECT run_id FROM runs WHERE app = ? AND queue_key = ? ORDER BY created_at, run_id LIMIT 1) AS head"
)


def slot_lock(app: str, key: str) -> str:
    """The name of a slot key's lock (PostgreSQL: `Dialect.workflow_lock` takes it)."""
    return f"slot:{app}/{key}"


def slot_refusal(run_id: str, app: str, slot: SlotChange, lock: str | None) -> Tx[str | None]:
    """Read an admission's guard (under the key's lock on PostgreSQL): why it is refused, or
    None when it may take a slot (fewer than `limit` held, no older run waiting)."""
    if lock is not None:  # PostgreSQL's writers run concurrently: one admission per key at a time
        yield change(lock, slot_lock(app, slot.key))
    guard = yield one(SLOT_GUARD, app, slot.key, app, slot.key)
    if guard["n"] >= slot.limit:
        return f"all {slot.limit} slots of {slot.key!r} are taken"
    if guard["head"] is not None and guard["head"] != run_id:
        return f"an older run waits for a slot of {slot.key!r}"
    return None


def slot_tx(run_id: str, app: str, slot: SlotChange, lock: str | None, *, checked: bool = False) -> Tx[None]:
    """A unit's concurrency slot change (after its run row is written); an admission reads its
    guard first unless it was `checked` already in this transaction."""
    if slot.kind == "queue":
        yield change(SET_SLOT, None, slot.key, run_id)
        return
    if slot.kind == "leave":
        if lock is not None:  # ordered with the admissions deciding at the same time (`BatchPlan.locks`)
            yield change(lock, slot_lock(app, slot.key))
        yield change(SET_SLOT, None, None, run_id)
        return
    if not checked:
        refused = yield from slot_refusal(run_id, app, slot, lock)
        if refused is not None:
            raise UniqueViolation(SLOT_TAKEN, refused)
    yield change(SET_SLOT, slot.key, None, run_id)


INSERT_DEBOUNCE_HEAD: Final = _insert("debounce_keys", "app, workflow, key, run_id, mode, until")
INSERT_DEBOUNCE: Final = INSERT_DEBOUNCE_HEAD + marks(6)
# (app, workflow, key, run_id)
RELEASE_DEBOUNCE: Final = (
    "DELETE FROM debounce_keys WHERE app = ? AND workflow = ? AND key = ? AND run_id = ?"
)
GET_DEBOUNCE: Final = (
    "SELECT run_id, mode, until FROM debounce_keys WHERE app = ? AND workflow = ? AND key = ?"
)
# (until, app, workflow, key, run_id)
EXTEND_DEBOUNCE: Final = (
    "UPDATE debounce_keys SET until = ? WHERE app = ? AND workflow = ? AND key = ? AND run_id = ?"
)
# (app, workflow, key, run_id, now)
DROP_DEBOUNCE: Final = (
    "DELETE FROM debounce_keys WHERE app = ? AND workflow = ? AND key = ? AND run_id = ?"
    " AND mode = 'leading' AND until <= ?"
)


# (now, true, limit): leading bursts whose window is over and whose run is closed or gone.
OVER_DEBOUNCE: Final = (
    "SELECT d.app, d.workflow, d.key, d.run_id FROM debounce_keys d"
    " WHERE d.mode = 'leading' AND d.until <= ?"
    " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = d.run_id AND r.is_open = ?)"
    " ORDER BY d.until LIMIT ?"
)


def prune_debounce_tx(now: int, limit: int) -> Tx[int]:
    """Up to `limit` leading debounce keys whose burst is over (`until` passed) and whose run
    closed: deleting one is what the key's next start would do (`DROP_DEBOUNCE`), so no start
    decides differently; a trailing key goes in the unit that begins or closes its run."""
    found = yield rows(OVER_DEBOUNCE, now, True, limit)
    if not found:
        return 0
    yield many(DROP_DEBOUNCE, [(r[0], r[1], r[2], r[3], now) for r in found])
    return len(found)


def debounce_tx(run: Run, change_: DebounceChange) -> Tx[None]:
    if change_.kind == "release":
        yield change(RELEASE_DEBOUNCE, run.app, change_.workflow, change_.key, run.run_id)
        return
    taken = yield one(GET_DEBOUNCE, run.app, change_.workflow, change_.key)
    if taken is not None:
        raise UniqueViolation(DEBOUNCE_TAKEN, f"debounce key {change_.key!r} has a burst under way")
    row = (run.app, change_.workflow, change_.key, run.run_id, change_.mode, change_.until)
    yield change(INSERT_DEBOUNCE, *row)


# A schedule's fire record (`UnitOfWork.fire`): a time already fired inserts nothing.
INSERT_SCHEDULE_FIRE: Final = (
    _insert("schedule_fires", "app, name, scheduled_time, run_id, fired_at, source, reason")
    + marks(7)
    + " ON CONFLICT (app, name, scheduled_time) DO NOTHING"
)


def unit_tx(unit: UnitOfWork, dialect: Dialect | None = None) -> Tx[bool]:
    """One unit of work written on its own (the writers' fallback when a batch as a whole is
    refused): refused with `StaleWrite` when its run moved on, with `UniqueViolation` when a
    live idempotency record holds its key or its schedule fire was made before. True; False
    when its admission was refused and its `otherwise` written instead."""
    run = unit.run
    lock = dialect.workflow_lock if dialect is not None else None
    checked = False
    if unit.otherwise is not None and unit.slot is not None and unit.slot.kind == "admit":
        refused = yield from slot_refusal(run.run_id, run.app, unit.slot, lock)
        if refused is not None:
            yield from unit_tx(unit.otherwise, dialect)
            return False
        checked = True
    if unit.fire is not None:
        f = unit.fire
        taken = yield change(
            INSERT_SCHEDULE_FIRE, f.app, f.name, f.scheduled_time, f.run_id, f.fired_at, f.source, f.reason
        )
        if taken != 1:
            raise UniqueViolation("schedule_fire", f"schedule {f.name!r} fired {f.scheduled_time} before")
    row = run_row(run)
    step, since = step_columns(run)
    version, error_class = search_columns(run)
    if unit.expected_seq is None:
        yield change(INSERT_RUN, *row, step, since, version, error_class, parent_of(run))
    else:
        moved = yield change(
            UPDATE_RUN,
            run.status,
            run.is_open,
            run.seq,
            row[8],
            row[9],
            step,
            since,
            version,
            error_class,
            run.run_id,
            unit.expected_seq,
        )
        if moved != 1:
            raise StaleWrite(f"run {run.run_id} changed underneath seq {unit.expected_seq}")
    if unit.events:
        yield many(INSERT_EVENT, event_rows(unit))
    if unit.tasks:
        yield many(UPSERT_TASK, task_rows(unit))
    if unit.expected_seq is not None:  # a new run has no timers yet
        yield change(DELETE_TIMERS, run.run_id)
    timers = timer_rows(run)
    if timers:
        yield many(INSERT_TIMER, timers)
    if unit.signal_ids:
        yield many(INSERT_SIGNAL_ID, signal_id_rows(unit))
    if unit.idempotency is not None:
        if unit.idempotency_expired_before is None:
            yield change(INSERT_IDEMPOTENCY, *idempotency_row(unit.idempotency))
        else:
            taken = yield change(
                REPLACE_EXPIRED_IDEMPOTENCY,
                *idempotency_row(unit.idempotency),
                unit.idempotency_expired_before,
            )
            if taken != 1:
                raise UniqueViolation("idempotency", "a live record holds this Idempotency-Key")
    if unit.slot is not None:
        yield from slot_tx(run.run_id, run.app, unit.slot, lock, checked=checked)
    if unit.debounce is not None:
        yield from debounce_tx(run, unit.debounce)
    for child in unit.children:  # child runs the transition started: inserted with it
        yield from unit_tx(child, dialect)
    return True


# ---------------------------------------------------------------------------------- apps and credentials

# (handler_base_url, description, updated_at, name)
PUT_APP: Final = (
    "UPDATE apps SET handler_base_url = ?, description = ?, updated_at = ? WHERE name = ? RETURNING *"
)
INSERT_APP: Final = (
    _insert("apps", "name, handler_base_url, description, created_at, updated_at")
    + marks(5)
    + " ON CONFLICT (name) DO NOTHING"
)
GET_APP: Final = "SELECT * FROM apps WHERE name = ?"
INSERT_API_KEY: Final = _insert("api_keys", "key_id, app, secret_hash, created_at, revoked_at") + marks(5)
# (revoked_at, app, key_id)
REVOKE_API_KEY: Final = (
    "UPDATE api_keys SET revoked_at = ? WHERE app = ? AND key_id = ? AND revoked_at IS NULL"
)
GET_API_KEY: Final = "SELECT * FROM api_keys WHERE key_id = ?"
LIST_API_KEYS: Final = (
    "SELECT * FROM api_keys WHERE app = ? AND revoked_at IS NULL ORDER BY created_at, key_id"
)
# (grace_until, app, grace_until): the app's secrets still valid later end at the grace bound.
EXPIRE_SECRETS: Final = (
    "UPDATE signing_secrets SET expires_at = ? WHERE app = ? AND (expires_at IS NULL OR expires_at > ?)"
)
INSERT_SECRET: Final = _insert(
    "signing_secrets", "secret_id, app, secret_enc, created_at, expires_at"
) + marks(5)
LIST_SECRETS: Final = "SELECT * FROM signing_secrets WHERE app = ? ORDER BY created_at, secret_id"
# The database's secret key check value (`keycheck.py`): kept once written.
PUT_KEY_CHECK: Final = "INSERT INTO secret_key_check (id, value) VALUES (1, ?) ON CONFLICT (id) DO NOTHING"
GET_KEY_CHECK: Final = "SELECT value FROM secret_key_check WHERE id = 1"


def _key_args(key: ApiKeyRecord) -> tuple[Any, ...]:
    return (key.key_id, key.app, key.secret_hash, key.created_at, key.revoked_at)


def _secret_args(secret: SecretRecord) -> tuple[Any, ...]:
    return (secret.secret_id, secret.app, secret.secret_enc, secret.created_at, secret.expires_at)


def put_app_tx(
    name: str, handler_base_url: str, description: str | None, now: int
) -> Tx[tuple[AppRecord, bool]]:
    row = yield one(PUT_APP, handler_base_url, description, now, name)
    if row is None:
        raise StaleWrite("app does not exist")
    return AppRecord(**dict(row)), False


def create_app_tx(app: AppRecord, key: ApiKeyRecord, secret: SecretRecord) -> Tx[bool]:
    created = yield change(
        INSERT_APP, app.name, app.handler_base_url, app.description, app.created_at, app.updated_at
    )
    if created == 0:
        return False
    yield change(INSERT_API_KEY, *_key_args(key))
    yield change(INSERT_SECRET, *_secret_args(secret))
    return True


def add_api_key_tx(key: ApiKeyRecord) -> Tx[None]:
    yield change(INSERT_API_KEY, *_key_args(key))


def rotate_secret_tx(secret: SecretRecord, grace_until: int) -> Tx[None]:
    yield change(EXPIRE_SECRETS, grace_until, secret.app, grace_until)
    yield change(INSERT_SECRET, *_secret_args(secret))


def key_check_tx(value: str) -> Tx[str]:
    yield change(PUT_KEY_CHECK, value)
    # A statement of its own: it sees the row another node's start may have just written.
    row = yield one(GET_KEY_CHECK)
    return str(row[0])


# ---------------------------------------------------------------------------------- workflows

LATEST_WORKFLOW: Final = "SELECT * FROM workflows WHERE app = ? AND name = ? ORDER BY version DESC LIMIT 1"
GET_WORKFLOW_VERSION: Final = "SELECT * FROM workflows WHERE app = ? AND name = ? AND version = ?"
INSERT_WORKFLOW: Final = _insert("workflows", "app, name, version, document, created_at") + marks(5)


def add_workflow_tx(
    dialect: Dialect, app: str, name: str, document: str, now: int
) -> Tx[tuple[WorkflowRecord, bool]]:
    if dialect.workflow_lock is not None:
        yield change(dialect.workflow_lock, f"{app}/{name}")
    row = yield one(LATEST_WORKFLOW, app, name)
    if row is not None and row["document"] == document:
        return WorkflowRecord(**dict(row)), False
    version = 1 if row is None else row["version"] + 1
    yield change(INSERT_WORKFLOW, app, name, version, document, now)
    return WorkflowRecord(app, name, version, document, now), True


# ---------------------------------------------------------------------------------- runs

GET_RUN: Final = "SELECT doc FROM runs WHERE run_id = ?"
LIST_EVENTS: Final = "SELECT * FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
GET_IDEMPOTENCY: Final = "SELECT * FROM idempotency WHERE app = ? AND key = ?"
SIGNAL_TAKEN: Final = "SELECT 1 FROM signal_ids WHERE run_id = ? AND signal_id = ?"


def list_runs_sql(flt: RunFilter, limit: int, after: tuple[int, str] | None) -> tuple[str, list[Any]]:
    """An app's runs matching `flt`, newest first, after the keyset cursor `after`."""
    clauses, args = ["app = ?"], [flt.app]
    for column, value in (
        ("workflow", flt.workflow),
        ("status", flt.status),
        ("business_key", flt.business_key),
        ("parent_run_id", flt.parent_run_id),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    if after is not None:
        # Row-value form: SQLite walks the index from the cursor (the OR form read every row
        # before it; see storage/console.py).
        clauses.append("(created_at, run_id) < (?, ?)")
        args.extend(after)  # type: ignore[arg-type]
    args.append(limit)  # type: ignore[arg-type]
    sql = f"SELECT doc FROM runs WHERE {' AND '.join(clauses)} ORDER BY created_at DESC, run_id DESC LIMIT ?"
    return sql, args


def children_of_sql(
    parent_run_id: str, after: tuple[int, str] | None, limit: int | None
) -> tuple[str, list[Any]]:
    """A run's children, oldest first, after the keyset cursor `after`, at most `limit`."""
    sql = "SELECT doc FROM runs WHERE parent_run_id = ?"
    args: list[Any] = [parent_run_id]
    if after is not None:
        sql += " AND (created_at, run_id) > (?, ?)"
        args.extend(after)
    sql += " ORDER BY created_at, run_id"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(limit)
    return sql, args


def child_links_sql(after: tuple[str, int, str] | None, limit: int) -> tuple[str, list[Any]]:
    """A page of recovery's child links: open children, and closed children of open parents
    parked on children; walked along `runs_by_parent` from the keyset cursor `after`
    (parent, created_at, run_id), the parent joined by key. No document is read."""
    sql = (
        "SELECT c.run_id, c.parent_run_id, c.created_at, c.is_open FROM runs AS c"
        " JOIN runs AS p ON p.run_id = c.parent_run_id WHERE c.parent_run_id IS NOT NULL"
    )
    args: list[Any] = []
    if after is not None:
        sql += " AND (c.parent_run_id, c.created_at, c.run_id) > (?, ?, ?)"
        args.extend(after)
    sql += (
        " AND (c.is_open = ? OR (p.is_open = ? AND c.is_open = ? AND p.status IN ('waiting', 'paused')))"
        " ORDER BY c.parent_run_id, c.created_at, c.run_id LIMIT ?"
    )
    args.extend((True, True, False, limit))
    return sql, args


def parent_fans_sql(dialect: Dialect, run_ids: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    """Runs' open flag and fan-out (its JSON text, taken out of the document by the database)."""
    where, args = dialect.run_ids(run_ids)
    return f"SELECT run_id, is_open, {dialect.fan_json} AS fan FROM runs WHERE run_id {where}", args


def get_runs_sql(dialect: Dialect, run_ids: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    where, args = dialect.run_ids(run_ids)
    return f"SELECT run_id, doc FROM runs WHERE run_id {where}", args


def prune_runs_tx(dialect: Dialect, closed_before: int, limit: int) -> Tx[int]:
    """Up to `limit` runs closed before `closed_before`, with everything they hold, oldest first."""
    candidates = yield rows(dialect.prune_candidates, closed_before, limit)
    ids = prune_pick([(r[0], r[1]) for r in candidates], limit * PRUNE_EVENTS_PER_RUN)
    if not ids:
        return 0
    where, args = dialect.run_ids(ids)
    # A schedule's fire record and a debounce key go with the run they point at (issue 37).
    for table in ("events", "tasks", "timers", "signal_ids", "schedule_fires", "debounce_keys"):
        yield change(f"DELETE FROM {table} WHERE run_id {where}", *args)
    deleted: int = yield change(f"DELETE FROM runs WHERE run_id {where}", *args)
    return deleted


# ---------------------------------------------------------------------------------- tasks and timers

GET_TASK: Final = "SELECT * FROM tasks WHERE token = ?"
OPEN_TASKS: Final = "SELECT * FROM tasks WHERE status = 'open' ORDER BY created_at, token"
# (created_at, token, limit): the next page, along `tasks_open` (status, created_at, token).
OPEN_TASKS_AFTER: Final = (
    "SELECT * FROM tasks WHERE status = 'open' AND (created_at, token) > (?, ?)"
    " ORDER BY created_at, token LIMIT ?"
)
OPEN_TASKS_FIRST: Final = "SELECT * FROM tasks WHERE status = 'open' ORDER BY created_at, token LIMIT ?"
# (before, limit) and (before, due_at, run_id, slot, limit): due timers in wheel order.
TIMERS_DUE: Final = "SELECT * FROM timers WHERE due_at < ? ORDER BY due_at, run_id, slot LIMIT ?"
TIMERS_DUE_AFTER: Final = (
    "SELECT * FROM timers WHERE due_at < ? AND (due_at, run_id, slot) > (?, ?, ?)"
    " ORDER BY due_at, run_id, slot LIMIT ?"
)

# ---------------------------------------------------------------------------------- the operator console

TIMERS_FOR_RUN: Final = "SELECT * FROM timers WHERE run_id = ? ORDER BY slot"
COUNT_TIMERS: Final = "SELECT COUNT(*) FROM (SELECT 1 FROM timers LIMIT ?) t"
INSERT_OPERATOR_TOKEN: Final = _insert(
    "operator_tokens", "token_id, name, role, secret_hash, created_at, revoked_at"
) + marks(6)
GET_OPERATOR_TOKEN: Final = "SELECT * FROM operator_tokens WHERE token_id = ?"
LIST_OPERATOR_TOKENS: Final = (
    "SELECT * FROM operator_tokens WHERE revoked_at IS NULL ORDER BY created_at, token_id"
)
# (revoked_at, token_id)
REVOKE_OPERATOR_TOKEN: Final = (
    "UPDATE operator_tokens SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL"
)


# ---------------------------------------------------------------------------------- dialects


def _listed_ids(ids: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    return "IN " + marks(len(ids)), tuple(ids)


def _array_of_ids(ids: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    return "= ANY(?::text[])", (list(ids),)


@attrs.frozen
class Dialect:
    """The statements the two databases must be told differently, each for its reason."""

    name: str
    # Booleans: SQLite stores 0/1 and its partial indexes say `is_open = 1`, so its queries
    # must too (to use them); PostgreSQL has a boolean column (its indexes say `is_open`).
    find_open_run: str
    # The latest version of each of an app's workflows: PostgreSQL's DISTINCT ON, SQLite a
    # join on the grouped maximum. Arguments (app, after, limit).
    list_workflows: str
    # Closed runs to prune: PostgreSQL's writers run concurrently, so FOR UPDATE SKIP LOCKED
    # leaves a run being reopened (rewind) right now for the next pass; SQLite has one writer.
    prune_candidates: str
    # Expired idempotency records: SQLite by rowid; PostgreSQL by key, SKIP LOCKED as above.
    prune_idempotency: str
    # `WHERE run_id ...` for a list of run ids: SQLite one mark per id (`IN (?, ?)`),
    # PostgreSQL one array parameter (`= ANY(...)`, one prepared statement for any count).
    run_ids: Callable[[Sequence[str]], tuple[str, tuple[Any, ...]]]
    # Runs per (app, status): PostgreSQL's trigger-kept counters are sharded (summed here), SQLite's are not.
    run_counts: str
    # Serialises two registrations of one workflow (so both cannot take version n+1):
    # PostgreSQL a transaction-scoped advisory lock; SQLite's single writer needs none.
    workflow_lock: str | None
    # `OVERDUE_SQL` with this dialect's boolean.
    overdue: str
    # A run document's `fan` as JSON text, read by the database (recovery's parents, without
    # their inputs): SQLite's json_extract (SQL NULL for a JSON null), PostgreSQL's `->` on
    # the text cast to json ('null' for a JSON null).
    fan_json: str

    @property
    def postgres(self) -> bool:
        return self.name == "postgres"


SQLITE: Final = Dialect(
    name="sqlite",
    find_open_run="SELECT doc FROM runs WHERE app = ? AND workflow = ? AND business_key = ? AND is_open = 1",
    list_workflows=(
        "SELECT w.* FROM workflows w JOIN (SELECT name, MAX(version) AS v FROM workflows"
        " WHERE app = ?1 AND name > ?2 GROUP BY name) latest"
        " ON w.name = latest.name AND w.version = latest.v"
        " WHERE w.app = ?1 ORDER BY w.name LIMIT ?3"
    ),
    prune_candidates=(
        "SELECT run_id, seq FROM runs WHERE is_open = 0 AND closed_at < ? ORDER BY closed_at, run_id LIMIT ?"
    ),
    prune_idempotency=(
        "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency"
        " WHERE created_at < ? ORDER BY created_at LIMIT ?)"
    ),
    run_ids=_listed_ids,
    run_counts="SELECT app, status, n FROM run_counts WHERE n <> 0",
    workflow_lock=None,
    overdue=OVERDUE_SQL.format(true="1", p1="?", p2="?"),
    fan_json="json_extract(doc, '$.fan')",
)

POSTGRES: Final = Dialect(
    name="postgres",
    find_open_run="SELECT doc FROM runs WHERE app = ? AND workflow = ? AND business_key = ? AND is_open",
    list_workflows=(
        "SELECT DISTINCT ON (name) * FROM workflows WHERE app = ? AND name > ?"
        " ORDER BY name, version DESC LIMIT ?"
    ),
    prune_candidates=(
        "SELECT run_id, seq FROM runs WHERE NOT is_open AND closed_at < ?"
        " ORDER BY closed_at, run_id LIMIT ? FOR UPDATE SKIP LOCKED"
    ),
    prune_idempotency=(
        "DELETE FROM idempotency WHERE (app, key) IN (SELECT app, key FROM idempotency"
        " WHERE created_at < ? ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED)"
    ),
    run_ids=_array_of_ids,
    run_counts="SELECT app, status, SUM(n) AS n FROM run_counts GROUP BY app, status",
    workflow_lock="SELECT pg_advisory_xact_lock(hashtext(?))",
    overdue=OVERDUE_SQL.format(true="TRUE", p1="?", p2="?"),
    fan_json="(doc::json -> 'fan')::text",
)
