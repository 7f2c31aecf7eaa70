"""Flow control as data (issue 23): priorities, their aging, and rate-limit buckets (pure).

Priorities are levels 1 (most urgent) to 5, 3 by default. A waiting item is ranked by
`rank(level, enqueued_at, aging)` = its arrival time plus `(level - 1) * aging`: it gains one
level per `aging` seconds it waits, so an item is overtaken only by items that arrived less than
`(its level - their level) * aging` seconds after it; after `4 * aging` nothing that arrives
later goes ahead of it (the starvation bound). Equal ranks go in arrival order.

Rate limits space the sends of one bucket `period / limit` apart (a token bucket of one token,
GCRA's virtual scheduling): a bucket is its "theoretical arrival time", the earliest instant its
next send may go, kept in microseconds in the database (`rate_buckets`), so it survives a
restart and is one count for every node of a cluster. A token is taken only when a send goes
(`take_tokens`), never for a later slot, so a send dropped while it waits holds none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

import attrs

from .duration import DurationError, parse_duration
from .jsonconv import ValidationError
from .predicate import PredicateError, lookup, parse_path

PRIORITY_HIGHEST: Final = 1
PRIORITY_LOWEST: Final = 5
DEFAULT_PRIORITY: Final = 3
AGING_SECONDS: Final = 10.0  # a waiting item gains one level per this many seconds
MAX_RATE: Final = 1_000_000  # a limit of at most this many per period
MIN_PERIOD_MS: Final = 1
MAX_PERIOD_MS: Final = 86_400_000  # one day
_MAX_KEY_TEXT: Final = 200


def check_priority(value: Any, field: str) -> int:
    """A priority from a document or a request: an integer 1..5, else `ValidationError`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not PRIORITY_HIGHEST <= value <= PRIORITY_LOWEST
    ):
        raise ValidationError(field, f"must be an integer {PRIORITY_HIGHEST} (highest)..{PRIORITY_LOWEST}")
    return value


def swf_level(task_priority: str | int | None) -> int:
    """SWF's `taskPriority` (a string integer, higher more urgent, 0 when unset) as a level:
    2 and above → 1, 1 → 2, 0 → 3, -1 → 4, -2 and below → 5."""
    if task_priority is None:
        return DEFAULT_PRIORITY
    try:
        value = int(task_priority)
    except (TypeError, ValueError):
        return DEFAULT_PRIORITY
    return DEFAULT_PRIORITY - max(-2, min(2, value))


def rank(level: int, enqueued_at: float, aging: float = AGING_SECONDS) -> float:
    """The order of a waiting item (smallest first): arrival time plus `(level - 1) * aging`."""
    return enqueued_at + (level - 1) * aging


@attrs.frozen
class RateLimit:
    """A compiled `rateLimit`: at most `limit` sends per `period_ms`, per value of `key`."""

    limit: int
    period_ms: int
    key: tuple[str, ...] | None = None  # a path into {input, state}; None: one bucket
    key_text: str | None = None  # the path as written ("input.tenant")

    @property
    def interval_us(self) -> int:
        """The spacing of two sends of one bucket, in microseconds (at least 1)."""
        return max(1, self.period_ms * 1000 // self.limit)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"limit": self.limit, "periodMs": self.period_ms}
        if self.key_text is not None:
            out["key"] = self.key_text
        return out


@attrs.frozen
class Bucket:
    """One token bucket a send needs: its name in `rate_buckets`, its spacing, and how `why`
    names it (`tenant=acme`, `step pay`, `app shop`)."""

    name: str
    interval_us: int
    label: str


def parse_rate_limit(raw: Any, field: str, *, keyed: bool = True) -> RateLimit:
    """`{"limit": n, "period": "1m", "key": "input.tenant"}` (an app's takes no `key`)."""
    if not isinstance(raw, dict):
        raise ValidationError(field, "expected an object {limit, period" + (", key}" if keyed else "}"))
    allowed = {"limit", "period", "key"} if keyed else {"limit", "period"}
    for name in raw:
        if name not in allowed:
            raise ValidationError(f"{field}.{name}", "unknown field")
    limit = raw.get("limit")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RATE:
        raise ValidationError(f"{field}.limit", f"must be an integer 1..{MAX_RATE}")
    period = raw.get("period")
    if not isinstance(period, str):
        raise ValidationError(f"{field}.period", 'required: a duration such as "1s", "1m", "1h"')
    try:
        period_ms = parse_duration(period)
    except DurationError as exc:
        raise ValidationError(f"{field}.period", str(exc)) from None
    if not MIN_PERIOD_MS <= period_ms <= MAX_PERIOD_MS:
        raise ValidationError(f"{field}.period", "must be 1ms..24h")
    key_text = raw.get("key")
    key = None
    if key_text is not None:
        if not isinstance(key_text, str):
            raise ValidationError(f"{field}.key", 'expected a path such as "input.tenant"')
        try:
            key = parse_path(key_text, f"{field}.key")
        except PredicateError as exc:
            raise ValidationError(exc.field, exc.message) from None
    return RateLimit(limit, period_ms, key, key_text)


def key_value(value: Any) -> str:
    """A key's value as bucket text: a string as itself, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def step_bucket(app: str, workflow: str, step: str, limit: RateLimit, scope: dict[str, Any]) -> Bucket:
    """The bucket of one send of a rate-limited step, its key read from `{input, state}` now.
    A key the run does not hold shares the bucket of the value `null`."""
    base = f"s/{app}/{workflow}/{step}"
    if limit.key is None:
        return Bucket(base, limit.interval_us, f"step {step}")
    found, value = lookup(limit.key, scope)
    text = key_value(value if found else None)
    name = f"{base}/{limit.key_text}={text}"
    if len(name) > _MAX_KEY_TEXT:
        name = f"{base}/{limit.key_text}#" + hashlib.sha256(text.encode()).hexdigest()
    shown = text if len(text) <= 64 else text[:61] + "..."
    return Bucket(name, limit.interval_us, f"{limit.key[-1]}={shown}")


def app_bucket(app: str, limit: RateLimit) -> Bucket:
    """The bucket every push of an app with a rate limit takes a token from."""
    return Bucket(f"a/{app}", limit.interval_us, f"app {app}")


def take_tokens(
    buckets: Sequence[tuple[str, int]], tats: Sequence[int], count: int, now_us: int
) -> tuple[int, list[tuple[str, int]], tuple[str, int] | None]:
    """Up to `count` tokens of each `(bucket, interval_us)` (TATs `tats`, 0 for a bucket never
    used) at `now_us`: a token is free when its slot starts within now's millisecond (the
    dispatcher's clock counts milliseconds), so a bucket slower than one a millisecond gives one,
    a faster one the slots of that millisecond. (how many, the buckets' new TATs, None) when
    some are taken, of each bucket alike; else (0, [], (a bucket not free, its TAT))."""
    end = now_us - now_us % 1000 + 999
    granted, busy = count, None
    for (name, interval_us), tat in zip(buckets, tats, strict=True):
        start = max(tat, now_us)
        free = (end - start) // interval_us + 1 if start <= end else 0
        granted = min(granted, free)
        if not free and (busy is None or tat > busy[1]):
            busy = (name, tat)
    if busy is not None or granted <= 0:
        return 0, [], busy
    moved = [
        (name, max(tat, now_us) + granted * interval_us)
        for (name, interval_us), tat in zip(buckets, tats, strict=True)
    ]
    return granted, moved, None
