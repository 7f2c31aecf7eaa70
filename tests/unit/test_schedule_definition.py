"""The schedule definition: every field validated, named when at fault; next fire times for cron
(across daylight-saving changes) and `every`, within startAt/endAt; deterministic jitter."""

from __future__ import annotations

from typing import Any

import pytest

from foliot.core.schedule.definition import document_fire_rate, jitter_of, load_schedule, parse_schedule
from foliot.core.workflow.duration import format_timestamp, parse_timestamp
from foliot.core.workflow.jsonconv import ValidationError


def ms(text: str) -> int:
    return parse_timestamp(text)


def ts(value: int | None) -> str | None:
    return format_timestamp(value)


def compile_(**fields: Any) -> Any:
    return parse_schedule({"workflow": "wf", **fields})[0]


def fires(schedule: Any, after: str, n: int) -> list[str | None]:
    out: list[str | None] = []
    at: int | None = ms(after)
    for _ in range(n):
        assert at is not None
        at = schedule.next_after(at)
        if at is None:
            break
        out.append(ts(at))
    return out


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workflow": "wf"}, "cron"),
        ({"workflow": "wf", "cron": "* * * * *", "every": "1m"}, "every"),
        ({"workflow": "wf", "cron": "61 * * * *"}, "cron"),
        ({"workflow": "wf", "cron": "* * * *"}, "cron"),
        ({"workflow": "wf", "cron": "0 * * * * *"}, "cron"),
        ({"workflow": "wf", "cron": "@yearly"}, "cron"),
        ({"workflow": "wf", "cron": "x y z a b"}, "cron"),
        ({"workflow": "wf", "cron": 5}, "cron"),
        ({"workflow": "wf", "every": "500ms"}, "every"),
        ({"workflow": "wf", "every": "soon"}, "every"),
        ({"workflow": "wf", "every": "1m", "timezone": "Mars/Olympus"}, "timezone"),
        ({"workflow": "wf", "every": "1m", "timezone": "Europe/Berlin"}, "timezone"),
        ({"workflow": "wf", "every": "1m", "timezone": "../../etc/passwd"}, "timezone"),
        ({"workflow": "wf", "every": "1m", "overlap": "queue"}, "overlap"),
        ({"workflow": "wf", "every": "1m", "catchupWindow": "0s"}, "catchupWindow"),
        ({"workflow": "wf", "every": "1m", "jitter": "1m"}, "jitter"),
        ({"workflow": "wf", "cron": "@daily", "jitter": "2h"}, "jitter"),
        ({"workflow": "wf", "every": "1m", "startAt": "tomorrow"}, "startAt"),
        (
            {
                "workflow": "wf",
                "every": "1m",
                "startAt": "2026-01-02T00:00:00Z",
                "endAt": "2026-01-01T00:00:00Z",
            },
            "endAt",
        ),
        ({"workflow": "wf", "every": "1m", "paused": "yes"}, "paused"),
        ({"workflow": "wf", "every": "1m", "version": 0}, "version"),
        ({"workflow": "wf", "every": "1m", "version": "1"}, "version"),
        ({"workflow": "no spaces", "every": "1m"}, "workflow"),
        ({"every": "1m"}, "workflow"),
        ({"workflow": "wf", "every": "1m", "color": "blue"}, "color"),
    ],
)
def test_bad_input_names_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_schedule(body)
    assert info.value.field == field, info.value


def test_defaults_and_document_round_trip() -> None:
    schedule, paused = parse_schedule(
        {"workflow": "wf", "cron": "@hourly", "input": {"a": 1}, "paused": True}
    )
    assert paused is True
    assert schedule.cron == "0 * * * *"
    assert schedule.overlap == "skip" and schedule.timezone == "UTC"
    assert schedule.catchup_window_ms == 60_000 and schedule.jitter_ms == 0
    assert "paused" not in schedule.document
    assert load_schedule(schedule.document) == schedule


@pytest.mark.parametrize(
    ("alias", "after", "expected"),
    [
        ("@hourly", "2026-03-04T10:20:00Z", ["2026-03-04T11:00:00.000Z", "2026-03-04T12:00:00.000Z"]),
        ("@daily", "2026-03-04T10:20:00Z", ["2026-03-05T00:00:00.000Z", "2026-03-06T00:00:00.000Z"]),
        ("@weekly", "2026-03-04T10:20:00Z", ["2026-03-08T00:00:00.000Z", "2026-03-15T00:00:00.000Z"]),
        ("@monthly", "2026-03-04T10:20:00Z", ["2026-04-01T00:00:00.000Z", "2026-05-01T00:00:00.000Z"]),
    ],
)
def test_aliases(alias: str, after: str, expected: list[str]) -> None:
    assert fires(compile_(cron=alias), after, 2) == expected


def test_next_is_strictly_after() -> None:
    schedule = compile_(cron="*/15 * * * *")
    assert fires(schedule, "2026-01-01T00:15:00Z", 2) == [
        "2026-01-01T00:30:00.000Z",
        "2026-01-01T00:45:00.000Z",
    ]
    assert fires(schedule, "2026-01-01T00:14:59.999Z", 1) == ["2026-01-01T00:15:00.000Z"]


def test_every_is_anchored_to_the_epoch_or_start_at() -> None:
    assert fires(compile_(every="1h"), "2026-01-01T10:20:00Z", 2) == [
        "2026-01-01T11:00:00.000Z",
        "2026-01-01T12:00:00.000Z",
    ]
    anchored = compile_(every="1h", startAt="2026-01-01T10:07:00Z")
    assert fires(anchored, "2026-01-01T00:00:00Z", 3) == [
        "2026-01-01T10:07:00.000Z",
        "2026-01-01T11:07:00.000Z",
        "2026-01-01T12:07:00.000Z",
    ]
    # `every` counts elapsed time, across a DST change too: a zone is refused (it would change
    # nothing), and one stored before that was refused loads as UTC.
    with pytest.raises(ValidationError) as info:
        compile_(every="1h", timezone="America/New_York")
    assert info.value.field == "timezone"
    stored = {**compile_(every="1h").document, "timezone": "America/New_York"}
    ny = load_schedule(stored)
    assert ny.timezone == "UTC"
    assert fires(ny, "2026-03-08T06:30:00Z", 3) == [
        "2026-03-08T07:00:00.000Z",
        "2026-03-08T08:00:00.000Z",
        "2026-03-08T09:00:00.000Z",
    ]


def test_start_and_end_bound_the_fires() -> None:
    schedule = compile_(cron="0 * * * *", startAt="2026-01-01T02:30:00Z", endAt="2026-01-01T04:00:00Z")
    assert fires(schedule, "2026-01-01T00:00:00Z", 5) == [
        "2026-01-01T03:00:00.000Z",
        "2026-01-01T04:00:00.000Z",
    ]
    assert schedule.next_after(ms("2026-01-01T04:00:00Z")) is None


def test_cron_in_a_zone() -> None:
    berlin = compile_(cron="0 9 * * 1-5", timezone="Europe/Berlin")
    # Friday 2026-01-02 09:00 CET = 08:00Z; then Monday.
    assert fires(berlin, "2026-01-02T00:00:00Z", 2) == [
        "2026-01-02T08:00:00.000Z",
        "2026-01-05T08:00:00.000Z",
    ]


def test_new_york_spring_forward() -> None:
    """2026-03-08: 02:00 EST jumps to 03:00 EDT in America/New_York."""
    fixed = compile_(cron="30 2 * * *", timezone="America/New_York")
    # 02:30 does not exist that day: it fires at the first valid minute after the gap (03:00 EDT).
    assert fires(fixed, "2026-03-07T12:00:00Z", 3) == [
        "2026-03-08T07:00:00.000Z",  # 03:00 EDT
        "2026-03-09T06:30:00.000Z",  # 02:30 EDT
        "2026-03-10T06:30:00.000Z",
    ]
    hourly = compile_(cron="0 * * * *", timezone="America/New_York")
    # A wildcard hour follows elapsed time: 01:00 EST, then 03:00 EDT (no 02:00 that day).
    assert fires(hourly, "2026-03-08T05:30:00Z", 3) == [
        "2026-03-08T06:00:00.000Z",
        "2026-03-08T07:00:00.000Z",
        "2026-03-08T08:00:00.000Z",
    ]


def test_new_york_fall_back() -> None:
    """2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:00-01:59 happen twice."""
    fixed = compile_(cron="30 1 * * *", timezone="America/New_York")
    # A fixed time fires once, at its first occurrence (EDT).
    assert fires(fixed, "2026-10-31T12:00:00Z", 2) == [
        "2026-11-01T05:30:00.000Z",  # 01:30 EDT
        "2026-11-02T06:30:00.000Z",  # 01:30 EST
    ]
    hourly = compile_(cron="30 * * * *", timezone="America/New_York")
    # A wildcard hour fires in both 01:30s.
    assert fires(hourly, "2026-11-01T04:00:00Z", 3) == [
        "2026-11-01T04:30:00.000Z",  # 00:30 EDT
        "2026-11-01T05:30:00.000Z",  # 01:30 EDT
        "2026-11-01T06:30:00.000Z",  # 01:30 EST
    ]


def test_berlin_changes() -> None:
    """Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET."""
    fixed = compile_(cron="30 2 * * *", timezone="Europe/Berlin")
    assert fires(fixed, "2026-03-28T12:00:00Z", 2) == [
        "2026-03-29T01:00:00.000Z",  # 03:00 CEST (02:30 skipped)
        "2026-03-30T00:30:00.000Z",  # 02:30 CEST
    ]
    assert fires(fixed, "2026-10-24T12:00:00Z", 2) == [
        "2026-10-25T00:30:00.000Z",  # 02:30 CEST, the first of the two
        "2026-10-26T01:30:00.000Z",  # 02:30 CET
    ]
    daily = compile_(cron="0 12 * * *", timezone="Europe/Berlin")
    # Noon local: 11:00Z in winter, 10:00Z in summer.
    assert fires(daily, "2026-03-28T00:00:00Z", 2) == ["2026-03-28T11:00:00.000Z", "2026-03-29T10:00:00.000Z"]


def test_times_and_count_between() -> None:
    schedule = compile_(every="1m")
    start, end = ms("2026-01-01T00:00:00Z"), ms("2026-01-01T01:00:00Z")
    assert len(schedule.times(start, end, 1000)) == 60
    assert schedule.count_between(start, end, 10) == (60, end)  # arithmetic: no cap
    cron = compile_(cron="* * * * *")
    assert cron.count_between(start, end, 1000) == (60, end)
    assert cron.count_between(start, end, 10) == (10, start + 10 * 60_000)
    assert cron.count_between(end, start, 10) == (0, end)


def test_jitter_is_deterministic_and_bounded() -> None:
    values = {jitter_of("app", "nightly", t * 60_000, 30_000) for t in range(500)}
    assert all(0 <= v < 30_000 for v in values) and len(values) > 100
    assert jitter_of("app", "nightly", 60_000, 30_000) == jitter_of("app", "nightly", 60_000, 30_000)
    assert jitter_of("app", "nightly", 60_000, 0) == 0


def test_the_ends_of_time_end_the_fires() -> None:
    late = compile_(every="3650d", startAt="9999-12-31T00:00:00Z")
    assert late.next_after(0) == ms("9999-12-31T00:00:00Z")
    assert late.next_after(ms("9999-12-31T00:00:00Z")) is None
    cron = compile_(cron="@monthly", startAt="9999-12-02T00:00:00Z")
    assert cron.next_after(0) is None
    assert compile_(cron="@daily").next_after(ms("0001-01-01T00:00:00Z") - 1) is None


@pytest.mark.parametrize(
    ("fields", "rate"),
    [
        ({"every": "1s"}, 1.0),
        ({"every": "1m"}, 1 / 60),
        ({"cron": "* * * * *"}, 1 / 60),
        ({"cron": "*/5 * * * *"}, 1 / 300),
        ({"cron": "0,59 * * * *"}, 1 / 60),  # 00:59 then 01:00
        ({"cron": "5,10 1,2 * * *"}, 1 / 300),
        ({"cron": "0 */2 * * *"}, 1 / 7_200),
        ({"cron": "0 22,1 * * *"}, 1 / 10_800),  # 22:00 then 01:00
        ({"cron": "@daily"}, 1 / 86_400),
        ({"cron": "0 0 * 2 1#5"}, 1 / 86_400),  # its day fields only make it rarer
    ],
)
def test_fire_rate_is_the_most_fires_per_second(fields: dict[str, Any], rate: float) -> None:
    schedule = compile_(**fields)
    assert schedule.fire_rate() == pytest.approx(rate)
    assert document_fire_rate(schedule.document) == pytest.approx(rate)  # what the quota sums
