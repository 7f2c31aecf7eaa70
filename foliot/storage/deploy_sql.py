"""The statements the dry-run of a workflow version reads (`POST …/workflows/{name}/dry-run`).

Open runs are never all read: they are counted by (version, current step, status) from the
partial index `runs_open_by_step` (app, workflow, workflow_version, current_step, status,
created_at DESC, run_id DESC) WHERE open (migration 0077) alone; each group's newest runIds, and
where the candidate's reads matter the group's runs' input and state (taken out of the document
by the database), are keyset pages along the same index. Recorded runs are the workflow's last
closed ones, along the partial index `runs_closed_by_workflow`; their events are read for many
runs at once.
"""

from __future__ import annotations

from typing import Any, Final

import attrs


@attrs.frozen
class OpenGroup:
    """Open runs of a workflow on one version, at one step, in one status: how many."""

    version: int
    step: str | None
    status: str
    count: int


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


def open_groups_sql(postgres: bool) -> str:
    """Arguments: (app, workflow, highest version). Read from `runs_open_by_step` alone."""
    is_open = "is_open" if postgres else "is_open = 1"
    return (
        "SELECT workflow_version AS version, current_step AS step, status, COUNT(*) AS n FROM runs"
        f" WHERE app = ? AND workflow = ? AND {is_open} AND workflow_version BETWEEN 1 AND ?"
        " GROUP BY workflow_version, current_step, status"
    )


def open_group_sql(postgres: bool, with_state: bool, step: bool, after: bool) -> str:
    """Arguments: (app, workflow, version[, step], status[, created_at, run_id], limit): a keyset
    page of one group, newest first, along `runs_open_by_step` (`step` False: current_step IS
    NULL, which the equality could not match)."""
    if with_state:
        data = (
            "(doc::json -> 'input')::text AS input, (doc::json -> 'state')::text AS state"
            if postgres
            else "doc -> '$.input' AS input, doc -> '$.state' AS state"
        )
    else:
        data = "NULL AS input, NULL AS state"
    is_open = "is_open" if postgres else "is_open = 1"
    at_step = "current_step = ?" if step else "current_step IS NULL"
    keyset = " AND (created_at, run_id) < (?, ?)" if after else ""
    return (
        f"SELECT run_id, workflow_version AS version, status, current_step AS step, created_at, {data}"
        f" FROM runs WHERE app = ? AND workflow = ? AND workflow_version = ? AND {at_step}"
        f" AND status = ? AND {is_open}{keyset} ORDER BY created_at DESC, run_id DESC LIMIT ?"
    )


def recent_closed_sql(postgres: bool) -> str:
    """Arguments: (app, workflow, limit): the workflow's last closed runs, newest first, along
    `runs_closed_by_workflow` (not past the open runs)."""
    closed = "NOT is_open" if postgres else "is_open = 0"
    return (
        f"SELECT doc FROM runs WHERE app = ? AND workflow = ? AND {closed}"
        " ORDER BY created_at DESC, run_id DESC LIMIT ?"
    )


EVENTS_OF: Final = "SELECT * FROM events WHERE run_id {ids} AND seq <= ? ORDER BY run_id, seq"


def open_group(r: Any) -> OpenGroup:
    return OpenGroup(int(r["version"]), r["step"], r["status"], int(r["n"]))


def open_row(r: Any) -> OpenRunRow:
    return OpenRunRow(
        r["run_id"], int(r["version"]), r["status"], r["step"], int(r["created_at"]), r["input"], r["state"]
    )
