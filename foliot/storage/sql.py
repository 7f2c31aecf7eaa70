"""How the stores' shared SQL is written and run (pure: no connection here).

Statements are written once with `?` placeholders (SQLite's); PostgreSQL runs them through
`numbered`, which turns the n-th `?` into `$n` (cached: a statement is rewritten once, so asyncpg
prepares the same text every time).

A transaction whose later statements depend on what earlier ones answered (read, decide, write)
is written once as a generator (`Tx`): it yields each `Op` and is sent the answer (a row or None,
a list of rows, the count of rows changed, None after `many`); what it returns is the
transaction's result. Each backend only drives it on its own connection, synchronously on
SQLite's writer thread (`sqlite.run_tx`), on the asyncio loop for PostgreSQL
(`postgres.store.run_tx`), so the two cannot write one transaction differently.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Generator, Sequence
from enum import Enum
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


@functools.lru_cache(maxsize=1024)
def numbered(sql: str) -> str:
    """`?` placeholders as PostgreSQL's `$1, $2, …` (no shared statement holds a literal `?`; one
    already numbered comes back unchanged)."""
    counter = itertools.count(1)
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


class Kind(Enum):
    ONE = "one"  # answers the first row, or None
    ALL = "all"  # answers every row
    CHANGE = "change"  # answers how many rows the statement inserted, updated or deleted
    MANY = "many"  # the statement once per row of `args` (executemany); answers None


class Op(NamedTuple):
    kind: Kind
    sql: str
    args: Sequence[Any]


# A transaction: yields `Op`s, is sent their answers, returns its result.
Tx = Generator[Op, Any, T]


def one(sql: str, *args: Any) -> Op:
    return Op(Kind.ONE, sql, args)


def rows(sql: str, *args: Any) -> Op:
    return Op(Kind.ALL, sql, args)


def change(sql: str, *args: Any) -> Op:
    return Op(Kind.CHANGE, sql, args)


def many(sql: str, rows: Sequence[Sequence[Any]]) -> Op:
    return Op(Kind.MANY, sql, rows)


def marks(n: int) -> str:
    """`(?, ?, …)` for a row of `n` values."""
    return "(" + ", ".join("?" * n) + ")"
