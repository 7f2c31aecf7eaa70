"""JSON values Foliot stores: bounded in depth, measured as compact JSON in UTF-8 bytes.

Every way a JSON value comes in (request bodies, handler answers, `complete` outputs, signal
payloads, state edits) passes through `loads` or `payload_size`, so no document deeper than
`MAX_DEPTH` levels reaches the recursive encoders and decoders behind the store.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

MAX_DEPTH: Final = 64
"""Most arrays/objects nested inside one another in a value (`1` is 0 deep, `{"a": [1]}` 2)."""

_OPEN_OR_CLOSE_OR_QUOTE = re.compile(r'["\[\]{}]')
_REST_OF_STRING = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class PayloadError(ValueError):
    """A value that cannot be stored as JSON (NaN, a lone surrogate, too deep, ...)."""


class DepthError(PayloadError):
    """A JSON document nests arrays/objects deeper than allowed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nests arrays/objects deeper than {limit} levels")
        self.limit = limit


def deeper_than(text: str, limit: int) -> bool:
    """Whether the JSON text `text` opens more than `limit` arrays/objects inside one another.

    A linear scan that skips string contents and stops at the first level past the limit; it
    never parses. On malformed text it may answer either way: the parser refuses that text anyway
    before it recurses any deeper than this scan counted.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # the common case, at C speed: not enough brackets to nest that deep
    depth = 0
    pos = 0
    find = _OPEN_OR_CLOSE_OR_QUOTE.search
    while (found := find(text, pos)) is not None:
        char = found.group()
        pos = found.end()
        if char == '"':
            rest = _REST_OF_STRING.match(text, pos)
            if rest is None:
                return False  # unterminated string: malformed, the parser will say so
            pos = rest.end()
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose names are unique (RFC 8259 leaves a repeated name's meaning to the
    reader; we refuse it rather than pick one of its values)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r} in an object")
            seen.add(key)
    return obj


def loads(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads` for untrusted text: `DepthError` past `max_depth` levels (checked before
    parsing), `PayloadError` for a lone surrogate, `ValueError` for anything malformed (NaN and
    Infinity, and an object naming a key twice, included)."""
    if deeper_than(text, max_depth):
        raise DepthError(max_depth)
    try:
        value = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except RecursionError:  # unreachable after the scan; kept so no parser path can crash
        raise DepthError(max_depth) from None
    if _SURROGATE_ESCAPE.search(text):
        compact_json(value)  # a lone surrogate cannot be encoded: PayloadError
    return value


def compact_json(value: Any) -> bytes:
    """`json.dumps` with no spaces and no ASCII or HTML escaping, encoded as UTF-8."""
    return _compact(value)[1]


def _compact(value: Any) -> tuple[str, bytes]:
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text, text.encode("utf-8")
    except RecursionError:
        raise DepthError(MAX_DEPTH) from None
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise PayloadError(f"value is not storable JSON: {exc}") from exc


def payload_size(value: Any) -> int:
    """Size in bytes of `value` as compact JSON: `<`, `>`, `&` count 1, U+2028 counts 3.

    Also the gate for a value to be stored: `PayloadError` when it is not storable JSON or nests
    deeper than `MAX_DEPTH`.
    """
    text, data = _compact(value)
    if deeper_than(text, MAX_DEPTH):
        raise DepthError(MAX_DEPTH)
    return len(data)
