"""The statements the dry-run of a workflow version reads (`POST …/workflows/{name}/dry-run`).

Open runs are never all read: they are counted by (version, current step, status) from the
partial index `runs_open_by_step` (app, workflow, workflow_version, current_step, status,
created_at DESC, run_id DESC) WHERE open (migration 0077) alone; each group's newest runIds, and
where the candidate's reads matter the group's runs' input and state (taken out of the document
by the database), are keyset pages along the same index. Recorded runs are the workflow's last
closed ones, along the partial index `runs_closed_by_workflow`; their events are read for many
runs at once.

The missing-state-keys check is said in SQL where it can be said exactly (`expressible`): the
runs of a group lacking a path are counted by the database (`lacking_sql`, one pass over the
group's rows for all its paths) and the newest of them read along the index
(`lacking_newest_sql`), so no run's input or state comes to Python. A path lacks when every way
`predicate.resolve` could follow it is absent: each segment an object key, an all-digit one
also an array index (`->` with a text key never indexes an array, with an integer never reads
an object; SQLite's `."key"` and `[n]` likewise).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
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


# A segment SQL can name exactly: printable ASCII but '"' and '\' (written as-is in a JSON text,
# so SQLite's label comparison with the document's text is exact); at most 3 all-digit ones
# (each doubles the ways to follow the path); an index past MAX_INDEX no array reaches.
_SQL_SEGMENT: Final = re.compile(r"[!#-\[\]-~]+")
MAX_DIGIT_SEGMENTS: Final = 3
MAX_INDEX: Final = 2**31 - 1


def expressible(path: Sequence[str]) -> bool:
    """Whether `lacking_sql` can say exactly that a run's `{input, state}` lacks `path`."""
    return (
        len(path) > 0
        and path[0] in ("input", "state")
        and all(_SQL_SEGMENT.fullmatch(s) for s in path)
        and sum(s.isdigit() for s in path) <= MAX_DIGIT_SEGMENTS
    )


def _ways(path: Sequence[str]) -> list[tuple[str | int, ...]]:
    """Every way `resolve` may follow `path`: a segment is a key (str), an all-digit one an
    array index (int) too."""
    options: list[list[str | int]] = [
        [s, int(s)] if s.isdigit() and int(s) <= MAX_INDEX else [s] for s in path
    ]
    return list(itertools.product(*options))


def lacks_sql(postgres: bool, path: Sequence[str]) -> tuple[str, list[Any]]:
    """A condition on the run document `doc` true when its input and state have no `path`
    (`expressible` paths only), and its arguments. First a search of the text: a key of the
    path written nowhere in it is lacking without parsing the document (every writer of a
    document, `json_dumps` and the databases' own, writes such a key as it is, in quotes);
    else the document is parsed (PostgreSQL: `json`, which costs less than `jsonb` for one
    lookup) and every way to follow the path tried."""
    assert expressible(path), path
    search = "strpos(doc, ?) = 0" if postgres else "instr(doc, ?) = 0"
    keys = list(dict.fromkeys(seg for seg in path[1:] if not seg.isdigit()))
    args: list[Any] = [f'"{key}"' for key in keys]
    terms: list[str] = []
    for way in _ways(path):
        if postgres:
            steps = []
            for seg in way:
                if isinstance(seg, int):
                    steps.append(f" -> {seg}")
                else:
                    steps.append(" -> ?::text")
                    args.append(seg)
            terms.append(f"(doc::json{''.join(steps)}) IS NULL")
        else:
            terms.append("json_type(doc, ?) IS NULL")
            args.append("$" + "".join(f"[{seg}]" if isinstance(seg, int) else f'."{seg}"' for seg in way))
    parsed = " AND ".join(terms)
    if not keys:
        return f"({parsed})", args
    return f"(CASE WHEN {' OR '.join([search] * len(keys))} THEN TRUE ELSE {parsed} END)", args


def _group_where(postgres: bool, step: bool) -> str:
    is_open = "is_open" if postgres else "is_open = 1"
    at_step = "current_step = ?" if step else "current_step IS NULL"
    return f"app = ? AND workflow = ? AND workflow_version = ? AND {at_step} AND status = ? AND {is_open}"


def lacking_sql(postgres: bool, step: bool, paths: Sequence[Sequence[str]]) -> tuple[str, list[Any]]:
    """Arguments: the returned ones, then (app, workflow, version[, step], status): how many of
    the group's open runs lack each path (columns n0, n1, ...), in one pass along
    `runs_open_by_step`."""
    columns, args = [], []
    for n, path in enumerate(paths):
        cond, more = lacks_sql(postgres, path)
        columns.append(f"COALESCE(SUM(CASE WHEN {cond} THEN 1 ELSE 0 END), 0) AS n{n}")
        args += more
    return f"SELECT {', '.join(columns)} FROM runs WHERE {_group_where(postgres, step)}", args


def lacking_newest_sql(postgres: bool, step: bool, path: Sequence[str]) -> tuple[str, list[Any]]:
    """Arguments: (app, workflow, version[, step], status), then the returned ones, then the
    limit: the newest of the group's open runs lacking `path`, along `runs_open_by_step`."""
    cond, args = lacks_sql(postgres, path)
    return (
        f"SELECT run_id, created_at FROM runs WHERE {_group_where(postgres, step)} AND {cond}"
        " ORDER BY created_at DESC, run_id DESC LIMIT ?",
        args,
    )


_FAN_COUNTS: Final = ("total", "started", "completed", "failed", "cancelled")


def fans_sql(postgres: bool, step: bool) -> str:
    """Arguments: (app, workflow, version[, step], status): how many of the group's open runs
    wait for children (a `fan` object in the document) and their fan-outs' counts summed
    (columns runs, total, started, completed, failed, cancelled, open), in one pass along
    `runs_open_by_step`."""
    if postgres:
        fan, is_object = "doc::json -> 'fan'", "json_typeof(f) = 'object'"
        sums = [f"COALESCE(SUM((f ->> '{name}')::bigint), 0) AS {name}" for name in _FAN_COUNTS]
        sums.append("COALESCE(SUM(json_array_length(f -> 'open')), 0) AS open")
    else:
        fan, is_object = "doc -> '$.fan'", "json_type(f) = 'object'"
        sums = [f"COALESCE(SUM(f ->> '$.{name}'), 0) AS {name}" for name in _FAN_COUNTS]
        sums.append("COALESCE(SUM(json_array_length(f, '$.open')), 0) AS open")
    return (
        f"SELECT COUNT(*) AS runs, {', '.join(sums)}"
        f" FROM (SELECT {fan} AS f FROM runs WHERE {_group_where(postgres, step)}) AS g WHERE {is_object}"
    )


def recent_closed_sql(postgres: bool, after: bool = False) -> str:
    """Arguments: (app, workflow[, created_at, run_id], limit): the workflow's last closed runs,
    newest first (after a keyset), along `runs_closed_by_workflow` (not past the open runs)."""
    closed = "NOT is_open" if postgres else "is_open = 0"
    keyset = " AND (created_at, run_id) < (?, ?)" if after else ""
    return (
        f"SELECT doc FROM runs WHERE app = ? AND workflow = ? AND {closed}{keyset}"
        " ORDER BY created_at DESC, run_id DESC LIMIT ?"
    )


EVENTS_OF: Final = "SELECT * FROM events WHERE run_id {ids} AND seq <= ? ORDER BY run_id, seq"


def open_group(r: Any) -> OpenGroup:
    return OpenGroup(int(r["version"]), r["step"], r["status"], int(r["n"]))


def open_row(r: Any) -> OpenRunRow:
    return OpenRunRow(
        r["run_id"], int(r["version"]), r["status"], r["step"], int(r["created_at"]), r["input"], r["state"]
    )
