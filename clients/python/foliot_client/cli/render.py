r"""Tables for people (rich), JSON for scripts, one-line errors, exit codes.

Every value the server sent is shown literally: the console parses no markup and no emoji
codes, and cells are `Text` objects, so a business key `k[/x]` or an idempotency key
`run_…:1:ship:1` prints as it is. Nothing is ever cut with `…`: a table that would not fit the
terminal's width (80 columns in a pipe unless `COLUMNS` says otherwise) is printed as one
`field  value` block per row instead, each value whole on its line.

Nor does a server string reach the terminal as control codes: every string the CLI prints
passes through `printable`, which shows C0 controls, DEL and C1 controls (so every ESC
sequence: colours, hidden text, cursor moves, window titles) escaped as `\x1b`, as git quotes
a path. `--json` prints JSON, whose strings escape control characters already.
"""

from __future__ import annotations

import json
import re
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
LEFT_BEHIND = 6  # done, but some runs were refused (`workflows migrate`): they stay where they were

GAP = 2  # spaces between two table columns

# The bidirectional formatting characters (LRM, RLM, ALM, the embeddings, overrides and
# isolates): not controls, but they reorder what follows on the line, so a business key could
# show another run's id or status in a cell ("Trojan Source"): shown escaped as `\u202e`.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
_ESCAPED = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}\\\\]")
_JSON_UNESCAPED = re.compile(f"[\\x7f-\\x9f{_BIDI}]")  # what `json.dumps` leaves as it is


def printable(text: str, keep: str = "\n\t") -> str:
    r"""`text` with every control character but those in `keep` shown escaped (`\x1b`), so a
    string from the server cannot move the cursor, clear lines, hide text or retitle the
    terminal. A string with none is returned as it is; in one with some, backslashes are
    doubled too, so `\x1b` in the output always means the escaped character."""
    if not any(c not in keep for c in _CONTROL.findall(text)):
        return text

    def escape(found: re.Match[str]) -> str:
        c = found.group()
        if c == "\\":
            return "\\\\"
        if c in keep:
            return c
        return f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}"

    return _ESCAPED.sub(escape, text)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """A line for people (never for `--json`): control characters escaped (`printable`)."""
    click.echo(printable(text), err=err, nl=nl)


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
        line = f"error: {error.one_line()}"
    elif isinstance(error, TransportError):
        line = f"error: cannot reach the server: {error}"
    else:
        line = f"error: {error}"
    return printable(line, keep="")


def cell(value: Any) -> str:
    """A value as one table cell or record value, control characters escaped (a line break
    stays: the layout shows a multi-line value on its lines)."""
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        # JSON escapes C0 controls itself; DEL and C1 get JSON's escape too (still JSON).
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return _JSON_UNESCAPED.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    return printable(str(value), keep="\n")


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
        chosen = fields or list(document)
        self._fields([(printable(key, ""), cell(document[key])) for key in chosen if key in document])

    def text(self, line: str, document: Any = None) -> None:
        if self.as_json:
            self.json(document if document is not None else {"message": line})
        else:
            self.console.print(Text(printable(line)))
