"""The fencing SQL: a write made under leases (several nodes, `foliot.storage.fence`) commits
only while `cluster_leases` shows those leases held, unexpired on the database's clock.

A batch's transaction reads its leases FOR SHARE first (`HELD_FENCES`, in partition order, as
the keeper locks them) and checks them unexpired again after its last write (`RAN_OUT`); the
one-statement writes of `units.py` carry the same check in their own CTEs (`FENCED_*`).
"""

from __future__ import annotations

import re
from typing import Any

import asyncpg

from ..cluster import NOW_MS
from ..fence import Fence
from .units import INSERT_NEW_RUNS, UPDATE_RUNS_SET


def fence_columns(fences: list[Fence]) -> list[Any]:
    partitions = [f.partition for f in fences]
    epochs = [f.epoch for f in fences]
    return [partitions, epochs, [f.node_id for f in fences], len(fences)]


# The leases still held as the batch's fences say, locked FOR SHARE in partition order.
def _held_leases(first: int, columns: str = "l.partition") -> str:
    """The batch's leases still held unexpired as its fences say (parameters `$first` to
    `$first + 2`: partitions, epochs, node ids), locked FOR SHARE in partition order."""
    return (
        f"SELECT {columns} FROM cluster_leases l"
        f" JOIN unnest(${first}::int[], ${first + 1}::bigint[], ${first + 2}::text[])"
        " AS f(partition, epoch, node_id)"
        " ON l.partition = f.partition AND l.epoch = f.epoch AND l.node_id = f.node_id"
        f" WHERE l.expires_at > {NOW_MS} ORDER BY l.partition FOR SHARE OF l"
    )


def _fence_head(first: int) -> str:
    """The CTEs a one-statement write starts with to be fenced: `fenced.ok` is whether all
    `$first + 3` leases hold (`_held_leases`)."""
    ok = f"fenced AS (SELECT count(*) = ${first + 3} AS ok FROM fence)"
    return f"WITH fence AS ({_held_leases(first)}), {ok}, "


_HELD_FENCES = _held_leases(1, "l.partition, l.epoch, l.node_id")


# Which of these partitions' leases expired by now (their rows are this batch's, FOR SHARE).
_EXPIRED = f"expires_at <= {NOW_MS}"
RAN_OUT = f"SELECT array_agg(partition) FROM cluster_leases WHERE partition = ANY($1::int[]) AND {_EXPIRED}"


async def held_fences(conn: asyncpg.Connection, fences: list[Fence]) -> set[Fence]:
    rows = await conn.fetch(_HELD_FENCES, *fence_columns(fences)[:3])
    return {Fence(r["node_id"], r["partition"], r["epoch"]) for r in rows}


# The same, moving nothing unless every lease of the batch holds: returns (held, runs moved).
FENCED_UPDATE_RUNS_SET = _fence_head(41) + UPDATE_RUNS_SET.removeprefix("WITH ").replace(
    " FROM unnest($1::text[]", " FROM fenced, unnest($1::text[]", 1
).replace(" WHERE r.run_id = u.run_id", " WHERE fenced.ok AND r.run_id = u.run_id", 1).replace(
    " SELECT ARRAY(SELECT run_id FROM moved)", " SELECT ok, ARRAY(SELECT run_id FROM moved) FROM fenced"
)


def _fenced_new_runs(sql: str) -> str:
    """`INSERT_NEW_RUNS` writing nothing unless every lease of the batch holds (read FOR SHARE
    in partition order, as `_HELD_FENCES`): returns whether they did."""
    guarded = re.sub(
        r"SELECT \* FROM unnest\(([^()]*)\)", r"SELECT u.* FROM fenced, unnest(\1) AS u WHERE fenced.ok", sql
    )
    head, last = guarded.rsplit(" INSERT INTO idempotency", 1)
    return (
        _fence_head(50)
        + head.removeprefix("WITH ")
        + ", new_idempotency AS (INSERT INTO idempotency"
        + last
        + ") SELECT ok FROM fenced"
    )


FENCED_NEW_RUNS = _fenced_new_runs(INSERT_NEW_RUNS)
