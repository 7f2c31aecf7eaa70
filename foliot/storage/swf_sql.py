"""The SQL of the SWF execution store, once for both backends (pure: no connection here).

Statements are written with `?` placeholders (SQLite's); PostgreSQL runs them through
`numbered`, which turns the n-th `?` into `$n`. A unit of work is planned as a list of
`Statement`s (`unit_statements`) that each backend only executes, so the two can never write a
unit differently. Listings are built by `list_sql`/`count_sql`: one range of a `swf_listing`
index, read in its order (a test EXPLAINs each on both stores).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..core.errors import StaleWrite, StorageError, UniqueViolation
from ..core.swf.timeouts import deadlines
from .sql import numbered as numbered  # re-exported: the numbering of these statements
from .swf import (
    SWF_OPEN_WORKFLOW_UNIQUE,
    SwfCursor,
    SwfQuery,
    SwfUnit,
    event_rows,
    execution_row,
    facet_close_status,
    facets,
    listing_rows,
    pending_tasks,
    swf_actor_id,
    task_rows,
    units_of,
)


@attrs.frozen
class Statement:
    """One statement of a unit: run once with `args`, or once per row of `rows` (`many`).
    With `refusal` set it must change exactly one row, else the unit fails with `refusal`."""

    sql: str
    args: tuple[Any, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    many: bool = False
    refusal: StorageError | None = None


INSERT_EXECUTION: Final = (
    "INSERT INTO swf_executions (region, run_id, domain, workflow_id, is_open, version, last_event_id,"
    " started_at, closed_at, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (region, domain, workflow_id) WHERE is_open = 1 DO NOTHING"
)
UPDATE_EXECUTION: Final = (
    "UPDATE swf_executions SET is_open = ?, version = ?, last_event_id = ?, closed_at = ?, doc = ?"
    " WHERE region = ? AND run_id = ? AND version = ?"
)
INSERT_EVENT: Final = (
    "INSERT INTO swf_events (region, run_id, event_id, at, type, attrs) VALUES (?, ?, ?, ?, ?, ?)"
)
INSERT_TASK: Final = (
    "INSERT INTO swf_tasks (region, run_id, scheduled_event_id, domain, kind, task_list, workflow_id,"
    " priority, scheduled_at, claimed_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
CLOSE_LISTING: Final = (
    "UPDATE swf_listing SET is_open = 0, closed_at = ? WHERE region = ? AND run_id = ? AND is_open = 1"
)
INSERT_LISTING: Final = (
    "INSERT INTO swf_listing (region, run_id, facet, domain, is_open, started_at, closed_at, workflow_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# A domain's executions closed by a cutoff, oldest first: (region, domain, cutoff, limit).
EXPIRED_SQL: Final = (
    "SELECT l.region, l.run_id, e.last_event_id FROM swf_listing l JOIN swf_executions e"
    " ON e.region = l.region AND e.run_id = l.run_id WHERE l.region = ? AND l.domain = ?"
    " AND l.facet = '' AND l.closed_at IS NOT NULL AND l.closed_at <= ?"
    " AND NOT EXISTS (SELECT 1 FROM swf_owed o WHERE o.region = l.region AND o.run_id = l.run_id)"
    " ORDER BY l.closed_at LIMIT ?"
)
# An execution's deadlines (`timeouts.deadlines`) as rows of the shared `timers` table, owned
# by its actor (kind "swf"): replaced on every commit, so they never disagree with the document.
DELETE_TIMERS: Final = "DELETE FROM timers WHERE run_id = ?"
INSERT_TIMER: Final = (
    "INSERT INTO timers (run_id, slot, kind, key, due_at, actor_kind) VALUES (?, ?, 'deadline', ?, ?, 'swf')"
)
PRUNED_TABLES: Final = ("swf_events", "swf_tasks", "swf_listing", "swf_owed", "swf_parked", "swf_executions")
INSERT_OWED: Final = "INSERT INTO swf_owed (region, run_id) VALUES (?, ?) ON CONFLICT DO NOTHING"
SETTLE_OWED: Final = "DELETE FROM swf_owed WHERE region = ? AND run_id = ?"
# (region, version, doc) of closed executions still owing effects, by (region, run id).
OWED_PAGE_SQL: Final = (
    "SELECT e.region, e.version, e.doc FROM swf_owed o JOIN swf_executions e"
    " ON e.region = o.region AND e.run_id = o.run_id"
)
PUT_LAMBDA: Final = (
    "INSERT INTO swf_lambda_functions (region, name, url, created_at, updated_at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (region, name) DO UPDATE SET url = excluded.url, updated_at = excluded.updated_at"
    " RETURNING region, name, url, created_at, updated_at"
)
GET_LAMBDA: Final = (
    "SELECT region, name, url, created_at, updated_at FROM swf_lambda_functions WHERE region = ? AND name = ?"
)
DELETE_LAMBDA: Final = "DELETE FROM swf_lambda_functions WHERE region = ? AND name = ?"
PUT_PARKED: Final = (
    "INSERT INTO swf_parked (region, run_id, reason, parked_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (region, run_id) DO UPDATE SET reason = excluded.reason, parked_at = excluded.parked_at"
)
GET_PARKED: Final = "SELECT region, run_id, reason, parked_at FROM swf_parked WHERE region = ? AND run_id = ?"
UNPARK: Final = "DELETE FROM swf_parked WHERE region = ? AND run_id = ?"
COUNTS_SQL: Final = (
    "SELECT (SELECT COUNT(*) FROM swf_executions WHERE is_open = 1), (SELECT COUNT(*) FROM swf_parked)"
)


def keyed_page_sql(base: str, alias: str, after: tuple[str, str] | None, limit: int) -> tuple[str, list[Any]]:
    """`base` paged by (region, run id) of table `alias`, strictly past `after`."""
    args: list[Any] = []
    sql = base
    if after is not None:
        sql += f" WHERE ({alias}.region, {alias}.run_id) > (?, ?)"
        args += after
    return sql + f" ORDER BY {alias}.region, {alias}.run_id LIMIT ?", [*args, limit]


def lambdas_sql(region: str | None, limit: int) -> tuple[str, list[Any]]:
    sql = "SELECT region, name, url, created_at, updated_at FROM swf_lambda_functions"
    args: list[Any] = []
    if region is not None:
        sql += " WHERE region = ?"
        args.append(region)
    return sql + " ORDER BY region, name LIMIT ?", [*args, limit]


def _unit_statements(unit: SwfUnit) -> list[Statement]:
    ex, region = unit.execution, unit.region
    row = execution_row(region, ex, unit.version)
    out: list[Statement] = []
    if unit.expected_version is None:
        refusal: StorageError = UniqueViolation(
            SWF_OPEN_WORKFLOW_UNIQUE, f"{ex.domain}/{ex.workflow_id} is open already"
        )
        out.append(Statement(INSERT_EXECUTION, row, refusal=refusal))
    else:
        refusal = StaleWrite(f"SWF execution {ex.run_id} changed underneath version {unit.expected_version}")
        args = (row[4], row[5], row[6], row[8], row[9], region, ex.run_id, unit.expected_version)
        out.append(Statement(UPDATE_EXECUTION, args, refusal=refusal))
    if unit.events:
        out.append(Statement(INSERT_EVENT, rows=tuple(event_rows(region, ex.run_id, unit.events)), many=True))
    tasks = pending_tasks(region, ex)
    if unit.expected_version is not None:  # the rows no longer pending go
        keep = [t.scheduled_event_id for t in tasks]
        sql = "DELETE FROM swf_tasks WHERE region = ? AND run_id = ?"
        if keep:
            sql += f" AND scheduled_event_id NOT IN ({', '.join('?' * len(keep))})"
        out.append(Statement(sql, (region, ex.run_id, *keep)))
    if tasks:
        out.append(Statement(INSERT_TASK, rows=tuple(task_rows(tasks)), many=True))
    keys: list[str] = []
    if unit.expected_version is None:
        keys = facets(ex)
    elif not ex.is_open:
        out.append(Statement(CLOSE_LISTING, (ex.closed_at, region, ex.run_id)))
        if ex.close_status is not None:
            keys = [facet_close_status(ex.close_status)]
    if keys:
        out.append(Statement(INSERT_LISTING, rows=tuple(listing_rows(region, ex, keys)), many=True))
    if unit.owed:
        out.append(Statement(INSERT_OWED, (region, ex.run_id)))
    owner = swf_actor_id(region, ex.run_id)
    if unit.expected_version is not None:
        out.append(Statement(DELETE_TIMERS, (owner,)))
    timers = tuple((owner, key, key, due) for key, due in deadlines(ex).items())
    if timers:
        out.append(Statement(INSERT_TIMER, rows=timers, many=True))
    return out


def unit_statements(unit: SwfUnit) -> list[Statement]:
    """What `swf_commit` runs, in order: the unit's document (inserted, refusing an open
    workflow id, or updated under its version guard), its events, its task rows re-derived from
    the document, its listing rows; then the same for the continued run."""
    return [stmt for one in units_of(unit) for stmt in _unit_statements(one)]


def _listing_where(query: SwfQuery, after: SwfCursor | None) -> tuple[str, list[Any], str]:
    """The WHERE clause (over `swf_listing l`), its arguments and the ORDER BY of a listing."""
    time = "l.closed_at" if query.by_close else "l.started_at"
    clauses = ["l.region = ?", "l.domain = ?", "l.facet = ?"]
    args: list[Any] = [query.region, query.domain, query.facet]
    if query.by_close:
        clauses.append("l.closed_at IS NOT NULL")
    else:
        clauses.append("l.is_open = ?")
        args.append(1 if query.open else 0)
    clauses.append(f"{time} >= ?")
    args.append(query.oldest)
    if query.latest is not None:
        clauses.append(f"{time} <= ?")
        args.append(query.latest)
    direction, cmp = ("ASC", ">") if query.reverse else ("DESC", "<")
    if after is not None:
        clauses.append(f"({time}, l.workflow_id, l.run_id) {cmp} (?, ?, ?)")
        args += after
    order = f"{time} {direction}, l.workflow_id {direction}, l.run_id {direction}"
    return " AND ".join(clauses), args, order


def list_sql(query: SwfQuery, after: SwfCursor | None, limit: int) -> tuple[str, list[Any]]:
    """A listing page's statement and arguments: (version, doc) rows of one index range."""
    where, args, order = _listing_where(query, after)
    sql = (
        "SELECT e.version, e.doc FROM swf_listing l JOIN swf_executions e"
        " ON e.region = l.region AND e.run_id = l.run_id"
        f" WHERE {where} ORDER BY {order} LIMIT ?"
    )
    return sql, [*args, limit]


def count_sql(query: SwfQuery, cap: int) -> tuple[str, list[Any]]:
    """A count of a listing's rows, stopping at `cap`."""
    where, args, _ = _listing_where(query, None)
    return f"SELECT COUNT(*) FROM (SELECT 1 FROM swf_listing l WHERE {where} LIMIT ?) AS t", [*args, cap]


def find_sql(region: str, domain: str, workflow_id: str, run_id: str | None) -> tuple[str, list[Any]]:
    """(version, doc) of the execution (domain, workflow id, run id), or the open one."""
    if run_id is None:
        return (
            "SELECT version, doc FROM swf_executions WHERE region = ? AND domain = ? AND workflow_id = ?"
            " AND is_open = 1",
            [region, domain, workflow_id],
        )
    return (
        "SELECT version, doc FROM swf_executions WHERE region = ? AND run_id = ? AND domain = ?"
        " AND workflow_id = ?",
        [region, run_id, domain, workflow_id],
    )


def open_page_sql(after: tuple[str, str] | None, limit: int) -> tuple[str, list[Any]]:
    """(region, version, doc) of open executions by (region, run id), past `after`."""
    sql = "SELECT region, version, doc FROM swf_executions WHERE is_open = 1"
    args: list[Any] = []
    if after is not None:
        sql += " AND (region, run_id) > (?, ?)"
        args += after
    return sql + " ORDER BY region, run_id LIMIT ?", [*args, limit]


def events_sql(
    region: str, run_id: str, after: int | None, reverse: bool, limit: int
) -> tuple[str, list[Any]]:
    """(event_id, at, type, attrs) of a history by id, past `after`."""
    order, cmp = ("DESC", "<") if reverse else ("ASC", ">")
    sql = "SELECT event_id, at, type, attrs FROM swf_events WHERE region = ? AND run_id = ?"
    args: list[Any] = [region, run_id]
    if after is not None:
        sql += f" AND event_id {cmp} ?"
        args.append(after)
    return sql + f" ORDER BY event_id {order} LIMIT ?", [*args, limit]


LOAD_SQL: Final = "SELECT version, doc FROM swf_executions WHERE region = ? AND run_id = ?"
PENDING_COUNT_SQL: Final = (
    "SELECT COUNT(*) FROM (SELECT 1 FROM swf_tasks WHERE region = ? AND domain = ? AND kind = ?"
    " AND task_list = ? LIMIT ?) AS t"
)
RELEASE_SQL: Final = (
    "UPDATE swf_tasks SET claimed_until = NULL WHERE region = ? AND run_id = ? AND scheduled_event_id = ?"
)
