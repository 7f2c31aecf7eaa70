"""What the operator console reads and stores, shared by both backends: records and SQL.

Every list is a keyset-paginated query on an index (`runs_by_app`, and of migrations 0020 and
0021: `runs_by_status`, `runs_by_workflow`, `runs_by_business_key`, `runs_by_version`,
`runs_by_error_class`): `ORDER BY created_at DESC, run_id DESC` from a cursor, never an
OFFSET. Version and error class are generated columns computed from the run document
(migration 0021); docs/console.md shows the query plans.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..core.workflow.model import OPEN_STATUSES

ROLES: Final = ("viewer", "operator", "admin")


@attrs.frozen
class OperatorTokenRecord:
    token_id: str
    name: str | None
    role: str  # viewer | operator | admin
    secret_hash: str
    created_at: int
    revoked_at: int | None = None


@attrs.frozen
class RunQuery:
    """The console's run filter (and the bulk operations'): every field optional but `app`."""

    app: str
    workflow: str | None = None
    version: int | None = None
    status: str | None = None
    business_key: str | None = None
    error_class: str | None = None
    created_from: int | None = None  # inclusive, ms
    created_to: int | None = None  # exclusive, ms


def open_by_status(counts: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Open runs by status, every app summed, from the `run_counts` counters (`Store.run_counts`):
    what `/metrics` and the console's trends read every few seconds, so never a scan of `runs`."""
    out: dict[str, int] = {}
    for (_app, status), n in counts.items():
        if status in OPEN_STATUSES and n:
            out[status] = out.get(status, 0) + n
    return out


def run_count_sql(q: RunQuery, cap: int, *, postgres: bool) -> tuple[str, list[Any]]:
    """`SELECT COUNT(*)` of the runs `q` selects, counting no further than `cap`."""
    sql, params = run_query_sql(q, cap, None, postgres=postgres)
    inner = sql.replace("SELECT doc FROM runs", "SELECT 1 FROM runs", 1)
    return f"SELECT COUNT(*) FROM ({inner}) AS matched", params


def run_query_sql(
    q: RunQuery, limit: int, after: tuple[int, str] | None, *, postgres: bool
) -> tuple[str, list[Any]]:
    """`SELECT doc FROM runs ...` for `q`, newest first, after the keyset cursor `after`."""
    params: list[Any] = []

    def mark(value: Any) -> str:
        params.append(value)
        return f"${len(params)}" if postgres else "?"

    clauses = [f"app = {mark(q.app)}"]
    for column, value in (("workflow", q.workflow), ("status", q.status), ("business_key", q.business_key)):
        if value is not None:
            clauses.append(f"{column} = {mark(value)}")
    if q.created_from is not None:
        clauses.append(f"created_at >= {mark(q.created_from)}")
    if q.created_to is not None:
        clauses.append(f"created_at < {mark(q.created_to)}")
    if q.version is not None:
        clauses.append(f"workflow_version = {mark(q.version)}")
    if q.error_class is not None:
        # The column holds the class as JSON text (migration 0021), encoded as the document is
        # (`storage.base.json_dumps`): compare it encoded.
        clauses.append(f"error_class = {mark(json.dumps(q.error_class, ensure_ascii=False))}")
    if after is not None:
        # A row-value comparison, not `created_at < ? OR (created_at = ? AND run_id < ?)`: SQLite
        # walks the index from the cursor only for this form (the OR form read every row before
        # the cursor: 383 ms instead of 0.2 ms halfway down a million runs).
        clauses.append(f"(created_at, run_id) < ({mark(after[0])}, {mark(after[1])})")
    sql = (
        f"SELECT doc FROM runs WHERE {' AND '.join(clauses)}"
        f" ORDER BY created_at DESC, run_id DESC LIMIT {mark(limit)}"
    )
    return sql, params
