"""The console's trends: a bounded in-memory history of a few engine values, and sparklines.

One engine-owned Trio task (`Sampler.serve`) reads, every `FOLIOT_TREND_INTERVAL_MS` (10 s),
values the engine already has: open runs by status (the `run_counts` counters), live actors,
timers in memory and the last timer lag, pushes answered in the interval (ok / failed) and their
p50 / p99 latency (from the push histogram's buckets, the interval's difference), and the pull
queues' total backlog; per app, the runs started, completed and failed in the interval (the
metrics' tally of committed run events); per pull queue, its backlog and waiting pollers. Each
series is a ring of `FOLIOT_TREND_SAMPLES` (360: one hour) samples allocated once, and the
per-app and per-queue series exist for at most `MAX_KEYS` keys each (later ones are summed under
OTHER): memory is fixed whatever the load. History is lost at a restart; Prometheus
(`/metrics`) is the long-term store (docs/decisions.md).

`Ring` and `sparkline` are pure; time comes from the engine's clock (Trio's), so tests run the
sampler under `MockClock`.
"""

from __future__ import annotations

import logging
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..core.workflow.model import OPEN_STATUSES

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .observed import Observed

log = logging.getLogger(__name__)

Point = tuple[int, float | None]  # (epoch ms, value or None: a gap)

OPEN_ORDER: Final = ("queued", "running", "waiting", "sleeping", "stuck", "paused")
assert set(OPEN_ORDER) == OPEN_STATUSES
# name -> (label, unit); a fixed set, so memory is bounded by len(SERIES) * samples.
SERIES: Final[dict[str, tuple[str, str]]] = {
    **{f"runs.{s}": (f"{s} runs", "") for s in OPEN_ORDER},
    "actors.live": ("live actors", ""),
    "timers.inMemory": ("timers in memory", ""),
    "timers.lagMs": ("timer lag", "ms"),
    "pushes.ok": ("pushes ok / interval", ""),
    "pushes.failed": ("pushes failed / interval", ""),
    "pushes.p50Ms": ("push p50", "ms"),
    "pushes.p99Ms": ("push p99", "ms"),
    "queues.backlog": ("queue backlog", ""),
}
# Per app and per pull queue: a ring per (key, series) for at most MAX_KEYS keys each, the first
# ones seen; any later key is summed under OTHER, so memory stays bounded whatever the tenants do.
APP_SERIES: Final[dict[str, tuple[str, str]]] = {
    "started": ("runs started / interval", ""),
    "completed": ("runs completed / interval", ""),
    "failed": ("runs failed / interval", ""),
}
QUEUE_SERIES: Final[dict[str, tuple[str, str]]] = {
    "backlog": ("backlog", ""),
    "pollers": ("pollers waiting", ""),
}
MAX_KEYS: Final = 20
OTHER: Final = "(others)"  # no app or queue name starts with "("
PUSH_HISTOGRAM: Final = "foliot_push_latency_seconds"
OK_OUTCOMES: Final = frozenset({"ok", "accepted"})


class Ring:
    """The last `capacity` samples of one series, oldest first; allocated once (16 bytes each)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a ring holds at least one sample")
        self.capacity = capacity
        self._at = array("q", [0]) * capacity
        self._value = array("d", [math.nan]) * capacity
        self._next = 0  # where the next sample goes
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, at_ms: int, value: float | None) -> None:
        """Append a sample (None or NaN: a gap), overwriting the oldest once full."""
        self._at[self._next] = at_ms
        self._value[self._next] = math.nan if value is None else float(value)
        self._next = (self._next + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def points(self) -> list[Point]:
        first = (self._next - self._size) % self.capacity
        out: list[Point] = []
        for i in range(self._size):
            j = (first + i) % self.capacity
            v = self._value[j]
            out.append((self._at[j], None if math.isnan(v) else v))
        return out


@attrs.define
class Trends:
    """Every series' ring, and the sampling interval (for the charts' time axis and gaps)."""

    interval_ms: int
    capacity: int
    series: dict[str, Ring] = attrs.field(init=False)
    apps: KeyedTrends = attrs.field(init=False)
    queues: KeyedTrends = attrs.field(init=False)
    last_at: int | None = None

    def __attrs_post_init__(self) -> None:
        self.capacity = max(self.capacity, 1)
        self.series = {name: Ring(self.capacity) for name in SERIES}
        self.apps = KeyedTrends(APP_SERIES, self.capacity)
        self.queues = KeyedTrends(QUEUE_SERIES, self.capacity)

    def record(self, at_ms: int, values: Mapping[str, float | None]) -> None:
        """One sample of every series at `at_ms`; a series missing from `values` gets a gap."""
        for name, ring in self.series.items():
            ring.add(at_ms, values.get(name))
        self.last_at = at_ms

    def window(self) -> tuple[int, int]:
        """(start, end) in epoch ms of the span the rings can hold, ending at the last sample."""
        end = self.last_at or 0
        return end - max(self.interval_ms, 1) * (self.capacity - 1), end

    def as_json(self) -> dict[str, object]:
        return {
            "intervalMs": self.interval_ms,
            "samples": self.capacity,
            "series": {
                name: {
                    "label": SERIES[name][0],
                    "unit": SERIES[name][1],
                    "points": [[at, v] for at, v in ring.points()],
                }
                for name, ring in self.series.items()
            },
            "apps": self.apps.as_json(),
            "queues": self.queues.as_json(),
        }


class KeyedTrends:
    """The same few series for each of a set of keys (apps, queues): one ring per (key, series),
    at most `max_keys` keys plus OTHER, which sums every key past the first `max_keys` seen.

    Each sample gives every key already known a value (0 when it had none), so a quiet app's
    line drops to zero instead of breaking; a key gets its rings when first seen."""

    def __init__(self, names: Mapping[str, tuple[str, str]], capacity: int, max_keys: int = MAX_KEYS) -> None:
        self.names = names
        self.capacity = max(capacity, 1)
        self.max_keys = max_keys
        self.keys: dict[str, dict[str, Ring]] = {}

    def _slot(self, key: str) -> str:
        if key in self.keys:
            return key
        slot = key if len(self.keys) - (OTHER in self.keys) < self.max_keys else OTHER
        if slot not in self.keys:
            self.keys[slot] = {name: Ring(self.capacity) for name in self.names}
        return slot

    def record(self, at_ms: int, values: Mapping[str, Mapping[str, float]]) -> None:
        """One sample: `values` maps a key to its series' values (a missing one is 0)."""
        folded: dict[str, dict[str, float]] = {}
        for key in sorted(values):  # sorted: which keys get their own rings does not hang on dict order
            into = folded.setdefault(self._slot(key), {})
            for name, value in values[key].items():
                into[name] = into.get(name, 0.0) + value
        for key, rings in self.keys.items():
            got = folded.get(key, {})
            for name, ring in rings.items():
                ring.add(at_ms, got.get(name, 0.0))

    def as_json(self) -> dict[str, object]:
        return {
            key: {
                name: {
                    "label": self.names[name][0],
                    "unit": self.names[name][1],
                    "points": [[at, v] for at, v in ring.points()],
                }
                for name, ring in rings.items()
            }
            for key, rings in self.keys.items()
        }


def queue_key(app: str, queue: str) -> str:
    """A pull queue's key in the queue trends (`/` is in no name)."""
    return f"{app}/{queue}"


# ---------------------------------------------------------------------- reading the engine


Buckets = dict[float, float]  # upper bound (seconds) -> cumulative count, over every label


def histogram(registry: CollectorRegistry, name: str) -> tuple[int, float, Buckets]:
    """(count, sum, buckets) of a histogram summed over every label."""
    count, total = 0, 0.0
    buckets: Buckets = {}
    for metric in registry.collect():
        if metric.name != name:
            continue
        for sample in metric.samples:
            if sample.name == name + "_count":
                count += int(sample.value)
            elif sample.name == name + "_sum":
                total += sample.value
            elif sample.name == name + "_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return count, total, buckets


def quantile(buckets: Iterable[tuple[float, float]], count: float, q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` (None: no observations). Past the
    last finite bound, that bound (a lower bound of the truth)."""
    if count <= 0:
        return None
    finite = 0.0
    for bound, cumulative in sorted(buckets):
        if math.isinf(bound):
            return finite or None
        finite = bound
        if cumulative >= q * count:
            return bound
    return finite or None


def interval_quantile(now: Buckets, before: Buckets, q: float) -> float | None:
    """`q` over the observations made between two readings of the same histogram."""
    delta = {b: c - before.get(b, 0.0) for b, c in now.items()}
    count = delta.get(math.inf, max(delta.values(), default=0.0))
    return quantile(delta.items(), count, q)


class Sampler:
    """The engine's sampling task: reads the engine every interval into its `Trends`."""

    def __init__(self, engine: Observed, trends: Trends) -> None:
        self.engine = engine
        self.trends = trends
        self._buckets: Buckets = {}
        self._outcomes: dict[str, int] = {}
        self._tally: dict[str, tuple[int, ...]] = {}
        self.failures = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.trends.interval_ms <= 0:  # sampling turned off (FOLIOT_TREND_INTERVAL_MS=0)
            return
        clock = self.engine.clock
        due = clock.now()
        while True:
            await self.sample_once()
            due += self.trends.interval_ms
            now = clock.now()
            if due <= now:  # fell behind (a slow read): skip to the next slot, leaving a gap
                due = now + self.trends.interval_ms - (now - due) % self.trends.interval_ms
            await clock.sleep_until(due)

    async def sample_once(self) -> None:
        eng = self.engine
        values: dict[str, float | None] = {}
        try:
            open_runs = await eng.store.count_open_runs()
        except Exception:  # storage down: the runs series get a gap, the rest is still read
            self.failures += 1
            log.exception("trend sampling could not read the run counters")
        else:
            for status in OPEN_STATUSES:
                values[f"runs.{status}"] = open_runs.get(status, 0)
        timers = eng.timers.stats()
        values["actors.live"] = len(eng.supervisor.actors)
        values["timers.inMemory"] = timers["inMemory"]
        values["timers.lagMs"] = timers["lagMs"]
        outcomes = eng.metrics.outcome_counts()
        delta = {k: n - self._outcomes.get(k, 0) for k, n in outcomes.items()}
        values["pushes.ok"] = sum(n for k, n in delta.items() if k in OK_OUTCOMES)
        values["pushes.failed"] = sum(n for k, n in delta.items() if k not in OK_OUTCOMES)
        self._outcomes = outcomes
        _, _, buckets = histogram(eng.metrics.registry, PUSH_HISTOGRAM)
        for name, q in (("pushes.p50Ms", 0.5), ("pushes.p99Ms", 0.99)):
            seconds = interval_quantile(buckets, self._buckets, q)
            values[name] = None if seconds is None else seconds * 1000
        self._buckets = buckets
        values["queues.backlog"] = eng.queues.total()
        now = eng.clock.now()
        self.trends.record(now, values)
        self.trends.apps.record(now, self._per_app(eng.metrics.run_tally))
        self.trends.queues.record(
            now,
            {
                queue_key(app, queue): {
                    "backlog": eng.queues.depth(app, queue),
                    "pollers": eng.queues.waiting_on(app, queue),
                }
                for app, queue in eng.queues.known_queues()
            },
        )

    def _per_app(self, tally: Mapping[str, Sequence[int]]) -> dict[str, dict[str, float]]:
        """Each app's runs started, completed and failed since the last sample."""
        out: dict[str, dict[str, float]] = {}
        for app, counts in tally.items():
            before = self._tally.get(app, (0, 0, 0))
            out[app] = {name: float(counts[i] - before[i]) for i, name in enumerate(APP_SERIES)}
            self._tally[app] = tuple(counts)
        return out


# ---------------------------------------------------------------------- sparklines

WIDTH: Final = 180
HEIGHT: Final = 30
PAD: Final = 2


def number(value: float) -> str:
    """A short label: whole numbers with thousands separators, else three significant digits."""
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.3g}"


def sparkline(
    points: Sequence[Point],
    *,
    start_ms: int,
    end_ms: int,
    interval_ms: int,
    label: str,
    unit: str = "",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """An inline SVG line of `points` over [start_ms, end_ms] with min / max / now labels.

    Pure; every text is escaped; no script, no style element (the console's CSP). A None value,
    or two samples further apart than 1.5 intervals, breaks the line (a gap); a lone sample is
    a dot; a flat series is a line at mid-height."""
    suffix = f" {unit}" if unit else ""
    shown = [(at, v) for at, v in points if start_ms <= at <= end_ms]
    values = [v for _, v in shown if v is not None]
    title = escape(label)
    head = (
        f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{title}"><title>{title}</title>'
    )
    if not values:
        return (
            f'{head}<text x="0" y="{height // 2 + 4}" font-size="10" fill="#888">no samples yet</text></svg>'
            '<span class="spark-labels muted">—</span>'
        )
    low, high = min(values), max(values)
    span_t = max(end_ms - start_ms, 1)

    def x(at: int) -> float:
        return round(PAD + (at - start_ms) / span_t * (width - 2 * PAD), 1)

    def y(v: float) -> float:
        if high == low:
            return height / 2
        return round(height - PAD - (v - low) / (high - low) * (height - 2 * PAD), 1)

    segments: list[list[tuple[float, float]]] = []
    previous: int | None = None
    for at, v in shown:
        if v is None:
            previous = None
            continue
        if previous is None or at - previous > interval_ms * 1.5:
            segments.append([])
        segments[-1].append((x(at), y(v)))
        previous = at
    body = []
    for seg in segments:
        if len(seg) == 1:
            body.append(f'<circle cx="{seg[0][0]}" cy="{seg[0][1]}" r="1.5" fill="#2563eb"/>')
        else:
            path = " ".join(f"{px},{py}" for px, py in seg)
            body.append(f'<polyline points="{path}" fill="none" stroke="#2563eb" stroke-width="1.2"/>')
    now_value = shown[-1][1]
    now_text = "—" if now_value is None else escape(number(now_value) + suffix)
    labels = (
        f'<span class="spark-labels muted">min {escape(number(low) + suffix)} · '
        f"max {escape(number(high) + suffix)} · now {now_text}</span>"
    )
    return head + "".join(body) + "</svg>" + labels


def keyed_sparklines(trends: Trends, keyed: KeyedTrends) -> dict[str, dict[str, str]]:
    """Every key's sparklines over the trends' window: key -> series name -> SVG."""
    start, end = trends.window()
    return {
        key: {
            name: sparkline(
                ring.points(),
                start_ms=start,
                end_ms=end,
                interval_ms=trends.interval_ms,
                label=f"{key}: {keyed.names[name][0]}",
                unit=keyed.names[name][1],
            )
            for name, ring in rings.items()
        }
        for key, rings in keyed.keys.items()
    }


def sparklines(trends: Trends) -> dict[str, str]:
    """Every series' sparkline over the trends' window, by series name."""
    start, end = trends.window()
    return {
        name: sparkline(
            ring.points(),
            start_ms=start,
            end_ms=end,
            interval_ms=trends.interval_ms,
            label=SERIES[name][0],
            unit=SERIES[name][1],
        )
        for name, ring in trends.series.items()
    }
