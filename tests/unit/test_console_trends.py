"""The console's trends, pure: the ring buffer (bounded, ordered, gaps), the interval quantile,
and the sparkline renderer (empty, one point, flat, gaps, escaping)."""

from __future__ import annotations

import math
import re

import pytest

from foliot.observe.trends import (
    SERIES,
    Ring,
    Trends,
    interval_quantile,
    number,
    quantile,
    sparkline,
)


def test_ring_keeps_the_last_samples_oldest_first_and_never_grows() -> None:
    ring = Ring(3)
    assert ring.points() == [] and len(ring) == 0
    ring.add(10, 1)
    ring.add(20, 2)
    assert ring.points() == [(10, 1.0), (20, 2.0)]
    for at in range(30, 100, 10):
        ring.add(at, at / 10)
        assert len(ring) <= 3
    assert ring.points() == [(70, 7.0), (80, 8.0), (90, 9.0)]
    assert len(ring._at) == 3 and len(ring._value) == 3  # allocated once


def test_ring_gaps_are_none_and_a_ring_holds_at_least_one() -> None:
    ring = Ring(2)
    ring.add(1, None)
    ring.add(2, math.nan)
    ring.add(3, 0)
    assert ring.points() == [(2, None), (3, 0.0)]
    with pytest.raises(ValueError):
        Ring(0)


def test_trends_record_every_series_and_gap_the_missing_ones() -> None:
    trends = Trends(10_000, 4)
    assert set(trends.series) == set(SERIES)
    trends.record(1_000, {"actors.live": 5})
    trends.record(11_000, {"actors.live": 6, "queues.backlog": 2})
    assert trends.series["actors.live"].points() == [(1_000, 5.0), (11_000, 6.0)]
    assert trends.series["queues.backlog"].points() == [(1_000, None), (11_000, 2.0)]
    assert trends.window() == (11_000 - 30_000, 11_000)
    body = trends.as_json()
    assert body["intervalMs"] == 10_000 and body["samples"] == 4
    series = body["series"]
    assert isinstance(series, dict)
    assert series["actors.live"]["points"] == [[1_000, 5.0], [11_000, 6.0]]


def test_quantiles_over_buckets_and_over_an_interval() -> None:
    assert quantile([], 0, 0.5) is None
    buckets = [(0.1, 1.0), (1.0, 9.0), (math.inf, 10.0)]
    assert quantile(buckets, 10, 0.5) == 1.0
    assert quantile(buckets, 10, 0.1) == 0.1
    assert quantile(buckets, 10, 0.99) == 1.0  # in +Inf: the last finite bound
    before = {0.1: 1.0, 1.0: 1.0, math.inf: 1.0}
    now = {0.1: 1.0, 1.0: 5.0, math.inf: 5.0}
    assert interval_quantile(now, before, 0.5) == 1.0  # the 4 new ones were all in (0.1, 1]
    assert interval_quantile(now, now, 0.5) is None  # nothing in the interval: a gap


def spark(points: list[tuple[int, float | None]], label: str = "x", unit: str = "") -> str:
    return sparkline(points, start_ms=0, end_ms=100, interval_ms=10, label=label, unit=unit)


def test_sparkline_empty_shows_no_samples() -> None:
    svg = spark([])
    assert svg.startswith("<svg") and "no samples yet" in svg
    assert "<polyline" not in svg and "<circle" not in svg
    assert spark([(50, None)]).count("no samples yet") == 1


def test_sparkline_one_point_is_a_dot_with_labels() -> None:
    svg = spark([(100, 7)], unit="ms")
    assert svg.count("<circle") == 1 and "<polyline" not in svg
    assert "min 7 ms · max 7 ms · now 7 ms" in svg


def test_sparkline_flat_series_is_a_line_at_mid_height() -> None:
    svg = spark([(t, 3) for t in range(0, 101, 10)])
    found = re.search(r'<polyline points="([^"]+)"', svg)
    assert found is not None
    ys = {float(p.split(",")[1]) for p in found.group(1).split()}
    assert ys == {15.0}
    assert "min 3 · max 3 · now 3" in svg


def test_sparkline_scales_and_breaks_at_gaps() -> None:
    points: list[tuple[int, float | None]] = [
        (0, 0),
        (10, 10),
        (20, None),
        (30, 5),
        (40, 6),
        (90, 2),
        (100, 1),
    ]
    svg = spark(points)
    assert svg.count("<polyline") == 3  # broken by the None and by the 50 ms hole
    assert "min 0 · max 10 · now 1" in svg
    first = re.search(r'<polyline points="([^"]+)"', svg)
    assert first is not None and first.group(1) == "2.0,28.0 19.6,2.0"  # low at the bottom
    assert "now —" in spark([(0, 1.0), (100, None)])
    assert number(1234567) == "1,234,567" and number(0.123456) == "0.123"


def test_sparkline_escapes_labels_and_carries_no_script() -> None:
    svg = spark([(0, 1), (10, 2)], label='<script>alert("x")</script>', unit="<b>")
    assert "<script" not in svg and "<b>" not in svg
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in svg
    assert "&lt;b&gt;" in svg
    assert "style=" not in svg and not re.search(r"\son\w+=", svg)  # no handlers, no inline style


def test_keyed_trends_are_bounded_and_fill_quiet_keys_with_zero() -> None:
    from foliot.observe.trends import APP_SERIES, OTHER, KeyedTrends

    keyed = KeyedTrends(APP_SERIES, capacity=3, max_keys=2)
    keyed.record(10, {"b": {"started": 1}, "a": {"started": 2, "failed": 1}})
    assert list(keyed.keys) == ["a", "b"]
    keyed.record(20, {"c": {"started": 4}, "d": {"started": 1}, "a": {"completed": 3}})
    assert list(keyed.keys) == ["a", "b", OTHER]  # c and d summed under OTHER
    assert keyed.keys[OTHER]["started"].points() == [(20, 5.0)]
    assert keyed.keys["a"]["started"].points() == [(10, 2.0), (20, 0.0)]  # quiet: zero, no gap
    assert keyed.keys["a"]["completed"].points() == [(10, 0.0), (20, 3.0)]
    assert keyed.keys["b"]["started"].points() == [(10, 1.0), (20, 0.0)]
    for at in range(30, 200, 10):
        keyed.record(at, {f"k{at}": {"started": 1}})
    assert len(keyed.keys) == 3  # never more than max_keys + OTHER
    assert all(len(ring) <= 3 for rings in keyed.keys.values() for ring in rings.values())
    body = keyed.as_json()
    assert set(body) == {"a", "b", OTHER}
    assert body[OTHER]["started"] == {
        "label": "runs started / interval",
        "unit": "",
        "points": [[170, 1.0], [180, 1.0], [190, 1.0]],
    }  # type: ignore[index]


def test_run_events_are_tallied_per_app() -> None:
    from foliot.core.workflow.model import Event
    from foliot.observe.metrics import tally_run_events
    from foliot.storage.base import UnitOfWork

    from ..storage.test_contract import make_run

    tally: dict[str, list[int]] = {}
    run = make_run("r1")
    events = ("run_started", "task_completed", "run_completed", "run_failed", "run_timed_out", "run_stuck")
    tally_run_events(tally, UnitOfWork(run, None, tuple(Event(i, 0, 1, t) for i, t in enumerate(events))))
    tally_run_events(tally, UnitOfWork(run, 1, (Event(9, 0, 1, "signal_received"),)))
    assert tally == {run.app: [1, 1, 2]}


def test_keyed_sparklines_escape_and_label_each_key() -> None:
    from foliot.observe.trends import keyed_sparklines

    trends = Trends(10_000, 4)
    trends.record(1_000, {})
    trends.queues.record(1_000, {"<script>/q": {"backlog": 3, "pollers": 1}})
    svgs = keyed_sparklines(trends, trends.queues)
    assert set(svgs) == {"<script>/q"} and set(svgs["<script>/q"]) == {"backlog", "pollers"}
    assert (
        "<script>" not in svgs["<script>/q"]["backlog"]
        and "&lt;script&gt;/q: backlog" in svgs["<script>/q"]["backlog"]
    )
