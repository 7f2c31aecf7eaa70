"""The statements the dry-run of a workflow version reads (`POST …/workflows/{name}/dry-run`).

Open runs are read in keyset pages along `runs_by_version` (app, workflow, workflow_version,
created_at, run_id), one version after another, the run's input and state alone taken out of
its document by the database; recorded runs are the workflow's last closed ones, and their
events are read for many runs at once.
"""

from __future__ import annotations

from typing import Any, Final

import attrs


@attrs.frozen
class OpenRunRow:
    """What a dry-run reads of one open run (`input` and `state` as JSON text, or None when
    not asked for)."""

    run_id: str
    version: int
    status: str
    step: str | None
    created_at: int
    input: str | None
    state: str | None


def open_runs_sql(postgres: bool, with_state: bool, after: tuple[int, str] | None) -> str:
    """Arguments: (app, workflow, version[, created_at, run_id], limit). One version at a time:
    the equality on `workflow_version` lets the keyset walk `runs_by_version` in order (a row
    value over the three columns would sort every remaining row for each page)."""
    if with_state:
        data = (
            "(doc::json -> 'input')::text AS input, (doc::json -> 'state')::text AS state"
            if postgres
            else "doc -> '$.input' AS input, doc -> '$.state' AS state"
        )
    else:
        data = "NULL AS input, NULL AS state"
    is_open = "is_open" if postgres else "is_open = 1"
    keyset = " AND (created_at, run_id) < (?, ?)" if after is not None else ""
    return (
        f"SELECT run_id, workflow_version AS version, status, current_step AS step, created_at, {data}"
        f" FROM runs WHERE app = ? AND workflow = ? AND workflow_version = ? AND {is_open}{keyset}"
        " ORDER BY created_at DESC, run_id DESC LIMIT ?"
    )


def recent_closed_sql(postgres: bool) -> str:
    """Arguments: (app, workflow, limit): the workflow's last closed runs, newest first."""
    closed = "NOT is_open" if postgres else "is_open = 0"
    return (
        f"SELECT doc FROM runs WHERE app = ? AND workflow = ? AND {closed}"
        " ORDER BY created_at DESC, run_id DESC LIMIT ?"
    )


EVENTS_OF: Final = "SELECT * FROM events WHERE run_id {ids} AND seq <= ? ORDER BY run_id, seq"


def open_row(r: Any) -> OpenRunRow:
    return OpenRunRow(
        r["run_id"], int(r["version"]), r["status"], r["step"], int(r["created_at"]), r["input"], r["state"]
    )
