"""Whole numbers from text: ASCII digits only, bounded before `int()` ever sees them.

`str.isdigit` accepts `²` and `٣`, and `int()` refuses more than 4300 digits with a plain
`ValueError`; every number Foliot reads from a query string, a cursor, a path, a duration or a
signature header goes through `ascii_int` instead.
"""

from __future__ import annotations

from typing import Final

INT64_MAX: Final = 2**63 - 1


def ascii_int(text: str, low: int = 0, high: int = INT64_MAX) -> int:
    """`text` as an integer in `low..high` (`low >= 0`); `ValueError` for anything else."""
    if (
        not isinstance(text, str)
        or not 1 <= len(text) <= len(str(high))
        or not text.isascii()
        or not text.isdigit()
    ):
        raise ValueError(f"expected a whole number {low}..{high} in ASCII digits")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"must be {low}..{high}")
    return value
