"""Tables for people (rich), JSON for scripts, one-line errors, exit codes.

Every value the server sent is shown literally: the console parses no markup and no emoji
codes, and cells are `Text` objects, so a business key `k[/x]` or an idempotency key
`run_…:1:ship:1` prints as it is. Nothing is ever cut with `…`: a table that would not fit the
terminal's width (80 columns in a pipe unless `COLUMNS` says otherwise) is printed as one
`field  value` block per row instead, each value whole on its line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..errors import ApiError, Conflict, FoliotError, NotFound, TransportError

#: Exit codes (documented in docs/clients.md).
OK = 0
REFUSED = 1  # the server refused the request (4xx other than 404/409)
USAGE = 2  # bad options or files (click's own code for usage errors)
NOT_FOUND = 3
CONFLICT = 4  # 409: the run's status does not allow it, a closed task, a key in use, ...
UNREACHABLE = 5  # no answer, or the server failed (5xx, overloaded, unavailable)

GAP = 2  # spaces between two table columns


def exit_code(error: FoliotError) -> int:
    if isinstance(error, NotFound):
        return NOT_FOUND
    if isinstance(error, Conflict):
        return CONFLICT
    if isinstance(error, ApiError) and error.status < 500 and error.status != 429:
        return REFUSED
    return UNREACHABLE


def one_line(error: FoliotError) -> str:
    """`error: 409 invalid_status: ...` or `error: cannot reach http://...: ...`."""
    if isinstance(error, ApiError):
        return f"error: {error.one_line()}"
    if isinstance(error, TransportError):
        return f"error: cannot reach the server: {error}"
    return f"error: {error}"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def literal_console() -> Console:
    """A console that prints strings as they are: no markup, no emoji codes, no highlighting,
    no wrapping of long lines (the terminal wraps them; copying still gets the whole value)."""
    return Console(soft_wrap=True, highlight=False, markup=False, emoji=False)


def table_width(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> int:
    """The columns a table needs to show every cell whole (its widest line per column)."""
    widths = [cell_len(h) for h in headers]
    for row in rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], max((cell_len(line) for line in value.splitlines()), default=0))
    return sum(widths) + GAP * (len(widths) - 1)


class Output:
    def __init__(self, as_json: bool, console: Console | None = None) -> None:
        self.as_json = as_json
        self.console = console or literal_console()

    def json(self, value: Any) -> None:
        # Plain text, not rich's JSON renderer: scripts read it, and nothing in it is styled.
        click.echo(json.dumps(value, indent=2, ensure_ascii=False))

    def table(self, rows: Sequence[dict[str, Any]], columns: Sequence[str], document: Any = None) -> None:
        """Rows as a table (one block per row when it would not fit the width), or `document`
        (default: the rows) as JSON."""
        if self.as_json:
            self.json(rows if document is None else document)
            return
        cells = [[cell(row.get(c)) for c in columns] for row in rows]
        if table_width(cells, columns) > self.console.width:
            self._blocks(cells, columns)
            return
        table = Table(box=None, pad_edge=False, padding=(0, GAP // 2), show_edge=False)
        for name in columns:
            table.add_column(Text(name, style="bold"), no_wrap=True, overflow="ignore")
        for values in cells:
            table.add_row(*(Text(v) for v in values))
        self.console.print(table, soft_wrap=False, crop=False)

    def _blocks(self, cells: Sequence[Sequence[str]], columns: Sequence[str]) -> None:
        for i, values in enumerate(cells):
            if i:
                self.console.print()
            self._fields(list(zip(columns, values, strict=True)))

    def _fields(self, pairs: Sequence[tuple[str, str]]) -> None:
        width = max((cell_len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            line = Text(key.ljust(width), style="bold")
            line.append(" " * GAP)
            line.append(value)
            self.console.print(line)

    def record(self, document: dict[str, Any], fields: Sequence[str] | None = None) -> None:
        """One document as `field  value` lines (each value whole), or as JSON."""
        if self.as_json:
            self.json(document)
            return
        self._fields([(key, cell(document[key])) for key in fields or list(document) if key in document])

    def text(self, line: str, document: Any = None) -> None:
        if self.as_json:
            self.json(document if document is not None else {"message": line})
        else:
            self.console.print(Text(line))
