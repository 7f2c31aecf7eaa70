"""Duration strings (`500ms`, `30s`, `1h30m`, `14d`) and RFC 3339 timestamps, as integer milliseconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
# ASCII digits only (`\d` would take `٣`), matched whole (`$` would let a trailing newline in).
_DURATION = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m(?!s))?(?:([0-9]+)s)?(?:([0-9]+)ms)?")
_DURATION_MAX_CHARS = 64  # bounds every number's digits before int() sees it
_MAX_MS = 10 * 365 * 86_400_000  # ten years: past this a timer is a typo

_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)
# What `format_timestamp` can render: years 1..9999 in UTC.
MIN_TIMESTAMP_MS: Final = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _MS
MAX_TIMESTAMP_MS: Final = (datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC) - _EPOCH) // _MS


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> int:
    """Parse a duration string into milliseconds; units in descending order, each once."""
    if not isinstance(text, str) or not text:
        raise DurationError("expected a duration such as '30s', '5m' or '1h30m'")
    if len(text) > _DURATION_MAX_CHARS:
        raise DurationError(f"invalid duration: longer than {_DURATION_MAX_CHARS} characters")
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groups()):
        raise DurationError(f"invalid duration {text!r}: use whole numbers with d, h, m, s or ms")
    total = 0
    for value, unit in zip(match.groups(), ("d", "h", "m", "s", "ms"), strict=True):
        if value is not None:
            total += int(value) * _UNITS[unit]
    if total > _MAX_MS:
        raise DurationError(f"duration {text!r} is longer than ten years")
    return total


def format_duration(ms: int) -> str:
    """The canonical spelling of a number of milliseconds (`90000` -> `1m30s`)."""
    if ms == 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        size = _UNITS[unit]
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts)


def parse_timestamp(text: str) -> int:
    """Parse an RFC 3339 timestamp with an explicit offset into epoch milliseconds.

    Refuses what `format_timestamp` could not render: anything before year 1 or from year 10000
    on, once moved to UTC (`9999-12-31T23:59:59-23:59` is in year 10000).
    """
    if not isinstance(text, str) or not _TIMESTAMP.fullmatch(text):
        raise DurationError("expected an RFC 3339 timestamp such as '2026-11-29T18:00:00.000Z'")
    normalized = text.upper().replace("Z", "+00:00")
    # datetime keeps microseconds only; cut extra fraction digits.
    if "." in normalized:
        head, rest = normalized.split(".", 1)
        digits = re.match(r"\d+", rest)
        assert digits is not None
        frac = digits.group(0)
        normalized = f"{head}.{frac[:6].ljust(6, '0')}{rest[len(frac) :]}"
    try:
        dt = datetime.fromisoformat(normalized)
    except ValueError as exc:
        raise DurationError(f"invalid timestamp {text!r}") from exc
    ms = (dt - _EPOCH) // _MS  # exact: aware subtraction never leaves datetime's range
    if not MIN_TIMESTAMP_MS <= ms <= MAX_TIMESTAMP_MS:
        raise DurationError(f"timestamp {text!r} is outside years 1..9999 in UTC")
    return ms


def format_timestamp(ms: int | None) -> str | None:
    """Epoch milliseconds as `2026-11-29T18:00:00.000Z` (exact integer arithmetic)."""
    if ms is None:
        return None
    dt = _EPOCH + timedelta(milliseconds=ms)
    return dt.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
