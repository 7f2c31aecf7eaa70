"""A schedule's definition: the PUT body, validated, and its compiled form (pure, no I/O).

`parse_schedule(raw)` checks every field and raises `ValidationError` naming the first one at
fault (unknown fields included, as `jsonconv` does for workflows). The compiled `Schedule`
holds milliseconds, the cron expression as `cronsim` takes it and the time zone; `next_after`
says when it fires next, `jitter_of` by how much each fire is delayed.

Daylight saving (cron in a zone that changes its offset) is `cronsim`'s, which copies Debian
cron: an expression with a fixed minute and hour (`30 2 * * *`) fires once per local day — a
time skipped by a spring-forward change fires at the first valid minute after the gap (03:00),
a time repeated by a fall-back change fires once, at its first occurrence; an expression whose
minute or hour is a wildcard (`0 * * * *`, `*/15 * * * *`) follows elapsed time: the hour that
does not exist has no fire, the repeated hour fires twice. `every` ignores the zone (elapsed
time from `startAt`, else from 1970-01-01T00:00:00Z), so `every` with a `timezone` other than
UTC is refused.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import zoneinfo
from datetime import UTC, datetime, tzinfo
from typing import Any, Final

import attrs
from cronsim import CronSim, CronSimError

from ..workflow.duration import (
    MAX_TIMESTAMP_MS,
    DurationError,
    format_duration,
    format_timestamp,
    parse_duration,
    parse_timestamp,
)
from ..workflow.jsonconv import ValidationError, is_name, structure

OVERLAPS: Final = ("skip", "buffer_one", "allow", "cancel_previous")
ALIASES: Final = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
}
DEFAULT_CATCHUP_MS: Final = 60_000
MIN_EVERY_MS: Final = 1_000
MIN_CATCHUP_MS: Final = 1_000
MAX_JITTER_MS: Final = 3_600_000
MAX_CRON_CHARS: Final = 200
# How far ahead one next time is searched (cronsim gives up after 50 years): one search of the
# rarest expression costs a few ms; beyond it the schedule has no next fire (and never fires).
CRON_HORIZON_YEARS: Final = 50
MAX_TIMEZONE_CHARS: Final = 64
_NAME_RULE: Final = "must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


@attrs.frozen
class ScheduleBody:
    """`PUT /apps/{app}/schedules/{name}`, as sent (camelCase on the wire)."""

    workflow: str
    version: int | None = None
    cron: str | None = None
    every: str | None = None
    timezone: str | None = None
    input: Any = None
    overlap: str | None = None
    catchup_window: str | None = None
    jitter: str | None = None
    start_at: str | None = None
    end_at: str | None = None
    paused: bool | None = None


@attrs.frozen
class Schedule:
    """A compiled schedule definition. `document` is its canonical JSON form (defaults filled)."""

    workflow: str
    version: int | None
    cron: str | None  # five fields (an alias already expanded)
    every_ms: int | None
    timezone: str
    input: Any
    overlap: str
    catchup_window_ms: int
    jitter_ms: int
    start_at: int | None
    end_at: int | None
    document: dict[str, Any] = attrs.field(eq=False)
    zone: tzinfo = attrs.field(eq=False)

    def next_after(self, after: int) -> int | None:
        """The first scheduled time strictly after `after` (epoch ms) within `startAt..endAt`,
        or None when there is none (past `endAt`, or a cron that matches nothing within
        `CRON_HORIZON_YEARS`). A cron's costs up to a few ms: the kind computes many of them off
        the event loop (`kinds.schedule.offload`)."""
        if self.start_at is not None and after < self.start_at:
            after = self.start_at - 1
        if self.every_ms is not None:
            anchor = self.start_at if self.start_at is not None else 0
            if after < anchor:
                at = anchor
            else:
                at = anchor + ((after - anchor) // self.every_ms + 1) * self.every_ms
        else:
            assert self.cron is not None
            at_or_none = _cron_next(self.cron, self.zone, after)
            if at_or_none is None:
                return None
            at = at_or_none
        if (self.end_at is not None and at > self.end_at) or at > MAX_TIMESTAMP_MS:
            return None
        return at

    def fire_rate(self) -> float:
        """The most fires per second it can make (what the per-app quota of fire rate sums):
        `every` 1000 / its milliseconds; a cron 1 / the shortest interval its minute and hour
        fields allow (`* * * * *` 1/60, `*/5 * * * *` 1/300, `0 */2 * * *` 1/7,200; a fixed
        minute and hour 1/86,400: its day fields only make it rarer)."""
        if self.every_ms is not None:
            return 1000 / self.every_ms
        assert self.cron is not None
        return 1 / cron_min_interval_s(self.cron)

    def times(self, after: int, until: int, limit: int) -> list[int]:
        """The scheduled times in `(after, until]`, at most `limit` of them, in order."""
        out: list[int] = []
        at = self.next_after(after)
        while at is not None and at <= until and len(out) < limit:
            out.append(at)
            at = self.next_after(at)
        return out

    def count_between(self, after: int, until: int, cap: int) -> tuple[int, int]:
        """(how many scheduled times fall in `(after, until]`, counting at most `cap`; the last
        one counted, or `after` when none): `every` is counted by arithmetic, cron one by one."""
        if until <= after:
            return 0, after
        if self.every_ms is not None and self.end_at is None:
            first = self.next_after(after)
            if first is None or first > until:
                return 0, after
            n = (until - first) // self.every_ms + 1
            return n, first + (n - 1) * self.every_ms
        count, last = 0, after
        at = self.next_after(after)
        while at is not None and at <= until:
            count, last = count + 1, at
            if count >= cap:
                break
            at = self.next_after(at)
        return count, last


def _cyclic_gap(values: set[int], period: int) -> int | None:
    ordered = sorted(values)
    if len(ordered) < 2:
        return None
    gaps = [b - a for a, b in itertools.pairwise(ordered)]
    return min(*gaps, ordered[0] + period - ordered[-1])


@functools.lru_cache(maxsize=1024)
def cron_min_interval_s(expr: str) -> int:
    """The shortest interval (s) between two consecutive times of a five-field `expr`, from its
    minute and hour fields (a daylight-saving change may shorten one interval a year)."""
    sim = CronSim(expr, _utc(0))
    minutes = _cyclic_gap(sim.minutes, 60)
    if minutes is not None:
        return 60 * minutes
    hours = _cyclic_gap(sim.hours, 24)
    return 3600 * hours if hours is not None else 86_400


def document_fire_rate(document: dict[str, Any]) -> float:
    """`Schedule.fire_rate` of a stored definition document (`Schedule.document`), without
    compiling it: `every` is read as a duration, `cron` (an alias expanded) parsed."""
    every = document.get("every")
    if every is not None:
        return 1000 / parse_duration(every)
    cron = str(document["cron"])
    return 1 / cron_min_interval_s(ALIASES.get(cron.strip().lower(), cron))


def jitter_of(app: str, name: str, scheduled: int, jitter_ms: int) -> int:
    """How long the fire of `scheduled` waits past it: in `[0, jitter_ms)`, the same for the
    same (app, schedule, time) on every node and after every restart."""
    if jitter_ms <= 0:
        return 0
    digest = hashlib.blake2b(f"{app}\x00{name}\x00{scheduled}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % jitter_ms


@functools.lru_cache(maxsize=4096)
def _cron_next(expr: str, zone: tzinfo, after: int) -> int | None:
    """The first time of `expr` after `after`, searched at most `CRON_HORIZON_YEARS` ahead
    (cronsim's own limit): past it, None — the schedule has no next fire, as past `endAt`.
    Cached: schedules sharing an expression and a time (a listing) compute it once."""
    try:
        start = datetime.fromtimestamp(after / 1000, zone) if zone is not UTC else _utc(after)
        found = next(CronSim(expr, start))
    except (StopIteration, ValueError, OverflowError):  # no match for 50 years, or past year 9999
        return None
    return int(found.timestamp() * 1000)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _zone(name: str) -> tzinfo:
    if name == "UTC":
        return UTC
    if len(name) > MAX_TIMEZONE_CHARS or not name or name.startswith(("/", ".")) or ".." in name:
        raise ValidationError("timezone", f"unknown time zone {name[:MAX_TIMEZONE_CHARS]!r}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationError("timezone", f"unknown time zone {name!r}; use an IANA name") from None


def _cron(text: str) -> str:
    if len(text) > MAX_CRON_CHARS:
        raise ValidationError("cron", f"longer than {MAX_CRON_CHARS} characters")
    expr = ALIASES.get(text.strip().lower(), text)
    if expr.startswith("@"):
        raise ValidationError("cron", f"unknown alias {text!r}; expected one of {sorted(ALIASES)}")
    if len(expr.split()) != 5:
        raise ValidationError("cron", "expected five fields (minute hour day-of-month month day-of-week)")
    if not expr.isascii():
        raise ValidationError("cron", "expected ASCII characters only")
    try:
        CronSim(expr, _utc(0))
    except CronSimError as exc:
        raise ValidationError("cron", f"invalid cron expression: {exc}") from None
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # cronsim's parser on odd input
        raise ValidationError("cron", f"invalid cron expression: {exc}") from None
    return " ".join(expr.split())


def _duration(text: str | None, field: str, default: int | None, low: int) -> int | None:
    if text is None:
        return default
    try:
        ms = parse_duration(text)
    except DurationError as exc:
        raise ValidationError(field, str(exc)) from None
    if ms < low:
        raise ValidationError(field, f"must be at least {format_duration(low)}")
    return ms


def _timestamp(text: str | None, field: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_timestamp(text)
    except DurationError as exc:
        raise ValidationError(field, str(exc)) from None


def parse_schedule(raw: Any) -> tuple[Schedule, bool | None]:
    """Validate a PUT body and compile it: (the schedule, the `paused` it asks for, if any).
    `ValidationError` names the first field at fault."""
    if not isinstance(raw, dict):
        raise ValidationError("", "the schedule must be a JSON object")
    body = structure(raw, ScheduleBody)
    if not is_name(body.workflow):
        raise ValidationError("workflow", _NAME_RULE)
    if body.version is not None and body.version < 1:
        raise ValidationError("version", "must be 1 or more")
    if (body.cron is None) == (body.every is None):
        field = "cron" if body.cron is None else "every"
        raise ValidationError(field, "give exactly one of cron and every")
    cron = _cron(body.cron) if body.cron is not None else None
    every = _duration(body.every, "every", None, MIN_EVERY_MS)
    if every is not None and body.timezone not in (None, "UTC"):
        # `every` counts elapsed time: a zone would change nothing, so it is not taken silently.
        raise ValidationError("timezone", "applies to cron only; every counts elapsed time (leave it out)")
    zone_name = body.timezone if body.timezone is not None else "UTC"
    zone = _zone(zone_name)
    overlap = body.overlap if body.overlap is not None else "skip"
    if overlap not in OVERLAPS:
        raise ValidationError(
            "overlap", f"unknown overlap policy {overlap!r}; expected one of {list(OVERLAPS)}"
        )
    catchup = _duration(body.catchup_window, "catchupWindow", DEFAULT_CATCHUP_MS, MIN_CATCHUP_MS)
    jitter = _duration(body.jitter, "jitter", 0, 0)
    assert catchup is not None and jitter is not None
    if jitter > MAX_JITTER_MS:
        raise ValidationError("jitter", "must be at most 1h")
    if every is not None and jitter >= every:
        raise ValidationError("jitter", "must be shorter than every")
    start_at = _timestamp(body.start_at, "startAt")
    end_at = _timestamp(body.end_at, "endAt")
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise ValidationError("endAt", "must be later than startAt")
    document: dict[str, Any] = {
        "workflow": body.workflow,
        "version": body.version,
        "cron": body.cron,
        "every": format_duration(every) if every is not None else None,
        "timezone": zone_name,
        "input": body.input,
        "overlap": overlap,
        "catchupWindow": format_duration(catchup),
        "jitter": format_duration(jitter) if jitter else None,
        "startAt": format_timestamp(start_at),
        "endAt": format_timestamp(end_at),
    }
    schedule = Schedule(
        workflow=body.workflow,
        version=body.version,
        cron=cron,
        every_ms=every,
        timezone=zone_name,
        input=body.input,
        overlap=overlap,
        catchup_window_ms=catchup,
        jitter_ms=jitter,
        start_at=start_at,
        end_at=end_at,
        document=document,
        zone=zone,
    )
    return schedule, body.paused


def load_schedule(document: dict[str, Any]) -> Schedule:
    """A stored definition document (`Schedule.document`) compiled again. An `every` stored
    with a zone (taken before it was refused) loads as UTC: the zone never changed a fire."""
    doc = dict(document)
    if doc.get("every") is not None and doc.get("timezone") not in (None, "UTC"):
        doc["timezone"] = "UTC"
    return parse_schedule(doc)[0]
