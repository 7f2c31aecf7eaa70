"""Tables for people (rich), JSON for scripts, one-line errors, exit codes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from ..errors import ApiError, Conflict, FoliotError, NotFound, TransportError

#: Exit codes (documented in docs/clients.md).
OK = 0
REFUSED = 1  # the server refused the request (4xx other than 404/409)
USAGE = 2  # bad options or files (click's own code for usage errors)
NOT_FOUND = 3
CONFLICT = 4  # 409: the run's status does not allow it, a closed task, a key in use, ...
UNREACHABLE = 5  # no answer, or the server failed (5xx, overloaded, unavailable)


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


class Output:
    def __init__(self, as_json: bool, console: Console | None = None) -> None:
        self.as_json = as_json
        self.console = console or Console(soft_wrap=True, highlight=False)

    def json(self, value: Any) -> None:
        self.console.print_json(json.dumps(value, ensure_ascii=False))

    def table(self, rows: Sequence[dict[str, Any]], columns: Sequence[str], document: Any = None) -> None:
        """Rows as a table, or `document` (default: the rows) as JSON."""
        if self.as_json:
            self.json(rows if document is None else document)
            return
        table = Table(*columns, box=None, pad_edge=False)
        for row in rows:
            table.add_row(*(cell(row.get(c)) for c in columns))
        self.console.print(table)

    def record(self, document: dict[str, Any], fields: Sequence[str] | None = None) -> None:
        """One document as `field  value` lines, or as JSON."""
        if self.as_json:
            self.json(document)
            return
        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        for key in fields or list(document):
            if key in document:
                table.add_row(key, cell(document[key]))
        self.console.print(table)

    def text(self, line: str, document: Any = None) -> None:
        if self.as_json:
            self.json(document if document is not None else {"message": line})
        else:
            self.console.print(line)
