"""Payload sizes: the compact JSON Foliot stores, counted in UTF-8 bytes."""

from __future__ import annotations

import json
from typing import Any


class PayloadError(ValueError):
    """A value that cannot be stored as JSON (NaN, a lone surrogate, ...)."""


def compact_json(value: Any) -> bytes:
    """`json.dumps` with no spaces and no ASCII or HTML escaping, encoded as UTF-8."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode("utf-8")
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise PayloadError(f"value is not storable JSON: {exc}") from exc


def payload_size(value: Any) -> int:
    """Size in bytes of `value` as compact JSON: `<`, `>`, `&` count 1, U+2028 counts 3."""
    return len(compact_json(value))
