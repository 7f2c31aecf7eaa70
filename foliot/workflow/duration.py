"""Duration strings (`500ms`, `30s`, `1h30m`, `14d`) and RFC 3339 timestamps, as integer milliseconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$")
_MAX_MS = 10 * 365 * 86_400_000  # ten years: past this a timer is a typo

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$")


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> int:
    """Parse a duration string into milliseconds; units in descending order, each once."""
    if not isinstance(text, str) or not text:
        raise DurationError("expected a duration such as '30s', '5m' or '1h30m'")
    match = _DURATION.match(text)
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
    """Parse an RFC 3339 timestamp with an explicit offset into epoch milliseconds."""
    if not isinstance(text, str) or not _TIMESTAMP.match(text):
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
    return int(dt.timestamp() * 1000)


def format_timestamp(ms: int | None) -> str | None:
    """Epoch milliseconds as `2026-11-29T18:00:00.000Z`."""
    if ms is None:
        return None
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
